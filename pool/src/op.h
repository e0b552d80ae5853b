/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * op.h - an operation's life and its hand-off between a caller and the I/O thread (op.c).
 *
 * A caller creates an op with two references, posts it to the pool's inbox (a mutex-protected
 * list and an eventfd written only when the list was empty: one wake-up per batch) and waits on
 * the op's state word with a futex. The I/O thread takes the whole list at once, completes each
 * op exactly once and drops its reference; the caller drops the other. An async op has one
 * reference (the I/O thread's) and a callback instead of a waiting caller.
 *
 * This layer knows nothing of connections or MQTT: tests/handoff_test.c drives it with many
 * threads and no broker.
 */
#ifndef MQP_OP_H
#define MQP_OP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "corr.h"
#include "mqc_heap.h"
#include "mqttpool.h"

enum op_kind {
	/* The first four start new work: a draining inbox refuses them (kind <= OP_ACQUIRE). */
	OP_REQUEST,
	OP_PUBLISH,
	OP_LEGACY, /* a request answered on a fixed reply topic */
	OP_ACQUIRE,
	OP_LEASE_SUBSCRIBE,
	OP_LEASE_PUBLISH,
	OP_LEASE_RECEIVE,
	OP_RELEASE,
	OP_DISCARD,
	OP_CANCEL, /* of an async call, by ticket */
};

enum { OP_PENDING, OP_SLEEPING, OP_DONE };

struct pconn;

/* One caller's call. Two references when a caller waits (its own and the I/O thread's), one
 * when the call is async. */
struct op {
	enum op_kind kind;
	atomic_int refs;
	atomic_uint state; /* OP_PENDING, OP_SLEEPING (the caller waits on a futex), OP_DONE */
	/* Written by the I/O thread before state becomes OP_DONE; read by a caller only after its
	 * wait returned true. */
	int result;
	struct mqp_reply reply;
	struct mqp_message msg; /* OP_LEASE_RECEIVE */
	unsigned slot;          /* leases: which connection */
	uint32_t generation;
	/* Set by the caller before the post, then read-only. */
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
	char *reply_topic; /* OP_LEGACY: where the reply comes (owned) */
	mqp_match_cb match;
	void *match_userdata;
	uint64_t deadline; /* CLOCK_MONOTONIC ns */
	uint64_t submitted;
	/* I/O thread only (queue_next also links the inbox, under its lock) */
	struct op *queue_next;
	bool queued, in_pending, acked;
	size_t heap_index; /* in the pool's deadline heap; MQC_HEAP_NONE when not */
	struct pconn *conn;
	struct op *conn_next;
	struct op *wait_next; /* a connection's held (quota) or written (QoS 0) list, or the
	                         pool's legacy_wait list */
	bool held, awaiting_write;
	bool claimed, legacy_waiting, in_legacy, sent; /* OP_LEGACY */
	uint64_t last_conn; /* OP_LEGACY: the connection its reply topic's last request used */
	int mid;
	unsigned char corr[MQP_CORR_LEN];
	struct pconn *receiving_on; /* OP_LEASE_RECEIVE parked on this connection */
	uint64_t first_dispatch;    /* the dispatch pass that first saw it queued */
	UT_hash_handle hh;          /* the pool's pending requests, by correlation */
	UT_hash_handle hh_ticket;   /* the pool's async calls, by ticket */
	UT_hash_handle hh_legacy;   /* the pool's legacy requests on a connection, by reply topic */
};

/* A FIFO of waiting ops, linked through queue_next (logic.c). */
struct op_fifo {
	struct op *head, **tail;
};

/* NULL when out of memory. The payload is copied; topic must not be NULL. */
struct op *mqp__op_new(enum op_kind kind, const char *topic, const void *payload, size_t len,
    int qos, int retain, uint64_t deadline);
void mqp__op_unref(struct op *op);
/* Wake the caller waiting for op (I/O thread). False when the caller gave up first: then
 * nobody takes the result, and whatever op carries is the I/O thread's to undo. */
bool mqp__op_complete(struct op *op, int result);
/* Wait until op is done or the absolute CLOCK_MONOTONIC time until (caller). True when the I/O
 * thread completed it; false when the caller gave up first (op is then marked done, so a later
 * completion leaves the caller alone). */
bool mqp__op_wait(struct op *op, uint64_t until);

/* Where callers hand ops to the I/O thread, and what mqp_pool_drain and destroy wait on. */
struct op_inbox {
	pthread_mutex_t lock;
	struct op *head, **tail;          /* under lock */
	atomic_uint_fast64_t next_ticket; /* the last ticket issued */
	atomic_bool stopping;             /* written under lock: everything is refused */
	atomic_bool draining;             /* written under lock: new work is refused */
	bool destroy_deferred;            /* under lock: the I/O thread frees the pool (destroy from a
	                                     callback) */
	pthread_cond_t drained;           /* under lock; CLOCK_MONOTONIC */
	atomic_bool drain_waiting;
	atomic_uint outstanding; /* posted and not yet completed (callback returned) */
	int evfd;                /* readable when the list has ops or the inbox stops */
	bool edge; /* evfd is watched edge-triggered (the pool's own epoll): every write is a new
	              event, so it is never read - one system call less per batch (its counter,
	              64 bits, cannot fill) */
};

int mqp__inbox_init(struct op_inbox *in); /* -1 (errno) when no eventfd can be had */
void mqp__inbox_free(struct op_inbox *in);
/* Post op; MQP_ECLOSED (op freed) while stopping, or while draining for new work. ticket not
 * NULL: an async call's ticket is issued under the lock that publishes op, so before any
 * callback can run. */
int mqp__inbox_post(struct op_inbox *in, struct op *op, mqp_ticket *ticket);
/* The pool's own thread (a pool on an event loop, called from the loop's thread): admit op
 * without the lock or a wake-up, with the same refusals and ticket as a post. MQP_OK, or
 * MQP_ECLOSED with op freed. */
int mqp__inbox_admit(struct op_inbox *in, struct op *op, mqp_ticket *ticket);
/* I/O thread: every op posted so far, oldest first (linked through queue_next). */
struct op *mqp__inbox_take(struct op_inbox *in);
bool mqp__inbox_stopping(struct op_inbox *in);
/* Refuse everything from now on and wake the I/O thread. deferred: called on the I/O thread
 * itself (from a callback), which must then free the pool when it ends - unless a stop was
 * already under way, whose caller frees it. */
void mqp__inbox_stop(struct op_inbox *in, bool deferred);
bool mqp__inbox_destroy_deferred(struct op_inbox *in);
/* I/O thread: a posted op's call is over (its callback has returned). */
void mqp__inbox_done(struct op_inbox *in);
/* A count drain waits for (outstanding, or *also) may have reached zero: wake the drainers. */
void mqp__inbox_wake_drainers(struct op_inbox *in);
/* Refuse new work; wait up to timeout_ms until nothing is outstanding and *also is zero.
 * MQP_OK or MQP_ETIMEDOUT. */
int mqp__inbox_drain(struct op_inbox *in, const atomic_uint *also, unsigned timeout_ms);

#endif
