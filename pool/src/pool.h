/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * pool.h - libmqttpool's private types: a pooled connection and the pool itself.
 *
 * Types only. Which file does what:
 *   op.c     an operation's life and the hand-off between callers and the I/O thread (op.h)
 *   logic.c  the pool's decisions as pure functions (logic.h)
 *   corr.c   correlation data nobody can forge (corr.h)
 *   conn.c   a connection's life, and completing the operations it carries (conn.h)
 *   io.c     the I/O loop: dispatch, leases, deadlines, housekeeping, on the pool's own thread
 *            or inside an application's event loop (io.h)
 *   stats.c  the public accessors
 *   api.c    the public calls (on an event loop's thread they go straight to io.c);
 *            create.c new, destroy, and running on an event loop
 *   legacy.c requests on a fixed reply topic, built on leases
 * Each depends only on those above it in that list (stats.c on op.c and these types).
 */
#ifndef MQP_POOL_H
#define MQP_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "corr.h"
#include "mqc_hist.h"
#include "mqc_url.h"
#include "mqttpool.h"
#include "op.h"

#define MQP_TOPIC_MAX 512

struct mosquitto;
typedef struct ssl_ctx_st SSL_CTX;

/* A message queued for a lease. */
struct lmsg {
	struct mqp_message m;
	struct lmsg *next;
};

/* One pooled connection (I/O thread only). */
struct pconn {
	struct mqp_pool *pool;
	struct mosquitto *m;
	int fd;
	bool open, ready, dead, failed_connect, out;
	uint64_t connect_deadline;
	char id[64];
	char inbox[MQP_TOPIC_MAX - 32];
	struct mqp_corr corr; /* seals and opens this connection's correlation data */
	uint64_t next_seq;
	unsigned inflight;
	struct op *ops; /* requests and publishes carried by this connection */
	/* leases */
	bool leased, retained_ok;
	uint32_t epoch;      /* the current lease's subscription identifier (never 0) */
	uint64_t idle_since; /* when it was last released: the most recent goes first */
	uint64_t ready_at, retire_at, last_used, connect_start;
	struct lmsg *qhead, **qtail;
	struct op *receiver;
	char **filters;
	size_t nfilters;
};

struct pool_stats {
	atomic_uint size, ready, available, connecting, inflight, queued, leased;
	atomic_uint_fast64_t acquires, acquire_timeouts, releases, double_releases, stale_dropped;
	atomic_uint_fast64_t waits, cancels;
	atomic_uint_fast64_t closes_idle, closes_lifetime, leaks;
	atomic_uint_fast64_t requests, replies, timeouts, late_replies, strays, publishes;
	atomic_uint_fast64_t connects_ok, connects_failed, connections_lost;
};

struct mqp_pool {
	/* set at creation, then read-only */
	struct mqp_pool_options opt;
	struct mqc_url url;
	char *client_prefix, *inbox_prefix, *username, *password, *cafile, *certfile, *keyfile;
	SSL_CTX *ssl_ctx;
	pthread_t thread;
	int ep;
	/* shared */
	struct op_inbox inbox;       /* callers to the I/O thread; drain and destroy */
	pthread_mutex_t report_lock; /* the histograms and last_error */
	struct mqc_hist h_request, h_acquire, h_connect;
	char last_error[256];
	struct pool_stats stats; /* atomics */
	/* I/O thread only */
	struct pconn *conns;      /* max_size slots */
	struct op_fifo queue;     /* requests and publishes waiting for a connection */
	struct op_fifo acquirers; /* waiting for a lease */
	uint64_t dispatches;      /* dispatch passes so far */
	uint32_t *lease_gen;      /* per slot: the generation of its current or next lease */
	bool *lease_held;         /* per slot: a lease handle is out */
	struct lease_info {       /* per slot, for leak reports */
		uint64_t since;
		const char *file;
		int line;
		bool reported;
	} * lease_info;
	uint64_t next_housekeeping;
	struct op *pending;   /* requests by correlation */
	struct op *tickets;   /* async calls by ticket */
	struct mqc_heap heap; /* every op the I/O thread holds, by deadline */
	unsigned backoff_ms;
	uint64_t backoff_until;
	bool connect_failed;
	uint64_t next_misc; /* keepalive for every connection */
	/* On the application's event loop (options.loop); the loop's thread only, but closed */
	bool on_loop;
	struct mqp_loop loop;
	bool busy;            /* inside mqp_pool_process or a call made on the loop's thread */
	bool defer_callbacks; /* inside such a call: completions wait for the next process */
	struct op *later, **later_tail; /* completed async ops whose callbacks wait */
	struct op *local, **local_tail; /* ops from the loop's thread while busy */
	bool destroy_requested;         /* destroy from a callback: at the end of this process */
	uint64_t scheduled_at;          /* when the loop was last asked to run the pool */
	atomic_bool closed;             /* the close sequence has run (destroy from another thread) */
};

#endif
