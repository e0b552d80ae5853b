/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * codec.h - the MQTT packets the pool uses, as bytes in and packets out (codec.c): no sockets,
 * no clock, no allocation but the output buffer's.
 *
 * Why the pool carries its own: libmosquitto 2.0 (Debian 12's) reads a packet in three or four
 * read(2)s (the type byte, each remaining-length byte, the body), writes a byte to an internal
 * socketpair for every packet it queues and sends every packet in a send of its own. A pooled
 * request then costs about seven system calls where the wire needs one send and a share of one
 * recv (pool/README.md has the measurements). With its own codec the pool reads into its own
 * buffer (every complete packet of one read), and writes every packet of a loop turn at once.
 *
 * Scope: MQTT 5 and 3.1.1, the client side of CONNECT/CONNACK, PUBLISH and its four
 * acknowledgements, SUBSCRIBE/SUBACK, UNSUBSCRIBE/UNSUBACK, PINGREQ/PINGRESP and DISCONNECT,
 * with the properties the pool sends or reads. Bounded: a packet larger than the limit the
 * caller gives, a remaining length of more than four bytes, a length or property that runs past
 * its packet, a property repeated that may appear once, a string that is not UTF-8 - each is
 * malformed, with a reason, and the connection is closed (codec_test.c, fuzz_codec.c).
 */
#ifndef MQP_CODEC_H
#define MQP_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Packet types (the high nibble of the first byte). */
enum {
	MQP_CONNECT = 1,
	MQP_CONNACK = 2,
	MQP_PUBLISH = 3,
	MQP_PUBACK = 4,
	MQP_PUBREC = 5,
	MQP_PUBREL = 6,
	MQP_PUBCOMP = 7,
	MQP_SUBSCRIBE = 8,
	MQP_SUBACK = 9,
	MQP_UNSUBSCRIBE = 10,
	MQP_UNSUBACK = 11,
	MQP_PINGREQ = 12,
	MQP_PINGRESP = 13,
	MQP_DISCONNECT = 14,
};

/* The largest packet the pool sends or accepts: a 256 MiB payload (the publish limit) and room
 * for its topic and properties. It is the Maximum Packet Size of the pool's CONNECT. */
#define MQP_MAX_PACKET ((uint32_t)(256u << 20) + 65536u)

/* Subscription options (MQTT 5). */
#define MQP_SUBOPT_NO_LOCAL     0x04
#define MQP_SUBOPT_RETAIN_NEVER 0x20

/* --- a byte buffer ------------------------------------------------------------------------ */

/* Bytes [off, len) are live: a receive buffer parses from off, a send buffer sends from off. */
struct mqp_buf {
	unsigned char *data;
	size_t off, len, cap;
};

/* Room for `more` bytes after len (moving the live bytes to the front first). -1: out of memory
 * or past limit (the live bytes plus more). */
int mqp__buf_reserve(struct mqp_buf *b, size_t more, size_t limit);
/* Drop the first n live bytes. */
void mqp__buf_consume(struct mqp_buf *b, size_t n);
/* Live bytes. */
static inline size_t mqp__buf_live(const struct mqp_buf *b)
{
	return b->len - b->off;
}
void mqp__buf_free(struct mqp_buf *b);

/* --- encoding: each appends one whole packet to b, or nothing ----------------------------- */

/* Every encoder returns 0, or -1 when a value cannot be encoded (a string over 65,535 bytes,
 * a packet over MQP_MAX_PACKET) or memory runs out; b is then as it was. */

struct mqp_connect {
	int protocol; /* 5 or 4 (3.1.1) */
	const char *client_id;
	const char *username; /* NULL: none */
	const char *password; /* NULL: none */
	uint16_t keepalive_s;
	uint16_t receive_max; /* MQTT 5: the QoS 1 and 2 publishes the broker may have unacked */
	uint32_t max_packet;  /* MQTT 5: the largest packet we accept */
};
int mqp__enc_connect(struct mqp_buf *b, const struct mqp_connect *c);

/* MQTT 5 properties of an outgoing PUBLISH; every field optional (NULL / 0 / false). */
struct mqp_pub_props {
	const char *response_topic;
	const void *corr;
	uint16_t corr_len;
	bool has_expiry;
	uint32_t expiry_s;
};
/* mid: the packet identifier for QoS 1 and 2 (ignored at QoS 0). props: MQTT 5 only (NULL:
 * none). */
int mqp__enc_publish(struct mqp_buf *b, int protocol, const char *topic, int qos, bool retain,
    uint16_t mid, const struct mqp_pub_props *props, const void *payload, size_t len);
/* One filter. options: MQP_SUBOPT_* (MQTT 5); sub_id: MQTT 5 Subscription Identifier, 0 none. */
int mqp__enc_subscribe(struct mqp_buf *b, int protocol, uint16_t mid, const char *filter, int qos,
    int options, uint32_t sub_id);
int mqp__enc_unsubscribe(struct mqp_buf *b, int protocol, uint16_t mid, const char *filter);
/* PUBACK, PUBREC, PUBREL or PUBCOMP for mid, success (no reason code: both protocols). */
int mqp__enc_ack(struct mqp_buf *b, int type, uint16_t mid);
int mqp__enc_pingreq(struct mqp_buf *b);
/* MQTT 5: with a reason code (0: normal disconnection); 3.1.1: none. */
int mqp__enc_disconnect(struct mqp_buf *b, int protocol, uint8_t reason);

/* --- decoding ----------------------------------------------------------------------------- */

/* Why a packet is malformed: a static string for logs and counters ("remaining length over four
 * bytes", ...). NULL: it is not. */
typedef const char *mqp_malformed;

/* One framed packet: its first byte and its body (a view into the buffer). */
struct mqp_packet {
	uint8_t type;  /* high nibble */
	uint8_t flags; /* low nibble */
	const unsigned char *body;
	size_t body_len;
	size_t size; /* fixed header + body */
};

enum mqp_frame_result { MQP_FRAME_OK, MQP_FRAME_MORE, MQP_FRAME_BAD };
/* The first packet of data[0, len): MQP_FRAME_OK with *out; MQP_FRAME_MORE when it is not all
 * there yet; MQP_FRAME_BAD with *why (a remaining length over four bytes, or a packet over
 * max_packet). */
enum mqp_frame_result mqp__frame(const unsigned char *data, size_t len, size_t max_packet,
    struct mqp_packet *out, mqp_malformed *why);

/* A UTF-8 string inside a packet (not NUL-terminated). */
struct mqp_str {
	const char *p;
	uint16_t len;
};

struct mqp_connack {
	bool session_present;
	uint8_t code;   /* MQTT 5 reason code, or the 3.1.1 return code when v311_form */
	bool v311_form; /* a 3.1.1-shaped CONNACK (two bytes): the answer of a broker that does not
	                   speak MQTT 5 to a v5 CONNECT */
	/* MQTT 5 properties, with the protocol's defaults when absent */
	uint16_t receive_max;      /* 65535 */
	uint32_t max_packet;       /* 0: no limit */
	uint8_t max_qos;           /* 2 */
	bool retain_available;     /* true */
	bool sub_ids_available;    /* true */
	bool has_server_keepalive; /* with server_keepalive */
	uint16_t server_keepalive;
	struct mqp_str assigned_id; /* len 0: none */
	struct mqp_str reason;      /* Reason String; len 0: none */
};
mqp_malformed mqp__dec_connack(const struct mqp_packet *pk, int protocol, struct mqp_connack *out);

/* The subscription identifiers one PUBLISH may carry that the pool looks at. */
#define MQP_PUB_SUB_IDS 4

struct mqp_publish {
	struct mqp_str topic;
	int qos;
	bool retain, dup;
	uint16_t mid; /* 0 at QoS 0 */
	const void *payload;
	size_t len;
	/* MQTT 5 */
	const unsigned char *corr; /* NULL: none */
	uint16_t corr_len;
	unsigned n_sub_ids; /* how many Subscription Identifiers it carried; the first few in: */
	uint32_t sub_ids[MQP_PUB_SUB_IDS];
};
mqp_malformed mqp__dec_publish(const struct mqp_packet *pk, int protocol, struct mqp_publish *out);

/* PUBACK, PUBREC, PUBREL, PUBCOMP. */
struct mqp_ack {
	uint16_t mid;
	uint8_t reason; /* MQTT 5; 0 when absent and always in 3.1.1 */
};
mqp_malformed mqp__dec_ack(const struct mqp_packet *pk, int protocol, struct mqp_ack *out);

/* SUBACK and UNSUBACK: a return or reason code per filter (3.1.1 UNSUBACK has none). */
struct mqp_suback {
	uint16_t mid;
	const unsigned char *codes;
	size_t count;
};
mqp_malformed mqp__dec_suback(const struct mqp_packet *pk, int protocol, struct mqp_suback *out);

/* A DISCONNECT from the broker (MQTT 5 only). */
struct mqp_disconnect {
	uint8_t reason;
	struct mqp_str text; /* Reason String; len 0: none */
};
mqp_malformed mqp__dec_disconnect(
    const struct mqp_packet *pk, int protocol, struct mqp_disconnect *out);

/* Whether s[0, len) is well-formed UTF-8 without U+0000 (MQTT's rule for every string). */
bool mqp__utf8_valid(const char *s, size_t len);

/* (Reason and return codes in words: mqc_mqtt_connack_text and mqc_mqtt_reason_text in
 * common/src/mqc_mqtt.h, which every tool shares.) */

#endif
