/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * http.c - GET /metrics from the probe's own process (libmicrohttpd).
 *
 * Why a process: a thread of the probe's would make the broker multi-threaded, and a
 * multi-threaded process pays on every system call on a file (the kernel counts references once
 * the file table is shared) and every malloc (glibc takes its locks): +360 ns a message at full
 * speed, whatever the thread does (README: Overhead). So the broker stays single-threaded and the
 * HTTP server runs in a child that reads the metrics from the shared mapping they live in.
 *
 * The broker's side (probe_http__open, __tick, __stop; on its thread, which logs what __tick
 * says): at load, the listening
 * socket is made, so "address in use" stops the load precisely, and the broker's /proc
 * directories are opened. Both 2.0.11 and 2.1.2 switch to their configured user and daemonise
 * before they load plugins (strace as root with `user nobody` and -d: configuration read,
 * setuid, fork and setsid, the plugin opened as nobody, then the listeners), so at load the pid
 * and the user are already the broker's final ones. The child is still forked at the first tick,
 * once the broker has finished starting (every plugin loaded, its listeners open): a start that
 * fails after our load leaves no child behind. The child reports that it serves (or why not)
 * through a pipe within a deadline; if it dies the broker logs it and starts another (at most one
 * every RESPAWN_S); at unload the broker stops and reaps it.
 *
 * The child (serve): dies with the broker's thread (PR_SET_PDEATHSIG), closes every descriptor of
 * the broker's but the ones it needs (a client socket held open in it would outlive the broker's
 * close), default signal dispositions, libmicrohttpd's threads, and the main thread re-reading the
 * web config. It never calls a mosquitto_* function and ends only by a signal or _exit.
 *
 * The server must not be held by its clients: at most CONNECTION_LIMIT connections at once (more
 * wait in the kernel's listen queue), and each gets CONNECTION_DEADLINE_S in all, however slowly
 * it trickles bytes (libmicrohttpd's own timeout is per idle period; mqc_mhd.h keeps the deadline).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <mosquitto.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_mhd.h"
#include "probe.h"

enum { CONNECTION_LIMIT = 16, CONNECTION_IDLE_S = 2, CONNECTION_DEADLINE_S = 5 };
/* The child: says it serves within START_DEADLINE_MS; a dead one is looked for each CHECK_S and
 * replaced at most every RESPAWN_S; at unload it gets STOP_DEADLINE_MS after SIGTERM. */
enum { START_DEADLINE_MS = 5000, CHECK_S = 1, RESPAWN_S = 5, STOP_DEADLINE_MS = 2000 };

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
	/* set at load, in the broker */
	struct probe_metrics *metrics; /* in the shared mapping (the broker counts http_exits) */
	struct probe_web_stats *stats; /* likewise */
	bool observe_auth;
	bool keep_auth;
	int listen_fd;
	struct probe_proc_dirs broker; /* the broker's /proc/PID and /proc/PID/fd */
	pid_t broker_pid;
	struct probe_web *web; /* the web config read at load (NULL: plain HTTP); each child starts
	                          with it and re-reads the file */
	char where[96];        /* host:port, for the log */
	/* the broker's thread only */
	pid_t child; /* 0: none running */
	bool started_once;
	uint64_t next_check_ns, next_spawn_ns;
	/* the child only */
	struct server *current;
	pthread_mutex_t lock;          /* everything below, among libmicrohttpd's threads */
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
	probe_process__read(&proc, &h->broker);
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
			_exit(1); /* out of memory twice: the broker starts another process */
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

/* Re-read the web config's files within a second of a change (the child's main thread). */
static _Noreturn void watch(struct probe_http *h)
{
	for (;;) {
		nanosleep(&(struct timespec) { .tv_sec = 1 }, NULL);
		struct probe_web_stamp now;
		probe_web__stamp(h->current->web, &now);
		bool changed = !probe_web__same_stamp(&now, &h->current->web->stamp)
		    && !(h->has_failed && probe_web__same_stamp(&now, &h->failed));
		if (changed)
			reload(h, &now);
	}
}

/* Close every descriptor but those in keep (ascending). */
static void close_others(const int *keep, size_t n)
{
	unsigned from = 0;
	for (size_t i = 0; i <= n; i++) {
		unsigned to = i < n ? (unsigned)keep[i] : ~0U; /* close [from, to) */
		if (from < to && close_range(from, to - 1, 0) != 0) {
			struct rlimit rl; /* kernels before 5.9 */
			unsigned end = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < to
			    ? (unsigned)rl.rlim_cur
			    : to;
			for (unsigned fd = from; fd < end; fd++)
				close((int)fd);
		}
		if (i < n)
			from = (unsigned)keep[i] + 1;
	}
}

static void sort_ints(int *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			int t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
}

static void report(int fd, const char *msg)
{
	size_t len = strlen(msg);
	while (len > 0) {
		ssize_t n = write(fd, msg, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		msg += n;
		len -= (size_t)n;
	}
	close(fd);
}

/* The child: serve until killed. status gets "ok" once the server listens, or why it cannot. */
static _Noreturn void serve(struct probe_http *h, int status)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != h->broker_pid)
		_exit(0); /* the broker went before PR_SET_PDEATHSIG took */
	prctl(PR_SET_NAME, "mqtt_probe http");
	/* The broker's handlers are not this process's: default, nothing blocked; SIGHUP and the
	 * user signals go to the broker, not here (a process group's SIGHUP must not stop it). */
	static const int dfl[] = { SIGTERM, SIGINT, SIGQUIT, SIGCHLD };
	static const int ign[] = { SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE };
	for (size_t i = 0; i < sizeof dfl / sizeof dfl[0]; i++)
		signal(dfl[i], SIG_DFL);
	for (size_t i = 0; i < sizeof ign / sizeof ign[0]; i++)
		signal(ign[i], SIG_IGN);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* stdin, stdout and stderr stay (a sanitizer's report), the broker's sockets and files go */
	int keep[] = { 0, 1, 2, h->listen_fd, status, h->broker.pid, h->broker.fds };
	sort_ints(keep, sizeof keep / sizeof keep[0]);
	close_others(keep, sizeof keep / sizeof keep[0]);

	pthread_mutex_init(&h->lock, NULL);
	h->current = server_start(h, h->listen_fd, h->web);
	if (!h->current) {
		char msg[160];
		snprintf(msg, sizeof msg, "cannot start the HTTP server on %s%s", h->where,
		    h->web && h->web->tls ? " with TLS" : "");
		report(status, msg);
		_exit(1);
	}
	report(status, "ok");
	bool has_web = h->web != NULL;
	h->web = NULL; /* the server owns it now: a re-read frees it */
	if (has_web)
		watch(h);
	for (;;)
		pause();
}

/* Fork the child and wait (START_DEADLINE_MS at most) until it serves. Returns its pid, or -1
 * with err set. */
static pid_t spawn(struct probe_http *h, char *err, size_t errlen)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		serve(h, p[1]);
	}
	int e = errno;
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		snprintf(err, errlen, "cannot fork: %s", strerror(e));
		return -1;
	}
	char msg[192] = "";
	size_t len = 0;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		long left = START_DEADLINE_MS - (long)((t.tv_sec - t0.tv_sec) * 1000)
		    - (long)((t.tv_nsec - t0.tv_nsec) / 1000000);
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		int r = left > 0 ? poll(&pf, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(msg, sizeof msg, "it did not start within %d ms", START_DEADLINE_MS);
			len = 0;
			break;
		}
		ssize_t n = read(p[0], msg + len, sizeof msg - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (len += (size_t)n) == sizeof msg - 1)
			break;
	}
	close(p[0]);
	msg[len] = '\0';
	if (strcmp(msg, "ok") == 0)
		return pid;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	snprintf(err, errlen, "the HTTP process: %s", msg[0] ? msg : "it exited before it served");
	return -1;
}

struct probe_http *probe_http__open(const char *host, int port, struct probe_metrics *m,
    bool observe_auth, struct probe_web *web, bool keep_auth, char *err, size_t errlen)
{
	struct probe_http *h = calloc(1, sizeof *h);
	if (!h) {
		probe_web__free(web);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	*h = (struct probe_http) { .metrics = m,
		.stats = m->web,
		.observe_auth = observe_auth,
		.keep_auth = keep_auth,
		.web = web,
		.broker_pid = getpid(),
		.broker = { -1, -1 } };
	snprintf(h->where, sizeof h->where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
	h->listen_fd = listen_socket(host, port, err, errlen);
	if (h->listen_fd >= 0) {
		h->broker.pid = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		h->broker.fds = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (h->broker.pid < 0 || h->broker.fds < 0)
			snprintf(err, errlen, "http_listen: cannot open /proc/self: %s", strerror(errno));
	}
	if (h->listen_fd < 0 || h->broker.pid < 0 || h->broker.fds < 0) {
		probe_http__stop(h);
		return NULL;
	}
	if (web) {
		publish_web(h, web);
		atomic_store(&h->stats->enabled, true);
	}
	return h;
}

int probe_http__tick(struct probe_http *h, uint64_t now_ns, char *msg, size_t len)
{
	if (!h || now_ns < h->next_check_ns)
		return 0;
	h->next_check_ns = now_ns + CHECK_S * 1000000000ULL;
	if (h->child > 0) {
		int st;
		pid_t r = waitpid(h->child, &st, WNOHANG);
		if (r == 0)
			return 0;
		char how[64] = "is gone";
		if (r > 0 && WIFSIGNALED(st))
			snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(st));
		else if (r > 0 && WIFEXITED(st))
			snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
		snprintf(msg, len,
		    "mqtt_probe: the HTTP process (pid %d) %s; another serves /metrics within %d s",
		    (int)h->child, how, RESPAWN_S);
		h->child = 0;
		probe_add(&h->metrics->http_exits, 1);
		h->next_check_ns = h->next_spawn_ns; /* the next tick after it may start one */
		return MOSQ_LOG_WARNING;
	}
	if (now_ns < h->next_spawn_ns)
		return 0;
	h->next_spawn_ns = now_ns + RESPAWN_S * 1000000000ULL;
	char err[256];
	pid_t pid = spawn(h, err, sizeof err);
	if (pid < 0) {
		snprintf(msg, len, "mqtt_probe: Error: %s; trying again in %d s", err, RESPAWN_S);
		return MOSQ_LOG_ERR;
	}
	h->child = pid;
	bool again = h->started_once;
	h->started_once = true;
	snprintf(msg, len, "mqtt_probe: %s/metrics on %s%s from process %d",
	    again ? "serving again: " : "serving ", h->where, h->web && h->web->tls ? " (TLS)" : "",
	    (int)pid);
	return again ? MOSQ_LOG_WARNING : MOSQ_LOG_INFO;
}

void probe_http__stop(struct probe_http *h)
{
	if (!h)
		return;
	if (h->child > 0 && kill(h->child, SIGTERM) == 0) {
		bool reaped = false;
		for (int waited = 0; !reaped && waited < STOP_DEADLINE_MS; waited += 10) {
			reaped = waitpid(h->child, NULL, WNOHANG) != 0;
			if (!reaped)
				nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
		}
		if (!reaped) {
			kill(h->child, SIGKILL);
			waitpid(h->child, NULL, 0);
		}
	} else if (h->child > 0) {
		waitpid(h->child, NULL, WNOHANG);
	}
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	if (h->broker.pid >= 0)
		close(h->broker.pid);
	if (h->broker.fds >= 0)
		close(h->broker.fds);
	probe_web__free(h->web);
	free(h);
}
