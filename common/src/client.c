/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * client.c - the one way the project opens an MQTT connection: see mqc_client.h.
 */
#include "mqc_client.h"

#include <errno.h>
#include <mqtt_protocol.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqc_random.h"

const char *mqc_client_strerror(int rc)
{
	return rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc);
}

struct mosquitto *mqc_client_new(
    const struct mqc_conn_opts *o, void *obj, char *id, char *err, size_t errlen)
{
	char made[MQC_CLIENT_ID_MAX];
	const char *use = o->client_id;
	if (!use) {
		char prefix[48];
		snprintf(prefix, sizeof prefix, "%.40s-", o->id_prefix ? o->id_prefix : "mqtt");
		if (mqc_random_id(made, sizeof made, prefix) != 0) {
			snprintf(err, errlen, "no random bytes for a client id: %s", strerror(errno));
			return NULL;
		}
		use = made;
	}
	if (id)
		snprintf(id, MQC_CLIENT_ID_MAX, "%s", use);
	struct mosquitto *m = mosquitto_new(use, true, obj);
	if (!m) {
		snprintf(err, errlen, "mosquitto_new: %s",
		    errno == EINVAL ? "the client id is not valid" : "out of memory");
		return NULL;
	}
	mosquitto_int_option(
	    m, MOSQ_OPT_PROTOCOL_VERSION, o->protocol == 4 ? MQTT_PROTOCOL_V311 : MQTT_PROTOCOL_V5);
	mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1);
	int rc = MOSQ_ERR_SUCCESS;
	if (o->username)
		rc = mosquitto_username_pw_set(m, o->username, o->password);
	if (rc == MOSQ_ERR_SUCCESS && o->url.tls) {
		/* Verification stays on: libmosquitto checks the chain and the host name unless told
		 * otherwise, and nothing here tells it otherwise. */
		rc = mosquitto_tls_set(
		    m, o->cafile, o->cafile ? NULL : MQC_SYSTEM_CA_PATH, o->cert, o->key, NULL);
		if (rc == MOSQ_ERR_SUCCESS && o->ssl_ctx) {
			mosquitto_int_option(m, MOSQ_OPT_SSL_CTX_WITH_DEFAULTS, 0);
			rc = mosquitto_void_option(m, MOSQ_OPT_SSL_CTX, o->ssl_ctx);
		}
		if (rc != MOSQ_ERR_SUCCESS) {
			snprintf(err, errlen, "TLS setup: %s (check the CA, certificate and key files)",
			    mqc_client_strerror(rc));
			mosquitto_destroy(m);
			return NULL;
		}
	}
	if (rc != MOSQ_ERR_SUCCESS) {
		snprintf(err, errlen, "credentials: %s", mqc_client_strerror(rc));
		mosquitto_destroy(m);
		return NULL;
	}
	return m;
}

int mqc_client_connect(struct mosquitto *m, const struct mqc_conn_opts *o, char *err, size_t errlen)
{
	int keepalive = o->keepalive_s ? (int)o->keepalive_s : 30;
	int rc = mosquitto_connect_bind_async(m, o->url.host, o->url.port, keepalive, o->bind_address);
	if (rc == MOSQ_ERR_SUCCESS)
		return 0;
	char where[MQC_URL_HOST_MAX + 32];
	mqc_url_format(&o->url, where, sizeof where);
	snprintf(err, errlen, "connect to %s: %s", where, mqc_client_strerror(rc));
	return -1;
}

bool mqc_client_want_write(struct mosquitto *m, bool connecting)
{
	if (connecting) {
		SSL *ssl = mosquitto_ssl_get(m);
		if (ssl && !SSL_is_init_finished(ssl))
			return SSL_want_write(ssl);
	}
	return mosquitto_want_write(m);
}

int mqc_client_io(struct mosquitto *m, bool readable, bool writable, bool connecting)
{
	int rc = MOSQ_ERR_SUCCESS;
	if (writable) {
		rc = mosquitto_loop_write(m, 1);
		if (rc == MOSQ_ERR_SUCCESS && connecting) /* the handshake moves on in the read path */
			rc = mosquitto_loop_read(m, 1);
	}
	if (rc == MOSQ_ERR_SUCCESS && readable && mosquitto_socket(m) >= 0) {
		rc = mosquitto_loop_read(m, 1);
		mqc_tcp_quickack(mosquitto_socket(m)); /* a Nagle-ing broker: mqc_net.h */
	}
	return rc;
}

int mqc_client_misc(struct mosquitto *m)
{
	return mosquitto_loop_misc(m);
}

int mqc_client_step(struct mosquitto *m, bool connecting, int timeout_ms)
{
	int fd = mosquitto_socket(m);
	if (fd < 0)
		return MOSQ_ERR_NO_CONN;
	struct pollfd p = {
		.fd = fd,
		.events = (short)(POLLIN | (mqc_client_want_write(m, connecting) ? POLLOUT : 0)),
	};
	int n = poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms);
	if (n < 0 && errno != EINTR)
		return MOSQ_ERR_ERRNO;
	int rc = MOSQ_ERR_SUCCESS;
	if (n > 0)
		rc = mqc_client_io(m, (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0,
		    (p.revents & POLLOUT) != 0, connecting);
	if (rc == MOSQ_ERR_SUCCESS && mosquitto_socket(m) >= 0)
		rc = mqc_client_misc(m);
	return rc;
}

int mqc_client_wait(struct mosquitto *m, bool (*done)(const void *arg),
    bool (*connecting)(const void *arg), const void *arg, uint64_t deadline)
{
	while (!done(arg)) {
		uint64_t now = mqc_now_ns();
		if (now >= deadline)
			return MOSQ_ERR_TIMEOUT;
		/* At most 100 ms a pass, so keepalive runs while a long wait goes on. */
		uint64_t ms = (deadline - now + MQC_NS_PER_MS - 1) / MQC_NS_PER_MS;
		int rc = mqc_client_step(m, connecting && connecting(arg), ms > 100 ? 100 : (int)ms);
		if (rc != MOSQ_ERR_SUCCESS)
			return done(arg) ? MOSQ_ERR_SUCCESS : rc;
	}
	return MOSQ_ERR_SUCCESS;
}

void mqc_client_close(struct mosquitto *m, int timeout_ms)
{
	if (!m)
		return;
	if (mosquitto_disconnect(m) == MOSQ_ERR_SUCCESS) {
		uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
		while (mosquitto_socket(m) >= 0 && mosquitto_want_write(m)) {
			uint64_t now = mqc_now_ns();
			if (now >= deadline
			    || mqc_client_step(m, false, (int)((deadline - now) / MQC_NS_PER_MS))
			        != MOSQ_ERR_SUCCESS)
				break;
		}
	}
	mosquitto_destroy(m);
}
