/*
 * pool.c - libmqttpool: the I/O thread, connections, and request/response.
 *
 * Ownership and threads. Callers create an operation (struct op) with two references, hand it to
 * the I/O thread through a mutex-protected list and an eventfd (written only when the list was
 * empty: one wake-up per batch), and wait on the op's state word with a futex. The I/O thread
 * owns every struct mosquitto, every connection and every deadline: it completes each op exactly
 * once (reply, timeout, connection lost, refusal, or close) and drops its reference; the caller
 * drops the other. A caller's own wait has a deadline too (the op's deadline plus a grace
 * period) in case the I/O thread is wedged.
 *
 * Why a futex and not a mutex and condition variable per op: the hand-off to the I/O thread and
 * back is the pool's whole cost over a connection driven by the caller itself. With a condition
 * variable the woken caller collided with the I/O thread on the op's mutex (futex wait and wake
 * on both sides, measured with perf); with the state word the I/O thread makes one wake-up
 * system call, and none when the caller has not gone to sleep yet.
 */
#define _GNU_SOURCE
#include "pool_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqc_random.h"

enum { GRACE_MS = 2000, MISC_INTERVAL_MS = 1000 };

/* --- ops --------------------------------------------------------------------------------- */

static struct op *op_new(enum op_kind kind, const char *topic, const void *payload, size_t len,
    int qos, int retain, uint64_t deadline)
{
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return NULL;
	op->kind = kind;
	atomic_init(&op->refs, 2);
	atomic_init(&op->state, OP_PENDING);
	op->topic = strdup(topic);
	op->payload = malloc(len ? len : 1);
	if (!op->topic || !op->payload) {
		free(op->topic);
		free(op->payload);
		free(op);
		return NULL;
	}
	if (len > 0) /* lease operations and empty payloads have none */
		memcpy(op->payload, payload, len);
	op->len = len;
	op->qos = qos;
	op->retain = retain;
	op->deadline = deadline;
	op->submitted = mqc_now_ns();
	op->heap_index = SIZE_MAX;
	return op;
}

static void op_unref(struct op *op)
{
	if (atomic_fetch_sub(&op->refs, 1) != 1)
		return;
	mqp_reply_free(&op->reply);
	mqp_message_free(&op->msg);
	free(op->topic);
	free(op->payload);
	free(op);
}

static long futex(atomic_uint *word, int op, unsigned value, const struct timespec *abs_timeout)
{
	return syscall(
	    SYS_futex, word, op | FUTEX_PRIVATE_FLAG, value, abs_timeout, NULL, FUTEX_BITSET_MATCH_ANY);
}

/* Wake the caller waiting for op (I/O thread). A caller that gave up has already set OP_DONE:
 * then false, and nobody takes the result. */
static bool op_complete(struct op *op, int result)
{
	unsigned state = atomic_load_explicit(&op->state, memory_order_acquire);
	if (state == OP_DONE)
		return false; /* the caller stopped waiting */
	op->result = result;
	unsigned was = atomic_exchange_explicit(&op->state, OP_DONE, memory_order_acq_rel);
	if (was == OP_DONE)
		return false; /* it gave up between the load and the exchange */
	if (was == OP_SLEEPING)
		futex(&op->state, FUTEX_WAKE_BITSET, 1, NULL);
	return true;
}

/*
 * Wait until op is done or the absolute CLOCK_MONOTONIC time until (caller). Returns true when
 * the I/O thread completed it; false when the caller gave up first (op is then marked done, so a
 * later completion leaves the caller's result alone).
 */
static bool op_wait(struct op *op, uint64_t until)
{
	struct timespec abs = mqc_ns_to_ts(until);
	for (;;) {
		unsigned state = atomic_load_explicit(&op->state, memory_order_acquire);
		if (state == OP_DONE)
			return true;
		if (state == OP_PENDING
		    && !atomic_compare_exchange_weak_explicit(
		        &op->state, &state, OP_SLEEPING, memory_order_acq_rel, memory_order_acquire))
			continue; /* completed (or spuriously failed) meanwhile: look again */
		if (futex(&op->state, FUTEX_WAIT_BITSET, OP_SLEEPING, &abs) == -1 && errno == ETIMEDOUT) {
			state = OP_SLEEPING;
			if (atomic_compare_exchange_strong_explicit(
			        &op->state, &state, OP_DONE, memory_order_acq_rel, memory_order_acquire))
				return false;
			return true; /* completed at the last moment */
		}
	}
}

/* A count that mqp_pool_drain waits for just reached zero: wake it. The common case (nobody
 * drains) costs one atomic load; drain sets drain_waiting before it checks the counts under the
 * lock, and this takes the lock to signal, so no wake-up is lost between check and wait. */
static void wake_drainers(struct mqp_pool *p)
{
	if (!atomic_load(&p->drain_waiting))
		return;
	pthread_mutex_lock(&p->lock);
	pthread_cond_broadcast(&p->drained);
	pthread_mutex_unlock(&p->lock);
}

/* A lease granted to a caller that had just given up (past its deadline and grace): nobody holds
 * it, so it goes straight back, as if released at once (it has no subscriptions yet). */
static void lease_abandoned(struct mqp_pool *p, unsigned slot)
{
	struct pconn *c = &p->conns[slot];
	c->leased = false;
	c->idle_since = c->last_used = mqc_now_ns();
	p->lease_held[slot] = false;
	p->lease_gen[slot]++;
	atomic_fetch_add(&p->stats.releases, 1);
	if (atomic_fetch_sub(&p->stats.leased, 1) == 1)
		wake_drainers(p);
}

/* Finish an op the I/O thread holds: out of every structure, completed, reference dropped. */
static void finish(struct mqp_pool *p, struct op *op, int result)
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
		pthread_mutex_lock(&p->hist_lock);
		mqc_hist_record(
		    op->kind == OP_REQUEST ? &p->h_request : &p->h_acquire, mqc_now_ns() - op->submitted);
		pthread_mutex_unlock(&p->hist_lock);
	}
	if (op->request_cb) /* async: the one and only call, on this thread, no lock held */
		op->request_cb(op->userdata, result, result == MQP_OK ? &op->reply : NULL);
	else if (op->done_cb)
		op->done_cb(op->userdata, result);
	else if (op->acquire_cb)
		op->acquire_cb(op->userdata, result,
		    result == MQP_OK
		        ? (mqp_lease) { .pool = p, .slot = op->slot, .generation = op->generation }
		        : (mqp_lease) { 0 });
	else if (!op_complete(op, result) && op->kind == OP_ACQUIRE && result == MQP_OK)
		lease_abandoned(p, op->slot);
	/* Only now is the call over: a drain must not return while its callback still runs. */
	if (atomic_fetch_sub(&p->outstanding, 1) == 1)
		wake_drainers(p);
	op_unref(op);
}

/* --- lease message queues (I/O thread) ------------------------------------------------- */

void mqp_message_free(struct mqp_message *m)
{
	if (!m)
		return;
	free(m->topic);
	free(m->payload);
	*m = (struct mqp_message) { 0 };
}

static void lease_clear(struct mqp_pool *p, struct pconn *c)
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

/* --- connections (I/O thread) ---------------------------------------------------------- */

static void set_error(struct mqp_pool *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct mqp_pool *p, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&p->lock);
	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof p->last_error, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&p->lock);
}

static void log_message(struct mqp_pool *p, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The application's log callback, on this thread, no lock held. */
static void log_message(struct mqp_pool *p, int level, const char *fmt, ...)
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
	pthread_mutex_lock(&p->lock);
	snprintf(why, sizeof why, "%s", p->last_error);
	pthread_mutex_unlock(&p->lock);
	log_message(p, MQP_LOG_WARNING, "mqttpool: %s; next attempt in %u ms", why, wait);
}

static void conn_fail_ops(struct mqp_pool *p, struct pconn *c, int result)
{
	while (c->ops)
		finish(p, c->ops, result);
}

static void conn_close(struct mqp_pool *p, struct pconn *c)
{
	conn_fail_ops(p, c, MQP_ECONNLOST);
	if (c->fd >= 0 && mosquitto_socket(c->m) == c->fd)
		epoll_ctl(p->ep, EPOLL_CTL_DEL, c->fd, NULL);
	mosquitto_destroy(c->m); /* never reused after a failure: a fresh object next time */
	if (c->receiver)
		finish(p, c->receiver, MQP_ECONNLOST);
	lease_clear(p, c);
	mqp__corr_free(&c->corr);
	*c = (struct pconn) { .fd = -1 };
}

/* The connection can carry work: inbox subscribed (v5) or CONNACK received (3.1.1). */
static void conn_ready(struct pconn *c)
{
	c->ready = true;
	uint64_t now = mqc_now_ns(), lifetime = (uint64_t)c->pool->opt.max_lifetime_ms * MQC_NS_PER_MS;
	c->ready_at = c->last_used = c->idle_since = now;
	pthread_mutex_lock(&c->pool->hist_lock);
	mqc_hist_record(&c->pool->h_connect, now - c->connect_start);
	pthread_mutex_unlock(&c->pool->hist_lock);
	c->retire_at = mqp__retire_at(now, lifetime, jitter());
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
		set_error(p, "the broker refused CONNECT: %s", mosquitto_reason_string(rc));
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
		set_error(p, "cannot subscribe to the inbox %s", filter);
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
				finish(c->pool, op, count > 0 && granted[0] <= 2 ? MQP_OK : MQP_EDENIED);
				return;
			}
		return;
	}
	if (count < 1 || granted[0] > 2) {
		set_error(c->pool,
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
			finish(c->pool, op, MQP_EDENIED);
		else if (op->kind == OP_PUBLISH || op->kind == OP_LEASE_PUBLISH)
			finish(c->pool, op, MQP_OK);
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
			finish(p, r, MQP_OK);
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
			finish(p, op, MQP_OK);
		} else {
			finish(p, op, MQP_ENOMEM);
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
		set_error(c->pool, "connection to %s:%d closed before it was ready: %s", c->pool->url.host,
		    c->pool->url.port, mosquitto_strerror(rc));
		c->failed_connect = true;
	} else if (c->ready && rc != 0) { /* rc 0: our own DISCONNECT (retirement, idle) */
		atomic_fetch_add(&c->pool->stats.connections_lost, 1);
	}
	c->dead = true;
}

static void conn_open(struct mqp_pool *p, struct pconn *c)
{
	*c = (struct pconn) { .pool = p, .fd = -1, .epoch = 1 };
	c->qtail = &c->qhead;
	/* PREFIX-<64 random bits>: nobody can guess it to take the session (and inbox) over by
	 * connecting with the same id, and no two connections anywhere share one. */
	char prefix[16];
	snprintf(prefix, sizeof prefix, "%s-", p->client_prefix);
	if (mqc_random_id(c->id, sizeof c->id, prefix) != 0 || mqp__corr_init(&c->corr) != 0) {
		set_error(p, "no random bytes for a client id or correlation key: %s", strerror(errno));
		backoff(p);
		return;
	}
	snprintf(c->inbox, sizeof c->inbox, "%s/%s", p->inbox_prefix, c->id);
	c->m = mosquitto_new(c->id, true, c);
	if (!c->m) {
		mqp__corr_free(&c->corr);
		set_error(p, "mosquitto_new failed");
		backoff(p);
		return;
	}
	mosquitto_int_option(c->m, MOSQ_OPT_PROTOCOL_VERSION,
	    p->opt.protocol == 5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311);
	mosquitto_int_option(c->m, MOSQ_OPT_TCP_NODELAY, 1);
	mosquitto_connect_v5_callback_set(c->m, on_connect);
	mosquitto_subscribe_v5_callback_set(c->m, on_subscribe);
	mosquitto_publish_v5_callback_set(c->m, on_publish);
	mosquitto_message_v5_callback_set(c->m, on_message);
	mosquitto_disconnect_v5_callback_set(c->m, on_disconnect);
	if (p->username)
		mosquitto_username_pw_set(c->m, p->username, p->password);
	if (p->ssl_ctx) {
		/* One SSL_CTX for the pool: the CA is loaded once, not on every connect. */
		mosquitto_tls_set(c->m, p->cafile, NULL, p->certfile, p->keyfile, NULL);
		mosquitto_int_option(c->m, MOSQ_OPT_SSL_CTX_WITH_DEFAULTS, 0);
		mosquitto_void_option(c->m, MOSQ_OPT_SSL_CTX, p->ssl_ctx);
	}
	c->connect_start = mqc_now_ns();
	c->connect_deadline = c->connect_start + (uint64_t)p->opt.connect_timeout_ms * MQC_NS_PER_MS;
	int rc = mosquitto_connect_bind_async(
	    c->m, p->url.host, p->url.port, (int)p->opt.keepalive_s, NULL);
	if (rc != MOSQ_ERR_SUCCESS) {
		set_error(p, "connect to %s:%d: %s", p->url.host, p->url.port,
		    rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc));
		mosquitto_destroy(c->m);
		mqp__corr_free(&c->corr);
		*c = (struct pconn) { .fd = -1 };
		backoff(p);
		return;
	}
	c->fd = mosquitto_socket(c->m);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
	if (epoll_ctl(p->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) { /* unwatched, it would never finish */
		set_error(p, "epoll_ctl: %s", strerror(errno));
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
	bool want = mosquitto_want_write(c->m) || !c->ready;
	if (want == c->out || c->fd < 0)
		return;
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0u), .data.ptr = c };
	if (epoll_ctl(p->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
		set_error(p, "epoll_ctl: %s", strerror(errno));
		c->dead = true; /* conn_settle closes it; its calls fail with MQP_ECONNLOST */
		return;
	}
	c->out = want;
}

/* After every libmosquitto call on c: write what is queued, notice a death, tidy up. */
static void conn_settle(struct mqp_pool *p, struct pconn *c)
{
	if (!c->dead && mosquitto_want_write(c->m))
		mosquitto_loop_write(c->m, 1);
	if (!c->dead && mosquitto_socket(c->m) != c->fd)
		c->dead = true; /* libmosquitto closed it */
	if (c->dead) {
		if (c->failed_connect || !c->ready)
			backoff(p);
		conn_close(p, c);
		return;
	}
	conn_watch(p, c);
	if (c->dead) /* it could not be watched */
		conn_close(p, c);
}

/* --- the I/O thread ------------------------------------------------------------------------ */

/* Connections open or opening; of them ready, connecting, and available (ready, idle, not
 * leased). */
static unsigned count_open(
    const struct mqp_pool *p, unsigned *ready, unsigned *connecting, unsigned *available)
{
	unsigned open = 0;
	*ready = *connecting = *available = 0;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		const struct pconn *c = &p->conns[i];
		if (!c->open)
			continue;
		open++;
		*ready += c->ready;
		*connecting += !c->ready;
		*available += c->ready && !c->dead && !c->leased && c->inflight == 0;
	}
	return open;
}

static void open_one(struct mqp_pool *p)
{
	if (p->connect_failed && mqc_now_ns() < p->backoff_until)
		return;
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (!p->conns[i].open && !p->lease_held[i]) { /* a broken lease keeps its slot */
			conn_open(p, &p->conns[i]);
			return;
		}
}

static void start_op(struct mqp_pool *p, struct pconn *c, struct op *op)
{
	mosquitto_property *props = NULL;
	int rc = MOSQ_ERR_SUCCESS;
	if (op->kind == OP_REQUEST) {
		/* The Response Topic is the inbox itself: nothing in it tells one request from the next. */
		if (mqp__corr_seal(&c->corr, c->next_seq++, op->corr) != 0) {
			finish(p, op, MQP_ENOMEM);
			return;
		}
		uint64_t now = mqc_now_ns();
		/* ceil(time left) in seconds, at least 1: the header's promise */
		uint64_t left = op->deadline > now ? op->deadline - now : 0;
		uint32_t expiry = (uint32_t)((left + MQC_NS_PER_S - 1) / MQC_NS_PER_S);
		if (expiry == 0)
			expiry = 1;
		rc = mosquitto_property_add_string(&props, MQTT_PROP_RESPONSE_TOPIC, c->inbox);
		if (rc == MOSQ_ERR_SUCCESS)
			rc = mosquitto_property_add_binary(
			    &props, MQTT_PROP_CORRELATION_DATA, op->corr, MQP_CORR_LEN);
		if (rc == MOSQ_ERR_SUCCESS)
			rc = mosquitto_property_add_int32(&props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, expiry);
		if (rc != MOSQ_ERR_SUCCESS) {
			mosquitto_property_free_all(&props);
			finish(p, op, MQP_ENOMEM);
			return;
		}
		/* Registered before the command goes out: a fast reply always finds its caller. */
		HASH_ADD(hh, p->pending, corr, MQP_CORR_LEN, op);
		op->in_pending = true;
		atomic_fetch_add(&p->stats.requests, 1);
	} else {
		atomic_fetch_add(&p->stats.publishes, 1);
	}
	op->conn = c;
	op->conn_next = c->ops;
	c->ops = op;
	c->inflight++;
	c->last_used = mqc_now_ns();
	atomic_fetch_add(&p->stats.inflight, 1);
	rc = mosquitto_publish_v5(
	    c->m, &op->mid, op->topic, (int)op->len, op->payload, op->qos, op->retain, props);
	mosquitto_property_free_all(&props);
	if (rc != MOSQ_ERR_SUCCESS)
		finish(p, op,
		    rc == MOSQ_ERR_NOMEM                                                ? MQP_ENOMEM
		        : rc == MOSQ_ERR_PAYLOAD_SIZE || rc == MOSQ_ERR_OVERSIZE_PACKET ? MQP_ETOOBIG
		        : rc == MOSQ_ERR_INVAL || rc == MOSQ_ERR_MALFORMED_UTF8         ? MQP_EINVAL
		                                                                        : MQP_ECONNLOST);
}

/* An op leaves a wait queue: it waited unless the first dispatch pass after its arrival served
 * it. */
static void left_queue(struct mqp_pool *p, struct op *op, bool served)
{
	if (!served || op->first_dispatch != p->dispatches)
		atomic_fetch_add(&p->stats.waits, 1);
}

/* Hand queued ops to connections in strict FIFO order; open connections as needed. */
static void dispatch(struct mqp_pool *p)
{
	p->dispatches++;
	while (p->queue.head) {
		int i = mqp__pick_for_request(p->conns, p->opt.max_size, p->opt.max_inflight);
		if (i < 0)
			break;
		struct pconn *c = &p->conns[i];
		struct op *op = mqp__fifo_pop(&p->queue);
		left_queue(p, op, true);
		start_op(p, c, op);
		conn_settle(p, c);
	}
	/* Leases: strict FIFO among waiters; the most recently released idle connection first. */
	while (p->acquirers.head) {
		int i = mqp__pick_for_lease(p->conns, p->lease_held, p->opt.max_size);
		if (i < 0)
			break;
		struct pconn *best = &p->conns[i];
		struct op *op = mqp__fifo_pop(&p->acquirers);
		left_queue(p, op, true);
		unsigned slot = (unsigned)i;
		best->leased = true;
		p->lease_held[slot] = true;
		atomic_fetch_add(&p->stats.leased, 1); /* exact before the caller wakes */
		p->lease_info[slot]
		    = (struct lease_info) { .since = mqc_now_ns(), .file = op->file, .line = op->line };
		op->slot = slot;
		op->generation = p->lease_gen[slot];
		atomic_fetch_add(&p->stats.acquires, 1);
		finish(p, op, MQP_OK);
	}
	unsigned ready, connecting, available;
	unsigned open = count_open(p, &ready, &connecting, &available);
	bool waiting = p->queue.head || p->acquirers.head;
	if (mqp__should_open(open, connecting, waiting, p->opt.min_size, p->opt.max_size))
		open_one(p);
	/* Nothing can connect: waiting callers learn why now rather than at their deadline. */
	if (p->connect_failed && waiting && open == 0 && ready == 0) {
		struct op *op;
		while ((op = mqp__fifo_pop(&p->queue)) || (op = mqp__fifo_pop(&p->acquirers))) {
			left_queue(p, op, false);
			finish(p, op, MQP_ECONNECT);
		}
	}
}

/* An operation on a lease handle: valid only for the slot's current generation. */
static void lease_op(struct mqp_pool *p, struct op *op)
{
	unsigned slot = op->slot;
	if (!mqp__lease_valid(slot, op->generation, p->opt.max_size, p->lease_held, p->lease_gen)) {
		if (op->kind == OP_RELEASE || op->kind == OP_DISCARD)
			atomic_fetch_add(&p->stats.double_releases, 1);
		finish(p, op, MQP_ERELEASED);
		return;
	}
	struct pconn *c = &p->conns[slot];
	bool alive = c->open && c->leased && !c->dead;
	if (op->kind == OP_RELEASE || op->kind == OP_DISCARD) {
		if (alive) {
			/* 3.1.1: nothing can tell this borrower's late messages from the next one's. */
			bool discard = op->kind == OP_DISCARD || (p->opt.protocol != 5 && c->nfilters > 0);
			if (c->receiver)
				finish(p, c->receiver, MQP_ERELEASED);
			for (size_t i = 0; i < c->nfilters; i++) /* no wait: the identifier retires */
				mosquitto_unsubscribe(c->m, NULL, c->filters[i]);
			lease_clear(p, c);
			c->epoch = mqp__next_epoch(c->epoch);
			c->leased = false;
			c->idle_since = c->last_used = mqc_now_ns();
			if (discard)
				c->dead = true;
		}
		p->lease_held[slot] = false;
		if (atomic_fetch_sub(&p->stats.leased, 1) == 1)
			wake_drainers(p);
		p->lease_gen[slot]++; /* every copy of the old handle is now stale */
		atomic_fetch_add(&p->stats.releases, 1);
		finish(p, op, MQP_OK);
		if (alive)
			conn_settle(p, c);
		return;
	}
	if (!alive) {
		finish(p, op, MQP_ECONNLOST);
		return;
	}
	if (op->kind == OP_LEASE_RECEIVE) {
		if (c->receiver) {
			finish(p, op, MQP_EBUSY);
		} else if (c->qhead) {
			struct lmsg *l = c->qhead;
			c->qhead = l->next;
			if (!c->qhead)
				c->qtail = &c->qhead;
			op->msg = l->m;
			free(l);
			finish(p, op, MQP_OK);
		} else {
			c->receiver = op;
			op->receiving_on = c;
		}
		return;
	}
	if (op->kind == OP_LEASE_SUBSCRIBE && p->opt.protocol == 5) {
		/* The same filter as the connection's inbox subscription would replace it, and
		 * unsubscribing it at release would leave the connection deaf to every reply. */
		char inbox_filter[sizeof c->inbox + 2];
		snprintf(inbox_filter, sizeof inbox_filter, "%s/#", c->inbox);
		if (strcmp(op->topic, inbox_filter) == 0) {
			finish(p, op, MQP_EINVAL);
			return;
		}
	}
	op->conn = c;
	op->conn_next = c->ops;
	c->ops = op;
	c->inflight++;
	atomic_fetch_add(&p->stats.inflight, 1);
	int rc;
	if (op->kind == OP_LEASE_SUBSCRIBE) {
		char **grown = realloc(c->filters, (c->nfilters + 1) * sizeof *grown);
		char *copy = strdup(op->topic);
		if (!grown || !copy) {
			free(copy);
			if (grown)
				c->filters = grown;
			finish(p, op, MQP_ENOMEM);
			return;
		}
		c->filters = grown;
		c->filters[c->nfilters++] = copy;
		bool retained = (op->sub_options & MQP_SUB_RETAINED) != 0;
		mosquitto_property *props = NULL;
		int options = 0;
		if (p->opt.protocol == 5) {
			mosquitto_property_add_varint(&props, MQTT_PROP_SUBSCRIPTION_IDENTIFIER, c->epoch);
			/* v5: the broker sends retained messages only to the subscription that asked. */
			if (!retained)
				options = MQTT_SUB_OPT_SEND_RETAIN_NEVER;
		} else {
			c->retained_ok |= retained; /* 3.1.1 cannot say per subscription: the lease */
		}
		rc = mosquitto_subscribe_v5(c->m, &op->mid, op->topic, op->qos, options, props);
		mosquitto_property_free_all(&props);
	} else {
		atomic_fetch_add(&p->stats.publishes, 1);
		rc = mosquitto_publish_v5(
		    c->m, &op->mid, op->topic, (int)op->len, op->payload, op->qos, op->retain, NULL);
	}
	if (rc != MOSQ_ERR_SUCCESS)
		finish(p, op,
		    rc == MOSQ_ERR_NOMEM       ? MQP_ENOMEM
		        : rc == MOSQ_ERR_INVAL ? MQP_EINVAL
		                               : MQP_ECONNLOST);
	conn_settle(p, c);
}

/* Complete the async call op->ticket names with MQP_ECANCELED, wherever it is. */
static void cancel(struct mqp_pool *p, struct op *op)
{
	struct op *target = NULL;
	HASH_FIND(hh_ticket, p->tickets, &op->ticket_target, sizeof op->ticket_target, target);
	if (target) {
		if (target->queued) {
			mqp__fifo_remove(target->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, target);
			left_queue(p, target, false);
		}
		finish(p, target, MQP_ECANCELED); /* out of pending, the connection, the heap */
	}
	finish(p, op, MQP_OK);
}

static void take_incoming(struct mqp_pool *p)
{
	uint64_t v;
	ssize_t got = read(p->evfd, &v, sizeof v);
	(void)got;
	pthread_mutex_lock(&p->lock);
	struct op *list = p->incoming;
	p->incoming = NULL;
	p->incoming_tail = &p->incoming;
	pthread_mutex_unlock(&p->lock);
	while (list) {
		struct op *op = list;
		list = op->queue_next;
		op->queue_next = NULL;
		if (mqp__heap_push(&p->heap, op) != 0) {
			finish(p, op, MQP_ENOMEM);
			continue;
		}
		if (op->ticket)
			HASH_ADD(hh_ticket, p->tickets, ticket, sizeof op->ticket, op);
		op->first_dispatch = p->dispatches + 1;
		switch (op->kind) {
			case OP_REQUEST:
			case OP_PUBLISH:
				mqp__fifo_push(&p->queue, op);
				break;
			case OP_ACQUIRE:
				mqp__fifo_push(&p->acquirers, op);
				break;
			case OP_CANCEL:
				cancel(p, op);
				break;
			default:
				lease_op(p, op);
				break;
		}
	}
}

/* A call gives up in the queue while a connection is still being made: say what it waits for,
 * so mqp_pool_last_error names a broker that takes TCP but never answers CONNECT. */
static void explain_pending_connect(struct mqp_pool *p, uint64_t now)
{
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		const struct pconn *c = &p->conns[i];
		if (c->open && !c->ready && !c->dead) {
			set_error(p,
			    "connect to %s:%d: no answer to CONNECT%s yet after %llu ms (the connect "
			    "timeout is %u ms)",
			    p->url.host, p->url.port, p->opt.protocol == 5 ? " and the inbox SUBSCRIBE" : "",
			    (unsigned long long)((now - c->connect_start) / MQC_NS_PER_MS),
			    p->opt.connect_timeout_ms);
			return;
		}
	}
}

static void expire(struct mqp_pool *p, uint64_t now)
{
	while (p->heap.len && p->heap.v[0]->deadline <= now) {
		struct op *op = p->heap.v[0];
		if (op->queued) { /* never got a connection */
			mqp__fifo_remove(op->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, op);
			left_queue(p, op, false);
			if (!p->connect_failed)
				explain_pending_connect(p, now);
			/* A request or publish that never left the queue was never sent: say so. */
			finish(p, op,
			    p->connect_failed            ? MQP_ECONNECT
			        : op->kind == OP_ACQUIRE ? MQP_ETIMEDOUT
			                                 : MQP_EEXHAUSTED);
		} else {
			finish(p, op, MQP_ETIMEDOUT);
		}
	}
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *c = &p->conns[i];
		if (c->open && !c->ready && now > c->connect_deadline) {
			set_error(p, "connect to %s:%d: not ready within %u ms", p->url.host, p->url.port,
			    p->opt.connect_timeout_ms);
			c->dead = c->failed_connect = true;
			conn_settle(p, c);
		}
	}
}

static void publish_gauges(struct mqp_pool *p)
{
	unsigned ready, connecting, available, queued = 0;
	unsigned open = count_open(p, &ready, &connecting, &available);
	for (struct op *op = p->queue.head; op; op = op->queue_next)
		queued++;
	for (struct op *op = p->acquirers.head; op; op = op->queue_next)
		queued++; /* waiting for a connection to borrow */
	atomic_store(&p->stats.size, open);
	atomic_store(&p->stats.ready, ready);
	atomic_store(&p->stats.available, available);
	atomic_store(&p->stats.connecting, connecting);
	atomic_store(&p->stats.queued, queued);
}

/* Idle connections above min_size close; old ones retire; long-held leases are reported. */
static void housekeeping(struct mqp_pool *p, uint64_t now)
{
	unsigned ready, connecting, available;
	unsigned open = count_open(p, &ready, &connecting, &available);
	uint64_t idle = (uint64_t)p->opt.idle_timeout_ms * MQC_NS_PER_MS;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *c = &p->conns[i];
		enum mqp_evict why = mqp__eviction(c, now, open, p->opt.min_size, idle);
		if (why == MQP_KEEP)
			continue;
		atomic_fetch_add(
		    why == MQP_EVICT_IDLE ? &p->stats.closes_idle : &p->stats.closes_lifetime, 1);
		mosquitto_disconnect(c->m);
		mosquitto_loop_write(c->m, 1);
		conn_close(p, c);
		open--;
	}
	if (!p->opt.leak_threshold_ms)
		return;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct lease_info *l = &p->lease_info[i];
		if (!p->lease_held[i] || l->reported
		    || now - l->since < (uint64_t)p->opt.leak_threshold_ms * MQC_NS_PER_MS)
			continue;
		l->reported = true;
		atomic_fetch_add(&p->stats.leaks, 1);
		log_message(p, MQP_LOG_WARNING,
		    "mqttpool: possible leak: a lease acquired at %s:%d has been held for %llu ms",
		    l->file ? l->file : "?", l->line,
		    (unsigned long long)((now - l->since) / MQC_NS_PER_MS));
	}
}

void *mqp__io_thread(void *arg)
{
	struct mqp_pool *p = arg;
	uint64_t next_misc = mqc_now_ns() + MISC_INTERVAL_MS * MQC_NS_PER_MS;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		bool stop = p->stopping;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		dispatch(p);
		publish_gauges(p);
		uint64_t now = mqc_now_ns(), wake = next_misc;
		if (p->heap.len && p->heap.v[0]->deadline < wake)
			wake = p->heap.v[0]->deadline;
		for (unsigned i = 0; i < p->opt.max_size; i++)
			if (p->conns[i].open && !p->conns[i].ready && p->conns[i].connect_deadline < wake)
				wake = p->conns[i].connect_deadline;
		if (p->connect_failed && p->backoff_until > now && p->backoff_until < wake)
			wake = p->backoff_until;
		if (p->next_housekeeping > now && p->next_housekeeping < wake)
			wake = p->next_housekeeping;
		struct timespec timeout = mqc_ns_to_ts(wake > now ? wake - now : 0);
		struct epoll_event events[64];
		int n = epoll_pwait2(p->ep, events, 64, &timeout, NULL);
		for (int i = 0; i < n; i++) {
			if (events[i].data.ptr == NULL) {
				take_incoming(p);
				continue;
			}
			struct pconn *c = events[i].data.ptr;
			if (!c->open)
				continue; /* closed earlier in this batch */
			if (events[i].events & EPOLLOUT) {
				mosquitto_loop_write(c->m, 1);
				if (!c->ready && !c->dead) /* TLS: the handshake may need a read */
					mosquitto_loop_read(c->m, 1);
			}
			if (!c->dead && (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
				mosquitto_loop_read(c->m, 1);
				mqc_tcp_quickack(mosquitto_socket(c->m)); /* a Nagle-ing broker: mqc_net.h */
			}
			conn_settle(p, c);
		}
		now = mqc_now_ns();
		expire(p, now);
		if (now >= p->next_housekeeping) {
			housekeeping(p, now);
			p->next_housekeeping = now + (uint64_t)p->opt.eviction_interval_ms * MQC_NS_PER_MS;
		}
		if (now >= next_misc) {
			for (unsigned i = 0; i < p->opt.max_size; i++)
				if (p->conns[i].open) {
					mosquitto_loop_misc(p->conns[i].m);
					conn_settle(p, &p->conns[i]);
				}
			next_misc = now + MISC_INTERVAL_MS * MQC_NS_PER_MS;
		}
	}
	/* Closing: every op completes with MQP_ECLOSED, every connection goes. */
	take_incoming(p);
	while (p->heap.len) {
		struct op *op = p->heap.v[0];
		if (op->queued)
			mqp__fifo_remove(op->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, op);
		finish(p, op, MQP_ECLOSED);
	}
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (p->conns[i].open) {
			mosquitto_disconnect(p->conns[i].m);
			mosquitto_loop_write(p->conns[i].m, 1);
			conn_close(p, &p->conns[i]);
		}
	publish_gauges(p);
	pthread_mutex_lock(&p->lock);
	bool self_free = p->destroy_deferred;
	pthread_mutex_unlock(&p->lock);
	if (self_free) { /* mqp_pool_destroy was called from a callback: nobody will join */
		pthread_detach(pthread_self());
		mqp__pool_free(p);
	}
	return NULL;
}

/* --- public API ----------------------------------------------------------------------------- */

/* The absolute deadline of a call that waits timeout_ms (0: the pool's request_timeout_ms). */
static uint64_t deadline_in(const struct mqp_pool *p, unsigned timeout_ms)
{
	return mqc_now_ns()
	    + (uint64_t)(timeout_ms ? timeout_ms : p->opt.request_timeout_ms) * MQC_NS_PER_MS;
}

/*
 * Hand op to the I/O thread and wake it. Refused with MQP_ECLOSED while the pool closes, and for
 * new work (requests, publishes, acquires) while it drains; a refused op is freed. An async call
 * gets its ticket (ticket not NULL) under the lock that publishes it.
 */
static int submit(struct mqp_pool *p, struct op *op, mqp_ticket *ticket)
{
	pthread_mutex_lock(&p->lock);
	bool refused = p->stopping || (p->draining && op->kind <= OP_ACQUIRE);
	bool first = p->incoming == NULL; /* the I/O thread takes the whole list per wake-up */
	if (!refused) {
		if (ticket) /* before the I/O thread can see it, so before any callback */
			*ticket = op->ticket = ++p->next_ticket;
		atomic_fetch_add(&p->outstanding, 1);
		*p->incoming_tail = op;
		p->incoming_tail = &op->queue_next;
	}
	pthread_mutex_unlock(&p->lock);
	if (refused) {
		atomic_store(&op->refs, 1);
		op_unref(op);
		return MQP_ECLOSED;
	}
	if (first) {
		uint64_t one = 1;
		ssize_t w = write(p->evfd, &one, sizeof one);
		(void)w;
	}
	return MQP_OK;
}

static int submit_and_wait_full(struct mqp_pool *p, struct op *op, struct mqp_reply *reply,
    struct mqp_message *msg, unsigned *slot, uint32_t *generation)
{
	int rc = submit(p, op, NULL);
	if (rc != MQP_OK)
		return rc;
	/* Past the deadline plus grace the I/O thread is wedged: give up; it will find the op done. */
	int result = op_wait(op, op->deadline + GRACE_MS * MQC_NS_PER_MS) ? op->result : MQP_ETIMEDOUT;
	if (result == MQP_OK && reply) {
		*reply = op->reply;
		op->reply = (struct mqp_reply) { 0 };
	}
	if (result == MQP_OK && msg) {
		*msg = op->msg;
		op->msg = (struct mqp_message) { 0 };
	}
	/* Only a completed wait may read the lease: after a give-up the I/O thread may still be
	 * writing it, and it hands such a lease straight back (lease_abandoned). */
	if (slot && result == MQP_OK) {
		*slot = op->slot;
		*generation = op->generation;
	}
	op_unref(op);
	return result;
}

static int submit_and_wait(
    struct mqp_pool *p, struct op *op, struct mqp_reply *reply, struct mqp_message *msg)
{
	return submit_and_wait_full(p, op, reply, msg, NULL, NULL);
}

static int submit_and_wait_lease(
    struct mqp_pool *p, struct op *op, unsigned *slot, uint32_t *generation)
{
	return submit_and_wait_full(p, op, NULL, NULL, slot, generation);
}

/* An async op: the I/O thread holds the only reference. A ticket is always issued (cancel needs
 * the op in the ticket table); the caller may not want to see it. */
static int submit_async(struct mqp_pool *p, struct op *op, mqp_ticket *ticket)
{
	mqp_ticket unused;
	atomic_store(&op->refs, 1);
	return submit(p, op, ticket ? ticket : &unused);
}

static int check_call(struct mqp_pool *p, const char *topic, int qos)
{
	if (!p || !topic || !*topic || qos < 0 || qos > 2 || strpbrk(topic, "+#"))
		return MQP_EINVAL;
	if (strlen(topic) >= MQP_TOPIC_MAX)
		return MQP_ETOOBIG;
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	return MQP_OK;
}

int mqp_pool_request(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    unsigned timeout_ms, struct mqp_reply *reply)
{
	int rc = check_call(p, topic, qos);
	if (rc != MQP_OK)
		return rc;
	if (!reply || (len && !payload) || p->opt.protocol != 5)
		return MQP_EINVAL; /* requests need MQTT 5 (Response Topic, Correlation Data) */
	if (len > 256 * 1024 * 1024)
		return MQP_ETOOBIG;
	*reply = (struct mqp_reply) { 0 };
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_REQUEST, topic, payload, len, qos, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	return submit_and_wait(p, op, reply, NULL);
}

int mqp_pool_publish(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    int retain, unsigned timeout_ms)
{
	int rc = check_call(p, topic, qos);
	if (rc != MQP_OK)
		return rc;
	if (len && !payload)
		return MQP_EINVAL;
	if (len > 256 * 1024 * 1024)
		return MQP_ETOOBIG;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_PUBLISH, topic, payload, len, qos, retain != 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	return submit_and_wait(p, op, NULL, NULL);
}

static int lease_call(mqp_lease *lease, enum op_kind kind, const char *topic, const void *payload,
    size_t len, int qos, int retain, int options, unsigned timeout_ms, struct mqp_message *msg)
{
	if (!lease || !lease->pool)
		return MQP_EINVAL;
	mqp_pool *p = lease->pool;
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(kind, topic ? topic : "", payload, len, qos, retain, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->slot = lease->slot;
	op->generation = lease->generation;
	op->sub_options = options;
	int rc = submit_and_wait(p, op, NULL, msg);
	return rc;
}

int(mqp_pool_acquire)(mqp_pool *p, unsigned timeout_ms, mqp_lease *lease)
{
	return mqp_pool_acquire_at(p, timeout_ms, lease, NULL, 0);
}

int mqp_pool_acquire_at(
    mqp_pool *p, unsigned timeout_ms, mqp_lease *lease, const char *file, int line)
{
	if (!p || !lease)
		return MQP_EINVAL;
	*lease = (mqp_lease) { 0 };
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_ACQUIRE, "", NULL, 0, 0, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->file = file; /* a string literal from the caller's __FILE__: lives forever */
	op->line = line;
	unsigned slot = 0;
	uint32_t generation = 0;
	int rc = submit_and_wait_lease(p, op, &slot, &generation);
	if (rc == MQP_OK)
		*lease = (mqp_lease) { .pool = p, .slot = slot, .generation = generation };
	return rc;
}

int mqp_lease_subscribe(
    mqp_lease *lease, const char *filter, int qos, int options, unsigned timeout_ms)
{
	if (!filter || !*filter || qos < 0 || qos > 2 || strlen(filter) >= MQP_TOPIC_MAX)
		return MQP_EINVAL;
	return lease_call(
	    lease, OP_LEASE_SUBSCRIBE, filter, NULL, 0, qos, 0, options, timeout_ms, NULL);
}

int mqp_lease_publish(mqp_lease *lease, const char *topic, const void *payload, size_t len, int qos,
    int retain, unsigned timeout_ms)
{
	if (!topic || !*topic || strpbrk(topic, "+#") || qos < 0 || qos > 2 || (len && !payload)
	    || strlen(topic) >= MQP_TOPIC_MAX)
		return MQP_EINVAL;
	return lease_call(
	    lease, OP_LEASE_PUBLISH, topic, payload, len, qos, retain != 0, 0, timeout_ms, NULL);
}

int mqp_lease_receive(mqp_lease *lease, unsigned timeout_ms, struct mqp_message *msg)
{
	if (!msg)
		return MQP_EINVAL;
	*msg = (struct mqp_message) { 0 };
	return lease_call(lease, OP_LEASE_RECEIVE, NULL, NULL, 0, 0, 0, 0, timeout_ms, msg);
}

/* Release or discard; from the pool's own thread (an async callback) without waiting. */
static int lease_return(mqp_lease *lease, enum op_kind kind)
{
	if (!lease || !lease->pool)
		return MQP_EINVAL;
	mqp_pool *p = lease->pool;
	if (!pthread_equal(pthread_self(), p->thread))
		return lease_call(lease, kind, NULL, NULL, 0, 0, 0, 0, 0, NULL);
	struct op *op = op_new(kind, "", NULL, 0, 0, 0, UINT64_MAX);
	if (!op)
		return MQP_ENOMEM;
	op->slot = lease->slot;
	op->generation = lease->generation;
	atomic_store(&op->refs, 1);
	return submit(p, op, NULL);
}

int mqp_lease_release(mqp_lease *lease)
{
	return lease_return(lease, OP_RELEASE);
}

int mqp_lease_discard(mqp_lease *lease)
{
	return lease_return(lease, OP_DISCARD);
}

int mqp_pool_receive(mqp_pool *p, const char *filter, int qos, int options, unsigned timeout_ms,
    struct mqp_message *msg)
{
	if (!p || !msg)
		return MQP_EINVAL;
	*msg = (struct mqp_message) { 0 };
	uint64_t start = mqc_now_ns();
	unsigned total = timeout_ms ? timeout_ms : p->opt.request_timeout_ms;
	mqp_lease lease;
	int rc = mqp_pool_acquire(p, total, &lease);
	if (rc != MQP_OK)
		return rc;
	uint64_t spent = (mqc_now_ns() - start) / MQC_NS_PER_MS;
	unsigned left = spent < total ? total - (unsigned)spent : 1;
	rc = mqp_lease_subscribe(&lease, filter, qos, options, left);
	spent = (mqc_now_ns() - start) / MQC_NS_PER_MS;
	left = spent < total ? total - (unsigned)spent : 1;
	if (rc == MQP_OK)
		rc = mqp_lease_receive(&lease, left, msg);
	mqp_lease_release(&lease);
	return rc;
}

static int check_async(
    struct mqp_pool *p, const char *topic, int qos, const void *payload, size_t len, bool have_cb)
{
	if (!p || !topic || !*topic || qos < 0 || qos > 2 || strpbrk(topic, "+#") || !have_cb
	    || (len && !payload))
		return MQP_EINVAL;
	if (strlen(topic) >= MQP_TOPIC_MAX || len > 256 * 1024 * 1024)
		return MQP_ETOOBIG;
	return MQP_OK;
}

int mqp_pool_request_async(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    unsigned timeout_ms, mqp_request_cb cb, void *userdata, mqp_ticket *ticket)
{
	int rc = check_async(p, topic, qos, payload, len, cb != NULL);
	if (rc != MQP_OK)
		return rc;
	if (p->opt.protocol != 5)
		return MQP_EINVAL; /* requests need MQTT 5 */
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_REQUEST, topic, payload, len, qos, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->request_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

int mqp_pool_publish_async(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    int retain, unsigned timeout_ms, mqp_done_cb cb, void *userdata, mqp_ticket *ticket)
{
	int rc = check_async(p, topic, qos, payload, len, cb != NULL);
	if (rc != MQP_OK)
		return rc;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_PUBLISH, topic, payload, len, qos, retain != 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->done_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

int mqp_pool_acquire_async_at(mqp_pool *p, unsigned timeout_ms, mqp_acquire_cb cb, void *userdata,
    mqp_ticket *ticket, const char *file, int line)
{
	if (!p || !cb)
		return MQP_EINVAL;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = op_new(OP_ACQUIRE, "", NULL, 0, 0, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->file = file;
	op->line = line;
	op->acquire_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

int mqp_pool_cancel(mqp_pool *p, mqp_ticket ticket)
{
	if (!p || ticket == 0)
		return MQP_EINVAL;
	struct op *op = op_new(OP_CANCEL, "", NULL, 0, 0, 0, UINT64_MAX);
	if (!op)
		return MQP_ENOMEM;
	op->ticket_target = ticket;
	atomic_store(&op->refs, 1);
	return submit(p, op, NULL);
}

int mqp_pool_drain(mqp_pool *p, unsigned timeout_ms)
{
	if (!p)
		return MQP_EINVAL;
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(timeout_ms / 1000);
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	int rc = MQP_OK;
	pthread_mutex_lock(&p->lock);
	p->draining = true;
	atomic_store(&p->drain_waiting, true);
	while (atomic_load(&p->outstanding) != 0 || atomic_load(&p->stats.leased) != 0)
		if (pthread_cond_timedwait(&p->drained, &p->lock, &until) == ETIMEDOUT) {
			rc = atomic_load(&p->outstanding) != 0 || atomic_load(&p->stats.leased) != 0
			    ? MQP_ETIMEDOUT
			    : MQP_OK;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

static void latency_of(const struct mqc_hist *h, struct mqp_latency *out)
{
	if (!out)
		return;
	*out = (struct mqp_latency) {
		.count = h->count,
		.p50_ns = mqc_hist_percentile(h, 50),
		.p90_ns = mqc_hist_percentile(h, 90),
		.p99_ns = mqc_hist_percentile(h, 99),
		.p999_ns = mqc_hist_percentile(h, 99.9),
		.max_ns = h->max,
	};
}

void mqp_pool_latency(mqp_pool *p, struct mqp_latency *request, struct mqp_latency *acquire,
    struct mqp_latency *connect)
{
	if (!p) { /* no pool: no samples */
		struct mqp_latency *all[] = { request, acquire, connect };
		for (int i = 0; i < 3; i++)
			if (all[i])
				*all[i] = (struct mqp_latency) { 0 };
		return;
	}
	pthread_mutex_lock(&p->hist_lock);
	latency_of(&p->h_request, request);
	latency_of(&p->h_acquire, acquire);
	latency_of(&p->h_connect, connect);
	pthread_mutex_unlock(&p->hist_lock);
}

void mqp_reply_free(struct mqp_reply *r)
{
	if (!r)
		return;
	free(r->payload);
	free(r->topic);
	*r = (struct mqp_reply) { 0 };
}

void mqp_pool_stats(mqp_pool *p, struct mqp_pool_stats *out)
{
	if (!out)
		return;
	if (!p) {
		*out = (struct mqp_pool_stats) { 0 };
		return;
	}
	*out = (struct mqp_pool_stats) {
		.size = atomic_load(&p->stats.size),
		.ready = atomic_load(&p->stats.ready),
		.available = atomic_load(&p->stats.available),
		.connecting = atomic_load(&p->stats.connecting),
		.inflight = atomic_load(&p->stats.inflight),
		.queued = atomic_load(&p->stats.queued),
		.leased = atomic_load(&p->stats.leased),
		.acquires = atomic_load(&p->stats.acquires),
		.acquire_timeouts = atomic_load(&p->stats.acquire_timeouts),
		.releases = atomic_load(&p->stats.releases),
		.double_releases = atomic_load(&p->stats.double_releases),
		.stale_dropped = atomic_load(&p->stats.stale_dropped),
		.waits = atomic_load(&p->stats.waits),
		.cancels = atomic_load(&p->stats.cancels),
		.closes_idle = atomic_load(&p->stats.closes_idle),
		.closes_lifetime = atomic_load(&p->stats.closes_lifetime),
		.leaks = atomic_load(&p->stats.leaks),
		.requests = atomic_load(&p->stats.requests),
		.replies = atomic_load(&p->stats.replies),
		.timeouts = atomic_load(&p->stats.timeouts),
		.late_replies = atomic_load(&p->stats.late_replies),
		.strays = atomic_load(&p->stats.strays),
		.publishes = atomic_load(&p->stats.publishes),
		.connects_ok = atomic_load(&p->stats.connects_ok),
		.connects_failed = atomic_load(&p->stats.connects_failed),
		.connections_lost = atomic_load(&p->stats.connections_lost),
	};
}

const char *mqp_pool_last_error(mqp_pool *p, char *buf, size_t len)
{
	if (!buf || !len)
		return buf;
	if (!p) {
		snprintf(buf, len, "no pool (NULL)");
		return buf;
	}
	pthread_mutex_lock(&p->lock);
	snprintf(buf, len, "%s", p->last_error);
	pthread_mutex_unlock(&p->lock);
	return buf;
}

const char *mqp_strerror(int err)
{
	static const char *const names[] = {
		[MQP_OK] = "success",
		[MQP_EINVAL] = "invalid argument",
		[MQP_ENOMEM] = "out of memory",
		[MQP_ETIMEDOUT] = "timed out",
		[MQP_ECLOSED] = "pool closed",
		[MQP_ECONNECT] = "cannot connect to the broker",
		[MQP_ECONNLOST] = "connection lost",
		[MQP_EDENIED] = "refused by the broker",
		[MQP_ETLS] = "TLS setup failed",
		[MQP_ETOOBIG] = "too large",
		[MQP_EDEADLK] = "blocking call from the pool's own thread",
		[MQP_ERELEASED] = "lease already released",
		[MQP_EBUSY] = "another receive is waiting on this lease",
		[MQP_ECANCELED] = "cancelled",
		[MQP_EEXHAUSTED] = "no connection free before the deadline (not sent)",
	};
	if (err < 0 || (size_t)err >= sizeof names / sizeof names[0] || !names[err])
		return "unknown error";
	return names[err];
}
