/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * legacy.c - the legacy model on warm connections: requests whose replies come on a fixed reply
 * topic (MQTT 3.1.1's only request/reply, or asked for over v5), each reply topic subscribed once
 * and kept, up to MQP_LSUBS_MAX a connection (legacy.h). I/O thread only.
 */
#include "legacy.h"

#include <stdlib.h>
#include <string.h>

#include "finish.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "session.h"

static struct lsub *lsub_find(struct pconn *c, const char *topic, size_t len)
{
	for (unsigned i = 0; i < c->nlsubs; i++)
		if (strlen(c->lsubs[i].topic) == len && memcmp(c->lsubs[i].topic, topic, len) == 0)
			return &c->lsubs[i];
	return NULL;
}

static struct op *legacy_find(struct mqp_pool *p, const char *topic, size_t len)
{
	struct op *op = NULL;
	HASH_FIND(hh_legacy, p->legacy, topic, len, op);
	return op;
}

/* Room for one more reply topic: the least recently used one no request waits on is
 * unsubscribed, and remembered a while so that what is still in flight for it is dropped. */
static void lsub_make_room(struct mqp_pool *p, struct pconn *c)
{
	int lru = -1;
	for (unsigned i = 0; i < c->nlsubs; i++) {
		struct op *op = legacy_find(p, c->lsubs[i].topic, strlen(c->lsubs[i].topic));
		if ((!op || op->conn != c) && c->lsubs[i].mid == 0
		    && (lru < 0 || c->lsubs[i].last_used < c->lsubs[lru].last_used))
			lru = (int)i;
	}
	if (lru < 0)
		return;
	struct lsub *l = &c->lsubs[lru];
	mqp__conn_unsubscribe(p, c, l->topic);
	unsigned oldest = 0;
	for (unsigned i = 1; i < MQP_LTOMBS_MAX; i++)
		if (c->tombs[i].until < c->tombs[oldest].until)
			oldest = i;
	free(c->tombs[oldest].topic);
	c->tombs[oldest]
	    = (struct ltomb) { .topic = l->topic, .until = mqc_now_ns() + 60 * MQC_NS_PER_S };
	*l = c->lsubs[--c->nlsubs];
}

int mqp__conn_legacy(struct mqp_pool *p, struct pconn *c, struct op *op)
{
	size_t len = strlen(op->reply_topic);
	struct lsub *l = lsub_find(c, op->reply_topic, len);
	if (l) {
		l->last_used = mqc_now_ns();
		if (l->mid)
			return MQP_OK; /* subscribed soon: the SUBACK sends it */
		if (op->last_conn && op->last_conn != c->token) {
			/* The topic's last request went out on another connection, while this one stayed
			 * subscribed: a copy of that reply may still be on its way here, and would pass
			 * for this request's. The broker writes a connection's packets in order: what
			 * arrives on the topic before the PINGRESP of a PINGREQ sent now is dropped. */
			if (mqc_enc_pingreq(&c->w.tx) != 0)
				return MQP_ENOMEM;
			l->barrier = ++c->pings_sent;
			if (!l->barrier)
				l->barrier = ++c->pings_sent; /* 0 means none */
			return MQP_OK;
		}
		return mqp__conn_publish(p, c, op);
	}
	if (c->nlsubs == MQP_LSUBS_MAX)
		lsub_make_room(p, c);
	if (c->nlsubs == MQP_LSUBS_MAX)
		return MQP_EEXHAUSTED; /* every reply topic of this connection has a request waiting */
	if (!c->lsubs && !(c->lsubs = malloc(MQP_LSUBS_MAX * sizeof *c->lsubs)))
		return MQP_ENOMEM;
	for (unsigned i = 0; i < MQP_LTOMBS_MAX; i++) /* subscribed again: no longer a tomb */
		if (c->tombs[i].topic && strcmp(c->tombs[i].topic, op->reply_topic) == 0) {
			free(c->tombs[i].topic);
			c->tombs[i] = (struct ltomb) { 0 };
		}
	char *topic = strdup(op->reply_topic);
	uint16_t mid = 0;
	/* Retained messages are never replies: MQTT 5 need not send them at all. */
	int rc = topic ? mqp__send_subscribe(c, MID_LSUB, NULL, topic, op->qos,
	             c->protocol == 5 ? MQC_SUBOPT_RETAIN_NEVER : 0, 0, &mid)
	               : MQP_ENOMEM;
	if (rc != MQP_OK) {
		free(topic);
		return rc;
	}
	/* The command goes out at SUBACK: a reply can then not come before the subscription. */
	c->lsubs[c->nlsubs++] = (struct lsub) { .topic = topic, .mid = mid, .last_used = mqc_now_ns() };
	return MQP_OK;
}

/* A reply topic's SUBACK: the request waiting for it is sent, or refused. */
void mqp__legacy_granted(struct mqp_pool *p, struct pconn *c, uint16_t mid, bool granted)
{
	struct lsub *l = NULL;
	for (unsigned i = 0; i < c->nlsubs; i++)
		if (c->lsubs[i].mid == mid)
			l = &c->lsubs[i];
	if (!l)
		return;
	struct op *op = legacy_find(p, l->topic, strlen(l->topic));
	if (op && (op->conn != c || op->sent))
		op = NULL;
	if (!granted) {
		free(l->topic);
		*l = c->lsubs[--c->nlsubs];
		if (op)
			mqp__finish(p, op, MQP_EDENIED);
		return;
	}
	l->mid = 0;
	if (op) {
		int rc = mqp__conn_publish(p, c, op);
		if (rc != MQP_OK)
			mqp__finish(p, op, rc);
	}
}

/* A PINGRESP: the legacy requests waiting for one (lsub->barrier) go out now. */
void mqp__legacy_barriers(struct mqp_pool *p, struct pconn *c)
{
	for (unsigned i = 0; i < c->nlsubs; i++) {
		struct lsub *l = &c->lsubs[i];
		if (!l->barrier || (int32_t)(c->pings_answered - l->barrier) < 0)
			continue;
		l->barrier = 0;
		struct op *op = legacy_find(p, l->topic, strlen(l->topic));
		if (op && op->conn == c && !op->sent) {
			int rc = mqp__conn_publish(p, c, op);
			if (rc != MQP_OK)
				mqp__finish(p, op, rc);
		}
	}
}

/* A message on one of the connection's legacy reply topics (or one it left a moment ago). */
bool mqp__legacy_topic(struct pconn *c, const struct mqc_publish *m)
{
	if (lsub_find(c, m->topic.p, m->topic.len))
		return true;
	uint64_t now = mqc_now_ns();
	for (unsigned i = 0; i < MQP_LTOMBS_MAX; i++)
		if (c->tombs[i].topic && c->tombs[i].until > now
		    && strlen(c->tombs[i].topic) == m->topic.len
		    && memcmp(c->tombs[i].topic, m->topic.p, m->topic.len) == 0)
			return true;
	return false;
}

void mqp__legacy_reply(struct mqp_pool *p, struct pconn *c, const struct mqc_publish *m)
{
	struct op *op = legacy_find(p, m->topic.p, m->topic.len);
	if (!op || op->conn != c || !op->sent || mqc_now_ns() >= op->deadline) {
		atomic_fetch_add(&p->stats.late_replies, 1); /* nobody waits on this topic now */
		return;
	}
	if (m->retain) {
		atomic_fetch_add(&p->stats.strays, 1); /* a retained message is never a reply */
		return;
	}
	struct mqp_message cand = {
		.topic = mqc_str_dup(m->topic),
		.payload = malloc(m->len + 1),
		.len = m->len,
		.qos = m->qos,
	};
	if (!cand.topic || !cand.payload) {
		mqp_message_free(&cand);
		mqp__finish(p, op, MQP_ENOMEM);
		return;
	}
	if (m->len)
		memcpy(cand.payload, m->payload, m->len);
	((char *)cand.payload)[m->len] = '\0';
	/* The match callback tells this request's reply from others (the device's request id). It
	 * runs here, on the pool's thread, before the deadline (so its caller still waits). */
	if (op->match && !op->match(op->match_userdata, &cand)) {
		mqp_message_free(&cand);
		atomic_fetch_add(&p->stats.strays, 1);
		return;
	}
	op->reply
	    = (struct mqp_reply) { .payload = cand.payload, .len = cand.len, .topic = cand.topic };
	atomic_fetch_add(&p->stats.replies, 1);
	mqp__finish(p, op, MQP_OK);
}
