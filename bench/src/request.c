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
 *
 * With --protocol 3.1.1 every mode measures the legacy model instead (the only request/reply
 * MQTT 3.1.1 has): a device per worker answering on a fixed reply topic, the reply matched by
 * the request id the command carries; naive subscribes to the reply topic per request, the pool
 * is mqp_pool_request_legacy (its connections stay subscribed), dedicated keeps one subscribed
 * connection per worker.
 *
 * Failures are counted by cause and each cause is said once; a mode that meets nothing but
 * connection failures for --fail-after ends with that cause (exit 1).
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
#include "mqc_template.h"
#include "mqttpool.h"

const char *const bench_request_modes[BENCH_REQUEST_MODES]
    = { "naive", "pool", "dedicated", "loop" };

struct shared {
	const struct bench_opts *o;
	int mode;
	mqp_pool *pool;
	pthread_mutex_t lock;
	uint64_t next, t0, end;
	atomic_uint_fast64_t done, errors, timeouts, no_responder;
	atomic_uint running; /* workers not yet finished */
	uint16_t run;
	struct bench_failures *failures;
};

struct worker {
	struct shared *s;
	int id;
	struct mqc_hist lat;
	struct mqc_requester *rq; /* naive (per request) and dedicated (per worker) */
	char inbox_prefix[64];
	char topic[256], reply_topic[320]; /* its device's (legacy: {worker} replaced) */
	char err[512];                     /* why the last call failed */
};

/* The command filter a device listens on by default (the responder's). */
#define DEVICE_COMMAND_FILTER "devices/+/commands/#"

/* When the legacy reply topic falls under the devices' command filter: a 3.1.1 device (no
 * no-local) would take its own reply for a command, so the responder refuses to send it and
 * counts a loop. Said when nothing answered; "" otherwise. */
static const char *loop_hint(const struct bench_opts *o, char *out, size_t len)
{
	char topic[256], reply[256];
	bool under = false;
	if (!o->legacy || !o->reply_template
	    || bench_legacy_topics(o, 0, topic, sizeof topic, reply, sizeof reply) != 0
	    || mosquitto_topic_matches_sub(DEVICE_COMMAND_FILTER, reply, &under) != MOSQ_ERR_SUCCESS
	    || !under)
		return "";
	snprintf(out, len,
	    "; the reply topic %s is under the devices' command filter " DEVICE_COMMAND_FILTER
	    ", where a 3.1.1 device would take its own reply for a command: the responder refuses "
	    "such a reply as a loop (loops_refused in its summary); " MQC_REPLY_TEMPLATE_DEFAULT
	    " is outside it",
	    reply);
	return out;
}

/* --- naive and dedicated: the project's one request/reply client (mqc_request.h) ---------- */

static bool legacy(const struct shared *s)
{
	return s->o->legacy;
}

/* MQP_OK, or an mqp_err the worker counts (w->err says why). */
static int client_result(int rc)
{
	switch (rc) {
		case MQC_REQ_OK:
			return MQP_OK;
		case MQC_REQ_TIMEDOUT:
			return MQP_ETIMEDOUT;
		case MQC_REQ_REFUSED:
			return MQP_EREFUSED;
		case MQC_REQ_CONNECT:
			return MQP_ECONNECT;
		case MQC_REQ_DENIED:
			return MQP_EDENIED;
		case MQC_REQ_NORESPONDER:
			return MQP_ENORESPONDER;
		default:
			return MQP_ECONNLOST;
	}
}

static int client_open(struct worker *w, uint64_t deadline)
{
	const struct mqc_conn_opts *co = &w->s->o->net.conn;
	int rc = legacy(w->s)
	    ? mqc_requester_open_legacy(co, w->reply_topic, deadline, &w->rq, w->err, sizeof w->err)
	    : mqc_requester_open(co, w->inbox_prefix, deadline, &w->rq, w->err, sizeof w->err);
	return client_result(rc);
}

static void client_close(struct worker *w)
{
	mqc_requester_close(w->rq);
	w->rq = NULL;
}

static int client_request(struct worker *w, const char *payload, size_t len, uint64_t deadline)
{
	if (legacy(w->s) && mqc_requester_match(w->rq, payload, len) != MQC_REQ_OK)
		return MQP_ENOMEM;
	int rc = mqc_requester_request(w->rq, w->topic, payload, len, w->s->o->net.qos, deadline, NULL);
	if (rc != MQC_REQ_OK)
		snprintf(w->err, sizeof w->err, "%s",
		    rc == MQC_REQ_TIMEDOUT          ? "no reply by the deadline"
		        : rc == MQC_REQ_DENIED      ? "the broker refused the command"
		        : rc == MQC_REQ_NORESPONDER ? "nobody is subscribed to the command's topic"
		                                    : "the connection closed before the reply");
	return client_result(rc);
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
		snprintf(text[1], sizeof text[1],
		    "libmqttpool %s (its own MQTT codec and sockets), its own I/O thread", mqp_version());
		snprintf(text[2], sizeof text[2], "%s, a connection per worker (mqc_request.h)", lib);
		snprintf(text[3], sizeof text[3],
		    "libmqttpool %s (its own MQTT codec and sockets) on a libuv loop, one thread",
		    mqp_version());
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

/* A connection failure: no connection could be had (the broker is unreachable or refuses). */
static bool connection_failure(int rc)
{
	return rc == MQP_ECONNECT || rc == MQP_EREFUSED;
}

/* Why a pool call failed: for a connection failure the pool's last error, which names it. */
static void pool_cause(struct worker *w, int rc)
{
	char last[512];
	mqp_pool_last_error(w->s->pool, last, sizeof last);
	snprintf(
	    w->err, sizeof w->err, "%s", connection_failure(rc) && last[0] ? last : mqp_strerror(rc));
}

static void worker_run(struct worker *w)
{
	struct shared *s = w->s;
	const struct bench_opts *o = s->o;
	uint64_t timeout = o->timeout_ns;
	char payload[64];
	if (s->mode == 2) {
		int rc = client_open(w, mqc_now_ns() + timeout);
		if (rc != MQP_OK) {
			bench_failure(
			    s->failures, w->err, connection_failure(rc), mqc_now_ns(), o->fail_after_ns);
			atomic_fetch_add(&s->errors, 1);
			client_close(w);
			return;
		}
	}
	uint64_t intended, seq = 0;
	while (take(s, &intended) && !atomic_load(&s->failures->give_up)) {
		uint64_t now = mqc_now_ns();
		if (intended > now)
			nanosleep(&(struct timespec) { .tv_sec = (time_t)((intended - now) / MQC_NS_PER_S),
			              .tv_nsec = (long)((intended - now) % MQC_NS_PER_S) },
			    NULL);
		/* A request id each: the legacy model's match, and the v5 models' payload. */
		int plen
		    = snprintf(payload, sizeof payload, "bench-%d-%llu", w->id, (unsigned long long)seq++);
		uint64_t deadline = mqc_now_ns() + timeout;
		int rc;
		if (s->mode == 1) {
			struct mqp_reply reply;
			unsigned ms = (unsigned)(timeout / MQC_NS_PER_MS);
			rc = (int)(legacy(s) ? mqp_pool_request_legacy(s->pool, w->topic, payload, (size_t)plen,
			               o->net.qos, w->reply_topic, bench_legacy_match, payload, ms, &reply)
			                     : mqp_pool_request(s->pool, w->topic, payload, (size_t)plen,
			                         o->net.qos, ms, &reply));
			mqp_reply_free(&reply);
			if (rc != MQP_OK)
				pool_cause(w, rc);
		} else if (s->mode == 2) {
			rc = client_request(w, payload, (size_t)plen, deadline);
		} else {
			rc = client_open(w, deadline);
			if (rc == MQP_OK)
				rc = client_request(w, payload, (size_t)plen, deadline);
			client_close(w);
		}
		uint64_t done = mqc_now_ns();
		if (rc == MQP_OK) {
			mqc_hist_record(&w->lat, done - intended);
			atomic_fetch_add(&s->done, 1);
			bench_failures_ok(s->failures, done);
		} else if (rc == MQP_ETIMEDOUT) {
			mqc_hist_record(&w->lat, done - intended); /* never vanishes from the tail */
			atomic_fetch_add(&s->timeouts, 1);
			bench_failures_ok(s->failures, done);
		} else if (rc == MQP_ENORESPONDER) { /* an answer, from the broker: not a failure */
			atomic_fetch_add(&s->no_responder, 1);
			bench_failures_ok(s->failures, done);
		} else {
			atomic_fetch_add(&s->errors, 1);
			bench_failure(s->failures, w->err, connection_failure(rc), done, o->fail_after_ns);
			if (connection_failure(rc)) /* no hot loop against a broker that refuses */
				nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL); /* 10 ms */
		}
		if (s->mode == 2 && rc != MQP_OK && rc != MQP_ETIMEDOUT && rc != MQP_ENORESPONDER)
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
	uint64_t done, errors, timeouts, no_responder;
	struct probe_sample p0, p1;
	struct bench_cost cost; /* this process's system calls and CPU during the mode's run */
	struct bench_failures failures;
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
	po.protocol = o->net.conn.protocol == 4 ? 4 : 5;
	po.ws_header = o->net.ws_header;
	po.v311_advice = "use --protocol 3.1.1"; /* as the naive and dedicated modes say */
	po.silence_ms = o->silence_ms;
	po.ping_timeout_ms = o->ping_timeout_ms;
	return po;
}

/* --mode loop: one thread, the pool on its libuv loop (request_loop.c). */
static int run_loop_mode(const struct bench_opts *o, struct mode_result *r)
{
	struct mqp_pool_options po = pool_options(o);
	struct bench_loop_result lr = { .cost = &r->cost, .failures = &r->failures };
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
	r->no_responder = lr.no_responder;
	r->rate = lr.elapsed_ns ? (double)r->done / ((double)lr.elapsed_ns / 1e9) : 0;
	r->ran = true;
	return 0;
}

static int run_mode(const struct bench_opts *o, int mode, uint16_t run, struct mode_result *r)
{
	mqc_hist_init(&r->lat, 10);
	bench_failures_init(&r->failures, bench_request_modes[mode], mqc_now_ns());
	bench_probe_read(o->metrics_url, &r->p0);
	bench_cost_open(&r->cost); /* before the pool's thread and the workers: they count */
	if (mode == 3)
		return run_loop_mode(o, r);
	struct shared s = { .o = o, .mode = mode, .run = run, .failures = &r->failures };
	pthread_mutex_init(&s.lock, NULL);
	if (mode == 1) {
		struct mqp_pool_options po = pool_options(o);
		char err[256];
		int rc = mqp_pool_new(o->net.broker, &po, &s.pool, err, sizeof err);
		if (rc != MQP_OK) {
			fprintf(stderr, "mqbench: pool: %s: %s\n", mqp_strerror(rc), err);
			return -1;
		}
		/* Warm: the pool's point is that connections exist before the first request (a pool
		 * that cannot connect goes on at once: its requests say why). */
		uint64_t warm = mqc_now_ns() + 5 * MQC_NS_PER_S;
		struct mqp_pool_stats st;
		do {
			mqp_pool_stats(s.pool, &st, sizeof st);
			nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		} while (st.ready < po.min_size && !(st.connects_failed && !st.connects_ok)
		    && mqc_now_ns() < warm);
	}
	struct worker *w = calloc(o->concurrency, sizeof *w);
	pthread_t *t = calloc(o->concurrency, sizeof *t);
	bench_cost_start(&r->cost);
	s.t0 = mqc_now_ns();
	s.end = s.t0 + o->duration_ns;
	bench_failures_ok(&r->failures, s.t0); /* --fail-after counts from the start of the run */
	for (unsigned i = 0; i < o->concurrency; i++) {
		w[i] = (struct worker) { .s = &s, .id = (int)i };
		atomic_fetch_add(&s.running, 1);
		snprintf(w[i].inbox_prefix, sizeof w[i].inbox_prefix, "%s/inbox", o->prefix);
		bench_legacy_topics(o, i, w[i].topic, sizeof w[i].topic, w[i].reply_topic,
		    sizeof w[i].reply_topic); /* checked to fit when the options were read */
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
	if (s.pool) {
		bench_failures_nodes(&r->failures, s.pool);
		mqp_pool_destroy(s.pool);
	}
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL); /* let the probe see them go */
	bench_probe_read(o->metrics_url, &r->p1);
	r->done = atomic_load(&s.done);
	r->errors = atomic_load(&s.errors);
	r->timeouts = atomic_load(&s.timeouts);
	r->no_responder = atomic_load(&s.no_responder);
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
			cJSON_AddNumberToObject(one, "no_responder", (double)r[m].no_responder);
			cJSON_AddNumberToObject(one, "errors", (double)r[m].errors);
			if (m == 1 || m == 3) /* the pool's modes: connections it found silent */
				cJSON_AddNumberToObject(one, "unresponsive", (double)r[m].failures.unresponsive);
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
			cJSON *fails = cJSON_AddArrayToObject(one, "failures");
			for (unsigned i = 0; i < r[m].failures.n; i++) {
				cJSON *fc = cJSON_CreateObject();
				cJSON_AddStringToObject(fc, "cause", r[m].failures.c[i].cause);
				cJSON_AddNumberToObject(fc, "count", (double)r[m].failures.c[i].count);
				cJSON_AddBoolToObject(fc, "connection", r[m].failures.c[i].connection);
				cJSON_AddItemToArray(fails, fc);
			}
			if (atomic_load(&r[m].failures.give_up))
				cJSON_AddStringToObject(one, "gave_up", r[m].failures.give_up_cause);
		}
		bench_result_print(root);
	} else {
		printf("request %s against %s: concurrency %u, %.1fs per mode, %s\n", o->pub_topic,
		    o->net.broker, o->concurrency, (double)o->duration_ns / 1e9,
		    o->rate > 0 ? "open loop" : "closed loop");
		if (o->legacy)
			printf("%s, the legacy model: replies on %s, matched by the request id the "
			       "command\ncarries (what it cannot guarantee: another client subscribed to a "
			       "reply topic sees\nthe replies; a late reply is told from the next only by "
			       "its id)\n",
			    o->net.conn.protocol == 4 ? "MQTT 3.1.1" : "MQTT 5", o->reply_template);
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
		for (int m = 0; m < BENCH_REQUEST_MODES; m++)
			if (r[m].ran && r[m].no_responder)
				printf("  %-9s %llu requests answered \"no responder\" by the broker (nobody "
				       "subscribed to %s), not counted as errors\n",
				    bench_request_modes[m], (unsigned long long)r[m].no_responder, o->pub_topic);
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
		struct bench_failures *f = &r[m].failures;
		if (r[m].ran && atomic_load(&f->give_up)) {
			char d[24];
			fprintf(stderr,
			    "mqbench: %s: ended after %s with nothing but connection failures (--fail-after): "
			    "%s\n",
			    bench_request_modes[m], bench_fmt_ns(o->fail_after_ns, d, sizeof d),
			    f->give_up_cause);
			rc = 1;
		} else if (r[m].ran && r[m].done == 0 && f->n) {
			/* Name the first failure's cause: never blame the device for the broker's. */
			fprintf(stderr, "mqbench: %s: no request got its reply: %s\n", bench_request_modes[m],
			    f->c[0].cause);
			rc = 1;
		} else if (r[m].ran && r[m].done == 0 && r[m].no_responder) {
			fprintf(stderr,
			    "mqbench: %s: no request got its reply: the broker said nobody is subscribed to "
			    "%s (%llu times; is the device connected?)\n",
			    bench_request_modes[m], o->pub_topic, (unsigned long long)r[m].no_responder);
			rc = 1;
		} else if (r[m].ran && r[m].done == 0) {
			char loop[512];
			fprintf(stderr, "mqbench: %s: no request got its reply (is a device answering %s?)%s\n",
			    bench_request_modes[m], o->pub_topic, loop_hint(o, loop, sizeof loop));
			rc = 1;
		}
		if (r[m].ran && f->unresponsive)
			fprintf(stderr,
			    "mqbench: %s: a broker went silent (a PINGREQ unanswered: hung, or the link went "
			    "dark): %s; what was in flight on it failed at once (connection lost), the rest "
			    "went to the other nodes\n",
			    bench_request_modes[m], f->silent_nodes);
		if (r[m].ran && (r[m].errors || f->n)) {
			char text[2048];
			bench_failures_text(f, text, sizeof text);
			fprintf(stderr, "mqbench: %s: failures by cause: %s\n", bench_request_modes[m], text);
		}
		if (r[m].ran)
			mqc_hist_free(&r[m].lat);
		bench_failures_free(f);
	}
	mosquitto_lib_cleanup();
	return rc;
}
