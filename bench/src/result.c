/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * result.c - the one writer of mqbench's --json results (cJSON), and what every result carries.
 *
 * Every scenario's result is one JSON object on one line:
 *   format "mqbench-result", format_version, mqbench_version, date (UTC, ISO 8601), label,
 *   scenario, broker, settings (what shaped the load: merge compares them), then the scenario's
 *   own fields (counts, latency histograms, ...).
 * Strings go through cJSON, so a topic or label holding '"' or '\' stays valid JSON.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mqbench.h"
#include "mqc_clock.h"

const char *const bench_churn_actions[3] = { "none", "publish", "subscribe" };
const char *const bench_scenario_names[SC_COUNT]
    = { "connect", "throughput", "fanout", "request", "churn" };

static const char *protocol_name(int protocol)
{
	return protocol == 5 ? "5" : "3.1.1";
}

cJSON *bench_result_new(const struct bench_opts *o)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *s = cJSON_CreateObject();
	char date[32];
	time_t now = time(NULL);
	struct tm tm;
	strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
	cJSON_AddStringToObject(root, "format", "mqbench-result");
	cJSON_AddNumberToObject(root, "format_version", BENCH_RESULT_FORMAT);
	cJSON_AddStringToObject(root, "mqbench_version", MQBENCH_VERSION);
	cJSON_AddStringToObject(root, "date", date);
	cJSON_AddStringToObject(root, "label", o->label ? o->label : o->prefix);
	cJSON_AddStringToObject(root, "scenario", bench_scenario_names[o->scenario]);
	cJSON_AddStringToObject(root, "broker", o->net.broker);
	cJSON_AddItemToObject(root, "settings", s);
	/* What shaped the load, and nothing that differs between the pods of one run (prefix,
	 * label, seed, source addresses): merge refuses results whose settings differ. */
	cJSON_AddStringToObject(s, "protocol", protocol_name(o->net.conn.protocol));
	if (o->scenario != SC_CONNECT) /* connect holds for --hold instead */
		cJSON_AddNumberToObject(s, "duration_ns", (double)o->duration_ns);
	switch (o->scenario) {
		case SC_CONNECT:
			cJSON_AddNumberToObject(s, "clients", o->clients);
			cJSON_AddNumberToObject(s, "rate", o->connrate);
			cJSON_AddNumberToObject(s, "concurrency", o->concurrency);
			cJSON_AddNumberToObject(s, "hold_ns", (double)o->hold_ns);
			cJSON_AddNumberToObject(s, "keepalive_s", o->keepalive_s);
			cJSON_AddBoolToObject(s, "tls", o->net.conn.url.tls);
			cJSON_AddBoolToObject(s, "reconnect", o->reconnect);
			cJSON_AddBoolToObject(s, "tls_resume", o->tls_resume);
			if (o->reconnect) {
				cJSON_AddNumberToObject(s, "reconnect_backoff_min_ns", (double)o->backoff_min_ns);
				cJSON_AddNumberToObject(s, "reconnect_backoff_max_ns", (double)o->backoff_max_ns);
				cJSON_AddNumberToObject(s, "reconnect_jitter", o->reconnect_jitter);
			}
			break;
		case SC_CHURN:
			cJSON_AddNumberToObject(s, "clients", o->clients);
			cJSON_AddNumberToObject(s, "rate", o->rate);
			cJSON_AddNumberToObject(s, "concurrency", o->concurrency);
			cJSON_AddStringToObject(s, "action", bench_churn_actions[o->churn_action]);
			cJSON_AddBoolToObject(s, "tls", o->net.conn.url.tls);
			cJSON_AddBoolToObject(s, "tls_resume", o->tls_resume);
			break;
		case SC_COUNT:
			break;
		case SC_THROUGHPUT:
		case SC_FANOUT:
			cJSON_AddNumberToObject(s, "publishers", o->publishers);
			cJSON_AddNumberToObject(s, "rate", o->rate);
			cJSON_AddNumberToObject(s, "subscribers", o->subscribers);
			cJSON_AddNumberToObject(s, "topics", o->topics);
			cJSON_AddNumberToObject(s, "qos", o->net.qos);
			cJSON_AddNumberToObject(s, "size", (double)o->size);
			cJSON_AddNumberToObject(s, "drain_ns", (double)o->drain_ns);
			cJSON_AddBoolToObject(s, "tls", o->net.conn.url.tls);
			if (o->pub_topic)
				cJSON_AddStringToObject(s, "pub_topic", o->pub_topic);
			if (o->sub_filter)
				cJSON_AddStringToObject(s, "sub_filter", o->sub_filter);
			break;
		case SC_REQUEST:
			cJSON_AddNumberToObject(s, "concurrency", o->concurrency);
			cJSON_AddStringToObject(s, "loop", o->rate > 0 ? "open" : "closed");
			cJSON_AddNumberToObject(s, "rate", o->rate);
			cJSON_AddNumberToObject(s, "pool_size", o->pool_size);
			cJSON_AddStringToObject(s, "topic", o->pub_topic);
			cJSON_AddNumberToObject(s, "timeout_ns", (double)o->timeout_ns);
			cJSON_AddBoolToObject(s, "tls", o->net.conn.url.tls);
			break;
	}
	return root;
}

cJSON *bench_latency_json(const struct mqc_hist *h)
{
	cJSON *l = cJSON_CreateObject();
	cJSON_AddNumberToObject(l, "p50", (double)mqc_hist_percentile(h, 50));
	cJSON_AddNumberToObject(l, "p90", (double)mqc_hist_percentile(h, 90));
	cJSON_AddNumberToObject(l, "p99", (double)mqc_hist_percentile(h, 99));
	cJSON_AddNumberToObject(l, "p99.9", (double)mqc_hist_percentile(h, 99.9));
	cJSON_AddNumberToObject(l, "max", (double)h->max);
	cJSON_AddNumberToObject(l, "min", (double)(h->count ? h->min : 0));
	cJSON_AddNumberToObject(l, "mean", mqc_hist_mean(h));
	cJSON_AddItemToObject(l, "hist", bench_hist_to_json(h));
	return l;
}

int bench_result_print(cJSON *root)
{
	char *text = root ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	if (!text) {
		fprintf(stderr, "mqbench: out of memory for the --json result\n");
		return -1;
	}
	int rc = puts(text) < 0 || fflush(stdout) != 0 ? -1 : 0;
	free(text);
	if (rc != 0)
		perror("mqbench: writing the --json result");
	return rc;
}
