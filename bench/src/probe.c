/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * probe.c - the broker's side of a run: the probe's /metrics over HTTP (libcurl, so any host
 * name, IPv4 or IPv6 address and port), and a process's CPU and memory from /proc.
 */
#include <curl/curl.h>
#include <dirent.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mqbench.h"

/* A /metrics page is a few kB; anything this large is not the probe. */
#define PROBE_BODY_MAX   (4u << 20)
#define PROBE_TIMEOUT_MS 3000L

int bench_metrics_url_check(const char *url, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	if (!u) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char *scheme = NULL, *host = NULL;
	CURLUcode rc = curl_url_set(u, CURLUPART_URL, url, 0);
	int ret = -1;
	if (rc != CURLUE_OK)
		snprintf(err, errlen, "'%s' is not a URL (%s)", url, curl_url_strerror(rc));
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK
	    || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		snprintf(err, errlen, "'%s': expected an http:// or https:// URL", url);
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host)
		snprintf(err, errlen, "'%s' names no host", url);
	else
		ret = 0;
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return ret;
}

struct body {
	char *data;
	size_t len, cap;
};

static size_t on_body(char *ptr, size_t size, size_t n, void *userdata)
{
	struct body *b = userdata;
	size_t add = size * n;
	if (b->len + add + 1 > PROBE_BODY_MAX)
		return 0; /* curl reports CURLE_WRITE_ERROR */
	if (b->len + add + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 16384;
		while (cap < b->len + add + 1)
			cap *= 2;
		char *d = realloc(b->data, cap);
		if (!d)
			return 0;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, add);
	b->len += add;
	b->data[b->len] = '\0';
	return add;
}

/* The first failure is said loudly, once: every scenario reads the probe several times. */
static void warn_once(const char *url, const char *why)
{
	static atomic_bool warned;
	if (!atomic_exchange(&warned, true))
		fprintf(stderr,
		    "mqbench: warning: cannot read the broker's probe at %s: %s; the broker-side "
		    "figures read n/a\n",
		    url, why);
}

/* GET url into *b. Returns 0, or -1 with the reason in why. */
static int http_get(const char *url, struct body *b, char *why, size_t whylen)
{
	CURL *c = curl_easy_init();
	if (!c) {
		snprintf(why, whylen, "curl_easy_init failed");
		return -1;
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, PROBE_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	/* A probe behind its web_config: the CA that signed its certificate, and basic auth, from
	 * the environment (a password on the command line is anyone's to read in ps). */
	const char *ca = getenv("MQBENCH_METRICS_CA");
	const char *user = getenv("MQBENCH_METRICS_USERNAME");
	const char *password = getenv("MQBENCH_METRICS_PASSWORD");
	if (ca && *ca)
		curl_easy_setopt(c, CURLOPT_CAINFO, ca);
	if (user && *user) {
		curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
		curl_easy_setopt(c, CURLOPT_USERNAME, user);
		curl_easy_setopt(c, CURLOPT_PASSWORD, password ? password : "");
	}
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK) {
		snprintf(why, whylen, "%s", *errbuf ? errbuf : curl_easy_strerror(rc));
		return -1;
	}
	if (status != 200) {
		snprintf(why, whylen, "HTTP status %ld", status);
		return -1;
	}
	if (!b->data) {
		snprintf(why, whylen, "an empty response");
		return -1;
	}
	return 0;
}

void bench_probe_read(const char *metrics_url, struct probe_sample *s)
{
	*s = (struct probe_sample) { 0 };
	if (!metrics_url)
		return;
	struct body b = { 0 };
	char why[CURL_ERROR_SIZE + 64];
	if (http_get(metrics_url, &b, why, sizeof why) != 0) {
		warn_once(metrics_url, why);
		free(b.data);
		return;
	}
	bool found = false;
	s->messages_in = bench_prom_sum(b.data, "mosquitto_messages_received_total", &found);
	s->ok = found;
	s->connects = bench_prom_sum(b.data, "mosquitto_connects_total", &s->has_connects);
	s->disconnects = bench_prom_sum(b.data, "mosquitto_disconnects_total", &found);
	s->deliveries = bench_prom_sum(b.data, "mosquitto_deliveries_total", &s->has_deliveries);
	s->routing_checks = bench_prom_sum(b.data, "mosquitto_routing_checks_total", &found);
	s->routing_sum = bench_prom_sum(b.data, "mosquitto_message_routing_checks_sum", &found);
	s->routing_count = bench_prom_sum(b.data, "mosquitto_message_routing_checks_count", &found);
	s->cpu_seconds = bench_prom_sum(b.data, "process_cpu_seconds_total", &found);
	s->resident_bytes = bench_prom_sum(b.data, "process_resident_memory_bytes", &found);
	s->start_time = bench_prom_sum(b.data, "process_start_time_seconds", &found);
	free(b.data);
	if (!s->ok)
		warn_once(
		    metrics_url, "no mosquitto_messages_received_total there (not the probe's /metrics?)");
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
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return false;
	*cpu_seconds = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	/* VmRSS from status, the figure ps and top show (stat's rss field was seen trailing it). */
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return false;
	unsigned long kb = 0;
	bool found = false;
	while (!found && fgets(buf, sizeof buf, f))
		found = sscanf(buf, "VmRSS: %lu kB", &kb) == 1;
	fclose(f);
	*resident_bytes = (double)kb * 1024.0;
	return found;
}

bool bench_proc_files(pid_t pid, unsigned long long *limit, unsigned long *open_now)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool found = false;
	while (!found && fgets(line, sizeof line, f)) {
		char soft[32];
		found = sscanf(line, "Max open files %31s", soft) == 1;
		if (found)
			*limit = strcmp(soft, "unlimited") == 0 ? ULLONG_MAX : strtoull(soft, NULL, 10);
	}
	fclose(f);
	if (!found)
		return false;
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return false; /* another user's process: its descriptors are not ours to count */
	*open_now = 0;
	for (struct dirent *e; (e = readdir(d));)
		*open_now += e->d_name[0] != '.';
	closedir(d);
	return true;
}
