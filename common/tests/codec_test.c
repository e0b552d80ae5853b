/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * codec_test.c - the MQTT codec (common/src/codec.c) against bytes written out by hand from the
 * MQTT 5 and 3.1.1 specifications, and every kind of malformed packet the decoders refuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mqc_codec.h"

#define BYTES(...) ((const unsigned char[]) { __VA_ARGS__ })
#define LEN(...)   sizeof((const unsigned char[]) { __VA_ARGS__ })

static void assert_bytes(const struct mqc_buf *b, const unsigned char *want, size_t len)
{
	assert_int_equal(mqc_buf_live(b), len);
	assert_memory_equal(b->data + b->off, want, len);
}

/* Frame the one packet in data; it must be exactly all of data. */
static struct mqc_packet frame(const unsigned char *data, size_t len)
{
	struct mqc_packet pk;
	mqc_malformed why = NULL;
	assert_int_equal(mqc_frame(data, len, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_OK);
	assert_int_equal(pk.size, len);
	return pk;
}

static void connect_v5_and_311(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	struct mqc_connect c = { .protocol = 5,
		.client_id = "c1",
		.username = "u",
		.password = "p",
		.keepalive_s = 30,
		.receive_max = 100,
		.max_packet = 1024 };
	assert_int_equal(mqc_enc_connect(&b, &c), 0);
	assert_bytes(&b,
	    BYTES(0x10, 32, 0, 4, 'M', 'Q', 'T', 'T', 5, 0xC2, 0, 30, /* properties: 11 bytes */
	        11, 0x21, 0, 100, 0x27, 0, 0, 4, 0, 0x22, 0, 0, 0, 2, 'c', '1', 0, 1, 'u', 0, 1, 'p'),
	    LEN(0x10, 32, 0, 4, 'M', 'Q', 'T', 'T', 5, 0xC2, 0, 30, 11, 0x21, 0, 100, 0x27, 0, 0, 4, 0,
	        0x22, 0, 0, 0, 2, 'c', '1', 0, 1, 'u', 0, 1, 'p'));
	mqc_buf_free(&b);
	c = (struct mqc_connect) { .protocol = 4, .client_id = "c1", .keepalive_s = 5 };
	assert_int_equal(mqc_enc_connect(&b, &c), 0);
	assert_bytes(&b, BYTES(0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 5, 0, 2, 'c', '1'),
	    LEN(0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 5, 0, 2, 'c', '1'));
	mqc_buf_free(&b);
}

static void publish_with_properties_roundtrips(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	unsigned char corr[16];
	for (int i = 0; i < 16; i++)
		corr[i] = (unsigned char)(0xA0 + i);
	struct mqc_pub_props pp = { .response_topic = "in/x",
		.corr = corr,
		.corr_len = sizeof corr,
		.has_expiry = true,
		.expiry_s = 5 };
	assert_int_equal(mqc_enc_publish(&b, 5, "d/1/c", 1, false, 7, &pp, "hi", 2), 0);
	/* type 3, QoS 1; topic, id 7, properties 5 + 7 + 19 = 31, payload */
	unsigned char head[] = { 0x32, 2 + 5 + 2 + 1 + 31 + 2, 0, 5, 'd', '/', '1', '/', 'c', 0, 7, 31,
		0x02, 0, 0, 0, 5, 0x08, 0, 4, 'i', 'n', '/', 'x', 0x09, 0, 16 };
	assert_memory_equal(b.data, head, sizeof head);
	struct mqc_packet pk = frame(b.data, mqc_buf_live(&b));
	struct mqc_publish m;
	assert_null(mqc_dec_publish(&pk, 5, &m));
	assert_int_equal(m.qos, 1);
	assert_int_equal(m.mid, 7);
	assert_int_equal(m.topic.len, 5);
	assert_memory_equal(m.topic.p, "d/1/c", 5);
	assert_int_equal(m.corr_len, 16);
	assert_memory_equal(m.corr, corr, 16);
	assert_int_equal(m.len, 2);
	assert_memory_equal(m.payload, "hi", 2);
	mqc_buf_free(&b);
	/* 3.1.1: no properties, QoS 0 has no packet identifier */
	assert_int_equal(mqc_enc_publish(&b, 4, "t", 0, true, 0, &pp, "x", 1), 0);
	assert_bytes(&b, BYTES(0x31, 4, 0, 1, 't', 'x'), 6);
	pk = frame(b.data, 6);
	assert_null(mqc_dec_publish(&pk, 4, &m));
	assert_true(m.retain);
	assert_null(m.corr);
	mqc_buf_free(&b);
}

static void subscribe_unsubscribe_acks_ping_disconnect(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	assert_int_equal(
	    mqc_enc_subscribe(&b, 5, 9, "a/#", 1, MQC_SUBOPT_NO_LOCAL | MQC_SUBOPT_RETAIN_NEVER, 300),
	    0);
	/* id 9, properties: 0x0B varint 300 = 0xAC 0x02, filter, options 0x25 */
	assert_bytes(&b, BYTES(0x82, 12, 0, 9, 3, 0x0B, 0xAC, 0x02, 0, 3, 'a', '/', '#', 0x25), 14);
	mqc_buf_free(&b);
	assert_int_equal(mqc_enc_subscribe(&b, 4, 9, "a", 2, MQC_SUBOPT_NO_LOCAL, 300), 0);
	assert_bytes(&b, BYTES(0x82, 6, 0, 9, 0, 1, 'a', 2), 8);
	mqc_buf_free(&b);
	assert_int_equal(mqc_enc_unsubscribe(&b, 5, 10, "a"), 0);
	assert_bytes(&b, BYTES(0xA2, 6, 0, 10, 0, 0, 1, 'a'), 8);
	mqc_buf_free(&b);
	assert_int_equal(mqc_enc_ack(&b, MQC_PUBACK, 1), 0);
	assert_int_equal(mqc_enc_ack(&b, MQC_PUBREL, 2), 0);
	assert_int_equal(mqc_enc_pingreq(&b), 0);
	assert_int_equal(mqc_enc_disconnect(&b, 5, 0), 0);
	assert_int_equal(mqc_enc_disconnect(&b, 5, 0x8D), 0);
	assert_bytes(&b, BYTES(0x40, 2, 0, 1, 0x62, 2, 0, 2, 0xC0, 0, 0xE0, 0, 0xE0, 1, 0x8D), 15);
	assert_int_equal(mqc_enc_ack(&b, MQC_PUBACK, 0), MQC_ENC_INVALID); /* id 0 does not exist */
	assert_int_equal(mqc_enc_publish(&b, 5, "t", 1, false, 0, NULL, "", 0), MQC_ENC_INVALID);
	assert_int_equal(mqc_buf_live(&b), 15); /* refusals write nothing */
	mqc_buf_free(&b);
}

/* What the client announces is valid: a Maximum Packet Size no larger than a packet can be (the
 * Paho test broker asserts above 268,435,455), and never 0 (a protocol error: left out). */
static void connect_announces_valid_limits(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	struct mqc_connect c = { .protocol = 5, .client_id = "c", .max_packet = MQC_MAX_PACKET };
	assert_int_equal(mqc_enc_connect(&b, &c), MQC_ENC_OK);
	assert_true(MQC_MAX_PACKET <= 268435455u);
	struct mqc_packet pk = frame(b.data, mqc_buf_live(&b));
	/* properties after the 10-byte variable header's first part: length 8, 0x27 and 4 bytes */
	assert_int_equal(pk.body[10], 8);
	assert_int_equal(pk.body[11], MQC_PROP_MAXIMUM_PACKET_SIZE);
	uint32_t v = (uint32_t)pk.body[12] << 24 | (uint32_t)pk.body[13] << 16
	    | (uint32_t)pk.body[14] << 8 | pk.body[15];
	assert_int_equal(v, 268435455u);
	mqc_buf_free(&b);
	c.max_packet = 0;
	c.receive_max = 0;
	assert_int_equal(mqc_enc_connect(&b, &c), MQC_ENC_OK);
	pk = frame(b.data, mqc_buf_live(&b));
	assert_int_equal(pk.body[10], 3); /* only Topic Alias Maximum 0: no zero-valued limits */
	assert_int_equal(pk.body[11], MQC_PROP_TOPIC_ALIAS_MAXIMUM);
	mqc_buf_free(&b);
}

/* mqc_publish_size is the encoded size exactly, across every step of the Remaining Length (127
 * and 128, 16,383 and 16,384, 2,097,151 and 2,097,152 bytes of body), and a peer's Maximum Packet
 * Size is kept to the byte: at it encodes, one byte over is MQC_ENC_TOOBIG and writes nothing. */
static void publish_size_is_exact_and_the_peers_limit_kept(void **state)
{
	(void)state;
	static unsigned char payload[2097152 + 16];
	const size_t bodies[] = { 127, 128, 16383, 16384, 2097151, 2097152 };
	struct mqc_pub_props pp = { .response_topic = "in/x", .has_expiry = true, .expiry_s = 9 };
	for (int protocol = 4; protocol <= 5; protocol++)
		for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
			/* topic "t" (3) + id (2) + properties (v5: 1 + 5 + 7) + payload = the body */
			size_t over = 3 + 2 + (protocol == 5 ? 13 : 0);
			size_t len = bodies[i] - over;
			size_t size = mqc_publish_size(protocol, "t", 1, &pp, len);
			struct mqc_buf b = { .max_packet = size };
			assert_int_equal(
			    mqc_enc_publish(&b, protocol, "t", 1, false, 1, &pp, payload, len), MQC_ENC_OK);
			assert_int_equal(mqc_buf_live(&b), size);
			struct mqc_packet pk = frame(b.data, size);
			assert_int_equal(pk.body_len, bodies[i]);
			mqc_buf_free(&b);
			b = (struct mqc_buf) { .max_packet = size - 1 };
			assert_int_equal(
			    mqc_enc_publish(&b, protocol, "t", 1, false, 1, &pp, payload, len), MQC_ENC_TOOBIG);
			assert_int_equal(mqc_buf_live(&b), 0);
			mqc_buf_free(&b);
		}
	/* The most MQTT can carry: a Remaining Length of 268,435,455. One byte more cannot be
	 * encoded at all: too big, never "out of memory" (nothing is allocated to find out). */
	size_t most = MQC_REMAINING_MAX - 3;
	assert_int_equal(mqc_publish_size(4, "t", 0, NULL, most), (size_t)MQC_REMAINING_MAX + 5);
	assert_int_equal(mqc_publish_size(4, "t", 0, NULL, most + 1), SIZE_MAX);
	struct mqc_buf b = { 0 };
	assert_int_equal(
	    mqc_enc_publish(&b, 4, "t", 0, false, 0, NULL, payload, (size_t)256 << 20), MQC_ENC_TOOBIG);
	assert_int_equal(mqc_buf_live(&b), 0);
	/* Strings past 65,535 bytes are too big too. */
	static char topic[65537];
	memset(topic, 'x', sizeof topic - 1);
	assert_int_equal(mqc_enc_publish(&b, 5, topic, 0, false, 0, NULL, "", 0), MQC_ENC_TOOBIG);
	assert_int_equal(mqc_enc_subscribe(&b, 5, 1, topic, 0, 0, 0), MQC_ENC_TOOBIG);
	assert_int_equal(mqc_buf_live(&b), 0);
	mqc_buf_free(&b);
}

/* A v5 CONNACK's capabilities: every "... Available" flag, the Topic Alias Maximum and a Server
 * Reference; an availability of 2 is malformed. */
static void connack_capabilities(void **state)
{
	(void)state;
	unsigned char ok[] = { 0x20, 20, 0, 0x9C, 17, MQC_PROP_RETAIN_AVAILABLE, 0,
		MQC_PROP_WILDCARD_SUBSCRIPTION_AVAILABLE, 0, MQC_PROP_SHARED_SUBSCRIPTION_AVAILABLE, 0,
		MQC_PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE, 0, MQC_PROP_TOPIC_ALIAS_MAXIMUM, 0, 10,
		MQC_PROP_SERVER_REFERENCE, 0, 3, 'b', ':', '1' };
	struct mqc_packet pk = frame(ok, sizeof ok);
	struct mqc_connack a;
	assert_null(mqc_dec_connack(&pk, 5, &a));
	assert_int_equal(a.code, 0x9C);
	assert_false(
	    a.retain_available || a.wildcards_available || a.shared_available || a.sub_ids_available);
	assert_int_equal(a.topic_alias_max, 10);
	assert_int_equal(a.server_ref.len, 3);
	assert_memory_equal(a.server_ref.p, "b:1", 3);
	unsigned char bad[] = { 0x20, 5, 0, 0, 2, MQC_PROP_WILDCARD_SUBSCRIPTION_AVAILABLE, 2 };
	pk = frame(bad, sizeof bad);
	assert_non_null(mqc_dec_connack(&pk, 5, &a));
}

static void frames_split_anywhere(void **state)
{
	(void)state;
	/* two packets back to back: every prefix either frames the first or asks for more */
	const unsigned char two[] = { 0xD0, 0, 0x30, 0x83, 0x01, 0, 1, 't' };
	unsigned char big[3 + 131];
	memcpy(big, two + 2, 3);
	memset(big + 3, 'x', sizeof big - 3);
	big[3] = 0;
	big[4] = 1;
	big[5] = 't';
	struct mqc_packet pk;
	mqc_malformed why;
	for (size_t n = 0; n < 2; n++)
		assert_int_equal(mqc_frame(two, n, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_MORE);
	assert_int_equal(mqc_frame(two, 2, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_OK);
	assert_int_equal(pk.type, MQC_PINGRESP);
	for (size_t n = 0; n < sizeof big; n++)
		assert_int_equal(mqc_frame(big, n, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_MORE);
	assert_int_equal(mqc_frame(big, sizeof big, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_OK);
	assert_int_equal(pk.body_len, 131);
	assert_int_equal(mqc_frame(big, sizeof big, 100, &pk, &why), MQC_FRAME_BAD);
	assert_non_null(strstr(why, "Maximum Packet Size"));
	const unsigned char five[] = { 0x30, 0xff, 0xff, 0xff, 0xff, 0x01 };
	assert_int_equal(mqc_frame(five, sizeof five, MQC_MAX_PACKET, &pk, &why), MQC_FRAME_BAD);
	assert_non_null(strstr(why, "four bytes"));
}

static void connack_v5_properties(void **state)
{
	(void)state;
	/* what mosquitto 2.0 sends: Receive Maximum 20, Topic Alias Maximum 10, and an assigned id */
	const unsigned char ack[]
	    = { 0x20, 17, 0, 0, 14, 0x21, 0, 20, 0x22, 0, 10, 0x12, 0, 3, 'a', 'b', 'c', 0x24, 1 };
	struct mqc_packet pk = frame(ack, sizeof ack);
	struct mqc_connack c;
	assert_null(mqc_dec_connack(&pk, 5, &c));
	assert_int_equal(c.code, 0);
	assert_false(c.v311_form);
	assert_int_equal(c.receive_max, 20);
	assert_int_equal(c.max_qos, 1);
	assert_int_equal(c.assigned_id.len, 3);
	assert_true(c.retain_available);
	/* a refusal with a Reason String */
	const unsigned char no[] = { 0x20, 8, 0, 0x87, 5, 0x1F, 0, 2, 'n', 'o' };
	pk = frame(no, sizeof no);
	assert_null(mqc_dec_connack(&pk, 5, &c));
	assert_int_equal(c.code, 0x87);
	assert_int_equal(c.reason.len, 2);
}

static void connack_311_answer_to_v5(void **state)
{
	(void)state;
	/* aedes answers a v5 CONNECT with a 3.1.1 CONNACK: return code 1, two bytes */
	const unsigned char ack[] = { 0x20, 2, 0, 1 };
	struct mqc_packet pk = frame(ack, sizeof ack);
	struct mqc_connack c;
	assert_null(mqc_dec_connack(&pk, 5, &c));
	assert_true(c.v311_form);
	assert_int_equal(c.code, 1);
	assert_null(mqc_dec_connack(&pk, 4, &c));
	assert_true(c.v311_form);
	const unsigned char longer[] = { 0x20, 3, 0, 0, 0 };
	pk = frame(longer, sizeof longer);
	assert_non_null(mqc_dec_connack(&pk, 4, &c));
}

static void publish_sub_ids_and_aliases(void **state)
{
	(void)state;
	/* two Subscription Identifiers (one copy for two subscriptions), then a Topic Alias */
	const unsigned char two[] = { 0x30, 9, 0, 1, 't', 4, 0x0B, 7, 0x0B, 9, 'x' };
	struct mqc_packet pk = frame(two, sizeof two);
	struct mqc_publish m;
	assert_null(mqc_dec_publish(&pk, 5, &m));
	assert_int_equal(m.n_sub_ids, 2);
	assert_int_equal(m.sub_ids[0], 7);
	assert_int_equal(m.sub_ids[1], 9);
	const unsigned char alias[] = { 0x30, 7, 0, 1, 't', 3, 0x23, 0, 1 };
	pk = frame(alias, sizeof alias);
	assert_non_null(strstr(mqc_dec_publish(&pk, 5, &m), "Topic Alias"));
	const unsigned char twice[] = { 0x30, 12, 0, 1, 't', 8, 0x09, 0, 1, 'a', 0x09, 0, 1, 'b' };
	pk = frame(twice, sizeof twice);
	assert_non_null(strstr(mqc_dec_publish(&pk, 5, &m), "repeated"));
}

static void malformed_is_named(void **state)
{
	(void)state;
	struct {
		const unsigned char *b;
		size_t len;
		int protocol;
		const char *why;
	} cases[] = {
		{ BYTES(0x36, 3, 0, 1, 't'), 5, 5, "QoS 3" },
		{ BYTES(0x38, 4, 0, 1, 't', 0), 6, 5, "DUP" },
		{ BYTES(0x32, 5, 0, 1, 't', 0, 0), 7, 4, "identifier 0" },
		{ BYTES(0x30, 4, 0, 9, 't', 0), 6, 5, "runs past" },
		{ BYTES(0x30, 5, 0, 1, 0xC0, 0x80, 0), 7, 5, "UTF-8" },
		{ BYTES(0x30, 5, 0, 1, 't', 9, 0x02), 7, 5, "run past" },
		{ BYTES(0x30, 5, 0, 1, 't', 1, 0x7F), 7, 5, "unknown property" },
		{ BYTES(0x30, 6, 0, 1, 't', 2, 0x0B, 0), 8, 5, "of 0" },
		{ BYTES(0x30, 3, 0, 0, 0), 5, 5, "without a topic" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct mqc_packet pk = frame(cases[i].b, cases[i].len);
		struct mqc_publish m;
		mqc_malformed why = mqc_dec_publish(&pk, cases[i].protocol, &m);
		if (!why || !strstr(why, cases[i].why))
			fail_msg("case %zu: wanted '%s', got '%s'", i, cases[i].why, why ? why : "(none)");
	}
	struct mqc_ack a;
	struct mqc_packet pk = frame(BYTES(0x60, 2, 0, 1), 4); /* PUBREL must have flags 0010 */
	assert_non_null(mqc_dec_ack(&pk, 5, &a));
	pk = frame(BYTES(0x40, 2, 0, 0), 4);
	assert_non_null(mqc_dec_ack(&pk, 5, &a));
	pk = frame(BYTES(0x40, 4, 0, 3, 0x10, 0), 6); /* v5: reason and empty properties */
	assert_null(mqc_dec_ack(&pk, 5, &a));
	assert_int_equal(a.mid, 3);
	assert_int_equal(a.reason, 0x10);
	pk = frame(BYTES(0x40, 3, 0, 3, 0x10), 5);
	assert_non_null(mqc_dec_ack(&pk, 4, &a)); /* no reason codes in 3.1.1 */
	struct mqc_suback s;
	pk = frame(BYTES(0x90, 2, 0, 1), 4);
	assert_non_null(mqc_dec_suback(&pk, 4, &s)); /* a SUBACK needs a return code */
	pk = frame(BYTES(0x90, 4, 0, 1, 0, 0x87), 6);
	assert_null(mqc_dec_suback(&pk, 5, &s));
	assert_int_equal(s.count, 1);
	assert_int_equal(s.codes[0], 0x87);
	pk = frame(BYTES(0xB0, 2, 0, 1), 4); /* a 3.1.1 UNSUBACK has no codes */
	assert_null(mqc_dec_suback(&pk, 4, &s));
	struct mqc_disconnect d;
	pk = frame(BYTES(0xE0, 7, 0x8B, 5, 0x1F, 0, 2, 'b', 'y'), 9);
	assert_null(mqc_dec_disconnect(&pk, 5, &d));
	assert_int_equal(d.reason, 0x8B);
	assert_int_equal(d.text.len, 2);
	pk = frame(BYTES(0xE0, 0), 2);
	assert_non_null(mqc_dec_disconnect(&pk, 4, &d)); /* 3.1.1 brokers send none */
}

static void utf8_rules(void **state)
{
	(void)state;
	assert_true(mqc_utf8_valid("plain/ascii", 11));
	assert_true(mqc_utf8_valid("\xc3\xa9t\xc3\xa9", 5)); /* é */
	assert_true(mqc_utf8_valid("\xf0\x9f\x98\x80", 4));  /* U+1F600 */
	assert_false(mqc_utf8_valid("a\0b", 3));             /* U+0000 */
	assert_false(mqc_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
	assert_false(mqc_utf8_valid("\xed\xa0\x80", 3));     /* a surrogate */
	assert_false(mqc_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
	assert_false(mqc_utf8_valid("\xe2\x82", 2));         /* cut short */
	assert_false(mqc_utf8_valid("\xff", 1));
}

/* A long password (a JWT, say) is written whole; one over MQTT's 65,535 bytes is "too big", and
 * the buffer is as it was. */
static void connect_long_credentials(void **state)
{
	(void)state;
	static char jwt[2001], huge[70000];
	memset(jwt, 'j', sizeof jwt - 1);
	memset(huge, 'h', sizeof huge - 1);
	struct mqc_buf b = { 0 };
	struct mqc_connect c = { .protocol = 5, .client_id = "c", .username = "u", .password = jwt };
	assert_int_equal(mqc_enc_connect(&b, &c), MQC_ENC_OK);
	struct mqc_packet pk = frame(b.data + b.off, mqc_buf_live(&b));
	assert_int_equal(pk.type, MQC_CONNECT);
	assert_memory_equal(b.data + b.len - 2000, jwt, 2000);
	size_t before = mqc_buf_live(&b);
	c.password = huge;
	assert_int_equal(mqc_enc_connect(&b, &c), MQC_ENC_TOOBIG);
	assert_int_equal(mqc_buf_live(&b), before);
	mqc_buf_free(&b);
}

/* Codes in words: a 3.1.1 return code is read as one, an MQTT 5 reason code as one, and a code
 * neither defines is said so. */
static void codes_in_words(void **state)
{
	(void)state;
	assert_string_equal(mqc_connack_text(5, true), "not authorized");
	assert_string_equal(mqc_connack_text(1, true), "unacceptable protocol version");
	assert_string_equal(mqc_connack_text(9, true), "a return code 3.1.1 does not define");
	assert_string_equal(mqc_connack_text(0x87, false), "not authorized");
	assert_string_equal(mqc_connack_text(0x84, false), "unsupported protocol version");
	assert_string_equal(
	    mqc_connack_text(0x10, false), "a reason code that is not one of CONNACK's");
	assert_string_equal(mqc_connack_text(0, false), "accepted");
	assert_string_equal(mqc_reason_text(MQC_RC_PACKET_TOO_LARGE), "packet too large");
	assert_string_equal(mqc_reason_text(0xA2), "wildcard subscriptions not supported");
	assert_string_equal(mqc_reason_text(0xA3), "a reason code MQTT 5 does not define");
}

static void buffer_limit_and_reuse(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	assert_int_equal(mqc_buf_reserve(&b, 100, 64), -1);
	assert_int_equal(mqc_buf_reserve(&b, 10, 64), 0);
	memcpy(b.data, "0123456789", 10);
	b.len = 10;
	mqc_buf_consume(&b, 4);
	assert_int_equal(mqc_buf_live(&b), 6);
	assert_int_equal(mqc_buf_reserve(&b, 58, 64), 0); /* 6 live + 58 = the limit */
	assert_memory_equal(b.data + b.off, "456789", 6);
	assert_int_equal(mqc_buf_reserve(&b, 59, 64), -1);
	mqc_buf_consume(&b, 6);
	assert_int_equal(b.len, 0);
	mqc_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connect_v5_and_311),
		cmocka_unit_test(connect_announces_valid_limits),
		cmocka_unit_test(publish_size_is_exact_and_the_peers_limit_kept),
		cmocka_unit_test(connack_capabilities),
		cmocka_unit_test(publish_with_properties_roundtrips),
		cmocka_unit_test(subscribe_unsubscribe_acks_ping_disconnect),
		cmocka_unit_test(frames_split_anywhere),
		cmocka_unit_test(connack_v5_properties),
		cmocka_unit_test(connack_311_answer_to_v5),
		cmocka_unit_test(publish_sub_ids_and_aliases),
		cmocka_unit_test(malformed_is_named),
		cmocka_unit_test(utf8_rules),
		cmocka_unit_test(buffer_limit_and_reuse),
		cmocka_unit_test(connect_long_credentials),
		cmocka_unit_test(codes_in_words),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
