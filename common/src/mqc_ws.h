/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_ws.h - MQTT over WebSockets (RFC 6455, and MQTT 5.0 section 6) without I/O: the opening
 * handshake written and checked, MQTT bytes put into binary frames and taken out of them. Both
 * sides: a client masks what it sends and refuses masked frames, a server the reverse (the test
 * broker speaks the server's side, the pool and mqbench the client's).
 *
 * Bounded: a handshake answer of at most MQC_WS_HEAD_MAX bytes, control frames of at most 125,
 * data frames of at most the caller's limit; nothing is buffered here but a control frame's
 * payload, which stays in the input until it is whole.
 */
#ifndef MQC_WS_H
#define MQC_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mqc_codec.h"

#define MQC_WS_KEY_LEN      24   /* Sec-WebSocket-Key: base64 of 16 bytes */
#define MQC_WS_ACCEPT_LEN   28   /* Sec-WebSocket-Accept: base64 of a SHA-1 */
#define MQC_WS_HEAD_MAX     8192 /* the largest handshake request or answer taken */
#define MQC_WS_FRAME_HEAD   14   /* the largest frame header: 2 + 8 length + 4 mask */
#define MQC_WS_DEFAULT_PATH "/mqtt"

enum {
	MQC_WS_CONTINUATION = 0x0,
	MQC_WS_TEXT = 0x1,
	MQC_WS_BINARY = 0x2,
	MQC_WS_CLOSE = 0x8,
	MQC_WS_PING = 0x9,
	MQC_WS_PONG = 0xA,
};

/* A fresh Sec-WebSocket-Key: 16 random bytes in base64, NUL-terminated. -1: no random bytes. */
int mqc_ws_key(char key[MQC_WS_KEY_LEN + 1]);

/* The Sec-WebSocket-Accept a server answers key with (RFC 6455 4.2.2), NUL-terminated. */
void mqc_ws_accept(const char *key, char out[MQC_WS_ACCEPT_LEN + 1]);

/*
 * Append the opening handshake: GET path with Host (host, with brackets when it is an IPv6
 * address, and :port unless it is the scheme's default), the key, version 13 and the
 * subprotocol "mqtt"; extra, when not NULL or empty, is one more header line ("Name: value",
 * without CRLF, e.g. a proxy's Authorization). -1: out of memory, or extra holds CR/LF or no ':'.
 */
int mqc_ws_request(struct mqc_buf *out, const char *host, int port, bool tls, const char *path,
    const char *key, const char *extra);

enum mqc_ws_rc {
	MQC_WS_AGAIN = 0, /* every whole thing in the input was taken: more bytes are needed */
	MQC_WS_DONE,      /* the handshake answer was right (mqc_ws_response) */
	MQC_WS_GOT_PING,  /* a ping: answer it with a pong of the same payload (ctl) */
	MQC_WS_GOT_CLOSE, /* a close frame (ctl): the peer is done */
	MQC_WS_ERROR,     /* err says what was wrong: close the connection */
};

/*
 * The server's answer to the handshake for key, in in[0..len): MQC_WS_DONE with *used its length
 * (frames may follow it in the same bytes), MQC_WS_AGAIN while it is incomplete (and under
 * MQC_WS_HEAD_MAX), or MQC_WS_ERROR naming what is wrong: not 101 (with the status line), no
 * "Upgrade: websocket" or "Connection: Upgrade", a wrong Sec-WebSocket-Accept, a subprotocol
 * other than mqtt or none, an extension nobody asked for.
 */
enum mqc_ws_rc mqc_ws_response(
    const unsigned char *in, size_t len, const char *key, size_t *used, char *err, size_t errlen);

/*
 * The value of header name (case-insensitive) in the head of an HTTP message, head[0..len) (the
 * request or status line first, lines ending in CRLF), trimmed, NUL-terminated in value. false
 * when it is absent or does not fit.
 */
bool mqc_ws_header(const char *head, size_t len, const char *name, char *value, size_t value_len);

/* A fresh masking key (RFC 6455 10.3): OpenSSL's DRBG, taken 64 keys at a time per thread. 0, or
 * -1 when no random bytes could be had. */
int mqc_ws_mask_key(unsigned char key[4]);

/*
 * Append one frame (FIN set) of opcode carrying p[0..len); masked with a fresh random key when
 * mask (a client's frames), not when not (a server's). -1: out of memory, or past limit (see
 * mqc_buf_reserve).
 */
int mqc_ws_frame(
    struct mqc_buf *out, int opcode, const void *p, size_t len, bool mask, size_t limit);

/* The reading side's state between calls. Zero it, then set server for a server's side. */
struct mqc_ws_reader {
	bool server;     /* frames must be masked (a client's), not unmasked (a server's) */
	bool in_frame;   /* a data frame's payload is coming */
	bool in_message; /* a fragmented message has begun and not ended */
	uint64_t left;   /* payload bytes of the current data frame still to come */
	uint64_t at;     /* payload bytes of it already taken (where the mask stands) */
	unsigned char mask[4];
	uint64_t frames, pings, pongs; /* counted for whoever wants to say how many */
};

/* A control frame's payload; for a close, its status code (1005 when it had none). */
struct mqc_ws_control {
	unsigned char payload[125];
	size_t len;
	int code;
};

/*
 * Take frames from in's live bytes: the payload of binary frames and their continuations is
 * appended to data while it holds fewer than data_limit live bytes (the rest waits in in for
 * the next call, once the caller has taken from data); pongs are dropped;
 * a ping or a close stops the reading with its payload in ctl (call again after a ping). A
 * frame's payload may be split across calls, and one call may take many frames. frame_max: the
 * largest data frame taken. MQC_WS_ERROR names the violation: a text frame, a masked frame from a
 * server (or an unmasked one from a client), reserved bits or opcodes, a control frame that is
 * fragmented or over 125 bytes, a continuation of nothing or a message begun inside another,
 * a frame over frame_max.
 */
enum mqc_ws_rc mqc_ws_read(struct mqc_ws_reader *r, struct mqc_buf *in, struct mqc_buf *data,
    size_t data_limit, uint64_t frame_max, struct mqc_ws_control *ctl, char *err, size_t errlen);

#endif
