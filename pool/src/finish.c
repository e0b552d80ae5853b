/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * finish.c - completing the operations the I/O thread holds, ending leases, and the pool's error
 * text and log (finish.h). I/O thread only.
 */
#include "finish.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "claims.h"
#include "logic.h"
#include "mqc_clock.h"

/* --- completing operations ---------------------------------------------------------------- */

/* A lease granted to a caller that had just given up (past its deadline and grace): nobody holds
 * it, so it goes straight back, as if released at once (it has no subscriptions yet). */
static void lease_abandoned(struct mqp_pool *p, unsigned slot)
{
	struct pconn *c = &p->conns[slot];
	c->leased = false;
	c->idle_since = c->last_used = mqc_now_ns();
	mqp__lease_end(p, slot);
}

void mqp__lease_end(struct mqp_pool *p, unsigned slot)
{
	p->lease_held[slot] = false;
	p->lease_gen[slot]++; /* every copy of the old handle is now stale */
	atomic_fetch_add(&p->stats.releases, 1);
	if (atomic_fetch_sub(&p->stats.leased, 1) == 1)
		mqp__inbox_wake_drainers(&p->inbox);
}

/* Take op out of the lists a connection keeps it in besides c->ops. */
static void unlink_waits(struct pconn *c, struct op *op)
{
	for (unsigned i = 0; i < c->nmids; i++)
		if (c->mids[i].op == op)
			c->mids[i].op = NULL; /* the acknowledgement may still come: nobody waits for it */
	struct op **pp;
	if (op->held) {
		for (pp = &c->held; *pp; pp = &(*pp)->wait_next)
			if (*pp == op) {
				*pp = op->wait_next;
				break;
			}
		c->held_tail = &c->held;
		while (*c->held_tail)
			c->held_tail = &(*c->held_tail)->wait_next;
		op->held = false;
	}
	if (op->awaiting_write) {
		for (pp = &c->written; *pp; pp = &(*pp)->wait_next)
			if (*pp == op) {
				*pp = op->wait_next;
				break;
			}
		op->awaiting_write = false;
	}
}

/* A legacy request ends: out of the pool's tables, its reply topic given back - quarantined for
 * its timeout again when it was sent and not answered and no match callback can tell a late
 * reply from the next request's. */
static void legacy_end(struct mqp_pool *p, struct op *op, int result)
{
	if (op->legacy_waiting) {
		for (struct op **pp = &p->legacy_wait; *pp; pp = &(*pp)->wait_next)
			if (*pp == op) {
				*pp = op->wait_next;
				break;
			}
		p->legacy_wait_tail = &p->legacy_wait;
		while (*p->legacy_wait_tail)
			p->legacy_wait_tail = &(*p->legacy_wait_tail)->wait_next;
		op->legacy_waiting = false;
	}
	if (op->in_legacy) {
		HASH_DELETE(hh_legacy, p->legacy, op);
		op->in_legacy = false;
	}
	if (op->claimed) {
		bool doubt = op->sent && result != MQP_OK && !op->match;
		mqp__unclaim(op->reply_topic, mqc_now_ns(), doubt ? op->deadline - op->submitted : 0,
		    op->sent && op->conn ? op->conn->token : 0);
		op->claimed = false;
	}
}

void mqp__legacy_wait(struct mqp_pool *p, struct op *op)
{
	op->legacy_waiting = true;
	op->wait_next = NULL;
	*p->legacy_wait_tail = op;
	p->legacy_wait_tail = &op->wait_next;
}

void mqp__finish(struct mqp_pool *p, struct op *op, int result)
{
	mqp__heap_remove(&p->heap, op);
	if (op->kind == OP_LEGACY)
		legacy_end(p, op, result);
	if (op->ticket)
		HASH_DELETE(hh_ticket, p->tickets, op);
	if (op->in_pending) {
		HASH_DEL(p->pending, op);
		op->in_pending = false;
	}
	if (op->conn) {
		struct pconn *c = op->conn;
		for (struct op **pp = &c->ops; *pp; pp = &(*pp)->conn_next)
			if (*pp == op) {
				*pp = op->conn_next;
				break;
			}
		unlink_waits(c, op);
		c->inflight--;
		atomic_fetch_sub(&p->stats.inflight, 1); /* exact before the caller wakes */
		op->conn = NULL;
	}
	if (op->receiving_on) {
		op->receiving_on->receiver = NULL;
		op->receiving_on = NULL;
	}
	if (result == MQP_ETIMEDOUT || result == MQP_EEXHAUSTED)
		atomic_fetch_add(&p->stats.timeouts, 1);
	if (result == MQP_ETIMEDOUT && op->kind == OP_ACQUIRE)
		atomic_fetch_add(&p->stats.acquire_timeouts, 1);
	if (result == MQP_ECANCELED)
		atomic_fetch_add(&p->stats.cancels, 1);
	if (result == MQP_OK
	    && (op->kind == OP_REQUEST || op->kind == OP_LEGACY || op->kind == OP_ACQUIRE)) {
		pthread_mutex_lock(&p->report_lock);
		mqc_hist_record(
		    op->kind == OP_ACQUIRE ? &p->h_acquire : &p->h_request, mqc_now_ns() - op->submitted);
		pthread_mutex_unlock(&p->report_lock);
	}
	if (p->defer_callbacks && (op->request_cb || op->done_cb || op->acquire_cb)) {
		/* A call on the loop's thread is running: its callback must not run inside it. */
		op->result = result;
		op->queue_next = NULL;
		*p->later_tail = op;
		p->later_tail = &op->queue_next;
		return;
	}
	mqp__deliver(p, op, result);
}

void mqp__deliver(struct mqp_pool *p, struct op *op, int result)
{
	if (op->request_cb) /* async: the one and only call, on this thread, no lock held */
		op->request_cb(op->userdata, result, result == MQP_OK ? &op->reply : NULL);
	else if (op->done_cb)
		op->done_cb(op->userdata, result);
	else if (op->acquire_cb)
		op->acquire_cb(op->userdata, result,
		    result == MQP_OK
		        ? (mqp_lease) { .pool = p, .slot = op->slot, .generation = op->generation }
		        : (mqp_lease) { 0 });
	else {
		/* A caller waits: its call is over before it wakes, so a drain it makes next (or
		 * anyone's) does not still count it. */
		mqp__inbox_done(&p->inbox);
		if (!mqp__op_complete(op, result) && op->kind == OP_ACQUIRE && result == MQP_OK)
			lease_abandoned(p, op->slot); /* drain also waits for the lease count */
		mqp__op_unref(op);
		return;
	}
	/* Only now is an async call over: a drain must not return while its callback still runs. */
	mqp__inbox_done(&p->inbox);
	mqp__op_unref(op);
}

/* --- lease message queues ---------------------------------------------------------------- */

void mqp__lease_clear(struct mqp_pool *p, struct pconn *c)
{
	while (c->qhead) {
		struct lmsg *l = c->qhead;
		c->qhead = l->next;
		mqp_message_free(&l->m);
		free(l);
		atomic_fetch_add(&p->stats.stale_dropped, 1); /* never reaches the next borrower */
	}
	c->qtail = &c->qhead;
	for (size_t i = 0; i < c->nfilters; i++)
		free(c->filters[i]);
	free(c->filters);
	c->filters = NULL;
	c->nfilters = 0;
	c->retained_ok = false;
}

/* --- errors and logging ------------------------------------------------------------------ */

void mqp__set_error(struct mqp_pool *p, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&p->report_lock);
	va_start(ap, fmt);
	vsnprintf(p->last_error, sizeof p->last_error, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&p->report_lock);
}

void mqp__log(struct mqp_pool *p, int level, const char *fmt, ...)
{
	if (!p->opt.log_cb)
		return;
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	p->opt.log_cb(p->opt.userdata, level, text);
}
