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
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_mhd.h"
#include "probe.h"

enum { CONNECTION_LIMIT = 16, CONNECTION_IDLE_S = 2, CONNECTION_DEADLINE_S = 5 };

struct probe_http {
	struct MHD_Daemon *daemon;
	struct mqc_mhd_deadline *deadline;
	const struct probe_metrics *metrics;
	bool observe_auth;
};

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
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
    const char *method, const char *version, const char *upload_data, size_t *upload_size,
    void **state)
{
	(void)version;
	(void)upload_data;
	struct probe_http *h = cls;
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

struct probe_http *probe_http__start(const char *host, int port, const struct probe_metrics *m,
    bool observe_auth, char *err, size_t errlen)
{
	struct probe_http *h = calloc(1, sizeof *h);
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->metrics = m;
	h->observe_auth = observe_auth;
	int fd = listen_socket(host, port, err, errlen);
	if (fd < 0) {
		free(h);
		return NULL;
	}
	/* The server thread inherits this mask: no signal is ever delivered to it. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	h->deadline = mqc_mhd_deadline_new(CONNECTION_LIMIT, CONNECTION_DEADLINE_S * 1000);
	if (h->deadline)
		h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
		    handle, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
		    (unsigned)CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_IDLE_S,
		    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_NOTIFY_CONNECTION,
		    mqc_mhd_deadline_notify, h->deadline, MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!h->daemon) {
		snprintf(err, errlen, "http_listen: cannot start the HTTP server on %s:%d", host, port);
		close(fd);
		mqc_mhd_deadline_free(h->deadline);
		free(h);
		return NULL;
	}
	return h;
}

void probe_http__stop(struct probe_http *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->daemon); /* joins its thread, closes every connection and the socket */
	mqc_mhd_deadline_free(h->deadline);
	free(h);
}
