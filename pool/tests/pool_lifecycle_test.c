/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - a pool's life: destroy (also from a callback), drain, idle
 * and retiring connections.
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

struct waiter {
	mqp_pool *pool;
	int rc;
};

/* The library linked is the one the headers describe, and the macros agree with each other. */
static void the_version_is_one(void **state)
{
	(void)state;
	assert_string_equal(mqp_version(), MQP_VERSION_STRING);
	char joined[32];
	snprintf(
	    joined, sizeof joined, "%d.%d.%d", MQP_VERSION_MAJOR, MQP_VERSION_MINOR, MQP_VERSION_PATCH);
	assert_string_equal(joined, MQP_VERSION_STRING);
	assert_int_equal(MQP_VERSION_NUMBER,
	    MQP_VERSION_MAJOR * 65536 + MQP_VERSION_MINOR * 256 + MQP_VERSION_PATCH);
	assert_string_equal(MQP_VERSION_STRING, MQTTPOOL_VERSION); /* CMake's project version */
}

static void *wait_forever(void *arg)
{
	struct waiter *w = arg;
	struct mqp_reply reply;
	w->rc = mqp_pool_request(w->pool, "mute/cmd", "x", 1, 0, 30000, &reply);
	return NULL;
}

static void destroy_completes_waiting_callers(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 5 };
	pthread_t t[N];
	struct waiter w[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct waiter) { .pool = p, .rc = -1 };
		pthread_create(&t[i], NULL, wait_forever, &w[i]);
	}
	struct mqp_pool_stats st; /* every request sent, every caller waiting for its reply */
	WAIT_FOR_STATS(p, st, st.inflight == N, 5000);
	assert_int_equal(st.inflight, N);
	uint64_t t0 = mqc_now_ns();
	mqp_pool_destroy(p);
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].rc, MQP_ECLOSED);
	}
	assert_true(mqc_now_ns() - t0 < MQC_NS_PER_S);
	tb_test_responder_stop(&r);
}

static void idle_connections_above_min_close(void **state)
{
	(void)state;
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 3;
	o.min_size = 1;
	o.idle_timeout_ms = 300;
	o.eviction_interval_ms = 100;
	o.client_id_prefix = "idle";
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease l[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(mqp_pool_acquire(p, 3000, &l[i]), MQP_OK);
	/* Before the releases: the pool's idle clock starts when it takes each one, which may be
	 * before a release returns. */
	uint64_t released = mqc_now_ns();
	for (int i = 0; i < 3; i++)
		assert_int_equal(mqp_lease_release(&l[i]), MQP_OK);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.size, 3);
	WAIT_FOR_STATS(p, st, st.closes_idle == 2, 5000);
	assert_int_equal(st.closes_idle, 2);
	assert_true(mqc_now_ns() - released >= 300 * MQC_NS_PER_MS);  /* not before idle_timeout */
	nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL); /* three more evictions */
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.size, 1); /* back to min_size, never below */
	assert_int_equal(st.closes_idle, 2);
	/* Each went as a client should: DISCONNECT ("disconnected."), never a bare close. */
	assert_int_equal(tb_test_log_count("Client idle-", " disconnected."), 2);
	assert_int_equal(tb_test_log_count("Client idle-", "closed its connection"), 0);
	mqp_pool_destroy(p);
}

static void old_connections_retire_without_failing_requests(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "life/cmd", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 1;
	o.min_size = 1;
	o.max_lifetime_ms = 300;
	o.eviction_interval_ms = 50;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	/* Requests every 20 ms until two connections have retired (at most 10 s): every one is
	 * answered, whichever connection carries it. */
	struct mqp_pool_stats st;
	int requests = 0;
	uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S;
	do {
		struct mqp_reply reply;
		assert_int_equal(mqp_pool_request(p, "life/cmd", "x", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
		requests++;
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
		mqp_pool_stats(p, &st, sizeof st);
	} while (st.closes_lifetime < 2 && mqc_now_ns() < until);
	print_message("lifetime: %d requests while %llu connections retired\n", requests,
	    (unsigned long long)st.closes_lifetime);
	assert_true(st.closes_lifetime >= 2);
	/* The second retirement may have come in the last 20 ms: its replacement then is still on
	 * its way (connects_ok counts it once ready). */
	WAIT_FOR_STATS(p, st, st.connects_ok >= 3, 3000);
	assert_true(st.connects_ok >= 3);
	assert_int_equal(st.connections_lost, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* A callback that takes its time: drain must not return before it has returned. */
static void on_slow_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)result;
	(void)reply;
	nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
	atomic_store((atomic_int *)userdata, 1);
}

static void drain_returns_only_after_the_last_callback_has(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "drain/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	atomic_int returned = 0;
	assert_int_equal(
	    mqp_pool_request_async(p, "drain/cmd", "x", 1, 0, 3000, on_slow_reply, &returned, NULL),
	    MQP_OK);
	struct mqp_pool_stats st; /* the reply is in: its callback has started (and sleeps) */
	WAIT_FOR_STATS(p, st, st.replies == 1, 5000);
	assert_int_equal(st.replies, 1);
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_drain(p, 5000), MQP_OK);
	assert_int_equal(atomic_load(&returned), 1);
	assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S); /* woken, not waiting out its timeout */
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* mqp_pool_destroy from the pool's own callback: deferred, no use after free (ASan). */
struct destroyer {
	mqp_pool *pool;
	atomic_int calls;
};

static void destroy_from_callback(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)result;
	(void)reply;
	struct destroyer *d = userdata;
	if (atomic_fetch_add(&d->calls, 1) == 0) {
		mqp_pool_destroy(d->pool);
		struct mqp_pool_stats st; /* still usable until this callback returns */
		mqp_pool_stats(d->pool, &st, sizeof st);
	}
}

static void destroy_from_a_callback_is_deferred(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "destroy/cmd", NULL);
	struct destroyer d = { .pool = new_pool(tb_test_info()->mqtt_url, NULL) };
	/* The one nobody answers first: once the answered one is posted, its reply may come and its
	 * callback free the pool at any moment, so this thread calls the pool no more. */
	assert_int_equal(mqp_pool_request_async(d.pool, "nobody/answers", "x", 1, 0, 30000,
	                     destroy_from_callback, &d, NULL),
	    MQP_OK);
	assert_int_equal(mqp_pool_request_async(
	                     d.pool, "destroy/cmd", "x", 1, 0, 3000, destroy_from_callback, &d, NULL),
	    MQP_OK);
	for (int k = 0; k < 300 && atomic_load(&d.calls) < 2; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(atomic_load(&d.calls), 2); /* the second completed with MQP_ECLOSED */
	nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL); /* the pool frees itself */
	tb_test_responder_stop(&r);
}

static void drain_waits_for_calls_and_leases_then_refuses_new_work(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 6 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		assert_int_equal(
		    mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 300, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_pool_drain(p, 600), MQP_ETIMEDOUT); /* the lease is still out */
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&calls[i].calls), 1); /* the calls did finish */
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "x", 1, 0, 100, &reply), MQP_ECLOSED);
	mqp_lease other;
	assert_int_equal(mqp_pool_acquire(p, 100, &other), MQP_ECLOSED);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK); /* lease calls still work */
	assert_int_equal(mqp_pool_drain(p, 1000), MQP_OK);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_version_is_one),
		cmocka_unit_test(destroy_completes_waiting_callers),
		cmocka_unit_test(idle_connections_above_min_close),
		cmocka_unit_test(old_connections_retire_without_failing_requests),
		cmocka_unit_test(drain_returns_only_after_the_last_callback_has),
		cmocka_unit_test(destroy_from_a_callback_is_deferred),
		cmocka_unit_test(drain_waits_for_calls_and_leases_then_refuses_new_work),
	};
	return TB_TEST_RUN(tests, NULL);
}
