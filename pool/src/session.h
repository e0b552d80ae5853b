/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * session.h - what a connection sends in its MQTT session (session.c): packet identifiers,
 * PUBLISH and the broker's quota, SUBSCRIBE and UNSUBSCRIBE, acknowledgements. I/O thread only.
 * Packets are queued in the connection's send buffer; io.c sends them at the end of the turn.
 */
#ifndef MQP_SESSION_H
#define MQP_SESSION_H

#include "pool.h"

/* c failed (fmt says how, for mqp_pool_last_error; the probe's connection says nothing): dead,
 * a failed connect when it was not ready yet; mqp__conn_settle closes it. */
void mqp__conn_error(struct mqp_pool *p, struct pconn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Packet identifiers in use on c: the one for mid (NULL: none); a free one, recorded as kind for
 * op (0: out of memory); one given back. */
struct mid_use *mqp__mid_find(struct pconn *c, uint16_t mid);
uint16_t mqp__mid_take(struct pconn *c, enum mid_kind kind, struct op *op);
void mqp__mid_drop(struct pconn *c, struct mid_use *u);

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
/* SUBSCRIBE filter, its identifier recorded as kind for op and given in *mid_out. MQP_OK,
 * MQP_EINVAL (not UTF-8), MQP_ENOMEM. */
int mqp__send_subscribe(struct pconn *c, enum mid_kind kind, struct op *op, const char *filter,
    int qos, int options, uint32_t sub_id, uint16_t *mid_out);
/* An acknowledgement (PUBACK, PUBREC, PUBREL, PUBCOMP) for mid; out of memory ends c. */
void mqp__send_ack(struct mqp_pool *p, struct pconn *c, int type, uint16_t mid);
/* Acknowledgements made room in the broker's quota: the publishes held for it go, in order. */
void mqp__send_held(struct mqp_pool *p, struct pconn *c);

#endif
