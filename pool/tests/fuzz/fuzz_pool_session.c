/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fuzz_pool_session.c - libFuzzer: the pool's MQTT session against a broker that says anything,
 * in any order. The codec's fuzzer checks single packets; this one checks what the pool does with
 * a sequence: acknowledgements for packets it never sent or sent twice, replies with foreign
 * correlation data, a second CONNACK, SUBACKs that refuse, DISCONNECT in the middle, garbage.
 *
 * One pool on the test's own loop (options.loop: no I/O thread, every step on this thread, so a
 * run is the same every time), one connection to a loopback listener the test plays the broker
 * on. The first input byte shapes the session: bit 0 MQTT 3.1.1, bit 1 the inbox's SUBACK is
 * sent (the pool is then ready and its requests go out), bits 2-3 how many requests (0-3), bits
 * 4-5 their QoS, bit 6 legacy requests; the rest is written to the pool as the broker's bytes
 * after CONNACK (and SUBACK). Afterwards the pool is destroyed: every request's callback must
 * have run exactly once, nothing leaked (ASan), and destroying took no longer than the pool's own
 * bound for closing.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqttpool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --- the test's loop: the descriptors the pool asks to watch, and its one timer ------------ */

enum { MAX_WATCH = 8 };
static struct {
	struct {
		int fd;
		unsigned events;
		void *tag;
	} w[MAX_WATCH];
	int n;
	uint64_t due; /* 0: not asked */
} loop;

static void watch(void *data, int fd, unsigned events, void *tag)
{
	(void)data;
	int i = 0;
	while (i < loop.n && loop.w[i].fd != fd)
		i++;
	if (events == 0) {
		if (i < loop.n)
			loop.w[i] = loop.w[--loop.n];
		return;
	}
	if (i == loop.n) {
		if (loop.n == MAX_WATCH)
			abort(); /* a pool of one connection watches two or three */
		loop.n++;
	}
	loop.w[i].fd = fd;
	loop.w[i].events = events;
	loop.w[i].tag = tag;
}

static void schedule(void *data, long timeout_ms)
{
	(void)data;
	loop.due = timeout_ms < 0 ? 0 : mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	if (timeout_ms == 0)
		loop.due = 1; /* at once */
}

/* Turns of the loop without waiting (what is ready now, then what is due). */
static void pump(mqp_pool *pool, int turns)
{
	for (int t = 0; t < turns; t++) {
		struct pollfd fds[MAX_WATCH];
		void *tags[MAX_WATCH];
		int n = loop.n > 0 && loop.n <= MAX_WATCH ? loop.n : 0;
		for (int i = 0; i < n; i++) {
			fds[i] = (struct pollfd) { .fd = loop.w[i].fd,
				.events = (short)((loop.w[i].events & MQP_IO_READ ? POLLIN : 0)
				    | (loop.w[i].events & MQP_IO_WRITE ? POLLOUT : 0)) };
			tags[i] = loop.w[i].tag;
		}
		if (n && poll(fds, (nfds_t)n, 0) > 0)
			for (int i = 0; i < n; i++)
				if (fds[i].revents)
					mqp_pool_io(pool, tags[i],
					    (fds[i].revents & (POLLIN | POLLHUP | POLLERR) ? MQP_IO_READ : 0u)
					        | (fds[i].revents & POLLOUT ? MQP_IO_WRITE : 0u));
		if (loop.due && loop.due <= mqc_now_ns()) {
			loop.due = 0;
			mqp_pool_process(pool);
		}
	}
}

/* --- the broker's side ----------------------------------------------------------------------- */

static int listener = -1;
static char url[64];

static void listen_once(void)
{
	if (listener >= 0)
		return;
	listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0
	    || listen(listener, 16) != 0 || getsockname(listener, (struct sockaddr *)&a, &len) != 0)
		abort();
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%u", ntohs(a.sin_port));
}

/* Close a broker-side socket without leaving it in TIME_WAIT (one per input adds up). */
static void close_hard(int fd)
{
	struct linger hard = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
	close(fd);
}

/* The connections waiting in the listener's backlog (a pool that reconnected after the broker's
 * bytes broke its session): taken and closed when stale, or half-closed so that a pool being
 * destroyed meets their end at once. Returns how many were kept in kept[]. */
static int take_backlog(int *kept, int cap)
{
	int n = 0, fd;
	while ((fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		if (n < cap) {
			shutdown(fd, SHUT_WR);
			kept[n++] = fd;
		} else {
			close_hard(fd);
		}
	}
	return n;
}

/* The topic of the last PUBLISH next_packet saw. */
static char last_topic[64];

/* The next whole packet the pool sent (its type; *mid: its first two body bytes, SUBSCRIBE's
 * packet id), turning the loop meanwhile; -1 when none comes within max_ms. */
static int next_packet(
    mqp_pool *pool, int fd, unsigned char *buf, size_t *have, uint16_t *mid, unsigned max_ms)
{
	uint64_t until = mqc_now_ns() + (uint64_t)max_ms * MQC_NS_PER_MS;
	for (;;) {
		struct mqc_packet pk;
		mqc_malformed why;
		if (mqc_frame(buf, *have, 4096, &pk, &why) == MQC_FRAME_OK) {
			int type = pk.type;
			*mid = (uint16_t)(pk.body_len >= 2 ? pk.body[0] << 8 | pk.body[1] : 0);
			if (type == MQC_PUBLISH && *mid < sizeof last_topic && pk.body_len >= 2u + *mid)
				snprintf(
				    last_topic, sizeof last_topic, "%.*s", (int)*mid, (const char *)pk.body + 2);
			memmove(buf, buf + pk.size, *have - pk.size);
			*have -= pk.size;
			return type;
		}
		ssize_t n = recv(fd, buf + *have, 4096 - *have, MSG_DONTWAIT);
		if (n > 0) {
			*have += (size_t)n;
			continue;
		}
		if (n == 0 || mqc_now_ns() >= until)
			return -1;
		pump(pool, 1);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, loop.due > 1 ? 1 : 0); /* the pool's next deadline may be a millisecond on */
	}
}

/* Whether bytes are whole packets, ending on a packet's end (else the pool is left mid-packet,
 * and what follows is read as the rest of it). */
static bool whole_packets(const uint8_t *p, size_t n)
{
	while (n) {
		struct mqc_packet pk;
		mqc_malformed why;
		if (mqc_frame(p, n, MQC_MAX_PACKET, &pk, &why) != MQC_FRAME_OK)
			return false;
		p += pk.size;
		n -= pk.size;
	}
	return true;
}

/* --- the session ------------------------------------------------------------------------------ */

static unsigned completions[4];

/* The legacy requests' match callback: any message on the reply topic is the reply. With one, a
 * request the broker never answered leaves its reply topic free when it ends (without one the
 * pool quarantines the topic for the request's timeout, process-wide: the next session's would
 * wait for it). */
static int any_message(void *userdata, const struct mqp_message *m)
{
	(void)userdata, (void)m;
	return 1;
}

static void on_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)result, (void)reply;
	completions[(uintptr_t)userdata]++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	listen_once();
	unsigned shape = data[0];
	int protocol = shape & 1 ? 4 : 5, qos = (int)((shape >> 4) & 3);
	unsigned requests = (shape >> 2) & 3;
	bool suback = shape & 2, legacy = shape & 64;
	if (qos > 2)
		qos = 1;
	memset(&loop, 0, sizeof loop);
	memset(completions, 0, sizeof completions);
	take_backlog(NULL, 0); /* a destroyed pool's connections: closed */
	struct mqp_loop hooks = { .schedule = schedule };
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.min_size = o.max_size = 1;
	o.protocol = protocol;
	o.loop = &hooks;
	o.loop_watch = watch;
	mqp_pool *pool;
	if (mqp_pool_new(url, &o, &pool, NULL, 0) != MQP_OK)
		abort();
	pump(pool, 3);
	int b = -1;
	for (int t = 0; t < 200 && b < 0; t++) {
		b = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
		if (b < 0)
			pump(pool, 1);
	}
	if (b < 0)
		abort(); /* the pool never connected to a listener that takes everything */
	unsigned char buf[4096];
	size_t have = 0;
	uint16_t mid;
	if (next_packet(pool, b, buf, &have, &mid, 1000) != MQC_CONNECT)
		abort();
	static const unsigned char connack5[] = { 0x20, 3, 0, 0, 0 }, connack4[] = { 0x20, 2, 0, 0 };
	if (protocol == 5)
		send(b, connack5, sizeof connack5, MSG_NOSIGNAL);
	else
		send(b, connack4, sizeof connack4, MSG_NOSIGNAL);
	/* MQTT 5: the pool subscribes to its inbox before it is ready (3.1.1 has none) */
	if (suback && protocol == 5 && next_packet(pool, b, buf, &have, &mid, 1000) == MQC_SUBSCRIBE) {
		unsigned char ack5[] = { 0x90, 4, (unsigned char)(mid >> 8), (unsigned char)mid, 0, 0 };
		unsigned char ack4[] = { 0x90, 3, (unsigned char)(mid >> 8), (unsigned char)mid, 0 };
		if (protocol == 5)
			send(b, ack5, sizeof ack5, MSG_NOSIGNAL);
		else
			send(b, ack4, sizeof ack4, MSG_NOSIGNAL);
	}
	pump(pool, 5);
	for (uintptr_t i = 0; i < requests; i++) {
		char topic[32], reply[40];
		snprintf(topic, sizeof topic, "dev/%u/cmd", (unsigned)i);
		snprintf(reply, sizeof reply, "dev/%u/reply", (unsigned)i);
		mqp_err rc = legacy || protocol == 4
		    ? mqp_pool_request_legacy_async(pool, topic, "x", 1, qos, reply, any_message, NULL,
		        60000, on_reply, (void *)i, NULL)
		    : mqp_pool_request_async(pool, topic, "x", 1, qos, 60000, on_reply, (void *)i, NULL);
		if (rc != MQP_OK)
			completions[i]++; /* refused at once: its callback never runs */
	}
	pump(pool, 5);
	/* The broker's bytes, in pieces of up to 64, the pool's reading in between. */
	for (size_t off = 1; off < size;) {
		size_t n = size - off < 64 ? size - off : 64;
		ssize_t put = send(b, data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (put <= 0)
			break; /* the pool closed its side */
		off += (size_t)put;
		pump(pool, 2);
		have = 0;
		while (recv(b, buf, sizeof buf, MSG_DONTWAIT) > 0) /* what it sends back: dropped */
			;
	}
	pump(pool, 5);
	/* Whatever whole packets came, a connection still ready takes a new command: it goes out (a
	 * pool whose count of unacknowledged messages a duplicate PUBACK had wrapped would hold it
	 * back). */
	unsigned final = 0;
	struct mqp_pool_stats st;
	mqp_pool_stats(pool, &st, sizeof st);
	if (st.ready == 1 && st.connects_ok == 1 && whole_packets(data + 1, size - 1)) {
		mqp_err rc = protocol == 4
		    ? mqp_pool_request_legacy_async(pool, "final/cmd", "f", 1, 1, "final/reply",
		        any_message, NULL, 60000, on_reply, (void *)(uintptr_t)3, NULL)
		    : mqp_pool_request_async(
		        pool, "final/cmd", "f", 1, 1, 60000, on_reply, (void *)(uintptr_t)3, NULL);
		if (rc != MQP_OK)
			abort(); /* a ready pool refused a plain command */
		final = 1;
		bool seen = false;
		have = 0;
		for (int t = 0; t < 20 && !seen; t++) {
			int type = next_packet(pool, b, buf, &have, &mid, 500);
			if (type < 0)
				break; /* nothing more: the pool closed, or holds it (checked below) */
			if (type == MQC_SUBSCRIBE) { /* the legacy model subscribes to its reply topic first */
				unsigned char ack5[]
				    = { 0x90, 4, (unsigned char)(mid >> 8), (unsigned char)mid, 0, 1 };
				unsigned char ack4[]
				    = { 0x90, 3, (unsigned char)(mid >> 8), (unsigned char)mid, 1 };
				send(b, protocol == 5 ? ack5 : ack4, protocol == 5 ? sizeof ack5 : sizeof ack4,
				    MSG_NOSIGNAL);
			}
			seen = type == MQC_PUBLISH && strcmp(last_topic, "final/cmd") == 0;
		}
		mqp_pool_stats(pool, &st, sizeof st);
		if (!seen && st.ready == 1 && st.connects_ok == 1)
			abort(); /* ready, and its command never went out */
	}
	/* so the pool's goodbye on destroy meets the broker's end at once, on this connection and on
	 * any it opened again since */
	shutdown(b, SHUT_WR);
	int again[8], n_again = take_backlog(again, 8);
	uint64_t t0 = mqc_now_ns();
	mqp_pool_destroy(pool);
	if (mqc_now_ns() - t0 > 2 * MQC_NS_PER_S)
		abort(); /* destroying waits 250 ms at most for a broker to close */
	for (unsigned i = 0; i < requests; i++)
		if (completions[i] != 1)
			abort(); /* a callback that never ran, or ran twice */
	if (completions[3] != final)
		abort();
	close_hard(b);
	for (int i = 0; i < n_again; i++)
		close_hard(again[i]);
	return 0;
}
