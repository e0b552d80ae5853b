/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqttpool_uv.h - a pool on a libuv loop. Header only: include it where the loop lives and link
 * libuv (pkg-config libuv).
 *
 *   uv_loop_t *loop = uv_default_loop();
 *   struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
 *   mqp_pool *pool;
 *   char err[256];
 *   if (mqp_uv_pool_new(loop, "mqtt://broker:1883", &o, &pool, err, sizeof err) != MQP_OK)
 *       ...
 *   mqp_pool_request_async(pool, topic, body, len, 1, 5000, on_reply, ctx, &ticket);
 *   ...
 *   mqp_pool_destroy(pool);  (on the loop's thread; the adapter's handles close on the loop's
 *                             next turn and free themselves)
 *
 * Call mqp_uv_pool_new on the loop's thread: it is the pool's thread from then on. Each of the
 * pool's descriptors (its sockets, and the eventfd other threads' calls arrive on) is a uv_poll_t
 * of the loop's own (options.loop_watch: no epoll inside libuv's), its deadlines one uv_timer_t,
 * and "at the end of this turn" a uv_check_t (with a uv_idle_t, so the turn's poll does not
 * block first).
 */
#ifndef MQTTPOOL_UV_H
#define MQTTPOOL_UV_H

#include <stdlib.h>
#include <uv.h>

#include "mqttpool.h"

struct mqp_uv;

/* One watched descriptor. */
struct mqp_uv_watch {
	uv_poll_t poll;
	struct mqp_uv *a;
	void *tag;
	int fd;
	struct mqp_uv_watch *next;
};

struct mqp_uv {
	uv_loop_t *loop;
	uv_timer_t timer;
	uv_check_t soon;  /* runs the pool after this turn's I/O callbacks */
	uv_idle_t nowait; /* while soon is armed: the turn's poll does not wait */
	struct mqp_loop hooks;
	mqp_pool *pool;
	struct mqp_uv_watch *watches;
	int handles; /* initialised and not yet closed: the timer and every watch */
};

static void mqp_uv__on_timer(uv_timer_t *h)
{
	mqp_pool_process(((struct mqp_uv *)h->data)->pool); /* may destroy the pool */
}

static void mqp_uv__on_soon(uv_check_t *h)
{
	struct mqp_uv *a = (struct mqp_uv *)h->data;
	uv_check_stop(&a->soon);
	uv_idle_stop(&a->nowait);
	mqp_pool_process(a->pool); /* may destroy the pool */
}

static void mqp_uv__on_nowait(uv_idle_t *h)
{
	(void)h; /* its being active is what counts */
}

static void mqp_uv__on_poll(uv_poll_t *h, int status, int events)
{
	struct mqp_uv_watch *w = (struct mqp_uv_watch *)h->data;
	unsigned ready = (events & UV_READABLE ? MQP_IO_READ : 0u)
	    | (events & UV_WRITABLE ? MQP_IO_WRITE : 0u) | (status < 0 ? MQP_IO_READ : 0u);
	mqp_pool_io(w->a->pool, w->tag, ready); /* may destroy the pool: w is not used after */
}

static void mqp_uv__schedule(void *data, long timeout_ms)
{
	struct mqp_uv *a = (struct mqp_uv *)data;
	if (timeout_ms == 0) {
		uv_timer_stop(&a->timer);
		uv_check_start(&a->soon, mqp_uv__on_soon);
		uv_idle_start(&a->nowait, mqp_uv__on_nowait);
		return;
	}
	uv_check_stop(&a->soon);
	uv_idle_stop(&a->nowait);
	if (timeout_ms < 0)
		uv_timer_stop(&a->timer);
	else
		uv_timer_start(&a->timer, mqp_uv__on_timer, (uint64_t)timeout_ms, 0);
}

static void mqp_uv__closed(uv_handle_t *h)
{
	struct mqp_uv *a = (struct mqp_uv *)h->data;
	if (h->type == UV_POLL) {
		struct mqp_uv_watch *w = (struct mqp_uv_watch *)h->data;
		a = w->a;
		free(w);
	}
	if (--a->handles == 0)
		free(a);
}

static void mqp_uv__unwatch(struct mqp_uv_watch **pp)
{
	struct mqp_uv_watch *w = *pp;
	*pp = w->next;
	uv_poll_stop(&w->poll); /* before the pool closes the descriptor */
	uv_close((uv_handle_t *)&w->poll, mqp_uv__closed);
}

static void mqp_uv__watch(void *data, int fd, unsigned events, void *tag)
{
	struct mqp_uv *a = (struct mqp_uv *)data;
	struct mqp_uv_watch **pp = &a->watches;
	while (*pp && (*pp)->fd != fd)
		pp = &(*pp)->next;
	if (events == 0) {
		if (*pp)
			mqp_uv__unwatch(pp);
		return;
	}
	struct mqp_uv_watch *w = *pp;
	if (!w) {
		w = (struct mqp_uv_watch *)calloc(1, sizeof *w);
		if (!w || uv_poll_init(a->loop, &w->poll, fd) != 0) {
			/* Unwatched, the descriptor's calls would wait for their deadlines: they still
			 * end, and the pool's timer runs. Out of memory is the only way here. */
			free(w);
			return;
		}
		w->a = a;
		w->fd = fd;
		w->poll.data = w;
		w->next = a->watches;
		a->watches = w;
		a->handles++;
	}
	w->tag = tag;
	uv_poll_start(&w->poll,
	    (events & MQP_IO_READ ? UV_READABLE : 0) | (events & MQP_IO_WRITE ? UV_WRITABLE : 0),
	    mqp_uv__on_poll);
}

static void mqp_uv__cleanup(void *data)
{
	struct mqp_uv *a = (struct mqp_uv *)data;
	a->pool = NULL;
	while (a->watches) /* the pool unwatched all it had; nothing should be left */
		mqp_uv__unwatch(&a->watches);
	uv_close((uv_handle_t *)&a->timer, mqp_uv__closed);
	uv_close((uv_handle_t *)&a->soon, mqp_uv__closed);
	uv_close((uv_handle_t *)&a->nowait, mqp_uv__closed);
}

/**
 * mqp_pool_new on loop (options may be NULL; options->loop and loop_watch are set by the
 * adapter).
 * @return as mqp_pool_new.
 */
static inline mqp_err mqp_uv_pool_new(uv_loop_t *loop, const char *broker_url,
    const struct mqp_pool_options *options, mqp_pool **out, char *err, size_t err_len)
{
	*out = NULL;
	struct mqp_uv *a = (struct mqp_uv *)calloc(1, sizeof *a);
	if (!a)
		return MQP_ENOMEM;
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	if (options)
		o = *options;
	a->loop = loop;
	a->hooks.schedule = mqp_uv__schedule;
	a->hooks.cleanup = mqp_uv__cleanup;
	a->hooks.data = a;
	o.loop = &a->hooks;
	o.loop_watch = mqp_uv__watch;
	uv_timer_init(loop, &a->timer);
	uv_check_init(loop, &a->soon);
	uv_idle_init(loop, &a->nowait);
	a->timer.data = a->soon.data = a->nowait.data = a;
	a->handles = 3;
	mqp_err rc = mqp_pool_new(broker_url, &o, &a->pool, err, err_len);
	if (rc != MQP_OK) { /* no cleanup call: close what was opened here */
		while (a->watches)
			mqp_uv__unwatch(&a->watches);
		uv_close((uv_handle_t *)&a->timer, mqp_uv__closed);
		uv_close((uv_handle_t *)&a->soon, mqp_uv__closed);
		uv_close((uv_handle_t *)&a->nowait, mqp_uv__closed);
		return rc;
	}
	*out = a->pool;
	return MQP_OK;
}

#endif
