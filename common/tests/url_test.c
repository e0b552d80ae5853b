/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * url_test.c - unit tests of broker URLs (mqc_url.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "mqc_url.h"

static void parses_plain_and_tls(void **state)
{
	(void)state;
	struct mqc_url url;
	char err[256];

	assert_int_equal(mqc_url_parse("mqtt://127.0.0.1:1884", &url, err, sizeof err), 0);
	assert_false(url.tls);
	assert_string_equal(url.host, "127.0.0.1");
	assert_int_equal(url.port, 1884);

	assert_int_equal(mqc_url_parse("mqtts://broker.example", &url, err, sizeof err), 0);
	assert_true(url.tls);
	assert_string_equal(url.host, "broker.example");
	assert_int_equal(url.port, 8883);

	assert_int_equal(mqc_url_parse("mqtt://localhost/", &url, err, sizeof err), 0);
	assert_int_equal(url.port, 1883);

	/* tcp:// and ssl://, as other MQTT clients name them; formatted back as mqtt(s):// */
	char buf[300];
	assert_int_equal(mqc_url_parse("tcp://broker:1884", &url, err, sizeof err), 0);
	assert_false(url.tls);
	assert_int_equal(url.port, 1884);
	mqc_url_format(&url, buf, sizeof buf);
	assert_string_equal(buf, "mqtt://broker:1884");
	assert_int_equal(mqc_url_parse("ssl://broker", &url, err, sizeof err), 0);
	assert_true(url.tls);
	assert_int_equal(url.port, 8883);
}

static void parses_ipv6(void **state)
{
	(void)state;
	struct mqc_url url;
	char err[256], buf[300];

	assert_int_equal(mqc_url_parse("mqtt://[::1]:2000", &url, err, sizeof err), 0);
	assert_string_equal(url.host, "::1");
	assert_int_equal(url.port, 2000);
	mqc_url_format(&url, buf, sizeof buf);
	assert_string_equal(buf, "mqtt://[::1]:2000");
}

static void rejects_bad_urls_with_reason(void **state)
{
	(void)state;
	static const struct {
		const char *url, *reason;
	} cases[] = {
		{ "", "empty" },
		{ "http://127.0.0.1:1883", "scheme" },
		{ "mqtt:/127.0.0.1:1883", "scheme" },
		{ "mqtt://", "missing host" },
		{ "mqtt://:1883", "missing host" },
		{ "mqtt://h:", "empty port" },
		{ "mqtt://h:0", "out of range" },
		{ "mqtt://h:65536", "out of range" },
		{ "mqtt://h:12x", "not a number" },
		{ "mqtt://u:p@h:1883", "credentials" },
		{ "mqtt://h:1883/path", "paths" },
		{ "mqtt://[::1", "unterminated" },
		{ "mqtt://[[]", "not an IPv6 address" }, /* found by fuzz_url */
		{ "mqtt://[broker]:1", "not an IPv6 address" },
		{ "mqtt://bro ker:1", "no host name has" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct mqc_url url = { .port = 42 };
		char err[256] = "";
		assert_int_equal(mqc_url_parse(cases[i].url, &url, err, sizeof err), -1);
		assert_non_null(strstr(err, cases[i].reason));
		assert_int_equal(url.port, 42); /* untouched on error */
	}
}

static void parses_websocket_urls(void **state)
{
	(void)state;
	struct mqc_url url;
	char err[256], buf[400];
	assert_int_equal(mqc_url_parse("ws://broker", &url, err, sizeof err), 0);
	assert_true(url.ws);
	assert_false(url.tls);
	assert_int_equal(url.port, 80);
	assert_string_equal(url.path, "/mqtt"); /* the default path */
	assert_int_equal(mqc_url_parse("wss://[::1]:8443/ws?token=a%20b", &url, err, sizeof err), 0);
	assert_true(url.ws && url.tls);
	assert_string_equal(url.host, "::1");
	assert_int_equal(url.port, 8443);
	assert_string_equal(url.path, "/ws?token=a%20b");
	mqc_url_format(&url, buf, sizeof buf);
	assert_string_equal(buf, "wss://[::1]:8443/ws?token=a%20b");
	assert_int_equal(mqc_url_parse("wss://b", &url, err, sizeof err), 0);
	assert_int_equal(url.port, 443);
	static const struct {
		const char *url, *reason;
	} bad[] = {
		{ "ws://h?x", "must begin with '/'" },
		{ "ws://h/a#frag", "fragment" },
		{ "ws://h/a b", "space" },
		{ "ws://h:80:80/", "port is not a number" },
		{ "wss://u:p@h/", "credentials" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		assert_int_equal(mqc_url_parse(bad[i].url, &url, err, sizeof err), -1);
		if (!strstr(err, bad[i].reason))
			fail_msg("%s: '%s' does not say '%s'", bad[i].url, err, bad[i].reason);
	}
	/* A list: the path after the last node is every node's. */
	struct mqc_url u[4];
	size_t n = 0;
	assert_int_equal(mqc_url_list_parse("ws://a:81,b:82/x,y", u, 4, &n, err, sizeof err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(u[0].path, "/x,y");
	assert_string_equal(u[1].path, "/x,y");
	assert_int_equal(u[1].port, 82);
	assert_int_equal(mqc_url_list_parse("wss://a,b", u, 4, &n, err, sizeof err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(u[1].path, "/mqtt");
	assert_int_equal(mqc_url_list_parse("ws://a,/mqtt", u, 4, &n, err, sizeof err), -1);
	assert_non_null(strstr(err, "an empty broker"));
}

static void parses_lists_of_brokers(void **state)
{
	(void)state;
	struct mqc_url u[4];
	size_t n = 0;
	char err[256];
	assert_int_equal(mqc_url_list_parse("mqtts://a:1884,b,[::1]:9/", u, 4, &n, err, sizeof err), 0);
	assert_int_equal(n, 3);
	assert_true(u[0].tls && u[1].tls && u[2].tls);
	assert_string_equal(u[0].host, "a");
	assert_int_equal(u[0].port, 1884);
	assert_string_equal(u[1].host, "b");
	assert_int_equal(u[1].port, 8883);
	assert_string_equal(u[2].host, "::1");
	assert_int_equal(u[2].port, 9);
	assert_int_equal(mqc_url_list_parse("tcp://one:2", u, 4, &n, err, sizeof err), 0);
	assert_int_equal(n, 1);
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "mqtt://a,,b", "an empty broker in the list" },
		{ "mqtt://a,", "an empty broker in the list" },
		{ "mqtt://,a", "an empty broker in the list" },
		{ "mqtt://a:1,b:1,a:1", "listed twice" },
		{ "mqtt://a,b,c,d,e", "more than 4 brokers" },
		{ "mqtt://a,b:x", "port is not a number" },
		{ "mqtt://a,b/path", "paths and queries" },
		{ "a,b", "scheme must be" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		assert_int_equal(mqc_url_list_parse(bad[i].text, u, 4, &n, err, sizeof err), -1);
		if (!strstr(err, bad[i].why))
			fail_msg("%s: '%s' does not say '%s'", bad[i].text, err, bad[i].why);
	}
	/* Where one broker is taken, a list is refused saying so. */
	assert_int_equal(mqc_url_parse("mqtt://a,b", u, err, sizeof err), -1);
	assert_non_null(strstr(err, "a list of brokers"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_plain_and_tls),
		cmocka_unit_test(parses_ipv6),
		cmocka_unit_test(parses_websocket_urls),
		cmocka_unit_test(rejects_bad_urls_with_reason),
		cmocka_unit_test(parses_lists_of_brokers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
