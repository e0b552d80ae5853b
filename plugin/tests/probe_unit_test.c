/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* Unit tests: option parsing, metrics rendering, event handling and fan-out (broker stubbed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mqtt_protocol.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "broker_stubs.h"
#include "fake_props.h"
#include "mqc_http.h"
#include "probe.h"

static int parse(struct probe_config *cfg, char *err, const char *k, const char *v)
{
	struct probe_opt o = { k, v };
	return probe_options__parse(&o, k ? 1 : 0, cfg, err, 256);
}

static void options_defaults_and_values(void **state)
{
	(void)state;
	struct probe_config cfg;
	char err[256];
	assert_int_equal(parse(&cfg, err, NULL, NULL), 0);
	assert_true(cfg.http_enabled);
	assert_string_equal(cfg.http_host, "127.0.0.1");
	assert_int_equal(cfg.http_port, 18830);
	assert_int_equal(cfg.sys_interval_s, 10);
	assert_false(cfg.observe_auth);
	assert_true(cfg.stamp);
	assert_int_equal(parse(&cfg, err, "http_listen", "[::1]:9100"), 0);
	assert_string_equal(cfg.http_host, "::1");
	assert_int_equal(cfg.http_port, 9100);
	assert_int_equal(parse(&cfg, err, "http_listen", "off"), 0);
	assert_false(cfg.http_enabled);
	assert_int_equal(parse(&cfg, err, "sys_interval", "0"), 0);
	assert_int_equal(cfg.sys_interval_s, 0);
	assert_int_equal(parse(&cfg, err, "observe_auth", "true"), 0);
	assert_true(cfg.observe_auth);
}

static void options_errors_name_the_option(void **state)
{
	(void)state;
	static const struct {
		const char *k, *v, *needle;
	} cases[] = {
		{ "http_listne", "x", "unknown option plugin_opt_http_listne" },
		{ "http_listen", "localhost:9100", "plugin_opt_http_listen 'localhost:9100'" },
		{ "http_listen", "127.0.0.1:0", "plugin_opt_http_listen" },
		{ "http_listen", "127.0.0.1:70000", "plugin_opt_http_listen" },
		{ "http_listen", "127.0.0.1", "plugin_opt_http_listen" },
		{ "sys_interval", "-1", "plugin_opt_sys_interval '-1'" },
		{ "sys_interval", "10s", "plugin_opt_sys_interval" },
		{ "sys_interval", "86401", "plugin_opt_sys_interval" },
		{ "observe_auth", "yes", "plugin_opt_observe_auth 'yes': expected true or false" },
		{ "stamp", "", "plugin_opt_stamp" },
		{ "stamp_every", "0", "plugin_opt_stamp_every '0': expected a whole number from 1" },
		{ "stamp_every", "1000001", "plugin_opt_stamp_every" },
		{ "stamp_topic", "", "plugin_opt_stamp_topic '': expected an MQTT topic filter" },
		{ "stamp_topic", "a/b#", "plugin_opt_stamp_topic 'a/b#'" },
		{ "stamp_topic", "a/#/b", "plugin_opt_stamp_topic" },
		{ "stamp_topic", "a+/b", "plugin_opt_stamp_topic" },
		{ "tx_stamp", "1", "plugin_opt_tx_stamp '1': expected true or false" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct probe_config cfg;
		char err[256] = "";
		assert_int_equal(parse(&cfg, err, cases[i].k, cases[i].v), -1);
		if (!strstr(err, cases[i].needle))
			fail_msg("'%s' lacks '%s'", err, cases[i].needle);
	}
}

static void options_stamp_choices(void **state)
{
	(void)state;
	struct probe_opt o[] = { { "stamp_every", "100" }, { "stamp_topic", "sensors/+/temp" },
		{ "stamp_topic", "#" }, { "tx_stamp", "true" } };
	struct probe_config cfg;
	char err[256] = "";
	assert_int_equal(probe_options__parse(o, 4, &cfg, err, sizeof err), 0);
	assert_int_equal(cfg.stamp_every, 100);
	assert_int_equal(cfg.stamp_topics, 2);
	assert_string_equal(cfg.stamp_topic[0], "sensors/+/temp");
	assert_true(cfg.tx_stamp);
	struct probe_opt nine[9];
	for (int i = 0; i < 9; i++)
		nine[i] = (struct probe_opt) { "stamp_topic", "a" };
	assert_int_equal(probe_options__parse(nine, 9, &cfg, err, sizeof err), -1);
	assert_non_null(strstr(err, "at most 8"));
	struct probe_opt tx_alone[] = { { "stamp", "false" }, { "tx_stamp", "true" } };
	assert_int_equal(probe_options__parse(tx_alone, 2, &cfg, err, sizeof err), -1);
	assert_non_null(strstr(err, "needs plugin_opt_stamp true"));
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

static struct probe_state fresh(bool observe)
{
	struct probe_state s
	    = { .cfg = { .stamp = true, .observe_auth = observe, .sys_interval_s = 5 } };
	memset(&stub, 0, sizeof stub);
	return s;
}

static void message(struct probe_state *s, void *payload, uint32_t len, int qos, bool retain)
{
	struct mosquitto_evt_message ed = {
		.payload = payload, .payloadlen = len, .qos = (uint8_t)qos, .retain = retain, .topic = "t"
	};
	assert_int_equal(probe_events__message(MOSQ_EVT_MESSAGE, &ed, s), MOSQ_ERR_SUCCESS);
}

static void message_is_counted_and_stamped(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	char payload[300] = { 0 };
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t before = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	message(&s, payload, 10, 0, false);
	message(&s, payload, 300, 1, true);
	message(&s, payload, 0, 2, false);
	assert_int_equal(stub.pairs, 3);
	assert_int_equal(stub.last_identifier, MQTT_PROP_USER_PROPERTY);
	assert_string_equal(stub.last_name, "broker-rx-ns");
	uint64_t stamp = strtoull(stub.last_value, NULL, 10);
	assert_true(stamp >= before && stamp < before + 5000000000ULL);

	struct probe_buf b = { 0 };
	probe_metrics__render_prometheus(&s.metrics, NULL, false, &b);
	assert_false(b.failed);
	b.data[b.len] = '\0';
	static const char *expected[] = {
		/* NOLINTNEXTLINE(bugprone-suspicious-missing-comma): one line, built with the version */
		"mosquitto_probe_info{version=\"" PROBE_VERSION "\",mode=\"default\",events=\"2.0\"} 1",
		"mosquitto_messages_received_total{qos=\"0\",retain=\"false\"} 1",
		"mosquitto_messages_received_total{qos=\"1\",retain=\"true\"} 1",
		"mosquitto_messages_received_total{qos=\"2\",retain=\"false\"} 1",
		"mosquitto_received_payload_bytes_total 310",
		"mosquitto_received_payload_size_bytes_bucket{le=\"16\"} 2",
		"mosquitto_received_payload_size_bytes_bucket{le=\"256\"} 2",
		"mosquitto_received_payload_size_bytes_bucket{le=\"1024\"} 3",
		"mosquitto_received_payload_size_bytes_bucket{le=\"+Inf\"} 3",
		"mosquitto_received_payload_size_bytes_sum 310",
		"mosquitto_received_payload_size_bytes_count 3",
		"# TYPE mosquitto_received_payload_size_bytes histogram",
	};
	for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
		if (!has_line(b.data, expected[i]))
			fail_msg("missing '%s' in:\n%s", expected[i], b.data);
	assert_null(strstr(b.data, "mosquitto_connects_total")); /* observe_auth only */
	probe_buf__free(&b);
}

static void message_on(struct probe_state *s, const char *topic)
{
	char t[64];
	snprintf(t, sizeof t, "%s", topic);
	struct mosquitto_evt_message ed = { .payload = t, .payloadlen = 1, .topic = t };
	assert_int_equal(probe_events__message(MOSQ_EVT_MESSAGE, &ed, s), MOSQ_ERR_SUCCESS);
}

static void stamp_only_filtered_topics_one_in_n(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	s.cfg.stamp_topics = 2;
	strcpy(s.cfg.stamp_topic[0], "sensors/+/temp");
	strcpy(s.cfg.stamp_topic[1], "cmd/#");
	message_on(&s, "sensors/a/temp");
	message_on(&s, "sensors/a/humidity");
	message_on(&s, "cmd");
	message_on(&s, "other");
	assert_int_equal(stub.pairs, 2);
	s.cfg.stamp_every = 3; /* 1 in 3 of the matching ones; counters stay exact */
	for (int i = 0; i < 9; i++)
		message_on(&s, i % 2 ? "cmd/x" : "nope");
	assert_int_equal(stub.pairs, 2 + 2); /* 4 matching: the 1st and the 4th */
	assert_int_equal(probe_get(&s.metrics.stamped), 4);
	assert_int_equal(probe_get(&s.metrics.received[0][0]), 13);
}

static void message_out_measures_time_in_broker(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	probe_props__set_api(&fake_props_api);
	s.hold = true;
	s.cfg.tx_stamp = true;
	atomic_store(&s.metrics.has_hold, true);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char rx[24];
	probe_u64_to_dec((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec - 2000000, rx);
	struct fake_prop stamp = { NULL, MQTT_PROP_USER_PROPERTY, "broker-rx-ns", rx };
	struct fake_prop other = { &stamp, MQTT_PROP_USER_PROPERTY, "broker-rx-nsx", "1" };
	struct fake_prop first = { &other, MQTT_PROP_CONTENT_TYPE, "broker-rx-ns", "5" };
	struct mosquitto_evt_message ed = { .properties = (mosquitto_property *)&first };
	assert_int_equal(probe_events__message_out(27, &ed, &s), MOSQ_ERR_SUCCESS);
	assert_int_equal(probe_get(&s.metrics.deliveries), 1);
	/* 2 ms (and a little): in the (2.5 ms] bucket */
	assert_int_equal(probe_get(&s.metrics.hold_buckets[6]), 1);
	assert_true(probe_get(&s.metrics.hold_sum_ns) >= 2000000);
	assert_ptr_equal(
	    ed.properties, &fake_props_copy); /* this delivery's own copy, with broker-tx-ns */
	assert_string_equal(stub.last_name, "broker-tx-ns");
	assert_true(strtoull(stub.last_value, NULL, 10) > strtoull(rx, NULL, 10));

	stub.protocol_version = 4; /* no properties in v3.1.1: no copy */
	ed.properties = (mosquitto_property *)&first;
	probe_events__message_out(27, &ed, &s);
	assert_ptr_equal(ed.properties, &first);
	assert_int_equal(stub.pairs, 1);

	ed.properties = (mosquitto_property *)&other; /* not stamped: delivered, not timed */
	other.next = NULL;
	probe_events__message_out(27, &ed, &s);
	assert_int_equal(probe_get(&s.metrics.deliveries), 3);
	assert_int_equal(probe_get(&s.metrics.hold_sum_ns) > 0, 1);
	uint64_t timed = 0;
	for (int i = 0; i < PROBE_HOLD_BUCKETS; i++)
		timed += probe_get(&s.metrics.hold_buckets[i]);
	assert_int_equal(timed, 2);

	struct probe_buf b = { 0 };
	probe_metrics__render_prometheus(&s.metrics, NULL, false, &b);
	b.data[b.len] = '\0';
	if (!has_line(b.data, "mosquitto_message_hold_seconds_bucket{le=\"0.0025\"} 2")
	    || !has_line(b.data, "mosquitto_message_hold_seconds_count 2"))
		fail_msg("hold histogram wrong in:\n%s", b.data);
	probe_buf__free(&b);
	probe_props__set_api(&(struct probe_props_api) { 0 });
}

/* A delivery to client (an id string, as the stubs take it) of a message stamped ago_ns ago. */
static void deliver(struct probe_state *s, const char *client, uint64_t ago_ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char rx[24];
	probe_u64_to_dec((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec - ago_ns, rx);
	struct fake_prop stamp = { NULL, MQTT_PROP_USER_PROPERTY, "broker-rx-ns", rx };
	struct mosquitto_evt_message ed
	    = { .client = (struct mosquitto *)(uintptr_t)client, .properties = (void *)&stamp };
	assert_int_equal(probe_events__message_out(27, &ed, s), MOSQ_ERR_SUCCESS);
}

static void connect21(struct probe_state *s, const char *client)
{
	void *ed[2] = { NULL, (void *)(uintptr_t)client }; /* 2.1's CONNECT: future, client */
	assert_int_equal(probe_events__connect(PROBE_EVT_CONNECT, ed, s), MOSQ_ERR_SUCCESS);
}

/* The K slowest subscribers of a window by name, the others folded into the rest. */
static void slow_subscribers_top_k_and_the_rest(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	probe_props__set_api(&fake_props_api);
	s.hold = true;
	s.events21 = true;
	s.cfg.slow_top = 2;
	s.cfg.slow_threshold_ms = 50;
	s.cfg.slow_window_s = 1;
	s.cfg.client_ids = PROBE_IDS_SHOWN; /* by their ids (a hidden id: the test after next) */
	s.metrics.slow = &s.slow;
	probe_events__slow_start(&s);
	assert_true(s.slow_on);
	const char *fast = "fast", *slow = "slow \"q\"\n", *slower = "slower", *slowest = "slowest";
	const char *gone = "gone";
	connect21(&s, fast);
	connect21(&s, slow);
	connect21(&s, slower);
	connect21(&s, slowest);
	for (int i = 0; i < 10; i++)
		deliver(&s, fast, 100000); /* 0.1 ms */
	deliver(&s, slow, 60000000);   /* 60 ms: over the threshold, third */
	deliver(&s, slower, 10000000);
	deliver(&s, slower, 200000000); /* 200 ms: second, mean 105 ms */
	deliver(&s, slowest, 900000000);
	deliver(&s, gone, 900000000); /* not connected (no CONNECT seen): not counted */
	s.slow_next_ns = 0;           /* the window ends at the next tick */
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);

	const struct probe_slow_view *v = &s.slow.view;
	assert_false(s.slow_unpublished); /* the ranking was handed to the readers */
	assert_int_equal(v->over, 3);
	assert_int_equal(v->n, 2);
	assert_string_equal(v->top[0].client_id, slowest);
	assert_string_equal(v->top[1].client_id, slower);
	assert_int_equal(v->top[1].stats.deliveries, 2);
	assert_int_equal(v->rest.deliveries, 11); /* fast's 10 and slow's 1 */
	assert_true(v->rest.max_ns >= 60000000 && v->rest.max_ns < 200000000);

	struct probe_buf b = { 0 };
	probe_metrics__render_prometheus(&s.metrics, NULL, false, &b);
	b.data[b.len] = '\0';
	char dup[256];
	if (mqc_prom_duplicate(b.data, dup, sizeof dup))
		fail_msg("series %s appears twice in:\n%s", dup, b.data);
	if (!has_line(b.data, "mosquitto_slow_subscribers 3")
	    || !strstr(b.data, "mosquitto_slow_subscriber_hold_max_seconds{client_id=\"slowest\"} 0.9")
	    || !has_line(b.data, "mosquitto_slow_subscriber_deliveries{client_id=\"slower\"} 2")
	    || !has_line(b.data, "mosquitto_slow_subscriber_rest_deliveries 11")
	    || strstr(b.data, "client_id=\"fast\""))
		fail_msg("slow subscribers wrong in:\n%s", b.data);
	probe_buf__free(&b);

	/* A new window: only what came since. slow's id needs escaping in both renderings. */
	deliver(&s, slow, 70000000);
	s.slow_next_ns = 0;
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(v->over, 1);
	assert_int_equal(v->n, 1);
	assert_int_equal(v->rest.deliveries, 0);
	probe_metrics__render_prometheus(&s.metrics, NULL, false, &b);
	b.data[b.len] = '\0';
	if (!strstr(b.data,
	        "mosquitto_slow_subscriber_hold_max_seconds{client_id=\"slow \\\"q\\\"\\n\"} 0.07"))
		fail_msg("label not escaped in:\n%s", b.data);
	probe_buf__free(&b);
	probe_metrics__render_json(&s.metrics, NULL, false, 0, &b);
	b.data[b.len] = '\0';
	if (!strstr(
	        b.data, "\"top\":[{\"client_id\":\"slow \\\"q\\\"\\u000a\",\"hold_max_seconds\":0.07"))
		fail_msg("JSON not escaped in:\n%s", b.data);
	probe_buf__free(&b);

	/* A client that leaves during a window is ranked in it. */
	const char *leaver = "leaver";
	connect21(&s, leaver);
	deliver(&s, leaver, 300000000);
	void *off[3] = { NULL, (void *)(uintptr_t)leaver, NULL }; /* CLIENT_OFFLINE, reason 0 */
	probe_events__client_offline(PROBE_EVT_CLIENT_OFFLINE, off, &s);
	s.slow_next_ns = 0;
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(v->n, 1);
	assert_string_equal(v->top[0].client_id, leaver);

	free(stub.publish_payload);
	stub.publish_payload = NULL;
	probe_events__clear(&s);
	assert_false(atomic_load(&s.slow.enabled));
	probe_props__set_api(&(struct probe_props_api) { 0 });
}

/* Ids are cut to PROBE_SLOW_ID_MAX bytes, never inside a UTF-8 character. */
static void slow_subscriber_ids_are_bounded(void **state)
{
	(void)state;
	static struct probe_slow_view v;
	char id[300];
	memset(id, 'a', sizeof id);
	memcpy(id + PROBE_SLOW_ID_MAX - 1, "\xc3\xa9", 2); /* a 2-byte character across the cut */
	id[sizeof id - 1] = '\0';
	struct probe_slow_stats st = { .max_ns = 5, .sum_ns = 5, .deliveries = 1 };
	const struct probe_slow slow = { .top = 10, .threshold_ns = 1 };
	probe_slow__rank(&v, &slow, id, &st);
	assert_int_equal(strlen(v.top[0].client_id), PROBE_SLOW_ID_MAX - 1);
	for (int i = 0; i < 200; i++) /* many more than K: the list holds K, the rest the others */
		probe_slow__rank(&v, &slow, "x", &(struct probe_slow_stats) { (uint64_t)i + 1, 1, 1 });
	assert_int_equal(v.n, 10);
	assert_int_equal(v.over, 201);
	assert_int_equal(v.top[0].stats.max_ns, 200);
	assert_int_equal(v.top[9].stats.max_ns, 191);
	assert_int_equal(v.rest.deliveries, 191);
}

/* SipHash-2-4 against the paper's vectors: key 00..0f, messages 00.. of length 0, 1 and 15. */
static void siphash_matches_the_reference(void **state)
{
	(void)state;
	const uint64_t key[2] = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };
	unsigned char m[16];
	for (unsigned i = 0; i < sizeof m; i++)
		m[i] = (unsigned char)i;
	assert_true(probe_hash__siphash(key, m, 0) == 0x726fdb47dd0e0e31ULL);
	assert_true(probe_hash__siphash(key, m, 1) == 0x74f839c593dc67fdULL);
	assert_true(probe_hash__siphash(key, m, 15) == 0xa129ca6149be45e5ULL);
}

/* Who may see client ids: the option, else loopback only; each decision says why. */
static void client_ids_shown_by_choice(void **state)
{
	(void)state;
	struct {
		const char *listen, *expose;
		bool shown;
		const char *why;
	} cases[] = {
		{ "127.0.0.1:18830", NULL, true, "loopback (127.0.0.1)" },
		{ "127.3.2.1:18830", NULL, true, "loopback (127.3.2.1)" },
		{ "[::1]:18830", NULL, true, "loopback (::1)" },
		{ "0.0.0.0:18830", NULL, false, "from the network without a password" },
		{ "10.1.2.3:18830", NULL, false, "(10.1.2.3:18830)" },
		{ "[::]:18830", NULL, false, "from the network" },
		{ "off", NULL, false, "the broker's ACL's to say" },
		{ "0.0.0.0:18830", "true", true, "plugin_opt_expose_client_ids true" },
		{ "127.0.0.1:18830", "false", false, "plugin_opt_expose_client_ids false" },
		{ "0.0.0.0:18830", "auto", false, "from the network" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct probe_opt opts[2]
		    = { { "http_listen", cases[i].listen }, { "expose_client_ids", cases[i].expose } };
		struct probe_config cfg;
		char err[256], why[256];
		assert_int_equal(
		    probe_options__parse(opts, cases[i].expose ? 2 : 1, &cfg, err, sizeof err), 0);
		bool shown = probe_options__show_client_ids(&cfg, why, sizeof why);
		if (shown != cases[i].shown || !strstr(why, cases[i].why))
			fail_msg("%s %s: shown %d, why '%s'", cases[i].listen,
			    cases[i].expose ? cases[i].expose : "(default)", shown, why);
	}
	/* Behind the web config's authentication (plugin.c sets web_auth once the file is read),
	 * on any address; the option still decides when given. */
	struct probe_opt secured[3] = { { "http_listen", "0.0.0.0:18830" },
		{ "web_config", "/etc/mosquitto/web.yml" }, { "expose_client_ids", "false" } };
	struct probe_config cfg;
	char err[256], why[256];
	assert_int_equal(probe_options__parse(secured, 2, &cfg, err, sizeof err), 0);
	cfg.web_auth = true;
	assert_true(probe_options__show_client_ids(&cfg, why, sizeof why));
	assert_non_null(strstr(why,
	    "requires a password or a client certificate (web_config "
	    "/etc/mosquitto/web.yml)"));
	cfg.web_auth = false; /* a web config with neither: as without one */
	assert_false(probe_options__show_client_ids(&cfg, why, sizeof why));
	assert_int_equal(probe_options__parse(secured, 3, &cfg, err, sizeof err), 0);
	cfg.web_auth = true;
	assert_false(probe_options__show_client_ids(&cfg, why, sizeof why));
	struct probe_opt no_http[2] = { { "http_listen", "off" }, { "web_config", "/x.yml" } };
	assert_int_equal(probe_options__parse(no_http, 2, &cfg, err, sizeof err), -1);
	assert_non_null(strstr(err, "plugin_opt_http_listen off turns off"));

	struct probe_opt bad = { "expose_client_ids", "yes" };
	assert_int_equal(probe_options__parse(&bad, 1, &cfg, err, sizeof err), -1);
	assert_non_null(
	    strstr(err, "plugin_opt_expose_client_ids 'yes': expected true, false or auto"));
}

/* Hidden ids: each client a stable label, none the id, two clients two labels, and another key
 * (another broker start) other labels; the renderings carry only the labels. */
static void slow_subscriber_ids_hidden_are_keyed_hashes(void **state)
{
	(void)state;
	static struct probe_slow_view v1, v2, v3;
	struct probe_slow slow = { .top = 10, .threshold_ns = 1, .hide_ids = true, .id_key = { 1, 2 } };
	const struct probe_slow_stats a = { 9, 9, 1 }, b = { 8, 8, 1 };
	probe_slow__rank(&v1, &slow, "serial-0001", &a);
	probe_slow__rank(&v1, &slow, "serial-0002", &b);
	probe_slow__rank(&v2, &slow, "serial-0001", &a);
	slow.id_key[1] = 3;
	probe_slow__rank(&v3, &slow, "serial-0001", &a);
	assert_int_equal(strlen(v1.top[0].client_id), 18);
	assert_memory_equal(v1.top[0].client_id, "h:", 2);
	assert_null(strstr(v1.top[0].client_id, "serial"));
	assert_string_equal(v1.top[0].client_id, v2.top[0].client_id);
	assert_string_not_equal(v1.top[0].client_id, v1.top[1].client_id);
	assert_string_not_equal(v1.top[0].client_id, v3.top[0].client_id);
}

static void disconnect_reasons_of_mosquitto_21(void **state)
{
	(void)state;
	assert_int_equal(probe_reason_of(0), PROBE_REASON_NORMAL);
	assert_int_equal(probe_reason_of(7), PROBE_REASON_CLOSED);
	assert_int_equal(probe_reason_of(19), PROBE_REASON_KEEPALIVE);
	assert_int_equal(probe_reason_of(21), PROBE_REASON_PROTOCOL);
	assert_int_equal(probe_reason_of(11), PROBE_REASON_AUTH);
	assert_int_equal(probe_reason_of(142), PROBE_REASON_TAKEN_OVER);
	assert_int_equal(probe_reason_of(152), PROBE_REASON_ADMIN);
	assert_int_equal(probe_reason_of(30), PROBE_REASON_OTHER); /* 2.0's ADMINISTRATIVE_ACTION */
	assert_int_equal(probe_reason_of(-1), PROBE_REASON_OTHER);
	assert_string_equal(probe_reason_names[PROBE_REASON_TAKEN_OVER], "taken_over");
}

static void every_series_once_with_every_family_on(void **state)
{
	(void)state;
	struct probe_state s = fresh(true);
	atomic_store(&s.metrics.has_deliveries, true);
	atomic_store(&s.metrics.connect_events, true);
	atomic_store(&s.metrics.has_hold, true);
	struct probe_process p = { .valid = true };
	struct probe_buf b = { 0 };
	probe_metrics__render_prometheus(&s.metrics, &p, true, &b);
	b.data[b.len] = '\0';
	char dup[256];
	if (mqc_prom_duplicate(b.data, dup, sizeof dup))
		fail_msg("series %s appears twice in:\n%s", dup, b.data);
	assert_non_null(strstr(b.data, "mosquitto_message_hold_seconds_count 0\n"));
	assert_non_null(
	    strstr(b.data, "mosquitto_disconnect_reasons_total{reason=\"taken_over\"} 0\n"));
	probe_buf__free(&b);
}

static void stamp_failure_is_counted_not_fatal(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	stub.fail_property_add = true;
	message(&s, "x", 1, 0, false); /* still MOSQ_ERR_SUCCESS */
	assert_int_equal(probe_get(&s.metrics.stamp_failures), 1);
	assert_int_equal(probe_get(&s.metrics.received[0][0]), 1);
}

static void disconnects_split_by_identity(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	struct mosquitto_evt_disconnect with = { .client = (struct mosquitto *)(uintptr_t) "client-1" };
	struct mosquitto_evt_disconnect without = { .client = NULL };
	probe_events__disconnect(MOSQ_EVT_DISCONNECT, &with, &s);
	probe_events__disconnect(MOSQ_EVT_DISCONNECT, &without, &s);
	probe_events__disconnect(MOSQ_EVT_DISCONNECT, &without, &s);
	assert_int_equal(probe_get(&s.metrics.disconnects_identified), 1);
	assert_int_equal(probe_get(&s.metrics.disconnects_anonymous), 2);
}

static void auth_observer_counts_each_client_once_and_defers(void **state)
{
	(void)state;
	struct probe_state s = fresh(true);
	struct mosquitto_evt_basic_auth a = { .client = (struct mosquitto *)(uintptr_t) "a" };
	struct mosquitto_evt_basic_auth b = { .client = (struct mosquitto *)(uintptr_t) "b" };
	assert_int_equal(probe_events__basic_auth(MOSQ_EVT_BASIC_AUTH, &a, &s), MOSQ_ERR_PLUGIN_DEFER);
	assert_int_equal(probe_events__basic_auth(MOSQ_EVT_BASIC_AUTH, &b, &s), MOSQ_ERR_PLUGIN_DEFER);
	probe_events__basic_auth(MOSQ_EVT_BASIC_AUTH, &a, &s); /* SIGHUP re-authentication */
	assert_int_equal(probe_get(&s.metrics.connects), 2);
	assert_int_equal(probe_get(&s.metrics.connected), 2);
	struct mosquitto_evt_disconnect d = { .client = a.client };
	probe_events__disconnect(MOSQ_EVT_DISCONNECT, &d, &s);
	probe_events__disconnect(MOSQ_EVT_DISCONNECT, &d, &s); /* unknown now: no change */
	assert_int_equal(probe_get(&s.metrics.connected), 1);
	probe_events__clear(&s);
}

static void read(struct probe_state *s, const void *payload, int access)
{
	struct mosquitto_evt_acl_check ed = { .payload = payload, .access = access };
	assert_int_equal(probe_events__acl_check(MOSQ_EVT_ACL_CHECK, &ed, s), MOSQ_ERR_PLUGIN_DEFER);
}

static void fanout_counts_reads_per_message(void **state)
{
	(void)state;
	struct probe_state s = fresh(true);
	char m1[4], m2[4], m3[4], retained[4];
	message(&s, m1, 4, 0, false);
	for (int i = 0; i < 5; i++)
		read(&s, m1, MOSQ_ACL_READ);
	read(&s, m1, MOSQ_ACL_WRITE);      /* not a delivery */
	read(&s, retained, MOSQ_ACL_READ); /* not ours */
	message(&s, m2, 4, 1, false);      /* closes m1 at 5 */
	read(&s, m2, MOSQ_ACL_READ);
	message(&s, m3, 4, 2, false); /* closes m2 at 1; m3 waits for PUBREL */
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(probe_get(&s.metrics.fanout_buckets[1]), 1); /* m2: le=1 */
	assert_int_equal(probe_get(&s.metrics.fanout_buckets[3]), 1); /* m1 (5): le=5 */
	assert_int_equal(probe_get(&s.metrics.fanout_buckets[2]), 0); /* m3 still open */
	read(&s, m3, MOSQ_ACL_READ);                                  /* PUBREL fan-out */
	read(&s, m3, MOSQ_ACL_READ);
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(probe_get(&s.metrics.routing_checks), 8);
	assert_int_equal(probe_get(&s.metrics.fanout_sum), 8);
	assert_int_equal(probe_get(&s.metrics.fanout_buckets[2]), 1); /* m3: le=2 */
	free(stub.publish_payload);
}

struct foreign_call {
	struct probe_state *s;
	const void *payload;
	int rc_auth, rc_acl;
};

static void *call_from_another_thread(void *arg)
{
	struct foreign_call *f = arg;
	struct mosquitto_evt_basic_auth a = { .client = (struct mosquitto *)(uintptr_t) "http-api" };
	struct mosquitto_evt_acl_check ed = { .payload = f->payload, .access = MOSQ_ACL_READ };
	f->rc_auth = probe_events__basic_auth(MOSQ_EVT_BASIC_AUTH, &a, f->s);
	f->rc_acl = probe_events__acl_check(MOSQ_EVT_ACL_CHECK, &ed, f->s);
	return NULL;
}

/* mosquitto 2.1's HTTP API runs the auth chain on its own thread with a made-up client. */
static void auth_calls_from_another_thread_are_not_counted(void **state)
{
	(void)state;
	struct probe_state s = fresh(true);
	s.broker_thread = pthread_self();
	s.broker_thread_known = true;
	char m1[4];
	message(&s, m1, 4, 0, false);
	struct foreign_call f = { .s = &s, .payload = m1 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, call_from_another_thread, &f), 0);
	pthread_join(t, NULL);
	assert_int_equal(f.rc_auth, MOSQ_ERR_PLUGIN_DEFER);
	assert_int_equal(f.rc_acl, MOSQ_ERR_PLUGIN_DEFER);
	read(&s, m1, MOSQ_ACL_READ); /* the broker's own thread still counts */
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(probe_get(&s.metrics.connects), 0);
	assert_int_equal(probe_get(&s.metrics.connected), 0);
	assert_int_equal(probe_get(&s.metrics.routing_checks), 1);
	free(stub.publish_payload);
	stub.publish_payload = NULL;
}

/* The broker's configuration: listeners, include_dir, and what overlaps the probe's address. */
static void broker_configuration_conflicts(void **state)
{
	(void)state;
	char dir[] = "/tmp/probe-conf-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[128], inc[128], err[1024];
	snprintf(path, sizeof path, "%s/mosquitto.conf", dir);
	snprintf(inc, sizeof inc, "%s/conf.d", dir);
	assert_int_equal(mkdir(inc, 0700), 0);
	FILE *f = fopen(path, "w");
	fprintf(f,
	    "# comment\nlistener 1883\nallow_anonymous true\n\nlistener 9883\n"
	    "protocol http_api\ninclude_dir %s\nplugin /x/mqtt_probe.so\n"
	    "plugin_opt_http_listen 127.0.0.1:9883\n",
	    inc);
	fclose(f);
	char sub[160];
	snprintf(sub, sizeof sub, "%s/b.conf", inc);
	f = fopen(sub, "w");
	fprintf(f, "listener 8080 127.0.0.1\nprotocol websockets\n");
	fclose(f);
	snprintf(sub, sizeof sub, "%s/a.conf", inc);
	f = fopen(sub, "w");
	fprintf(f, "listener 0 /run/mosquitto.sock\n");
	fclose(f);

	struct probe_listener ls[8];
	struct probe_conf_line option;
	assert_int_equal(probe_conf__read(path, ls, 8, &option), 4);
	assert_int_equal(ls[0].port, 1883);
	assert_string_equal(ls[0].protocol, "mqtt");
	assert_int_equal(ls[0].where.line, 2);
	assert_int_equal(ls[1].port, 9883);
	assert_string_equal(ls[1].protocol, "http_api");
	assert_int_equal(ls[1].protocol_where.line, 6);
	assert_int_equal(ls[2].port, 0); /* a.conf before b.conf */
	assert_int_equal(ls[3].port, 8080);
	assert_string_equal(ls[3].host, "127.0.0.1");
	assert_string_equal(ls[3].protocol, "websockets");
	assert_int_equal(option.line, 9);

	assert_true(probe_conf__overlaps(&ls[1], "127.0.0.1", 9883)); /* a wildcard listener */
	assert_false(probe_conf__overlaps(&ls[1], "127.0.0.1", 18830));
	assert_true(probe_conf__overlaps(&ls[3], "0.0.0.0", 8080)); /* a wildcard probe */
	assert_true(probe_conf__overlaps(&ls[3], "127.0.0.1", 8080));
	assert_false(probe_conf__overlaps(&ls[3], "127.0.0.2", 8080)); /* another address */
	assert_false(probe_conf__overlaps(&ls[3], "::1", 8080));

	assert_true(probe_conf__conflict(path, "127.0.0.1", 9883, true, err, sizeof err));
	assert_non_null(strstr(err, "mosquitto.conf:9)"));
	assert_non_null(strstr(err, "'listener 9883'"));
	assert_non_null(strstr(err, "'protocol http_api' ("));
	assert_non_null(strstr(err, "mosquitto.conf:6)"));
	assert_true(probe_conf__conflict(path, "127.0.0.1", 8080, false, err, sizeof err));
	assert_non_null(strstr(err, "no plugin_opt_http_listen line"));
	assert_non_null(strstr(err, "b.conf:1"));
	assert_false(probe_conf__conflict(path, "127.0.0.1", 18830, false, err, sizeof err));
	assert_false(probe_conf__conflict("/nonexistent", "127.0.0.1", 9883, true, err, sizeof err));

	remove(sub);
	snprintf(sub, sizeof sub, "%s/b.conf", inc);
	remove(sub);
	remove(inc);
	remove(path);
	remove(dir);
}

static void tick_publishes_retained_json_with_expiry(void **state)
{
	(void)state;
	struct probe_state s = fresh(false);
	message(&s, "abc", 3, 1, false);
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(stub.publishes, 1);
	assert_true(stub.publish_clientid_null);
	assert_string_equal(stub.publish_topic, "$SYS/broker/probe/metrics");
	assert_true(stub.publish_retain);
	assert_int_equal(stub.expiry, 11);
	assert_non_null(strstr(stub.publish_payload, "\"qos1\":1"));
	assert_non_null(strstr(stub.publish_payload, "\"payload_bytes\":3"));
	probe_events__tick(MOSQ_EVT_TICK, &(struct mosquitto_evt_tick) { 0 }, &s);
	assert_int_equal(stub.publishes, 1); /* not again before sys_interval */
	free(stub.publish_payload);
	stub.publish_payload = NULL;
}

static void decimal_formatting(void **state)
{
	(void)state;
	char buf[24];
	assert_int_equal(probe_u64_to_dec(0, buf), 1);
	assert_string_equal(buf, "0");
	probe_u64_to_dec(UINT64_MAX, buf);
	assert_string_equal(buf, "18446744073709551615");
	/* every length, against printf: odd and even digit counts, zeros inside */
	char want[24];
	for (uint64_t v = 1, k = 0; k < 20; k++, v = v * 10 + k % 10) {
		for (uint64_t d = 0; d < 3 && v >= d; d++) {
			snprintf(want, sizeof want, "%llu", (unsigned long long)(v - d));
			assert_int_equal(probe_u64_to_dec(v - d, buf), strlen(want));
			assert_string_equal(buf, want);
		}
	}
	assert_int_equal(probe_u64_to_dec(1796300000000000000ULL, buf), 19);
	assert_string_equal(buf, "1796300000000000000");
	assert_int_equal(probe_u64_to_dec(10, buf), 2);
	assert_string_equal(buf, "10");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(options_defaults_and_values),
		cmocka_unit_test(options_errors_name_the_option),
		cmocka_unit_test(message_is_counted_and_stamped),
		cmocka_unit_test(stamp_failure_is_counted_not_fatal),
		cmocka_unit_test(every_series_once_with_every_family_on),
		cmocka_unit_test(options_stamp_choices),
		cmocka_unit_test(stamp_only_filtered_topics_one_in_n),
		cmocka_unit_test(message_out_measures_time_in_broker),
		cmocka_unit_test(siphash_matches_the_reference),
		cmocka_unit_test(client_ids_shown_by_choice),
		cmocka_unit_test(slow_subscriber_ids_hidden_are_keyed_hashes),
		cmocka_unit_test(disconnect_reasons_of_mosquitto_21),
		cmocka_unit_test(disconnects_split_by_identity),
		cmocka_unit_test(auth_observer_counts_each_client_once_and_defers),
		cmocka_unit_test(fanout_counts_reads_per_message),
		cmocka_unit_test(auth_calls_from_another_thread_are_not_counted),
		cmocka_unit_test(broker_configuration_conflicts),
		cmocka_unit_test(slow_subscribers_top_k_and_the_rest),
		cmocka_unit_test(slow_subscriber_ids_are_bounded),
		cmocka_unit_test(tick_publishes_retained_json_with_expiry),
		cmocka_unit_test(decimal_formatting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
