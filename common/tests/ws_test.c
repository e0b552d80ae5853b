/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * ws_test.c - unit tests of MQTT over WebSockets (mqc_ws.h): RFC 6455's own example, the
 * handshake answers a client must refuse, and frames split, coalesced, fragmented and wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_ws.h"

#define KEY    "dGhlIHNhbXBsZSBub25jZQ==" /* RFC 6455 1.3 */
#define ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static void the_rfc_example_and_a_fresh_key(void **state)
{
	(void)state;
	char out[MQC_WS_ACCEPT_LEN + 1];
	mqc_ws_accept(KEY, out);
	assert_string_equal(out, ACCEPT);
	char a[MQC_WS_KEY_LEN + 1], b[MQC_WS_KEY_LEN + 1];
	assert_int_equal(mqc_ws_key(a), 0);
	assert_int_equal(mqc_ws_key(b), 0);
	assert_int_equal(strlen(a), MQC_WS_KEY_LEN);
	assert_string_not_equal(a, b);
}

static void the_request_names_what_it_asks_for(void **state)
{
	(void)state;
	struct mqc_buf b = { 0 };
	assert_int_equal(
	    mqc_ws_request(&b, "::1", 8080, false, "/ws?x=1", KEY, "Authorization: Bearer t"), 0);
	char *text = mqc_str_dup((struct mqc_str) { (const char *)b.data, (uint16_t)b.len });
	assert_non_null(strstr(text, "GET /ws?x=1 HTTP/1.1\r\n"));
	assert_non_null(strstr(text, "\r\nHost: [::1]:8080\r\n"));
	assert_non_null(strstr(text, "\r\nSec-WebSocket-Protocol: mqtt\r\n"));
	assert_non_null(strstr(text, "\r\nSec-WebSocket-Key: " KEY "\r\n"));
	assert_non_null(strstr(text, "\r\nAuthorization: Bearer t\r\n\r\n"));
	free(text);
	b.len = b.off = 0;
	assert_int_equal(mqc_ws_request(&b, "h", 443, true, NULL, KEY, NULL), 0);
	text = mqc_str_dup((struct mqc_str) { (const char *)b.data, (uint16_t)b.len });
	assert_non_null(strstr(text, "GET /mqtt HTTP/1.1\r\nHost: h\r\n")); /* default port: none */
	free(text);
	/* A header that would smuggle another one in is refused. */
	assert_int_equal(mqc_ws_request(&b, "h", 80, false, "/", KEY, "X: a\r\nY: b"), -1);
	assert_int_equal(mqc_ws_request(&b, "h", 80, false, "/", KEY, "no colon"), -1);
	mqc_buf_free(&b);
}

static enum mqc_ws_rc answer(const char *text, size_t *used, char *err, size_t errlen)
{
	return mqc_ws_response((const unsigned char *)text, strlen(text), KEY, used, err, errlen);
}

#define GOOD_HEAD                          \
	"HTTP/1.1 101 Switching Protocols\r\n" \
	"upgrade: WebSocket\r\n"               \
	"Connection: keep-alive, Upgrade\r\n"  \
	"Sec-WebSocket-Accept: " ACCEPT "\r\n"

static void a_right_answer_is_taken_with_what_follows_it(void **state)
{
	(void)state;
	const char *text = GOOD_HEAD "Sec-WebSocket-Protocol: mqtt\r\n\r\n\x82\x01\x20";
	size_t used = 0;
	char err[256] = "";
	assert_int_equal(answer(text, &used, err, sizeof err), MQC_WS_DONE);
	assert_int_equal(used, strlen(text) - 3); /* the frame after it is not the answer's */
	/* Byte by byte: AGAIN until the blank line. */
	size_t len = strlen(text) - 3;
	for (size_t i = 1; i < len; i++)
		assert_int_equal(
		    mqc_ws_response((const unsigned char *)text, i, KEY, &used, err, sizeof err),
		    MQC_WS_AGAIN);
}

static void wrong_answers_are_refused_by_name(void **state)
{
	(void)state;
	static const struct {
		const char *text, *says;
	} cases[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "'HTTP/1.1 200 OK', not 101" },
		{ "HTTP/1.1 404 Not Found\r\n\r\n", "'HTTP/1.1 404 Not Found', not 101" },
		{ "HTTP/1.1 1010 x\r\n\r\n", "not 101" },
		{ GOOD_HEAD "\r\n", "did not accept the subprotocol mqtt" },
		{ GOOD_HEAD "Sec-WebSocket-Protocol: mqttv3.1\r\n\r\n", "'mqttv3.1', not mqtt" },
		{ GOOD_HEAD "Sec-WebSocket-Protocol: mqtt\r\nSec-WebSocket-Extensions: "
		            "permessage-deflate\r\n\r\n",
		    "extension 'permessage-deflate'" },
		{ "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		  "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n"
		  "Sec-WebSocket-Protocol: mqtt\r\n\r\n",
		    "Sec-WebSocket-Accept 'AAAAAAAAAAAAAAAAAAAAAAAAAAA=' is not" },
		{ "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		  "Sec-WebSocket-Protocol: mqtt\r\n\r\n",
		    "no Sec-WebSocket-Accept" },
		{ "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
		    "'Upgrade: websocket'" },
		{ "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		    "'Connection: Upgrade'" },
		{ "\x20\x03\x01\x05\x01", "not HTTP" }, /* a CONNACK: an MQTT port */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t used = 0;
		char err[256] = "";
		assert_int_equal(answer(cases[i].text, &used, err, sizeof err), MQC_WS_ERROR);
		if (!strstr(err, cases[i].says))
			fail_msg("case %zu: '%s' does not say '%s'", i, err, cases[i].says);
	}
	/* Endless headers: refused at the bound, not waited for. */
	char *big = malloc(MQC_WS_HEAD_MAX + 1);
	memset(big, 'x', MQC_WS_HEAD_MAX);
	snprintf(big, 14, "HTTP/1.1 101 ");
	big[13] = 'x';
	size_t used;
	char err[128];
	assert_int_equal(
	    mqc_ws_response((unsigned char *)big, MQC_WS_HEAD_MAX, KEY, &used, err, sizeof err),
	    MQC_WS_ERROR);
	assert_non_null(strstr(err, "longer than 8 KiB"));
	free(big);
}

/* The reader over in: every rc until AGAIN or an error, pings answered by the test itself. */
struct run {
	struct mqc_buf data;
	int pings, closes, code;
	char err[256];
};

static enum mqc_ws_rc feed(
    struct mqc_ws_reader *r, struct run *out, const unsigned char *p, size_t len, size_t chunk)
{
	struct mqc_buf in = { 0 };
	enum mqc_ws_rc rc = MQC_WS_AGAIN;
	for (size_t at = 0; at < len; at += chunk) {
		size_t n = len - at < chunk ? len - at : chunk;
		assert_int_equal(mqc_buf_reserve(&in, n, SIZE_MAX), 0);
		memcpy(in.data + in.len, p + at, n);
		in.len += n;
		struct mqc_ws_control ctl;
		for (;;) {
			rc = mqc_ws_read(r, &in, &out->data, 1 << 20, 1 << 16, &ctl, out->err, sizeof out->err);
			if (rc == MQC_WS_GOT_PING) {
				out->pings++;
				continue;
			}
			if (rc == MQC_WS_GOT_CLOSE) {
				out->closes++;
				out->code = ctl.code;
			}
			break;
		}
		if (rc == MQC_WS_ERROR || rc == MQC_WS_GOT_CLOSE)
			break;
	}
	mqc_buf_free(&in);
	return rc;
}

static void frames_round_trip_split_coalesced_and_fragmented(void **state)
{
	(void)state;
	unsigned char packet[300];
	for (size_t i = 0; i < sizeof packet; i++)
		packet[i] = (unsigned char)(i * 7);
	for (int server = 0; server < 2; server++) {
		/* A client's frames (masked) read by a server, and a server's read by a client. */
		struct mqc_buf wire = { 0 };
		assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, packet, 10, server, SIZE_MAX), 0);
		assert_int_equal(mqc_ws_frame(&wire, MQC_WS_PING, "hi", 2, server, SIZE_MAX), 0);
		assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, packet + 10, 290, server, SIZE_MAX), 0);
		assert_int_equal(mqc_ws_frame(&wire, MQC_WS_PONG, NULL, 0, server, SIZE_MAX), 0);
		for (size_t chunk = 1; chunk <= wire.len; chunk = chunk * 3 + 1) {
			struct mqc_ws_reader r = { .server = server };
			struct run out = { 0 };
			assert_int_equal(feed(&r, &out, wire.data, wire.len, chunk), MQC_WS_AGAIN);
			assert_int_equal(out.data.len, sizeof packet);
			assert_memory_equal(out.data.data, packet, sizeof packet);
			assert_int_equal(out.pings, 1);
			assert_int_equal(r.pongs, 1);
			mqc_buf_free(&out.data);
		}
		mqc_buf_free(&wire);
	}
	/* A message in three fragments (binary, continuation, continuation+FIN), a ping between. */
	static const unsigned char frag[]
	    = { 0x02, 2, 'a', 'b', 0x89, 0, 0x00, 1, 'c', 0x80, 2, 'd', 'e', 0x82, 1, 'f' };
	struct mqc_ws_reader r = { 0 };
	struct run out = { 0 };
	assert_int_equal(feed(&r, &out, frag, sizeof frag, sizeof frag), MQC_WS_AGAIN);
	assert_int_equal(out.data.len, 6);
	assert_memory_equal(out.data.data, "abcdef", 6);
	assert_int_equal(out.pings, 1);
	mqc_buf_free(&out.data);
	/* A close frame with its code; one without any is 1005. */
	static const unsigned char close_frame[] = { 0x82, 1, 0x30, 0x88, 4, 0x03, 0xe9, 'n', 'o' };
	r = (struct mqc_ws_reader) { 0 };
	out = (struct run) { 0 };
	assert_int_equal(feed(&r, &out, close_frame, sizeof close_frame, 1), MQC_WS_GOT_CLOSE);
	assert_int_equal(out.code, 1001);
	assert_int_equal(out.data.len, 1); /* a packet begun before it: the caller says mid-packet */
	mqc_buf_free(&out.data);
	static const unsigned char bare_close[] = { 0x88, 0 };
	r = (struct mqc_ws_reader) { 0 };
	out = (struct run) { 0 };
	assert_int_equal(feed(&r, &out, bare_close, 2, 2), MQC_WS_GOT_CLOSE);
	assert_int_equal(out.code, 1005);
	/* 126 and 127 length encodings. */
	struct mqc_buf wire = { 0 };
	static unsigned char big[70000];
	assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, big, 200, false, SIZE_MAX), 0);
	assert_int_equal(wire.data[1], 126);
	assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, big, 65000, false, SIZE_MAX), 0);
	r = (struct mqc_ws_reader) { 0 };
	out = (struct run) { 0 };
	assert_int_equal(feed(&r, &out, wire.data, wire.len, 4096), MQC_WS_AGAIN);
	assert_int_equal(out.data.len, 65200);
	mqc_buf_free(&out.data);
	wire.len = wire.off = 0;
	assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, big, sizeof big, false, SIZE_MAX), 0);
	assert_int_equal(wire.data[1], 127);
	r = (struct mqc_ws_reader) { 0 };
	out = (struct run) { 0 };
	assert_int_equal(feed(&r, &out, wire.data, wire.len, wire.len), MQC_WS_ERROR);
	assert_non_null(strstr(out.err, "of 70000 bytes, more than the largest MQTT packet"));
	mqc_buf_free(&out.data);
	mqc_buf_free(&wire);
}

static void frames_a_peer_must_not_send_are_refused_by_name(void **state)
{
	(void)state;
	static const struct {
		unsigned char bytes[16];
		size_t len;
		bool server;
		const char *says;
	} cases[] = {
		{ { 0x81, 1, 'x' }, 3, false, "of text" },
		{ { 0x82, 0x81, 1, 2, 3, 4, 'x' }, 7, false, "from the server that is masked" },
		{ { 0x82, 1, 'x' }, 3, true, "from the client that is not masked" },
		{ { 0xc2, 1, 'x' }, 3, false, "reserved bits" },
		{ { 0x83, 0 }, 2, false, "reserved opcode" },
		{ { 0x8b, 0 }, 2, false, "reserved control opcode" },
		{ { 0x09, 0 }, 2, false, "fragmented or over 125" },
		{ { 0x89, 126, 0, 126 }, 4, false, "fragmented or over 125" },
		{ { 0x80, 1, 'x' }, 3, false, "continues no message" },
		{ { 0x02, 1, 'x', 0x82, 1, 'y' }, 6, false, "inside a fragmented one" },
		{ { 0x88, 1, 3 }, 3, false, "one-byte body" },
		{ { 0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0 }, 10, false, "more than the largest" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct mqc_ws_reader r = { .server = cases[i].server };
		struct run out = { 0 };
		assert_int_equal(feed(&r, &out, cases[i].bytes, cases[i].len, 1), MQC_WS_ERROR);
		if (!strstr(out.err, cases[i].says))
			fail_msg("case %zu: '%s' does not say '%s'", i, out.err, cases[i].says);
		mqc_buf_free(&out.data);
	}
	/* More than data may hold: the rest waits in the input until data is taken from. */
	struct mqc_buf wire = { 0 }, in = { 0 }, data = { 0 };
	static unsigned char p[5000];
	for (size_t i = 0; i < sizeof p; i++)
		p[i] = (unsigned char)i;
	assert_int_equal(mqc_ws_frame(&wire, MQC_WS_BINARY, p, sizeof p, false, SIZE_MAX), 0);
	in = wire;
	struct mqc_ws_reader r = { 0 };
	struct mqc_ws_control ctl;
	char err[128];
	for (size_t taken = 0; taken < sizeof p; taken += 1000) {
		assert_int_equal(
		    mqc_ws_read(&r, &in, &data, 1000, 1 << 20, &ctl, err, sizeof err), MQC_WS_AGAIN);
		assert_int_equal(mqc_buf_live(&data), 1000);
		assert_memory_equal(data.data + data.off, p + taken, 1000);
		assert_int_equal(mqc_buf_live(&in), sizeof p - taken - 1000);
		mqc_buf_consume(&data, 1000);
	}
	mqc_buf_free(&in);
	mqc_buf_free(&data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_rfc_example_and_a_fresh_key),
		cmocka_unit_test(the_request_names_what_it_asks_for),
		cmocka_unit_test(a_right_answer_is_taken_with_what_follows_it),
		cmocka_unit_test(wrong_answers_are_refused_by_name),
		cmocka_unit_test(frames_round_trip_split_coalesced_and_fragmented),
		cmocka_unit_test(frames_a_peer_must_not_send_are_refused_by_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
