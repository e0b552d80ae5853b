/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against several brokers: independent mosquitto nodes on loopback, each with a device
 * (the responder), named in one URL. Connections spread over them; a node lost costs only the
 * requests in flight on it, and new requests never wait for it; a node that returns gets
 * connections again; in order, the first node that is up carries everything; a broker that sends
 * the pool elsewhere (0x9C with a Server Reference) or announces its shutdown (0x8B) is left
 * for the others; a node that goes silent (SIGSTOP: no reset, nothing answers) is noticed within
 * 2 s under load and within keepalive / 2 + ping_timeout_ms idle, and routed around, while a slow
 * device is never mistaken for one; a name is resolved off the pool's thread, and one that does
 * not resolve costs the other nodes nothing.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqttpool.h"
#include "pool_test_util.h"
#include "tb_broker.h"
#include "tb_test.h"

enum { NODES_MAX = 3 };

/* A mosquitto of its own (anonymous, so one pool's credentials do for all) and its device. */
struct node {
	struct tb_broker *broker;
	struct tb_responder device;
	int port;
};

static struct tb_responder device_on(int port, const char *delay)
{
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", port);
	const char *argv[]
	    = { RESPONDER_PATH, "--broker", url, "--filter", "n/cmd", "--delay", delay, NULL };
	return tb_test_spawn("RESPONDER_READY", argv);
}

static void node_start(struct node *n, const char *delay)
{
	struct tb_options o = { .no_tls = true,
		.no_probe = true,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	char err[512];
	if (tb_broker_start(&o, &n->broker, err, sizeof err) != 0)
		fail_msg("a node: %s", err);
	n->port = (int)strtol(strrchr(tb_broker_info(n->broker)->mqtt_url, ':') + 1, NULL, 10);
	n->device = device_on(n->port, delay);
}

static void node_stop(struct node *n)
{
	tb_test_responder_kill(&n->device);
	tb_broker_stop(n->broker);
}

/* "mqtt://127.0.0.1:P1,127.0.0.1:P2,..." */
static void list_url(char *url, size_t len, const struct node *nodes, int n)
{
	int at = snprintf(url, len, "mqtt://");
	for (int i = 0; i < n; i++)
		at += snprintf(url + at, len - (size_t)at, "%s127.0.0.1:%d", i ? "," : "", nodes[i].port);
}

static struct mqp_node_stats node_stats(mqp_pool *p, unsigned i)
{
	struct mqp_node_stats s;
	assert_true(i < mqp_pool_node_stats(p, i, &s, sizeof s));
	return s;
}

/* Wait until node i of p has at least want ready connections; returns how long it took (ns). */
static uint64_t wait_ready_on(mqp_pool *p, unsigned i, unsigned want, int timeout_ms)
{
	uint64_t t0 = mqc_now_ns(), until = t0 + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	while (node_stats(p, i).ready < want && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	if (node_stats(p, i).ready < want)
		fail_msg("node %u: %u ready connections after %d ms, not %u", i, node_stats(p, i).ready,
		    timeout_ms, want);
	return mqc_now_ns() - t0;
}

/* n requests one after the other, each answered: the slowest's time (ns). */
static uint64_t slowest_of(mqp_pool *p, int n)
{
	uint64_t slowest = 0;
	for (int i = 0; i < n; i++) {
		struct mqp_reply reply;
		uint64_t t0 = mqc_now_ns();
		assert_int_equal(mqp_pool_request(p, "n/cmd", "x", 1, 1, 5000, &reply), MQP_OK);
		mqp_reply_free(&reply);
		uint64_t took = mqc_now_ns() - t0;
		slowest = took > slowest ? took : slowest;
	}
	return slowest;
}

static void connections_spread_over_the_nodes_and_requests_follow(void **state)
{
	(void)state;
	struct node nodes[NODES_MAX];
	/* The devices hold each reply 300 ms, so every request is in flight when the next is placed
	 * and "least loaded" sees them all: with replies back at once the loads stay at 0 and the
	 * first connection in order wins the ties (a node got 8 of 60 under TSan). */
	for (int i = 0; i < NODES_MAX; i++)
		node_start(&nodes[i], "300ms");
	char url[256];
	list_url(url, sizeof url, nodes, NODES_MAX);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 6;
	mqp_pool *p = new_pool(url, &o);
	assert_int_equal(mqp_pool_node_stats(p, 0, NULL, 0), NODES_MAX);
	for (unsigned i = 0; i < NODES_MAX; i++)
		wait_ready_on(p, i, 2, 5000);
	enum { N = 60 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		calls[i] = (struct async_call) { 0 };
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "spread-%d", i);
		assert_int_equal(mqp_pool_request_async(p, "n/cmd", calls[i].nonce, strlen(calls[i].nonce),
		                     1, 5000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	for (int i = 0; i < N; i++) {
		assert_true(wait_flag(&calls[i].calls, 5000));
		assert_int_equal(atomic_load(&calls[i].result), MQP_OK);
		assert_int_equal(atomic_load(&calls[i].matched), 1);
	}
	for (unsigned i = 0; i < NODES_MAX; i++) {
		struct mqp_node_stats s = node_stats(p, i);
		print_message("node %s: %u connections, %llu requests\n", s.where, s.connections,
		    (unsigned long long)s.requests);
		assert_int_equal(s.connections, 2);
		assert_true(s.requests >= N / 6); /* least loaded first: N / 3 each when all in flight */
		assert_int_equal(s.failing, 0);
	}
	mqp_pool_destroy(p);
	for (int i = 0; i < NODES_MAX; i++)
		node_stop(&nodes[i]);
}

/* Under requests held 500 ms by every device: node 1 SIGKILLed. The requests in flight on it
 * fail at once with MQP_ECONNLOST, and only they; new requests go to the other nodes without
 * waiting; the node back (its device reconnects by itself) carries a connection again within
 * max(eviction interval, 10 s). */
static void a_lost_node_costs_only_what_was_in_flight_on_it(void **state)
{
	(void)state;
	struct node nodes[NODES_MAX];
	for (int i = 0; i < NODES_MAX; i++)
		node_start(&nodes[i], "500ms");
	char url[256];
	list_url(url, sizeof url, nodes, NODES_MAX);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 3;
	o.eviction_interval_ms = 500;
	mqp_pool *p = new_pool(url, &o);
	for (unsigned i = 0; i < NODES_MAX; i++)
		wait_ready_on(p, i, 1, 5000);
	enum { N = 30 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		calls[i] = (struct async_call) { 0 };
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "lost-%d", i);
		assert_int_equal(mqp_pool_request_async(p, "n/cmd", calls[i].nonce, strlen(calls[i].nonce),
		                     1, 10000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	struct mqp_pool_stats st;
	WAIT_FOR_STATS(p, st, st.inflight == N, 2000);
	assert_int_equal(st.inflight, N);
	uint64_t on_lost = node_stats(p, 1).requests;
	uint64_t killed = mqc_now_ns();
	assert_int_equal(tb_broker_signal(nodes[1].broker, SIGKILL), 0);
	unsigned failed = 0;
	for (int i = 0; i < N; i++) {
		assert_true(wait_flag(&calls[i].calls, 5000));
		int rc = atomic_load(&calls[i].result);
		if (rc != MQP_OK && rc != MQP_ECONNLOST)
			fail_msg("request %d: %s", i, mqp_strerror(rc));
		failed += rc == MQP_ECONNLOST;
	}
	print_message("node lost: %u of %d requests failed (%llu were on it), all done %.0f ms after\n",
	    failed, N, (unsigned long long)on_lost, (double)(mqc_now_ns() - killed) / 1e6);
	assert_int_equal(failed, on_lost); /* exactly those in flight on it */
	assert_true(failed > 0);
	struct mqp_node_stats lost = node_stats(p, 1);
	assert_int_equal(lost.failing, 1);
	assert_true(lost.connections_lost >= 1);
	char port[16];
	snprintf(port, sizeof port, ":%d", nodes[1].port);
	assert_non_null(strstr(lost.last_error, port));
	/* New requests: answered by the others, none waits for the lost node. */
	uint64_t slowest = slowest_of(p, 10);
	print_message("after the loss: the slowest of 10 requests took %.0f ms (devices hold 500)\n",
	    (double)slowest / 1e6);
	assert_true(slowest < 1500 * MQC_NS_PER_MS);
	/* Back: the node carries a connection again. */
	char err[512];
	if (tb_broker_restart(nodes[1].broker, err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	uint64_t back = wait_ready_on(p, 1, 1, 10000);
	print_message("node back: a connection on it again after %.1f s\n", (double)back / 1e9);
	mqp_pool_destroy(p);
	for (int i = 0; i < NODES_MAX; i++)
		node_stop(&nodes[i]);
}

/* The node's suspect flag as the pool reports it, polled; the time it was first seen (0: not
 * within timeout_ms). */
static uint64_t wait_suspect(mqp_pool *p, unsigned i, unsigned want, int timeout_ms)
{
	uint64_t until = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	while (node_stats(p, i).suspect != want && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	return node_stats(p, i).suspect == want ? mqc_now_ns() : 0;
}

/* How a node goes silent, and comes back. */
enum silence { SIGSTOPPED, BLACKHOLED };

/* Every packet to or from port dropped (on) or not (off), in this network namespace. */
static void blackhole(int port, bool on)
{
	char cmd[512];
	if (on)
		snprintf(cmd, sizeof cmd,
		    "nft add table inet mqp_test && nft add chain inet mqp_test out "
		    "'{ type filter hook output priority 0; }' && "
		    "nft add rule inet mqp_test out tcp dport %d drop && "
		    "nft add rule inet mqp_test out tcp sport %d drop",
		    port, port);
	else
		snprintf(cmd, sizeof cmd, "nft delete table inet mqp_test");
	if (system(cmd) != 0)
		fail_msg("%s: failed", cmd);
}

static void go_silent(struct node *n, enum silence how, bool silent)
{
	if (how == SIGSTOPPED)
		assert_int_equal(tb_broker_signal(n->broker, silent ? SIGSTOP : SIGCONT), 0);
	else
		blackhole(n->port, silent);
}

/* Under 500 requests/s over two nodes, node 1 goes silent: SIGSTOPped (its kernel keeps the
 * connections open and acknowledges, nothing answers) or blackholed (every packet dropped, as a
 * firewall or a NAT that lost its state does); nothing is reset. Noticed within 2 s (silence_ms
 * 500 + ping_timeout_ms 1000 + the 100 ms check, by default); what fails is only what was in
 * flight on it or sent to it before then, with MQP_ECONNLOST, never a timeout; every request sent
 * after that is answered (by node 0); once it answers again it carries connections within 10 s. */
static void silent_node_under_load(enum silence how)
{
	const char *what = how == SIGSTOPPED ? "SIGSTOP" : "blackhole";
	struct node nodes[2];
	/* Devices that take 20 ms: about 10 requests in flight, so every connection carries some
	 * (with instant replies the first connections in order take nearly all, and a silent one
	 * may wait a second for work that would show its silence). */
	for (int i = 0; i < 2; i++)
		node_start(&nodes[i], "20ms");
	char url[256];
	list_url(url, sizeof url, nodes, 2);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 4;
	o.eviction_interval_ms = 500;
	mqp_pool *p = new_pool(url, &o);
	for (unsigned i = 0; i < 2; i++)
		wait_ready_on(p, i, 2, 5000);
	enum { N = 2500, EVERY_MS = 2, STOP_AT = 500 };
	static struct async_call calls[N];
	static uint64_t sent_at[N];
	uint64_t t0 = mqc_now_ns(), stopped = 0, detected = 0;
	uint64_t on_it_at_stop = 0, inflight_at_stop = 0, on_it_at_detection = 0;
	for (int i = 0; i < N; i++) {
		uint64_t due = t0 + (uint64_t)i * EVERY_MS * MQC_NS_PER_MS, now = mqc_now_ns();
		if (due > now)
			nanosleep(&(struct timespec) { .tv_nsec = (long)(due - now) }, NULL);
		calls[i] = (struct async_call) { 0 };
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "silent-%d", i);
		sent_at[i] = mqc_now_ns();
		assert_int_equal(mqp_pool_request_async(p, "n/cmd", calls[i].nonce, strlen(calls[i].nonce),
		                     1, 5000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
		if (i == STOP_AT) {
			struct mqp_node_stats s = node_stats(p, 1);
			on_it_at_stop = s.requests;
			inflight_at_stop = s.inflight;
			go_silent(&nodes[1], how, true);
			stopped = mqc_now_ns();
		} else if (stopped && !detected) {
			struct mqp_node_stats s = node_stats(p, 1);
			if (s.suspect) {
				detected = mqc_now_ns();
				on_it_at_detection = s.requests;
				assert_true(s.unresponsive >= 1 && s.unresponsive_since_ms > 0);
				char port[16];
				snprintf(port, sizeof port, ":%d", nodes[1].port);
				if (!strstr(s.last_error, "is unresponsive: nothing received for")
				    || !strstr(s.last_error, port))
					fail_msg("node 1's last error: %s", s.last_error);
			}
		}
	}
	if (!detected)
		fail_msg("node 1 was not noticed within %.1f s of its %s",
		    (double)(mqc_now_ns() - stopped) / 1e9, what);
	unsigned failed = 0, late = 0;
	for (int i = 0; i < N; i++) {
		assert_true(wait_flag(&calls[i].calls, 7000));
		int rc = atomic_load(&calls[i].result);
		if (rc != MQP_OK && rc != MQP_ECONNLOST)
			fail_msg("request %d (sent %.0f ms after the stop): %s", i,
			    ((double)sent_at[i] - (double)stopped) / 1e6, mqp_strerror(rc));
		failed += rc != MQP_OK;
		late += rc != MQP_OK && sent_at[i] > detected;
	}
	uint64_t bound = inflight_at_stop + (on_it_at_detection - on_it_at_stop);
	print_message("silent node (%s): noticed %.0f ms after; %u failed (bound: %llu in flight on "
	              "it + %llu sent to it before then), %u of them sent after\n",
	    what, (double)(detected - stopped) / 1e6, failed, (unsigned long long)inflight_at_stop,
	    (unsigned long long)(on_it_at_detection - on_it_at_stop), late);
	assert_true(detected - stopped <= 2000 * MQC_NS_PER_MS);
	assert_int_equal(late, 0);
	assert_true(failed <= bound);
	/* Back: a fresh CONNACK and a PINGRESP, within max(eviction interval, 10 s). */
	uint64_t resumed = mqc_now_ns();
	go_silent(&nodes[1], how, false);
	uint64_t cleared = wait_suspect(p, 1, 0, 10000);
	if (!cleared)
		fail_msg(
		    "node 1 still suspect 10 s after the %s ended: %s", what, node_stats(p, 1).last_error);
	wait_ready_on(p, 1, 1, 10000);
	print_message("silent node (%s): trusted again %.1f s after it ended\n", what,
	    (double)(cleared - resumed) / 1e9);
	mqp_pool_destroy(p);
	for (int i = 0; i < 2; i++)
		node_stop(&nodes[i]);
}

static void a_silent_node_is_noticed_and_routed_around(void **state)
{
	(void)state;
	silent_node_under_load(SIGSTOPPED);
}

/* The same through a link that goes dark: run inside a network namespace of the test's own
 * (scripts/netns-run, the pool_nodes_test_netns entry), where an nft rule drops node 1's port. */
static void a_blackholed_link_is_noticed_and_routed_around(void **state)
{
	(void)state;
	if (!getenv("MQP_NETNS"))
		fail_msg("run through scripts/netns-run: it drops packets on this network namespace's "
		         "loopback");
	silent_node_under_load(BLACKHOLED);
}

/* The same with nothing to do: the idle connections ping on silence (half the keepalive), so
 * the stopped node is noticed within keepalive / 2 + ping_timeout_ms, and requests then go to
 * node 0 without waiting. */
static void an_idle_pool_notices_a_silent_node(void **state)
{
	(void)state;
	struct node nodes[2];
	for (int i = 0; i < 2; i++)
		node_start(&nodes[i], "0ms");
	char url[256];
	list_url(url, sizeof url, nodes, 2);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 4;
	o.keepalive_s = 5; /* the minimum: 2.5 s of silence, then a PINGREQ */
	mqp_pool *p = new_pool(url, &o);
	for (unsigned i = 0; i < 2; i++)
		wait_ready_on(p, i, 2, 5000);
	assert_int_equal(tb_broker_signal(nodes[1].broker, SIGSTOP), 0);
	uint64_t stopped = mqc_now_ns();
	uint64_t detected = wait_suspect(p, 1, 1, 8000);
	if (!detected)
		fail_msg("an idle pool did not notice the stopped node within 8 s");
	print_message("idle pool: noticed %.2f s after SIGSTOP (keepalive / 2 + ping_timeout_ms: "
	              "3.5 s)\n",
	    (double)(detected - stopped) / 1e9);
	assert_true(detected - stopped <= 4000 * MQC_NS_PER_MS);
	assert_true(slowest_of(p, 10) < 1000 * MQC_NS_PER_MS);
	assert_int_equal(tb_broker_signal(nodes[1].broker, SIGCONT), 0);
	if (!wait_suspect(p, 1, 0, 10000))
		fail_msg("node 1 still suspect 10 s after SIGCONT");
	mqp_pool_destroy(p);
	for (int i = 0; i < 2; i++)
		node_stop(&nodes[i]);
}

/* A slow device is not a silent broker: a device that answers in 0.9 x the request timeout,
 * 20 requests always in flight for 8 s, and the broker answers every PINGREQ meanwhile - no
 * connection is called unresponsive, every request is answered. */
static void a_slow_device_is_not_a_silent_broker(void **state)
{
	(void)state;
	struct node n;
	node_start(&n, "1800ms");
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", n.port);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 2;
	mqp_pool *p = new_pool(url, &o);
	wait_ready_on(p, 0, 2, 5000);
	enum { N = 90, EVERY_MS = 90 }; /* 8.1 s of sending, about 20 in flight */
	static struct async_call calls[N];
	uint64_t t0 = mqc_now_ns();
	for (int i = 0; i < N; i++) {
		uint64_t due = t0 + (uint64_t)i * EVERY_MS * MQC_NS_PER_MS, now = mqc_now_ns();
		if (due > now)
			nanosleep(&(struct timespec) { .tv_nsec = (long)(due - now) }, NULL);
		calls[i] = (struct async_call) { 0 };
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "slow-%d", i);
		assert_int_equal(mqp_pool_request_async(p, "n/cmd", calls[i].nonce, strlen(calls[i].nonce),
		                     1, 2000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	unsigned ok = 0;
	for (int i = 0; i < N; i++) {
		assert_true(wait_flag(&calls[i].calls, 5000));
		ok += atomic_load(&calls[i].result) == MQP_OK;
	}
	struct mqp_node_stats s = node_stats(p, 0);
	print_message("slow device: %u of %d answered in 1.8 s of a 2 s timeout, %llu unresponsive\n",
	    ok, N, (unsigned long long)s.unresponsive);
	assert_int_equal(s.unresponsive, 0);
	assert_int_equal(s.connections_lost, 0);
	assert_int_equal(ok, N);
	mqp_pool_destroy(p);
	node_stop(&n);
}

static void in_order_the_first_node_up_carries_everything(void **state)
{
	(void)state;
	struct node nodes[2];
	for (int i = 0; i < 2; i++)
		node_start(&nodes[i], "0");
	char url[256];
	list_url(url, sizeof url, nodes, 2);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 2;
	o.load_balance = MQP_LB_IN_ORDER;
	o.eviction_interval_ms = 500;
	mqp_pool *p = new_pool(url, &o);
	wait_ready_on(p, 0, 2, 5000);
	assert_int_equal(node_stats(p, 1).connections, 0);
	assert_int_equal(tb_broker_signal(nodes[0].broker, SIGKILL), 0);
	wait_ready_on(p, 1, 2, 10000); /* the standby takes over */
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "n/cmd", "x", 1, 1, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	char err[512];
	if (tb_broker_restart(nodes[0].broker, err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	wait_ready_on(p, 0, 1, 10000); /* and the first gets them back */
	mqp_pool_destroy(p);
	for (int i = 0; i < 2; i++)
		node_stop(&nodes[i]);
}

struct fake {
	struct tb_responder proc;
	int port;
};

static struct fake fake_start(const char *mode, const char *server_ref)
{
	const char *argv[] = { FAKE_BROKER_PATH, "--mode", mode, "--server-ref", server_ref, NULL };
	struct fake f = { .proc = tb_test_spawn("ready", argv) };
	FILE *log = fopen(f.proc.log, "r");
	assert_non_null(log);
	char line[128];
	while (fgets(line, sizeof line, log))
		if (sscanf(line, "FAKE_BROKER_URL=mqtt://127.0.0.1:%d", &f.port) == 1)
			break;
	fclose(log);
	assert_true(f.port > 0);
	return f;
}

/* In order: the first node sends the pool to the third (0x9C, Server Reference): the connection
 * goes there, not to the second; a node that announces its shutdown (0x8B) is left for the
 * next. A Server Reference outside the list is not followed. */
static void redirects_and_shutdown_notices_are_honoured(void **state)
{
	(void)state;
	struct node nodes[2];
	for (int i = 0; i < 2; i++)
		node_start(&nodes[i], "0");
	char ref[32], url[256];
	snprintf(ref, sizeof ref, "127.0.0.1:%d", nodes[1].port);
	struct fake redirect = fake_start("redirect", ref);
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", redirect.port,
	    nodes[0].port, nodes[1].port);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 1;
	o.load_balance = MQP_LB_IN_ORDER;
	mqp_pool *p = new_pool(url, &o);
	wait_ready_on(p, 2, 1, 5000);
	assert_int_equal(node_stats(p, 1).connections, 0);
	struct mqp_node_stats r = node_stats(p, 0);
	assert_true(r.redirects >= 1);
	assert_non_null(strstr(r.last_error, "sent the pool elsewhere"));
	mqp_pool_destroy(p);
	tb_test_responder_kill(&redirect.proc);

	struct fake bye = fake_start("shutdown", "");
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d,127.0.0.1:%d", bye.port, nodes[0].port);
	p = new_pool(url, &o);
	wait_ready_on(p, 1, 1, 5000);
	r = node_stats(p, 0);
	assert_true(r.redirects >= 1);
	assert_non_null(strstr(r.last_error, "shutting down"));
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "n/cmd", "x", 1, 1, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	tb_test_responder_kill(&bye.proc);
	for (int i = 0; i < 2; i++)
		node_stop(&nodes[i]);
}

/* A node named by a name that does not resolve (.invalid: never, by RFC 6761; with no network
 * the resolver may take seconds to say so) costs the others nothing: requests are answered at
 * once meanwhile, and the node's error says what happened. "localhost" is resolved (off the
 * pool's thread) and used. */
static void names_are_resolved_off_the_pools_thread(void **state)
{
	(void)state;
	struct node n;
	node_start(&n, "0");
	char url[256];
	snprintf(url, sizeof url, "mqtt://no-such-node.invalid:1883,localhost:%d", n.port);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 2; /* one each: the unresolvable one is tried at once */
	o.max_size = 4;
	o.connect_timeout_ms = 2000;
	mqp_pool *p = new_pool(url, &o);
	uint64_t slowest = slowest_of(p, 20);
	print_message("with one name unresolvable: the slowest of 20 requests took %.1f ms\n",
	    (double)slowest / 1e6);
	assert_true(slowest < 1000 * MQC_NS_PER_MS);
	char where[32];
	snprintf(where, sizeof where, "localhost:%d", n.port);
	assert_string_equal(node_stats(p, 1).where, where);
	assert_true(node_stats(p, 1).requests >= 20);
	uint64_t until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (!node_stats(p, 0).failing && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	struct mqp_node_stats bad = node_stats(p, 0);
	print_message("the unresolvable node: %s\n", bad.last_error);
	assert_int_equal(bad.failing, 1);
	assert_non_null(strstr(bad.last_error, "no-such-node.invalid"));
	assert_int_equal(bad.connects_ok, 0);
	mqp_pool_destroy(p);
	node_stop(&n);
}

/* The list through the options, for programs that build it; what it refuses, said. */
static void the_list_through_the_options(void **state)
{
	(void)state;
	struct node nodes[2];
	char url[2][64];
	for (int i = 0; i < 2; i++) {
		node_start(&nodes[i], "0");
		snprintf(url[i], sizeof url[i], "mqtt://127.0.0.1:%d", nodes[i].port);
	}
	const char *list[] = { url[0], url[1], NULL };
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 2;
	o.brokers = list;
	mqp_pool *p = NULL;
	char err[256];
	assert_int_equal(mqp_pool_new(NULL, &o, &p, err, sizeof err), MQP_OK);
	wait_ready_on(p, 0, 1, 5000);
	wait_ready_on(p, 1, 1, 5000);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "n/cmd", "x", 1, 1, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	static const struct {
		const char *url, *first, *second, *why;
	} bad[] = {
		{ "mqtt://127.0.0.1:1", "mqtt://a:1", NULL, "give one of them" },
		{ NULL, "mqtt://a:1", "mqtts://b:1", "has another scheme than the first" },
		{ NULL, "mqtt://a:1", "mqtt://a:1", "is listed twice" },
		{ NULL, "mqtt://a,b", NULL, "a list of brokers" },
		{ NULL, NULL, NULL, "is empty" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *one[] = { bad[i].first, bad[i].second, NULL };
		o.brokers = one;
		p = NULL;
		err[0] = '\0';
		assert_int_equal(mqp_pool_new(bad[i].url, &o, &p, err, sizeof err), MQP_EINVAL);
		assert_null(p);
		if (!strstr(err, bad[i].why))
			fail_msg("case %zu: '%s' does not say '%s'", i, err, bad[i].why);
	}
	for (int i = 0; i < 2; i++)
		node_stop(&nodes[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connections_spread_over_the_nodes_and_requests_follow),
		cmocka_unit_test(a_lost_node_costs_only_what_was_in_flight_on_it),
		cmocka_unit_test(a_silent_node_is_noticed_and_routed_around),
		cmocka_unit_test(a_blackholed_link_is_noticed_and_routed_around),
		cmocka_unit_test(an_idle_pool_notices_a_silent_node),
		cmocka_unit_test(a_slow_device_is_not_a_silent_broker),
		cmocka_unit_test(in_order_the_first_node_up_carries_everything),
		cmocka_unit_test(redirects_and_shutdown_notices_are_honoured),
		cmocka_unit_test(names_are_resolved_off_the_pools_thread),
		cmocka_unit_test(the_list_through_the_options),
	};
	struct tb_options options = { .no_tls = true };
	return TB_TEST_RUN(tests, &options);
}
