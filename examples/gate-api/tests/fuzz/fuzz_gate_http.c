/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fuzz_gate_http.c - libFuzzer: gate-api's HTTP connection (src/conn.c) on whatever a client
 * sends: pipelined requests, chunked and declared bodies, Expect, bad framing, bytes that are not
 * HTTP, cut anywhere. The connection is one end of a socketpair on a libuv loop of its own, the
 * test plays the client on the other end and a stand-in for the command layer answers every
 * request on the loop's next turn (so later requests wait in the connection's held buffer, as
 * they do while a device answers). The input's first byte sets the size of the pieces the rest
 * is written in. Afterwards every call is answered or abandoned, the connection closed, each
 * handle closed, nothing leaked (ASan), and the loop empty.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The stand-in for command.c: a request is answered on the loop's next turn. */
struct pending {
	uv_timer_t timer;
	struct conn *cn;
};

static void pending_closed(uv_handle_t *h)
{
	free(h->data);
}

static void answer(uv_timer_t *t)
{
	struct pending *p = t->data;
	struct conn *cn = p->cn;
	struct call *c = cn->call;
	uv_close((uv_handle_t *)t, pending_closed);
	if (!c || c->state != CALL_WAITING)
		return;
	c->state = CALL_DONE;
	if (c->client_gone || cn->closing) {
		gate_end_call(cn);
		gate_conn_close(cn);
		return;
	}
	gate_respond_text(
	    cn, 200, "application/json", strdup("{\"ok\":true}"), false, gate_closes(cn, 200));
}

static void serve(struct conn *cn)
{
	struct pending *p = calloc(1, sizeof *p);
	if (!p) {
		gate_respond_error(cn, &cn->call->route, 503, "no_memory", "out of memory");
		return;
	}
	p->cn = cn;
	cn->call->state = CALL_WAITING;
	http_parser_pause(&cn->parser, 1); /* as run_command: the next request waits */
	uv_timer_init(&cn->w->loop, &p->timer);
	p->timer.data = p;
	uv_timer_start(&p->timer, answer, 0, 0);
}

static void client_gone(struct conn *cn)
{
	cn->call->client_gone = true; /* answer() lets the call go with its connection */
}

static const struct gate_handlers handlers = { .serve = serve, .client_gone = client_gone };

/* Read what the gateway wrote back (so its writes never block) and drop it. */
static void drain(int fd)
{
	char buf[65536];
	while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static struct gate_server s;
	static struct worker w;
	s = (struct gate_server) { .n = 1, .w = &w, .handlers = &handlers };
	s.cfg = (struct gate_config) { .topic_prefix = "devices",
		.max_body = 512,
		.max_reply = 4096,
		.request_deadline_ms = 60000, /* never reached: the client closes its side */
		.max_connections = 4,
		.per_address = 4 };
	pthread_mutex_init(&s.addr_lock, NULL);
	w = (struct worker) { .s = &s };
	gate_conn_init();
	if (uv_loop_init(&w.loop) != 0)
		abort();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
		abort();
	if (gate_conn_open(&w, sv[0]) != 0)
		abort();
	size_t piece = (size_t)data[0] * 7 + 1, off = 1;
	while (off < size) {
		size_t n = size - off < piece ? size - off : piece;
		ssize_t put = send(sv[1], data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (put > 0)
			off += (size_t)put;
		else if (!w.conns)
			break; /* the gateway closed: the rest goes nowhere */
		uv_run(&w.loop, UV_RUN_NOWAIT);
		drain(sv[1]);
	}
	shutdown(sv[1], SHUT_WR); /* the client is done: every answer now goes, then the close */
	for (int turn = 0; w.conns && turn < 100000; turn++) {
		uv_run(&w.loop, UV_RUN_NOWAIT);
		drain(sv[1]);
	}
	if (w.conns) /* still open: a connection that never ends on its client's close */
		abort();
	uv_run(&w.loop, UV_RUN_DEFAULT); /* the closed handles' callbacks */
	if (w.active != 0 || atomic_load(&s.connections) != 0 || s.addrs)
		abort();
	if (uv_loop_close(&w.loop) != 0)
		abort();
	close(sv[1]);
	pthread_mutex_destroy(&s.addr_lock);
	return 0;
}
