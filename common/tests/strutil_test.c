/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * strutil_test.c - unit tests of the strict value parsers (mqc_strutil.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "mqc_clock.h"
#include "mqc_strutil.h"

static void parses_integers_strictly(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(mqc_parse_u64("42", 0, 100, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(mqc_parse_u64("101", 0, 100, &v), -1);
	assert_int_equal(mqc_parse_u64("-1", 0, 100, &v), -1);
	assert_int_equal(mqc_parse_u64("4x", 0, 100, &v), -1);
	assert_int_equal(mqc_parse_u64("", 0, 100, &v), -1);
	assert_int_equal(mqc_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v), -1);
}

static void parses_durations_with_units(void **state)
{
	(void)state;
	uint64_t ns;
	assert_int_equal(mqc_parse_duration("250", MQC_NS_PER_MS, &ns), 0);
	assert_int_equal(ns, 250 * MQC_NS_PER_MS);
	assert_int_equal(mqc_parse_duration("1.5s", MQC_NS_PER_MS, &ns), 0);
	assert_int_equal(ns, 1500 * MQC_NS_PER_MS);
	assert_int_equal(mqc_parse_duration("20us", MQC_NS_PER_MS, &ns), 0);
	assert_int_equal(ns, 20 * MQC_NS_PER_US);
	assert_int_equal(mqc_parse_duration("2m", MQC_NS_PER_S, &ns), 0);
	assert_int_equal(ns, 120 * MQC_NS_PER_S);
	assert_int_equal(mqc_parse_duration("3 s", MQC_NS_PER_MS, &ns), -1);
	assert_int_equal(mqc_parse_duration("-1s", MQC_NS_PER_MS, &ns), -1);
	assert_int_equal(mqc_parse_duration("1d", MQC_NS_PER_MS, &ns), -1);
	assert_int_equal(mqc_parse_duration("nan", MQC_NS_PER_MS, &ns), -1);
}

static void parses_counts_and_doubles(void **state)
{
	(void)state;
	uint64_t v;
	double d;
	assert_int_equal(mqc_parse_count("15k", 1000000, &v), 0);
	assert_int_equal(v, 15000);
	assert_int_equal(mqc_parse_count("2M", 1000000, &v), -1);
	assert_int_equal(mqc_parse_count("1M", 1000000, &v), 0);
	assert_int_equal(mqc_parse_count("1kk", 1000000, &v), -1);
	assert_int_equal(mqc_parse_double("0.25", 0, 1, &d), 0);
	assert_true(d == 0.25);
	assert_int_equal(mqc_parse_double("1.5", 0, 1, &d), -1);
	assert_int_equal(mqc_parse_double("inf", 0, 1e9, &d), -1);
}

static void strlcpy_reports_truncation(void **state)
{
	(void)state;
	char buf[4];
	assert_true(mqc_strlcpy(buf, "abc", sizeof buf));
	assert_string_equal(buf, "abc");
	assert_false(mqc_strlcpy(buf, "abcd", sizeof buf));
	assert_string_equal(buf, "abc");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_integers_strictly),
		cmocka_unit_test(parses_durations_with_units),
		cmocka_unit_test(parses_counts_and_doubles),
		cmocka_unit_test(strlcpy_reports_truncation),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
