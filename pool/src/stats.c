/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * stats.c - what a pool can tell about itself: counters, gauges, latency histograms, the last
 * error, and error names. Any thread.
 */
#include <stdio.h>
#include <string.h>

#include "pool.h"

/* What both sides know of a struct that may grow: the caller's size against the library's. */
static void fill(void *out, size_t out_size, const void *all, size_t all_size)
{
	memcpy(out, all, out_size < all_size ? out_size : all_size);
	if (out_size > all_size)
		memset((char *)out + all_size, 0, out_size - all_size);
}

static void latency_of(const struct mqc_hist *h, struct mqp_latency *out)
{
	if (!out)
		return;
	*out = (struct mqp_latency) {
		.count = h->count,
		.p50_ns = mqc_hist_percentile(h, 50),
		.p90_ns = mqc_hist_percentile(h, 90),
		.p99_ns = mqc_hist_percentile(h, 99),
		.p999_ns = mqc_hist_percentile(h, 99.9),
		.max_ns = h->max,
	};
}

void mqp_pool_latency(mqp_pool *p, mqp_latency_kind kind, struct mqp_latency *out, size_t out_size)
{
	if (!out || !out_size)
		return;
	struct mqp_latency all = { 0 };
	const struct mqc_hist *h = !p     ? NULL
	    : kind == MQP_LATENCY_REQUEST ? &p->h_request
	    : kind == MQP_LATENCY_ACQUIRE ? &p->h_acquire
	    : kind == MQP_LATENCY_CONNECT ? &p->h_connect
	                                  : NULL;
	if (h) {
		pthread_mutex_lock(&p->report_lock);
		latency_of(h, &all);
		pthread_mutex_unlock(&p->report_lock);
	}
	fill(out, out_size, &all, sizeof all);
}

void mqp_pool_stats(mqp_pool *p, struct mqp_pool_stats *out, size_t out_size)
{
	if (!out || !out_size)
		return;
	struct mqp_pool_stats all = { 0 };
	if (p)
		all = (struct mqp_pool_stats) {
			.size = atomic_load(&p->stats.size),
			.ready = atomic_load(&p->stats.ready),
			.available = atomic_load(&p->stats.available),
			.connecting = atomic_load(&p->stats.connecting),
			.inflight = atomic_load(&p->stats.inflight),
			.queued = atomic_load(&p->stats.queued),
			.leased = atomic_load(&p->stats.leased),
			.acquires = atomic_load(&p->stats.acquires),
			.acquire_timeouts = atomic_load(&p->stats.acquire_timeouts),
			.releases = atomic_load(&p->stats.releases),
			.double_releases = atomic_load(&p->stats.double_releases),
			.stale_dropped = atomic_load(&p->stats.stale_dropped),
			.waits = atomic_load(&p->stats.waits),
			.cancels = atomic_load(&p->stats.cancels),
			.closes_idle = atomic_load(&p->stats.closes_idle),
			.closes_lifetime = atomic_load(&p->stats.closes_lifetime),
			.leaks = atomic_load(&p->stats.leaks),
			.requests = atomic_load(&p->stats.requests),
			.replies = atomic_load(&p->stats.replies),
			.timeouts = atomic_load(&p->stats.timeouts),
			.late_replies = atomic_load(&p->stats.late_replies),
			.strays = atomic_load(&p->stats.strays),
			.publishes = atomic_load(&p->stats.publishes),
			.connects_ok = atomic_load(&p->stats.connects_ok),
			.connects_failed = atomic_load(&p->stats.connects_failed),
			.connections_lost = atomic_load(&p->stats.connections_lost),
			.protocol_errors = atomic_load(&p->stats.protocol_errors),
			.v311_only = atomic_load(&p->stats.v311_only),
		};
	fill(out, out_size, &all, sizeof all);
}

unsigned mqp_pool_node_stats(
    mqp_pool *p, unsigned index, struct mqp_node_stats *out, size_t out_size)
{
	if (!p)
		return 0;
	if (out && index < p->nnodes) {
		struct pnode *n = &p->nodes[index];
		struct mqp_node_stats one = {
			.connections = atomic_load(&n->a_conns),
			.ready = atomic_load(&n->a_ready),
			.failing = atomic_load(&n->a_failing),
			.requests = atomic_load(&n->requests),
			.connects_ok = atomic_load(&n->connects_ok),
			.connects_failed = atomic_load(&n->connects_failed),
			.connections_lost = atomic_load(&n->connections_lost),
			.redirects = atomic_load(&n->redirects),
			.inflight = atomic_load(&n->a_inflight),
			.suspect = atomic_load(&n->a_suspect),
			.unresponsive_since_ms = atomic_load(&n->suspect_since_ms),
			.unresponsive = atomic_load(&n->unresponsive),
		};
		snprintf(one.where, sizeof one.where, "%s", n->where);
		pthread_mutex_lock(&p->report_lock);
		snprintf(one.last_error, sizeof one.last_error, "%s", n->last_error);
		pthread_mutex_unlock(&p->report_lock);
		fill(out, out_size, &one, sizeof one);
	}
	return p->nnodes;
}

const char *mqp_pool_last_error(mqp_pool *p, char *buf, size_t len)
{
	if (!buf || !len)
		return buf;
	if (!p) {
		snprintf(buf, len, "no pool (NULL)");
		return buf;
	}
	pthread_mutex_lock(&p->report_lock);
	snprintf(buf, len, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
	return buf;
}

const char *mqp_version(void)
{
	return MQP_VERSION_STRING;
}

const char *mqp_strerror(int err)
{
	static const char *const names[] = {
		[MQP_OK] = "success",
		[MQP_EINVAL] = "invalid argument",
		[MQP_ENOMEM] = "out of memory",
		[MQP_ETIMEDOUT] = "timed out",
		[MQP_ECLOSED] = "pool closed",
		[MQP_ECONNECT] = "cannot connect to the broker",
		[MQP_ECONNLOST] = "connection lost",
		[MQP_EDENIED] = "refused by the broker",
		[MQP_ETLS] = "TLS setup failed",
		[MQP_ETOOBIG] = "too large",
		[MQP_EDEADLK] = "blocking call from the pool's own thread",
		[MQP_ERELEASED] = "lease already released",
		[MQP_EBUSY] = "another receive is waiting on this lease",
		[MQP_ECANCELED] = "cancelled",
		[MQP_EEXHAUSTED] = "no connection free before the deadline (not sent)",
		[MQP_EREFUSED] = "the broker refused the connection",
		[MQP_ENORESPONDER] = "nobody is subscribed to the command's topic",
	};
	if (err < 0 || (size_t)err >= sizeof names / sizeof names[0] || !names[err])
		return "unknown error";
	return names[err];
}
