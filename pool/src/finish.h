/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * finish.h - completing the operations the I/O thread holds, ending leases, and the pool's error
 * text and log (finish.c). I/O thread only.
 */
#ifndef MQP_FINISH_H
#define MQP_FINISH_H

#include "pool.h"

/* Complete an op the I/O thread holds: out of every structure, its caller woken or its callback
 * called (on this thread, no lock held), the I/O thread's reference dropped. During a call made
 * on an event loop's thread (defer_callbacks) an async op's callback waits in p->later. */
void mqp__finish(struct mqp_pool *p, struct op *op, int result);
/* The second half of mqp__finish: the callback or the caller's wake-up, and the reference. */
void mqp__deliver(struct mqp_pool *p, struct op *op, int result);

void mqp__set_error(struct mqp_pool *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The application's log callback, on this thread, no lock held. */
void mqp__log(struct mqp_pool *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A legacy request waits for its reply topic (another request in the process holds it). */
void mqp__legacy_wait(struct mqp_pool *p, struct op *op);
/* A lease handle of slot ends (released, discarded, or granted to a caller who had left): the
 * slot is free for the next lease, every copy of the handle is stale, a drain may wake. */
void mqp__lease_end(struct mqp_pool *p, unsigned slot);
/* Drop a lease's queued messages and subscriptions (at release or close). */
void mqp__lease_clear(struct mqp_pool *p, struct pconn *c);

#endif
