/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * legacy.h - the legacy model's reply topics on a connection (legacy.c). I/O thread only.
 */
#ifndef MQP_LEGACY_H
#define MQP_LEGACY_H

#include "mqc_codec.h"
#include "pool.h"

/* Send the legacy request op (OP_LEGACY, carried by c and in p->legacy) on c: at once when c is
 * subscribed to its reply topic already, else after the SUBACK of a SUBSCRIBE that stays (the
 * connection keeps up to MQP_LSUBS_MAX reply topics). MQP_OK or the error to finish op with. */
int mqp__conn_legacy(struct mqp_pool *p, struct pconn *c, struct op *op);
/* A SUBACK for mid: when it was a reply topic's, the request waiting for it is sent (granted) or
 * fails with MQP_EDENIED. */
void mqp__legacy_granted(struct mqp_pool *p, struct pconn *c, uint16_t mid, bool granted);
/* A PINGRESP: the legacy requests waiting for one (lsub->barrier) go out now. */
void mqp__legacy_barriers(struct mqp_pool *p, struct pconn *c);
/* Whether m came on one of c's reply topics (or one it left a moment ago). */
bool mqp__legacy_topic(struct pconn *c, const struct mqc_publish *m);
/* m on a reply topic of c: the reply of the request waiting there, when its match says so. */
void mqp__legacy_reply(struct mqp_pool *p, struct pconn *c, const struct mqc_publish *m);

#endif
