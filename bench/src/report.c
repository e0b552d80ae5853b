/*
 * report.c - `mqbench report a.json b.json ... > report.html`: latency percentile curves and
 * throughput over time, as one self-contained HTML page (inline SVG, no network assets).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"

#define W        760
#define H        360
#define PAD      70 /* left and bottom */
#define RPAD     40 /* right */
#define MAX_RUNS 12

static const char *const colours[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939" };

struct run {
	const char *name;
	cJSON *doc;
	struct mqc_hist lat;
	bool has_lat;
};

static void escape(const char *s)
{
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", stdout);
		else if (*s == '>')
			fputs("&gt;", stdout);
		else if (*s == '&')
			fputs("&amp;", stdout);
		else
			putchar(*s);
	}
}

/* x: "nines" of the percentile (0 = p0, 1 = p90, 2 = p99, ... up to 5 = p99.999). */
static double nines(double p)
{
	return p >= 100 ? 5 : fmin(5, -log10(1 - p / 100));
}

static void percentile_svg(struct run *runs, int n)
{
	double lo = 1e18, hi = 1;
	for (int r = 0; r < n; r++) {
		if (!runs[r].has_lat || !runs[r].lat.count)
			continue;
		double a = (double)mqc_hist_percentile(&runs[r].lat, 1), b = (double)runs[r].lat.max;
		lo = fmin(lo, a > 0 ? a : 1);
		hi = fmax(hi, b);
	}
	if (lo >= hi)
		lo = hi / 10;
	double ylo = floor(log10(lo)), yhi = ceil(log10(hi));
	if (yhi <= ylo)
		yhi = ylo + 1;
	printf("<svg width=\"%d\" height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\" "
	       "font-family=\"sans-serif\" font-size=\"11\">\n",
	    W, H);
	printf("<rect x=\"%d\" y=\"10\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
	    PAD, W - PAD - RPAD, H - PAD - 10);
	static const char *xl[] = { "p0", "p90", "p99", "p99.9", "p99.99", "p99.999" };
	for (int i = 0; i <= 5; i++) {
		double x = PAD + (W - PAD - RPAD) * i / 5.0;
		printf("<line x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
		       "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
		    x, x, H - PAD, x, H - PAD + 15, xl[i]);
	}
	for (double e = ylo; e <= yhi; e++) {
		double y = H - PAD - (H - PAD - 10) * (e - ylo) / (yhi - ylo);
		static const char *const units[] = { "ns", "us", "ms", "s" };
		int exp10 = (int)e, unit = exp10 / 3 > 3 ? 3 : exp10 / 3;
		char label[24];
		snprintf(label, sizeof label, "%.0f%s", pow(10, exp10 - 3 * unit), units[unit]);
		printf("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
		       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
		    PAD, y, W - RPAD, y, PAD - 4, y + 4, label);
	}
	printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">percentile</text>\n", W / 2, H - 15);
	for (int r = 0; r < n; r++) {
		if (!runs[r].has_lat || !runs[r].lat.count)
			continue;
		printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colours[r]);
		for (int i = 0; i <= 250; i++) {
			double p = 100 * (1 - pow(10, -5.0 * i / 250));
			double v = (double)mqc_hist_percentile(&runs[r].lat, p > 0 ? p : 0.0001);
			double x = PAD + (W - PAD - RPAD) * nines(p) / 5;
			double y = H - PAD - (H - PAD - 10) * (log10(fmax(v, 1)) - ylo) / (yhi - ylo);
			printf("%.1f,%.1f ", x, fmax(10, fmin(H - PAD, y)));
		}
		printf("\"/>\n");
	}
	printf("</svg>\n");
}

static void timeline_svg(struct run *runs, int n)
{
	double tmax = 1, rmax = 1;
	for (int r = 0; r < n; r++) {
		const cJSON *tl = cJSON_GetObjectItem(runs[r].doc, "timeline"), *p;
		double prev_t = 0, prev_d = 0;
		cJSON_ArrayForEach(p, tl)
		{
			double t = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "t"));
			double d = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "delivered"));
			if (t > prev_t)
				rmax = fmax(rmax, (d - prev_d) / (t - prev_t));
			tmax = fmax(tmax, t);
			prev_t = t;
			prev_d = d;
		}
	}
	printf("<svg width=\"%d\" height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\" "
	       "font-family=\"sans-serif\" font-size=\"11\">\n",
	    W, H);
	printf("<rect x=\"%d\" y=\"10\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
	    PAD, W - PAD - RPAD, H - PAD - 10);
	for (int i = 0; i <= 4; i++) {
		double y = H - PAD - (H - PAD - 10) * i / 4.0;
		printf("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f/s</text>\n", PAD - 4, y + 4,
		    rmax * i / 4);
		double x = PAD + (W - PAD - RPAD) * i / 4.0;
		printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.1fs</text>\n", x, H - PAD + 15,
		    tmax * i / 4);
	}
	printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">deliveries per second</text>\n", W / 2,
	    H - 15);
	for (int r = 0; r < n; r++) {
		const cJSON *tl = cJSON_GetObjectItem(runs[r].doc, "timeline"), *p;
		printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colours[r]);
		double prev_t = 0, prev_d = 0;
		cJSON_ArrayForEach(p, tl)
		{
			double t = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "t"));
			double d = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "delivered"));
			if (t > prev_t)
				printf("%.1f,%.1f ", PAD + (W - PAD - RPAD) * t / tmax,
				    H - PAD - (H - PAD - 10) * ((d - prev_d) / (t - prev_t)) / rmax);
			prev_t = t;
			prev_d = d;
		}
		printf("\"/>\n");
	}
	printf("</svg>\n");
}

int bench_report(int argc, char **argv)
{
	struct run runs[MAX_RUNS] = { 0 };
	int n = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("Usage: mqbench report RESULT.json... > report.html\n"
			       "Latency percentile curves and deliveries per second of up to %d --json "
			       "results, as one self-contained HTML page.\n",
			    MAX_RUNS);
			return 0;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr, "mqbench report: unknown option '%s' (see --help)\n", argv[i]);
			return 2;
		}
		if (n == MAX_RUNS) {
			fprintf(stderr, "mqbench report: at most %d results\n", MAX_RUNS);
			return 2;
		}
		char *text = bench_slurp(argv[i]);
		cJSON *doc = text ? cJSON_Parse(text) : NULL;
		free(text);
		const cJSON *lat = cJSON_GetObjectItem(doc, "latency");
		if (!doc || !cJSON_IsObject(lat)) {
			fprintf(stderr, "mqbench report: %s is not an mqbench --json result\n", argv[i]);
			cJSON_Delete(doc);
			rc = 1;
			break;
		}
		runs[n].name = argv[i];
		runs[n].doc = doc;
		const cJSON *main = cJSON_GetObjectItem(lat, "intended");
		if (!main)
			main = cJSON_GetObjectItem(lat, "connack");
		runs[n].has_lat
		    = main && bench_hist_from_json(cJSON_GetObjectItem(main, "hist"), &runs[n].lat) == 0;
		n++;
	}
	if (rc == 0 && n == 0) {
		fprintf(stderr, "mqbench report: no result files given (see --help)\n");
		rc = 2;
	}
	if (rc == 0) {
		printf("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>mqbench report"
		       "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
		       "collapse}td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}"
		       "td:first-child,th:first-child{text-align:left}</style></head><body>\n"
		       "<h1>mqbench report</h1>\n<table><tr><th>run</th><th>scenario</th><th>sent</th>"
		       "<th>delivered / expected</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th>"
		       "</tr>\n");
		for (int r = 0; r < n; r++) {
			const cJSON *counts = cJSON_GetObjectItem(runs[r].doc, "counts");
			char a[24], b[24], c[24], d[24];
			printf("<tr><td style=\"color:%s\">&#9632; ", colours[r]);
			escape(runs[r].name);
			printf("</td><td>");
			const char *scenario
			    = cJSON_GetStringValue(cJSON_GetObjectItem(runs[r].doc, "scenario"));
			escape(scenario ? scenario : "?");
			double sent = cJSON_GetNumberValue(cJSON_GetObjectItem(counts, "sent"));
			double del = cJSON_GetNumberValue(cJSON_GetObjectItem(counts, "delivered"));
			double exp = cJSON_GetNumberValue(cJSON_GetObjectItem(counts, "expected"));
			printf("</td><td>%.0f</td><td>%.0f / %.0f</td>", isnan(sent) ? 0 : sent,
			    isnan(del) ? 0 : del, isnan(exp) ? 0 : exp);
			if (runs[r].has_lat)
				printf("<td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
				    bench_fmt_ns(mqc_hist_percentile(&runs[r].lat, 50), a, sizeof a),
				    bench_fmt_ns(mqc_hist_percentile(&runs[r].lat, 99), b, sizeof b),
				    bench_fmt_ns(mqc_hist_percentile(&runs[r].lat, 99.9), c, sizeof c),
				    bench_fmt_ns(runs[r].lat.max, d, sizeof d));
			printf("</tr>\n");
		}
		printf("</table>\n<h2>Latency by percentile (from the intended send time; connect: "
		       "CONNACK)</h2>\n");
		percentile_svg(runs, n);
		printf("<h2>Throughput over time</h2>\n");
		timeline_svg(runs, n);
		printf("</body></html>\n");
	}
	for (int r = 0; r < n; r++) {
		if (runs[r].has_lat)
			mqc_hist_free(&runs[r].lat);
		cJSON_Delete(runs[r].doc);
	}
	return rc;
}
