/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * wire.h - one connection's bytes: a non-blocking TCP socket, TLS through OpenSSL on memory BIOs,
 * and the buffers the codec reads from and writes into (wire.c). Knows nothing of MQTT.
 *
 * Every system call on the socket is made here, and only when there is something to do:
 *   - a readable socket is read once into the receive buffer (again only when that read filled
 *     all the room it had), and with TLS the records are decrypted from memory: no second read
 *     to learn that the socket is empty;
 *   - what the connection layer queued during a loop turn goes out in one send() at the end of
 *     the turn (mqp__wire_flush); only a short send makes the caller watch for EPOLLOUT.
 * Sends use MSG_NOSIGNAL: a broker that goes away is an error, never SIGPIPE, and the pool never
 * changes the process's signal dispositions. The wire keeps its socket watched itself - in the
 * pool's epoll set (data.ptr = tag), or by the application's event loop through a hook - for
 * EPOLLOUT only while a send is short or a connect is under way, and again when a connect moves
 * on to the next address (a new descriptor).
 */
#ifndef MQP_WIRE_H
#define MQP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mqc_codec.h"
#include "mqc_url.h"
#include "mqc_ws.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;
struct addrinfo;

/* Who watches the sockets: the epoll set ep, or (fn not NULL) an event loop, told what to watch
 * fd for (MQP_IO_READ, MQP_IO_WRITE; 0: stop, before the descriptor closes). */
struct mqp_watcher {
	int ep;
	void (*fn)(void *data, int fd, unsigned events, void *tag);
	void *data;
};

enum mqp_wire_state {
	MQP_WIRE_CLOSED,
	MQP_WIRE_RESOLVING,  /* a host name: a resolver thread works on it, mqp__wire_poll looks */
	MQP_WIRE_CONNECTING, /* TCP */
	MQP_WIRE_HANDSHAKE,  /* TLS */
	MQP_WIRE_UPGRADE,    /* WebSockets: the HTTP upgrade is sent, its answer awaited */
	MQP_WIRE_OPEN,
};

/* What every wire of a pool shares: ws_header (ws://: one more header line for the upgrade, or
 * NULL), user_timeout_ms (TCP_USER_TIMEOUT of its sockets; 0: the kernel's). */
struct mqp_wire_opts {
	const char *ws_header;
	unsigned user_timeout_ms;
};

struct mqp_wire {
	enum mqp_wire_state state;
	int fd;
	const struct mqp_watcher *watcher;
	void *tag;       /* epoll's data.ptr, the loop's tag */
	uint32_t events; /* what it is watched for now (EPOLLIN, EPOLLOUT; 0: not watched) */
	SSL *ssl;        /* mqtts: decrypts rbio into rx, encrypts tx into wbio */
	BIO *rbio, *wbio;
	struct mqc_buf rx;   /* plaintext received: the codec frames packets from rx.off */
	struct mqc_buf tx;   /* plaintext to send: the codec appends packets */
	struct mqc_buf cout; /* TLS: ciphertext not yet accepted by the kernel */
	/* ws:// and wss://: tx is framed into wout at each flush (then encrypted, over TLS), and
	 * what arrives (decrypted) goes into win, unframed from there into rx. */
	bool ws;
	struct mqc_buf wout, win;
	struct mqc_ws_reader wsr;
	char ws_key[MQC_WS_KEY_LEN + 1];
	const struct mqc_url *url;     /* the node's (it outlives the wire): host, port, path */
	const char *ws_header;         /* the pool's option: one more header line for the upgrade */
	unsigned user_timeout_ms;      /* TCP_USER_TIMEOUT of its sockets (0: the kernel's) */
	bool violation;                /* the error was the peer breaking the protocol, not a close */
	bool short_send;               /* the last send left bytes: watch for EPOLLOUT */
	bool finishing, shut;          /* mqp__wire_finish: our side ends once sent; it has */
	struct addrinfo *ai, *ai_next; /* while connecting: the addresses, and the next to try */
	struct mqp_resolve *resolve;   /* while resolving: shared with its resolver thread */
	unsigned rotate;               /* the address of the name to try first (of those it has) */
	uint64_t resolve_start;
	char where[280]; /* "host:port" for messages */
	char err[640];   /* why it failed (mqp__wire_* returned MQP_WIRE_ERROR) */
};

enum mqp_wire_result {
	MQP_WIRE_OK,
	MQP_WIRE_EOF,   /* the broker closed the connection */
	MQP_WIRE_ERROR, /* w->err says why */
};

/* Start a non-blocking connect to url's host's addresses, beginning at the rotate-th (modulo how
 * many it has), the next tried when one fails. An IP address is used as it is; a name is
 * resolved by getaddrinfo on a thread of its own, never the caller's: the wire is RESOLVING until
 * mqp__wire_poll finds the answer in. ctx: TLS with that context, the server's name (or address)
 * checked and sent as SNI. url->ws: MQTT over WebSockets, the upgrade to url->path with
 * ws_header (NULL: none) as one more header line; the wire is OPEN once the server's 101 is
 * checked. The socket is watched by watcher with tag. MQP_WIRE_OK or MQP_WIRE_ERROR (w->err; w
 * is closed). */
enum mqp_wire_result mqp__wire_start(struct mqp_wire *w, const struct mqc_url *url,
    const struct mqp_wire_opts *opts, unsigned rotate, SSL_CTX *ctx,
    const struct mqp_watcher *watcher, void *tag);

/* RESOLVING: has the answer come? Then the connect starts (MQP_WIRE_OK, now CONNECTING), or
 * MQP_WIRE_ERROR says the name cannot be resolved. Still waiting: MQP_WIRE_OK, RESOLVING. */
enum mqp_wire_result mqp__wire_poll(struct mqp_wire *w);

/* The socket is readable and/or writable (what epoll said): finish the TCP connect, advance the
 * TLS handshake, read what arrived into rx, send what waits. scratch: room for ciphertext (TLS
 * reads), shared by the connections of one thread. */
enum mqp_wire_result mqp__wire_io(
    struct mqp_wire *w, bool readable, bool writable, unsigned char *scratch, size_t scratch_len);

/* Send what tx and cout hold: one send() for all of it; what the kernel did not take waits for
 * EPOLLOUT. MQP_WIRE_OK or MQP_WIRE_ERROR. Nothing is sent before the wire is open. */
enum mqp_wire_result mqp__wire_flush(struct mqp_wire *w);

/* Something waits to be sent (queued in tx, or ciphertext the kernel has not taken). */
bool mqp__wire_pending(const struct mqp_wire *w);

/* Acknowledge what arrives next at once (TCP_QUICKACK; see mqc_net.h). */
void mqp__wire_quickack(const struct mqp_wire *w);

/* Our side is done: what is queued (and over TLS a close_notify) goes out, then the socket's
 * sending half is shut (a FIN). Reading goes on: the peer's own close (MQP_WIRE_EOF) ends it, so
 * nothing the peer sent meanwhile lies unread when the socket closes (which would make the close
 * a reset). MQP_WIRE_OK or MQP_WIRE_ERROR. */
enum mqp_wire_result mqp__wire_finish(struct mqp_wire *w);

/* Close the socket and free everything; w can start again. */
void mqp__wire_close(struct mqp_wire *w);

#endif
