/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * pool_test_util.c - what several of the pool's integration tests share.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mqtt_protocol.h>

#include "mqc_clock.h"
#include "mqttpool.h"
#include "mqttpool_event.h"
#include "mqttpool_uv.h"
#include "pool_test_util.h"
#include "tb_test.h"

/* MQP_TEST_LOOP=uv or event: every pool of these tests runs on an event loop of that kind, in a
 * thread of its own, instead of with its own I/O thread. The test's blocking calls then reach
 * the pool the way another thread's calls reach a pool on an application's loop, and its
 * callbacks run on the loop's thread. The loop thread ends when the pool is destroyed (the
 * adapter closes its handles; the loop has nothing left to run). */
struct loop_thread {
	const char *url;
	struct mqp_pool_options *o;
	mqp_pool *pool;
	mqp_err rc;
	char err[256];
	sem_t ready;
	bool event;
};

/* The loop thread owns lt once the pool exists (new_pool has read it by then: the loop cannot
 * end before the pool is destroyed); when the pool could not be made, new_pool frees it. */
static void *loop_main(void *arg)
{
	struct loop_thread *lt = arg;
	bool made;
	if (lt->event) {
		struct event_base *base = event_base_new();
		lt->rc = base ? mqp_event_pool_new(base, lt->url, lt->o, &lt->pool, lt->err, sizeof lt->err)
		              : MQP_ENOMEM;
		made = lt->rc == MQP_OK;
		sem_post(&lt->ready);
		if (base) {
			event_base_dispatch(base); /* until the pool is destroyed: no events left */
			event_base_free(base);
		}
	} else {
		uv_loop_t loop;
		uv_loop_init(&loop);
		lt->rc = mqp_uv_pool_new(&loop, lt->url, lt->o, &lt->pool, lt->err, sizeof lt->err);
		made = lt->rc == MQP_OK;
		sem_post(&lt->ready);
		uv_run(&loop, UV_RUN_DEFAULT); /* until the pool is destroyed: no handles left */
		uv_loop_close(&loop);
	}
	if (made) {
		sem_destroy(&lt->ready);
		free(lt);
	}
	return NULL;
}

const char *test_loop_kind(void)
{
	const char *kind = getenv("MQP_TEST_LOOP");
	return kind && (strcmp(kind, "uv") == 0 || strcmp(kind, "event") == 0) ? kind : NULL;
}

void test_broker_options(const char *url, struct mqp_pool_options *o)
{
	const struct tb_info *i = tb_test_info();
	o->username = i->username;
	o->password = i->password;
	if (strncmp(url, "mqtts", 5) == 0 && !o->cafile)
		o->cafile = i->ca_file;
}

mqp_pool *new_pool(const char *url, struct mqp_pool_options *o)
{
	struct mqp_pool_options defaults = MQP_POOL_OPTIONS_INIT;
	if (!o)
		o = &defaults;
	test_broker_options(url, o);
	mqp_pool *p = NULL;
	char err[256];
	int rc;
	const char *kind = test_loop_kind();
	if (kind) {
		struct loop_thread *lt = calloc(1, sizeof *lt);
		assert_non_null(lt);
		*lt = (struct loop_thread) { .url = url, .o = o, .event = strcmp(kind, "event") == 0 };
		sem_init(&lt->ready, 0, 0);
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, loop_main, lt), 0);
		pthread_detach(t);
		sem_wait(&lt->ready);
		rc = lt->rc;
		p = lt->pool;
		snprintf(err, sizeof err, "%s", lt->err);
		if (rc != MQP_OK) { /* the loop thread does not free it then */
			sem_destroy(&lt->ready);
			free(lt);
		}
	} else {
		rc = mqp_pool_new(url, o, &p, err, sizeof err);
	}
	if (rc != MQP_OK)
		fail_msg("mqp_pool_new: %s: %s", mqp_strerror(rc), err);
	/* The adapters watch each descriptor on the loop (mqp_pool_fd: -1); a threaded pool has none
	 * to watch either. */
	assert_int_equal(mqp_pool_fd(p), -1);
	return p;
}

void *work(void *arg)
{
	struct worker *w = arg;
	for (int k = 0; k < w->requests; k++) {
		char nonce[64];
		int n = snprintf(nonce, sizeof nonce, "worker-%d-request-%d-%ld", w->id, k, random());
		struct mqp_reply reply;
		int rc = mqp_pool_request(w->pool, "adv/dev/cmd", nonce, (size_t)n, 0, 150, &reply);
		if (rc == MQP_OK) {
			w->ok++;
			if (reply.len != (size_t)n || memcmp(reply.payload, nonce, (size_t)n) != 0)
				w->mismatches++; /* somebody else's reply: the one thing that must not happen */
			mqp_reply_free(&reply);
		} else if (rc == MQP_ETIMEDOUT) {
			w->timeouts++;
		} else {
			w->other++;
		}
	}
	return NULL;
}

struct tb_client *outside_client(void)
{
	return tb_test_connect(tb_test_info()->mqtt_url, 5);
}

void on_async_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct async_call *c = userdata;
	if (result == MQP_OK && reply && reply->len == strlen(c->nonce)
	    && memcmp(reply->payload, c->nonce, reply->len) == 0)
		atomic_store(&c->matched, 1);
	if (c->pool) { /* a blocking call from the pool's thread must refuse, not deadlock */
		struct mqp_reply r;
		if (mqp_pool_request(c->pool, "async/cmd", "x", 1, 0, 100, &r) != MQP_EDEADLK)
			atomic_store(&c->matched, -1);
	}
	atomic_store(&c->result, result);
	atomic_fetch_add(&c->calls, 1);
}

void on_published(void *userdata, int result)
{
	struct done_call *d = userdata;
	atomic_store(&d->result, result);
	atomic_fetch_add(&d->calls, 1);
}

bool wait_flag(atomic_int *flag, int timeout_ms)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	while (atomic_load(flag) == 0 && mqc_now_ns() < deadline)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	return atomic_load(flag) != 0;
}
