/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * request_loop.c - `mqbench request --mode loop`: libmqttpool on a libuv loop (mqttpool_uv.h),
 * one thread. Requests start from the loop's thread and complete on it, so no request crosses a
 * thread: what is left is the pool's own work and the network.
 *
 * --concurrency is the number of requests in flight at most. Without --rate each completion
 * starts the next one at once (closed loop); with --rate every request has an intended time on
 * the schedule and its latency counts from it, also when it had to wait for a free place.
 * With --protocol 3.1.1 each place is a device of its own ({worker} in --topic is the place's
 * number), answered on its reply topic and matched by the request id.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "mqbench.h"
#include "mqc_clock.h"
#include "mqttpool_uv.h"

struct loop_run {
	const struct bench_opts *o;
	unsigned *free_ids; /* places not in flight (their device's number) */
	unsigned nfree;
	uint64_t seq;
	uv_timer_t progress; /* a line a second */
	uv_timer_t retry;    /* after a connection failure: the next start 10 ms later, no hot loop */
	int tfd;             /* open loop: a timerfd at the next slot (libuv's timers count in ms) */
	uv_poll_t slots;
	mqp_pool *pool;
	uint64_t t0, end, next; /* next: the next slot's number (open loop) */
	unsigned inflight;
	struct bench_loop_result *r;
	uint64_t last_done;
	bool stopping;
};

struct slot {
	struct loop_run *run;
	uint64_t intended;
	unsigned id;      /* its place */
	char payload[64]; /* its request id */
};

static void start_due(struct loop_run *lr);

static void stop(struct loop_run *lr)
{
	if (lr->stopping)
		return;
	lr->stopping = true;
	if (lr->r->cost)
		bench_cost_stop(lr->r->cost); /* the run is over: its teardown is not its cost */
	uv_close((uv_handle_t *)&lr->progress, NULL);
	uv_close((uv_handle_t *)&lr->retry, NULL);
	if (lr->tfd >= 0)
		uv_close((uv_handle_t *)&lr->slots, NULL);
	bench_failures_nodes(lr->r->failures, lr->pool);
	mqp_pool_destroy(lr->pool); /* from a callback: when its run ends */
}

static void on_retry(uv_timer_t *h)
{
	start_due(h->data);
}

static void on_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)reply;
	struct slot *s = userdata;
	struct loop_run *lr = s->run;
	uint64_t now = mqc_now_ns();
	lr->inflight--;
	lr->free_ids[lr->nfree++] = s->id;
	struct bench_failures *f = lr->r->failures;
	if (result == MQP_OK) {
		mqc_hist_record(&lr->r->lat, now - s->intended);
		lr->r->done++;
		bench_failures_ok(f, now);
	} else if (result == MQP_ETIMEDOUT) {
		mqc_hist_record(&lr->r->lat, now - s->intended); /* never vanishes from the tail */
		lr->r->timeouts++;
		bench_failures_ok(f, now);
	} else if (result == MQP_ENORESPONDER) { /* an answer, from the broker: not a failure */
		lr->r->no_responder++;
		bench_failures_ok(f, now);
	} else if (result != MQP_ECLOSED) {
		lr->r->errors++;
		bool connection = result == MQP_ECONNECT || result == MQP_EREFUSED;
		char last[512];
		mqp_pool_last_error(lr->pool, last, sizeof last);
		const char *cause = connection && last[0] ? last : mqp_strerror(result);
		bench_failure(f, cause, connection, now, lr->o->fail_after_ns);
	}
	free(s);
	if (atomic_load(&f->give_up)) { /* --fail-after: nothing but connection failures */
		if (lr->inflight == 0)
			stop(lr);
		return;
	}
	if (now >= lr->end || lr->stopping) {
		if (lr->inflight == 0)
			stop(lr);
		return;
	}
	if (result == MQP_ECONNECT || result == MQP_EREFUSED) {
		if (!uv_is_active((uv_handle_t *)&lr->retry))
			uv_timer_start(&lr->retry, on_retry, 10, 0);
		return;
	}
	start_due(lr);
}

static bool start_one(struct loop_run *lr, uint64_t intended)
{
	if (!lr->nfree)
		return false;
	struct slot *s = malloc(sizeof *s);
	if (!s)
		return false;
	*s = (struct slot) { .run = lr, .intended = intended, .id = lr->free_ids[--lr->nfree] };
	const struct bench_opts *o = lr->o;
	int plen = snprintf(
	    s->payload, sizeof s->payload, "bench-loop-%u-%llu", s->id, (unsigned long long)lr->seq++);
	unsigned timeout_ms = (unsigned)(o->timeout_ns / MQC_NS_PER_MS);
	timeout_ms = timeout_ms ? timeout_ms : 1;
	int rc;
	if (o->legacy) {
		char topic[256], reply[320];
		bench_legacy_topics(o, s->id, topic, sizeof topic, reply, sizeof reply);
		rc = mqp_pool_request_legacy_async(lr->pool, topic, s->payload, (size_t)plen, o->net.qos,
		    reply, bench_legacy_match, s->payload, timeout_ms, on_reply, s, NULL);
	} else {
		rc = mqp_pool_request_async(lr->pool, o->pub_topic, s->payload, (size_t)plen, o->net.qos,
		    timeout_ms, on_reply, s, NULL);
	}
	if (rc != MQP_OK) {
		lr->free_ids[lr->nfree++] = s->id;
		free(s);
		lr->r->errors++;
		return false;
	}
	lr->inflight++;
	return true;
}

/* Start what is due, up to --concurrency in flight; arm the timer for the next slot. */
static void start_due(struct loop_run *lr)
{
	const struct bench_opts *o = lr->o;
	uint64_t now = mqc_now_ns();
	if (now >= lr->end) {
		if (lr->inflight == 0)
			stop(lr); /* the run is over and nothing is left: at once, not at the next tick */
		return;
	}
	if (o->rate <= 0) { /* closed loop: keep the places full */
		while (lr->inflight < o->concurrency && start_one(lr, now))
			;
		return;
	}
	for (;;) {
		uint64_t t = lr->t0 + (uint64_t)((double)lr->next * 1e9 / o->rate);
		if (t >= lr->end) { /* the schedule is spent */
			if (lr->inflight == 0)
				stop(lr);
			return;
		}
		if (t > now) { /* the timerfd starts it, to the nanosecond */
			struct itimerspec at = { .it_value = mqc_ns_to_ts(t) };
			timerfd_settime(lr->tfd, TFD_TIMER_ABSTIME, &at, NULL);
			return;
		}
		if (lr->inflight >= o->concurrency)
			return; /* a completion starts it; its latency counts from t */
		lr->next++;
		if (!start_one(lr, t))
			return;
	}
}

static void on_progress(uv_timer_t *h)
{
	struct loop_run *lr = h->data;
	uint64_t now = mqc_now_ns();
	fprintf(stderr,
	    "%6.1fs  loop: last 1s: %llu requests/s | since start: %llu answered, %llu timed out, "
	    "%llu failed\n",
	    (double)(now - lr->t0) / 1e9, (unsigned long long)(lr->r->done - lr->last_done),
	    (unsigned long long)lr->r->done, (unsigned long long)lr->r->timeouts,
	    (unsigned long long)lr->r->errors);
	lr->last_done = lr->r->done;
	start_due(lr); /* refills places a failed start left empty; ends a finished run */
}

static void on_slot(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	struct loop_run *lr = h->data;
	uint64_t expirations;
	ssize_t got = read(lr->tfd, &expirations, sizeof expirations);
	(void)got;
	start_due(lr);
}

int bench_request_loop(
    const struct bench_opts *o, const struct mqp_pool_options *po, struct bench_loop_result *r)
{
	uv_loop_t loop;
	if (uv_loop_init(&loop) != 0) {
		fprintf(stderr, "mqbench: loop: uv_loop_init failed\n");
		return -1;
	}
	struct loop_run lr = { .o = o, .r = r, .tfd = -1 };
	lr.free_ids = calloc(o->concurrency, sizeof *lr.free_ids);
	if (!lr.free_ids) {
		fprintf(stderr, "mqbench: loop: out of memory\n");
		uv_loop_close(&loop);
		return -1;
	}
	for (unsigned i = 0; i < o->concurrency; i++)
		lr.free_ids[lr.nfree++] = o->concurrency - 1 - i; /* place 0 first */
	char err[256];
	int rc = mqp_uv_pool_new(&loop, o->net.broker, po, &lr.pool, err, sizeof err);
	if (rc != MQP_OK) {
		fprintf(stderr, "mqbench: loop: pool: %s: %s\n", mqp_strerror(rc), err);
		uv_run(&loop, UV_RUN_DEFAULT);
		uv_loop_close(&loop);
		free(lr.free_ids);
		return -1;
	}
	/* Warm, as the pool mode: connections exist before the first request. */
	uint64_t warm = mqc_now_ns() + 5 * MQC_NS_PER_S;
	struct mqp_pool_stats st;
	do {
		uv_run(&loop, UV_RUN_NOWAIT);
		mqp_pool_stats(lr.pool, &st, sizeof st);
		if (st.ready < po->min_size)
			nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	} while (
	    st.ready < po->min_size && !(st.connects_failed && !st.connects_ok) && mqc_now_ns() < warm);
	uv_timer_init(&loop, &lr.progress);
	lr.progress.data = &lr;
	uv_timer_init(&loop, &lr.retry);
	lr.retry.data = &lr;
	if (r->cost)
		bench_cost_start(r->cost);
	lr.t0 = mqc_now_ns();
	lr.end = lr.t0 + o->duration_ns;
	if (r->failures)
		bench_failures_ok(r->failures, lr.t0); /* --fail-after counts from here */
	uv_timer_start(&lr.progress, on_progress, 1000, 1000);
	lr.tfd = -1;
	if (o->rate > 0) {
		lr.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (lr.tfd < 0 || uv_poll_init(&loop, &lr.slots, lr.tfd) != 0) {
			perror("mqbench: loop: timerfd");
			if (lr.tfd >= 0)
				close(lr.tfd);
			lr.tfd = -1;
			stop(&lr);
			uv_run(&loop, UV_RUN_DEFAULT);
			uv_loop_close(&loop);
			return -1;
		}
		lr.slots.data = &lr;
		uv_poll_start(&lr.slots, UV_READABLE, on_slot);
	}
	start_due(&lr);
	uv_run(&loop, UV_RUN_DEFAULT); /* until stop(): the pool is destroyed, the timers closed */
	r->elapsed_ns = mqc_now_ns() - lr.t0;
	if (lr.tfd >= 0)
		close(lr.tfd);
	uv_loop_close(&loop);
	free(lr.free_ids);
	return 0;
}
