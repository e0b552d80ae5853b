/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests of the probe inside a real mosquitto: the stamp, exact metrics after a known
 * traffic pattern, the $SYS document, the HTTP endpoint's manners, option errors, SIGHUP.
 */
#define _GNU_SOURCE
#include <mqtt_protocol.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_http.h"
#include "tb_test.h"

/* Run against mosquitto 2.1 (on_broker.sh sets it): the probe counts from 2.1's events. */
static bool on_21(void)
{
	const char *v = getenv("PROBE_TEST_EVENTS");
	return v && strcmp(v, "2.1") == 0;
}

static double metric(const char *name)
{
	struct mqc_http_response r;
	assert_int_equal(mqc_http_get(tb_test_info()->metrics_port, "/metrics", &r), 0);
	assert_int_equal(r.status, 200);
	double v = mqc_prom_value(r.body, name);
	mqc_http_response_free(&r);
	return v;
}

/* The metric once it equals want, or after 5 s whatever it is then: a test asserts the exact
 * value it expects without guessing how long the broker and the probe take to get there. */
static double metric_until(const char *name, double want)
{
	double v = metric(name);
	for (int k = 0; k < 250 && v != want; k++) {
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
		v = metric(name);
	}
	return v;
}

/* SIGHUP, and wait (10 s at most) until the broker has reloaded. It logs "Reloading config." as
 * the reload begins, and a SIGHUP that arrives before the reload ends is lost (mosquitto clears
 * its flag at the end: a second reload sent while the first still ran - 2.1 re-initialises the
 * plugins - never happened). So the reload is over when a client's CONNECT gets its CONNACK: the
 * broker's one thread does both, one after the other. (That client is one connect more.) */
static void reload_broker(void)
{
	int before = tb_test_log_count("Reloading config.", NULL);
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGHUP), 0);
	for (int k = 0; k < 500 && tb_test_log_count("Reloading config.", NULL) == before; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	if (tb_test_log_count("Reloading config.", NULL) != before + 1)
		fail_msg("SIGHUP: the broker did not log 'Reloading config.' within 10 s");
	tb_client_destroy(tb_test_connect(tb_test_info()->mqtt_url, 5)); /* after the reload */
}

/* The connected-client gauge once the clients earlier tests closed have left: the broker handles
 * their DISCONNECT after tb_client_destroy returns, so a figure read at once may still count them
 * (CI read 2 of them once). No client of this suite stays open between tests: wait up to 5 s for
 * 0, else take what it is. */
static double settled_connected(void)
{
	double v = metric("mosquitto_connected_clients");
	for (int k = 0; k < 100 && v != 0; k++) {
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
		v = metric("mosquitto_connected_clients");
	}
	return v;
}

/* The user properties of m, in order, as "k=v;k=v". */
static void user_props(const struct tb_message *m, char *out, size_t len)
{
	out[0] = '\0';
	const mosquitto_property *p = m->props;
	bool first = true;
	while (p) {
		char *k = NULL, *v = NULL;
		p = mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &k, &v, !first);
		first = false;
		if (!p)
			break;
		size_t used = strlen(out);
		snprintf(out + used, len - used, "%s%s=%s", used ? ";" : "", k, v);
		free(k);
		free(v);
	}
}

static uint64_t stamp_of(const struct tb_message *m)
{
	char props[512];
	user_props(m, props, sizeof props);
	const char *s = strstr(props, "broker-rx-ns=");
	return s ? strtoull(s + 13, NULL, 10) : 0;
}

static void stamp_for_v5_subscribers_only_after_publisher_properties(void **state)
{
	(void)state;
	const char *url = tb_test_info()->mqtt_url;
	struct tb_client *v5 = tb_test_connect(url, 5), *v311 = tb_test_connect(url, 4);
	struct tb_client *pub5 = tb_test_connect(url, 5), *pub311 = tb_test_connect(url, 4);
	assert_int_equal(tb_client_subscribe(v5, "stamp/#", 2, 0, NULL), 2);
	assert_int_equal(tb_client_subscribe(v311, "stamp/#", 2, 0, NULL), 2);
	for (int qos = 0; qos <= 2; qos++) {
		mosquitto_property *props = NULL;
		mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "mine", "1");
		mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, "also", "2");
		uint64_t before = mqc_wall_ns();
		assert_int_equal(tb_client_publish(pub5, "stamp/v5", "hello", 5, qos, false, props), 0);
		mosquitto_property_free_all(&props);
		struct tb_message *m = tb_client_receive(v5, 5000);
		uint64_t after = mqc_wall_ns();
		assert_non_null(m);
		char got[512];
		user_props(m, got, sizeof got);
		if (strncmp(got, "mine=1;also=2;broker-rx-ns=", 27) != 0)
			fail_msg("QoS %d: user properties '%s'", qos, got);
		uint64_t stamp = stamp_of(m);
		assert_true(stamp >= before && stamp <= after);
		assert_string_equal(m->payload, "hello");
		tb_message_free(m);
		m = tb_client_receive(v311, 5000); /* unchanged for 3.1.1 */
		assert_non_null(m);
		assert_string_equal(m->payload, "hello");
		assert_null(m->props);
		tb_message_free(m);

		/* A 3.1.1 publisher's message is stamped for v5 subscribers too. */
		assert_int_equal(tb_client_publish(pub311, "stamp/v3", "old", 3, qos, false, NULL), 0);
		m = tb_client_receive(v5, 5000);
		assert_non_null(m);
		user_props(m, got, sizeof got);
		assert_int_equal(strncmp(got, "broker-rx-ns=", 13), 0);
		tb_message_free(m);
		tb_message_free(tb_client_receive(v311, 5000));
	}
	tb_client_destroy(v5);
	tb_client_destroy(v311);
	tb_client_destroy(pub5);
	tb_client_destroy(pub311);
}

static void retained_copy_keeps_its_stamp(void **state)
{
	(void)state;
	const char *url = tb_test_info()->mqtt_url;
	struct tb_client *pub = tb_test_connect(url, 4);
	uint64_t before = mqc_wall_ns();
	assert_int_equal(tb_client_publish(pub, "stamp/retained", "kept", 4, 1, true, NULL), 0);
	uint64_t after = mqc_wall_ns(); /* PUBACK: the broker has kept it */
	struct tb_client *late = tb_test_connect(url, 5);
	assert_int_equal(tb_client_subscribe(late, "stamp/retained", 1, 0, NULL), 1);
	struct tb_message *m = tb_client_receive(late, 5000);
	assert_non_null(m);
	assert_true(m->retain);
	uint64_t stamp = stamp_of(m);
	assert_true(stamp >= before && stamp <= after); /* the original receive time */
	tb_message_free(m);
	assert_int_equal(tb_client_publish(pub, "stamp/retained", "", 0, 1, true, NULL), 0);
	tb_client_destroy(late);
	tb_client_destroy(pub);
}

static void metrics_count_a_known_pattern(void **state)
{
	(void)state;
	const char *url = tb_test_info()->mqtt_url;
	enum { N = 4, K = 5, M = 6, SIZE = 100 };
	double connected0 = settled_connected(); /* first: the connects below are ours alone too */
	double connects0 = metric("mosquitto_connects_total");
	double checks0 = metric("mosquitto_routing_checks_total");
	double fan5_0 = metric("mosquitto_message_routing_checks_bucket{le=\"5\"}");
	double fan2_0 = metric("mosquitto_message_routing_checks_bucket{le=\"2\"}");
	double qos1_0 = metric("mosquitto_messages_received_total{qos=\"1\",retain=\"false\"}");
	double bytes0 = metric("mosquitto_received_payload_bytes_total");
	double s256_0 = metric("mosquitto_received_payload_size_bytes_bucket{le=\"256\"}");
	double s64_0 = metric("mosquitto_received_payload_size_bytes_bucket{le=\"64\"}");
	double disc0 = metric("mosquitto_disconnects_total{identity=\"client\"}");

	struct tb_client *idle[N], *subs[K];
	for (int i = 0; i < N; i++)
		idle[i] = tb_test_connect(url, 5);
	for (int i = 0; i < K; i++) {
		subs[i] = tb_test_connect(url, i % 2 ? 5 : 4);
		assert_int_equal(tb_client_subscribe(subs[i], "fan/#", 1, 0, NULL), 1);
	}
	struct tb_client *pub = tb_test_connect(url, 5);
	char payload[SIZE];
	memset(payload, 'x', sizeof payload);
	for (int i = 0; i < M; i++)
		assert_int_equal(tb_client_publish(pub, "fan/out", payload, SIZE, 1, false, NULL), 0);
	for (int i = 0; i < K; i++)
		for (int j = 0; j < M; j++) {
			struct tb_message *m = tb_client_receive(subs[i], 5000);
			assert_non_null(m);
			tb_message_free(m);
		}
	assert_int_equal(metric("mosquitto_connected_clients"), connected0 + N + K + 1);

	assert_int_equal(metric("mosquitto_connects_total"), connects0 + N + K + 1);
	assert_int_equal(metric("mosquitto_routing_checks_total"), checks0 + M * K);
	/* A tick closes each message's fan-out: the last one is in the histogram at the next. */
	assert_int_equal(
	    metric_until("mosquitto_message_routing_checks_bucket{le=\"5\"}", fan5_0 + M), fan5_0 + M);
	assert_int_equal(metric("mosquitto_message_routing_checks_bucket{le=\"2\"}"), fan2_0);
	assert_int_equal(
	    metric("mosquitto_messages_received_total{qos=\"1\",retain=\"false\"}"), qos1_0 + M);
	assert_int_equal(metric("mosquitto_received_payload_bytes_total"), bytes0 + M * SIZE);
	assert_int_equal(
	    metric("mosquitto_received_payload_size_bytes_bucket{le=\"256\"}"), s256_0 + M);
	assert_int_equal(metric("mosquitto_received_payload_size_bytes_bucket{le=\"64\"}"), s64_0);

	for (int i = 0; i < N; i++)
		tb_client_destroy(idle[i]);
	for (int i = 0; i < K; i++)
		tb_client_destroy(subs[i]);
	tb_client_destroy(pub);
	assert_int_equal(
	    metric_until("mosquitto_disconnects_total{identity=\"client\"}", disc0 + N + K + 1),
	    disc0 + N + K + 1);
	assert_int_equal(metric_until("mosquitto_connected_clients", connected0), connected0);
	assert_true(metric("process_resident_memory_bytes") > 1e6);
	assert_true(metric("process_open_fds") > 3);
	assert_true(metric("process_start_time_seconds") > 1.7e9);
}

static void refused_logins_and_raw_sockets_count_as_no_identity(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	double none0 = metric("mosquitto_disconnects_total{identity=\"none\"}");
	struct tb_client_options o
	    = { .url = i->mqtt_url, .username = i->username, .password = "wrong" };
	struct tb_client *c = NULL;
	int reason;
	char err[256];
	assert_int_equal(tb_client_connect(&o, &c, &reason, err, sizeof err), -1);
	struct mqc_http_response r; /* a raw socket that never sends CONNECT */
	assert_int_equal(mqc_http_raw(i->port, "x", 1, 2000, &r), 0);
	mqc_http_response_free(&r);
	/* 2.1 has no event for a socket without a client id: only the refused login is seen. */
	double want = none0 + (on_21() ? 1 : 2);
	assert_int_equal(metric_until("mosquitto_disconnects_total{identity=\"none\"}", want), want);
	if (on_21())
		assert_true(metric("mosquitto_disconnect_reasons_total{reason=\"auth\"}") >= 1);
}

static void sys_topic_carries_the_same_figures(void **state)
{
	(void)state;
	struct tb_client *c = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(c, "$SYS/broker/probe/metrics", 0, 0, NULL), 0);
	struct tb_message *m = tb_client_receive(c, 3000); /* sys_interval 1 */
	assert_non_null(m);
	assert_non_null(strstr(m->payload, "\"probe_version\":\"" MQTTPOOL_VERSION "\""));
	assert_non_null(strstr(m->payload, "\"mode\":\"observe_auth\""));
	assert_non_null(strstr(m->payload, "\"connects\":"));
	uint32_t expiry = 0;
	assert_non_null(
	    mosquitto_property_read_int32(m->props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, &expiry, false));
	assert_true(expiry >= 2 && expiry <= 3);
	tb_message_free(m);
	tb_client_destroy(c);
}

static void http_answers_wrong_paths_and_methods(void **state)
{
	(void)state;
	int port = tb_test_info()->metrics_port;
	struct mqc_http_response r;
	assert_int_equal(mqc_http_get(port, "/", &r), 0);
	assert_int_equal(r.status, 404);
	mqc_http_response_free(&r);
	assert_int_equal(mqc_http_get(port, "/metrics/x", &r), 0);
	assert_int_equal(r.status, 404);
	mqc_http_response_free(&r);
	static const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc";
	assert_int_equal(mqc_http_raw(port, post, sizeof post - 1, 5000, &r), 0);
	assert_int_equal(r.status, 405);
	assert_non_null(strcasestr(r.headers, "Allow: GET, HEAD"));
	mqc_http_response_free(&r);
	static const char head[] = "HEAD /metrics HTTP/1.0\r\n\r\n";
	assert_int_equal(mqc_http_raw(port, head, sizeof head - 1, 5000, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strcasestr(r.headers, "text/plain; version=0.0.4"));
	assert_int_equal(r.body_len, 0);
	mqc_http_response_free(&r);
	static const char garbage[] = "\x16\x03\x01\x00\xff garbage \r\n\r\n\r\n";
	mqc_http_raw(port, garbage, sizeof garbage - 1, 5000, &r); /* any answer, or a close */
	assert_true(r.status == -1 || r.status >= 400);
	mqc_http_response_free(&r);
	char info[128];
	snprintf(info, sizeof info,
	    "mosquitto_probe_info{version=\"" MQTTPOOL_VERSION
	    "\",mode=\"observe_auth\",events=\"%s\"}",
	    on_21() ? "2.1" : "2.0");
	assert_true(metric(info) == 1);
}

struct scraper {
	int port, ok;
};

static void *scrape(void *arg)
{
	struct scraper *s = arg;
	struct mqc_http_response r;
	if (mqc_http_get(s->port, "/metrics", &r) == 0 && r.status == 200
	    && strstr(r.body, "process_cpu_seconds_total"))
		s->ok = 1;
	mqc_http_response_free(&r);
	return NULL;
}

static void slow_clients_and_concurrent_scrapes_do_not_stall_the_broker(void **state)
{
	(void)state;
	enum { SLOW = 20, SCRAPERS = 200 };
	const struct tb_info *i = tb_test_info();
	/* Slow clients: connected, half a request line, then silence. */
	int slow[SLOW];
	for (int k = 0; k < SLOW; k++) {
		slow[k] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
			.sin_port = htons((uint16_t)i->metrics_port),
			.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		assert_int_equal(connect(slow[k], (struct sockaddr *)&a, sizeof a), 0);
		assert_int_equal(send(slow[k], "GET /met", 8, MSG_NOSIGNAL), 8);
	}
	struct tb_client *sub = tb_test_connect(i->mqtt_url, 5), *pub = tb_test_connect(i->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(sub, "beat", 0, 0, NULL), 0);

	pthread_t threads[SCRAPERS];
	struct scraper scrapers[SCRAPERS];
	for (int k = 0; k < SCRAPERS; k++) {
		scrapers[k] = (struct scraper) { .port = i->metrics_port };
		assert_int_equal(pthread_create(&threads[k], NULL, scrape, &scrapers[k]), 0);
	}
	/* The broker keeps its beat while the exporter is busy. */
	uint64_t worst = 0;
	for (int k = 0; k < 20; k++) {
		uint64_t t0 = mqc_now_ns();
		assert_int_equal(tb_client_publish(pub, "beat", "b", 1, 0, false, NULL), 0);
		struct tb_message *m = tb_client_receive(sub, 5000);
		assert_non_null(m);
		tb_message_free(m);
		uint64_t rtt = mqc_now_ns() - t0;
		worst = rtt > worst ? rtt : worst;
	}
	int ok = 0;
	for (int k = 0; k < SCRAPERS; k++) {
		pthread_join(threads[k], NULL);
		ok += scrapers[k].ok;
	}
	assert_int_equal(ok, SCRAPERS);
	if (worst > 500 * MQC_NS_PER_MS)
		fail_msg("a broker round trip took %.1f ms during the scrapes", (double)worst / 1e6);
	for (int k = 0; k < SLOW; k++)
		close(slow[k]);
	tb_client_destroy(sub);
	tb_client_destroy(pub);
}

static void sighup_keeps_counters_and_acls(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	double received0 = metric("mosquitto_messages_received_total{qos=\"1\",retain=\"false\"}");
	assert_true(received0 > 0);
	reload_broker();
	assert_true(tb_broker_alive(tb_test_broker(), NULL));
	assert_true(
	    metric("mosquitto_messages_received_total{qos=\"1\",retain=\"false\"}") >= received0);
	/* The limited user is still limited: the ACL file still applies (its connect comes after the
	 * reload: the broker's thread did that first). */
	struct tb_client_options o
	    = { .url = i->mqtt_url, .username = i->other_username, .password = i->other_password };
	struct tb_client *c;
	int reason;
	char err[256];
	assert_int_equal(tb_client_connect(&o, &c, &reason, err, sizeof err), 0);
	assert_int_equal(tb_client_publish(c, "other/x", "x", 1, 1, false, NULL), 0x87);
	assert_int_equal(tb_client_publish(c, "limited/x", "x", 1, 1, false, NULL), 0);
	/* Gone for the broker too before the next test reads the connected gauge. */
	double connected = metric("mosquitto_connected_clients");
	tb_client_destroy(c);
	for (int k = 0; k < 100 && metric("mosquitto_connected_clients") != connected - 1; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	assert_true(metric("mosquitto_connected_clients") == connected - 1);
}

/* SIGHUP makes the broker authenticate every session again, the offline persistent ones too:
 * they must not join the connected clients (they never disconnect again, so the gauge drifted
 * up with every reload). */
static void sighup_does_not_count_offline_sessions_as_connected(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	double connected0 = settled_connected();
	double connects0 = metric("mosquitto_connects_total");
	char cmd[512];
	snprintf(cmd, sizeof cmd,
	    "mosquitto_sub -h 127.0.0.1 -p %d -u '%s' -P '%s' -c -i probe-persistent-%d -q 1 "
	    "-t persistent/x -W 1 >/dev/null 2>&1",
	    i->port, i->username, i->password, (int)getpid());
	assert_true(system(cmd) != -1); /* exits at -W 1; its session stays, offline */
	for (int k = 0; k < 100 && metric("mosquitto_connected_clients") != connected0; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	assert_true(metric("mosquitto_connected_clients") == connected0);
	assert_true(metric("mosquitto_connects_total") == connects0 + 1);
	enum { RELOADS = 3 }; /* each a connect of its own (reload_broker) */
	for (int reload = 0; reload < RELOADS; reload++)
		reload_broker();
	/* A client that connects after the reloads is counted as ever, and only it: had a reload
	 * counted the offline session as connected (its re-authentication runs on the broker's
	 * thread, before this connect), the gauge would be one higher. */
	struct tb_client *c = tb_test_connect(i->mqtt_url, 5);
	/* 2.1 reports the connect just after sending CONNACK: the client can get here first. */
	for (int k = 0; k < 100 && metric("mosquitto_connected_clients") != connected0 + 1; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	assert_true(metric("mosquitto_connected_clients") == connected0 + 1);
	assert_true(metric("mosquitto_connects_total") == connects0 + 2 + RELOADS);
	tb_client_destroy(c);
}

/* --- start-up errors: the broker refuses to start, and says why -------------------------- */

static void expect_no_start(const char *opt, const char *needle)
{
	const char *opts[] = { opt, NULL };
	struct tb_options o = { .no_tls = true, .plugin_opts = opts, .start_timeout_s = 5 };
	struct tb_broker *b = NULL;
	char err[1024] = "";
	if (tb_broker_start(&o, &b, err, sizeof err) == 0) {
		tb_broker_stop(b);
		fail_msg("the broker started with %s", opt);
	}
	if (!strstr(err, needle))
		fail_msg("error '%s' lacks '%s'", err, needle);
}

static void bad_options_stop_the_broker_with_a_reason(void **state)
{
	(void)state;
	expect_no_start("http_listne=127.0.0.1:1", "unknown option plugin_opt_http_listne");
	expect_no_start("sys_interval=ten", "plugin_opt_sys_interval 'ten'");
	char taken[64];
	snprintf(taken, sizeof taken, "http_listen=127.0.0.1:%d", tb_test_info()->metrics_port);
	expect_no_start(taken, "Address already in use");
}

int main(void)
{
	const char *opts[] = { "observe_auth=true", "sys_interval=1", NULL };
	struct tb_options options = { .no_tls = true, .plugin_opts = opts };
	if (access(tb_default_probe_path(), R_OK) != 0) {
		fprintf(stderr, "the probe is not built at %s\n", tb_default_probe_path());
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stamp_for_v5_subscribers_only_after_publisher_properties),
		cmocka_unit_test(retained_copy_keeps_its_stamp),
		cmocka_unit_test(metrics_count_a_known_pattern),
		cmocka_unit_test(refused_logins_and_raw_sockets_count_as_no_identity),
		cmocka_unit_test(sys_topic_carries_the_same_figures),
		cmocka_unit_test(http_answers_wrong_paths_and_methods),
		cmocka_unit_test(slow_clients_and_concurrent_scrapes_do_not_stall_the_broker),
		cmocka_unit_test(sighup_keeps_counters_and_acls),
		cmocka_unit_test(sighup_does_not_count_offline_sessions_as_connected),
		cmocka_unit_test(bad_options_stop_the_broker_with_a_reason),
	};
	return TB_TEST_RUN(tests, &options);
}
