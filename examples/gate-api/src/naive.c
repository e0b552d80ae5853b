/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * naive.c - one request the way an HTTP handler without a pool does it: a fresh MQTT connection
 * per request (TCP, TLS when mqtts, CONNECT), a SUBSCRIBE to its own reply topic, the command,
 * the reply, DISCONNECT. It is here to be compared with the pooled route, so it is written the
 * plain way, with a deadline on every step and the same reply matching (v5 Correlation Data).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <openssl/rand.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate.h"
#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqc_random.h"

struct naive {
	int connack; /* -1 until CONNACK */
	int sub_mid, pub_mid;
	bool subscribed, sub_refused, published, pub_refused;
	unsigned char corr[16];
	struct mqp_reply *reply;
	bool got, nomem;
};

static void on_connect(struct mosquitto *m, void *obj, int rc, int f, const mosquitto_property *p)
{
	(void)m;
	(void)f;
	(void)p;
	((struct naive *)obj)->connack = rc;
}

static void on_subscribe(
    struct mosquitto *m, void *obj, int mid, int n, const int *granted, const mosquitto_property *p)
{
	(void)m;
	(void)p;
	struct naive *r = obj;
	if (mid != r->sub_mid)
		return;
	r->subscribed = n > 0 && granted[0] <= 2;
	r->sub_refused = !r->subscribed;
}

static void on_publish(
    struct mosquitto *m, void *obj, int mid, int reason, const mosquitto_property *p)
{
	(void)m;
	(void)p;
	struct naive *r = obj;
	if (mid == r->pub_mid)
		r->pub_refused = reason >= 0x80;
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct naive *r = obj;
	void *corr = NULL;
	uint16_t len = 0;
	mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &corr, &len, false);
	bool ours = corr && len == sizeof r->corr && memcmp(corr, r->corr, len) == 0;
	free(corr);
	if (!ours || r->got || msg->retain)
		return;
	r->got = true;
	r->reply->topic = strdup(msg->topic);
	r->reply->payload = malloc((size_t)msg->payloadlen + 1);
	if (!r->reply->topic || !r->reply->payload) {
		r->nomem = true;
		return;
	}
	if (msg->payloadlen > 0)
		memcpy(r->reply->payload, msg->payload, (size_t)msg->payloadlen);
	((char *)r->reply->payload)[msg->payloadlen] = '\0';
	r->reply->len = (size_t)msg->payloadlen;
}

/* Drive the connection until *flag, a refusal, or the deadline. */
static int run_until(struct mosquitto *m, const bool *flag, const bool *refused, uint64_t deadline)
{
	while (!*flag) {
		if (refused && *refused)
			return MQP_EDENIED;
		uint64_t now = mqc_now_ns();
		if (now >= deadline)
			return MQP_ETIMEDOUT;
		uint64_t ms = (deadline - now) / MQC_NS_PER_MS;
		if (mosquitto_loop(m, ms < 1 ? 1 : ms > 100 ? 100 : (int)ms, 1) != MOSQ_ERR_SUCCESS)
			return MQP_ECONNLOST;
		mqc_tcp_quickack(mosquitto_socket(m)); /* a Nagle-ing broker: mqc_net.h */
	}
	return MQP_OK;
}

int gate_naive_request(const struct gate_naive_config *cfg, const char *topic, const void *payload,
    size_t len, int qos, unsigned timeout_ms, struct mqp_reply *reply, char *err, size_t err_len)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	*reply = (struct mqp_reply) { 0 };
	struct naive r = { .connack = -1, .reply = reply };
	if (RAND_bytes(r.corr, sizeof r.corr) != 1)
		return MQP_ENOMEM;
	/* 64 random bits: replicas that are all PID 1 never take over each other's connections,
	 * and a device cannot guess the id to take one over. */
	char id[64], inbox[128];
	if (mqc_random_id(id, sizeof id, "gate-") != 0)
		return MQP_ENOMEM;
	snprintf(inbox, sizeof inbox, "gate/inbox/%s", id);
	struct mosquitto *m = mosquitto_new(id, true, &r);
	if (!m)
		return MQP_ENOMEM;
	mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
	mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1);
	mosquitto_connect_v5_callback_set(m, on_connect);
	mosquitto_subscribe_v5_callback_set(m, on_subscribe);
	mosquitto_publish_v5_callback_set(m, on_publish);
	mosquitto_message_v5_callback_set(m, on_message);
	if (cfg->username)
		mosquitto_username_pw_set(m, cfg->username, cfg->password);
	int rc = MQP_OK;
	if (cfg->tls
	    && mosquitto_tls_set(m, cfg->cafile, NULL, cfg->certfile, cfg->keyfile, NULL)
	        != MOSQ_ERR_SUCCESS) {
		snprintf(err, err_len, "TLS setup failed (CA, certificate or key file)");
		rc = MQP_ECONNECT;
		goto out;
	}
	/* Non-blocking connect: a blocking one can hang for minutes on an unanswered SYN (name
	 * resolution still blocks: give the gateway an address, or a resolver that answers). */
	int mrc = mosquitto_connect_async(m, cfg->host, cfg->port, 30);
	while (mrc == MOSQ_ERR_SUCCESS && r.connack < 0 && rc == MQP_OK) {
		if (mqc_now_ns() >= deadline)
			rc = MQP_ETIMEDOUT;
		else
			mrc = mosquitto_loop(m, 10, 1);
		mqc_tcp_quickack(mosquitto_socket(m));
	}
	if (mrc != MOSQ_ERR_SUCCESS) {
		snprintf(err, err_len, "connect to %s:%d: %s", cfg->host, cfg->port,
		    mrc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(mrc));
		rc = MQP_ECONNECT;
	}
	if (rc == MQP_OK && r.connack != 0) {
		snprintf(
		    err, err_len, "the broker refused CONNECT: %s", mosquitto_reason_string(r.connack));
		rc = MQP_ECONNECT;
	}
	char filter[160];
	snprintf(filter, sizeof filter, "%s/#", inbox);
	if (rc == MQP_OK) {
		rc = mosquitto_subscribe_v5(m, &r.sub_mid, filter, 1, MQTT_SUB_OPT_NO_LOCAL, NULL)
		        == MOSQ_ERR_SUCCESS
		    ? run_until(m, &r.subscribed, &r.sub_refused, deadline)
		    : MQP_ECONNLOST;
	}
	if (rc == MQP_OK) {
		mosquitto_property *props = NULL;
		char response_topic[200];
		snprintf(response_topic, sizeof response_topic, "%s/1", inbox);
		mosquitto_property_add_string(&props, MQTT_PROP_RESPONSE_TOPIC, response_topic);
		mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, r.corr, sizeof r.corr);
		mrc = mosquitto_publish_v5(m, &r.pub_mid, topic, (int)len, payload, qos, false, props);
		mosquitto_property_free_all(&props);
		rc = mrc == MOSQ_ERR_SUCCESS ? run_until(m, &r.got, &r.pub_refused, deadline)
		                             : MQP_ECONNLOST;
	}
	if (rc == MQP_OK && r.nomem)
		rc = MQP_ENOMEM;
	mosquitto_disconnect(m);
	mosquitto_loop(m, 1, 1);
out:
	mosquitto_destroy(m);
	if (rc != MQP_OK)
		mqp_reply_free(reply);
	return rc;
}
