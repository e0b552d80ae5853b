/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * worker.c - gate-api's workers and the server's functions (server.h, worker.h): per worker one
 * thread running one libuv loop with its pool (mqttpool_uv.h: the loop watches the pool's sockets
 * itself), its listening socket on the shared port (SO_REUSEPORT), its connections and naive
 * requests: one epoll set, one epoll_wait a turn. The only state shared between workers is the
 * counters (atomics) and the per-address table (a mutex, taken per connection, not per request).
 * Stopping drains: no new connections, requests in flight finish, then everything closes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqttpool_uv.h"
#include "worker.h"

/* The pool's messages (connect failures, their verdicts): in the gateway's log. */
static void on_pool_log(void *userdata, int level, const char *message)
{
	(void)userdata;
	(void)level;
	gate_log_limited("%s\n", message);
}

/* --- the worker ---------------------------------------------------------------------------- */

static void worker_close(struct worker *w)
{
	uv_timer_stop(&w->drain);
	/* Every call completes first: the pool's with MQP_ECLOSED, the naive ones aborted. */
	pthread_rwlock_wrlock(&w->s->pools_lock);
	mqp_pool *pool = w->pool;
	w->pool = NULL;
	pthread_rwlock_unlock(&w->s->pools_lock);
	mqp_pool_destroy(pool);
	gate_naive_finish_all(w, MQP_ECLOSED);
	while (w->conns)
		gate_conn_close(w->conns);
	if (w->listening) {
		uv_close((uv_handle_t *)&w->listener, NULL);
		w->listening = false;
	}
	uv_close((uv_handle_t *)&w->drain, NULL);
	uv_close((uv_handle_t *)&w->stop, NULL);
}

static void on_drain_check(uv_timer_t *h)
{
	struct worker *w = h->data;
	bool idle = w->active == 0 && mqp_pool_drain(w->pool, MQP_NO_WAIT) == MQP_OK;
	if (idle || mqc_now_ns() >= w->drain_deadline) {
		w->drained = idle;
		worker_close(w);
	}
}

static void on_stop(uv_async_t *h)
{
	struct worker *w = h->data;
	if (w->drain_deadline) /* already draining */
		return;
	w->drain_deadline = mqc_now_ns() + atomic_load(&w->s->drain_ns);
	if (w->listening) { /* no new connections */
		uv_close((uv_handle_t *)&w->listener, NULL);
		w->listening = false;
	}
	/* Requests in flight finish and their responses go out; new ones on open connections get
	 * 503 shutting_down; an idle kept-alive connection is closed now. */
	for (struct conn *cn = w->conns, *next; cn; cn = next) {
		next = cn->next;
		if (!cn->call && !cn->writing)
			gate_conn_close(cn);
	}
	uv_timer_start(&w->drain, on_drain_check, 0, 2);
}

/* The worker's listening socket on the shared port: SO_REUSEPORT, so the kernel spreads new
 * connections among the workers (libuv 1.44 has no flag for it: the socket is made here). */
static int listen_on(struct worker *w, const struct sockaddr *sa, socklen_t salen)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
	    || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0
	    || bind(fd, sa, salen) != 0 || listen(fd, SOMAXCONN) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	struct sockaddr_storage bound = { 0 };
	socklen_t len = sizeof bound;
	if (getsockname(fd, (struct sockaddr *)&bound, &len) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	w->port = mqc_sockaddr_port((struct sockaddr *)&bound);
	uv_tcp_init(&w->loop, &w->listener);
	w->listener.data = w;
	w->listening = true;
	int rc = uv_tcp_open(&w->listener, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&w->listener, SOMAXCONN, gate_conn_accept);
	return rc;
}

static int worker_open(struct worker *w)
{
	struct gate_server *s = w->s;
	const struct gate_config *cfg = &s->cfg;
	if (uv_loop_init(&w->loop) != 0) {
		snprintf(w->err, sizeof w->err, "cannot make an event loop");
		return -1;
	}
	struct mqp_pool_options po = cfg->pool;
	po.max_size = cfg->pool.max_size / s->n + (w->index < cfg->pool.max_size % s->n);
	po.min_size = cfg->pool.min_size / s->n + (w->index < cfg->pool.min_size % s->n);
	if (w->index == 0) /* one worker's pool says what every pool meets */
		po.log_cb = on_pool_log;
	mqp_pool *pool;
	int rc = mqp_uv_pool_new(&w->loop, cfg->broker, &po, &pool, w->err, sizeof w->err);
	if (rc != MQP_OK) {
		char why[sizeof w->err];
		snprintf(why, sizeof why, "%s", w->err);
		snprintf(
		    w->err, sizeof w->err, "cannot create the pool: %s: %.200s", mqp_strerror(rc), why);
		uv_run(&w->loop, UV_RUN_NOWAIT); /* the adapter's handles close */
		uv_loop_close(&w->loop);
		return -1;
	}
	pthread_rwlock_wrlock(&s->pools_lock);
	w->pool = pool;
	pthread_rwlock_unlock(&s->pools_lock);
	struct sockaddr_storage sa = cfg->listen;
	mqc_sockaddr_set_port((struct sockaddr *)&sa, w->port);
	uv_timer_init(&w->loop, &w->drain);
	w->drain.data = w;
	uv_async_init(&w->loop, &w->stop, on_stop);
	w->stop.data = w;
	rc = listen_on(w, (struct sockaddr *)&sa, cfg->listen_len);
	if (rc != 0) {
		char addr[INET6_ADDRSTRLEN + 8];
		mqc_sockaddr_text((struct sockaddr *)&sa, addr, sizeof addr);
		snprintf(w->err, sizeof w->err, "cannot listen on %s: %s", addr, strerror(-rc));
		worker_close(w);
		uv_run(&w->loop, UV_RUN_DEFAULT);
		uv_loop_close(&w->loop);
		return -1;
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	w->start_rc = worker_open(w);
	int ok = w->start_rc;
	sem_post(&w->started); /* w may be stopped from here on */
	if (ok != 0)
		return NULL;
	uv_run(&w->loop, UV_RUN_DEFAULT);
	uv_loop_close(&w->loop);
	return NULL;
}

/* --- the server ---------------------------------------------------------------------------- */

static void server_free(struct gate_server *s)
{
	while (s->addrs) {
		struct addr_count *e = s->addrs;
		/* uthash frees its table with the last item; the analyzer takes that for e. */
		HASH_DEL(s->addrs, e); /* NOLINT(clang-analyzer-unix.Malloc) */
		free(e);
	}
	for (unsigned i = 0; i < s->n; i++)
		sem_destroy(&s->w[i].started);
	pthread_mutex_destroy(&s->addr_lock);
	pthread_rwlock_destroy(&s->pools_lock);
	free(s->w);
	free(s);
}

/* Stop the workers that started (drain_ns: how long they may finish what they have). */
static bool stop_workers(struct gate_server *s)
{
	bool drained = true;
	for (unsigned i = 0; i < s->n; i++)
		if (s->w[i].thread_started && s->w[i].start_rc == 0)
			uv_async_send(&s->w[i].stop);
	for (unsigned i = 0; i < s->n; i++)
		if (s->w[i].thread_started) {
			pthread_join(s->w[i].thread, NULL);
			if (s->w[i].start_rc == 0 && !s->w[i].drained)
				drained = false;
		}
	return drained;
}

int gate_server_start(const struct gate_config *cfg, unsigned workers, struct gate_server **out,
    char *err, size_t errlen)
{
	*out = NULL;
	gate_conn_init();
	struct gate_server *s = calloc(1, sizeof *s);
	struct worker *w = calloc(workers, sizeof *w);
	if (!s || !w) {
		free(s);
		free(w);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->cfg = *cfg;
	s->w = w;
	s->n = workers;
	s->handlers = &gate_command_handlers;
	pthread_mutex_init(&s->addr_lock, NULL);
	pthread_rwlock_init(&s->pools_lock, NULL);
	unsigned port = mqc_sockaddr_port((const struct sockaddr *)&cfg->listen);
	int rc = 0;
	/* One at a time: the first picks the port when it is 0, the others share it. */
	for (unsigned i = 0; i < workers && rc == 0; i++) {
		w[i].s = s;
		w[i].index = i;
		w[i].port = port;
		sem_init(&w[i].started, 0, 0);
		int e = pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
		if (e != 0) {
			snprintf(err, errlen, "cannot start a worker thread: %s", strerror(e));
			rc = -1;
			break;
		}
		w[i].thread_started = true;
		while (sem_wait(&w[i].started) != 0 && errno == EINTR)
			;
		if (w[i].start_rc != 0) {
			snprintf(err, errlen, "%s", w[i].err);
			rc = -1;
		}
		port = w[i].port;
	}
	if (rc != 0) {
		stop_workers(s);
		server_free(s);
		return -1;
	}
	*out = s;
	return 0;
}

unsigned gate_server_port(const struct gate_server *s)
{
	return s->w[0].port;
}

int gate_server_broker_check(
    struct gate_server *s, unsigned wait_ms, bool *v311_only, char *why, size_t len)
{
	/* A lease from worker 0's pool (from this thread: handed to its loop): the broker takes us,
	 * refuses us, or cannot be reached. */
	pthread_rwlock_rdlock(&s->pools_lock);
	mqp_pool *pool = s->w[0].pool;
	mqp_lease lease;
	mqp_err rc = pool ? mqp_pool_acquire(pool, wait_ms, &lease) : MQP_ECLOSED;
	struct mqp_pool_stats st;
	mqp_pool_stats(pool, &st, sizeof st);
	*v311_only = st.v311_only;
	if (rc == MQP_OK)
		mqp_lease_release(&lease);
	else if (pool)
		mqp_pool_last_error(pool, why, len);
	pthread_rwlock_unlock(&s->pools_lock);
	if (rc == MQP_OK)
		return 0;
	if (!why[0])
		snprintf(why, len, "%s", mqp_strerror(rc));
	return rc == MQP_EREFUSED ? -1 : 1;
}

bool gate_server_stop(struct gate_server *s, unsigned drain_ms, uint64_t ok[GATE_BACKENDS])
{
	atomic_store(&s->drain_ns, (uint64_t)drain_ms * MQC_NS_PER_MS);
	atomic_store(&s->stopping, true);
	bool drained = stop_workers(s);
	for (int b = 0; b < GATE_BACKENDS; b++)
		ok[b] = atomic_load(&s->counters.responses[b][0]);
	server_free(s);
	return drained;
}
