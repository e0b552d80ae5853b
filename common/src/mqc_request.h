/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_request.h - command and reply over one plain connection, without a pool: the baseline the
 * pool is compared with. One client serves every such row in the project: mqbench's naive and
 * dedicated modes and the gateway's /naive route.
 *
 * A requester is one MQTT v5 connection (made by mqc_client) subscribed to its own inbox,
 * INBOX_PREFIX/<client id>/#, with no-local. A request publishes the command with a Response
 * Topic in that inbox and Correlation Data (8 random bytes of the connection and the request's
 * number), and takes the first non-retained reply that carries the same Correlation Data; any
 * other message is ignored. Every step shares the caller's deadline.
 *
 * "Naive" is mqc_request_once(): connect, subscribe, request, disconnect - what a web handler
 * without a pool does. "Dedicated" keeps one requester per thread.
 *
 * Legacy requests (the JavaScript mqtt-pool's model, and MQTT 3.1.1's only one) carry no
 * Correlation Data: the device answers on a fixed reply topic, which the requester subscribes to
 * when it opens; the reply is the first non-retained message there (with the payload given to
 * mqc_requester_match(), when one was). Another client on the same reply topic sees the replies
 * too: that is the model's limit.
 *
 * A requester belongs to the thread that opened it; the options it was opened with must outlive
 * it (a connect failure is explained with them).
 *
 * On an event loop the naive request is a state machine instead (mqc_request_start): the loop
 * watches the requester's socket, calls mqc_request_step() when it is ready and keeps the
 * deadline itself; nothing blocks but name resolution.
 */
#ifndef MQC_REQUEST_H
#define MQC_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "mqc_client.h"

enum mqc_req_result {
	MQC_REQ_OK = 0,
	MQC_REQ_TIMEDOUT, /* the deadline passed */
	MQC_REQ_CONNECT,  /* no connection: unreachable, TLS, refused CONNECT (err says which) */
	MQC_REQ_LOST,     /* the connection closed */
	MQC_REQ_DENIED,   /* the broker refused the SUBSCRIBE or (v5 PUBACK) the PUBLISH */
	MQC_REQ_NOMEM,
	MQC_REQ_PENDING,     /* mqc_request_step: not done yet */
	MQC_REQ_REFUSED,     /* the broker refused CONNECT (a CONNACK code, or MQTT 5 it does not speak,
	                        confirmed): err says why and what to change */
	MQC_REQ_NORESPONDER, /* v5 QoS 1: the broker's PUBACK said nobody is subscribed (0x10) */
};

/** A reply: payload NUL-terminated (not counted in len), both malloc'd. */
struct mqc_req_reply {
	void *payload;
	size_t len;
	char *topic;
};

struct mqc_requester;

/**
 * Connect (protocol 5 whatever o says) and subscribe to the inbox, by deadline (mqc_now_ns()).
 * @return MQC_REQ_OK with *out set; otherwise a result with err saying why.
 */
int mqc_requester_open(const struct mqc_conn_opts *o, const char *inbox_prefix, uint64_t deadline,
    struct mqc_requester **out, char *err, size_t errlen);

/**
 * A legacy requester: connect at o->protocol (4 or 5) and subscribe to reply_topic, by deadline.
 * @return as mqc_requester_open.
 */
int mqc_requester_open_legacy(const struct mqc_conn_opts *o, const char *reply_topic,
    uint64_t deadline, struct mqc_requester **out, char *err, size_t errlen);

/**
 * Legacy: the next replies must carry exactly these payload bytes (a request id the device
 * echoes); NULL: any message on the reply topic. Copied. MQC_REQ_OK or MQC_REQ_NOMEM.
 */
int mqc_requester_match(struct mqc_requester *r, const void *match, size_t len);

/**
 * Publish one command at qos and wait for its reply until deadline. reply may be NULL (only
 * whether it came matters); otherwise it is filled on MQC_REQ_OK and zeroed on failure.
 */
int mqc_requester_request(struct mqc_requester *r, const char *topic, const void *payload,
    size_t len, int qos, uint64_t deadline, struct mqc_req_reply *reply);

/** Disconnect (at most 100 ms) and free. Accepts NULL. */
void mqc_requester_close(struct mqc_requester *r);

/** The naive way: open, one request, close, all by deadline. */
int mqc_request_once(const struct mqc_conn_opts *o, const char *inbox_prefix, const char *topic,
    const void *payload, size_t len, int qos, uint64_t deadline, struct mqc_req_reply *reply,
    char *err, size_t errlen);

/**
 * The naive way on an event loop: start connecting (without blocking, name resolution aside);
 * CONNECT, SUBSCRIBE and the command follow in mqc_request_step(). topic and payload are copied.
 * @return MQC_REQ_OK with *out set, or a result with err saying why.
 */
int mqc_request_start(const struct mqc_conn_opts *o, const char *inbox_prefix, const char *topic,
    const void *payload, size_t len, int qos, struct mqc_requester **out, char *err, size_t errlen);

/** mqc_request_start for a legacy device: replies on reply_topic (subscribed first). */
int mqc_request_start_legacy(const struct mqc_conn_opts *o, const char *reply_topic,
    const char *topic, const void *payload, size_t len, int qos, struct mqc_requester **out,
    char *err, size_t errlen);

/** The socket to watch, and whether to watch it for writing too (after every step). */
int mqc_requester_fd(struct mqc_requester *r);
bool mqc_requester_want_write(struct mqc_requester *r);

/**
 * Do the I/O the socket is ready for and move on: MQC_REQ_PENDING while the reply is still to
 * come; otherwise the result, with *reply filled on MQC_REQ_OK and err saying why on failure.
 */
int mqc_request_step(struct mqc_requester *r, bool readable, bool writable,
    struct mqc_req_reply *reply, char *err, size_t errlen);

/** What a deadline that passes now means for a started request, in err; MQC_REQ_TIMEDOUT. */
int mqc_request_expired(struct mqc_requester *r, char *err, size_t errlen);

/** Disconnect without waiting and free (a started request, done or not). Accepts NULL. */
void mqc_requester_abort(struct mqc_requester *r);

/** Free what a reply holds (not the struct) and zero it. Accepts NULL. */
void mqc_req_reply_free(struct mqc_req_reply *reply);

#endif
