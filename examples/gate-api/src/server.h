/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * server.h - gate-api's HTTP server: N workers, each one thread running one libuv loop that
 * holds the HTTP connections (libuv streams, parsed with http-parser), a pool on the same loop
 * whose sockets the loop watches itself, and the /naive route's connections: one epoll set per
 * worker, no loop inside another. The workers listen on one port (SO_REUSEPORT: the kernel
 * spreads connections among them) and share nothing on a request's path but atomic counters.
 *
 * A request: its bytes are parsed as they are read, on the worker's thread; a command starts
 * mqp_pool_request_async (or the naive state machine) and the connection parses nothing more;
 * the reply, the timeout or the client going away (the end of its stream, read meanwhile)
 * completes it on the same thread, which answers in one write and goes on with the next
 * request. No hand-off between threads; an idle connection costs a libuv stream and a timer
 * (about a kilobyte), not a thread and not a buffer: one read buffer serves a worker.
 */
#ifndef GATE_SERVER_H
#define GATE_SERVER_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "gate.h"
#include "mqc_client.h"

#define GATE_MAX_WORKERS 256

struct gate_config {
	const char *broker;
	struct mqp_pool_options pool; /* max_size, min_size: all workers' pools together */
	struct mqc_conn_opts naive;   /* the /naive route's connections */
	const struct mqc_url *nodes;  /* --broker's list: the /naive route takes them in turn */
	size_t n_nodes;
	const char *topic_prefix;
	unsigned timeout_ms; /* for a device's reply */
	int qos;
	size_t max_body, max_reply;
	unsigned max_pending;         /* commands in flight, all workers together */
	unsigned request_deadline_ms; /* headers and body in by then */
	unsigned max_connections;     /* open HTTP connections, all workers together */
	unsigned per_address; /* connections from one client address, all workers together (at most
	                         max_connections: then no limit of its own) */
	struct sockaddr_storage listen; /* IPv4 or IPv6 (mqc_listen_parse) */
	socklen_t listen_len;
	/* The legacy model (MQTT 3.1.1, or asked for): the device answers on this template
	 * (mqc_template.h) of the command topic; NULL: MQTT 5 request/response. */
	const char *reply_template;
};

struct gate_server;

/**
 * Start workers (each with its pool and daemon) and return once all listen. The first binds
 * cfg->listen (port 0: a free one), the others the same port. The pool sizes are shared out:
 * worker i gets max_size / workers, one more while i < max_size % workers (so workers must not
 * exceed max_size), and min_size likewise.
 * @return 0, or -1 with err saying why (nothing left running).
 */
int gate_server_start(const struct gate_config *cfg, unsigned workers /* 1..GATE_MAX_WORKERS */,
    struct gate_server **out, char *err, size_t errlen);

/** The port the workers listen on. */
unsigned gate_server_port(const struct gate_server *s);

/**
 * Whether the broker takes the gateway: a connection borrowed from a pool within wait_ms.
 * @return 0 yes; -1 it refuses (credentials, authorization, a protocol version it does not
 *         speak: not transient), 1 not now (unreachable, slow); why says what the pool met, and
 *         *v311_only whether the refusal is of MQTT 5 by a broker that accepted MQTT 3.1.1
 *         (mqp_pool_stats.v311_only).
 */
int gate_server_broker_check(
    struct gate_server *s, unsigned wait_ms, bool *v311_only, char *why, size_t len);

/**
 * Stop accepting, answer new requests on open connections with 503 shutting_down, let commands
 * in flight finish and their responses go out for at most drain_ms, then close everything and
 * free the server. ok[b]: the 200 responses of each route.
 * @return true when everything finished in time.
 */
bool gate_server_stop(struct gate_server *s, unsigned drain_ms, uint64_t ok[GATE_BACKENDS]);

#endif
