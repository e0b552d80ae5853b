/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * io.h - the I/O thread's loop (io.c).
 */
#ifndef MQP_IO_H
#define MQP_IO_H

#include "pool.h"

/* Run the pool until it is stopped (mqp__inbox_stop); then every op completes with MQP_ECLOSED
 * and every connection closes. The caller frees the pool. */
void mqp__io_run(struct mqp_pool *p);
/* Complete every op with MQP_ECLOSED and close every connection (the end of mqp__io_run, and of
 * a pool on an event loop). */
void mqp__io_close(struct mqp_pool *p);

/* A pool on the application's event loop (options.loop), on the loop's thread: */
/* after creation: ask for a first run */
void mqp__io_start_on_loop(struct mqp_pool *p);
/* mqp_pool_process: everything ready, without waiting; true when the pool must now be closed
 * (a destroy from a callback, or from another thread) */
bool mqp__io_process(struct mqp_pool *p);
/* mqp_pool_io: the descriptor of tag (a connection, or NULL: the inbox's eventfd) is ready;
 * true when the pool must now be closed */
bool mqp__io_ready(struct mqp_pool *p, void *tag, unsigned ready);
/* an op from the loop's thread itself: admitted and started now, no hand-off; its callback, if
 * the call completes at once, waits for the next process. MQP_OK or MQP_ECLOSED (op freed). */
int mqp__io_direct(struct mqp_pool *p, struct op *op, mqp_ticket *ticket);

#endif
