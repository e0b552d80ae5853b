/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqttpool_event.h - a pool on a libevent event_base. Header only: include it where the base
 * lives and link libevent (pkg-config libevent).
 *
 *   struct event_base *base = event_base_new();
 *   mqp_pool *pool;
 *   char err[256];
 *   if (mqp_event_pool_new(base, "mqtt://broker:1883", NULL, &pool, err, sizeof err) != MQP_OK)
 *       ...
 *   mqp_pool_request_async(pool, topic, body, len, 1, 5000, on_reply, ctx, &ticket);
 *   ...
 *   mqp_pool_destroy(pool);  (on the base's thread)
 *
 * Call mqp_event_pool_new on the base's thread: it is the pool's thread from then on. The
 * pool's descriptor is one persistent read event, its deadlines one timer event.
 */
#ifndef MQTTPOOL_EVENT_H
#define MQTTPOOL_EVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "mqttpool.h"

struct mqp_event {
	struct event *read, *timer;
	struct mqp_loop hooks;
	mqp_pool *pool;
};

static void mqp_event__run(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	mqp_pool_process(((struct mqp_event *)arg)->pool); /* may destroy the pool and free arg */
}

static void mqp_event__schedule(void *data, long timeout_ms)
{
	struct mqp_event *a = (struct mqp_event *)data;
	if (timeout_ms < 0) {
		evtimer_del(a->timer);
		return;
	}
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	evtimer_add(a->timer, &tv);
}

static void mqp_event__cleanup(void *data)
{
	struct mqp_event *a = (struct mqp_event *)data;
	if (a->read)
		event_free(a->read);
	event_free(a->timer);
	free(a);
}

/**
 * mqp_pool_new on base (options may be NULL; options->loop is set by the adapter).
 * @return as mqp_pool_new; MQP_ENOMEM when libevent refuses an event.
 */
static inline mqp_err mqp_event_pool_new(struct event_base *base, const char *broker_url,
    const struct mqp_pool_options *options, mqp_pool **out, char *err, size_t err_len)
{
	*out = NULL;
	struct mqp_event *a = (struct mqp_event *)calloc(1, sizeof *a);
	if (!a || !(a->timer = evtimer_new(base, mqp_event__run, a))) {
		free(a);
		return MQP_ENOMEM;
	}
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	if (options)
		o = *options;
	a->hooks.schedule = mqp_event__schedule;
	a->hooks.cleanup = mqp_event__cleanup;
	a->hooks.data = a;
	o.loop = &a->hooks;
	mqp_err rc = mqp_pool_new(broker_url, &o, &a->pool, err, err_len);
	if (rc != MQP_OK) { /* no cleanup call */
		event_free(a->timer);
		free(a);
		return rc;
	}
	a->read = event_new(base, mqp_pool_fd(a->pool), EV_READ | EV_PERSIST, mqp_event__run, a);
	if (!a->read || event_add(a->read, NULL) != 0) {
		mqp_pool_destroy(a->pool); /* cleanup frees a */
		return MQP_ENOMEM;
	}
	*out = a->pool;
	return MQP_OK;
}

#endif
