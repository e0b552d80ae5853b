/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * slow.c - the slowest subscribers of a window and the clients furthest behind, and their two
 * renderings.
 *
 * The broker thread ranks (probe_slow__rank) and publishes (probe_slow__publish, a trylock: it
 * never waits); the HTTP process and the $SYS document render the published view under the lock
 * (process-shared, robust, and taken with a deadline: probe_lock__*).
 * Bounded everywhere: at most PROBE_SLOW_TOP_MAX clients by name, each id at most
 * PROBE_SLOW_ID_MAX bytes, every other client folded into one "rest".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "probe.h"

static void merge(struct probe_slow_stats *into, const struct probe_slow_stats *s)
{
	if (s->max_ns > into->max_ns)
		into->max_ns = s->max_ns;
	into->sum_ns += s->sum_ns;
	into->deliveries += s->deliveries;
}

/* A copy of id cut to PROBE_SLOW_ID_MAX bytes, never inside a UTF-8 sequence. */
static void copy_id(char *out, const char *id)
{
	size_t n = strlen(id);
	if (n > PROBE_SLOW_ID_MAX) {
		n = PROBE_SLOW_ID_MAX;
		while (n > 0 && ((unsigned char)id[n] & 0xC0) == 0x80)
			n--;
	}
	memcpy(out, id, n);
	out[n] = '\0';
}

/* "h:" and 16 hex digits: a name for a client that does not reveal its id (hash.c). */
static void hashed_id(char out[PROBE_SLOW_ID_MAX + 1], const uint64_t key[2], const char *id)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t h = probe_hash__siphash(key, id, strlen(id));
	out[0] = 'h';
	out[1] = ':';
	for (int i = 0; i < 16; i++)
		out[2 + i] = hex[(h >> (60 - 4 * i)) & 0xf];
	out[18] = '\0';
}

void probe_slow__rank(struct probe_slow_view *view, const struct probe_slow *slow,
    const char *client_id, const struct probe_slow_stats *stats)
{
	unsigned top = slow->top;
	uint64_t threshold_ns = slow->threshold_ns;
	if (stats->deliveries == 0)
		return;
	if (stats->max_ns < threshold_ns) {
		merge(&view->rest, stats);
		return;
	}
	view->over++;
	unsigned at = view->n; /* where it goes: after every slower one */
	while (at > 0 && view->top[at - 1].stats.max_ns < stats->max_ns)
		at--;
	if (at == top) { /* slower ones fill the list */
		merge(&view->rest, stats);
		return;
	}
	if (view->n == top) /* the last one leaves the list for the rest */
		merge(&view->rest, &view->top[--view->n].stats);
	memmove(&view->top[at + 1], &view->top[at], (view->n - at) * sizeof view->top[0]);
	if (slow->hide_ids)
		hashed_id(view->top[at].client_id, slow->id_key, client_id ? client_id : "");
	else
		copy_id(view->top[at].client_id, client_id ? client_id : "");
	view->top[at].stats = *stats;
	view->n++;
}

int probe_lock__init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc = pthread_mutexattr_init(&a);
	if (rc == 0)
		rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (rc == 0)
		rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (rc == 0)
		rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return rc;
}

bool probe_lock__take(pthread_mutex_t *m, unsigned timeout_ms)
{
	int rc;
	if (timeout_ms == 0) {
		rc = pthread_mutex_trylock(m);
	} else {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until); /* timedlock's clock */
		until.tv_sec += timeout_ms / 1000;
		until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		rc = pthread_mutex_timedlock(m, &until); /* ThreadSanitizer knows it, not clocklock */
	}
	if (rc == EOWNERDEAD) /* its holder died reading: the view is whole */
		rc = pthread_mutex_consistent(m);
	return rc == 0;
}

bool probe_slow__publish(struct probe_slow *slow, const struct probe_slow_view *view)
{
	if (!probe_lock__take(&slow->lock, 0))
		return false;
	slow->view.over = view->over;
	slow->view.n = view->n;
	slow->view.rest = view->rest;
	memcpy(slow->view.top, view->top, view->n * sizeof view->top[0]);
	pthread_mutex_unlock(&slow->lock);
	return true;
}

static double seconds(uint64_t ns)
{
	return (double)ns / 1e9;
}

static double mean_seconds(const struct probe_slow_stats *s)
{
	return s->deliveries ? seconds(s->sum_ns) / (double)s->deliveries : 0;
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void label_value(struct probe_buf *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			probe_buf__printf(b, "\\%c", *v);
		else if (*v == '\n')
			probe_buf__printf(b, "\\n");
		else
			probe_buf__printf(b, "%c", *v);
	}
}

/* A JSON string's contents: quote, backslash and control characters escaped. */
static void json_string(struct probe_buf *b, const char *v)
{
	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;
		if (c == '\\' || c == '"')
			probe_buf__printf(b, "\\%c", c);
		else if (c < 0x20)
			probe_buf__printf(b, "\\u%04x", c);
		else
			probe_buf__printf(b, "%c", c);
	}
}

static void per_client(struct probe_buf *b, const struct probe_slow_view *v, const char *name,
    const char *type, const char *help, int what)
{
	probe_buf__printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (unsigned i = 0; i < v->n; i++) {
		const struct probe_slow_stats *s = &v->top[i].stats;
		probe_buf__printf(b, "%s{client_id=\"", name);
		label_value(b, v->top[i].client_id);
		if (what == 0)
			probe_buf__printf(b, "\"} %.9f\n", seconds(s->max_ns));
		else if (what == 1)
			probe_buf__printf(b, "\"} %.9f\n", mean_seconds(s));
		else
			probe_buf__printf(b, "\"} %llu\n", (unsigned long long)s->deliveries);
	}
}

static void gauge(struct probe_buf *b, const char *name, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void gauge(struct probe_buf *b, const char *name, const char *help, const char *fmt, ...)
{
	char value[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(value, sizeof value, fmt, ap);
	va_end(ap);
	probe_buf__printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, value);
}

void probe_slow__render_prometheus(struct probe_slow *slow, struct probe_buf *b)
{
	if (!slow || !atomic_load(&slow->enabled))
		return;
	if (!probe_lock__take(&slow->lock, PROBE_READ_LOCK_MS))
		return;
	const struct probe_slow_view *v = &slow->view;
	gauge(b, "mosquitto_slow_subscriber_window_seconds",
	    "Length of the window the slow-subscriber figures cover (plugin_opt_slow_window).", "%u",
	    slow->window_s);
	gauge(b, "mosquitto_slow_subscriber_threshold_seconds",
	    "A subscriber is slow when a stamped message waited this long inside the broker for it "
	    "(plugin_opt_slow_threshold_ms).",
	    "%.3f", seconds(slow->threshold_ns));
	gauge(b, "mosquitto_slow_subscribers",
	    "Connected clients for which a stamped message waited at least the threshold inside the "
	    "broker in the last window (mosquitto 2.1: receive to MESSAGE_OUT), listed or not.",
	    "%llu", (unsigned long long)v->over);
	per_client(b, v, "mosquitto_slow_subscriber_hold_max_seconds", "gauge",
	    "The K slowest subscribers of the last window (plugin_opt_slow_top): the longest a "
	    "stamped message waited inside the broker for each.",
	    0);
	per_client(b, v, "mosquitto_slow_subscriber_hold_mean_seconds", "gauge",
	    "The same subscribers: the mean wait of the stamped messages sent to each in the window.",
	    1);
	per_client(b, v, "mosquitto_slow_subscriber_deliveries", "gauge",
	    "The same subscribers: stamped messages sent to each in the window.", 2);
	gauge(b, "mosquitto_slow_subscriber_rest_hold_max_seconds",
	    "Every other client sent stamped messages in the last window, together: the longest "
	    "wait.",
	    "%.9f", seconds(v->rest.max_ns));
	gauge(b, "mosquitto_slow_subscriber_rest_deliveries",
	    "Every other client, together: stamped messages sent in the last window.", "%llu",
	    (unsigned long long)v->rest.deliveries);
	pthread_mutex_unlock(&slow->lock);
}

void probe_slow__render_json(struct probe_slow *slow, struct probe_buf *b)
{
	if (!slow || !atomic_load(&slow->enabled))
		return;
	if (!probe_lock__take(&slow->lock, PROBE_READ_LOCK_MS))
		return;
	const struct probe_slow_view *v = &slow->view;
	probe_buf__printf(b,
	    ",\"slow_subscribers\":{\"window_seconds\":%u,\"threshold_seconds\":%.3f,"
	    "\"over_threshold\":%llu,\"top\":[",
	    slow->window_s, seconds(slow->threshold_ns), (unsigned long long)v->over);
	for (unsigned i = 0; i < v->n; i++) {
		const struct probe_slow_stats *s = &v->top[i].stats;
		probe_buf__printf(b, "%s{\"client_id\":\"", i ? "," : "");
		json_string(b, v->top[i].client_id);
		probe_buf__printf(b,
		    "\",\"hold_max_seconds\":%.9f,\"hold_mean_seconds\":%.9f,\"deliveries\":%llu}",
		    seconds(s->max_ns), mean_seconds(s), (unsigned long long)s->deliveries);
	}
	probe_buf__printf(b, "],\"rest\":{\"hold_max_seconds\":%.9f,\"deliveries\":%llu}}",
	    seconds(v->rest.max_ns), (unsigned long long)v->rest.deliveries);
	pthread_mutex_unlock(&slow->lock);
}

/* --- clients falling behind ------------------------------------------------------------- */

static void backlog_merge(struct probe_backlog_stats *into, const struct probe_backlog_stats *s)
{
	into->queued += s->queued;
	into->queued_bytes += s->queued_bytes;
	into->dropped += s->dropped;
	into->dropped_window += s->dropped_window;
	into->unsent += s->unsent;
}

/* Larger first: the queue, then the drops of the window. */
static bool behind(const struct probe_backlog_stats *a, const struct probe_backlog_stats *b)
{
	return a->queued != b->queued ? a->queued > b->queued : a->dropped_window > b->dropped_window;
}

void probe_backlog__rank(struct probe_backlog_view *view, const struct probe_backlog *b,
    const char *client_id, const struct probe_backlog_stats *stats)
{
	if (stats->queued < b->threshold && stats->dropped_window == 0) {
		backlog_merge(&view->rest, stats);
		return;
	}
	view->over++;
	unsigned at = view->n;
	while (at > 0 && behind(stats, &view->top[at - 1].stats))
		at--;
	if (at == b->top) {
		backlog_merge(&view->rest, stats);
		return;
	}
	if (view->n == b->top)
		backlog_merge(&view->rest, &view->top[--view->n].stats);
	memmove(&view->top[at + 1], &view->top[at], (view->n - at) * sizeof view->top[0]);
	if (b->hide_ids)
		hashed_id(view->top[at].client_id, b->id_key, client_id ? client_id : "");
	else
		copy_id(view->top[at].client_id, client_id ? client_id : "");
	view->top[at].stats = *stats;
	view->n++;
}

bool probe_backlog__publish(struct probe_backlog *b, const struct probe_backlog_view *view)
{
	if (!probe_lock__take(&b->lock, 0))
		return false;
	b->view.over = view->over;
	b->view.n = view->n;
	b->view.rest = view->rest;
	memcpy(b->view.top, view->top, view->n * sizeof view->top[0]);
	pthread_mutex_unlock(&b->lock);
	return true;
}

enum { BL_QUEUED, BL_QUEUED_BYTES, BL_DROPPED, BL_UNSENT };

static uint64_t backlog_value(const struct probe_backlog_stats *s, int what)
{
	return what == BL_QUEUED      ? s->queued
	    : what == BL_QUEUED_BYTES ? s->queued_bytes
	    : what == BL_DROPPED      ? s->dropped
	                              : s->unsent;
}

static void backlog_family(struct probe_buf *b, const struct probe_backlog_view *v,
    const char *name, const char *help, int what)
{
	probe_buf__printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
	for (unsigned i = 0; i < v->n; i++) {
		probe_buf__printf(b, "%s{client_id=\"", name);
		label_value(b, v->top[i].client_id);
		probe_buf__printf(b, "\"%s} %llu\n", what == BL_DROPPED ? ",reason=\"queue_full\"" : "",
		    (unsigned long long)backlog_value(&v->top[i].stats, what));
	}
}

void probe_backlog__render_prometheus(struct probe_backlog *bl, struct probe_buf *b)
{
	if (!bl || !atomic_load(&bl->enabled))
		return;
	if (!probe_lock__take(&bl->lock, PROBE_READ_LOCK_MS))
		return;
	const struct probe_backlog_view *v = &bl->view;
	gauge(b, "mosquitto_backlog_queue_limit_messages",
	    "The queue a client may have before the broker drops for it, as the probe reads the "
	    "broker's configuration: max_queued_messages plus max_inflight_messages (0: no limit).",
	    "%llu", (unsigned long long)bl->limit);
	gauge(b, "mosquitto_backlog_clients",
	    "Connected clients with at least plugin_opt_backlog_threshold messages queued, or a "
	    "message dropped for them, in the last window (plugin_opt_slow_window), listed or not.",
	    "%llu", (unsigned long long)v->over);
	backlog_family(b, v, "mosquitto_client_queued_messages",
	    "The K clients furthest behind (plugin_opt_backlog_top): messages queued for each "
	    "(estimated from routed, sent and the broker's queue limit).",
	    BL_QUEUED);
	backlog_family(b, v, "mosquitto_client_queued_bytes",
	    "The same clients: payload bytes of the messages queued for each (estimated).",
	    BL_QUEUED_BYTES);
	backlog_family(b, v, "mosquitto_client_dropped_messages",
	    "The same clients: messages dropped for each since it connected, by reason (queue_full: "
	    "estimated; expiry and size limits are not visible to plugins).",
	    BL_DROPPED);
	backlog_family(b, v, "mosquitto_client_unsent_messages",
	    "The same clients: messages routed to each and not sent since it connected (queued plus "
	    "dropped: counted, not estimated).",
	    BL_UNSENT);
	gauge(b, "mosquitto_backlog_rest_queued_messages",
	    "Every other connected client, together: messages queued (estimated).", "%llu",
	    (unsigned long long)v->rest.queued);
	gauge(b, "mosquitto_backlog_rest_dropped_messages",
	    "Every other connected client, together: messages dropped since each connected.", "%llu",
	    (unsigned long long)v->rest.dropped);
	pthread_mutex_unlock(&bl->lock);
}

void probe_backlog__render_json(struct probe_backlog *bl, struct probe_buf *b)
{
	if (!bl || !atomic_load(&bl->enabled))
		return;
	if (!probe_lock__take(&bl->lock, PROBE_READ_LOCK_MS))
		return;
	const struct probe_backlog_view *v = &bl->view;
	probe_buf__printf(b,
	    ",\"backlog\":{\"window_seconds\":%u,\"threshold_messages\":%llu,"
	    "\"queue_limit_messages\":%llu,\"clients\":%llu,\"top\":[",
	    bl->window_s, (unsigned long long)bl->threshold, (unsigned long long)bl->limit,
	    (unsigned long long)v->over);
	for (unsigned i = 0; i < v->n; i++) {
		const struct probe_backlog_stats *s = &v->top[i].stats;
		probe_buf__printf(b, "%s{\"client_id\":\"", i ? "," : "");
		json_string(b, v->top[i].client_id);
		probe_buf__printf(b,
		    "\",\"queued_messages\":%llu,\"queued_bytes\":%llu,\"dropped\":{\"queue_full\":%llu},"
		    "\"unsent_messages\":%llu}",
		    (unsigned long long)s->queued, (unsigned long long)s->queued_bytes,
		    (unsigned long long)s->dropped, (unsigned long long)s->unsent);
	}
	probe_buf__printf(b, "],\"rest\":{\"queued_messages\":%llu,\"dropped\":{\"queue_full\":%llu}}}",
	    (unsigned long long)v->rest.queued, (unsigned long long)v->rest.dropped);
	pthread_mutex_unlock(&bl->lock);
}
