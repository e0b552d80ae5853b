/*
 * output.c - numbers for people and for machines, and the broker's side of a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mqbench.h"
#include "mqc_http.h"
#include "mqc_url.h"

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

void bench_json_hist(FILE *out, const char *name, const struct mqc_hist *h)
{
	fprintf(out,
	    "\"%s\":{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p99.9\":%llu,\"max\":%llu,"
	    "\"mean\":%.0f,\"hist\":",
	    name, (unsigned long long)mqc_hist_percentile(h, 50),
	    (unsigned long long)mqc_hist_percentile(h, 90),
	    (unsigned long long)mqc_hist_percentile(h, 99),
	    (unsigned long long)mqc_hist_percentile(h, 99.9), (unsigned long long)h->max,
	    mqc_hist_mean(h));
	mqc_hist_write_json(h, out);
	fputc('}', out);
}

/* Sum of every sample whose name (up to '{' or ' ') is exactly name. */
static double prom_sum(const char *text, const char *name, bool *found)
{
	size_t n = strlen(name);
	double sum = 0;
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, name, n) != 0 || (p[n] != '{' && p[n] != ' '))
			continue;
		const char *v = p[n] == ' ' ? p + n + 1 : strchr(p, '}');
		if (v && *v == '}')
			v += 2;
		if (v) {
			sum += strtod(v, NULL);
			*found = true;
		}
	}
	return sum;
}

void bench_probe_read(const char *metrics_url, struct probe_sample *s)
{
	*s = (struct probe_sample) { 0 };
	int port = 0;
	char path[256] = "/metrics";
	if (!metrics_url || sscanf(metrics_url, "http://127.0.0.1:%d%255s", &port, path) < 1)
		return;
	struct mqc_http_response r;
	if (mqc_http_get(port, path, &r) != 0 || r.status != 200) {
		mqc_http_response_free(&r);
		return;
	}
	bool found = false;
	s->messages_in = prom_sum(r.body, "mosquitto_messages_received_total", &found);
	s->ok = found;
	s->connects = prom_sum(r.body, "mosquitto_connects_total", &found);
	s->disconnects = prom_sum(r.body, "mosquitto_disconnects_total", &found);
	s->deliveries = prom_sum(r.body, "mosquitto_deliveries_total", &found);
	s->fanout_sum = prom_sum(r.body, "mosquitto_message_fanout_sum", &found);
	s->fanout_count = prom_sum(r.body, "mosquitto_message_fanout_count", &found);
	s->cpu_seconds = prom_sum(r.body, "process_cpu_seconds_total", &found);
	s->resident_bytes = prom_sum(r.body, "process_resident_memory_bytes", &found);
	mqc_http_response_free(&r);
}

bool bench_proc_read(pid_t pid, double *cpu_seconds, double *resident_bytes)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	unsigned long ut, st;
	long rss;
	if (!p
	    || sscanf(p + 2,
	           "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d %*d "
	           "%*d %*u %*u %ld",
	           &ut, &st, &rss)
	        != 3)
		return false;
	*cpu_seconds = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	*resident_bytes = (double)rss * (double)sysconf(_SC_PAGESIZE);
	return true;
}
