/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * codec.c - MQTT 5 and 3.1.1 packets as bytes (codec.h). Every read is checked against the end
 * of its packet before it happens; every write against the room reserved for it.
 */
#include "mqc_codec.h"

#include <stdlib.h>
#include <string.h>

/* --- the byte buffer ---------------------------------------------------------------------- */

int mqc_buf_reserve(struct mqc_buf *b, size_t more, size_t limit)
{
	size_t live = b->len - b->off;
	if (more > limit || live > limit - more)
		return -1;
	if (b->cap - b->len >= more)
		return 0;
	if (b->off) { /* the consumed front first: often that is room enough */
		memmove(b->data, b->data + b->off, live);
		b->len = live;
		b->off = 0;
		if (b->cap - b->len >= more)
			return 0;
	}
	size_t want = b->cap ? b->cap : 4096;
	while (want - live < more)
		want = want > SIZE_MAX / 2 ? SIZE_MAX : want * 2;
	unsigned char *grown = realloc(b->data, want);
	if (!grown)
		return -1;
	b->data = grown;
	b->cap = want;
	return 0;
}

void mqc_buf_consume(struct mqc_buf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0; /* empty: start at the front again */
}

void mqc_buf_free(struct mqc_buf *b)
{
	free(b->data);
	*b = (struct mqc_buf) { 0 };
}

/* --- writing ------------------------------------------------------------------------------ */

/* A packet is built in a writer over the buffer's free space; nothing counts until commit. */
struct writer {
	unsigned char *p;
	size_t n, cap;
	bool bad; /* a value that cannot be encoded, or past cap */
};

static void put(struct writer *w, const void *src, size_t len)
{
	if (w->bad || w->cap - w->n < len) {
		w->bad = true;
		return;
	}
	if (len)
		memcpy(w->p + w->n, src, len);
	w->n += len;
}

static void put_u8(struct writer *w, unsigned v)
{
	unsigned char c = (unsigned char)v;
	put(w, &c, 1);
}

static void put_u16(struct writer *w, unsigned v)
{
	unsigned char c[2] = { (unsigned char)(v >> 8), (unsigned char)v };
	put(w, c, 2);
}

static void put_u32(struct writer *w, uint32_t v)
{
	unsigned char c[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16),
		(unsigned char)(v >> 8), (unsigned char)v };
	put(w, c, 4);
}

static size_t varint_size(size_t v)
{
	return v < 128 ? 1 : v < 16384 ? 2 : v < 2097152 ? 3 : 4;
}

static void put_varint(struct writer *w, size_t v)
{
	if (v > 268435455u) {
		w->bad = true;
		return;
	}
	do {
		unsigned char c = (unsigned char)(v % 128);
		v /= 128;
		put_u8(w, c | (v ? 0x80u : 0u));
	} while (v);
}

static void put_bin(struct writer *w, const void *p, size_t len)
{
	if (len > 65535) {
		w->bad = true;
		return;
	}
	put_u16(w, (unsigned)len);
	put(w, p, len);
}

static void put_str(struct writer *w, const char *s)
{
	put_bin(w, s, strlen(s));
}

/* Encode one packet: the body's size is known first (computed by the caller), so the fixed
 * header goes straight in front of it and nothing moves. */
static int begin(struct mqc_buf *b, struct writer *w, unsigned first, size_t body)
{
	if (body > MQC_MAX_PACKET)
		return -1;
	size_t total = 1 + varint_size(body) + body;
	if (mqc_buf_reserve(b, total, (size_t)MQC_MAX_PACKET + 8) != 0)
		return -1;
	*w = (struct writer) { .p = b->data + b->len, .cap = total };
	put_u8(w, first);
	put_varint(w, body);
	return 0;
}

static int commit(struct mqc_buf *b, const struct writer *w)
{
	if (w->bad || w->n != w->cap)
		return -1; /* b->len untouched: the packet never happened */
	b->len += w->n;
	return 0;
}

static size_t str_size(const char *s)
{
	return 2 + strlen(s);
}

int mqc_enc_connect(struct mqc_buf *b, const struct mqc_connect *c)
{
	bool v5 = c->protocol == 5;
	if (!c->client_id || strlen(c->client_id) > 65535
	    || (c->username && strlen(c->username) > 65535)
	    || (c->password && strlen(c->password) > 65535))
		return -1;
	/* MQTT 5 properties: Receive Maximum, Maximum Packet Size, Topic Alias Maximum 0 */
	size_t props = (c->receive_max ? 3 : 0) + (c->max_packet ? 5 : 0) + 3;
	size_t body = 6 + 1 + 1 + 2 + (v5 ? varint_size(props) + props : 0) + str_size(c->client_id)
	    + (c->username ? str_size(c->username) : 0) + (c->password ? str_size(c->password) : 0);
	struct writer w;
	if (begin(b, &w, MQC_CONNECT << 4, body) != 0)
		return -1;
	put_str(&w, "MQTT");
	put_u8(&w, v5 ? 5 : 4);
	put_u8(&w, 0x02u | (c->username ? 0x80u : 0u) | (c->password ? 0x40u : 0u)); /* clean start */
	put_u16(&w, c->keepalive_s);
	if (v5) {
		put_varint(&w, props);
		if (c->receive_max) {
			put_u8(&w, 0x21);
			put_u16(&w, c->receive_max);
		}
		if (c->max_packet) {
			put_u8(&w, 0x27);
			put_u32(&w, c->max_packet);
		}
		put_u8(&w, 0x22); /* Topic Alias Maximum: the pool takes no aliases */
		put_u16(&w, 0);
	}
	put_str(&w, c->client_id);
	if (c->username)
		put_str(&w, c->username);
	if (c->password)
		put_str(&w, c->password);
	return commit(b, &w);
}

int mqc_enc_publish(struct mqc_buf *b, int protocol, const char *topic, int qos, bool retain,
    uint16_t mid, const struct mqc_pub_props *pp, const void *payload, size_t len)
{
	bool v5 = protocol == 5;
	if (qos < 0 || qos > 2 || (qos && !mid) || strlen(topic) > 65535)
		return -1;
	size_t props = 0;
	if (v5 && pp) {
		if (pp->response_topic)
			props += 1 + str_size(pp->response_topic);
		if (pp->corr)
			props += 1 + 2 + pp->corr_len;
		if (pp->has_expiry)
			props += 5;
	}
	if (len > MQC_MAX_PACKET)
		return -1;
	size_t body = str_size(topic) + (qos ? 2 : 0) + (v5 ? varint_size(props) + props : 0) + len;
	struct writer w;
	if (begin(b, &w, (unsigned)(MQC_PUBLISH << 4 | qos << 1 | (retain ? 1 : 0)), body) != 0)
		return -1;
	put_str(&w, topic);
	if (qos)
		put_u16(&w, mid);
	if (v5) {
		put_varint(&w, props);
		if (pp && pp->has_expiry) {
			put_u8(&w, 0x02);
			put_u32(&w, pp->expiry_s);
		}
		if (pp && pp->response_topic) {
			put_u8(&w, 0x08);
			put_str(&w, pp->response_topic);
		}
		if (pp && pp->corr) {
			put_u8(&w, 0x09);
			put_bin(&w, pp->corr, pp->corr_len);
		}
	}
	put(&w, payload, len);
	return commit(b, &w);
}

int mqc_enc_subscribe(struct mqc_buf *b, int protocol, uint16_t mid, const char *filter, int qos,
    int options, uint32_t sub_id)
{
	bool v5 = protocol == 5;
	if (!mid || qos < 0 || qos > 2 || strlen(filter) > 65535 || sub_id > 268435455u)
		return -1;
	size_t props = v5 && sub_id ? 1 + varint_size(sub_id) : 0;
	size_t body = 2 + (v5 ? varint_size(props) + props : 0) + str_size(filter) + 1;
	struct writer w;
	if (begin(b, &w, MQC_SUBSCRIBE << 4 | 0x2, body) != 0)
		return -1;
	put_u16(&w, mid);
	if (v5) {
		put_varint(&w, props);
		if (sub_id) {
			put_u8(&w, 0x0B);
			put_varint(&w, sub_id);
		}
	}
	put_str(&w, filter);
	put_u8(&w, (unsigned)qos | (v5 ? (unsigned)options & 0x3cu : 0u));
	return commit(b, &w);
}

int mqc_enc_unsubscribe(struct mqc_buf *b, int protocol, uint16_t mid, const char *filter)
{
	bool v5 = protocol == 5;
	if (!mid || strlen(filter) > 65535)
		return -1;
	size_t body = 2 + (v5 ? 1 : 0) + str_size(filter);
	struct writer w;
	if (begin(b, &w, MQC_UNSUBSCRIBE << 4 | 0x2, body) != 0)
		return -1;
	put_u16(&w, mid);
	if (v5)
		put_varint(&w, 0);
	put_str(&w, filter);
	return commit(b, &w);
}

int mqc_enc_ack(struct mqc_buf *b, int type, uint16_t mid)
{
	if (type < MQC_PUBACK || type > MQC_PUBCOMP || !mid)
		return -1;
	struct writer w;
	/* PUBREL's flags are 0010; success needs no reason code in either protocol */
	if (begin(b, &w, (unsigned)(type << 4 | (type == MQC_PUBREL ? 0x2 : 0)), 2) != 0)
		return -1;
	put_u16(&w, mid);
	return commit(b, &w);
}

int mqc_enc_pingreq(struct mqc_buf *b)
{
	struct writer w;
	if (begin(b, &w, MQC_PINGREQ << 4, 0) != 0)
		return -1;
	return commit(b, &w);
}

int mqc_enc_disconnect(struct mqc_buf *b, int protocol, uint8_t reason)
{
	bool v5 = protocol == 5 && reason != 0; /* normal disconnection needs no body */
	struct writer w;
	if (begin(b, &w, MQC_DISCONNECT << 4, v5 ? 1 : 0) != 0)
		return -1;
	if (v5)
		put_u8(&w, reason);
	return commit(b, &w);
}

/* --- reading ------------------------------------------------------------------------------ */

enum mqc_frame_result mqc_frame(const unsigned char *data, size_t len, size_t max_packet,
    struct mqc_packet *out, mqc_malformed *why)
{
	if (len < 2)
		return MQC_FRAME_MORE;
	size_t body = 0, i = 1;
	for (unsigned shift = 0;; shift += 7, i++) {
		if (i > 4) {
			*why = "remaining length over four bytes";
			return MQC_FRAME_BAD;
		}
		if (i >= len)
			return MQC_FRAME_MORE;
		body |= (size_t)(data[i] & 0x7f) << shift;
		if (!(data[i] & 0x80))
			break;
	}
	size_t header = i + 1;
	if (body > max_packet || header + body > max_packet) {
		*why = "a packet larger than the Maximum Packet Size the pool gave";
		return MQC_FRAME_BAD;
	}
	if (len - header < body)
		return MQC_FRAME_MORE;
	*out = (struct mqc_packet) {
		.type = data[0] >> 4,
		.flags = data[0] & 0x0f,
		.body = data + header,
		.body_len = body,
		.size = header + body,
	};
	return MQC_FRAME_OK;
}

/* A reader over one packet's body: every get checks the end first. */
struct reader {
	const unsigned char *p, *end;
	mqc_malformed bad;
};

static size_t left(const struct reader *r)
{
	return (size_t)(r->end - r->p);
}

static bool need(struct reader *r, size_t n, const char *why)
{
	if (r->bad)
		return false;
	if (left(r) < n) {
		r->bad = why;
		return false;
	}
	return true;
}

static uint8_t get_u8(struct reader *r)
{
	return need(r, 1, "a packet ends early") ? *r->p++ : 0;
}

static uint16_t get_u16(struct reader *r)
{
	if (!need(r, 2, "a packet ends early"))
		return 0;
	uint16_t v = (uint16_t)(r->p[0] << 8 | r->p[1]);
	r->p += 2;
	return v;
}

static uint32_t get_u32(struct reader *r)
{
	if (!need(r, 4, "a packet ends early"))
		return 0;
	uint32_t v
	    = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
	r->p += 4;
	return v;
}

static uint32_t get_varint(struct reader *r)
{
	uint32_t v = 0;
	for (unsigned i = 0; i < 4; i++) {
		uint8_t c = get_u8(r);
		if (r->bad)
			return 0;
		v |= (uint32_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80))
			return v;
	}
	r->bad = "a variable byte integer over four bytes";
	return 0;
}

static struct mqc_str get_bin(struct reader *r)
{
	uint16_t n = get_u16(r);
	struct mqc_str s = { 0 };
	if (!need(r, n, "a string or binary value runs past its packet"))
		return s;
	s.p = (const char *)r->p;
	s.len = n;
	r->p += n;
	return s;
}

static struct mqc_str get_str(struct reader *r)
{
	struct mqc_str s = get_bin(r);
	if (!r->bad && !mqc_utf8_valid(s.p, s.len))
		r->bad = "a string that is not UTF-8";
	return s;
}

bool mqc_utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	while (p < end) {
		unsigned c = *p++;
		if (c == 0)
			return false;
		if (c < 0x80)
			continue;
		unsigned n, min;
		uint32_t cp;
		if ((c & 0xe0) == 0xc0) {
			n = 1, min = 0x80, cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			n = 2, min = 0x800, cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			n = 3, min = 0x10000, cp = c & 0x07;
		} else {
			return false;
		}
		if ((size_t)(end - p) < n)
			return false;
		for (unsigned i = 0; i < n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i] & 0x3fu);
		}
		p += n;
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false; /* overlong, past Unicode, or a surrogate */
	}
	return true;
}

/* One MQTT 5 property: its identifier and value. */
struct prop {
	uint8_t id;
	uint32_t num;       /* byte, two- and four-byte integers, variable byte integer */
	struct mqc_str str; /* strings and binary data; a user property's value */
};

/* The next property of a property block (r ends where the block ends); false at the end or
 * when malformed (r->bad). */
static bool next_prop(struct reader *r, struct prop *pr)
{
	if (r->bad || left(r) == 0)
		return false;
	*pr = (struct prop) { .id = get_u8(r) };
	switch (pr->id) {
		case 0x01: /* Payload Format Indicator */
		case 0x17: /* Request Problem Information */
		case 0x19: /* Request Response Information */
		case 0x24: /* Maximum QoS */
		case 0x25: /* Retain Available */
		case 0x28: /* Wildcard Subscription Available */
		case 0x29: /* Subscription Identifier Available */
		case 0x2A: /* Shared Subscription Available */
			pr->num = get_u8(r);
			break;
		case 0x13: /* Server Keep Alive */
		case 0x21: /* Receive Maximum */
		case 0x22: /* Topic Alias Maximum */
		case 0x23: /* Topic Alias */
			pr->num = get_u16(r);
			break;
		case 0x02: /* Message Expiry Interval */
		case 0x11: /* Session Expiry Interval */
		case 0x18: /* Will Delay Interval */
		case 0x27: /* Maximum Packet Size */
			pr->num = get_u32(r);
			break;
		case 0x0B: /* Subscription Identifier */
			pr->num = get_varint(r);
			if (!r->bad && pr->num == 0)
				r->bad = "a Subscription Identifier of 0";
			break;
		case 0x03: /* Content Type */
		case 0x08: /* Response Topic */
		case 0x12: /* Assigned Client Identifier */
		case 0x15: /* Authentication Method */
		case 0x1A: /* Response Information */
		case 0x1C: /* Server Reference */
		case 0x1F: /* Reason String */
			pr->str = get_str(r);
			break;
		case 0x09: /* Correlation Data */
		case 0x16: /* Authentication Data */
			pr->str = get_bin(r);
			break;
		case 0x26: /* User Property: a name and a value */
			(void)get_str(r);
			pr->str = get_str(r);
			break;
		default:
			r->bad = "an unknown property identifier";
	}
	return !r->bad;
}

/* The property block at r: a reader over it alone, and r moved past it. */
static struct reader props_of(struct reader *r)
{
	uint32_t n = get_varint(r);
	struct reader pr = { .p = r->p, .end = r->p, .bad = r->bad };
	if (need(r, n, "properties run past their packet")) {
		pr.end = r->p + n;
		r->p += n;
	}
	pr.bad = r->bad;
	return pr;
}

/* A property that may appear once appeared again. */
static bool once(struct reader *r, uint64_t *seen, uint8_t id)
{
	uint64_t bit = (uint64_t)1 << (id & 63);
	if (*seen & bit) {
		r->bad = "a property repeated that may appear once";
		return false;
	}
	*seen |= bit;
	return true;
}

mqc_malformed mqc_dec_connack(const struct mqc_packet *pk, int protocol, struct mqc_connack *out)
{
	*out = (struct mqc_connack) {
		.receive_max = 65535,
		.max_qos = 2,
		.retain_available = true,
		.sub_ids_available = true,
	};
	if (pk->flags)
		return "CONNACK with flags";
	struct reader r = { .p = pk->body, .end = pk->body + pk->body_len };
	uint8_t ack = get_u8(&r);
	out->code = get_u8(&r);
	if (r.bad)
		return r.bad;
	if (ack & 0xfe)
		return "CONNACK with reserved flags set";
	out->session_present = ack & 1;
	if (protocol != 5 || left(&r) == 0) {
		/* Two bytes: what a 3.1.1 broker sends, also to a v5 CONNECT it does not understand. */
		out->v311_form = true;
		return left(&r) == 0 ? NULL : "a 3.1.1 CONNACK longer than two bytes";
	}
	struct reader pr = props_of(&r);
	uint64_t seen = 0;
	for (struct prop p; next_prop(&pr, &p);) {
		if (!once(&pr, &seen, p.id))
			break;
		switch (p.id) {
			case 0x21:
				if (p.num == 0)
					pr.bad = "a Receive Maximum of 0";
				out->receive_max = (uint16_t)p.num;
				break;
			case 0x27:
				if (p.num == 0)
					pr.bad = "a Maximum Packet Size of 0";
				out->max_packet = p.num;
				break;
			case 0x24:
				if (p.num > 1)
					pr.bad = "a Maximum QoS other than 0 or 1";
				out->max_qos = (uint8_t)p.num;
				break;
			case 0x25:
				out->retain_available = p.num != 0;
				break;
			case 0x29:
				out->sub_ids_available = p.num != 0;
				break;
			case 0x13:
				out->has_server_keepalive = true;
				out->server_keepalive = (uint16_t)p.num;
				break;
			case 0x12:
				out->assigned_id = p.str;
				break;
			case 0x1F:
				out->reason = p.str;
				break;
			default: /* the rest changes nothing the pool does */
				break;
		}
	}
	if (pr.bad)
		return pr.bad;
	return left(&r) ? "bytes after CONNACK's properties" : NULL;
}

mqc_malformed mqc_dec_publish(const struct mqc_packet *pk, int protocol, struct mqc_publish *out)
{
	*out = (struct mqc_publish) {
		.qos = (pk->flags >> 1) & 3,
		.retain = pk->flags & 1,
		.dup = (pk->flags & 8) != 0,
	};
	if (out->qos == 3)
		return "PUBLISH with QoS 3";
	if (out->qos == 0 && out->dup)
		return "a QoS 0 PUBLISH marked DUP";
	struct reader r = { .p = pk->body, .end = pk->body + pk->body_len };
	out->topic = get_str(&r);
	if (out->qos) {
		out->mid = get_u16(&r);
		if (!r.bad && out->mid == 0)
			return "PUBLISH with packet identifier 0";
	}
	if (protocol == 5) {
		struct reader pr = props_of(&r);
		uint64_t seen = 0;
		for (struct prop p; next_prop(&pr, &p);) {
			if (p.id != 0x0B && p.id != 0x26 && !once(&pr, &seen, p.id))
				break;
			if (p.id == 0x09) {
				out->corr = (const unsigned char *)p.str.p;
				out->corr_len = p.str.len;
			} else if (p.id == 0x0B) {
				if (out->n_sub_ids < MQC_PUB_SUB_IDS)
					out->sub_ids[out->n_sub_ids] = p.num;
				out->n_sub_ids++;
			} else if (p.id == 0x23) {
				pr.bad = "a Topic Alias (the pool allows none)";
			}
		}
		if (pr.bad)
			return pr.bad;
	}
	if (r.bad)
		return r.bad;
	if (out->topic.len == 0)
		return "PUBLISH without a topic";
	out->payload = r.p;
	out->len = left(&r);
	return NULL;
}

/* A reason code and properties after the packet identifier (MQTT 5, both optional). */
static mqc_malformed reason_tail(struct reader *r, int protocol, uint8_t *reason)
{
	*reason = 0;
	if (protocol != 5 || left(r) == 0)
		return left(r) == 0 ? NULL : "bytes after a 3.1.1 acknowledgement";
	*reason = get_u8(r);
	if (left(r)) {
		struct reader pr = props_of(r);
		for (struct prop p; next_prop(&pr, &p);)
			;
		if (pr.bad)
			return pr.bad;
	}
	if (r->bad)
		return r->bad;
	return left(r) ? "bytes after an acknowledgement's properties" : NULL;
}

mqc_malformed mqc_dec_ack(const struct mqc_packet *pk, int protocol, struct mqc_ack *out)
{
	*out = (struct mqc_ack) { 0 };
	if (pk->flags != (pk->type == MQC_PUBREL ? 2 : 0))
		return "an acknowledgement with the wrong flags";
	struct reader r = { .p = pk->body, .end = pk->body + pk->body_len };
	out->mid = get_u16(&r);
	if (r.bad)
		return r.bad;
	if (out->mid == 0)
		return "an acknowledgement of packet identifier 0";
	return reason_tail(&r, protocol, &out->reason);
}

mqc_malformed mqc_dec_suback(const struct mqc_packet *pk, int protocol, struct mqc_suback *out)
{
	*out = (struct mqc_suback) { 0 };
	if (pk->flags)
		return "SUBACK or UNSUBACK with flags";
	struct reader r = { .p = pk->body, .end = pk->body + pk->body_len };
	out->mid = get_u16(&r);
	if (!r.bad && out->mid == 0)
		return "SUBACK or UNSUBACK of packet identifier 0";
	if (protocol == 5) {
		struct reader pr = props_of(&r);
		for (struct prop p; next_prop(&pr, &p);)
			;
		if (pr.bad)
			return pr.bad;
	}
	if (r.bad)
		return r.bad;
	out->codes = r.p;
	out->count = left(&r);
	if (pk->type == MQC_SUBACK && out->count == 0)
		return "SUBACK without a return code";
	return NULL;
}

mqc_malformed mqc_dec_disconnect(
    const struct mqc_packet *pk, int protocol, struct mqc_disconnect *out)
{
	*out = (struct mqc_disconnect) { 0 };
	if (pk->flags)
		return "DISCONNECT with flags";
	if (protocol != 5)
		return "a DISCONNECT from a 3.1.1 broker";
	struct reader r = { .p = pk->body, .end = pk->body + pk->body_len };
	if (left(&r) == 0)
		return NULL; /* normal disconnection */
	out->reason = get_u8(&r);
	if (left(&r)) {
		struct reader pr = props_of(&r);
		uint64_t seen = 0;
		for (struct prop p; next_prop(&pr, &p);) {
			if (p.id != 0x26 && !once(&pr, &seen, p.id))
				break;
			if (p.id == 0x1F)
				out->text = p.str;
		}
		if (pr.bad)
			return pr.bad;
	}
	if (r.bad)
		return r.bad;
	return left(&r) ? "bytes after DISCONNECT's properties" : NULL;
}
