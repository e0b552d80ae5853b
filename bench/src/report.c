/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
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

/* One line of the report: a result, or one mode of a request result. */
struct run {
	char name[128];
	const cJSON *doc;  /* the whole result */
	const cJSON *body; /* where its counts are: the result, or the mode's object */
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

/* A chart's SVG element and its plot frame. */
static void svg_open(void)
{
	printf("<svg width=\"%d\" height=\"%d\" xmlns=\"http://www.w3.org/2000/svg\" "
	       "font-family=\"sans-serif\" font-size=\"11\">\n",
	    W, H);
	printf("<rect x=\"%d\" y=\"10\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
	    PAD, W - PAD - RPAD, H - PAD - 10);
}

/* Whole decades around lo..hi (ns) for a log-scale latency axis. */
static void log_range(double lo, double hi, double *ylo, double *yhi)
{
	if (lo >= hi)
		lo = hi / 10;
	*ylo = floor(log10(lo));
	*yhi = ceil(log10(hi));
	if (*yhi <= *ylo)
		*yhi = *ylo + 1;
}

/* A grid line and a label ("1us", "10ms") at every decade. */
static void log_y_axis(double ylo, double yhi)
{
	for (int exp10 = (int)ylo; exp10 <= (int)yhi; exp10++) { /* whole decades (log_range) */
		double y = H - PAD - (H - PAD - 10) * (exp10 - ylo) / (yhi - ylo);
		static const char *const units[] = { "ns", "us", "ms", "s" };
		int unit = exp10 / 3 > 3 ? 3 : exp10 / 3;
		char label[24];
		snprintf(label, sizeof label, "%.0f%s", pow(10, exp10 - 3 * unit), units[unit]);
		printf("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
		       "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
		    PAD, y, W - RPAD, y, PAD - 4, y + 4, label);
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
	double ylo, yhi;
	log_range(lo, hi, &ylo, &yhi);
	svg_open();
	static const char *xl[] = { "p0", "p90", "p99", "p99.9", "p99.99", "p99.999" };
	for (int i = 0; i <= 5; i++) {
		double x = PAD + (W - PAD - RPAD) * i / 5.0;
		printf("<line x1=\"%.1f\" y1=\"10\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
		       "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
		    x, x, H - PAD, x, H - PAD + 15, xl[i]);
	}
	log_y_axis(ylo, yhi);
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

/* A throughput or fan-out result's per-second deliveries; NULL for other scenarios (a connect or
 * churn timeline counts connections, not deliveries). */
static const cJSON *delivery_timeline(const struct run *r)
{
	const char *scenario = cJSON_GetStringValue(cJSON_GetObjectItem(r->doc, "scenario"));
	if (!scenario || (strcmp(scenario, "throughput") != 0 && strcmp(scenario, "fanout") != 0))
		return NULL;
	return cJSON_GetObjectItem(r->doc, "timeline");
}

static void timeline_svg(struct run *runs, int n)
{
	double tmax = 1, rmax = 1;
	for (int r = 0; r < n; r++) {
		const cJSON *tl = delivery_timeline(&runs[r]), *p;
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
	svg_open();
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
		const cJSON *tl = delivery_timeline(&runs[r]), *p;
		if (!tl)
			continue;
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

static double number(const cJSON *o, const char *key);

/* Each second's own p50, p99 and max (dashed, solid, dotted), from a throughput or fan-out
 * result's timeline, as HdrHistogram's and wrk2's interval logs: a stall in the middle of a run
 * shows where it happened. Older results kept only the p99 of the run so far: drawn as
 * such, and said. */
static const char *const interval_keys[] = { "p50", "p99", "max" };
static const char *const interval_dash[] = { "6,4", "", "2,3" };

static void latency_timeline_svg(struct run *runs, int n)
{
	double tmax = 1, hi = 1, lo = 1e18;
	bool so_far = false;
	for (int r = 0; r < n; r++) {
		const cJSON *p;
		cJSON_ArrayForEach(p, delivery_timeline(&runs[r]))
		{
			so_far |= !cJSON_GetObjectItem(p, "max");
			tmax = fmax(tmax, cJSON_GetNumberValue(cJSON_GetObjectItem(p, "t")));
			for (size_t k = 0; k < 3; k++) {
				double v = cJSON_GetNumberValue(cJSON_GetObjectItem(p, interval_keys[k]));
				if (v > 0) { /* NaN (absent) compares false */
					hi = fmax(hi, v);
					lo = fmin(lo, v);
				}
			}
		}
	}
	double ylo, yhi;
	log_range(lo, hi, &ylo, &yhi);
	svg_open();
	log_y_axis(ylo, yhi);
	for (int i = 0; i <= 4; i++) {
		double x = PAD + (W - PAD - RPAD) * i / 4.0;
		printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.1fs</text>\n", x, H - PAD + 15,
		    tmax * i / 4);
	}
	printf("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", W / 2, H - 15,
	    so_far ? "p99 of the run so far (an older result), log scale"
	           : "each second's own p50 (dashed), p99 (solid) and max (dotted), log scale");
	for (int r = 0; r < n; r++) {
		for (size_t k = 0; k < 3 && delivery_timeline(&runs[r]); k++) {
			const cJSON *p;
			printf("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
			       "stroke-dasharray=\"%s\" points=\"",
			    colours[r], k == 1 ? "2" : "1.2", interval_dash[k]);
			cJSON_ArrayForEach(p, delivery_timeline(&runs[r]))
			{
				double t = cJSON_GetNumberValue(cJSON_GetObjectItem(p, "t"));
				double v = cJSON_GetNumberValue(cJSON_GetObjectItem(p, interval_keys[k]));
				if (v > 0)
					printf("%.1f,%.1f ", PAD + (W - PAD - RPAD) * t / tmax,
					    H - PAD - (H - PAD - 10) * (log10(v) - ylo) / (yhi - ylo));
			}
			printf("\"/>\n");
		}
	}
	printf("</svg>\n");
}

/* What the broker saw, when a run read the probe: its counts, and the time messages spent inside
 * it (with the probe's stamps) beside the time on either side. */
static void broker_view(struct run *runs, int n)
{
	bool any = false;
	for (int r = 0; r < n; r++) {
		const cJSON *probe = cJSON_GetObjectItem(runs[r].doc, "probe");
		const cJSON *inside
		    = cJSON_GetObjectItem(cJSON_GetObjectItem(runs[r].doc, "latency"), "inside_broker");
		if (!probe && !inside)
			continue;
		if (!any)
			printf("<h2>What the broker saw (the probe)</h2>\n<table><tr><th>run</th>"
			       "<th>the probe's counts over the run</th><th>inside the broker p50</th>"
			       "<th>p99</th><th>max</th></tr>\n");
		any = true;
		printf("<tr><td><span style=\"color:%s\">&#9632;</span> ", colours[r]);
		escape(runs[r].name);
		printf("</td><td style=\"text-align:left\">");
		const cJSON *item;
		cJSON_ArrayForEach(item, probe)
		{
			if (cJSON_IsNumber(item)) {
				escape(item->string);
				printf(" %.6g ", item->valuedouble);
			}
		}
		if (!probe)
			printf("n/a");
		if (inside)
			printf("</td><td>%.0f us</td><td>%.0f us</td><td>%.0f us</td></tr>\n",
			    number(inside, "p50") / 1e3, number(inside, "p99") / 1e3,
			    number(inside, "max") / 1e3);
		else
			printf("</td><td colspan=\"3\">n/a (no stamps: the probe's stamp_messages)</td>"
			       "</tr>\n");
	}
	if (any)
		printf("</table>\n");
}

static double number(const cJSON *o, const char *key)
{
	double v = cJSON_GetNumberValue(cJSON_GetObjectItem(o, key));
	return isnan(v) ? 0 : v;
}

/* The settings as "key value" pairs. */
static void print_settings(const cJSON *doc)
{
	const cJSON *s = cJSON_GetObjectItem(doc, "settings"), *item;
	if (!s)
		s = cJSON_GetObjectItem(doc, "config"); /* format 1 */
	cJSON_ArrayForEach(item, s)
	{
		char *v = cJSON_IsString(item) ? NULL : cJSON_PrintUnformatted(item);
		escape(item->string);
		putchar('=');
		escape(cJSON_IsString(item) ? item->valuestring : v ? v : "?");
		putchar(' ');
		free(v);
	}
}

/* Take a result (or each mode of a request result) as runs; false when it is not a result. */
static bool add_runs(struct run *runs, int *n, const cJSON *doc, const char *path)
{
	const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "label"));
	if (!label) { /* format 1: the file's name */
		const char *slash = strrchr(path, '/');
		label = slash ? slash + 1 : path;
	}
	const cJSON *modes = cJSON_GetObjectItem(doc, "modes");
	const cJSON *lat = cJSON_GetObjectItem(doc, "latency");
	if (!cJSON_IsObject(modes) && !cJSON_IsObject(lat))
		return false;
	if (cJSON_IsObject(modes)) {
		const cJSON *m;
		cJSON_ArrayForEach(m, modes)
		{
			if (*n == MAX_RUNS)
				return true;
			struct run *r = &runs[(*n)++];
			snprintf(r->name, sizeof r->name, "%s (%s)", label, m->string);
			r->doc = doc;
			r->body = m;
			const cJSON *h = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "latency"), "hist");
			r->has_lat = bench_hist_from_json(h, &r->lat) == 0;
		}
		return true;
	}
	if (*n == MAX_RUNS)
		return true;
	struct run *r = &runs[(*n)++];
	snprintf(r->name, sizeof r->name, "%s", label);
	r->doc = doc;
	r->body = doc;
	const cJSON *main = cJSON_GetObjectItem(lat, "intended");
	if (!main)
		main = cJSON_GetObjectItem(lat, "connack");
	r->has_lat = main && bench_hist_from_json(cJSON_GetObjectItem(main, "hist"), &r->lat) == 0;
	return true;
}

static void summary_row(const struct run *r, const char *colour)
{
	const cJSON *counts = cJSON_GetObjectItem(r->body, "counts");
	const char *scenario = cJSON_GetStringValue(cJSON_GetObjectItem(r->doc, "scenario"));
	const char *date = cJSON_GetStringValue(cJSON_GetObjectItem(r->doc, "date"));
	printf("<tr><td style=\"color:%s\">&#9632; ", colour);
	escape(r->name);
	printf("</td><td>");
	escape(scenario ? scenario : "?");
	printf("</td><td>");
	escape(date ? date : "");
	printf("</td>");
	if (scenario && strcmp(scenario, "connect") == 0) {
		double sched = number(counts, "scheduled");
		printf("<td>connected %.0f of %.0f</td><td>failed %.0f</td><td></td>",
		    number(counts, "connected"), sched, number(counts, "failed"));
	} else if (scenario && strcmp(scenario, "churn") == 0) {
		printf("<td>cycles %.0f of %.0f</td><td>failed %.0f</td><td>late starts %.0f</td>",
		    number(counts, "cycles"), number(counts, "scheduled"), number(counts, "failed"),
		    number(counts, "late"));
	} else if (scenario && strcmp(scenario, "request") == 0) {
		printf("<td>%.0f req/s</td><td>ok %.0f</td><td>timeouts %.0f, errors %.0f</td>",
		    number(r->body, "requests_per_second"), number(r->body, "ok"),
		    number(r->body, "timeouts"), number(r->body, "errors"));
	} else {
		double exp = number(counts, "expected"), loss = number(counts, "loss");
		printf("<td>sent %.0f</td><td>%.0f of %.0f</td><td>loss %.0f (%.2f%%), shortfall %.0f"
		       "</td>",
		    number(counts, "sent"), number(counts, "delivered"), exp, loss,
		    exp > 0 ? 100 * loss / exp : 0, number(counts, "shortfall"));
	}
	char a[24], b[24], c[24], d[24];
	if (r->has_lat && r->lat.count)
		printf("<td>%s</td><td>%s</td><td>%s</td><td>%s</td>",
		    bench_fmt_ns(mqc_hist_percentile(&r->lat, 50), a, sizeof a),
		    bench_fmt_ns(mqc_hist_percentile(&r->lat, 99), b, sizeof b),
		    bench_fmt_ns(mqc_hist_percentile(&r->lat, 99.9), c, sizeof c),
		    bench_fmt_ns(r->lat.max, d, sizeof d));
	else
		printf("<td colspan=\"4\">no samples</td>");
	printf("</tr>\n");
}

int bench_report(int argc, char **argv)
{
	struct run runs[MAX_RUNS] = { 0 };
	cJSON *docs[MAX_RUNS] = { 0 };
	int n = 0, ndocs = 0, rc = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("Usage: mqbench report RESULT.json... > report.html\n"
			       "Up to %d --json results (each mode of a request result counts as one) as one\n"
			       "self-contained HTML page: each run's label, date and settings, its counts\n"
			       "(loss and shortfall; connections; requests), latency by percentile, each\n"
			       "second's own p50, p99 and max, deliveries per second, and what the broker saw\n"
			       "when a run read the probe (--metrics-url).\n",
			    MAX_RUNS);
			return 0;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr, "mqbench report: unknown option '%s' (see --help)\n", argv[i]);
			return 2;
		}
		if (ndocs == MAX_RUNS || n == MAX_RUNS) {
			fprintf(stderr, "mqbench report: at most %d runs\n", MAX_RUNS);
			rc = 2;
			break;
		}
		char *text = bench_slurp(argv[i]);
		cJSON *doc = text ? cJSON_Parse(text) : NULL;
		free(text);
		if (!doc || !add_runs(runs, &n, doc, argv[i])) {
			fprintf(stderr, "mqbench report: %s is not an mqbench --json result\n", argv[i]);
			cJSON_Delete(doc);
			rc = 1;
			break;
		}
		docs[ndocs++] = doc;
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
		       "<h1>mqbench report</h1>\n<table><tr><th>run</th><th>scenario</th><th>date</th>"
		       "<th colspan=\"3\">counts</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th>"
		       "</tr>\n");
		for (int r = 0; r < n; r++)
			summary_row(&runs[r], colours[r]);
		printf("</table>\n<h2>Settings</h2>\n<table>\n");
		for (int d = 0; d < ndocs; d++) {
			const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(docs[d], "label"));
			const char *version
			    = cJSON_GetStringValue(cJSON_GetObjectItem(docs[d], "mqbench_version"));
			const char *broker = cJSON_GetStringValue(cJSON_GetObjectItem(docs[d], "broker"));
			printf("<tr><td>");
			escape(label ? label : "(no label: format 1)");
			printf("</td><td style=\"text-align:left\">");
			print_settings(docs[d]);
			printf("broker=");
			escape(broker ? broker : "?");
			printf(" mqbench=");
			escape(version ? version : "?");
			printf("</td></tr>\n");
		}
		printf("</table>\n<h2>Latency by percentile (throughput: from the intended send time; "
		       "connect: CONNACK; request: command to reply)</h2>\n");
		percentile_svg(runs, n);
		printf("<h2>Latency over time, each second's own (throughput and fan-out runs)</h2>\n");
		latency_timeline_svg(runs, n);
		printf("<h2>Deliveries per second (throughput and fan-out runs)</h2>\n");
		timeline_svg(runs, n);
		broker_view(runs, n);
		printf("</body></html>\n");
	}
	for (int r = 0; r < n; r++)
		if (runs[r].has_lat)
			mqc_hist_free(&runs[r].lat);
	for (int d = 0; d < ndocs; d++)
		cJSON_Delete(docs[d]);
	return rc;
}
