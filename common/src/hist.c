/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * hist.c - the log-linear nanosecond histogram (mqc_hist.h): recording, merging, percentiles
 * and its JSON form.
 */
#include "mqc_hist.h"

#include <stdlib.h>
#include <string.h>

static size_t bucket_count(unsigned s)
{
	return (size_t)(MQC_HIST_MAX_BITS + 1 - s) << s;
}

int mqc_hist_init(struct mqc_hist *h, unsigned sub_bits)
{
	*h = (struct mqc_hist) { 0 };
	if (sub_bits < 1 || sub_bits > 14)
		return -1;
	h->sub_bits = sub_bits;
	h->nbuckets = bucket_count(sub_bits);
	h->counts = calloc(h->nbuckets, sizeof *h->counts);
	if (!h->counts)
		return -1;
	h->min = UINT64_MAX;
	return 0;
}

void mqc_hist_free(struct mqc_hist *h)
{
	free(h->counts);
	*h = (struct mqc_hist) { 0 };
}

void mqc_hist_reset(struct mqc_hist *h)
{
	memset(h->counts, 0, h->nbuckets * sizeof *h->counts);
	h->count = h->overflow = h->max = 0;
	h->min = UINT64_MAX;
	h->sum = 0;
}

size_t mqc_hist_index(unsigned s, uint64_t v)
{
	if (v < (1ULL << s))
		return (size_t)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v);
	unsigned sh = e - s;
	return ((size_t)(sh + 1) << s) + (size_t)((v >> sh) - (1ULL << s));
}

void mqc_hist_bucket_range(unsigned s, size_t idx, uint64_t *lo, uint64_t *hi)
{
	size_t top = idx >> s;
	if (top == 0) { /* below 2^S: exact */
		*lo = *hi = idx;
		return;
	}
	unsigned sh = (unsigned)top - 1;
	*lo = ((idx & ((1ULL << s) - 1)) + (1ULL << s)) << sh;
	*hi = *lo + (1ULL << sh) - 1;
}

void mqc_hist_record(struct mqc_hist *h, uint64_t v)
{
	h->count++;
	h->sum += (double)v;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	if (v >= (1ULL << MQC_HIST_MAX_BITS))
		h->overflow++;
	else
		h->counts[mqc_hist_index(h->sub_bits, v)]++;
}

int mqc_hist_merge(struct mqc_hist *dst, const struct mqc_hist *src)
{
	if (dst->sub_bits != src->sub_bits)
		return -1;
	for (size_t i = 0; i < dst->nbuckets; i++)
		dst->counts[i] += src->counts[i];
	dst->count += src->count;
	dst->overflow += src->overflow;
	dst->sum += src->sum;
	if (src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	return 0;
}

uint64_t mqc_hist_percentile(const struct mqc_hist *h, double p)
{
	if (h->count == 0)
		return 0;
	if (p >= 100)
		return h->max;
	double want = p / 100.0 * (double)h->count;
	uint64_t target = (uint64_t)(want + 0.5);
	if (target < 1)
		target = 1;
	uint64_t seen = 0;
	for (size_t i = 0; i < h->nbuckets; i++) {
		seen += h->counts[i];
		if (seen >= target) {
			uint64_t lo, hi;
			mqc_hist_bucket_range(h->sub_bits, i, &lo, &hi);
			return hi < h->max ? hi : h->max;
		}
	}
	return h->max; /* in the overflow bucket */
}

double mqc_hist_mean(const struct mqc_hist *h)
{
	return h->count ? h->sum / (double)h->count : 0;
}

void mqc_hist_write_json(const struct mqc_hist *h, FILE *out)
{
	fprintf(out,
	    "{\"sub_bits\":%u,\"count\":%llu,\"min\":%llu,\"max\":%llu,\"sum\":%.0f,"
	    "\"overflow\":%llu,\"buckets\":[",
	    h->sub_bits, (unsigned long long)h->count, (unsigned long long)(h->count ? h->min : 0),
	    (unsigned long long)h->max, h->sum, (unsigned long long)h->overflow);
	bool first = true;
	for (size_t i = 0; i < h->nbuckets; i++) {
		if (!h->counts[i])
			continue;
		fprintf(out, "%s[%zu,%llu]", first ? "" : ",", i, (unsigned long long)h->counts[i]);
		first = false;
	}
	fprintf(out, "]}");
}
