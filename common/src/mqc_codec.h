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

/* MQTT 5 property identifiers (as mosquitto's mqtt_protocol.h names them). */
enum mqc_property {
	MQC_PROP_PAYLOAD_FORMAT_INDICATOR = 0x01,
	MQC_PROP_MESSAGE_EXPIRY_INTERVAL = 0x02,
	MQC_PROP_CONTENT_TYPE = 0x03,
	MQC_PROP_RESPONSE_TOPIC = 0x08,
	MQC_PROP_CORRELATION_DATA = 0x09,
	MQC_PROP_SUBSCRIPTION_IDENTIFIER = 0x0B,
	MQC_PROP_SESSION_EXPIRY_INTERVAL = 0x11,
	MQC_PROP_ASSIGNED_CLIENT_IDENTIFIER = 0x12,
	MQC_PROP_SERVER_KEEP_ALIVE = 0x13,
	MQC_PROP_AUTHENTICATION_METHOD = 0x15,
	MQC_PROP_AUTHENTICATION_DATA = 0x16,
	MQC_PROP_REQUEST_PROBLEM_INFORMATION = 0x17,
	MQC_PROP_WILL_DELAY_INTERVAL = 0x18,
	MQC_PROP_REQUEST_RESPONSE_INFORMATION = 0x19,
	MQC_PROP_RESPONSE_INFORMATION = 0x1A,
	MQC_PROP_SERVER_REFERENCE = 0x1C,
	MQC_PROP_REASON_STRING = 0x1F,
	MQC_PROP_RECEIVE_MAXIMUM = 0x21,
	MQC_PROP_TOPIC_ALIAS_MAXIMUM = 0x22,
	MQC_PROP_TOPIC_ALIAS = 0x23,
	MQC_PROP_MAXIMUM_QOS = 0x24,
	MQC_PROP_RETAIN_AVAILABLE = 0x25,
	MQC_PROP_USER_PROPERTY = 0x26,
	MQC_PROP_MAXIMUM_PACKET_SIZE = 0x27,
	MQC_PROP_WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28,
	MQC_PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29,
	MQC_PROP_SHARED_SUBSCRIPTION_AVAILABLE = 0x2A,
};

/* MQTT 5 reason codes the project's clients act on (mqc_reason_text has them in words). */
enum mqc_reason {
	MQC_RC_SUCCESS = 0x00,
	MQC_RC_NO_MATCHING_SUBSCRIBERS = 0x10,
	MQC_RC_UNSPECIFIED = 0x80,
	MQC_RC_MALFORMED_PACKET = 0x81,
	MQC_RC_PROTOCOL_ERROR = 0x82,
	MQC_RC_UNSUPPORTED_PROTOCOL = 0x84,
	MQC_RC_NOT_AUTHORIZED = 0x87,
	MQC_RC_SERVER_SHUTTING_DOWN = 0x8B,
	MQC_RC_KEEP_ALIVE_TIMEOUT = 0x8D,
	MQC_RC_PACKET_TOO_LARGE = 0x95,
	MQC_RC_USE_ANOTHER_SERVER = 0x9C,
	MQC_RC_SERVER_MOVED = 0x9D,
};

/* The longest string or binary data MQTT can carry (a two-byte length). */
#define MQC_STR_MAX 65535u
/* The largest Remaining Length MQTT can encode (four bytes of seven bits); a packet is at most
 * that plus its fixed header (five bytes). */
#define MQC_REMAINING_MAX 268435455u
/* The largest packet the project's clients accept, fixed header included: the Maximum Packet Size
 * their CONNECT announces. MQTT would allow five bytes more; 268,435,455 is what strict brokers
 * take (the Paho test broker asserts above it) and no client here needs the difference. */
#define MQC_MAX_PACKET 268435455u

/* Subscription options (MQTT 5). */
#define MQC_SUBOPT_NO_LOCAL     0x04
#define MQC_SUBOPT_RETAIN_NEVER 0x20

/* --- a byte buffer ------------------------------------------------------------------------ */

/* Bytes [off, len) are live: a receive buffer parses from off, a send buffer sends from off. */
struct mqc_buf {
	unsigned char *data;
	size_t off, len, cap;
	/* A send buffer: the largest packet the peer takes (MQTT 5: the broker's Maximum Packet Size
	 * from CONNACK), fixed header included; an encoder refuses a larger packet with
	 * MQC_ENC_TOOBIG. 0: MQTT's own limit (MQC_REMAINING_MAX plus the fixed header). */
	size_t max_packet;
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

/* What an encoder returns. On anything but MQC_ENC_OK, b is as it was. */
enum mqc_enc_result {
	MQC_ENC_OK = 0,
	MQC_ENC_NOMEM = -1,   /* memory ran out */
	MQC_ENC_TOOBIG = -2,  /* a string over 65,535 bytes, or a packet over b->max_packet (or
	                         over what MQTT can encode) */
	MQC_ENC_INVALID = -3, /* a value the packet cannot carry (QoS 3, packet identifier 0, a
	                         string that is not UTF-8 or holds U+0000, ...) */
};

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
/* The size of the PUBLISH mqc_enc_publish would write for these, fixed header included (what a
 * peer's Maximum Packet Size is compared with); SIZE_MAX when MQTT cannot encode it. */
size_t mqc_publish_size(
    int protocol, const char *topic, int qos, const struct mqc_pub_props *props, size_t len);
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

/* s as a NUL-terminated malloc'd string, or NULL (out of memory). A view points into a packet and
 * is not terminated: strndup would be wrong for it (it may read on to a NUL, and ASan's
 * strict_string_checks says so when the packet ends the buffer). */
char *mqc_str_dup(struct mqc_str s);

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
	bool wildcards_available;  /* true */
	bool shared_available;     /* true */
	uint16_t topic_alias_max;  /* 0: the broker takes no aliases */
	bool has_server_keepalive; /* with server_keepalive */
	uint16_t server_keepalive;
	struct mqc_str assigned_id; /* len 0: none */
	struct mqc_str reason;      /* Reason String; len 0: none */
	struct mqc_str server_ref;  /* Server Reference (with 0x9C, 0x9D); len 0: none */
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
	struct mqc_str text;       /* Reason String; len 0: none */
	struct mqc_str server_ref; /* Server Reference (with 0x9C, 0x9D); len 0: none */
};
mqc_malformed mqc_dec_disconnect(
    const struct mqc_packet *pk, int protocol, struct mqc_disconnect *out);

/* Whether s[0, len) is well-formed UTF-8 without U+0000 (MQTT's rule for every string). */
bool mqc_utf8_valid(const char *s, size_t len);

/* --- codes in words ---------------------------------------------------------------------- */

/* A CONNACK's code in words: an MQTT 5 reason code, or a 3.1.1 return code when v311 ("bad user
 * name or password", ...). */
const char *mqc_connack_text(unsigned code, bool v311);
/* An MQTT 5 reason code in words ("not authorized", "packet too large", ...). */
const char *mqc_reason_text(unsigned code);

#endif
