/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * server.c - gate-api's event-driven HTTP server: see server.h.
 *
 * Per worker, everything below runs on the worker's thread: libmicrohttpd's callbacks (from
 * MHD_run, called when the daemon's epoll descriptor is readable or its timeout passes), the
 * pool's callbacks (from mqp_pool_process, through mqttpool_uv.h), the naive requests' socket
 * and timer callbacks, and the per-connection deadline and hang-up watchers. The only shared
 * state is the counters (atomics) and the per-address table (a mutex, taken per connection, not
 * per request).
 *
 * Lifetimes: a struct conn lives from libmicrohttpd's STARTED notification to CLOSED (then its
 * libuv handles close and it frees itself); a struct call from the request's headers to
 * on_completed; a struct naive_op until its handles close. A suspended call always completes
 * (reply, timeout, error, or cancel when its client goes away) before its connection resumes,
 * and the worker completes every call before it stops its daemon.
 */
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uthash.h>
#include <uv.h>

#include "mqc_clock.h"
#include "mqc_request.h"
#include "mqc_strutil.h"
#include "mqttpool_uv.h"

struct addr_count {
	uint32_t addr;
	unsigned n;
	UT_hash_handle hh;
};

struct worker;
struct naive_op;

struct gate_server {
	struct gate_config cfg;
	unsigned n;
	struct worker *w;
	atomic_bool stopping;
	atomic_uint connections; /* admitted and open, every worker's */
	_Atomic uint64_t drain_ns;
	pthread_rwlock_t pools_lock; /* a worker's pool, read by every worker's /metrics, /healthz */
	struct gate_counters counters;
	pthread_mutex_t addr_lock;
	struct addr_count *addrs; /* connections per client address, every worker's */
};

struct worker {
	struct gate_server *s;
	unsigned index;
	pthread_t thread;
	bool thread_started;
	uv_loop_t loop;
	uv_poll_t http;        /* the daemon's epoll descriptor */
	uv_timer_t http_timer; /* the daemon's next timeout */
	uv_check_t resumed;    /* connections were resumed: run the daemon after this loop pass */
	uv_async_t stop;       /* gate_server_stop */
	uv_timer_t drain;      /* while draining: whether everything is done */
	struct MHD_Daemon *d;
	mqp_pool *pool;
	struct naive_op *naive_ops; /* in flight */
	unsigned active;            /* HTTP requests from their headers until their response is sent */
	uint64_t drain_deadline;
	bool drained;
	unsigned port; /* to bind (0: any), then bound */
	sem_t started;
	int start_rc;
	char err[256];
};

/* An HTTP connection. */
struct conn {
	struct worker *w;
	struct MHD_Connection *mc;
	int fd;
	uint32_t addr;
	bool counted, refused, hup_ok; /* counted: in connections and the address's count */
	uv_timer_t deadline;           /* --request-deadline, armed until a request is in */
	uv_poll_t hup;                 /* the client going away (it matters while a command waits) */
	struct call *waiting;
	int handles;
};

enum call_state { CALL_NEW, CALL_WAITING, CALL_DONE };

/* An HTTP request. */
struct call {
	struct conn *cn;
	int status; /* nonzero: already decided (bad route) */
	char why[256];
	struct gate_route route;
	char *body;
	size_t len;
	bool too_big;
	enum call_state state;
	bool client_gone;
	mqp_ticket ticket;      /* the pool route's request */
	struct naive_op *naive; /* the naive route's, while it runs */
	uint64_t t0, took;
	int rc;
	void *reply; /* NULL-terminated copy, or NULL when too large */
	size_t reply_len;
	char err[256]; /* why rc, when the route said */
};

/* A /naive request in flight. */
struct naive_op {
	struct worker *w;
	struct call *call; /* NULL once completed */
	struct mqc_requester *r;
	uv_poll_t poll;
	uv_timer_t timer;
	int handles;
	struct naive_op *prev, *next;
};

/* --- logging ------------------------------------------------------------------------------- */

/* Messages at most one a second: past a connection limit there is one for every refused
 * connection, and a flood of them must not become a flood of log lines. */
static void log_limitedv(const char *fmt, va_list ap)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t last_ns;
	static unsigned long suppressed;
	uint64_t now = mqc_now_ns();
	pthread_mutex_lock(&lock);
	if (last_ns && now - last_ns < MQC_NS_PER_S) {
		suppressed++;
		pthread_mutex_unlock(&lock);
		return;
	}
	if (suppressed)
		fprintf(stderr, "mqp-gate-api: (%lu more HTTP server messages in the last second)\n",
		    suppressed);
	suppressed = 0;
	last_ns = now;
	fprintf(stderr, "mqp-gate-api: ");
	vfprintf(stderr, fmt, ap);
	pthread_mutex_unlock(&lock);
}

static void log_mhd(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	log_limitedv(fmt, ap);
}

static void log_limited(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_limitedv(fmt, ap);
	va_end(ap);
}

/* --- responses ----------------------------------------------------------------------------- */

static enum MHD_Result send_text(
    struct MHD_Connection *mc, int status, const char *type, char *text, bool retry_after)
{
	if (!text)
		return MHD_NO; /* out of memory: drop the connection */
	struct MHD_Response *r
	    = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == 405)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, GET, HEAD");
	if (retry_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	enum MHD_Result ret = MHD_queue_response(mc, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct gate_server *s, struct MHD_Connection *mc,
    const struct gate_route *route, int status, const char *code, const char *message)
{
	if (route && route->kind == GATE_COMMAND)
		gate_count(&s->counters, route->backend, status);
	return send_text(mc, status, "application/json", gate_error_json(code, message), status == 503);
}

/* A command's answer, once it is done. */
static enum MHD_Result respond(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	const struct gate_route *rt = &c->route;
	struct MHD_Connection *mc = c->cn->mc;
	if (c->client_gone)
		return MHD_NO; /* nobody to answer: close */
	char why[256] = "";
	if (c->rc == MQP_OK && !c->reply) {
		snprintf(why, sizeof why, "device %s answered %s with more than %zu bytes (--max-reply)",
		    rt->device, rt->command, s->cfg.max_reply);
		return send_error(s, mc, rt, 502, "reply_too_large", why);
	}
	if (c->rc == MQP_OK) {
		gate_observe_duration(&s->counters, rt->backend, c->took);
		gate_count(&s->counters, rt->backend, 200);
		char *text = gate_reply_json(rt, c->reply, c->reply_len, c->took);
		return send_text(mc, 200, "application/json", text, false);
	}
	if (c->rc == MQP_ETIMEDOUT)
		snprintf(why, sizeof why, "device %s did not answer %s within %u ms", rt->device,
		    rt->command, s->cfg.timeout_ms);
	else if ((c->rc == MQP_ECONNECT || c->rc == MQP_ECONNLOST) && rt->backend == GATE_POOL)
		mqp_pool_last_error(w->pool, why, sizeof why);
	else if (rt->backend == GATE_NAIVE)
		snprintf(why, sizeof why, "%s", c->err);
	if (!why[0])
		snprintf(why, sizeof why, "%s", mqp_strerror(c->rc));
	return send_error(s, mc, rt, gate_http_status(c->rc), gate_error_code(c->rc), why);
}

/* --- completing a command ------------------------------------------------------------------ */

static void http_run(struct worker *w);

static void on_resumed(uv_check_t *h)
{
	uv_check_stop(h);
	http_run(h->data);
}

/* The command is done (reply: a malloc'd copy or NULL): resume the connection; libmicrohttpd
 * calls on_request again, which answers. */
static void complete(struct call *c, int rc, void *reply, size_t reply_len)
{
	struct conn *cn = c->cn;
	c->took = mqc_now_ns() - c->t0;
	c->rc = rc;
	c->reply = reply;
	c->reply_len = reply_len;
	c->state = CALL_DONE;
	atomic_fetch_sub(&cn->w->s->counters.pending, 1);
	cn->waiting = NULL;
	MHD_resume_connection(cn->mc);
	/* libmicrohttpd in external mode is not woken by a resume: run it once this pass of the loop
	 * is through (every completion of the pass answered by one MHD_run). */
	uv_check_start(&cn->w->resumed, on_resumed);
}

static void on_pool_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct call *c = userdata;
	void *copy = NULL;
	size_t len = 0;
	if (result == MQP_OK && reply->len <= c->cn->w->s->cfg.max_reply) {
		copy = malloc(reply->len + 1);
		if (copy) {
			memcpy(copy, reply->payload, reply->len);
			((char *)copy)[reply->len] = '\0';
			len = reply->len;
		} else
			result = MQP_ENOMEM;
	}
	complete(c, result, copy, len);
}

/* --- the naive route on the loop ----------------------------------------------------------- */

static int naive_status(int mqc_req_result)
{
	switch (mqc_req_result) {
		case MQC_REQ_OK:
			return MQP_OK;
		case MQC_REQ_TIMEDOUT:
			return MQP_ETIMEDOUT;
		case MQC_REQ_CONNECT:
			return MQP_ECONNECT;
		case MQC_REQ_DENIED:
			return MQP_EDENIED;
		case MQC_REQ_NOMEM:
			return MQP_ENOMEM;
		default:
			return MQP_ECONNLOST;
	}
}

static void naive_closed(uv_handle_t *h)
{
	struct naive_op *op = h->data;
	if (--op->handles == 0)
		free(op);
}

/* Complete op's call with rc (and the reply on MQP_OK), close its connection, free it. */
static void naive_finish(struct naive_op *op, int rc, struct mqc_req_reply *reply)
{
	struct worker *w = op->w;
	struct call *c = op->call;
	op->call = NULL;
	if (c)
		c->naive = NULL;
	if (op->prev)
		op->prev->next = op->next;
	else
		w->naive_ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	uv_close((uv_handle_t *)&op->poll, naive_closed); /* before the socket closes */
	uv_close((uv_handle_t *)&op->timer, naive_closed);
	mqc_requester_abort(op->r);
	op->r = NULL;
	void *payload = NULL;
	size_t len = 0;
	if (rc == MQP_OK && reply) {
		if (reply->len <= w->s->cfg.max_reply) {
			payload = reply->payload;
			len = reply->len;
			reply->payload = NULL;
		}
		mqc_req_reply_free(reply);
	}
	if (c)
		complete(c, rc, payload, len);
}

static void naive_watch(struct naive_op *op);

static void naive_on_io(uv_poll_t *h, int status, int events)
{
	struct naive_op *op = h->data;
	struct mqc_req_reply reply;
	/* An error on the socket: read, and libmosquitto finds it. */
	bool readable = status < 0 || (events & (UV_READABLE | UV_DISCONNECT));
	int rc = mqc_request_step(op->r, readable, status == 0 && (events & UV_WRITABLE), &reply,
	    op->call->err, sizeof op->call->err);
	if (rc == MQC_REQ_PENDING)
		naive_watch(op);
	else
		naive_finish(op, naive_status(rc), &reply);
}

static void naive_watch(struct naive_op *op)
{
	int events = UV_READABLE | (mqc_requester_want_write(op->r) ? UV_WRITABLE : 0);
	uv_poll_start(&op->poll, events, naive_on_io);
}

static void naive_on_timeout(uv_timer_t *h)
{
	struct naive_op *op = h->data;
	naive_finish(
	    op, naive_status(mqc_request_expired(op->r, op->call->err, sizeof op->call->err)), NULL);
}

/* Start c's naive request. Returns MQP_OK (it completes later) or why not (c->err says). */
static int naive_start(struct worker *w, struct call *c, const char *topic)
{
	const struct gate_config *cfg = &w->s->cfg;
	struct naive_op *op = calloc(1, sizeof *op);
	if (!op)
		return MQP_ENOMEM;
	op->w = w;
	op->call = c;
	int rc = mqc_request_start(
	    &cfg->naive, "gate/inbox", topic, c->body, c->len, cfg->qos, &op->r, c->err, sizeof c->err);
	if (rc != MQC_REQ_OK) {
		free(op);
		return naive_status(rc);
	}
	if (uv_poll_init(&w->loop, &op->poll, mqc_requester_fd(op->r)) != 0) {
		mqc_requester_abort(op->r);
		free(op);
		return MQP_ENOMEM;
	}
	uv_timer_init(&w->loop, &op->timer);
	op->poll.data = op->timer.data = op;
	op->handles = 2;
	op->next = w->naive_ops;
	if (op->next)
		op->next->prev = op;
	w->naive_ops = op;
	c->naive = op;
	uv_timer_start(&op->timer, naive_on_timeout, cfg->timeout_ms, 0);
	naive_watch(op);
	return MQP_OK;
}

/* --- commands ------------------------------------------------------------------------------ */

/* The client went away (RDHUP, HUP or an error). While a command waits the connection is
 * suspended and libmicrohttpd does not watch it: cancel the MQTT request (a naive one at once;
 * the pool calls back with MQP_ECANCELED, or with the reply if it came first). Otherwise
 * libmicrohttpd sees the end of the stream itself and closes the connection. Either way this
 * watch has done its work (it is level-triggered: stop it). */
static void on_hangup(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	struct conn *cn = h->data;
	struct call *c = cn->waiting;
	uv_poll_stop(h);
	if (!c || c->client_gone)
		return;
	c->client_gone = true;
	atomic_fetch_add(&cn->w->s->counters.abandoned[c->route.backend], 1);
	if (c->route.backend == GATE_POOL) {
		mqp_pool_cancel(cn->w->pool, c->ticket);
		return;
	}
	if (c->naive)
		naive_finish(c->naive, MQP_ECANCELED, NULL);
}

static enum MHD_Result run_command(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	const struct gate_config *cfg = &s->cfg;
	const struct gate_route *rt = &c->route;
	struct MHD_Connection *mc = c->cn->mc;
	if (c->state == CALL_DONE)
		return respond(w, c);
	if (c->state == CALL_WAITING)
		return MHD_YES; /* not resumed before it is done: cannot happen */
	if (c->too_big) {
		char why[96];
		snprintf(why, sizeof why, "the body is larger than %zu bytes", cfg->max_body);
		return send_error(s, mc, rt, 413, "body_too_large", why);
	}
	if (!gate_body_ok(c->body, c->len))
		return send_error(s, mc, rt, 400, "bad_json",
		    "the body must be empty or one JSON value, in UTF-8, without NUL");
	if (atomic_load(&s->stopping))
		return send_error(s, mc, rt, 503, "shutting_down", "the gateway is shutting down");
	/* Admission: beyond max_pending the pool is exhausted; say so now instead of queueing. */
	if (atomic_fetch_add(&s->counters.pending, 1) >= cfg->max_pending) {
		atomic_fetch_sub(&s->counters.pending, 1);
		return send_error(
		    s, mc, rt, 503, "pool_exhausted", "too many commands in flight; retry shortly");
	}
	char topic[3 * GATE_NAME_MAX + 128];
	snprintf(topic, sizeof topic, "%s/%s/commands/%s", cfg->topic_prefix, rt->device, rt->command);
	c->t0 = mqc_now_ns();
	int rc;
	if (rt->backend == GATE_POOL)
		rc = mqp_pool_request_async(w->pool, topic, c->body, c->len, cfg->qos, cfg->timeout_ms,
		    on_pool_reply, c, &c->ticket);
	else
		rc = naive_start(w, c, topic);
	if (rc != MQP_OK) { /* never started: answer now */
		atomic_fetch_sub(&s->counters.pending, 1);
		c->rc = rc;
		c->state = CALL_DONE;
		return respond(w, c);
	}
	c->state = CALL_WAITING;
	c->cn->waiting = c;
	MHD_suspend_connection(mc);
	return MHD_YES;
}

static void arm_deadline(struct conn *cn);

static struct conn *conn_of(struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *info
	    = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return info ? info->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
    const char *method, const char *version, const char *upload_data, size_t *upload_data_size,
    void **state)
{
	(void)version;
	struct worker *w = cls;
	struct gate_server *s = w->s;
	struct call *c = *state;
	if (!c) { /* the headers are in: route now, read the body in the next calls */
		struct conn *cn = conn_of(mc);
		if (!cn || cn->refused)
			return MHD_NO;
		c = calloc(1, sizeof *c);
		if (!c)
			return MHD_NO;
		c->cn = cn;
		*state = c;
		w->active++;
		int st = gate_route_parse(method, url, &c->route, c->why, sizeof c->why);
		c->status = st;
		const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
		uint64_t declared = 0;
		if (st == 0 && cl && mqc_parse_u64(cl, 0, UINT64_MAX, &declared) == 0
		    && declared > s->cfg.max_body) {
			c->too_big = true; /* answer now: no need to read what we refuse */
			return run_command(w, c);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (c->status || c->too_big)
			return MHD_YES; /* discard */
		/* Past the limit: stop reading now (the rest could be endless). libmicrohttpd cannot
		 * answer in the middle of a body, so a chunked body gets its 413 counted and the
		 * connection closed; a declared Content-Length was answered before reading. */
		if (c->len + n > s->cfg.max_body) {
			c->too_big = true;
			free(c->body);
			c->body = NULL;
			c->len = 0;
			return run_command(w, c);
		}
		char *grown = realloc(c->body, c->len + n + 1);
		if (!grown)
			return MHD_NO;
		memcpy(grown + c->len, upload_data, n);
		c->body = grown;
		c->len += n;
		c->body[c->len] = '\0';
		return MHD_YES;
	}
	if (c->too_big)
		return MHD_YES;              /* answered (413) while the body came in */
	uv_timer_stop(&c->cn->deadline); /* the request is in: its deadline is met */
	if (c->status) {
		const char *code = c->status == 400 ? "bad_request"
		    : c->status == 404              ? "not_found"
		                                    : "method_not_allowed";
		return send_error(s, mc, c->status == 400 ? &c->route : NULL, c->status, code, c->why);
	}
	switch (c->route.kind) {
		case GATE_HEALTH: {
			unsigned ready = 0;
			pthread_rwlock_rdlock(&s->pools_lock);
			for (unsigned i = 0; i < s->n; i++) {
				struct mqp_pool_stats st;
				mqp_pool_stats(s->w[i].pool, &st, sizeof st);
				ready += st.ready;
			}
			pthread_rwlock_unlock(&s->pools_lock);
			char *text = strdup(
			    ready > 0 ? "{\"status\":\"ok\"}" : "{\"status\":\"no broker connection\"}");
			return send_text(mc, ready > 0 ? 200 : 503, "application/json", text, false);
		}
		case GATE_METRICS: {
			mqp_pool *pools[GATE_MAX_WORKERS];
			pthread_rwlock_rdlock(&s->pools_lock);
			for (unsigned i = 0; i < s->n; i++)
				pools[i] = s->w[i].pool;
			char *text = gate_metrics_text(&s->counters, pools, s->n);
			pthread_rwlock_unlock(&s->pools_lock);
			return send_text(mc, 200, "text/plain; version=0.0.4", text, false);
		}
		case GATE_COMMAND:
		default:
			return run_command(w, c);
	}
}

static void on_completed(
    void *cls, struct MHD_Connection *mc, void **state, enum MHD_RequestTerminationCode why)
{
	(void)why;
	struct worker *w = cls;
	struct call *c = *state;
	struct conn *cn = conn_of(mc);
	if (cn && !cn->refused) /* the next request on this connection gets its own deadline */
		arm_deadline(cn);
	if (c) {
		free(c->body);
		free(c->reply);
		free(c);
		w->active--;
	}
	*state = NULL;
}

/* --- connections --------------------------------------------------------------------------- */

static void on_deadline(uv_timer_t *h)
{
	struct conn *cn = h->data;
	/* libmicrohttpd sees the end of the stream and closes the connection. */
	shutdown(cn->fd, SHUT_RDWR);
}

static void arm_deadline(struct conn *cn)
{
	uv_timer_start(&cn->deadline, on_deadline, cn->w->s->cfg.request_deadline_ms, 0);
}

static void conn_closed(uv_handle_t *h)
{
	struct conn *cn = h->data;
	if (--cn->handles == 0)
		free(cn);
}

/* Whether one more connection from addr is allowed; counts it when it is. */
static bool address_admit(struct gate_server *s, uint32_t addr)
{
	pthread_mutex_lock(&s->addr_lock);
	struct addr_count *e;
	HASH_FIND(hh, s->addrs, &addr, sizeof addr, e);
	bool ok = true;
	if (!e && (e = calloc(1, sizeof *e)) != NULL) {
		e->addr = addr;
		HASH_ADD(hh, s->addrs, addr, sizeof e->addr, e);
	}
	if (!e || e->n >= s->cfg.per_address)
		ok = false;
	else
		e->n++;
	pthread_mutex_unlock(&s->addr_lock);
	return ok;
}

static void address_release(struct gate_server *s, uint32_t addr)
{
	pthread_mutex_lock(&s->addr_lock);
	struct addr_count *e;
	HASH_FIND(hh, s->addrs, &addr, sizeof addr, e);
	if (e && --e->n == 0) {
		HASH_DEL(s->addrs, e);
		free(e);
	}
	pthread_mutex_unlock(&s->addr_lock);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
    enum MHD_ConnectionNotificationCode code)
{
	struct worker *w = cls;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		struct conn *cn = *socket_context;
		if (!cn)
			return;
		if (cn->counted) {
			address_release(w->s, cn->addr);
			atomic_fetch_sub(&w->s->connections, 1);
		}
		if (cn->hup_ok)
			uv_close((uv_handle_t *)&cn->hup, conn_closed);
		uv_close((uv_handle_t *)&cn->deadline, conn_closed);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *fd
	    = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_ConnectionInfo *peer
	    = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct conn *cn = calloc(1, sizeof *cn);
	if (!cn || !fd) {
		free(cn);
		if (fd)
			shutdown(fd->connect_fd, SHUT_RDWR); /* out of memory: refuse it */
		return;
	}
	cn->w = w;
	cn->mc = mc;
	cn->fd = fd->connect_fd;
	uv_timer_init(&w->loop, &cn->deadline);
	cn->deadline.data = cn;
	cn->handles = 1;
	*socket_context = cn;
	if (peer && peer->client_addr->sa_family == AF_INET)
		cn->addr = ((const struct sockaddr_in *)peer->client_addr)->sin_addr.s_addr;
	/* Admission: at most max_connections in all (the workers share them however the kernel
	 * spreads connections among their listening sockets), per_address from one address. A
	 * refused connection is closed at once rather than left unaccepted in the backlog. */
	char text[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &cn->addr, text, sizeof text);
	struct gate_server *s = w->s;
	if (atomic_fetch_add(&s->connections, 1) >= s->cfg.max_connections) {
		atomic_fetch_sub(&s->connections, 1);
		log_limited("refused a connection from %s: %u open (--max-connections)\n", text,
		    s->cfg.max_connections);
		cn->refused = true;
	} else if (!address_admit(s, cn->addr)) {
		atomic_fetch_sub(&s->connections, 1);
		log_limited("refused a connection from %s: it has %u open (--max-per-address)\n", text,
		    s->cfg.per_address);
		cn->refused = true;
	} else
		cn->counted = true;
	if (cn->refused) {
		shutdown(cn->fd, SHUT_RDWR);
		return;
	}
	arm_deadline(cn);
	/* Watched for the whole connection, not per command: two epoll_ctl calls fewer a request. */
	if (uv_poll_init(&w->loop, &cn->hup, cn->fd) == 0) {
		cn->hup.data = cn;
		cn->hup_ok = true;
		cn->handles++;
		uv_poll_start(&cn->hup, UV_DISCONNECT, on_hangup);
	}
}

/* libmicrohttpd must not decode the path: gate_route_parse decodes each segment itself. */
static size_t keep_escaped(void *cls, struct MHD_Connection *mc, char *text)
{
	(void)cls;
	(void)mc;
	return strlen(text);
}

/* --- the worker's loop --------------------------------------------------------------------- */

static void on_http_io(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	http_run(h->data);
}

static void on_http_timer(uv_timer_t *h)
{
	http_run(h->data);
}

/* Let libmicrohttpd do what is ready, then wake it again when its next timeout is due. */
static void http_run(struct worker *w)
{
	if (!w->d)
		return;
	MHD_run(w->d);
	MHD_UNSIGNED_LONG_LONG ms;
	if (MHD_get_timeout(w->d, &ms) == MHD_YES)
		uv_timer_start(&w->http_timer, on_http_timer, ms, 0);
	else
		uv_timer_stop(&w->http_timer);
}

static void worker_close(struct worker *w)
{
	uv_timer_stop(&w->drain);
	/* Every call completes first: the pool's with MQP_ECLOSED, the naive ones aborted. */
	pthread_rwlock_wrlock(&w->s->pools_lock);
	mqp_pool *pool = w->pool;
	w->pool = NULL;
	pthread_rwlock_unlock(&w->s->pools_lock);
	mqp_pool_destroy(pool);
	while (w->naive_ops)
		naive_finish(w->naive_ops, MQP_ECLOSED, NULL);
	MHD_stop_daemon(w->d); /* closes every connection (their handles close) */
	w->d = NULL;
	uv_close((uv_handle_t *)&w->http, NULL);
	uv_close((uv_handle_t *)&w->http_timer, NULL);
	uv_close((uv_handle_t *)&w->resumed, NULL);
	uv_close((uv_handle_t *)&w->drain, NULL);
	uv_close((uv_handle_t *)&w->stop, NULL);
}

static void on_drain_check(uv_timer_t *h)
{
	struct worker *w = h->data;
	bool idle = w->active == 0 && mqp_pool_drain(w->pool, MQP_NO_WAIT) == MQP_OK;
	if (idle || mqc_now_ns() >= w->drain_deadline) {
		w->drained = idle;
		worker_close(w);
	}
}

static void on_stop(uv_async_t *h)
{
	struct worker *w = h->data;
	if (w->drain_deadline) /* already draining */
		return;
	w->drain_deadline = mqc_now_ns() + atomic_load(&w->s->drain_ns);
	MHD_socket listen_fd = MHD_quiesce_daemon(w->d); /* no new connections */
	if (listen_fd != MHD_INVALID_SOCKET)
		close(listen_fd);
	/* Requests in flight finish and their responses go out (libmicrohttpd reports each one
	 * completed once it is sent); new ones on open connections get 503 shutting_down. */
	uv_timer_start(&w->drain, on_drain_check, 0, 2);
}

static int worker_open(struct worker *w)
{
	struct gate_server *s = w->s;
	const struct gate_config *cfg = &s->cfg;
	if (uv_loop_init(&w->loop) != 0) {
		snprintf(w->err, sizeof w->err, "cannot make an event loop");
		return -1;
	}
	struct mqp_pool_options po = cfg->pool;
	po.max_size = cfg->pool.max_size / s->n + (w->index < cfg->pool.max_size % s->n);
	po.min_size = cfg->pool.min_size / s->n + (w->index < cfg->pool.min_size % s->n);
	mqp_pool *pool;
	int rc = mqp_uv_pool_new(&w->loop, cfg->broker, &po, &pool, w->err, sizeof w->err);
	if (rc == MQP_OK) {
		pthread_rwlock_wrlock(&s->pools_lock);
		w->pool = pool;
		pthread_rwlock_unlock(&s->pools_lock);
	} else {
		char why[sizeof w->err];
		snprintf(why, sizeof why, "%s", w->err);
		snprintf(
		    w->err, sizeof w->err, "cannot create the pool: %s: %.200s", mqp_strerror(rc), why);
		uv_run(&w->loop, UV_RUN_NOWAIT); /* the adapter's handles close */
		uv_loop_close(&w->loop);
		return -1;
	}
	struct sockaddr_in sa = cfg->listen;
	sa.sin_port = htons((uint16_t)w->port);
	w->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL,
	    NULL, on_request, w, MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL, MHD_OPTION_SOCK_ADDR,
	    (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections + 256,
	    MHD_OPTION_CONNECTION_TIMEOUT, cfg->request_deadline_ms / 1000 + 1,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, w, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
	    w, MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1,
	    MHD_OPTION_END);
	const union MHD_DaemonInfo *epoll_fd
	    = w->d ? MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
	const union MHD_DaemonInfo *port
	    = w->d ? MHD_get_daemon_info(w->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
	if (!epoll_fd || !port || uv_poll_init(&w->loop, &w->http, epoll_fd->epoll_fd) != 0) {
		char addr[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
		snprintf(
		    w->err, sizeof w->err, "cannot listen on %s:%u: %s", addr, w->port, strerror(errno));
		if (w->d)
			MHD_stop_daemon(w->d);
		w->d = NULL;
		pthread_rwlock_wrlock(&s->pools_lock);
		w->pool = NULL;
		pthread_rwlock_unlock(&s->pools_lock);
		mqp_pool_destroy(pool);
		uv_run(&w->loop, UV_RUN_NOWAIT);
		uv_loop_close(&w->loop);
		return -1;
	}
	w->port = port->port;
	w->http.data = w;
	uv_poll_start(&w->http, UV_READABLE, on_http_io);
	uv_timer_init(&w->loop, &w->http_timer);
	w->http_timer.data = w;
	uv_check_init(&w->loop, &w->resumed);
	w->resumed.data = w;
	uv_timer_init(&w->loop, &w->drain);
	w->drain.data = w;
	uv_async_init(&w->loop, &w->stop, on_stop);
	w->stop.data = w;
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	w->start_rc = worker_open(w);
	int ok = w->start_rc;
	sem_post(&w->started); /* w may be stopped from here on */
	if (ok != 0)
		return NULL;
	http_run(w);
	uv_run(&w->loop, UV_RUN_DEFAULT);
	uv_loop_close(&w->loop);
	return NULL;
}

/* --- the server ---------------------------------------------------------------------------- */

static void server_free(struct gate_server *s)
{
	while (s->addrs) {
		struct addr_count *e = s->addrs;
		/* uthash frees its table with the last item; the analyzer takes that for e. */
		HASH_DEL(s->addrs, e); /* NOLINT(clang-analyzer-unix.Malloc) */
		free(e);
	}
	for (unsigned i = 0; i < s->n; i++)
		sem_destroy(&s->w[i].started);
	pthread_mutex_destroy(&s->addr_lock);
	pthread_rwlock_destroy(&s->pools_lock);
	free(s->w);
	free(s);
}

/* Stop the workers that started (drain_ns: how long they may finish what they have). */
static bool stop_workers(struct gate_server *s)
{
	bool drained = true;
	for (unsigned i = 0; i < s->n; i++)
		if (s->w[i].thread_started && s->w[i].start_rc == 0)
			uv_async_send(&s->w[i].stop);
	for (unsigned i = 0; i < s->n; i++)
		if (s->w[i].thread_started) {
			pthread_join(s->w[i].thread, NULL);
			if (s->w[i].start_rc == 0 && !s->w[i].drained)
				drained = false;
		}
	return drained;
}

int gate_server_start(const struct gate_config *cfg, unsigned workers, struct gate_server **out,
    char *err, size_t errlen)
{
	*out = NULL;
	struct gate_server *s = calloc(1, sizeof *s);
	struct worker *w = calloc(workers, sizeof *w);
	if (!s || !w) {
		free(s);
		free(w);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->cfg = *cfg;
	s->w = w;
	s->n = workers;
	pthread_mutex_init(&s->addr_lock, NULL);
	pthread_rwlock_init(&s->pools_lock, NULL);
	unsigned port = ntohs(cfg->listen.sin_port);
	int rc = 0;
	/* One at a time: the first picks the port when it is 0, the others share it. */
	for (unsigned i = 0; i < workers && rc == 0; i++) {
		w[i].s = s;
		w[i].index = i;
		w[i].port = port;
		sem_init(&w[i].started, 0, 0);
		int e = pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
		if (e != 0) {
			snprintf(err, errlen, "cannot start a worker thread: %s", strerror(e));
			rc = -1;
			break;
		}
		w[i].thread_started = true;
		while (sem_wait(&w[i].started) != 0 && errno == EINTR)
			;
		if (w[i].start_rc != 0) {
			snprintf(err, errlen, "%s", w[i].err);
			rc = -1;
		}
		port = w[i].port;
	}
	if (rc != 0) {
		stop_workers(s);
		server_free(s);
		return -1;
	}
	*out = s;
	return 0;
}

unsigned gate_server_port(const struct gate_server *s)
{
	return s->w[0].port;
}

bool gate_server_stop(struct gate_server *s, unsigned drain_ms, uint64_t ok[GATE_BACKENDS])
{
	atomic_store(&s->drain_ns, (uint64_t)drain_ms * MQC_NS_PER_MS);
	atomic_store(&s->stopping, true);
	bool drained = stop_workers(s);
	for (int b = 0; b < GATE_BACKENDS; b++)
		ok[b] = atomic_load(&s->counters.responses[b][0]);
	server_free(s);
	return drained;
}
