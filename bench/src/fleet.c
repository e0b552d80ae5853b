/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet.c - the engine under what a fleet does to a broker's connections: the connect storm
 * (connect.c: N connections opened on a schedule and held, with --reconnect through the broker's
 * restarts, the cutover's reconnect storm) and churn (churn.c: connect, optionally publish or
 * subscribe once, disconnect, at a fixed rate).
 *
 * Raw non-blocking sockets (one descriptor per connection; libmosquitto needs three, which would
 * cap a process at about 6,600 connections under a 20,000 descriptor limit) and hand-written
 * packets. Every attempt has an intended time t0 + k/rate; at most --concurrency scheduled
 * attempts are in progress, and an attempt that waits for a free place is late, which its latency
 * shows: TCP connect and CONNACK latency are measured from the intended time. A reconnect is
 * measured from the moment its connection was lost. With mqtts:// the TLS handshake runs
 * non-blocking through OpenSSL, with CA verification and a hostname check; its time and the
 * client's CPU are kept apart for full and resumed handshakes.
 *
 * Timers (attempt deadlines, reconnect back-off) sit in one min-heap keyed by their due time; an
 * entry whose attempt has moved on since is stale and skipped when it comes up.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_heap.h"
#include "mqc_tls.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

const char *const fleet_reason_names[R_COUNT] = { "refused", "timeout", "connack", "emfile",
	"eaddrnotavail", "tls", "dropped", "closed_before_connack", "suback", "other" };

volatile sig_atomic_t fleet_interrupted;

static void on_signal(int sig)
{
	(void)sig;
	fleet_interrupted = 1;
}

static uint64_t random_u64(struct fleet *r)
{
	/* xorshift64*: jitter, not secrets */
	r->rng ^= r->rng >> 12;
	r->rng ^= r->rng << 25;
	r->rng ^= r->rng >> 27;
	return r->rng * 2685821657736338717ULL;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return mqc_ts_to_ns(&ts);
}

/* --- identities ------------------------------------------------------------------------------ */

static const char *identity(const char *tpl, uint64_t k, char *buf, size_t cap)
{
	if (!tpl)
		return NULL;
	return bench_identity(tpl, k, buf, cap, NULL, 0) >= 0 ? buf : NULL;
}

/* Client k's CONNECT into out: clean start, --keepalive (default 0: held connections stay quiet
 * unless the broker sets a Server Keep Alive), MQTT 5: packets up to RX_CAP, the client id and
 * credentials from their templates. -1 when it cannot be made (checked before the run). */
static int build_connect(const struct bench_opts *o, uint64_t k, struct mqc_buf *out)
{
	char id[256], user[MQC_STR_MAX + 1], pass[MQC_STR_MAX + 1];
	if (o->client_id_tpl) {
		if (!identity(o->client_id_tpl, k, id, sizeof id))
			return -1;
	} else {
		snprintf(id, sizeof id, "%s-%s-%llu", o->prefix, o->token, (unsigned long long)k);
	}
	const char *u = o->net.conn.username;
	const char *p = o->net.conn.password;
	if (u && !(u = identity(u, k, user, sizeof user)))
		return -1;
	if (p && !(p = identity(p, k, pass, sizeof pass)))
		return -1;
	struct mqc_connect c = { .protocol = o->net.conn.protocol,
		.client_id = id,
		.username = u,
		.password = p,
		.keepalive_s = o->keepalive_s,
		.max_packet = RX_CAP };
	out->off = out->len = 0;
	return mqc_enc_connect(out, &c) == MQC_ENC_OK ? 0 : -1;
}

/* Every template's '%' sequences, and whether the longest identity fits. */
int bench_connect_check(const struct bench_opts *o, char *err, size_t errlen)
{
	const struct {
		const char *name, *tpl;
		size_t max;
	} t[] = {
		{ "--username", o->net.conn.username, MQC_STR_MAX },
		{ "--password", o->net.conn.password, MQC_STR_MAX },
		{ "--client-id", o->client_id_tpl, 255 },
		{ "--cert", o->net.conn.cert, 4095 },
		{ "--key", o->net.conn.key, 4095 },
	};
	uint64_t last = o->clients ? o->clients - 1 : 0;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (!t[i].tpl)
			continue;
		char *buf = malloc(t[i].max + 1), why[300];
		int n = buf ? bench_identity(t[i].tpl, last, buf, t[i].max + 1, why, sizeof why) : -2;
		free(buf);
		if (n == -1) {
			snprintf(err, errlen, "%s %s (%%%% for a literal %%)", t[i].name, why);
			return -1;
		}
		if (n < 0) {
			snprintf(err, errlen, "%s: longer than MQTT allows (%zu bytes) for client %llu",
			    t[i].name, t[i].max, (unsigned long long)last);
			return -1;
		}
	}
	if (!o->client_id_tpl && strlen(o->prefix) > 64) {
		snprintf(err, errlen, "--prefix: longer than MQTT allows (64 bytes)");
		return -1;
	}
	return 0;
}

/* --- timers and per-second counts --------------------------------------------------------------
 */

static void arm(struct fleet *r, struct attempt *a, uint64_t due)
{
	a->due = due;
	if (mqc_heap_push(&r->timers, due, a) != 0)
		a->due = UINT64_MAX; /* out of memory: the run's own deadline still ends it */
}

struct second *fleet_second(struct fleet *r, uint64_t now)
{
	size_t i = now > r->t0 ? (size_t)((now - r->t0) / MQC_NS_PER_S) : 0;
	if (i >= r->nseconds) {
		size_t n = i + 64;
		struct second *grown = realloc(r->seconds, n * sizeof *grown);
		if (!grown)
			return NULL;
		memset(grown + r->nseconds, 0, (n - r->nseconds) * sizeof *grown);
		r->seconds = grown;
		r->nseconds = n;
	}
	return &r->seconds[i];
}

/* --- an attempt's life ---------------------------------------------------------------------------
 */

void fleet_close(struct attempt *a)
{
	/* Marked shut down: OpenSSL would otherwise mark the session unresumable on SSL_free, and a
	 * device whose broker went away still offers its session to the next one. */
	if (a->ssl) {
		SSL_set_shutdown(a->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
		SSL_free(a->ssl);
		a->ssl = NULL;
	}
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	a->rxlen = 0;
}

static bool connecting(enum state st)
{
	return st == ST_TCP || st == ST_TLS || st == ST_CONNACK || st == ST_SUBACK;
}

uint64_t fleet_storm_failures(const struct rstorm *st)
{
	uint64_t n = 0;
	for (int k = 0; k < R_COUNT; k++)
		n += st->fails[k];
	return n;
}

struct rstorm *fleet_current_storm(struct fleet *r)
{
	return r->nstorms && !r->storms[r->nstorms - 1]->over ? r->storms[r->nstorms - 1] : NULL;
}

static void retry_later(struct fleet *r, struct attempt *a, uint64_t now)
{
	const struct bench_opts *o = r->o;
	double u = (double)(random_u64(r) >> 11) / (double)(1ULL << 53);
	uint64_t delay = (uint64_t)((double)a->backoff * (1.0 - o->reconnect_jitter * u));
	a->backoff = a->backoff * 2 > o->backoff_max_ns ? o->backoff_max_ns : a->backoff * 2;
	a->state = ST_BACKOFF;
	a->intended = now + delay;
	arm(r, a, a->intended);
}

/* An attempt failed: a reconnect tries again later, anything else counts as a failure. */
void fleet_failed(struct fleet *r, struct attempt *a, enum reason why)
{
	uint64_t now = mqc_now_ns();
	if (connecting(a->state)) {
		if (a->lost_at)
			r->reconnecting--;
		else
			r->in_progress--;
	}
	fleet_close(a);
	if (a->lost_at) {
		struct rstorm *st = fleet_current_storm(r);
		if (st)
			st->fails[why]++;
		retry_later(r, a, now);
		return;
	}
	r->failed++;
	r->reasons[why]++;
	r->done++;
	r->last_done = now;
	struct second *sec = fleet_second(r, now);
	if (sec) {
		sec->failed++;
		sec->fails[why]++;
	}
	a->state = r->churn ? ST_WAITING : ST_FAILED;
}

/* A thread that takes no signals: SIGINT and SIGTERM stay with the loop's thread, whose
 * epoll_wait they interrupt. */
static bool start_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool ok = pthread_create(t, NULL, fn, arg) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}

static void *storm_probe_reader(void *arg)
{
	struct rstorm *st = arg;
	bench_probe_read(st->probe_url, &st->probe);
	return NULL;
}

static void end_storm(struct fleet *r, struct rstorm *st)
{
	st->over = true;
	if (r->o->metrics_url) {
		st->probe_url = r->o->metrics_url;
		st->reading = start_quiet_thread(&st->reader, storm_probe_reader, st);
		if (!st->reading) /* no thread: read it here, late rather than never */
			bench_probe_read(st->probe_url, &st->probe);
	}
	char took[24], p99[24];
	fprintf(stderr, "storm %u: reconnected %u of %u in %s (the last one back at %.3fs), p99 %s\n",
	    r->nstorms, st->back, st->lost, bench_fmt_ns(st->last_back - st->first_loss, took, 24),
	    (double)(st->last_back - r->t0) / 1e9,
	    bench_fmt_ns(mqc_hist_percentile(&st->latency, 99), p99, 24));
}

void fleet_storm_probes_wait(struct fleet *r)
{
	for (unsigned i = 0; i < r->nstorms; i++) {
		if (r->storms[i]->reading) {
			pthread_join(r->storms[i]->reader, NULL);
			r->storms[i]->reading = false;
		}
	}
}

/* The broker answered CONNACK 0: the connection is up. */
static void connected(struct fleet *r, struct attempt *a, uint64_t now)
{
	if (a->lost_at) {
		r->reconnecting--;
		struct rstorm *st = fleet_current_storm(r);
		if (st) {
			mqc_hist_record(&st->latency, now - a->lost_at);
			st->back++;
			st->last_back = now;
		}
		a->lost_at = 0;
		a->state = ST_HELD;
		if (st && st->back == st->lost)
			end_storm(r, st);
		return;
	}
	r->in_progress--;
	mqc_hist_record(&r->connack, now - a->intended);
	r->held++;
	r->done++;
	r->last_done = now;
	struct second *sec = fleet_second(r, now);
	if (sec) {
		sec->ok++;
		sec->latency_sum += now - a->intended;
		if (now - a->intended > sec->latency_max)
			sec->latency_max = now - a->intended;
	}
	a->state = ST_HELD;
}

/* A held connection ended (EOF or an error): a reconnect storm, or a dropped connection. */
static void lost(struct fleet *r, struct attempt *a, uint64_t now)
{
	fleet_close(a);
	if (!r->o->reconnect) { /* connected, then dropped: a failure of the run */
		r->held--;
		r->failed++;
		r->reasons[R_DROPPED]++;
		a->state = ST_FAILED;
		return;
	}
	struct rstorm *st = fleet_current_storm(r);
	if (!st) {
		if (r->nstorms == r->storms_cap) {
			unsigned cap = r->storms_cap ? 2 * r->storms_cap : 4;
			struct rstorm **grown = realloc(r->storms, cap * sizeof(struct rstorm *));
			if (!grown) {
				a->state = ST_FAILED;
				return;
			}
			r->storms = grown;
			r->storms_cap = cap;
		}
		st = calloc(1, sizeof *st);
		if (!st || mqc_hist_init(&st->latency, 10) != 0) {
			free(st);
			a->state = ST_FAILED;
			return;
		}
		st->first_loss = now;
		r->storms[r->nstorms++] = st;
		fprintf(stderr, "storm %u: connections lost at %.3fs, reconnecting\n", r->nstorms,
		    (double)(now - r->t0) / 1e9);
	}
	if (a->storm == r->nstorms) { /* back already, and lost again in the same storm */
		st->back--;
		st->relost++;
	} else {
		a->storm = r->nstorms;
		st->lost++;
	}
	a->lost_at = now;
	a->backoff = r->o->backoff_min_ns;
	retry_later(r, a, now);
}

static void want(struct fleet *r, struct attempt *a, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = a };
	if (epoll_ctl(r->ep, EPOLL_CTL_MOD, a->fd, &ev) != 0)
		fleet_failed(r, a, R_OTHER); /* never waits for an event it cannot get */
}

ssize_t fleet_send(struct attempt *a, const unsigned char *p, size_t len)
{
	return a->ssl ? SSL_write(a->ssl, p, (int)len) : send(a->fd, p, len, MSG_NOSIGNAL);
}

int fleet_send_out(struct attempt *a, const struct mqc_buf *out)
{
	size_t len = mqc_buf_live(out);
	/* a connection that sends little takes a small packet whole */
	return fleet_send(a, out->data + out->off, len) == (ssize_t)len ? 0 : -1;
}

static void send_connect(struct fleet *r, struct attempt *a)
{
	if (build_connect(r->o, a->k, &r->out) != 0 || fleet_send_out(a, &r->out) != 0) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	a->state = ST_CONNACK;
	want(r, a, EPOLLIN);
}

static void tls_step(struct fleet *r, struct attempt *a)
{
	uint64_t c0 = thread_cpu_ns();
	ERR_clear_error(); /* the queue holds this handshake's errors only */
	int rc = SSL_connect(a->ssl);
	a->tls_cpu += thread_cpu_ns() - c0;
	if (rc == 1) {
		uint64_t took = mqc_now_ns() - a->tls_t0;
		if (SSL_session_reused(a->ssl)) {
			mqc_hist_record(&r->tls_resumed, took);
			r->tls_resumed_cpu += a->tls_cpu;
		} else {
			mqc_hist_record(&r->tls_full, took);
			r->tls_full_cpu += a->tls_cpu;
		}
		send_connect(r, a);
		return;
	}
	int e = SSL_get_error(a->ssl, rc);
	if (e == SSL_ERROR_WANT_READ) {
		want(r, a, EPOLLIN);
	} else if (e == SSL_ERROR_WANT_WRITE) {
		want(r, a, EPOLLOUT);
	} else {
		if (!r->tls_why[0]) /* the first says why; the count says how often */
			mqc_tls_failure(a->ssl, r->tls_why, sizeof r->tls_why);
		fleet_failed(r, a, R_TLS);
	}
}

static uint64_t identity_slot(const struct fleet *r, uint64_t k)
{
	return (k - r->first) % r->count;
}

/* The TLS side of a new connection: SNI, host check, this client's certificate, its session. */
static int tls_begin(struct fleet *r, struct attempt *a)
{
	const struct bench_opts *o = r->o;
	a->ssl = SSL_new(r->ctx);
	if (!a->ssl)
		return -1;
	SSL_set_fd(a->ssl, a->fd);
	mqc_tls_set_sni(a->ssl, o->net.conn.url.host);
	SSL_set1_host(a->ssl, o->net.conn.url.host);
	char cert[4096], key[4096];
	const char *c = NULL, *k = NULL;
	if (r->ncerts) {
		c = r->cert_files[a->k % r->ncerts];
		size_t n = strlen(c);
		snprintf(key, sizeof key, "%.*s.key", (int)(n - 4), c); /* NAME.crt -> NAME.key */
		k = key;
	} else if (o->net.conn.cert && bench_identity_varies(o->net.conn.cert)) {
		c = identity(o->net.conn.cert, a->k, cert, sizeof cert);
		k = identity(o->net.conn.key, a->k, key, sizeof key);
	}
	if (c
	    && (!k || SSL_use_certificate_chain_file(a->ssl, c) != 1
	        || SSL_use_PrivateKey_file(a->ssl, k, SSL_FILETYPE_PEM) != 1)) {
		static bool said;
		if (!said)
			fprintf(stderr, "mqbench: client %llu: cannot use certificate %s with key %s\n",
			    (unsigned long long)a->k, c, k ? k : "?");
		said = true;
		return -1;
	}
	if (r->sessions && r->sessions[identity_slot(r, a->k)])
		SSL_set_session(a->ssl, r->sessions[identity_slot(r, a->k)]);
	a->tls_t0 = mqc_now_ns();
	a->tls_cpu = 0;
	return 0;
}

/* Start an attempt for client k now; its latency counts from a->intended. */
void fleet_start(struct fleet *r, struct attempt *a)
{
	uint64_t now = mqc_now_ns();
	if (a->lost_at) {
		r->reconnecting++;
		struct rstorm *st = fleet_current_storm(r);
		if (st)
			st->attempts++;
	} else {
		r->in_progress++;
	}
	a->state = ST_TCP;
	a->rxlen = 0;
	arm(r, a, (a->lost_at ? now : a->intended) + r->o->connect_timeout_ns);
	int fd = socket(r->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fleet_failed(r, a, errno == EMFILE || errno == ENFILE ? R_EMFILE : R_OTHER);
		return;
	}
	a->fd = fd;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (r->nsources) {
		/* Let connect() pick the port per (source, destination): no early port exhaustion. */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
		struct sockaddr_in src
		    = { .sin_family = AF_INET, .sin_addr = r->sources[a->k % r->nsources] };
		if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
			fleet_failed(r, a, errno == EADDRNOTAVAIL ? R_EADDRNOTAVAIL : R_OTHER);
			return;
		}
	}
	if (connect(fd, (struct sockaddr *)&r->addr, r->addrlen) != 0 && errno != EINPROGRESS) {
		int e = errno;
		fleet_failed(r, a,
		    e == ECONNREFUSED        ? R_REFUSED
		        : e == EADDRNOTAVAIL ? R_EADDRNOTAVAIL
		                             : R_OTHER);
		return;
	}
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = a };
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		fleet_failed(r, a, R_OTHER);
}

/* Read what has arrived into a->rx. 1: a whole packet is there (*pk); 0: not yet; -1: EOF, an
 * error, or a malformed or too long packet (*closed: before any byte came, the broker closed a
 * connection it had let in). */
static int read_packet(struct attempt *a, struct mqc_packet *pk, bool *closed)
{
	*closed = false;
	for (;;) {
		mqc_malformed why = NULL;
		enum mqc_frame_result fr = mqc_frame(a->rx, a->rxlen, RX_CAP, pk, &why);
		if (fr == MQC_FRAME_OK)
			return 1;
		if (fr == MQC_FRAME_BAD || a->rxlen == RX_CAP)
			return -1; /* longer than anything we announced we take */
		ssize_t n = a->ssl ? SSL_read(a->ssl, a->rx + a->rxlen, (int)(RX_CAP - a->rxlen))
		                   : recv(a->fd, a->rx + a->rxlen, RX_CAP - a->rxlen, 0);
		if (n > 0) {
			a->rxlen += (unsigned)n;
			continue;
		}
		if (a->ssl) {
			int e = SSL_get_error(a->ssl, (int)n);
			if (e == SSL_ERROR_WANT_READ)
				return 0;
			*closed = a->rxlen == 0 && (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL);
			return -1;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		/* EOF or a reset with nothing received: the broker let the TCP connection in and
		 * closed it before CONNACK (mosquitto 2.0 does this at max_connections). */
		*closed = a->rxlen == 0 && (n == 0 || errno == ECONNRESET);
		return -1;
	}
}

/* Drop the packet at the front of rx (handled). */
void fleet_consume(struct attempt *a, const struct mqc_packet *pk)
{
	memmove(a->rx, a->rx + pk->size, a->rxlen - pk->size);
	a->rxlen -= (unsigned)pk->size;
}

/* A held connection's next PINGREQ, at three quarters of its keep-alive. */
static void schedule_ping(struct fleet *r, struct attempt *a, uint64_t now)
{
	if (!a->keepalive_s)
		return;
	a->due = now + (uint64_t)a->keepalive_s * MQC_NS_PER_S * 3 / 4;
	mqc_heap_push(&r->timers, a->due, a);
}

static void on_connack(
    struct fleet *r, struct attempt *a, const struct mqc_packet *pk, uint64_t now)
{
	struct mqc_connack ack;
	int protocol = r->o->net.conn.protocol;
	if (pk->type != MQC_CONNACK || mqc_dec_connack(pk, protocol, &ack)) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	if (ack.code != 0) {
		/* A 3.1.1-shaped CONNACK to a v5 CONNECT: the broker's own answer to the protocol. */
		if (ack.v311_form && protocol == 5)
			r->connack311_codes[ack.code]++;
		else
			r->connack_codes[ack.code]++;
		fleet_failed(r, a, R_CONNACK);
		return;
	}
	/* The broker's Server Keep Alive is the one to keep [MQTT-3.1.2-21]: a held connection
	 * that stays silent past it is dropped (FlashMQ answers Keep Alive 0 with 5 s). */
	a->keepalive_s = ack.has_server_keepalive ? ack.server_keepalive : r->o->keepalive_s;
	fleet_consume(a, pk);
	if (r->sessions && a->ssl) {
		SSL_SESSION *s = SSL_get1_session(a->ssl);
		uint64_t i = identity_slot(r, a->k);
		if (s && SSL_SESSION_is_resumable(s)) {
			SSL_SESSION_free(r->sessions[i]);
			r->sessions[i] = s;
		} else {
			SSL_SESSION_free(s);
		}
	}
	connected(r, a, now);
	if (r->churn)
		fleet_churn_connected(r, a, now);
	else if (a->state == ST_HELD)
		schedule_ping(r, a, now);
}

static void on_event(struct fleet *r, struct attempt *a, uint32_t events)
{
	uint64_t now = mqc_now_ns();
	bool closed;
	(void)events;
	switch (a->state) {
		case ST_TCP: {
			int err = 0;
			socklen_t len = sizeof err;
			getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &len);
			if (err) {
				fleet_failed(r, a, err == ECONNREFUSED ? R_REFUSED : R_OTHER);
				return;
			}
			if (!a->lost_at) /* a reconnect's latency counts from its loss, at CONNACK */
				mqc_hist_record(&r->tcp, now - a->intended);
			if (r->ctx) {
				if (tls_begin(r, a) != 0) {
					fleet_failed(r, a, R_TLS);
					return;
				}
				a->state = ST_TLS;
				tls_step(r, a);
			} else {
				send_connect(r, a);
			}
			return;
		}
		case ST_TLS:
			tls_step(r, a);
			return;
		case ST_CONNACK:
		case ST_SUBACK: {
			struct mqc_packet pk;
			int rc = read_packet(a, &pk, &closed);
			if (rc < 0)
				fleet_failed(r, a, closed && a->state == ST_CONNACK ? R_CLOSED : R_OTHER);
			else if (rc > 0 && a->state == ST_CONNACK)
				on_connack(r, a, &pk, now);
			else if (rc > 0)
				fleet_churn_suback(r, a, &pk, now);
			return;
		}
		case ST_HELD: {
			/* No subscriptions: what comes is PINGRESP (read and dropped), or a DISCONNECT
			 * before the broker lets go; only EOF or an error means it has. */
			struct mqc_packet pk;
			int rc;
			while ((rc = read_packet(a, &pk, &closed)) > 0)
				fleet_consume(a, &pk);
			if (rc < 0)
				lost(r, a, now);
			return;
		}
		default:
			return;
	}
}

/* Timers that are due: deadlines of attempts in progress, reconnects whose time has come. */
static void run_timers(struct fleet *r, uint64_t now)
{
	while (r->timers.len && r->timers.v[0].key <= now) {
		uint64_t key = r->timers.v[0].key;
		struct attempt *a = mqc_heap_pop(&r->timers);
		if (a->due != key)
			continue; /* stale: the attempt has moved on */
		a->due = 0;
		if (connecting(a->state)) {
			fleet_failed(r, a, R_TIMEOUT);
		} else if (a->state == ST_BACKOFF) {
			fleet_start(r, a);
		} else if (a->state == ST_HELD) { /* keep-alive */
			r->out.off = r->out.len = 0;
			if (mqc_enc_pingreq(&r->out) != MQC_ENC_OK || fleet_send_out(a, &r->out) != 0)
				lost(r, a, now);
			else
				schedule_ping(r, a, now);
		}
	}
}

/* One turn: wait for events until wake at most, handle them and the timers. */
void fleet_turn(struct fleet *r, uint64_t wake)
{
	uint64_t now = mqc_now_ns();
	if (r->timers.len && r->timers.v[0].key < wake)
		wake = r->timers.v[0].key;
	struct epoll_event events[256];
	struct timespec timeout = mqc_ns_to_ts(wake > now ? wake - now : 0);
	int n = epoll_pwait2(r->ep, events, 256, &timeout, NULL);
	for (int i = 0; i < n; i++)
		on_event(r, events[i].data.ptr, events[i].events);
	run_timers(r, mqc_now_ns());
}

/* --- before the run
 * ------------------------------------------------------------------------------- */

static int resolve(struct fleet *r)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char port[16];
	snprintf(port, sizeof port, "%d", r->o->net.conn.url.port);
	int rc = getaddrinfo(r->o->net.conn.url.host, port, &hints, &res);
	if (rc != 0) {
		fprintf(
		    stderr, "mqbench: cannot resolve %s: %s\n", r->o->net.conn.url.host, gai_strerror(rc));
		return -1;
	}
	memcpy(&r->addr, res->ai_addr, res->ai_addrlen);
	r->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int bench_parse_sources(const char *spec, struct in_addr **out, unsigned *count)
{
	char first[32], last[32];
	const char *dash = strchr(spec, '-');
	size_t n = dash ? (size_t)(dash - spec) : strlen(spec);
	struct in_addr a, b;
	if (n >= sizeof first || strlen(dash ? dash + 1 : spec) >= sizeof last)
		goto bad;
	memcpy(first, spec, n);
	first[n] = '\0';
	snprintf(last, sizeof last, "%s", dash ? dash + 1 : spec);
	if (inet_pton(AF_INET, first, &a) != 1 || inet_pton(AF_INET, last, &b) != 1
	    || ntohl(b.s_addr) < ntohl(a.s_addr) || ntohl(b.s_addr) - ntohl(a.s_addr) > 1023)
		goto bad;
	*count = ntohl(b.s_addr) - ntohl(a.s_addr) + 1;
	if (out) {
		*out = calloc(*count, sizeof **out);
		if (!*out)
			return -1;
		for (unsigned i = 0; i < *count; i++)
			(*out)[i].s_addr = htonl(ntohl(a.s_addr) + i);
	}
	return 0;
bad:
	fprintf(stderr,
	    "mqbench: --source: expected A.B.C.D-E.F.G.H (at most 1024 addresses), got '%s'\n", spec);
	return -1;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

uint64_t bench_churn_time_wait(double rate, uint64_t duration_ns)
{
	double seconds = (double)duration_ns / 1e9;
	return (uint64_t)(rate * (seconds < 60 ? seconds : 60));
}

/* --cert-dir: every NAME.crt with a NAME.key beside it, sorted by name. */
static int load_cert_dir(struct fleet *r)
{
	const char *dir = r->o->cert_dir;
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "mqbench: --cert-dir %s: %s\n", dir, strerror(errno));
		return -1;
	}
	struct dirent *e;
	unsigned cap = 0;
	int rc = 0;
	while ((e = readdir(d)) && rc == 0) {
		size_t n = strlen(e->d_name);
		if (n < 5 || strcmp(e->d_name + n - 4, ".crt") != 0)
			continue;
		char key[4096];
		snprintf(key, sizeof key, "%s/%.*s.key", dir, (int)(n - 4), e->d_name);
		if (access(key, R_OK) != 0)
			continue;
		if (r->ncerts == cap) {
			cap = cap ? 2 * cap : 64;
			char **grown = realloc(r->cert_files, cap * sizeof *grown);
			if (!grown) {
				rc = -1;
				break;
			}
			r->cert_files = grown;
		}
		if (asprintf(&r->cert_files[r->ncerts], "%s/%s", dir, e->d_name) < 0)
			rc = -1;
		else
			r->ncerts++;
	}
	closedir(d);
	if (rc == 0 && r->ncerts == 0) {
		fprintf(stderr, "mqbench: --cert-dir %s: no NAME.crt with a NAME.key beside it\n", dir);
		return -1;
	}
	if (rc == 0)
		qsort(r->cert_files, r->ncerts, sizeof *r->cert_files, name_cmp);
	return rc;
}

int bench_preflight(const struct bench_opts *o, uint64_t connections, uint64_t time_wait,
    unsigned processes, unsigned nsources)
{
	int rc = 0;
	uint64_t per_process = (connections + processes - 1) / processes;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (per_process + 32 > rl.rlim_cur) {
		fprintf(stderr,
		    "mqbench: %llu connections in %u process%s need %llu file descriptors each; the limit "
		    "here is %llu (ulimit -n): use --processes %llu or more\n",
		    (unsigned long long)connections, processes, processes == 1 ? "" : "es",
		    (unsigned long long)per_process + 32, (unsigned long long)rl.rlim_cur,
		    (unsigned long long)((connections + rl.rlim_cur - 33)
		        / (rl.rlim_cur > 32 ? rl.rlim_cur - 32 : 1)));
		rc = -1;
	}
	unsigned lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = 32768, hi = 60999;
		fclose(f);
	}
	uint64_t ports = (uint64_t)(hi - lo + 1) * (nsources ? nsources : 1);
	unsigned long tw = 0;
	f = fopen("/proc/net/sockstat", "r");
	if (f) {
		char line[256];
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "TCP: inuse %*u orphan %*u tw %lu", &tw) == 1)
				break;
		fclose(f);
	}
	if (connections > ports) {
		fprintf(stderr,
		    "mqbench: %llu connections to one address need more than the %llu local ports "
		    "available (%u-%u x %u source addresses); add --source addresses\n",
		    (unsigned long long)connections, (unsigned long long)ports, lo, hi,
		    nsources ? nsources : 1);
		rc = -1;
	} else if (time_wait && connections + time_wait + tw > ports) {
		/* Churn: the client closes first, so each cycle's port waits 60 s in TIME_WAIT. */
		fprintf(stderr,
		    "mqbench: warning: churn leaves each closed connection's port in TIME_WAIT for 60 s: "
		    "about %llu at once here (and %lu now), more than the %llu local ports (%u-%u x %u "
		    "source addresses); past them connects fail with eaddrnotavail unless the kernel "
		    "reuses them (net.ipv4.tcp_tw_reuse: loopback only by default); add --source "
		    "addresses\n",
		    (unsigned long long)time_wait, tw, (unsigned long long)ports, lo, hi,
		    nsources ? nsources : 1);
	} else if (connections + tw > ports) {
		fprintf(stderr,
		    "mqbench: warning: %lu sockets in TIME_WAIT and %llu new connections may exhaust "
		    "%llu local ports; wait a minute or add --source addresses\n",
		    tw, (unsigned long long)connections, (unsigned long long)ports);
	}
	/* The broker's own limit: a broker started from a wrapper as root may get 1,024 files, and
	 * then every connection past it looks like a slow broker (timeouts), not a limit. */
	unsigned long long broker_files;
	unsigned long open_now;
	if (o->broker_pid && bench_proc_files(o->broker_pid, &broker_files, &open_now)
	    && connections + open_now > broker_files)
		fprintf(stderr,
		    "mqbench: warning: the broker (pid %d) may open %llu files and has %lu open: %llu "
		    "more connections pass its limit, and those past it will time out or be closed "
		    "(raise the broker's LimitNOFILE / ulimit -n)\n",
		    (int)o->broker_pid, broker_files, open_now, (unsigned long long)connections);
	return rc;
}

static SSL_CTX *make_ctx(const struct bench_opts *o)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	bool shared_cert = o->net.conn.cert && !bench_identity_varies(o->net.conn.cert);
	if (!ctx || SSL_CTX_load_verify_locations(ctx, o->net.conn.cafile, NULL) != 1
	    || (shared_cert
	        && (SSL_CTX_use_certificate_chain_file(ctx, o->net.conn.cert) != 1
	            || SSL_CTX_use_PrivateKey_file(ctx, o->net.conn.key, SSL_FILETYPE_PEM) != 1))) {
		char buf[256];
		ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
		fprintf(stderr, "mqbench: TLS setup failed: %s (check --cafile, --cert, --key)\n", buf);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL); /* plus SSL_set1_host per connection */
	if (o->tls_resume) /* sessions are kept per client (SSL_get1_session), not by OpenSSL */
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
	return ctx;
}

/* --- the broker's and our own usage -------------------------------------------------------------
 */

static bool broker_now(const struct bench_opts *o, double *cpu, double *rss)
{
	if (o->broker_pid)
		return bench_proc_read(o->broker_pid, cpu, rss);
	if (!o->metrics_url)
		return false;
	struct probe_sample p;
	bench_probe_read(o->metrics_url, &p);
	*cpu = p.cpu_seconds;
	*rss = p.resident_bytes;
	return p.ok;
}

void fleet_sample(const struct bench_opts *o, struct broker_usage *u)
{
	double cpu, rss, t = (double)mqc_now_ns() / 1e9;
	if (!broker_now(o, &cpu, &rss))
		return;
	if (!u->ok) {
		*u = (struct broker_usage) { .ok = true,
			.cpu0 = cpu,
			.rss0 = rss,
			.cpu_last = cpu,
			.t_last = t,
			.t0 = t,
			.rss_max = rss };
		return;
	}
	if (cpu < u->cpu_last) { /* restarted: a new process's counters */
		u->cpu_last = cpu;
		u->restarted = true;
	}
	if (t - u->t_last >= 0.2) {
		double pct = (cpu - u->cpu_last) / (t - u->t_last) * 100;
		if (pct > u->peak_pct)
			u->peak_pct = pct;
		u->cpu_last = cpu;
		u->t_last = t;
	}
	if (rss > u->rss_max)
		u->rss_max = rss;
}

static void *sampler_main(void *arg)
{
	struct fleet_sampler *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		pthread_mutex_unlock(&s->mu);
		fleet_sample(s->o, s->u);
		pthread_mutex_lock(&s->mu);
		uint64_t until = mqc_now_ns() + s->period_ns;
		struct timespec ts
		    = { .tv_sec = (time_t)(until / MQC_NS_PER_S), .tv_nsec = (long)(until % MQC_NS_PER_S) };
		while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void sampler_start(struct fleet_sampler *s)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* mqc_now_ns's clock */
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->stop = false;
	s->running = start_quiet_thread(&s->thread, sampler_main, s);
	if (!s->running) {
		fprintf(stderr,
		    "mqbench: warning: no thread to sample the broker: its peak CPU and "
		    "memory are from the run's start and end only\n");
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
	}
}

/* Stop and join the sampler's thread; a read in flight ends first (at most the probe's
 * timeout). */
static void sampler_stop(struct fleet_sampler *s)
{
	if (!s->running)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	s->running = false;
}

void fleet_start_sampling(struct fleet *r, struct broker_usage *u, uint64_t period)
{
	r->sampler = (struct fleet_sampler) { .o = r->o, .u = u, .period_ns = period };
	if (r->o->broker_pid || r->o->metrics_url)
		sampler_start(&r->sampler);
}

void fleet_stop_sampling(struct fleet *r)
{
	sampler_stop(&r->sampler);
	if (r->sampler.u)
		fleet_sample(r->o, r->sampler.u);
	r->sampler.u = NULL;
}

/* This process's open descriptors and VmRSS (churn's no-growth check). */
void fleet_self_usage(unsigned *fds, double *rss)
{
	*fds = 0;
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			*fds += e->d_name[0] != '.';
		closedir(d);
		(*fds)--; /* the directory's own descriptor */
	}
	double cpu;
	if (!bench_proc_read(getpid(), &cpu, rss))
		*rss = -1;
}

/* --- the run
 * -------------------------------------------------------------------------------------- */

void fleet_free(struct fleet *r)
{
	for (unsigned i = 0; r->a && i < r->nslots; i++)
		fleet_close(&r->a[i]);
	free(r->a);
	mqc_buf_free(&r->out);
	free(r->sources);
	free(r->churn_topic);
	for (uint64_t i = 0; r->sessions && i < r->count; i++)
		SSL_SESSION_free(r->sessions[i]);
	free(r->sessions);
	for (unsigned i = 0; i < r->ncerts; i++)
		free(r->cert_files[i]);
	free(r->cert_files);
	SSL_CTX_free(r->ctx);
	mqc_heap_free(&r->timers);
	sampler_stop(&r->sampler); /* running only after an early return: nobody reads the usage */
	fleet_storm_probes_wait(r);
	struct mqc_hist *h[] = { &r->tcp, &r->connack, &r->cycle, &r->tls_full, &r->tls_resumed };
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		mqc_hist_free(h[i]);
	for (unsigned i = 0; i < r->nstorms; i++) {
		mqc_hist_free(&r->storms[i]->latency);
		free(r->storms[i]);
	}
	free(r->storms);
	free(r->seconds);
	if (r->ep >= 0)
		close(r->ep);
}

int fleet_setup(struct fleet *r)
{
	const struct bench_opts *o = r->o;
	bench_shard_range(o->clients, o->shard, o->shards, &r->first, &r->count);
	r->rate = (r->churn ? o->rate : o->connrate) / o->shards;
	if (r->count == 0) {
		fprintf(stderr, "mqbench: shard %u/%u has no clients (--clients %u)\n", o->shard, o->shards,
		    o->clients);
		return -1;
	}
	if (resolve(r) != 0)
		return -1;
	if (o->sources && bench_parse_sources(o->sources, &r->sources, &r->nsources) != 0)
		return -1;
	if (r->nsources && r->addr.ss_family != AF_INET) {
		fprintf(stderr, "mqbench: --source needs an IPv4 broker address\n");
		return -1;
	}
	if (!o->processes_worker
	    && bench_preflight(o, r->churn ? o->concurrency : r->count,
	           r->churn ? bench_churn_time_wait(o->rate / o->shards, o->duration_ns) : 0, 1,
	           r->nsources)
	        != 0)
		return -1;
	if (o->net.conn.url.tls && !(r->ctx = make_ctx(o)))
		return -1;
	if (o->cert_dir && load_cert_dir(r) != 0)
		return -1;
	r->nslots = r->churn ? o->concurrency : (unsigned)r->count;
	r->a = calloc(r->nslots, sizeof *r->a);
	if (o->tls_resume)
		r->sessions = calloc(r->count, sizeof(SSL_SESSION *));
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	r->rng = o->seed * 0x9E3779B97F4A7C15ULL + 1;
	if (r->churn && asprintf(&r->churn_topic, "%s/%s/churn", o->prefix, o->token) < 0)
		r->churn_topic = NULL;
	struct mqc_hist *h[] = { &r->tcp, &r->connack, &r->cycle, &r->tls_full, &r->tls_resumed };
	bool hists_ok = true;
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		hists_ok &= mqc_hist_init(h[i], 10) == 0;
	if (!r->a || (o->tls_resume && !r->sessions) || (r->churn && !r->churn_topic) || !hists_ok
	    || mqc_heap_reserve(&r->timers, r->nslots + 16) != 0) {
		fprintf(stderr, "mqbench: out of memory\n");
		return -1;
	}
	if (r->ep < 0) {
		perror("mqbench: epoll_create1");
		return -1;
	}
	for (unsigned i = 0; i < r->nslots; i++)
		r->a[i].fd = -1;
	return 0;
}

void fleet_add_reasons(cJSON *obj, const uint64_t *reasons)
{
	for (int i = 0; i < R_COUNT; i++)
		cJSON_AddNumberToObject(obj, fleet_reason_names[i], (double)reasons[i]);
}

void fleet_print_reasons(FILE *out, const uint64_t *reasons)
{
	for (int i = 0; i < R_COUNT; i++)
		if (reasons[i])
			fprintf(out, " %s %llu", fleet_reason_names[i], (unsigned long long)reasons[i]);
}

/* The TLS handshakes, full and resumed side by side: time and the client's CPU each. */
void fleet_print_tls(const struct fleet *r)
{
	if (!r->ctx)
		return;
	const struct {
		const char *name;
		const struct mqc_hist *h;
		uint64_t cpu;
	} kinds[] = { { "full", &r->tls_full, r->tls_full_cpu },
		{ "resumed", &r->tls_resumed, r->tls_resumed_cpu } };
	for (int i = 0; i < 2; i++) {
		char p50[24], p99[24];
		if (!kinds[i].h->count) {
			printf("tls handshakes %-7s 0%s\n", kinds[i].name,
			    i && r->o->tls_resume ? " (the broker resumed none)" : "");
			continue;
		}
		printf("tls handshakes %-7s %llu   p50 %s p99 %s   client CPU %.0fus each\n", kinds[i].name,
		    (unsigned long long)kinds[i].h->count,
		    bench_fmt_ns(mqc_hist_percentile(kinds[i].h, 50), p50, 24),
		    bench_fmt_ns(mqc_hist_percentile(kinds[i].h, 99), p99, 24),
		    (double)kinds[i].cpu / 1e3 / (double)kinds[i].h->count);
	}
}

void fleet_add_tls_json(cJSON *root, const struct fleet *r)
{
	if (!r->ctx)
		return;
	cJSON *t = cJSON_AddObjectToObject(root, "tls_handshakes");
	cJSON_AddNumberToObject(t, "full", (double)r->tls_full.count);
	cJSON_AddNumberToObject(t, "resumed", (double)r->tls_resumed.count);
	cJSON_AddNumberToObject(t, "full_client_cpu_ns", (double)r->tls_full_cpu);
	cJSON_AddNumberToObject(t, "resumed_client_cpu_ns", (double)r->tls_resumed_cpu);
}

void fleet_connack_failures_text(const struct fleet *r)
{
	bool v311 = r->o->net.conn.protocol != 5;
	for (int c = 1; c < 256; c++)
		if (r->connack_codes[c])
			printf(v311 ? " (CONNACK return code %d, %s: %llu)"
			            : " (CONNACK reason code 0x%02X, %s: %llu)",
			    c, mqc_connack_text((unsigned)c, v311), (unsigned long long)r->connack_codes[c]);
	for (int c = 1; c < 256; c++)
		if (r->connack311_codes[c])
			printf(" (a 3.1.1 CONNACK, return code %d, %s: %llu)", c,
			    mqc_connack_text((unsigned)c, true), (unsigned long long)r->connack311_codes[c]);
}

void fleet_print_failures(const struct fleet *r)
{
	if (!r->failed)
		return;
	printf("failures:");
	fleet_print_reasons(stdout, r->reasons);
	fleet_connack_failures_text(r);
	printf("\n");
}

void fleet_add_connack_refusals(cJSON *root, const struct fleet *r)
{
	cJSON *refusals = cJSON_AddObjectToObject(root, "connack_refusals");
	for (int code = 1; code < 256; code++)
		if (r->connack_codes[code]) {
			char key[8];
			snprintf(key, sizeof key, "%d", code);
			cJSON *one = cJSON_AddObjectToObject(refusals, key);
			cJSON_AddStringToObject(
			    one, "reason", mqc_connack_text((unsigned)code, r->o->net.conn.protocol != 5));
			cJSON_AddNumberToObject(one, "count", (double)r->connack_codes[code]);
		}
}

/* Closed before CONNACK, or a 3.1.1 answer to a v5 CONNECT: find out which, once, while the held
 * connections still hold what they hold (a broker at its connection limit is still at it). */
void fleet_explain(const struct fleet *r, char *why, size_t len)
{
	why[0] = '\0';
	bool v311_answer = false;
	for (int c = 1; c < 256; c++)
		v311_answer |= r->connack311_codes[c] > 0;
	char sent[160];
	char v5[80] = "";
	if (r->o->net.conn.protocol == 5)
		snprintf(
		    v5, sizeof v5, ", Maximum Packet Size %u, Topic Alias Maximum 0", (unsigned)RX_CAP);
	snprintf(sent, sizeof sent, "mqbench's: clean start, Keep Alive %u s%s",
	    (unsigned)r->o->keepalive_s, v5);
	if (r->reasons[R_CLOSED] || v311_answer)
		mqc_client_explain_connect_failure(&r->o->net.conn, r->o->net.conn.protocol,
		    v311_answer ? 0x84 : -1, "--protocol 3.1.1", sent, why, len);
	else if (r->reasons[R_TLS] && r->tls_why[0])
		snprintf(why, len, "the first TLS failure: %s", r->tls_why);
}

int fleet_finish_status(const struct fleet *r, const char *why, uint64_t scheduled)
{
	int rc = 0;
	if (fleet_interrupted) {
		fprintf(stderr, "mqbench: interrupted\n");
		rc = 1;
	} else if (r->failed) {
		fprintf(stderr, "mqbench: %llu of %llu connections failed:", (unsigned long long)r->failed,
		    (unsigned long long)scheduled);
		fleet_print_reasons(stderr, r->reasons);
		fprintf(stderr, "\n");
		if (why[0])
			fprintf(stderr, "mqbench: %s\n", why);
		rc = 1;
	}
	for (unsigned i = 0; i < r->nstorms; i++)
		if (!r->storms[i]->over) {
			fprintf(stderr,
			    "mqbench: storm %u: %u of %u connections not back by the end of the run\n", i + 1,
			    r->storms[i]->lost - r->storms[i]->back, r->storms[i]->lost);
			rc = 1;
		}
	return rc;
}

void fleet_add_probe_json(cJSON *root, const struct probe_sample *p0, const struct probe_sample *p1)
{
	cJSON *pr = cJSON_AddObjectToObject(root, "probe");
	if (p1->has_connects)
		cJSON_AddNumberToObject(pr, "connects", p1->connects - p0->connects);
	cJSON_AddNumberToObject(pr, "disconnects", p1->disconnects - p0->disconnects);
}

int fleet_begin(struct fleet *r, struct probe_sample *p0, struct broker_usage *u)
{
	if (fleet_setup(r) != 0) {
		fleet_free(r);
		return -1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	bench_probe_read(r->o->metrics_url, p0);
	*u = (struct broker_usage) { 0 };
	fleet_sample(r->o, u);
	/* The schedule starts after the reads above (a slow probe must not make the first attempts
	 * late), at one time for every process of a --processes run (CLOCK_MONOTONIC is the
	 * machine's). */
	const char *t0 = getenv("MQBENCH_T0");
	r->t0
	    = t0 && r->o->processes_worker ? strtoull(t0, NULL, 10) : mqc_now_ns() + 10 * MQC_NS_PER_MS;
	return 0;
}
