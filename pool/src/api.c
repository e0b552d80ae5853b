/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * api.c - the public calls: arguments checked, an operation made and handed to the I/O thread
 * (op.h), and for blocking calls a wait with a deadline. A caller's own wait lasts the op's
 * deadline plus a grace period, in case the I/O thread is wedged.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "io.h"
#include "logic.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "op.h"
#include "pool.h"

enum { GRACE_MS = 2000 };

/* The absolute deadline of a call that waits timeout_ms: MQP_DEFAULT is the pool's
 * request_timeout_ms, MQP_NO_WAIT now (only the calls that allow it get that far). */
static uint64_t deadline_in(const struct mqp_pool *p, unsigned timeout_ms)
{
	uint64_t now = mqc_now_ns();
	if (timeout_ms == MQP_NO_WAIT)
		return now;
	return now + (uint64_t)(timeout_ms ? timeout_ms : p->opt.request_timeout_ms) * MQC_NS_PER_MS;
}

/* Hand op to the I/O thread: op.h's mqp__inbox_post (a refused op is freed). On an event
 * loop's own thread there is nobody to hand it to: it starts now (io.h's mqp__io_direct). */
static int submit(struct mqp_pool *p, struct op *op, mqp_ticket *ticket)
{
	if (p->on_loop && pthread_equal(pthread_self(), p->thread))
		return mqp__io_direct(p, op, ticket);
	return mqp__inbox_post(&p->inbox, op, ticket);
}

static int submit_and_wait_full(struct mqp_pool *p, struct op *op, struct mqp_reply *reply,
    struct mqp_message *msg, unsigned *slot, uint32_t *generation)
{
	int rc = submit(p, op, NULL);
	if (rc != MQP_OK)
		return rc;
	/* Past the deadline plus grace the I/O thread is wedged: give up; it will find the op done. */
	int result
	    = mqp__op_wait(op, op->deadline + GRACE_MS * MQC_NS_PER_MS) ? op->result : MQP_ETIMEDOUT;
	if (result == MQP_OK && reply) {
		*reply = op->reply;
		op->reply = (struct mqp_reply) { 0 };
	}
	if (result == MQP_OK && msg) {
		*msg = op->msg;
		op->msg = (struct mqp_message) { 0 };
	}
	/* Only a completed wait may read the lease: after a give-up the I/O thread may still be
	 * writing it, and it hands such a lease straight back (lease_abandoned). */
	if (slot && result == MQP_OK) {
		*slot = op->slot;
		*generation = op->generation;
	}
	mqp__op_unref(op);
	return result;
}

static int submit_and_wait(
    struct mqp_pool *p, struct op *op, struct mqp_reply *reply, struct mqp_message *msg)
{
	return submit_and_wait_full(p, op, reply, msg, NULL, NULL);
}

static int submit_and_wait_lease(
    struct mqp_pool *p, struct op *op, unsigned *slot, uint32_t *generation)
{
	return submit_and_wait_full(p, op, NULL, NULL, slot, generation);
}

/* An async op: the I/O thread holds the only reference. A ticket is always issued (cancel needs
 * the op in the ticket table); the caller may not want to see it. */
static int submit_async(struct mqp_pool *p, struct op *op, mqp_ticket *ticket)
{
	mqp_ticket unused;
	atomic_store(&op->refs, 1);
	return submit(p, op, ticket ? ticket : &unused);
}

/* A payload no MQTT packet can carry (a Remaining Length is at most 268,435,455 and the topic
 * takes its share; the API takes at most 256 MiB): refused at once and said in
 * mqp_pool_last_error, never after waiting for a connection. */
static bool too_big(struct mqp_pool *p, const char *topic, size_t len)
{
	size_t tlen = topic ? strlen(topic) : 0;
	if (len <= (size_t)256 << 20 && len + tlen + 2 <= MQC_REMAINING_MAX)
		return false;
	if (p)
		mqp__set_error(p, "a PUBLISH to %s of %zu payload bytes does not fit in an MQTT packet",
		    topic ? topic : "(no topic)", len);
	return true;
}

/* A request or publish: MQP_NO_WAIT is refused, since it would be sent and given up at once. */
static int check_call(struct mqp_pool *p, const char *topic, int qos, unsigned timeout_ms)
{
	if (!p || !topic || !*topic || qos < 0 || qos > 2 || strpbrk(topic, "+#")
	    || timeout_ms == MQP_NO_WAIT)
		return MQP_EINVAL;
	if (strlen(topic) >= MQP_TOPIC_MAX)
		return MQP_ETOOBIG;
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	return MQP_OK;
}

mqp_err mqp_pool_request(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    unsigned timeout_ms, struct mqp_reply *reply)
{
	int rc = check_call(p, topic, qos, timeout_ms);
	if (rc != MQP_OK)
		return rc;
	if (!reply || (len && !payload) || p->opt.protocol != 5)
		return MQP_EINVAL; /* requests need MQTT 5 (Response Topic, Correlation Data) */
	if (too_big(p, topic, len))
		return MQP_ETOOBIG;
	*reply = (struct mqp_reply) { 0 };
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_REQUEST, topic, payload, len, qos, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	return submit_and_wait(p, op, reply, NULL);
}

mqp_err mqp_pool_publish(mqp_pool *p, const char *topic, const void *payload, size_t len, int qos,
    int retain, unsigned timeout_ms)
{
	int rc = check_call(p, topic, qos, timeout_ms);
	if (rc != MQP_OK)
		return rc;
	if (len && !payload)
		return MQP_EINVAL;
	if (too_big(p, topic, len))
		return MQP_ETOOBIG;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_PUBLISH, topic, payload, len, qos, retain != 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	return submit_and_wait(p, op, NULL, NULL);
}

static int lease_call(mqp_lease *lease, enum op_kind kind, const char *topic, const void *payload,
    size_t len, int qos, int retain, int options, unsigned timeout_ms, struct mqp_message *msg)
{
	if (!lease || !lease->pool || (timeout_ms == MQP_NO_WAIT && kind != OP_LEASE_RECEIVE))
		return MQP_EINVAL;
	mqp_pool *p = lease->pool;
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(kind, topic ? topic : "", payload, len, qos, retain, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->slot = lease->slot;
	op->generation = lease->generation;
	op->sub_options = options;
	int rc = submit_and_wait(p, op, NULL, msg);
	return rc;
}

mqp_err(mqp_pool_acquire)(mqp_pool *p, unsigned timeout_ms, mqp_lease *lease)
{
	return mqp_pool_acquire_at(p, timeout_ms, lease, NULL, 0);
}

mqp_err mqp_pool_acquire_at(
    mqp_pool *p, unsigned timeout_ms, mqp_lease *lease, const char *file, int line)
{
	if (!p || !lease)
		return MQP_EINVAL;
	*lease = (mqp_lease) { 0 };
	if (pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_ACQUIRE, "", NULL, 0, 0, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->file = file; /* a string literal from the caller's __FILE__: lives forever */
	op->line = line;
	unsigned slot = 0;
	uint32_t generation = 0;
	int rc = submit_and_wait_lease(p, op, &slot, &generation);
	if (rc == MQP_OK)
		*lease = (mqp_lease) { .pool = p, .slot = slot, .generation = generation };
	return rc;
}

mqp_err mqp_lease_subscribe(
    mqp_lease *lease, const char *filter, int qos, int options, unsigned timeout_ms)
{
	if (!filter || !*filter || qos < 0 || qos > 2 || strlen(filter) >= MQP_TOPIC_MAX)
		return MQP_EINVAL;
	return lease_call(
	    lease, OP_LEASE_SUBSCRIBE, filter, NULL, 0, qos, 0, options, timeout_ms, NULL);
}

mqp_err mqp_lease_publish(mqp_lease *lease, const char *topic, const void *payload, size_t len,
    int qos, int retain, unsigned timeout_ms)
{
	if (!topic || !*topic || strpbrk(topic, "+#") || qos < 0 || qos > 2 || (len && !payload)
	    || strlen(topic) >= MQP_TOPIC_MAX)
		return MQP_EINVAL;
	return lease_call(
	    lease, OP_LEASE_PUBLISH, topic, payload, len, qos, retain != 0, 0, timeout_ms, NULL);
}

mqp_err mqp_lease_receive(mqp_lease *lease, unsigned timeout_ms, struct mqp_message *msg)
{
	if (!msg)
		return MQP_EINVAL;
	*msg = (struct mqp_message) { 0 };
	return lease_call(lease, OP_LEASE_RECEIVE, NULL, NULL, 0, 0, 0, 0, timeout_ms, msg);
}

/* Release or discard; from the pool's own thread (an async callback) without waiting. */
static int lease_return(mqp_lease *lease, enum op_kind kind)
{
	if (!lease || !lease->pool)
		return MQP_EINVAL;
	mqp_pool *p = lease->pool;
	if (!pthread_equal(pthread_self(), p->thread))
		return lease_call(lease, kind, NULL, NULL, 0, 0, 0, 0, 0, NULL);
	struct op *op = mqp__op_new(kind, "", NULL, 0, 0, 0, UINT64_MAX);
	if (!op)
		return MQP_ENOMEM;
	op->slot = lease->slot;
	op->generation = lease->generation;
	atomic_store(&op->refs, 1);
	return submit(p, op, NULL);
}

mqp_err mqp_lease_release(mqp_lease *lease)
{
	return lease_return(lease, OP_RELEASE);
}

mqp_err mqp_lease_discard(mqp_lease *lease)
{
	return lease_return(lease, OP_DISCARD);
}

mqp_err mqp_pool_receive(mqp_pool *p, const char *filter, int qos, int options, unsigned timeout_ms,
    struct mqp_message *msg)
{
	if (!p || !msg || timeout_ms == MQP_NO_WAIT) /* it subscribes: that takes a round trip */
		return MQP_EINVAL;
	*msg = (struct mqp_message) { 0 };
	uint64_t start = mqc_now_ns();
	unsigned total = timeout_ms ? timeout_ms : p->opt.request_timeout_ms;
	mqp_lease lease;
	int rc = mqp_pool_acquire(p, total, &lease);
	if (rc != MQP_OK)
		return rc;
	uint64_t spent = (mqc_now_ns() - start) / MQC_NS_PER_MS;
	unsigned left = spent < total ? total - (unsigned)spent : 1;
	rc = mqp_lease_subscribe(&lease, filter, qos, options, left);
	spent = (mqc_now_ns() - start) / MQC_NS_PER_MS;
	left = spent < total ? total - (unsigned)spent : 1;
	if (rc == MQP_OK)
		rc = mqp_lease_receive(&lease, left, msg);
	mqp_lease_release(&lease);
	return rc;
}

static int check_async(struct mqp_pool *p, const char *topic, int qos, const void *payload,
    size_t len, bool have_cb, unsigned timeout_ms)
{
	if (!p || !topic || !*topic || qos < 0 || qos > 2 || strpbrk(topic, "+#") || !have_cb
	    || (len && !payload) || timeout_ms == MQP_NO_WAIT)
		return MQP_EINVAL;
	if (strlen(topic) >= MQP_TOPIC_MAX || too_big(p, topic, len))
		return MQP_ETOOBIG;
	return MQP_OK;
}

mqp_err mqp_pool_request_async(mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, unsigned timeout_ms, mqp_request_cb cb, void *userdata, mqp_ticket *ticket)
{
	int rc = check_async(p, topic, qos, payload, len, cb != NULL, timeout_ms);
	if (rc != MQP_OK)
		return rc;
	if (p->opt.protocol != 5)
		return MQP_EINVAL; /* requests need MQTT 5 */
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_REQUEST, topic, payload, len, qos, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->request_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

/* A legacy request's op: the command, its reply topic and match callback. */
static int legacy_op(struct mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata, unsigned timeout_ms,
    struct op **out)
{
	if (!p || qos < 0 || qos > 2 || (len && !payload) || timeout_ms == MQP_NO_WAIT)
		return MQP_EINVAL; /* MQP_NO_WAIT: it would be sent and given up at once */
	int rc = mqp__legacy_check(topic, reply_topic);
	if (rc != MQP_OK)
		return rc;
	if (too_big(p, topic, len))
		return MQP_ETOOBIG;
	struct op *op = mqp__op_new(OP_LEGACY, topic, payload, len, qos, 0, deadline_in(p, timeout_ms));
	if (!op)
		return MQP_ENOMEM;
	if (!(op->reply_topic = strdup(reply_topic))) {
		atomic_store(&op->refs, 1);
		mqp__op_unref(op);
		return MQP_ENOMEM;
	}
	op->match = match;
	op->match_userdata = match_userdata;
	*out = op;
	return MQP_OK;
}

mqp_err mqp_pool_request_legacy(mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata, unsigned timeout_ms,
    struct mqp_reply *reply)
{
	if (!reply)
		return MQP_EINVAL;
	*reply = (struct mqp_reply) { 0 };
	if (p && pthread_equal(pthread_self(), p->thread))
		return MQP_EDEADLK;
	struct op *op;
	int rc = legacy_op(
	    p, topic, payload, len, qos, reply_topic, match, match_userdata, timeout_ms, &op);
	return rc == MQP_OK ? submit_and_wait(p, op, reply, NULL) : rc;
}

mqp_err mqp_pool_request_legacy_async(mqp_pool *p, const char *topic, const void *payload,
    size_t len, int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata,
    unsigned timeout_ms, mqp_request_cb cb, void *userdata, mqp_ticket *ticket)
{
	if (!cb)
		return MQP_EINVAL;
	struct op *op;
	int rc = legacy_op(
	    p, topic, payload, len, qos, reply_topic, match, match_userdata, timeout_ms, &op);
	if (rc != MQP_OK)
		return rc;
	op->request_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

mqp_err mqp_pool_publish_async(mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, int retain, unsigned timeout_ms, mqp_done_cb cb, void *userdata, mqp_ticket *ticket)
{
	int rc = check_async(p, topic, qos, payload, len, cb != NULL, timeout_ms);
	if (rc != MQP_OK)
		return rc;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_PUBLISH, topic, payload, len, qos, retain != 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->done_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

mqp_err mqp_pool_acquire_async_at(mqp_pool *p, unsigned timeout_ms, mqp_acquire_cb cb,
    void *userdata, mqp_ticket *ticket, const char *file, int line)
{
	if (!p || !cb)
		return MQP_EINVAL;
	uint64_t deadline = deadline_in(p, timeout_ms);
	struct op *op = mqp__op_new(OP_ACQUIRE, "", NULL, 0, 0, 0, deadline);
	if (!op)
		return MQP_ENOMEM;
	op->file = file;
	op->line = line;
	op->acquire_cb = cb;
	op->userdata = userdata;
	return submit_async(p, op, ticket);
}

mqp_err mqp_pool_cancel(mqp_pool *p, mqp_ticket ticket)
{
	if (!p || ticket == 0)
		return MQP_EINVAL;
	struct op *op = mqp__op_new(OP_CANCEL, "", NULL, 0, 0, 0, UINT64_MAX);
	if (!op)
		return MQP_ENOMEM;
	op->ticket_target = ticket;
	atomic_store(&op->refs, 1);
	return submit(p, op, NULL);
}

mqp_err mqp_pool_drain(mqp_pool *p, unsigned timeout_ms)
{
	if (!p)
		return MQP_EINVAL;
	if (pthread_equal(pthread_self(), p->thread) && timeout_ms != MQP_NO_WAIT)
		return MQP_EDEADLK;
	unsigned wait_ms = timeout_ms == MQP_NO_WAIT ? 0
	    : timeout_ms == MQP_DEFAULT              ? p->opt.request_timeout_ms
	                                             : timeout_ms;
	return mqp__inbox_drain(&p->inbox, &p->stats.leased, wait_ms);
}
