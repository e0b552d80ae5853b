/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * hist_test.c - unit tests of the histogram (mqc_hist.h): its values, percentiles and merging.
 */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>

#include "mqc_hist.h"

static void buckets_contain_their_values_within_the_error_bound(void **state)
{
	(void)state;
	for (unsigned s = 7; s <= 10; s += 3) {
		double bound = 1.0 / (double)(1u << s);
		for (uint64_t v = 1; v < (1ULL << MQC_HIST_MAX_BITS); v = v * 17 / 16 + 1) {
			uint64_t lo, hi;
			size_t idx = mqc_hist_index(s, v);
			mqc_hist_bucket_range(s, idx, &lo, &hi);
			if (lo > v || v > hi)
				fail_msg("S=%u v=%llu outside [%llu, %llu]", s, (unsigned long long)v,
				    (unsigned long long)lo, (unsigned long long)hi);
			assert_true((double)(hi - lo) / (double)lo <= bound || lo == 0);
		}
		/* Continuous at 2^S, and the last bucket ends at 2^36 - 1. */
		uint64_t lo, hi;
		assert_int_equal(mqc_hist_index(s, (1ULL << s) - 1) + 1, mqc_hist_index(s, 1ULL << s));
		struct mqc_hist h;
		assert_int_equal(mqc_hist_init(&h, s), 0);
		mqc_hist_bucket_range(s, h.nbuckets - 1, &lo, &hi);
		assert_int_equal(hi, (1ULL << MQC_HIST_MAX_BITS) - 1);
		assert_int_equal(mqc_hist_index(s, (1ULL << MQC_HIST_MAX_BITS) - 1), h.nbuckets - 1);
		mqc_hist_free(&h);
	}
}

static void percentiles_of_uniform_values(void **state)
{
	(void)state;
	struct mqc_hist h;
	assert_int_equal(mqc_hist_init(&h, 7), 0);
	const uint64_t n = 100000;
	for (uint64_t v = 1; v <= n; v++)
		mqc_hist_record(&h, v * 1000); /* 1 us .. 100 ms */
	static const double ps[] = { 50, 90, 99, 99.9 };
	for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
		double exact = ps[i] / 100 * (double)n * 1000;
		double got = (double)mqc_hist_percentile(&h, ps[i]);
		assert_true(got >= exact - 1000);
		assert_true(got <= exact * (1 + 1.0 / 128) + 1000);
	}
	assert_int_equal(mqc_hist_percentile(&h, 100), n * 1000);
	assert_int_equal(h.min, 1000);
	assert_int_equal(h.max, n * 1000);
	assert_int_equal(h.count, n);
	mqc_hist_free(&h);
}

static void small_counts_match_hdr_rules(void **state)
{
	(void)state;
	struct mqc_hist h;
	assert_int_equal(mqc_hist_init(&h, 7), 0);
	assert_int_equal(mqc_hist_percentile(&h, 50), 0);
	mqc_hist_record(&h, 10);
	mqc_hist_record(&h, 20);
	mqc_hist_record(&h, 1000000);
	assert_int_equal(mqc_hist_percentile(&h, 1), 10);       /* rank max(1, round(0.03)) = 1 */
	assert_int_equal(mqc_hist_percentile(&h, 50), 20);      /* rank round(1.5) = 2 */
	assert_int_equal(mqc_hist_percentile(&h, 99), 1000000); /* clamped to the exact max */
	mqc_hist_free(&h);
}

static void overflow_is_counted_not_dropped(void **state)
{
	(void)state;
	struct mqc_hist h;
	assert_int_equal(mqc_hist_init(&h, 7), 0);
	mqc_hist_record(&h, 5);
	mqc_hist_record(&h, 1ULL << 40);
	assert_int_equal(h.count, 2);
	assert_int_equal(h.overflow, 1);
	assert_int_equal(mqc_hist_percentile(&h, 99), 1ULL << 40);
	mqc_hist_free(&h);
}

static void merge_equals_recording_into_one(void **state)
{
	(void)state;
	struct mqc_hist a, b, all;
	assert_int_equal(mqc_hist_init(&a, 7), 0);
	assert_int_equal(mqc_hist_init(&b, 7), 0);
	assert_int_equal(mqc_hist_init(&all, 7), 0);
	srandom(7);
	for (int i = 0; i < 50000; i++) {
		uint64_t v = (uint64_t)random() * 37;
		mqc_hist_record(i % 3 ? &a : &b, v);
		mqc_hist_record(&all, v);
	}
	assert_int_equal(mqc_hist_merge(&a, &b), 0);
	assert_int_equal(a.count, all.count);
	assert_int_equal(a.min, all.min);
	assert_int_equal(a.max, all.max);
	assert_memory_equal(a.counts, all.counts, a.nbuckets * sizeof *a.counts);
	for (int k = 0; k < 14; k++) { /* p = 1, 8.3, ..., 95.9 */
		double p = 1 + 7.3 * k;
		assert_int_equal(mqc_hist_percentile(&a, p), mqc_hist_percentile(&all, p));
	}
	struct mqc_hist other;
	assert_int_equal(mqc_hist_init(&other, 10), 0);
	assert_int_equal(mqc_hist_merge(&a, &other), -1);
	mqc_hist_free(&other);
	mqc_hist_free(&a);
	mqc_hist_free(&b);
	mqc_hist_free(&all);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(buckets_contain_their_values_within_the_error_bound),
		cmocka_unit_test(percentiles_of_uniform_values),
		cmocka_unit_test(small_counts_match_hdr_rules),
		cmocka_unit_test(overflow_is_counted_not_dropped),
		cmocka_unit_test(merge_equals_recording_into_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
