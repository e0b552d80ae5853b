/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * heap.c - the binary min-heap of mqc_heap.h.
 */
#include "mqc_heap.h"

#include <stdlib.h>

static void place(struct mqc_heap *h, size_t i, struct mqc_heap_entry e)
{
	h->v[i] = e;
	if (h->moved)
		h->moved(e.item, i);
}

/* Move the entry at i up or down until its parent is not greater and its children not less. */
static void settle(struct mqc_heap *h, size_t i)
{
	struct mqc_heap_entry e = h->v[i];
	while (i > 0 && e.key < h->v[(i - 1) / 2].key) {
		place(h, i, h->v[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = l;
		if (l >= h->len)
			break;
		if (r < h->len && h->v[r].key < h->v[l].key)
			m = r;
		if (h->v[m].key >= e.key)
			break;
		place(h, i, h->v[m]);
		i = m;
	}
	place(h, i, e);
}

int mqc_heap_reserve(struct mqc_heap *h, size_t cap)
{
	if (cap <= h->cap)
		return 0;
	struct mqc_heap_entry *grown = realloc(h->v, cap * sizeof *grown);
	if (!grown)
		return -1;
	h->v = grown;
	h->cap = cap;
	return 0;
}

int mqc_heap_push(struct mqc_heap *h, uint64_t key, void *item)
{
	if (h->len == h->cap && mqc_heap_reserve(h, h->cap ? h->cap * 2 : 64) != 0)
		return -1;
	h->v[h->len] = (struct mqc_heap_entry) { key, item };
	settle(h, h->len++);
	return 0;
}

void mqc_heap_remove(struct mqc_heap *h, size_t index)
{
	if (index == MQC_HEAP_NONE || index >= h->len)
		return;
	void *item = h->v[index].item;
	if (--h->len != index) {
		h->v[index] = h->v[h->len];
		settle(h, index);
	}
	if (h->moved)
		h->moved(item, MQC_HEAP_NONE);
}

void *mqc_heap_pop(struct mqc_heap *h)
{
	void *item = h->v[0].item;
	mqc_heap_remove(h, 0);
	return item;
}

void mqc_heap_free(struct mqc_heap *h)
{
	free(h->v);
	h->v = NULL;
	h->len = h->cap = 0;
}
