/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * server.c - gate-api's event-driven HTTP server: see server.h.
 *
 * Per worker, everything below runs on the worker's thread, from one libuv loop: the HTTP
 * connections (libuv streams; requests parsed by http-parser from the bytes of each read), the
 * pool's sockets and callbacks (mqttpool_uv.h: the loop watches them itself), the naive
 * requests' sockets and timers, and the per-connection deadlines. One epoll set, one
 * epoll_wait a turn; a keep-alive request costs its read and its write. The only shared state is
 * the counters (atomics) and the per-address table (a mutex, taken per connection, not per
 * request).
 *
 * Lifetimes: a struct conn lives from its accept until its handles close (then it frees itself);
 * a struct call from the first byte of a request to its response being handed to the kernel (or
 * the end of its connection); a struct naive_op until its handles close. A call that waits for a
 * device always completes (reply, timeout, error, or cancel when its client goes away) before
 * its connection reads the next request, and the worker completes every call before it closes.
 */
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uthash.h>
#include <uv.h>

#include "mqc_clock.h"
#include "mqc_request.h"
#include "mqc_strutil.h"
#include "mqc_template.h"
#include "mqttpool_uv.h"

enum {
	URL_MAX = 4096,         /* a request target longer than this is a 400 */
	HEADERS_MAX = 32768,    /* all the headers of a request (http-parser enforces it) */
	HELD_MAX = 65536,       /* bytes read ahead (pipelined) while a request is served */
	READ_BUF = 65536,       /* the worker's one read buffer: every connection reads into it */
	LINGER_MS = 2000,       /* after an answer that closes: how long its rest is read away */
	LINGER_BYTES = 1 << 20, /* ... and how much of it at most */
};

struct addr_count {
	uint32_t addr;
	unsigned n;
	UT_hash_handle hh;
};

struct worker;
struct naive_op;
struct call;

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

/* An HTTP connection. */
struct conn {
	uv_tcp_t tcp; /* first: libuv hands back &tcp */
	struct worker *w;
	struct conn *prev, *next; /* the worker's open connections */
	uint32_t addr;
	bool counted;   /* in connections and the address's count */
	bool closing;   /* uv_close called */
	bool writing;   /* a response is with uv_write */
	bool lingering; /* answered and half-closed: what still comes is read away */
	bool stopped;   /* reading stopped: too much read ahead */
	bool parsing;   /* inside http_parser_execute: its callbacks must not feed it again */
	bool eof;       /* the client is gone: close once the answer is out */
	bool bad;       /* not HTTP: the answer closes */
	size_t lingered;
	uv_timer_t timer; /* --request-deadline until a request is in; the linger's end */
	http_parser parser;
	struct call *call; /* the request being read or served */
	char *held;        /* read while a request is served (pipelined requests) */
	size_t held_len;
	int handles;
};

enum call_state { CALL_READING, CALL_WAITING, CALL_DONE };

/* An HTTP request. */
struct call {
	struct conn *cn;
	enum call_state state;
	char url[URL_MAX + 1];
	size_t url_len;
	bool url_long;
	bool field_expect, expect_continue, head;
	char value[32];
	size_t value_len;
	int status; /* nonzero: already decided (a bad route) */
	char why[256];
	struct gate_route route;
	char *body;
	size_t len;
	bool too_big;
	bool client_gone;
	mqp_ticket ticket;      /* the pool route's request */
	struct naive_op *naive; /* the naive route's, while it runs */
	uint64_t t0, took;
	int rc;
	void *reply; /* NUL-terminated copy, or NULL when too large */
	size_t reply_len;
	char err[512]; /* why rc, when the route said */
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

struct worker {
	struct gate_server *s;
	unsigned index;
	pthread_t thread;
	bool thread_started;
	uv_loop_t loop;
	uv_tcp_t listener;
	bool listening;
	uv_async_t stop;  /* gate_server_stop */
	uv_timer_t drain; /* while draining: whether everything is done */
	mqp_pool *pool;
	struct naive_op *naive_ops; /* in flight */
	struct conn *conns;         /* open */
	unsigned active;            /* HTTP requests from their first byte until their response */
	uint64_t drain_deadline;
	bool drained;
	unsigned port; /* to bind (0: any), then bound */
	sem_t started;
	int start_rc;
	char err[256];
	char rbuf[READ_BUF];
};

static http_parser_settings parser_settings;

/* --- logging ------------------------------------------------------------------------------- */

/* Messages at most one a second: past a connection limit there is one for every refused
 * connection, and a flood of them must not become a flood of log lines. */
__attribute__((format(printf, 1, 0))) static void log_limitedv(const char *fmt, va_list ap)
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
		fprintf(stderr, "mqp-gate-api: (%lu more messages in the last second)\n", suppressed);
	suppressed = 0;
	last_ns = now;
	fprintf(stderr, "mqp-gate-api: ");
	vfprintf(stderr, fmt, ap);
	pthread_mutex_unlock(&lock);
}

static void log_limited(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_limited(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_limitedv(fmt, ap);
	va_end(ap);
}

/* The pool's messages (connect failures, their verdicts): in the gateway's log. */
static void on_pool_log(void *userdata, int level, const char *message)
{
	(void)userdata;
	(void)level;
	log_limited("%s\n", message);
}

/* --- connections: closing ----------------------------------------------------------------- */

static void conn_closed(uv_handle_t *h)
{
	struct conn *cn = h->data;
	if (--cn->handles == 0) {
		free(cn->held);
		free(cn);
	}
}

static void end_call(struct conn *cn);

/* Close cn now. A call still waiting for its device is cancelled and completes later (it holds
 * no pointer the close invalidates: the conn is freed only when its handles have closed, and a
 * completion finds call->client_gone). */
static void conn_close(struct conn *cn)
{
	if (cn->closing)
		return;
	cn->closing = true;
	struct worker *w = cn->w;
	if (cn->prev)
		cn->prev->next = cn->next;
	else
		w->conns = cn->next;
	if (cn->next)
		cn->next->prev = cn->prev;
	if (cn->counted) {
		pthread_mutex_lock(&w->s->addr_lock);
		struct addr_count *e;
		HASH_FIND(hh, w->s->addrs, &cn->addr, sizeof cn->addr, e);
		if (e && --e->n == 0) {
			HASH_DEL(w->s->addrs, e);
			free(e);
		}
		pthread_mutex_unlock(&w->s->addr_lock);
		atomic_fetch_sub(&w->s->connections, 1);
		cn->counted = false;
	}
	if (cn->call && cn->call->state != CALL_WAITING)
		end_call(cn);
	uv_close((uv_handle_t *)&cn->timer, conn_closed);
	uv_close((uv_handle_t *)&cn->tcp, conn_closed);
}

/* --- responses ----------------------------------------------------------------------------- */

static const char *reason_phrase(int status)
{
	switch (status) {
		case 100:
			return "Continue";
		case 200:
			return "OK";
		case 400:
			return "Bad Request";
		case 403:
			return "Forbidden";
		case 404:
			return "Not Found";
		case 405:
			return "Method Not Allowed";
		case 413:
			return "Content Too Large";
		case 502:
			return "Bad Gateway";
		case 503:
			return "Service Unavailable";
		case 504:
			return "Gateway Timeout";
		default:
			return "Internal Server Error";
	}
}

static void arm_deadline(struct conn *cn);
static void feed(struct conn *cn, const char *data, size_t len);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

struct write_req {
	uv_write_t req;
	struct conn *cn;
	bool close_after;
	char data[];
};

static void linger_end(uv_timer_t *h)
{
	conn_close(h->data);
}

/* Answered, and the connection ends: half-close it and read what the client still sends for a
 * while (a client in the middle of a body would otherwise get a reset instead of the answer). */
static void linger(struct conn *cn)
{
	if (cn->closing)
		return;
	cn->lingering = true;
	uv_os_fd_t fd;
	if (uv_fileno((uv_handle_t *)&cn->tcp, &fd) == 0)
		shutdown(fd, SHUT_WR);
	uv_timer_start(&cn->timer, linger_end, LINGER_MS, 0);
	if (cn->stopped) {
		cn->stopped = false;
		uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read);
	}
}

/* After a response went to the kernel: the next request (read ahead, or to come), or the end. */
static void after_response(struct conn *cn, bool close_after)
{
	if (cn->eof) {
		conn_close(cn);
		return;
	}
	if (close_after) {
		linger(cn);
		return;
	}
	arm_deadline(cn); /* the next request on this connection gets its own deadline */
	if (cn->parsing)
		return; /* answered from a parser callback: feed() goes on with what follows */
	http_parser_pause(&cn->parser, 0);
	if (cn->stopped) {
		cn->stopped = false;
		uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read);
	}
	if (cn->held_len) { /* pipelined: the next request is already here */
		char *held = cn->held;
		size_t len = cn->held_len;
		cn->held = NULL;
		cn->held_len = 0;
		feed(cn, held, len);
		free(held);
	}
}

static void on_written(uv_write_t *req, int status)
{
	struct write_req *wr = (struct write_req *)req;
	struct conn *cn = wr->cn;
	bool close_after = wr->close_after;
	free(wr);
	cn->writing = false;
	if (cn->closing)
		return;
	if (status < 0)
		conn_close(cn);
	else
		after_response(cn, close_after);
}

/* Hand text to the kernel: one write when it takes it all (nearly always), else the rest through
 * uv_write. While it is written the connection parses nothing more. */
static void send_bytes(struct conn *cn, char *text, size_t len, bool close_after)
{
	if (cn->closing)
		return;
	uv_buf_t b = uv_buf_init(text, (unsigned)len);
	int n = uv_try_write((uv_stream_t *)&cn->tcp, &b, 1);
	if (n == UV_EAGAIN || n == UV_ENOSYS)
		n = 0;
	if (n < 0) {
		conn_close(cn);
		return;
	}
	if ((size_t)n == len) {
		after_response(cn, close_after);
		return;
	}
	struct write_req *wr = malloc(sizeof *wr + len - (size_t)n);
	if (!wr) {
		conn_close(cn);
		return;
	}
	memcpy(wr->data, text + n, len - (size_t)n);
	wr->cn = cn;
	wr->close_after = close_after;
	b = uv_buf_init(wr->data, (unsigned)(len - (size_t)n));
	cn->writing = true;
	http_parser_pause(&cn->parser, 1);
	if (uv_write(&wr->req, (uv_stream_t *)&cn->tcp, &b, 1, on_written) != 0) {
		free(wr);
		cn->writing = false;
		conn_close(cn);
	}
}

/* The response to cn's call: status, headers, body (text, malloc'd; NULL: out of memory), and the
 * end of the call. */
static void respond_text(
    struct conn *cn, int status, const char *type, char *text, bool retry_after, bool close)
{
	struct call *c = cn->call;
	if (!text) {
		conn_close(cn);
		return;
	}
	bool v10 = cn->parser.http_major == 1 && cn->parser.http_minor == 0;
	bool head = c && c->head;
	size_t blen = strlen(text);
	enum { HEADER_MAX = 512 };
	char *out = malloc(HEADER_MAX + (head ? 0 : blen));
	int n = out ? snprintf(out, HEADER_MAX,
	            "HTTP/1.%d %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s\r\n",
	            v10 ? 0 : 1, status, reason_phrase(status), type, blen,
	            status == 405 ? "Allow: POST, GET, HEAD\r\n" : "",
	            retry_after ? "Retry-After: 1\r\n" : "",
	            close     ? "Connection: close\r\n"
	                : v10 ? "Connection: keep-alive\r\n"
	                      : "")
	            : -1;
	if (n < 0 || n >= HEADER_MAX) { /* no memory, or a header this code never makes */
		free(out);
		free(text);
		conn_close(cn);
		return;
	}
	size_t total = (size_t)n + (head ? 0 : blen);
	if (!head)                       /* the body after the header: bytes, not a C string */
		memcpy(out + n, text, blen); /* NOLINT(bugprone-not-null-terminated-result) */
	free(text);
	end_call(cn);
	send_bytes(cn, out, total, close);
	free(out);
}

/* Whether cn stays open after this response (the client's wish, and the server's state). */
static bool closes(struct conn *cn, int status)
{
	return cn->bad || status == 413 || !http_should_keep_alive(&cn->parser)
	    || atomic_load(&cn->w->s->stopping);
}

static void respond_error(struct conn *cn, const struct gate_route *route, int status,
    const char *code, const char *message)
{
	struct gate_server *s = cn->w->s;
	if (route && route->kind == GATE_COMMAND)
		gate_count(&s->counters, route->backend, status);
	respond_text(cn, status, "application/json", gate_error_json(code, message), status == 503,
	    closes(cn, status));
}

/* A command's answer, once it is done. */
static void respond_command(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	struct conn *cn = c->cn;
	const struct gate_route *rt = &c->route;
	char why[512] = "";
	if (c->rc == MQP_OK && !c->reply) {
		snprintf(why, sizeof why, "device %s answered %s with more than %zu bytes (--max-reply)",
		    rt->device, rt->command, s->cfg.max_reply);
		respond_error(cn, rt, 502, "reply_too_large", why);
		return;
	}
	if (c->rc == MQP_OK) {
		gate_observe_duration(&s->counters, rt->backend, c->took);
		gate_count(&s->counters, rt->backend, 200);
		respond_text(cn, 200, "application/json",
		    gate_reply_json(rt, c->reply, c->reply_len, c->took), false, closes(cn, 200));
		return;
	}
	if (c->rc == MQP_ETIMEDOUT)
		snprintf(why, sizeof why, "device %s did not answer %s within %u ms", rt->device,
		    rt->command, s->cfg.timeout_ms);
	else if ((c->rc == MQP_ECONNECT || c->rc == MQP_EREFUSED || c->rc == MQP_ECONNLOST)
	    && rt->backend == GATE_POOL)
		mqp_pool_last_error(w->pool, why, sizeof why);
	else if (rt->backend == GATE_NAIVE)
		snprintf(why, sizeof why, "%s", c->err);
	if (!why[0])
		snprintf(why, sizeof why, "%s", mqp_strerror(c->rc));
	respond_error(cn, rt, gate_http_status(c->rc), gate_error_code(c->rc), why);
}

/* The call is answered (or its connection gone): free it. */
static void end_call(struct conn *cn)
{
	struct call *c = cn->call;
	if (!c)
		return;
	cn->call = NULL;
	free(c->body);
	free(c->reply);
	free(c);
	cn->w->active--;
}

/* --- completing a command ------------------------------------------------------------------ */

/* The command is done (reply: a malloc'd copy or NULL): answer, or, when its client went away,
 * let the call go with its connection. */
static void complete(struct call *c, int rc, void *reply, size_t reply_len)
{
	struct conn *cn = c->cn;
	c->took = mqc_now_ns() - c->t0;
	c->rc = rc;
	c->reply = reply;
	c->reply_len = reply_len;
	c->state = CALL_DONE;
	atomic_fetch_sub(&cn->w->s->counters.pending, 1);
	if (c->client_gone || cn->closing) {
		end_call(cn);
		conn_close(cn);
		return;
	}
	respond_command(cn->w, c);
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
		case MQC_REQ_REFUSED:
			return MQP_EREFUSED;
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

/* Start c's naive request (reply_topic: the legacy model's, or NULL). Returns MQP_OK (it
 * completes later) or why not (c->err says). */
static int naive_start(struct worker *w, struct call *c, const char *topic, const char *reply_topic)
{
	const struct gate_config *cfg = &w->s->cfg;
	struct naive_op *op = calloc(1, sizeof *op);
	if (!op)
		return MQP_ENOMEM;
	op->w = w;
	op->call = c;
	int rc = reply_topic ? mqc_request_start_legacy(&cfg->naive, reply_topic, topic, c->body,
	             c->len, cfg->qos, &op->r, c->err, sizeof c->err)
	                     : mqc_request_start(&cfg->naive, "gate/inbox", topic, c->body, c->len,
	                         cfg->qos, &op->r, c->err, sizeof c->err);
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

/* The client went away (EOF or an error) while its command waits: cancel the MQTT request (a
 * naive one at once; the pool calls back with MQP_ECANCELED, or with the reply if it came
 * first). Counted; a device is not asked to act for a client that is gone. */
static void client_gone(struct conn *cn)
{
	struct call *c = cn->call;
	if (!c || c->state != CALL_WAITING || c->client_gone)
		return;
	c->client_gone = true;
	atomic_fetch_add(&cn->w->s->counters.abandoned[c->route.backend], 1);
	if (c->route.backend == GATE_POOL)
		mqp_pool_cancel(cn->w->pool, c->ticket);
	else if (c->naive)
		naive_finish(c->naive, MQP_ECANCELED, NULL);
}

static void run_command(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	const struct gate_config *cfg = &s->cfg;
	const struct gate_route *rt = &c->route;
	struct conn *cn = c->cn;
	if (!gate_body_ok(c->body, c->len)) {
		respond_error(cn, rt, 400, "bad_json",
		    "the body must be empty or one JSON value, in UTF-8, without NUL");
		return;
	}
	if (atomic_load(&s->stopping)) {
		respond_error(cn, rt, 503, "shutting_down", "the gateway is shutting down");
		return;
	}
	/* Admission: beyond max_pending the pool is exhausted; say so now instead of queueing. */
	if (atomic_fetch_add(&s->counters.pending, 1) >= cfg->max_pending) {
		atomic_fetch_sub(&s->counters.pending, 1);
		respond_error(cn, rt, 503, "pool_exhausted", "too many commands in flight; retry shortly");
		return;
	}
	char topic[3 * GATE_NAME_MAX + 128], reply_topic[3 * GATE_NAME_MAX + 256];
	snprintf(topic, sizeof topic, "%s/%s/commands/%s", cfg->topic_prefix, rt->device, rt->command);
	bool legacy = cfg->reply_template != NULL;
	int rc = MQP_OK;
	if (legacy
	    && mqc_template_expand(cfg->reply_template, topic, reply_topic, sizeof reply_topic) < 0)
		rc = MQP_ETOOBIG;
	c->t0 = mqc_now_ns();
	c->state = CALL_WAITING; /* before the call: a request refused at once completes now */
	if (rc == MQP_OK && rt->backend == GATE_POOL)
		rc = (int)(legacy ? mqp_pool_request_legacy_async(w->pool, topic, c->body, c->len, cfg->qos,
		               reply_topic, NULL, NULL, cfg->timeout_ms, on_pool_reply, c, &c->ticket)
		                  : mqp_pool_request_async(w->pool, topic, c->body, c->len, cfg->qos,
		                      cfg->timeout_ms, on_pool_reply, c, &c->ticket));
	else if (rc == MQP_OK)
		rc = naive_start(w, c, topic, legacy ? reply_topic : NULL);
	if (rc != MQP_OK) { /* never started: answer now */
		atomic_fetch_sub(&s->counters.pending, 1);
		c->rc = rc;
		c->state = CALL_DONE;
		respond_command(w, c);
		return;
	}
	http_parser_pause(&cn->parser, 1); /* the next request waits for this one's answer */
}

/* /healthz: ready with a broker connection; otherwise 503 and why (the pools' last error). */
static void health(struct conn *cn)
{
	struct gate_server *s = cn->w->s;
	unsigned ready = 0;
	char why[512] = "";
	pthread_rwlock_rdlock(&s->pools_lock);
	for (unsigned i = 0; i < s->n; i++) {
		struct mqp_pool_stats st;
		mqp_pool_stats(s->w[i].pool, &st, sizeof st);
		ready += st.ready;
		if (!why[0] && s->w[i].pool)
			mqp_pool_last_error(s->w[i].pool, why, sizeof why);
	}
	pthread_rwlock_unlock(&s->pools_lock);
	char *text = NULL;
	if (ready) {
		text = strdup("{\"status\":\"ok\"}");
	} else {
		char *reason = gate_error_json("no_broker_connection", why[0] ? why : "connecting");
		/* {"error":...,"message":...} -> {"status":"no broker connection","reason":...} */
		size_t need = reason ? strlen(reason) + 64 : 0;
		if (reason && (text = malloc(need))) {
			const char *msg = strstr(reason, "\"message\":");
			snprintf(text, need, "{\"status\":\"no broker connection\",\"reason\":%s",
			    msg ? msg + 10 : "\"\"}");
		}
		free(reason);
	}
	respond_text(cn, ready ? 200 : 503, "application/json", text, false, closes(cn, 200));
}

static void metrics(struct conn *cn)
{
	struct gate_server *s = cn->w->s;
	mqp_pool *pools[GATE_MAX_WORKERS];
	pthread_rwlock_rdlock(&s->pools_lock);
	for (unsigned i = 0; i < s->n; i++)
		pools[i] = s->w[i].pool;
	char *text = gate_metrics_text(&s->counters, pools, s->n);
	pthread_rwlock_unlock(&s->pools_lock);
	respond_text(cn, 200, "text/plain; version=0.0.4", text, false, closes(cn, 200));
}

/* --- parsing (http-parser's callbacks) ------------------------------------------------------ */

static int on_message_begin(http_parser *p)
{
	struct conn *cn = p->data;
	struct call *c = calloc(1, sizeof *c);
	if (!c)
		return 1; /* out of memory: an error, the connection closes */
	c->cn = cn;
	cn->call = c;
	cn->w->active++;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	struct call *c = ((struct conn *)p->data)->call;
	if (c->url_len + len > URL_MAX) {
		c->url_long = true;
		return 0;
	}
	memcpy(c->url + c->url_len, at, len);
	c->url_len += len;
	c->url[c->url_len] = '\0';
	return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct call *c = ((struct conn *)p->data)->call;
	/* Only Expect matters (a client that waits for 100 Continue before its body). */
	c->field_expect = len == 6 && strncasecmp(at, "expect", 6) == 0;
	c->value_len = 0;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct call *c = ((struct conn *)p->data)->call;
	if (c->field_expect && c->value_len + len < sizeof c->value) {
		memcpy(c->value + c->value_len, at, len);
		c->value_len += len;
		c->value[c->value_len] = '\0';
		c->expect_continue = strcasecmp(c->value, "100-continue") == 0;
	}
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	struct conn *cn = p->data;
	struct call *c = cn->call;
	const char *method = http_method_str((enum http_method)p->method);
	c->head = p->method == HTTP_HEAD;
	char *query = memchr(c->url, '?', c->url_len);
	if (query)
		*query = '\0'; /* routes take no query */
	if (c->url_long) {
		c->status = 400;
		snprintf(c->why, sizeof c->why, "the request target is longer than %d bytes", URL_MAX);
	} else {
		c->status = gate_route_parse(method, c->url, &c->route, c->why, sizeof c->why);
	}
	if (c->status == 0 && (p->flags & F_CONTENTLENGTH)
	    && p->content_length > cn->w->s->cfg.max_body)
		c->too_big = true; /* answered now: what is refused is not read */
	if (c->too_big) {
		http_parser_pause(p, 1);
		return 0;
	}
	if (c->expect_continue && c->status == 0) {
		static char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		uv_buf_t b = uv_buf_init(cont, sizeof cont - 1);
		uv_try_write((uv_stream_t *)&cn->tcp, &b, 1); /* best effort: it is tiny */
	}
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct conn *cn = p->data;
	struct call *c = cn->call;
	if (c->status || c->too_big)
		return 0; /* discarded */
	/* Past the limit: stop reading it now (the rest could be endless) and answer. */
	if (c->len + len > cn->w->s->cfg.max_body) {
		c->too_big = true;
		free(c->body);
		c->body = NULL;
		c->len = 0;
		http_parser_pause(p, 1);
		return 0;
	}
	char *grown = realloc(c->body, c->len + len + 1);
	if (!grown)
		return 1;
	memcpy(grown + c->len, at, len);
	c->body = grown;
	c->len += len;
	c->body[c->len] = '\0';
	return 0;
}

static int on_message_complete(http_parser *p)
{
	struct conn *cn = p->data;
	struct call *c = cn->call;
	uv_timer_stop(&cn->timer); /* the request is in: its deadline is met */
	http_parser_pause(p, 1);   /* one request at a time: the next waits in the buffer */
	if (c->status) {
		const char *code = c->status == 400 ? "bad_request"
		    : c->status == 404              ? "not_found"
		                                    : "method_not_allowed";
		respond_error(cn, c->status == 400 ? &c->route : NULL, c->status, code, c->why);
		return 0;
	}
	switch (c->route.kind) {
		case GATE_HEALTH:
			health(cn);
			break;
		case GATE_METRICS:
			metrics(cn);
			break;
		case GATE_COMMAND:
		default:
			run_command(cn->w, c);
	}
	return 0;
}

/* Bytes from the client. A request's answer is decided before the next one is parsed: while one
 * is served the rest waits in held. */
static void feed(struct conn *cn, const char *data, size_t len)
{
	while (len && !cn->closing && !cn->lingering) {
		if ((cn->call && cn->call->state != CALL_READING) || cn->writing) {
			/* served now: keep what follows for after (bounded) */
			if (cn->held_len + len > HELD_MAX) {
				uv_read_stop((uv_stream_t *)&cn->tcp);
				cn->stopped = true;
				return; /* more than a client may send ahead: no more reading until then */
			}
			char *grown = realloc(cn->held, cn->held_len + len);
			if (!grown) {
				conn_close(cn);
				return;
			}
			memcpy(grown + cn->held_len, data, len);
			cn->held = grown;
			cn->held_len += len;
			return;
		}
		cn->parsing = true;
		size_t n = http_parser_execute(&cn->parser, &parser_settings, data, len);
		cn->parsing = false;
		enum http_errno e = HTTP_PARSER_ERRNO(&cn->parser);
		if (e == HPE_PAUSED) {
			struct call *c = cn->call;
			if (c && c->too_big && c->state == CALL_READING) { /* a body past --max-body */
				char why[96];
				snprintf(
				    why, sizeof why, "the body is larger than %zu bytes", cn->w->s->cfg.max_body);
				respond_error(cn, &c->route, 413, "body_too_large", why);
				return; /* the connection ends: the rest is not parsed */
			}
			data += n;
			len -= n;
			if (!cn->call && !cn->writing) /* answered at once (health, an error): next */
				http_parser_pause(&cn->parser, 0);
			continue;
		}
		if (e != HPE_OK) {
			if (!cn->call && on_message_begin(&cn->parser) != 0) {
				conn_close(cn);
				return;
			}
			cn->bad = true;
			char why[160];
			snprintf(why, sizeof why, "not an HTTP/1.x request: %s", http_errno_description(e));
			respond_error(cn, NULL, 400, "bad_request", why);
			return;
		}
		data += n;
		len -= n;
	}
}

/* --- connections --------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)suggested;
	struct conn *cn = h->data;
	/* One buffer for every connection of the worker: what a read brings is parsed at once. */
	*buf = uv_buf_init(cn->w->rbuf, sizeof cn->w->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct conn *cn = s->data;
	if (nread < 0) {
		/* The client went away (or half-closed after its request: it counts as gone). */
		cn->eof = true;
		if (cn->call && cn->call->state == CALL_WAITING)
			client_gone(cn);
		if (!(cn->call && cn->call->state == CALL_WAITING) && !cn->writing)
			conn_close(cn);
		else
			uv_read_stop(s); /* the call's completion, or the write's end, closes it */
		return;
	}
	if (nread == 0)
		return;
	if (cn->lingering) { /* read away after the last answer, within bounds */
		cn->lingered += (size_t)nread;
		if (cn->lingered > LINGER_BYTES)
			conn_close(cn);
		return;
	}
	feed(cn, buf->base, (size_t)nread);
}

static void on_deadline(uv_timer_t *h)
{
	struct conn *cn = h->data;
	if (cn->call && cn->call->state == CALL_WAITING)
		return;     /* the device's wait has its own bound: --timeout */
	conn_close(cn); /* its request did not come in time (slowloris) */
}

static void arm_deadline(struct conn *cn)
{
	uv_timer_start(&cn->timer, on_deadline, cn->w->s->cfg.request_deadline_ms, 0);
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

static void on_connection(uv_stream_t *listener, int status)
{
	struct worker *w = listener->data;
	if (status < 0)
		return;
	struct conn *cn = calloc(1, sizeof *cn);
	if (!cn)
		return; /* out of memory: it waits in the backlog; the next accept may find memory */
	cn->w = w;
	uv_tcp_init(&w->loop, &cn->tcp);
	uv_timer_init(&w->loop, &cn->timer);
	cn->tcp.data = cn->timer.data = cn;
	cn->handles = 2;
	cn->next = w->conns;
	if (cn->next)
		cn->next->prev = cn;
	w->conns = cn;
	if (uv_accept(listener, (uv_stream_t *)&cn->tcp) != 0) {
		conn_close(cn);
		return;
	}
	struct sockaddr_storage peer;
	int plen = sizeof peer;
	if (uv_tcp_getpeername(&cn->tcp, (struct sockaddr *)&peer, &plen) == 0
	    && peer.ss_family == AF_INET)
		cn->addr = ((const struct sockaddr_in *)&peer)->sin_addr.s_addr;
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
		conn_close(cn);
		return;
	}
	if (!address_admit(s, cn->addr)) {
		atomic_fetch_sub(&s->connections, 1);
		log_limited("refused a connection from %s: it has %u open (--max-per-address)\n", text,
		    s->cfg.per_address);
		conn_close(cn);
		return;
	}
	cn->counted = true;
	uv_tcp_nodelay(&cn->tcp, 1); /* once per connection: a response goes out as it is written */
	http_parser_init(&cn->parser, HTTP_REQUEST);
	cn->parser.data = cn;
	arm_deadline(cn);
	if (uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read) != 0)
		conn_close(cn);
}

/* --- the worker ---------------------------------------------------------------------------- */

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
	while (w->conns)
		conn_close(w->conns);
	if (w->listening) {
		uv_close((uv_handle_t *)&w->listener, NULL);
		w->listening = false;
	}
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
	if (w->listening) { /* no new connections */
		uv_close((uv_handle_t *)&w->listener, NULL);
		w->listening = false;
	}
	/* Requests in flight finish and their responses go out; new ones on open connections get
	 * 503 shutting_down; an idle kept-alive connection is closed now. */
	for (struct conn *cn = w->conns, *next; cn; cn = next) {
		next = cn->next;
		if (!cn->call && !cn->writing)
			conn_close(cn);
	}
	uv_timer_start(&w->drain, on_drain_check, 0, 2);
}

/* The worker's listening socket on the shared port: SO_REUSEPORT, so the kernel spreads new
 * connections among the workers (libuv 1.44 has no flag for it: the socket is made here). */
static int listen_on(struct worker *w, struct sockaddr_in sa)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
	    || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0
	    || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, SOMAXCONN) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	struct sockaddr_in bound = { 0 };
	socklen_t len = sizeof bound;
	if (getsockname(fd, (struct sockaddr *)&bound, &len) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	w->port = ntohs(bound.sin_port);
	uv_tcp_init(&w->loop, &w->listener);
	w->listener.data = w;
	w->listening = true;
	int rc = uv_tcp_open(&w->listener, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&w->listener, SOMAXCONN, on_connection);
	return rc;
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
	if (w->index == 0) /* one worker's pool says what every pool meets */
		po.log_cb = on_pool_log;
	mqp_pool *pool;
	int rc = mqp_uv_pool_new(&w->loop, cfg->broker, &po, &pool, w->err, sizeof w->err);
	if (rc != MQP_OK) {
		char why[sizeof w->err];
		snprintf(why, sizeof why, "%s", w->err);
		snprintf(
		    w->err, sizeof w->err, "cannot create the pool: %s: %.200s", mqp_strerror(rc), why);
		uv_run(&w->loop, UV_RUN_NOWAIT); /* the adapter's handles close */
		uv_loop_close(&w->loop);
		return -1;
	}
	pthread_rwlock_wrlock(&s->pools_lock);
	w->pool = pool;
	pthread_rwlock_unlock(&s->pools_lock);
	struct sockaddr_in sa = cfg->listen;
	sa.sin_port = htons((uint16_t)w->port);
	uv_timer_init(&w->loop, &w->drain);
	w->drain.data = w;
	uv_async_init(&w->loop, &w->stop, on_stop);
	w->stop.data = w;
	rc = listen_on(w, sa);
	if (rc != 0) {
		char addr[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
		snprintf(w->err, sizeof w->err, "cannot listen on %s:%u: %s", addr, ntohs(sa.sin_port),
		    strerror(-rc));
		worker_close(w);
		uv_run(&w->loop, UV_RUN_DEFAULT);
		uv_loop_close(&w->loop);
		return -1;
	}
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
	http_parser_settings_init(&parser_settings);
	parser_settings.on_message_begin = on_message_begin;
	parser_settings.on_url = on_url;
	parser_settings.on_header_field = on_header_field;
	parser_settings.on_header_value = on_header_value;
	parser_settings.on_headers_complete = on_headers_complete;
	parser_settings.on_body = on_body;
	parser_settings.on_message_complete = on_message_complete;
	http_parser_set_max_header_size(HEADERS_MAX);
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

int gate_server_broker_check(
    struct gate_server *s, unsigned wait_ms, bool *v311_only, char *why, size_t len)
{
	/* A lease from worker 0's pool (from this thread: handed to its loop): the broker takes us,
	 * refuses us, or cannot be reached. */
	pthread_rwlock_rdlock(&s->pools_lock);
	mqp_pool *pool = s->w[0].pool;
	mqp_lease lease;
	mqp_err rc = pool ? mqp_pool_acquire(pool, wait_ms, &lease) : MQP_ECLOSED;
	struct mqp_pool_stats st;
	mqp_pool_stats(pool, &st, sizeof st);
	*v311_only = st.v311_only;
	if (rc == MQP_OK)
		mqp_lease_release(&lease);
	else if (pool)
		mqp_pool_last_error(pool, why, len);
	pthread_rwlock_unlock(&s->pools_lock);
	if (rc == MQP_OK)
		return 0;
	if (!why[0])
		snprintf(why, len, "%s", mqp_strerror(rc));
	return rc == MQP_EREFUSED ? -1 : 1;
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
