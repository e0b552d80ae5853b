/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.h - a pooled connection's life and its MQTT session (codec.h over wire.h), and completing
 * the operations it carries (conn.c). I/O thread only.
 *
 * Packets are queued in the connection's send buffer as operations start and as the broker's
 * packets ask for answers (PUBACK, PUBREC, PUBCOMP); the I/O loop sends every connection's queue
 * once per turn (mqp__conn_flush).
 */
#ifndef MQP_CONN_H
#define MQP_CONN_H

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

/* Start connecting slot c; on failure c stays closed and the pool backs off. */
void mqp__conn_open(struct mqp_pool *p, struct pconn *c, unsigned node);
/* c's broker name is being resolved: if the answer is in, the connect starts (or fails). */
void mqp__conn_poll(struct mqp_pool *p, struct pconn *c);
/* Close c now: its calls fail with MQP_ECONNLOST, its lease's messages are dropped. */
void mqp__conn_close(struct mqp_pool *p, struct pconn *c);
/* Say goodbye (DISCONNECT, sent at once) and close (the pool's end: nothing waits). */
void mqp__conn_disconnect(struct mqp_pool *p, struct pconn *c);
/* Retire c as a client should: its calls fail with MQP_ECONNLOST, DISCONNECT goes out and our
 * side is shut, and the socket closes once the broker has closed its side (or after two seconds):
 * what it sends meanwhile is read and dropped, so the close is never a reset. The slot stays
 * taken meanwhile (STAGE_CLOSING), counted as neither ready nor connecting. */
void mqp__conn_retire(struct mqp_pool *p, struct pconn *c);
/* epoll said c's socket is ready (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP): read, handle every
 * complete packet, answer what needs an answer (queued for the flush). */
void mqp__conn_io(struct mqp_pool *p, struct pconn *c, uint32_t events);
/* The end of a loop turn: send what c queued, in one send. */
void mqp__conn_flush(struct mqp_pool *p, struct pconn *c);
/* Keepalive, about once a second: PINGREQ when nothing went out for a while, and the end of a
 * connection whose broker stopped answering. */
void mqp__conn_misc(struct mqp_pool *p, struct pconn *c, uint64_t now);
/* After anything that may have ended c (an error, a DISCONNECT): close it, back off. */
void mqp__conn_settle(struct mqp_pool *p, struct pconn *c);

/* Send op (OP_REQUEST, OP_PUBLISH, OP_LEASE_PUBLISH) on c, which already carries it (op->conn):
 * a request gets its Response Topic (c's inbox), Correlation Data (op->corr) and Message Expiry.
 * QoS 1 and 2 publishes beyond the broker's Receive Maximum wait on c until acknowledgements
 * make room. MQP_OK, or the error to finish op with (MQP_EDENIED for what the broker said in
 * CONNACK it does not take, MQP_ETOOBIG, MQP_ENOMEM, MQP_EINVAL). */
int mqp__conn_publish(struct mqp_pool *p, struct pconn *c, struct op *op);
/* SUBSCRIBE filter for op (OP_LEASE_SUBSCRIBE; completes at SUBACK), with MQTT 5 options and
 * Subscription Identifier sub_id (0: none). MQP_OK or the error to finish op with. */
int mqp__conn_subscribe(struct mqp_pool *p, struct pconn *c, struct op *op, const char *filter,
    int qos, int options, uint32_t sub_id);
/* UNSUBSCRIBE filter, not waited for. */
void mqp__conn_unsubscribe(struct mqp_pool *p, struct pconn *c, const char *filter);
/* Send the legacy request op (OP_LEGACY, carried by c and in p->legacy) on c: at once when c is
 * subscribed to its reply topic already, else after the SUBACK of a SUBSCRIBE that stays (the
 * connection keeps up to MQP_LSUBS_MAX reply topics). MQP_OK or the error to finish op with. */
int mqp__conn_legacy(struct mqp_pool *p, struct pconn *c, struct op *op);
/* A legacy request waits for its reply topic (another request in the process holds it). */
void mqp__legacy_wait(struct mqp_pool *p, struct op *op);

/* A lease handle of slot ends (released, discarded, or granted to a caller who had left): the
 * slot is free for the next lease, every copy of the handle is stale, a drain may wake. */
void mqp__lease_end(struct mqp_pool *p, unsigned slot);
/* Drop a lease's queued messages and subscriptions (at release or close). */
void mqp__lease_clear(struct mqp_pool *p, struct pconn *c);

#endif
