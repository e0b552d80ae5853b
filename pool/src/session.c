/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * session.c - what a connection sends in its MQTT session: packet identifiers, PUBLISH with a
 * request's properties, the broker's quota (Receive Maximum) and the publishes held for it,
 * SUBSCRIBE and UNSUBSCRIBE, the QoS 1 and 2 acknowledgements (session.h). I/O thread only.
 */
#include "session.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "finish.h"
#include "mqc_clock.h"
#include "mqc_codec.h"

struct mid_use *mqp__mid_find(struct pconn *c, uint16_t mid)
{
	for (unsigned i = 0; i < c->nmids; i++)
		if (c->mids[i].mid == mid)
			return &c->mids[i];
	return NULL;
}

/* A free packet identifier, recorded as kind for op; 0 when out of memory. */
uint16_t mqp__mid_take(struct pconn *c, enum mid_kind kind, struct op *op)
{
	if (c->nmids == c->mids_cap) {
		unsigned cap = c->mids_cap ? c->mids_cap * 2 : 16;
		struct mid_use *grown = cap < 65535 ? realloc(c->mids, cap * sizeof *grown) : NULL;
		if (!grown)
			return 0;
		c->mids = grown;
		c->mids_cap = cap;
	}
	uint16_t mid;
	do { /* fewer than 65535 are ever in use (bounded above), so this ends */
		mid = ++c->next_mid ? c->next_mid : ++c->next_mid;
	} while (mqp__mid_find(c, mid));
	c->mids[c->nmids++] = (struct mid_use) { .mid = mid, .kind = (uint8_t)kind, .op = op };
	return mid;
}

void mqp__mid_drop(struct pconn *c, struct mid_use *u)
{
	*u = c->mids[--c->nmids];
}

void mqp__conn_error(struct mqp_pool *p, struct pconn *c, const char *fmt, ...)
{
	if (c->probe) {
		c->dead = true;
		return; /* the probe's messages are its verdict's */
	}
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	mqp__set_error(p, "%s", text);
	c->dead = true;
	if (!c->ready)
		c->failed_connect = true;
}

/* The properties of op's PUBLISH: a request's Response Topic, Correlation Data and expiry. */
static void request_props(const struct pconn *c, const struct op *op, struct mqc_pub_props *pp)
{
	*pp = (struct mqc_pub_props) { 0 };
	if (op->kind != OP_REQUEST)
		return;
	uint64_t now = mqc_now_ns();
	/* ceil(time left) in seconds, at least 1: the header's promise */
	uint64_t left = op->deadline > now ? op->deadline - now : 0;
	uint32_t expiry = (uint32_t)((left + MQC_NS_PER_S - 1) / MQC_NS_PER_S);
	pp->response_topic = c->inbox;
	pp->corr = op->corr;
	pp->corr_len = MQP_CORR_LEN;
	pp->has_expiry = true;
	pp->expiry_s = expiry ? expiry : 1;
}

/* The pool's error for an encoder's. */
static int enc_error(int rc)
{
	return rc == MQC_ENC_OK     ? MQP_OK
	    : rc == MQC_ENC_TOOBIG  ? MQP_ETOOBIG
	    : rc == MQC_ENC_INVALID ? MQP_EINVAL
	                            : MQP_ENOMEM;
}

/* Encode op's PUBLISH now (QoS 1/2: with a packet identifier). */
static int send_publish(struct pconn *c, struct op *op)
{
	uint16_t mid = 0;
	if (op->qos) {
		mid = mqp__mid_take(c, op->qos == 1 ? MID_PUB1 : MID_PUB2, op);
		if (!mid)
			return MQP_ENOMEM;
	}
	struct mqc_pub_props pp;
	request_props(c, op, &pp);
	int rc = mqc_enc_publish(
	    &c->w.tx, c->protocol, op->topic, op->qos, op->retain != 0, mid, &pp, op->payload, op->len);
	if (rc != MQC_ENC_OK) {
		if (mid)
			mqp__mid_drop(c, mqp__mid_find(c, mid));
		return enc_error(rc);
	}
	op->mid = mid;
	if (op->kind == OP_LEGACY)
		op->sent = true; /* from now on the device may answer */
	if (op->qos) {
		c->unacked++;
	} else if (op->kind != OP_REQUEST && op->kind != OP_LEGACY) {
		/* written is done once the wire has sent it (mqp__conn_flush) */
		op->awaiting_write = true;
		op->wait_next = c->written;
		c->written = op;
	}
	return MQP_OK;
}

/* QoS 1 and 2 publishes that waited for the broker's Receive Maximum, as room appears. */
void mqp__send_held(struct mqp_pool *p, struct pconn *c)
{
	while (c->held && c->unacked < c->quota) {
		struct op *op = c->held;
		c->held = op->wait_next;
		if (!c->held)
			c->held_tail = &c->held;
		op->held = false;
		int rc = send_publish(c, op);
		if (rc != MQP_OK)
			mqp__finish(p, op, rc);
	}
}

int mqp__conn_publish(struct mqp_pool *p, struct pconn *c, struct op *op)
{
	if (op->qos > c->max_qos || (op->retain && !c->retain_available))
		return MQP_EDENIED; /* what its CONNACK said it does not take */
	if (!mqc_utf8_valid(op->topic, strlen(op->topic)))
		return MQP_EINVAL;
	/* The packet as it will be written, against the broker's Maximum Packet Size (or MQTT's own
	 * limit): refused now, with both sizes said, rather than by the encoder later. */
	struct mqc_pub_props pp;
	request_props(c, op, &pp);
	size_t size = mqc_publish_size(c->protocol, op->topic, op->qos, &pp, op->len);
	size_t limit = c->w.tx.max_packet ? c->w.tx.max_packet : (size_t)MQC_REMAINING_MAX + 5;
	if (size > limit) {
		if (c->w.tx.max_packet)
			mqp__set_error(p,
			    "a PUBLISH to %s of %zu bytes is larger than the broker at %s takes (its Maximum "
			    "Packet Size, %zu bytes)",
			    op->topic, size, c->w.where, limit);
		else
			mqp__set_error(p, "a PUBLISH to %s of %zu payload bytes does not fit in an MQTT packet",
			    op->topic, op->len);
		return MQP_ETOOBIG;
	}
	c->last_used = mqc_now_ns();
	if (op->qos && c->unacked >= c->quota) {
		op->held = true;
		op->wait_next = NULL;
		*c->held_tail = op;
		c->held_tail = &op->wait_next;
		return MQP_OK;
	}
	return send_publish(c, op);
}

int mqp__send_subscribe(struct pconn *c, enum mid_kind kind, struct op *op, const char *filter,
    int qos, int options, uint32_t sub_id, uint16_t *mid_out)
{
	if (!mqc_utf8_valid(filter, strlen(filter)))
		return MQP_EINVAL;
	uint16_t mid = mqp__mid_take(c, kind, op);
	if (!mid)
		return MQP_ENOMEM;
	int rc = mqc_enc_subscribe(
	    &c->w.tx, c->protocol, mid, filter, qos, options, c->sub_ids_available ? sub_id : 0);
	if (rc != MQC_ENC_OK) {
		mqp__mid_drop(c, mqp__mid_find(c, mid));
		return enc_error(rc);
	}
	*mid_out = mid;
	return MQP_OK;
}

int mqp__conn_subscribe(struct mqp_pool *p, struct pconn *c, struct op *op, const char *filter,
    int qos, int options, uint32_t sub_id)
{
	/* What the broker's CONNACK said it does not take is refused here, saying so: sent, it
	 * would be a protocol error [MQTT-3.2.2-...] and the connection would close. */
	bool shared = strncmp(filter, "$share/", 7) == 0;
	if ((!c->wildcards_available && strpbrk(filter, "+#")) || (!c->shared_available && shared)) {
		mqp__set_error(p, "the broker at %s takes no %s subscriptions (its CONNACK said so): %s",
		    c->w.where, shared && !c->shared_available ? "shared" : "wildcard", filter);
		return MQP_EDENIED;
	}
	uint16_t mid = 0;
	int rc = mqp__send_subscribe(c, MID_SUB, op, filter, qos, options, sub_id, &mid);
	op->mid = mid;
	return rc;
}

void mqp__conn_unsubscribe(struct mqp_pool *p, struct pconn *c, const char *filter)
{
	(void)p;
	uint16_t mid = mqp__mid_take(c, MID_UNSUB, NULL);
	if (mid && mqc_enc_unsubscribe(&c->w.tx, c->protocol, mid, filter) != 0)
		mqp__mid_drop(c, mqp__mid_find(c, mid));
}

void mqp__send_ack(struct mqp_pool *p, struct pconn *c, int type, uint16_t mid)
{
	if (mqc_enc_ack(&c->w.tx, type, mid) != 0)
		mqp__conn_error(p, c, "connection to %s: out of memory for an acknowledgement", c->w.where);
}
