/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * template_test.c - the reply-topic template of every tool (common/src/template.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mqc_template.h"

static void expands_the_topic_and_its_levels(void **state)
{
	(void)state;
	char out[64];
	assert_int_equal(
	    mqc_template_expand("{topic}/ack", "devices/d1/commands/open", out, sizeof out),
	    (int)strlen("devices/d1/commands/open/ack"));
	assert_string_equal(out, "devices/d1/commands/open/ack");
	assert_true(
	    mqc_template_expand("replies/{2}/{4}", "devices/d1/commands/open", out, sizeof out) > 0);
	assert_string_equal(out, "replies/d1/open");
	assert_true(
	    mqc_template_expand(MQC_REPLY_TEMPLATE_DEFAULT, "devices/d1/commands/open", out, sizeof out)
	    > 0);
	assert_string_equal(out, "replies/devices/d1/commands/open");
	assert_int_equal(mqc_template_expand("{5}", "a/b", out, sizeof out), -1); /* no such level */
	assert_int_equal(mqc_template_expand("x}", "a/b", out, sizeof out), -1);
	assert_int_equal(mqc_template_expand(
	                     "{topic}{topic}", "abcdefghijklmnopqrstuvwxyz0123456789", out, sizeof out),
	    -1); /* does not fit */
}

static void checks_say_what_is_wrong(void **state)
{
	(void)state;
	char why[128];
	assert_int_equal(mqc_template_check(MQC_REPLY_TEMPLATE_DEFAULT, why, sizeof why), 0);
	assert_int_equal(mqc_template_check("d/{2}/r/{9}", why, sizeof why), 0);
	static const char *const bad[][2] = {
		{ "", "an empty template" },
		{ "{topic", "an unmatched '{'" },
		{ "a}", "an unmatched '}'" },
		{ "{prefix}/{id}/replies", "unknown placeholder {prefix}" },
		{ "{nope}/x", "unknown placeholder {nope}" },
		{ "r/+/x", "a wildcard outside a placeholder" },
		{ "r/#", "a wildcard outside a placeholder" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = '\0';
		assert_int_equal(mqc_template_check(bad[i][0], why, sizeof why), -1);
		if (!strstr(why, bad[i][1]))
			fail_msg("'%s': %s", bad[i][0], why);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(expands_the_topic_and_its_levels),
		cmocka_unit_test(checks_say_what_is_wrong),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
