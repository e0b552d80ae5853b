/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * legacy.c - requests to devices that answer on a fixed reply topic, built on leases.
 *
 * The JavaScript pool took the first message on any topic as the reply, so concurrent requests
 * could receive each other's replies. Here the reply topic is exact, serialised process-wide,
 * subscribed on an exclusive lease (with its own subscription identifier) before the command is
 * sent, retained messages are excluded, and a timed-out lease is discarded. A command that was
 * sent and got no reply leaves its reply topic quarantined for its timeout again (unless a match
 * callback tells replies apart): the device's late reply then reaches nobody, not the next caller.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "logic.h"
#include "mqc_clock.h"

/* Reply topics with a request outstanding, or quarantined after one, in this process. */
struct busy_topic {
	char *topic;
	uint64_t until; /* 0: a request holds it; else quarantined until then (CLOCK_MONOTONIC) */
	struct busy_topic *next;
};

static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t busy_cond;
static pthread_once_t busy_once = PTHREAD_ONCE_INIT;
static struct busy_topic *busy;

static void busy_init(void)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&busy_cond, &attr);
	pthread_condattr_destroy(&attr);
}

/* The entry that keeps topic busy, or NULL; an ended quarantine is dropped on the way. */
static struct busy_topic *busy_entry(const char *topic, uint64_t now)
{
	for (struct busy_topic **pp = &busy; *pp; pp = &(*pp)->next) {
		struct busy_topic *b = *pp;
		if (strcmp(b->topic, topic) != 0)
			continue;
		if (b->until && b->until <= now) {
			*pp = b->next;
			free(b->topic);
			free(b);
			return NULL;
		}
		return b;
	}
	return NULL;
}

/* Wait (until deadline) for the reply topic to be free, then claim it. */
static int claim(const char *topic, uint64_t deadline)
{
	pthread_once(&busy_once, busy_init);
	struct busy_topic *b = calloc(1, sizeof *b);
	if (!b || !(b->topic = strdup(topic))) {
		free(b);
		return MQP_ENOMEM;
	}
	pthread_mutex_lock(&busy_lock);
	for (struct busy_topic *held; (held = busy_entry(topic, mqc_now_ns()));) {
		if (mqc_now_ns() >= deadline) {
			pthread_mutex_unlock(&busy_lock);
			free(b->topic);
			free(b);
			return MQP_ETIMEDOUT;
		}
		/* Until it is released, or its quarantine ends, or the deadline. */
		struct timespec until
		    = mqc_ns_to_ts(held->until && held->until < deadline ? held->until : deadline);
		pthread_cond_timedwait(&busy_cond, &busy_lock, &until);
	}
	b->next = busy;
	busy = b;
	pthread_mutex_unlock(&busy_lock);
	return MQP_OK;
}

/* Give the topic up: at once, or after quarantine_ns (a late reply may still come). */
static void unclaim(const char *topic, uint64_t quarantine_ns)
{
	pthread_mutex_lock(&busy_lock);
	for (struct busy_topic **pp = &busy; *pp; pp = &(*pp)->next) {
		struct busy_topic *b = *pp;
		if (strcmp(b->topic, topic) != 0 || b->until)
			continue;
		if (quarantine_ns) {
			b->until = mqc_now_ns() + quarantine_ns;
		} else {
			*pp = b->next;
			free(b->topic);
			free(b);
		}
		break;
	}
	pthread_cond_broadcast(&busy_cond);
	pthread_mutex_unlock(&busy_lock);
}

static unsigned left_ms(uint64_t deadline)
{
	uint64_t now = mqc_now_ns();
	return now >= deadline ? 1 : (unsigned)((deadline - now) / MQC_NS_PER_MS) + 1;
}

mqp_err mqp_pool_request_legacy(mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata, unsigned timeout_ms,
    struct mqp_reply *reply)
{
	if (timeout_ms == MQP_NO_WAIT) /* it would be sent and given up at once */
		return MQP_EINVAL;
	if (!p || !reply || qos < 0 || qos > 2 || (len && !payload))
		return MQP_EINVAL;
	*reply = (struct mqp_reply) { 0 };
	int rc = mqp__legacy_check(topic, reply_topic);
	if (rc != MQP_OK)
		return rc;
	uint64_t timeout_ns
	    = (uint64_t)(timeout_ms ? timeout_ms : p->opt.request_timeout_ms) * MQC_NS_PER_MS;
	uint64_t deadline = mqc_now_ns() + timeout_ns;
	rc = claim(reply_topic, deadline);
	if (rc != MQP_OK)
		return rc;
	mqp_lease lease;
	rc = mqp_pool_acquire(p, left_ms(deadline), &lease);
	if (rc != MQP_OK) {
		unclaim(reply_topic, 0);
		return rc;
	}
	bool sent = false;
	rc = mqp_lease_subscribe(&lease, reply_topic, qos, 0, left_ms(deadline));
	if (rc == MQP_OK)
		sent = (rc = mqp_lease_publish(&lease, topic, payload, len, qos, 0, left_ms(deadline)))
		    == MQP_OK;
	while (rc == MQP_OK) {
		struct mqp_message m;
		rc = mqp_lease_receive(&lease, left_ms(deadline), &m);
		if (rc != MQP_OK)
			break;
		if (strcmp(m.topic, reply_topic) == 0 && (!match || match(match_userdata, &m))) {
			reply->topic = m.topic;
			reply->payload = m.payload;
			reply->len = m.len;
			break; /* ownership moved into *reply */
		}
		mqp_message_free(&m); /* not ours: keep waiting */
	}
	/* After a timeout the device may still answer: nobody else gets this connection. */
	if (rc == MQP_OK)
		mqp_lease_release(&lease);
	else
		mqp_lease_discard(&lease);
	/* Sent and unanswered: the reply may still come, and without a match callback the next
	 * caller on this topic could not tell it from its own. */
	unclaim(reply_topic, sent && rc != MQP_OK && !match ? timeout_ns : 0);
	return rc;
}
