/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.c - a pooled connection's life (connect, inbox, session, close) on the pool's own codec
 * and sockets, and the completion of the operations it carries. I/O thread only.
 */
#define _GNU_SOURCE
#include "conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "claims.h"
#include "legacy.h"
#include "logic.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_random.h"
#include "mqc_verdict.h"
#include "node.h"
#include "session.h"

/* What the pool tells the broker in CONNECT: QoS 1 and 2 messages it may have unacknowledged
 * with us (the pool acknowledges each at once), and the largest packet we take. */
enum { RECEIVE_MAX = 256 };
/* MQTT 3.1.1 has no Receive Maximum: as many QoS 1 and 2 publishes in flight as libmosquitto
 * allows by default. */
enum { QUOTA_311 = 20 };

/* --- connections ------------------------------------------------------------------------ */

static void conn_fail_ops(struct mqp_pool *p, struct pconn *c, int result)
{
	while (c->ops)
		mqp__finish(p, c->ops, result);
}

static void session_free(struct pconn *c)
{
	for (unsigned i = 0; i < c->nlsubs; i++)
		free(c->lsubs[i].topic);
	free(c->lsubs);
	c->lsubs = NULL;
	c->nlsubs = 0;
	for (unsigned i = 0; i < MQP_LTOMBS_MAX; i++) {
		free(c->tombs[i].topic);
		c->tombs[i] = (struct ltomb) { 0 };
	}
	free(c->mids);
	free(c->in2);
	c->mids = NULL;
	c->in2 = NULL;
	c->nmids = c->mids_cap = c->nin2 = 0;
}

void mqp__conn_close(struct mqp_pool *p, struct pconn *c)
{
	mqp__node_leave(p, c);
	conn_fail_ops(p, c, MQP_ECONNLOST);
	mqp__wire_close(&c->w); /* the socket leaves the epoll set as it closes */
	if (c->receiver)
		mqp__finish(p, c->receiver, MQP_ECONNLOST);
	mqp__lease_clear(p, c);
	mqp__corr_free(&c->corr);
	session_free(c);
	bool probe = c->probe;
	*c = (struct pconn) { .w = { .fd = -1 } };
	c->probe = probe;
}

void mqp__conn_disconnect(struct mqp_pool *p, struct pconn *c)
{
	if (c->w.state == MQP_WIRE_OPEN && c->stage != STAGE_TRANSPORT && c->stage != STAGE_CLOSING
	    && mqc_enc_disconnect(&c->w.tx, c->protocol, 0) == 0)
		mqp__wire_flush(&c->w); /* what the kernel takes now; a goodbye is not waited for */
	mqp__conn_close(p, c);
}

/* How long a retiring connection waits for the broker to close its side. */
enum { CLOSING_MS = 2000 };

void mqp__conn_retire(struct mqp_pool *p, struct pconn *c)
{
	if (c->stage == STAGE_CLOSING)
		return;
	conn_fail_ops(p, c, MQP_ECONNLOST);
	if (c->receiver)
		mqp__finish(p, c->receiver, MQP_ECONNLOST);
	mqp__lease_clear(p, c);
	if (c->dead || c->w.state != MQP_WIRE_OPEN || c->stage == STAGE_TRANSPORT
	    || mqc_enc_disconnect(&c->w.tx, c->protocol, 0) != MQC_ENC_OK
	    || mqp__wire_finish(&c->w) != MQP_WIRE_OK) {
		mqp__conn_close(p, c);
		return;
	}
	mqp__node_leave(p, c); /* a closing connection takes no work: another may open meanwhile */
	c->stage = STAGE_CLOSING;
	c->ready = false;
	c->closing_until = mqc_now_ns() + (uint64_t)CLOSING_MS * MQC_NS_PER_MS;
}

/* The connection can carry work: inbox subscribed (v5) or CONNACK received (3.1.1). */
static void conn_ready(struct pconn *c)
{
	c->ready = true;
	c->stage = STAGE_READY;
	uint64_t now = mqc_now_ns(), lifetime = (uint64_t)c->pool->opt.max_lifetime_ms * MQC_NS_PER_MS;
	c->ready_at = c->last_used = c->idle_since = now;
	pthread_mutex_lock(&c->pool->report_lock);
	mqc_hist_record(&c->pool->h_connect, now - c->connect_start);
	pthread_mutex_unlock(&c->pool->report_lock);
	c->retire_at = c->pool->opt.max_lifetime_ms == MQP_NEVER
	    ? UINT64_MAX
	    : mqp__retire_at(now, lifetime, mqp__random32());
	atomic_fetch_add(&c->pool->stats.connects_ok, 1);
	c->pool->refused = false;
	atomic_store(&c->pool->stats.v311_only, 0);
	mqp__node_up(c->pool, c);
}

/* Open c (a slot, or the probe) to node: TCP, TLS, then CONNECT once open. */
static int conn_start(struct mqp_pool *p, struct pconn *c, int protocol, unsigned node)
{
	bool probe = c->probe;
	*c = (struct pconn) {
		.pool = p,
		.node = node,
		.w = { .fd = -1 },
		.probe = probe,
		.protocol = protocol,
		.epoch = 1,
		.quota = protocol == 5 ? 65535 : QUOTA_311,
		.max_qos = 2,
		.retain_available = true,
		.sub_ids_available = protocol == 5,
		.wildcards_available = true,
		.shared_available = true,
		.keepalive_s = p->opt.keepalive_s,
	};
	c->qtail = &c->qhead;
	c->held_tail = &c->held;
	c->token = mqp__conn_token();
	/* PREFIX-<64 random bits>: nobody can guess it to take the session (and inbox) over by
	 * connecting with the same id, and no two connections anywhere share one. */
	char prefix[16];
	snprintf(prefix, sizeof prefix, "%s-", p->client_prefix);
	if (mqc_random_id(c->id, sizeof c->id, prefix) != 0) {
		mqp__set_error(p, "no random bytes for a client id: %s", strerror(errno));
		return -1;
	}
	c->connect_start = mqc_now_ns();
	c->connect_deadline = c->connect_start + (uint64_t)p->opt.connect_timeout_ms * MQC_NS_PER_MS;
	struct pnode *n = &p->nodes[node];
	if (mqp__wire_start(&c->w, &n->url, &p->wire_opts, n->next_addr++, p->ssl_ctx, &p->watcher, c)
	    != MQP_WIRE_OK) {
		mqp__set_error(p, "%s", c->w.err);
		return -1;
	}
	c->open = true;
	if (!probe) {
		n->conns++;
		atomic_fetch_add(&n->a_conns, 1);
	}
	return 0;
}

void mqp__conn_open(struct mqp_pool *p, struct pconn *c, unsigned node)
{
	if (conn_start(p, c, p->opt.protocol, node) != 0) {
		*c = (struct pconn) { .w = { .fd = -1 } };
		mqp__node_failed(p, node);
		return;
	}
	if (mqp__corr_init(&c->corr) != 0) {
		mqp__set_error(p, "no random bytes for a correlation key: %s", strerror(errno));
		mqp__conn_close(p, c);
		mqp__node_failed(p, node);
		return;
	}
	snprintf(c->inbox, sizeof c->inbox, "%s/%s", p->inbox_prefix, c->id);
}

/* --- is it MQTT 5 the broker refuses? ----------------------------------------------------- */

/* A v5 CONNECT met cause: a CONNACK refusing its protocol version (said: the broker said so), or
 * a close without any CONNACK. One 3.1.1 CONNECT to the same address then says whether 3.1.1
 * works there. Until its verdict, the message says what was seen and that it is being checked. */
static void suspect_v311(struct mqp_pool *p, const struct pconn *c, const char *cause, bool said)
{
	if (p->opt.protocol != 5)
		return;
	if (p->probe_state == PROBE_DONE) {
		/* The verdict stands until a connection succeeds: say it again. */
		mqp__set_error(p, "%s", p->verdict);
		p->refused = p->refused_v5;
		return;
	}
	snprintf(p->probe_cause, sizeof p->probe_cause, "%s", cause);
	p->probe_said = said;
	mqp__set_error(p, "the broker at %s %s: trying one MQTT 3.1.1 CONNECT", c->w.where, cause);
	if (p->probe_state == PROBE_RUNNING)
		return;
	p->probe.probe = true;
	if (conn_start(p, &p->probe, 4, c->node) != 0) {
		mqp__conn_close(p, &p->probe);
		p->probe_state = PROBE_DONE;
		return;
	}
	p->probe_state = PROBE_RUNNING;
}

/* The probe's answer. answered: a 3.1.1 CONNACK came (with code); otherwise why it did not. A
 * diagnosis comes only from what the broker said: "does not accept MQTT 5" when its CONNACK
 * refused the protocol version; a close without a CONNACK is said as what it is (RabbitMQ 3
 * closes a v5 CONNECT so, and so does a broker that dislikes one of its values). */
static void probe_verdict(struct mqp_pool *p, bool answered, uint8_t code, const char *why)
{
	struct pconn *c = &p->probe;
	char seen[200], text[sizeof p->verdict];
	mqc_v311_seen(answered, code, why, seen, sizeof seen);
	mqc_v5_verdict(&(struct mqc_v5_check) { .where = c->w.where,
	                   .cause = p->probe_cause,
	                   .said = p->probe_said,
	                   .v311_works = answered && code == 0,
	                   .seen = seen,
	                   .fix = p->v311_advice ? p->v311_advice
	                                         : "set options.protocol = 4 (MQTT 3.1.1) and send "
	                                           "requests with mqp_pool_request_legacy" },
	    text, sizeof text);
	mqp__set_error(p, "%s", text);
	/* A refusal only when the broker refused: the pool stops trying and callers fail at once. */
	p->refused = p->refused_v5 = p->probe_said;
	atomic_store(&p->stats.v311_only, p->probe_said && answered && code == 0);
	pthread_mutex_lock(&p->report_lock);
	snprintf(p->verdict, sizeof p->verdict, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
	mqp__log(p, MQP_LOG_ERROR, "mqttpool: %s", p->verdict);
	p->probe_state = PROBE_DONE;
	c->dead = true;
}

/* --- protocol errors and CONNECT --------------------------------------------------------- */

/* The broker broke the protocol: counted, said, and the connection closed cleanly. */
static void protocol_error(struct mqp_pool *p, struct pconn *c, mqc_malformed why)
{
	atomic_fetch_add(&p->stats.protocol_errors, 1);
	if (c->protocol == 5 && c->stage != STAGE_TRANSPORT)
		mqc_enc_disconnect(&c->w.tx, 5, MQC_RC_MALFORMED_PACKET);
	mqp__conn_error(
	    p, c, "connection to %s closed: the broker sent a malformed packet (%s)", c->w.where, why);
	if (!c->probe)
		mqp__log(p, MQP_LOG_ERROR,
		    "mqttpool: connection to %s: malformed packet from the broker: %s", c->w.where, why);
}

static void send_connect(struct mqp_pool *p, struct pconn *c)
{
	struct mqc_connect m = {
		.protocol = c->protocol,
		.client_id = c->id,
		.username = p->username,
		.password = p->password,
		.keepalive_s = (uint16_t)(c->keepalive_s > 65535 ? 65535 : c->keepalive_s),
		.receive_max = RECEIVE_MAX,
		.max_packet = MQC_MAX_PACKET,
	};
	size_t before = mqc_buf_live(&c->w.tx);
	int rc = mqc_enc_connect(&c->w.tx, &m);
	c->connect_len = mqc_buf_live(&c->w.tx) - before;
	if (rc != MQC_ENC_OK) {
		mqp__conn_error(p, c, "connect to %s: cannot encode CONNECT (%s)", c->w.where,
		    rc == MQC_ENC_NOMEM ? "out of memory" : "a client id, user name or password too long");
		return;
	}
	c->stage = STAGE_CONNACK;
}

/* --- receiving ---------------------------------------------------------------------------- */

static void on_connack(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	struct mqc_connack a;
	mqc_malformed why = mqc_dec_connack(pk, c->protocol, &a);
	if (why) {
		protocol_error(p, c, why);
		return;
	}
	if (c->stage != STAGE_CONNACK) {
		protocol_error(p, c, "a second CONNACK");
		return;
	}
	if (c->probe) {
		probe_verdict(p, true, a.code, NULL);
		return;
	}
	if (c->protocol == 5 && mqc_v5_refused(a.code, a.v311_form)) {
		/* The broker said so: a 3.1.1 CONNACK with return code 1 ("unacceptable protocol
		 * version", aedes), or a v5 one with 0x84. One 3.1.1 CONNECT says whether that works. */
		char cause[160];
		mqc_v5_refused_cause(a.code, a.v311_form, cause, sizeof cause);
		mqp__conn_error(p, c, "the broker at %s %s", c->w.where, cause);
		suspect_v311(p, c, cause, true);
		return;
	}
	if (c->protocol == 5 && !a.v311_form
	    && (a.code == MQC_RC_USE_ANOTHER_SERVER || a.code == MQC_RC_SERVER_MOVED)) {
		mqp__conn_error(p, c, "the broker at %s sent the pool elsewhere: %s (reason 0x%X)%s%.*s",
		    c->w.where, mqc_reason_text(a.code), a.code, a.server_ref.len ? ", to " : "",
		    (int)a.server_ref.len, a.server_ref.p ? a.server_ref.p : "");
		mqp__node_redirect(p, c, a.server_ref);
		return;
	}
	if (a.code != 0) {
		bool v311 = c->protocol != 5 || a.v311_form; /* the code is of the shape it came in */
		p->refused = true;
		mqp__conn_error(p, c, "the broker at %s refused CONNECT: %s (%s %s%X)%s%.*s%s", c->w.where,
		    mqc_connack_text(a.code, v311), v311 ? "MQTT 3.1.1 return code" : "reason code",
		    v311 ? "" : "0x", a.code, a.reason.len ? ": \"" : "", (int)a.reason.len,
		    a.reason.p ? a.reason.p : "", a.reason.len ? "\"" : "");
		return;
	}
	if (c->protocol == 5) {
		c->quota = a.receive_max;
		c->w.tx.max_packet = a.max_packet; /* 0: none; every encoder keeps to it */
		c->max_qos = a.max_qos;
		c->retain_available = a.retain_available;
		c->sub_ids_available = a.sub_ids_available;
		c->wildcards_available = a.wildcards_available;
		c->shared_available = a.shared_available;
		if (a.has_server_keepalive)
			c->keepalive_s = a.server_keepalive;
	}
	if (p->probe_state == PROBE_DONE)
		p->probe_state = PROBE_NONE; /* it connects now: a later failure is looked at anew */
	if (c->protocol != 5) {          /* 3.1.1: no inbox (requests need v5); ready for leases */
		conn_ready(c);
		return;
	}
	/* Subscribed once, for the connection's life: no local echo, never a retained "reply". The
	 * Response Topic is the inbox itself; "/#" takes what a device appends, where wildcards are
	 * allowed (a broker may say they are not: Wildcard Subscription Available 0). */
	char filter[MQP_TOPIC_MAX];
	snprintf(filter, sizeof filter, "%s%s", c->inbox, c->wildcards_available ? "/#" : "");
	if (mqp__send_subscribe(c, MID_SUB, NULL, filter, 1,
	        MQC_SUBOPT_NO_LOCAL | MQC_SUBOPT_RETAIN_NEVER, 0, &c->inbox_mid)
	    != MQP_OK) {
		mqp__conn_error(p, c, "cannot subscribe to the inbox %s (out of memory)", filter);
		return;
	}
	c->stage = STAGE_INBOX;
}

static void on_suback(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	struct mqc_suback s;
	mqc_malformed why = mqc_dec_suback(pk, c->protocol, &s);
	if (why) {
		protocol_error(p, c, why);
		return;
	}
	struct mid_use *u = mqp__mid_find(c, s.mid);
	if (!u
	    || (pk->type == MQC_SUBACK ? u->kind != MID_SUB && u->kind != MID_LSUB
	                               : u->kind != MID_UNSUB))
		return; /* nothing of ours waits for it */
	struct op *op = u->op;
	bool legacy = u->kind == MID_LSUB;
	mqp__mid_drop(c, u);
	if (pk->type == MQC_UNSUBACK)
		return;
	bool granted = s.codes[0] < 0x80;
	if (legacy) {
		mqp__legacy_granted(p, c, s.mid, granted);
		return;
	}
	if (s.mid == c->inbox_mid && c->stage == STAGE_INBOX) {
		if (!granted) {
			mqp__conn_error(p, c,
			    "the broker refused the inbox subscription %s/# (%s, reason %u): check the ACL",
			    c->inbox, mqc_reason_text(s.codes[0]), s.codes[0]);
			return;
		}
		conn_ready(c);
		return;
	}
	if (op)
		mqp__finish(p, op, granted ? MQP_OK : MQP_EDENIED);
}

static void on_ack(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	struct mqc_ack a;
	mqc_malformed why = mqc_dec_ack(pk, c->protocol, &a);
	if (why) {
		protocol_error(p, c, why);
		return;
	}
	if (pk->type == MQC_PUBREL) { /* the broker's QoS 2 message: released, we are done */
		for (unsigned i = 0; i < c->nin2; i++)
			if (c->in2[i] == a.mid) {
				c->in2[i] = c->in2[--c->nin2];
				break;
			}
		mqp__send_ack(p, c, MQC_PUBCOMP, a.mid);
		return;
	}
	struct mid_use *u = mqp__mid_find(c, a.mid);
	enum mid_kind want = pk->type == MQC_PUBACK ? MID_PUB1
	    : pk->type == MQC_PUBREC                ? MID_PUB2
	                                            : MID_REL;
	if (!u || u->kind != want)
		return; /* not one we wait for: nothing to do */
	struct op *op = u->op;
	bool refused = a.reason >= 0x80;
	/* v5: the broker found nobody subscribed to the command's topic, so no reply can come. The
	 * request fails now rather than at its deadline; QoS 0 has no acknowledgement to say so. */
	bool nobody = a.reason == MQC_RC_NO_MATCHING_SUBSCRIBERS && op
	    && (op->kind == OP_REQUEST || op->kind == OP_LEGACY);
	if (pk->type == MQC_PUBREC && !refused) {
		u->kind = MID_REL; /* the same identifier until PUBCOMP */
		mqp__send_ack(p, c, MQC_PUBREL, a.mid);
		if (nobody) {
			op->acked = true;
			mqp__finish(p, op, MQP_ENORESPONDER); /* detaches it from the identifier */
		}
		return;
	}
	mqp__mid_drop(c, u);
	c->unacked--;
	if (op) {
		op->acked = true;
		if (refused)
			mqp__finish(p, op, MQP_EDENIED);
		else if (nobody)
			mqp__finish(p, op, MQP_ENORESPONDER);
		else if (op->kind == OP_PUBLISH || op->kind == OP_LEASE_PUBLISH)
			mqp__finish(p, op, MQP_OK);
		/* a request now waits for its reply */
	}
	mqp__send_held(p, c);
}

/* A message on one of the lease's subscriptions: queued for it, or to its waiting receive. */
static void to_lease(struct mqp_pool *p, struct pconn *c, const struct mqc_publish *m)
{
	struct lmsg *l = calloc(1, sizeof *l);
	if (!l)
		return;
	l->m.topic = mqc_str_dup(m->topic);
	l->m.payload = malloc(m->len + 1);
	if (!l->m.topic || !l->m.payload) {
		mqp_message_free(&l->m);
		free(l);
		return;
	}
	if (m->len > 0)
		memcpy(l->m.payload, m->payload, m->len);
	((char *)l->m.payload)[m->len] = '\0';
	l->m.len = m->len;
	l->m.qos = m->qos;
	l->m.retain = m->retain;
	if (c->receiver) {
		struct op *r = c->receiver;
		r->msg = l->m;
		free(l);
		mqp__finish(p, r, MQP_OK);
	} else {
		*c->qtail = l;
		c->qtail = &l->next;
	}
}

static bool has_sub_id(const struct mqc_publish *m, uint32_t id)
{
	for (unsigned i = 0; i < m->n_sub_ids && i < MQC_PUB_SUB_IDS; i++)
		if (m->sub_ids[i] == id)
			return true;
	return false;
}

/* A v5 message on this connection's inbox: a reply (PREFIX/<client id> and below). */
static bool on_inbox(const struct pconn *c, const struct mqc_publish *m)
{
	size_t n = strlen(c->inbox);
	return m->topic.len >= n && memcmp(m->topic.p, c->inbox, n) == 0
	    && (m->topic.len == n || m->topic.p[n] == '/');
}

static void deliver(struct mqp_pool *p, struct pconn *c, const struct mqc_publish *m)
{
	/* Without Subscription Identifiers (3.1.1, or a v5 broker that has none) nothing tells one
	 * lease's messages from the next one's: every message that is not a reply is the lease's. */
	bool v311 = c->protocol != 5 || !c->sub_ids_available;
	bool lease_id = !v311 && m->n_sub_ids; /* MQTT 5: a lease's subscriptions carry one */
	if (!lease_id && mqp__legacy_topic(c, m)) {
		mqp__legacy_reply(p, c, m); /* a reply on a fixed reply topic */
		return;
	}
	if ((v311 && (c->protocol != 5 || !on_inbox(c, m))) || lease_id) {
		/* A lease's subscription: only the current lease's identifier counts (3.1.1 has none:
		 * every message belongs to the lease). */
		if (!c->leased || (!v311 && !has_sub_id(m, c->epoch))
		    || (v311 && m->retain && !c->retained_ok)) {
			atomic_fetch_add(&p->stats.stale_dropped, 1);
			return;
		}
		to_lease(p, c, m);
		return;
	}
	struct op *op = NULL;
	uint64_t seq = 0;
	if (m->corr && m->corr_len == MQP_CORR_LEN && !m->retain)
		HASH_FIND(hh, p->pending, m->corr, MQP_CORR_LEN, op);
	if (op && op->conn == c) {
		op->reply.topic = mqc_str_dup(m->topic);
		op->reply.payload = malloc(m->len + 1);
		if (op->reply.payload && op->reply.topic) {
			if (m->len > 0)
				memcpy(op->reply.payload, m->payload, m->len);
			((char *)op->reply.payload)[m->len] = '\0';
			op->reply.len = m->len;
			atomic_fetch_add(&p->stats.replies, 1);
			mqp__finish(p, op, MQP_OK);
		} else {
			mqp__finish(p, op, MQP_ENOMEM);
		}
	} else if (mqp__classify_unmatched(
	               mqp__corr_open(&c->corr, m->corr, m->corr_len, &seq), seq, c->next_seq)
	    == MQP_LATE) {
		atomic_fetch_add(&p->stats.late_replies, 1); /* ours, but no longer awaited */
	} else {
		atomic_fetch_add(&p->stats.strays, 1); /* no request of this connection had it */
	}
}

static void on_publish(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	struct mqc_publish m;
	mqc_malformed why = mqc_dec_publish(pk, c->protocol, &m);
	if (why) {
		protocol_error(p, c, why);
		return;
	}
	if (c->stage != STAGE_INBOX && c->stage != STAGE_READY) {
		protocol_error(p, c, "a PUBLISH before CONNACK");
		return;
	}
	if (m.qos == 1) {
		mqp__send_ack(p, c, MQC_PUBACK, m.mid);
	} else if (m.qos == 2) {
		for (unsigned i = 0; i < c->nin2; i++)
			if (c->in2[i] == m.mid) { /* delivered at its first PUBLISH: this is a resend */
				mqp__send_ack(p, c, MQC_PUBREC, m.mid);
				return;
			}
		if (c->nin2 == RECEIVE_MAX) {
			protocol_error(p, c, "more QoS 2 messages unreleased than our Receive Maximum");
			return;
		}
		if (!c->in2 && !(c->in2 = malloc(RECEIVE_MAX * sizeof *c->in2))) {
			mqp__conn_error(p, c, "connection to %s: out of memory", c->w.where);
			return;
		}
		c->in2[c->nin2++] = m.mid;
		mqp__send_ack(p, c, MQC_PUBREC, m.mid);
	}
	deliver(p, c, &m);
}

static void on_disconnect(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	struct mqc_disconnect d;
	mqc_malformed why = mqc_dec_disconnect(pk, c->protocol, &d);
	if (why) {
		protocol_error(p, c, why);
		return;
	}
	bool was_ready = c->ready;
	mqp__conn_error(p, c, "the broker at %s closed the connection: %s (reason 0x%X)%s%.*s%s",
	    c->w.where, mqc_reason_text(d.reason), d.reason, d.text.len ? ": \"" : "", (int)d.text.len,
	    d.text.p ? d.text.p : "", d.text.len ? "\"" : "");
	if (was_ready)
		mqp__node_lost(p, c);
	if (d.reason == MQC_RC_SERVER_SHUTTING_DOWN || d.reason == MQC_RC_USE_ANOTHER_SERVER
	    || d.reason == MQC_RC_SERVER_MOVED)
		mqp__node_redirect(p, c, d.server_ref);
}

static void handle(struct mqp_pool *p, struct pconn *c, const struct mqc_packet *pk)
{
	if (pk->type != MQC_CONNACK && c->stage == STAGE_CONNACK) {
		protocol_error(p, c, "a packet before CONNACK");
		return;
	}
	switch (pk->type) {
		case MQC_CONNACK:
			on_connack(p, c, pk);
			break;
		case MQC_PUBLISH:
			on_publish(p, c, pk);
			break;
		case MQC_PUBACK:
		case MQC_PUBREC:
		case MQC_PUBREL:
		case MQC_PUBCOMP:
			on_ack(p, c, pk);
			break;
		case MQC_SUBACK:
		case MQC_UNSUBACK:
			on_suback(p, c, pk);
			break;
		case MQC_PINGRESP:
			if (pk->flags || pk->body_len)
				protocol_error(p, c, "a PINGRESP with flags or a body");
			c->ping_out = false;
			c->pings_answered++;
			mqp__live_pingresp(p, c);
			mqp__legacy_barriers(p, c);
			break;
		case MQC_DISCONNECT:
			on_disconnect(p, c, pk);
			break;
		default:
			protocol_error(p, c, "a packet type a broker does not send");
	}
}

/* Every complete packet the receive buffer holds. */
static void parse(struct mqp_pool *p, struct pconn *c)
{
	struct mqc_buf *rx = &c->w.rx;
	while (!c->dead && mqc_buf_live(rx)) {
		struct mqc_packet pk;
		mqc_malformed why = NULL;
		enum mqc_frame_result fr
		    = mqc_frame(rx->data + rx->off, mqc_buf_live(rx), MQC_MAX_PACKET, &pk, &why);
		if (fr == MQC_FRAME_MORE)
			return;
		if (fr == MQC_FRAME_BAD) {
			protocol_error(p, c, why);
			return;
		}
		handle(p, c, &pk);
		mqc_buf_consume(rx, pk.size);
	}
}

/* Said when the broker closes the connection (or it fails) before CONNACK. */
static void closed_early(struct mqp_pool *p, struct pconn *c, const char *what)
{
	if (c->probe) {
		probe_verdict(p, false, 0, what);
		return;
	}
	if (c->stage == STAGE_CONNACK && c->protocol == 5) {
		/* What it closed in answer to, said: a value it disliked is as likely as the version. */
		char sent[300], cause[400];
		snprintf(sent, sizeof sent,
		    "it was %zu bytes: clean start, Keep Alive %u s, Receive Maximum %u, Maximum Packet "
		    "Size %u, Topic Alias Maximum 0, client id %s%s%s",
		    c->connect_len, c->keepalive_s, (unsigned)RECEIVE_MAX, (unsigned)MQC_MAX_PACKET, c->id,
		    p->username ? ", user name " : ", no user name", p->username ? p->username : "");
		mqc_v5_closed_cause(sent, cause, sizeof cause);
		mqp__conn_error(p, c, "the broker at %s %s", c->w.where, cause);
		suspect_v311(p, c, cause, false);
		return;
	}
	mqp__conn_error(p, c, "connection to %s closed before it was ready: %s", c->w.where, what);
}

void mqp__conn_io(struct mqp_pool *p, struct pconn *c, uint32_t events)
{
	bool readable = events & (EPOLLIN | EPOLLERR | EPOLLHUP);
	enum mqp_wire_result r = mqp__wire_io(
	    &c->w, readable, events & EPOLLOUT, p->scratch, p->scratch ? MQP_SCRATCH : 0);
	if (c->stage
	    == STAGE_CLOSING) { /* read and dropped: nobody's now; closed at the broker's close */
		mqc_buf_consume(&c->w.rx, mqc_buf_live(&c->w.rx));
		if (r != MQP_WIRE_OK)
			mqp__conn_close(p, c);
		return;
	}
	if (c->stage == STAGE_TRANSPORT && c->w.state == MQP_WIRE_OPEN)
		send_connect(p, c);
	if (mqc_buf_live(&c->w.rx)) {
		c->last_rx = mqc_now_ns();
		parse(p, c); /* what came before an EOF is read first */
	}
	if (!c->dead && r == MQP_WIRE_EOF) {
		if (c->ready) {
			mqp__conn_error(p, c, "connection to %s lost: the broker closed it", c->w.where);
			mqp__node_lost(p, c);
		} else {
			closed_early(p, c, "the broker closed it");
		}
	} else if (!c->dead && r == MQP_WIRE_ERROR) {
		if (c->ready) {
			mqp__conn_error(p, c, "connection to %s lost: %s", c->w.where, c->w.err);
			mqp__node_lost(p, c);
		} else if (c->w.state == MQP_WIRE_OPEN && !c->w.violation) {
			closed_early(p, c, c->w.err);
		} else if (c->probe) {
			probe_verdict(p, false, 0, c->w.err);
		} else {
			mqp__conn_error(p, c, "%s", c->w.err);
		}
	}
	c->read_in_turn |= readable;
	mqp__conn_settle(p, c);
}

void mqp__conn_poll(struct mqp_pool *p, struct pconn *c)
{
	if (mqp__wire_poll(&c->w) == MQP_WIRE_OK)
		return;
	if (c->probe)
		probe_verdict(p, false, 0, c->w.err);
	else
		mqp__conn_error(p, c, "%s", c->w.err);
	mqp__conn_settle(p, c);
}

void mqp__conn_flush(struct mqp_pool *p, struct pconn *c)
{
	if (!c->open || c->dead || c->stage == STAGE_CLOSING) /* the wire sends a closing one's */
		return;
	/* A broker that keeps mosquitto's set_tcp_nodelay false holds its next small packet until
	 * the last one is acknowledged (mqc_net.h). The acknowledgement rides on what we send; only
	 * a turn that read, sends nothing, and still expects replies needs TCP_QUICKACK. */
	if (c->read_in_turn && c->ops && !mqp__wire_pending(&c->w))
		mqp__wire_quickack(&c->w);
	c->read_in_turn = false;
	if (mqp__wire_pending(&c->w)) {
		if (mqp__wire_flush(&c->w) != MQP_WIRE_OK) {
			if (c->ready) {
				mqp__conn_error(p, c, "connection to %s lost: %s", c->w.where, c->w.err);
				mqp__node_lost(p, c);
			} else {
				closed_early(p, c, c->w.err);
			}
			mqp__conn_settle(p, c);
			return;
		}
		c->last_tx = mqc_now_ns();
	}
	/* QoS 0 publishes are done when written: every byte queued has gone to the kernel. */
	while (c->written && !mqp__wire_pending(&c->w)) {
		struct op *op = c->written;
		c->written = op->wait_next;
		op->awaiting_write = false;
		mqp__finish(p, op, MQP_OK);
	}
}

void mqp__conn_misc(struct mqp_pool *p, struct pconn *c, uint64_t now)
{
	if (c->open && c->stage == STAGE_CLOSING && now >= c->closing_until) {
		mqp__conn_close(p, c); /* the broker never closed its side */
		return;
	}
	if (mqp__live_check(p, c, now))
		mqp__conn_settle(p, c); /* unresponsive: its calls fail, the socket closes */
}

void mqp__conn_settle(struct mqp_pool *p, struct pconn *c)
{
	if (!c->dead)
		return;
	if (c->probe) {
		if (p->probe_state == PROBE_RUNNING) /* it ended without a verdict: say so */
			probe_verdict(p, false, 0, "it failed");
		mqp__conn_disconnect(p, c);
		return;
	}
	if (c->failed_connect || !c->ready)
		mqp__node_failed(p, c->node);
	/* What is queued (a DISCONNECT with a reason) goes now, then the socket closes. */
	if (mqp__wire_pending(&c->w))
		mqp__wire_flush(&c->w);
	mqp__conn_close(p, c);
}
