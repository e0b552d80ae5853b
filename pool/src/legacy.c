/*
 * legacy.c - requests to devices that answer on a fixed reply topic, built on leases.
 *
 * The JavaScript pool took the first message on any topic as the reply, so concurrent requests
 * could receive each other's replies. Here the reply topic is exact, serialised process-wide,
 * subscribed on an exclusive lease (with its own subscription identifier) before the command is
 * sent, retained messages are excluded, and a timed-out lease is discarded.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "pool_internal.h"

/* Reply topics with a request outstanding, in this process. */
struct busy_topic {
	char *topic;
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

static bool is_busy(const char *topic)
{
	for (struct busy_topic *b = busy; b; b = b->next)
		if (strcmp(b->topic, topic) == 0)
			return true;
	return false;
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
	struct timespec until = mqc_ns_to_ts(deadline);
	pthread_mutex_lock(&busy_lock);
	while (is_busy(topic)) {
		if (pthread_cond_timedwait(&busy_cond, &busy_lock, &until) != 0 && is_busy(topic)) {
			pthread_mutex_unlock(&busy_lock);
			free(b->topic);
			free(b);
			return MQP_ETIMEDOUT;
		}
	}
	b->next = busy;
	busy = b;
	pthread_mutex_unlock(&busy_lock);
	return MQP_OK;
}

static void unclaim(const char *topic)
{
	pthread_mutex_lock(&busy_lock);
	for (struct busy_topic **pp = &busy; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->topic, topic) == 0) {
			struct busy_topic *b = *pp;
			*pp = b->next;
			free(b->topic);
			free(b);
			break;
		}
	}
	pthread_cond_broadcast(&busy_cond);
	pthread_mutex_unlock(&busy_lock);
}

static unsigned left_ms(uint64_t deadline)
{
	uint64_t now = mqc_now_ns();
	return now >= deadline ? 1 : (unsigned)((deadline - now) / MQC_NS_PER_MS) + 1;
}

int mqp_pool_request_legacy(mqp_pool *p, const char *topic, const void *payload, size_t len,
    int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata, unsigned timeout_ms,
    struct mqp_reply *reply)
{
	if (!p || !reply || qos < 0 || qos > 2 || (len && !payload))
		return MQP_EINVAL;
	*reply = (struct mqp_reply) { 0 };
	int rc = mqp__legacy_check(topic, reply_topic);
	if (rc != MQP_OK)
		return rc;
	uint64_t deadline = mqc_now_ns()
	    + (uint64_t)(timeout_ms ? timeout_ms : p->opt.request_timeout_ms) * MQC_NS_PER_MS;
	rc = claim(reply_topic, deadline);
	if (rc != MQP_OK)
		return rc;
	mqp_lease lease;
	rc = mqp_pool_acquire(p, left_ms(deadline), &lease);
	if (rc != MQP_OK) {
		unclaim(reply_topic);
		return rc;
	}
	rc = mqp_lease_subscribe(&lease, reply_topic, qos, 0, left_ms(deadline));
	if (rc == MQP_OK)
		rc = mqp_lease_publish(&lease, topic, payload, len, qos, 0, left_ms(deadline));
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
	unclaim(reply_topic);
	return rc;
}
