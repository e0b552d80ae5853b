/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * wire_floor - what one request/reply costs a client on this machine with nothing but the wire:
 * a process that echoes over loopback TCP, and a client that keeps C small messages in flight
 * with one epoll_wait, one recv and one send per turn (every reply that arrived, one send for
 * every request they free). It prints system calls and CPU per request, measured the way
 * `mqbench request` measures the pool (a perf counter on raw_syscalls:sys_enter, getrusage), so
 * the pool's cost can be read against the floor: what is left above it is the pool's.
 *
 * Usage: wire_floor [--seconds S] [--concurrency C]... (default 2 s; 1 and 10)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqbench.h"
#include "mqc_clock.h"

enum { MSG = 64 }; /* a small command's size on the wire */

/* paced: every message echoed in a send of its own, as a broker that forwards one message per
 * event does (mosquitto 2.0): replies then come one segment at a time. */
static void echo_server(int listener, bool paced)
{
	int fd = accept(listener, NULL, NULL);
	if (fd < 0)
		_exit(1);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char buf[65536];
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof buf, 0);
		if (n <= 0)
			_exit(0);
		for (ssize_t off = 0; off < n;) {
			size_t len = (size_t)(n - off);
			if (paced && len > MSG)
				len = MSG;
			ssize_t w = send(fd, buf + off, len, MSG_NOSIGNAL);
			if (w <= 0)
				_exit(0);
			off += w;
		}
	}
}

static int run(unsigned concurrency, double seconds, bool paced)
{
	int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0
	    || listen(listener, 1) != 0 || getsockname(listener, (struct sockaddr *)&a, &alen) != 0) {
		perror("wire_floor: listen");
		return 1;
	}
	pid_t pid = fork();
	if (pid == 0)
		echo_server(listener, paced);
	close(listener);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		perror("wire_floor: connect");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	static char out[MSG * 1024], in[65536];
	memset(out, 'r', sizeof out);
	struct bench_cost cost;
	bench_cost_open(&cost);
	bench_cost_start(&cost);
	uint64_t t0 = mqc_now_ns(), end = t0 + (uint64_t)(seconds * 1e9), done = 0;
	size_t partial = 0; /* bytes of a reply not yet whole */
	if (send(fd, out, (size_t)MSG * concurrency, MSG_NOSIGNAL) < 0)
		perror("wire_floor: send");
	while (mqc_now_ns() < end) {
		struct epoll_event got;
		if (epoll_wait(ep, &got, 1, 1000) <= 0)
			continue;
		ssize_t n = recv(fd, in, sizeof in, 0);
		if (n <= 0)
			break;
		partial += (size_t)n;
		size_t replies = partial / MSG;
		partial %= MSG;
		done += replies;
		if (replies && send(fd, out, replies * MSG, MSG_NOSIGNAL) < 0)
			break;
	}
	bench_cost_stop(&cost);
	double elapsed = (double)(mqc_now_ns() - t0) / 1e9;
	char sys[24], cpu[24];
	printf("%-7s %-11u %10.0f %10s %10s\n", paced ? "paced" : "batched", concurrency,
	    (double)done / elapsed, bench_cost_fmt(cost.syscalls, (double)done, 2, "", sys, sizeof sys),
	    bench_cost_fmt(cost.cpu_s * 1e6, (double)done, 1, "us", cpu, sizeof cpu));
	bench_cost_close(&cost);
	close(fd);
	close(ep);
	waitpid(pid, NULL, 0);
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = 2;
	unsigned conc[16];
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc && n < 16) {
			conc[n++] = (unsigned)atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: wire_floor [--seconds S] [--concurrency C]...\n");
			return strcmp(argv[i], "--help") == 0 ? 0 : 2;
		}
	}
	if (seconds <= 0 || seconds > 600) {
		fprintf(stderr, "wire_floor: --seconds: expected 0 < S <= 600\n");
		return 2;
	}
	if (!n) {
		conc[n++] = 1;
		conc[n++] = 10;
	}
	printf("the wire alone: loopback TCP echo, %u-byte messages, one epoll_wait + recv + send per "
	       "turn,\n%.1f s per row (system calls and CPU: this client process)\n",
	    MSG, seconds);
	printf("(batched: the echo answers everything it read in one send; paced: one send per\n"
	       "message, as mosquitto 2.0 forwards one message per event)\n");
	printf("%-7s %-11s %10s %10s %10s\n", "echo", "in flight", "req/s", "sys/req", "CPU/req");
	for (int paced = 0; paced < 2; paced++)
		for (size_t i = 0; i < n; i++) {
			if (conc[i] < 1 || conc[i] > 1024) {
				fprintf(stderr, "wire_floor: --concurrency: expected 1 to 1024\n");
				return 2;
			}
			if (run(conc[i], seconds, paced) != 0)
				return 1;
		}
	return 0;
}
