/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests: a pool on the application's event loop, called from the loop's own thread
 * (the fast path, no hand-off), on libuv and on libevent (the adapters in include/: the loop
 * watches each of the pool's descriptors), and on a loop of the test's own that watches the one
 * descriptor mqp_pool_fd() with poll(2) (the integration without options.loop_watch). The rest
 * of the suite runs on both adapters too, from other threads (MQP_TEST_LOOP; see
 * pool_test_util.c).
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqttpool.h"
#include "mqttpool_event.h"
#include "mqttpool_uv.h"
#include "pool_test_util.h"
#include "tb_test.h"

enum { LOOP_UV, LOOP_EVENT, LOOP_POLL, LOOP_KINDS };

/* The test's own thread runs the loop. */
struct tloop {
	int kind;
	uv_loop_t uv;
	struct event_base *base;
	/* LOOP_POLL: mqp_pool_fd() under poll(2) and one deadline, as a hand-written loop would */
	struct mqp_loop hooks;
	mqp_pool *pool;
	uint64_t due; /* 0: no timer */
	bool cleaned;
};

static const char *kind_name(const struct tloop *l)
{
	return l->kind == LOOP_EVENT ? "libevent" : l->kind == LOOP_UV ? "libuv" : "poll(2)";
}

static void tloop_schedule(void *data, long timeout_ms)
{
	struct tloop *l = data;
	l->due = timeout_ms < 0 ? 0 : mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
}

static void tloop_cleanup(void *data)
{
	struct tloop *l = data;
	l->pool = NULL; /* going: never run again */
	l->cleaned = true;
}

static void tloop_init(struct tloop *l, int kind)
{
	*l = (struct tloop) { .kind = kind };
	if (kind == LOOP_EVENT) {
		l->base = event_base_new();
		assert_non_null(l->base);
	} else if (kind == LOOP_UV) {
		assert_int_equal(uv_loop_init(&l->uv), 0);
	} else {
		l->hooks
		    = (struct mqp_loop) { .schedule = tloop_schedule, .cleanup = tloop_cleanup, .data = l };
	}
}

/* One turn of the poll(2) loop: wait for the descriptor or the deadline (at most 100 ms). */
static void tloop_poll_once(struct tloop *l)
{
	if (!l->pool)
		return;
	uint64_t now = mqc_now_ns();
	int ms = 100;
	if (l->due)
		ms = l->due <= now ? 0 : (int)((l->due - now) / MQC_NS_PER_MS + 1);
	if (ms > 100)
		ms = 100;
	struct pollfd pfd = { .fd = mqp_pool_fd(l->pool), .events = POLLIN };
	int n = poll(&pfd, 1, ms);
	if (n > 0 || (l->due && mqc_now_ns() >= l->due)) {
		l->due = 0;
		mqp_pool_process(l->pool); /* may destroy it: cleanup clears l->pool */
	}
}

static mqp_pool *tloop_pool(struct tloop *l, const char *url, struct mqp_pool_options *o)
{
	struct mqp_pool_options defaults = MQP_POOL_OPTIONS_INIT;
	if (!o)
		o = &defaults;
	test_broker_options(url, o);
	mqp_pool *p = NULL;
	char err[256] = "";
	mqp_err rc;
	if (l->kind == LOOP_POLL) {
		o->loop = &l->hooks;
		rc = mqp_pool_new(url, o, &p, err, sizeof err);
		o->loop = NULL;
		l->pool = p;
	} else {
		rc = l->kind == LOOP_EVENT ? mqp_event_pool_new(l->base, url, o, &p, err, sizeof err)
		                           : mqp_uv_pool_new(&l->uv, url, o, &p, err, sizeof err);
	}
	if (rc != MQP_OK)
		fail_msg("%s: %s: %s", kind_name(l), mqp_strerror(rc), err);
	/* The adapters watch every descriptor themselves; a loop without loop_watch watches one. */
	assert_int_equal(mqp_pool_fd(p) >= 0, l->kind == LOOP_POLL);
	return p;
}

/* Run the loop until *count reaches want or timeout_ms passes (the pool always keeps a timer of
 * at most a second, so one turn never blocks longer). Returns whether it did. */
static bool tloop_until(struct tloop *l, const atomic_int *count, int want, int timeout_ms)
{
	uint64_t until = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	while (atomic_load(count) < want && mqc_now_ns() < until) {
		if (l->kind == LOOP_EVENT)
			event_base_loop(l->base, EVLOOP_ONCE);
		else if (l->kind == LOOP_UV)
			uv_run(&l->uv, UV_RUN_ONCE);
		else
			tloop_poll_once(l);
	}
	return atomic_load(count) >= want;
}

/* After the pool is destroyed: the adapter's handles close; nothing must be left on the loop. */
static void tloop_close(struct tloop *l)
{
	if (l->kind == LOOP_POLL) {
		assert_true(l->cleaned); /* the pool let go of the loop */
	} else if (l->kind == LOOP_EVENT) {
		assert_int_equal(event_base_loop(l->base, EVLOOP_NONBLOCK), 1); /* no events left */
		event_base_free(l->base);
	} else {
		uv_run(&l->uv, UV_RUN_NOWAIT); /* the close callbacks */
		assert_int_equal(uv_loop_alive(&l->uv), 0);
		assert_int_equal(uv_loop_close(&l->uv), 0);
	}
}

/* --- async requests from the loop's thread ------------------------------------------------ */

static bool in_call; /* the test is inside a pool call: no callback may run now */

struct call {
	char nonce[32];
	int calls, result;
	bool matched, inside;
	atomic_int *done;
};

static void on_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct call *c = userdata;
	c->calls++;
	c->result = result;
	c->inside |= in_call;
	c->matched = result == MQP_OK && reply->len == strlen(c->nonce)
	    && memcmp(reply->payload, c->nonce, reply->len) == 0;
	atomic_fetch_add(c->done, 1);
}

static void on_done(void *userdata, int result)
{
	struct call *c = userdata;
	c->calls++;
	c->result = result;
	c->inside |= in_call;
	atomic_fetch_add(c->done, 1);
}

static int start_request(
    mqp_pool *p, const char *topic, struct call *c, unsigned timeout_ms, mqp_ticket *ticket)
{
	in_call = true;
	int rc = mqp_pool_request_async(
	    p, topic, c->nonce, strlen(c->nonce), 0, timeout_ms, on_reply, c, ticket);
	in_call = false;
	return rc;
}

/* An adversarial device (duplicates, strays, late replies) and 200 requests in flight at once
 * from the loop's thread: every caller gets its own reply or a timeout, exactly once, never
 * inside the call that started it. */
static void async_requests_on_the_loop_never_cross(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "loop/adv/cmd", "--duplicate", "0.3",
	        "--stray", "0.3", "--late", "0.05", "--late-delay", "300ms", "--seed", "7", NULL);
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		o.max_size = 3;
		mqp_pool *p = tloop_pool(&l, tb_test_info()->mqtt_url, &o);
		enum { N = 200 };
		static struct call calls[N];
		atomic_int done = 0;
		for (int i = 0; i < N; i++) {
			calls[i] = (struct call) { .done = &done };
			snprintf(calls[i].nonce, sizeof calls[i].nonce, "n-%d-%d", kind, i);
			assert_int_equal(start_request(p, "loop/adv/cmd", &calls[i], 200, NULL), MQP_OK);
		}
		assert_true(tloop_until(&l, &done, N, 10000));
		int ok = 0, timeouts = 0;
		for (int i = 0; i < N; i++) {
			if (calls[i].calls != 1 || calls[i].inside)
				fail_msg("%s: call %d: %d callbacks, inside the call: %d", kind_name(&l), i,
				    calls[i].calls, calls[i].inside);
			if (calls[i].result == MQP_OK && !calls[i].matched)
				fail_msg("%s: call %d got another caller's reply", kind_name(&l), i);
			ok += calls[i].result == MQP_OK;
			timeouts += calls[i].result == MQP_ETIMEDOUT;
		}
		assert_int_equal(ok + timeouts, N);
		assert_true(ok >= N * 8 / 10); /* only the late ones (5 %) may time out */
		struct mqp_pool_stats st;
		mqp_pool_stats(p, &st, sizeof st);
		assert_int_equal(st.inflight, 0);
		assert_true(st.strays > 0 || st.duplicates > 0 || st.late_replies > 0);
		mqp_pool_destroy(p);
		tloop_close(&l);
	}
	tb_test_responder_stop(&r);
}

/* A blocking call on the loop's thread would stop the loop: refused. A drain that only looks
 * is allowed. Async publishes complete on the loop. */
static void blocking_calls_on_the_loop_are_refused(void **state)
{
	(void)state;
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		mqp_pool *p = tloop_pool(&l, tb_test_info()->mqtt_url, NULL);
		struct mqp_reply reply;
		mqp_lease lease;
		assert_int_equal(mqp_pool_request(p, "loop/x", "x", 1, 0, 1000, &reply), MQP_EDEADLK);
		assert_int_equal(mqp_pool_publish(p, "loop/x", "x", 1, 0, 0, 1000), MQP_EDEADLK);
		assert_int_equal(mqp_pool_acquire(p, 1000, &lease), MQP_EDEADLK);
		assert_int_equal(mqp_pool_drain(p, 1000), MQP_EDEADLK);
		atomic_int done = 0;
		struct call c = { .done = &done };
		in_call = true;
		assert_int_equal(
		    mqp_pool_publish_async(p, "loop/x", "x", 1, 1, 0, 5000, on_done, &c, NULL), MQP_OK);
		in_call = false;
		assert_true(tloop_until(&l, &done, 1, 5000));
		assert_int_equal(c.result, MQP_OK);
		assert_false(c.inside);
		assert_int_equal(mqp_pool_drain(p, MQP_NO_WAIT), MQP_OK); /* idle: nothing in flight */
		mqp_pool_destroy(p);
		tloop_close(&l);
	}
}

/* A result known at once (no connection can be made) still arrives from the loop, after the
 * call that asked has returned. */
static void a_failure_known_at_once_waits_for_the_loop(void **state)
{
	(void)state;
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", tb_test_free_port());
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
		o.min_size = 0;
		mqp_pool *p = tloop_pool(&l, url, &o);
		atomic_int done = 0;
		struct call first = { .done = &done }, second = { .done = &done };
		snprintf(first.nonce, sizeof first.nonce, "a");
		snprintf(second.nonce, sizeof second.nonce, "b");
		assert_int_equal(start_request(p, "loop/x", &first, 3000, NULL), MQP_OK);
		assert_true(tloop_until(&l, &done, 1, 5000)); /* the connect fails: ECONNECT */
		assert_int_equal(first.result, MQP_ECONNECT);
		/* The pool now knows nothing connects: the next call fails at once, from the loop. */
		assert_int_equal(start_request(p, "loop/x", &second, 3000, NULL), MQP_OK);
		assert_int_equal(second.calls, 0);
		assert_true(tloop_until(&l, &done, 2, 5000));
		assert_int_equal(second.result, MQP_ECONNECT);
		assert_false(first.inside || second.inside);
		mqp_pool_destroy(p);
		tloop_close(&l);
	}
}

/* --- cancel, leases and destroy from callbacks ------------------------------------------------ */

struct lease_call {
	atomic_int granted;
	int result, released;
};

/* A lease granted on the loop, released at once from its callback (no hand-off, no wait). */
static void on_lease(void *userdata, int result, mqp_lease lease)
{
	struct lease_call *lc = userdata;
	lc->result = result;
	lc->released = result == MQP_OK ? (int)mqp_lease_release(&lease) : -1;
	atomic_fetch_add(&lc->granted, 1);
}

static void cancel_and_leases_on_the_loop(void **state)
{
	(void)state;
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		mqp_pool *p = tloop_pool(&l, tb_test_info()->mqtt_url, NULL);
		atomic_int done = 0;
		struct call silent = { .done = &done };
		snprintf(silent.nonce, sizeof silent.nonce, "silent");
		mqp_ticket ticket = 0;
		assert_int_equal(start_request(p, "loop/nobody", &silent, 5000, &ticket), MQP_OK);
		assert_true(ticket != 0);
		assert_int_equal(mqp_pool_cancel(p, ticket), MQP_OK);
		assert_true(tloop_until(&l, &done, 1, 2000));
		assert_int_equal(silent.result, MQP_ECANCELED);
		struct lease_call lc = { 0 };
		assert_int_equal(mqp_pool_acquire_async(p, 3000, on_lease, &lc, NULL), MQP_OK);
		assert_true(tloop_until(&l, &lc.granted, 1, 5000));
		assert_int_equal(lc.result, MQP_OK);
		assert_int_equal(lc.released, MQP_OK);
		struct mqp_pool_stats st;
		mqp_pool_stats(p, &st, sizeof st);
		assert_int_equal(st.leased, 0);
		assert_int_equal(st.acquires, 1);
		mqp_pool_destroy(p);
		tloop_close(&l);
	}
}

struct destroyer {
	mqp_pool *pool;
	atomic_int *done;
	int calls, result;
};

static void destroy_in_callback(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)reply;
	struct destroyer *d = userdata;
	d->calls++;
	d->result = result;
	if (d->pool) {
		mqp_pool_destroy(d->pool); /* from the pool's own callback: when this run ends */
		d->pool = NULL;
	}
	atomic_fetch_add(d->done, 1);
}

/* Destroyed from one of its callbacks on the loop: the others end with MQP_ECLOSED, every
 * callback runs once, and the adapter leaves nothing on the loop. */
static void destroy_from_a_callback_on_the_loop(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "loop/echo", NULL);
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		mqp_pool *p = tloop_pool(&l, tb_test_info()->mqtt_url, NULL);
		atomic_int done = 0;
		struct destroyer first = { .pool = p, .done = &done }, others[5];
		assert_int_equal(mqp_pool_request_async(
		                     p, "loop/echo", "x", 1, 0, 5000, destroy_in_callback, &first, NULL),
		    MQP_OK);
		for (int i = 0; i < 5; i++) {
			others[i] = (struct destroyer) { .done = &done };
			assert_int_equal(mqp_pool_request_async(p, "loop/nobody", "y", 1, 0, 5000,
			                     destroy_in_callback, &others[i], NULL),
			    MQP_OK);
		}
		assert_true(tloop_until(&l, &done, 6, 5000));
		assert_int_equal(first.result, MQP_OK);
		for (int i = 0; i < 5; i++) {
			assert_int_equal(others[i].calls, 1);
			assert_int_equal(others[i].result, MQP_ECLOSED);
		}
		tloop_close(&l);
	}
	tb_test_responder_stop(&r);
}

/* TLS on the loop: the handshake runs in the pool's own epoll, driven by the loop. */
static void tls_on_the_loop(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "loop/tls", NULL);
	for (int kind = 0; kind < LOOP_KINDS; kind++) {
		struct tloop l;
		tloop_init(&l, kind);
		mqp_pool *p = tloop_pool(&l, tb_test_info()->mqtts_url, NULL);
		atomic_int done = 0;
		struct call c = { .done = &done };
		snprintf(c.nonce, sizeof c.nonce, "secure-%d", kind);
		assert_int_equal(start_request(p, "loop/tls", &c, 5000, NULL), MQP_OK);
		assert_true(tloop_until(&l, &done, 1, 6000));
		assert_int_equal(c.result, MQP_OK);
		assert_true(c.matched);
		mqp_pool_destroy(p);
		tloop_close(&l);
	}
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(async_requests_on_the_loop_never_cross),
		cmocka_unit_test(blocking_calls_on_the_loop_are_refused),
		cmocka_unit_test(a_failure_known_at_once_waits_for_the_loop),
		cmocka_unit_test(cancel_and_leases_on_the_loop),
		cmocka_unit_test(destroy_from_a_callback_on_the_loop),
		cmocka_unit_test(tls_on_the_loop),
	};
	return TB_TEST_RUN(tests, NULL);
}
