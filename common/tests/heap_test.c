/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * heap_test.c - unit tests of the timer min-heap (mqc_heap.h).
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>

#include "mqc_heap.h"

struct item {
	uint64_t key;
	size_t index; /* kept by `moved` */
};

static void item_moved(void *item, size_t index)
{
	((struct item *)item)->index = index;
}

/* Every entry's key is not less than its parent's, and every tracked index is true. */
static void check(const struct mqc_heap *h)
{
	for (size_t i = 0; i < h->len; i++) {
		if (i > 0)
			assert_true(h->v[(i - 1) / 2].key <= h->v[i].key);
		if (h->moved)
			assert_int_equal(((struct item *)h->v[i].item)->index, i);
	}
}

static void pops_in_key_order_with_removals_from_anywhere(void **state)
{
	(void)state;
	enum { N = 2000 };
	static struct item items[N];
	struct mqc_heap h = { .moved = item_moved };
	srandom(11);
	for (int i = 0; i < N; i++) {
		items[i] = (struct item) { .key = (uint64_t)random() % 500, .index = MQC_HEAP_NONE };
		assert_int_equal(mqc_heap_push(&h, items[i].key, &items[i]), 0);
	}
	check(&h);
	for (int i = 0; i < N; i += 3) /* a completion before its deadline */
		mqc_heap_remove(&h, items[i].index);
	assert_int_equal(items[0].index, MQC_HEAP_NONE);
	mqc_heap_remove(&h, items[0].index); /* already out: ignored */
	check(&h);
	assert_int_equal(h.len, N - (N + 2) / 3);
	uint64_t last = 0;
	while (h.len) {
		struct item *min = mqc_heap_pop(&h);
		assert_true(min->key >= last);
		assert_int_equal(min->index, MQC_HEAP_NONE);
		last = min->key;
	}
	mqc_heap_free(&h);
}

static void reserved_room_and_untracked_items(void **state)
{
	(void)state;
	struct mqc_heap h = { 0 };
	assert_int_equal(mqc_heap_reserve(&h, 100), 0);
	struct mqc_heap_entry *room = h.v;
	int values[100];
	for (int i = 0; i < 100; i++) {
		values[i] = 99 - i;
		assert_int_equal(mqc_heap_push(&h, (uint64_t)values[i], &values[i]), 0);
	}
	assert_ptr_equal(h.v, room); /* no reallocation up to the reserve */
	check(&h);
	for (int want = 0; want < 100; want++)
		assert_int_equal(*(int *)mqc_heap_pop(&h), want);
	assert_int_equal(mqc_heap_push(&h, 5, &values[0]), 0); /* drained: the room is reused */
	mqc_heap_free(&h);
	assert_null(h.v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pops_in_key_order_with_removals_from_anywhere),
		cmocka_unit_test(reserved_room_and_untracked_items),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
