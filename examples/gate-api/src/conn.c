/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.c - gate-api's HTTP connections and their limits (worker.h): admission (--max-connections,
 * --max-per-address), the bytes of each read parsed at once by http-parser, one request at a time
 * (pipelined ones wait, bounded), the request deadline (slowloris), the size limits, responses in
 * one write, and the linger after an answer that closes. A parsed request goes to the server's
 * handlers; this file knows no command.
 *
 * Lifetimes: a struct conn lives from its accept until its handles close (then it frees itself);
 * a struct call from the first byte of a request to its response being handed to the kernel (or
 * the end of its connection).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "worker.h"

static http_parser_settings parser_settings;

static int on_message_begin(http_parser *p);
static int on_url(http_parser *p, const char *at, size_t len);
static int on_header_field(http_parser *p, const char *at, size_t len);
static int on_header_value(http_parser *p, const char *at, size_t len);
static int on_headers_complete(http_parser *p);
static int on_body(http_parser *p, const char *at, size_t len);
static int on_message_complete(http_parser *p);

void gate_conn_init(void)
{
	http_parser_settings_init(&parser_settings);
	parser_settings.on_message_begin = on_message_begin;
	parser_settings.on_url = on_url;
	parser_settings.on_header_field = on_header_field;
	parser_settings.on_header_value = on_header_value;
	parser_settings.on_headers_complete = on_headers_complete;
	parser_settings.on_body = on_body;
	parser_settings.on_message_complete = on_message_complete;
	http_parser_set_max_header_size(HEADERS_MAX);
}

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

void gate_log_limited(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_limitedv(fmt, ap);
	va_end(ap);
}

/* --- closing ------------------------------------------------------------------------------- */

static void conn_free(struct conn *cn)
{
	free(cn->held);
	free(cn);
}

/* A handle closed. The conn goes with its last one - unless a call still waits for its device
 * and holds it: then with that call's completion (gate_conn_close once more). */
static void conn_closed(uv_handle_t *h)
{
	struct conn *cn = h->data;
	if (--cn->handles == 0 && !cn->call)
		conn_free(cn);
}

/* Close cn now. A call still waiting for its device is cancelled (the server's client_gone) and
 * completes later; the conn stays until then (conn_closed), and that completion, which finds the
 * conn closing, ends the call and calls this again, which frees it. */
void gate_conn_close(struct conn *cn)
{
	if (cn->closing) {
		if (cn->handles == 0 && !cn->call) /* the waiting call was the last to hold it */
			conn_free(cn);
		return;
	}
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
	if (cn->call && cn->call->state == CALL_WAITING)
		w->s->handlers->client_gone(cn); /* may complete it now (the naive route) */
	else if (cn->call)
		gate_end_call(cn);
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
	gate_conn_close(h->data);
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
		gate_conn_close(cn);
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
		gate_conn_close(cn);
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
		gate_conn_close(cn);
		return;
	}
	if ((size_t)n == len) {
		after_response(cn, close_after);
		return;
	}
	struct write_req *wr = malloc(sizeof *wr + len - (size_t)n);
	if (!wr) {
		gate_conn_close(cn);
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
		gate_conn_close(cn);
	}
}

/* The response to cn's call: status, headers, body (text, malloc'd; NULL: out of memory), and the
 * end of the call. */
void gate_respond_text(
    struct conn *cn, int status, const char *type, char *text, bool retry_after, bool close)
{
	struct call *c = cn->call;
	if (!text) {
		gate_conn_close(cn);
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
		gate_conn_close(cn);
		return;
	}
	size_t total = (size_t)n + (head ? 0 : blen);
	if (!head)                       /* the body after the header: bytes, not a C string */
		memcpy(out + n, text, blen); /* NOLINT(bugprone-not-null-terminated-result) */
	free(text);
	gate_end_call(cn);
	send_bytes(cn, out, total, close);
	free(out);
}

/* Whether cn stays open after this response (the client's wish, and the server's state). */
bool gate_closes(struct conn *cn, int status)
{
	return cn->bad || status == 413 || !http_should_keep_alive(&cn->parser)
	    || atomic_load(&cn->w->s->stopping);
}

void gate_respond_error(struct conn *cn, const struct gate_route *route, int status,
    const char *code, const char *message)
{
	struct gate_server *s = cn->w->s;
	if (route && route->kind == GATE_COMMAND)
		gate_count(&s->counters, route->backend, status);
	gate_respond_text(cn, status, "application/json", gate_error_json(code, message), status == 503,
	    gate_closes(cn, status));
}

/* The call is answered (or its connection gone): free it. */
void gate_end_call(struct conn *cn)
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
		gate_respond_error(cn, c->status == 400 ? &c->route : NULL, c->status, code, c->why);
		return 0;
	}
	cn->w->s->handlers->serve(cn);
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
				gate_conn_close(cn);
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
				gate_respond_error(cn, &c->route, 413, "body_too_large", why);
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
				gate_conn_close(cn);
				return;
			}
			cn->bad = true;
			char why[160];
			snprintf(why, sizeof why, "not an HTTP/1.x request: %s", http_errno_description(e));
			gate_respond_error(cn, NULL, 400, "bad_request", why);
			return;
		}
		data += n;
		len -= n;
	}
}

/* --- reading, deadlines, admission ------------------------------------------------------------ */

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
			cn->w->s->handlers->client_gone(cn);
		if (!(cn->call && cn->call->state == CALL_WAITING) && !cn->writing)
			gate_conn_close(cn);
		else
			uv_read_stop(s); /* the call's completion, or the write's end, closes it */
		return;
	}
	if (nread == 0)
		return;
	if (cn->lingering) { /* read away after the last answer, within bounds */
		cn->lingered += (size_t)nread;
		if (cn->lingered > LINGER_BYTES)
			gate_conn_close(cn);
		return;
	}
	feed(cn, buf->base, (size_t)nread);
}

static void on_deadline(uv_timer_t *h)
{
	struct conn *cn = h->data;
	if (cn->call && cn->call->state == CALL_WAITING)
		return;          /* the device's wait has its own bound: --timeout */
	gate_conn_close(cn); /* its request did not come in time (slowloris) */
}

static void arm_deadline(struct conn *cn)
{
	uv_timer_start(&cn->timer, on_deadline, cn->w->s->cfg.request_deadline_ms, 0);
}

/* Whether one more connection from addr is allowed; counts it when it is. */
static bool address_admit(struct gate_server *s, const struct in6_addr *addr)
{
	pthread_mutex_lock(&s->addr_lock);
	struct addr_count *e;
	HASH_FIND(hh, s->addrs, addr, sizeof *addr, e);
	bool ok = true;
	if (!e && (e = calloc(1, sizeof *e)) != NULL) {
		e->addr = *addr;
		HASH_ADD(hh, s->addrs, addr, sizeof e->addr, e);
	}
	if (!e || e->n >= s->cfg.per_address)
		ok = false;
	else
		e->n++;
	pthread_mutex_unlock(&s->addr_lock);
	return ok;
}

/* A new connection of w's, its stream not yet set: in the worker's list, its two handles made. */
static struct conn *conn_new(struct worker *w)
{
	struct conn *cn = calloc(1, sizeof *cn);
	if (!cn)
		return NULL;
	cn->w = w;
	uv_tcp_init(&w->loop, &cn->tcp);
	uv_timer_init(&w->loop, &cn->timer);
	cn->tcp.data = cn->timer.data = cn;
	cn->handles = 2;
	cn->next = w->conns;
	if (cn->next)
		cn->next->prev = cn;
	w->conns = cn;
	return cn;
}

/* Admission, then reading: at most max_connections in all (the workers share them however the
 * kernel spreads connections among their listening sockets), per_address from one address. A
 * refused connection is closed at once rather than left unaccepted in the backlog. */
static void conn_begin(struct conn *cn)
{
	struct sockaddr_storage peer;
	int plen = sizeof peer;
	if (uv_tcp_getpeername(&cn->tcp, (struct sockaddr *)&peer, &plen) != 0)
		peer.ss_family = AF_UNSPEC; /* every such one counts as ::, together */
	char text[INET6_ADDRSTRLEN];
	if (peer.ss_family == AF_INET6) {
		cn->addr = ((const struct sockaddr_in6 *)&peer)->sin6_addr;
	} else if (peer.ss_family == AF_INET) {
		cn->addr.s6_addr[10] = cn->addr.s6_addr[11] = 0xff; /* ::ffff:a.b.c.d */
		memcpy(&cn->addr.s6_addr[12], &((const struct sockaddr_in *)&peer)->sin_addr, 4);
	}
	if (IN6_IS_ADDR_V4MAPPED(&cn->addr))
		inet_ntop(AF_INET, &cn->addr.s6_addr[12], text, sizeof text);
	else
		inet_ntop(AF_INET6, &cn->addr, text, sizeof text);
	struct gate_server *s = cn->w->s;
	if (atomic_fetch_add(&s->connections, 1) >= s->cfg.max_connections) {
		atomic_fetch_sub(&s->connections, 1);
		gate_log_limited("refused a connection from %s: %u open (--max-connections)\n", text,
		    s->cfg.max_connections);
		gate_conn_close(cn);
		return;
	}
	if (!address_admit(s, &cn->addr)) {
		atomic_fetch_sub(&s->connections, 1);
		gate_log_limited("refused a connection from %s: it has %u open (--max-per-address)\n", text,
		    s->cfg.per_address);
		gate_conn_close(cn);
		return;
	}
	cn->counted = true;
	uv_tcp_nodelay(&cn->tcp, 1); /* once per connection: a response goes out as it is written */
	http_parser_init(&cn->parser, HTTP_REQUEST);
	cn->parser.data = cn;
	arm_deadline(cn);
	if (uv_read_start((uv_stream_t *)&cn->tcp, on_alloc, on_read) != 0)
		gate_conn_close(cn);
}

void gate_conn_accept(uv_stream_t *listener, int status)
{
	struct worker *w = listener->data;
	if (status < 0)
		return;
	struct conn *cn = conn_new(w);
	if (!cn)
		return; /* out of memory: it waits in the backlog; the next accept may find memory */
	if (uv_accept(listener, (uv_stream_t *)&cn->tcp) != 0) {
		gate_conn_close(cn);
		return;
	}
	conn_begin(cn);
}

int gate_conn_open(struct worker *w, int fd)
{
	struct conn *cn = conn_new(w);
	if (!cn)
		return -1;
	if (uv_tcp_open(&cn->tcp, fd) != 0) {
		gate_conn_close(cn);
		return -1;
	}
	conn_begin(cn);
	return 0;
}
