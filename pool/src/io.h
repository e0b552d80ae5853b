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

#endif
