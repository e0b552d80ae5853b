/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * spread.c - `--processes N`: one connect or churn run spread over N worker processes.
 *
 * A process may open about 20,000 files here, and published runs of a million connections use
 * many. The parent checks the whole run first (descriptors per worker, local ports x source
 * addresses, TIME_WAIT, the broker's file limit), then runs this program again N times with
 * `--shard j/N --json` and one start time for all (MQBENCH_T0, CLOCK_MONOTONIC, which every
 * process of the machine shares), so the N schedules interleave into the one asked for. Each
 * worker's progress goes to stderr prefixed with its number; their results are merged by `mqbench
 * merge` (counts added, histograms bucket by bucket) and each worker's failures are named.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mqbench.h"
#include "mqc_clock.h"

struct worker {
	pid_t pid;
	int out, err; /* pipes: its JSON result, its progress */
	char *json;
	size_t len, cap;
	char line[1024];
	size_t linelen;
	int status;
	bool exited;
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int append(struct worker *w, const char *p, size_t n)
{
	if (w->len + n + 1 > w->cap) {
		size_t cap = (w->len + n + 1) * 2;
		char *grown = realloc(w->json, cap);
		if (!grown)
			return -1;
		w->json = grown;
		w->cap = cap;
	}
	memcpy(w->json + w->len, p, n);
	w->len += n;
	w->json[w->len] = '\0';
	return 0;
}

/* Its progress, a line at a time, prefixed with its number. */
static void relay(struct worker *w, unsigned j, const char *p, size_t n, bool flush)
{
	for (size_t i = 0; i < n || (flush && w->linelen); i++) {
		char c = '\n';
		if (i < n)
			c = p[i];
		if (c != '\n' && w->linelen < sizeof w->line - 1) {
			w->line[w->linelen++] = c;
			continue;
		}
		if (c != '\n')
			continue; /* an overlong line is cut */
		fprintf(stderr, "[worker %u] %.*s\n", j, (int)w->linelen, w->line);
		w->linelen = 0;
		if (i >= n)
			break;
	}
}

/* argv without --processes (both spellings), with --shard j/n and --json. */
static char **worker_args(int argc, char **argv, unsigned j, unsigned n, char *shard, size_t len)
{
	char **args = calloc((size_t)argc + 5, sizeof *args);
	if (!args)
		return NULL;
	int k = 0;
	args[k++] = "mqbench";
	args[k++] = argv[0]; /* the scenario */
	bool json = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--processes") == 0) {
			i++;
			continue;
		}
		if (strncmp(argv[i], "--processes=", 12) == 0)
			continue;
		json |= strcmp(argv[i], "--json") == 0;
		args[k++] = argv[i];
	}
	snprintf(shard, len, "%u/%u", j, n);
	args[k++] = "--shard";
	args[k++] = shard;
	if (!json)
		args[k++] = "--json";
	return args;
}

/* How long the whole run may take before the parent gives up on a worker. */
static uint64_t run_deadline(const struct bench_opts *o)
{
	double open_s
	    = o->scenario == SC_CHURN ? (double)o->duration_ns / 1e9 : (double)o->clients / o->connrate;
	return mqc_now_ns() + (uint64_t)(open_s * 1e9) + o->hold_ns + 2 * o->connect_timeout_ns
	    + 60 * MQC_NS_PER_S;
}

static void say_worker(unsigned j, const struct worker *w, const struct bench_opts *o)
{
	uint64_t first, count;
	bench_shard_range(o->clients, j, o->processes, &first, &count);
	cJSON *doc = w->json ? cJSON_Parse(w->json) : NULL;
	const cJSON *c = cJSON_GetObjectItem(doc, "counts");
	fprintf(stderr, "mqbench: worker %u (clients %llu-%llu, pid %d): ", j,
	    (unsigned long long)first, (unsigned long long)(first + count - 1), (int)w->pid);
	if (!c) {
		fprintf(stderr, "no result (%s %d)\n", WIFSIGNALED(w->status) ? "killed by signal" : "exit",
		    WIFSIGNALED(w->status) ? WTERMSIG(w->status) : WEXITSTATUS(w->status));
		cJSON_Delete(doc);
		return;
	}
	double failed = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "failed"));
	fprintf(stderr, "connected %.0f of %.0f, failed %.0f",
	    cJSON_GetNumberValue(cJSON_GetObjectItem(c, "connected")),
	    cJSON_GetNumberValue(cJSON_GetObjectItem(c, "scheduled")), failed);
	const cJSON *item;
	bool colon = false;
	cJSON_ArrayForEach(item, c)
	{
		static const char *const not_reasons[] = { "scheduled", "connected", "failed",
			"held_at_end", "started", "cycles", "late", NULL };
		bool reason = cJSON_IsNumber(item) && item->valuedouble > 0;
		for (int i = 0; reason && not_reasons[i]; i++)
			reason = strcmp(item->string, not_reasons[i]) != 0;
		if (reason) {
			fprintf(stderr, "%s %s %.0f", colon ? "," : ":", item->string, item->valuedouble);
			colon = true;
		}
	}
	fprintf(stderr, "%s\n", WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0 ? "" : " (exit 1)");
	cJSON_Delete(doc);
}

int bench_run_processes(const struct bench_opts *o, int argc, char **argv)
{
	unsigned n = o->processes, nsources = 0;
	if (o->sources && bench_parse_sources(o->sources, NULL, &nsources) != 0)
		return 2;
	bool churn = o->scenario == SC_CHURN;
	uint64_t connections = churn ? (uint64_t)o->concurrency * n : o->clients;
	uint64_t time_wait = churn ? bench_churn_time_wait(o->rate, o->duration_ns) : 0;
	if (bench_preflight(o, connections, time_wait, n, nsources) != 0)
		return 1;
	if (o->clients < n) {
		fprintf(stderr, "mqbench: --processes %u needs at least %u clients\n", n, n);
		return 2;
	}
	struct worker *w = calloc(n, sizeof *w);
	char dir[] = "/tmp/mqbench-processes-XXXXXX";
	if (!w || !mkdtemp(dir)) {
		fprintf(stderr, "mqbench: cannot set up the workers: %s\n", strerror(errno));
		free(w);
		return 1;
	}
	char t0[32];
	snprintf(t0, sizeof t0, "%llu", (unsigned long long)(mqc_now_ns() + 200 * MQC_NS_PER_MS));
	struct sigaction sa = { .sa_handler = on_signal }, old_int, old_term;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	unsigned started = 0;
	for (unsigned j = 0; j < n; j++) {
		int out[2], err[2];
		char shard[32];
		char **args = worker_args(argc, argv, j, n, shard, sizeof shard);
		if (!args || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
			fprintf(stderr, "mqbench: cannot start worker %u: %s\n", j, strerror(errno));
			free(args);
			break;
		}
		pid_t pid = fork();
		if (pid == 0) {
			dup2(out[1], STDOUT_FILENO);
			dup2(err[1], STDERR_FILENO);
			setenv("MQBENCH_T0", t0, 1);
			execv("/proc/self/exe", args);
			fprintf(stderr, "cannot run /proc/self/exe: %s\n", strerror(errno));
			_exit(127);
		}
		free(args);
		close(out[1]);
		close(err[1]);
		if (pid < 0) {
			fprintf(stderr, "mqbench: cannot start worker %u: %s\n", j, strerror(errno));
			close(out[0]);
			close(err[0]);
			break;
		}
		w[j] = (struct worker) { .pid = pid, .out = out[0], .err = err[0] };
		started++;
	}
	fprintf(stderr, "mqbench: %u worker processes, %u clients, %.0f/s in all\n", started,
	    o->clients, o->scenario == SC_CHURN ? o->rate : o->connrate);
	uint64_t deadline = run_deadline(o);
	bool killed = false, forwarded = false;
	for (;;) {
		struct pollfd p[128];
		unsigned who[128];
		int np = 0;
		for (unsigned j = 0; j < started; j++) {
			if (w[j].out >= 0)
				p[np] = (struct pollfd) { .fd = w[j].out, .events = POLLIN }, who[np++] = j;
			if (w[j].err >= 0)
				p[np] = (struct pollfd) { .fd = w[j].err, .events = POLLIN }, who[np++] = j;
		}
		if (np == 0)
			break;
		if (stop_signal && !forwarded) {
			for (unsigned j = 0; j < started; j++)
				kill(w[j].pid, SIGTERM); /* they report what they measured and exit */
			forwarded = true;
		}
		if (!killed && mqc_now_ns() > deadline) {
			fprintf(stderr, "mqbench: the workers ran past the run's deadline; stopping them\n");
			for (unsigned j = 0; j < started; j++)
				kill(w[j].pid, SIGKILL);
			killed = true;
		}
		if (poll(p, (nfds_t)np, 500) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < np; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			struct worker *x = &w[who[i]];
			char buf[8192];
			ssize_t got = read(p[i].fd, buf, sizeof buf);
			if (got > 0 && p[i].fd == x->out) {
				if (append(x, buf, (size_t)got) != 0)
					got = -1;
			} else if (got > 0) {
				relay(x, who[i], buf, (size_t)got, false);
			}
			if (got <= 0 && !(got < 0 && errno == EINTR)) {
				if (p[i].fd == x->err)
					relay(x, who[i], NULL, 0, true);
				close(p[i].fd);
				if (p[i].fd == x->out)
					x->out = -1;
				else
					x->err = -1;
			}
		}
	}
	int rc = started == n ? 0 : 1;
	for (unsigned j = 0; j < started; j++) {
		while (waitpid(w[j].pid, &w[j].status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(w[j].status) || WEXITSTATUS(w[j].status) != 0)
			rc = 1;
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	/* The merge reads files: one per worker that wrote a result. */
	char **margv = calloc(n + 3, sizeof *margv);
	int margc = 0;
	if (margv) {
		margv[margc++] = "merge";
		if (o->json)
			margv[margc++] = "--json";
	}
	for (unsigned j = 0; margv && j < started; j++) {
		char path[64];
		snprintf(path, sizeof path, "%s/worker-%u.json", dir, j);
		FILE *f = w[j].json ? fopen(path, "w") : NULL;
		if (f && fputs(w[j].json, f) >= 0 && fclose(f) == 0)
			margv[margc++] = strdup(path);
		else if (f)
			fclose(f);
	}
	fflush(stdout);
	if (!margv || margc == (o->json ? 2 : 1)) {
		fprintf(stderr, "mqbench: no worker wrote a result\n");
		rc = 1;
	} else if (bench_merge(margc, margv) != 0) {
		rc = 1;
	}
	for (unsigned j = 0; j < started; j++)
		say_worker(j, &w[j], o);
	for (int i = o->json ? 2 : 1; margv && i < margc; i++) {
		unlink(margv[i]);
		free(margv[i]);
	}
	rmdir(dir);
	free(margv);
	for (unsigned j = 0; j < n; j++)
		free(w[j].json);
	free(w);
	return rc;
}
