/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * request.c - command and reply over one plain connection: see mqc_request.h.
 */
#include "mqc_request.h"

#include <errno.h>
#include <mqtt_protocol.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_random.h"
#include "mqc_tls.h"

#define CORR_LEN 16

struct mqc_requester {
	struct mosquitto *m;
	const struct mqc_conn_opts *o; /* the caller's: for a connect failure's explanation */
	int protocol;
	bool legacy;      /* replies on a fixed reply topic (filter), no Correlation Data */
	char filter[272]; /* what it subscribes to: the inbox's INBOX/#, or the reply topic */
	void *match;      /* legacy: the reply's payload must be these bytes (NULL: any message) */
	size_t match_len;
	int connack; /* -1 until CONNACK */
	bool lost, tcp_up;
	int sub_mid, pub_mid;
	bool subscribed, sub_refused, pub_refused;
	bool nobody;   /* v5 PUBACK 0x10: nobody is subscribed to the command's topic */
	bool pub_done; /* the command's QoS 1/2 flow is over (PUBACK, PUBCOMP); QoS 0: at once */
	bool got, nomem;
	uint64_t seq;
	unsigned char corr[CORR_LEN]; /* 8 random bytes of the connection, then seq */
	struct mqc_req_reply *reply;  /* where the current request's reply goes, or NULL */
	char inbox[256];
	struct mqc_url url; /* for messages */
	/* mqc_request_start: the phase, the command until it is sent, the reply until it is taken */
	enum { PH_CONNECTING, PH_SUBSCRIBING, PH_WAITING } phase;
	char *topic;
	void *payload;
	size_t len;
	int qos;
	struct mqc_req_reply own;
};

static void on_connect(struct mosquitto *m, void *obj, int rc, int f, const mosquitto_property *p)
{
	(void)m;
	(void)f;
	(void)p;
	((struct mqc_requester *)obj)->connack = rc;
}

static void on_disconnect(struct mosquitto *m, void *obj, int rc, const mosquitto_property *p)
{
	(void)m;
	(void)p;
	struct mqc_requester *r = obj;
	r->lost = true;
	/* End of stream: the broker closed a connection it had taken (a refused TCP connect is
	 * MOSQ_ERR_ERRNO, a TLS failure MOSQ_ERR_TLS). */
	r->tcp_up = rc == MOSQ_ERR_CONN_LOST;
}

static void on_subscribe(
    struct mosquitto *m, void *obj, int mid, int n, const int *granted, const mosquitto_property *p)
{
	(void)m;
	(void)p;
	struct mqc_requester *r = obj;
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
	struct mqc_requester *r = obj;
	if (mid != r->pub_mid)
		return;
	r->pub_done = true;
	if (reason >= 0x80)
		r->pub_refused = true;
	/* libmosquitto reports a QoS 2 command's PUBCOMP, not its PUBREC: QoS 1 only. */
	if (reason == MQTT_RC_NO_MATCHING_SUBSCRIBERS)
		r->nobody = true;
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct mqc_requester *r = obj;
	bool ours;
	if (r->legacy) { /* the reply topic, and the request's id when the caller gave one */
		ours = strcmp(msg->topic, r->filter) == 0
		    && (!r->match
		        || ((size_t)msg->payloadlen == r->match_len
		            && memcmp(msg->payload, r->match, r->match_len) == 0));
	} else {
		void *corr = NULL;
		uint16_t len = 0;
		mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &corr, &len, false);
		ours = corr && len == CORR_LEN && memcmp(corr, r->corr, CORR_LEN) == 0;
		free(corr);
	}
	if (!ours || r->got || msg->retain) /* a retained copy is old news, never the answer */
		return;
	r->got = true;
	if (!r->reply)
		return;
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

static bool connecting(const void *arg)
{
	return ((const struct mqc_requester *)arg)->connack < 0;
}

static bool connack_in(const void *arg)
{
	const struct mqc_requester *r = arg;
	return r->connack >= 0 || r->lost;
}

static bool suback_in(const void *arg)
{
	const struct mqc_requester *r = arg;
	return r->subscribed || r->sub_refused || r->lost;
}

/* The request is over: refused, or its reply in and its command's own flow done - a QoS 2
 * command's PUBCOMP can come after the reply, and a close before it would reset the connection
 * under the broker's last packet. */
static bool answered(const struct mqc_requester *r)
{
	return r->pub_refused || r->nobody || (r->got && r->pub_done);
}

static bool reply_in(const void *arg)
{
	const struct mqc_requester *r = arg;
	return answered(r) || r->lost;
}

/* The result of a wait that returned rc. */
static int waited(const struct mqc_requester *r, int rc)
{
	if (rc == MOSQ_ERR_TIMEOUT)
		return MQC_REQ_TIMEDOUT;
	return rc != MOSQ_ERR_SUCCESS || r->lost ? MQC_REQ_LOST : MQC_REQ_OK;
}

/* A requester with its client made and the connect started (not waited for). where: the inbox
 * prefix (MQTT 5 requests), or the reply topic (legacy). */
static int start_connect(const struct mqc_conn_opts *o, const char *where, bool legacy,
    struct mqc_requester **out, char *err, size_t errlen)
{
	*out = NULL;
	struct mqc_requester *r = calloc(1, sizeof *r);
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return MQC_REQ_NOMEM;
	}
	r->connack = -1;
	r->url = o->url;
	r->o = o;
	r->legacy = legacy;
	if (mqc_random_bytes(r->corr, 8) != 0) {
		snprintf(err, errlen, "no random bytes: %s", strerror(errno));
		free(r);
		return MQC_REQ_NOMEM;
	}
	struct mqc_conn_opts use = *o; /* Response Topic and Correlation Data are v5 */
	if (!legacy)
		use.protocol = 5;
	r->protocol = use.protocol == 4 ? 4 : 5;
	char id[MQC_CLIENT_ID_MAX];
	r->m = mqc_client_new(&use, r, id, err, errlen);
	if (!r->m) {
		free(r);
		return MQC_REQ_CONNECT;
	}
	int n = legacy ? snprintf(r->filter, sizeof r->filter, "%s", where)
	               : snprintf(r->inbox, sizeof r->inbox, "%s/%s", where, id);
	if (n < 0 || (size_t)n >= sizeof r->inbox - 32) {
		snprintf(err, errlen, legacy ? "reply topic too long" : "inbox prefix too long");
		mqc_requester_abort(r);
		return MQC_REQ_CONNECT;
	}
	if (!legacy)
		snprintf(r->filter, sizeof r->filter, "%s/#", r->inbox);
	mosquitto_connect_v5_callback_set(r->m, on_connect);
	mosquitto_disconnect_v5_callback_set(r->m, on_disconnect);
	mosquitto_subscribe_v5_callback_set(r->m, on_subscribe);
	mosquitto_publish_v5_callback_set(r->m, on_publish);
	mosquitto_message_v5_callback_set(r->m, on_message);
	if (mqc_client_connect(r->m, &use, err, errlen) != 0) {
		mqc_requester_abort(r);
		return MQC_REQ_CONNECT;
	}
	*out = r;
	return MQC_REQ_OK;
}

/* Once CONNACK is in (or not): the result, with err saying why it is not MQC_REQ_OK. rc: how
 * the wait for it ended. */
static int connect_result(struct mqc_requester *r, int rc, char *err, size_t errlen)
{
	if (r->connack > 0) /* the broker closes right after a refusal: that is not the news */
		return mqc_client_explain_connect_failure(
		           r->o, r->protocol, r->connack, "--protocol 3.1.1", NULL, err, errlen)
		    ? MQC_REQ_REFUSED
		    : MQC_REQ_CONNECT;
	if (rc == MQC_REQ_LOST && r->tcp_up) /* closed after the TCP (and TLS) connect: CONNECT's */
		return mqc_client_explain_connect_failure(
		           r->o, r->protocol, -1, "--protocol 3.1.1", NULL, err, errlen)
		    ? MQC_REQ_REFUSED
		    : MQC_REQ_CONNECT;
	if (rc != MQC_REQ_OK) {
		char where[MQC_URL_HOST_MAX + 32];
		mqc_url_format(&r->url, where, sizeof where);
		const char *refused = mqc_tls_last_refusal(); /* this thread's handshake said why */
		snprintf(err, errlen, "no CONNACK from %s: %s", where,
		    rc == MQC_REQ_TIMEDOUT ? "timed out"
		        : refused          ? refused
		                           : "the connection closed (TCP or TLS failure)");
		return rc == MQC_REQ_TIMEDOUT ? MQC_REQ_TIMEDOUT : MQC_REQ_CONNECT;
	}
	return MQC_REQ_OK;
}

static int subscribe_inbox(struct mqc_requester *r)
{
	/* MQTT 5: no local echo; 3.1.1 has no options */
	int options = r->protocol == 5 ? MQTT_SUB_OPT_NO_LOCAL : 0;
	return mosquitto_subscribe_v5(r->m, &r->sub_mid, r->filter, 1, options, NULL)
	        == MOSQ_ERR_SUCCESS
	    ? MQC_REQ_OK
	    : MQC_REQ_LOST;
}

/* The SUBACK's outcome (rc: how the wait ended), with err saying why when it is not OK. */
static int subscribe_result(struct mqc_requester *r, int rc, char *err, size_t errlen)
{
	if (rc == MQC_REQ_OK && r->sub_refused)
		rc = MQC_REQ_DENIED;
	if (rc != MQC_REQ_OK)
		snprintf(err, errlen, "subscribing to %s: %s", r->filter,
		    rc == MQC_REQ_DENIED     ? "refused by the broker"
		        : rc == MQC_REQ_LOST ? "the connection closed"
		                             : "timed out");
	return rc;
}

static int open_any(const struct mqc_conn_opts *o, const char *where, bool legacy,
    uint64_t deadline, struct mqc_requester **out, char *err, size_t errlen)
{
	struct mqc_requester *r;
	int rc = start_connect(o, where, legacy, out, err, errlen);
	if (rc != MQC_REQ_OK)
		return rc;
	r = *out;
	*out = NULL;
	rc = connect_result(
	    r, waited(r, mqc_client_wait(r->m, connack_in, connecting, r, deadline)), err, errlen);
	if (rc == MQC_REQ_OK) {
		rc = subscribe_inbox(r);
		if (rc == MQC_REQ_OK)
			rc = waited(r, mqc_client_wait(r->m, suback_in, NULL, r, deadline));
		rc = subscribe_result(r, rc, err, errlen);
	}
	if (rc != MQC_REQ_OK) {
		mqc_requester_close(r);
		return rc;
	}
	*out = r;
	return MQC_REQ_OK;
}

int mqc_requester_open(const struct mqc_conn_opts *o, const char *inbox_prefix, uint64_t deadline,
    struct mqc_requester **out, char *err, size_t errlen)
{
	return open_any(o, inbox_prefix, false, deadline, out, err, errlen);
}

int mqc_requester_open_legacy(const struct mqc_conn_opts *o, const char *reply_topic,
    uint64_t deadline, struct mqc_requester **out, char *err, size_t errlen)
{
	return open_any(o, reply_topic, true, deadline, out, err, errlen);
}

int mqc_requester_match(struct mqc_requester *r, const void *match, size_t len)
{
	free(r->match);
	r->match = NULL;
	r->match_len = 0;
	if (!match)
		return MQC_REQ_OK;
	if (!(r->match = malloc(len ? len : 1)))
		return MQC_REQ_NOMEM;
	if (len)
		memcpy(r->match, match, len);
	r->match_len = len;
	return MQC_REQ_OK;
}

/* Publish the command for request number ++seq; its reply will go to reply (or nowhere). */
static int publish_command(struct mqc_requester *r, const char *topic, const void *payload,
    size_t len, int qos, struct mqc_req_reply *reply)
{
	r->seq++;
	memcpy(r->corr + 8, &r->seq, sizeof r->seq);
	r->got = r->pub_refused = r->nobody = r->nomem = false;
	r->pub_done = qos == 0; /* QoS 0 has no flow to wait for */
	r->reply = reply;
	if (r->legacy) /* the device knows where to answer */
		return mosquitto_publish_v5(r->m, &r->pub_mid, topic, (int)len, payload, qos, false, NULL)
		        == MOSQ_ERR_SUCCESS
		    ? MQC_REQ_OK
		    : MQC_REQ_LOST;
	char response_topic[sizeof r->inbox + 24];
	snprintf(
	    response_topic, sizeof response_topic, "%s/%llu", r->inbox, (unsigned long long)r->seq);
	mosquitto_property *props = NULL;
	int rc = MQC_REQ_NOMEM;
	if (mosquitto_property_add_string(&props, MQTT_PROP_RESPONSE_TOPIC, response_topic)
	        == MOSQ_ERR_SUCCESS
	    && mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, r->corr, CORR_LEN)
	        == MOSQ_ERR_SUCCESS)
		rc = mosquitto_publish_v5(r->m, &r->pub_mid, topic, (int)len, payload, qos, false, props)
		        == MOSQ_ERR_SUCCESS
		    ? MQC_REQ_OK
		    : MQC_REQ_LOST;
	mosquitto_property_free_all(&props);
	return rc;
}

/* Once the reply is in or the wait ended (rc): the request's result. */
static int reply_result(const struct mqc_requester *r, int rc)
{
	if (rc == MQC_REQ_OK && r->pub_refused)
		rc = MQC_REQ_DENIED;
	if (rc == MQC_REQ_OK && r->nobody && !r->got)
		rc = MQC_REQ_NORESPONDER;
	if (rc == MQC_REQ_OK && r->nomem)
		rc = MQC_REQ_NOMEM;
	return rc;
}

int mqc_requester_request(struct mqc_requester *r, const char *topic, const void *payload,
    size_t len, int qos, uint64_t deadline, struct mqc_req_reply *reply)
{
	if (reply)
		*reply = (struct mqc_req_reply) { 0 };
	int rc = publish_command(r, topic, payload, len, qos, reply);
	if (rc == MQC_REQ_OK) {
		rc = waited(r, mqc_client_wait(r->m, reply_in, NULL, r, deadline));
		if (rc == MQC_REQ_TIMEDOUT && r->got)
			rc = MQC_REQ_OK; /* the reply came; only the command's PUBCOMP did not in time */
		rc = reply_result(r, rc);
	}
	r->reply = NULL;
	if (rc != MQC_REQ_OK)
		mqc_req_reply_free(reply);
	return rc;
}

void mqc_requester_close(struct mqc_requester *r)
{
	if (!r)
		return;
	mqc_client_close(r->m, 100);
	free(r->topic);
	free(r->payload);
	free(r->match);
	mqc_req_reply_free(&r->own);
	free(r);
}

void mqc_requester_abort(struct mqc_requester *r)
{
	if (!r)
		return;
	mqc_client_close(r->m, 0); /* DISCONNECT is written if the socket takes it now */
	r->m = NULL;
	mqc_requester_close(r);
}

int mqc_request_once(const struct mqc_conn_opts *o, const char *inbox_prefix, const char *topic,
    const void *payload, size_t len, int qos, uint64_t deadline, struct mqc_req_reply *reply,
    char *err, size_t errlen)
{
	if (reply)
		*reply = (struct mqc_req_reply) { 0 };
	struct mqc_requester *r;
	int rc = mqc_requester_open(o, inbox_prefix, deadline, &r, err, errlen);
	if (rc == MQC_REQ_OK) {
		rc = mqc_requester_request(r, topic, payload, len, qos, deadline, reply);
		mqc_requester_close(r);
	}
	return rc;
}

/* --- on an event loop ----------------------------------------------------------------------- */

static int start_any(const struct mqc_conn_opts *o, const char *where, bool legacy,
    const char *topic, const void *payload, size_t len, int qos, struct mqc_requester **out,
    char *err, size_t errlen)
{
	int rc = start_connect(o, where, legacy, out, err, errlen);
	if (rc != MQC_REQ_OK)
		return rc;
	struct mqc_requester *r = *out;
	r->topic = strdup(topic);
	r->payload = malloc(len ? len : 1);
	if (!r->topic || !r->payload) {
		mqc_requester_abort(r);
		*out = NULL;
		snprintf(err, errlen, "out of memory");
		return MQC_REQ_NOMEM;
	}
	if (len)
		memcpy(r->payload, payload, len);
	r->len = len;
	r->qos = qos;
	return MQC_REQ_OK;
}

int mqc_request_start(const struct mqc_conn_opts *o, const char *inbox_prefix, const char *topic,
    const void *payload, size_t len, int qos, struct mqc_requester **out, char *err, size_t errlen)
{
	return start_any(o, inbox_prefix, false, topic, payload, len, qos, out, err, errlen);
}

int mqc_request_start_legacy(const struct mqc_conn_opts *o, const char *reply_topic,
    const char *topic, const void *payload, size_t len, int qos, struct mqc_requester **out,
    char *err, size_t errlen)
{
	return start_any(o, reply_topic, true, topic, payload, len, qos, out, err, errlen);
}

int mqc_requester_fd(struct mqc_requester *r)
{
	return mosquitto_socket(r->m);
}

bool mqc_requester_want_write(struct mqc_requester *r)
{
	return mqc_client_want_write(r->m, r->connack < 0);
}

int mqc_request_step(struct mqc_requester *r, bool readable, bool writable,
    struct mqc_req_reply *reply, char *err, size_t errlen)
{
	*reply = (struct mqc_req_reply) { 0 };
	int io = mqc_client_io(r->m, readable, writable, r->connack < 0);
	int how = io == MOSQ_ERR_SUCCESS && !r->lost ? MQC_REQ_OK : MQC_REQ_LOST;
	int rc = MQC_REQ_OK;
	if (r->phase == PH_CONNECTING) {
		if (r->connack < 0 && how == MQC_REQ_OK)
			return MQC_REQ_PENDING;
		rc = connect_result(r, r->connack >= 0 ? MQC_REQ_OK : how, err, errlen);
		if (rc == MQC_REQ_OK && (rc = subscribe_inbox(r)) != MQC_REQ_OK)
			subscribe_result(r, rc, err, errlen);
		r->phase = PH_SUBSCRIBING;
	}
	if (rc == MQC_REQ_OK && r->phase == PH_SUBSCRIBING) {
		if (!r->subscribed && !r->sub_refused && how == MQC_REQ_OK)
			return MQC_REQ_PENDING;
		rc = subscribe_result(r, r->subscribed || r->sub_refused ? MQC_REQ_OK : how, err, errlen);
		if (rc == MQC_REQ_OK
		    && (rc = publish_command(r, r->topic, r->payload, r->len, r->qos, &r->own))
		        != MQC_REQ_OK)
			snprintf(err, errlen, "publishing the command: %s",
			    rc == MQC_REQ_NOMEM ? "out of memory" : "the connection closed");
		r->phase = PH_WAITING;
	}
	if (rc == MQC_REQ_OK) {
		if (!answered(r) && how == MQC_REQ_OK)
			return MQC_REQ_PENDING;
		rc = reply_result(r, answered(r) ? MQC_REQ_OK : MQC_REQ_LOST);
		if (rc == MQC_REQ_OK) {
			*reply = r->own;
			r->own = (struct mqc_req_reply) { 0 };
		} else
			snprintf(err, errlen, "%s",
			    rc == MQC_REQ_DENIED            ? "the broker refused the command"
			        : rc == MQC_REQ_NORESPONDER ? "nobody is subscribed to the command's topic"
			        : rc == MQC_REQ_NOMEM       ? "out of memory"
			                                    : "the connection closed before the reply");
	}
	return rc;
}

int mqc_request_expired(struct mqc_requester *r, char *err, size_t errlen)
{
	if (r->phase == PH_CONNECTING)
		return connect_result(r, MQC_REQ_TIMEDOUT, err, errlen);
	if (r->phase == PH_SUBSCRIBING)
		return subscribe_result(r, MQC_REQ_TIMEDOUT, err, errlen);
	snprintf(err, errlen, "no reply by the deadline");
	return MQC_REQ_TIMEDOUT;
}

void mqc_req_reply_free(struct mqc_req_reply *reply)
{
	if (!reply)
		return;
	free(reply->payload);
	free(reply->topic);
	*reply = (struct mqc_req_reply) { 0 };
}
