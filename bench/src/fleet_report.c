/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_report.c - what a fleet run says: failures by reason (text and JSON), CONNACK refusals
 * in words, why CONNECTs were closed (asked once, after the run), and the exit status.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_codec.h"

const char *const fleet_reason_names[R_COUNT] = { "refused", "timeout", "connack", "emfile",
	"eaddrnotavail", "tls", "dropped", "closed_before_connack", "suback", "websocket", "other" };

uint64_t fleet_storm_failures(const struct rstorm *st)
{
	uint64_t n = 0;
	for (int k = 0; k < R_COUNT; k++)
		n += st->fails[k];
	return n;
}

void fleet_add_reasons(cJSON *obj, const uint64_t *reasons)
{
	for (int i = 0; i < R_COUNT; i++)
		cJSON_AddNumberToObject(obj, fleet_reason_names[i], (double)reasons[i]);
}

void fleet_print_reasons(FILE *out, const uint64_t *reasons)
{
	for (int i = 0; i < R_COUNT; i++)
		if (reasons[i])
			fprintf(out, " %s %llu", fleet_reason_names[i], (unsigned long long)reasons[i]);
}

void fleet_connack_failures_text(const struct fleet *r)
{
	bool v311 = r->o->net.conn.protocol != 5;
	for (int c = 1; c < 256; c++)
		if (r->connack_codes[c])
			printf(v311 ? " (CONNACK return code %d, %s: %llu)"
			            : " (CONNACK reason code 0x%02X, %s: %llu)",
			    c, mqc_connack_text((unsigned)c, v311), (unsigned long long)r->connack_codes[c]);
	for (int c = 1; c < 256; c++)
		if (r->connack311_codes[c])
			printf(" (a 3.1.1 CONNACK, return code %d, %s: %llu)", c,
			    mqc_connack_text((unsigned)c, true), (unsigned long long)r->connack311_codes[c]);
}

void fleet_print_failures(const struct fleet *r)
{
	if (!r->failed)
		return;
	printf("failures:");
	fleet_print_reasons(stdout, r->reasons);
	fleet_connack_failures_text(r);
	printf("\n");
}

void fleet_add_timeline(cJSON *root, const struct fleet *r, uint64_t until_ns)
{
	cJSON *t = cJSON_AddArrayToObject(root, "timeline");
	for (size_t i = 0; i < r->nseconds && i * MQC_NS_PER_S < until_ns; i++) {
		const struct second *sec = &r->seconds[i];
		cJSON *s = cJSON_CreateObject();
		cJSON_AddNumberToObject(s, "t", (double)i);
		cJSON_AddNumberToObject(s, "connected", sec->ok);
		cJSON_AddNumberToObject(
		    s, "connack_mean_ns", sec->ok ? (double)sec->latency_sum / sec->ok : 0);
		cJSON_AddNumberToObject(s, "connack_max_ns", (double)sec->latency_max);
		cJSON_AddNumberToObject(s, "failed", sec->failed);
		for (int k = 0; k < R_COUNT; k++)
			if (sec->fails[k])
				cJSON_AddNumberToObject(s, fleet_reason_names[k], sec->fails[k]);
		cJSON_AddItemToArray(t, s);
	}
}

void fleet_add_connack_refusals(cJSON *root, const struct fleet *r)
{
	cJSON *refusals = cJSON_AddObjectToObject(root, "connack_refusals");
	for (int code = 1; code < 256; code++)
		if (r->connack_codes[code]) {
			char key[8];
			snprintf(key, sizeof key, "%d", code);
			cJSON *one = cJSON_AddObjectToObject(refusals, key);
			cJSON_AddStringToObject(
			    one, "reason", mqc_connack_text((unsigned)code, r->o->net.conn.protocol != 5));
			cJSON_AddNumberToObject(one, "count", (double)r->connack_codes[code]);
		}
}

/* Closed before CONNACK, or a 3.1.1 answer to a v5 CONNECT: find out which, once, while the held
 * connections still hold what they hold (a broker at its connection limit is still at it). */
void fleet_explain(const struct fleet *r, char *why, size_t len)
{
	why[0] = '\0';
	bool v311_answer = false;
	for (int c = 1; c < 256; c++)
		v311_answer |= r->connack311_codes[c] > 0;
	char sent[160];
	char v5[80] = "";
	if (r->o->net.conn.protocol == 5)
		snprintf(
		    v5, sizeof v5, ", Maximum Packet Size %u, Topic Alias Maximum 0", (unsigned)RX_CAP);
	snprintf(sent, sizeof sent, "mqbench's: clean start, Keep Alive %u s%s",
	    (unsigned)r->o->keepalive_s, v5);
	if (r->reasons[R_CLOSED] || v311_answer)
		mqc_client_explain_connect_failure(&r->o->net.conn, r->o->net.conn.protocol,
		    v311_answer ? 0x84 : -1, "--protocol 3.1.1", sent, why, len);
	else if (r->reasons[R_TLS] && r->tls_why[0])
		snprintf(why, len, "the first TLS failure: %s", r->tls_why);
	else if (r->reasons[R_WS] && r->ws_why[0])
		snprintf(why, len, "the first WebSocket failure: %s", r->ws_why);
}

int fleet_finish_status(const struct fleet *r, const char *why, uint64_t scheduled)
{
	int rc = 0;
	if (fleet_interrupted) {
		fprintf(stderr, "mqbench: interrupted\n");
		rc = 1;
	} else if (r->failed) {
		fprintf(stderr, "mqbench: %llu of %llu connections failed:", (unsigned long long)r->failed,
		    (unsigned long long)scheduled);
		fleet_print_reasons(stderr, r->reasons);
		fprintf(stderr, "\n");
		if (why[0])
			fprintf(stderr, "mqbench: %s\n", why);
		rc = 1;
	}
	for (unsigned i = 0; i < r->nstorms; i++)
		if (!r->storms[i]->over) {
			fprintf(stderr,
			    "mqbench: storm %u: %u of %u connections not back by the end of the run\n", i + 1,
			    r->storms[i]->lost - r->storms[i]->back, r->storms[i]->lost);
			rc = 1;
		}
	return rc;
}

void fleet_add_probe_json(cJSON *root, const struct probe_sample *p0, const struct probe_sample *p1)
{
	cJSON *pr = cJSON_AddObjectToObject(root, "probe");
	if (p1->has_connects)
		cJSON_AddNumberToObject(pr, "connects", p1->connects - p0->connects);
	cJSON_AddNumberToObject(pr, "disconnects", p1->disconnects - p0->disconnects);
}
