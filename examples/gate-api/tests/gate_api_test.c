/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests of gate-api: the real binary against the test broker and the responder,
 * spoken to over HTTP.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_http.h"
#include "tb_test.h"

struct gate {
	struct tb_responder proc;
	int port;
	char host[64]; /* as its ready line names it: 127.0.0.1, [::1] */
};

/* Start gate-api against url (NULL: the test broker) with extra arguments, on a free port. */
static struct gate gate_ready(struct tb_responder proc);

/* The gateway started by head (its program, --broker, --listen, ...) and then the test user's
 * credentials and the extra arguments. */
static struct gate gate_start_head(const char *const head[], const char *first, ...)
{
	va_list ap;
	va_start(ap, first);
	struct tb_responder proc = tb_test_spawn_va("GATE_API_READY", head, first, ap);
	va_end(ap);
	return gate_ready(proc);
}

static struct gate gate_start(const char *url, const char *first, ...)
{
	const char *head[] = { GATE_API_PATH, "--broker", url ? url : tb_test_info()->mqtt_url,
		"--listen", "127.0.0.1:0", NULL };
	va_list ap;
	va_start(ap, first);
	struct tb_responder proc = tb_test_spawn_va("GATE_API_READY", head, first, ap);
	va_end(ap);
	return gate_ready(proc);
}

/* Its port, from the line it prints when it serves. */
static struct gate gate_ready(struct tb_responder proc)
{
	struct gate g = { .proc = proc };
	FILE *f = fopen(g.proc.log, "r");
	assert_non_null(f);
	char line[512];
	while (fgets(line, sizeof line, f)) {
		const char *url = strstr(line, "GATE_API_READY url=http://");
		if (!url)
			continue;
		url += strlen("GATE_API_READY url=http://");
		const char *end = strchr(url, ' '),
		           *colon = end ? memrchr(url, ':', (size_t)(end - url)) : NULL;
		if (colon && (size_t)(colon - url) < sizeof g.host) {
			memcpy(g.host, url, (size_t)(colon - url));
			g.port = atoi(colon + 1);
		}
		break;
	}
	fclose(f);
	assert_true(g.port > 0);
	return g;
}

/* SIGTERM; expect a clean exit within timeout_ms. Returns how long it took (ns). */
static uint64_t gate_stop(struct gate *g, int timeout_ms)
{
	uint64_t t0 = mqc_now_ns();
	kill(g->proc.pid, SIGTERM);
	int status = 0;
	pid_t got = 0;
	while ((got = waitpid(g->proc.pid, &status, WNOHANG)) == 0
	    && mqc_now_ns() - t0 < (uint64_t)timeout_ms * MQC_NS_PER_MS)
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	if (got != g->proc.pid) {
		kill(g->proc.pid, SIGKILL);
		waitpid(g->proc.pid, NULL, 0);
		fail_msg("gate-api did not exit within %d ms of SIGTERM", timeout_ms);
	}
	uint64_t took = mqc_now_ns() - t0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "cat %s >&2", g->proc.log);
		if (system(cmd) != 0)
			fprintf(stderr, "(no log)\n");
		fail_msg("gate-api exited with status 0x%x", status);
	}
	unlink(g->proc.log);
	return took;
}

struct http_result {
	int status;
	char body[16384];
	char headers[2048];
};

static struct http_result http(int port, const char *method, const char *path, const char *body)
{
	char req[8192];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(req, sizeof req,
	    "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\n\r\n%s",
	    method, path, blen, body ? body : "");
	assert_true(n > 0 && (size_t)n < sizeof req);
	struct mqc_http_response r;
	struct http_result out = { .status = -1 };
	if (mqc_http_raw(port, req, (size_t)n, 15000, &r) == 0) {
		out.status = r.status;
		if (r.body && strlen(r.body) >= sizeof out.body) /* a cut body would fail elsewhere */
			fail_msg("%s %s: a %zu-byte body does not fit the test's buffer", method, path,
			    strlen(r.body));
		snprintf(out.body, sizeof out.body, "%s", r.body ? r.body : "");
		snprintf(out.headers, sizeof out.headers, "%s", r.headers ? r.headers : "");
		mqc_http_response_free(&r);
	}
	return out;
}

/* The string member key of the JSON object in text ("" when absent). */
static const char *json_str(const char *text, const char *key, char *buf, size_t len)
{
	buf[0] = '\0';
	cJSON *j = cJSON_Parse(text);
	const cJSON *v = cJSON_GetObjectItem(j, key);
	if (cJSON_IsString(v))
		snprintf(buf, len, "%s", v->valuestring);
	cJSON_Delete(j);
	return buf;
}

struct poster {
	int port;
	const char *path;
	int id, ok, wrong;
	struct http_result last;
};

/* Twenty-five commands, each with its own nonce: every reply must carry the caller's. */
static void *post_many(void *arg)
{
	struct poster *p = arg;
	for (int k = 0; k < 25; k++) {
		char body[64], want[64];
		snprintf(body, sizeof body, "{\"nonce\":\"n-%d-%d\"}", p->id, k);
		snprintf(want, sizeof want, "\"reply\":{\"nonce\":\"n-%d-%d\"}", p->id, k);
		struct http_result r = http(p->port, "POST", p->path, body);
		if (r.status == 200 && strstr(r.body, want))
			p->ok++;
		else
			p->wrong++;
		p->last = r;
	}
	return NULL;
}

static void commands_round_trip_on_both_routes(void **state)
{
	(void)state;
	struct tb_responder dev
	    = tb_test_responder(RESPONDER_PATH, "--filter", "devices/+/commands/open", NULL);
	struct gate g = gate_start(NULL, NULL);
	struct http_result r = http(g.port, "POST", "/devices/gate-1/commands/open", "{\"a\":1}");
	assert_int_equal(r.status, 200);
	char buf[64];
	assert_string_equal(json_str(r.body, "route", buf, sizeof buf), "pool");
	assert_string_equal(json_str(r.body, "device", buf, sizeof buf), "gate-1");
	assert_non_null(strstr(r.body, "\"reply\":{\"a\":1}"));
	assert_non_null(strstr(r.headers, "application/json"));
	r = http(g.port, "POST", "/naive/devices/gate-1/commands/open", "");
	assert_int_equal(r.status, 200);
	assert_string_equal(json_str(r.body, "route", buf, sizeof buf), "naive");
	assert_non_null(strstr(r.body, "\"reply\":\"\""));
	/* Four clients per route at once: nobody gets another's reply. */
	enum { N = 8 };
	struct poster p[N];
	pthread_t t[N];
	for (int i = 0; i < N; i++) {
		p[i] = (struct poster) { .port = g.port,
			.id = i,
			.path
			= i % 2 ? "/naive/devices/gate-2/commands/open" : "/devices/gate-2/commands/open" };
		pthread_create(&t[i], NULL, post_many, &p[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		if (p[i].wrong)
			fail_msg("%s: %d wrong, last %d %s", p[i].path, p[i].wrong, p[i].last.status,
			    p[i].last.body);
		assert_int_equal(p[i].ok, 25);
	}
	r = http(g.port, "GET", "/healthz", NULL);
	assert_int_equal(r.status, 200);
	r = http(g.port, "GET", "/metrics", NULL);
	assert_int_equal(r.status, 200);
	assert_true(mqc_prom_value(r.body, "gate_api_responses_total{route=\"pool\",status=\"200\"}")
	    == 1 + 4 * 25);
	assert_true(mqc_prom_value(r.body, "gate_api_responses_total{route=\"naive\",status=\"200\"}")
	    == 1 + 4 * 25);
	assert_true(mqc_prom_value(r.body, "mqttpool_connections") <= 10); /* the pool's max */
	/* Every successful command is one observation of the route's duration histogram. */
	for (int naive = 0; naive < 2; naive++) {
		char name[160];
		const char *route = naive ? "naive" : "pool";
		snprintf(name, sizeof name, "gate_api_command_duration_seconds_count{route=\"%s\"}", route);
		assert_true(mqc_prom_value(r.body, name) == 1 + 4 * 25);
		snprintf(name, sizeof name,
		    "gate_api_command_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"}", route);
		assert_true(mqc_prom_value(r.body, name) == 1 + 4 * 25);
		snprintf(name, sizeof name, "gate_api_command_duration_seconds_sum{route=\"%s\"}", route);
		assert_true(mqc_prom_value(r.body, name) > 0);
	}
	char dup[256]; /* promtool accepts a series named twice; Prometheus then drops one */
	if (mqc_prom_duplicate(r.body, dup, sizeof dup))
		fail_msg("/metrics names %s twice", dup);
	/* Well-formed for Prometheus: promtool (Debian's prometheus package) checks the text. */
	FILE *check = popen("promtool check metrics >/dev/null 2>&1", "w");
	assert_non_null(check);
	fputs(r.body, check);
	int promtool = pclose(check);
	assert_true(WIFEXITED(promtool) && WEXITSTATUS(promtool) == 0);
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
}

/* A command to device on both routes (pooled, naive): answered with status and error, a message
 * that says what, within [min_ns, max_ns). */
static void both_routes_answer(int port, const char *device, int status, const char *error,
    const char *says, uint64_t min_ns, uint64_t max_ns)
{
	char path[2][128];
	snprintf(path[0], sizeof path[0], "/devices/%s/commands/mute", device);
	snprintf(path[1], sizeof path[1], "/naive/devices/%s/commands/mute", device);
	for (int naive = 0; naive < 2; naive++) {
		uint64_t t0 = mqc_now_ns();
		struct http_result r = http(port, "POST", path[naive], "");
		uint64_t took = mqc_now_ns() - t0;
		assert_int_equal(r.status, status);
		char buf[256];
		assert_string_equal(json_str(r.body, "error", buf, sizeof buf), error);
		assert_non_null(strstr(json_str(r.body, "message", buf, sizeof buf), says));
		assert_true(took >= min_ns && took < max_ns);
	}
}

static void a_silent_device_is_504(void **state)
{
	(void)state;
	/* Subscribed to its commands, and never answers. */
	struct tb_client *silent = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(silent, "devices/silent/commands/#", 1, 0, NULL), 1);
	struct gate g = gate_start(NULL, "--timeout", "300ms", NULL);
	both_routes_answer(g.port, "silent", 504, "device_timeout", "within 300 ms",
	    300 * MQC_NS_PER_MS, 3 * MQC_NS_PER_S);
	gate_stop(&g, 5000);
	tb_client_destroy(silent);
}

/* At QoS 1 the broker's PUBACK says nobody is subscribed (v5 reason 0x10): answered at once, on
 * both routes, not at the timeout. At QoS 0 nothing says so: the timeout. */
static void a_device_nobody_listens_for_is_503_at_once(void **state)
{
	(void)state;
	struct gate g = gate_start(NULL, "--timeout", "5s", NULL);
	both_routes_answer(g.port, "nobody", 503, "no_responder", "nobody subscribed", 0,
	    MQC_NS_PER_S); /* the timeout is 5 s */
	gate_stop(&g, 5000);
	g = gate_start(NULL, "--timeout", "300ms", "--qos", "0", NULL);
	struct http_result r = http(g.port, "POST", "/devices/nobody/commands/mute", "");
	assert_int_equal(r.status, 504);
	gate_stop(&g, 5000);
}

static void bad_input_is_refused_and_never_published(void **state)
{
	(void)state;
	/* Watch everything under devices/: a bad request must not publish anything. */
	struct tb_client *watch = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(watch, "devices/#", 0, 0, NULL), 0); /* granted QoS 0 */
	struct gate g = gate_start(NULL, "--max-body", "64", NULL);
	static const struct {
		const char *method, *path, *body;
		int status;
		const char *error;
	} cases[] = {
		{ "POST", "/devices/a%2B/commands/open", "", 400, "bad_request" },
		{ "POST", "/devices/%23/commands/open", "", 400, "bad_request" },
		{ "POST", "/devices/a%2Fb/commands/open", "", 400, "bad_request" },
		{ "POST", "/devices/a%00b/commands/open", "", 400, "bad_request" },
		{ "POST", "/devices/a/commands/open%2B", "", 400, "bad_request" },
		{ "POST", "/naive/devices/a/commands/%23", "", 400, "bad_request" },
		{ "POST", "/devices/a/commands/open", "{not json", 400, "bad_json" },
		{ "POST", "/devices/a/commands/open",
		    "{\"pad\":\"0123456789012345678901234567890123456789012345678901234567890\"}", 413,
		    "body_too_large" },
		{ "GET", "/devices/a/commands/open", NULL, 405, "method_not_allowed" },
		{ "POST", "/devices/a/b/commands/open", "", 404, "not_found" },
		{ "DELETE", "/metrics", NULL, 405, "method_not_allowed" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct http_result r = http(g.port, cases[i].method, cases[i].path, cases[i].body);
		char buf[256];
		if (r.status != cases[i].status
		    || strcmp(json_str(r.body, "error", buf, sizeof buf), cases[i].error) != 0)
			fail_msg("%s %s: got %d %s, want %d %s", cases[i].method, cases[i].path, r.status,
			    r.body, cases[i].status, cases[i].error);
		assert_true(strlen(json_str(r.body, "message", buf, sizeof buf)) > 5);
	}
	struct http_result r = http(g.port, "GET", "/devices/a/commands/open", NULL);
	assert_non_null(strstr(r.headers, "Allow: POST"));
	struct tb_message *m = tb_client_receive(watch, 300);
	if (m)
		fail_msg("a refused request published on %s", m->topic);
	gate_stop(&g, 5000);
	tb_client_destroy(watch);
}

/* A raw HTTP connection to the gateway, for what mqc_http_raw cannot say: pipelining, interim
 * responses, a body the gateway stops reading. */
static int raw_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static void raw_send(int fd, const char *text)
{
	size_t len = strlen(text);
	assert_int_equal(send(fd, text, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Read into buf (NUL-terminated) until until appears in it, or the gateway closes (until NULL),
 * within 5 s. Returns the length read. */
static size_t raw_read(int fd, char *buf, size_t cap, const char *until)
{
	size_t n = 0;
	buf[0] = '\0';
	uint64_t end = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (n + 1 < cap && mqc_now_ns() < end && !(until && strstr(buf, until))) {
		ssize_t got = recv(fd, buf + n, cap - 1 - n, 0);
		if (got <= 0)
			break;
		n += (size_t)got;
		buf[n] = '\0';
	}
	return n;
}

static int count(const char *hay, const char *needle)
{
	int k = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		k++;
	return k;
}

/* What the one-loop server does with the bytes a client sends: two pipelined requests in one
 * write answered in order on one connection; Expect: 100-continue answered before the body (and
 * a body too large for it refused without one); HEAD without a body; a chunked body past
 * --max-body answered with a 413 the client can read. */
static void http_pipelining_continue_head_and_413(void **state)
{
	(void)state;
	struct tb_responder dev
	    = tb_test_responder(RESPONDER_PATH, "--filter", "devices/+/commands/open", NULL);
	struct gate g = gate_start(NULL, "--max-body", "64", NULL);
	char buf[16384];

	int fd = raw_connect(g.port);
	raw_send(fd,
	    "POST /devices/p1/commands/open HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n{\"n\":1}"
	    "POST /devices/p2/commands/open HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
	    "Connection: close\r\n\r\n{\"n\":2}");
	raw_read(fd, buf, sizeof buf, NULL);
	close(fd);
	const char *first = strstr(buf, "\"device\":\"p1\""),
	           *second = strstr(buf, "\"device\":\"p2\"");
	if (count(buf, "HTTP/1.1 200") != 2 || !first || !second || second < first
	    || !strstr(second, "\"reply\":{\"n\":2}"))
		fail_msg("two pipelined requests: %s", buf);

	fd = raw_connect(g.port);
	raw_send(fd,
	    "POST /devices/c1/commands/open HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
	    "Expect: 100-continue\r\nConnection: close\r\n\r\n");
	raw_read(fd, buf, sizeof buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0)
		fail_msg("Expect: 100-continue answered with: %s", buf);
	raw_send(fd, "{\"n\":3}");
	raw_read(fd, buf, sizeof buf, NULL);
	close(fd);
	if (!strstr(buf, "HTTP/1.1 200") || !strstr(buf, "\"reply\":{\"n\":3}"))
		fail_msg("after 100 Continue: %s", buf);

	fd = raw_connect(g.port);
	raw_send(fd,
	    "POST /devices/c2/commands/open HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
	    "Expect: 100-continue\r\n\r\n");
	raw_read(fd, buf, sizeof buf, NULL);
	close(fd);
	if (strstr(buf, "100 Continue") || !strstr(buf, "HTTP/1.1 413")
	    || !strstr(buf, "body_too_large"))
		fail_msg("a body too large, announced with Expect: 100-continue: %s", buf);

	fd = raw_connect(g.port);
	raw_send(fd, "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	size_t n = raw_read(fd, buf, sizeof buf, NULL);
	close(fd);
	const char *end = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || !end || (size_t)(end + 4 - buf) != n
	    || !strstr(buf, "Content-Length: "))
		fail_msg("HEAD /healthz: %s", buf);

	/* A chunked body that never ends: the 413 comes while it is being sent. */
	fd = raw_connect(g.port);
	raw_send(fd,
	    "POST /devices/c3/commands/open HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n");
	bool answered = false;
	for (int i = 0; i < 64 && !answered; i++) {
		raw_send(fd, "20\r\n\"0123456789012345678901234567890\r\n");
		char peek[2048];
		ssize_t got = recv(fd, peek, sizeof peek - 1, MSG_DONTWAIT);
		if (got > 0) {
			peek[got] = '\0';
			answered = strstr(peek, "HTTP/1.1 413") && strstr(peek, "body_too_large");
			if (!answered)
				fail_msg("a chunked body past --max-body: %s", peek);
		}
		if (!answered)
			nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	}
	close(fd);
	if (!answered)
		fail_msg("64 chunks of 32 bytes past --max-body 64 and no 413");
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
}

/* The request target is bounded (4 KiB: a 400 that says so), and so are all the headers together
 * (32 KiB, http-parser's limit: the connection ends); just under either is served. */
static void header_sizes_are_bounded(void **state)
{
	(void)state;
	struct gate g = gate_start(NULL, NULL);
	static char req[64 * 1024], buf[16384];
	/* A target of 4,096 bytes is read (and not found); 4,097 is refused as too long. */
	for (int extra = 0; extra < 2; extra++) {
		int fd = raw_connect(g.port);
		int n = snprintf(req, sizeof req,
		    "GET /%0*d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 4095 + extra, 0);
		assert_true(n > 0 && (size_t)n < sizeof req);
		raw_send(fd, req);
		raw_read(fd, buf, sizeof buf, NULL);
		close(fd);
		const char *want = extra ? "HTTP/1.1 400" : "HTTP/1.1 404";
		if (strncmp(buf, want, strlen(want)) != 0
		    || (extra && !strstr(buf, "the request target is longer than 4096 bytes")))
			fail_msg("a request target of %d bytes: %s", 4096 + extra, buf);
	}
	/* Headers of about 30 KiB are read; about 40 KiB end the connection before any answer. */
	for (int big = 0; big < 2; big++) {
		int fd = raw_connect(g.port);
		size_t n = (size_t)snprintf(req, sizeof req, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
		for (int h = 0; h < (big ? 40 : 30); h++)
			n += (size_t)snprintf(req + n, sizeof req - n, "X-Pad-%02d: %01000d\r\n", h, 0);
		n += (size_t)snprintf(req + n, sizeof req - n, "Connection: close\r\n\r\n");
		assert_true(n < sizeof req);
		send(fd, req, n, MSG_NOSIGNAL); /* the gateway may close before it has all of it */
		raw_read(fd, buf, sizeof buf, NULL);
		close(fd);
		if (big ? strstr(buf, "HTTP/1.1 200") != NULL : strncmp(buf, "HTTP/1.1 200", 12) != 0)
			fail_msg("%zu bytes of headers: %s", n, buf[0] ? buf : "(closed, no answer)");
	}
	assert_int_equal(http(g.port, "GET", "/healthz", NULL).status, 200);
	gate_stop(&g, 5000);
}

struct slow_post {
	int port;
	struct http_result r;
};

static void *post_slow(void *arg)
{
	struct slow_post *s = arg;
	s->r = http(s->port, "POST", "/devices/d/commands/slow", "");
	return NULL;
}

static void beyond_max_pending_is_503_and_shutdown_finishes_what_is_in_flight(void **state)
{
	(void)state;
	struct tb_responder dev = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/+/commands/slow", "--delay", "600ms", NULL);
	struct gate g = gate_start(NULL, "--max-pending", "1", NULL);
	struct slow_post first = { .port = g.port };
	pthread_t t;
	pthread_create(&t, NULL, post_slow, &first);
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL);
	struct http_result r = http(g.port, "POST", "/devices/d/commands/slow", "");
	assert_int_equal(r.status, 503);
	char buf[64];
	assert_string_equal(json_str(r.body, "error", buf, sizeof buf), "pool_exhausted");
	assert_non_null(strstr(r.headers, "Retry-After: 1"));
	pthread_join(t, NULL);
	assert_int_equal(first.r.status, 200);

	/* SIGTERM while a command is in flight: it completes, then the process exits 0. */
	first = (struct slow_post) { .port = g.port };
	pthread_create(&t, NULL, post_slow, &first);
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL);
	uint64_t took = gate_stop(&g, 5000);
	pthread_join(t, NULL);
	assert_int_equal(first.r.status, 200);
	assert_true(took >= 300 * MQC_NS_PER_MS); /* it waited for the reply */
	tb_test_responder_stop(&dev);
}

static long long metric(int port, const char *name);

struct route_post {
	int port;
	const char *path;
	struct http_result r;
	uint64_t done_at;
};

static void *post_route(void *arg)
{
	struct route_post *s = arg;
	s->r = http(s->port, "POST", s->path, "");
	s->done_at = mqc_now_ns();
	return NULL;
}

/* Whether the gateway's log (stdout and stderr) says needle, waiting up to timeout_ms. */
static bool gate_said(const struct gate *g, const char *needle, int timeout_ms)
{
	uint64_t until = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	do {
		FILE *f = fopen(g->proc.log, "r");
		char line[1024];
		bool found = false;
		while (f && !found && fgets(line, sizeof line, f))
			found = strstr(line, needle) != NULL;
		if (f)
			fclose(f);
		if (found)
			return true;
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	} while (mqc_now_ns() < until);
	return false;
}

/* Signal the gateway and wait (timeout_ms at most) for it to exit; its wait status. */
static int gate_signal_and_wait(struct gate *g, int sig, int timeout_ms)
{
	kill(g->proc.pid, sig);
	uint64_t until = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	int status = 0;
	pid_t got;
	while ((got = waitpid(g->proc.pid, &status, WNOHANG)) == 0 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	if (got != g->proc.pid) {
		kill(g->proc.pid, SIGKILL);
		waitpid(g->proc.pid, NULL, 0);
		fail_msg("gate-api did not exit within %d ms of signal %d", timeout_ms, sig);
	}
	return status;
}

/* Whether a new TCP connection to port is refused (nobody listens). */
static bool connect_refused(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bool refused = connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno == ECONNREFUSED;
	close(fd);
	return refused;
}

/* SIGINT, like SIGTERM: the listener closes at once (a new connection is refused); a request whose
 * body was still on its way gets 503 shutting_down; the command in flight finishes and gets its
 * 200 with Connection: close, so what was pipelined behind it is not served; the drain ends when
 * nothing is left, well before --drain; exit 0. */
static void sigint_drains_open_connections_with_503_and_refuses_new_ones(void **state)
{
	(void)state;
	struct tb_responder dev = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/+/commands/slow", "--delay", "800ms", NULL);
	struct gate g = gate_start(NULL, "--drain", "5s", "--workers", "1", NULL);
	/* k: a command in flight with a second pipelined behind it; h: a request whose body has not
	 * come yet. */
	int k = raw_connect(g.port), h = raw_connect(g.port);
	raw_send(k,
	    "POST /devices/k/commands/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
	    "POST /devices/k2/commands/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
	raw_send(h, "POST /devices/h/commands/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n\r\n");
	/* i: an idle kept-alive connection, answered once. */
	int i = raw_connect(g.port);
	char buf[8192];
	raw_send(i, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	raw_read(i, buf, sizeof buf, "}");
	assert_int_equal(strncmp(buf, "HTTP/1.1 200", 12), 0);
	uint64_t until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (metric(g.port, "gate_api_pending") != 1 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(metric(g.port, "gate_api_pending"), 1);
	uint64_t t0 = mqc_now_ns();
	kill(g.proc.pid, SIGINT);
	if (!gate_said(&g, "draining", 5000))
		fail_msg("no 'draining' line after SIGINT");
	/* The line is printed as the stop begins: the listener closes on the worker's loop. */
	bool refused = false;
	for (int k2 = 0; k2 < 200 && !(refused = connect_refused(g.port)); k2++)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	if (!refused)
		fail_msg("new connections were still accepted 2 s into the drain");
	/* The idle one is closed at once: it reads the end of the stream, nothing else (a recv
	 * that times out is not a close). */
	struct pollfd pi = { .fd = i, .events = POLLIN };
	if (poll(&pi, 1, 2000) != 1 || recv(i, buf, sizeof buf, 0) != 0)
		fail_msg("an idle kept-alive connection was not closed within 2 s of SIGINT");
	close(i);
	raw_send(h, "{\"n\":1}");
	raw_read(h, buf, sizeof buf, "}");
	close(h);
	if (!strstr(buf, "HTTP/1.1 503") || !strstr(buf, "shutting_down"))
		fail_msg("a request completed while draining: %s", buf);
	raw_read(k, buf, sizeof buf, NULL);
	close(k);
	/* Answered while draining, it closes its connection: the request pipelined behind it is
	 * neither served nor sent to the device (the client sees the close, nothing else). */
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0 || !strstr(buf, "\"device\":\"k\"")
	    || !strstr(buf, "Connection: close") || strstr(buf, "k2"))
		fail_msg("the command in flight and the one pipelined behind it: %s", buf);
	int status = gate_signal_and_wait(&g, 0, 5000);
	uint64_t took = mqc_now_ns() - t0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("gate-api exited with status 0x%x after SIGINT", status);
	if (!gate_said(&g, "stopped;", 0) || gate_said(&g, "timed out", 0))
		fail_msg("the drain should end on its own, not at --drain");
	assert_true(took < 3 * MQC_NS_PER_S); /* the 800 ms command, not the 5 s --drain */
	unlink(g.proc.log);
	/* One command reached the device: k's. Neither h's nor k2's was published. */
	assert_int_equal(tb_test_responder_stop(&dev).requests, 1);
}

/* --drain is a deadline: a command that would take longer is cut, the process exits 0 soon after
 * the deadline, and says the drain timed out. */
static void the_drain_deadline_is_kept(void **state)
{
	(void)state;
	struct tb_responder dev = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/+/commands/slow", "--delay", "5s", NULL);
	struct gate g = gate_start(NULL, "--drain", "500ms", "--timeout", "10s", NULL);
	struct route_post slow = { .port = g.port, .path = "/devices/d/commands/slow" };
	pthread_t t;
	pthread_create(&t, NULL, post_route, &slow);
	uint64_t until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (metric(g.port, "gate_api_pending") != 1 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(metric(g.port, "gate_api_pending"), 1);
	uint64_t t0 = mqc_now_ns();
	int status = gate_signal_and_wait(&g, SIGTERM, 5000);
	uint64_t took = mqc_now_ns() - t0;
	pthread_join(t, NULL);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("gate-api exited with status 0x%x", status);
	if (!gate_said(&g, "(the drain timed out)", 0))
		fail_msg("the gateway does not say its drain timed out");
	if (took < 450 * MQC_NS_PER_MS || took > 3 * MQC_NS_PER_S)
		fail_msg(
		    "exited %.2f s after SIGTERM with --drain 500ms and a 5 s command", (double)took / 1e9);
	assert_true(slow.r.status != 200); /* cut, not answered */
	unlink(g.proc.log);
	tb_test_responder_kill(&dev);
}

/* The value of the sample named exactly name (labels included) in /metrics, or -1. */
static long long metric(int port, const char *name)
{
	struct http_result r = http(port, "GET", "/metrics", NULL);
	size_t n = strlen(name);
	for (const char *line = r.body; line && *line; line = strchr(line, '\n'), line += !!line)
		if (strncmp(line, name, n) == 0 && line[n] == ' ')
			return atoll(line + n + 1);
	return -1;
}

static void a_client_that_goes_away_cancels_its_command(void **state)
{
	(void)state;
	struct tb_responder dev = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/+/commands/slow", "--delay", "1500ms", NULL);
	struct gate g = gate_start(NULL, "--timeout", "3s", NULL);
	for (int naive = 0; naive < 2; naive++) {
		const char *route = naive ? "naive" : "pool";
		char req[256], name[96];
		int n = snprintf(req, sizeof req,
		    "POST %s/devices/d/commands/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		    naive ? "/naive" : "");
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)g.port) };
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
		assert_int_equal(write(fd, req, (size_t)n), n);
		/* The command is out and waits for the device (1.5 s): go away. */
		uint64_t t0 = mqc_now_ns();
		while (metric(g.port, "gate_api_pending") != 1 && mqc_now_ns() - t0 < MQC_NS_PER_S)
			nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		assert_int_equal(metric(g.port, "gate_api_pending"), 1);
		close(fd);
		t0 = mqc_now_ns();
		while (metric(g.port, "gate_api_pending") != 0 && mqc_now_ns() - t0 < 2 * MQC_NS_PER_S)
			nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		uint64_t took = mqc_now_ns() - t0;
		/* Cancelled, not finished: the device has not answered yet. */
		if (took > 500 * MQC_NS_PER_MS)
			fail_msg("%s: the command was still pending %llu ms after its client left", route,
			    (unsigned long long)(took / MQC_NS_PER_MS));
		snprintf(name, sizeof name, "gate_api_abandoned_total{route=\"%s\"}", route);
		assert_int_equal(metric(g.port, name), 1);
		/* Nothing answered it, and the gateway serves on. */
		snprintf(name, sizeof name, "gate_api_responses_total{route=\"%s\",status=\"200\"}", route);
		assert_int_equal(metric(g.port, name), 0);
	}
	assert_int_equal(metric(g.port, "mqttpool_cancels_total"), 1);
	assert_int_equal(http(g.port, "GET", "/healthz", NULL).status, 200);
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
}

static void an_unreachable_broker_is_502_with_the_reason(void **state)
{
	(void)state;
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", tb_test_free_port());
	struct gate g = gate_start(url, "--timeout", "3s", NULL);
	for (int naive = 0; naive < 2; naive++) {
		uint64_t t0 = mqc_now_ns();
		struct http_result r = http(g.port, "POST",
		    naive ? "/naive/devices/a/commands/open" : "/devices/a/commands/open", "");
		assert_int_equal(r.status, 502);
		char buf[256];
		assert_string_equal(json_str(r.body, "error", buf, sizeof buf), "broker_unreachable");
		if (!strstr(json_str(r.body, "message", buf, sizeof buf), "refused"))
			fail_msg("the message does not say why: %s", r.body);
		assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S); /* fails fast, not at the timeout */
	}
	struct http_result h = http(g.port, "GET", "/healthz", NULL);
	assert_int_equal(h.status, 503);
	char buf[256];
	if (!strstr(json_str(h.body, "reason", buf, sizeof buf), "Connection refused"))
		fail_msg("/healthz does not say why: %s", h.body); /* the pool's own words */
	gate_stop(&g, 5000);
}

/* mqtts:// checks the broker's name: a certificate from the right CA for another host is
 * refused on both routes, said in the 502's message and in /healthz, by address and by name. */
static void a_broker_certificate_for_another_host_is_refused_on_both_routes(void **state)
{
	(void)state;
	const struct tb_info *info = tb_test_info();
	char by_name[80];
	snprintf(by_name, sizeof by_name, "mqtts://localhost:%d", info->other_host_port);
	const char *urls[] = { info->other_host_url, by_name };
	const char *want[] = { "IP address mismatch", "hostname mismatch" };
	for (int k = 0; k < 2; k++) {
		struct gate g = gate_start(urls[k], "--cafile", info->ca_file, "--timeout", "3s", NULL);
		for (int naive = 0; naive < 2; naive++) {
			struct http_result r = http(g.port, "POST",
			    naive ? "/naive/devices/a/commands/open" : "/devices/a/commands/open", "");
			if (r.status != 502 || !strstr(r.body, "certificate verification failed")
			    || !strstr(r.body, want[k]))
				fail_msg(
				    "%s, %s route: %d %s", urls[k], naive ? "naive" : "pool", r.status, r.body);
		}
		struct http_result h = http(g.port, "GET", "/healthz", NULL);
		if (h.status != 503 || !strstr(h.body, want[k]))
			fail_msg("%s: /healthz %d %s", urls[k], h.status, h.body);
		gate_stop(&g, 5000);
	}
}

static void the_broker_going_down_is_502_then_the_gateway_recovers(void **state)
{
	(void)state;
	struct tb_responder dev
	    = tb_test_responder(RESPONDER_PATH, "--filter", "devices/+/commands/open", NULL);
	/* A device that takes its command and never answers: a command in flight when the broker
	 * dies. */
	struct tb_responder mute = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/+/commands/mute", "--drop", "1", NULL);
	/* One worker: /healthz then speaks for the pool that serves the next command (with two,
	 * each pool has its own backoff after the restart). */
	struct gate g = gate_start(NULL, "--timeout", "10s", "--workers", "1", NULL);
	assert_int_equal(http(g.port, "POST", "/devices/a/commands/open", "").status, 200);
	struct route_post inflight[2] = {
		{ .port = g.port, .path = "/devices/a/commands/mute" },
		{ .port = g.port, .path = "/naive/devices/a/commands/mute" },
	};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, post_route, &inflight[i]);
	uint64_t until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (metric(g.port, "gate_api_pending") != 2 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(metric(g.port, "gate_api_pending"), 2);
	/* The broker dies: the commands in flight are 502 broker_connection_lost at once (not at the
	 * 10 s timeout), both routes then say 502 with the reason, fast; health says 503. */
	/* Taken before the signal: the answer can be recorded by the client thread before this
	 * thread runs again after kill(). */
	uint64_t killed = mqc_now_ns();
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGKILL), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		char buf[256];
		if (inflight[i].r.status != 502
		    || strcmp(
		           json_str(inflight[i].r.body, "error", buf, sizeof buf), "broker_connection_lost")
		        != 0)
			fail_msg("%s in flight when the broker died: %d %s", inflight[i].path,
			    inflight[i].r.status, inflight[i].r.body);
		if (inflight[i].done_at - killed > 2 * MQC_NS_PER_S)
			fail_msg("%s: answered %.1f s after the broker died", inflight[i].path,
			    (double)(inflight[i].done_at - killed) / 1e9);
	}
	tb_test_responder_kill(&mute);
	until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (tb_broker_alive(tb_test_broker(), NULL) && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	tb_test_responder_kill(&dev); /* not needed past here */
	/* The pool has seen the close once /healthz says it has no connection. */
	until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (http(g.port, "GET", "/healthz", NULL).status != 503 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	for (int naive = 0; naive < 2; naive++) {
		uint64_t t0 = mqc_now_ns();
		struct http_result r = http(g.port, "POST",
		    naive ? "/naive/devices/a/commands/open" : "/devices/a/commands/open", "");
		char buf[256];
		if (r.status != 502
		    || strcmp(json_str(r.body, "error", buf, sizeof buf), "broker_unreachable") != 0)
			fail_msg(
			    "%s route with the broker down: %d %s", naive ? "naive" : "pool", r.status, r.body);
		assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S);
	}
	/* It comes back: the pool reconnects on its own (backoff at most 5 s). */
	char err[512];
	if (tb_broker_restart(tb_test_broker(), err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	dev = tb_test_responder(RESPONDER_PATH, "--filter", "devices/+/commands/open", NULL);
	/* The event: /healthz says a connection is ready again; then the next command is served. */
	until = mqc_now_ns() + 10 * MQC_NS_PER_S;
	while (http(g.port, "GET", "/healthz", NULL).status != 200 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	assert_int_equal(http(g.port, "GET", "/healthz", NULL).status, 200);
	struct http_result back = http(g.port, "POST", "/devices/a/commands/open", "");
	if (back.status != 200)
		fail_msg("the first command once /healthz said 200: %d %s", back.status, back.body);
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
}

static void a_command_the_broker_refuses_is_403(void **state)
{
	(void)state;
	/* The limited user may publish only under limited/#: the broker answers PUBACK 0x87. */
	const struct tb_info *info = tb_test_info();
	struct gate g = gate_start(NULL, "--username", info->other_username, "--password",
	    info->other_password, "--qos", "1", NULL);
	struct http_result r = http(g.port, "POST", "/devices/a/commands/open", "");
	char buf[128];
	if (r.status != 403 || strcmp(json_str(r.body, "error", buf, sizeof buf), "forbidden") != 0)
		fail_msg("got %d %s", r.status, r.body);
	gate_stop(&g, 5000);
}

/* Run gate-api with these arguments (after --broker url and --listen), expect it to exit with
 * want within 15 s, and return what it said. */
static void run_to_exit(const char *url, const char *args, int want, char *out, size_t len)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "timeout 15 %s --broker %s --listen 127.0.0.1:0 %s 2>&1",
	    GATE_API_PATH, url, args);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	size_t n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	int status = pclose(f);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != want)
		fail_msg("%s: status 0x%x (want exit %d), said: %s", cmd, status, want, out);
}

/* A broker that refuses the gateway will refuse every command: it says so and stops, instead
 * of serving 502s; the reason is the broker's, in words. */
static void a_broker_that_refuses_the_gateway_stops_it_with_the_reason(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	char out[4096], args[256];
	snprintf(args, sizeof args, "--username %s --password wrong", i->username);
	run_to_exit(i->mqtt_url, args, 1, out, sizeof out);
	if (!strstr(out, "the broker refuses the gateway")
	    || !strstr(out, "refused CONNECT: not authorized (reason code 0x87)")
	    || strstr(out, "GATE_API_READY"))
		fail_msg("a wrong password: %s", out);
	/* A broker that speaks only MQTT 3.1.1 (tb-fake-broker plays aedes): confirmed, and what to
	 * change is said. */
	const char *argv[] = { FAKE_BROKER_PATH, "--mode", "v311-only", NULL };
	struct tb_responder fake = tb_test_spawn("ready", argv);
	char url[64] = "";
	FILE *log = fopen(fake.log, "r");
	assert_non_null(log);
	char line[128];
	while (fgets(line, sizeof line, log))
		if (sscanf(line, "FAKE_BROKER_URL=%63s", url) == 1)
			break;
	fclose(log);
	run_to_exit(url, "", 1, out, sizeof out);
	if (!strstr(out,
	        "does not accept MQTT 5 (confirmed: it answered the MQTT 5 CONNECT with a "
	        "3.1.1 CONNACK")
	    || !strstr(out, "an MQTT 3.1.1 CONNECT right after was accepted")
	    || !strstr(out, "--protocol 3.1.1"))
		fail_msg("a 3.1.1-only broker: %s", out);
	tb_test_responder_kill(&fake);
}

/* A broker that starts refusing the gateway after it started (here: none at first, then one that
 * refuses every CONNECT on that port): both routes answer 502 broker_refused with the reason, at
 * once - the pooled route as fast as the naive one - and /healthz says why. */
static void a_broker_that_refuses_later_is_502_broker_refused(void **state)
{
	(void)state;
	int port = tb_test_free_port();
	char url[64], port_s[16];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", port);
	snprintf(port_s, sizeof port_s, "%d", port);
	/* One worker: with two, each has its own pool and backoff, and a request could reach the
	 * one whose last attempt (before the fake broker listened) was still "connection refused"
	 * (CI saw it once). Refusals per worker are the same code. */
	struct gate g = gate_start(url, "--timeout", "2s", "--workers", "1", NULL);
	const char *argv[] = { FAKE_BROKER_PATH, "--mode", "refuse", "--port", port_s, NULL };
	struct tb_responder fake = tb_test_spawn("ready", argv);
	char buf[512];
	struct http_result r = { 0 };
	uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S; /* the pool's backoff is at most 5 s */
	while (mqc_now_ns() < until) {
		r = http(g.port, "POST", "/devices/x/commands/open", "");
		if (r.status == 502
		    && strcmp(json_str(r.body, "error", buf, sizeof buf), "broker_refused") == 0)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
	}
	if (strcmp(json_str(r.body, "error", buf, sizeof buf), "broker_refused") != 0
	    || !strstr(r.body, "not authorized"))
		fail_msg("the pooled route against a broker that refuses: %d %s", r.status, r.body);
	uint64_t took[2] = { 0 };
	for (int route = 0; route < 2; route++) {
		const char *path = route ? "/naive/devices/x/commands/open" : "/devices/x/commands/open";
		for (int k = 0; k < 5; k++) {
			uint64_t t0 = mqc_now_ns();
			r = http(g.port, "POST", path, "");
			took[route] += mqc_now_ns() - t0;
			if (r.status != 502
			    || strcmp(json_str(r.body, "error", buf, sizeof buf), "broker_refused") != 0)
				fail_msg("%s: %d %s", path, r.status, r.body);
		}
	}
	/* Five each: the pooled route fails at once, the naive one pays a CONNECT each time. */
	if (took[0] > took[1] * 2 + 50 * MQC_NS_PER_MS)
		fail_msg("pooled route %.1f ms against naive %.1f ms for five refusals",
		    (double)took[0] / 1e6, (double)took[1] / 1e6);
	r = http(g.port, "GET", "/healthz", NULL);
	if (r.status != 503 || !strstr(r.body, "\"reason\"") || !strstr(r.body, "not authorized"))
		fail_msg("/healthz while refused: %d %s", r.status, r.body);
	gate_stop(&g, 5000);
	tb_test_responder_kill(&fake);
}

/* MQTT 3.1.1 devices answer on a fixed reply topic: both routes serve them (--protocol 3.1.1),
 * concurrently for distinct devices; the responder and the gateway at their defaults agree on it
 * (replies/{topic}, outside the responder's command filter). */
struct legacy_client {
	int port, id, ok;
	bool naive;
	struct http_result bad; /* the last answer that was not the device's */
};

static void *legacy_client(void *arg)
{
	struct legacy_client *c = arg;
	for (int k = 0; k < 10; k++) {
		char path[96], body[64], want[96];
		snprintf(
		    path, sizeof path, "%s/devices/d%d/commands/open", c->naive ? "/naive" : "", c->id);
		snprintf(body, sizeof body, "{\"n\":%d}", k);
		snprintf(want, sizeof want, "\"reply\":{\"n\":%d}", k);
		struct http_result r = http(c->port, "POST", path, body);
		if (r.status == 200 && strstr(r.body, want))
			c->ok++;
		else
			c->bad = r;
	}
	return NULL;
}

static void legacy_devices_over_311_on_both_routes(void **state)
{
	(void)state;
	struct tb_responder dev = tb_test_responder(RESPONDER_PATH, "--protocol", "3.1.1", NULL);
	struct gate g = gate_start(NULL, "--protocol", "3.1.1", "--timeout", "3s", NULL);
	enum { N = 4 };
	pthread_t t[2 * N];
	struct legacy_client c[2 * N];
	for (int i = 0; i < 2 * N; i++) {
		/* distinct devices: two clients on one reply topic see each other's replies (the
		 * legacy model's limit, said in the README) */
		c[i] = (struct legacy_client) { .port = g.port, .id = i, .naive = i >= N };
		pthread_create(&t[i], NULL, legacy_client, &c[i]);
	}
	for (int i = 0; i < 2 * N; i++) {
		pthread_join(t[i], NULL);
		if (c[i].ok != 10)
			fail_msg("%s client %d: %d of 10 answered; one got %d %s",
			    c[i].naive ? "naive" : "pool", i, c[i].ok, c[i].bad.status, c[i].bad.body);
	}
	assert_int_equal(http(g.port, "GET", "/healthz", NULL).status, 200);
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
}

/* Behind a reverse proxy or a load balancer every connection comes from one address, and a
 * benchmark (wrk -c100) opens a hundred from one: at its defaults the gateway serves them all,
 * kept alive, and refuses none. */
static void a_hundred_connections_from_one_address_at_the_defaults(void **state)
{
	(void)state;
	struct gate g = gate_start(NULL, NULL);
	enum { N = 100 };
	int fd[N];
	struct sockaddr_in sa = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)g.port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	for (int i = 0; i < N; i++) {
		fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(fd[i] >= 0);
		assert_int_equal(connect(fd[i], (struct sockaddr *)&sa, sizeof sa), 0);
	}
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	for (int round = 0; round < 2; round++) { /* the same connections again: kept alive */
		for (int i = 0; i < N; i++)
			assert_int_equal(
			    send(fd[i], req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)sizeof req - 1);
		int ok = 0;
		for (int i = 0; i < N; i++) {
			char buf[1024] = "";
			size_t got = 0;
			uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S;
			while (!strstr(buf, "\"status\":\"ok\"}") && got < sizeof buf - 1
			    && mqc_now_ns() < until) {
				struct pollfd p = { .fd = fd[i], .events = POLLIN };
				if (poll(&p, 1, 1000) <= 0)
					continue;
				ssize_t n = recv(fd[i], buf + got, sizeof buf - 1 - got, 0);
				if (n <= 0)
					break;
				got += (size_t)n;
				buf[got] = '\0';
			}
			ok += strncmp(buf, "HTTP/1.1 200 ", 13) == 0 && strstr(buf, "\"status\":\"ok\"}");
		}
		if (ok != N)
			fail_msg("round %d: %d of %d connections from one address answered 200", round, ok, N);
	}
	for (int i = 0; i < N; i++)
		close(fd[i]);
	FILE *f = fopen(g.proc.log, "r");
	assert_non_null(f);
	char line[512];
	while (fgets(line, sizeof line, f))
		if (strstr(line, "refused a connection"))
			fail_msg("at its defaults the gateway refused: %s", line);
	fclose(f);
	gate_stop(&g, 5000);
}

static void bad_options_are_refused_with_a_message(void **state)
{
	(void)state;
	static const char *const cases[][4] = {
		{ "--timeout", "0", "--timeout: expected a duration from 1ms to 600s, got '0'" },
		{ "--qos", "3", "--qos: expected 0, 1 or 2, got '3'" },
		{ "-q", "3", "-q: expected 0, 1 or 2, got '3'" },
		{ "--listen", "nowhere", "--listen: expected IPV4:PORT or [IPV6]:PORT" },
		{ "--listen", "[::1]", "--listen: expected IPV4:PORT or [IPV6]:PORT" },
		{ "--listen", "::1:80", "--listen: expected IPV4:PORT or [IPV6]:PORT" },
		{ "--listen", "[::1]:65536", "--listen: expected IPV4:PORT or [IPV6]:PORT" },
		{ "--topic-prefix", "a/#", "--topic-prefix: expected a topic without wildcards" },
		{ "--workers", "20", "--workers 20 needs --pool-max 20 or more" },
		{ "--workers", "0", "--workers: expected 1 to 256, got '0'" },
		{ "--protocol", "6", "--protocol: expected 5 or 3.1.1, got '6'" },
		{ "--reply-topic-template", "d/+/r",
		    "--reply-topic-template: expected a reply-topic template (a wildcard outside" },
		{ "--reply-topic-template", "{prefix}/{id}/replies",
		    "(unknown placeholder {prefix}: {topic} and {1}..{9} exist)" },
		{ "--reply-topic-template", "r/{5}",
		    "names a level a command topic does not have: commands are "
		    "devices/{id}/commands/{command}, levels {1} to {4}" },
		{ "--password-file", "/nonexistent", "--password-file /nonexistent: No such file" },
		{ "--broker", "http://x", "--broker 'http://x'" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char cmd[512];
		snprintf(cmd, sizeof cmd, "%s --broker mqtt://127.0.0.1:1 %s '%s' 2>&1", GATE_API_PATH,
		    cases[i][0], cases[i][1]);
		FILE *f = popen(cmd, "r");
		assert_non_null(f);
		char out[512] = "";
		size_t n = fread(out, 1, sizeof out - 1, f);
		out[n] = '\0';
		int status = pclose(f);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 2 || !strstr(out, cases[i][2]))
			fail_msg("%s: status 0x%x, said: %s", cmd, status, out);
	}
}

/* Two brokers in --broker: the pools spread over both, /healthz and /metrics say per node, and a
 * node SIGKILLed leaves the other serving - /healthz calls it down, mqttpool_node_up 0. */
static bool health_says(int port, const char *want, int timeout_ms)
{
	uint64_t until = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	for (;;) {
		struct http_result r = http(port, "GET", "/healthz", NULL);
		if (strstr(r.body, want))
			return true;
		if (mqc_now_ns() >= until) {
			print_message("/healthz: %s\n", r.body);
			return false;
		}
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	}
}

/* GET /healthz over IPv6 loopback, on the gateway listening at port: the status line. */
static void healthz_over_ipv6(int port, char *buf, size_t cap)
{
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in6 a = { .sin6_family = AF_INET6,
		.sin6_port = htons((uint16_t)port),
		.sin6_addr = IN6ADDR_LOOPBACK_INIT };
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	raw_send(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	raw_read(fd, buf, cap, NULL);
	close(fd);
}

/* --listen as users type an IPv6 address: [::1]:0 serves on IPv6 loopback and says so in its
 * ready line; [::]:0 serves IPv6 and IPv4 alike. */
static void listens_on_ipv6_as_users_type_it(void **state)
{
	(void)state;
	char buf[4096];
	const char *v6[]
	    = { GATE_API_PATH, "--broker", tb_test_info()->mqtt_url, "--listen", "[::1]:0", NULL };
	struct gate g = gate_start_head(v6, NULL);
	if (strcmp(g.host, "[::1]") != 0)
		fail_msg("its ready line names %s, not [::1]", g.host);
	healthz_over_ipv6(g.port, buf, sizeof buf);
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
		fail_msg("GET /healthz on [::1]:%d: %s", g.port, buf);
	gate_stop(&g, 5000);

	const char *any[]
	    = { GATE_API_PATH, "--broker", tb_test_info()->mqtt_url, "--listen", "[::]:0", NULL };
	g = gate_start_head(any, NULL);
	healthz_over_ipv6(g.port, buf, sizeof buf);
	if (strncmp(buf, "HTTP/1.1 200", 12) != 0)
		fail_msg("GET /healthz on [::1]:%d of [::]: %s", g.port, buf);
	struct http_result r = http(g.port, "GET", "/healthz", NULL); /* IPv4 on the same socket */
	if (r.status != 200)
		fail_msg("GET /healthz on 127.0.0.1:%d of [::]: status %d", g.port, r.status);
	gate_stop(&g, 5000);
}

/* A second mosquitto beside the test's (anonymous, no TLS, no probe): a node of its own. */
static struct tb_broker *second_broker(void)
{
	struct tb_options o = { .no_tls = true,
		.no_probe = true,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	struct tb_broker *b;
	char err[512];
	if (tb_broker_start(&o, &b, err, sizeof err) != 0)
		fail_msg("a second broker: %s", err);
	return b;
}

static void two_brokers_one_gateway(void **state)
{
	(void)state;
	struct tb_broker *b2 = second_broker();
	int port1 = tb_test_info()->port, port2 = tb_broker_info(b2)->port;
	char list[128], up1[64], up2[64], down2[64], metric_up2[96];
	snprintf(list, sizeof list, "mqtt://127.0.0.1:%d,127.0.0.1:%d", port1, port2);
	snprintf(up1, sizeof up1, "\"127.0.0.1:%d\":\"up\"", port1);
	snprintf(up2, sizeof up2, "\"127.0.0.1:%d\":\"up\"", port2);
	snprintf(down2, sizeof down2, "\"127.0.0.1:%d\":\"down\"", port2);
	snprintf(metric_up2, sizeof metric_up2, "mqttpool_node_up{node=\"127.0.0.1:%d\"}", port2);
	struct tb_responder dev1 = tb_test_responder(RESPONDER_PATH, NULL);
	const char *argv[] = { RESPONDER_PATH, "--broker", tb_broker_info(b2)->mqtt_url, NULL };
	struct tb_responder dev2 = tb_test_spawn("RESPONDER_READY", argv);
	struct gate g = gate_start(list, "--workers", "1", "--pool-min", "2", NULL);
	assert_true(health_says(g.port, up1, 5000));
	assert_true(health_says(g.port, up2, 5000));
	for (int i = 0; i < 20; i++)
		assert_int_equal(
		    http(g.port, "POST", i % 4 ? "/devices/d1/commands/x" : "/naive/devices/d1/commands/x",
		        "{}")
		        .status,
		    200);
	struct http_result m = http(g.port, "GET", "/metrics", NULL);
	char *at = strstr(m.body, metric_up2);
	assert_non_null(at);
	assert_int_equal(strtol(at + strlen(metric_up2), NULL, 10), 1);
	assert_int_equal(tb_broker_signal(b2, SIGKILL), 0);
	assert_true(health_says(g.port, down2, 10000));
	for (int i = 0; i < 10; i++)
		assert_int_equal(http(g.port, "POST", "/devices/d1/commands/x", "{}").status, 200);
	m = http(g.port, "GET", "/metrics", NULL);
	at = strstr(m.body, metric_up2);
	assert_non_null(at);
	assert_int_equal(strtol(at + strlen(metric_up2), NULL, 10), 0);
	gate_stop(&g, 5000);
	tb_test_responder_kill(&dev2);
	tb_broker_stop(b2);
	tb_test_responder_stop(&dev1);
}

/* Commands without pause until told to stop: counted 200, 502 naming a silent broker, other. */
struct hammer {
	int port;
	atomic_bool stop;
	atomic_uint ok, silent, other;
	char last_other[256];
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	while (!atomic_load(&h->stop)) {
		struct http_result r = http(h->port, "POST", "/devices/d1/commands/x", "{}");
		if (r.status == 200)
			atomic_fetch_add(&h->ok, 1);
		else if (r.status == 502 && strstr(r.body, "is unresponsive: nothing received for"))
			atomic_fetch_add(&h->silent, 1);
		else {
			snprintf(h->last_other, sizeof h->last_other, "%d %.200s", r.status, r.body);
			atomic_fetch_add(&h->other, 1);
		}
	}
	return NULL;
}

/* 8 clients hammering for ms, or (until non-NULL) until /healthz says until. */
static struct hammer *hammer(int port, int ms, const char *until, uint64_t *seen_after)
{
	static struct hammer h;
	memset(&h, 0, sizeof h);
	h.port = port;
	pthread_t t[8];
	for (int i = 0; i < 8; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer_run, &h), 0);
	uint64_t t0 = mqc_now_ns();
	while (mqc_now_ns() - t0 < (uint64_t)ms * MQC_NS_PER_MS) {
		if (until && strstr(http(port, "GET", "/healthz", NULL).body, until)) {
			*seen_after = mqc_now_ns() - t0;
			break;
		}
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	}
	atomic_store(&h.stop, true);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	return &h;
}

/* A broker that hangs instead of dying (SIGSTOP: its kernel keeps the connections open and
 * acknowledges, nothing answers), under 8 clients: within 2 s /healthz names it unresponsive and
 * since when, and /metrics says so; what was in flight on it is answered 502 with the reason
 * (never a 504 after the whole timeout); every command after that is served by the other
 * broker; after SIGCONT it is "up" again. */
static void a_hung_broker_is_named_and_routed_around(void **state)
{
	(void)state;
	struct tb_broker *b2 = second_broker();
	int port1 = tb_test_info()->port, port2 = tb_broker_info(b2)->port;
	char list[128], up2[64], silent2[64], metric[112];
	snprintf(list, sizeof list, "mqtt://127.0.0.1:%d,127.0.0.1:%d", port1, port2);
	snprintf(up2, sizeof up2, "\"127.0.0.1:%d\":\"up\"", port2);
	snprintf(silent2, sizeof silent2, "\"127.0.0.1:%d\":\"unresponsive\"", port2);
	snprintf(metric, sizeof metric, "mqttpool_node_unresponsive{node=\"127.0.0.1:%d\"}", port2);
	struct tb_responder dev1 = tb_test_responder(RESPONDER_PATH, NULL);
	const char *argv[] = { RESPONDER_PATH, "--broker", tb_broker_info(b2)->mqtt_url, NULL };
	struct tb_responder dev2 = tb_test_spawn("RESPONDER_READY", argv);
	struct gate g = gate_start(list, "--workers", "1", "--pool-min", "4", "--timeout", "5s", NULL);
	assert_true(health_says(g.port, up2, 5000));
	assert_int_equal(tb_broker_signal(b2, SIGSTOP), 0);
	uint64_t named = 0;
	struct hammer *h = hammer(g.port, 5000, silent2, &named);
	unsigned before_ok = atomic_load(&h->ok), lost = atomic_load(&h->silent);
	if (!named || atomic_load(&h->other))
		fail_msg("while the broker hangs: named after %.1f s, %u other answers (%s)",
		    (double)named / 1e9, atomic_load(&h->other), h->last_other);
	assert_non_null(strstr(http(g.port, "GET", "/healthz", NULL).body, "\"unresponsive_since\":{"));
	struct http_result m = http(g.port, "GET", "/metrics", NULL);
	char *at = strstr(m.body, metric);
	assert_non_null(at);
	assert_int_equal(strtol(at + strlen(metric), NULL, 10), 1);
	/* Named: every command from now on is served. */
	h = hammer(g.port, 1000, NULL, NULL);
	print_message("hung broker: named %.2f s after SIGSTOP (%u served, %u answered 502 with the "
	              "reason meanwhile), then %u of %u served\n",
	    (double)named / 1e9, before_ok, lost, atomic_load(&h->ok),
	    atomic_load(&h->ok) + atomic_load(&h->silent) + atomic_load(&h->other));
	assert_true(named <= 2 * MQC_NS_PER_S);
	if (atomic_load(&h->silent) || atomic_load(&h->other))
		fail_msg("after it was named: %u failed (%s)",
		    atomic_load(&h->silent) + atomic_load(&h->other), h->last_other);
	assert_int_equal(tb_broker_signal(b2, SIGCONT), 0);
	assert_true(health_says(g.port, up2, 15000));
	gate_stop(&g, 5000);
	tb_test_responder_kill(&dev2);
	tb_broker_stop(b2);
	tb_test_responder_stop(&dev1);
}

/* A resolver that hangs: the gateway is given a second broker by a name whose DNS server never
 * answers (a mount namespace of its own with a resolv.conf naming a UDP socket here that reads
 * nothing; timeout 5 s). While the pool waits for that name, its loop serves the first broker: no
 * request stalls - a blocking getaddrinfo would hold the loop for the 5 s. */
static void a_hanging_resolver_never_stalls_the_loop(void **state)
{
	(void)state;
	if (geteuid() != 0 || access("/usr/bin/unshare", X_OK) != 0)
		tb_test_skip("root and unshare(1), for a resolv.conf of its own");
	int dns = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in at = { .sin_family = AF_INET, .sin_port = htons(53) };
	inet_pton(AF_INET, "127.0.0.153", &at.sin_addr);
	if (dns < 0 || bind(dns, (struct sockaddr *)&at, sizeof at) != 0)
		tb_test_skip("a UDP socket on 127.0.0.153:53 (taken?)");
	char conf[] = "/tmp/gate-resolv-XXXXXX";
	int fd = mkstemp(conf);
	assert_true(fd >= 0);
	const char text[] = "nameserver 127.0.0.153\noptions timeout:5 attempts:1\n";
	assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
	close(fd);
	chmod(conf, 0644);
	char mount[256], list[128];
	snprintf(mount, sizeof mount, "mount --bind %s /etc/resolv.conf && exec \"$0\" \"$@\"", conf);
	snprintf(list, sizeof list, "mqtt://127.0.0.1:%d,hangs.example:1883", tb_test_info()->port);
	struct tb_responder dev = tb_test_responder(RESPONDER_PATH, NULL);
	const char *head[] = { "/usr/bin/unshare", "-m", "--", "sh", "-c", mount, GATE_API_PATH,
		"--broker", list, "--listen", "127.0.0.1:0", NULL };
	/* One worker, two connections: one of them waits for the name (5 s) from the start. */
	struct gate g = gate_start_head(head, "--workers", "1", "--pool-min", "2", NULL);
	uint64_t t0 = mqc_now_ns(), slowest = 0;
	int n = 0;
	while (mqc_now_ns() - t0 < 3 * MQC_NS_PER_S) { /* well inside the 5 s the name takes */
		uint64_t t = mqc_now_ns();
		assert_int_equal(http(g.port, "POST", "/devices/d1/commands/x", "{}").status, 200);
		t = mqc_now_ns() - t;
		slowest = t > slowest ? t : slowest;
		n++;
	}
	print_message("while a name took 5 s to resolve: %d requests, the slowest %.1f ms\n", n,
	    (double)slowest / 1e6);
	assert_true(slowest < 500 * MQC_NS_PER_MS);
	struct http_result h = http(g.port, "GET", "/healthz", NULL);
	assert_non_null(strstr(h.body, "\"hangs.example:1883\":\"standby\""));
	gate_stop(&g, 5000);
	tb_test_responder_stop(&dev);
	close(dns);
	unlink(conf);
}

/* Over WebSockets (mosquitto 2.1.2's listeners, the device on plain MQTT): the pool's route
 * serves commands over ws:// and wss://, the naive route says 501 why it cannot. */
static void commands_over_websockets(void **state)
{
	(void)state;
	struct tb_broker *b = tb_test_broker_21_ws(MOSQUITTO21_PATH);
	const struct tb_info *info = tb_broker_info(b);
	const char *argv[]
	    = { RESPONDER_PATH, "--broker", info->mqtt_url, "--filter", "devices/+/commands/+", NULL };
	struct tb_responder dev = tb_test_spawn("RESPONDER_READY", argv);
	const char *urls[] = { info->ws_url, info->wss_url };
	for (int u = 0; u < 2; u++) {
		struct gate g = gate_start(
		    urls[u], "--cafile", info->ca_file, "--ws-header", "Authorization: Bearer x", NULL);
		for (int i = 0; i < 20; i++) {
			struct http_result r = http(g.port, "POST", "/devices/d1/commands/open", "{\"n\":1}");
			if (r.status != 200)
				fail_msg("%s: %d %s", urls[u], r.status, r.body);
		}
		struct http_result r = http(g.port, "POST", "/naive/devices/d1/commands/open", "");
		char buf[256];
		if (r.status != 501
		    || strcmp(json_str(r.body, "error", buf, sizeof buf), "not_supported") != 0
		    || !strstr(r.body, "no WebSockets"))
			fail_msg("/naive over %s: %d %s", urls[u], r.status, r.body);
		assert_int_equal(http(g.port, "GET", "/healthz", NULL).status, 200);
		assert_int_equal(
		    metric(g.port, "gate_api_responses_total{route=\"naive\",status=\"501\"}"), 1);
		gate_stop(&g, 5000);
	}
	tb_test_responder_stop(&dev);
	tb_broker_stop(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(commands_round_trip_on_both_routes),
		cmocka_unit_test(a_silent_device_is_504),
		cmocka_unit_test(a_device_nobody_listens_for_is_503_at_once),
		cmocka_unit_test(two_brokers_one_gateway),
		cmocka_unit_test(a_hung_broker_is_named_and_routed_around),
		cmocka_unit_test(listens_on_ipv6_as_users_type_it),
		cmocka_unit_test(a_hanging_resolver_never_stalls_the_loop),
		cmocka_unit_test(bad_input_is_refused_and_never_published),
		cmocka_unit_test(http_pipelining_continue_head_and_413),
		cmocka_unit_test(header_sizes_are_bounded),
		cmocka_unit_test(beyond_max_pending_is_503_and_shutdown_finishes_what_is_in_flight),
		cmocka_unit_test(sigint_drains_open_connections_with_503_and_refuses_new_ones),
		cmocka_unit_test(the_drain_deadline_is_kept),
		cmocka_unit_test(a_client_that_goes_away_cancels_its_command),
		cmocka_unit_test(an_unreachable_broker_is_502_with_the_reason),
		cmocka_unit_test(a_broker_certificate_for_another_host_is_refused_on_both_routes),
		cmocka_unit_test(the_broker_going_down_is_502_then_the_gateway_recovers),
		cmocka_unit_test(a_command_the_broker_refuses_is_403),
		cmocka_unit_test(a_broker_that_refuses_the_gateway_stops_it_with_the_reason),
		cmocka_unit_test(a_broker_that_refuses_later_is_502_broker_refused),
		cmocka_unit_test(legacy_devices_over_311_on_both_routes),
		cmocka_unit_test(a_hundred_connections_from_one_address_at_the_defaults),
		cmocka_unit_test(bad_options_are_refused_with_a_message),
		cmocka_unit_test(commands_over_websockets),
	};
	return TB_TEST_RUN(tests, NULL);
}
