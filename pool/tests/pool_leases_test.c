/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool against the test broker - leases: borrow a connection, subscribe, receive, release;
 * FIFO acquire, retained messages, leaks, abandoned acquires, MQTT 3.1.1.
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

/* A lease must not subscribe to its connection's own inbox filter: the subscription would
 * replace the inbox's, and releasing it would leave the connection deaf to every reply. */
static void a_lease_cannot_take_over_the_inbox(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "inbox/cmd", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 1;
	o.max_size = 1;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "inbox/cmd", "a", 1, 0, 3000, &reply), MQP_OK);
	char filter[300];
	snprintf(filter, sizeof filter, "%s/#", reply.topic); /* the reply came to the inbox */
	mqp_reply_free(&reply);
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, filter, 0, 0, 3000), MQP_EINVAL);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	for (int k = 0; k < 3; k++) { /* the one connection still answers requests */
		assert_int_equal(mqp_pool_request(p, "inbox/cmd", "b", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
	}
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void lease_subscribe_receive_release(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct tb_client *out = outside_client();
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, "lease/a/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "lease/a/x", "hello", 5, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&lease, 3000, &m), MQP_OK);
	assert_string_equal(m.topic, "lease/a/x");
	assert_string_equal(m.payload, "hello");
	assert_int_equal(m.qos, 1);
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&lease, 100, &m), MQP_ETIMEDOUT);
	/* Publishing through the lease reaches the outside. */
	assert_int_equal(tb_client_subscribe(out, "lease/b", 1, 0, NULL), 1);
	assert_int_equal(mqp_lease_publish(&lease, "lease/b", "out", 3, 1, 0, 3000), MQP_OK);
	struct tb_message *got = tb_client_receive(out, 3000);
	assert_non_null(got);
	assert_string_equal(got->payload, "out");
	tb_message_free(got);
	mqp_lease copy = lease;
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	/* Double release and use after release are reported, never a crash. */
	assert_int_equal(mqp_lease_release(&copy), MQP_ERELEASED);
	assert_int_equal(mqp_lease_receive(&copy, 100, &m), MQP_ERELEASED);
	assert_int_equal(mqp_lease_publish(&copy, "lease/b", "x", 1, 0, 0, 100), MQP_ERELEASED);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.acquires, 1);
	assert_int_equal(st.releases, 1);
	assert_int_equal(st.double_releases, 1);
	assert_int_equal(st.leased, 0);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

static void released_backlog_never_reaches_the_next_borrower(void **state)
{
	(void)state;
	/* One connection, so the second lease is on the very same connection. */
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 1;
	o.min_size = 1;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct tb_client *out = outside_client();
	mqp_lease a;
	assert_int_equal(mqp_pool_acquire(p, 3000, &a), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&a, "backlog/#", 1, 0, 3000), MQP_OK);
	for (int i = 0; i < 200; i++)
		assert_int_equal(tb_client_publish(out, "backlog/old", "old", 3, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&a, 3000, &m), MQP_OK); /* takes one, leaves the rest */
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_release(&a), MQP_OK);

	mqp_lease b;
	assert_int_equal(mqp_pool_acquire(p, 3000, &b), MQP_OK);
	assert_int_equal(b.slot, a.slot);
	assert_int_equal(mqp_lease_subscribe(&b, "backlog/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "backlog/new", "new", 3, 1, false, NULL), 0);
	assert_int_equal(mqp_lease_receive(&b, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "new"); /* none of the 199 old ones */
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&b, 300, &m), MQP_ETIMEDOUT);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	print_message("stale dropped: %llu\n", (unsigned long long)st.stale_dropped);
	assert_true(st.stale_dropped >= 199);
	assert_int_equal(mqp_lease_release(&b), MQP_OK);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

struct acquirer {
	mqp_pool *pool;
	int rc;
	uint64_t got_at;
};

static void *acquire_one(void *arg)
{
	struct acquirer *a = arg;
	mqp_lease lease;
	a->rc = mqp_pool_acquire(a->pool, 5000, &lease);
	a->got_at = mqc_now_ns();
	if (a->rc == MQP_OK)
		mqp_lease_release(&lease);
	return NULL;
}

static void acquire_waits_in_fifo_order_and_times_out(void **state)
{
	(void)state;
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.max_size = 1;
	o.min_size = 1;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease held;
	assert_int_equal(mqp_pool_acquire(p, 3000, &held), MQP_OK);
	mqp_lease other;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_acquire(p, 200, &other), MQP_ETIMEDOUT);
	assert_true(mqc_now_ns() - t0 >= 200 * MQC_NS_PER_MS);
	/* Three waiters, each queued before the next starts (the queued gauge says so): served in
	 * that order once the lease comes back. */
	struct acquirer w[3];
	pthread_t t[3];
	struct mqp_pool_stats st;
	/* The gauges are published at the end of the I/O turn that woke the timed-out caller: wait
	 * until it no longer counts, or the first waiter could be taken for queued before it is. */
	WAIT_FOR_STATS(p, st, st.queued == 0, 3000);
	assert_int_equal(st.queued, 0);
	for (int i = 0; i < 3; i++) {
		w[i] = (struct acquirer) { .pool = p };
		pthread_create(&t[i], NULL, acquire_one, &w[i]);
		WAIT_FOR_STATS(p, st, st.queued == (unsigned)i + 1, 3000);
		assert_int_equal(st.queued, i + 1);
	}
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 3; i++)
		assert_int_equal(w[i].rc, MQP_OK);
	assert_true(w[0].got_at <= w[1].got_at && w[1].got_at <= w[2].got_at);
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.acquire_timeouts, 1);
	assert_int_equal(st.size, 1);
	/* The timed-out acquire and the three waiters (and the first, if the pool was not warm). */
	assert_true(st.waits >= 4 && st.waits <= 5);
	/* Every lease is back: the one connection is available again (gauges follow within a loop). */
	uint64_t until = mqc_now_ns() + 2 * MQC_NS_PER_S;
	for (mqp_pool_stats(p, &st, sizeof st);
	     (st.available != 1 || st.leased != 0) && mqc_now_ns() < until;
	     mqp_pool_stats(p, &st, sizeof st))
		nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	assert_int_equal(st.available, 1);
	assert_int_equal(mqp_pool_acquire(p, 3000, &held), MQP_OK);
	until = mqc_now_ns() + 2 * MQC_NS_PER_S;
	for (mqp_pool_stats(p, &st, sizeof st); st.available != 0 && mqc_now_ns() < until;
	     mqp_pool_stats(p, &st, sizeof st))
		nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	assert_int_equal(st.available, 0); /* borrowed is not available */
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	mqp_pool_destroy(p);
}

struct later {
	int delay_ms;
	const char *topic;
};

static void *publish_later(void *arg)
{
	struct later *l = arg;
	nanosleep(&(struct timespec) { .tv_nsec = (long)l->delay_ms * 1000000L }, NULL);
	struct tb_client *c = outside_client();
	tb_client_publish(c, l->topic, "once", 4, 1, false, NULL);
	tb_client_destroy(c);
	return NULL;
}

static void one_shot_receive_and_requests_beside_a_lease(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "beside/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	pthread_t t;
	struct later l = { .delay_ms = 300, .topic = "oneshot/t" };
	pthread_create(&t, NULL, publish_later, &l);
	struct mqp_message m;
	assert_int_equal(mqp_pool_receive(p, "oneshot/#", 1, 0, 5000, &m), MQP_OK);
	assert_string_equal(m.topic, "oneshot/t");
	mqp_message_free(&m);
	pthread_join(t, NULL);
	assert_int_equal(mqp_pool_receive(p, "oneshot/#", 0, 0, 200, &m), MQP_ETIMEDOUT);
	/* While a lease holds a connection, requests still flow on the others. */
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	struct mqp_reply reply;
	for (int i = 0; i < 10; i++) {
		assert_int_equal(mqp_pool_request(p, "beside/cmd", "r", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
	}
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.leased, 0);
	assert_int_equal(st.double_releases, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct log_capture {
	pthread_mutex_t lock;
	char last[512];
	int count;
};

static void capture_log(void *userdata, int level, const char *message)
{
	struct log_capture *c = userdata;
	(void)level;
	pthread_mutex_lock(&c->lock);
	snprintf(c->last, sizeof c->last, "%s", message);
	c->count++;
	pthread_mutex_unlock(&c->lock);
}

static void a_lease_held_too_long_is_reported_with_its_origin(void **state)
{
	(void)state;
	struct log_capture logs = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.leak_threshold_ms = 200;
	o.eviction_interval_ms = 50;
	o.log_cb = capture_log;
	o.userdata = &logs;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease lease;
	uint64_t acquired = mqc_now_ns();
	int line = __LINE__ + 1;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	struct mqp_pool_stats st;
	do { /* the report is the event: housekeeping runs every 50 ms */
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		mqp_pool_stats(p, &st, sizeof st);
	} while (st.leaks == 0 && mqc_now_ns() - acquired < 5 * MQC_NS_PER_S);
	assert_int_equal(st.leaks, 1);
	assert_true(mqc_now_ns() - acquired >= 200 * MQC_NS_PER_MS);  /* not before the threshold */
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL); /* four more housekeeping runs */
	mqp_pool_stats(p, &st, sizeof st);
	assert_int_equal(st.leaks, 1); /* reported once */
	char where[64];
	snprintf(where, sizeof where, "pool_leases_test.c:%d", line);
	pthread_mutex_lock(&logs.lock);
	if (!strstr(logs.last, where) || !strstr(logs.last, "possible leak"))
		fail_msg("log '%s' does not name %s", logs.last, where);
	pthread_mutex_unlock(&logs.lock);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	mqp_pool_destroy(p);
}

/* Retained messages: one subscription's option, not the lease's; and the one-shot receive can
 * read a device's last state (the JavaScript pool's own test: publish retained, then receive). */
static void retained_belongs_to_its_subscription_and_receive_reads_the_last_state(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	assert_int_equal(mqp_pool_publish(p, "state/d1", "world", 5, 1, 1, 3000), MQP_OK);
	assert_int_equal(mqp_pool_publish(p, "state/d2", "other", 5, 1, 1, 3000), MQP_OK);
	struct mqp_message m;
	assert_int_equal(mqp_pool_receive(p, "state/d1", 1, MQP_SUB_RETAINED, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "world");
	assert_true(m.retain);
	mqp_message_free(&m);
	assert_int_equal(mqp_pool_receive(p, "state/d1", 1, 0, 300, &m), MQP_ETIMEDOUT);
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, "state/d1", 1, MQP_SUB_RETAINED, 3000), MQP_OK);
	assert_int_equal(mqp_lease_receive(&lease, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "world");
	mqp_message_free(&m);
	/* The same lease, another subscription without the option: its retained copy stays away. */
	assert_int_equal(mqp_lease_subscribe(&lease, "state/d2", 1, 0, 3000), MQP_OK);
	assert_int_equal(mqp_lease_receive(&lease, 300, &m), MQP_ETIMEDOUT);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	assert_int_equal(mqp_pool_publish(p, "state/d1", "", 0, 1, 1, 3000), MQP_OK); /* clear */
	assert_int_equal(mqp_pool_publish(p, "state/d2", "", 0, 1, 1, 3000), MQP_OK);
	mqp_pool_destroy(p);
}

static void mqtt311_leases_work_and_are_discarded_after_subscribing(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "v3/+/cmd", "--protocol", "3.1.1", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.protocol = 4;
	o.max_size = 1;
	o.min_size = 1;
	o.client_id_prefix = "v3lease";
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "v3/d/cmd", "x", 1, 0, 1000, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request_legacy(p, "v3/d/cmd", "hello", 5, 1, "replies/v3/d/cmd", NULL,
	                     NULL, 3000, &reply),
	    MQP_OK);
	assert_string_equal(reply.payload, "hello");
	mqp_reply_free(&reply);
	/* A backlog left behind: the 3.1.1 lease is discarded, the next one starts clean. */
	struct tb_client *out = outside_client();
	mqp_lease a, b;
	assert_int_equal(mqp_pool_acquire(p, 3000, &a), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&a, "v3backlog/#", 1, 0, 3000), MQP_OK);
	for (int i = 0; i < 50; i++)
		assert_int_equal(tb_client_publish(out, "v3backlog/old", "old", 3, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&a, 3000, &m), MQP_OK);
	mqp_message_free(&m);
	struct mqp_pool_stats before;
	mqp_pool_stats(p, &before, sizeof before);
	assert_int_equal(mqp_lease_release(&a), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 3000, &b), MQP_OK);
	struct mqp_pool_stats after;
	mqp_pool_stats(p, &after, sizeof after);
	assert_int_equal(after.connects_ok, before.connects_ok + 1); /* a fresh connection */
	/* The discarded one said goodbye (DISCONNECT: mosquitto logs "disconnected."), and was not
	 * simply closed after its UNSUBSCRIBE ("closed its connection."). */
	for (int k = 0; k < 100 && tb_test_log_count("Client v3lease-", " disconnected.") < 1; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	assert_int_equal(tb_test_log_count("Client v3lease-", " disconnected."), 1);
	assert_int_equal(tb_test_log_count("Client v3lease-", "closed its connection"), 0);
	assert_int_equal(mqp_lease_subscribe(&b, "v3backlog/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "v3backlog/new", "new", 3, 1, false, NULL), 0);
	assert_int_equal(mqp_lease_receive(&b, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "new");
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&b, 300, &m), MQP_ETIMEDOUT);
	assert_int_equal(mqp_lease_release(&b), MQP_OK);
	struct mqp_pool_options bad = MQP_POOL_OPTIONS_INIT;
	bad.protocol = 3;
	mqp_pool *q = NULL;
	char err[128];
	assert_int_equal(mqp_pool_new(tb_test_info()->mqtt_url, &bad, &q, err, sizeof err), MQP_EINVAL);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/*
 * A blocking acquirer gives up (past its deadline and grace) while the I/O thread is held up in
 * another acquirer's callback, and is granted a lease just after: nobody holds that lease, so it
 * must come straight back. Two leases are freed together; A (async, its callback stalls 2.6 s)
 * and then B (blocking, 300 ms + 2 s grace) are granted in one pass, B after it has left.
 */
struct two_leases {
	mqp_lease l[2];
};

/* The first acquirer in the queue times out; its callback frees both leases at once. */
static void release_both(void *userdata, int result, mqp_lease lease)
{
	(void)result;
	(void)lease;
	struct two_leases *t = userdata; /* from the pool's thread: neither release waits */
	mqp_lease_release(&t->l[0]);
	mqp_lease_release(&t->l[1]);
}

static void stall_with_lease(void *userdata, int result, mqp_lease lease)
{
	if (result == MQP_OK) {
		nanosleep(&(struct timespec) { .tv_sec = 2, .tv_nsec = 600000000 }, NULL);
		mqp_lease_release(&lease);
	}
	atomic_store((atomic_int *)userdata, result == MQP_OK ? 1 : -1);
}

struct giving_up {
	mqp_pool *pool;
	int rc;
};

static void *acquire_and_give_up(void *arg)
{
	struct giving_up *g = arg;
	mqp_lease l;
	g->rc = mqp_pool_acquire(g->pool, 300, &l);
	return NULL;
}

static void an_abandoned_acquire_never_strands_a_lease(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "stall/cmd", NULL);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 2;
	o.max_size = 2;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct two_leases t;
	assert_int_equal(mqp_pool_acquire(p, 3000, &t.l[0]), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 3000, &t.l[1]), MQP_OK);
	atomic_int a_done = 0;
	assert_int_equal(mqp_pool_acquire_async(p, 100, release_both, &t, NULL), MQP_OK);
	assert_int_equal(mqp_pool_acquire_async(p, 10000, stall_with_lease, &a_done, NULL), MQP_OK);
	struct giving_up g = { .pool = p };
	pthread_t b;
	pthread_create(&b, NULL, acquire_and_give_up, &g); /* FIFO: the timer, A, then B */
	pthread_join(b, NULL);
	assert_int_equal(g.rc, MQP_ETIMEDOUT); /* B gave up after 300 ms + grace */
	assert_true(wait_flag(&a_done, 5000));
	struct mqp_pool_stats st = { 0 };
	for (int k = 0; k < 100; k++) {
		mqp_pool_stats(p, &st, sizeof st);
		if (st.leased == 0)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	}
	assert_int_equal(st.leased, 0); /* nothing is held by nobody */
	mqp_lease x, y;                 /* and both connections can be borrowed again */
	assert_int_equal(mqp_pool_acquire(p, 1000, &x), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 1000, &y), MQP_OK);
	mqp_lease_release(&x);
	mqp_lease_release(&y);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_lease_cannot_take_over_the_inbox),
		cmocka_unit_test(lease_subscribe_receive_release),
		cmocka_unit_test(released_backlog_never_reaches_the_next_borrower),
		cmocka_unit_test(acquire_waits_in_fifo_order_and_times_out),
		cmocka_unit_test(one_shot_receive_and_requests_beside_a_lease),
		cmocka_unit_test(a_lease_held_too_long_is_reported_with_its_origin),
		cmocka_unit_test(retained_belongs_to_its_subscription_and_receive_reads_the_last_state),
		cmocka_unit_test(an_abandoned_acquire_never_strands_a_lease),
		cmocka_unit_test(mqtt311_leases_work_and_are_discarded_after_subscribing),
	};
	return TB_TEST_RUN(tests, NULL);
}
