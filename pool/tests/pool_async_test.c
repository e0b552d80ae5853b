/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - async calls: callbacks exactly once, timeouts, cancels,
 * publish and discard.
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

static bool wait_calls(struct async_call *calls, int n, int timeout_ms)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	for (;;) {
		int done = 0;
		for (int i = 0; i < n; i++)
			done += atomic_load(&calls[i].calls) > 0;
		if (done == n)
			return true;
		if (mqc_now_ns() > deadline)
			return false;
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	}
}

static void async_requests_complete_exactly_once(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "async/cmd", "--duplicate", "0.3", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 300 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "async-%d-%ld", i, random());
		calls[i].pool = i == 0 ? p : NULL;
		assert_int_equal(mqp_pool_request_async(p, "async/cmd", calls[i].nonce,
		                     strlen(calls[i].nonce), 0, 3000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	assert_true(wait_calls(calls, N, 10000));
	nanosleep(
	    &(struct timespec) { .tv_nsec = 200000000 }, NULL); /* duplicates must not call again */
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), MQP_OK);
		assert_int_equal(atomic_load(&calls[i].matched), 1);
	}
	assert_int_equal(
	    mqp_pool_request_async(p, "async/+", "x", 1, 0, 100, on_async_reply, NULL, NULL),
	    MQP_EINVAL);
	assert_int_equal(
	    mqp_pool_request_async(p, "async/cmd", "x", 1, 0, 100, NULL, NULL, NULL), MQP_EINVAL);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void async_timeouts_and_destroy_complete_every_call(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 20 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		/* Half time out on their own; half are still waiting when the pool goes. */
		assert_int_equal(mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, i % 2 ? 100 : 30000,
		                     on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	struct mqp_pool_stats st; /* the short ones have timed out */
	WAIT_FOR_STATS(p, st, st.timeouts == N / 2, 5000);
	assert_int_equal(st.timeouts, N / 2);
	mqp_pool_destroy(p); /* returns after every callback has run */
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), i % 2 ? MQP_ETIMEDOUT : MQP_ECLOSED);
	}
	tb_test_responder_stop(&r);
}

static void async_publish_and_discard(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct tb_client *out = outside_client();
	assert_int_equal(tb_client_subscribe(out, "pubasync/#", 1, 0, NULL), 1);
	static struct done_call d;
	atomic_store(&d.calls, 0);
	assert_int_equal(
	    mqp_pool_publish_async(p, "pubasync/x", "hi", 2, 1, 0, 3000, on_published, &d, NULL),
	    MQP_OK);
	struct tb_message *m = tb_client_receive(out, 3000);
	assert_non_null(m);
	assert_string_equal(m->payload, "hi");
	tb_message_free(m);
	uint64_t deadline = mqc_now_ns() + 3 * MQC_NS_PER_S;
	while (atomic_load(&d.calls) == 0 && mqc_now_ns() < deadline)
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	assert_int_equal(atomic_load(&d.calls), 1);
	assert_int_equal(atomic_load(&d.result), MQP_OK);
	/* Discard: the connection is closed, the handle is spent, the pool replaces it. */
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_discard(&lease), MQP_OK);
	assert_int_equal(mqp_lease_discard(&lease), MQP_ERELEASED);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.leased, 0);
	assert_int_equal(st.double_releases, 1);
	assert_int_equal(st.connections_lost, 0); /* our own close is not a loss */
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

struct async_lease {
	atomic_int calls, result;
	atomic_int released; /* the callback gave the lease back from the pool's thread */
	bool release_in_callback;
};

static void on_lease(void *userdata, int result, mqp_lease lease)
{
	struct async_lease *a = userdata;
	atomic_store(&a->result, result);
	if (result == MQP_OK && a->release_in_callback)
		atomic_store(&a->released, mqp_lease_release(&lease) == MQP_OK ? 1 : -1);
	atomic_fetch_add(&a->calls, 1);
}

static void async_calls_can_be_cancelled(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 10 };
	static struct async_call calls[N];
	mqp_ticket tickets[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		assert_int_equal(mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 30000, on_async_reply,
		                     &calls[i], &tickets[i]),
		    MQP_OK);
		assert_true(tickets[i] != 0 && (i == 0 || tickets[i] != tickets[i - 1]));
	}
	uint64_t t0 = mqc_now_ns();
	for (int i = 0; i < N; i += 2)
		assert_int_equal(mqp_pool_cancel(p, tickets[i]), MQP_OK);
	for (int i = 0; i < N; i += 2)
		assert_true(wait_flag(&calls[i].calls, 3000));
	assert_true(mqc_now_ns() - t0 < 3 * MQC_NS_PER_S); /* not at the 30 s deadline */
	nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL);
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), i % 2 ? 0 : 1);
		if (i % 2 == 0)
			assert_int_equal(atomic_load(&calls[i].result), MQP_ECANCELED);
	}
	/* Cancelling twice, or a call that is gone, changes nothing. */
	assert_int_equal(mqp_pool_cancel(p, tickets[0]), MQP_OK);
	assert_int_equal(mqp_pool_cancel(p, 0), MQP_EINVAL);

	/* Async acquire: waits in the same FIFO as blocking acquirers; cancellable while it waits. */
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 1;
	o.min_size = 1;
	mqp_pool *q = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease held;
	assert_int_equal(mqp_pool_acquire(q, 3000, &held), MQP_OK);
	static struct async_lease x, y;
	memset(&x, 0, sizeof x);
	memset(&y, 0, sizeof y);
	y.release_in_callback = true;
	mqp_ticket tx, ty;
	assert_int_equal(mqp_pool_acquire_async(q, 30000, on_lease, &x, &tx), MQP_OK);
	assert_int_equal(mqp_pool_acquire_async(q, 30000, on_lease, &y, &ty), MQP_OK);
	assert_int_equal(mqp_pool_cancel(q, tx), MQP_OK);
	assert_true(wait_flag(&x.calls, 3000));
	assert_int_equal(atomic_load(&x.result), MQP_ECANCELED);
	assert_int_equal(atomic_load(&y.calls), 0); /* still waiting behind the held lease */
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	assert_true(wait_flag(&y.calls, 3000));
	assert_int_equal(atomic_load(&y.result), MQP_OK);
	assert_int_equal(atomic_load(&y.released), 1);
	assert_int_equal(mqp_pool_cancel(q, ty), MQP_OK); /* granted already: no second callback */
	mqp_lease again; /* the lease released from the callback is back in the pool */
	assert_int_equal(mqp_pool_acquire(q, 3000, &again), MQP_OK);
	assert_int_equal(mqp_lease_release(&again), MQP_OK);
	assert_int_equal(atomic_load(&x.calls), 1);
	assert_int_equal(atomic_load(&y.calls), 1);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.cancels, N / 2);
	mqp_pool_stats(q, &st, sizeof st);
	assert_int_equal(st.cancels, 1);
	assert_true(st.waits >= 2);
	assert_int_equal(st.leased, 0);
	mqp_pool_destroy(q);
	mqp_pool_destroy(p); /* the other half complete now, with MQP_ECLOSED */
	for (int i = 1; i < N; i += 2) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), MQP_ECLOSED);
	}
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(async_requests_complete_exactly_once),
		cmocka_unit_test(async_timeouts_and_destroy_complete_every_call),
		cmocka_unit_test(async_calls_can_be_cancelled),
		cmocka_unit_test(async_publish_and_discard),
	};
	return TB_TEST_RUN(tests, NULL);
}
