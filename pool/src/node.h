/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * node.h - the broker nodes of the pool's URL, and whether a connection's broker still answers
 * (options.silence_ms, ping_timeout_ms) (node.c). I/O thread only; the atomics and last_error
 * it keeps are what mqp_pool_node_stats reads on any thread.
 */
#ifndef MQP_NODE_H
#define MQP_NODE_H

#include "logic.h"
#include "mqc_codec.h"
#include "pool.h"

/* Randomness for spreading retries and retirements (not for secrets). */
uint32_t mqp__random32(void);

/* The nodes as mqp__pick_node sees them now (v: p->nnodes entries). */
void mqp__node_views(const struct mqp_pool *p, uint64_t now, struct mqp_node_view *v);
/* Which node the next connection goes to: one a broker's Server Reference named (once), else as
 * load_balance says among those not waiting for their backoff; -1: none now. */
int mqp__node_next(struct mqp_pool *p, uint64_t now);

/* A connect to node failed (p->last_error says why): it waits, longer each time in a row, and
 * the wait is said. */
void mqp__node_failed(struct mqp_pool *p, unsigned node);
/* No new connection goes to node until its next, longer, backoff is over (said nothing). */
void mqp__node_hold(struct mqp_pool *p, unsigned node);
/* c is ready: its node is up (counted, its backoff over); on a suspect node c is doubted and
 * asked with a PINGREQ at once. */
void mqp__node_up(struct mqp_pool *p, struct pconn *c);
/* A ready connection of c's node was lost (p->last_error says how). */
void mqp__node_lost(struct mqp_pool *p, const struct pconn *c);
/* c is leaving its node's gauges (closing, or closed). */
void mqp__node_leave(struct mqp_pool *p, struct pconn *c);
/* c's node said not to come back for now: shutting down (0x8B), use another server (0x9C), or
 * moved (0x9D); ref: its Server Reference, followed once when it names one of the listed nodes. */
void mqp__node_redirect(struct mqp_pool *p, const struct pconn *c, struct mqc_str ref);

/* Every mqp__live_interval_ms: ping c when it is silent with calls outstanding (or has heard
 * nothing for half its keepalive, or sent nothing for three quarters of it). True when c's
 * PINGREQ got nothing back within ping_timeout_ms: c is unresponsive - dead, counted lost, the
 * reason in p->last_error, its node suspect - and mqp__conn_settle must close it. */
bool mqp__live_check(struct mqp_pool *p, struct pconn *c, uint64_t now);
/* A PINGRESP on c: a doubted connection carries work again; a new connection's clears its
 * node's suspicion. */
void mqp__live_pingresp(struct mqp_pool *p, struct pconn *c);
/* How often mqp__live_check runs: a fifth of the shorter of the two settings, at most 1 s. */
unsigned mqp__live_interval_ms(const struct mqp_pool_options *o);
/* TCP_USER_TIMEOUT for the pool's sockets: 2 x (silence_ms + ping_timeout_ms), at least 3 s. */
unsigned mqp__live_user_timeout_ms(const struct mqp_pool_options *o);

#endif
