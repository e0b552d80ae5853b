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

#define MQP_CORR_LEN  16 /* one AES block: corr.c */
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
	OP_CANCEL, /* of an async call, by ticket */
};

enum { OP_PENDING, OP_SLEEPING, OP_DONE };

/* A message queued for a lease. */
struct lmsg {
	struct mqp_message m;
	struct lmsg *next;
};

/* One caller's request or publish. Two references: the caller's and the I/O thread's. */
struct op {
	enum op_kind kind;
	atomic_int refs;
	atomic_uint state; /* OP_PENDING, OP_SLEEPING (the caller waits on a futex), OP_DONE */
	int result;        /* written before state becomes OP_DONE */
	struct mqp_reply reply;
	struct mqp_message msg; /* OP_LEASE_RECEIVE */
	unsigned slot;          /* leases: which connection */
	uint32_t generation;
	int sub_options;
	const char *file;          /* OP_ACQUIRE: the caller */
	mqp_request_cb request_cb; /* async: called instead of waking a caller */
	mqp_done_cb done_cb;
	mqp_acquire_cb acquire_cb;
	void *userdata;
	mqp_ticket ticket;        /* async calls: nonzero, for mqp_pool_cancel */
	mqp_ticket ticket_target; /* OP_CANCEL: the call to cancel */
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
	uint64_t first_dispatch;    /* the dispatch pass that first saw it queued */
	UT_hash_handle hh;          /* p->pending, by correlation */
	UT_hash_handle hh_ticket;   /* p->tickets, by ticket */
};

/* Every op the I/O thread holds, by deadline (a binary min-heap). */
struct op_heap {
	struct op **v;
	size_t len, cap;
};

/* A FIFO of waiting ops, linked through queue_next. */
struct op_fifo {
	struct op *head, **tail;
};

/* A connection's correlation key (corr.c): OpenSSL cipher contexts, I/O thread only. */
struct evp_cipher_ctx_st;
struct mqp_corr {
	struct evp_cipher_ctx_st *enc, *dec;
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
	int ep, evfd;
	/* shared, under lock */
	pthread_mutex_t lock;
	struct op *incoming, **incoming_tail;
	bool stopping, draining;
	bool destroy_deferred;     /* mqp_pool_destroy from a callback: the I/O thread frees the pool */
	atomic_bool drain_waiting; /* a mqp_pool_drain waits on drained: see wake_drainers */
	pthread_cond_t drained;    /* under lock; CLOCK_MONOTONIC */
	atomic_uint outstanding;   /* calls accepted and not yet completed (callback returned) */
	mqp_ticket next_ticket;    /* under lock */
	pthread_mutex_t hist_lock;
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
	struct op *pending; /* requests by correlation */
	struct op *tickets; /* async calls by ticket */
	struct op_heap heap;
	unsigned backoff_ms;
	uint64_t backoff_until;
	bool connect_failed;
};

/* --- corr.c: correlation data nobody can guess (one AES-128 block per request) ------------ */

/* create.c: free everything of a pool whose I/O thread has ended (or is ending: deferred). */
void mqp__pool_free(struct mqp_pool *p);

int mqp__corr_init(struct mqp_corr *k); /* a fresh random key; -1 when none can be had */
void mqp__corr_free(struct mqp_corr *k);
int mqp__corr_seal(struct mqp_corr *k, uint64_t seq, unsigned char out[MQP_CORR_LEN]);
/* Whether corr is one this key sealed; its sequence in *seq. */
bool mqp__corr_open(struct mqp_corr *k, const void *corr, size_t len, uint64_t *seq);

/* --- logic.c: the pool's decisions, without threads, sockets or a clock ----------------- */

enum { MQP_BACKOFF_MIN_MS = 100, MQP_BACKOFF_MAX_MS = 5000 };
enum mqp_evict { MQP_KEEP, MQP_EVICT_LIFETIME, MQP_EVICT_IDLE };
enum mqp_unmatched { MQP_STRAY, MQP_LATE };

int mqp__heap_push(struct op_heap *h, struct op *op); /* -1: out of memory */
void mqp__heap_remove(struct op_heap *h, struct op *op);
void mqp__fifo_push(struct op_fifo *q, struct op *op);
struct op *mqp__fifo_pop(struct op_fifo *q); /* NULL when empty */
bool mqp__fifo_remove(struct op_fifo *q, struct op *op);
/* The least loaded usable connection with room, or -1. */
int mqp__pick_for_request(const struct pconn *conns, unsigned n, unsigned max_inflight);
/* The most recently released idle connection, or -1. */
int mqp__pick_for_lease(const struct pconn *conns, const bool *lease_held, unsigned n);
bool mqp__should_open(
    unsigned open, unsigned connecting, bool waiting, unsigned min_size, unsigned max_size);
enum mqp_evict mqp__eviction(
    const struct pconn *c, uint64_t now, unsigned open, unsigned min_size, uint64_t idle_ns);
unsigned mqp__backoff_next(unsigned backoff_ms);
unsigned mqp__backoff_wait_ms(unsigned backoff_ms, uint32_t random);
uint64_t mqp__retire_at(uint64_t ready_at, uint64_t lifetime_ns, uint32_t random);
/* A reply no pending request claimed: late when this connection sealed its correlation data
 * (ours, seq) for a request it already sent, else a stray. */
enum mqp_unmatched mqp__classify_unmatched(bool ours, uint64_t seq, uint64_t next_seq);
bool mqp__lease_valid(unsigned slot, uint32_t generation, unsigned n, const bool *lease_held,
    const uint32_t *lease_gen);
uint32_t mqp__next_epoch(uint32_t epoch);
int mqp__legacy_check(const char *topic, const char *reply_topic);

/* The I/O thread (pool.c). */
void *mqp__io_thread(void *pool);

#endif
