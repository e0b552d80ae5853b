/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * output.c - numbers for people and for machines, and the broker's side of a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"

const char *bench_fmt_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns < 1000)
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%lluus", (unsigned long long)(ns / 1000));
	else if (ns < 1000000000ULL)
		snprintf(buf, len, "%.3fms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%.3fs", (double)ns / 1e9);
	return buf;
}

void bench_print_latency(FILE *out, const char *label, const struct mqc_hist *h)
{
	char a[24], b[24], c[24], d[24], e[24];
	if (!h->count) {
		fprintf(out, "%s (no samples)\n", label);
		return;
	}
	fprintf(out, "%s p50 %s p90 %s p99 %s p99.9 %s max %s\n", label,
	    bench_fmt_ns(mqc_hist_percentile(h, 50), a, sizeof a),
	    bench_fmt_ns(mqc_hist_percentile(h, 90), b, sizeof b),
	    bench_fmt_ns(mqc_hist_percentile(h, 99), c, sizeof c),
	    bench_fmt_ns(mqc_hist_percentile(h, 99.9), d, sizeof d), bench_fmt_ns(h->max, e, sizeof e));
}

void bench_warn_delayed_ack(const char *what, const struct mqc_hist *h)
{
	double share = bench_delayed_ack_share(h);
	if (share < 0.2)
		return;
	fprintf(stderr,
	    "mqbench: warning: %s: %.0f%% of the latencies sit just above multiples of 40 ms, the mark "
	    "of Nagle's algorithm waiting for delayed ACKs. Most likely the broker keeps mosquitto's "
	    "default set_tcp_nodelay false: set it true in mosquitto.conf.\n",
	    what, share * 100);
}
