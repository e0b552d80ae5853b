/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * hgrm.c - `mqbench hgrm RESULT.json [NAME]`: a latency histogram of a --json result in
 * HdrHistogram's percentile distribution format (.hgrm), which HdrHistogram's plotter and the
 * tools built on it read.
 *
 * The rows follow HdrHistogram's outputPercentileDistribution: value, percentile, total count,
 * 1/(1-percentile), at 5 ticks per halving of the distance to 100 %, then the summary lines. Values
 * are in the unit given (microseconds by default, as HdrHistogram's own tools print), from the
 * upper end of each bucket like every percentile mqbench prints.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"

/* The histogram called name (NULL: the result's main one) anywhere in doc's latency objects. */
static const cJSON *find_hist(const cJSON *o, const char *name)
{
	const cJSON *item;
	cJSON_ArrayForEach(item, o)
	{
		if (!cJSON_IsObject(item))
			continue;
		const cJSON *h = cJSON_GetObjectItem(item, "hist");
		if (cJSON_IsObject(h) && (!name || strcmp(item->string, name) == 0))
			return h;
		const cJSON *deeper = find_hist(item, name);
		if (deeper)
			return deeper;
	}
	return NULL;
}

/* The standard deviation over the buckets (each sample at its bucket's upper end). */
static double stddev(const struct mqc_hist *h)
{
	double mean = mqc_hist_mean(h), var = 0;
	for (size_t i = 0; i < h->nbuckets; i++) {
		if (!h->counts[i])
			continue;
		uint64_t lo, hi;
		mqc_hist_bucket_range(h->sub_bits, i, &lo, &hi);
		var += (double)h->counts[i] * ((double)hi - mean) * ((double)hi - mean);
	}
	return h->count ? sqrt(var / (double)h->count) : 0;
}

static void print_hgrm(const struct mqc_hist *h, double unit_ns)
{
	printf("%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
	uint64_t count = h->count;
	double last_pct = -1;
	for (int half = 0; half < 60; half++) {
		for (int tick = 0; tick < 5; tick++) {
			/* 5 steps per halving: 0, 10, 20, 30, 40 % then 50, 55, 60, 65, 70 % ... */
			double pct = 100.0 - 100.0 / pow(2, half) * (1.0 - tick / 10.0);
			if (pct <= last_pct)
				continue;
			uint64_t v = mqc_hist_percentile(h, pct > 0 ? pct : 0.0001);
			uint64_t at = (uint64_t)ceil((double)count * pct / 100.0);
			if (pct >= 100 || at >= count)
				goto last;
			printf("%12.3f %14.12f %10llu %14.2f\n", (double)v / unit_ns, pct / 100,
			    (unsigned long long)at, 1.0 / (1.0 - pct / 100));
			last_pct = pct;
		}
	}
last:
	printf("%12.3f %14.12f %10llu\n", (double)h->max / unit_ns, 1.0, (unsigned long long)count);
	printf("#[Mean    = %12.3f, StdDeviation   = %12.3f]\n", mqc_hist_mean(h) / unit_ns,
	    stddev(h) / unit_ns);
	printf("#[Max     = %12.3f, Total count    = %12llu]\n", (double)h->max / unit_ns,
	    (unsigned long long)count);
	printf("#[Buckets = %12zu, SubBuckets     = %12u]\n", h->nbuckets >> h->sub_bits,
	    1u << h->sub_bits);
}

int bench_hgrm(int argc, char **argv)
{
	const char *path = NULL, *name = NULL;
	double unit_ns = 1000;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf(
			    "Usage: mqbench hgrm [--unit ns|us|ms] RESULT.json [NAME] > latency.hgrm\n"
			    "A latency histogram of a --json result (NAME: intended, connack, latency, ...;\n"
			    "default the first) in HdrHistogram's percentile distribution format,\n"
			    "values in microseconds unless --unit says otherwise.\n");
			return 0;
		}
		if (strcmp(argv[i], "--unit") == 0 && i + 1 == argc) {
			fprintf(stderr, "mqbench hgrm: --unit needs ns, us or ms\n");
			return 2;
		}
		if (strcmp(argv[i], "--unit") == 0) {
			const char *u = argv[++i];
			unit_ns = strcmp(u, "ns") == 0 ? 1
			    : strcmp(u, "us") == 0     ? 1e3
			    : strcmp(u, "ms") == 0     ? 1e6
			                               : 0;
			if (unit_ns == 0) {
				fprintf(stderr, "mqbench hgrm: --unit: expected ns, us or ms, not '%s'\n", u);
				return 2;
			}
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "mqbench hgrm: unknown option '%s' (see --help)\n", argv[i]);
			return 2;
		} else if (!path) {
			path = argv[i];
		} else if (!name) {
			name = argv[i];
		} else {
			fprintf(stderr, "mqbench hgrm: one result and one histogram name (see --help)\n");
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "mqbench hgrm: no result file given (see --help)\n");
		return 2;
	}
	char *text = bench_slurp(path);
	cJSON *doc = text ? cJSON_Parse(text) : NULL;
	free(text);
	if (!doc) {
		fprintf(stderr, "mqbench hgrm: %s is not readable JSON\n", path);
		return 1;
	}
	const cJSON *h = find_hist(doc, name);
	struct mqc_hist hist;
	int rc = 0;
	if (!h) {
		fprintf(stderr, "mqbench hgrm: %s has no latency histogram%s%s\n", path,
		    name ? " called " : "", name ? name : "");
		rc = 1;
	} else if (bench_hist_from_json(h, &hist) != 0) {
		fprintf(stderr, "mqbench hgrm: %s: the histogram is malformed\n", path);
		rc = 1;
	} else {
		if (hist.count == 0)
			fprintf(stderr, "mqbench hgrm: %s: the histogram is empty\n", path);
		else
			print_hgrm(&hist, unit_ns);
		rc = hist.count == 0;
		mqc_hist_free(&hist);
	}
	cJSON_Delete(doc);
	return rc;
}
