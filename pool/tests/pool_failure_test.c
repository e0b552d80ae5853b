/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - failures: an unreachable or silent broker, a broker restart
 * under load, few free file descriptors; and against tb-fake-broker what no broker here does on
 * demand: speaking only MQTT 3.1.1 (answering a v5 CONNECT as aedes or as RabbitMQ does),
 * closing every connection, sending a malformed packet.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mqtt_protocol.h>

#include "mqc_clock.h"
#include "mqttpool.h"
#include "pool_test_util.h"
#include "tb_test.h"

/* The pool's first log line (its I/O thread writes, the test reads after destroy). */
struct first_line {
	pthread_mutex_t lock;
	char text[512];
};

static void keep_first(void *userdata, int level, const char *message)
{
	(void)level;
	struct first_line *f = userdata;
	pthread_mutex_lock(&f->lock);
	if (!f->text[0])
		snprintf(f->text, sizeof f->text, "%s", message);
	pthread_mutex_unlock(&f->lock);
}

static void unreachable_broker_fails_fast_with_the_reason(void **state)
{
	(void)state;
	mqp_pool *p = NULL;
	char err[256];
	struct first_line said = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 0;
	o.log_cb = keep_first;
	o.userdata = &said;
	assert_int_equal(mqp_pool_new("mqtt://127.0.0.1:1", &o, &p, err, sizeof err), MQP_OK);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 10000, &reply), MQP_ECONNECT);
	assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S); /* not the 10 s timeout */
	mqp_pool_last_error(p, err, sizeof err);
	assert_non_null(strstr(err, "127.0.0.1:1"));
	assert_non_null(strstr(err, "refused"));
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_true(st.connects_failed >= 1);
	mqp_pool_destroy(p);
	/* One node: the backoff line names none (it once said "next attempt  in 82 ms"). */
	if (!strstr(said.text, "; next attempt in ") || strstr(said.text, "  "))
		fail_msg("the backoff line: '%s'", said.text);
	o.log_cb = NULL;

	const struct tb_info *i = tb_test_info();
	struct mqp_pool_options bad = MQP_POOL_OPTIONS_INIT;
	bad.username = i->username;
	bad.password = "wrong";
	assert_int_equal(mqp_pool_new(i->mqtt_url, &bad, &p, err, sizeof err), MQP_OK);
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 10000, &reply), MQP_EREFUSED);
	mqp_pool_last_error(p, err, sizeof err);
	if (!strstr(err, "refused CONNECT: not authorized (reason code 0x87)"))
		fail_msg("%s", err); /* mosquitto 2.0 answers a wrong password so */
	mqp_pool_destroy(p);

	/* A "broker" that takes TCP and never answers CONNECT: exhausted, and the error says why. */
	int silent = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	assert_int_equal(bind(silent, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(silent, 8), 0);
	assert_int_equal(getsockname(silent, (struct sockaddr *)&a, &alen), 0);
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(mqp_pool_new(url, &o, &p, err, sizeof err), MQP_OK);
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 300, &reply), MQP_EEXHAUSTED);
	mqp_pool_last_error(p, err, sizeof err);
	assert_non_null(strstr(err, "no answer to CONNECT"));
	mqp_pool_destroy(p);
	close(silent);
}

static void many_open_files_do_not_break_it(void **state)
{
	(void)state;
	/* select() fails above fd 1024; the pool uses epoll, so its sockets may be numbered high. */
	enum { EXTRA = 1100 };
	int fds[EXTRA];
	for (int i = 0; i < EXTRA; i++)
		assert_true((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "fd/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "fd/cmd", "high", 4, 0, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
	for (int i = 0; i < EXTRA; i++)
		close(fds[i]);
}

/* Requests in flight when the broker dies: each fails at once with MQP_ECONNLOST (the reply can
 * no longer come; the command may have reached the device), never at its timeout. Once the broker
 * is back, the pool connects again on its own (the event: connects_ok grows) and the next request
 * is answered. */
static void requests_in_flight_when_the_broker_dies_fail_with_econnlost(void **state)
{
	(void)state;
	/* A device that takes every command and never answers: the requests stay in flight. */
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "restart/cmd", "--drop", "1", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 2;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	enum { N = 8 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		assert_int_equal(mqp_pool_request_async(p, "restart/cmd", "x", 1, i % 2, 20000,
		                     on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	struct mqp_pool_stats st;
	WAIT_FOR_STATS(p, st, st.inflight == N && st.requests == N, 5000);
	assert_int_equal(st.inflight, N);
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGKILL), 0);
	uint64_t t0 = mqc_now_ns();
	for (int i = 0; i < N; i++) {
		if (!wait_flag(&calls[i].calls, 3000))
			fail_msg("request %d was still waiting 3 s after the broker died", i);
		if (atomic_load(&calls[i].result) != MQP_ECONNLOST)
			fail_msg("request %d (QoS %d) ended with %s, not MQP_ECONNLOST", i, i % 2,
			    mqp_strerror(atomic_load(&calls[i].result)));
		assert_int_equal(atomic_load(&calls[i].calls), 1);
	}
	uint64_t took = mqc_now_ns() - t0;
	print_message("in flight: %d failed with MQP_ECONNLOST %.1f ms after the broker died\n", N,
	    (double)took / 1e6);
	assert_true(took < 2 * MQC_NS_PER_S); /* the close, not the 20 s timeout */
	mqp_pool_stats(p, &st, sizeof st);
	assert_true(st.connections_lost >= 1);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.timeouts, 0);

	tb_test_responder_kill(&r); /* it would come back, and drop again */
	uint64_t connects = st.connects_ok;
	char err[512];
	if (tb_broker_restart(tb_test_broker(), err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	r = tb_test_responder(RESPONDER_PATH, "--filter", "restart/cmd", NULL);
	/* Back on its own (backoff at most 5 s): min_size is warm again, then one request works. */
	WAIT_FOR_STATS(p, st, st.connects_ok >= connects + 2 && st.ready >= 2, 10000);
	assert_true(st.ready >= 2);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "restart/cmd", "after", 5, 0, 2000, &reply), MQP_OK);
	assert_int_equal(reply.len, 5);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void a_request_that_never_gets_a_connection_is_exhausted(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	struct mqp_reply reply;
	struct mqp_pool_stats st;
	/* One connection carrying one request at most: a second request waits in the queue and,
	 * never sent, ends with MQP_EEXHAUSTED rather than a timeout that hides whether the device
	 * got it. */
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 1;
	o.min_size = 1;
	o.max_inflight = 1;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	static struct done_call first;
	atomic_store(&first.calls, 0);
	assert_int_equal(
	    mqp_pool_publish_async(p, "mute/warm", "x", 1, 1, 0, 3000, on_published, &first, NULL),
	    MQP_OK); /* wait until the connection is up */
	uint64_t until = mqc_now_ns() + 3 * MQC_NS_PER_S;
	while (atomic_load(&first.calls) == 0 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	assert_int_equal(atomic_load(&first.result), MQP_OK);
	static struct async_call busy;
	memset(&busy, 0, sizeof busy);
	assert_int_equal(
	    mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 5000, on_async_reply, &busy, NULL),
	    MQP_OK);
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "y", 1, 0, 200, &reply), MQP_EEXHAUSTED);
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.requests, 1); /* the second was never published */
	assert_true(st.waits >= 1);
	assert_string_equal(
	    mqp_strerror(MQP_EEXHAUSTED), "no connection free before the deadline (not sent)");
	mqp_pool_destroy(p);
	assert_int_equal(atomic_load(&busy.result), MQP_ECLOSED);
	tb_test_responder_stop(&r);
}

/* --- what the broker speaks (tb-fake-broker) ---------------------------------------------- */

struct fake {
	struct tb_responder proc;
	char url[64];
};

static struct fake fake_start(const char *mode)
{
	const char *argv[] = { FAKE_BROKER_PATH, "--mode", mode, NULL };
	struct fake f = { .proc = tb_test_spawn("ready", argv) };
	FILE *log = fopen(f.proc.log, "r");
	assert_non_null(log);
	char line[128];
	while (fgets(line, sizeof line, log))
		if (sscanf(line, "FAKE_BROKER_URL=%63s", f.url) == 1)
			break;
	fclose(log);
	assert_true(f.url[0]);
	return f;
}

static void fake_stop(struct fake *f)
{
	tb_test_responder_kill(&f->proc);
}

/* Request, and the error the pool names. */
/* The pool's mqp_pool_stats.v311_only after the last request_and_say. */
static unsigned said_v311_only;

static const char *advice; /* options.v311_advice of request_and_say's pool */

static mqp_err request_and_say(const char *url, int protocol, char *why, size_t len, uint64_t *took)
{
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 0;
	o.protocol = protocol;
	o.v311_advice = advice;
	mqp_pool *p = NULL;
	char err[256];
	assert_int_equal(mqp_pool_new(url, &o, &p, err, sizeof err), MQP_OK);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	mqp_err rc = protocol == 5
	    ? mqp_pool_request(p, "x/cmd", "x", 1, 0, 5000, &reply)
	    : mqp_pool_request_legacy(p, "x/cmd", "x", 1, 0, "x/reply", NULL, NULL, 5000, &reply);
	*took = mqc_now_ns() - t0;
	mqp_pool_last_error(p, why, len);
	/* A second call, while the pool backs off: the same answer at once (nothing transient). */
	t0 = mqc_now_ns();
	mqp_err again = protocol == 5
	    ? mqp_pool_request(p, "x/cmd", "x", 1, 0, 5000, &reply)
	    : mqp_pool_request_legacy(p, "x/cmd", "x", 1, 0, "x/reply", NULL, NULL, 5000, &reply);
	assert_int_equal(again, rc);
	assert_true(mqc_now_ns() - t0 < 1000 * MQC_NS_PER_MS);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.connects_ok, 0);
	said_v311_only = st.v311_only;
	mqp_pool_destroy(p);
	return rc;
}

/* A pool that keeps one connection warm, at protocol (5 or 4). */
static mqp_pool *one_connection_pool(const char *url, int protocol)
{
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.protocol = protocol;
	o.min_size = 1;
	mqp_pool *p = NULL;
	char err[256];
	if (mqp_pool_new(url, &o, &p, err, sizeof err) != MQP_OK)
		fail_msg("mqp_pool_new(%s): %s", url, err);
	return p;
}

static bool is_ready(const struct mqp_pool_stats *st)
{
	return st->ready >= 1;
}
static bool saw_protocol_error(const struct mqp_pool_stats *st)
{
	return st->protocol_errors >= 1;
}

/* The pool's statistics once done says so, or after 3 s. */
static struct mqp_pool_stats stats_until(mqp_pool *p, bool (*done)(const struct mqp_pool_stats *))
{
	struct mqp_pool_stats st;
	uint64_t until = mqc_now_ns() + 3 * MQC_NS_PER_S;
	do {
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		mqp_pool_stats(p, &st, sizeof st);
	} while (!done(&st) && mqc_now_ns() < until);
	return st;
}

static void a_broker_that_speaks_only_311_is_named_and_confirmed(void **state)
{
	(void)state;
	/* aedes: a 3.1.1 CONNACK with return code 1 to a v5 CONNECT - the broker says so: a
	 * refusal, confirmed. RabbitMQ 3.10: closes it without a word - said as what it is, with what
	 * the CONNECT was and that 3.1.1 was accepted, never "confirmed" (the Paho test broker closed
	 * the pool's CONNECT so for a value it disliked, and the pool blamed the version). */
	const char *modes[] = { "v311-only", "close-v5" };
	for (int i = 0; i < 2; i++) {
		struct fake f = fake_start(modes[i]);
		char why[1024];
		uint64_t took;
		mqp_err rc = request_and_say(f.url, 5, why, sizeof why, &took);
		if (i == 0
		    && (rc != MQP_EREFUSED
		        || !strstr(why,
		            "does not accept MQTT 5 (confirmed: it answered the MQTT 5 CONNECT with a "
		            "3.1.1 "
		            "CONNACK (3.1.1 return code 1")
		        || !strstr(why, "an MQTT 3.1.1 CONNECT right after was accepted")
		        || !strstr(why, "options.protocol = 4")))
			fail_msg("%s: %s: %s", modes[i], mqp_strerror(rc), why);
		if (i == 1
		    && (rc != MQP_ECONNECT || strstr(why, "(confirmed:") || strstr(why, "does not accept")
		        || !strstr(why,
		            "closed the connection in answer to an MQTT 5 CONNECT without a "
		            "CONNACK (it was")
		        || !strstr(why, "Maximum Packet Size 268435455")
		        || !strstr(why, "an MQTT 3.1.1 CONNECT right after was accepted")
		        || !strstr(why, "not confirmed") || !strstr(why, "options.protocol = 4")))
			fail_msg("%s: %s: %s", modes[i], mqp_strerror(rc), why);
		/* As a field too, for programs: only when the broker said so. */
		assert_int_equal(said_v311_only, i == 0);
		assert_true(took < 2000 * MQC_NS_PER_MS); /* the check is one round trip */
		/* With protocol 4 the same broker takes the connection (the fake holds it). */
		mqp_pool *p = one_connection_pool(f.url, 4);
		assert_int_equal(stats_until(p, is_ready).ready, 1);
		mqp_pool_destroy(p);
		fake_stop(&f);
	}
	/* A program's own words for the fix (mqbench's flag) replace the library's, kept whole. */
	struct fake f = fake_start("v311-only");
	char why[1024];
	uint64_t took;
	advice = "run it with --protocol 3.1.1";
	assert_int_equal(request_and_say(f.url, 5, why, sizeof why, &took), MQP_EREFUSED);
	advice = NULL;
	if (!strstr(why, "was accepted): run it with --protocol 3.1.1")
	    || strstr(why, "options.protocol"))
		fail_msg("v311_advice: %s", why);
	fake_stop(&f);
	/* 3.1.1 closed too: the message does not blame the protocol version. */
	f = fake_start("close-all");
	assert_int_equal(request_and_say(f.url, 5, why, sizeof why, &took), MQP_ECONNECT);
	assert_int_equal(said_v311_only, 0);
	if (!strstr(why, "an MQTT 3.1.1 CONNECT right after fared no better")
	    || !strstr(why, "not a matter of the protocol version") || strstr(why, "(confirmed:")
	    || strstr(why, "options.protocol = 4"))
		fail_msg("close-all: %s", why);
	fake_stop(&f);
}

static void refusals_and_malformed_packets_are_named(void **state)
{
	(void)state;
	struct fake f = fake_start("refuse");
	char why[512];
	uint64_t took;
	assert_int_equal(request_and_say(f.url, 5, why, sizeof why, &took), MQP_EREFUSED);
	assert_non_null(strstr(why, "refused CONNECT: not authorized (reason code 0x87)"));
	/* 3.1.1's return codes are 3.1.1's: 5 is "not authorized", never a v5 reason code. */
	assert_int_equal(request_and_say(f.url, 4, why, sizeof why, &took), MQP_EREFUSED);
	if (!strstr(why, "refused CONNECT: not authorized (MQTT 3.1.1 return code 5)"))
		fail_msg("3.1.1 refusal: %s", why);
	fake_stop(&f);
	f = fake_start("malformed");
	mqp_pool *p = one_connection_pool(f.url, 5);
	assert_true(stats_until(p, saw_protocol_error).protocol_errors >= 1);
	mqp_pool_last_error(p, why, sizeof why);
	assert_non_null(strstr(why, "malformed packet (PUBLISH with QoS 3)"));
	mqp_pool_destroy(p);
	fake_stop(&f);
}

/* A broker that stops answering (tb-fake-broker no-pingresp: CONNACK, then silence): with a
 * request outstanding and nothing received for silence_ms (500) the pool pings, and with nothing
 * back within ping_timeout_ms (1000) the connection is unresponsive: the request fails with
 * MQP_ECONNLOST about 1.5 s in (its own timeout is 20 s), the reason names the node, what was
 * outstanding and for how long, and the node is suspect. */
static void a_broker_that_stops_answering_is_dropped_at_the_ping_deadline(void **state)
{
	(void)state;
	struct fake f = fake_start("no-pingresp");
	mqp_pool *p = one_connection_pool(f.url, 5);
	struct mqp_pool_stats st = stats_until(p, is_ready);
	assert_int_equal(st.ready, 1);
	uint64_t t0 = mqc_now_ns();
	static struct async_call call;
	memset(&call, 0, sizeof call);
	assert_int_equal(
	    mqp_pool_request_async(p, "dark/cmd", "x", 1, 0, 20000, on_async_reply, &call, NULL),
	    MQP_OK);
	if (!wait_flag(&call.calls, 5000))
		fail_msg("the request was still waiting 5 s after the broker went silent");
	uint64_t took = mqc_now_ns() - t0;
	assert_int_equal(atomic_load(&call.result), MQP_ECONNLOST);
	char why[512];
	mqp_pool_last_error(p, why, sizeof why);
	/* The node, what was outstanding and for how long. */
	if (!strstr(why, "is unresponsive: nothing received for ")
	    || !strstr(why, "a PINGREQ unanswered for ")
	    || !strstr(why, "1 call outstanding, the oldest for ") || !strstr(why, f.url + 7))
		fail_msg("%s", why);
	mqp_pool_stats(p, &st, sizeof st);
	assert_true(st.connections_lost >= 1);
	struct mqp_node_stats ns;
	mqp_pool_node_stats(p, 0, &ns, sizeof ns);
	assert_int_equal(ns.suspect, 1);
	assert_true(ns.unresponsive >= 1 && ns.unresponsive_since_ms > 0);
	print_message("dropped %.2f s after the request (silence_ms 500 + ping_timeout_ms 1000)\n",
	    (double)took / 1e9);
	assert_true(took >= 1400 * MQC_NS_PER_MS && took < 2500 * MQC_NS_PER_MS);
	mqp_pool_destroy(p);
	fake_stop(&f);
}

/* The liveness settings in the URL, as operators write a connection string: shorter ones there
 * notice the silent broker sooner; a key the pool does not know, or a value out of range, is
 * refused at mqp_pool_new with its name. */
static void liveness_settings_in_the_url(void **state)
{
	(void)state;
	struct fake f = fake_start("no-pingresp");
	char url[160];
	snprintf(url, sizeof url, "%s?silence_ms=200&ping_timeout_ms=300", f.url);
	mqp_pool *p = one_connection_pool(url, 5);
	assert_int_equal(stats_until(p, is_ready).ready, 1);
	static struct async_call call;
	memset(&call, 0, sizeof call);
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(
	    mqp_pool_request_async(p, "dark/cmd", "x", 1, 0, 20000, on_async_reply, &call, NULL),
	    MQP_OK);
	assert_true(wait_flag(&call.calls, 5000));
	uint64_t took = mqc_now_ns() - t0;
	assert_int_equal(atomic_load(&call.result), MQP_ECONNLOST);
	print_message("?silence_ms=200&ping_timeout_ms=300: dropped %.2f s after the request\n",
	    (double)took / 1e9);
	assert_true(took >= 450 * MQC_NS_PER_MS && took < 1200 * MQC_NS_PER_MS);
	mqp_pool_destroy(p);
	fake_stop(&f);
	const char *bad[][2] = {
		{ "mqtt://127.0.0.1:1?keepalive=5", "unknown option 'keepalive'" },
		{ "mqtt://127.0.0.1:1?silence_ms=5", "silence_ms=5: expected milliseconds" },
		{ "mqtt://127.0.0.1:1?ping_timeout_ms=never", "ping_timeout_ms=never: expected" },
		{ "mqtt://127.0.0.1:1?", "nothing after '?'" },
		{ "mqtt://127.0.0.1:1?silence_ms=500&", "an empty or overlong option" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		char err[256] = "";
		mqp_pool *none = NULL;
		assert_int_equal(mqp_pool_new(bad[i][0], &o, &none, err, sizeof err), MQP_EINVAL);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: %s", bad[i][0], err);
		assert_null(none);
	}
}

/* A broker whose CONNACK says it takes no wildcard and no shared subscriptions (tb-fake-broker
 * no-wildcards refuses a wildcard SUBSCRIBE with 0xA2): the pool's inbox is subscribed exactly,
 * so the connection comes up, and a lease's wildcard or shared filter is refused before it is
 * sent, naming why. */
static void what_the_broker_says_it_does_not_take_is_not_sent(void **state)
{
	(void)state;
	struct fake f = fake_start("no-wildcards");
	mqp_pool *p = one_connection_pool(f.url, 5);
	struct mqp_pool_stats st = stats_until(p, is_ready);
	if (st.ready != 1) {
		char why[512];
		mqp_pool_last_error(p, why, sizeof why);
		fail_msg("not ready (the inbox SUBSCRIBE refused?): %s", why);
	}
	mqp_lease l;
	assert_int_equal(mqp_pool_acquire(p, 3000, &l), MQP_OK);
	const char *filters[] = { "a/+/c", "a/#", "$share/g/a" };
	const char *want[]
	    = { "no wildcard subscriptions", "no wildcard subscriptions", "no shared subscriptions" };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(mqp_lease_subscribe(&l, filters[i], 1, 0, 2000), MQP_EDENIED);
		char why[512];
		mqp_pool_last_error(p, why, sizeof why);
		if (!strstr(why, want[i]) || !strstr(why, filters[i]))
			fail_msg("%s: %s", filters[i], why);
	}
	assert_int_equal(mqp_lease_subscribe(&l, "a/b/c", 1, 0, 2000), MQP_OK);
	mqp_lease_release(&l);
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.protocol_errors, 0);
	mqp_pool_destroy(p);
	fake_stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unreachable_broker_fails_fast_with_the_reason),
		cmocka_unit_test(many_open_files_do_not_break_it),
		cmocka_unit_test(requests_in_flight_when_the_broker_dies_fail_with_econnlost),
		cmocka_unit_test(a_request_that_never_gets_a_connection_is_exhausted),
		cmocka_unit_test(a_broker_that_speaks_only_311_is_named_and_confirmed),
		cmocka_unit_test(refusals_and_malformed_packets_are_named),
		cmocka_unit_test(a_broker_that_stops_answering_is_dropped_at_the_ping_deadline),
		cmocka_unit_test(liveness_settings_in_the_url),
		cmocka_unit_test(what_the_broker_says_it_does_not_take_is_not_sent),
	};
	return TB_TEST_RUN(tests, NULL);
}
