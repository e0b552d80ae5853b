/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * churn.c - the churn scenario: connect, optionally publish or subscribe once, disconnect, at a
 * fixed rate on the open-loop schedule (fleet.c), with failures by reason per second and
 * mqbench's own descriptors and memory before, after warm-up and at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "churn.h"
#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_codec.h"

/* What a cycle's attempt awaits (attempt.step). */
enum { AWAIT_NOTHING, AWAIT_SUBACK };

uint64_t bench_churn_time_wait(double rate, uint64_t duration_ns)
{
	double seconds = (double)duration_ns / 1e9;
	return (uint64_t)(rate * (seconds < 60 ? seconds : 60));
}

/* After CONNACK in churn: publish once, subscribe once, or nothing; then leave. */
static void churn_connected(struct fleet *r, struct attempt *a, uint64_t now)
{
	const struct bench_opts *o = r->o;
	const struct churn *c = r->scenario;
	int protocol = o->net.conn.protocol;
	if (o->churn_action == BENCH_CHURN_NONE) {
		fleet_leave(r, a, now);
		return;
	}
	r->out.off = r->out.len = 0;
	if (o->churn_action == BENCH_CHURN_PUBLISH) {
		/* QoS 0, --size bytes (at most 64 KiB: bench_parse says so), written at once */
		void *payload = malloc(o->size ? o->size : 1);
		if (payload)
			memset(payload, 'x', o->size);
		bool sent = payload
		    && mqc_enc_publish(&r->out, protocol, c->topic, 0, false, 0, NULL, payload, o->size)
		        == MQC_ENC_OK
		    && fleet_send_out(r, a, &r->out) == 0;
		free(payload);
		if (!sent) {
			fleet_failed(r, a, R_OTHER);
			return;
		}
		fleet_leave(r, a, now);
		return;
	}
	if (mqc_enc_subscribe(&r->out, protocol, 1, c->topic, 0, 0, 0) != MQC_ENC_OK
	    || fleet_send_out(r, a, &r->out) != 0) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	a->step = AWAIT_SUBACK;
	fleet_await(r, a);
}

/* The SUBACK of --action subscribe: packet id 1, (v5 properties), a reason code per filter of
 * the SUBSCRIBE - ours, the one filter, is the first. */
static void churn_packet(
    struct fleet *r, struct attempt *a, const struct mqc_packet *pk, uint64_t now)
{
	struct mqc_suback s;
	if (a->step != AWAIT_SUBACK || pk->type != MQC_SUBACK
	    || mqc_dec_suback(pk, r->o->net.conn.protocol, &s) || s.mid != 1 || s.count < 1) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	a->step = AWAIT_NOTHING;
	if (s.codes[0] >= 0x80) {
		fleet_failed(r, a, R_SUBACK);
		return;
	}
	fleet_answered(r, a, pk);
	fleet_leave(r, a, now);
}

const struct fleet_ops bench_churn_ops = { .connected = churn_connected, .packet = churn_packet };

int bench_churn_plan(const struct bench_opts *o, struct fleet *r, struct churn *c)
{
	r->ops = &bench_churn_ops;
	r->scenario = c;
	r->plan = (struct fleet_plan) { .rate = o->rate,
		.slots = o->concurrency,
		.time_wait = bench_churn_time_wait(o->rate / o->shards, o->duration_ns),
		.reuse_slots = true };
	if (asprintf(&c->topic, "%s/%s/churn", o->prefix, o->token) < 0) {
		c->topic = NULL;
		fprintf(stderr, "mqbench: out of memory\n");
		return -1;
	}
	return 0;
}

/* --- churn
 * ------------------------------------------------------------------------------------------ */

int bench_run_churn(const struct bench_opts *o)
{
	struct fleet r = { .o = o, .ep = -1 };
	struct churn state = { 0 };
	struct probe_sample p0, p1;
	struct broker_usage usage;
	if (bench_churn_plan(o, &r, &state) != 0 || fleet_begin(&r, &p0, &usage) != 0) {
		free(state.topic);
		return 1;
	}
	double interval = 1e9 / r.rate;
	uint64_t scheduled = (uint64_t)((double)o->duration_ns / interval);
	uint64_t next = 0, late = 0, next_tick = r.t0 + MQC_NS_PER_S;
	unsigned self_fds0, self_fds1, ignored;
	double self_rss0 = -1, self_rss1;
	fleet_self_usage(&self_fds0, &self_rss1); /* descriptors before the first connection */
	fleet_start_sampling(&r, &usage, 200 * MQC_NS_PER_MS); /* its reads' descriptors come and go */
	uint64_t end = r.t0 + o->duration_ns;
	unsigned free_hint = 0;
	while (!fleet_interrupted && (next < scheduled || r.in_progress)) {
		uint64_t now = mqc_now_ns();
		if (now > end + o->connect_timeout_ns + MQC_NS_PER_S)
			break; /* every attempt has a deadline before this: a bug if reached */
		while (next < scheduled && r.t0 + (uint64_t)((double)next * interval) <= now
		    && r.in_progress < o->concurrency) {
			struct attempt *a = NULL;
			for (unsigned i = 0; i < r.nslots && !a; i++) {
				unsigned j = (free_hint + i) % r.nslots;
				if (r.a[j].state == ST_WAITING)
					a = &r.a[j], free_hint = j + 1;
			}
			if (!a)
				break;
			a->k = r.first + next % r.count;
			a->intended = r.t0 + (uint64_t)((double)next * interval);
			if (now - a->intended > MQC_NS_PER_MS)
				late++;
			next++;
			fleet_start(&r, a);
		}
		if (now >= next_tick) {
			size_t i = (size_t)((next_tick - r.t0) / MQC_NS_PER_S) - 1;
			struct second *s = i < r.nseconds ? &r.seconds[i] : &(struct second) { 0 };
			fprintf(stderr, "%6.1fs  connected %u/s failed %u/s", (double)(now - r.t0) / 1e9, s->ok,
			    s->failed);
			for (int k = 0; k < R_COUNT; k++)
				if (s->fails[k])
					fprintf(stderr, " %s %u", fleet_reason_names[k], s->fails[k]);
			char mean[24], max[24];
			fprintf(stderr, " | connack mean %s max %s | in progress %u\n",
			    bench_fmt_ns(s->ok ? s->latency_sum / s->ok : 0, mean, sizeof mean),
			    bench_fmt_ns(s->latency_max, max, sizeof max), r.in_progress);
			if (self_rss0 < 0 && next_tick >= r.t0 + 2 * MQC_NS_PER_S)
				fleet_self_usage(
				    &ignored, &self_rss0); /* warmed up: the slots and buffers are in use */
			next_tick += MQC_NS_PER_S;
		}
		uint64_t wake = now + 10 * MQC_NS_PER_MS;
		if (next < scheduled && r.in_progress < o->concurrency) {
			uint64_t t = r.t0 + (uint64_t)((double)next * interval);
			if (t < wake)
				wake = t;
		}
		fleet_turn(&r, wake);
	}
	fleet_stop_sampling(&r);
	fleet_self_usage(&self_fds1, &self_rss1);
	if (self_rss0 < 0)
		self_rss0 = self_rss1;
	char why[768];
	fleet_explain(&r, why, sizeof why);
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL);
	bench_probe_read(o->metrics_url, &p1);
	double secs = (double)o->duration_ns / 1e9;
	double broker_cpu = usage.ok && !usage.restarted ? usage.cpu_last - usage.cpu0 : -1;
	if (o->json) {
		cJSON *root = bench_result_new(o);
		cJSON *c = cJSON_AddObjectToObject(root, "counts");
		cJSON_AddNumberToObject(c, "scheduled", (double)scheduled);
		cJSON_AddNumberToObject(c, "started", (double)next);
		cJSON_AddNumberToObject(c, "connected", (double)r.held);
		cJSON_AddNumberToObject(c, "cycles", (double)r.cycles);
		cJSON_AddNumberToObject(c, "failed", (double)r.failed);
		cJSON_AddNumberToObject(c, "late", (double)late);
		fleet_add_reasons(c, r.reasons);
		fleet_add_connack_refusals(root, &r);
		cJSON_AddNumberToObject(root, "elapsed_ns", (double)o->duration_ns);
		cJSON *l = cJSON_AddObjectToObject(root, "latency");
		cJSON_AddItemToObject(l, "tcp_connect", bench_latency_json(&r.tcp));
		cJSON_AddItemToObject(l, "connack", bench_latency_json(&r.connack));
		cJSON_AddItemToObject(l, "cycle", bench_latency_json(&r.cycle));
		if (r.ctx) {
			cJSON_AddItemToObject(l, "tls_full", bench_latency_json(&r.tls_full));
			cJSON_AddItemToObject(l, "tls_resumed", bench_latency_json(&r.tls_resumed));
		}
		fleet_add_tls_json(root, &r);
		fleet_add_timeline(root, &r, o->duration_ns + o->connect_timeout_ns);
		cJSON *self = cJSON_AddObjectToObject(root, "mqbench_usage");
		cJSON_AddNumberToObject(self, "fds_before", self_fds0);
		cJSON_AddNumberToObject(self, "fds_at_end", self_fds1);
		cJSON_AddNumberToObject(self, "rss_after_warmup_bytes", self_rss0);
		cJSON_AddNumberToObject(self, "rss_at_end_bytes", self_rss1);
		cJSON *u = cJSON_AddObjectToObject(root, "broker_usage");
		cJSON_AddNumberToObject(u, "cpu_mean_pct", broker_cpu >= 0 ? broker_cpu / secs * 100 : -1);
		cJSON_AddNumberToObject(u, "cpu_peak_pct", usage.peak_pct);
		cJSON_AddNumberToObject(u, "cpu_us_per_cycle",
		    broker_cpu >= 0 && r.held ? broker_cpu * 1e6 / (double)r.held : -1);
		if (p0.ok && p1.ok)
			fleet_add_probe_json(root, &p0, &p1);
		bench_result_print(root);
	} else {
		printf("churn %.0f/s for %.1fs (connect, %s, disconnect; concurrency %u) against %s\n",
		    r.rate, secs, bench_churn_actions[o->churn_action], o->concurrency, o->net.broker);
		printf("cycles %llu of %llu scheduled   connected %llu   failed %llu   late starts %llu\n",
		    (unsigned long long)r.cycles, (unsigned long long)scheduled, (unsigned long long)r.held,
		    (unsigned long long)r.failed, (unsigned long long)late);
		bench_print_latency(stdout, "connack (from the scheduled time):", &r.connack);
		bench_print_latency(stdout, "cycle   (scheduled -> DISCONNECT):", &r.cycle);
		fleet_print_tls(&r);
		fleet_print_failures(&r);
		printf("mqbench itself: descriptors %u before -> %u at the end, VmRSS %.1f MB after 2 s "
		       "-> %.1f MB at the end\n",
		    self_fds0, self_fds1, self_rss0 / 1e6, self_rss1 / 1e6);
		if (broker_cpu >= 0)
			printf("broker: cpu mean %.0f%% peak %.0f%% of one core, %.0fus CPU per cycle\n",
			    broker_cpu / secs * 100, usage.peak_pct,
			    r.held ? broker_cpu * 1e6 / (double)r.held : 0);
		if (p0.ok && p1.ok && p1.has_connects)
			printf("broker (probe): connects +%.0f   disconnects +%.0f\n",
			    p1.connects - p0.connects, p1.disconnects - p0.disconnects);
	}
	int rc = fleet_finish_status(&r, why, scheduled);
	if (!rc && next < scheduled) {
		fprintf(stderr, "mqbench: %llu of %llu cycles never started\n",
		    (unsigned long long)(scheduled - next), (unsigned long long)scheduled);
		rc = 1;
	}
	fleet_free(&r);
	free(state.topic);
	return rc;
}
