/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.h - a pooled connection's life and its MQTT session (codec.h over wire.h) (conn.c). I/O
 * thread only. Completing what it carries is finish.h's; its node's health and liveness node.h's.
 *
 * Packets are queued in the connection's send buffer as operations start and as the broker's
 * packets ask for answers (PUBACK, PUBREC, PUBCOMP); the I/O loop sends every connection's queue
 * once per turn (mqp__conn_flush).
 */
#ifndef MQP_CONN_H
#define MQP_CONN_H

#include "finish.h"
#include "pool.h"

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
/* Every mqp__live_interval_ms: a retiring connection the broker never closed is closed, and
 * liveness is checked (mqp__live_check: pings, and the end of a connection nobody answers). */
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

#endif
