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
 * long after the kill the last request failed; how long after the restart the node carried a
 * ready connection again. Numbers, not a gate.
 *
 * Usage: failover --responder PATH [--rate N] [--seconds S] [--nodes N] [--delay D]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
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

int main(int argc, char **argv)
{
	const char *responder = NULL, *delay = "2ms";
	double rate = 2000, seconds = 12;
	int nnodes = 3;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "--responder") == 0 && v)
			responder = argv[++i];
		else if (strcmp(argv[i], "--rate") == 0 && v)
			rate = atof(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0 && v)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--nodes") == 0 && v)
			nnodes = atoi(argv[++i]);
		else if (strcmp(argv[i], "--delay") == 0 && v)
			delay = argv[++i];
		else {
			fprintf(stderr,
			    "usage: failover --responder PATH [--rate N (2000)] [--seconds S (12)] "
			    "[--nodes N (3)] [--delay D (2ms, each device's answer)]\n");
			return 2;
		}
	}
	if (!responder || rate < 1 || rate > 50000 || seconds < 8 || seconds > 600 || nnodes < 2
	    || nnodes > NODES_MAX) {
		fprintf(stderr,
		    "failover: --responder is required; --rate 1..50000, --seconds 8..600, "
		    "--nodes 2..8\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct tb_broker *node[NODES_MAX];
	pid_t dev[NODES_MAX];
	char list[512] = "mqtt://";
	struct tb_options to = { .no_tls = true,
		.no_probe = true,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	for (int i = 0; i < nnodes; i++) {
		char err[512];
		if (tb_broker_start(&to, &node[i], err, sizeof err) != 0) {
			fprintf(stderr, "failover: node %d: %s\n", i, err);
			return 1;
		}
		const struct tb_info *info = tb_broker_info(node[i]);
		if ((dev[i] = device_start(responder, info->mqtt_url, delay)) < 0) {
			fprintf(stderr, "failover: the device on node %d did not start\n", i);
			return 1;
		}
		size_t at = strlen(list);
		snprintf(list + at, sizeof list - at, "%s127.0.0.1:%d", i ? "," : "", info->port);
	}
	struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
	po.min_size = po.max_size = (unsigned)(2 * nnodes);
	po.eviction_interval_ms = 1000;
	mqp_pool *pool;
	char err[512];
	if (mqp_pool_new(list, &po, &pool, err, sizeof err) != MQP_OK) {
		fprintf(stderr, "failover: %s\n", err);
		return 1;
	}
	struct mqp_pool_stats st;
	uint64_t warm = mqc_now_ns() + 5 * MQC_NS_PER_S;
	do {
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		mqp_pool_stats(pool, &st, sizeof st);
	} while (st.ready < po.min_size && mqc_now_ns() < warm);

	size_t n = (size_t)(rate * seconds);
	struct call *calls = calloc(n, sizeof *calls);
	if (!calls)
		return 1;
	uint64_t t0 = mqc_now_ns() + 100 * MQC_NS_PER_MS, period = (uint64_t)(1e9 / rate);
	uint64_t kill_at = t0 + (uint64_t)(seconds * 0.4e9), back_at = t0 + (uint64_t)(seconds * 0.7e9);
	uint64_t killed = 0, restarted = 0, returned = 0;
	unsigned inflight_lost = 0;
	for (size_t i = 0; i < n; i++) {
		calls[i].intended = t0 + i * period;
		atomic_init(&calls[i].result, -1);
		sleep_until(calls[i].intended);
		uint64_t now = mqc_now_ns();
		if (!killed && now >= kill_at) {
			struct mqp_node_stats s;
			mqp_pool_node_stats(pool, 1, &s, sizeof s);
			inflight_lost = s.inflight;
			tb_broker_signal(node[1], SIGKILL);
			killed = mqc_now_ns();
		}
		if (killed && !restarted && now >= back_at) {
			if (tb_broker_restart(node[1], err, sizeof err) != 0)
				fprintf(stderr, "failover: restart: %s\n", err);
			restarted = mqc_now_ns();
		}
		if (restarted && !returned) {
			struct mqp_node_stats s;
			mqp_pool_node_stats(pool, 1, &s, sizeof s);
			if (s.ready)
				returned = mqc_now_ns();
		}
		if (mqp_pool_request_async(pool, "fo/cmd", "x", 1, 1, 5000, on_reply, &calls[i], NULL)
		    != MQP_OK)
			atomic_store(&calls[i].result, MQP_ENOMEM);
	}
	while (!returned && restarted && mqc_now_ns() < restarted + 15 * MQC_NS_PER_S) {
		struct mqp_node_stats s;
		mqp_pool_node_stats(pool, 1, &s, sizeof s);
		if (s.ready)
			returned = mqc_now_ns();
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	}
	mqp_pool_drain(pool, 10000);

	struct mqc_hist before, after;
	if (mqc_hist_init(&before, 7) != 0 || mqc_hist_init(&after, 7) != 0)
		return 1;
	unsigned lost = 0, timeouts = 0, nobody = 0, other = 0;
	uint64_t last_lost = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = atomic_load(&calls[i].result);
		if (rc == MQP_OK) {
			uint64_t lat = calls[i].done - calls[i].intended;
			if (calls[i].intended >= t0 + MQC_NS_PER_S && calls[i].intended < killed)
				mqc_hist_record(&before, lat);
			else if (calls[i].intended >= killed && calls[i].intended < killed + 5 * MQC_NS_PER_S)
				mqc_hist_record(&after, lat);
			continue;
		}
		lost += rc == MQP_ECONNLOST;
		timeouts += rc == MQP_ETIMEDOUT;
		nobody += rc == MQP_ENORESPONDER;
		other += rc != MQP_ECONNLOST && rc != MQP_ETIMEDOUT && rc != MQP_ENORESPONDER;
		if (rc == MQP_ECONNLOST && calls[i].done > last_lost)
			last_lost = calls[i].done;
	}
	printf("failover: %d nodes, %.0f requests/s for %.0f s, QoS 1, devices answer after %s; "
	       "node 1 SIGKILLed at %.1f s, started again at %.1f s\n",
	    nnodes, rate, seconds, delay, (double)(killed - t0) / 1e9, (double)(restarted - t0) / 1e9);
	printf("  failed: %u connection lost (in flight on node 1 at the kill: %u), %u timed out, "
	       "%u other\n",
	    lost, inflight_lost, timeouts, other);
	if (nobody)
		printf("  %u answered 'no responder' by node 1 back before its device had subscribed "
		       "again\n",
		    nobody);
	print_window("before the loss (1 s on)", &before);
	print_window("5 s after the loss", &after);
	if (last_lost)
		printf("  the last 'connection lost' came %.2f ms after the kill; no request waited for "
		       "the lost node's timeout\n",
		    (double)(last_lost - killed) / 1e6);
	if (returned)
		printf("  node 1 carried a ready connection again %.2f s after its restart\n",
		    (double)(returned - restarted) / 1e9);
	else
		printf("  node 1 carried no connection within 15 s of its restart\n");
	mqp_pool_destroy(pool);
	for (int i = 0; i < nnodes; i++) {
		kill(dev[i], SIGTERM);
		waitpid(dev[i], NULL, 0);
		tb_broker_stop(node[i]);
	}
	mqc_hist_free(&before);
	mqc_hist_free(&after);
	free(calls);
	return 0;
}
