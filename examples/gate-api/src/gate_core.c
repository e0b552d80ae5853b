/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * gate_core.c - gate-api without the network: routes, validation, error mapping, JSON, metrics.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "mqc_codec.h"

/* --- routes and names -------------------------------------------------------------------- */

const char *gate_name_problem(const char *name, size_t len)
{
	if (len == 0)
		return "is empty";
	if (len > GATE_NAME_MAX)
		return "is longer than 64 characters";
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)name[i];
		if (ch == '\0')
			return "contains NUL";
		if (ch == '+' || ch == '#')
			return "contains an MQTT wildcard ('+' or '#')";
		if (ch == '/')
			return "contains '/'";
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
		    || ch == '-' || ch == '_' || ch == '.' || ch == ':';
		if (!ok)
			return "may contain only letters, digits, '-', '_', '.' and ':'";
	}
	return NULL;
}

static int hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode one path segment (n bytes) into out (GATE_NAME_MAX + 1 bytes, NUL-terminated).
 * *out_len counts decoded NULs too, and is GATE_NAME_MAX + 1 for anything longer than the
 * limit. Returns false on a malformed escape. */
static bool decode_segment(const char *s, size_t n, char *out, size_t *out_len)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (ch == '%') {
			if (i + 2 >= n)
				return false;
			int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
			if (hi < 0 || lo < 0)
				return false;
			ch = (char)(hi * 16 + lo);
			i += 2;
		}
		if (k == GATE_NAME_MAX) { /* too long: the name check says so */
			k = GATE_NAME_MAX + 1;
			break;
		}
		out[k++] = ch;
	}
	out[k <= GATE_NAME_MAX ? k : GATE_NAME_MAX] = '\0';
	*out_len = k;
	return true;
}

/* The path's segments between '/' (at most max of them); returns their count or -1. */
static int split(const char *path, const char *seg[], size_t len[], int max)
{
	if (path[0] != '/')
		return -1;
	int n = 0;
	const char *p = path + 1;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t l = slash ? (size_t)(slash - p) : strlen(p);
		if (n == max)
			return -1;
		seg[n] = p;
		len[n] = l;
		n++;
		if (!slash)
			return n;
		p = slash + 1;
	}
}

static bool seg_is(const char *seg, size_t len, const char *word)
{
	return len == strlen(word) && memcmp(seg, word, len) == 0;
}

static int name_field(
    const char *what, const char *seg, size_t n, char *out, char *why, size_t why_len)
{
	size_t len = 0;
	if (!decode_segment(seg, n, out, &len)) {
		snprintf(why, why_len, "%s has a malformed %%-escape", what);
		return 400;
	}
	const char *problem = gate_name_problem(out, len);
	if (problem) {
		snprintf(why, why_len, "%s %s", what, problem);
		return 400;
	}
	return 0;
}

int gate_route_parse(
    const char *method, const char *path, struct gate_route *out, char *why, size_t why_len)
{
	*out = (struct gate_route) { 0 };
	const char *seg[6];
	size_t len[6];
	int n = split(path, seg, len, 6);
	bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
	if (n == 1 && (seg_is(seg[0], len[0], "healthz") || seg_is(seg[0], len[0], "metrics"))) {
		if (!get) {
			snprintf(why, why_len, "use GET");
			return 405;
		}
		out->kind = seg_is(seg[0], len[0], "healthz") ? GATE_HEALTH : GATE_METRICS;
		return 0;
	}
	int base = n == 5 && seg_is(seg[0], len[0], "naive") ? 1 : 0;
	if (n != 4 + base || !seg_is(seg[base], len[base], "devices")
	    || !seg_is(seg[base + 2], len[base + 2], "commands")) {
		snprintf(why, why_len,
		    "no such route: use POST /devices/{id}/commands/{name} (pooled) or POST "
		    "/naive/devices/{id}/commands/{name} (a connection per request)");
		return 404;
	}
	if (strcmp(method, "POST") != 0) {
		snprintf(why, why_len, "use POST");
		return 405;
	}
	out->kind = GATE_COMMAND;
	out->backend = base ? GATE_NAIVE : GATE_POOL;
	int st = name_field("device id", seg[base + 1], len[base + 1], out->device, why, why_len);
	if (st == 0)
		st = name_field("command name", seg[base + 3], len[base + 3], out->command, why, why_len);
	return st;
}

/* --- errors -------------------------------------------------------------------------------- */

int gate_http_status(int err)
{
	switch (err) {
		case MQP_OK:
			return 200;
		case MQP_ETIMEDOUT:
			return 504; /* the device did not answer in time */
		case MQP_EDENIED:
			return 403; /* the broker's ACL does not let the gateway send this command */
		case MQP_ECONNECT:
		case MQP_ECONNLOST:
		case MQP_ETLS:
		case MQP_EREFUSED:
			return 502; /* the broker is unreachable, or refuses the gateway */
		case MQP_ECLOSED:
		case MQP_EEXHAUSTED:
		case MQP_ENORESPONDER:
			return 503; /* shutting down, every pooled connection stayed busy, or no device
			               listens for the command */
		case MQP_EINVAL:
		case MQP_ETOOBIG:
			return 400;
		case GATE_ENOTSUPPORTED:
			return 501;
		default:
			return 500;
	}
}

const char *gate_error_code(int err)
{
	switch (err) {
		case MQP_ETIMEDOUT:
			return "device_timeout";
		case MQP_ECONNECT:
			return "broker_unreachable";
		case MQP_EREFUSED:
			return "broker_refused"; /* credentials, authorization, protocol version */
		case MQP_ECONNLOST:
			return "broker_connection_lost";
		case MQP_EDENIED:
			return "forbidden";
		case MQP_ETLS:
			return "broker_tls";
		case MQP_ECLOSED:
			return "shutting_down";
		case MQP_EEXHAUSTED:
			return "pool_exhausted";
		case MQP_ENORESPONDER:
			return "no_responder";
		case MQP_EINVAL:
		case MQP_ETOOBIG:
			return "bad_request";
		case GATE_ENOTSUPPORTED:
			return "not_supported";
		default:
			return "internal";
	}
}

/* --- JSON ---------------------------------------------------------------------------------- */

/* Exactly one JSON value in text[0..len) (whitespace around it allowed), or NULL. */
static cJSON *parse_exact(const char *text, size_t len)
{
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (!j)
		return NULL;
	while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n'))
		end++;
	if (end != text + len) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

/* Whether a JSON text holds the escape \u0000 in a string: cJSON would cut the string there. */
static bool json_has_nul_escape(const char *text, size_t len)
{
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		if (text[i] == '"')
			in_string = !in_string;
		else if (in_string && text[i] == '\\') {
			if (i + 5 < len && memcmp(text + i + 1, "u0000", 5) == 0)
				return true;
			i++; /* the escaped character */
		}
	}
	return false;
}

bool gate_body_ok(const char *body, size_t len)
{
	if (len == 0)
		return true;
	if (!mqc_utf8_valid(body, len) || json_has_nul_escape(body, len))
		return false;
	cJSON *j = parse_exact(body, len);
	bool ok = j != NULL;
	cJSON_Delete(j);
	return ok;
}

/* Base64 (RFC 4648) of len bytes, NUL-terminated; malloc'd or NULL. */
static char *base64(const unsigned char *in, size_t len)
{
	static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0)
		    | (i + 2 < len ? in[i + 2] : 0);
		*o++ = digits[v >> 18 & 63];
		*o++ = digits[v >> 12 & 63];
		*o++ = (char)(i + 1 < len ? digits[v >> 6 & 63] : '=');
		*o++ = (char)(i + 2 < len ? digits[v & 63] : '=');
	}
	*o = '\0';
	return out;
}

char *gate_reply_json(
    const struct gate_route *route, const void *payload, size_t len, uint64_t latency_ns)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "device", route->device);
	cJSON_AddStringToObject(o, "command", route->command);
	cJSON_AddStringToObject(o, "route", route->backend == GATE_POOL ? "pool" : "naive");
	cJSON_AddNumberToObject(o, "latency_ms", (double)latency_ns / 1e6);
	/* The answer is always valid UTF-8 JSON: text that is not is carried as base64. */
	const char *key = "reply";
	cJSON *reply = NULL;
	if (!mqc_utf8_valid(payload, len)) {
		char *b64 = base64(payload, len);
		reply = b64 ? cJSON_CreateString(b64) : NULL;
		free(b64);
		key = "reply_base64";
	} else {
		if (len && !json_has_nul_escape(payload, len))
			reply = parse_exact(payload, len);
		if (!reply) { /* not JSON: the payload as a string (exactly len bytes: no NUL inside) */
			char *copy = malloc(len + 1);
			if (copy) {
				memcpy(copy, payload, len);
				copy[len] = '\0';
				reply = cJSON_CreateString(copy);
				free(copy);
			}
		}
	}
	if (!reply || !cJSON_AddItemToObject(o, key, reply)) {
		cJSON_Delete(reply);
		cJSON_Delete(o);
		return NULL;
	}
	char *text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

char *gate_error_json(const char *code, const char *message)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "error", code);
	cJSON_AddStringToObject(o, "message", message);
	char *text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

/* --- metrics ------------------------------------------------------------------------------- */

/* Every status the gateway answers (main.c's --help lists them), then "other": one series each. */
static const int status_slots[] = { 200, 400, 403, 404, 405, 413, 500, 501, 502, 503, 504, 0 };
_Static_assert(sizeof status_slots / sizeof status_slots[0] == GATE_STATUS_SLOTS,
    "one counter slot per status");

void gate_count(struct gate_counters *c, enum gate_backend b, int status)
{
	int slot = GATE_STATUS_SLOTS - 1;
	for (int i = 0; i < GATE_STATUS_SLOTS - 1; i++)
		if (status_slots[i] == status)
			slot = i;
	atomic_fetch_add(&c->responses[b][slot], 1);
}

/* Upper bounds of the duration buckets, in seconds: 0.5 ms (a pooled command on a LAN) to 10 s
 * (past every timeout the gateway allows by default). */
static const double duration_bounds[GATE_DURATION_BUCKETS]
    = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };

void gate_observe_duration(struct gate_counters *c, enum gate_backend b, uint64_t ns)
{
	size_t i = 0;
	while (i < GATE_DURATION_BUCKETS && (double)ns > duration_bounds[i] * 1e9)
		i++;
	atomic_fetch_add(&c->duration_buckets[b][i], 1); /* i == GATE_DURATION_BUCKETS: +Inf */
	atomic_fetch_add(&c->duration_ns_sum[b], ns);
}

/* a += b: the pools' gauges and counters add up. */
static void add_stats(struct mqp_pool_stats *a, const struct mqp_pool_stats *b)
{
	a->size += b->size;
	a->ready += b->ready;
	a->available += b->available;
	a->connecting += b->connecting;
	a->inflight += b->inflight;
	a->queued += b->queued;
	a->leased += b->leased;
	a->requests += b->requests;
	a->replies += b->replies;
	a->late_replies += b->late_replies;
	a->strays += b->strays;
	a->duplicates += b->duplicates;
	a->timeouts += b->timeouts;
	a->publishes += b->publishes;
	a->acquires += b->acquires;
	a->acquire_timeouts += b->acquire_timeouts;
	a->releases += b->releases;
	a->double_releases += b->double_releases;
	a->stale_dropped += b->stale_dropped;
	a->waits += b->waits;
	a->cancels += b->cancels;
	a->closes_idle += b->closes_idle;
	a->closes_lifetime += b->closes_lifetime;
	a->leaks += b->leaks;
	a->connects_ok += b->connects_ok;
	a->connects_failed += b->connects_failed;
	a->connections_lost += b->connections_lost;
}

/* Per broker node (--broker a:1883,b:1883), summed over the workers' pools: an alert on
 * mqttpool_node_up == 0 says which node is down. */
static void node_metrics(FILE *f, mqp_pool *const *pools, size_t n)
{
	mqp_pool *first = NULL;
	for (size_t i = 0; i < n && !first; i++)
		first = pools[i];
	unsigned nodes = mqp_pool_node_stats(first, 0, NULL, 0);
	struct {
		const char *name, *type, *help;
	} rows[] = {
		{ "mqttpool_node_up", "gauge",
		    "1 unless the node's last connect failed or it sent the pool elsewhere." },
		{ "mqttpool_node_connections", "gauge", "Connections open or opening on the node." },
		{ "mqttpool_node_requests_total", "counter", "Requests sent on the node's connections." },
		{ "mqttpool_node_connect_failures_total", "counter", "Connects to the node that failed." },
		{ "mqttpool_node_connections_lost_total", "counter", "Connections the node dropped." },
		{ "mqttpool_node_unresponsive", "gauge",
		    "1 while a connection there went silent (no PINGRESP within ping_timeout_ms) and no "
		    "new connection has answered since." },
		{ "mqttpool_node_unresponsive_since_seconds", "gauge",
		    "Unix time the node became unresponsive (the earliest of the workers' pools); 0 when "
		    "it is not." },
		{ "mqttpool_node_unresponsive_total", "counter",
		    "Connections to the node that went silent and were closed." },
	};
	for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", rows[r].name, rows[r].help, rows[r].name,
		    rows[r].type);
		for (unsigned k = 0; k < nodes; k++) {
			struct mqp_node_stats sum = { 0 }, one;
			bool up = true;
			for (size_t i = 0; i < n; i++) {
				if (!pools[i] || mqp_pool_node_stats(pools[i], k, &one, sizeof one) <= k)
					continue;
				memcpy(sum.where, one.where, sizeof sum.where);
				up &= !one.failing;
				sum.connections += one.connections;
				sum.requests += one.requests;
				sum.connects_failed += one.connects_failed;
				sum.connections_lost += one.connections_lost;
				sum.suspect |= one.suspect;
				if (one.unresponsive_since_ms
				    && (!sum.unresponsive_since_ms
				        || one.unresponsive_since_ms < sum.unresponsive_since_ms))
					sum.unresponsive_since_ms = one.unresponsive_since_ms;
				sum.unresponsive += one.unresponsive;
			}
			unsigned long long v[]
			    = { up, sum.connections, sum.requests, sum.connects_failed, sum.connections_lost,
				      sum.suspect, sum.unresponsive_since_ms / 1000, sum.unresponsive };
			fprintf(f, "%s{node=\"%s\"} %llu\n", rows[r].name, sum.where, v[r]);
		}
	}
}

char *gate_metrics_text(const struct gate_counters *c, mqp_pool *const *pools, size_t n)
{
	char *text = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&text, &size);
	if (!f)
		return NULL;
	static const char *const route_names[GATE_BACKENDS] = { "pool", "naive" };
	fprintf(f,
	    "# HELP gate_api_responses_total Command responses by route and HTTP status.\n"
	    "# TYPE gate_api_responses_total counter\n");
	for (int b = 0; b < GATE_BACKENDS; b++)
		for (int i = 0; i < GATE_STATUS_SLOTS; i++) {
			uint64_t v = atomic_load(&c->responses[b][i]);
			if (status_slots[i])
				fprintf(f, "gate_api_responses_total{route=\"%s\",status=\"%d\"} %llu\n",
				    route_names[b], status_slots[i], (unsigned long long)v);
			else
				fprintf(f, "gate_api_responses_total{route=\"%s\",status=\"other\"} %llu\n",
				    route_names[b], (unsigned long long)v);
		}
	fprintf(f,
	    "# HELP gate_api_command_duration_seconds How long successful commands took, from the "
	    "gateway's call into the pool (or the naive client) to the device's reply.\n"
	    "# TYPE gate_api_command_duration_seconds histogram\n");
	for (int b = 0; b < GATE_BACKENDS; b++) {
		uint64_t cumulative = 0;
		for (size_t i = 0; i <= GATE_DURATION_BUCKETS; i++) {
			cumulative += atomic_load(&c->duration_buckets[b][i]);
			if (i < GATE_DURATION_BUCKETS)
				fprintf(f,
				    "gate_api_command_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
				    route_names[b], duration_bounds[i], (unsigned long long)cumulative);
			else
				fprintf(f,
				    "gate_api_command_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
				    route_names[b], (unsigned long long)cumulative);
		}
		fprintf(f, "gate_api_command_duration_seconds_sum{route=\"%s\"} %.9f\n", route_names[b],
		    (double)atomic_load(&c->duration_ns_sum[b]) / 1e9);
		fprintf(f, "gate_api_command_duration_seconds_count{route=\"%s\"} %llu\n", route_names[b],
		    (unsigned long long)cumulative);
	}
	fprintf(f,
	    "# HELP gate_api_abandoned_total Commands whose HTTP client went away before the answer "
	    "(the MQTT request was cancelled).\n# TYPE gate_api_abandoned_total counter\n");
	for (int b = 0; b < GATE_BACKENDS; b++)
		fprintf(f, "gate_api_abandoned_total{route=\"%s\"} %llu\n", route_names[b],
		    (unsigned long long)atomic_load(&c->abandoned[b]));
	fprintf(f,
	    "# HELP gate_api_pending Commands being served now.\n# TYPE gate_api_pending gauge\n"
	    "gate_api_pending %u\n",
	    atomic_load(&c->pending));
	struct mqp_pool_stats s = { 0 };
	size_t pools_seen = 0;
	for (size_t i = 0; i < n; i++) {
		if (!pools[i])
			continue;
		struct mqp_pool_stats one;
		mqp_pool_stats(pools[i], &one, sizeof one);
		add_stats(&s, &one);
		pools_seen++;
	}
	if (pools_seen) {
		struct {
			const char *name, *type, *help;
			unsigned long long v;
		} rows[] = {
			{ "mqttpool_connections", "gauge", "Connections open or opening.", s.size },
			{ "mqttpool_connections_ready", "gauge", "Connections ready for requests.", s.ready },
			{ "mqttpool_connections_available", "gauge",
			    "Ready connections with nothing in flight.", s.available },
			{ "mqttpool_inflight", "gauge", "Requests on a connection awaiting completion.",
			    s.inflight },
			{ "mqttpool_queued", "gauge", "Calls waiting for a connection.", s.queued },
			{ "mqttpool_leased", "gauge", "Connections borrowed.", s.leased },
			{ "mqttpool_requests_total", "counter", "Requests published.", s.requests },
			{ "mqttpool_replies_total", "counter", "Replies delivered.", s.replies },
			{ "mqttpool_timeouts_total", "counter", "Calls that timed out.", s.timeouts },
			{ "mqttpool_late_replies_total", "counter", "Replies after their caller gave up.",
			    s.late_replies },
			{ "mqttpool_strays_total", "counter", "Messages in an inbox no request had.",
			    s.strays },
			{ "mqttpool_waits_total", "counter", "Calls that queued for a connection.", s.waits },
			{ "mqttpool_cancels_total", "counter",
			    "Requests cancelled (their HTTP client went away).", s.cancels },
			{ "mqttpool_connects_total", "counter", "Connections made.", s.connects_ok },
			{ "mqttpool_connect_failures_total", "counter", "Connection attempts that failed.",
			    s.connects_failed },
			{ "mqttpool_connections_lost_total", "counter", "Connections the broker dropped.",
			    s.connections_lost },
		};
		for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
			fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", rows[i].name, rows[i].help,
			    rows[i].name, rows[i].type, rows[i].name, rows[i].v);
		node_metrics(f, pools, n);
	}
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
