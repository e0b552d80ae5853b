/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * connect.c - the connect scenario: N connections opened on a schedule, held, then closed.
 *
 * Raw non-blocking sockets (one descriptor per connection; libmosquitto needs three, which would
 * cap a process at about 6,600 connections under a 20,000 descriptor limit) and a hand-written
 * CONNECT. Every attempt has an intended time t0 + k/rate; at most --concurrency attempts are in
 * progress, and an attempt that waits for a free place is late, which its latency shows: TCP
 * connect and CONNACK latency are measured from the intended time. With mqtts:// the TLS
 * handshake runs non-blocking through OpenSSL, with CA verification and a hostname check.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
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
#include <unistd.h>

#include <cjson/cJSON.h>
#include <mosquitto.h>

#include "mqbench.h"
#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_mqtt.h"
#include "mqc_tls.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

enum state { ST_WAITING, ST_TCP, ST_TLS, ST_CONNACK, ST_HELD, ST_FAILED, ST_CLOSED };
enum reason {
	R_REFUSED,
	R_TIMEOUT,
	R_CONNACK,
	R_EMFILE,
	R_EADDRNOTAVAIL,
	R_TLS,
	R_DROPPED,
	R_CLOSED, /* closed before any CONNACK (said after the run what a 3.1.1 CONNECT met) */
	R_OTHER,
	R_COUNT
};
static const char *const reason_names[R_COUNT] = { "refused", "timeout", "connack", "emfile",
	"eaddrnotavail", "tls", "dropped", "closed_before_connack", "other" };

struct attempt {
	int fd;
	enum state state;
	uint64_t intended;
	SSL *ssl;
	unsigned char rx[8];
	int rxlen;
};

struct storm {
	const struct bench_opts *o;
	int ep;
	struct attempt *a;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct in_addr *sources;
	unsigned nsources;
	SSL_CTX *ctx;
	unsigned in_progress, held, failed, done;
	uint64_t reasons[R_COUNT];
	uint64_t connack_codes[256];    /* refusals in CONNACKs of the protocol's own shape */
	uint64_t connack311_codes[256]; /* 3.1.1-shaped CONNACKs to a v5 CONNECT: return codes */
	struct mqc_hist tcp, connack;
	uint64_t last_done;
	unsigned char *pkt; /* the CONNECT being sent: room for the longest id and credentials */
	size_t pkt_cap;
};

static volatile sig_atomic_t interrupted;

/* A refused CONNACK's reason: MQTT 5 reason codes, or 3.1.1 return codes (a 3.1.1 broker
 * answers a v5 CONNECT with one of those: its 1 is "unacceptable protocol version"). */
static const char *connack_reason(bool v311, int code)
{
	return mqc_mqtt_connack_text((unsigned)code, v311);
}

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* A CONNECT packet: clean session, keepalive 0 (held connections stay quiet). 0 when it does
 * not fit in cap (bench_connect_check refused such options before the run). */
static size_t build_connect(const struct bench_opts *o, unsigned k, unsigned char *out, size_t cap)
{
	char id[128];
	snprintf(id, sizeof id, "%s-%s-%u", o->prefix, o->token, k);
	return mqc_mqtt_connect(
	    out, cap, o->net.conn.protocol, id, o->net.conn.username, o->net.conn.password, 0);
}

int bench_connect_check(const struct bench_opts *o, char *err, size_t errlen)
{
	const char *too_long = o->net.conn.username && strlen(o->net.conn.username) > MQC_MQTT_STR_MAX
	    ? "--username"
	    : o->net.conn.password && strlen(o->net.conn.password) > MQC_MQTT_STR_MAX ? "--password"
	    : strlen(o->prefix) > 64                                                  ? "--prefix"
	                                                                              : NULL;
	if (too_long) {
		snprintf(err, errlen, "%s: longer than MQTT allows (%u bytes)", too_long,
		    too_long[2] == 'p' && too_long[3] == 'r' ? 64u : MQC_MQTT_STR_MAX);
		return -1;
	}
	return 0;
}

static void finish(struct storm *s, struct attempt *a, enum state st, int reason)
{
	if (a->state == ST_TCP || a->state == ST_TLS || a->state == ST_CONNACK)
		s->in_progress--;
	if (st == ST_FAILED) {
		s->failed++;
		s->reasons[reason]++;
	}
	if (st == ST_FAILED || st == ST_CLOSED) {
		if (a->ssl)
			SSL_free(a->ssl);
		a->ssl = NULL;
		if (a->fd >= 0)
			close(a->fd);
		a->fd = -1;
	}
	if (st == ST_HELD)
		s->held++;
	a->state = st;
	s->done++;
	s->last_done = mqc_now_ns();
}

static void want(struct storm *s, struct attempt *a, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = a };
	if (epoll_ctl(s->ep, EPOLL_CTL_MOD, a->fd, &ev) != 0)
		finish(s, a, ST_FAILED, R_OTHER); /* never waits for an event it cannot get */
}

static void send_connect(struct storm *s, struct attempt *a)
{
	size_t len = build_connect(s->o, (unsigned)(a - s->a), s->pkt, s->pkt_cap);
	ssize_t n = !len ? -1
	    : a->ssl     ? SSL_write(a->ssl, s->pkt, (int)len)
	                 : send(a->fd, s->pkt, len, MSG_NOSIGNAL);
	if (n != (ssize_t)len || !len) { /* a fresh socket takes a small packet whole */
		finish(s, a, ST_FAILED, R_OTHER);
		return;
	}
	a->state = ST_CONNACK;
	want(s, a, EPOLLIN);
}

static void tls_step(struct storm *s, struct attempt *a)
{
	int rc = SSL_connect(a->ssl);
	if (rc == 1) {
		send_connect(s, a);
		return;
	}
	int e = SSL_get_error(a->ssl, rc);
	if (e == SSL_ERROR_WANT_READ)
		want(s, a, EPOLLIN);
	else if (e == SSL_ERROR_WANT_WRITE)
		want(s, a, EPOLLOUT);
	else
		finish(s, a, ST_FAILED, R_TLS);
}

static void start(struct storm *s, struct attempt *a, unsigned k)
{
	int fd = socket(s->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		finish(s, a, ST_FAILED, errno == EMFILE || errno == ENFILE ? R_EMFILE : R_OTHER);
		return;
	}
	a->fd = fd;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (s->nsources) {
		/* Let connect() pick the port per (source, destination): no early port exhaustion. */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
		struct sockaddr_in src = { .sin_family = AF_INET, .sin_addr = s->sources[k % s->nsources] };
		if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
			finish(s, a, ST_FAILED, errno == EADDRNOTAVAIL ? R_EADDRNOTAVAIL : R_OTHER);
			return;
		}
	}
	s->in_progress++;
	a->state = ST_TCP;
	if (connect(fd, (struct sockaddr *)&s->addr, s->addrlen) != 0 && errno != EINPROGRESS) {
		int e = errno;
		finish(s, a, ST_FAILED,
		    e == ECONNREFUSED        ? R_REFUSED
		        : e == EADDRNOTAVAIL ? R_EADDRNOTAVAIL
		                             : R_OTHER);
		return;
	}
	struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = a };
	if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		finish(s, a, ST_FAILED, R_OTHER);
}

static void on_event(struct storm *s, struct attempt *a, uint32_t events)
{
	uint64_t now = mqc_now_ns();
	switch (a->state) {
		case ST_TCP: {
			int err = 0;
			socklen_t len = sizeof err;
			getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &len);
			if (err) {
				finish(s, a, ST_FAILED, err == ECONNREFUSED ? R_REFUSED : R_OTHER);
				return;
			}
			mqc_hist_record(&s->tcp, now - a->intended);
			if (s->ctx) {
				a->ssl = SSL_new(s->ctx);
				SSL_set_fd(a->ssl, a->fd);
				mqc_tls_set_sni(a->ssl, s->o->net.conn.url.host);
				SSL_set1_host(a->ssl, s->o->net.conn.url.host);
				a->state = ST_TLS;
				tls_step(s, a);
			} else {
				send_connect(s, a);
			}
			return;
		}
		case ST_TLS:
			tls_step(s, a);
			return;
		case ST_CONNACK: {
			ssize_t n = a->ssl ? SSL_read(a->ssl, a->rx + a->rxlen, (int)sizeof a->rx - a->rxlen)
			                   : recv(a->fd, a->rx + a->rxlen, sizeof a->rx - (size_t)a->rxlen, 0);
			if (n <= 0) {
				if (a->ssl && SSL_get_error(a->ssl, (int)n) == SSL_ERROR_WANT_READ)
					return;
				if (n < 0 && !a->ssl && errno == EAGAIN)
					return;
				/* EOF or a reset with nothing received: the broker let the TCP connection in
				 * and closed it before CONNACK (mosquitto 2.0 does this at max_connections). */
				bool closed = a->rxlen == 0
				    && (n == 0 || (!a->ssl && errno == ECONNRESET)
				        || (a->ssl && SSL_get_error(a->ssl, (int)n) == SSL_ERROR_ZERO_RETURN));
				finish(s, a, ST_FAILED, closed ? R_CLOSED : R_OTHER);
				return;
			}
			a->rxlen += (int)n;
			if (a->rxlen < 4)
				return;
			if (a->rx[0] != 0x20) {
				finish(s, a, ST_FAILED, R_OTHER);
				return;
			}
			if (a->rx[3] != 0) {
				/* Two bytes long: a 3.1.1 CONNACK, whatever was asked (a v5 one has
				 * properties). */
				bool v311 = a->rx[1] == 2;
				if (v311 && s->o->net.conn.protocol == 5)
					s->connack311_codes[a->rx[3]]++;
				else
					s->connack_codes[a->rx[3]]++;
				finish(s, a, ST_FAILED, R_CONNACK);
				return;
			}
			mqc_hist_record(&s->connack, now - a->intended);
			finish(s, a, ST_HELD, 0);
			return;
		}
		case ST_HELD: {
			/* The rest of a v5 CONNACK (its properties) arrives here; only EOF or an error
			 * means the broker let go of the connection. */
			unsigned char sink[512];
			ssize_t n
			    = a->ssl ? SSL_read(a->ssl, sink, sizeof sink) : recv(a->fd, sink, sizeof sink, 0);
			bool again = a->ssl ? n <= 0 && SSL_get_error(a->ssl, (int)n) == SSL_ERROR_WANT_READ
			                    : n < 0 && errno == EAGAIN;
			if (n > 0 || again)
				return;
			(void)events;
			s->held--;
			s->done--;
			finish(s, a, ST_FAILED, R_DROPPED);
			return;
		}
		default:
			return;
	}
}

static int resolve(struct storm *s)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char port[16];
	snprintf(port, sizeof port, "%d", s->o->net.conn.url.port);
	int rc = getaddrinfo(s->o->net.conn.url.host, port, &hints, &res);
	if (rc != 0) {
		fprintf(
		    stderr, "mqbench: cannot resolve %s: %s\n", s->o->net.conn.url.host, gai_strerror(rc));
		return -1;
	}
	memcpy(&s->addr, res->ai_addr, res->ai_addrlen);
	s->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int parse_sources(struct storm *s)
{
	const char *spec = s->o->sources;
	if (!spec)
		return 0;
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
	s->nsources = ntohl(b.s_addr) - ntohl(a.s_addr) + 1;
	s->sources = calloc(s->nsources, sizeof *s->sources);
	for (unsigned i = 0; i < s->nsources; i++)
		s->sources[i].s_addr = htonl(ntohl(a.s_addr) + i);
	if (s->addr.ss_family != AF_INET) {
		fprintf(stderr, "mqbench: --source needs an IPv4 broker address\n");
		return -1;
	}
	return 0;
bad:
	fprintf(stderr,
	    "mqbench: --source: expected A.B.C.D-E.F.G.H (at most 1024 addresses), got '%s'\n", spec);
	return -1;
}

/* Refuse runs that cannot work, before they start. */
static int preflight(const struct storm *s)
{
	const struct bench_opts *o = s->o;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if ((uint64_t)o->clients + 32 > rl.rlim_cur) {
		fprintf(stderr,
		    "mqbench: %u connections need %u file descriptors; the limit here is %llu "
		    "(ulimit -n). Use fewer --clients, or several processes with distinct --prefix "
		    "and merge their --json results.\n",
		    o->clients, o->clients + 32, (unsigned long long)rl.rlim_cur);
		return -1;
	}
	unsigned lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = 32768, hi = 60999;
		fclose(f);
	}
	uint64_t ports = (uint64_t)(hi - lo + 1) * (s->nsources ? s->nsources : 1);
	unsigned long tw = 0;
	f = fopen("/proc/net/sockstat", "r");
	if (f) {
		char line[256];
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "TCP: inuse %*u orphan %*u tw %lu", &tw) == 1)
				break;
		fclose(f);
	}
	if (o->clients > ports) {
		fprintf(stderr,
		    "mqbench: %u connections to one address need more than the %llu local ports "
		    "available (%u-%u x %u source addresses); add --source addresses\n",
		    o->clients, (unsigned long long)ports, lo, hi, s->nsources ? s->nsources : 1);
		return -1;
	}
	if (o->clients + tw > ports)
		fprintf(stderr,
		    "mqbench: warning: %lu sockets in TIME_WAIT and %u new connections may exhaust "
		    "%llu local ports; wait a minute or add --source addresses\n",
		    tw, o->clients, (unsigned long long)ports);
	/* The broker's own limit: a broker started from a wrapper as root may get 1,024 files, and
	 * then every connection past it looks like a slow broker (timeouts), not a limit. */
	unsigned long long broker_files;
	unsigned long open_now;
	if (o->broker_pid && bench_proc_files(o->broker_pid, &broker_files, &open_now)
	    && o->clients + open_now > broker_files)
		fprintf(stderr,
		    "mqbench: warning: the broker (pid %d) may open %llu files and has %lu open: %u more "
		    "connections pass its limit, and those past it will time out or be closed (raise "
		    "the broker's LimitNOFILE / ulimit -n)\n",
		    (int)o->broker_pid, broker_files, open_now, o->clients);
	return 0;
}

static SSL_CTX *make_ctx(const struct bench_opts *o)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx || SSL_CTX_load_verify_locations(ctx, o->net.conn.cafile, NULL) != 1
	    || (o->net.conn.cert
	        && (SSL_CTX_use_certificate_chain_file(ctx, o->net.conn.cert) != 1
	            || SSL_CTX_use_PrivateKey_file(ctx, o->net.conn.key, SSL_FILETYPE_PEM) != 1))) {
		char buf[256];
		ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
		fprintf(stderr, "mqbench: TLS setup failed: %s (check --cafile, --cert, --key)\n", buf);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL); /* plus SSL_set1_host per connection */
	return ctx;
}

struct broker_usage {
	bool ok;
	double cpu0, rss0, cpu_last, t_last, peak_pct, rss_max;
	double t0;
};

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

static void sample(const struct bench_opts *o, struct broker_usage *u)
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

/* Everything a storm holds, whatever of it was made. */
static void storm_free(struct storm *s)
{
	free(s->a);
	free(s->pkt);
	free(s->sources);
	SSL_CTX_free(s->ctx);
	mqc_hist_free(&s->tcp);
	mqc_hist_free(&s->connack);
	if (s->ep >= 0)
		close(s->ep);
}

int bench_run_connect(const struct bench_opts *o)
{
	struct storm s = { .o = o, .ep = -1 };
	if (resolve(&s) != 0 || parse_sources(&s) != 0 || preflight(&s) != 0
	    || (o->net.conn.url.tls && !(s.ctx = make_ctx(o)))) {
		storm_free(&s);
		return 1;
	}
	s.a = calloc(o->clients, sizeof *s.a);
	s.pkt_cap
	    = mqc_mqtt_connect_size("", o->net.conn.username, o->net.conn.password) + 128 /* the id */;
	s.pkt = malloc(s.pkt_cap);
	s.ep = epoll_create1(EPOLL_CLOEXEC);
	if (!s.a || !s.pkt || mqc_hist_init(&s.tcp, 10) || mqc_hist_init(&s.connack, 10)) {
		fprintf(stderr, "mqbench: out of memory\n");
		storm_free(&s);
		return 1;
	}
	if (s.ep < 0) {
		perror("mqbench: epoll_create1");
		storm_free(&s);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	struct probe_sample p0, p1;
	bench_probe_read(o->metrics_url, &p0);
	struct broker_usage usage = { 0 };
	sample(o, &usage);

	double interval = 1e9 / o->connrate;
	uint64_t t0 = mqc_now_ns() + 10 * MQC_NS_PER_MS, next_sample = 0;
	uint64_t next_tick = t0 + MQC_NS_PER_S;
	unsigned last_held = 0;
	unsigned next = 0;
	for (unsigned k = 0; k < o->clients; k++) {
		s.a[k].fd = -1;
		s.a[k].intended = t0 + (uint64_t)((double)k * interval);
	}
	while (!interrupted && s.done < o->clients) {
		uint64_t now = mqc_now_ns();
		while (next < o->clients && s.a[next].intended <= now && s.in_progress < o->concurrency)
			start(&s, &s.a[next], next), next++;
		/* Attempts that have waited too long since their intended time fail as timeouts. */
		for (unsigned k = next > 2 * o->concurrency ? next - 2 * o->concurrency : 0; k < next;
		     k++) {
			enum state st = s.a[k].state;
			if ((st == ST_TCP || st == ST_TLS || st == ST_CONNACK)
			    && now - s.a[k].intended > o->connect_timeout_ns)
				finish(&s, &s.a[k], ST_FAILED, R_TIMEOUT);
		}
		if (now >= next_sample) {
			sample(o, &usage);
			next_sample = now + 100 * MQC_NS_PER_MS;
		}
		if (now >= next_tick) { /* a line a second on stderr: the run is alive, and how */
			char p99[24];
			fprintf(stderr,
			    "%6.1fs  last 1s: connected %u/s | since start: connected %u of %u, failed %u, "
			    "in progress %u, CONNACK p99 %s\n",
			    (double)(now - t0) / 1e9, s.held - last_held, s.held, o->clients, s.failed,
			    s.in_progress, bench_fmt_ns(mqc_hist_percentile(&s.connack, 99), p99, sizeof p99));
			last_held = s.held;
			next_tick += MQC_NS_PER_S;
		}
		uint64_t wake = now + 10 * MQC_NS_PER_MS;
		if (next < o->clients && s.in_progress < o->concurrency && s.a[next].intended < wake)
			wake = s.a[next].intended;
		struct epoll_event events[256];
		struct timespec timeout = mqc_ns_to_ts(wake > now ? wake - now : 0);
		int n = epoll_pwait2(s.ep, events, 256, &timeout, NULL);
		for (int i = 0; i < n; i++)
			on_event(&s, events[i].data.ptr, events[i].events);
	}
	uint64_t opened = mqc_now_ns();
	/* Hold: the broker carries every connection; sample its CPU and memory meanwhile. */
	uint64_t hold_end = opened + o->hold_ns;
	while (!interrupted && mqc_now_ns() < hold_end) {
		sample(o, &usage);
		struct epoll_event events[256];
		struct timespec timeout = { .tv_nsec = 100000000 };
		int n = epoll_pwait2(s.ep, events, 256, &timeout, NULL);
		for (int i = 0; i < n; i++)
			on_event(&s, events[i].data.ptr, events[i].events);
	}
	sample(o, &usage);
	unsigned held = s.held;
	/* Closed before CONNACK, or a 3.1.1 answer to a v5 CONNECT: find out which, once, while
	 * the held connections still hold what they hold (a broker at its connection limit is
	 * still at it). */
	char why[768] = "";
	bool v311_answer = false;
	for (int c = 1; c < 256; c++)
		v311_answer |= s.connack311_codes[c] > 0;
	if (s.reasons[R_CLOSED] || v311_answer)
		mqc_client_explain_connect_failure(&o->net.conn, o->net.conn.protocol,
		    v311_answer ? 0x84 : -1, "--protocol 3.1.1", why, sizeof why);
	static const unsigned char disconnect[2] = { 0xe0, 0x00 };
	for (unsigned k = 0; k < o->clients; k++) {
		struct attempt *a = &s.a[k];
		if (a->state == ST_HELD) {
			if (a->ssl)
				SSL_write(a->ssl, disconnect, 2);
			else
				send(a->fd, disconnect, 2, MSG_NOSIGNAL);
			a->state = ST_CLOSED;
			if (a->ssl)
				SSL_free(a->ssl);
			close(a->fd);
		} else if (a->fd >= 0) {
			if (a->ssl)
				SSL_free(a->ssl);
			close(a->fd);
		}
	}
	nanosleep(&(struct timespec) { .tv_nsec = 200000000 }, NULL);
	bench_probe_read(o->metrics_url, &p1);

	double secs = (double)(s.last_done > t0 ? s.last_done - t0 : 1) / 1e9;
	double cpu_mean = usage.ok && usage.t_last > usage.t0
	    ? (usage.cpu_last - usage.cpu0) / (usage.t_last - usage.t0) * 100
	    : -1;
	double per_conn = usage.ok && held ? (usage.rss_max - usage.rss0) / held : -1;
	if (o->json) {
		cJSON *root = bench_result_new(o);
		cJSON_AddNumberToObject(root, "sources", s.nsources ? s.nsources : 1);
		cJSON *c = cJSON_AddObjectToObject(root, "counts");
		cJSON_AddNumberToObject(c, "scheduled", o->clients);
		cJSON_AddNumberToObject(c, "connected", s.held + (unsigned)s.reasons[R_DROPPED]);
		cJSON_AddNumberToObject(c, "failed", s.failed);
		for (int r = 0; r < R_COUNT; r++)
			cJSON_AddNumberToObject(c, reason_names[r], (double)s.reasons[r]);
		cJSON *refusals = cJSON_AddObjectToObject(root, "connack_refusals");
		for (int code = 1; code < 256; code++)
			if (s.connack_codes[code]) {
				char key[8];
				snprintf(key, sizeof key, "%d", code);
				cJSON *one = cJSON_AddObjectToObject(refusals, key);
				cJSON_AddStringToObject(
				    one, "reason", connack_reason(o->net.conn.protocol != 5, code));
				cJSON_AddNumberToObject(one, "count", (double)s.connack_codes[code]);
			}
		cJSON_AddNumberToObject(root, "elapsed_ns", secs * 1e9);
		cJSON_AddNumberToObject(root, "connects_per_second", (double)s.held / secs);
		cJSON *l = cJSON_AddObjectToObject(root, "latency");
		cJSON_AddItemToObject(l, "tcp_connect", bench_latency_json(&s.tcp));
		cJSON_AddItemToObject(l, "connack", bench_latency_json(&s.connack));
		cJSON *u = cJSON_AddObjectToObject(root, "broker_usage");
		cJSON_AddNumberToObject(u, "cpu_mean_pct", cpu_mean);
		cJSON_AddNumberToObject(u, "cpu_peak_pct", usage.peak_pct);
		cJSON_AddNumberToObject(u, "rss_max_bytes", usage.ok ? usage.rss_max : -1);
		cJSON_AddNumberToObject(u, "rss_before_bytes", usage.ok ? usage.rss0 : -1);
		cJSON_AddNumberToObject(u, "rss_growth_per_held_connection", per_conn);
		if (p0.ok && p1.ok) {
			cJSON *pr = cJSON_AddObjectToObject(root, "probe");
			if (p1.has_connects)
				cJSON_AddNumberToObject(pr, "connects", p1.connects - p0.connects);
			cJSON_AddNumberToObject(pr, "disconnects", p1.disconnects - p0.disconnects);
		}
		bench_result_print(root);
	} else {
		printf("connect %u clients at %.0f/s (concurrency %u) against %s\n", o->clients,
		    o->connrate, o->concurrency, o->net.broker);
		printf("connected %u of %u in %.3fs (%.0f/s)   failed %u   held %u for %.1fs\n",
		    s.held + (unsigned)s.reasons[R_DROPPED], o->clients, secs, (double)s.held / secs,
		    s.failed, held, (double)o->hold_ns / 1e9);
		bench_print_latency(stdout, "tcp connect (from the scheduled time):", &s.tcp);
		bench_print_latency(stdout, "connack     (from the scheduled time):", &s.connack);
		if (s.failed) {
			printf("failures:");
			for (int r = 0; r < R_COUNT; r++)
				if (s.reasons[r])
					printf(" %s %llu", reason_names[r], (unsigned long long)s.reasons[r]);
			bool v311 = o->net.conn.protocol != 5;
			for (int c = 1; c < 256; c++)
				if (s.connack_codes[c])
					printf(v311 ? " (CONNACK return code %d, %s: %llu)"
					            : " (CONNACK reason code 0x%02X, %s: %llu)",
					    c, connack_reason(v311, c), (unsigned long long)s.connack_codes[c]);
			for (int c = 1; c < 256; c++)
				if (s.connack311_codes[c])
					printf(" (a 3.1.1 CONNACK, return code %d, %s: %llu)", c,
					    connack_reason(true, c), (unsigned long long)s.connack311_codes[c]);
			printf("\n");
		}
		if (usage.ok)
			/* Growth over a baseline taken just before the run: a broker that held connections
			 * before reuses memory it freed, so this depends on its history. */
			printf("broker: cpu mean %.0f%% peak %.0f%% of one core, VmRSS max %.1f MB, growth "
			       "%+.1f MB over %.1f MB just before the run = %.0f B per held connection\n",
			    cpu_mean, usage.peak_pct, usage.rss_max / 1e6, (usage.rss_max - usage.rss0) / 1e6,
			    usage.rss0 / 1e6, per_conn);
		if (p0.ok && p1.ok && p1.has_connects)
			printf("broker (probe): connects +%.0f   disconnects +%.0f\n",
			    p1.connects - p0.connects, p1.disconnects - p0.disconnects);
		else if (p0.ok && p1.ok)
			printf("broker (probe): connects n/a (the probe counts them only with observe_auth)"
			       "   disconnects +%.0f\n",
			    p1.disconnects - p0.disconnects);
		else if (o->metrics_url)
			printf("broker (probe): n/a (%s could not be read)\n", o->metrics_url);
	}
	int rc = 0;
	if (interrupted) {
		fprintf(stderr, "mqbench: interrupted\n");
		rc = 1;
	} else if (s.failed) {
		fprintf(stderr, "mqbench: %u of %u connections failed:", s.failed, o->clients);
		for (int r = 0; r < R_COUNT; r++)
			if (s.reasons[r])
				fprintf(stderr, " %s %llu", reason_names[r], (unsigned long long)s.reasons[r]);
		fprintf(stderr, "\n");
		if (why[0])
			fprintf(stderr, "mqbench: %s\n", why);
		rc = 1;
	}
	storm_free(&s);
	return rc;
}
