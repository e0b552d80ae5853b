/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * logic.h - the pool's decisions as pure functions (logic.c): no threads, no sockets, no clock,
 * no randomness of their own. tests/pool_logic_test.c checks them one by one.
 */
#ifndef MQP_LOGIC_H
#define MQP_LOGIC_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"

enum { MQP_BACKOFF_MIN_MS = 100, MQP_BACKOFF_MAX_MS = 5000 };
enum mqp_evict { MQP_KEEP, MQP_EVICT_LIFETIME, MQP_EVICT_IDLE };
enum mqp_unmatched { MQP_STRAY, MQP_LATE };

/* An op's deadline must not change while it is in the heap. */
int mqp__heap_push(struct mqc_heap *h, struct op *op); /* -1: out of memory */
void mqp__heap_remove(struct mqc_heap *h, struct op *op);
void mqp__fifo_push(struct op_fifo *q, struct op *op);
struct op *mqp__fifo_pop(struct op_fifo *q); /* NULL when empty */
bool mqp__fifo_remove(struct op_fifo *q, struct op *op);
/* The least loaded usable connection with room, or -1. */
int mqp__pick_for_request(const struct pconn *conns, unsigned n, unsigned max_inflight);
/* For a legacy request: a usable connection with room that is subscribed to reply_topic already,
 * else as mqp__pick_for_request. */
int mqp__pick_for_legacy(
    const struct pconn *conns, unsigned n, unsigned max_inflight, const char *reply_topic);
/* The most recently released idle connection, or -1. */
int mqp__pick_for_lease(const struct pconn *conns, const bool *lease_held, unsigned n);
bool mqp__should_open(
    unsigned open, unsigned connecting, bool waiting, unsigned min_size, unsigned max_size);
enum mqp_evict mqp__eviction(
    const struct pconn *c, uint64_t now, unsigned open, unsigned min_size, uint64_t idle_ns);
/* A broker node as the choice of where a connection goes sees it. */
struct mqp_node_view {
	unsigned conns; /* open or opening on it */
	bool available; /* not failing, or its backoff is over */
};
/* Where the next connection goes: in_order, the first available node; otherwise the available
 * node with the fewest connections, ties broken by random. -1 when none is available. */
int mqp__pick_node(const struct mqp_node_view *v, unsigned n, bool in_order, uint32_t random);
/* Whether a connection should move to the node mqp__pick_node chose (to): in_order, when another
 * node carries any; otherwise when the busiest other node carries at least two more than to.
 * *from: the node to take it from (the last such node in_order, the busiest otherwise). */
bool mqp__should_move(
    const struct mqp_node_view *v, unsigned n, bool in_order, unsigned to, unsigned *from);
unsigned mqp__backoff_next(unsigned backoff_ms);
unsigned mqp__backoff_wait_ms(unsigned backoff_ms, uint32_t random);
uint64_t mqp__retire_at(uint64_t ready_at, uint64_t lifetime_ns, uint32_t random);
/* A reply no pending request claimed: late when this connection sealed its correlation data
 * (ours, seq) for a request it already sent, else a stray. */
enum mqp_unmatched mqp__classify_unmatched(bool ours, uint64_t seq, uint64_t next_seq);
bool mqp__lease_valid(unsigned slot, uint32_t generation, unsigned n, const bool *lease_held,
    const uint32_t *lease_gen);
uint32_t mqp__next_epoch(uint32_t epoch);
/* Whether a legacy request's command and reply topics are usable: MQP_OK, MQP_EINVAL (missing,
 * a wildcard, or the same topic: our own command would come back as its reply), MQP_ETOOBIG. */
int mqp__legacy_check(const char *topic, const char *reply_topic);

#endif
