/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * create.c - mqp_pool_new and mqp_pool_destroy: options, TLS context, the I/O thread.
 */
#define _GNU_SOURCE
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conn.h"
#include "io.h"
#include "mqc_clock.h"
#include "mqc_strutil.h"
#include "mqc_tls.h"
#include "node.h"
#include "op.h"
#include "pool.h"

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void pool_free(struct mqp_pool *p)
{
	free(p->client_prefix);
	free(p->inbox_prefix);
	free(p->username);
	if (p->password) {
		memset(p->password, 0, strlen(p->password));
		free(p->password);
	}
	free(p->cafile);
	free(p->certfile);
	free(p->keyfile);
	free(p->ws_header);
	free(p->v311_advice);
	free(p->conns);
	free(p->nodes);
	free(p->lease_gen);
	free(p->lease_held);
	free(p->lease_info);
	free(p->scratch);
	mqc_heap_free(&p->heap);
	SSL_CTX_free(p->ssl_ctx);
	if (p->ep >= 0)
		close(p->ep);
	mqp__inbox_free(&p->inbox);
	pthread_mutex_destroy(&p->report_lock);
	mqc_hist_free(&p->h_request);
	mqc_hist_free(&p->h_acquire);
	mqc_hist_free(&p->h_connect);
	free(p);
}

static void *io_thread(void *arg)
{
	struct mqp_pool *p = arg;
	mqp__io_run(p);
	if (mqp__inbox_destroy_deferred(&p->inbox)) { /* destroyed from a callback: nobody joins */
		pthread_detach(pthread_self());
		pool_free(p);
	}
	return NULL;
}

static int fail(char *err, size_t len, int code, const char *detail)
{
	if (err && len)
		snprintf(err, len, "%s", detail);
	return code;
}

void mqp_pool_options_init(struct mqp_pool_options *options)
{
	if (options)
		*options = (struct mqp_pool_options)MQP_POOL_OPTIONS_INIT;
}

/* The liveness settings a broker URL may carry: mqtt://a:1883,b:1883?silence_ms=500&
 * ping_timeout_ms=1000 (mqtt://, mqtts://, tcp://, ssl://; on ws:// and wss:// a query is the
 * HTTP path's). The list without the query goes to list; values the options leave 0 are taken
 * from it. 0, or -1 with err naming what is wrong. */
static int url_options(
    const char *url, char *list, size_t len, struct mqp_pool_options *o, char *err, size_t errlen)
{
	const char *q = strchr(url, '?');
	if (!q || strncmp(url, "ws://", 5) == 0 || strncmp(url, "wss://", 6) == 0) {
		if (strlen(url) >= len) {
			snprintf(err, errlen, "broker_url is too long");
			return -1;
		}
		snprintf(list, len, "%s", url);
		return 0;
	}
	if ((size_t)(q - url) >= len) {
		snprintf(err, errlen, "broker_url is too long");
		return -1;
	}
	memcpy(list, url, (size_t)(q - url));
	list[q - url] = '\0';
	if (!q[1]) {
		snprintf(err, errlen, "broker_url: nothing after '?'");
		return -1;
	}
	if (url[strlen(url) - 1] == '&') {
		snprintf(err, errlen, "broker_url: an empty or overlong option after '?'");
		return -1;
	}
	for (const char *at = q + 1; *at;) {
		size_t n = strcspn(at, "&");
		char item[64];
		if (n == 0 || n >= sizeof item) {
			snprintf(err, errlen, "broker_url: an empty or overlong option after '?'");
			return -1;
		}
		memcpy(item, at, n);
		item[n] = '\0';
		at += n + (at[n] == '&');
		char *eq = strchr(item, '=');
		uint64_t v = 0;
		unsigned *field = NULL;
		if (eq) {
			*eq = '\0';
			field = strcmp(item, "silence_ms") == 0    ? &o->silence_ms
			    : strcmp(item, "ping_timeout_ms") == 0 ? &o->ping_timeout_ms
			                                           : NULL;
		}
		if (!field) {
			snprintf(err, errlen,
			    "broker_url: unknown option '%s' (the URL takes silence_ms and ping_timeout_ms)",
			    item);
			return -1;
		}
		bool never = field == &o->silence_ms && strcmp(eq + 1, "never") == 0;
		if (!never && mqc_parse_u64(eq + 1, 10, 600000, &v) != 0) {
			snprintf(err, errlen, "broker_url: %s=%s: expected milliseconds, 10 to 600000%s", item,
			    eq + 1, field == &o->silence_ms ? ", or never" : "");
			return -1;
		}
		if (!*field) /* what the program set wins over the URL */
			*field = never ? MQP_NEVER : (unsigned)v;
	}
	return 0;
}

/* options->brokers: each a URL as mqc_url_parse takes it, one scheme for all, none twice. */
static int brokers_parse(
    const char *const *list, struct mqc_url *urls, size_t *n, char *err, size_t errlen)
{
	*n = 0;
	for (; *list; list++) {
		if (*n == MQP_NODES_MAX) {
			snprintf(err, errlen, "options->brokers: more than %d brokers", MQP_NODES_MAX);
			return -1;
		}
		struct mqc_url *u = &urls[*n];
		if (mqc_url_parse(*list, u, err, errlen) != 0)
			return -1;
		for (size_t i = 0; i < *n; i++)
			if (urls[i].tls != u->tls || urls[i].ws != u->ws
			    || (urls[i].port == u->port && strcmp(urls[i].host, u->host) == 0)) {
				snprintf(err, errlen, "options->brokers: %s %s", *list,
				    urls[i].tls != u->tls || urls[i].ws != u->ws
				        ? "has another scheme than the first"
				        : "is listed twice");
				return -1;
			}
		(*n)++;
	}
	if (*n == 0)
		snprintf(err, errlen, "options->brokers is empty");
	return *n ? 0 : -1;
}

mqp_err mqp_pool_new(const char *broker_url, const struct mqp_pool_options *options, mqp_pool **out,
    char *err, size_t errlen)
{
	if (!out)
		return fail(err, errlen, MQP_EINVAL, "out is NULL");
	/* The caller's options over every default: a caller built against an older header has a
	 * shorter struct, and the fields it does not know keep their defaults. */
	struct mqp_pool_options given;
	mqp_pool_options_init(&given);
	if (options && options->struct_size == 0)
		return fail(err, errlen, MQP_EINVAL,
		    "options->struct_size is 0: start from MQP_POOL_OPTIONS_INIT or "
		    "mqp_pool_options_init()");
	if (options && options->struct_size > sizeof given)
		return fail(err, errlen, MQP_EINVAL,
		    "options->struct_size is larger than this libmqttpool knows: it was compiled "
		    "against a newer mqttpool.h than the library it runs with");
	if (options)
		memcpy(&given, options, options->struct_size);
	struct mqp_pool_options *o = &given;
	*out = NULL;
	struct mqp_pool *p = calloc(1, sizeof *p);
	if (!p)
		return fail(err, errlen, MQP_ENOMEM, "out of memory");
	p->ep = -1;
	p->inbox.evfd = -1;
	pthread_mutex_init(&p->report_lock, NULL);
	char urlerr[256];
	struct mqc_url urls[MQP_NODES_MAX];
	size_t nurls = 0;
	if (broker_url && o->brokers) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "broker_url and options->brokers: give one of them");
	}
	char list[4096];
	if (o->brokers ? brokers_parse(o->brokers, urls, &nurls, urlerr, sizeof urlerr) != 0
	               : !broker_url
	            || url_options(broker_url, list, sizeof list, o, urlerr, sizeof urlerr) != 0
	            || mqc_url_list_parse(list, urls, MQP_NODES_MAX, &nurls, urlerr, sizeof urlerr)
	                != 0) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL,
		    broker_url || o->brokers ? urlerr : "broker_url is NULL (and no options->brokers)");
	}
	if (o->load_balance != MQP_LB_RANDOM && o->load_balance != MQP_LB_IN_ORDER) {
		pool_free(p);
		return fail(
		    err, errlen, MQP_EINVAL, "load_balance must be MQP_LB_RANDOM or MQP_LB_IN_ORDER");
	}
	p->url = urls[0];
	p->nnodes = (unsigned)nurls;
	p->redirect_to = p->move_to = p->move_from = -1;
	if (!(p->nodes = calloc(nurls, sizeof *p->nodes))) {
		pool_free(p);
		return fail(err, errlen, MQP_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < nurls; i++) {
		struct pnode *n = &p->nodes[i];
		n->url = urls[i];
		snprintf(n->where, sizeof n->where, strchr(n->url.host, ':') ? "[%s]:%d" : "%s:%d",
		    n->url.host, n->url.port);
		n->next_addr = (unsigned)i; /* names with several addresses: start apart */
	}
	p->opt = *o;
	p->opt.connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 5000;
	p->opt.request_timeout_ms = o->request_timeout_ms ? o->request_timeout_ms : 10000;
	p->opt.idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : 30000;
	p->opt.max_lifetime_ms = o->max_lifetime_ms ? o->max_lifetime_ms : 1800000;
	p->opt.eviction_interval_ms = o->eviction_interval_ms ? o->eviction_interval_ms : 10000;
	p->opt.protocol = o->protocol ? o->protocol : 5;
	p->opt.silence_ms = o->silence_ms ? o->silence_ms : 500;
	p->opt.ping_timeout_ms = o->ping_timeout_ms ? o->ping_timeout_ms : 1000;
	p->opt.keepalive_s = o->keepalive_s ? (o->keepalive_s < 5 ? 5 : o->keepalive_s) : 30;
	if (p->opt.protocol != 4 && p->opt.protocol != 5) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "protocol must be 5 or 4 (MQTT 3.1.1)");
	}
	if (p->opt.max_size == 0 || p->opt.max_inflight == 0) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "max_size and max_inflight must be at least 1");
	}
	if (p->opt.connect_timeout_ms >= MQP_NO_WAIT || p->opt.request_timeout_ms >= MQP_NO_WAIT
	    || p->opt.eviction_interval_ms >= MQP_NO_WAIT) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL,
		    "connect_timeout_ms, request_timeout_ms and eviction_interval_ms cannot be "
		    "MQP_NO_WAIT or MQP_NEVER");
	}
	if (p->opt.min_size > p->opt.max_size) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "min_size is larger than max_size");
	}
	if (p->opt.max_size > 1000) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "max_size above 1000");
	}
	if (!o->username != !o->password && o->password) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "a password needs a username");
	}
	if (o->ws_header && (strpbrk(o->ws_header, "\r\n") || !strchr(o->ws_header, ':'))) {
		pool_free(p);
		return fail(
		    err, errlen, MQP_EINVAL, "ws_header must be one 'Name: value' line (no CR or LF)");
	}
	if (!o->certfile != !o->keyfile) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "certfile and keyfile go together");
	}
	const char *prefix = o->client_id_prefix ? o->client_id_prefix : "mqp";
	const char *inbox = o->inbox_prefix ? o->inbox_prefix : "mqp/inbox";
	if (strlen(prefix) > 8 || strpbrk(prefix, "+#/") || strlen(inbox) > 200
	    || strpbrk(inbox, "+#")) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL,
		    "client_id_prefix (at most 8 characters, no + # /) or inbox_prefix (no + #) "
		    "is unusable");
	}
	p->client_prefix = strdup(prefix);
	p->inbox_prefix = strdup(inbox);
	p->username = dup_or_null(o->username);
	p->password = dup_or_null(o->password);
	p->cafile = dup_or_null(o->cafile);
	p->certfile = dup_or_null(o->certfile);
	p->keyfile = dup_or_null(o->keyfile);
	p->ws_header = dup_or_null(o->ws_header);
	p->opt.ws_header = p->ws_header;
	p->v311_advice = dup_or_null(o->v311_advice);
	p->wire_opts = (struct mqp_wire_opts) { .ws_header = p->ws_header,
		.user_timeout_ms = mqp__live_user_timeout_ms(&p->opt) };
	p->opt.v311_advice = p->v311_advice;
	p->conns = calloc(p->opt.max_size, sizeof *p->conns);
	p->lease_gen = calloc(p->opt.max_size, sizeof *p->lease_gen);
	p->lease_held = calloc(p->opt.max_size, sizeof *p->lease_held);
	p->lease_info = calloc(p->opt.max_size, sizeof *p->lease_info);
	if (mqc_hist_init(&p->h_request, 7) || mqc_hist_init(&p->h_acquire, 7)
	    || mqc_hist_init(&p->h_connect, 7) || !p->client_prefix || !p->inbox_prefix || !p->conns
	    || !p->lease_gen || !p->lease_held || !p->lease_info || (o->ws_header && !p->ws_header)
	    || (o->v311_advice && !p->v311_advice)) {
		pool_free(p);
		return fail(err, errlen, MQP_ENOMEM, "out of memory");
	}
	for (unsigned i = 0; i < p->opt.max_size; i++)
		p->conns[i].w.fd = -1;
	p->probe = (struct pconn) { .w = { .fd = -1 }, .probe = true };
	p->opt.client_id_prefix = p->client_prefix;
	p->opt.inbox_prefix = p->inbox_prefix;
	/* One context for every connection (the CA loaded once): the certificate and the host name
	 * (or IP address) are verified, always. */
	if (p->url.tls
	    && !(p->ssl_ctx
	        = mqc_tls_client_ctx(p->cafile, p->certfile, p->keyfile, p->url.host, err, errlen))) {
		pool_free(p);
		return MQP_ETLS;
	}
	if (p->url.tls && !(p->scratch = malloc(MQP_SCRATCH))) {
		pool_free(p);
		return fail(err, errlen, MQP_ENOMEM, "out of memory");
	}
	p->queue.tail = &p->queue.head;
	p->acquirers.tail = &p->acquirers.head;
	p->legacy_wait_tail = &p->legacy_wait;
	p->ep = epoll_create1(EPOLL_CLOEXEC);
	/* NULL: the inbox; edge-triggered, so the I/O thread never reads the eventfd (op.h) */
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = NULL };
	if (p->ep < 0 || mqp__inbox_init(&p->inbox) != 0
	    || epoll_ctl(p->ep, EPOLL_CTL_ADD, p->inbox.evfd, &ev) != 0) {
		pool_free(p);
		return fail(err, errlen, MQP_ENOMEM, "epoll or eventfd failed");
	}
	p->inbox.edge = !(o->loop && o->loop_watch); /* a loop watching it itself is level-triggered */
	p->watcher = (struct mqp_watcher) { .ep = p->ep };
	if (o->loop) {
		/* On the application's event loop: this thread is the pool's thread. */
		if (!o->loop->schedule) {
			pool_free(p);
			return fail(err, errlen, MQP_EINVAL, "options->loop->schedule is NULL");
		}
		p->on_loop = true;
		p->loop = *o->loop;
		p->opt.loop = NULL; /* copied: the caller's struct is not read again */
		p->thread = pthread_self();
		if (o->loop_watch) { /* the loop watches every descriptor itself: no epoll inside */
			p->watcher = (struct mqp_watcher) { .fn = o->loop_watch, .data = p->loop.data };
			o->loop_watch(p->loop.data, p->inbox.evfd, MQP_IO_READ, NULL);
		}
		mqp__io_start_on_loop(p);
		*out = p;
		return MQP_OK;
	}
	if (o->loop_watch) {
		pool_free(p);
		return fail(err, errlen, MQP_EINVAL, "options->loop_watch needs options->loop");
	}
	/* The I/O thread takes no signals: the application's handlers run on its own threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&p->thread, NULL, io_thread, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pool_free(p);
		return fail(err, errlen, MQP_ENOMEM, "cannot start the I/O thread");
	}
	*out = p;
	return MQP_OK;
}

/* A pool on an event loop, on the loop's thread: complete everything, close, let go of the loop. */
static void close_on_loop(struct mqp_pool *p)
{
	mqp__inbox_stop(&p->inbox, false); /* refuse what other threads still post */
	mqp__io_close(p);
	if (p->watcher.fn) /* every socket is closed and unwatched: now the eventfd */
		p->watcher.fn(p->watcher.data, p->inbox.evfd, 0, NULL);
	if (p->loop.cleanup)
		p->loop.cleanup(p->loop.data);
}

/* After mqp__io_process asked for it: a destroy from a callback frees here; a destroy from
 * another thread waits for the close and frees there. */
static void finish_on_loop(struct mqp_pool *p)
{
	close_on_loop(p);
	if (p->destroy_requested) {
		pool_free(p);
		return;
	}
	atomic_store(&p->closed, true); /* the destroying thread frees it */
}

int mqp_pool_fd(mqp_pool *p)
{
	return p && p->on_loop && !p->watcher.fn ? p->ep : -1;
}

void mqp_pool_io(mqp_pool *p, void *tag, unsigned ready)
{
	if (!p || !p->on_loop || !pthread_equal(pthread_self(), p->thread))
		return;
	if (mqp__io_ready(p, tag, ready))
		finish_on_loop(p);
}

void mqp_pool_process(mqp_pool *p)
{
	if (!p || !p->on_loop || !pthread_equal(pthread_self(), p->thread))
		return;
	if (mqp__io_process(p))
		finish_on_loop(p);
}

static void destroy_on_loop(struct mqp_pool *p)
{
	if (pthread_equal(pthread_self(), p->thread)) {
		if (p->busy) { /* from a callback: when the run it is part of ends */
			p->destroy_requested = true;
			mqp__inbox_stop(&p->inbox, false);
			return;
		}
		close_on_loop(p);
		pool_free(p);
		return;
	}
	/* Another thread: the loop sees the stop on its descriptor and closes the pool. */
	mqp__inbox_stop(&p->inbox, false);
	uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S;
	while (!atomic_load(&p->closed) && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	if (!atomic_load(&p->closed)) {
		mqp__log(p, MQP_LOG_ERROR,
		    "mqttpool: mqp_pool_destroy: the event loop did not run the pool for 10 s; the pool "
		    "is left allocated (destroy it on the loop's thread)");
		return;
	}
	pool_free(p);
}

void mqp_pool_destroy(mqp_pool *p)
{
	if (!p)
		return;
	if (p->on_loop) {
		destroy_on_loop(p);
		return;
	}
	/* From a callback the I/O thread cannot be joined (it is this thread, inside the callback):
	 * it finishes after the callback returns and frees the pool itself (io_thread). A
	 * callback run while a destroy is already under way (ECLOSED) changes nothing: that destroy
	 * frees the pool. */
	bool deferred = pthread_equal(pthread_self(), p->thread);
	mqp__inbox_stop(&p->inbox, deferred);
	if (deferred)
		return;
	pthread_join(p->thread, NULL);
	pool_free(p);
}
