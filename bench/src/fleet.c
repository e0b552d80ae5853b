/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet.c - the engine under what a fleet does to a broker's connections (fleet.h says who uses
 * it and how): the connect storm (connect.c) and churn (churn.c) are scenarios it calls through
 * their ops; it knows neither.
 *
 * Raw non-blocking sockets (one descriptor per connection; libmosquitto needs three, which would
 * cap a process at about 6,600 connections under a 20,000 descriptor limit) and the project's
 * codec (mqc_codec.h). Every attempt has an intended time t0 + k/rate; at most --concurrency
 * scheduled attempts are in progress, and an attempt that waits for a free place is late, which
 * its latency shows: TCP connect and CONNACK latency are measured from the intended time. A
 * reconnect is measured from the moment its connection was lost. With mqtts:// the TLS handshake
 * runs non-blocking (fleet_tls.c).
 *
 * Timers (attempt deadlines, reconnect back-off, keep-alive) sit in one min-heap keyed by their
 * due time; an entry whose attempt has moved on since is stale and skipped when it comes up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_heap.h"
#include "mqc_net.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

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
	return st == ST_TCP || st == ST_TLS || st == ST_UPGRADE || st == ST_CONNACK || st == ST_AWAIT;
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
	a->state = r->plan.reuse_slots ? ST_WAITING : ST_FAILED;
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
		st->reading = fleet_quiet_thread(&st->reader, storm_probe_reader, st);
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
	if (r->naddr > 1)
		a->node = (a->node + 1) % r->naddr; /* its broker went away: the next one */
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

int fleet_send_out(struct fleet *r, struct attempt *a, const struct mqc_buf *out)
{
	size_t len = mqc_buf_live(out);
	if (a->ws)
		return fleet_ws_send(r, a, out->data + out->off, len);
	/* a connection that sends little takes a small packet whole */
	return fleet_send(a, out->data + out->off, len) == (ssize_t)len ? 0 : -1;
}

static void send_connect(struct fleet *r, struct attempt *a)
{
	if (fleet_build_connect(r->o, a->k, &r->out) != 0 || fleet_send_out(r, a, &r->out) != 0) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	a->state = ST_CONNACK;
	want(r, a, EPOLLIN);
}

/* The transport is up: over WebSockets the upgrade goes first, else CONNECT. */
static void transport_up(struct fleet *r, struct attempt *a)
{
	if (!r->o->net.conn.url.ws) {
		send_connect(r, a);
		return;
	}
	if (fleet_ws_begin(r, a) != 0) {
		fleet_failed(r, a, R_OTHER);
		return;
	}
	a->state = ST_UPGRADE;
	want(r, a, EPOLLIN);
}

/* The handshake's next step, and what follows once it is done. */
static void tls_drive(struct fleet *r, struct attempt *a)
{
	switch (fleet_tls_step(r, a)) {
		case FLEET_TLS_DONE:
			transport_up(r, a);
			return;
		case FLEET_TLS_WANT_READ:
			want(r, a, EPOLLIN);
			return;
		case FLEET_TLS_WANT_WRITE:
			want(r, a, EPOLLOUT);
			return;
		case FLEET_TLS_FAILED:
			fleet_failed(r, a, R_TLS);
			return;
	}
}

/* An attempt's connection, started: TCP to the broker's address (from its --source address),
 * non-blocking. The descriptor, or -errno. */
static int dial_tcp(struct fleet *r, struct attempt *a)
{
	const struct sockaddr_storage *to = &r->addr[a->node % r->naddr];
	int fd = socket(to->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	/* A held connection whose link went dark fails within two keepalives (its PINGREQs are
	 * never acknowledged), not after tcp_retries2's ~15 minutes. */
	mqc_tcp_user_timeout(fd, 2000u * r->o->keepalive_s);
	if (r->nsources) {
		/* Let connect() pick the port per (source, destination): no early port exhaustion. */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
		struct sockaddr_in src
		    = { .sin_family = AF_INET, .sin_addr = r->sources[a->k % r->nsources] };
		if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
			int e = errno;
			close(fd);
			return -e;
		}
	}
	if (connect(fd, (const struct sockaddr *)to, r->addrlen[a->node % r->naddr]) != 0
	    && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Start an attempt for client k now; its latency counts from a->intended. */
void fleet_start(struct fleet *r, struct attempt *a)
{
	uint64_t now = mqc_now_ns();
	if (!a->lost_at)
		a->node = r->naddr ? (unsigned)(a->k % r->naddr) : 0;
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
	int fd = r->dial ? r->dial(r, a) : dial_tcp(r, a);
	if (fd < 0) {
		int e = -fd;
		fleet_failed(r, a,
		    e == EMFILE || e == ENFILE ? R_EMFILE
		        : e == ECONNREFUSED    ? R_REFUSED
		        : e == EADDRNOTAVAIL   ? R_EADDRNOTAVAIL
		                               : R_OTHER);
		return;
	}
	a->fd = fd;
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = a };
	if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		fleet_failed(r, a, R_OTHER);
}

/* Read what has arrived into a->rx. 1: a whole packet is there (*pk); 0: not yet; -1: EOF, an
 * error, or a malformed or too long packet (*closed: before any byte came, the broker closed a
 * connection it had let in). */
static int read_packet(struct fleet *r, struct attempt *a, struct mqc_packet *pk, bool *closed)
{
	*closed = false;
	for (;;) {
		mqc_malformed why = NULL;
		enum mqc_frame_result fr = mqc_frame(a->rx, a->rxlen, RX_CAP, pk, &why);
		if (fr == MQC_FRAME_OK)
			return 1;
		if (fr == MQC_FRAME_BAD || a->rxlen == RX_CAP)
			return -1; /* longer than anything we announced we take */
		if (a->ws) {
			ssize_t got = fleet_ws_read(r, a, closed);
			if (got <= 0)
				return (int)got;
			continue;
		}
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

void fleet_await(struct fleet *r, struct attempt *a)
{
	r->in_progress++; /* the cycle goes on: it counts against --concurrency until answered */
	a->state = ST_AWAIT;
}

void fleet_answered(struct fleet *r, struct attempt *a, const struct mqc_packet *pk)
{
	fleet_consume(a, pk);
	r->in_progress--;
	a->state = ST_HELD;
}

void fleet_leave(struct fleet *r, struct attempt *a, uint64_t now)
{
	r->out.off = r->out.len = 0;
	if (mqc_enc_disconnect(&r->out, r->o->net.conn.protocol, 0) == MQC_ENC_OK)
		fleet_send_out(r, a, &r->out);
	if (a->ssl)
		SSL_shutdown(a->ssl); /* close_notify, as a device that leaves cleanly sends */
	/* Read what is left (session tickets, properties) so that close sends FIN, not RST. */
	unsigned char sink[256];
	while ((a->ssl ? SSL_read(a->ssl, sink, sizeof sink) : recv(a->fd, sink, sizeof sink, 0)) > 0)
		;
	fleet_close(a);
	mqc_hist_record(&r->cycle, now - a->intended);
	r->cycles++;
	a->state = r->plan.reuse_slots ? ST_WAITING : ST_CLOSED;
}

/* A held connection's next PINGREQ, at three quarters of its keep-alive. */
void fleet_hold(struct fleet *r, struct attempt *a, uint64_t now)
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
	fleet_tls_keep_session(r, a);
	connected(r, a, now);
	r->ops->connected(r, a, now);
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
				if (fleet_tls_begin(r, a) != 0) {
					fleet_failed(r, a, R_TLS);
					return;
				}
				a->state = ST_TLS;
				tls_drive(r, a);
			} else {
				transport_up(r, a);
			}
			return;
		}
		case ST_TLS:
			tls_drive(r, a);
			return;
		case ST_UPGRADE: {
			int rc = fleet_ws_answer(r, a);
			if (rc < 0)
				fleet_failed(r, a, R_WS);
			else if (rc > 0)
				send_connect(r, a);
			return;
		}
		case ST_CONNACK:
		case ST_AWAIT: {
			struct mqc_packet pk;
			int rc = read_packet(r, a, &pk, &closed);
			if (rc < 0)
				fleet_failed(r, a, closed && a->state == ST_CONNACK ? R_CLOSED : R_OTHER);
			else if (rc > 0 && a->state == ST_CONNACK)
				on_connack(r, a, &pk, now);
			else if (rc > 0)
				r->ops->packet(r, a, &pk, now);
			return;
		}
		case ST_HELD: {
			/* No subscriptions: what comes is PINGRESP (read and dropped), or a DISCONNECT
			 * before the broker lets go; only EOF or an error means it has. */
			struct mqc_packet pk;
			int rc;
			while ((rc = read_packet(r, a, &pk, &closed)) > 0)
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
			if (mqc_enc_pingreq(&r->out) != MQC_ENC_OK || fleet_send_out(r, a, &r->out) != 0)
				lost(r, a, now);
			else
				fleet_hold(r, a, now);
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

void fleet_free(struct fleet *r)
{
	for (unsigned i = 0; r->a && i < r->nslots; i++) {
		fleet_close(&r->a[i]);
		fleet_ws_free(&r->a[i]);
	}
	free(r->a);
	mqc_buf_free(&r->out);
	mqc_buf_free(&r->ws_out);
	free(r->sources);
	for (uint64_t i = 0; r->sessions && i < r->count; i++)
		SSL_SESSION_free(r->sessions[i]);
	free(r->sessions);
	for (unsigned i = 0; i < r->ncerts; i++)
		free(r->cert_files[i]);
	free(r->cert_files);
	SSL_CTX_free(r->ctx);
	mqc_heap_free(&r->timers);
	fleet_sampler_stop(
	    &r->sampler); /* running only after an early return: nobody reads the usage */
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
	r->rate = r->plan.rate / o->shards;
	if (r->count == 0) {
		fprintf(stderr, "mqbench: shard %u/%u has no clients (--clients %u)\n", o->shard, o->shards,
		    o->clients);
		return -1;
	}
	if (fleet_resolve(r) != 0)
		return -1;
	if (o->sources && bench_parse_sources(o->sources, &r->sources, &r->nsources) != 0)
		return -1;
	for (unsigned i = 0; i < r->naddr; i++)
		if (r->nsources && r->addr[i].ss_family != AF_INET) {
			fprintf(stderr, "mqbench: --source needs IPv4 broker addresses\n");
			return -1;
		}
	if (!o->processes_worker
	    && bench_preflight(
	           o, r->plan.slots ? r->plan.slots : r->count, r->plan.time_wait, 1, r->nsources)
	        != 0)
		return -1;
	if (o->net.conn.url.tls && !(r->ctx = fleet_tls_ctx(o)))
		return -1;
	if (o->cert_dir && fleet_tls_load_cert_dir(r) != 0)
		return -1;
	r->nslots = r->plan.slots ? r->plan.slots : (unsigned)r->count;
	r->a = calloc(r->nslots, sizeof *r->a);
	if (o->tls_resume)
		r->sessions = calloc(r->count, sizeof(SSL_SESSION *));
	r->ep = epoll_create1(EPOLL_CLOEXEC);
	r->rng = o->seed * 0x9E3779B97F4A7C15ULL + 1;
	struct mqc_hist *h[] = { &r->tcp, &r->connack, &r->cycle, &r->tls_full, &r->tls_resumed };
	bool hists_ok = true;
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
		hists_ok &= mqc_hist_init(h[i], 10) == 0;
	if (!r->a || (o->tls_resume && !r->sessions) || !hists_ok
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

/* Grow this process's descriptor table to the run's size before the clock starts. The kernel
 * grows it by doubling as descriptors are opened, and in a process of more than one thread (the
 * sampler's, the TLS handshakes') each growth waits for an RCU grace period: measured here, a
 * 5,000-connection run stalled for tens of milliseconds several times, its CONNACK p99 went from
 * under 1 ms to 15-30 ms, and the connects that caught up after a stall overflowed the broker's
 * listen backlog (SYNs retried after 1 s). A table grown once, while single-threaded, stays. */
static void reserve_descriptors(unsigned long n)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && n >= rl.rlim_cur)
		n = (unsigned long)rl.rlim_cur - 1;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	int high = n > (unsigned long)fd ? dup3(fd, (int)n, O_CLOEXEC) : -1;
	if (high >= 0)
		close(high);
	close(fd);
}

int fleet_begin(struct fleet *r, struct probe_sample *p0, struct broker_usage *u)
{
	if (fleet_setup(r) != 0) {
		fleet_free(r);
		return -1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	reserve_descriptors(r->nslots + 64UL); /* the slots' sockets, epoll, probe reads, stdio */
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
