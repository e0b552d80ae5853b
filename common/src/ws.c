/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * ws.c - MQTT over WebSockets without I/O (mqc_ws.h): the handshake and the frames.
 */
#define _GNU_SOURCE /* memmem */
#include "mqc_ws.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mqc_random.h"

static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"; /* RFC 6455 1.3 */

int mqc_ws_key(char key[MQC_WS_KEY_LEN + 1])
{
	unsigned char raw[16];
	if (mqc_random_bytes(raw, sizeof raw) != 0)
		return -1;
	EVP_EncodeBlock((unsigned char *)key, raw, sizeof raw);
	return 0;
}

void mqc_ws_accept(const char *key, char out[MQC_WS_ACCEPT_LEN + 1])
{
	char joined[128];
	int n = snprintf(joined, sizeof joined, "%.60s%s", key, GUID);
	unsigned char sha[SHA_DIGEST_LENGTH];
	SHA1((const unsigned char *)joined, (size_t)n, sha);
	EVP_EncodeBlock((unsigned char *)out, sha, sizeof sha);
}

static int append(struct mqc_buf *out, const char *s, size_t n)
{
	if (mqc_buf_reserve(out, n, (size_t)MQC_WS_HEAD_MAX * 2) != 0)
		return -1;
	memcpy(out->data + out->len, s, n);
	out->len += n;
	return 0;
}

int mqc_ws_request(struct mqc_buf *out, const char *host, int port, bool tls, const char *path,
    const char *key, const char *extra)
{
	bool has_extra = extra && *extra;
	if (has_extra && (strpbrk(extra, "\r\n") || !strchr(extra, ':')))
		return -1;
	char port_text[8] = "";
	if (port != (tls ? 443 : 80))
		snprintf(port_text, sizeof port_text, ":%d", port);
	bool v6 = strchr(host, ':') != NULL;
	char head[MQC_WS_HEAD_MAX];
	int n = snprintf(head, sizeof head,
	    "GET %s HTTP/1.1\r\n"
	    "Host: %s%s%s%s\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Key: %s\r\n"
	    "Sec-WebSocket-Version: 13\r\n"
	    "Sec-WebSocket-Protocol: mqtt\r\n"
	    "%s%s"
	    "\r\n",
	    path && *path ? path : MQC_WS_DEFAULT_PATH, v6 ? "[" : "", host, v6 ? "]" : "", port_text,
	    key, has_extra ? extra : "", has_extra ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof head)
		return -1;
	return append(out, head, (size_t)n);
}

bool mqc_ws_header(const char *head, size_t len, const char *name, char *value, size_t value_len)
{
	size_t name_len = strlen(name);
	const char *end = head + len;
	const char *line = memchr(head, '\n', len); /* past the request or status line */
	while (line && ++line < end) {
		const char *eol = memchr(line, '\n', (size_t)(end - line));
		const char *stop = eol ? eol : end;
		if ((size_t)(stop - line) > name_len && line[name_len] == ':'
		    && strncasecmp(line, name, name_len) == 0) {
			const char *v = line + name_len + 1;
			while (v < stop && (*v == ' ' || *v == '\t'))
				v++;
			const char *v_end = stop;
			while (v_end > v && (v_end[-1] == '\r' || v_end[-1] == ' ' || v_end[-1] == '\t'))
				v_end--;
			size_t n = (size_t)(v_end - v);
			if (n >= value_len)
				return false;
			memcpy(value, v, n);
			value[n] = '\0';
			return true;
		}
		line = eol;
	}
	return false;
}

/* Does the comma-separated list hold token (case-insensitive)? */
static bool has_token(const char *list, const char *token)
{
	size_t n = strlen(token);
	for (const char *p = list; *p;) {
		p += strspn(p, " \t,");
		size_t len = strcspn(p, ",");
		size_t trimmed = len;
		while (trimmed && (p[trimmed - 1] == ' ' || p[trimmed - 1] == '\t'))
			trimmed--;
		if (trimmed == n && strncasecmp(p, token, n) == 0)
			return true;
		p += len;
	}
	return false;
}

__attribute__((format(printf, 3, 4))) static enum mqc_ws_rc failed(
    char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return MQC_WS_ERROR;
}

/* What a peer sent, fit to be quoted in a message: printable ASCII, at most 80 bytes. */
static void quoted(const char *in, size_t len, char *out, size_t out_len)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 1 < out_len && n < 80; i++) {
		char c = in[i];
		if (c < 0x20 || c >= 0x7f)
			c = '?';
		out[n++] = c;
	}
	out[n] = '\0';
}

enum mqc_ws_rc mqc_ws_response(
    const unsigned char *in, size_t len, const char *key, size_t *used, char *err, size_t errlen)
{
	const char *head = (const char *)in;
	size_t scan = len < MQC_WS_HEAD_MAX ? len : MQC_WS_HEAD_MAX;
	const char *end = memmem(head, scan, "\r\n\r\n", 4);
	if (!end) {
		if (len >= MQC_WS_HEAD_MAX)
			return failed(err, errlen, "%s", "the handshake answer is longer than 8 KiB");
		/* Not HTTP at all (an MQTT port, say) shows in its first bytes. */
		if (memcmp(head, "HTTP/", len < 5 ? len : 5) != 0)
			return failed(err, errlen, "%s",
			    "the answer to the WebSocket handshake is not HTTP (an MQTT port, not a "
			    "WebSocket one?)");
		return MQC_WS_AGAIN;
	}
	size_t head_len = (size_t)(end - head) + 4;
	char status[96] = "", value[256];
	size_t line = 0; /* the status line: up to the first CR or LF (the blank line has both) */
	while (line < head_len && head[line] != '\r' && head[line] != '\n')
		line++;
	quoted(head, line, status, sizeof status);
	if (strncmp(status, "HTTP/1.1 101", 12) != 0 || (status[12] != '\0' && status[12] != ' '))
		return failed(err, errlen,
		    "the server answered the WebSocket handshake with '%s', not 101 Switching "
		    "Protocols (is the path right?)",
		    status);
	if (!mqc_ws_header(head, head_len, "Upgrade", value, sizeof value)
	    || strcasecmp(value, "websocket") != 0)
		return failed(err, errlen, "%s", "the 101 answer has no 'Upgrade: websocket'");
	if (!mqc_ws_header(head, head_len, "Connection", value, sizeof value)
	    || !has_token(value, "upgrade"))
		return failed(err, errlen, "%s", "the 101 answer has no 'Connection: Upgrade'");
	char want[MQC_WS_ACCEPT_LEN + 1];
	mqc_ws_accept(key, want);
	if (!mqc_ws_header(head, head_len, "Sec-WebSocket-Accept", value, sizeof value))
		return failed(err, errlen, "%s", "the 101 answer has no Sec-WebSocket-Accept");
	if (strcmp(value, want) != 0)
		return failed(err, errlen,
		    "the 101 answer's Sec-WebSocket-Accept '%s' is not the one our key asks for", value);
	if (!mqc_ws_header(head, head_len, "Sec-WebSocket-Protocol", value, sizeof value))
		return failed(err, errlen, "%s",
		    "the server did not accept the subprotocol mqtt (no Sec-WebSocket-Protocol in its "
		    "101 answer)");
	if (strcasecmp(value, "mqtt") != 0)
		return failed(err, errlen, "the server chose the subprotocol '%s', not mqtt", value);
	if (mqc_ws_header(head, head_len, "Sec-WebSocket-Extensions", value, sizeof value))
		return failed(
		    err, errlen, "the server turned on the extension '%s', which we did not offer", value);
	*used = head_len;
	return MQC_WS_DONE;
}

/* Masking keys (RFC 6455 10.3: from a strong source, unpredictable to whoever wrote the
 * payload): OpenSSL's DRBG, 64 keys at a time, because each RAND_bytes call costs a getpid()
 * system call (its fork check) and a frame per request would pay it every time. A forked child
 * starts a fresh batch rather than repeat its parent's next keys. */
static _Thread_local unsigned char keys[256];
static _Thread_local size_t keys_used = sizeof keys;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void keys_forked(void)
{
	keys_used = sizeof keys;
}

static void keys_init(void)
{
	pthread_atfork(NULL, NULL, keys_forked);
}

int mqc_ws_mask_key(unsigned char key[4])
{
	pthread_once(&keys_once, keys_init);
	if (keys_used == sizeof keys) {
		if (RAND_bytes(keys, sizeof keys) != 1)
			return -1;
		keys_used = 0;
	}
	memcpy(key, keys + keys_used, 4);
	keys_used += 4;
	return 0;
}

/* p[0..len) XORed with the key, p[0] standing at byte `at` of the payload: eight bytes at a
 * time (the key twice, turned to where p starts; 8 is a multiple of 4, so it stays in phase). */
static void xor_mask(unsigned char *p, size_t len, const unsigned char mask[4], uint64_t at)
{
	unsigned char k8[8];
	for (unsigned j = 0; j < 8; j++)
		k8[j] = mask[(at + j) & 3];
	uint64_t k;
	memcpy(&k, k8, sizeof k);
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, sizeof v);
		v ^= k;
		memcpy(p + i, &v, sizeof v);
	}
	for (; i < len; i++)
		p[i] ^= mask[(at + i) & 3];
}

int mqc_ws_frame(
    struct mqc_buf *out, int opcode, const void *p, size_t len, bool mask, size_t limit)
{
	unsigned char head[MQC_WS_FRAME_HEAD];
	size_t n = 0;
	head[n++] = (unsigned char)(0x80 | (opcode & 0x0f));
	unsigned char m = mask ? 0x80 : 0;
	if (len < 126) {
		head[n++] = (unsigned char)(m | len);
	} else if (len <= 0xffff) {
		head[n++] = m | 126;
		head[n++] = (unsigned char)(len >> 8);
		head[n++] = (unsigned char)len;
	} else {
		head[n++] = m | 127;
		for (int shift = 56; shift >= 0; shift -= 8)
			head[n++] = (unsigned char)((uint64_t)len >> shift);
	}
	unsigned char key[4];
	if (mask && mqc_ws_mask_key(key) != 0)
		return -1;
	if (mask) {
		memcpy(head + n, key, sizeof key);
		n += sizeof key;
	}
	if (mqc_buf_reserve(out, n + len, limit) != 0)
		return -1;
	unsigned char *at = out->data + out->len;
	memcpy(at, head, n);
	if (len)
		memcpy(at + n, p, len);
	if (mask)
		xor_mask(at + n, len, key, 0);
	out->len += n + len;
	return 0;
}

static enum mqc_ws_rc bad(char *err, size_t errlen, const char *why)
{
	return failed(err, errlen, "a WebSocket frame %s", why);
}

/* The header at in[0..avail): its length (0: not all there yet), the payload's in *len. */
static size_t header(const unsigned char *in, size_t avail, uint64_t *len)
{
	if (avail < 2)
		return 0;
	size_t n = 2;
	uint64_t l = in[1] & 0x7f;
	size_t ext = l == 126 ? 2 : l == 127 ? 8 : 0;
	size_t need = n + ext + (in[1] & 0x80 ? 4 : 0);
	if (avail < need)
		return 0;
	if (ext) {
		l = 0;
		for (size_t i = 0; i < ext; i++)
			l = l << 8 | in[n + i];
	}
	*len = l;
	return need;
}

/* The payload of the data frame being read, as much as in holds, onto data. */
static enum mqc_ws_rc take_payload(struct mqc_ws_reader *r, struct mqc_buf *in,
    struct mqc_buf *data, size_t data_limit, char *err, size_t errlen)
{
	size_t avail = mqc_buf_live(in), live = mqc_buf_live(data);
	size_t room = live < data_limit ? data_limit - live : 0;
	size_t n = r->left < avail ? (size_t)r->left : avail;
	n = n < room ? n : room; /* what does not fit waits in in */
	if (n) {
		if (mqc_buf_reserve(data, n, data_limit) != 0)
			return failed(err, errlen, "%s", "out of memory for WebSocket data");
		unsigned char *to = data->data + data->len;
		memcpy(to, in->data + in->off, n);
		if (r->server)
			xor_mask(to, n, r->mask, r->at);
		data->len += n;
		mqc_buf_consume(in, n);
		r->left -= n;
		r->at += n;
	}
	r->in_frame = r->left > 0;
	return MQC_WS_AGAIN;
}

enum mqc_ws_rc mqc_ws_read(struct mqc_ws_reader *r, struct mqc_buf *in, struct mqc_buf *data,
    size_t data_limit, uint64_t frame_max, struct mqc_ws_control *ctl, char *err, size_t errlen)
{
	for (;;) {
		if (r->in_frame) {
			if (take_payload(r, in, data, data_limit, err, errlen) != MQC_WS_AGAIN)
				return MQC_WS_ERROR;
			if (r->in_frame)
				return MQC_WS_AGAIN; /* the input is used up, or data is full */
			continue;
		}
		const unsigned char *p = in->data + in->off;
		uint64_t len = 0;
		size_t head = header(p, mqc_buf_live(in), &len);
		if (!head)
			return MQC_WS_AGAIN;
		bool fin = p[0] & 0x80, masked = p[1] & 0x80;
		int opcode = p[0] & 0x0f;
		if (p[0] & 0x70)
			return bad(err, errlen, "with reserved bits set (no extension was agreed)");
		if (opcode == MQC_WS_TEXT)
			return bad(err, errlen, "of text: MQTT travels in binary frames");
		if (opcode > MQC_WS_BINARY && opcode < MQC_WS_CLOSE)
			return bad(err, errlen, "with a reserved opcode");
		if (opcode > MQC_WS_PONG)
			return bad(err, errlen, "with a reserved control opcode");
		if (masked != r->server)
			return bad(err, errlen,
			    r->server ? "from the client that is not masked (RFC 6455 5.1)"
			              : "from the server that is masked (RFC 6455 5.1)");
		if (opcode >= MQC_WS_CLOSE) {
			if (!fin || len > 125)
				return bad(err, errlen, "for control that is fragmented or over 125 bytes");
			if (mqc_buf_live(in) < head + len)
				return MQC_WS_AGAIN; /* a control frame is taken whole */
			memcpy(ctl->payload, p + head, (size_t)len);
			if (masked)
				xor_mask(ctl->payload, (size_t)len, p + head - 4, 0);
			ctl->len = (size_t)len;
			mqc_buf_consume(in, head + (size_t)len);
			r->frames++;
			if (opcode == MQC_WS_PONG) {
				r->pongs++;
				continue;
			}
			if (opcode == MQC_WS_PING) {
				r->pings++;
				return MQC_WS_GOT_PING;
			}
			if (len == 1)
				return bad(err, errlen, "to close with a one-byte body");
			ctl->code = len >= 2 ? ctl->payload[0] << 8 | ctl->payload[1] : 1005;
			return MQC_WS_GOT_CLOSE;
		}
		if (opcode == MQC_WS_CONTINUATION && !r->in_message)
			return bad(err, errlen, "that continues no message");
		if (opcode == MQC_WS_BINARY && r->in_message)
			return bad(err, errlen, "that begins a message inside a fragmented one");
		if (len > frame_max) {
			char why[96];
			snprintf(why, sizeof why, "of %llu bytes, more than the largest MQTT packet",
			    (unsigned long long)len);
			return bad(err, errlen, why);
		}
		if (masked)
			memcpy(r->mask, p + head - 4, 4);
		mqc_buf_consume(in, head);
		r->frames++;
		r->in_message = !fin;
		r->left = len;
		r->at = 0;
		r->in_frame = len > 0;
	}
}
