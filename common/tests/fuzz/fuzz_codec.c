/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: the MQTT decoders (common/src/codec.c) on any bytes a broker could send. The first
 * byte picks the protocol (odd: MQTT 5, even: 3.1.1); the rest is framed packet by packet as a
 * connection's receive buffer would be, and every packet goes to the decoder of its type.
 * Checks: no read outside the input (ASan), every view a decoder returns lies inside its packet,
 * and a PUBLISH that decodes encodes back to a packet that decodes to the same values.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int protocol = data[0] & 1 ? 5 : 4;
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
