/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * worker.h - gate-api's insides, shared by its three files (server.h says what the server does):
 *
 *   conn.c     HTTP connections and their limits: accepting and admitting them, reading and
 *              parsing requests (http-parser), deadlines, responses, closing
 *   command.c  what a request asks: a device command through the pool or the naive route,
 *              /healthz, /metrics
 *   worker.c   a worker (its thread, loop, pool and listening socket), draining, and the
 *              server's functions (server.h)
 *
 * conn.c calls into neither of the others: it hands a parsed request to the handlers the server
 * gives it (struct gate_handlers), as an HTTP server library would. Everything here runs on a
 * worker's thread except what server.h says.
 */
#ifndef GATE_WORKER_H
#define GATE_WORKER_H

#include <http_parser.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "mqttpool.h"
#include "server.h"

enum {
	URL_MAX = 4096,         /* a request target longer than this is a 400 */
	HEADERS_MAX = 32768,    /* all the headers of a request (http-parser enforces it) */
	HELD_MAX = 65536,       /* bytes read ahead (pipelined) while a request is served */
	READ_BUF = 65536,       /* the worker's one read buffer: every connection reads into it */
	LINGER_MS = 2000,       /* after an answer that closes: how long its rest is read away */
	LINGER_BYTES = 1 << 20, /* ... and how much of it at most */
};

/* A client's address as a key: an IPv4 client's as IPv6 maps it (::ffff:a.b.c.d), so that one
 * reaching a [::] listener over IPv4 counts as itself. */
struct addr_count {
	struct in6_addr addr;
	unsigned n;
	UT_hash_handle hh;
};

struct worker;
struct naive_op;
struct call;
struct conn;

/* What the server does with a connection's request (command.c). */
struct gate_handlers {
	/* A whole request, parsed and routed (cn->call): answer it, now or later. */
	void (*serve)(struct conn *cn);
	/* The client went away while its command waits (cn->call, CALL_WAITING). */
	void (*client_gone)(struct conn *cn);
};

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
	const struct gate_handlers *handlers;
};

/* An HTTP connection. */
struct conn {
	uv_tcp_t tcp; /* first: libuv hands back &tcp */
	struct worker *w;
	struct conn *prev, *next; /* the worker's open connections */
	struct in6_addr addr;
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
	struct mqc_conn_opts opts; /* cfg->naive on the broker of the list whose turn it is */
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
	unsigned naive_next;        /* the broker of the list the next naive request goes to */
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

/* --- conn.c */

/** http-parser's settings for every connection; once, before any worker starts. */
void gate_conn_init(void);
/** A new connection on w's listening socket: admitted (or refused and closed) and read. */
void gate_conn_accept(uv_stream_t *listener, int status);
/** The same for a stream socket the caller opened (the fuzzer's socketpair end; libuv owns fd
 * from here). 0, or -1 (fd not taken: the caller closes it). */
int gate_conn_open(struct worker *w, int fd);
/** Close cn now; a call still waiting for its device completes later (and finds it gone). */
void gate_conn_close(struct conn *cn);
/** The call is answered (or its connection gone): free it. */
void gate_end_call(struct conn *cn);
/** The response to cn's call: status, headers, body (text, malloc'd: taken; NULL: out of
 * memory, the connection closes), and the end of the call. */
void gate_respond_text(
    struct conn *cn, int status, const char *type, char *text, bool retry_after, bool close);
/** An error as JSON ({"error":code,"message":...}), counted for a command's route. */
void gate_respond_error(struct conn *cn, const struct gate_route *route, int status,
    const char *code, const char *message);
/** Whether cn closes after a response with this status (the client's wish, the server's state). */
bool gate_closes(struct conn *cn, int status);
/** A message on stderr, at most one a second (a flood of refusals is not a flood of lines). */
void gate_log_limited(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --- command.c */

/** What the server does with requests (gate_server.handlers). */
extern const struct gate_handlers gate_command_handlers;
/** Complete every naive request of w with rc (the worker is closing). */
void gate_naive_finish_all(struct worker *w, int rc);

#endif
