/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * failover.c - what losing a broker node costs the pool, measured.
 *
 * Starts N mosquitto nodes on loopback (anonymous), a device (mqp-responder) on each, and one
 * pool over the list. Requests go out on a fixed schedule (open loop: a request is never held
 * back because an earlier one is slow, so a stall shows in the latencies) for --seconds; at 40 %
 * of the run node 1 is SIGKILLed, at 70 % it is started again on its port (its device connects
 * again by itself). Printed: requests failed and why, against those in flight on the lost node at
 * the kill; p50/p99/max of the requests scheduled before the loss and in the 5 s after it; how
 * long after the kill the last "connection lost" came; how long after the restart the node
 * carried a ready connection again. Then 2 s of commands nobody is subscribed to: how fast the
 * broker's "no matching subscribers" comes back as MQP_ENORESPONDER. --rounds N runs it all N
 * times on fresh nodes and prints the medians. Numbers, not a gate.
 *
 * --fault stop: node 1 is SIGSTOPped instead (a broker that hangs: its kernel keeps the
 * connections and acknowledges, nothing answers, nothing is reset) and SIGCONTed at 70 %; also
 * printed: how long after the stop the pool called it unresponsive (the node suspect), the
 * requests that failed against those in flight on it at the stop plus those sent to it before
 * it was noticed, how many failed that were sent after, and how long after SIGCONT it was
 * trusted again. --fault both interleaves the two, round by round, and prints each one's medians.
 * --fault slow touches no node: with --delay near the 5 s request timeout (4500ms: 0.9x) it counts
 * the connections wrongly called unresponsive - a slow device must never look like a silent
 * broker.
 *
 * Usage: failover --responder PATH [--rate N] [--seconds S] [--nodes N] [--delay D] [--rounds N]
 *                 [--fault kill|stop|both|slow]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_hist.h"
#include "mqttpool.h"
#include "tb_broker.h"

extern char **environ;

enum { NODES_MAX = 8 };

struct call {
	uint64_t intended, done;
	atomic_int result; /* -1 until it completes */
};

static void on_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)reply;
	struct call *c = userdata;
	c->done = mqc_now_ns();
	atomic_store(&c->result, result);
}

/* The device on a node: mqp-responder, waited for until it says RESPONDER_READY. */
static pid_t device_start(const char *responder, const char *url, const char *delay)
{
	int fds[2];
	if (pipe(fds) != 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
	char prog[512], broker[] = "--broker", where[128], filter[] = "--filter", topic[] = "fo/cmd",
	                hold[] = "--delay", d[32];
	snprintf(prog, sizeof prog, "%s", responder);
	snprintf(where, sizeof where, "%s", url);
	snprintf(d, sizeof d, "%s", delay);
	char *argv[] = { prog, broker, where, filter, topic, hold, d, NULL };
	pid_t pid = -1;
	int rc = posix_spawn(&pid, responder, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (rc != 0) {
		close(fds[0]);
		return -1;
	}
	FILE *out = fdopen(fds[0], "r");
	char line[256];
	bool ready = false;
	while (!ready && out && fgets(line, sizeof line, out))
		ready = strncmp(line, "RESPONDER_READY", 15) == 0;
	if (out)
		fclose(out); /* its later lines go to a closed pipe: it ignores SIGPIPE */
	if (!ready) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

static void sleep_until(uint64_t t)
{
	uint64_t now = mqc_now_ns();
	if (t > now)
		nanosleep(&(struct timespec) { .tv_sec = (time_t)((t - now) / MQC_NS_PER_S),
		              .tv_nsec = (long)((t - now) % MQC_NS_PER_S) },
		    NULL);
}

static void print_window(const char *name, const struct mqc_hist *h)
{
	printf("  %-24s %8llu requests  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", name,
	    (unsigned long long)h->count, (double)mqc_hist_percentile(h, 50) / 1e6,
	    (double)mqc_hist_percentile(h, 99) / 1e6, h->count ? (double)h->max / 1e6 : 0.0);
}

/* What one round measured. */
struct round {
	unsigned lost, timeouts, nobody, other, inflight_lost;
	double p99_before_ms, p99_after_ms, max_after_ms, last_lost_ms, back_s;
	double nr_p50_ms, nr_p99_ms;
	size_t nr_count;
	/* --fault stop */
	double detect_ms, failed, bound, late;
};

struct config {
	const char *responder, *delay;
	double rate, seconds;
	int nnodes;
};

enum fault { FAULT_KILL, FAULT_STOP, FAULT_SLOW };

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* A paced run of n requests to topic, one every period from t0; on_tick(i, now) before each. */
static void paced(mqp_pool *pool, const char *topic, struct call *calls, size_t n, uint64_t t0,
    uint64_t period, void (*on_tick)(void *ctx, uint64_t now), void *ctx)
{
	for (size_t i = 0; i < n; i++) {
		calls[i].intended = t0 + i * period;
		atomic_init(&calls[i].result, -1);
		sleep_until(calls[i].intended);
		if (on_tick)
			on_tick(ctx, mqc_now_ns());
		if (mqp_pool_request_async(pool, topic, "x", 1, 1, 5000, on_reply, &calls[i], NULL)
		    != MQP_OK)
			atomic_store(&calls[i].result, MQP_ENOMEM);
	}
}

/* Until every call has completed (each has a 5 s timeout: 10 s at most). */
static void wait_done(struct call *calls, size_t n)
{
	uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S;
	for (size_t i = 0; i < n && mqc_now_ns() < until; i++)
		while (atomic_load(&calls[i].result) < 0 && mqc_now_ns() < until)
			nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
}

/* The node loss and return, on the schedule of one round. */
struct loss {
	mqp_pool *pool;
	struct tb_broker *victim;
	enum fault fault;
	uint64_t kill_at, back_at, killed, restarted, returned;
	unsigned inflight;
	uint64_t detected, requests_at_kill, requests_at_detection; /* FAULT_STOP */
};

static void loss_tick(void *ctx, uint64_t now)
{
	struct loss *l = ctx;
	struct mqp_node_stats s;
	if (l->fault == FAULT_SLOW)
		return; /* nothing happens to any node: only the devices are slow */
	if (!l->killed && now >= l->kill_at) {
		mqp_pool_node_stats(l->pool, 1, &s, sizeof s);
		l->inflight = s.inflight;
		l->requests_at_kill = s.requests;
		uint64_t t = mqc_now_ns(); /* before: what the kill causes may be stamped first */
		tb_broker_signal(l->victim, l->fault == FAULT_STOP ? SIGSTOP : SIGKILL);
		l->killed = t;
	}
	if (l->killed && !l->detected && l->fault == FAULT_STOP
	    && mqp_pool_node_stats(l->pool, 1, &s, sizeof s) > 1 && s.suspect) {
		l->detected = mqc_now_ns();
		l->requests_at_detection = s.requests;
	}
	if (l->killed && !l->restarted && now >= l->back_at) {
		char err[512];
		if (l->fault == FAULT_STOP)
			tb_broker_signal(l->victim, SIGCONT);
		else if (tb_broker_restart(l->victim, err, sizeof err) != 0)
			fprintf(stderr, "failover: restart: %s\n", err);
		l->restarted = mqc_now_ns();
	}
	if (l->restarted && !l->returned && mqp_pool_node_stats(l->pool, 1, &s, sizeof s) > 1 && s.ready
	    && !s.suspect)
		l->returned = mqc_now_ns();
}

static int run_round(const struct config *cfg, enum fault fault, struct round *out)
{
	struct tb_broker *node[NODES_MAX] = { 0 };
	pid_t dev[NODES_MAX] = { 0 };
	char list[512] = "mqtt://", err[512];
	if (cfg->nnodes < 2 || cfg->nnodes > NODES_MAX)
		return -1; /* main checked: node 1 is the one that fails */
	struct tb_options to = { .no_tls = true,
		.no_probe = true,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	for (int i = 0; i < cfg->nnodes; i++) {
		if (tb_broker_start(&to, &node[i], err, sizeof err) != 0) {
			fprintf(stderr, "failover: node %d: %s\n", i, err);
			return -1;
		}
		const struct tb_info *info = tb_broker_info(node[i]);
		if ((dev[i] = device_start(cfg->responder, info->mqtt_url, cfg->delay)) < 0) {
			fprintf(stderr, "failover: the device on node %d did not start\n", i);
			return -1;
		}
		size_t at = strlen(list);
		snprintf(list + at, sizeof list - at, "%s127.0.0.1:%d", i ? "," : "", info->port);
	}
	struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
	po.min_size = po.max_size = (unsigned)(2 * cfg->nnodes);
	po.eviction_interval_ms = 1000;
	mqp_pool *pool;
	if (mqp_pool_new(list, &po, &pool, err, sizeof err) != MQP_OK) {
		fprintf(stderr, "failover: %s\n", err);
		return -1;
	}
	struct mqp_pool_stats st;
	uint64_t warm = mqc_now_ns() + 5 * MQC_NS_PER_S;
	do {
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		mqp_pool_stats(pool, &st, sizeof st);
	} while (st.ready < po.min_size && mqc_now_ns() < warm);

	size_t n = (size_t)(cfg->rate * cfg->seconds), nr = (size_t)(cfg->rate * 2);
	struct call *calls = calloc(n + nr, sizeof *calls);
	struct mqc_hist before = { 0 }, after = { 0 }, nobody = { 0 };
	if (!calls || mqc_hist_init(&before, 7) != 0 || mqc_hist_init(&after, 7) != 0
	    || mqc_hist_init(&nobody, 7) != 0) {
		fprintf(stderr, "failover: out of memory\n");
		free(calls);
		mqc_hist_free(&before);
		mqc_hist_free(&after);
		mqc_hist_free(&nobody);
		return -1;
	}
	uint64_t t0 = mqc_now_ns() + 100 * MQC_NS_PER_MS, period = (uint64_t)(1e9 / cfg->rate);
	struct loss l = { .pool = pool,
		.victim = node[1],
		.fault = fault,
		.kill_at = t0 + (uint64_t)(cfg->seconds * 0.4e9),
		.back_at = t0 + (uint64_t)(cfg->seconds * 0.7e9) };
	paced(pool, "fo/cmd", calls, n, t0, period, loss_tick, &l);
	while (!l.returned && l.restarted && mqc_now_ns() < l.restarted + 15 * MQC_NS_PER_S) {
		loss_tick(&l, mqc_now_ns());
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	}
	wait_done(calls, n);
	/* Nobody is subscribed to this topic on any node: each answer is the broker's 0x10. */
	paced(pool, "nobody-here/cmd", calls + n, nr, mqc_now_ns() + 100 * MQC_NS_PER_MS, period, NULL,
	    NULL);
	wait_done(calls + n, nr);

	*out = (struct round) { .inflight_lost = l.inflight };
	uint64_t last_lost = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = atomic_load(&calls[i].result);
		if (rc == MQP_OK) {
			uint64_t lat = calls[i].done - calls[i].intended;
			if (calls[i].intended >= t0 + MQC_NS_PER_S && calls[i].intended < l.killed)
				mqc_hist_record(&before, lat);
			else if (calls[i].intended >= l.killed
			    && calls[i].intended < l.killed + 5 * MQC_NS_PER_S)
				mqc_hist_record(&after, lat);
			continue;
		}
		out->lost += rc == MQP_ECONNLOST;
		out->timeouts += rc == MQP_ETIMEDOUT;
		out->nobody += rc == MQP_ENORESPONDER;
		out->other += rc != MQP_ECONNLOST && rc != MQP_ETIMEDOUT && rc != MQP_ENORESPONDER;
		out->failed++;
		out->late += l.detected && calls[i].intended > l.detected;
		if (rc == MQP_ECONNLOST && calls[i].done > last_lost)
			last_lost = calls[i].done;
	}
	unsigned nr_other = 0;
	for (size_t i = n; i < n + nr; i++)
		if (atomic_load(&calls[i].result) == MQP_ENORESPONDER)
			mqc_hist_record(&nobody, calls[i].done - calls[i].intended);
		else
			nr_other++;
	if (nr_other)
		fprintf(stderr, "failover: %u of the commands to nobody ended otherwise (first: %s)\n",
		    nr_other, mqp_strerror(atomic_load(&calls[n].result)));
	out->p99_before_ms = ms(mqc_hist_percentile(&before, 99));
	out->p99_after_ms = ms(mqc_hist_percentile(&after, 99));
	out->max_after_ms = after.count ? ms(after.max) : 0;
	out->last_lost_ms = last_lost ? ms(last_lost - l.killed) : 0;
	out->back_s = l.returned ? (double)(l.returned - l.restarted) / 1e9 : -1;
	out->nr_count = (size_t)nobody.count;
	out->nr_p50_ms = ms(mqc_hist_percentile(&nobody, 50));
	out->nr_p99_ms = ms(mqc_hist_percentile(&nobody, 99));
	out->detect_ms = l.detected ? ms(l.detected - l.killed) : -1;
	out->bound = (double)l.inflight + (double)(l.requests_at_detection - l.requests_at_kill);

	if (fault == FAULT_SLOW) {
		uint64_t unresponsive = 0;
		for (int i = 0; i < cfg->nnodes; i++) {
			struct mqp_node_stats ns;
			if (mqp_pool_node_stats(pool, (unsigned)i, &ns, sizeof ns) > (unsigned)i)
				unresponsive += ns.unresponsive;
		}
		out->failed = (double)unresponsive; /* the false positives */
		printf("failover: %d nodes, %.0f requests/s for %.0f s, QoS 1, every device answers "
		       "after %s of the 5 s timeout, no node touched: %llu connections called "
		       "unresponsive (false positives); failed: %u connection lost, %u timed out, %u "
		       "other\n",
		    cfg->nnodes, cfg->rate, cfg->seconds, cfg->delay, (unsigned long long)unresponsive,
		    out->lost, out->timeouts, out->other);
		goto done;
	}
	printf("failover: %d nodes, %.0f requests/s for %.0f s, QoS 1, devices answer after %s; "
	       "node 1 %s at %.1f s, %s at %.1f s\n",
	    cfg->nnodes, cfg->rate, cfg->seconds, cfg->delay,
	    fault == FAULT_STOP ? "SIGSTOPped" : "SIGKILLed", (double)(l.killed - t0) / 1e9,
	    fault == FAULT_STOP ? "SIGCONTed" : "started again", (double)(l.restarted - t0) / 1e9);
	if (fault == FAULT_STOP && l.detected)
		printf("  noticed unresponsive %.0f ms after the stop; %.0f failed (bound: %u in flight on "
		       "it + %llu sent to it before then), %.0f of them sent after\n",
		    out->detect_ms, out->failed, l.inflight,
		    (unsigned long long)(l.requests_at_detection - l.requests_at_kill), out->late);
	else if (fault == FAULT_STOP)
		printf("  NOT noticed: node 1 was never called unresponsive\n");
	printf("  failed: %u connection lost (in flight on node 1 at the kill: %u), %u timed out, "
	       "%u other\n",
	    out->lost, out->inflight_lost, out->timeouts, out->other);
	if (out->nobody)
		printf("  %u answered 'no responder' by node 1 back before its device had subscribed "
		       "again\n",
		    out->nobody);
	print_window("before the loss (1 s on)", &before);
	print_window("5 s after the loss", &after);
	if (last_lost)
		printf("  the last 'connection lost' came %.2f ms after the kill; no request waited for "
		       "the lost node's timeout\n",
		    out->last_lost_ms);
	if (l.returned)
		printf("  node 1 carried a ready connection again (trusted) %.2f s after its %s\n",
		    out->back_s, fault == FAULT_STOP ? "SIGCONT" : "restart");
	else
		printf("  node 1 carried no trusted connection within 15 s of its %s\n",
		    fault == FAULT_STOP ? "SIGCONT" : "restart");
	print_window("no responder (0x10)", &nobody);
done:
	mqp_pool_destroy(pool);
	for (int i = 0; i < cfg->nnodes; i++) {
		kill(dev[i], SIGTERM);
		waitpid(dev[i], NULL, 0);
		tb_broker_stop(node[i]);
	}
	mqc_hist_free(&before);
	mqc_hist_free(&after);
	mqc_hist_free(&nobody);
	free(calls);
	return 0;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of the rounds' values of one field. */
static double median(const struct round *r, int n, size_t offset)
{
	double v[64];
	for (int i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&r[i] + offset, sizeof v[i]);
	qsort(v, (size_t)n, sizeof v[0], by_value);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	struct config cfg = { .delay = "2ms", .rate = 2000, .seconds = 12, .nnodes = 3 };
	int rounds = 1;
	const char *fault = "kill";
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "--responder") == 0 && v)
			cfg.responder = argv[++i];
		else if (strcmp(argv[i], "--rate") == 0 && v)
			cfg.rate = atof(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && v)
			cfg.seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--nodes") == 0 && v)
			cfg.nnodes = atoi(argv[++i]);
		else if (strcmp(argv[i], "--delay") == 0 && v)
			cfg.delay = argv[++i];
		else if (strcmp(argv[i], "--rounds") == 0 && v)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--fault") == 0 && v)
			fault = argv[++i];
		else {
			fprintf(stderr,
			    "usage: failover --responder PATH [--rate N (2000)] [--seconds S (12)] "
			    "[--nodes N (3)] [--delay D (2ms, each device's answer)] [--rounds N (1)] "
			    "[--fault kill|stop|both|slow (kill)]\n");
			return 2;
		}
	}
	if (!cfg.responder || cfg.rate < 1 || cfg.rate > 50000 || cfg.seconds < 8 || cfg.seconds > 600
	    || cfg.nnodes < 2 || cfg.nnodes > NODES_MAX || rounds < 1 || rounds > 64
	    || (strcmp(fault, "kill") != 0 && strcmp(fault, "stop") != 0 && strcmp(fault, "both") != 0
	        && strcmp(fault, "slow") != 0)) {
		fprintf(stderr,
		    "failover: --responder is required; --rate 1..50000, --seconds 8..600, "
		    "--nodes 2..8, --rounds 1..64, --fault kill, stop, both or slow\n");
		return 2;
	}
	bool both = strcmp(fault, "both") == 0;
	signal(SIGPIPE, SIG_IGN);
	struct round r[64], stopped[64];
	int nkill = 0, nstop = 0;
	for (int i = 0; i < (both ? 2 * rounds : rounds); i++) {
		enum fault f = both              ? (i % 2 ? FAULT_STOP : FAULT_KILL)
		    : strcmp(fault, "stop") == 0 ? FAULT_STOP
		    : strcmp(fault, "slow") == 0 ? FAULT_SLOW
		                                 : FAULT_KILL;
		if (rounds > 1 || both)
			printf("== round %d of %d\n", i + 1, both ? 2 * rounds : rounds);
		if (run_round(&cfg, f, f == FAULT_STOP ? &stopped[nstop++] : &r[nkill++]) != 0)
			return 1;
	}
	if (nstop > 1)
		printf("== medians of %d SIGSTOP rounds: noticed %.0f ms after the stop; %.0f failed "
		       "(bound %.0f), %.0f sent after it was noticed; p99 in the 5 s after %.2f ms (max "
		       "%.2f ms); trusted again %.2f s after SIGCONT\n",
		    nstop, median(stopped, nstop, offsetof(struct round, detect_ms)),
		    median(stopped, nstop, offsetof(struct round, failed)),
		    median(stopped, nstop, offsetof(struct round, bound)),
		    median(stopped, nstop, offsetof(struct round, late)),
		    median(stopped, nstop, offsetof(struct round, p99_after_ms)),
		    median(stopped, nstop, offsetof(struct round, max_after_ms)),
		    median(stopped, nstop, offsetof(struct round, back_s)));
	rounds = nkill;
	if (rounds > 1)
		printf("== medians of %d rounds: p99 before %.2f ms, in the 5 s after the loss %.2f ms "
		       "(max %.2f ms); the last 'connection lost' %.2f ms after the kill; the node back "
		       "%.2f s after its restart; no responder p50 %.3f ms, p99 %.3f ms\n",
		    rounds, median(r, rounds, offsetof(struct round, p99_before_ms)),
		    median(r, rounds, offsetof(struct round, p99_after_ms)),
		    median(r, rounds, offsetof(struct round, max_after_ms)),
		    median(r, rounds, offsetof(struct round, last_lost_ms)),
		    median(r, rounds, offsetof(struct round, back_s)),
		    median(r, rounds, offsetof(struct round, nr_p50_ms)),
		    median(r, rounds, offsetof(struct round, nr_p99_ms)));
	return 0;
}
