/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * http.c - GET /metrics on the probe's own thread (libmicrohttpd).
 *
 * The thread starts with every signal blocked (the broker's handlers must run on the broker
 * thread), reads only atomics and /proc, and never calls a mosquitto_* function. The listening
 * socket is made here, so "address in use" is reported precisely at start-up.
 *
 * The server lives in the broker's process and must never take its file descriptors: at most
 * CONNECTION_LIMIT connections at once (more wait in the kernel's listen queue, which costs the
 * broker nothing), and each gets CONNECTION_DEADLINE_S in all, however slowly it trickles bytes
 * (libmicrohttpd's own timeout is per idle period; mqc_mhd.h keeps the deadline).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mqc_mhd.h"
#include "probe.h"

enum { CONNECTION_LIMIT = 16, CONNECTION_IDLE_S = 2, CONNECTION_DEADLINE_S = 5 };

/* Repeated failures from one address: 5 at once, then one a second; past that the address gets
 * 429 without its password being checked. And bcrypt (about 90 ms of CPU a check at cost 10, on
 * the broker's machine) runs for passwords not seen to succeed before at most BCRYPT_BURST times
 * at once and BCRYPT_PER_S a second after that, whoever asks: an attacker with many addresses
 * gets at most a fifth of a core (a scraper's success is cached and needs none). */
enum {
	LIMIT_SLOTS = 64,
	LIMIT_BURST = 5,
	BCRYPT_BURST = 10,
	BCRYPT_PER_S = 2,
	CACHE_SLOTS = 16,
};
#define LIMIT_REFILL_NS 1000000000LL

struct bucket {
	double tokens;
	int64_t at_ns;
};

struct limit_slot {
	unsigned char addr[16];
	bool used;
	struct bucket b;
};

/* One libmicrohttpd daemon and the web config it was started with (immutable while it runs). */
struct server {
	struct MHD_Daemon *daemon;
	struct mqc_mhd_deadline *deadline;
	struct probe_web *web; /* NULL: plain HTTP, nobody asked for */
	struct probe_http *h;
};

struct probe_http {
	const struct probe_metrics *metrics;
	struct probe_web_stats *stats;
	bool observe_auth;
	bool keep_auth;
	struct server *current;
	/* re-reading the web config */
	pthread_t watcher;
	bool watching;
	pthread_mutex_t lock; /* stopping, and everything below */
	pthread_cond_t wake;
	bool stopping;
	struct probe_web_stamp failed; /* files whose read failed: not read again until they change */
	bool has_failed;
	/* auth: recent successes (SHA-256 of user, password and hash), failures by address */
	unsigned char cache[CACHE_SLOTS][32];
	unsigned cache_used, cache_next;
	struct limit_slot limits[LIMIT_SLOTS];
	struct bucket bcrypt;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Take a token if there is one: capacity burst, one more every refill_ns. */
static bool take(struct bucket *b, double burst, int64_t refill_ns, int64_t now)
{
	if (b->at_ns == 0)
		b->tokens = burst;
	else
		b->tokens += (double)(now - b->at_ns) / (double)refill_ns;
	if (b->tokens > burst)
		b->tokens = burst;
	b->at_ns = now;
	if (b->tokens < 1)
		return false;
	b->tokens -= 1;
	return true;
}

static bool has_token(const struct bucket *b, double burst, int64_t refill_ns, int64_t now)
{
	(void)burst;
	return b->at_ns == 0 || b->tokens + (double)(now - b->at_ns) / (double)refill_ns >= 1;
}

/* The client's address as 16 bytes (IPv4 mapped into IPv6). */
static void client_addr(struct MHD_Connection *c, unsigned char out[16])
{
	memset(out, 0, 16);
	const union MHD_ConnectionInfo *ci
	    = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!ci || !ci->client_addr)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
	}
}

/* The address's slot, or the least recently used one taken over (h->lock held). */
static struct limit_slot *limit_slot(struct probe_http *h, const unsigned char addr[16])
{
	struct limit_slot *oldest = &h->limits[0];
	for (size_t i = 0; i < LIMIT_SLOTS; i++) {
		struct limit_slot *s = &h->limits[i];
		if (s->used && memcmp(s->addr, addr, 16) == 0)
			return s;
		if (!s->used || (oldest->used && s->b.at_ns < oldest->b.at_ns))
			oldest = s;
	}
	*oldest = (struct limit_slot) { .used = true };
	memcpy(oldest->addr, addr, 16);
	return oldest;
}

static void count(probe_counter *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static enum MHD_Result reply(
    struct MHD_Connection *c, unsigned status, const char *text, const char *allow)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
	    strlen(text), (void *)(uintptr_t)text, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	if (status == MHD_HTTP_TOO_MANY_REQUESTS)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	enum MHD_Result rc = status == MHD_HTTP_UNAUTHORIZED
	    ? MHD_queue_basic_auth_fail_response(c, "mqtt_probe", r)
	    : MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

/* The client's certificate, as client_auth_type asks: true when it may go on. */
static bool client_cert_ok(const struct probe_web *w, struct MHD_Connection *c)
{
	if (w->client_cert == PROBE_WEB_NO_CLIENT_CERT)
		return true;
	const union MHD_ConnectionInfo *ci
	    = MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
	if (!ci || !ci->tls_session)
		return false;
	unsigned status = 0;
	int rc = gnutls_certificate_verify_peers2(ci->tls_session, &status);
	if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND)
		return w->client_cert == PROBE_WEB_VERIFY_CLIENT_CERT_IF_GIVEN;
	return rc == GNUTLS_E_SUCCESS && status == 0;
}

static void password_tag(
    const char *user, const char *password, const char *hash, unsigned char tag[32])
{
	size_t lu = strlen(user), lp = strlen(password), lh = strlen(hash);
	char *buf = malloc(lu + lp + lh + 3);
	memset(tag, 0, 32);
	if (!buf)
		return;
	memcpy(buf, user, lu + 1);
	memcpy(buf + lu + 1, password, lp + 1);
	memcpy(buf + lu + lp + 2, hash, lh + 1);
	gnutls_hash_fast(GNUTLS_DIG_SHA256, buf, lu + lp + lh + 3, tag);
	explicit_bzero(buf, lu + lp + lh + 3);
	free(buf);
}

static bool cached(struct probe_http *h, const unsigned char tag[32])
{
	bool hit = false;
	for (unsigned i = 0; i < h->cache_used; i++) {
		unsigned char diff = 0;
		for (size_t j = 0; j < 32; j++)
			diff |= (unsigned char)(h->cache[i][j] ^ tag[j]);
		hit |= diff == 0;
	}
	return hit;
}

/* Basic auth against the web config's users. Returns 0 (go on), or the status to answer. */
static unsigned check_basic_auth(
    struct probe_http *h, const struct probe_web *w, struct MHD_Connection *c)
{
	unsigned char addr[16];
	client_addr(c, addr);
	int64_t now = now_ns();
	pthread_mutex_lock(&h->lock);
	bool limited = !has_token(&limit_slot(h, addr)->b, LIMIT_BURST, LIMIT_REFILL_NS, now);
	pthread_mutex_unlock(&h->lock);
	if (limited) {
		count(&h->stats->rate_limited);
		return MHD_HTTP_TOO_MANY_REQUESTS;
	}
	char *password = NULL;
	char *user = MHD_basic_auth_get_username_password(c, &password);
	if (!user || !password) {
		MHD_free(user);
		MHD_free(password);
		count(&h->stats->auth_failures[PROBE_AUTH_NO_CREDENTIALS]);
		return MHD_HTTP_UNAUTHORIZED;
	}
	const char *hash = probe_web__user_hash(w, user);
	unsigned char tag[32];
	password_tag(user, password, hash ? hash : "", tag);
	pthread_mutex_lock(&h->lock);
	bool ok = hash && cached(h, tag);
	bool may_check = ok || take(&h->bcrypt, BCRYPT_BURST, LIMIT_REFILL_NS / BCRYPT_PER_S, now);
	pthread_mutex_unlock(&h->lock);
	unsigned status = 0;
	if (!may_check) {
		count(&h->stats->rate_limited);
		status = MHD_HTTP_TOO_MANY_REQUESTS;
	} else if (!ok) {
		ok = probe_web__check_password(w, user, password, NULL);
		pthread_mutex_lock(&h->lock);
		if (ok) {
			memcpy(h->cache[h->cache_next], tag, sizeof tag);
			h->cache_next = (h->cache_next + 1) % CACHE_SLOTS;
			if (h->cache_used < CACHE_SLOTS)
				h->cache_used++;
		} else {
			take(&limit_slot(h, addr)->b, LIMIT_BURST, LIMIT_REFILL_NS, now_ns());
		}
		pthread_mutex_unlock(&h->lock);
		if (!ok) {
			count(&h->stats->auth_failures[PROBE_AUTH_WRONG_CREDENTIALS]);
			status = MHD_HTTP_UNAUTHORIZED;
		}
	}
	explicit_bzero(password, strlen(password));
	MHD_free(user);
	MHD_free(password);
	return status;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *upload_data, size_t *upload_size,
    void **state)
{
	(void)version;
	(void)upload_data;
	struct server *srv = cls;
	struct probe_http *h = srv->h;
	const struct probe_web *w = srv->web;
	if (w && !client_cert_ok(w, c)) {
		count(&h->stats->auth_failures[PROBE_AUTH_CLIENT_CERT]);
		return reply(c, MHD_HTTP_FORBIDDEN,
		    "forbidden: a client certificate signed by the "
		    "configured CA is required\n",
		    NULL);
	}
	if (w && w->nusers) {
		/* The same answer whatever was wrong: no credentials, the user, or the password. */
		unsigned status = check_basic_auth(h, w, c);
		if (status == MHD_HTTP_UNAUTHORIZED)
			return reply(c, status, "unauthorized\n", NULL);
		if (status)
			return reply(c, status, "too many failed logins: try again later\n", NULL);
	}
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, "not found: the probe serves /metrics\n", NULL);
	bool head = strcmp(method, "HEAD") == 0;
	if (strcmp(method, "GET") != 0 && !head)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use GET\n", "GET, HEAD");
	if (*upload_size) { /* a GET with a body: ignore the body */
		*upload_size = 0;
		return MHD_YES;
	}
	(void)state;

	struct probe_process proc;
	probe_process__read(&proc);
	struct probe_buf buf = { 0 };
	probe_metrics__render_prometheus(h->metrics, &proc, h->observe_auth, &buf);
	if (buf.failed) {
		probe_buf__free(&buf);
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	}
	struct MHD_Response *r
	    = MHD_create_response_from_buffer(buf.len, buf.data, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		probe_buf__free(&buf);
		return MHD_NO;
	}
	MHD_add_response_header(
	    r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

static int listen_socket(const char *host, int port, char *err, size_t errlen)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int family;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		family = AF_INET;
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		len = sizeof *in4;
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		family = AF_INET6;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		len = sizeof *in6;
	} else {
		snprintf(err, errlen, "http_listen: '%s' is not a numeric address", host);
		return -1;
	}
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
	    || bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
		int e = errno;
		char holder[192] = "";
		if (e == EADDRINUSE)
			probe_port__holder(port, holder, sizeof holder);
		snprintf(err, errlen, "http_listen: cannot listen on %s:%d: %s%s%s", host, port,
		    strerror(e), holder[0] ? ": " : "", holder);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* A daemon on the listening socket fd with web's settings; NULL when it cannot start (fd is
 * still the caller's). Every signal is blocked while it starts: its thread inherits the mask. */
static struct server *server_start(struct probe_http *h, int fd, struct probe_web *web)
{
	struct server *srv = calloc(1, sizeof *srv);
	if (!srv)
		return NULL;
	srv->h = h;
	srv->web = web;
	srv->deadline = mqc_mhd_deadline_new(CONNECTION_LIMIT, CONNECTION_DEADLINE_S * 1000);
	if (!srv->deadline) {
		free(srv);
		return NULL;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC;
	/* TLS 1.2 and 1.3 (the toolkit's default), or 1.3 alone; mutable for MHD's void * */
	static char tls12[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
	static char tls13[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3";
	struct MHD_OptionItem tls[5] = { { MHD_OPTION_END, 0, NULL } };
	if (web && web->tls) {
		flags |= MHD_USE_TLS;
		size_t n = 0;
		tls[n++] = (struct MHD_OptionItem) { MHD_OPTION_HTTPS_MEM_CERT, 0, web->cert_pem };
		tls[n++] = (struct MHD_OptionItem) { MHD_OPTION_HTTPS_MEM_KEY, 0, web->key_pem };
		tls[n++] = (struct MHD_OptionItem) { MHD_OPTION_HTTPS_PRIORITIES, 0,
			web->min_tls13 ? tls13 : tls12 };
		if (web->ca_pem)
			tls[n++] = (struct MHD_OptionItem) { MHD_OPTION_HTTPS_MEM_TRUST, 0, web->ca_pem };
		tls[n] = (struct MHD_OptionItem) { MHD_OPTION_END, 0, NULL };
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	srv->daemon = MHD_start_daemon(flags, 0, NULL, NULL, handle, srv, MHD_OPTION_LISTEN_SOCKET, fd,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)CONNECTION_IDLE_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
	    MHD_OPTION_NOTIFY_CONNECTION, mqc_mhd_deadline_notify, srv->deadline, MHD_OPTION_ARRAY, tls,
	    MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!srv->daemon) {
		mqc_mhd_deadline_free(srv->deadline);
		free(srv);
		return NULL;
	}
	return srv;
}

/* Stop a daemon (its listening socket too unless it was quiesced: handed to another), and
 * free its web config unless another daemon took it over. */
static void server_stop(struct server *srv, bool keep_web)
{
	if (!srv)
		return;
	MHD_stop_daemon(srv->daemon); /* joins its thread, closes every connection */
	mqc_mhd_deadline_free(srv->deadline);
	if (!keep_web)
		probe_web__free(srv->web);
	free(srv);
}

static void publish_web(struct probe_http *h, const struct probe_web *w)
{
	atomic_store(&h->stats->tls, w->tls);
	atomic_store(&h->stats->basic_auth, w->nusers > 0);
	atomic_store(&h->stats->client_cert, w->client_cert != PROBE_WEB_NO_CLIENT_CERT);
	atomic_store(&h->stats->last_reload_ok, true);
	atomic_store(&h->stats->last_reload_s, (uint_fast64_t)time(NULL));
}

static void reload_failed(struct probe_http *h, const struct probe_web_stamp *now)
{
	count(&h->stats->reloads[0]);
	atomic_store(&h->stats->last_reload_ok, false);
	h->failed = *now; /* not read again until they change again */
	h->has_failed = true;
}

/* The web config's files changed: read them, and hand the listening socket from the running
 * daemon to one started with the new settings. The old one finishes the scrapes it has (each has
 * a deadline) and stops. A config that does not read keeps the old one serving. */
static void reload(struct probe_http *h, const struct probe_web_stamp *now)
{
	char err[512];
	struct probe_web *web = probe_web__load(h->current->web->path, err, sizeof err);
	if (web && h->keep_auth && !probe_web__requires_auth(web)) {
		probe_web__free(web);
		web = NULL;
	}
	struct server *old = h->current;
	MHD_socket fd = web ? MHD_quiesce_daemon(old->daemon) : MHD_INVALID_SOCKET;
	if (fd == MHD_INVALID_SOCKET) {
		/* Counted, and shown by mosquitto_probe_web_config_last_reload_successful; the HTTP
		 * thread does not call the broker's log (not safe from a plugin's own thread). */
		probe_web__free(web);
		reload_failed(h, now);
		return;
	}
	struct server *next = server_start(h, fd, web);
	bool applied = next != NULL;
	if (!applied) { /* the old settings again, on a daemon of their own */
		probe_web__free(web);
		next = server_start(h, fd, old->web);
		if (!next)
			close(fd); /* out of memory twice: nothing serves until the broker restarts */
	}
	h->current = next;
	if (applied) {
		h->has_failed = false;
		count(&h->stats->reloads[1]);
		publish_web(h, web);
	} else {
		reload_failed(h, now);
	}
	/* The old daemon accepts nothing now; its scrapes in progress end by their deadline. */
	for (int i = 0; i < (CONNECTION_DEADLINE_S + 1) * 10; i++) {
		const union MHD_DaemonInfo *di
		    = MHD_get_daemon_info(old->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
		if (!di || di->num_connections == 0)
			break;
		usleep(100000);
	}
	server_stop(old, !applied && next);
}

static void *watch(void *arg)
{
	struct probe_http *h = arg;
	pthread_mutex_lock(&h->lock);
	while (!h->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&h->wake, &h->lock, &until);
		if (h->stopping || !h->current)
			continue; /* stopping, or a failed hand-over left nothing to watch */
		pthread_mutex_unlock(&h->lock);
		struct probe_web_stamp now;
		probe_web__stamp(h->current->web, &now);
		bool changed = !probe_web__same_stamp(&now, &h->current->web->stamp)
		    && !(h->has_failed && probe_web__same_stamp(&now, &h->failed));
		if (changed)
			reload(h, &now);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

struct probe_http *probe_http__start(const char *host, int port, const struct probe_metrics *m,
    bool observe_auth, struct probe_web *web, bool keep_auth, char *err, size_t errlen)
{
	struct probe_http *h = calloc(1, sizeof *h);
	if (!h) {
		probe_web__free(web);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->metrics = m;
	h->stats = m->web;
	h->observe_auth = observe_auth;
	h->keep_auth = keep_auth;
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->wake, &ca);
	pthread_condattr_destroy(&ca);
	int fd = listen_socket(host, port, err, errlen);
	if (fd >= 0 && !(h->current = server_start(h, fd, web))) {
		snprintf(err, errlen, "http_listen: cannot start the HTTP server on %s:%d%s", host, port,
		    web && web->tls ? " with TLS" : "");
		close(fd);
	}
	if (!h->current)
		probe_web__free(web);
	if (h->current && web) {
		publish_web(h, web);
		atomic_store(&h->stats->enabled, true);
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		h->watching = pthread_create(&h->watcher, NULL, watch, h) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (!h->watching) {
			snprintf(err, errlen, "web_config: cannot start the thread that re-reads it");
			server_stop(h->current, false);
			h->current = NULL;
		}
	}
	if (!h->current) {
		pthread_cond_destroy(&h->wake);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return NULL;
	}
	return h;
}

void probe_http__stop(struct probe_http *h)
{
	if (!h)
		return;
	if (h->watching) {
		pthread_mutex_lock(&h->lock);
		h->stopping = true;
		pthread_cond_signal(&h->wake);
		pthread_mutex_unlock(&h->lock);
		pthread_join(h->watcher, NULL);
	}
	server_stop(h->current, false);
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	free(h);
}
