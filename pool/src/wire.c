/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * wire.c - one connection's socket, TLS and buffers (wire.h).
 */
#define _GNU_SOURCE
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqc_tls.h"
#include "mqc_url.h"
#include "mqttpool.h"

enum {
	READ_ROOM = 16384, /* at least this much room for each read */
	READS_MAX = 4,     /* reads per readiness while each one fills all the room it had */
};
#define RX_LIMIT ((size_t)MQC_MAX_PACKET + 2 * (size_t)READ_ROOM)

/* "<what> <host:port>: <detail>" in w->err. */
static enum mqp_wire_result fail(struct mqp_wire *w, const char *what, const char *detail)
{
	snprintf(w->err, sizeof w->err, "%s %s: %s", what, w->where, detail);
	return MQP_WIRE_ERROR;
}

/* The socket's registration: readable always, writable while connecting or after a short send
 * (bytes queued during a turn are the end-of-turn flush's, not EPOLLOUT's). */
static enum mqp_wire_result watch(struct mqp_wire *w)
{
	bool out = w->state == MQP_WIRE_CONNECTING || w->short_send;
	uint32_t want = EPOLLIN | (out ? (uint32_t)EPOLLOUT : 0u);
	if (w->fd < 0 || want == w->events)
		return MQP_WIRE_OK;
	const struct mqp_watcher *at = w->watcher;
	if (at->fn) {
		at->fn(at->data, w->fd, MQP_IO_READ | (out ? MQP_IO_WRITE : 0u), w->tag);
	} else {
		struct epoll_event ev = { .events = want, .data.ptr = w->tag };
		if (epoll_ctl(at->ep, w->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev) != 0)
			return fail(w, "epoll_ctl for", strerror(errno));
	}
	w->events = want;
	return MQP_WIRE_OK;
}

/* Before the descriptor closes: epoll forgets it by itself, a loop must be told. */
static void unwatch(struct mqp_wire *w)
{
	if (w->fd >= 0 && w->events && w->watcher && w->watcher->fn)
		w->watcher->fn(w->watcher->data, w->fd, 0, w->tag);
	w->events = 0;
}

/* The next address that takes a non-blocking connect. */
static enum mqp_wire_result try_next(struct mqp_wire *w, int last_errno)
{
	if (w->fd >= 0) {
		unwatch(w);
		close(w->fd); /* leaves the epoll set with it */
		w->fd = -1;
	}
	for (; w->ai_next; w->ai_next = w->ai_next->ai_next) {
		struct addrinfo *a = w->ai_next;
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (w->user_timeout_ms)
			mqc_tcp_user_timeout(fd, w->user_timeout_ms);
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			w->fd = fd;
			w->state = MQP_WIRE_CONNECTING;
			w->ai_next = a->ai_next;
			return watch(w);
		}
		last_errno = errno;
		close(fd);
	}
	return fail(w, "connect to", strerror(last_errno ? last_errno : ECONNREFUSED));
}

/* --- resolving --------------------------------------------------------------------------- */

/* One name being resolved by a thread of its own: getaddrinfo blocks (a DNS server that never
 * answers holds it for its whole timeout), so it never runs on the pool's thread, which may be
 * the application's event loop. The thread may outlive the wire's interest (the connection gave
 * up while a resolver hangs): two references, the wire's and the thread's, and the last frees it.
 */
struct mqp_resolve {
	atomic_int refs;
	atomic_bool done; /* release: rc, err and result are written before it */
	int rc, err;
	struct addrinfo *result;
	char host[MQC_URL_HOST_MAX];
	char service[8];
};

static void resolve_unref(struct mqp_resolve *r)
{
	if (atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	if (r->result)
		freeaddrinfo(r->result);
	free(r);
}

static void *resolve_main(void *arg)
{
	struct mqp_resolve *r = arg;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	r->rc = getaddrinfo(r->host, r->service, &hints, &r->result);
	r->err = errno;
	atomic_store_explicit(&r->done, true, memory_order_release);
	resolve_unref(r);
	return NULL;
}

/* The addresses, rotated so that the rotate-th comes first: connections to a name with several
 * records spread over them. glibc frees an addrinfo list entry by entry, so any order is one. */
static struct addrinfo *rotated(struct addrinfo *ai, unsigned rotate)
{
	unsigned n = 0;
	for (struct addrinfo *a = ai; a; a = a->ai_next)
		n++;
	rotate = n ? rotate % n : 0;
	if (!rotate)
		return ai;
	struct addrinfo *last = ai, *head;
	for (unsigned i = 1; i < rotate; i++)
		last = last->ai_next;
	head = last->ai_next;
	last->ai_next = NULL;
	struct addrinfo *tail = head;
	while (tail->ai_next)
		tail = tail->ai_next;
	tail->ai_next = ai;
	return head;
}

static bool is_address(const char *host)
{
	unsigned char ip[16];
	return inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
}

/* Start host's resolution on a detached thread that takes no signals (the application's
 * handlers run on its own threads): the wire is RESOLVING until mqp__wire_poll finds it done. */
static enum mqp_wire_result resolve_start(struct mqp_wire *w, const char *host, const char *service)
{
	struct mqp_resolve *r = calloc(1, sizeof *r);
	if (!r)
		return fail(w, "cannot resolve", "out of memory");
	snprintf(r->host, sizeof r->host, "%s", host);
	snprintf(r->service, sizeof r->service, "%s", service);
	atomic_init(&r->refs, 2);
	atomic_init(&r->done, false);
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	int rc = pthread_attr_init(&attr);
	if (rc == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rc = pthread_create(&t, &attr, resolve_main, r);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
	}
	if (rc != 0) {
		free(r);
		return fail(w, "cannot resolve", "no thread for the resolver");
	}
	w->resolve = r;
	w->resolve_start = mqc_now_ns();
	w->state = MQP_WIRE_RESOLVING;
	return MQP_WIRE_OK;
}

enum mqp_wire_result mqp__wire_poll(struct mqp_wire *w)
{
	struct mqp_resolve *r = w->resolve;
	if (w->state != MQP_WIRE_RESOLVING || !atomic_load_explicit(&r->done, memory_order_acquire))
		return MQP_WIRE_OK;
	w->resolve = NULL;
	if (r->rc != 0) {
		const char *why = r->rc == EAI_SYSTEM ? strerror(r->err) : gai_strerror(r->rc);
		fail(w, "cannot resolve", why);
		resolve_unref(r);
		return MQP_WIRE_ERROR;
	}
	w->ai = w->ai_next = rotated(r->result, w->rotate);
	r->result = NULL; /* the wire's now */
	resolve_unref(r);
	return try_next(w, 0);
}

/* --- connecting ---------------------------------------------------------------------------- */

enum mqp_wire_result mqp__wire_start(struct mqp_wire *w, const struct mqc_url *url,
    const struct mqp_wire_opts *opts, unsigned rotate, SSL_CTX *ctx,
    const struct mqp_watcher *watcher, void *tag)
{
	*w = (struct mqp_wire) { .fd = -1,
		.watcher = watcher,
		.tag = tag,
		.rotate = rotate,
		.ws = url->ws,
		.url = url,
		.ws_header = opts->ws_header,
		.user_timeout_ms = opts->user_timeout_ms };
	const char *host = url->host;
	int port = url->port;
	bool v6 = strchr(host, ':') != NULL;
	snprintf(w->where, sizeof w->where, v6 ? "[%s]:%d" : "%s:%d", host, port);
	char service[8];
	snprintf(service, sizeof service, "%d", port);
	if (is_address(host)) { /* nothing to ask a resolver: at once, without blocking */
		struct addrinfo hints = { .ai_family = AF_UNSPEC,
			.ai_socktype = SOCK_STREAM,
			.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
		int rc = getaddrinfo(host, service, &hints, &w->ai);
		if (rc != 0) {
			fail(w, "cannot resolve", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
			mqp__wire_close(w);
			return MQP_WIRE_ERROR;
		}
		w->ai_next = w->ai;
	} else if (resolve_start(w, host, service) != MQP_WIRE_OK) {
		mqp__wire_close(w);
		return MQP_WIRE_ERROR;
	}
	if (ctx) {
		w->ssl = SSL_new(ctx);
		w->rbio = BIO_new(BIO_s_mem());
		w->wbio = BIO_new(BIO_s_mem());
		if (!w->ssl || !w->rbio || !w->wbio) {
			BIO_free(w->rbio);
			BIO_free(w->wbio);
			w->rbio = w->wbio = NULL;
			fail(w, "TLS for", "out of memory");
			mqp__wire_close(w);
			return MQP_WIRE_ERROR;
		}
		SSL_set_bio(w->ssl, w->rbio, w->wbio); /* the SSL owns both now */
		SSL_set_connect_state(w->ssl);
		if (mqc_tls_set_peer(w->ssl, host) != 0) {
			fail(w, "TLS for", "cannot set the name to verify");
			mqp__wire_close(w);
			return MQP_WIRE_ERROR;
		}
	}
	if (w->state != MQP_WIRE_RESOLVING && try_next(w, 0) != MQP_WIRE_OK) {
		mqp__wire_close(w);
		return MQP_WIRE_ERROR;
	}
	return MQP_WIRE_OK;
}

/* What OpenSSL wrote into its memory BIO goes to cout, to be sent. */
static enum mqp_wire_result take_ciphertext(struct mqp_wire *w)
{
	size_t pending = BIO_ctrl_pending(w->wbio);
	if (!pending)
		return MQP_WIRE_OK;
	if (mqc_buf_reserve(&w->cout, pending, RX_LIMIT) != 0)
		return fail(w, "TLS to", "out of memory");
	int n = BIO_read(w->wbio, w->cout.data + w->cout.len, (int)pending);
	if (n > 0)
		w->cout.len += (size_t)n;
	return MQP_WIRE_OK;
}

static enum mqp_wire_result tls_error(struct mqp_wire *w, const char *when)
{
	char why[200];
	mqc_tls_failure(w->ssl, why, sizeof why);
	char what[64];
	snprintf(what, sizeof what, "TLS %s with", when);
	return fail(w, what, why);
}

/* The transport is up: MQTT begins, or over WebSockets the upgrade request is queued first. */
static enum mqp_wire_result transport_up(struct mqp_wire *w)
{
	if (!w->ws) {
		w->state = MQP_WIRE_OPEN;
		return MQP_WIRE_OK;
	}
	if (mqc_ws_key(w->ws_key) != 0)
		return fail(w, "WebSocket handshake with", "no random bytes for its key");
	if (mqc_ws_request(&w->wout, w->url->host, w->url->port, w->url->tls, w->url->path, w->ws_key,
	        w->ws_header)
	    != 0)
		return fail(w, "WebSocket handshake with",
		    "cannot write the request (out of memory, or the extra header is not one "
		    "'Name: value' line)");
	w->state = MQP_WIRE_UPGRADE;
	return MQP_WIRE_OK;
}

static enum mqp_wire_result handshake(struct mqp_wire *w)
{
	ERR_clear_error();
	int rc = SSL_do_handshake(w->ssl);
	if (take_ciphertext(w) != MQP_WIRE_OK)
		return MQP_WIRE_ERROR;
	if (rc == 1)
		return transport_up(w);
	int e = SSL_get_error(w->ssl, rc);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return MQP_WIRE_OK;
	return tls_error(w, "handshake");
}

static enum mqp_wire_result connected(struct mqp_wire *w)
{
	freeaddrinfo(w->ai);
	w->ai = w->ai_next = NULL;
	if (!w->ssl)
		return transport_up(w);
	w->state = MQP_WIRE_HANDSHAKE;
	return handshake(w); /* the ClientHello goes out with the next flush */
}

/* Where what the transport delivers goes: rx, or over WebSockets win, to be unframed. */
static struct mqc_buf *inbound(struct mqp_wire *w)
{
	return w->ws ? &w->win : &w->rx;
}

/* Plain TCP: straight into rx (win). */
static enum mqp_wire_result read_plain(struct mqp_wire *w)
{
	struct mqc_buf *in = inbound(w);
	for (int i = 0; i < READS_MAX; i++) {
		if (mqc_buf_reserve(in, READ_ROOM, RX_LIMIT) != 0)
			return fail(w, "reading from", "out of memory");
		size_t room = in->cap - in->len;
		ssize_t n = recv(w->fd, in->data + in->len, room, 0);
		if (n > 0) {
			in->len += (size_t)n;
			if ((size_t)n < room)
				return MQP_WIRE_OK; /* the socket is empty: no read to learn it */
			continue;
		}
		if (n == 0)
			return MQP_WIRE_EOF;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return MQP_WIRE_OK;
		return fail(w, "reading from", strerror(errno));
	}
	return MQP_WIRE_OK;
}

/* TLS: ciphertext into OpenSSL's memory BIO, then every whole record out of it into rx. */
static enum mqp_wire_result read_tls(struct mqp_wire *w, unsigned char *scratch, size_t len)
{
	bool eof = false;
	for (int i = 0; i < READS_MAX; i++) {
		ssize_t n = recv(w->fd, scratch, len, 0);
		if (n > 0) {
			if (BIO_write(w->rbio, scratch, (int)n) != (int)n)
				return fail(w, "TLS from", "out of memory");
			if ((size_t)n < len)
				break;
			continue;
		}
		if (n == 0) {
			eof = true;
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		return fail(w, "reading from", strerror(errno));
	}
	if (w->state == MQP_WIRE_HANDSHAKE) {
		if (handshake(w) != MQP_WIRE_OK)
			return MQP_WIRE_ERROR;
		if (w->state == MQP_WIRE_HANDSHAKE) {
			if (eof)
				return fail(w, "TLS handshake with",
				    "the broker closed the connection (is it a TLS port?)");
			return MQP_WIRE_OK;
		}
	}
	struct mqc_buf *in = inbound(w);
	for (;;) {
		if (mqc_buf_reserve(in, READ_ROOM, RX_LIMIT) != 0)
			return fail(w, "TLS from", "out of memory");
		size_t room = in->cap - in->len;
		ERR_clear_error();
		int n = SSL_read(w->ssl, in->data + in->len, room > INT32_MAX ? INT32_MAX : (int)room);
		if (n > 0) {
			in->len += (size_t)n;
			continue;
		}
		int e = SSL_get_error(w->ssl, n);
		if (e == SSL_ERROR_WANT_READ)
			break;
		if (e == SSL_ERROR_ZERO_RETURN)
			return MQP_WIRE_EOF; /* close_notify */
		return tls_error(w, "read");
	}
	/* A TLS 1.3 KeyUpdate, say, is answered: whatever OpenSSL wrote goes out with the flush. */
	if (take_ciphertext(w) != MQP_WIRE_OK)
		return MQP_WIRE_ERROR;
	return eof ? MQP_WIRE_EOF : MQP_WIRE_OK;
}

/* win holds what came: first the answer to the upgrade, then frames, unframed into rx. A ping
 * is answered (with the next flush), a close ends the connection, saying the server's code. */
static enum mqp_wire_result unframe(struct mqp_wire *w)
{
	char why[320];
	if (w->state == MQP_WIRE_UPGRADE) {
		size_t used = 0;
		enum mqc_ws_rc rc = mqc_ws_response(
		    w->win.data + w->win.off, mqc_buf_live(&w->win), w->ws_key, &used, why, sizeof why);
		if (rc == MQC_WS_AGAIN)
			return MQP_WIRE_OK;
		if (rc == MQC_WS_ERROR)
			return fail(w, "WebSocket handshake with", why);
		mqc_buf_consume(&w->win, used);
		w->state = MQP_WIRE_OPEN;
	}
	for (;;) {
		struct mqc_ws_control ctl;
		enum mqc_ws_rc rc = mqc_ws_read(&w->wsr, &w->win, &w->rx, RX_LIMIT,
		    (uint64_t)MQC_MAX_PACKET + 5, &ctl, why, sizeof why);
		if (rc == MQC_WS_AGAIN)
			return MQP_WIRE_OK;
		if (rc == MQC_WS_GOT_PING) {
			if (mqc_ws_frame(&w->wout, MQC_WS_PONG, ctl.payload, ctl.len, true, RX_LIMIT) != 0)
				return fail(w, "WebSocket to", "out of memory");
			continue;
		}
		if (rc == MQC_WS_GOT_CLOSE) {
			char code[200];
			snprintf(code, sizeof code, "the server closed the WebSocket (status %d%s%.*s)",
			    ctl.code, ctl.len > 2 ? ": " : "", ctl.len > 2 ? (int)ctl.len - 2 : 0,
			    (const char *)ctl.payload + 2);
			return fail(w, "WebSocket from", code);
		}
		w->violation = true;
		return fail(w, "WebSocket from", why);
	}
}

enum mqp_wire_result mqp__wire_io(
    struct mqp_wire *w, bool readable, bool writable, unsigned char *scratch, size_t scratch_len)
{
	enum mqp_wire_result rc = MQP_WIRE_OK;
	if (w->state == MQP_WIRE_CONNECTING) {
		if (!readable && !writable)
			return MQP_WIRE_OK;
		int err = 0;
		socklen_t len = sizeof err;
		if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			err = errno;
		if (err == EINPROGRESS || err == EALREADY)
			return MQP_WIRE_OK;
		rc = err ? try_next(w, err) : connected(w);
		if (rc == MQP_WIRE_OK)
			rc = mqp__wire_flush(w);
		return rc == MQP_WIRE_OK ? watch(w) : rc;
	}
	if (w->state == MQP_WIRE_CLOSED || w->state == MQP_WIRE_RESOLVING)
		return MQP_WIRE_OK;
	if (readable)
		rc = w->ssl ? read_tls(w, scratch, scratch_len) : read_plain(w);
	if (w->ws && rc != MQP_WIRE_ERROR && mqc_buf_live(&w->win)) {
		enum mqp_wire_result ws = unframe(w);
		if (ws == MQP_WIRE_ERROR)
			return ws;
	}
	if (w->ws && rc == MQP_WIRE_EOF && w->state == MQP_WIRE_UPGRADE)
		return fail(w, "WebSocket handshake with",
		    "the server closed the connection (is it a WebSocket port?)");
	if (rc == MQP_WIRE_OK
	    && (writable || mqc_buf_live(&w->cout) || (w->ws && mqc_buf_live(&w->wout))))
		rc = mqp__wire_flush(w);
	if (rc == MQP_WIRE_OK)
		rc = watch(w);
	return rc;
}

enum mqp_wire_result mqp__wire_flush(struct mqp_wire *w)
{
	if (w->state != MQP_WIRE_OPEN && w->state != MQP_WIRE_HANDSHAKE && w->state != MQP_WIRE_UPGRADE)
		return MQP_WIRE_OK; /* connecting: what is queued waits */
	/* Over WebSockets every packet of the turn goes in one binary frame (MQTT lets a frame
	 * carry several packets, or part of one). */
	struct mqc_buf *plain = &w->tx;
	if (w->ws) {
		if (w->state == MQP_WIRE_OPEN && mqc_buf_live(&w->tx)) {
			if (mqc_ws_frame(&w->wout, MQC_WS_BINARY, w->tx.data + w->tx.off, mqc_buf_live(&w->tx),
			        true, RX_LIMIT)
			    != 0)
				return fail(w, "WebSocket to", "out of memory");
			mqc_buf_consume(&w->tx, mqc_buf_live(&w->tx));
		}
		plain = &w->wout;
	}
	if (w->ssl && w->state != MQP_WIRE_HANDSHAKE && mqc_buf_live(plain)) {
		/* Every packet of the turn in one TLS write (records of up to 16 KiB), then one send. */
		size_t live = mqc_buf_live(plain);
		ERR_clear_error();
		int n
		    = SSL_write(w->ssl, plain->data + plain->off, live > INT32_MAX ? INT32_MAX : (int)live);
		if (n <= 0)
			return tls_error(w, "write");
		mqc_buf_consume(plain, (size_t)n);
		if (take_ciphertext(w) != MQP_WIRE_OK)
			return MQP_WIRE_ERROR;
	}
	struct mqc_buf *out = w->ssl ? &w->cout : plain;
	while (mqc_buf_live(out)) {
		ssize_t n = send(w->fd, out->data + out->off, mqc_buf_live(out), MSG_NOSIGNAL);
		if (n > 0) {
			mqc_buf_consume(out, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break; /* the kernel's buffer is full: the rest goes when EPOLLOUT says so */
		return fail(w, "writing to", strerror(n < 0 ? errno : EPIPE));
	}
	w->short_send = mqc_buf_live(out) > 0;
	if (w->finishing && !w->short_send && !w->shut) {
		shutdown(w->fd, SHUT_WR);
		w->shut = true;
	}
	return watch(w);
}

enum mqp_wire_result mqp__wire_finish(struct mqp_wire *w)
{
	if (w->state != MQP_WIRE_OPEN)
		return fail(w, "closing", "the connection is not open");
	if (mqp__wire_flush(w) != MQP_WIRE_OK) /* over TLS: what tx holds, encrypted first */
		return MQP_WIRE_ERROR;
	if (w->ws) { /* a close frame, "normal closure" (RFC 6455 7.4.1), after the DISCONNECT */
		static const unsigned char normal[] = { 0x03, 0xe8 };
		if (mqc_ws_frame(&w->wout, MQC_WS_CLOSE, normal, sizeof normal, true, RX_LIMIT) != 0)
			return fail(w, "WebSocket to", "out of memory");
		if (mqp__wire_flush(w) != MQP_WIRE_OK)
			return MQP_WIRE_ERROR;
	}
	if (w->ssl) {
		ERR_clear_error();
		SSL_shutdown(w->ssl); /* queues close_notify; the peer's is read like any record */
		if (take_ciphertext(w) != MQP_WIRE_OK)
			return MQP_WIRE_ERROR;
	}
	w->finishing = true;
	return mqp__wire_flush(w);
}

bool mqp__wire_pending(const struct mqp_wire *w)
{
	return mqc_buf_live(&w->tx) || mqc_buf_live(&w->cout) || mqc_buf_live(&w->wout);
}

void mqp__wire_quickack(const struct mqp_wire *w)
{
	mqc_tcp_quickack(w->fd);
}

void mqp__wire_close(struct mqp_wire *w)
{
	if (w->fd >= 0) {
		unwatch(w);
		close(w->fd);
	}
	SSL_free(w->ssl); /* and its two BIOs */
	if (w->ai)
		freeaddrinfo(w->ai);
	if (w->resolve) /* glibc may still be at it: its notification frees it then */
		resolve_unref(w->resolve);
	mqc_buf_free(&w->rx);
	mqc_buf_free(&w->tx);
	mqc_buf_free(&w->cout);
	mqc_buf_free(&w->wout);
	mqc_buf_free(&w->win);
	*w = (struct mqp_wire) { .fd = -1 };
}
