/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - requests and replies: round trips, bad arguments, timeouts,
 * replies that never cross, forged replies, TLS.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
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

/* The structs that may grow: sizes checked, an older caller's shorter struct still works. */
static void options_and_stats_carry_their_size(void **state)
{
	(void)state;
	const char *url = tb_test_info()->mqtt_url;
	mqp_pool *p = NULL;
	char err[256] = "";
	struct mqp_pool_options o = { 0 }; /* not initialised */
	assert_int_equal(mqp_pool_new(url, &o, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "MQP_POOL_OPTIONS_INIT"));
	assert_null(p);
	mqp_pool_options_init(&o);
	assert_int_equal(o.struct_size, sizeof o);
	assert_int_equal(o.max_size, 10);
	assert_int_equal(o.min_size, 2);
	o.struct_size = sizeof o + 8; /* a newer header than this library */
	assert_int_equal(mqp_pool_new(url, &o, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "newer"));
	/* An older caller: a struct that ends before the credentials. The fields it does not have
	 * take their defaults, so this pool connects without a user and is refused: a connect
	 * error, proof that nothing past struct_size was read. */
	struct mqp_pool_options older = MQP_POOL_OPTIONS_INIT;
	older.struct_size = offsetof(struct mqp_pool_options, username);
	older.min_size = 0;
	older.max_size = 1;
	older.username = "never-read";
	assert_int_equal(mqp_pool_new(url, &older, &p, err, sizeof err), MQP_OK);
	struct mqp_reply reply;
	/* no credentials: refused */
	assert_int_equal(mqp_pool_request(p, "size/cmd", "x", 1, 0, 3000, &reply), MQP_EREFUSED);
	/* Stats into a shorter struct: only what fits is written. */
	struct mqp_pool_stats st;
	memset(&st, 0xab, sizeof st);
	mqp_pool_stats(p, &st, offsetof(struct mqp_pool_stats, connections_lost));
	assert_true(st.connects_failed >= 1);
	unsigned char *tail = (unsigned char *)&st + offsetof(struct mqp_pool_stats, connections_lost);
	assert_int_equal(tail[0], 0xab);
	/* MQP_NO_WAIT: an acquire takes what is ready now (nothing: the broker refuses us), a
	 * drain says whether the pool is idle. */
	mqp_lease lease;
	uint64_t t0 = mqc_now_ns();
	int rc = mqp_pool_acquire(p, MQP_NO_WAIT, &lease);
	assert_true(rc == MQP_ETIMEDOUT || rc == MQP_EREFUSED);
	assert_true(mqc_now_ns() - t0 < 1000 * MQC_NS_PER_MS);
	assert_int_equal(mqp_pool_drain(p, MQP_NO_WAIT), MQP_OK);
	mqp_pool_destroy(p);
}

/* A call that returned is over: a drain made right after it must not still count it (the I/O
 * thread used to wake the caller first and count the call done after; a drain in between, which
 * ASan's timing made likely, returned MQP_ETIMEDOUT). */
static void a_returned_call_is_not_outstanding(void **state)
{
	(void)state;
	for (int i = 0; i < 30; i++) {
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		o.min_size = 1;
		o.max_size = 1;
		mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
		assert_int_equal(mqp_pool_publish(p, "drain/x", "x", 1, 0, 0, 5000), MQP_OK);
		int rc = mqp_pool_drain(p, MQP_NO_WAIT);
		if (rc != MQP_OK)
			fail_msg("round %d: drain right after a returned publish: %s", i, mqp_strerror(rc));
		mqp_pool_destroy(p);
	}
}

static void two_pools_in_one_process_do_not_collide(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "two/cmd", NULL);
	mqp_pool *a = new_pool(tb_test_info()->mqtt_url, NULL);
	mqp_pool *b = new_pool(tb_test_info()->mqtt_url, NULL);
	for (int k = 0; k < 20; k++) {
		struct mqp_reply ra, rb;
		assert_int_equal(mqp_pool_request(a, "two/cmd", "a", 1, 0, 3000, &ra), MQP_OK);
		assert_int_equal(mqp_pool_request(b, "two/cmd", "b", 1, 0, 3000, &rb), MQP_OK);
		assert_string_equal(ra.payload, "a");
		assert_string_equal(rb.payload, "b");
		mqp_reply_free(&ra);
		mqp_reply_free(&rb);
	}
	struct mqp_pool_stats sa, sb;
	mqp_pool_stats(a, &sa, sizeof sa);
	mqp_pool_stats(b, &sb, sizeof sb);
	assert_int_equal(sa.connections_lost + sb.connections_lost, 0); /* no session takeover */
	mqp_pool_destroy(a);
	mqp_pool_destroy(b);
	tb_test_responder_stop(&r);
}

static void request_round_trip(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "rt/+/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "open", 4, 0, 5000, &reply), MQP_OK);
	assert_int_equal(reply.len, 4);
	assert_string_equal(reply.payload, "open");
	assert_non_null(strstr(reply.topic, "mqp/inbox/"));
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "", 0, 1, 5000, &reply), MQP_OK);
	assert_int_equal(reply.len, 0);
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "q2", 2, 2, 5000, &reply), MQP_OK);
	assert_string_equal(reply.payload, "q2");
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_publish(p, "rt/other", "x", 1, 1, 0, 5000), MQP_OK);
	struct mqp_latency req, acq, conn;
	mqp_pool_latency(p, MQP_LATENCY_REQUEST, &req, sizeof req);
	mqp_pool_latency(p, MQP_LATENCY_ACQUIRE, &acq, sizeof acq);
	mqp_pool_latency(p, MQP_LATENCY_CONNECT, &conn, sizeof conn);
	assert_int_equal(req.count, 3);
	assert_true(req.p50_ns > 0 && req.p50_ns <= req.max_ns);
	assert_int_equal(acq.count, 0);
	assert_true(conn.count >= 1 && conn.p50_ns > 0);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.requests, 3);
	assert_int_equal(st.replies, 3);
	assert_int_equal(st.publishes, 1);
	assert_true(st.size >= 1 && st.size <= 10);
	mqp_pool_destroy(p);
	assert_int_equal(tb_test_responder_stop(&r).replies, 3);
}

static void bad_arguments_are_refused(void **state)
{
	(void)state;
	mqp_pool *p = NULL;
	char err[256] = "";
	assert_int_equal(mqp_pool_new("http://x", NULL, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "scheme"));
	assert_null(p);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 5;
	o.max_size = 2;
	assert_int_equal(mqp_pool_new("mqtt://127.0.0.1:1", &o, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "min_size"));
	struct mqp_pool_options tls = MQP_POOL_OPTIONS_INIT;
	tls.cafile = "/nonexistent/ca.crt";
	assert_int_equal(mqp_pool_new("mqtts://127.0.0.1:1", &tls, &p, err, sizeof err), MQP_ETLS);
	p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "a/+/b", "x", 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "", "x", 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "a", "x", 1, 3, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "a", NULL, 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_publish(p, "a/#", "x", 1, 0, 0, 100), MQP_EINVAL);
	/* MQP_NO_WAIT only where a call can return what is ready now. */
	assert_int_equal(mqp_pool_request(p, "a", "x", 1, 0, MQP_NO_WAIT, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_publish(p, "a", "x", 1, 0, 0, MQP_NO_WAIT), MQP_EINVAL);
	struct mqp_latency lat7 = { .count = 7 };
	mqp_pool_latency(p, (mqp_latency_kind)99, &lat7, sizeof lat7); /* an unknown kind: zero */
	assert_int_equal(lat7.count, 0);
	mqp_pool_destroy(p);
	mqp_pool_destroy(NULL);
	/* No error buffer: the TLS failure is still reported, and nothing writes into itself. */
	assert_int_equal(mqp_pool_new("mqtts://127.0.0.1:1", &tls, &p, NULL, 0), MQP_ETLS);
	/* The accessors take a NULL pool. */
	struct mqp_pool_stats st = { .size = 7 };
	mqp_pool_stats(NULL, &st, sizeof st);
	assert_int_equal(st.size, 0);
	mqp_pool_stats(NULL, NULL, 0);
	struct mqp_latency lat = { .count = 7 };
	mqp_pool_latency(NULL, MQP_LATENCY_REQUEST, &lat, sizeof lat);
	assert_int_equal(lat.count, 0);

	char why[64];
	assert_string_equal(mqp_pool_last_error(NULL, why, sizeof why), "no pool (NULL)");
	assert_string_equal(mqp_strerror(MQP_ETIMEDOUT), "timed out");
	assert_string_equal(mqp_strerror(999), "unknown error");
}

/* A payload within the API's 256 MiB but past what one MQTT packet can carry (a Remaining Length
 * of 268,435,455): too big, said at once - never "out of memory" (3.1.1 and 5 alike). */
static void a_payload_mqtt_cannot_carry_is_too_big(void **state)
{
	(void)state;
	size_t len = (size_t)256 << 20;
	void *payload = calloc(1, len); /* untouched pages until the pool copies them */
	assert_non_null(payload);
	for (int protocol = 4; protocol <= 5; protocol++) {
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		o.protocol = protocol;
		o.min_size = 1;
		mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
		assert_int_equal(mqp_pool_publish(p, "big/x", payload, len, 1, 0, 10000), MQP_ETOOBIG);
		char why[512];
		mqp_pool_last_error(p, why, sizeof why);
		if (!strstr(why, "does not fit in an MQTT packet"))
			fail_msg("protocol %d: %s", protocol, why);
		/* and the connection is still fine for what fits */
		assert_int_equal(mqp_pool_publish(p, "big/x", "small", 5, 1, 0, 5000), MQP_OK);
		mqp_pool_destroy(p);
	}
	free(payload);
}

/* A broker that takes small packets (mosquitto's max_packet_size 256, the Paho test broker's
 * default): a request is sized as it is encoded (about 100 bytes; an estimate of 600 once
 * refused every one) and goes; a publish larger than the broker's Maximum Packet Size fails at
 * once with MQP_ETOOBIG naming both sizes, and the connection goes on. */
static void a_broker_that_takes_small_packets_gets_what_fits(void **state)
{
	(void)state;
	static const char *const conf[] = { "max_packet_size 256", NULL };
	struct tb_options bo = { .no_tls = true,
		.no_probe = true,
		.conf_lines = conf,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	struct tb_broker *b;
	char err[512];
	if (tb_broker_start(&bo, &b, err, sizeof err) != 0)
		fail_msg("a broker with max_packet_size 256: %s", err);
	const char *url = tb_broker_info(b)->mqtt_url;
	const char *argv[] = { RESPONDER_PATH, "--broker", url, "--filter", "small/cmd", NULL };
	struct tb_responder r = tb_test_spawn("RESPONDER_READY", argv);
	mqp_pool *p = new_pool(url, NULL);
	for (int i = 0; i < 5; i++) {
		struct mqp_reply reply;
		mqp_err rc = mqp_pool_request(p, "small/cmd", "{\"n\":1}", 7, 1, 5000, &reply);
		if (rc != MQP_OK) {
			char why[512];
			fail_msg(
			    "request %d: %s: %s", i, mqp_strerror(rc), mqp_pool_last_error(p, why, sizeof why));
		}
		assert_memory_equal(reply.payload, "{\"n\":1}", 7);
		mqp_reply_free(&reply);
	}
	char big[300];
	memset(big, 'b', sizeof big);
	assert_int_equal(mqp_pool_publish(p, "small/x", big, sizeof big, 1, 0, 5000), MQP_ETOOBIG);
	char why[512];
	mqp_pool_last_error(p, why, sizeof why);
	if (!strstr(why, "Maximum Packet Size") || !strstr(why, "256"))
		fail_msg("the refusal does not name the broker's limit: %s", why);
	assert_int_equal(mqp_pool_publish(p, "small/x", "fits", 4, 1, 0, 5000), MQP_OK);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
	tb_broker_stop(b);
}

static void timeout_when_the_device_never_answers(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "x", 1, 0, 300, &reply), MQP_ETIMEDOUT);
	uint64_t took = mqc_now_ns() - t0;
	assert_true(took >= 300 * MQC_NS_PER_MS && took < 1300 * MQC_NS_PER_MS);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.inflight, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* Nobody subscribed to the command's topic: at QoS 1 the broker's PUBACK says so (v5 reason
 * 0x10) and the request fails at once, long before its timeout, on a connection that then
 * carries a request that is answered. mosquitto's QoS 2 PUBREC is always 0x00 (it queues the
 * message until PUBREL) and at QoS 0 nothing can say so: those wait for the timeout. */
static void a_command_nobody_listens_for_fails_at_once(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "here/cmd", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 1;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_request(p, "nobody/cmd", "x", 1, 1, 5000, &reply), MQP_ENORESPONDER);
	assert_true(mqc_now_ns() - t0 < MQC_NS_PER_S);
	assert_int_equal(mqp_pool_request(p, "here/cmd", "y", 1, 1, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	for (int qos = 0; qos <= 2; qos += 2) {
		assert_int_equal(
		    mqp_pool_request(p, "nobody/cmd", "x", 1, qos, 300, &reply), MQP_ETIMEDOUT);
		assert_int_equal(mqp_pool_request(p, "here/cmd", "y", 1, qos, 5000, &reply), MQP_OK);
		mqp_reply_free(&reply);
	}
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.inflight, 0);
	assert_int_equal(st.connections_lost, 0);
	assert_string_equal(
	    mqp_strerror(MQP_ENORESPONDER), "nobody is subscribed to the command's topic");
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* A command carries Message Expiry = its time left, rounded up: a device that was offline when
 * its caller gave up never executes it later. Shown on a device's persistent session (mosquitto_sub
 * -c, session expiry 300 s): a command with 1 s left is gone when the device returns 2.5 s later,
 * while one with 30 s left is delivered when it returns (so the session does keep commands). */
static bool device_session(const char *id, const char *extra, char *got, size_t len)
{
	const struct tb_info *i = tb_test_info();
	char cmd[512];
	snprintf(cmd, sizeof cmd,
	    "mosquitto_sub -V 5 -h 127.0.0.1 -p %d -u '%s' -P '%s' -c -x 300 -i '%s' -q 1 "
	    "-t expiry/+/cmd %s 2>&1",
	    i->port, i->username, i->password, id, extra);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	size_t n = fread(got, 1, len - 1, f);
	got[n] = '\0';
	return pclose(f) != -1;
}

static void commands_expire_with_their_timeout(void **state)
{
	(void)state;
	/* The property itself, as a subscriber receives it. */
	struct tb_client *dev = outside_client();
	assert_int_equal(tb_client_subscribe(dev, "expiry/seen/cmd", 1, 0, NULL), 1);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	static struct async_call seen;
	memset(&seen, 0, sizeof seen);
	assert_int_equal(
	    mqp_pool_request_async(p, "expiry/seen/cmd", "x", 1, 1, 4500, on_async_reply, &seen, NULL),
	    MQP_OK);
	struct tb_message *m = tb_client_receive(dev, 3000);
	assert_non_null(m);
	uint32_t expiry = 0;
	assert_non_null(
	    mosquitto_property_read_int32(m->props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, &expiry, false));
	assert_true(expiry == 4 || expiry == 5); /* ceil(4.5 s), less what the broker held it */
	tb_message_free(m);
	tb_client_destroy(dev);

	char id[64], got[256];
	snprintf(id, sizeof id, "expiry-dev-%d", (int)getpid());
	assert_true(device_session(id, "-W 1", got, sizeof got)); /* the session, then offline */
	struct mqp_reply reply;
	assert_int_equal(
	    mqp_pool_request(p, "expiry/short/cmd", "stale", 5, 1, 1000, &reply), MQP_ETIMEDOUT);
	static struct async_call later;
	memset(&later, 0, sizeof later);
	assert_int_equal(mqp_pool_request_async(
	                     p, "expiry/long/cmd", "fresh", 5, 1, 30000, on_async_reply, &later, NULL),
	    MQP_OK);
	/* The time under test: the short command's 1 s of life, and more, while the device is away. */
	nanosleep(&(struct timespec) { .tv_sec = 2, .tv_nsec = 500000000 }, NULL);
	/* The session queued them in order: a stale command not expired would come first. */
	assert_true(device_session(id, "-C 1 -W 5 -v", got, sizeof got));
	if (strstr(got, "stale") || !strstr(got, "expiry/long/cmd fresh"))
		fail_msg("the returning device got: %s", got);
	mqp_pool_destroy(p); /* the long one completes with MQP_ECLOSED */
	assert_true(wait_flag(&later.calls, 1000));
	assert_int_equal(atomic_load(&later.result), MQP_ECLOSED);
}

/* An async request cancelled before its reply: MQP_ECANCELED at once, and the reply that comes
 * after is counted as late (ours, no longer awaited), never as a stray. */
static void a_cancelled_request_answered_late_is_counted_late(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "cancel/cmd", "--delay", "300ms", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	static struct async_call call;
	memset(&call, 0, sizeof call);
	mqp_ticket ticket = 0;
	assert_int_equal(
	    mqp_pool_request_async(p, "cancel/cmd", "x", 1, 0, 5000, on_async_reply, &call, &ticket),
	    MQP_OK);
	struct mqp_pool_stats st;
	WAIT_FOR_STATS(p, st, st.requests == 1, 3000); /* sent: the device will answer */
	assert_int_equal(mqp_pool_cancel(p, ticket), MQP_OK);
	assert_true(wait_flag(&call.calls, 1000));
	assert_int_equal(atomic_load(&call.result), MQP_ECANCELED);
	WAIT_FOR_STATS(p, st, st.late_replies == 1, 3000);
	assert_int_equal(st.late_replies, 1);
	assert_int_equal(st.strays, 0);
	assert_int_equal(st.cancels, 1);
	assert_int_equal(st.replies, 0);
	mqp_pool_destroy(p);
	assert_int_equal(tb_test_responder_stop(&r).replies, 1);
}

static void adversarial_device_never_crosses_replies(void **state)
{
	(void)state;
	/* Duplicates, replies with wrong correlation, and late replies after the caller's timeout. */
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "adv/+/cmd",
	    "--duplicate", "0.2", "--stray", "0.2", "--late", "0.05", "--late-delay", "400ms",
	    "--jitter", "5ms", "--seed", "11", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 4;
	o.max_inflight = 16;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	enum { THREADS = 8, EACH = 150 };
	pthread_t t[THREADS];
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker) { .pool = p, .id = i, .requests = EACH };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	int ok = 0, timeouts = 0, mismatches = 0, other = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		ok += w[i].ok;
		timeouts += w[i].timeouts;
		mismatches += w[i].mismatches;
		other += w[i].other;
	}
	struct mqp_pool_stats st; /* the late replies land after their callers gave up */
	WAIT_FOR_STATS(p, st, st.late_replies > 0 && st.strays > 0, 5000);
	print_message("ok %d timeouts %d other %d; stats: replies %llu late %llu strays %llu size %u\n",
	    ok, timeouts, other, (unsigned long long)st.replies, (unsigned long long)st.late_replies,
	    (unsigned long long)st.strays, st.size);
	assert_int_equal(mismatches, 0);
	assert_int_equal(other, 0);
	assert_int_equal(ok + timeouts, THREADS * EACH);
	assert_true(ok > THREADS * EACH * 8 / 10);
	assert_true(timeouts > 0);        /* the late replies fired... */
	assert_true(st.late_replies > 0); /* ...and arrived after their callers gave up */
	assert_true(st.strays > 0);       /* wrong correlation data was dropped */
	assert_int_equal(st.replies, (uint64_t)ok);
	assert_true(st.size <= 4);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct victim_call {
	mqp_pool *pool;
	int rc;
	struct mqp_reply reply;
};

static void *call_victim(void *arg)
{
	struct victim_call *v = arg;
	v->rc = mqp_pool_request(
	    v->pool, "devices/victim/commands/open", "honest", 6, 0, 5000, &v->reply);
	return NULL;
}

/* A device with the narrowest ACL that can still answer (read its own commands, write the
 * inboxes) sees one command sent to it, then tries to answer commands sent to another device
 * before that device does: every correlation value the old scheme would have used next, the one
 * it saw, and random ones. None may be accepted; the pool counts them all as strays or late. */
static void a_device_cannot_forge_replies_to_other_devices(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	struct tb_responder honest = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/victim/commands/+", "--delay", "300ms", NULL);
	struct tb_client_options ao
	    = { .url = i->mqtt_url, .username = i->other_username, .password = i->other_password };
	struct tb_client *mallory;
	int reason;
	char err[256];
	assert_int_equal(tb_client_connect(&ao, &mallory, &reason, err, sizeof err), 0);
	assert_int_equal(tb_client_subscribe(mallory, "devices/mqp-limited/commands/+", 1, 0, NULL), 1);

	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 1;
	o.max_size = 1;
	mqp_pool *p = new_pool(i->mqtt_url, &o);
	struct mqp_reply r;
	assert_int_equal(mqp_pool_request(p, "devices/mqp-limited/commands/peek", "x", 1, 0, 300, &r),
	    MQP_ETIMEDOUT);
	struct tb_message *seen = tb_client_receive(mallory, 2000);
	assert_non_null(seen);
	char *response_topic = NULL;
	void *corr = NULL;
	uint16_t corr_len = 0;
	assert_non_null(mosquitto_property_read_string(
	    seen->props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false));
	assert_non_null(mosquitto_property_read_binary(
	    seen->props, MQTT_PROP_CORRELATION_DATA, &corr, &corr_len, false));
	assert_int_equal(corr_len, 16);

	struct mqp_pool_stats before, after;
	mqp_pool_stats(p, &before, sizeof before);
	int forged = 0;
	for (int k = 0; k < 6; k++) {
		struct victim_call v = { .pool = p };
		pthread_t t;
		pthread_create(&t, NULL, call_victim, &v);
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL); /* the command is out */
		for (int guess = 0; guess < 12; guess++) {
			unsigned char c[16];
			memcpy(c, corr, 16);
			if (guess < 8) { /* the old scheme: the same nonce, the counter + 1, + 2, ... */
				uint64_t seq = 0;
				for (int b = 0; b < 8; b++)
					seq |= (uint64_t)c[8 + b] << (8 * b);
				seq += (uint64_t)(k + guess + 1);
				for (int b = 0; b < 8; b++)
					c[8 + b] = (unsigned char)(seq >> (8 * b));
			} else if (guess == 8) { /* a replay of what it saw */
			} else {                 /* random */
				for (int b = 0; b < 16; b++)
					c[b] = (unsigned char)random();
			}
			mosquitto_property *props = NULL;
			mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, c, 16);
			assert_int_equal(
			    tb_client_publish(mallory, response_topic, "forged", 6, 1, false, props), 0);
			mosquitto_property_free_all(&props);
			forged++;
		}
		pthread_join(t, NULL);
		assert_int_equal(v.rc, MQP_OK);
		assert_string_equal(v.reply.payload, "honest");
		mqp_reply_free(&v.reply);
	}
	/* Every forgery reached the pool and was counted, none delivered. */
	for (int w = 0; w < 200; w++) {
		mqp_pool_stats(p, &after, sizeof after);
		if (after.strays + after.late_replies - before.strays - before.late_replies
		    >= (uint64_t)forged)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	}
	assert_int_equal(
	    after.strays + after.late_replies - before.strays - before.late_replies, forged);
	assert_int_equal(
	    after.late_replies - before.late_replies, 6); /* the replays: ours, not awaited */
	free(response_topic);
	free(corr);
	tb_message_free(seen);
	tb_client_destroy(mallory);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&honest);
}

static void tls_with_one_shared_context(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "tls/cmd", NULL);
	const struct tb_info *i = tb_test_info();
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 3;
	mqp_pool *p = new_pool(i->mqtts_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "secure", 6, 0, 5000, &reply), MQP_OK);
	assert_string_equal(reply.payload, "secure");
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	/* The wrong CA: a clear connect error, not a timeout. */
	struct mqp_pool_options wrong = MQP_POOL_OPTIONS_INIT;
	wrong.cafile = i->client_cert;
	wrong.min_size = 0;
	p = new_pool(i->mqtts_url, &wrong);
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "x", 1, 0, 5000, &reply), MQP_ECONNECT);
	char why[512];
	mqp_pool_last_error(p, why, sizeof why);
	if (!strstr(why, "certificate verification failed") || !strstr(why, "127.0.0.1"))
		fail_msg("the wrong CA: %s", why);
	mqp_pool_destroy(p);
	/* The right CA, a certificate for another host: refused for its name, and said so - by
	 * address (its IP is not in the certificate) and by host name (localhost is not either). */
	char by_name[80];
	snprintf(by_name, sizeof by_name, "mqtts://localhost:%d", i->other_host_port);
	const char *urls[] = { i->other_host_url, by_name };
	const char *want[] = { "IP address mismatch", "hostname mismatch" };
	for (int k = 0; k < 2; k++) {
		struct mqp_pool_options other = MQP_POOL_OPTIONS_INIT;
		other.min_size = 0;
		p = new_pool(urls[k], &other);
		assert_int_equal(mqp_pool_request(p, "tls/cmd", "x", 1, 0, 5000, &reply), MQP_ECONNECT);
		mqp_pool_last_error(p, why, sizeof why);
		if (!strstr(why, "certificate verification failed") || !strstr(why, want[k]))
			fail_msg("%s, a certificate for another host: %s", urls[k], why);
		mqp_pool_destroy(p);
	}
	/* The same listener by the name its certificate does have is accepted (the server
	 * certificate of the main TLS listener names localhost): the name is what was refused. */
	snprintf(by_name, sizeof by_name, "mqtts://localhost:%d", i->tls_port);
	p = new_pool(by_name, NULL);
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "by-name", 7, 0, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	/* No cafile: the system's trust store, which does not know the test CA: refused too. */
	struct mqp_pool_options system = MQP_POOL_OPTIONS_INIT;
	system.min_size = 0;
	char err[256];
	assert_int_equal(mqp_pool_new(i->mqtts_url, &system, &p, err, sizeof err), MQP_OK);
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "x", 1, 0, 5000, &reply), MQP_ECONNECT);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(request_round_trip),
		cmocka_unit_test(bad_arguments_are_refused),
		cmocka_unit_test(options_and_stats_carry_their_size),
		cmocka_unit_test(a_returned_call_is_not_outstanding),
		cmocka_unit_test(two_pools_in_one_process_do_not_collide),
		cmocka_unit_test(timeout_when_the_device_never_answers),
		cmocka_unit_test(a_command_nobody_listens_for_fails_at_once),
		cmocka_unit_test(a_payload_mqtt_cannot_carry_is_too_big),
		cmocka_unit_test(a_broker_that_takes_small_packets_gets_what_fits),
		cmocka_unit_test(commands_expire_with_their_timeout),
		cmocka_unit_test(a_cancelled_request_answered_late_is_counted_late),
		cmocka_unit_test(adversarial_device_never_crosses_replies),
		cmocka_unit_test(a_device_cannot_forge_replies_to_other_devices),
		cmocka_unit_test(tls_with_one_shared_context),
	};
	return TB_TEST_RUN(tests, NULL);
}
