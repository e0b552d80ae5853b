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

/* A packet of this body's size, fixed header included; SIZE_MAX past what MQTT can encode. */
static size_t packet_size(size_t body)
{
	return body > MQC_REMAINING_MAX ? SIZE_MAX : 1 + varint_size(body) + body;
}

/* Encode one packet: the body's size is known first (computed by the caller), so the fixed
 * header goes straight in front of it and nothing moves. */
static int begin(struct mqc_buf *b, struct writer *w, unsigned first, size_t body)
{
	size_t total = packet_size(body);
	if (total == SIZE_MAX || (b->max_packet && total > b->max_packet))
		return MQC_ENC_TOOBIG;
	/* A send buffer's own size is ours to bound (memory), not the protocol's. */
	if (mqc_buf_reserve(b, total, SIZE_MAX) != 0)
		return MQC_ENC_NOMEM;
	*w = (struct writer) { .p = b->data + b->len, .cap = total };
	put_u8(w, first);
	put_varint(w, body);
	return MQC_ENC_OK;
}

static int commit(struct mqc_buf *b, const struct writer *w)
{
	if (w->bad || w->n != w->cap)
		return MQC_ENC_TOOBIG; /* b->len untouched: the packet never happened */
	b->len += w->n;
	return MQC_ENC_OK;
}

static size_t str_size(const char *s)
{
	return 2 + strlen(s);
}

/* A string MQTT can carry: UTF-8 without U+0000, at most 65,535 bytes. MQC_ENC_OK, or why not. */
static int str_check(const char *s)
{
	size_t n = strlen(s);
	if (n > MQC_STR_MAX)
		return MQC_ENC_TOOBIG;
	return mqc_utf8_valid(s, n) ? MQC_ENC_OK : MQC_ENC_INVALID;
}

int mqc_enc_connect(struct mqc_buf *b, const struct mqc_connect *c)
{
	bool v5 = c->protocol == 5;
	if (!c->client_id || (c->protocol != 4 && c->protocol != 5))
		return MQC_ENC_INVALID;
	int rc = str_check(c->client_id);
	if (rc == MQC_ENC_OK && c->username)
		rc = str_check(c->username);
	if (rc == MQC_ENC_OK && c->password && strlen(c->password) > MQC_STR_MAX)
		rc = MQC_ENC_TOOBIG; /* binary data: any bytes */
	if (rc != MQC_ENC_OK)
		return rc;
	/* MQTT 5 properties: Receive Maximum, Maximum Packet Size, Topic Alias Maximum 0. Zero is a
	 * protocol error for the first two: they are left out instead (the protocol's defaults). */
	size_t props = (c->receive_max ? 3 : 0) + (c->max_packet ? 5 : 0) + 3;
	size_t body = 6 + 1 + 1 + 2 + (v5 ? varint_size(props) + props : 0) + str_size(c->client_id)
	    + (c->username ? str_size(c->username) : 0) + (c->password ? str_size(c->password) : 0);
	struct writer w;
	rc = begin(b, &w, MQC_CONNECT << 4, body);
	if (rc != MQC_ENC_OK)
		return rc;
	put_str(&w, "MQTT");
	put_u8(&w, v5 ? 5 : 4);
	put_u8(&w, 0x02u | (c->username ? 0x80u : 0u) | (c->password ? 0x40u : 0u)); /* clean start */
	put_u16(&w, c->keepalive_s);
	if (v5) {
		put_varint(&w, props);
		if (c->receive_max) {
			put_u8(&w, MQC_PROP_RECEIVE_MAXIMUM);
			put_u16(&w, c->receive_max);
		}
		if (c->max_packet) {
			put_u8(&w, MQC_PROP_MAXIMUM_PACKET_SIZE);
			put_u32(&w, c->max_packet);
		}
		put_u8(&w, MQC_PROP_TOPIC_ALIAS_MAXIMUM); /* the client takes no aliases */
		put_u16(&w, 0);
	}
	put_str(&w, c->client_id);
	if (c->username)
		put_str(&w, c->username);
	if (c->password)
		put_str(&w, c->password);
	return commit(b, &w);
}

/* The MQTT 5 properties of a PUBLISH, in bytes (without their length). */
static size_t pub_props_size(const struct mqc_pub_props *pp)
{
	size_t n = 0;
	if (pp && pp->response_topic)
		n += 1 + str_size(pp->response_topic);
	if (pp && pp->corr)
		n += 1 + 2 + pp->corr_len;
	if (pp && pp->has_expiry)
		n += 5;
	return n;
}

/* The body of a PUBLISH; SIZE_MAX when a string is too long for MQTT. */
static size_t publish_body(
    int protocol, const char *topic, int qos, const struct mqc_pub_props *pp, size_t len)
{
	bool v5 = protocol == 5;
	size_t props = v5 ? pub_props_size(pp) : 0;
	if (strlen(topic) > 65535
	    || (v5 && pp && pp->response_topic && strlen(pp->response_topic) > 65535)
	    || len > MQC_REMAINING_MAX)
		return SIZE_MAX;
	return str_size(topic) + (qos ? 2 : 0) + (v5 ? varint_size(props) + props : 0) + len;
}

size_t mqc_publish_size(
    int protocol, const char *topic, int qos, const struct mqc_pub_props *pp, size_t len)
{
	size_t body = publish_body(protocol, topic, qos, pp, len);
	return body == SIZE_MAX ? SIZE_MAX : packet_size(body);
}

int mqc_enc_publish(struct mqc_buf *b, int protocol, const char *topic, int qos, bool retain,
    uint16_t mid, const struct mqc_pub_props *pp, const void *payload, size_t len)
{
	bool v5 = protocol == 5;
	if (qos < 0 || qos > 2 || (qos && !mid))
		return MQC_ENC_INVALID;
	int rc = str_check(topic);
	if (rc == MQC_ENC_OK && (!*topic || strpbrk(topic, "+#")))
		rc = MQC_ENC_INVALID; /* a topic name: one character at least, no wildcard */
	if (rc == MQC_ENC_OK && v5 && pp && pp->response_topic)
		rc = str_check(pp->response_topic);
	if (rc != MQC_ENC_OK)
		return rc;
	size_t body = publish_body(protocol, topic, qos, pp, len);
	if (body == SIZE_MAX)
		return MQC_ENC_TOOBIG;
	struct writer w;
	rc = begin(b, &w, (unsigned)(MQC_PUBLISH << 4 | qos << 1 | (retain ? 1 : 0)), body);
	if (rc != MQC_ENC_OK)
		return rc;
	put_str(&w, topic);
	if (qos)
		put_u16(&w, mid);
	if (v5) {
		put_varint(&w, pub_props_size(pp));
		if (pp && pp->has_expiry) {
			put_u8(&w, MQC_PROP_MESSAGE_EXPIRY_INTERVAL);
			put_u32(&w, pp->expiry_s);
		}
		if (pp && pp->response_topic) {
			put_u8(&w, MQC_PROP_RESPONSE_TOPIC);
			put_str(&w, pp->response_topic);
		}
		if (pp && pp->corr) {
			put_u8(&w, MQC_PROP_CORRELATION_DATA);
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
	if (!mid || qos < 0 || qos > 2 || sub_id > MQC_REMAINING_MAX)
		return MQC_ENC_INVALID;
	int rc = str_check(filter);
	if (rc != MQC_ENC_OK)
		return rc;
	size_t props = v5 && sub_id ? 1 + varint_size(sub_id) : 0;
	size_t body = 2 + (v5 ? varint_size(props) + props : 0) + str_size(filter) + 1;
	struct writer w;
	rc = begin(b, &w, MQC_SUBSCRIBE << 4 | 0x2, body);
	if (rc != MQC_ENC_OK)
		return rc;
	put_u16(&w, mid);
	if (v5) {
		put_varint(&w, props);
		if (sub_id) {
			put_u8(&w, MQC_PROP_SUBSCRIPTION_IDENTIFIER);
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
	if (!mid)
		return MQC_ENC_INVALID;
	int rc = str_check(filter);
	if (rc != MQC_ENC_OK)
		return rc;
	size_t body = 2 + (v5 ? 1 : 0) + str_size(filter);
	struct writer w;
	rc = begin(b, &w, MQC_UNSUBSCRIBE << 4 | 0x2, body);
	if (rc != MQC_ENC_OK)
		return rc;
	put_u16(&w, mid);
	if (v5)
		put_varint(&w, 0);
	put_str(&w, filter);
	return commit(b, &w);
}

int mqc_enc_ack(struct mqc_buf *b, int type, uint16_t mid)
{
	if (type < MQC_PUBACK || type > MQC_PUBCOMP || !mid)
		return MQC_ENC_INVALID;
	struct writer w;
	/* PUBREL's flags are 0010; success needs no reason code in either protocol */
	int rc = begin(b, &w, (unsigned)(type << 4 | (type == MQC_PUBREL ? 0x2 : 0)), 2);
	if (rc != MQC_ENC_OK)
		return rc;
	put_u16(&w, mid);
	return commit(b, &w);
}

int mqc_enc_pingreq(struct mqc_buf *b)
{
	struct writer w;
	int rc = begin(b, &w, MQC_PINGREQ << 4, 0);
	return rc != MQC_ENC_OK ? rc : commit(b, &w);
}

int mqc_enc_disconnect(struct mqc_buf *b, int protocol, uint8_t reason)
{
	bool v5 = protocol == 5 && reason != 0; /* normal disconnection needs no body */
	struct writer w;
	int rc = begin(b, &w, MQC_DISCONNECT << 4, v5 ? 1 : 0);
	if (rc != MQC_ENC_OK)
		return rc;
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
		case MQC_PROP_PAYLOAD_FORMAT_INDICATOR:
		case MQC_PROP_REQUEST_PROBLEM_INFORMATION:
		case MQC_PROP_REQUEST_RESPONSE_INFORMATION:
		case MQC_PROP_MAXIMUM_QOS:
		case MQC_PROP_RETAIN_AVAILABLE:
		case MQC_PROP_WILDCARD_SUBSCRIPTION_AVAILABLE:
		case MQC_PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE:
		case MQC_PROP_SHARED_SUBSCRIPTION_AVAILABLE:
			pr->num = get_u8(r);
			break;
		case MQC_PROP_SERVER_KEEP_ALIVE:
		case MQC_PROP_RECEIVE_MAXIMUM:
		case MQC_PROP_TOPIC_ALIAS_MAXIMUM:
		case MQC_PROP_TOPIC_ALIAS:
			pr->num = get_u16(r);
			break;
		case MQC_PROP_MESSAGE_EXPIRY_INTERVAL:
		case MQC_PROP_SESSION_EXPIRY_INTERVAL:
		case MQC_PROP_WILL_DELAY_INTERVAL:
		case MQC_PROP_MAXIMUM_PACKET_SIZE:
			pr->num = get_u32(r);
			break;
		case MQC_PROP_SUBSCRIPTION_IDENTIFIER:
			pr->num = get_varint(r);
			if (!r->bad && pr->num == 0)
				r->bad = "a Subscription Identifier of 0";
			break;
		case MQC_PROP_CONTENT_TYPE:
		case MQC_PROP_RESPONSE_TOPIC:
		case MQC_PROP_ASSIGNED_CLIENT_IDENTIFIER:
		case MQC_PROP_AUTHENTICATION_METHOD:
		case MQC_PROP_RESPONSE_INFORMATION:
		case MQC_PROP_SERVER_REFERENCE:
		case MQC_PROP_REASON_STRING:
			pr->str = get_str(r);
			break;
		case MQC_PROP_CORRELATION_DATA:
		case MQC_PROP_AUTHENTICATION_DATA:
			pr->str = get_bin(r);
			break;
		case MQC_PROP_USER_PROPERTY: /* User Property: a name and a value */
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

/* A property that is 0 or 1 (the "... Available" ones): anything else is malformed. */
static bool flag(struct reader *pr, uint32_t v)
{
	if (v > 1)
		pr->bad = "an availability property other than 0 or 1";
	return v == 1;
}

mqc_malformed mqc_dec_connack(const struct mqc_packet *pk, int protocol, struct mqc_connack *out)
{
	*out = (struct mqc_connack) {
		.receive_max = 65535,
		.max_qos = 2,
		.retain_available = true,
		.sub_ids_available = true,
		.wildcards_available = true,
		.shared_available = true,
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
			case MQC_PROP_RECEIVE_MAXIMUM:
				if (p.num == 0)
					pr.bad = "a Receive Maximum of 0";
				out->receive_max = (uint16_t)p.num;
				break;
			case MQC_PROP_MAXIMUM_PACKET_SIZE:
				if (p.num == 0)
					pr.bad = "a Maximum Packet Size of 0";
				out->max_packet = p.num;
				break;
			case MQC_PROP_MAXIMUM_QOS:
				if (p.num > 1)
					pr.bad = "a Maximum QoS other than 0 or 1";
				out->max_qos = (uint8_t)p.num;
				break;
			case MQC_PROP_RETAIN_AVAILABLE:
				out->retain_available = flag(&pr, p.num);
				break;
			case MQC_PROP_SUBSCRIPTION_IDENTIFIER_AVAILABLE:
				out->sub_ids_available = flag(&pr, p.num);
				break;
			case MQC_PROP_WILDCARD_SUBSCRIPTION_AVAILABLE:
				out->wildcards_available = flag(&pr, p.num);
				break;
			case MQC_PROP_SHARED_SUBSCRIPTION_AVAILABLE:
				out->shared_available = flag(&pr, p.num);
				break;
			case MQC_PROP_TOPIC_ALIAS_MAXIMUM:
				out->topic_alias_max = (uint16_t)p.num;
				break;
			case MQC_PROP_SERVER_REFERENCE:
				out->server_ref = p.str;
				break;
			case MQC_PROP_SERVER_KEEP_ALIVE:
				out->has_server_keepalive = true;
				out->server_keepalive = (uint16_t)p.num;
				break;
			case MQC_PROP_ASSIGNED_CLIENT_IDENTIFIER:
				out->assigned_id = p.str;
				break;
			case MQC_PROP_REASON_STRING:
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
			if (p.id != MQC_PROP_SUBSCRIPTION_IDENTIFIER && p.id != MQC_PROP_USER_PROPERTY
			    && !once(&pr, &seen, p.id))
				break;
			if (p.id == MQC_PROP_CORRELATION_DATA) {
				out->corr = (const unsigned char *)p.str.p;
				out->corr_len = p.str.len;
			} else if (p.id == MQC_PROP_SUBSCRIPTION_IDENTIFIER) {
				if (out->n_sub_ids < MQC_PUB_SUB_IDS)
					out->sub_ids[out->n_sub_ids] = p.num;
				out->n_sub_ids++;
			} else if (p.id == MQC_PROP_TOPIC_ALIAS) {
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
	if (memchr(out->topic.p, '+', out->topic.len) || memchr(out->topic.p, '#', out->topic.len))
		return "a PUBLISH topic with a wildcard";
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
			if (p.id != MQC_PROP_USER_PROPERTY && !once(&pr, &seen, p.id))
				break;
			if (p.id == MQC_PROP_REASON_STRING)
				out->text = p.str;
			else if (p.id == MQC_PROP_SERVER_REFERENCE)
				out->server_ref = p.str;
		}
		if (pr.bad)
			return pr.bad;
	}
	if (r.bad)
		return r.bad;
	return left(&r) ? "bytes after DISCONNECT's properties" : NULL;
}

/* --- codes in words ---------------------------------------------------------------------- */

const char *mqc_connack_text(unsigned code, bool v311)
{
	if (v311) {
		switch (code) {
			case 0:
				return "accepted";
			case 1:
				return "unacceptable protocol version";
			case 2:
				return "client identifier rejected";
			case 3:
				return "server unavailable";
			case 4:
				return "bad user name or password";
			case 5:
				return "not authorized";
			default:
				return "a return code 3.1.1 does not define";
		}
	}
	if (code > 0 && code < 0x80)
		return "a reason code that is not one of CONNACK's";
	return code == 0 ? "accepted" : mqc_reason_text(code);
}

const char *mqc_reason_text(unsigned code)
{
	switch (code) {
		case 0x00:
			return "success";
		case 0x01:
			return "granted QoS 1";
		case 0x02:
			return "granted QoS 2";
		case 0x04:
			return "disconnect with Will message";
		case 0x10:
			return "no matching subscribers";
		case 0x11:
			return "no subscription existed";
		case 0x80:
			return "unspecified error";
		case 0x81:
			return "malformed packet";
		case 0x82:
			return "protocol error";
		case 0x83:
			return "implementation specific error";
		case 0x84:
			return "unsupported protocol version";
		case 0x85:
			return "client identifier not valid";
		case 0x86:
			return "bad user name or password";
		case 0x87:
			return "not authorized";
		case 0x88:
			return "server unavailable";
		case 0x89:
			return "server busy";
		case 0x8A:
			return "banned";
		case 0x8B:
			return "server shutting down";
		case 0x8C:
			return "bad authentication method";
		case 0x8D:
			return "keep alive timeout";
		case 0x8E:
			return "session taken over";
		case 0x8F:
			return "topic filter invalid";
		case 0x90:
			return "topic name invalid";
		case 0x91:
			return "packet identifier in use";
		case 0x92:
			return "packet identifier not found";
		case 0x93:
			return "receive maximum exceeded";
		case 0x94:
			return "topic alias invalid";
		case 0x95:
			return "packet too large";
		case 0x96:
			return "message rate too high";
		case 0x97:
			return "quota exceeded";
		case 0x98:
			return "administrative action";
		case 0x99:
			return "payload format invalid";
		case 0x9A:
			return "retain not supported";
		case 0x9B:
			return "QoS not supported";
		case 0x9C:
			return "use another server";
		case 0x9D:
			return "server moved";
		case 0x9E:
			return "shared subscriptions not supported";
		case 0x9F:
			return "connection rate exceeded";
		case 0xA0:
			return "maximum connect time";
		case 0xA1:
			return "subscription identifiers not supported";
		case 0xA2:
			return "wildcard subscriptions not supported";
		default:
			return "a reason code MQTT 5 does not define";
	}
}

char *mqc_str_dup(struct mqc_str s)
{
	char *out = malloc((size_t)s.len + 1);
	if (!out)
		return NULL;
	if (s.len)
		memcpy(out, s.p, s.len);
	out[s.len] = '\0';
	return out;
}
