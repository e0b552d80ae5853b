/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The pool over WebSockets: requests over ws:// and wss:// against mosquitto 2.1.2's own
 * WebSockets listeners (MQTT 5 and 3.1.1, the device on plain MQTT beside them); and against a
 * server of the test's own, every answer a client must refuse (not 101, a wrong accept key, no
 * subprotocol, an MQTT port, silence) and every frame it must not take (text, masked, larger
 * than any packet, a close in the middle of a packet), each ending the connection with the
 * reason said and counted, none a hang. The upgrade carries the path and the extra header, and a
 * ping is answered with its pong.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_ws.h"
#include "mqttpool.h"
#include "pool_test_util.h"
#include "tb_broker.h"
#include "tb_test.h"

/* --- against mosquitto 2.1.2 ----------------------------------------------------------------- */

static int log_count(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* Large enough for the 16-bit and the 64-bit frame lengths. */
static char big[100000];

/* n requests at once (QoS 0, 1, 2 in turn), each answered with its own payload, then a big one. */
static void requests_v5(mqp_pool *p, const char *url, int n)
{
	static struct async_call calls[64];
	char err[512];
	for (int i = 0; i < n; i++) {
		calls[i] = (struct async_call) { 0 };
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "ws-%d", i);
		assert_int_equal(mqp_pool_request_async(p, "ws/cmd", calls[i].nonce, strlen(calls[i].nonce),
		                     i % 3, 5000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	for (int i = 0; i < n; i++) {
		assert_true(wait_flag(&calls[i].calls, 5000));
		if (atomic_load(&calls[i].result) != MQP_OK)
			fail_msg("%s request %d: %s (%s)", url, i, mqp_strerror(atomic_load(&calls[i].result)),
			    mqp_pool_last_error(p, err, sizeof err));
		assert_int_equal(atomic_load(&calls[i].matched), 1);
	}
	memset(big, 'b', sizeof big);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "ws/cmd", big, sizeof big, 1, 5000, &reply), MQP_OK);
	assert_int_equal(reply.len, sizeof big);
	mqp_reply_free(&reply);
}

/* The same over MQTT 3.1.1: the device answers on replies/ws4/cmd, one request at a time. */
static void requests_311(mqp_pool *p, const char *url, int n)
{
	char err[512];
	for (int i = 0; i <= n; i++) {
		char id[32];
		int len = snprintf(id, sizeof id, "ws4-%d", i);
		const void *payload = i < n ? (const void *)id : big;
		size_t size = i < n ? (size_t)len : sizeof big;
		struct mqp_reply reply;
		int rc = mqp_pool_request_legacy(
		    p, "ws4/cmd", payload, size, i % 3, "replies/ws4/cmd", NULL, NULL, 5000, &reply);
		if (rc != MQP_OK)
			fail_msg("%s request %d: %s (%s)", url, i, mqp_strerror(rc),
			    mqp_pool_last_error(p, err, sizeof err));
		assert_int_equal(reply.len, size);
		assert_memory_equal(reply.payload, payload, size);
		mqp_reply_free(&reply);
	}
}

static void requests_over_ws_and_wss_on_mosquitto_21(void **state)
{
	(void)state;
	struct tb_broker *b = tb_test_broker_21_ws(MOSQUITTO21_PATH);
	const struct tb_info *info = tb_broker_info(b);
	const char *argv5[]
	    = { RESPONDER_PATH, "--broker", info->mqtt_url, "--filter", "ws/cmd", NULL };
	struct tb_responder device = tb_test_spawn("RESPONDER_READY", argv5);
	/* A 3.1.1 device answers on replies/<topic> (the legacy model). */
	const char *argv4[] = { RESPONDER_PATH, "--broker", info->mqtt_url, "--filter", "ws4/cmd",
		"--protocol", "3.1.1", NULL };
	struct tb_responder device4 = tb_test_spawn("RESPONDER_READY", argv4);
	char urls[2][96];
	snprintf(urls[0], sizeof urls[0], "ws://127.0.0.1:%d", info->ws_port); /* path: /mqtt */
	/* the name checked; mosquitto 2.1 serves MQTT at any path */
	snprintf(urls[1], sizeof urls[1], "wss://localhost:%d/anything", info->wss_port);
	for (int u = 0; u < 2; u++)
		for (int protocol = 5; protocol >= 4; protocol--) {
			struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
			po.min_size = 2;
			po.max_size = 4;
			po.protocol = protocol;
			po.cafile = info->ca_file;
			mqp_pool *p = new_pool(urls[u], &po);
			enum { N = 40 };
			if (protocol == 5)
				requests_v5(p, urls[u], N);
			else
				requests_311(p, urls[u], N);
			struct mqp_pool_stats st;
			mqp_pool_stats(p, &st, sizeof st);
			assert_int_equal(st.connects_failed, 0);
			print_message("%s MQTT %s: %d requests, %llu connections\n", urls[u],
			    protocol == 5 ? "5" : "3.1.1", N + 1, (unsigned long long)st.connects_ok);
			mqp_pool_destroy(p);
		}
	tb_test_responder_stop(&device4);
	tb_test_responder_stop(&device);
	/* Closed cleanly: DISCONNECT then a close frame, never "closed its connection" unasked. */
	assert_int_equal(log_count(info->log_file, "closed its connection"), 0);
	tb_broker_stop(b);
}

/* --- against a server of the test's own --------------------------------------------------------
 */

struct fake_ws {
	const char *mode;
	int lfd, port;
	pthread_t thread;
	atomic_bool stop;
	/* what the client sent (mode "good") */
	atomic_bool saw_header, saw_path, saw_pong;
	atomic_int conns;
};

static void put(int fd, const void *p, size_t len)
{
	if (len && send(fd, p, len, MSG_NOSIGNAL) != (ssize_t)len)
		return; /* the client went away: what it made of it is the test's question */
}

static void put_frame(int fd, int opcode, const void *p, size_t len, bool mask)
{
	struct mqc_buf b = { 0 };
	if (mqc_ws_frame(&b, opcode, p, len, mask, SIZE_MAX) == 0)
		put(fd, b.data, b.len);
	mqc_buf_free(&b);
}

/* Read into b until the client closes or 3 s pass; returns false at the close. */
static bool take(int fd, struct mqc_buf *b, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	if (poll(&pfd, 1, timeout_ms) <= 0)
		return true;
	if (mqc_buf_reserve(b, 4096, 1 << 20) != 0)
		return false;
	ssize_t n = recv(fd, b->data + b->len, 4096, 0);
	if (n <= 0)
		return false;
	b->len += (size_t)n;
	return true;
}

static void serve(struct fake_ws *f, int fd)
{
	struct mqc_buf in = { 0 };
	uint64_t until = mqc_now_ns() + 3 * MQC_NS_PER_S;
	char *end = NULL;
	while (!end && mqc_now_ns() < until && take(fd, &in, 100))
		end = in.len ? memmem(in.data, in.len, "\r\n\r\n", 4) : NULL;
	if (!end)
		goto out;
	size_t head_len = (size_t)(end - (char *)in.data) + 4;
	char key[64] = "", value[128], accept[MQC_WS_ACCEPT_LEN + 1];
	mqc_ws_header((char *)in.data, head_len, "Sec-WebSocket-Key", key, sizeof key);
	mqc_ws_accept(key, accept);
	if (mqc_ws_header((char *)in.data, head_len, "Authorization", value, sizeof value)
	    && strcmp(value, "Bearer t0k") == 0)
		atomic_store(&f->saw_header, true);
	if (strncmp((char *)in.data, "GET /custom?x=1 HTTP/1.1\r\n", 26) == 0)
		atomic_store(&f->saw_path, true);
	mqc_buf_consume(&in, head_len);
	const char *mode = f->mode;
	char head[512];
	const char *proto = "Sec-WebSocket-Protocol: mqtt\r\n";
	snprintf(head, sizeof head,
	    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: %s\r\n%s\r\n",
	    strcmp(mode, "bad-accept") == 0 ? "AAAAAAAAAAAAAAAAAAAAAAAAAAA=" : accept,
	    strcmp(mode, "no-protocol") == 0 ? "" : proto);
	if (strcmp(mode, "200") == 0)
		snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
	else if (strcmp(mode, "404") == 0)
		snprintf(head, sizeof head, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
	else if (strcmp(mode, "mqtt") == 0)
		snprintf(head, sizeof head, "%s", "\x20\x02\x01\x05"); /* a CONNACK, refused */
	if (strcmp(mode, "silent") != 0)
		put(fd, head, strlen(head));
	static const unsigned char connack[] = { 0x20, 0x03, 0x00, 0x00, 0x00 };
	if (strcmp(mode, "text") == 0)
		put_frame(fd, MQC_WS_TEXT, "hello", 5, false);
	else if (strcmp(mode, "masked") == 0)
		put_frame(fd, MQC_WS_BINARY, connack, sizeof connack, true);
	else if (strcmp(mode, "huge") == 0)
		put(fd, "\x82\x7f\x00\x00\x01\x00\x00\x00\x00\x00", 10); /* 2^40 bytes to come */
	else if (strcmp(mode, "close-mid-packet") == 0) {
		put_frame(fd, MQC_WS_BINARY, connack, 2, false);
		put_frame(fd, MQC_WS_CLOSE, "\x03\xf3going", 7, false); /* 1011 */
	} else if (strcmp(mode, "good") == 0) {
		/* The CONNACK split over two frames, a ping between them; the pong must come back. */
		put_frame(fd, MQC_WS_BINARY, connack, 1, false);
		put_frame(fd, MQC_WS_PING, "p1", 2, false);
		put_frame(fd, MQC_WS_BINARY, connack + 1, sizeof connack - 1, false);
		struct mqc_ws_reader r = { .server = true };
		struct mqc_buf data = { 0 };
		while (!atomic_load(&f->saw_pong) && mqc_now_ns() < until && take(fd, &in, 100)) {
			struct mqc_ws_control ctl;
			char err[128];
			enum mqc_ws_rc rc;
			while ((rc = mqc_ws_read(&r, &in, &data, 1 << 20, 1 << 20, &ctl, err, sizeof err))
			    == MQC_WS_GOT_PING)
				;
			if (rc == MQC_WS_ERROR)
				fail_msg("the client's frames: %s", err);
			if (r.pongs)
				atomic_store(&f->saw_pong, true);
		}
		mqc_buf_free(&data);
	}
	/* Then hold it open until the client closes (or 3 s): its verdict is the test's. */
	while (mqc_now_ns() < until && take(fd, &in, 100))
		mqc_buf_consume(&in, mqc_buf_live(&in));
out:
	mqc_buf_free(&in);
	close(fd);
}

static void *fake_main(void *arg)
{
	struct fake_ws *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd pfd = { .fd = f->lfd, .events = POLLIN };
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		atomic_fetch_add(&f->conns, 1);
		serve(f, fd);
	}
	return NULL;
}

static void fake_start(struct fake_ws *f, const char *mode)
{
	*f = (struct fake_ws) { .mode = mode };
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(f->lfd, 16), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake_ws *f)
{
	atomic_store(&f->stop, true);
	pthread_join(f->thread, NULL);
	close(f->lfd);
}

static mqp_pool *pool_on(const struct fake_ws *f, const char *path, const char *header)
{
	char url[96];
	snprintf(url, sizeof url, "ws://127.0.0.1:%d%s", f->port, path);
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = 1;
	o.max_size = 1;
	o.connect_timeout_ms = 1000;
	o.ws_header = header;
	mqp_pool *p = NULL;
	char err[256];
	if (mqp_pool_new(url, &o, &p, err, sizeof err) != MQP_OK)
		fail_msg("mqp_pool_new(%s): %s", url, err);
	return p;
}

static void every_wrong_answer_and_frame_is_refused_by_name(void **state)
{
	(void)state;
	static const struct {
		const char *mode, *says;
	} cases[] = {
		{ "200", "with 'HTTP/1.1 200 OK', not 101 Switching Protocols" },
		{ "404", "with 'HTTP/1.1 404 Not Found', not 101" },
		{ "bad-accept", "is not the one our key asks for" },
		{ "no-protocol", "did not accept the subprotocol mqtt" },
		{ "mqtt", "not HTTP (an MQTT port, not a WebSocket one?)" },
		{ "silent", "not ready (the WebSocket upgrade was not answered) within 1000 ms" },
		{ "text", "WebSocket from 127.0.0.1:PORT: a WebSocket frame of text" },
		{ "masked",
		    "WebSocket from 127.0.0.1:PORT: a WebSocket frame from the server that is masked" },
		{ "huge",
		    "WebSocket from 127.0.0.1:PORT: a WebSocket frame of 1099511627776 bytes, more than "
		    "the largest MQTT packet" },
		{ "close-mid-packet", "the server closed the WebSocket (status 1011: going)" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct fake_ws f;
		fake_start(&f, cases[i].mode);
		mqp_pool *p = pool_on(&f, "", NULL);
		/* A request fails with the reason (no connection), well before its own timeout. */
		uint64_t t0 = mqc_now_ns();
		struct mqp_reply reply;
		int rc = mqp_pool_request(p, "x/cmd", "x", 1, 1, 8000, &reply);
		uint64_t took = mqc_now_ns() - t0;
		char err[512], says[256];
		mqp_pool_last_error(p, err, sizeof err);
		/* The frames' errors are said as they are (not blamed on the CONNECT), port and all. */
		const char *at = strstr(cases[i].says, "PORT");
		if (at)
			snprintf(says, sizeof says, "%.*s%d%s", (int)(at - cases[i].says), cases[i].says,
			    f.port, at + 4);
		else
			snprintf(says, sizeof says, "%s", cases[i].says);
		if (rc == MQP_OK || !strstr(err, says) || (at && strncmp(err, "WebSocket", 9) != 0))
			fail_msg("%s: %s, last error '%s' does not say '%s'", cases[i].mode, mqp_strerror(rc),
			    err, says);
		assert_true(took < 3 * MQC_NS_PER_S);
		struct mqp_pool_stats st;
		mqp_pool_stats(p, &st, sizeof st);
		assert_true(st.connects_failed >= 1); /* counted */
		assert_int_equal(st.connects_ok, 0);
		print_message("%-16s -> %s (%.0f ms)\n", cases[i].mode, err, (double)took / 1e6);
		mqp_pool_destroy(p);
		fake_stop(&f);
	}
}

static void the_upgrade_carries_path_and_header_and_pings_are_answered(void **state)
{
	(void)state;
	struct fake_ws f;
	fake_start(&f, "good");
	mqp_pool *p = pool_on(&f, "/custom?x=1", "Authorization: Bearer t0k");
	uint64_t until = mqc_now_ns() + 3 * MQC_NS_PER_S;
	while (!atomic_load(&f.saw_pong) && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_true(atomic_load(&f.saw_path));
	assert_true(atomic_load(&f.saw_header));
	assert_true(atomic_load(&f.saw_pong));
	mqp_pool_destroy(p);
	fake_stop(&f);
	/* A header that would smuggle another in is refused at once. */
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.ws_header = "X-A: 1\r\nX-B: 2";
	char err[256];
	assert_int_equal(mqp_pool_new("ws://127.0.0.1:1", &o, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "ws_header must be one 'Name: value' line"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(requests_over_ws_and_wss_on_mosquitto_21),
		cmocka_unit_test(every_wrong_answer_and_frame_is_refused_by_name),
		cmocka_unit_test(the_upgrade_carries_path_and_header_and_pings_are_answered),
	};
	return TB_TEST_RUN(tests, NULL);
}
