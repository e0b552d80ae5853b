/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * request.c - `mqbench request`: command/reply through a device, three ways.
 *
 *   naive      per request: connect, subscribe to a reply topic, publish, wait, disconnect
 *              (what a web handler without a pool does)
 *   pool       libmqttpool: warm connections, v5 inbox + correlation, no SUBSCRIBE per request
 *   dedicated  one private persistent connection per worker (the upper bound)
 *
 * C worker threads share one schedule: with --rate every request has an intended time and its
 * latency is measured from it (a slow broker or device shows as latency, not as fewer
 * requests); without --rate the loop is closed (each worker starts its next request at once).
 * A timed-out request is recorded at the timeout value and counted.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_request.h"
#include "mqttpool.h"

const char *const bench_request_modes[BENCH_REQUEST_MODES]
    = { "naive", "pool", "dedicated", "loop" };

struct shared {
	const struct bench_opts *o;
	int mode;
	mqp_pool *pool;
	pthread_mutex_t lock;
	uint64_t next, t0, end;
	atomic_uint_fast64_t done, errors, timeouts;
	atomic_uint running; /* workers not yet finished */
	uint16_t run;
};

struct worker {
	struct shared *s;
	int id;
	struct mqc_hist lat;
	struct mqc_requester *rq; /* naive (per request) and dedicated (per worker) */
	char inbox_prefix[64];
};

/* --- naive and dedicated: the project's one request/reply client (mqc_request.h) ---------- */

static int client_open(struct worker *w, uint64_t deadline)
{
	char err[256];
	int rc = mqc_requester_open(
	    &w->s->o->net.conn, w->inbox_prefix, deadline, &w->rq, err, sizeof err);
	if (rc != MQC_REQ_OK && w->s->mode == 2)
		fprintf(stderr, "mqbench: worker %d: %s\n", w->id, err);
	return rc == MQC_REQ_OK ? 0 : -1;
}

static void client_close(struct worker *w)
{
	mqc_requester_close(w->rq);
	w->rq = NULL;
}

static int client_request(struct worker *w, const char *payload, size_t len, uint64_t deadline)
{
	switch (mqc_requester_request(
	    w->rq, w->s->o->pub_topic, payload, len, w->s->o->net.qos, deadline, NULL)) {
		case MQC_REQ_OK:
			return MQP_OK;
		case MQC_REQ_TIMEDOUT:
			return MQP_ETIMEDOUT;
		default:
			return MQP_ECONNLOST;
	}
}

/* What a mode's requests run on: the baselines model what users write (libmosquitto), the pool
 * is libmqttpool. Printed under the table and in --json. */
static const char *request_client(int mode)
{
	static char text[4][160];
	if (!text[0][0]) {
		int major, minor, rev;
		mosquitto_lib_version(&major, &minor, &rev);
		char lib[48];
		snprintf(lib, sizeof lib, "libmosquitto %d.%d.%d", major, minor, rev);
		snprintf(text[0], sizeof text[0], "%s, a connection per request (mqc_request.h)", lib);
		snprintf(text[1], sizeof text[1], "libmqttpool %s, its own I/O thread", mqp_version());
		snprintf(text[2], sizeof text[2], "%s, a connection per worker (mqc_request.h)", lib);
		snprintf(
		    text[3], sizeof text[3], "libmqttpool %s on a libuv loop, one thread", mqp_version());
	}
	return text[mode];
}

/* --- workers ----------------------------------------------------------------------------- */

/* Take the next slot: its intended time, or false when the run is over. */
static bool take(struct shared *s, uint64_t *intended)
{
	pthread_mutex_lock(&s->lock);
	uint64_t now = mqc_now_ns();
	bool ok = false;
	if (s->o->rate > 0) {
		uint64_t t = s->t0 + (uint64_t)((double)s->next * 1e9 / s->o->rate);
		if (t < s->end) {
			s->next++;
			*intended = t;
			ok = true;
		}
	} else if (now < s->end) {
		*intended = now;
		ok = true;
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

static void worker_run(struct worker *w)
{
	struct shared *s = w->s;
	const struct bench_opts *o = s->o;
	uint64_t timeout = o->timeout_ns;
	char payload[64];
	int plen = snprintf(payload, sizeof payload, "bench-%d", w->id);
	if (s->mode == 2 && client_open(w, mqc_now_ns() + timeout) != 0) {
		fprintf(stderr, "mqbench: worker %d cannot open its dedicated connection\n", w->id);
		atomic_fetch_add(&s->errors, 1);
		client_close(w);
		return;
	}
	uint64_t intended;
	while (take(s, &intended)) {
		uint64_t now = mqc_now_ns();
		if (intended > now)
			nanosleep(&(struct timespec) { .tv_sec = (time_t)((intended - now) / MQC_NS_PER_S),
			              .tv_nsec = (long)((intended - now) % MQC_NS_PER_S) },
			    NULL);
		uint64_t deadline = mqc_now_ns() + timeout;
		int rc;
		if (s->mode == 1) {
			struct mqp_reply reply;
			rc = mqp_pool_request(s->pool, o->pub_topic, payload, (size_t)plen, o->net.qos,
			    (unsigned)(timeout / MQC_NS_PER_MS), &reply);
			mqp_reply_free(&reply);
		} else if (s->mode == 2) {
			rc = client_request(w, payload, (size_t)plen, deadline);
		} else {
			rc = client_open(w, deadline) == 0 ? client_request(w, payload, (size_t)plen, deadline)
			                                   : MQP_ECONNECT;
			client_close(w);
		}
		uint64_t done = mqc_now_ns();
		if (rc == MQP_OK) {
			mqc_hist_record(&w->lat, done - intended);
			atomic_fetch_add(&s->done, 1);
		} else if (rc == MQP_ETIMEDOUT) {
			mqc_hist_record(&w->lat, done - intended); /* never vanishes from the tail */
			atomic_fetch_add(&s->timeouts, 1);
		} else {
			atomic_fetch_add(&s->errors, 1);
		}
		if (s->mode == 2 && rc != MQP_OK && rc != MQP_ETIMEDOUT)
			break;
	}
	client_close(w);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	worker_run(w);
	atomic_fetch_sub(&w->s->running, 1);
	return NULL;
}

struct mode_result {
	double rate;
	struct mqc_hist lat;
	uint64_t done, errors, timeouts;
	struct probe_sample p0, p1;
	struct bench_cost cost; /* this process's system calls and CPU during the mode's run */
	bool ran;
};

/* The pool of the pool and loop modes: the same options for both. */
static struct mqp_pool_options pool_options(const struct bench_opts *o)
{
	struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
	po.max_size = o->pool_size;
	po.min_size = o->pool_size < 2 ? o->pool_size : 2;
	po.username = o->net.conn.username;
	po.password = o->net.conn.password;
	po.cafile = o->net.conn.cafile;
	po.certfile = o->net.conn.cert;
	po.keyfile = o->net.conn.key;
	po.client_id_prefix = "mqbench";
	return po;
}

/* --mode loop: one thread, the pool on its libuv loop (request_loop.c). */
static int run_loop_mode(const struct bench_opts *o, struct mode_result *r)
{
	struct mqp_pool_options po = pool_options(o);
	struct bench_loop_result lr = { .cost = &r->cost };
	mqc_hist_init(&lr.lat, 10);
	int rc = bench_request_loop(o, &po, &lr);
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL); /* let the probe see them go */
	bench_probe_read(o->metrics_url, &r->p1);
	mqc_hist_merge(&r->lat, &lr.lat);
	mqc_hist_free(&lr.lat);
	if (rc != 0)
		return -1;
	r->done = lr.done;
	r->errors = lr.errors;
	r->timeouts = lr.timeouts;
	r->rate = lr.elapsed_ns ? (double)r->done / ((double)lr.elapsed_ns / 1e9) : 0;
	r->ran = true;
	return 0;
}

static int run_mode(const struct bench_opts *o, int mode, uint16_t run, struct mode_result *r)
{
	mqc_hist_init(&r->lat, 10);
	bench_probe_read(o->metrics_url, &r->p0);
	bench_cost_open(&r->cost); /* before the pool's thread and the workers: they count */
	if (mode == 3)
		return run_loop_mode(o, r);
	struct shared s = { .o = o, .mode = mode, .run = run };
	pthread_mutex_init(&s.lock, NULL);
	if (mode == 1) {
		struct mqp_pool_options po = pool_options(o);
		char err[256];
		int rc = mqp_pool_new(o->net.broker, &po, &s.pool, err, sizeof err);
		if (rc != MQP_OK) {
			fprintf(stderr, "mqbench: pool: %s: %s\n", mqp_strerror(rc), err);
			return -1;
		}
		/* Warm: the pool's point is that connections exist before the first request. */
		uint64_t warm = mqc_now_ns() + 5 * MQC_NS_PER_S;
		struct mqp_pool_stats st;
		do {
			mqp_pool_stats(s.pool, &st, sizeof st);
			nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		} while (st.ready < po.min_size && mqc_now_ns() < warm);
	}
	struct worker *w = calloc(o->concurrency, sizeof *w);
	pthread_t *t = calloc(o->concurrency, sizeof *t);
	bench_cost_start(&r->cost);
	s.t0 = mqc_now_ns();
	s.end = s.t0 + o->duration_ns;
	for (unsigned i = 0; i < o->concurrency; i++) {
		w[i] = (struct worker) { .s = &s, .id = (int)i };
		atomic_fetch_add(&s.running, 1);
		snprintf(w[i].inbox_prefix, sizeof w[i].inbox_prefix, "%s/inbox", o->prefix);
		mqc_hist_init(&w[i].lat, 10);
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	/* A line a second on stderr while the workers run: the run is alive, and how. */
	uint64_t last_done = 0, tick = s.t0 + MQC_NS_PER_S;
	for (uint64_t now; (now = mqc_now_ns()) < s.end && atomic_load(&s.running) > 0;) {
		uint64_t until = tick < s.end ? tick : s.end;
		if (until - now > 50 * MQC_NS_PER_MS) /* look at the workers every 50 ms */
			until = now + 50 * MQC_NS_PER_MS;
		if (now < until && now < tick) {
			nanosleep(&(struct timespec) { .tv_sec = (time_t)((until - now) / MQC_NS_PER_S),
			              .tv_nsec = (long)((until - now) % MQC_NS_PER_S) },
			    NULL);
			continue;
		}
		uint64_t done = atomic_load(&s.done);
		fprintf(stderr,
		    "%6.1fs  %s: last 1s: %llu requests/s | since start: %llu answered, %llu timed out, "
		    "%llu failed\n",
		    (double)(mqc_now_ns() - s.t0) / 1e9, bench_request_modes[mode],
		    (unsigned long long)(done - last_done), (unsigned long long)done,
		    (unsigned long long)atomic_load(&s.timeouts),
		    (unsigned long long)atomic_load(&s.errors));
		last_done = done;
		tick += MQC_NS_PER_S;
	}
	for (unsigned i = 0; i < o->concurrency; i++) {
		pthread_join(t[i], NULL);
		mqc_hist_merge(&r->lat, &w[i].lat);
		mqc_hist_free(&w[i].lat);
	}
	bench_cost_stop(&r->cost);
	uint64_t elapsed = mqc_now_ns() - s.t0;
	if (s.pool)
		mqp_pool_destroy(s.pool);
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL); /* let the probe see them go */
	bench_probe_read(o->metrics_url, &r->p1);
	r->done = atomic_load(&s.done);
	r->errors = atomic_load(&s.errors);
	r->timeouts = atomic_load(&s.timeouts);
	r->rate = (double)r->done / ((double)elapsed / 1e9);
	r->ran = true;
	free(w);
	free(t);
	pthread_mutex_destroy(&s.lock);
	return 0;
}

int bench_run_request(const struct bench_opts *o)
{
	mosquitto_lib_init();
	struct mode_result r[BENCH_REQUEST_MODES] = { 0 };
	for (int m = 0; m < BENCH_REQUEST_MODES; m++)
		r[m].cost.fd = -1;
	uint16_t run = (uint16_t)(o->seed ^ (o->seed >> 16));
	int rc = 0;
	for (int mode = 0; mode < BENCH_REQUEST_MODES; mode++) {
		if (o->request_mode >= 0 ? o->request_mode != mode : mode == 3)
			continue; /* "all" is naive, pool and dedicated; loop is asked for by name */
		fprintf(stderr, "mqbench: %s: %u %s for %.1fs...\n", bench_request_modes[mode],
		    o->concurrency, mode == 3 ? "requests in flight on one loop" : "workers",
		    (double)o->duration_ns / 1e9);
		if (run_mode(o, mode, run, &r[mode]) != 0)
			rc = 1;
	}
	if (o->json) {
		cJSON *root = bench_result_new(o);
		cJSON *modes = cJSON_AddObjectToObject(root, "modes");
		for (int m = 0; m < BENCH_REQUEST_MODES; m++) {
			if (!r[m].ran)
				continue;
			cJSON *one = cJSON_AddObjectToObject(modes, bench_request_modes[m]);
			cJSON_AddNumberToObject(one, "requests_per_second", r[m].rate);
			cJSON_AddNumberToObject(one, "ok", (double)r[m].done);
			cJSON_AddNumberToObject(one, "timeouts", (double)r[m].timeouts);
			cJSON_AddNumberToObject(one, "errors", (double)r[m].errors);
			if (r[m].p0.ok && r[m].p1.ok && r[m].p1.has_connects)
				cJSON_AddNumberToObject(one, "connects", r[m].p1.connects - r[m].p0.connects);
			if (r[m].p0.ok && r[m].p1.ok)
				cJSON_AddNumberToObject(
				    one, "disconnects", r[m].p1.disconnects - r[m].p0.disconnects);
			cJSON_AddItemToObject(one, "latency", bench_latency_json(&r[m].lat));
			/* This process's cost per answered request: null when it cannot be known. */
			double n = (double)r[m].done;
			if (r[m].cost.syscalls >= 0 && n > 0)
				cJSON_AddNumberToObject(one, "syscalls_per_request", r[m].cost.syscalls / n);
			else
				cJSON_AddNullToObject(one, "syscalls_per_request");
			if (n > 0)
				cJSON_AddNumberToObject(one, "cpu_us_per_request", r[m].cost.cpu_s * 1e6 / n);
			else
				cJSON_AddNullToObject(one, "cpu_us_per_request");
			cJSON_AddStringToObject(one, "client", request_client(m));
		}
		bench_result_print(root);
	} else {
		printf("request %s against %s: concurrency %u, %.1fs per mode, %s\n", o->pub_topic,
		    o->net.broker, o->concurrency, (double)o->duration_ns / 1e9,
		    o->rate > 0 ? "open loop" : "closed loop");
		printf("%-10s %10s %10s %10s %10s %9s %9s %12s %8s %8s\n", "mode", "req/s", "p50", "p99",
		    "p99.9", "errors", "connects", "disconnects", "sys/req", "CPU/req");
		bool probe_read = false, probe_connects = false;
		for (int m = 0; m < BENCH_REQUEST_MODES; m++) {
			probe_read |= r[m].ran && r[m].p1.ok;
			probe_connects |= r[m].ran && r[m].p1.ok && r[m].p1.has_connects;
		}
		if (!o->metrics_url)
			printf("(connects, disconnects: n/a without --metrics-url, the broker's probe)\n");
		else if (probe_read && !probe_connects)
			printf("(connects: n/a, the probe counts them only with plugin_opt_observe_auth)\n");
		for (int m = 0; m < BENCH_REQUEST_MODES; m++) {
			if (!r[m].ran)
				continue;
			char a[24], b[24], c[24], cn[24] = "n/a", dc[24] = "n/a";
			if (r[m].p0.ok && r[m].p1.ok) {
				if (r[m].p1.has_connects)
					snprintf(cn, sizeof cn, "%.0f", r[m].p1.connects - r[m].p0.connects);
				snprintf(dc, sizeof dc, "%.0f", r[m].p1.disconnects - r[m].p0.disconnects);
			}
			char sys[24], cpu[24];
			printf("%-10s %10.0f %10s %10s %10s %9llu %9s %12s %8s %8s\n", bench_request_modes[m],
			    r[m].rate, bench_fmt_ns(mqc_hist_percentile(&r[m].lat, 50), a, sizeof a),
			    bench_fmt_ns(mqc_hist_percentile(&r[m].lat, 99), b, sizeof b),
			    bench_fmt_ns(mqc_hist_percentile(&r[m].lat, 99.9), c, sizeof c),
			    (unsigned long long)r[m].errors + r[m].timeouts, cn, dc,
			    bench_cost_fmt(r[m].cost.syscalls, (double)r[m].done, 2, "", sys, sizeof sys),
			    bench_cost_fmt(r[m].cost.cpu_s * 1e6, (double)r[m].done, 1, "us", cpu, sizeof cpu));
		}
		/* A codec difference must never be read as pooling: say what each row runs on. */
		for (int m = 0; m < BENCH_REQUEST_MODES; m++)
			if (r[m].ran)
				printf("  %-9s %s\n", bench_request_modes[m], request_client(m));
		printf("  (sys/req, CPU/req: this process, every thread, per answered request%s)\n",
		    r[0].cost.syscalls < 0 && r[1].cost.syscalls < 0 && r[2].cost.syscalls < 0
		            && r[3].cost.syscalls < 0
		        ? "; system calls n/a: counting them needs root or CAP_PERFMON"
		        : "");
		if (r[0].ran && r[1].ran && r[0].rate > 0)
			printf("pool / naive: %.1fx req/s", r[1].rate / r[0].rate);
		if (r[1].ran && r[2].ran && r[2].rate > 0)
			printf("%spool / dedicated: %.2fx req/s, p50 %.2fx", r[0].ran ? "   " : "",
			    r[1].rate / r[2].rate,
			    (double)mqc_hist_percentile(&r[1].lat, 50)
			        / (double)(mqc_hist_percentile(&r[2].lat, 50)
			                ? mqc_hist_percentile(&r[2].lat, 50)
			                : 1));
		if (r[1].ran && (r[0].ran || r[2].ran))
			printf("\n");
	}
	for (int m = 0; m < BENCH_REQUEST_MODES; m++) {
		bench_cost_close(&r[m].cost);
		if (r[m].ran)
			bench_warn_delayed_ack(bench_request_modes[m], &r[m].lat);
		uint64_t p99 = mqc_hist_percentile(&r[m].lat, 99);
		if (r[m].ran && o->rate <= 0 && p99 > 0 && r[m].lat.max > 100 * p99) {
			/* Closed loop: a stall holds every worker, so it is one slow sample per worker,
			 * not the thousands of late requests an open-loop schedule would count. */
			char a[24], b[24];
			fprintf(stderr,
			    "mqbench: %s: closed loop: max %s is over 100x p99 %s: a stall held every "
			    "worker and the percentiles hide it; --rate gives open-loop latency\n",
			    bench_request_modes[m], bench_fmt_ns(r[m].lat.max, a, sizeof a),
			    bench_fmt_ns(p99, b, sizeof b));
		}
		if (r[m].ran && r[m].done == 0) {
			fprintf(stderr, "mqbench: %s: no request got its reply (is a device answering %s?)\n",
			    bench_request_modes[m], o->pub_topic);
			rc = 1;
		}
		if (r[m].ran)
			mqc_hist_free(&r[m].lat);
	}
	mosquitto_lib_cleanup();
	return rc;
}
