/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_heap.h - a binary min-heap of (key, item) pairs: deadlines and due times.
 *
 * Keys are compared as unsigned integers (nanoseconds, in this project); items are the caller's.
 * A caller that removes items before they reach the top sets `moved`: the heap tells it every
 * item's new position (and MQC_HEAP_NONE when an item leaves), which is the index
 * mqc_heap_remove() takes. The pool keeps it in its ops; the responder, which only pops, does not.
 *
 * Threads: none; one owner.
 */
#ifndef MQC_HEAP_H
#define MQC_HEAP_H

#include <stddef.h>
#include <stdint.h>

#define MQC_HEAP_NONE SIZE_MAX

struct mqc_heap_entry {
	uint64_t key;
	void *item;
};

struct mqc_heap {
	struct mqc_heap_entry *v; /* v[0] is the least key when len > 0 */
	size_t len, cap;
	void (*moved)(void *item, size_t index); /* NULL, or told each item's position */
};

/** Room for cap entries, so that pushes up to it never allocate. Returns 0 or -1. */
int mqc_heap_reserve(struct mqc_heap *h, size_t cap);

/** Add item with key (growing when full). Returns 0, or -1 when out of memory. */
int mqc_heap_push(struct mqc_heap *h, uint64_t key, void *item);

/** Take the item with the least key; the heap must not be empty. */
void *mqc_heap_pop(struct mqc_heap *h);

/** Take the item at index (as told to `moved`); MQC_HEAP_NONE is ignored. */
void mqc_heap_remove(struct mqc_heap *h, size_t index);

void mqc_heap_free(struct mqc_heap *h);

#endif
