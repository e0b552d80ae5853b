/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * connect.c - the connect scenario: N connections opened on a schedule (fleet.c), held, then
 * closed; with --reconnect, held through whatever drops them, each reconnect storm reported: how
 * many were lost, how long until the last one was back, reconnect latency from each loss, attempts
 * and failures by reason, and what the broker's probe saw.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_codec.h"

/* What the probe saw of a storm, read at its end: whether the broker restarted (its start time
 * moved) and the connects since the run began, or since the broker started. false: not read. */
static bool storm_probe(
    const struct rstorm *st, const struct probe_sample *before, bool *restarted, double *connects)
{
	if (!st->over || !st->probe.ok || !st->probe.has_connects)
		return false;
	*restarted = !before->ok || st->probe.start_time != before->start_time;
	*connects = *restarted ? st->probe.connects : st->probe.connects - before->connects;
	return true;
}

static void storms_json(cJSON *root, const struct fleet *r, const struct probe_sample *before)
{
	cJSON *arr = cJSON_AddArrayToObject(root, "storms");
	for (unsigned i = 0; i < r->nstorms; i++) {
		const struct rstorm *st = r->storms[i];
		cJSON *s = cJSON_CreateObject();
		cJSON_AddNumberToObject(s, "lost", st->lost);
		cJSON_AddNumberToObject(s, "reconnected", st->back);
		cJSON_AddNumberToObject(s, "lost_again", st->relost);
		cJSON_AddNumberToObject(s, "attempts", (double)st->attempts);
		cJSON_AddNumberToObject(
		    s, "elapsed_ns", st->over ? (double)(st->last_back - st->first_loss) : -1);
		fleet_add_reasons(cJSON_AddObjectToObject(s, "failures"), st->fails);
		cJSON_AddItemToObject(s, "latency", bench_latency_json(&st->latency));
		bool restarted;
		double connects;
		if (storm_probe(st, before, &restarted, &connects)) {
			cJSON *p = cJSON_AddObjectToObject(s, "probe");
			cJSON_AddBoolToObject(p, "broker_restarted", restarted);
			cJSON_AddNumberToObject(p, "connects", connects);
		}
		cJSON_AddItemToArray(arr, s);
	}
}

static void storms_text(const struct fleet *r, const struct probe_sample *before)
{
	for (unsigned i = 0; i < r->nstorms; i++) {
		const struct rstorm *st = r->storms[i];
		char took[24], label[64];
		if (st->over)
			printf("storm %u: lost %u, reconnected %u of %u in %s (until the last one was back)\n",
			    i + 1, st->lost, st->back, st->lost,
			    bench_fmt_ns(st->last_back - st->first_loss, took, sizeof took));
		else
			printf("storm %u: lost %u, reconnected %u of %u, NOT OVER at the end of the run\n",
			    i + 1, st->lost, st->back, st->lost);
		snprintf(label, sizeof label, "  reconnect (from each loss):");
		bench_print_latency(stdout, label, &st->latency);
		uint64_t fails = fleet_storm_failures(st);
		printf("  attempts %llu   failed %llu", (unsigned long long)st->attempts,
		    (unsigned long long)fails);
		if (fails) {
			printf(":");
			fleet_print_reasons(stdout, st->fails);
		}
		if (st->relost)
			printf("   lost again while the storm lasted %u", st->relost);
		printf("\n");
		bool restarted;
		double connects;
		if (storm_probe(st, before, &restarted, &connects))
			printf(restarted ? "  broker (probe): restarted; connects since it started %.0f\n"
			                 : "  broker (probe): connects +%.0f since the run began\n",
			    connects);
	}
}

/* Every connection is held: nothing is awaited after CONNACK. */
static void connect_connected(struct fleet *r, struct attempt *a, uint64_t now)
{
	fleet_hold(r, a, now);
}

static void connect_packet(
    struct fleet *r, struct attempt *a, const struct mqc_packet *pk, uint64_t now)
{
	(void)pk, (void)now;
	fleet_failed(r, a, R_OTHER); /* never awaited */
}

static const struct fleet_ops connect_ops
    = { .connected = connect_connected, .packet = connect_packet };

int bench_run_connect(const struct bench_opts *o)
{
	struct fleet r = { .o = o, .ep = -1, .ops = &connect_ops, .plan = { .rate = o->connrate } };
	struct probe_sample p0, p1;
	struct broker_usage usage;
	if (fleet_begin(&r, &p0, &usage) != 0)
		return 1;
	fleet_start_sampling(&r, &usage, 100 * MQC_NS_PER_MS);

	double interval = 1e9 / r.rate;
	uint64_t next_tick = r.t0 + MQC_NS_PER_S;
	uint64_t last_held = 0;
	unsigned next = 0;
	for (unsigned i = 0; i < r.nslots; i++) {
		r.a[i].k = r.first + i;
		r.a[i].intended = r.t0 + (uint64_t)((double)i * interval);
	}
	while (!fleet_interrupted && r.done < r.count) {
		uint64_t now = mqc_now_ns();
		while (next < r.nslots && r.a[next].intended <= now && r.in_progress < o->concurrency)
			fleet_start(&r, &r.a[next++]);
		if (now >= next_tick) { /* a line a second on stderr: the run is alive, and how */
			char p99[24];
			fprintf(stderr,
			    "%6.1fs  last 1s: connected %llu/s | since start: connected %llu of %llu, failed "
			    "%llu, in progress %u, CONNACK p99 %s\n",
			    (double)(now - r.t0) / 1e9, (unsigned long long)(r.held - last_held),
			    (unsigned long long)r.held, (unsigned long long)r.count,
			    (unsigned long long)r.failed, r.in_progress,
			    bench_fmt_ns(mqc_hist_percentile(&r.connack, 99), p99, sizeof p99));
			last_held = r.held;
			next_tick += MQC_NS_PER_S;
		}
		uint64_t wake = now + 10 * MQC_NS_PER_MS;
		if (next < r.nslots && r.in_progress < o->concurrency && r.a[next].intended < wake)
			wake = r.a[next].intended;
		fleet_turn(&r, wake);
	}
	uint64_t opened = mqc_now_ns();
	if (!fleet_interrupted) /* the hold begins: a line a script can wait for */
		fprintf(stderr, "opened: connected %llu of %llu in %.3fs, failed %llu; holding\n",
		    (unsigned long long)r.held, (unsigned long long)r.count, (double)(opened - r.t0) / 1e9,
		    (unsigned long long)r.failed);
	/* Hold: the broker carries every connection; sample its CPU and memory meanwhile. With
	 * --reconnect, storms come and go; --storms N ends the hold once N are over. */
	uint64_t hold_end = opened + o->hold_ns;
	next_tick = opened + MQC_NS_PER_S;
	while (!fleet_interrupted && mqc_now_ns() < hold_end) {
		unsigned over = 0;
		for (unsigned i = 0; i < r.nstorms; i++)
			over += r.storms[i]->over;
		if (o->storms && over >= o->storms)
			break;
		uint64_t now = mqc_now_ns();
		struct rstorm *st = fleet_current_storm(&r);
		if (now >= next_tick && st) {
			fprintf(stderr,
			    "%6.1fs  storm %u: back %u of %u, reconnecting %u, failed attempts %llu\n",
			    (double)(now - r.t0) / 1e9, r.nstorms, st->back, st->lost, r.reconnecting,
			    (unsigned long long)fleet_storm_failures(st));
		}
		if (now >= next_tick)
			next_tick += MQC_NS_PER_S;
		uint64_t wake = now + 100 * MQC_NS_PER_MS;
		fleet_turn(&r, wake < hold_end ? wake : hold_end);
	}
	fleet_stop_sampling(&r);
	uint64_t held = 0;
	for (unsigned i = 0; i < r.nslots; i++)
		held += r.a[i].state == ST_HELD;
	char why[768];
	fleet_explain(&r, why, sizeof why);
	uint64_t closed_at = mqc_now_ns();
	r.out.off = r.out.len = 0;
	bool bye = mqc_enc_disconnect(&r.out, o->net.conn.protocol, 0) == MQC_ENC_OK;
	for (unsigned i = 0; i < r.nslots; i++) {
		struct attempt *a = &r.a[i];
		if (a->state == ST_HELD && bye)
			fleet_send_out(&r, a, &r.out);
		fleet_close(a);
	}
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL);
	bench_probe_read(o->metrics_url, &p1);
	fleet_storm_probes_wait(&r);

	double secs = (double)(r.last_done > r.t0 ? r.last_done - r.t0 : 1) / 1e9;
	double cpu_mean = usage.ok && !usage.restarted && usage.t_last > usage.t0
	    ? (usage.cpu_last - usage.cpu0) / (usage.t_last - usage.t0) * 100
	    : -1;
	double per_conn
	    = usage.ok && held && !r.nstorms ? (usage.rss_max - usage.rss0) / (double)held : -1;
	uint64_t connected_n = r.held + r.reasons[R_DROPPED];
	if (o->json) {
		cJSON *root = bench_result_new(o);
		cJSON_AddNumberToObject(root, "sources", r.nsources ? r.nsources : 1);
		cJSON *c = cJSON_AddObjectToObject(root, "counts");
		cJSON_AddNumberToObject(c, "scheduled", (double)r.count);
		cJSON_AddNumberToObject(c, "connected", (double)connected_n);
		cJSON_AddNumberToObject(c, "held_at_end", (double)held);
		cJSON_AddNumberToObject(c, "failed", (double)r.failed);
		fleet_add_reasons(c, r.reasons);
		fleet_add_connack_refusals(root, &r);
		cJSON_AddNumberToObject(root, "elapsed_ns", secs * 1e9);
		cJSON_AddNumberToObject(root, "connects_per_second", (double)r.held / secs);
		cJSON *l = cJSON_AddObjectToObject(root, "latency");
		cJSON_AddItemToObject(l, "tcp_connect", bench_latency_json(&r.tcp));
		cJSON_AddItemToObject(l, "connack", bench_latency_json(&r.connack));
		if (o->reconnect) { /* every storm's reconnects together */
			struct mqc_hist all;
			if (mqc_hist_init(&all, 10) == 0) {
				for (unsigned i = 0; i < r.nstorms; i++)
					mqc_hist_merge(&all, &r.storms[i]->latency);
				cJSON_AddItemToObject(l, "reconnect", bench_latency_json(&all));
				mqc_hist_free(&all);
			}
		}
		if (r.ctx) {
			cJSON_AddItemToObject(l, "tls_full", bench_latency_json(&r.tls_full));
			cJSON_AddItemToObject(l, "tls_resumed", bench_latency_json(&r.tls_resumed));
		}
		fleet_add_tls_json(root, &r);
		fleet_add_timeline(root, &r, r.last_done > r.t0 ? r.last_done - r.t0 + 1 : 1);
		if (o->reconnect)
			storms_json(root, &r, &p0);
		cJSON *u = cJSON_AddObjectToObject(root, "broker_usage");
		cJSON_AddNumberToObject(u, "cpu_mean_pct", cpu_mean);
		cJSON_AddNumberToObject(u, "cpu_peak_pct", usage.peak_pct);
		cJSON_AddNumberToObject(u, "rss_max_bytes", usage.ok ? usage.rss_max : -1);
		cJSON_AddNumberToObject(u, "rss_before_bytes", usage.ok ? usage.rss0 : -1);
		cJSON_AddNumberToObject(u, "rss_growth_per_held_connection", per_conn);
		if (p0.ok && p1.ok && !r.nstorms)
			fleet_add_probe_json(root, &p0, &p1);
		bench_result_print(root);
	} else {
		printf("connect %llu clients at %.0f/s (concurrency %u) against %s\n",
		    (unsigned long long)r.count, r.rate, o->concurrency, o->net.broker);
		printf("connected %llu of %llu in %.3fs (%.0f/s)   failed %llu   held %llu for %.1fs\n",
		    (unsigned long long)connected_n, (unsigned long long)r.count, secs,
		    (double)r.held / secs, (unsigned long long)r.failed, (unsigned long long)held,
		    (double)(closed_at - opened) / 1e9);
		bench_print_latency(stdout, "tcp connect (from the scheduled time):", &r.tcp);
		bench_print_latency(stdout, "connack     (from the scheduled time):", &r.connack);
		fleet_print_tls(&r);
		fleet_print_failures(&r);
		if (o->reconnect && !r.nstorms)
			printf("storms: none (no connection was lost)\n");
		storms_text(&r, &p0);
		if (usage.ok && !r.nstorms)
			/* Growth over a baseline taken just before the run: a broker that held connections
			 * before reuses memory it freed, so this depends on its history. */
			printf("broker: cpu mean %.0f%% peak %.0f%% of one core, VmRSS max %.1f MB, growth "
			       "%+.1f MB over %.1f MB just before the run = %.0f B per held connection\n",
			    cpu_mean, usage.peak_pct, usage.rss_max / 1e6, (usage.rss_max - usage.rss0) / 1e6,
			    usage.rss0 / 1e6, per_conn);
		/* With storms, each storm said what the broker saw. */
		if (!r.nstorms && p0.ok && p1.ok && p1.has_connects)
			printf("broker (probe): connects +%.0f   disconnects +%.0f\n",
			    p1.connects - p0.connects, p1.disconnects - p0.disconnects);
		else if (!r.nstorms && p0.ok && p1.ok)
			printf("broker (probe): connects n/a (the probe counts them only with observe_auth)"
			       "   disconnects +%.0f\n",
			    p1.disconnects - p0.disconnects);
		else if (!r.nstorms && o->metrics_url)
			printf("broker (probe): n/a (%s could not be read)\n", o->metrics_url);
	}
	int rc = fleet_finish_status(&r, why, r.count);
	fleet_free(&r);
	return rc;
}
