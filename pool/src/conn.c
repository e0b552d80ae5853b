/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.c - a pooled connection's life (connect, inbox, callbacks, close) and the completion of
 * the operations it carries. I/O thread only: every struct mosquitto lives and dies here.
 */
#define _GNU_SOURCE
#include "conn.h"

#include <errno.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "logic.h"
#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_random.h"

/* --- completing operations ---------------------------------------------------------------- */

/* A lease granted to a caller that had just given up (past its deadline and grace): nobody holds
 * it, so it goes straight back, as if released at once (it has no subscriptions yet). */
static void lease_abandoned(struct mqp_pool *p, unsigned slot)
{
	struct pconn *c = &p->conns[slot];
	c->leased = false;
	c->idle_since = c->last_used = mqc_now_ns();
	mqp__lease_end(p, slot);
}

void mqp__lease_end(struct mqp_pool *p, unsigned slot)
{
	p->lease_held[slot] = false;
	p->lease_gen[slot]++; /* every copy of the old handle is now stale */
	atomic_fetch_add(&p->stats.releases, 1);
	if (atomic_fetch_sub(&p->stats.leased, 1) == 1)
		mqp__inbox_wake_drainers(&p->inbox);
}

void mqp__finish(struct mqp_pool *p, struct op *op, int result)
{
	mqp__heap_remove(&p->heap, op);
	if (op->ticket)
		HASH_DELETE(hh_ticket, p->tickets, op);
	if (op->in_pending) {
		HASH_DEL(p->pending, op);
		op->in_pending = false;
	}
	if (op->conn) {
		struct pconn *c = op->conn;
		for (struct op **pp = &c->ops; *pp; pp = &(*pp)->conn_next)
			if (*pp == op) {
				*pp = op->conn_next;
				break;
			}
		c->inflight--;
		atomic_fetch_sub(&p->stats.inflight, 1); /* exact before the caller wakes */
		op->conn = NULL;
	}
	if (op->receiving_on) {
		op->receiving_on->receiver = NULL;
		op->receiving_on = NULL;
	}
	if (result == MQP_ETIMEDOUT || result == MQP_EEXHAUSTED)
		atomic_fetch_add(&p->stats.timeouts, 1);
	if (result == MQP_ETIMEDOUT && op->kind == OP_ACQUIRE)
		atomic_fetch_add(&p->stats.acquire_timeouts, 1);
	if (result == MQP_ECANCELED)
		atomic_fetch_add(&p->stats.cancels, 1);
	if (result == MQP_OK && (op->kind == OP_REQUEST || op->kind == OP_ACQUIRE)) {
		pthread_mutex_lock(&p->report_lock);
		mqc_hist_record(
		    op->kind == OP_REQUEST ? &p->h_request : &p->h_acquire, mqc_now_ns() - op->submitted);
		pthread_mutex_unlock(&p->report_lock);
	}
	if (p->defer_callbacks && (op->request_cb || op->done_cb || op->acquire_cb)) {
		/* A call on the loop's thread is running: its callback must not run inside it. */
		op->result = result;
		op->queue_next = NULL;
		*p->later_tail = op;
		p->later_tail = &op->queue_next;
		return;
	}
	mqp__deliver(p, op, result);
}

void mqp__deliver(struct mqp_pool *p, struct op *op, int result)
{
	if (op->request_cb) /* async: the one and only call, on this thread, no lock held */
		op->request_cb(op->userdata, result, result == MQP_OK ? &op->reply : NULL);
	else if (op->done_cb)
		op->done_cb(op->userdata, result);
	else if (op->acquire_cb)
		op->acquire_cb(op->userdata, result,
		    result == MQP_OK
		        ? (mqp_lease) { .pool = p, .slot = op->slot, .generation = op->generation }
		        : (mqp_lease) { 0 });
	else {
		/* A caller waits: its call is over before it wakes, so a drain it makes next (or
		 * anyone's) does not still count it. */
		mqp__inbox_done(&p->inbox);
		if (!mqp__op_complete(op, result) && op->kind == OP_ACQUIRE && result == MQP_OK)
			lease_abandoned(p, op->slot); /* drain also waits for the lease count */
		mqp__op_unref(op);
		return;
	}
	/* Only now is an async call over: a drain must not return while its callback still runs. */
	mqp__inbox_done(&p->inbox);
	mqp__op_unref(op);
}

/* --- lease message queues ---------------------------------------------------------------- */

void mqp__lease_clear(struct mqp_pool *p, struct pconn *c)
{
	while (c->qhead) {
		struct lmsg *l = c->qhead;
		c->qhead = l->next;
		mqp_message_free(&l->m);
		free(l);
		atomic_fetch_add(&p->stats.stale_dropped, 1); /* never reaches the next borrower */
	}
	c->qtail = &c->qhead;
	for (size_t i = 0; i < c->nfilters; i++)
		free(c->filters[i]);
	free(c->filters);
	c->filters = NULL;
	c->nfilters = 0;
	c->retained_ok = false;
}

/* --- errors and logging ------------------------------------------------------------------ */

void mqp__set_error(struct mqp_pool *p, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&p->report_lock);
	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof p->last_error, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&p->report_lock);
}

void mqp__log(struct mqp_pool *p, int level, const char *fmt, ...)
{
	if (!p->opt.log_cb)
		return;
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	p->opt.log_cb(p->opt.userdata, level, text);
}

/* --- connections ------------------------------------------------------------------------ */

/* Randomness for spreading retries and retirements (not for secrets): the clock when the
 * kernel has none to give. */
static uint32_t jitter(void)
{
	uint32_t r;
	return mqc_random_bytes(&r, sizeof r) == 0 ? r : (uint32_t)mqc_now_ns();
}

static void backoff(struct mqp_pool *p)
{
	atomic_fetch_add(&p->stats.connects_failed, 1);
	p->backoff_ms = mqp__backoff_next(p->backoff_ms);
	unsigned wait = mqp__backoff_wait_ms(p->backoff_ms, jitter());
	p->backoff_until = mqc_now_ns() + (uint64_t)wait * MQC_NS_PER_MS;
	p->connect_failed = true;
	char why[256];
	pthread_mutex_lock(&p->report_lock);
	snprintf(why, sizeof why, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
	mqp__log(p, MQP_LOG_WARNING, "mqttpool: %s; next attempt in %u ms", why, wait);
}

static void conn_fail_ops(struct mqp_pool *p, struct pconn *c, int result)
{
	while (c->ops)
		mqp__finish(p, c->ops, result);
}

void mqp__conn_close(struct mqp_pool *p, struct pconn *c)
{
	conn_fail_ops(p, c, MQP_ECONNLOST);
	if (c->fd >= 0 && mosquitto_socket(c->m) == c->fd)
		epoll_ctl(p->ep, EPOLL_CTL_DEL, c->fd, NULL);
	mosquitto_destroy(c->m); /* never reused after a failure: a fresh object next time */
	if (c->receiver)
		mqp__finish(p, c->receiver, MQP_ECONNLOST);
	mqp__lease_clear(p, c);
	mqp__corr_free(&c->corr);
	*c = (struct pconn) { .fd = -1 };
}

/* The connection can carry work: inbox subscribed (v5) or CONNACK received (3.1.1). */
static void conn_ready(struct pconn *c)
{
	c->ready = true;
	uint64_t now = mqc_now_ns(), lifetime = (uint64_t)c->pool->opt.max_lifetime_ms * MQC_NS_PER_MS;
	c->ready_at = c->last_used = c->idle_since = now;
	pthread_mutex_lock(&c->pool->report_lock);
	mqc_hist_record(&c->pool->h_connect, now - c->connect_start);
	pthread_mutex_unlock(&c->pool->report_lock);
	c->retire_at = c->pool->opt.max_lifetime_ms == MQP_NEVER
	    ? UINT64_MAX
	    : mqp__retire_at(now, lifetime, jitter());
	atomic_fetch_add(&c->pool->stats.connects_ok, 1);
	c->pool->backoff_ms = 0;
	c->pool->connect_failed = false;
}

static void on_connect(
    struct mosquitto *m, void *obj, int rc, int flags, const mosquitto_property *props)
{
	(void)flags;
	(void)props;
	struct pconn *c = obj;
	struct mqp_pool *p = c->pool;
	if (rc != 0) {
		mqp__set_error(p, "the broker refused CONNECT: %s", mosquitto_reason_string(rc));
		c->dead = true;
		c->failed_connect = true;
		return;
	}
	if (p->opt.protocol != 5) { /* 3.1.1: no inbox (requests need v5); ready for leases */
		conn_ready(c);
		return;
	}
	char filter[MQP_TOPIC_MAX];
	snprintf(filter, sizeof filter, "%s/#", c->inbox);
	mosquitto_property *sub_props = NULL;
	/* Subscribed once, for the connection's life: no local echo, never a retained "reply". */
	if (mosquitto_subscribe_v5(
	        m, NULL, filter, 1, MQTT_SUB_OPT_NO_LOCAL | MQTT_SUB_OPT_SEND_RETAIN_NEVER, sub_props)
	    != MOSQ_ERR_SUCCESS) {
		mqp__set_error(p, "cannot subscribe to the inbox %s", filter);
		c->dead = true;
		c->failed_connect = true;
	}
}

static void on_subscribe(struct mosquitto *m, void *obj, int mid, int count, const int *granted,
    const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct pconn *c = obj;
	if (c->ready) { /* a lease's SUBSCRIBE */
		for (struct op *op = c->ops; op; op = op->conn_next)
			if (op->kind == OP_LEASE_SUBSCRIBE && op->mid == mid) {
				mqp__finish(c->pool, op, count > 0 && granted[0] <= 2 ? MQP_OK : MQP_EDENIED);
				return;
			}
		return;
	}
	if (count < 1 || granted[0] > 2) {
		mqp__set_error(c->pool,
		    "the broker refused the inbox subscription %s/# (reason %d): check "
		    "the ACL",
		    c->inbox, count ? granted[0] : -1);
		c->dead = true;
		c->failed_connect = true;
		return;
	}
	conn_ready(c);
}

static void on_publish(
    struct mosquitto *m, void *obj, int mid, int reason, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct pconn *c = obj;
	for (struct op *op = c->ops; op; op = op->conn_next) {
		if (op->mid != mid || op->acked)
			continue;
		op->acked = true;
		if (reason >= 0x80)
			mqp__finish(c->pool, op, MQP_EDENIED);
		else if (op->kind == OP_PUBLISH || op->kind == OP_LEASE_PUBLISH)
			mqp__finish(c->pool, op, MQP_OK);
		return; /* a request now waits for its reply */
	}
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct pconn *c = obj;
	struct mqp_pool *p = c->pool;
	uint32_t sub_id = 0;
	bool v311 = p->opt.protocol != 5; /* no identifiers: every message belongs to the lease */
	if (v311
	    || mosquitto_property_read_varint(
	        props, MQTT_PROP_SUBSCRIPTION_IDENTIFIER, &sub_id, false)) {
		/* A lease's subscription: only the current lease's identifier counts. */
		if (!c->leased || (!v311 && sub_id != c->epoch)
		    || (v311 && msg->retain && !c->retained_ok)) {
			atomic_fetch_add(&p->stats.stale_dropped, 1);
			return;
		}
		struct lmsg *l = calloc(1, sizeof *l);
		if (!l)
			return;
		l->m.topic = strdup(msg->topic);
		l->m.payload = malloc((size_t)msg->payloadlen + 1);
		if (!l->m.topic || !l->m.payload) {
			mqp_message_free(&l->m);
			free(l);
			return;
		}
		if (msg->payloadlen > 0)
			memcpy(l->m.payload, msg->payload, (size_t)msg->payloadlen);
		((char *)l->m.payload)[msg->payloadlen] = '\0';
		l->m.len = (size_t)msg->payloadlen;
		l->m.qos = msg->qos;
		l->m.retain = msg->retain;
		if (c->receiver) {
			struct op *r = c->receiver;
			r->msg = l->m;
			free(l);
			mqp__finish(p, r, MQP_OK);
		} else {
			*c->qtail = l;
			c->qtail = &l->next;
		}
		return;
	}
	void *corr = NULL;
	uint16_t corr_len = 0;
	uint64_t seq = 0;
	mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &corr, &corr_len, false);
	struct op *op = NULL;
	if (corr && corr_len == MQP_CORR_LEN && !msg->retain)
		HASH_FIND(hh, p->pending, corr, MQP_CORR_LEN, op);
	if (op && op->conn == c) {
		op->reply.topic = strdup(msg->topic);
		op->reply.payload = malloc((size_t)msg->payloadlen + 1);
		if (op->reply.payload && op->reply.topic) {
			if (msg->payloadlen > 0) /* an empty payload's pointer is NULL */
				memcpy(op->reply.payload, msg->payload, (size_t)msg->payloadlen);
			((char *)op->reply.payload)[msg->payloadlen] = '\0';
			op->reply.len = (size_t)msg->payloadlen;
			atomic_fetch_add(&p->stats.replies, 1);
			mqp__finish(p, op, MQP_OK);
		} else {
			mqp__finish(p, op, MQP_ENOMEM);
		}
	} else if (mqp__classify_unmatched(
	               mqp__corr_open(&c->corr, corr, corr_len, &seq), seq, c->next_seq)
	    == MQP_LATE) {
		atomic_fetch_add(&p->stats.late_replies, 1); /* ours, but no longer awaited */
	} else {
		atomic_fetch_add(&p->stats.strays, 1); /* no request of this connection had it */
	}
	free(corr);
}

static void on_disconnect(struct mosquitto *m, void *obj, int rc, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct pconn *c = obj;
	if (!c->ready && !c->dead) {
		mqp__set_error(c->pool, "connection to %s:%d closed before it was ready: %s",
		    c->pool->url.host, c->pool->url.port, mosquitto_strerror(rc));
		c->failed_connect = true;
	} else if (c->ready && rc != 0) { /* rc 0: our own DISCONNECT (retirement, idle) */
		atomic_fetch_add(&c->pool->stats.connections_lost, 1);
	}
	c->dead = true;
}

void mqp__conn_open(struct mqp_pool *p, struct pconn *c)
{
	*c = (struct pconn) { .pool = p, .fd = -1, .epoch = 1 };
	c->qtail = &c->qhead;
	if (mqp__corr_init(&c->corr) != 0) {
		mqp__set_error(p, "no random bytes for a correlation key: %s", strerror(errno));
		backoff(p);
		return;
	}
	/* PREFIX-<64 random bits> (mqc_client.h): nobody can guess it to take the session (and
	 * inbox) over by connecting with the same id, and no two connections anywhere share one. */
	struct mqc_conn_opts co = {
		.url = p->url,
		.cafile = p->cafile,
		.cert = p->certfile,
		.key = p->keyfile,
		.username = p->username,
		.password = p->password,
		.id_prefix = p->client_prefix,
		.protocol = p->opt.protocol,
		.keepalive_s = p->opt.keepalive_s,
		.ssl_ctx = p->ssl_ctx, /* one SSL_CTX for the pool: the CA is loaded once */
	};
	char why[256];
	c->m = mqc_client_new(&co, c, c->id, why, sizeof why);
	if (!c->m) {
		mqp__corr_free(&c->corr);
		mqp__set_error(p, "%s", why);
		backoff(p);
		return;
	}
	snprintf(c->inbox, sizeof c->inbox, "%s/%s", p->inbox_prefix, c->id);
	mosquitto_connect_v5_callback_set(c->m, on_connect);
	mosquitto_subscribe_v5_callback_set(c->m, on_subscribe);
	mosquitto_publish_v5_callback_set(c->m, on_publish);
	mosquitto_message_v5_callback_set(c->m, on_message);
	mosquitto_disconnect_v5_callback_set(c->m, on_disconnect);
	c->connect_start = mqc_now_ns();
	c->connect_deadline = c->connect_start + (uint64_t)p->opt.connect_timeout_ms * MQC_NS_PER_MS;
	if (mqc_client_connect(c->m, &co, why, sizeof why) != 0) {
		mqp__set_error(p, "%s", why);
		mosquitto_destroy(c->m);
		mqp__corr_free(&c->corr);
		*c = (struct pconn) { .fd = -1 };
		backoff(p);
		return;
	}
	c->fd = mosquitto_socket(c->m);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
	if (epoll_ctl(p->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) { /* unwatched, it would never finish */
		mqp__set_error(p, "epoll_ctl: %s", strerror(errno));
		mosquitto_destroy(c->m);
		mqp__corr_free(&c->corr);
		*c = (struct pconn) { .fd = -1 };
		backoff(p);
		return;
	}
	c->out = true;
	c->open = true;
}

static void conn_watch(struct mqp_pool *p, struct pconn *c)
{
	bool want = mqc_client_want_write(c->m, !c->ready);
	if (want == c->out || c->fd < 0)
		return;
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0u), .data.ptr = c };
	if (epoll_ctl(p->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
		mqp__set_error(p, "epoll_ctl: %s", strerror(errno));
		c->dead = true; /* conn_settle closes it; its calls fail with MQP_ECONNLOST */
		return;
	}
	c->out = want;
}

void mqp__conn_settle(struct mqp_pool *p, struct pconn *c)
{
	if (!c->dead && mosquitto_want_write(c->m))
		mosquitto_loop_write(c->m, 1);
	if (!c->dead && mosquitto_socket(c->m) != c->fd)
		c->dead = true; /* libmosquitto closed it */
	if (c->dead) {
		if (c->failed_connect || !c->ready)
			backoff(p);
		mqp__conn_close(p, c);
		return;
	}
	conn_watch(p, c);
	if (c->dead) /* it could not be watched */
		mqp__conn_close(p, c);
}
