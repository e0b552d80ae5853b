/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_codec.h - MQTT packets as bytes in and packets out (codec.c): the project's one MQTT
 * encoder and decoder, below every part that speaks MQTT itself (the pool, mqbench's connect
 * storm, the probe's benchmarks). No sockets, no clock, no allocation but the output buffer's.
 * Static and hidden in the libraries that link it: libmqttpool's ABI does not show it.
 *
 * Why the project carries its own: libmosquitto 2.0 (Debian 12's) reads a packet in three or four
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
#ifndef MQC_CODEC_H
#define MQC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Packet types (the high nibble of the first byte). */
enum {
	MQC_CONNECT = 1,
	MQC_CONNACK = 2,
	MQC_PUBLISH = 3,
	MQC_PUBACK = 4,
	MQC_PUBREC = 5,
	MQC_PUBREL = 6,
	MQC_PUBCOMP = 7,
	MQC_SUBSCRIBE = 8,
	MQC_SUBACK = 9,
	MQC_UNSUBSCRIBE = 10,
	MQC_UNSUBACK = 11,
	MQC_PINGREQ = 12,
	MQC_PINGRESP = 13,
	MQC_DISCONNECT = 14,
};

/* The largest packet the pool sends or accepts: a 256 MiB payload (the publish limit) and room
 * for its topic and properties. It is the Maximum Packet Size of the pool's CONNECT. */
#define MQC_MAX_PACKET ((uint32_t)(256u << 20) + 65536u)

/* Subscription options (MQTT 5). */
#define MQC_SUBOPT_NO_LOCAL     0x04
#define MQC_SUBOPT_RETAIN_NEVER 0x20

/* --- a byte buffer ------------------------------------------------------------------------ */

/* Bytes [off, len) are live: a receive buffer parses from off, a send buffer sends from off. */
struct mqc_buf {
	unsigned char *data;
	size_t off, len, cap;
};

/* Room for `more` bytes after len (moving the live bytes to the front first). -1: out of memory
 * or past limit (the live bytes plus more). */
int mqc_buf_reserve(struct mqc_buf *b, size_t more, size_t limit);
/* Drop the first n live bytes. */
void mqc_buf_consume(struct mqc_buf *b, size_t n);
/* Live bytes. */
static inline size_t mqc_buf_live(const struct mqc_buf *b)
{
	return b->len - b->off;
}
void mqc_buf_free(struct mqc_buf *b);

/* --- encoding: each appends one whole packet to b, or nothing ----------------------------- */

/* Every encoder returns 0, or -1 when a value cannot be encoded (a string over 65,535 bytes,
 * a packet over MQC_MAX_PACKET) or memory runs out; b is then as it was. */

struct mqc_connect {
	int protocol; /* 5 or 4 (3.1.1) */
	const char *client_id;
	const char *username; /* NULL: none */
	const char *password; /* NULL: none */
	uint16_t keepalive_s;
	uint16_t receive_max; /* MQTT 5: the QoS 1 and 2 publishes the broker may have unacked */
	uint32_t max_packet;  /* MQTT 5: the largest packet we accept */
};
int mqc_enc_connect(struct mqc_buf *b, const struct mqc_connect *c);

/* MQTT 5 properties of an outgoing PUBLISH; every field optional (NULL / 0 / false). */
struct mqc_pub_props {
	const char *response_topic;
	const void *corr;
	uint16_t corr_len;
	bool has_expiry;
	uint32_t expiry_s;
};
/* mid: the packet identifier for QoS 1 and 2 (ignored at QoS 0). props: MQTT 5 only (NULL:
 * none). */
int mqc_enc_publish(struct mqc_buf *b, int protocol, const char *topic, int qos, bool retain,
    uint16_t mid, const struct mqc_pub_props *props, const void *payload, size_t len);
/* One filter. options: MQC_SUBOPT_* (MQTT 5); sub_id: MQTT 5 Subscription Identifier, 0 none. */
int mqc_enc_subscribe(struct mqc_buf *b, int protocol, uint16_t mid, const char *filter, int qos,
    int options, uint32_t sub_id);
int mqc_enc_unsubscribe(struct mqc_buf *b, int protocol, uint16_t mid, const char *filter);
/* PUBACK, PUBREC, PUBREL or PUBCOMP for mid, success (no reason code: both protocols). */
int mqc_enc_ack(struct mqc_buf *b, int type, uint16_t mid);
int mqc_enc_pingreq(struct mqc_buf *b);
/* MQTT 5: with a reason code (0: normal disconnection); 3.1.1: none. */
int mqc_enc_disconnect(struct mqc_buf *b, int protocol, uint8_t reason);

/* --- decoding ----------------------------------------------------------------------------- */

/* Why a packet is malformed: a static string for logs and counters ("remaining length over four
 * bytes", ...). NULL: it is not. */
typedef const char *mqc_malformed;

/* One framed packet: its first byte and its body (a view into the buffer). */
struct mqc_packet {
	uint8_t type;  /* high nibble */
	uint8_t flags; /* low nibble */
	const unsigned char *body;
	size_t body_len;
	size_t size; /* fixed header + body */
};

enum mqc_frame_result { MQC_FRAME_OK, MQC_FRAME_MORE, MQC_FRAME_BAD };
/* The first packet of data[0, len): MQC_FRAME_OK with *out; MQC_FRAME_MORE when it is not all
 * there yet; MQC_FRAME_BAD with *why (a remaining length over four bytes, or a packet over
 * max_packet). */
enum mqc_frame_result mqc_frame(const unsigned char *data, size_t len, size_t max_packet,
    struct mqc_packet *out, mqc_malformed *why);

/* A UTF-8 string inside a packet (not NUL-terminated). */
struct mqc_str {
	const char *p;
	uint16_t len;
};

struct mqc_connack {
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
	struct mqc_str assigned_id; /* len 0: none */
	struct mqc_str reason;      /* Reason String; len 0: none */
};
mqc_malformed mqc_dec_connack(const struct mqc_packet *pk, int protocol, struct mqc_connack *out);

/* The subscription identifiers one PUBLISH may carry that the pool looks at. */
#define MQC_PUB_SUB_IDS 4

struct mqc_publish {
	struct mqc_str topic;
	int qos;
	bool retain, dup;
	uint16_t mid; /* 0 at QoS 0 */
	const void *payload;
	size_t len;
	/* MQTT 5 */
	const unsigned char *corr; /* NULL: none */
	uint16_t corr_len;
	unsigned n_sub_ids; /* how many Subscription Identifiers it carried; the first few in: */
	uint32_t sub_ids[MQC_PUB_SUB_IDS];
};
mqc_malformed mqc_dec_publish(const struct mqc_packet *pk, int protocol, struct mqc_publish *out);

/* PUBACK, PUBREC, PUBREL, PUBCOMP. */
struct mqc_ack {
	uint16_t mid;
	uint8_t reason; /* MQTT 5; 0 when absent and always in 3.1.1 */
};
mqc_malformed mqc_dec_ack(const struct mqc_packet *pk, int protocol, struct mqc_ack *out);

/* SUBACK and UNSUBACK: a return or reason code per filter (3.1.1 UNSUBACK has none). */
struct mqc_suback {
	uint16_t mid;
	const unsigned char *codes;
	size_t count;
};
mqc_malformed mqc_dec_suback(const struct mqc_packet *pk, int protocol, struct mqc_suback *out);

/* A DISCONNECT from the broker (MQTT 5 only). */
struct mqc_disconnect {
	uint8_t reason;
	struct mqc_str text; /* Reason String; len 0: none */
};
mqc_malformed mqc_dec_disconnect(
    const struct mqc_packet *pk, int protocol, struct mqc_disconnect *out);

/* Whether s[0, len) is well-formed UTF-8 without U+0000 (MQTT's rule for every string). */
bool mqc_utf8_valid(const char *s, size_t len);

/* (Reason and return codes in words: mqc_mqtt_connack_text and mqc_mqtt_reason_text in
 * common/src/mqc_mqtt.h, which every tool shares.) */

#endif
