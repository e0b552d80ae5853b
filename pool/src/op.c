/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * op.c - an operation's life and the hand-off between callers and the I/O thread (op.h).
 *
 * Why a futex and not a mutex and condition variable per op: the hand-off to the I/O thread and
 * back is the pool's whole cost over a connection driven by the caller itself. With a condition
 * variable the woken caller collided with the I/O thread on the op's mutex (futex wait and wake
 * on both sides, measured with perf); with the state word the I/O thread makes one wake-up
 * system call, and none when the caller has not gone to sleep yet.
 */
#define _GNU_SOURCE
#include "op.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mqc_clock.h"

/* --- an op's life ------------------------------------------------------------------------- */

struct op *mqp__op_new(enum op_kind kind, const char *topic, const void *payload, size_t len,
    int qos, int retain, uint64_t deadline)
{
	struct op *op = calloc(1, sizeof *op);
	if (!op)
		return NULL;
	op->kind = kind;
	atomic_init(&op->refs, 2);
	atomic_init(&op->state, OP_PENDING);
	op->topic = strdup(topic);
	op->payload = malloc(len ? len : 1);
	if (!op->topic || !op->payload) {
		free(op->topic);
		free(op->payload);
		free(op);
		return NULL;
	}
	if (len > 0) /* lease operations and empty payloads have none */
		memcpy(op->payload, payload, len);
	op->len = len;
	op->qos = qos;
	op->retain = retain;
	op->deadline = deadline;
	op->submitted = mqc_now_ns();
	op->heap_index = MQC_HEAP_NONE;
	return op;
}

void mqp_reply_free(struct mqp_reply *r)
{
	if (!r)
		return;
	free(r->payload);
	free(r->topic);
	*r = (struct mqp_reply) { 0 };
}

void mqp_message_free(struct mqp_message *m)
{
	if (!m)
		return;
	free(m->topic);
	free(m->payload);
	*m = (struct mqp_message) { 0 };
}

void mqp__op_unref(struct op *op)
{
	if (atomic_fetch_sub(&op->refs, 1) != 1)
		return;
	mqp_reply_free(&op->reply);
	mqp_message_free(&op->msg);
	free(op->topic);
	free(op->payload);
	free(op->reply_topic);
	free(op);
}

/* --- the futex hand-off ------------------------------------------------------------------- */

static long futex(atomic_uint *word, int op, unsigned value, const struct timespec *abs_timeout)
{
	return syscall(
	    SYS_futex, word, op | FUTEX_PRIVATE_FLAG, value, abs_timeout, NULL, FUTEX_BITSET_MATCH_ANY);
}

bool mqp__op_complete(struct op *op, int result)
{
	unsigned state = atomic_load_explicit(&op->state, memory_order_acquire);
	if (state == OP_DONE)
		return false; /* the caller stopped waiting */
	op->result = result;
	unsigned was = atomic_exchange_explicit(&op->state, OP_DONE, memory_order_acq_rel);
	if (was == OP_DONE)
		return false; /* it gave up between the load and the exchange */
	if (was == OP_SLEEPING)
		futex(&op->state, FUTEX_WAKE_BITSET, 1, NULL);
	return true;
}

bool mqp__op_wait(struct op *op, uint64_t until)
{
	struct timespec abs = mqc_ns_to_ts(until);
	for (;;) {
		unsigned state = atomic_load_explicit(&op->state, memory_order_acquire);
		if (state == OP_DONE)
			return true;
		if (state == OP_PENDING
		    && !atomic_compare_exchange_weak_explicit(
		        &op->state, &state, OP_SLEEPING, memory_order_acq_rel, memory_order_acquire))
			continue; /* completed (or spuriously failed) meanwhile: look again */
		if (futex(&op->state, FUTEX_WAIT_BITSET, OP_SLEEPING, &abs) == -1 && errno == ETIMEDOUT) {
			state = OP_SLEEPING;
			if (atomic_compare_exchange_strong_explicit(
			        &op->state, &state, OP_DONE, memory_order_acq_rel, memory_order_acquire))
				return false;
			return true; /* completed at the last moment */
		}
	}
}

/* --- the inbox ------------------------------------------------------------------------------ */

int mqp__inbox_init(struct op_inbox *in)
{
	*in = (struct op_inbox) { .evfd = -1 };
	in->tail = &in->head;
	in->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (in->evfd < 0)
		return -1;
	pthread_mutex_init(&in->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&in->drained, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

void mqp__inbox_free(struct op_inbox *in)
{
	if (in->evfd < 0)
		return; /* never initialised */
	close(in->evfd);
	in->evfd = -1;
	pthread_mutex_destroy(&in->lock);
	pthread_cond_destroy(&in->drained);
}

static void wake_io(struct op_inbox *in)
{
	uint64_t one = 1;
	ssize_t w = write(in->evfd, &one, sizeof one);
	(void)w; /* EAGAIN: the counter is full, so the I/O thread is awake anyway */
}

int mqp__inbox_post(struct op_inbox *in, struct op *op, mqp_ticket *ticket)
{
	pthread_mutex_lock(&in->lock);
	bool refused
	    = atomic_load(&in->stopping) || (atomic_load(&in->draining) && op->kind <= OP_ACQUIRE);
	bool first = in->head == NULL; /* the I/O thread takes the whole list per wake-up */
	if (!refused) {
		if (ticket) /* before the I/O thread can see it, so before any callback */
			*ticket = op->ticket = atomic_fetch_add(&in->next_ticket, 1) + 1;
		atomic_fetch_add(&in->outstanding, 1);
		op->queue_next = NULL;
		*in->tail = op;
		in->tail = &op->queue_next;
		/* Under the lock: once it is released the I/O thread may take this op, complete it
		 * and, when a callback destroyed the pool, free the inbox and close the eventfd (whose
		 * number may then be reused) before a write after the unlock (TSan saw it, once). */
		if (first)
			wake_io(in);
	}
	pthread_mutex_unlock(&in->lock);
	if (refused) {
		atomic_store(&op->refs, 1);
		mqp__op_unref(op);
		return MQP_ECLOSED;
	}
	return MQP_OK;
}

int mqp__inbox_admit(struct op_inbox *in, struct op *op, mqp_ticket *ticket)
{
	/* Counted first, checked second: a drain sets draining first and counts second, so either
	 * it sees this op or this op sees the drain (both sequentially consistent). */
	atomic_fetch_add(&in->outstanding, 1);
	if (atomic_load(&in->stopping) || (atomic_load(&in->draining) && op->kind <= OP_ACQUIRE)) {
		mqp__inbox_done(in);
		atomic_store(&op->refs, 1);
		mqp__op_unref(op);
		return MQP_ECLOSED;
	}
	if (ticket)
		*ticket = op->ticket = atomic_fetch_add(&in->next_ticket, 1) + 1;
	return MQP_OK;
}

struct op *mqp__inbox_take(struct op_inbox *in)
{
	if (!in->edge) {
		uint64_t v;
		ssize_t got = read(in->evfd, &v, sizeof v);
		(void)got; /* EAGAIN: a wake-up already consumed with an earlier batch */
	}
	pthread_mutex_lock(&in->lock);
	struct op *list = in->head;
	in->head = NULL;
	in->tail = &in->head;
	pthread_mutex_unlock(&in->lock);
	return list;
}

bool mqp__inbox_stopping(struct op_inbox *in)
{
	return atomic_load(&in->stopping);
}

void mqp__inbox_stop(struct op_inbox *in, bool deferred)
{
	pthread_mutex_lock(&in->lock);
	if (deferred && !atomic_load(&in->stopping))
		in->destroy_deferred = true;
	atomic_store(&in->stopping, true);
	pthread_mutex_unlock(&in->lock);
	wake_io(in);
}

bool mqp__inbox_destroy_deferred(struct op_inbox *in)
{
	pthread_mutex_lock(&in->lock);
	bool deferred = in->destroy_deferred;
	pthread_mutex_unlock(&in->lock);
	return deferred;
}

/* The common case (nobody drains) costs one atomic load; drain sets drain_waiting before it
 * checks the counts under the lock, and this takes the lock to signal, so no wake-up is lost
 * between its check and its wait. */
void mqp__inbox_wake_drainers(struct op_inbox *in)
{
	if (!atomic_load(&in->drain_waiting))
		return;
	pthread_mutex_lock(&in->lock);
	pthread_cond_broadcast(&in->drained);
	pthread_mutex_unlock(&in->lock);
}

void mqp__inbox_done(struct op_inbox *in)
{
	if (atomic_fetch_sub(&in->outstanding, 1) == 1)
		mqp__inbox_wake_drainers(in);
}

static bool drained(struct op_inbox *in, const atomic_uint *also)
{
	return atomic_load(&in->outstanding) == 0 && (!also || atomic_load(also) == 0);
}

int mqp__inbox_drain(struct op_inbox *in, const atomic_uint *also, unsigned timeout_ms)
{
	struct timespec until = mqc_ns_to_ts(mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS);
	int rc = MQP_OK;
	pthread_mutex_lock(&in->lock);
	atomic_store(&in->draining, true);
	atomic_store(&in->drain_waiting, true);
	while (!drained(in, also))
		if (pthread_cond_timedwait(&in->drained, &in->lock, &until) == ETIMEDOUT) {
			rc = drained(in, also) ? MQP_OK : MQP_ETIMEDOUT;
			break;
		}
	pthread_mutex_unlock(&in->lock);
	return rc;
}
