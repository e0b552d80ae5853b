/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * logic.c - the pool's decisions as pure functions: no threads, no sockets, no clock, no
 * randomness of their own (callers pass the time and the random bits). The I/O thread calls
 * them; tests/pool_logic_test.c checks them one by one.
 */
#include "logic.h"

#include <stdlib.h>
#include <string.h>

/* --- the deadline heap (common's mqc_heap, keyed by deadline) ------------------------------ */

static void op_moved(void *item, size_t index)
{
	((struct op *)item)->heap_index = index;
}

int mqp__heap_push(struct mqc_heap *h, struct op *op)
{
	h->moved = op_moved;
	return mqc_heap_push(h, op->deadline, op);
}

void mqp__heap_remove(struct mqc_heap *h, struct op *op)
{
	mqc_heap_remove(h, op->heap_index); /* MQC_HEAP_NONE (not in it) is ignored */
}

/* --- FIFO wait queues -------------------------------------------------------------------- */

void mqp__fifo_push(struct op_fifo *q, struct op *op)
{
	op->queue_next = NULL;
	op->queued = true;
	*q->tail = op;
	q->tail = &op->queue_next;
}

struct op *mqp__fifo_pop(struct op_fifo *q)
{
	struct op *op = q->head;
	if (!op)
		return NULL;
	q->head = op->queue_next;
	if (!q->head)
		q->tail = &q->head;
	op->queue_next = NULL;
	op->queued = false;
	return op;
}

bool mqp__fifo_remove(struct op_fifo *q, struct op *op)
{
	for (struct op **pp = &q->head; *pp; pp = &(*pp)->queue_next) {
		if (*pp != op)
			continue;
		*pp = op->queue_next;
		if (!*pp)
			q->tail = pp;
		op->queue_next = NULL;
		op->queued = false;
		return true;
	}
	return false;
}

/* --- connection choice ------------------------------------------------------------------- */

static bool usable(const struct pconn *c)
{
	return c->open && c->ready && !c->dead && !c->leased && !c->doubted;
}

int mqp__pick_for_request(const struct pconn *conns, unsigned n, unsigned max_inflight)
{
	int best = -1;
	for (unsigned i = 0; i < n; i++) {
		const struct pconn *c = &conns[i];
		if (usable(c) && c->inflight < max_inflight
		    && (best < 0 || c->inflight < conns[best].inflight))
			best = (int)i;
	}
	return best;
}

int mqp__pick_for_legacy(
    const struct pconn *conns, unsigned n, unsigned max_inflight, const char *reply_topic)
{
	for (unsigned i = 0; i < n; i++) { /* one that stays subscribed to it: no SUBSCRIBE */
		const struct pconn *c = &conns[i];
		if (!usable(c) || c->inflight >= max_inflight)
			continue;
		for (unsigned k = 0; k < c->nlsubs; k++)
			if (strcmp(c->lsubs[k].topic, reply_topic) == 0)
				return (int)i;
	}
	return mqp__pick_for_request(conns, n, max_inflight);
}

int mqp__pick_for_lease(const struct pconn *conns, const bool *lease_held, unsigned n)
{
	int best = -1;
	for (unsigned i = 0; i < n; i++) {
		const struct pconn *c = &conns[i];
		if (usable(c) && !lease_held[i] && c->inflight == 0
		    && (best < 0 || c->idle_since > conns[best].idle_since))
			best = (int)i; /* most recently released: warm caches, the rest can idle out */
	}
	return best;
}

bool mqp__should_open(
    unsigned open, unsigned connecting, bool waiting, unsigned min_size, unsigned max_size)
{
	/* One connect at a time for waiters: a burst of callers does not open max_size at once
	 * against a broker that may be down. */
	return open < min_size || (waiting && connecting == 0 && open < max_size);
}

enum mqp_evict mqp__eviction(
    const struct pconn *c, uint64_t now, unsigned open, unsigned min_size, uint64_t idle_ns)
{
	if (!c->open || !c->ready || c->dead || c->leased || c->inflight)
		return MQP_KEEP; /* never while borrowed or carrying requests */
	if (now >= c->retire_at)
		return MQP_EVICT_LIFETIME;
	if (open > min_size && now - c->last_used > idle_ns)
		return MQP_EVICT_IDLE;
	return MQP_KEEP;
}

/* --- broker nodes ------------------------------------------------------------------------ */

int mqp__pick_node(const struct mqp_node_view *v, unsigned n, bool in_order, uint32_t random)
{
	unsigned fewest = UINT32_MAX, tied = 0;
	for (unsigned i = 0; i < n; i++) {
		if (!v[i].available)
			continue;
		if (in_order)
			return (int)i;
		if (v[i].conns < fewest) {
			fewest = v[i].conns;
			tied = 0;
		}
		tied += v[i].conns == fewest;
	}
	if (!tied)
		return -1;
	unsigned k = random % tied;
	for (unsigned i = 0; i < n; i++)
		if (v[i].available && v[i].conns == fewest && k-- == 0)
			return (int)i;
	return -1; /* not reached */
}

bool mqp__should_move(
    const struct mqp_node_view *v, unsigned n, bool in_order, unsigned to, unsigned *from)
{
	bool found = false;
	for (unsigned i = 0; i < n; i++) {
		if (i == to || v[i].conns == 0)
			continue;
		/* in order: the last such node (the standby furthest down the list empties first) */
		if (in_order
		    || (v[i].conns >= v[to].conns + 2 && (!found || v[i].conns > v[*from].conns))) {
			*from = i;
			found = true;
		}
	}
	return found;
}

/* --- timing ------------------------------------------------------------------------------ */

unsigned mqp__backoff_next(unsigned backoff_ms)
{
	if (backoff_ms == 0)
		return MQP_BACKOFF_MIN_MS;
	return backoff_ms >= MQP_BACKOFF_MAX_MS / 2 ? MQP_BACKOFF_MAX_MS : backoff_ms * 2;
}

unsigned mqp__backoff_wait_ms(unsigned backoff_ms, uint32_t random)
{
	/* "Equal jitter": [b/2, b], so a fleet of pools does not retry in step. */
	return backoff_ms / 2 + random % (backoff_ms / 2 + 1);
}

uint64_t mqp__retire_at(uint64_t ready_at, uint64_t lifetime_ns, uint32_t random)
{
	/* Up to 2.5 % earlier, so connections opened together do not all retire together. */
	uint64_t jitter = (uint64_t)((double)lifetime_ns * 0.025 * ((double)random / 4294967296.0));
	return ready_at + lifetime_ns - jitter;
}

/* --- replies and leases ------------------------------------------------------------------ */

enum mqp_unmatched mqp__classify_unmatched(bool ours, uint64_t seq, uint64_t next_seq)
{
	if (ours && seq < next_seq)
		return MQP_LATE; /* this connection sent it; nobody waits for it any more */
	return MQP_STRAY;
}

bool mqp__lease_valid(unsigned slot, uint32_t generation, unsigned n, const bool *lease_held,
    const uint32_t *lease_gen)
{
	return slot < n && lease_held[slot] && lease_gen[slot] == generation;
}

uint32_t mqp__next_epoch(uint32_t epoch)
{
	/* Subscription identifiers are varints of at most 268,435,455; 0 is not allowed. */
	return epoch >= 0x0fffffff ? 1 : epoch + 1;
}

int mqp__legacy_check(const char *topic, const char *reply_topic)
{
	if (!topic || !*topic || !reply_topic || !*reply_topic || strpbrk(topic, "+#")
	    || strpbrk(reply_topic, "+#"))
		return MQP_EINVAL;
	if (strlen(topic) >= MQP_TOPIC_MAX || strlen(reply_topic) >= MQP_TOPIC_MAX)
		return MQP_ETOOBIG;
	/* Our own command would come back as its "reply" (two exact topics match when equal). */
	if (strcmp(topic, reply_topic) == 0)
		return MQP_EINVAL;
	return MQP_OK;
}
