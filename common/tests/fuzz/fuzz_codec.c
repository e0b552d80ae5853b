/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: the MQTT codec (common/src/codec.c) both ways. The first byte picks the protocol
 * (bit 0: MQTT 5, else 3.1.1) and the direction (bit 1).
 *
 * Decoding: the rest is any bytes a peer could send, framed packet by packet as a connection's
 * receive buffer would be, every packet to the decoder of its type. Checks: no read outside the
 * input (ASan), every view a decoder returns lies inside its packet, and a PUBLISH that decodes
 * encodes back to a packet that decodes to the same values.
 *
 * Encoding: the rest chooses an encoder and its values (strings, QoS, identifiers, sizes, the
 * peer's Maximum Packet Size). Checks: a packet the encoder wrote frames to exactly its length,
 * is no larger than the peer's limit, and decodes (PUBLISH, the acknowledgements, DISCONNECT) to
 * what was given - the encoder never writes what the decoder refuses; a refusal (too big,
 * invalid) leaves the buffer as it was, and "too big" is only said of a packet that is.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const struct mqc_packet *pk, const void *p, size_t len)
{
	const unsigned char *c = p;
	if (len && (c < pk->body || c + len > pk->body + pk->body_len))
		abort();
}

static void publish_roundtrip(const struct mqc_publish *m, int protocol)
{
	char topic[65536];
	memcpy(topic, m->topic.p, m->topic.len);
	topic[m->topic.len] = '\0';
	struct mqc_pub_props pp = { .corr = m->corr, .corr_len = m->corr_len };
	struct mqc_buf b = { 0 };
	if (mqc_enc_publish(&b, protocol, topic, m->qos, m->retain, m->mid, &pp, m->payload, m->len)
	    != 0)
		abort(); /* what decoded must encode */
	struct mqc_packet pk;
	mqc_malformed why;
	struct mqc_publish again;
	if (mqc_frame(b.data, b.len, MQC_MAX_PACKET, &pk, &why) != MQC_FRAME_OK || pk.size != b.len
	    || mqc_dec_publish(&pk, protocol, &again) != NULL || again.qos != m->qos
	    || again.mid != m->mid || again.len != m->len || again.topic.len != m->topic.len
	    || memcmp(again.topic.p, m->topic.p, m->topic.len) != 0
	    || (m->len && memcmp(again.payload, m->payload, m->len) != 0)
	    || again.corr_len != (m->corr ? m->corr_len : 0))
		abort();
	mqc_buf_free(&b);
}

/* Input bytes taken in order; zeros once they run out. */
struct input {
	const uint8_t *p;
	size_t n;
};

static unsigned take(struct input *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

/* A string of up to max bytes from the input, NUL-terminated in buf (which holds max + 1). */
static const char *take_str(struct input *in, char *buf, size_t max)
{
	size_t n = take(in);
	if (n > max)
		n = max;
	if (n > in->n)
		n = in->n;
	memcpy(buf, in->p, n);
	buf[n] = '\0'; /* an input's own NUL shortens it: a C string cannot hold one */
	in->p += n;
	in->n -= n;
	return buf;
}

/* Frame what the encoder wrote: exactly one packet of its length, within the peer's limit. */
static struct mqc_packet framed(const struct mqc_buf *b, size_t before)
{
	struct mqc_packet pk;
	mqc_malformed why = NULL;
	size_t len = b->len - before;
	if (mqc_frame(b->data + before, len, MQC_MAX_PACKET, &pk, &why) != MQC_FRAME_OK
	    || pk.size != len || (b->max_packet && len > b->max_packet))
		abort();
	return pk;
}

static void encode_one(int protocol, struct input *in)
{
	static char topic[300], other[300], payload[70000];
	unsigned which = take(in) % 7, qos = take(in) % 4, flags = take(in);
	uint16_t mid = (uint16_t)(take(in) << 8 | take(in));
	struct mqc_buf b = { 0 };
	/* Sometimes a peer limit near the packet's own size, to meet its edge. */
	if (flags & 0x80)
		b.max_packet = take(in) + (flags & 0x40 ? 256u : 0u);
	size_t before = b.len;
	int rc = -100;
	switch (which) {
		case 0: {
			struct mqc_connect c = { .protocol = protocol,
				.client_id = take_str(in, topic, 256),
				.username = flags & 1 ? take_str(in, other, 256) : NULL,
				.password = flags & 2 ? "pw" : NULL,
				.keepalive_s = (uint16_t)take(in),
				.receive_max = (uint16_t)take(in),
				.max_packet = flags & 4 ? MQC_MAX_PACKET : take(in) };
			rc = mqc_enc_connect(&b, &c);
			if (rc == MQC_ENC_OK && framed(&b, before).type != MQC_CONNECT)
				abort();
			break;
		}
		case 1: {
			const char *t = take_str(in, topic, 256);
			size_t len = (size_t)take(in) << 8 | take(in);
			if (len > in->n)
				len = in->n;
			memcpy(payload, in->p, len);
			unsigned char corr[16] = { 0 };
			struct mqc_pub_props pp
			    = { .response_topic = flags & 1 ? take_str(in, other, 256) : NULL,
				      .corr = flags & 2 ? corr : NULL,
				      .corr_len = flags & 2 ? sizeof corr : 0,
				      .has_expiry = flags & 4,
				      .expiry_s = take(in) };
			rc = mqc_enc_publish(&b, protocol, t, (int)qos, flags & 8, mid, &pp, payload, len);
			size_t want = mqc_publish_size(protocol, t, (int)qos, &pp, len);
			if (rc == MQC_ENC_OK) {
				if (want != b.len - before)
					abort(); /* the size function and the encoder disagree */
				struct mqc_packet pk = framed(&b, before);
				struct mqc_publish m;
				if (mqc_dec_publish(&pk, protocol, &m) != NULL || (unsigned)m.qos != qos
				    || m.retain != ((flags & 8) != 0) || (qos && m.mid != mid) || m.len != len
				    || m.topic.len != strlen(t) || memcmp(m.topic.p, t, m.topic.len) != 0
				    || (len && memcmp(m.payload, payload, len) != 0)
				    || (protocol == 5 && (flags & 2) && m.corr_len != sizeof corr))
					abort(); /* the encoder wrote what the decoder refuses, or other values */
			} else if (rc == MQC_ENC_TOOBIG && want != SIZE_MAX
			    && (!b.max_packet || want <= b.max_packet) && strlen(t) <= MQC_STR_MAX) {
				abort(); /* "too big" for a packet that fits */
			}
			break;
		}
		case 2:
		case 3: {
			const char *f = take_str(in, topic, 256);
			rc = which == 2
			    ? mqc_enc_subscribe(&b, protocol, mid, f, (int)qos, (int)flags, take(in))
			    : mqc_enc_unsubscribe(&b, protocol, mid, f);
			if (rc == MQC_ENC_OK
			    && framed(&b, before).type != (which == 2 ? MQC_SUBSCRIBE : MQC_UNSUBSCRIBE))
				abort();
			break;
		}
		case 4: {
			int type = MQC_PUBACK + (int)(flags % 4);
			rc = mqc_enc_ack(&b, type, mid);
			if (rc == MQC_ENC_OK) {
				struct mqc_packet pk = framed(&b, before);
				struct mqc_ack a;
				if (pk.type != type || mqc_dec_ack(&pk, protocol, &a) != NULL || a.mid != mid
				    || a.reason != 0)
					abort();
			}
			break;
		}
		case 5:
			rc = mqc_enc_pingreq(&b);
			if (rc == MQC_ENC_OK && framed(&b, before).type != MQC_PINGREQ)
				abort();
			break;
		default: {
			uint8_t reason = (uint8_t)take(in);
			rc = mqc_enc_disconnect(&b, protocol, reason);
			if (rc == MQC_ENC_OK) {
				struct mqc_packet pk = framed(&b, before);
				struct mqc_disconnect d; /* 3.1.1 has a DISCONNECT from clients only */
				if (pk.type != MQC_DISCONNECT
				    || (protocol == 5
				        && (mqc_dec_disconnect(&pk, protocol, &d) != NULL || d.reason != reason)))
					abort();
			}
		}
	}
	if (rc != MQC_ENC_OK && b.len != before)
		abort(); /* a refusal wrote nothing */
	if (rc == MQC_ENC_NOMEM)
		abort(); /* nothing here is large enough to run out */
	mqc_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int protocol = data[0] & 1 ? 5 : 4;
	if (data[0] & 2) {
		struct input in = { data + 1, size - 1 };
		while (in.n)
			encode_one(protocol, &in);
		return 0;
	}
	data++;
	size--;
	while (size) {
		struct mqc_packet pk;
		mqc_malformed why = NULL;
		enum mqc_frame_result fr = mqc_frame(data, size, 1u << 20, &pk, &why);
		if (fr != MQC_FRAME_OK) {
			if (fr == MQC_FRAME_BAD && !why)
				abort();
			return 0;
		}
		if (pk.size > size || pk.body + pk.body_len != data + pk.size)
			abort();
		switch (pk.type) {
			case MQC_CONNACK: {
				struct mqc_connack c;
				if (!mqc_dec_connack(&pk, protocol, &c)) {
					inside(&pk, c.assigned_id.p, c.assigned_id.len);
					inside(&pk, c.reason.p, c.reason.len);
				}
				break;
			}
			case MQC_PUBLISH: {
				struct mqc_publish m;
				if (!mqc_dec_publish(&pk, protocol, &m)) {
					inside(&pk, m.topic.p, m.topic.len);
					inside(&pk, m.payload, m.len);
					inside(&pk, m.corr, m.corr_len);
					if (!mqc_utf8_valid(m.topic.p, m.topic.len))
						abort();
					publish_roundtrip(&m, protocol);
				}
				break;
			}
			case MQC_PUBACK:
			case MQC_PUBREC:
			case MQC_PUBREL:
			case MQC_PUBCOMP: {
				struct mqc_ack a;
				if (!mqc_dec_ack(&pk, protocol, &a) && a.mid == 0)
					abort();
				break;
			}
			case MQC_SUBACK:
			case MQC_UNSUBACK: {
				struct mqc_suback s;
				if (!mqc_dec_suback(&pk, protocol, &s))
					inside(&pk, s.codes, s.count);
				break;
			}
			case MQC_DISCONNECT: {
				struct mqc_disconnect d;
				if (!mqc_dec_disconnect(&pk, protocol, &d))
					inside(&pk, d.text.p, d.text.len);
				break;
			}
			default:
				break;
		}
		data += pk.size;
		size -= pk.size;
	}
	return 0;
}
