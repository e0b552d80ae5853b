/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - legacy devices that answer on a fixed reply topic.
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

struct legacy_worker {
	mqp_pool *pool;
	int id, ok, mismatches;
};

static void *legacy_work(void *arg)
{
	struct legacy_worker *w = arg;
	for (int k = 0; k < 10; k++) {
		char nonce[48];
		int n = snprintf(nonce, sizeof nonce, "legacy-%d-%d", w->id, k);
		struct mqp_reply reply;
		if (mqp_pool_request_legacy(w->pool, "leg/d1/cmd", nonce, (size_t)n, 1,
		        "replies/leg/d1/cmd", NULL, NULL, 5000, &reply)
		    == MQP_OK) {
			w->ok++;
			if (reply.len != (size_t)n || memcmp(reply.payload, nonce, (size_t)n) != 0)
				w->mismatches++;
			mqp_reply_free(&reply);
		}
	}
	return NULL;
}

static int payload_starts_with_ok(void *userdata, const struct mqp_message *m)
{
	(void)userdata;
	return m->len >= 2 && memcmp(m->payload, "ok", 2) == 0;
}

static void legacy_fixed_reply_topic_is_safe(void **state)
{
	(void)state;
	/* A 3.1.1 device that answers on replies/{topic}, echoing the payload. */
	struct tb_responder r = tb_test_responder(
	    RESPONDER_PATH, "--filter", "leg/+/cmd", "--protocol", "3.1.1", "--qos", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request_legacy(
	                     p, "leg/d1/cmd", "x", 1, 1, "leg/+/reply", NULL, NULL, 1000, &reply),
	    MQP_EINVAL); /* wildcard */
	assert_int_equal(
	    mqp_pool_request_legacy(p, "leg/d1/cmd", "x", 1, 1, "leg/d1/cmd", NULL, NULL, 1000, &reply),
	    MQP_EINVAL); /* matches the command */
	/* Four threads share one reply topic: served one at a time, each gets its own echo. */
	enum { N = 4 };
	pthread_t t[N];
	struct legacy_worker w[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct legacy_worker) { .pool = p, .id = i };
		pthread_create(&t[i], NULL, legacy_work, &w[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].ok, 10);
		assert_int_equal(w[i].mismatches, 0);
	}
	/* A match callback skips what is not the reply. */
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "no", 2, 1, "replies/leg/d1/cmd",
	                     payload_starts_with_ok, NULL, 300, &reply),
	    MQP_ETIMEDOUT);
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "ok!", 3, 1, "replies/leg/d1/cmd",
	                     payload_starts_with_ok, NULL, 3000, &reply),
	    MQP_OK);
	assert_string_equal(reply.payload, "ok!");
	mqp_reply_free(&reply);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.leased, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* Caller A times out on a fixed reply topic; the device answers A late, while caller B waits
 * on the same topic. B must get its own reply, never A's (it did in 3 of 3 trials before).
 * Without a match callback nothing tells A's reply from B's: the pool holds B back for A's
 * timeout (800 ms) after A gave up, and A's reply (1200 ms after A's command) lands in the middle
 * of that, 400 ms from either end, so a slow machine cannot move it out. That it did land there
 * is checked (one late reply a trial), so the test cannot pass without the case happening. */
static void legacy_a_late_reply_never_reaches_the_next_caller(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "slowleg/+/cmd",
	    "--protocol", "3.1.1", "--qos", "1", "--delay", "1200ms", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	struct mqp_pool_stats st;
	for (int trial = 0; trial < 3; trial++) {
		mqp_pool_stats(p, &st, sizeof st);
		uint64_t late = st.late_replies;
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-A", 6, 1,
		                     "replies/slowleg/d1/cmd", NULL, NULL, 800, &reply),
		    MQP_ETIMEDOUT);
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-B", 6, 1,
		                     "replies/slowleg/d1/cmd", NULL, NULL, 5000, &reply),
		    MQP_OK);
		assert_string_equal(reply.payload, "from-B");
		mqp_reply_free(&reply);
		/* The device answers in order: A's reply came before B's. */
		mqp_pool_stats(p, &st, sizeof st);
		if (st.late_replies != late + 1)
			fail_msg("trial %d: %llu late replies, want 1 (A's, while B was held back)", trial,
			    (unsigned long long)(st.late_replies - late));
	}
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static int payload_is(void *userdata, const struct mqp_message *m)
{
	const char *want = userdata;
	return m->len == strlen(want) && memcmp(m->payload, want, m->len) == 0;
}

struct warm_worker {
	mqp_pool *pool;
	int id, ok;
};

/* One device per worker: its own reply topic, a request id in the payload, a match callback. */
static void *warm_work(void *arg)
{
	struct warm_worker *w = arg;
	char topic[64], reply_topic[80];
	snprintf(topic, sizeof topic, "warm/w%d/cmd", w->id);
	snprintf(reply_topic, sizeof reply_topic, "replies/%s", topic);
	for (int k = 0; k < 100; k++) {
		char id[48];
		int n = snprintf(id, sizeof id, "req-%d-%d", w->id, k);
		struct mqp_reply reply;
		if (mqp_pool_request_legacy(
		        w->pool, topic, id, (size_t)n, 0, reply_topic, payload_is, id, 5000, &reply)
		    == MQP_OK) {
			w->ok += reply.len == (size_t)n && memcmp(reply.payload, id, (size_t)n) == 0;
			mqp_reply_free(&reply);
		}
	}
	return NULL;
}

struct async_count {
	atomic_int done, ok;
};

static void on_legacy_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct async_count *a = userdata;
	if (result == MQP_OK && reply->len > 0)
		atomic_fetch_add(&a->ok, 1);
	atomic_fetch_add(&a->done, 1);
}

/* MQTT 3.1.1 and 5: a legacy request reuses the pool's warm connections, which stay subscribed to
 * the reply topics they used, instead of opening a connection per request. */
static void legacy_requests_keep_connections_warm(void **state)
{
	(void)state;
	for (int protocol = 4; protocol <= 5; protocol++) {
		struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "warm/+/cmd",
		    "--protocol", protocol == 4 ? "3.1.1" : "5", NULL);
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		o.protocol = protocol;
		o.min_size = 2;
		o.max_size = 4;
		mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
		enum { N = 4 };
		pthread_t t[N];
		struct warm_worker w[N];
		for (int i = 0; i < N; i++) {
			w[i] = (struct warm_worker) { .pool = p, .id = i };
			pthread_create(&t[i], NULL, warm_work, &w[i]);
		}
		for (int i = 0; i < N; i++) {
			pthread_join(t[i], NULL);
			assert_int_equal(w[i].ok, 100);
		}
		/* Async, all in flight at once on other devices' topics. */
		struct async_count a = { 0 };
		char topics[20][2][48];
		for (int i = 0; i < 20; i++) {
			snprintf(topics[i][0], sizeof topics[i][0], "warm/a%d/cmd", i);
			snprintf(topics[i][1], sizeof topics[i][1], "replies/warm/a%d/cmd", i);
			assert_int_equal(mqp_pool_request_legacy_async(p, topics[i][0], "hi", 2, 1,
			                     topics[i][1], NULL, NULL, 5000, on_legacy_reply, &a, NULL),
			    MQP_OK);
		}
		uint64_t until = mqc_now_ns() + 6 * MQC_NS_PER_S;
		while (atomic_load(&a.done) < 20 && mqc_now_ns() < until)
			nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
		assert_int_equal(atomic_load(&a.ok), 20);
		struct mqp_pool_stats st;
		mqp_pool_stats(p, &st, sizeof st);
		/* 420 requests, and no more connections than max_size: warm, not one per request */
		if (st.connects_ok > 4 || st.requests != 420 || st.replies != 420)
			fail_msg("protocol %d: %llu connections for %llu requests, %llu replies", protocol,
			    (unsigned long long)st.connects_ok, (unsigned long long)st.requests,
			    (unsigned long long)st.replies);
		mqp_pool_destroy(p);
		tb_test_responder_stop(&r);
	}
}

/* Two pools in one process take turns on one device's reply topic, without a match callback:
 * each stays subscribed to it, so each receives a copy of the other's replies. A copy still on
 * its way when the next request goes out on that connection must not pass for its reply (the
 * gateway's two workers met this under ASan: a request answered with the previous one's
 * reply). */
static void a_reply_topic_shared_by_two_pools_never_gives_a_stale_reply(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "turns/+/cmd", "--protocol", "3.1.1", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 1;
	mqp_pool *p[2]
	    = { new_pool(tb_test_info()->mqtt_url, &o), new_pool(tb_test_info()->mqtt_url, &o) };
	int wrong = 0, ok = 0;
	for (int k = 0; k < 400; k++) { /* without the barrier about 1 in 6 came back stale */
		char id[32];
		int n = snprintf(id, sizeof id, "turn-%d", k);
		struct mqp_reply reply;
		int rc = mqp_pool_request_legacy(p[k % 2], "turns/d/cmd", id, (size_t)n, 0,
		    "replies/turns/d/cmd", NULL, NULL, 3000, &reply);
		if (rc != MQP_OK)
			continue;
		if (reply.len == (size_t)n && memcmp(reply.payload, id, (size_t)n) == 0)
			ok++;
		else
			wrong++;
		mqp_reply_free(&reply);
	}
	if (wrong || ok < 390)
		fail_msg("%d requests got another's reply, %d their own", wrong, ok);
	mqp_pool_destroy(p[0]);
	mqp_pool_destroy(p[1]);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(legacy_fixed_reply_topic_is_safe),
		cmocka_unit_test(legacy_a_late_reply_never_reaches_the_next_caller),
		cmocka_unit_test(legacy_requests_keep_connections_warm),
		cmocka_unit_test(a_reply_topic_shared_by_two_pools_never_gives_a_stale_reply),
	};
	return TB_TEST_RUN(tests, NULL);
}
