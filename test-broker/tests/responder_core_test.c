/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* Unit tests: the responder's options and adversarial decisions (its reply-topic template is
 * common/src/template.c's: common/tests/template_test.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "mqc_clock.h"
#include "responder_core.h"

static int parse(struct rsp_options *o, char *err, size_t errlen, ...)
{
	char *argv[32] = { "responder" };
	int argc = 1;
	va_list ap;
	va_start(ap, errlen);
	for (char *a; (a = va_arg(ap, char *));)
		argv[argc++] = a;
	va_end(ap);
	return rsp_parse_args(argc, argv, o, err, errlen);
}

static void parses_defaults_and_values(void **state)
{
	(void)state;
	struct rsp_options o;
	char err[256];
	assert_int_equal(parse(&o, err, sizeof err, "--broker", "mqtt://127.0.0.1:1884", NULL), 0);
	assert_string_equal(o.filter, RSP_DEFAULT_FILTER);
	assert_int_equal(o.net.conn.protocol, 5);
	assert_int_equal(o.net.conn.url.port, 1884);
	assert_int_equal(
	    parse(&o, err, sizeof err, "--broker", "mqtt://h:1", "--delay", "5ms", "--jitter", "2",
	        "--drop", "0.25", "--protocol", "3.1.1", "--qos", "1", NULL),
	    0);
	assert_int_equal(o.delay_ns, 5 * MQC_NS_PER_MS);
	assert_int_equal(o.jitter_ns, 2 * MQC_NS_PER_MS);
	assert_true(o.drop == 0.25);
	assert_int_equal(o.net.conn.protocol, 4);
	assert_int_equal(o.net.qos, 1);
}

static void rejects_bad_options_by_name(void **state)
{
	(void)state;
	static const struct {
		const char *opt, *value, *needle;
	} cases[] = {
		{ "--drop", "1.5", "--drop" },
		{ "--qos", "3", "--qos" },
		{ "--delay", "5 parsecs", "--delay" },
		{ "--protocol", "6", "--protocol" },
		{ "--qos", NULL, "needs a value" },
		{ "--reply-template", "{topic", "--reply-template" },
		{ "--reply-template", "{nope}", "--reply-template" },
		{ "--bogus", "x", "unknown option '--bogus'" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct rsp_options o;
		char err[256] = "";
		assert_int_equal(parse(&o, err, sizeof err, "--broker", "mqtt://h:1", cases[i].opt,
		                     cases[i].value, NULL),
		    -1);
		if (!strstr(err, cases[i].needle))
			fail_msg("%s %s: message '%s' lacks '%s'", cases[i].opt, cases[i].value, err,
			    cases[i].needle);
	}
	struct rsp_options o;
	char err[256];
	assert_int_equal(parse(&o, err, sizeof err, NULL), -1);
	assert_non_null(strstr(err, "--broker"));
	/* mqtts:// without --cafile: the system's trust store. */
	assert_int_equal(parse(&o, err, sizeof err, "--broker", "mqtts://h:1", NULL), 0);
	assert_true(o.net.conn.url.tls);
	assert_null(o.net.conn.cafile);
	assert_int_equal(parse(&o, err, sizeof err, "--broker", "mqtt://h:1", "--cert", "c", NULL), -1);
	assert_non_null(strstr(err, "--key"));
}

static void plan_follows_probabilities(void **state)
{
	(void)state;
	struct rsp_options o = { .drop = 0.3, .duplicate = 0.5, .delay_ns = 1000, .jitter_ns = 500 };
	struct rsp_rng rng = { 42 };
	int dropped = 0, duplicated = 0, n = 20000;
	for (int i = 0; i < n; i++) {
		struct rsp_plan p = rsp_plan_next(&o, &rng);
		if (p.drop) {
			dropped++;
			assert_int_equal(p.copies, 0);
			continue;
		}
		duplicated += p.copies == 2;
		assert_true(p.delay_ns >= 1000 && p.delay_ns < 1500);
	}
	/* Binomial: 20000 x 0.3 has sd ~65; allow 5 sd. */
	assert_in_range(dropped, 6000 - 325, 6000 + 325);
	assert_in_range(duplicated, (n - dropped) / 2 - 300, (n - dropped) / 2 + 300);

	struct rsp_options always = { .drop = 1 };
	struct rsp_options never = { .late = 1, .late_ns = 7 };
	assert_true(rsp_plan_next(&always, &rng).drop);
	struct rsp_plan late = rsp_plan_next(&never, &rng);
	assert_false(late.drop);
	assert_true(late.late);
	assert_int_equal(late.delay_ns, 7);
}

static void plan_is_deterministic_per_seed(void **state)
{
	(void)state;
	struct rsp_options o = { .drop = 0.5 };
	struct rsp_rng a = { 7 }, b = { 7 };
	for (int i = 0; i < 1000; i++)
		assert_int_equal(rsp_plan_next(&o, &a).drop, rsp_plan_next(&o, &b).drop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_defaults_and_values),
		cmocka_unit_test(rejects_bad_options_by_name),
		cmocka_unit_test(plan_follows_probabilities),
		cmocka_unit_test(plan_is_deterministic_per_seed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
