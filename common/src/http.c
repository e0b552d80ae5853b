/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * http.c - the raw HTTP/1.0 client with a deadline on every call (mqc_http.h), for tests and
 * for reading the probe.
 */
#include "mqc_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A response larger than this is not one a test or the bench asked for. */
#define HTTP_RESPONSE_MAX (64u << 20)

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for events on fd until deadline (ms). 1 ready, 0 timed out, -1 error. */
static int wait_for(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = events };
		int rc = poll(&p, 1, (int)left);
		if (rc > 0)
			return 1;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

/* Connect, send everything and read until the server closes, all before deadline. */
static char *exchange(int port, const char *request, size_t len, int64_t deadline, size_t *n)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return NULL;
	struct sockaddr_in addr = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char *buf = NULL;
	int err = 0;
	socklen_t elen = sizeof err;
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0
	    && (errno != EINPROGRESS || wait_for(fd, POLLOUT, deadline) != 1
	        || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0))
		goto fail;
	for (size_t sent = 0; sent < len;) {
		ssize_t w = send(fd, request + sent, len - sent, MSG_NOSIGNAL);
		if (w > 0)
			sent += (size_t)w;
		else if ((w < 0 && errno != EAGAIN && errno != EINTR)
		    || wait_for(fd, POLLOUT, deadline) != 1)
			goto fail;
	}
	size_t cap = 65536;
	*n = 0;
	if (!(buf = malloc(cap)))
		goto fail;
	for (;;) {
		if (*n + 4096 > cap) {
			char *grown = cap < HTTP_RESPONSE_MAX ? realloc(buf, cap * 2) : NULL;
			if (!grown)
				goto fail;
			buf = grown;
			cap *= 2;
		}
		ssize_t got = recv(fd, buf + *n, cap - *n - 1, 0);
		if (got == 0)
			break;
		if (got > 0)
			*n += (size_t)got;
		else if ((errno != EAGAIN && errno != EINTR) || wait_for(fd, POLLIN, deadline) != 1)
			goto fail;
	}
	close(fd);
	buf[*n] = '\0';
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}

int mqc_http_raw(
    int port, const char *request, size_t len, int timeout_ms, struct mqc_http_response *out)
{
	*out = (struct mqc_http_response) { .status = -1 };
	size_t n = 0;
	char *buf = exchange(port, request, len, now_ms() + timeout_ms, &n);
	if (!buf)
		return -1;
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.", 7) == 0 && n > 12)
		out->status = (int)strtol(buf + 9, NULL, 10);
	if (body) {
		*body = '\0';
		out->body_len = n - (size_t)(body + 4 - buf);
		out->body = malloc(out->body_len + 1);
		if (out->body)
			memcpy(out->body, body + 4, out->body_len + 1);
	} else {
		out->body = strdup("");
	}
	out->headers = strdup(buf);
	free(buf);
	if (!out->headers || !out->body) {
		mqc_http_response_free(out);
		out->status = -1;
		return -1;
	}
	return 0;
}

int mqc_http_get(int port, const char *path, struct mqc_http_response *out)
{
	char request[512];
	int len = snprintf(request, sizeof request,
	    "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
	if (len < 0 || (size_t)len >= sizeof request) { /* never send what was cut off */
		*out = (struct mqc_http_response) { .status = -1 };
		return -1;
	}
	return mqc_http_raw(port, request, (size_t)len, 5000, out);
}

void mqc_http_response_free(struct mqc_http_response *r)
{
	free(r->headers);
	free(r->body);
	*r = (struct mqc_http_response) { 0 };
}

double mqc_prom_value(const char *text, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

bool mqc_prom_duplicate(const char *text, char *out, size_t len)
{
	const char *seen[4096];
	size_t seen_len[4096], n = 0;
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (*p == '#' || *p == '\n')
			continue;
		const char *end = strpbrk(p, " \n"); /* the series: name and labels, up to the value */
		size_t k = end ? (size_t)(end - p) : strlen(p);
		for (size_t i = 0; i < n; i++)
			if (seen_len[i] == k && memcmp(seen[i], p, k) == 0) {
				snprintf(out, len, "%.*s", (int)k, p);
				return true;
			}
		if (n < sizeof seen / sizeof seen[0]) {
			seen[n] = p;
			seen_len[n++] = k;
		}
	}
	return false;
}
