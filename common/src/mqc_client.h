/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_client.h - the one way the project opens an MQTT connection with libmosquitto.
 *
 * Every client in the tree (the pool, the responder, the test client, every mqbench scenario and
 * the gateway's naive route) is made here, so an option is set once, one way:
 *
 *   - protocol 5 or 3.1.1, TCP_NODELAY, keepalive, credentials;
 *   - TLS with the broker's certificate verified and its host name checked, against --cafile or
 *     the system's trust store;
 *   - a client id with 64 random bits unless the caller names one (nobody can guess it to take
 *     the session over, and no two connections anywhere share one);
 *   - a non-blocking connect (only name resolution blocks) and I/O driven by poll(2) or the
 *     caller's epoll, never by libmosquitto's select(2) loop, which fails for file descriptors at
 *     or above 1024.
 *
 * A struct mosquitto made here belongs to one thread: the one that drives it.
 */
#ifndef MQC_CLIENT_H
#define MQC_CLIENT_H

#include <mosquitto.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mqc_url.h"

/** Room for a generated client id: a prefix of up to 40 bytes, '-' and 11 random characters. */
#define MQC_CLIENT_ID_MAX 64

/** The system's CA certificates, used for mqtts:// when no cafile is given. */
#define MQC_SYSTEM_CA_PATH "/etc/ssl/certs"

struct mqc_conn_opts {
	struct mqc_url url;     /* host, port, TLS */
	const char *cafile;     /* mqtts: the CA; NULL: the system's store (MQC_SYSTEM_CA_PATH) */
	const char *cert, *key; /* a client certificate, or NULL */
	const char *username, *password;
	const char *client_id;    /* the exact id; NULL: id_prefix-<64 random bits> */
	const char *id_prefix;    /* NULL: "mqtt" */
	int protocol;             /* 5 or 4 (3.1.1); 0: 5 */
	unsigned keepalive_s;     /* 0: 30 */
	void *ssl_ctx;            /* an SSL_CTX to share (the CA loaded once), or NULL */
	const char *bind_address; /* a local address to connect from, or NULL */
};

/**
 * mosquitto_new with every option applied, callbacks not set. The client id used is written to
 * id (MQC_CLIENT_ID_MAX bytes) when id is not NULL.
 * @return the client, or NULL with err saying why (no random bytes, out of memory, a TLS file
 *         libmosquitto refuses, a ws:// or wss:// URL: libmosquitto 2.0 has no WebSockets).
 */
struct mosquitto *mqc_client_new(
    const struct mqc_conn_opts *o, void *obj, char *id, char *err, size_t errlen);

/**
 * Start connecting without blocking on the network: the TCP connect, the TLS handshake and
 * CONNECT go on in mqc_client_io(); readiness is on_connect with rc 0. Name resolution still
 * blocks (libmosquitto calls getaddrinfo).
 * @return 0, or -1 with err naming the broker and the reason.
 */
int mqc_client_connect(
    struct mosquitto *m, const struct mqc_conn_opts *o, char *err, size_t errlen);

/**
 * Whether to wait for the socket to be writable. connecting: no CONNACK yet. During a TLS
 * handshake it is what OpenSSL last asked for, so a client waiting for the server's half does not
 * spin on a writable socket.
 */
bool mqc_client_want_write(struct mosquitto *m, bool connecting);

/**
 * Do the I/O the socket is ready for (the TLS handshake advances in libmosquitto's read path, so
 * a writable socket also reads while connecting). Does not run keepalive: mqc_client_misc().
 * @return MOSQ_ERR_SUCCESS, or the error that closed the connection.
 */
int mqc_client_io(struct mosquitto *m, bool readable, bool writable, bool connecting);

/** Keepalive (PINGREQ, and closing an unanswered connection): about once a second. */
int mqc_client_misc(struct mosquitto *m);

/**
 * One pass for a client that owns its thread: poll(2) up to timeout_ms, do the I/O, keepalive.
 * @return MOSQ_ERR_SUCCESS, or the error that closed the connection (MOSQ_ERR_NO_CONN when it
 *         was not open).
 */
int mqc_client_step(struct mosquitto *m, bool connecting, int timeout_ms);

/**
 * For a client that owns its thread: run mqc_client_step() until done(arg) is true (checked
 * before every pass) or the deadline (mqc_now_ns()) passes. connecting(arg), or NULL for
 * "connected", tells the passes whether CONNACK is still to come.
 * @return MOSQ_ERR_SUCCESS when done; MOSQ_ERR_TIMEOUT at the deadline; otherwise the error
 *         that closed the connection.
 */
int mqc_client_wait(struct mosquitto *m, bool (*done)(const void *arg),
    bool (*connecting)(const void *arg), const void *arg, uint64_t deadline);

/**
 * Send DISCONNECT, give it at most timeout_ms to leave, and free the client. Accepts NULL.
 */
void mqc_client_close(struct mosquitto *m, int timeout_ms);

/** The message for a libmosquitto result (strerror(errno) for MOSQ_ERR_ERRNO). */
const char *mqc_client_strerror(int rc);

/**
 * Why CONNECT failed, for a client that asked for protocol (5 or 4), in one sentence with the
 * broker's address, into out: rc is what on_connect got (a v5 reason code, or a 3.1.1 return
 * code; libmosquitto reports a 3.1.1 broker's "unacceptable protocol version" to a v5 client
 * as 0x84), or -1 when the connection closed before any CONNACK.
 *
 * A diagnosis comes only from what the broker said. Refused for its protocol version (0x84):
 * "does not accept MQTT 5 (confirmed: ...)", and one MQTT 3.1.1 CONNECT to the same address (at
 * most 3 s; kept 60 s per address, so a client failing in a loop asks once) says whether HINT
 * ("--protocol 3.1.1") will work. Closed without a CONNACK: said as that, with what the CONNECT
 * was (sent_by describes a CONNECT the caller wrote; NULL: libmosquitto's, from o); the same
 * 3.1.1 CONNECT is tried, and when it is accepted the hint is given as a
 * possibility (RabbitMQ 3 closes MQTT 5 so), never as confirmed.
 * @return true when it is a refusal (a CONNACK code), false for a connection that closed.
 */
bool mqc_client_explain_connect_failure(const struct mqc_conn_opts *o, int protocol, int rc,
    const char *hint, const char *sent_by, char *out, size_t len);

#endif
