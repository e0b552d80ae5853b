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
		if (mqp_pool_request_legacy(w->pool, "leg/d1/cmd", nonce, (size_t)n, 1, "leg/d1/cmd/reply",
		        NULL, NULL, 5000, &reply)
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
	/* A 3.1.1 device that answers on {topic}/reply, echoing the payload. */
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
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "no", 2, 1, "leg/d1/cmd/reply",
	                     payload_starts_with_ok, NULL, 300, &reply),
	    MQP_ETIMEDOUT);
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "ok!", 3, 1, "leg/d1/cmd/reply",
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
 * on the same topic. B must get its own reply, never A's (it did in 3 of 3 trials before). */
static void legacy_a_late_reply_never_reaches_the_next_caller(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "slowleg/+/cmd",
	    "--protocol", "3.1.1", "--qos", "1", "--delay", "600ms", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	for (int trial = 0; trial < 3; trial++) {
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-A", 6, 1,
		                     "slowleg/d1/cmd/reply", NULL, NULL, 400, &reply),
		    MQP_ETIMEDOUT);
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-B", 6, 1,
		                     "slowleg/d1/cmd/reply", NULL, NULL, 3000, &reply),
		    MQP_OK);
		assert_string_equal(reply.payload, "from-B");
		mqp_reply_free(&reply);
	}
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(legacy_fixed_reply_topic_is_safe),
		cmocka_unit_test(legacy_a_late_reply_never_reaches_the_next_caller),
	};
	return TB_TEST_RUN(tests, NULL);
}
