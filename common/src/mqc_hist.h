/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_hist.h - a log-linear histogram of nanosecond values, mergeable, with exact count, min,
 * max and sum, and an overflow bucket (values never vanish).
 *
 * Values below 2^S are exact; above, each power of two is split into 2^S buckets, so a recorded
 * value is known within a relative error of 2^-S (S = 7: 0.78 %; S = 10: 0.098 %). The range is
 * 0 .. 2^36 ns (68.7 s); larger values land in the overflow bucket. Percentiles are reported the
 * way HdrHistogram's hdr_value_at_percentile does: the highest value equivalent to the bucket
 * that holds the target rank, clamped to the exact maximum.
 *
 * Threads: none; use one histogram per thread and merge.
 */
#ifndef MQC_HIST_H
#define MQC_HIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MQC_HIST_MAX_BITS 36

struct mqc_hist {
	unsigned sub_bits; /* S */
	size_t nbuckets;
	uint64_t *counts;
	uint64_t count;    /* including overflow */
	uint64_t overflow; /* values >= 2^36 */
	uint64_t min, max; /* exact; min is UINT64_MAX when empty */
	double sum;
};

/** Allocate for sub_bits in 1..14. Returns 0 or -1. */
int mqc_hist_init(struct mqc_hist *h, unsigned sub_bits);
void mqc_hist_free(struct mqc_hist *h);

void mqc_hist_record(struct mqc_hist *h, uint64_t value);

/** Empty it again (an interval's histogram, HdrHistogram's hdr_reset). */
void mqc_hist_reset(struct mqc_hist *h);

/** Add src into dst (same sub_bits). Returns 0, or -1 when the layouts differ. */
int mqc_hist_merge(struct mqc_hist *dst, const struct mqc_hist *src);

/** Value at percentile p (0..100]; 0 when empty. */
uint64_t mqc_hist_percentile(const struct mqc_hist *h, double p);

double mqc_hist_mean(const struct mqc_hist *h);

/** Bucket index of a value below 2^36, and the value range a bucket stands for. */
size_t mqc_hist_index(unsigned sub_bits, uint64_t value);
void mqc_hist_bucket_range(unsigned sub_bits, size_t index, uint64_t *lo, uint64_t *hi);

/** Write as a JSON object: {"sub_bits":..,"count":..,"min":..,"max":..,"sum":..,
 *  "overflow":..,"buckets":[[index,count],...]} (non-empty buckets only). */
void mqc_hist_write_json(const struct mqc_hist *h, FILE *out);

#endif
