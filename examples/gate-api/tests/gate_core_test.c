/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Unit tests of gate-api's routes, validation, error mapping, JSON and metrics (no network).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gate.h"
#include "mqc_codec.h"
#include "mqc_http.h"

static int route(const char *method, const char *path, struct gate_route *r, char *why)
{
	return gate_route_parse(method, path, r, why, 256);
}

static void command_routes_parse_both_backends(void **state)
{
	(void)state;
	struct gate_route r;
	char why[256];
	assert_int_equal(route("POST", "/devices/gate-1/commands/open", &r, why), 0);
	assert_int_equal(r.kind, GATE_COMMAND);
	assert_int_equal(r.backend, GATE_POOL);
	assert_string_equal(r.device, "gate-1");
	assert_string_equal(r.command, "open");
	assert_int_equal(route("POST", "/naive/devices/gate_2.a:b/commands/close", &r, why), 0);
	assert_int_equal(r.backend, GATE_NAIVE);
	assert_string_equal(r.device, "gate_2.a:b");
	assert_int_equal(route("POST", "/devices/gate%2D1/commands/open", &r, why), 0);
	assert_string_equal(r.device, "gate-1"); /* escapes decode */
	assert_int_equal(route("GET", "/healthz", &r, why), 0);
	assert_int_equal(r.kind, GATE_HEALTH);
	assert_int_equal(route("GET", "/metrics", &r, why), 0);
	assert_int_equal(r.kind, GATE_METRICS);
}

static void wrong_routes_and_methods_are_404_and_405(void **state)
{
	(void)state;
	struct gate_route r;
	char why[256];
	assert_int_equal(route("POST", "/", &r, why), 404);
	assert_int_equal(route("POST", "/devices/a/commands", &r, why), 404);
	assert_int_equal(route("POST", "/devices/a/commands/b/c", &r, why), 404);
	assert_int_equal(route("POST", "/devices/a/b/commands/c", &r, why), 404); /* a raw '/' */
	assert_int_equal(route("POST", "/naive/naive/devices/a/commands/b", &r, why), 404);
	assert_int_equal(route("POST", "/pool/devices/a/commands/b", &r, why), 404);
	assert_int_equal(route("POST", "devices/a/commands/b", &r, why), 404);
	assert_non_null(strstr(why, "POST /devices/{id}/commands/{name}"));
	assert_int_equal(route("GET", "/devices/a/commands/b", &r, why), 405);
	assert_int_equal(route("POST", "/metrics", &r, why), 405);
}

static void ids_that_could_inject_topics_are_400_with_the_reason(void **state)
{
	(void)state;
	struct gate_route r;
	char why[256];
	static const struct {
		const char *path, *reason;
	} cases[] = {
		{ "/devices/a%2Bb/commands/open", "device id contains an MQTT wildcard" },
		{ "/devices/%23/commands/open", "device id contains an MQTT wildcard" },
		{ "/devices/a%2Fb/commands/open", "device id contains '/'" },
		{ "/devices/a%00b/commands/open", "device id contains NUL" },
		{ "/devices/a/commands/op+en", "command name contains an MQTT wildcard" },
		{ "/devices/a/commands/%24SYS", "command name may contain only" },
		{ "/devices//commands/open", "device id is empty" },
		{ "/devices/a/commands/", "command name is empty" },
		{ "/devices/a%2/commands/open", "device id has a malformed %-escape" },
		{ "/devices/a%zz/commands/open", "device id has a malformed %-escape" },
		{ "/devices/a b/commands/open", "device id may contain only" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(route("POST", cases[i].path, &r, why), 400);
		if (!strstr(why, cases[i].reason))
			fail_msg("%s: '%s' does not say '%s'", cases[i].path, why, cases[i].reason);
	}
	char path[256], name[80];
	memset(name, 'x', 65);
	name[65] = '\0';
	snprintf(path, sizeof path, "/devices/%s/commands/open", name);
	assert_int_equal(route("POST", path, &r, why), 400);
	assert_non_null(strstr(why, "longer than 64"));
	name[64] = '\0';
	snprintf(path, sizeof path, "/devices/%s/commands/open", name);
	assert_int_equal(route("POST", path, &r, why), 0);
	assert_int_equal(strlen(r.device), 64);
}

static void errors_map_to_http_statuses(void **state)
{
	(void)state;
	assert_int_equal(gate_http_status(MQP_OK), 200);
	assert_int_equal(gate_http_status(MQP_ETIMEDOUT), 504);
	assert_int_equal(gate_http_status(MQP_ECONNECT), 502);
	assert_int_equal(gate_http_status(MQP_ECONNLOST), 502);
	assert_int_equal(gate_http_status(MQP_EDENIED), 403);
	assert_string_equal(gate_error_code(MQP_EDENIED), "forbidden");
	assert_int_equal(gate_http_status(MQP_ECLOSED), 503);
	assert_int_equal(gate_http_status(MQP_EEXHAUSTED), 503);
	assert_string_equal(gate_error_code(MQP_EEXHAUSTED), "pool_exhausted");
	assert_int_equal(gate_http_status(MQP_ENORESPONDER), 503);
	assert_string_equal(gate_error_code(MQP_ENORESPONDER), "no_responder");
	assert_int_equal(gate_http_status(MQP_EINVAL), 400);
	assert_int_equal(gate_http_status(MQP_ENOMEM), 500);
	assert_string_equal(gate_error_code(MQP_ETIMEDOUT), "device_timeout");
	assert_string_equal(gate_error_code(MQP_ECONNECT), "broker_unreachable");
	assert_string_equal(gate_error_code(MQP_ECLOSED), "shutting_down");
}

static void replies_embed_json_or_become_strings(void **state)
{
	(void)state;
	struct gate_route r = { .kind = GATE_COMMAND, .backend = GATE_POOL };
	strcpy(r.device, "gate-1");
	strcpy(r.command, "open");
	char *j = gate_reply_json(&r, "{\"ok\":true}", 11, 1500000);
	assert_string_equal(j,
	    "{\"device\":\"gate-1\",\"command\":\"open\",\"route\":\"pool\",\"latency_ms\":1.5,"
	    "\"reply\":{\"ok\":true}}");
	free(j);
	r.backend = GATE_NAIVE;
	j = gate_reply_json(&r, "Success \"quoted\"", 16, 0);
	assert_non_null(strstr(j, "\"route\":\"naive\""));
	assert_non_null(strstr(j, "\"reply\":\"Success \\\"quoted\\\"\""));
	free(j);
	j = gate_reply_json(&r, "{\"a\":1} trailing", 16, 0); /* not one JSON value: a string */
	assert_non_null(strstr(j, "\"reply\":\"{\\\"a\\\":1} trailing\""));
	free(j);
	j = gate_reply_json(&r, "", 0, 0);
	assert_non_null(strstr(j, "\"reply\":\"\""));
	free(j);
	j = gate_error_json("device_timeout", "no \"answer\"");
	assert_string_equal(j, "{\"error\":\"device_timeout\",\"message\":\"no \\\"answer\\\"\"}");
	free(j);
	assert_true(gate_body_ok("", 0));
	assert_true(gate_body_ok("{\"speed\":3}", 11));
	assert_true(gate_body_ok("42", 2));
	assert_false(gate_body_ok("{", 1));
	assert_false(gate_body_ok("{} {}", 5));
	/* NUL and invalid UTF-8: refused, raw or escaped. */
	assert_false(gate_body_ok("\"a\0b\"", 5));
	assert_false(gate_body_ok("\"a\\u0000b\"", 10));
	assert_true(gate_body_ok("\"a\\\\u0000b\"", 11)); /* an escaped backslash, then text */
	assert_false(gate_body_ok("\"\xff\"", 3));
	assert_false(gate_body_ok("\"\xc0\xaf\"", 4));                      /* overlong '/' */
	assert_false(gate_body_ok("\"\xed\xa0\x80\"", 5));                  /* a surrogate */
	assert_false(gate_body_ok("\"\xf4\x90\x80\x80\"", 6));              /* past U+10FFFF */
	assert_false(gate_body_ok("\"\xe2\x82\"", 4));                      /* cut short */
	assert_true(gate_body_ok("\"\xe2\x82\xac \xf0\x9f\x98\x80\"", 10)); /* EUR, an emoji */
	/* A reply that is not UTF-8 comes back as base64, so the answer stays valid JSON. */
	j = gate_reply_json(&r, "\xff\x00ok", 4, 0);
	assert_non_null(strstr(j, "\"reply_base64\":\"/wBvaw==\""));
	assert_true(mqc_utf8_valid(j, strlen(j)));
	free(j);
	j = gate_reply_json(&r, "\"x\\u0000y\"", 10, 0); /* JSON with an escaped NUL: a string */
	assert_non_null(strstr(j, "\"reply\":\"\\\"x\\\\u0000y\\\"\""));
	free(j);
}

static void metrics_count_by_route_and_status(void **state)
{
	(void)state;
	static struct gate_counters c;
	gate_count(&c, GATE_POOL, 200);
	gate_count(&c, GATE_POOL, 200);
	gate_count(&c, GATE_NAIVE, 504);
	gate_count(&c, GATE_NAIVE, 418); /* anything else */
	gate_count(&c, GATE_POOL, 403);
	char *t = gate_metrics_text(&c, NULL, 0);
	char dup[256];
	if (mqc_prom_duplicate(t, dup, sizeof dup))
		fail_msg("series %s appears twice in:\n%s", dup, t);
	assert_non_null(strstr(t, "gate_api_responses_total{route=\"pool\",status=\"403\"} 1\n"));
	assert_non_null(strstr(t, "gate_api_responses_total{route=\"pool\",status=\"200\"} 2\n"));
	assert_non_null(strstr(t, "gate_api_responses_total{route=\"naive\",status=\"504\"} 1\n"));
	assert_non_null(strstr(t, "gate_api_responses_total{route=\"naive\",status=\"other\"} 1\n"));
	assert_non_null(strstr(t, "gate_api_pending 0\n"));
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(command_routes_parse_both_backends),
		cmocka_unit_test(wrong_routes_and_methods_are_404_and_405),
		cmocka_unit_test(ids_that_could_inject_topics_are_400_with_the_reason),
		cmocka_unit_test(errors_map_to_http_statuses),
		cmocka_unit_test(replies_embed_json_or_become_strings),
		cmocka_unit_test(metrics_count_by_route_and_status),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
