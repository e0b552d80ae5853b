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
#include <time.h>

#include "broker_stubs.h"
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
	assert_int_equal(cfg.http_port, 9883);
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
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct probe_config cfg;
		char err[256] = "";
		assert_int_equal(parse(&cfg, err, cases[i].k, cases[i].v), -1);
		if (!strstr(err, cases[i].needle))
			fail_msg("'%s' lacks '%s'", err, cases[i].needle);
	}
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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(options_defaults_and_values),
		cmocka_unit_test(options_errors_name_the_option),
		cmocka_unit_test(message_is_counted_and_stamped),
		cmocka_unit_test(stamp_failure_is_counted_not_fatal),
		cmocka_unit_test(disconnects_split_by_identity),
		cmocka_unit_test(auth_observer_counts_each_client_once_and_defers),
		cmocka_unit_test(fanout_counts_reads_per_message),
		cmocka_unit_test(tick_publishes_retained_json_with_expiry),
		cmocka_unit_test(decimal_formatting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
