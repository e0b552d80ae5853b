/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_ws.c - a fleet's connections over ws:// and wss:// (mqc_ws.h): the upgrade of each
 * connection, its MQTT packets sent in masked binary frames, and what the broker sends unframed
 * into the attempt's rx, pings answered. The state lives beside the attempt only in runs over
 * WebSockets (allocated at an attempt's first upgrade, kept for its reconnects).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fleet.h"
#include "mqc_ws.h"

struct fleet_ws {
	struct mqc_ws_reader reader;
	char key[MQC_WS_KEY_LEN + 1];
	unsigned rawlen; /* frames received, not yet unframed into rx */
	unsigned char raw[RX_CAP];
};

/* Everything of p or nothing: a connection that sends little takes a small frame whole. */
static int send_all(struct attempt *a, const unsigned char *p, size_t len)
{
	ssize_t n = a->ssl ? SSL_write(a->ssl, p, (int)len) : send(a->fd, p, len, MSG_NOSIGNAL);
	return n == (ssize_t)len ? 0 : -1;
}

/* Bytes from the connection (TLS or not) into buf: >0 how many, 0 none yet, -1 closed or
 * failed (*closed: by the peer). */
static ssize_t receive(struct attempt *a, unsigned char *buf, size_t len, bool *closed)
{
	*closed = false;
	for (;;) {
		ssize_t n = a->ssl ? SSL_read(a->ssl, buf, (int)len) : recv(a->fd, buf, len, 0);
		if (n > 0)
			return n;
		if (a->ssl) {
			int e = SSL_get_error(a->ssl, (int)n);
			if (e == SSL_ERROR_WANT_READ)
				return 0;
			*closed = e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL;
			return -1;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		*closed = n == 0 || errno == ECONNRESET;
		return -1;
	}
}

/* The first WebSocket failure of the run, kept to be said after it. */
static void say(struct fleet *r, const char *why)
{
	if (!r->ws_why[0])
		snprintf(r->ws_why, sizeof r->ws_why, "%s", why);
}

int fleet_ws_begin(struct fleet *r, struct attempt *a)
{
	if (!a->ws && !(a->ws = calloc(1, sizeof *a->ws)))
		return -1;
	struct fleet_ws *ws = a->ws;
	ws->reader = (struct mqc_ws_reader) { 0 };
	ws->rawlen = 0;
	a->rxlen = 0;
	const struct mqc_cli_conn *net = &r->o->net;
	const struct mqc_url *u = net->n_nodes ? &net->nodes[a->node % net->n_nodes] : &net->conn.url;
	r->out.off = r->out.len = 0;
	if (mqc_ws_key(ws->key) != 0
	    || mqc_ws_request(&r->out, u->host, u->port, u->tls, u->path, ws->key, net->ws_header) != 0)
		return -1;
	return send_all(a, r->out.data + r->out.off, mqc_buf_live(&r->out));
}

int fleet_ws_answer(struct fleet *r, struct attempt *a)
{
	struct fleet_ws *ws = a->ws;
	bool closed;
	ssize_t n = receive(a, a->rx + a->rxlen, RX_CAP - a->rxlen, &closed);
	if (n < 0) {
		say(r, "the server closed the connection during the WebSocket handshake");
		return -1;
	}
	a->rxlen += (unsigned)n;
	size_t used = 0;
	char why[256];
	enum mqc_ws_rc rc = mqc_ws_response(a->rx, a->rxlen, ws->key, &used, why, sizeof why);
	if (rc == MQC_WS_ERROR) {
		say(r, why);
		return -1;
	}
	if (rc == MQC_WS_AGAIN) {
		if (a->rxlen < RX_CAP)
			return 0;
		say(r,
		    "the answer to the WebSocket handshake is longer than the 512 bytes mqbench "
		    "takes");
		return -1;
	}
	/* Frames may have come with the answer: they wait in raw. */
	ws->rawlen = a->rxlen - (unsigned)used;
	memcpy(ws->raw, a->rx + used, ws->rawlen);
	a->rxlen = 0;
	return 1;
}

int fleet_ws_send(struct fleet *r, struct attempt *a, const unsigned char *p, size_t len)
{
	r->ws_out.off = r->ws_out.len = 0;
	if (mqc_ws_frame(&r->ws_out, MQC_WS_BINARY, p, len, true, SIZE_MAX) != 0)
		return -1;
	return send_all(a, r->ws_out.data, r->ws_out.len);
}

/* What raw holds, unframed into rx: >=0 bytes added, -1 closed or refused. */
static ssize_t unframe(struct fleet *r, struct attempt *a, bool *closed)
{
	struct fleet_ws *ws = a->ws;
	struct mqc_buf in = { .data = ws->raw, .len = ws->rawlen, .cap = RX_CAP };
	/* rx as a buffer that never grows: the limit is its size (mqc_buf_reserve refuses first) */
	struct mqc_buf data = { .data = a->rx, .len = a->rxlen, .cap = RX_CAP };
	unsigned before = a->rxlen;
	ssize_t rc = 0;
	for (;;) {
		struct mqc_ws_control ctl;
		char why[256];
		enum mqc_ws_rc got
		    = mqc_ws_read(&ws->reader, &in, &data, RX_CAP, RX_CAP, &ctl, why, sizeof why);
		if (got == MQC_WS_AGAIN)
			break;
		if (got == MQC_WS_GOT_PING) {
			r->ws_out.off = r->ws_out.len = 0;
			if (mqc_ws_frame(&r->ws_out, MQC_WS_PONG, ctl.payload, ctl.len, true, SIZE_MAX) != 0
			    || send_all(a, r->ws_out.data, r->ws_out.len) != 0) {
				rc = -1;
				break;
			}
			continue;
		}
		if (got == MQC_WS_GOT_CLOSE) {
			*closed = data.len == 0;
			char text[64];
			snprintf(text, sizeof text, "the server closed the WebSocket (status %d)", ctl.code);
			say(r, text);
		} else {
			say(r, why);
		}
		rc = -1;
		break;
	}
	size_t live = mqc_buf_live(&in);
	memmove(ws->raw, in.data + in.off, live);
	ws->rawlen = (unsigned)live;
	a->rxlen = (unsigned)data.len;
	return rc < 0 ? -1 : (ssize_t)(a->rxlen - before);
}

ssize_t fleet_ws_read(struct fleet *r, struct attempt *a, bool *closed)
{
	*closed = false;
	struct fleet_ws *ws = a->ws;
	for (;;) {
		ssize_t got = unframe(r, a, closed);
		if (got != 0)
			return got;
		if (ws->rawlen == RX_CAP) {
			say(r, "a WebSocket frame larger than anything the client takes");
			return -1;
		}
		ssize_t n = receive(a, ws->raw + ws->rawlen, RX_CAP - ws->rawlen, closed);
		if (n <= 0) {
			*closed = *closed && a->rxlen == 0;
			return n;
		}
		ws->rawlen += (unsigned)n;
	}
}

void fleet_ws_free(struct attempt *a)
{
	free(a->ws);
	a->ws = NULL;
}
