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
 * Call mqp_uv_pool_new on the loop's thread: it is the pool's thread from then on. The pool's
 * descriptor is watched with a uv_poll_t and its deadlines with one uv_timer_t.
 */
#ifndef MQTTPOOL_UV_H
#define MQTTPOOL_UV_H

#include <stdlib.h>
#include <uv.h>

#include "mqttpool.h"

struct mqp_uv {
	uv_poll_t poll;
	uv_timer_t timer;
	struct mqp_loop hooks;
	mqp_pool *pool;
	int handles; /* initialised and not yet closed */
};

static void mqp_uv__run(struct mqp_uv *a)
{
	mqp_pool_process(a->pool); /* may destroy the pool, and close these handles */
}

static void mqp_uv__on_poll(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	mqp_uv__run((struct mqp_uv *)h->data);
}

static void mqp_uv__on_timer(uv_timer_t *h)
{
	mqp_uv__run((struct mqp_uv *)h->data);
}

static void mqp_uv__schedule(void *data, long timeout_ms)
{
	struct mqp_uv *a = (struct mqp_uv *)data;
	if (timeout_ms < 0)
		uv_timer_stop(&a->timer);
	else
		uv_timer_start(&a->timer, mqp_uv__on_timer, (uint64_t)timeout_ms, 0);
}

static void mqp_uv__closed(uv_handle_t *h)
{
	struct mqp_uv *a = (struct mqp_uv *)h->data;
	if (--a->handles == 0)
		free(a);
}

static void mqp_uv__cleanup(void *data)
{
	struct mqp_uv *a = (struct mqp_uv *)data;
	a->pool = NULL;
	uv_close((uv_handle_t *)&a->timer, mqp_uv__closed);
	if (a->handles == 2)
		uv_close((uv_handle_t *)&a->poll, mqp_uv__closed);
}

/**
 * mqp_pool_new on loop (options may be NULL; options->loop is set by the adapter).
 * @return as mqp_pool_new; MQP_ENOMEM when libuv refuses a handle.
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
	a->hooks.schedule = mqp_uv__schedule;
	a->hooks.cleanup = mqp_uv__cleanup;
	a->hooks.data = a;
	o.loop = &a->hooks;
	uv_timer_init(loop, &a->timer);
	a->timer.data = a;
	a->handles = 1;
	mqp_err rc = mqp_pool_new(broker_url, &o, &a->pool, err, err_len);
	if (rc != MQP_OK) { /* no cleanup call: close the timer here */
		uv_close((uv_handle_t *)&a->timer, mqp_uv__closed);
		return rc;
	}
	if (uv_poll_init(loop, &a->poll, mqp_pool_fd(a->pool)) != 0) {
		mqp_pool_destroy(a->pool); /* cleanup closes the timer and frees a */
		return MQP_ENOMEM;
	}
	a->poll.data = a;
	a->handles = 2;
	uv_poll_start(&a->poll, UV_READABLE, mqp_uv__on_poll);
	*out = a->pool;
	return MQP_OK;
}

#endif
