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
 * Call mqp_event_pool_new on the base's thread: it is the pool's thread from then on. Each of the
 * pool's descriptors (its sockets, and the eventfd other threads' calls arrive on) is a
 * persistent event of the base's own (options.loop_watch: no epoll inside libevent's), its
 * deadlines one timer event (activated at once for "at the end of this turn").
 */
#ifndef MQTTPOOL_EVENT_H
#define MQTTPOOL_EVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "mqttpool.h"

struct mqp_event;

/* One watched descriptor. */
struct mqp_event_watch {
	struct event *ev;
	struct mqp_event *a;
	void *tag;
	int fd;
	unsigned events;
	struct mqp_event_watch *next;
};

struct mqp_event {
	struct event_base *base;
	struct event *timer;
	struct mqp_loop hooks;
	mqp_pool *pool;
	struct mqp_event_watch *watches;
};

static void mqp_event__run(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	mqp_pool_process(((struct mqp_event *)arg)->pool); /* may destroy the pool and free arg */
}

static void mqp_event__io(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	struct mqp_event_watch *w = (struct mqp_event_watch *)arg;
	unsigned ready = (what & EV_READ ? MQP_IO_READ : 0u) | (what & EV_WRITE ? MQP_IO_WRITE : 0u);
	mqp_pool_io(w->a->pool, w->tag, ready); /* may destroy the pool: w is not used after */
}

static void mqp_event__schedule(void *data, long timeout_ms)
{
	struct mqp_event *a = (struct mqp_event *)data;
	if (timeout_ms < 0) {
		evtimer_del(a->timer);
		return;
	}
	if (timeout_ms == 0) { /* this turn, after the events already active */
		evtimer_del(a->timer);
		event_active(a->timer, EV_TIMEOUT, 0);
		return;
	}
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	evtimer_add(a->timer, &tv);
}

static void mqp_event__unwatch(struct mqp_event_watch **pp)
{
	struct mqp_event_watch *w = *pp;
	*pp = w->next;
	if (w->ev)
		event_free(w->ev); /* deleted first: before the pool closes the descriptor */
	free(w);
}

static void mqp_event__watch(void *data, int fd, unsigned events, void *tag)
{
	struct mqp_event *a = (struct mqp_event *)data;
	struct mqp_event_watch **pp = &a->watches;
	while (*pp && (*pp)->fd != fd)
		pp = &(*pp)->next;
	if (events == 0) {
		if (*pp)
			mqp_event__unwatch(pp);
		return;
	}
	struct mqp_event_watch *w = *pp;
	if (w && w->events == events && w->tag == tag)
		return;
	if (w) { /* other events: libevent takes them from a new event */
		if (w->ev)
			event_free(w->ev);
	} else if ((w = (struct mqp_event_watch *)calloc(1, sizeof *w)) != NULL) {
		w->a = a;
		w->fd = fd;
		w->next = a->watches;
		a->watches = w;
	} else {
		return; /* out of memory: the descriptor's calls still end at their deadlines */
	}
	w->tag = tag;
	w->events = events;
	short what = (short)(EV_PERSIST | (events & MQP_IO_READ ? EV_READ : 0)
	    | (events & MQP_IO_WRITE ? EV_WRITE : 0));
	/* Out of memory here leaves the descriptor unwatched: its calls still end at their
	 * deadlines, which the pool's timer keeps. */
	w->ev = event_new(a->base, fd, what, mqp_event__io, w);
	if (w->ev)
		event_add(w->ev, NULL);
}

static void mqp_event__cleanup(void *data)
{
	struct mqp_event *a = (struct mqp_event *)data;
	while (a->watches) /* the pool unwatched all it had; nothing should be left */
		mqp_event__unwatch(&a->watches);
	event_free(a->timer);
	free(a);
}

/**
 * mqp_pool_new on base (options may be NULL; options->loop and loop_watch are set by the
 * adapter).
 * @return as mqp_pool_new; MQP_ENOMEM when libevent refuses the timer.
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
	a->base = base;
	a->hooks.schedule = mqp_event__schedule;
	a->hooks.cleanup = mqp_event__cleanup;
	a->hooks.data = a;
	o.loop = &a->hooks;
	o.loop_watch = mqp_event__watch;
	mqp_err rc = mqp_pool_new(broker_url, &o, &a->pool, err, err_len);
	if (rc != MQP_OK) { /* no cleanup call */
		while (a->watches)
			mqp_event__unwatch(&a->watches);
		event_free(a->timer);
		free(a);
		return rc;
	}
	*out = a->pool;
	return MQP_OK;
}

#endif
