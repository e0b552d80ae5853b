/*
 * pool_internal.h - libmqttpool's private structures.
 */
#ifndef POOL_INTERNAL_H
#define POOL_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "mqc_hist.h"
#include "mqc_url.h"
#include "mqttpool.h"

#define MQP_CORR_LEN  16 /* 8-byte connection nonce + 8-byte sequence */
#define MQP_TOPIC_MAX 512

struct mosquitto;
typedef struct ssl_ctx_st SSL_CTX;

enum op_kind {
	/* The first three start new work: mqp_pool_drain refuses them (op->kind <= OP_ACQUIRE). */
	OP_REQUEST,
	OP_PUBLISH,
	OP_ACQUIRE,
	OP_LEASE_SUBSCRIBE,
	OP_LEASE_PUBLISH,
	OP_LEASE_RECEIVE,
	OP_RELEASE,
	OP_DISCARD,
};

/* A message queued for a lease. */
struct lmsg {
	struct mqp_message m;
	struct lmsg *next;
};

/* One caller's request or publish. Two references: the caller's and the I/O thread's. */
struct op {
	enum op_kind kind;
	atomic_int refs;
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;  /* under m */
	int result; /* under m */
	struct mqp_reply reply;
	struct mqp_message msg; /* OP_LEASE_RECEIVE */
	unsigned slot;          /* leases: which connection */
	uint32_t generation;
	int sub_options;
	const char *file;          /* OP_ACQUIRE: the caller */
	mqp_request_cb request_cb; /* async: called instead of waking a caller */
	mqp_done_cb done_cb;
	void *userdata;
	int line;
	char *topic;
	void *payload;
	size_t len;
	int qos, retain;
	uint64_t deadline; /* CLOCK_MONOTONIC ns */
	uint64_t submitted;
	/* I/O thread only */
	struct op *queue_next;
	bool queued, in_pending, acked;
	size_t heap_index;
	struct pconn *conn;
	struct op *conn_next;
	int mid;
	unsigned char corr[MQP_CORR_LEN];
	struct pconn *receiving_on; /* OP_LEASE_RECEIVE parked on this connection */
	UT_hash_handle hh;
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
	unsigned char nonce[8];
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
	atomic_uint size, ready, connecting, inflight, queued, leased;
	atomic_uint_fast64_t acquires, acquire_timeouts, releases, double_releases, stale_dropped;
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
	int ep, evfd;
	/* shared, under lock */
	pthread_mutex_t lock;
	struct op *incoming, **incoming_tail;
	bool stopping, draining;
	atomic_uint outstanding; /* calls accepted and not yet completed */
	pthread_mutex_t hist_lock;
	struct mqc_hist h_request, h_acquire, h_connect;
	char last_error[256];
	struct pool_stats stats; /* atomics */
	/* I/O thread only */
	struct pconn *conns; /* max_size slots */
	struct op *queue, **queue_tail;
	struct op *acquirers, **acquirers_tail; /* waiting for a lease, FIFO */
	uint32_t *lease_gen; /* per slot: the generation of its current or next lease */
	bool *lease_held;    /* per slot: a lease handle is out */
	struct lease_info {  /* per slot, for leak reports */
		uint64_t since;
		const char *file;
		int line;
		bool reported;
	} * lease_info;
	uint64_t next_housekeeping;
	struct op *pending; /* requests by correlation */
	struct op **heap;   /* every op the I/O thread holds, by deadline */
	size_t heap_len, heap_cap;
	unsigned long conn_counter;
	unsigned id_salt; /* random per pool: part of every client id */
	unsigned backoff_ms;
	uint64_t backoff_until;
	bool connect_failed;
};

static inline void mqp__corr_make(
    const unsigned char nonce[8], uint64_t seq, unsigned char out[MQP_CORR_LEN])
{
	for (int i = 0; i < 8; i++) {
		out[i] = nonce[i];
		out[8 + i] = (unsigned char)(seq >> (8 * i));
	}
}

static inline uint64_t mqp__corr_seq(const unsigned char corr[MQP_CORR_LEN])
{
	uint64_t seq = 0;
	for (int i = 0; i < 8; i++)
		seq |= (uint64_t)corr[8 + i] << (8 * i);
	return seq;
}

/* The I/O thread (pool.c). */
void *mqp__io_thread(void *pool);

#endif
