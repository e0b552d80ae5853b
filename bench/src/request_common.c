/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * request_common.c - what the request modes share, below request.c (naive, pool, dedicated) and
 * request_loop.c (the pool on a libuv loop): failures counted by cause, and the legacy model's
 * topics and reply match.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"
#include "mqc_template.h"
#include "mqttpool.h"

/* --- failures by cause ------------------------------------------------------------------ */

void bench_failures_init(struct bench_failures *f, const char *mode, uint64_t now)
{
	*f = (struct bench_failures) { .mode = mode };
	pthread_mutex_init(&f->lock, NULL);
	atomic_store(&f->last_ok_ns, now);
}

void bench_failures_free(struct bench_failures *f)
{
	pthread_mutex_destroy(&f->lock);
}

void bench_failures_ok(struct bench_failures *f, uint64_t now)
{
	atomic_store_explicit(&f->last_ok_ns, now, memory_order_relaxed);
}

void bench_failure(struct bench_failures *f, const char *cause, bool connection, uint64_t now,
    uint64_t fail_after_ns)
{
	/* Compared as kept: a cause longer than the slot is the same cause every time, said once. */
	char kept[sizeof f->c[0].cause];
	snprintf(kept, sizeof kept, "%s", cause);
	pthread_mutex_lock(&f->lock);
	unsigned i = 0;
	while (i < f->n && strcmp(f->c[i].cause, kept) != 0)
		i++;
	if (i == f->n && f->n < BENCH_CAUSES) { /* a new cause: said once, now */
		memcpy(f->c[i].cause, kept, sizeof kept);
		f->c[i].connection = connection;
		f->n++;
		fprintf(stderr, "mqbench: %s: %s\n", f->mode, kept);
	}
	if (i < f->n)
		f->c[i].count++;
	else
		f->others++;
	if (connection) {
		f->connection++;
		if (now - atomic_load(&f->last_ok_ns) >= fail_after_ns && !atomic_load(&f->give_up)) {
			snprintf(f->give_up_cause, sizeof f->give_up_cause, "%s", cause);
			atomic_store(&f->give_up, true);
		}
	} else {
		bench_failures_ok(f, now); /* the broker took the connection */
	}
	pthread_mutex_unlock(&f->lock);
}

void bench_failures_nodes(struct bench_failures *f, struct mqp_pool *pool)
{
	unsigned nodes = mqp_pool_node_stats(pool, 0, NULL, 0);
	size_t at = 0;
	for (unsigned k = 0; k < nodes; k++) {
		struct mqp_node_stats n;
		if (mqp_pool_node_stats(pool, k, &n, sizeof n) <= k || !n.unresponsive)
			continue;
		f->unresponsive += n.unresponsive;
		if (at < sizeof f->silent_nodes)
			at += (size_t)snprintf(f->silent_nodes + at, sizeof f->silent_nodes - at, "%s%s (%llu)",
			    at ? ", " : "", n.where, (unsigned long long)n.unresponsive);
	}
}

void bench_failures_text(struct bench_failures *f, char *out, size_t len)
{
	pthread_mutex_lock(&f->lock);
	size_t n = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < f->n && n < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%s (%llu)", i ? "; " : "", f->c[i].cause,
		    (unsigned long long)f->c[i].count);
	if (f->others && n < len)
		snprintf(out + n, len - n, "; others (%llu)", (unsigned long long)f->others);
	pthread_mutex_unlock(&f->lock);
}

/* --- the legacy model -------------------------------------------------------------------- */

static int expand(const char *tpl, const char *key, const char *value, char *out, size_t len)
{
	const char *at = strstr(tpl, key);
	int n = at ? snprintf(out, len, "%.*s%s%s", (int)(at - tpl), tpl, value, at + strlen(key))
	           : snprintf(out, len, "%s", tpl);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bench_legacy_topics(
    const struct bench_opts *o, unsigned id, char *topic, size_t tlen, char *reply, size_t rlen)
{
	char n[16];
	snprintf(n, sizeof n, "%u", id);
	if (expand(o->pub_topic, "{worker}", n, topic, tlen) != 0)
		return -1;
	return o->reply_template && mqc_template_expand(o->reply_template, topic, reply, rlen) < 0 ? -1
	                                                                                           : 0;
}

int bench_legacy_match(void *userdata, const struct mqp_message *m)
{
	const char *id = userdata;
	return m->len == strlen(id) && memcmp(m->payload, id, m->len) == 0;
}
