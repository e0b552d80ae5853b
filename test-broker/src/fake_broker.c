/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb-fake-broker - a scripted "broker" for what the real ones here do not do on demand: answer
 * only MQTT 3.1.1, close a connection in answer to a v5 CONNECT, refuse every CONNECT, or send
 * a malformed packet, or refuse every subscription. It answers CONNECT (and SUBSCRIBE) only (then
 * holds the connection until the client goes), so it tests how clients name what they meet; every
 * other behaviour is tested against real brokers (mosquitto, and scripts/interop's matrix).
 *
 * Usage: tb-fake-broker --mode MODE [--port N] [--server-ref HOST:PORT]
 *   v311-only   a v5 CONNECT gets a 3.1.1 CONNACK with return code 1 and the connection closes
 *               (aedes); a 3.1.1 CONNECT is accepted
 *   close-v5    a v5 CONNECT is closed without a CONNACK (RabbitMQ 3.10); 3.1.1 is accepted
 *   close-all   every CONNECT is closed without a CONNACK (a broker at its connection limit)
 *   refuse      every CONNECT is refused: v5 reason 0x87 or 3.1.1 return code 5 (not authorized)
 *   malformed   CONNACK, then a PUBLISH with QoS 3
 *   deny-subscribe  CONNACK, then every SUBSCRIBE refused: SUBACK 0x87 (v5) or 0x80 (3.1.1), as
 *               a broker whose ACL plugin denies the filter answers (mosquitto's acl_file grants
 *               it and filters at delivery instead)
 *   silent      accepts and reads, and never answers anything: a broker, or an HTTP endpoint
 *               such as a probe's /metrics, that hangs
 *   no-pingresp CONNACK (v5: with Server Keep Alive 1 s), every SUBSCRIBE granted, and then
 *               nothing: PINGREQ is never answered (a broker, or a path to it, that went dark)
 *   no-wildcards  v5 CONNACK saying Wildcard and Shared Subscription Available 0; a SUBSCRIBE
 *               with a wildcard is refused (0xA2), one without granted; nothing else answered
 *   redirect    a v5 CONNECT gets CONNACK 0x9C "use another server" with the Server Reference
 *               --server-ref (EMQX's node evacuation), and the connection closes
 *   shutdown    a v5 CONNECT gets its CONNACK, then DISCONNECT 0x8B "server shutting down"
 * Prints FAKE_BROKER_URL=mqtt://127.0.0.1:PORT and "ready" once it listens; counts CONNECTs by
 * protocol level and prints them when SIGTERM ends it ("fake-broker: connects v5 N v311 M").
 *
 * Its packets are written and read by hand here, on purpose: it is a test oracle for the
 * project's one codec (common/src/codec.c), and an oracle that shared the code it checks would
 * agree with that code's mistakes. This is the only other place in the tree that knows MQTT's
 * bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum mode {
	V311_ONLY,
	CLOSE_V5,
	CLOSE_ALL,
	REFUSE,
	MALFORMED,
	DENY_SUBSCRIBE,
	SILENT,
	NO_PINGRESP,
	NO_WILDCARDS,
	REDIRECT,
	SHUTDOWN
};
static const char *const names[] = { "v311-only", "close-v5", "close-all", "refuse", "malformed",
	"deny-subscribe", "silent", "no-pingresp", "no-wildcards", "redirect", "shutdown" };
static const char *server_ref = "";

enum { MAX_CLIENTS = 64 };

struct client {
	int fd;
	unsigned char buf[4096];
	size_t len;
	bool answered;
	int level; /* the CONNECT's protocol level */
};

static volatile sig_atomic_t stop;
static unsigned connects_v5, connects_v311;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void drop(struct client *c)
{
	close(c->fd);
	*c = (struct client) { .fd = -1 };
}

static void answer(struct client *c, enum mode mode, int level)
{
	static const unsigned char ok311[] = { 0x20, 2, 0, 0 }, ok5[] = { 0x20, 3, 0, 0, 0 },
	                           bad_version311[] = { 0x20, 2, 0, 1 }, no311[] = { 0x20, 2, 0, 5 },
	                           no5[] = { 0x20, 3, 0, 0x87, 0 }, qos3[] = { 0x36, 3, 0, 1, 't' };
	/* properties: Server Keep Alive (0x13) = 1 s; Wildcard (0x28) and Shared (0x2A) Subscription
	 * Available 0 */
	static const unsigned char ok5_keepalive1[] = { 0x20, 6, 0, 0, 3, 0x13, 0, 1 },
	                           ok5_no_wildcards[] = { 0x20, 7, 0, 0, 4, 0x28, 0, 0x2A, 0 };
	bool v5 = level == 5;
	const unsigned char *out = NULL;
	size_t len = 0;
	bool close_after = false;
	switch (mode) {
		case V311_ONLY:
			out = v5 ? bad_version311 : ok311;
			len = 4;
			close_after = v5;
			break;
		case CLOSE_V5:
			if (v5) {
				drop(c);
				return;
			}
			out = ok311;
			len = 4;
			break;
		case CLOSE_ALL:
			drop(c);
			return;
		case REFUSE:
			out = v5 ? no5 : no311;
			len = v5 ? sizeof no5 : sizeof no311;
			close_after = true;
			break;
		case NO_PINGRESP:
			out = v5 ? ok5_keepalive1 : ok311;
			len = v5 ? sizeof ok5_keepalive1 : sizeof ok311;
			break;
		case NO_WILDCARDS:
			out = v5 ? ok5_no_wildcards : ok311;
			len = v5 ? sizeof ok5_no_wildcards : sizeof ok311;
			break;
		case REDIRECT: { /* CONNACK 0x9C; properties: Server Reference (0x1C), a string */
			size_t n = strlen(server_ref) < 200 ? strlen(server_ref) : 200;
			unsigned char r[256] = { 0x20, (unsigned char)(6 + n), 0, 0x9C, (unsigned char)(3 + n),
				0x1C, 0, (unsigned char)n };
			for (size_t i = 0; i < n; i++) /* bytes of the packet, no terminator */
				r[8 + i] = (unsigned char)server_ref[i];
			if (!v5) {
				drop(c);
				return;
			}
			send(c->fd, r, 8 + n, MSG_NOSIGNAL);
			drop(c);
			return;
		}
		case SHUTDOWN: { /* CONNACK, then DISCONNECT 0x8B with no properties */
			static const unsigned char bye[] = { 0xE0, 2, 0x8B, 0 };
			if (v5) {
				send(c->fd, ok5, sizeof ok5, MSG_NOSIGNAL);
				send(c->fd, bye, sizeof bye, MSG_NOSIGNAL);
			}
			drop(c);
			return;
		}
		case SILENT: /* never reached: its connections are read and not answered */
		case MALFORMED:
		case DENY_SUBSCRIBE:
			out = v5 ? ok5 : ok311;
			len = v5 ? sizeof ok5 : sizeof ok311;
			break;
	}
	if (send(c->fd, out, len, MSG_NOSIGNAL) < 0 || close_after) {
		drop(c);
		return;
	}
	if (mode == MALFORMED)
		send(c->fd, qos3, sizeof qos3, MSG_NOSIGNAL);
	c->answered = true;
	c->level = level;
}

/* A SUBSCRIBE at the front of what came (small: one read) gets its SUBACK: refused
 * (deny-subscribe), granted QoS 1 (no-pingresp), or refused when its filter has a wildcard
 * (no-wildcards: 0xA2, Wildcard Subscriptions not supported). */
static void answer_subscribe(struct client *c, const unsigned char *p, size_t n, enum mode mode)
{
	if (n < 4 || p[0] != 0x82 || (p[1] & 0x80) || (size_t)p[1] + 2 > n)
		return;
	bool grant = mode == NO_PINGRESP;
	if (mode == NO_WILDCARDS) { /* id, properties (one-byte length, skipped), the filter */
		size_t at = 4 + (c->level == 5 ? 1u + p[4] : 0u);
		size_t flen = at + 2 <= n ? (size_t)p[at] << 8 | p[at + 1] : 0;
		bool whole = at + 2 + flen <= n;
		grant = whole && !memchr(p + at + 2, '+', flen) && !memchr(p + at + 2, '#', flen);
	}
	unsigned char refusal = mode == NO_WILDCARDS ? 0xA2 : 0x87;
	unsigned char v5[] = { 0x90, 4, p[2], p[3], 0, grant ? 1 : refusal };
	unsigned char v311[] = { 0x90, 3, p[2], p[3], grant ? 1 : 0x80 };
	if (c->level == 5)
		send(c->fd, v5, sizeof v5, MSG_NOSIGNAL);
	else
		send(c->fd, v311, sizeof v311, MSG_NOSIGNAL);
}

/* A whole CONNECT in the buffer: its protocol level (4 or 5), or 0 while it is incomplete. */
static int connect_level(const struct client *c)
{
	if (c->len < 2)
		return 0;
	size_t body = 0, i = 1;
	for (unsigned shift = 0; i < c->len && i < 5; i++, shift += 7) {
		body |= (size_t)(c->buf[i] & 0x7f) << shift;
		if (!(c->buf[i] & 0x80))
			break;
	}
	if (i >= c->len || c->len < i + 1 + body || body < 7)
		return 0;
	return c->buf[i + 1 + 6]; /* after "\0\4MQTT": the level */
}

int main(int argc, char **argv)
{
	int mode = -1, port = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
			const char *m = argv[++i];
			for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
				if (strcmp(m, names[k]) == 0)
					mode = k;
		} else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			port = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--server-ref") == 0 && i + 1 < argc) {
			server_ref = argv[++i];
		} else {
			fprintf(stderr,
			    "usage: tb-fake-broker --mode "
			    "v311-only|close-v5|close-all|refuse|malformed|deny-subscribe|silent|no-pingresp|"
			    "no-wildcards|redirect|shutdown [--port N] [--server-ref HOST:PORT]\n");
			return 2;
		}
	}
	if (mode < 0) {
		fprintf(stderr,
		    "tb-fake-broker: --mode: expected v311-only, close-v5, close-all, refuse, malformed, "
		    "deny-subscribe, silent, no-pingresp, no-wildcards, redirect or shutdown\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_term };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
		.sin_port = htons((uint16_t)port) };
	socklen_t alen = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 64) != 0
	    || getsockname(l, (struct sockaddr *)&a, &alen) != 0) {
		fprintf(stderr, "tb-fake-broker: listen: %s\n", strerror(errno));
		return 1;
	}
	printf("FAKE_BROKER_URL=mqtt://127.0.0.1:%d\nready\n", ntohs(a.sin_port));
	fflush(stdout);
	struct client cl[MAX_CLIENTS];
	for (int i = 0; i < MAX_CLIENTS; i++)
		cl[i] = (struct client) { .fd = -1 };
	while (!stop) {
		struct pollfd pfd[MAX_CLIENTS + 1];
		pfd[0] = (struct pollfd) { .fd = l, .events = POLLIN };
		for (int i = 0; i < MAX_CLIENTS; i++)
			pfd[i + 1] = (struct pollfd) { .fd = cl[i].fd, .events = POLLIN };
		if (poll(pfd, MAX_CLIENTS + 1, 200) <= 0)
			continue;
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
			int i = 0;
			while (fd >= 0 && i < MAX_CLIENTS && cl[i].fd >= 0)
				i++;
			if (fd >= 0 && i < MAX_CLIENTS)
				cl[i] = (struct client) { .fd = fd };
			else if (fd >= 0)
				close(fd);
		}
		for (int i = 0; i < MAX_CLIENTS; i++) {
			struct client *c = &cl[i];
			if (c->fd < 0 || !(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
			if (n <= 0 || (c->answered && (size_t)n == sizeof c->buf - c->len)) {
				drop(c);
				continue;
			}
			if (mode == SILENT) { /* read and forgotten */
				c->len = 0;
				continue;
			}
			if (c->answered) { /* what follows CONNECT is not kept: the buffer is reused */
				if (mode == DENY_SUBSCRIBE || mode == NO_PINGRESP || mode == NO_WILDCARDS)
					answer_subscribe(c, c->buf + c->len, (size_t)n, (enum mode)mode);
				c->len = 0;
				continue;
			}
			c->len += (size_t)n;
			int level = connect_level(c);
			if (level == 5)
				connects_v5++;
			else if (level)
				connects_v311++;
			if (level)
				answer(c, (enum mode)mode, level);
			else if (c->len == sizeof c->buf)
				drop(c);
		}
	}
	printf("fake-broker: connects v5 %u v311 %u\n", connects_v5, connects_v311);
	return 0;
}
