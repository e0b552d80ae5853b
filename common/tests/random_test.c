/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * random_test.c - unit tests of random bytes and client ids (mqc_random.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mqc_random.h"

static void ids_carry_64_random_bits_after_the_prefix(void **state)
{
	(void)state;
	char a[32], b[32];
	assert_int_equal(mqc_random_id(a, sizeof a, "mqp-"), 0);
	assert_int_equal(mqc_random_id(b, sizeof b, "mqp-"), 0);
	assert_int_equal(strlen(a), 4 + MQC_RANDOM_ID_CHARS);
	assert_memory_equal(a, "mqp-", 4);
	assert_int_equal(
	    strspn(a + 4, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"),
	    MQC_RANDOM_ID_CHARS);
	assert_string_not_equal(a, b); /* 2^-64 to be equal */
	/* Exactly enough room works; one byte less is refused, never truncated. */
	assert_int_equal(mqc_random_id(a, 4 + MQC_RANDOM_ID_CHARS + 1, "mqp-"), 0);
	assert_int_equal(mqc_random_id(a, 4 + MQC_RANDOM_ID_CHARS, "mqp-"), -1);
}

static void random_bytes_fill_the_buffer(void **state)
{
	(void)state;
	unsigned char buf[4096] = { 0 };
	assert_int_equal(mqc_random_bytes(buf, sizeof buf), 0);
	size_t zeros = 0;
	for (size_t i = 0; i < sizeof buf; i++)
		zeros += buf[i] == 0;
	assert_true(zeros < 64); /* about 16 expected */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ids_carry_64_random_bits_after_the_prefix),
		cmocka_unit_test(random_bytes_fill_the_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
