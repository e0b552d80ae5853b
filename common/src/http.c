#include "mqc_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int mqc_http_raw(
    int port, const char *request, size_t len, int timeout_ms, struct mqc_http_response *out)
{
	*out = (struct mqc_http_response) { .status = -1 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in addr = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0
	    || send(fd, request, len, MSG_NOSIGNAL) != (ssize_t)len) {
		close(fd);
		return -1;
	}
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (n + 4096 > cap) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
		ssize_t got = recv(fd, buf + n, cap - n - 1, 0);
		if (got < 0) {
			free(buf);
			close(fd);
			return -1;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	buf[n] = '\0';
	char *body = strstr(buf, "\r\n\r\n");
	if (strncmp(buf, "HTTP/1.", 7) == 0 && n > 12)
		out->status = atoi(buf + 9);
	if (body) {
		*body = '\0';
		out->headers = strdup(buf);
		out->body_len = n - (size_t)(body + 4 - buf);
		out->body = malloc(out->body_len + 1);
		memcpy(out->body, body + 4, out->body_len + 1);
	} else {
		out->headers = strdup(buf);
		out->body = strdup("");
	}
	free(buf);
	return 0;
}

int mqc_http_get(int port, const char *path, struct mqc_http_response *out)
{
	char request[512];
	int len = snprintf(request, sizeof request,
	    "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
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
