/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_client.c - the small synchronous MQTT client of the tests, on libmosquitto (tb_client.h):
 * every call drives the connection until its answer or its deadline.
 */
#include "tb_client.h"

#include <errno.h>
#include <mqtt_protocol.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_url.h"

struct tb_client {
	struct mosquitto *m;
	int timeout_ms;
	int connack;    /* -1 until CONNACK */
	int last_mid;   /* mid of the operation we wait for */
	int acked_mid;  /* last acknowledged mid */
	int ack_result; /* its granted QoS / reason code */
	struct tb_message *head, **tail;
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void lib_init(void)
{
	mosquitto_lib_init();
}

static void on_connect(
    struct mosquitto *m, void *obj, int rc, int flags, const mosquitto_property *props)
{
	(void)m;
	(void)flags;
	(void)props;
	struct tb_client *c = obj;
	c->connack = rc;
}

static void on_subscribe(struct mosquitto *m, void *obj, int mid, int count, const int *granted,
    const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct tb_client *c = obj;
	c->acked_mid = mid;
	c->ack_result = count > 0 ? granted[0] : -1;
}

static void on_unsubscribe(struct mosquitto *m, void *obj, int mid, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct tb_client *c = obj;
	c->acked_mid = mid;
	c->ack_result = 0;
}

static void on_publish(
    struct mosquitto *m, void *obj, int mid, int reason, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct tb_client *c = obj;
	c->acked_mid = mid;
	c->ack_result = reason;
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct tb_client *c = obj;
	struct tb_message *copy = calloc(1, sizeof *copy);
	if (!copy)
		return;
	copy->topic = strdup(msg->topic);
	copy->payloadlen = msg->payloadlen;
	copy->payload = malloc((size_t)msg->payloadlen + 1);
	if (copy->payload) {
		if (msg->payloadlen > 0) /* an empty payload's pointer is NULL */
			memcpy(copy->payload, msg->payload, (size_t)msg->payloadlen);
		((char *)copy->payload)[msg->payloadlen] = '\0';
	}
	copy->qos = msg->qos;
	copy->retain = msg->retain;
	if (props)
		mosquitto_property_copy_all(&copy->props, props);
	*c->tail = copy;
	c->tail = &copy->next;
}

/* Run the loop until done(c) or timeout_ms. Returns true when done. */
static bool run_until(struct tb_client *c, bool (*done)(const void *), int timeout_ms)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	return mqc_client_wait(c->m, done, NULL, c, deadline) == MOSQ_ERR_SUCCESS;
}

static bool got_connack(const void *arg)
{
	return ((const struct tb_client *)arg)->connack >= 0;
}

static bool connecting(const void *arg)
{
	return !got_connack(arg);
}

static bool got_ack(const void *arg)
{
	const struct tb_client *c = arg;
	return c->acked_mid == c->last_mid;
}

static bool got_message(const void *arg)
{
	return ((const struct tb_client *)arg)->head != NULL;
}

int tb_client_connect(const struct tb_client_options *o, struct tb_client **out, int *reason,
    char *err, size_t errlen)
{
	struct mqc_conn_opts co = {
		.cafile = o->cafile,
		.cert = o->cert,
		.key = o->key,
		.username = o->username,
		.password = o->password,
		.client_id = o->client_id,
		.id_prefix = "tb",
		.protocol = o->protocol == 4 ? 4 : 5,
	};
	*reason = -1;
	if (mqc_url_parse(o->url, &co.url, err, errlen) != 0)
		return -1;
	pthread_once(&once, lib_init);
	struct tb_client *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : 5000;
	c->connack = -1;
	c->acked_mid = -1;
	c->tail = &c->head;
	c->m = mqc_client_new(&co, c, NULL, err, errlen);
	if (!c->m) {
		free(c);
		return -1;
	}
	mosquitto_connect_v5_callback_set(c->m, on_connect);
	mosquitto_subscribe_v5_callback_set(c->m, on_subscribe);
	mosquitto_unsubscribe_v5_callback_set(c->m, on_unsubscribe);
	mosquitto_publish_v5_callback_set(c->m, on_publish);
	mosquitto_message_v5_callback_set(c->m, on_message);
	if (mqc_client_connect(c->m, &co, err, errlen) != 0) {
		tb_client_destroy(c);
		return -1;
	}
	uint64_t deadline = mqc_now_ns() + (uint64_t)c->timeout_ms * MQC_NS_PER_MS;
	if (mqc_client_wait(c->m, got_connack, connecting, c, deadline) != MOSQ_ERR_SUCCESS) {
		snprintf(err, errlen, "no CONNACK from %s (TLS or network failure, or timeout)", o->url);
		tb_client_destroy(c);
		return -1;
	}
	if (c->connack != 0) {
		*reason = c->connack;
		snprintf(err, errlen, "CONNECT refused: %s",
		    co.protocol == 5 ? mosquitto_reason_string(c->connack)
		                     : mosquitto_connack_string(c->connack));
		tb_client_destroy(c);
		return -1;
	}
	*reason = 0;
	*out = c;
	return 0;
}

int tb_client_subscribe(
    struct tb_client *c, const char *filter, int qos, int options, const mosquitto_property *props)
{
	if (mosquitto_subscribe_v5(c->m, &c->last_mid, filter, qos, options, props) != MOSQ_ERR_SUCCESS)
		return -1;
	return run_until(c, got_ack, c->timeout_ms) ? c->ack_result : -1;
}

int tb_client_publish(struct tb_client *c, const char *topic, const void *payload, int len, int qos,
    bool retain, const mosquitto_property *props)
{
	if (mosquitto_publish_v5(c->m, &c->last_mid, topic, len, payload, qos, retain, props)
	    != MOSQ_ERR_SUCCESS)
		return -1;
	/* QoS 0 completes when written; run the loop so it goes out now. */
	if (!run_until(c, got_ack, c->timeout_ms))
		return -1;
	return c->ack_result >= 0x80 ? c->ack_result : 0;
}

struct tb_message *tb_client_receive(struct tb_client *c, int timeout_ms)
{
	if (!run_until(c, got_message, timeout_ms))
		return NULL;
	struct tb_message *m = c->head;
	c->head = m->next;
	if (!c->head)
		c->tail = &c->head;
	m->next = NULL;
	return m;
}

void tb_message_free(struct tb_message *m)
{
	if (!m)
		return;
	free(m->topic);
	free(m->payload);
	mosquitto_property_free_all(&m->props);
	free(m);
}

void tb_client_destroy(struct tb_client *c)
{
	if (!c)
		return;
	while (c->head) {
		struct tb_message *next = c->head->next;
		tb_message_free(c->head);
		c->head = next;
	}
	mqc_client_close(c->m, 100); /* DISCONNECT when still connected */
	free(c);
}
