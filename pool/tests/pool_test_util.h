/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * pool_test_util.h - what several of the pool's integration tests share.
 */
#ifndef POOL_TEST_UTIL_H
#define POOL_TEST_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "mqc_clock.h"

#include "mqttpool.h"
#include "tb_client.h"

/* A pool on the test broker as the test user (the broker's CA for mqtts://); fails the test if
 * it cannot be made. o may be NULL; its username, password and cafile are filled in. */
mqp_pool *new_pool(const char *url, struct mqp_pool_options *o);

/* The test user's credentials (and the broker's CA for mqtts://) into o. */
void test_broker_options(const char *url, struct mqp_pool_options *o);

/* "uv" or "event" when MQP_TEST_LOOP runs every new_pool on an event loop of that kind (in a
 * thread of its own), else NULL. */
const char *test_loop_kind(void);

/* A plain MQTT 5 client of the test broker, as the test user. */
struct tb_client *outside_client(void);

/* A thread sending requests to adv/dev/cmd (150 ms each) with payloads nobody else sends, and
 * counting a reply that is not its own as a mismatch. */
struct worker {
	mqp_pool *pool;
	int id, requests, ok, timeouts, mismatches, other;
};
void *work(void *arg);

/* An async request's completion: mqp_request_cb. With pool set, the callback also checks that a
 * blocking call from the pool's thread is refused (MQP_EDEADLK). */
struct async_call {
	char nonce[32];
	atomic_int calls; /* must end at exactly 1 */
	atomic_int result;
	atomic_int matched;
	mqp_pool *pool;
};
void on_async_reply(void *userdata, int result, const struct mqp_reply *reply);

/* An async publish's completion: mqp_done_cb. */
struct done_call {
	atomic_int calls, result;
};
void on_published(void *userdata, int result);

/* Read p's statistics into st every 5 ms until cond (an expression of st) holds or timeout_ms
 * passed; the caller then asserts cond. A test waits for the event it needs, not a fixed time. */
#define WAIT_FOR_STATS(p, st, cond, timeout_ms)                                \
	do {                                                                       \
		uint64_t until_ = mqc_now_ns() + (uint64_t)(timeout_ms)*MQC_NS_PER_MS; \
		mqp_pool_stats((p), &(st), sizeof(st));                                \
		while (!(cond) && mqc_now_ns() < until_) {                             \
			nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);        \
			mqp_pool_stats((p), &(st), sizeof(st));                            \
		}                                                                      \
	} while (0)

/* Whether *flag became nonzero within timeout_ms. */
bool wait_flag(atomic_int *flag, int timeout_ms);

#endif
