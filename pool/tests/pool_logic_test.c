/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Unit tests of the pool's decisions (src/logic.c): no threads, no sockets, no broker.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "corr.h"
#include "logic.h"

/* --- the deadline heap ------------------------------------------------------------------- */

static void heap_pops_in_deadline_order_after_random_removals(void **state)
{
	(void)state;
	enum { N = 500 };
	static struct op ops[N];
	struct mqc_heap h = { 0 };
	srandom(7);
	for (int i = 0; i < N; i++) {
		ops[i] = (struct op) { .deadline = (uint64_t)random() % 1000, .heap_index = MQC_HEAP_NONE };
		assert_int_equal(mqp__heap_push(&h, &ops[i]), 0);
	}
	/* Remove every third from wherever it sits (a completion before its deadline). */
	for (int i = 0; i < N; i += 3)
		mqp__heap_remove(&h, &ops[i]);
	mqp__heap_remove(&h, &ops[0]); /* removing twice is harmless */
	assert_int_equal(h.len, N - (N + 2) / 3);
	uint64_t last = 0;
	while (h.len) {
		struct op *min = h.v[0].item;
		assert_true(min->deadline >= last);
		assert_int_equal(min->heap_index, 0);
		last = min->deadline;
		mqp__heap_remove(&h, min);
		assert_int_equal(min->heap_index, MQC_HEAP_NONE);
	}
	mqc_heap_free(&h);
}

/* --- wait queues ------------------------------------------------------------------------- */

static void fifo_keeps_order_and_removes_from_anywhere(void **state)
{
	(void)state;
	struct op a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	struct op_fifo q = { .head = NULL };
	q.tail = &q.head;
	assert_null(mqp__fifo_pop(&q));
	mqp__fifo_push(&q, &a);
	mqp__fifo_push(&q, &b);
	mqp__fifo_push(&q, &c);
	assert_true(a.queued && b.queued && c.queued);
	assert_true(mqp__fifo_remove(&q, &c)); /* the tail: the next push must still append */
	assert_false(c.queued);
	assert_false(mqp__fifo_remove(&q, &c));
	mqp__fifo_push(&q, &d);
	assert_true(mqp__fifo_remove(&q, &a)); /* the head */
	assert_ptr_equal(mqp__fifo_pop(&q), &b);
	assert_ptr_equal(mqp__fifo_pop(&q), &d);
	assert_null(mqp__fifo_pop(&q));
	mqp__fifo_push(&q, &a); /* empty again: the tail was reset */
	assert_ptr_equal(q.head, &a);
	assert_ptr_equal(mqp__fifo_pop(&q), &a);
}

/* --- choosing a connection --------------------------------------------------------------- */

static struct pconn ready_conn(unsigned inflight, uint64_t idle_since)
{
	return (struct pconn) {
		.open = true, .ready = true, .inflight = inflight, .idle_since = idle_since
	};
}

static void requests_go_to_the_least_loaded_usable_connection(void **state)
{
	(void)state;
	struct pconn c[5] = { ready_conn(3, 0), ready_conn(1, 0), ready_conn(0, 0), ready_conn(0, 0),
		ready_conn(0, 0) };
	c[2].leased = true; /* borrowed: never shared */
	c[3].ready = false; /* still connecting */
	c[4].dead = true;   /* dropped, not yet closed */
	assert_int_equal(mqp__pick_for_request(c, 5, 64), 1);
	assert_int_equal(mqp__pick_for_request(c, 5, 1), -1); /* every usable one is full */
	c[4].dead = false;
	assert_int_equal(mqp__pick_for_request(c, 5, 64), 4);
	assert_int_equal(mqp__pick_for_request(c, 0, 64), -1);
}

static void leases_take_the_most_recently_released_idle_connection(void **state)
{
	(void)state;
	struct pconn c[4]
	    = { ready_conn(0, 100), ready_conn(0, 300), ready_conn(1, 900), ready_conn(0, 200) };
	bool held[4] = { false, false, false, false };
	assert_int_equal(mqp__pick_for_lease(c, held, 4), 1); /* c[2] carries a request */
	held[1] = true; /* a broken lease keeps its slot until its handle comes back */
	assert_int_equal(mqp__pick_for_lease(c, held, 4), 3);
	c[3].leased = c[0].leased = true;
	assert_int_equal(mqp__pick_for_lease(c, held, 4), -1);
}

static void connections_open_for_min_size_and_one_at_a_time_for_waiters(void **state)
{
	(void)state;
	assert_true(mqp__should_open(1, 1, false, 2, 10));  /* below min: even while connecting */
	assert_false(mqp__should_open(2, 0, false, 2, 10)); /* at min, nobody waits */
	assert_true(mqp__should_open(2, 0, true, 2, 10));   /* someone waits */
	assert_false(mqp__should_open(3, 1, true, 2, 10));  /* one connect in progress is enough */
	assert_false(mqp__should_open(10, 0, true, 2, 10)); /* never above max */
}

/* --- eviction ---------------------------------------------------------------------------- */

static void eviction_never_touches_busy_connections(void **state)
{
	(void)state;
	const uint64_t idle = 1000;
	struct pconn c = ready_conn(0, 0);
	c.retire_at = 10000;
	c.last_used = 0;
	assert_int_equal(mqp__eviction(&c, 500, 3, 2, idle), MQP_KEEP);             /* not idle long */
	assert_int_equal(mqp__eviction(&c, 1500, 3, 2, idle), MQP_EVICT_IDLE);      /* above min */
	assert_int_equal(mqp__eviction(&c, 1500, 2, 2, idle), MQP_KEEP);            /* at min */
	assert_int_equal(mqp__eviction(&c, 10000, 2, 2, idle), MQP_EVICT_LIFETIME); /* even at min */
	c.leased = true;
	assert_int_equal(mqp__eviction(&c, 20000, 3, 2, idle), MQP_KEEP);
	c.leased = false;
	c.inflight = 1;
	assert_int_equal(mqp__eviction(&c, 20000, 3, 2, idle), MQP_KEEP);
	c.inflight = 0;
	c.ready = false;
	assert_int_equal(mqp__eviction(&c, 20000, 3, 2, idle), MQP_KEEP); /* connect timeout's job */
}

/* --- timing ------------------------------------------------------------------------------ */

static void backoff_doubles_to_a_cap_with_equal_jitter(void **state)
{
	(void)state;
	unsigned b = 0, seen[16];
	for (int i = 0; i < 16; i++)
		seen[i] = b = mqp__backoff_next(b);
	assert_int_equal(seen[0], MQP_BACKOFF_MIN_MS);
	assert_int_equal(seen[1], 2 * MQP_BACKOFF_MIN_MS);
	assert_int_equal(seen[15], MQP_BACKOFF_MAX_MS);
	for (int i = 1; i < 16; i++)
		assert_true(seen[i] >= seen[i - 1] && seen[i] <= MQP_BACKOFF_MAX_MS);
	assert_int_equal(mqp__backoff_wait_ms(1000, 0), 500);
	assert_int_equal(mqp__backoff_wait_ms(1000, 500), 1000);
	assert_int_equal(mqp__backoff_wait_ms(1000, 501), 500);
	for (uint32_t r = 0; r < 100000; r += 7) {
		unsigned w = mqp__backoff_wait_ms(1000, r * 2654435761u);
		assert_true(w >= 500 && w <= 1000);
	}
}

static void lifetime_jitter_is_at_most_two_and_a_half_percent_early(void **state)
{
	(void)state;
	const uint64_t life = 1800ull * 1000 * 1000 * 1000; /* 30 minutes in ns */
	assert_int_equal(mqp__retire_at(5, life, 0), 5 + life);
	uint64_t earliest = mqp__retire_at(5, life, UINT32_MAX);
	assert_true(earliest < 5 + life);
	assert_true(earliest >= 5 + life - life / 40);
}

/* --- replies and leases ------------------------------------------------------------------ */

static void unmatched_replies_are_late_only_if_this_connection_sent_them(void **state)
{
	(void)state;
	assert_int_equal(mqp__classify_unmatched(true, 41, 42), MQP_LATE);
	assert_int_equal(mqp__classify_unmatched(true, 42, 42), MQP_STRAY); /* never sent */
	assert_int_equal(mqp__classify_unmatched(false, 1, 42), MQP_STRAY);
}

static void correlation_data_is_unguessable_and_opens_only_with_its_key(void **state)
{
	(void)state;
	struct mqp_corr a, b;
	assert_int_equal(mqp__corr_init(&a), 0);
	assert_int_equal(mqp__corr_init(&b), 0);
	unsigned char c41[MQP_CORR_LEN], c42[MQP_CORR_LEN], cb[MQP_CORR_LEN];
	assert_int_equal(mqp__corr_seal(&a, 41, c41), 0);
	assert_int_equal(mqp__corr_seal(&a, 42, c42), 0);
	assert_int_equal(mqp__corr_seal(&b, 41, cb), 0);
	uint64_t seq = 0;
	assert_true(mqp__corr_open(&a, c41, sizeof c41, &seq));
	assert_int_equal(seq, 41);
	assert_true(mqp__corr_open(&a, c42, sizeof c42, &seq));
	assert_int_equal(seq, 42);
	/* Consecutive requests share no visible counter: about half of the 128 bits differ. */
	int differ = 0;
	for (int i = 0; i < MQP_CORR_LEN; i++)
		differ += __builtin_popcount((unsigned)(c41[i] ^ c42[i]));
	assert_true(differ > 24 && differ < 104);
	/* Another connection's key, a flipped bit, a short or absent value: not ours. */
	assert_false(mqp__corr_open(&a, cb, sizeof cb, &seq));
	c41[3] ^= 1;
	assert_false(mqp__corr_open(&a, c41, sizeof c41, &seq));
	assert_false(mqp__corr_open(&a, c42, 15, &seq));
	assert_false(mqp__corr_open(&a, NULL, 0, &seq));
	mqp__corr_free(&a);
	mqp__corr_free(&b);
	mqp__corr_free(&b); /* twice is harmless */
}

static void a_lease_handle_is_valid_only_for_its_generation(void **state)
{
	(void)state;
	bool held[2] = { true, false };
	uint32_t gen[2] = { 7, 3 };
	assert_true(mqp__lease_valid(0, 7, 2, held, gen));
	assert_false(mqp__lease_valid(0, 6, 2, held, gen)); /* an older handle for the same slot */
	assert_false(mqp__lease_valid(1, 3, 2, held, gen)); /* released */
	assert_false(mqp__lease_valid(2, 0, 2, held, gen)); /* out of range */
	assert_int_equal(mqp__next_epoch(1), 2);
	assert_int_equal(mqp__next_epoch(0x0fffffff), 1); /* identifiers are 1..268,435,455 */
}

static void legacy_reply_topics_must_be_exact_and_not_match_the_command(void **state)
{
	(void)state;
	assert_int_equal(mqp__legacy_check("dev/1/cmd", "dev/1/reply"), MQP_OK);
	assert_int_equal(mqp__legacy_check("dev/1/cmd", "dev/1/cmd/reply"), MQP_OK);
	assert_int_equal(mqp__legacy_check("dev/1/cmd", "dev/1/cmd"), MQP_EINVAL);
	assert_int_equal(mqp__legacy_check("dev/1/cmd", "dev/+/reply"), MQP_EINVAL);
	assert_int_equal(mqp__legacy_check("dev/1/cmd", "#"), MQP_EINVAL);
	assert_int_equal(mqp__legacy_check("dev/+/cmd", "dev/1/reply"), MQP_EINVAL);
	assert_int_equal(mqp__legacy_check("dev/1/cmd", ""), MQP_EINVAL);
	assert_int_equal(mqp__legacy_check(NULL, "r"), MQP_EINVAL);
	char long_topic[MQP_TOPIC_MAX + 8];
	memset(long_topic, 'a', sizeof long_topic - 1);
	long_topic[sizeof long_topic - 1] = '\0';
	assert_int_equal(mqp__legacy_check("dev/1/cmd", long_topic), MQP_ETOOBIG);
}

/* Where a connection goes among broker nodes, and when one moves back. */
static void connections_go_to_the_nodes_that_are_up(void **state)
{
	(void)state;
	struct mqp_node_view v[3] = { { 2, true }, { 0, false }, { 1, true } };
	assert_int_equal(mqp__pick_node(v, 3, false, 0), 2); /* the fewest among those up */
	assert_int_equal(mqp__pick_node(v, 3, true, 0), 0);  /* in order: the first up */
	v[1].available = true;                               /* its backoff is over */
	assert_int_equal(mqp__pick_node(v, 3, false, 7), 1);
	struct mqp_node_view tie[3] = { { 1, true }, { 1, true }, { 1, true } };
	int seen[3] = { 0 };
	for (uint32_t r = 0; r < 30; r++)
		seen[mqp__pick_node(tie, 3, false, r)]++;
	assert_true(seen[0] == 10 && seen[1] == 10 && seen[2] == 10); /* ties: by the random */
	struct mqp_node_view down[2] = { { 0, false }, { 3, false } };
	assert_int_equal(mqp__pick_node(down, 2, false, 0), -1);
	assert_int_equal(mqp__pick_node(down, 2, true, 0), -1);

	unsigned from = 99;
	struct mqp_node_view back[3] = { { 3, true }, { 0, true }, { 2, true } };
	assert_true(mqp__should_move(back, 3, false, 1, &from));
	assert_int_equal(from, 0); /* the busiest */
	struct mqp_node_view even[3] = { { 2, true }, { 1, true }, { 2, true } };
	assert_false(mqp__should_move(even, 3, false, 1, &from)); /* one apart: stays */
	struct mqp_node_view standby[3] = { { 0, true }, { 1, true }, { 2, true } };
	assert_true(mqp__should_move(standby, 3, true, 0, &from));
	assert_int_equal(from, 2); /* in order: the last standby first */
	struct mqp_node_view first[2] = { { 2, true }, { 0, true } };
	assert_false(mqp__should_move(first, 2, true, 0, &from));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(heap_pops_in_deadline_order_after_random_removals),
		cmocka_unit_test(fifo_keeps_order_and_removes_from_anywhere),
		cmocka_unit_test(requests_go_to_the_least_loaded_usable_connection),
		cmocka_unit_test(leases_take_the_most_recently_released_idle_connection),
		cmocka_unit_test(connections_open_for_min_size_and_one_at_a_time_for_waiters),
		cmocka_unit_test(eviction_never_touches_busy_connections),
		cmocka_unit_test(backoff_doubles_to_a_cap_with_equal_jitter),
		cmocka_unit_test(lifetime_jitter_is_at_most_two_and_a_half_percent_early),
		cmocka_unit_test(unmatched_replies_are_late_only_if_this_connection_sent_them),
		cmocka_unit_test(correlation_data_is_unguessable_and_opens_only_with_its_key),
		cmocka_unit_test(a_lease_handle_is_valid_only_for_its_generation),
		cmocka_unit_test(legacy_reply_topics_must_be_exact_and_not_match_the_command),
		cmocka_unit_test(connections_go_to_the_nodes_that_are_up),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
