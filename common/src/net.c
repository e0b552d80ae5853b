/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * net.c - socket options the project's programs share, and listening addresses (mqc_net.h).
 */
#include "mqc_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "mqc_strutil.h"

/* -1 not read yet, 0 off, 1 on: MQTTPOOL_TCP_QUICKACK=0 turns it off (to measure it). */
static atomic_int quickack = -1;

void mqc_tcp_user_timeout(int fd, unsigned ms)
{
	if (fd >= 0 && ms)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

void mqc_tcp_quickack(int fd)
{
	int on = atomic_load_explicit(&quickack, memory_order_relaxed);
	if (on < 0) {
		const char *v = getenv("MQTTPOOL_TCP_QUICKACK");
		on = !(v && strcmp(v, "0") == 0);
		atomic_store_explicit(&quickack, on, memory_order_relaxed);
	}
	if (!on || fd < 0)
		return;
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

int mqc_listen_parse(const char *text, struct sockaddr_storage *out, socklen_t *len)
{
	const char *colon = strrchr(text, ':');
	uint64_t port;
	if (!colon || mqc_parse_u64(colon + 1, 0, 65535, &port) != 0)
		return -1;
	char host[INET6_ADDRSTRLEN];
	size_t n = (size_t)(colon - text);
	bool bracketed = n >= 2 && text[0] == '[' && text[n - 1] == ']';
	if (bracketed) {
		text++;
		n -= 2;
	}
	if (n >= sizeof host)
		return -1;
	memcpy(host, text, n);
	host[n] = '\0';
	struct sockaddr_storage ss = { 0 };
	if (bracketed) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -1;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*len = sizeof *a;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		if (inet_pton(AF_INET, host[0] ? host : "0.0.0.0", &a->sin_addr) != 1)
			return -1;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		*len = sizeof *a;
	}
	*out = ss;
	return 0;
}

void mqc_sockaddr_text(const struct sockaddr *sa, char *out, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof host);
	else {
		snprintf(out, len, "?");
		return;
	}
	snprintf(
	    out, len, sa->sa_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, mqc_sockaddr_port(sa));
}

unsigned mqc_sockaddr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void mqc_sockaddr_set_port(struct sockaddr *sa, unsigned port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}
