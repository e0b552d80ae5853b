/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * io.c - the I/O thread's loop: callers' operations in, dispatch to connections in FIFO order,
 * lease operations, cancels, deadlines, housekeeping, and at the end of every turn one send per
 * connection for everything the turn queued. Every socket of the pool is read and written from
 * here or from conn.c, on this one thread.
 */
#define _GNU_SOURCE
#include "io.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "claims.h"
#include "conn.h"
#include "logic.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_random.h"
#include "node.h"

/* Connections open or opening; of them ready, connecting, and available (ready, idle, not
 * leased). */
static unsigned count_open(
    const struct mqp_pool *p, unsigned *ready, unsigned *connecting, unsigned *available)
{
	unsigned open = 0;
	*ready = *connecting = *available = 0;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		const struct pconn *c = &p->conns[i];
		if (!c->open || c->stage == STAGE_CLOSING)
			continue;
		open++;
		*ready += c->ready;
		*connecting += !c->ready;
		*available += c->ready && !c->dead && !c->leased && c->inflight == 0;
	}
	return open;
}

/* Open a connection in a free slot (on node, or where mqp__node_next says when node is -1). */
static bool open_on(struct mqp_pool *p, int node)
{
	if (node < 0 && (node = mqp__node_next(p, mqc_now_ns())) < 0)
		return false;
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (!p->conns[i].open && !p->lease_held[i]) { /* a broken lease keeps its slot */
			mqp__conn_open(p, &p->conns[i], (unsigned)node);
			return p->conns[i].open;
		}
	return false;
}

static void open_one(struct mqp_pool *p)
{
	open_on(p, -1);
}

static void start_op(struct mqp_pool *p, struct pconn *c, struct op *op)
{
	if (op->kind == OP_REQUEST) {
		/* The Response Topic is the inbox itself: nothing in it tells one request from the next. */
		if (mqp__corr_seal(&c->corr, c->next_seq++, op->corr) != 0) {
			mqp__finish(p, op, MQP_ENOMEM);
			return;
		}
		/* Registered before the command goes out: a fast reply always finds its caller. */
		HASH_ADD(hh, p->pending, corr, MQP_CORR_LEN, op);
		op->in_pending = true;
		atomic_fetch_add(&p->stats.requests, 1);
		atomic_fetch_add(&p->nodes[c->node].requests, 1);
	} else {
		atomic_fetch_add(&p->stats.publishes, 1);
	}
	op->conn = c;
	op->conn_next = c->ops;
	c->ops = op;
	c->inflight++;
	atomic_fetch_add(&p->stats.inflight, 1);
	int rc = mqp__conn_publish(p, c, op);
	if (rc != MQP_OK)
		mqp__finish(p, op, rc);
}

/* A legacy request on c: in the pool's table by reply topic (where its reply is looked for), then
 * sent, or subscribed first. */
static void start_legacy(struct mqp_pool *p, struct pconn *c, struct op *op)
{
	HASH_ADD_KEYPTR(hh_legacy, p->legacy, op->reply_topic, strlen(op->reply_topic), op);
	op->in_legacy = true;
	atomic_fetch_add(&p->stats.requests, 1);
	op->conn = c;
	op->conn_next = c->ops;
	c->ops = op;
	c->inflight++;
	atomic_fetch_add(&p->stats.inflight, 1);
	int rc = mqp__conn_legacy(p, c, op);
	if (rc != MQP_OK)
		mqp__finish(p, op, rc);
}

/* A legacy request takes its reply topic (process-wide) and queues for a connection, or waits
 * for the topic. */
static void claim_or_wait(struct mqp_pool *p, struct op *op)
{
	uint64_t until;
	switch (mqp__claim(op->reply_topic, mqc_now_ns(), &until, &op->last_conn)) {
		case MQP_CLAIM_OK:
			op->claimed = true;
			mqp__fifo_push(&p->queue, op);
			break;
		case MQP_CLAIM_BUSY:
			mqp__legacy_wait(p, op);
			break;
		default:
			mqp__finish(p, op, MQP_ENOMEM);
	}
}

/* Legacy requests whose reply topic was busy try again, in order (each turn: a topic freed in
 * this pool is taken at once; one another pool held, or a quarantine, within 10 ms). */
static void retry_legacy(struct mqp_pool *p)
{
	struct op *list = p->legacy_wait;
	p->legacy_wait = NULL;
	p->legacy_wait_tail = &p->legacy_wait;
	while (list) {
		struct op *op = list;
		list = op->wait_next;
		op->legacy_waiting = false;
		claim_or_wait(p, op);
	}
}

/* An op leaves a wait queue: it waited unless the first dispatch pass after its arrival served
 * it. */
static void left_queue(struct mqp_pool *p, struct op *op, bool served)
{
	if (!served || op->first_dispatch != p->dispatches)
		atomic_fetch_add(&p->stats.waits, 1);
}

/* Hand queued ops to connections in strict FIFO order; open connections as needed. */
static void dispatch(struct mqp_pool *p)
{
	p->dispatches++;
	if (p->legacy_wait)
		retry_legacy(p);
	while (p->queue.head) {
		struct op *head = p->queue.head;
		int i = head->kind == OP_LEGACY
		    ? mqp__pick_for_legacy(
		        p->conns, p->opt.max_size, p->opt.max_inflight, head->reply_topic)
		    : mqp__pick_for_request(p->conns, p->opt.max_size, p->opt.max_inflight);
		if (i < 0)
			break;
		struct pconn *c = &p->conns[i];
		struct op *op = mqp__fifo_pop(&p->queue);
		left_queue(p, op, true);
		if (op->kind == OP_LEGACY)
			start_legacy(p, c, op);
		else
			start_op(p, c, op);
		mqp__conn_settle(p, c);
	}
	/* Leases: strict FIFO among waiters; the most recently released idle connection first. */
	while (p->acquirers.head) {
		int i = mqp__pick_for_lease(p->conns, p->lease_held, p->opt.max_size);
		if (i < 0)
			break;
		struct pconn *best = &p->conns[i];
		struct op *op = mqp__fifo_pop(&p->acquirers);
		left_queue(p, op, true);
		unsigned slot = (unsigned)i;
		best->leased = true;
		p->lease_held[slot] = true;
		atomic_fetch_add(&p->stats.leased, 1); /* exact before the caller wakes */
		p->lease_info[slot]
		    = (struct lease_info) { .since = mqc_now_ns(), .file = op->file, .line = op->line };
		op->slot = slot;
		op->generation = p->lease_gen[slot];
		atomic_fetch_add(&p->stats.acquires, 1);
		mqp__finish(p, op, MQP_OK);
	}
	unsigned ready, connecting, available;
	unsigned open = count_open(p, &ready, &connecting, &available);
	bool waiting = p->queue.head || p->acquirers.head;
	if (mqp__should_open(open, connecting, waiting, p->opt.min_size, p->opt.max_size))
		open_one(p);
	/* Nothing can connect: waiting callers learn why now rather than at their deadline (once
	 * the 3.1.1 check, when one runs, has said whether the protocol version is why).
	 * A refusal is not transient: calls fail at once even while the next attempt is made. */
	if (p->connect_failed && waiting && ready == 0 && (open == 0 || p->refused)
	    && p->probe_state != PROBE_RUNNING) {
		struct op *op;
		while ((op = mqp__fifo_pop(&p->queue)) || (op = mqp__fifo_pop(&p->acquirers))) {
			left_queue(p, op, false);
			mqp__finish(p, op, p->refused ? MQP_EREFUSED : MQP_ECONNECT);
		}
	}
}

/* An operation on a lease handle: valid only for the slot's current generation. */
static void lease_op(struct mqp_pool *p, struct op *op)
{
	unsigned slot = op->slot;
	if (!mqp__lease_valid(slot, op->generation, p->opt.max_size, p->lease_held, p->lease_gen)) {
		if (op->kind == OP_RELEASE || op->kind == OP_DISCARD)
			atomic_fetch_add(&p->stats.double_releases, 1);
		mqp__finish(p, op, MQP_ERELEASED);
		return;
	}
	struct pconn *c = &p->conns[slot];
	bool alive = c->open && c->leased && !c->dead;
	if (op->kind == OP_RELEASE || op->kind == OP_DISCARD) {
		/* 3.1.1 (or a broker without Subscription Identifiers): nothing can tell this borrower's
		 * late messages from the next one's. */
		bool discard = op->kind == OP_DISCARD || (!c->sub_ids_available && c->nfilters > 0);
		if (alive) {
			if (c->receiver)
				mqp__finish(p, c->receiver, MQP_ERELEASED);
			for (size_t i = 0; i < c->nfilters && !discard; i++) /* no wait: the id retires */
				mqp__conn_unsubscribe(p, c, c->filters[i]);
			mqp__lease_clear(p, c);
			c->epoch = mqp__next_epoch(c->epoch);
			c->leased = false;
			c->idle_since = c->last_used = mqc_now_ns();
		}
		mqp__lease_end(p, slot);
		mqp__finish(p, op, MQP_OK);
		if (alive && discard)
			mqp__conn_retire(p, c); /* DISCONNECT; closed once the broker closes */
		return;
	}
	if (!alive) {
		mqp__finish(p, op, MQP_ECONNLOST);
		return;
	}
	if (op->kind == OP_LEASE_RECEIVE) {
		if (c->receiver) {
			mqp__finish(p, op, MQP_EBUSY);
		} else if (c->qhead) {
			struct lmsg *l = c->qhead;
			c->qhead = l->next;
			if (!c->qhead)
				c->qtail = &c->qhead;
			op->msg = l->m;
			free(l);
			mqp__finish(p, op, MQP_OK);
		} else {
			c->receiver = op;
			op->receiving_on = c;
		}
		return;
	}
	if (op->kind == OP_LEASE_SUBSCRIBE && p->opt.protocol == 5) {
		/* The same filter as the connection's inbox subscription would replace it, and
		 * unsubscribing it at release would leave the connection deaf to every reply. */
		char inbox_filter[sizeof c->inbox + 2];
		snprintf(inbox_filter, sizeof inbox_filter, "%s/#", c->inbox);
		if (strcmp(op->topic, inbox_filter) == 0) {
			mqp__finish(p, op, MQP_EINVAL);
			return;
		}
	}
	op->conn = c;
	op->conn_next = c->ops;
	c->ops = op;
	c->inflight++;
	atomic_fetch_add(&p->stats.inflight, 1);
	int rc;
	if (op->kind == OP_LEASE_SUBSCRIBE) {
		char **grown = realloc(c->filters, (c->nfilters + 1) * sizeof *grown);
		char *copy = strdup(op->topic);
		if (!grown || !copy) {
			free(copy);
			if (grown)
				c->filters = grown;
			mqp__finish(p, op, MQP_ENOMEM);
			return;
		}
		c->filters = grown;
		c->filters[c->nfilters++] = copy;
		bool retained = (op->sub_options & MQP_SUB_RETAINED) != 0;
		/* v5: the broker sends retained messages only to the subscription that asked; 3.1.1
		 * cannot say per subscription: the lease. */
		if (p->opt.protocol != 5)
			c->retained_ok |= retained;
		rc = mqp__conn_subscribe(p, c, op, op->topic, op->qos,
		    p->opt.protocol == 5 && !retained ? MQC_SUBOPT_RETAIN_NEVER : 0, c->epoch);
	} else {
		atomic_fetch_add(&p->stats.publishes, 1);
		rc = mqp__conn_publish(p, c, op);
	}
	if (rc != MQP_OK)
		mqp__finish(p, op, rc);
	mqp__conn_settle(p, c);
}

/* Complete the async call op->ticket names with MQP_ECANCELED, wherever it is. */
static void cancel(struct mqp_pool *p, struct op *op)
{
	struct op *target = NULL;
	HASH_FIND(hh_ticket, p->tickets, &op->ticket_target, sizeof op->ticket_target, target);
	if (target) {
		if (target->queued) {
			mqp__fifo_remove(target->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, target);
			left_queue(p, target, false);
		}
		mqp__finish(p, target, MQP_ECANCELED); /* out of pending, the connection, the heap */
	}
	mqp__finish(p, op, MQP_OK);
}

/* One op from a caller into the I/O side: the deadline heap, the ticket table, its queue. */
static void accept_op(struct mqp_pool *p, struct op *op)
{
	op->queue_next = NULL;
	if (mqp__heap_push(&p->heap, op) != 0) {
		mqp__finish(p, op, MQP_ENOMEM);
		return;
	}
	if (op->ticket)
		HASH_ADD(hh_ticket, p->tickets, ticket, sizeof op->ticket, op);
	op->first_dispatch = p->dispatches + 1;
	switch (op->kind) {
		case OP_REQUEST:
		case OP_PUBLISH:
			mqp__fifo_push(&p->queue, op);
			break;
		case OP_LEGACY:
			claim_or_wait(p, op);
			break;
		case OP_ACQUIRE:
			mqp__fifo_push(&p->acquirers, op);
			break;
		case OP_CANCEL:
			cancel(p, op);
			break;
		default:
			lease_op(p, op);
			break;
	}
}

static void take_incoming(struct mqp_pool *p)
{
	struct op *list = mqp__inbox_take(&p->inbox);
	while (list) {
		struct op *op = list;
		list = op->queue_next;
		accept_op(p, op);
	}
}

/* A call gives up in the queue while a connection is still being made: say what it waits for,
 * so mqp_pool_last_error names a broker that takes TCP but never answers CONNECT. */
static void explain_pending_connect(struct mqp_pool *p, uint64_t now)
{
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		const struct pconn *c = &p->conns[i];
		if (c->open && !c->ready && !c->dead && c->stage != STAGE_CLOSING) {
			if (c->w.state == MQP_WIRE_RESOLVING) {
				mqp__set_error(p, "resolving %s: no answer yet after %llu ms", c->w.where,
				    (unsigned long long)((now - c->connect_start) / MQC_NS_PER_MS));
				return;
			}
			mqp__set_error(p,
			    "connect to %s: no answer to CONNECT%s yet after %llu ms (the connect "
			    "timeout is %u ms)",
			    c->w.where, p->opt.protocol == 5 ? " and the inbox SUBSCRIBE" : "",
			    (unsigned long long)((now - c->connect_start) / MQC_NS_PER_MS),
			    p->opt.connect_timeout_ms);
			return;
		}
	}
}

static void expire(struct mqp_pool *p, uint64_t now)
{
	while (p->heap.len && p->heap.v[0].key <= now) {
		struct op *op = p->heap.v[0].item;
		if (op->queued) { /* never got a connection */
			mqp__fifo_remove(op->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, op);
			left_queue(p, op, false);
			if (!p->connect_failed)
				explain_pending_connect(p, now);
			/* A request or publish that never left the queue was never sent: say so. */
			mqp__finish(p, op,
			    p->refused                   ? MQP_EREFUSED
			        : p->connect_failed      ? MQP_ECONNECT
			        : op->kind == OP_ACQUIRE ? MQP_ETIMEDOUT
			                                 : MQP_EEXHAUSTED);
		} else {
			mqp__finish(p, op, MQP_ETIMEDOUT); /* a legacy request still waiting for its reply
			                                       topic too */
		}
	}
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *c = &p->conns[i];
		if (c->open && !c->ready && c->stage != STAGE_CLOSING && now > c->connect_deadline) {
			enum mqp_wire_state st = c->w.state;
			mqp__set_error(p, "%s %s: not %s within %u ms",
			    st == MQP_WIRE_RESOLVING ? "resolving" : "connect to", c->w.where,
			    st == MQP_WIRE_RESOLVING     ? "resolved"
			        : st == MQP_WIRE_UPGRADE ? "ready (the WebSocket upgrade was not answered)"
			                                 : "ready",
			    p->opt.connect_timeout_ms);
			c->dead = c->failed_connect = true;
			mqp__conn_settle(p, c);
		}
	}
	if (p->probe.open && now > p->probe.connect_deadline) {
		p->probe.dead = true; /* its verdict: not confirmed */
		mqp__conn_settle(p, &p->probe);
	}
}

static void publish_gauges(struct mqp_pool *p)
{
	unsigned ready, connecting, available, queued = 0;
	unsigned open = count_open(p, &ready, &connecting, &available);
	for (struct op *op = p->queue.head; op; op = op->queue_next)
		queued++;
	for (struct op *op = p->acquirers.head; op; op = op->queue_next)
		queued++; /* waiting for a connection to borrow */
	atomic_store(&p->stats.size, open);
	atomic_store(&p->stats.ready, ready);
	atomic_store(&p->stats.available, available);
	atomic_store(&p->stats.connecting, connecting);
	atomic_store(&p->stats.queued, queued);
	unsigned inflight[MQP_NODES_MAX] = { 0 };
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (p->conns[i].open)
			inflight[p->conns[i].node] += p->conns[i].inflight;
	for (unsigned i = 0; i < p->nnodes; i++)
		atomic_store(&p->nodes[i].a_inflight, inflight[i]);
}

/* One idle connection of the node a move relieves retires (none idle: the next interval looks
 * again). */
static void retire_idle_of_move_from(struct mqp_pool *p)
{
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *c = &p->conns[i];
		if (c->open && c->ready && !c->dead && !c->leased && !c->inflight
		    && c->node == (unsigned)p->move_from) {
			mqp__conn_retire(p, c);
			break;
		}
	}
	p->move_to = p->move_from = -1;
}

/* A move under way: once its node has a ready connection, an idle one of the relieved node
 * retires; if the new one failed, the move is over. */
static void move_done(struct mqp_pool *p)
{
	struct pnode *to = &p->nodes[p->move_to];
	if (to->failing || to->conns == 0) {
		p->move_to = p->move_from = -1;
		return;
	}
	if (atomic_load(&to->a_ready))
		retire_idle_of_move_from(p);
}

/* Several nodes: a node that is back (or, in order, before the one in use) gets a connection
 * again, one per eviction interval, never a storm: a new connection opens on it first, and only
 * once that one is ready does an idle connection of the node it relieves retire (move_done). */
static void rebalance(struct mqp_pool *p, uint64_t now)
{
	if (p->nnodes < 2 || p->move_to >= 0)
		return;
	struct mqp_node_view v[MQP_NODES_MAX];
	mqp__node_views(p, now, v);
	bool in_order = p->opt.load_balance == MQP_LB_IN_ORDER;
	int to = mqp__pick_node(v, p->nnodes, in_order, mqp__random32());
	unsigned from;
	if (to < 0 || !mqp__should_move(v, p->nnodes, in_order, (unsigned)to, &from))
		return;
	bool room = false;
	for (unsigned i = 0; i < p->opt.max_size && !room; i++)
		room = !p->conns[i].open && !p->lease_held[i];
	if (!room) { /* every slot taken: one idle connection of from makes room, to gets it */
		p->move_from = (int)from;
		retire_idle_of_move_from(p);
		p->redirect_to = to;
		return;
	}
	if (!open_on(p, to))
		return; /* it failed at once: its backoff says when to try again */
	p->move_to = to;
	p->move_from = (int)from;
}

/* Idle connections above min_size close; old ones retire; long-held leases are reported. */
static void housekeeping(struct mqp_pool *p, uint64_t now)
{
	unsigned ready, connecting, available;
	unsigned open = count_open(p, &ready, &connecting, &available);
	uint64_t idle = p->opt.idle_timeout_ms == MQP_NEVER
	    ? UINT64_MAX
	    : (uint64_t)p->opt.idle_timeout_ms * MQC_NS_PER_MS;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *c = &p->conns[i];
		enum mqp_evict why = mqp__eviction(c, now, open, p->opt.min_size, idle);
		if (why == MQP_KEEP)
			continue;
		atomic_fetch_add(
		    why == MQP_EVICT_IDLE ? &p->stats.closes_idle : &p->stats.closes_lifetime, 1);
		mqp__conn_retire(p, c);
		open--;
	}
	rebalance(p, now);
	if (!p->opt.leak_threshold_ms || p->opt.leak_threshold_ms == MQP_NEVER)
		return;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct lease_info *l = &p->lease_info[i];
		if (!p->lease_held[i] || l->reported
		    || now - l->since < (uint64_t)p->opt.leak_threshold_ms * MQC_NS_PER_MS)
			continue;
		l->reported = true;
		atomic_fetch_add(&p->stats.leaks, 1);
		mqp__log(p, MQP_LOG_WARNING,
		    "mqttpool: possible leak: a lease acquired at %s:%d has been held for %llu ms",
		    l->file ? l->file : "?", l->line,
		    (unsigned long long)((now - l->since) / MQC_NS_PER_MS));
	}
}

/* When the loop must run again without I/O: the first deadline, connect timeout, backoff end,
 * housekeeping or keepalive. */
static uint64_t next_wake(const struct mqp_pool *p, uint64_t now)
{
	uint64_t wake = p->next_misc;
	if (p->heap.len && p->heap.v[0].key < wake)
		wake = p->heap.v[0].key;
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		const struct pconn *c = &p->conns[i];
		uint64_t due = c->stage == STAGE_CLOSING ? c->closing_until : c->connect_deadline;
		if (c->open && !c->ready && due < wake)
			wake = due;
	}
	if (p->probe.open && p->probe.connect_deadline < wake)
		wake = p->probe.connect_deadline;
	/* A name being resolved: looked at again soon - every millisecond at first, then less
	 * often (at most every 50 ms) the longer the resolver takes. */
	for (unsigned i = 0; i <= p->opt.max_size; i++) {
		const struct pconn *c = i < p->opt.max_size ? &p->conns[i] : &p->probe;
		if (!c->open || c->w.state != MQP_WIRE_RESOLVING)
			continue;
		uint64_t waited = now - c->w.resolve_start, step = waited / 4;
		step = step < MQC_NS_PER_MS     ? MQC_NS_PER_MS
		    : step > 50 * MQC_NS_PER_MS ? 50 * MQC_NS_PER_MS
		                                : step;
		if (now + step < wake)
			wake = now + step;
	}
	if (p->connect_failed && p->backoff_until > now && p->backoff_until < wake)
		wake = p->backoff_until;
	if (p->next_housekeeping > now && p->next_housekeeping < wake)
		wake = p->next_housekeeping;
	if (p->legacy_wait && now + 10 * MQC_NS_PER_MS < wake) /* a reply topic held elsewhere */
		wake = now + 10 * MQC_NS_PER_MS;
	return wake;
}

/* One ready descriptor: the inbox's eventfd (tag NULL) or a connection's socket. */
static void ready_one(struct mqp_pool *p, void *tag, uint32_t events)
{
	if (tag == NULL) {
		take_incoming(p);
		return;
	}
	struct pconn *c = tag;
	if (c->open) /* not closed earlier in this batch */
		mqp__conn_io(p, c, events);
}

/* Wait for I/O at most timeout (unless the loop watches the descriptors itself), handle it, then
 * deadlines, housekeeping and keepalive. */
static void step(struct mqp_pool *p, const struct timespec *timeout)
{
	if (!p->watcher.fn) {
		struct epoll_event events[64];
		int n = epoll_pwait2(p->ep, events, 64, timeout, NULL);
		for (int i = 0; i < n; i++)
			ready_one(p, events[i].data.ptr, events[i].events);
	}
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (p->conns[i].open && p->conns[i].w.state == MQP_WIRE_RESOLVING)
			mqp__conn_poll(p, &p->conns[i]);
	if (p->probe.open && p->probe.w.state == MQP_WIRE_RESOLVING)
		mqp__conn_poll(p, &p->probe);
	uint64_t now = mqc_now_ns();
	expire(p, now);
	if (p->move_to >= 0)
		move_done(p);
	if (now >= p->next_housekeeping) {
		housekeeping(p, now);
		p->next_housekeeping = now + (uint64_t)p->opt.eviction_interval_ms * MQC_NS_PER_MS;
	}
	if (now >= p->next_misc) {
		for (unsigned i = 0; i < p->opt.max_size; i++)
			mqp__conn_misc(p, &p->conns[i], now);
		p->next_misc = now + (uint64_t)mqp__live_interval_ms(&p->opt) * MQC_NS_PER_MS;
	}
}

/* The end of a turn: every connection sends what the turn queued, in one send. */
static void flush_all(struct mqp_pool *p)
{
	for (unsigned i = 0; i < p->opt.max_size; i++)
		mqp__conn_flush(p, &p->conns[i]);
	mqp__conn_flush(p, &p->probe);
}

/* The pool's end: every connection says goodbye and shuts its side, and what the brokers still
 * send (a QoS 2 command's PUBCOMP after its reply, say) is read until they close theirs - within
 * CLOSE_WAIT_MS in all: a close with unread bytes would be a reset under the broker's last packet.
 * Waits on the descriptors itself: on an event loop, the loop is being left. */
enum { CLOSE_WAIT_MS = 250 };

static void close_gracefully(struct mqp_pool *p)
{
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (p->conns[i].open)
			mqp__conn_retire(p, &p->conns[i]);
	uint64_t until = mqc_now_ns() + CLOSE_WAIT_MS * MQC_NS_PER_MS;
	size_t slots = p->opt.max_size ? p->opt.max_size : 1;
	struct pollfd *fds = calloc(slots, sizeof(struct pollfd));
	struct pconn **who = calloc(slots, sizeof(struct pconn *));
	for (uint64_t now = mqc_now_ns(); fds && who && now < until; now = mqc_now_ns()) {
		nfds_t n = 0;
		for (unsigned i = 0; i < p->opt.max_size; i++) {
			struct pconn *c = &p->conns[i];
			if (c->open && c->stage == STAGE_CLOSING) {
				fds[n] = (struct pollfd) { .fd = c->w.fd,
					.events = (short)(POLLIN | (c->w.short_send ? POLLOUT : 0)) };
				who[n++] = c;
			}
		}
		if (n == 0 || poll(fds, n, (int)((until - now) / MQC_NS_PER_MS) + 1) <= 0)
			break;
		for (nfds_t k = 0; k < n; k++)
			if (fds[k].revents)
				mqp__conn_io(p, who[k],
				    (fds[k].revents & (POLLIN | POLLHUP | POLLERR) ? (uint32_t)EPOLLIN : 0u)
				        | (fds[k].revents & POLLOUT ? (uint32_t)EPOLLOUT : 0u));
	}
	free(fds);
	free(who);
	for (unsigned i = 0; i < p->opt.max_size; i++)
		if (p->conns[i].open)
			mqp__conn_close(p, &p->conns[i]); /* the broker never closed its side */
}

void mqp__io_close(struct mqp_pool *p)
{
	/* Every op completes with MQP_ECLOSED, every connection goes. */
	p->defer_callbacks = false;
	take_incoming(p);
	while (p->local) {
		struct op *op = p->local;
		p->local = op->queue_next;
		accept_op(p, op);
	}
	p->local_tail = &p->local;
	while (p->heap.len) {
		struct op *op = p->heap.v[0].item;
		if (op->queued)
			mqp__fifo_remove(op->kind == OP_ACQUIRE ? &p->acquirers : &p->queue, op);
		mqp__finish(p, op, MQP_ECLOSED);
	}
	while (p->later) { /* completions that were waiting for their callbacks */
		struct op *op = p->later;
		p->later = op->queue_next;
		mqp__deliver(p, op, op->result);
	}
	p->later_tail = &p->later;
	close_gracefully(p);
	if (p->probe.open)
		mqp__conn_close(p, &p->probe);
	publish_gauges(p);
}

void mqp__io_run(struct mqp_pool *p)
{
	p->next_misc = mqc_now_ns() + (uint64_t)mqp__live_interval_ms(&p->opt) * MQC_NS_PER_MS;
	while (!mqp__inbox_stopping(&p->inbox)) {
		dispatch(p);
		flush_all(p);
		publish_gauges(p);
		uint64_t now = mqc_now_ns(), wake = next_wake(p, now);
		struct timespec timeout = mqc_ns_to_ts(wake > now ? wake - now : 0);
		step(p, &timeout);
	}
	mqp__io_close(p);
}

/* --- on the application's event loop ------------------------------------------------------ */

/* Ask the loop for the next run: at once when callbacks wait, else at the next deadline. */
/* After a run (always: the loop's timer may have been the one that fired), or after a call on
 * the loop's thread (only when the run is now due earlier than asked: a timer that fires early
 * costs one empty run, while asking the loop again on every request would cost every request). */
static void reschedule(struct mqp_pool *p, bool after_run)
{
	uint64_t now = mqc_now_ns();
	bool unsent = false;
	for (unsigned i = 0; i < p->opt.max_size && !unsent; i++)
		unsent = p->conns[i].open && mqp__wire_pending(&p->conns[i].w);
	uint64_t wake = p->later || p->local || unsent ? now : next_wake(p, now);
	if (!after_run && wake >= p->scheduled_at)
		return;
	p->scheduled_at = wake;
	long ms = wake <= now ? 0 : (long)((wake - now + MQC_NS_PER_MS - 1) / MQC_NS_PER_MS);
	p->loop.schedule(p->loop.data, ms);
}

/* Ops the loop's thread made while busy (and, when run_callbacks, the callbacks that waited),
 * until none is left: a callback may make more. */
static void settle_local(struct mqp_pool *p, bool run_callbacks)
{
	do {
		while (p->local) {
			struct op *op = p->local;
			p->local = op->queue_next;
			if (!p->local)
				p->local_tail = &p->local;
			accept_op(p, op);
		}
		dispatch(p);
		while (run_callbacks && p->later && !p->local) {
			struct op *op = p->later;
			p->later = op->queue_next;
			if (!p->later)
				p->later_tail = &p->later;
			mqp__deliver(p, op, op->result);
		}
	} while (p->local || (run_callbacks && p->later));
}

void mqp__io_start_on_loop(struct mqp_pool *p)
{
	p->next_misc = mqc_now_ns() + (uint64_t)mqp__live_interval_ms(&p->opt) * MQC_NS_PER_MS;
	p->later_tail = &p->later;
	p->local_tail = &p->local;
	p->scheduled_at = mqc_now_ns();
	p->loop.schedule(p->loop.data, 0); /* open min_size connections soon */
}

bool mqp__io_process(struct mqp_pool *p)
{
	if (p->busy || atomic_load(&p->closed))
		return false; /* from a callback inside a run: the run goes on */
	p->busy = true;
	dispatch(p);
	struct timespec none = { 0 };
	step(p, &none);
	settle_local(p, true);
	flush_all(p);
	publish_gauges(p);
	p->busy = false;
	if (p->destroy_requested || mqp__inbox_stopping(&p->inbox))
		return true; /* the caller closes the pool */
	reschedule(p, true);
	return false;
}

bool mqp__io_ready(struct mqp_pool *p, void *tag, unsigned ready)
{
	if (p->busy || atomic_load(&p->closed))
		return false;
	struct pconn *c = tag;
	if (c && c != &p->probe && (c < p->conns || c >= p->conns + p->opt.max_size))
		return false; /* not a tag this pool gave */
	p->busy = true;
	ready_one(p, tag,
	    (ready & MQP_IO_READ ? (uint32_t)EPOLLIN : 0u)
	        | (ready & MQP_IO_WRITE ? (uint32_t)EPOLLOUT : 0u));
	settle_local(p, true); /* the callbacks' calls, and the callbacks that waited */
	flush_all(p);
	publish_gauges(p);
	p->busy = false;
	if (p->destroy_requested || mqp__inbox_stopping(&p->inbox))
		return true;
	reschedule(p, false); /* only if a deadline is now nearer than the timer */
	return false;
}

int mqp__io_direct(struct mqp_pool *p, struct op *op, mqp_ticket *ticket)
{
	int rc = mqp__inbox_admit(&p->inbox, op, ticket);
	if (rc != MQP_OK)
		return rc;
	op->queue_next = NULL;
	*p->local_tail = op;
	p->local_tail = &op->queue_next;
	if (p->busy)
		return MQP_OK; /* a callback's call: the run it is part of takes it */
	p->busy = true;
	p->defer_callbacks = true;
	settle_local(p, false);
	p->defer_callbacks = false;
	/* Its packets wait for the end of the loop's turn (the loop runs the pool "as soon as it
	 * can": mqttpool_uv.h after the turn's I/O callbacks), so every call of the turn shares one
	 * send per connection. */
	publish_gauges(p);
	p->busy = false;
	reschedule(p, false);
	return MQP_OK;
}
