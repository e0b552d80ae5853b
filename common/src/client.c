/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * client.c - the one way the project opens an MQTT connection: see mqc_client.h.
 */
#include "mqc_client.h"

#include <errno.h>
#include <mqtt_protocol.h>
#include <netdb.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_net.h"
#include "mqc_random.h"
#include "mqc_tls.h"
#include "mqc_verdict.h"

const char *mqc_client_strerror(int rc)
{
	/* libmosquitto says "A TLS error occurred." and frees the SSL: the refusal, if one. */
	if (rc == MOSQ_ERR_TLS && mqc_tls_last_refusal())
		return mqc_tls_last_refusal();
	return rc == MOSQ_ERR_ERRNO ? strerror(errno) : mosquitto_strerror(rc);
}

struct mosquitto *mqc_client_new(
    const struct mqc_conn_opts *o, void *obj, char *id, char *err, size_t errlen)
{
	if (o->url.ws) {
		/* Debian's libmosquitto 2.0.11 has no WebSocket transport (no MOSQ_OPT_TRANSPORT). */
		snprintf(err, errlen,
		    "ws:// and wss:// are not taken here: this part of the program connects with "
		    "libmosquitto %d.%d, which has no WebSockets (the pool, mqbench connect and churn, "
		    "and mqbench request --mode pool speak them)",
		    LIBMOSQUITTO_MAJOR, LIBMOSQUITTO_MINOR);
		return NULL;
	}
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
		/* The project's context (mqc_tls.h), so that a refused certificate is said in words
		 * (mqc_client_strerror): libmosquitto's own says "A TLS error occurred." and frees the
		 * SSL that knew why. libmosquitto takes its own reference to the context. */
		SSL_CTX *ctx = o->ssl_ctx;
		char why[256] = "";
		if (rc == MOSQ_ERR_SUCCESS && !ctx
		    && !(ctx
		        = mqc_tls_client_ctx(o->cafile, o->cert, o->key, o->url.host, why, sizeof why))) {
			snprintf(err, errlen, "%s", why);
			mosquitto_destroy(m);
			return NULL;
		}
		if (rc == MOSQ_ERR_SUCCESS) {
			mosquitto_int_option(m, MOSQ_OPT_SSL_CTX_WITH_DEFAULTS, 0);
			rc = mosquitto_void_option(m, MOSQ_OPT_SSL_CTX, ctx);
		}
		if (ctx != o->ssl_ctx)
			SSL_CTX_free(ctx);
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
	mqc_tls_clear_refusal(); /* what this connection's handshake refuses, and nothing older */
	int rc = mosquitto_connect_bind_async(m, o->url.host, o->url.port, keepalive, o->bind_address);
	if (rc == MOSQ_ERR_SUCCESS) {
		/* Written data nobody acknowledges (a link gone dark) fails the connection within two
		 * keepalives, as an unanswered PINGREQ does silence - not after tcp_retries2's ~15 min. */
		mqc_tcp_user_timeout(mosquitto_socket(m), 2000u * (unsigned)keepalive);
		return 0;
	}
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

/* --- why CONNECT failed ---------------------------------------------------------------------- */

/* The first packet from fd (TLS with ssl), read into buf[0, cap) until it is whole or the
 * deadline passes. 0 with *pk (a view into buf), or -1. */
static int read_packet(
    int fd, SSL *ssl, unsigned char *buf, size_t cap, uint64_t deadline, struct mqc_packet *pk)
{
	size_t got = 0;
	for (;;) {
		mqc_malformed why;
		switch (mqc_frame(buf, got, cap, pk, &why)) {
			case MQC_FRAME_OK:
				return 0;
			case MQC_FRAME_BAD:
				return -1;
			case MQC_FRAME_MORE:
				break;
		}
		if (got == cap)
			return -1;
		int n = ssl ? SSL_read(ssl, buf + got, (int)(cap - got))
		            : (int)recv(fd, buf + got, cap - got, 0);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		bool again = ssl ? SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ
		                 : n < 0 && (errno == EAGAIN || errno == EINTR);
		uint64_t now = mqc_now_ns();
		if (!again || now >= deadline)
			return -1;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, (int)((deadline - now) / MQC_NS_PER_MS) + 1);
	}
}

/* All of b's live bytes to fd (TLS with ssl). */
static bool send_buf(int fd, SSL *ssl, const struct mqc_buf *b)
{
	size_t n = mqc_buf_live(b);
	return ssl ? SSL_write(ssl, b->data + b->off, (int)n) == (int)n
	           : send(fd, b->data + b->off, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* One CONNECT at protocol (4 or 5) to o's broker: 1 when its CONNACK accepted it, 0 otherwise;
 * what says which, as what a 3.1.1 CONNECT met (mqc_v311_seen). */
static int probe_v311(
    const struct mqc_conn_opts *o, int protocol, unsigned timeout_ms, char *what, size_t len)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	char service[8];
	snprintf(service, sizeof service, "%d", o->url.port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	if (getaddrinfo(o->url.host, service, &hints, &ai) != 0 || !ai) {
		mqc_v311_seen(false, 0, "its address could not be resolved again", what, len);
		return 0;
	}
	/* Blocking, within timeout_ms: SO_SNDTIMEO bounds connect(2) too. */
	struct timeval tv
	    = { .tv_sec = timeout_ms / 1000, .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000 };
	int fd = -1;
	for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		char why[160];
		snprintf(why, sizeof why, "its TCP connect failed: %s", strerror(errno));
		mqc_v311_seen(false, 0, why, what, len);
		return 0;
	}
	SSL_CTX *ctx = NULL;
	SSL *ssl = NULL;
	int verdict = 0;
	char err[256];
	if (o->url.tls) {
		ctx = mqc_tls_client_ctx(o->cafile, o->cert, o->key, o->url.host, err, sizeof err);
		ssl = ctx ? SSL_new(ctx) : NULL;
		if (!ssl || !SSL_set_fd(ssl, fd)) {
			char why[200];
			snprintf(why, sizeof why, "TLS: %.150s", ctx ? "out of memory" : err);
			mqc_v311_seen(false, 0, why, what, len);
			goto done;
		}
		mqc_tls_set_sni(ssl, o->url.host);
		if (SSL_connect(ssl) != 1) {
			mqc_v311_seen(false, 0, "its TLS handshake failed", what, len);
			goto done;
		}
	}
	char id[MQC_CLIENT_ID_MAX];
	struct mqc_buf out = { 0 };
	if (mqc_random_id(id, sizeof id, "mqc-check-") != 0
	    || mqc_enc_connect(&out,
	           &(struct mqc_connect) { .protocol = protocol,
	               .client_id = id,
	               .username = o->username,
	               .password = o->password,
	               .keepalive_s = 10 })
	        != MQC_ENC_OK
	    || !send_buf(fd, ssl, &out)) {
		mqc_buf_free(&out);
		mqc_v311_seen(false, 0, "it could not be sent", what, len);
		goto done;
	}
	mqc_buf_free(&out);
	unsigned char in[1024];
	struct mqc_packet pk;
	struct mqc_connack ack;
	if (read_packet(fd, ssl, in, sizeof in, deadline, &pk) != 0 || pk.type != MQC_CONNACK
	    || mqc_dec_connack(&pk, protocol, &ack) != NULL) {
		mqc_v311_seen(false, 0, "no CONNACK came", what, len);
		goto done;
	}
	verdict = ack.code == 0; /* accepted */
	mqc_v311_seen(true, ack.code, NULL, what, len);
	if (mqc_enc_disconnect(&out, protocol, 0) == MQC_ENC_OK)
		send_buf(fd, ssl, &out);
	mqc_buf_free(&out);
done:
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
	return verdict;
}

/* Verdicts by address, for a minute: a client failing in a loop asks the broker once. */
struct verdict {
	char key[MQC_URL_HOST_MAX + 16];
	uint64_t until;
	int confirmed;
	char what[200];
};
static pthread_mutex_t verdicts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct verdict verdicts[8];

static int probe_cached(const struct mqc_conn_opts *o, bool close_case, char *what, size_t len)
{
	char key[sizeof verdicts[0].key];
	snprintf(key, sizeof key, "%s:%d:%d", o->url.host, o->url.port, o->url.tls);
	uint64_t now = mqc_now_ns();
	pthread_mutex_lock(&verdicts_lock);
	for (size_t i = 0; i < sizeof verdicts / sizeof *verdicts; i++)
		if (verdicts[i].until > now && strcmp(verdicts[i].key, key) == 0) {
			int confirmed = verdicts[i].confirmed;
			snprintf(what, len, "%s", verdicts[i].what);
			pthread_mutex_unlock(&verdicts_lock);
			return confirmed;
		}
	pthread_mutex_unlock(&verdicts_lock);
	char seen[200];
	int confirmed = probe_v311(o, 4, 3000, seen, sizeof seen);
	/* Closed without a CONNACK, then 3.1.1 accepted: was it the protocol, or a moment (a broker
	 * at its connection limit that had room again)? An MQTT 5 CONNECT once more says. */
	char again[200];
	if (confirmed && close_case && probe_v311(o, 5, 3000, again, sizeof again)) {
		confirmed = 0;
		snprintf(seen, sizeof seen,
		    "an MQTT 3.1.1 CONNECT right after was accepted, and so was an MQTT 5 CONNECT after "
		    "it");
	}
	snprintf(what, len, "%s", seen);
	pthread_mutex_lock(&verdicts_lock);
	size_t oldest = 0;
	for (size_t i = 1; i < sizeof verdicts / sizeof *verdicts; i++)
		if (verdicts[i].until < verdicts[oldest].until)
			oldest = i;
	struct verdict *v = &verdicts[oldest];
	snprintf(v->key, sizeof v->key, "%s", key);
	snprintf(v->what, sizeof v->what, "%s", seen);
	v->confirmed = confirmed;
	v->until = now + 60 * MQC_NS_PER_S;
	pthread_mutex_unlock(&verdicts_lock);
	return confirmed;
}

bool mqc_client_explain_connect_failure(const struct mqc_conn_opts *o, int protocol, int rc,
    const char *hint, const char *sent_by, char *out, size_t len)
{
	char where[MQC_URL_HOST_MAX + 32];
	mqc_url_format(&o->url, where, sizeof where);
	bool v5 = protocol != 4;
	if (rc > 0 && !(v5 && rc == 0x84)) {
		snprintf(out, len, "the broker at %s refused CONNECT: %s (%s %s%X)", where,
		    mqc_connack_text((unsigned)rc, !v5), v5 ? "reason code" : "MQTT 3.1.1 return code",
		    v5 ? "0x" : "", (unsigned)rc);
		return true;
	}
	/* What was sent, said with a close: a value the broker disliked is as likely as the version. */
	char sent[400];
	if (sent_by)
		snprintf(sent, sizeof sent, "%s", sent_by);
	else
		snprintf(sent, sizeof sent, "libmosquitto's: clean start, Keep Alive %u s, %s%s",
		    o->keepalive_s ? o->keepalive_s : 30, o->username ? "user name " : "no user name",
		    o->username ? o->username : "");
	if (!v5) {
		snprintf(out, len,
		    "the broker at %s closed the connection in answer to an MQTT 3.1.1 CONNECT (%s) "
		    "without a CONNACK (a broker at its connection limit - mosquitto's max_connections or "
		    "its open-file limit - a proxy or a firewall does this)",
		    where, sent);
		return false;
	}
	char what[200], cause[sizeof sent + 100], fix[120];
	bool v311_works = probe_cached(o, rc <= 0, what, sizeof what);
	if (rc > 0) /* the broker said so: 0x84, or 3.1.1's return code 1 as libmosquitto gives it */
		snprintf(cause, sizeof cause, "refused the MQTT 5 CONNECT's protocol version");
	else
		mqc_v5_closed_cause(sent, cause, sizeof cause);
	snprintf(fix, sizeof fix, "use %s", hint);
	mqc_v5_verdict(&(struct mqc_v5_check) { .where = where,
	                   .cause = cause,
	                   .said = rc > 0,
	                   .v311_works = v311_works,
	                   .seen = what,
	                   .fix = fix },
	    out, len);
	return rc > 0;
	return false;
}
