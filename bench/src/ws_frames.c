/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * ws_frames.c - bench/ws_frames: what framing an MQTT packet for WebSockets costs, the pool's own
 * code (common/src/ws.c) beside Debian's libwslay (its frame layer, driven through memory
 * callbacks as the pool's buffers would drive it), on the same bytes, in the same process.
 * Prints numbers; asserts nothing.
 *
 *   write: one masked binary frame of SIZE bytes appended to an output buffer (a fresh key each)
 *   read:  a server's unmasked frames of SIZE bytes, back to back, 16 KiB at a time (a read's
 *          worth), taken into a receive buffer
 *
 * Usage: ws_frames [SIZE [FRAMES [ROUNDS]]]   (default 100 bytes, 200000 frames, 7 rounds)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wslay/wslay.h>

#include "mqc_clock.h"
#include "mqc_ws.h"

struct mem {
	struct mqc_buf *out; /* send: appended here */
	const unsigned char *in;
	size_t in_len, in_at; /* recv: read from here */
};

static ssize_t mem_send(const uint8_t *data, size_t len, int flags, void *user)
{
	(void)flags;
	struct mem *m = user;
	if (mqc_buf_reserve(m->out, len, SIZE_MAX) != 0)
		return -1;
	memcpy(m->out->data + m->out->len, data, len);
	m->out->len += len;
	return (ssize_t)len;
}

enum { READ = 16384 }; /* what one read of the pool's takes at most */

static ssize_t mem_recv(uint8_t *buf, size_t len, int flags, void *user)
{
	(void)flags;
	struct mem *m = user;
	len = len < READ ? len : READ;
	size_t n = m->in_len - m->in_at < len ? m->in_len - m->in_at : len;
	if (!n)
		return -1; /* the bench never asks past its frames */
	memcpy(buf, m->in + m->in_at, n);
	m->in_at += n;
	return (ssize_t)n;
}

/* The keys common/src/ws.c uses, so that the two differ in framing only. */
static int mem_mask(uint8_t *buf, size_t len, void *user)
{
	(void)user;
	return len == 4 ? mqc_ws_mask_key(buf) : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 100;
	size_t frames = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
	int rounds = argc > 3 ? atoi(argv[3]) : 7;
	if (size == 0 || size > 65535 || frames == 0 || rounds < 1 || rounds > 99) {
		fprintf(stderr, "usage: ws_frames [SIZE 1-65535 [FRAMES [ROUNDS 1-99]]]\n");
		return 2;
	}
	static unsigned char packet[65535];
	for (size_t i = 0; i < size; i++)
		packet[i] = (unsigned char)(i * 31);
	/* The server's frames, once, for both readers. */
	struct mqc_buf wire = { 0 };
	for (size_t i = 0; i < frames; i++)
		if (mqc_ws_frame(&wire, MQC_WS_BINARY, packet, size, false, SIZE_MAX) != 0)
			return 1;
	double t[4][99];
	struct mqc_buf out = { 0 }, rx = { 0 };
	for (int r = 0; r < rounds; r++) {
		/* ours, write */
		out.off = out.len = 0;
		uint64_t t0 = mqc_now_ns();
		for (size_t i = 0; i < frames; i++)
			mqc_ws_frame(&out, MQC_WS_BINARY, packet, size, true, SIZE_MAX);
		t[0][r] = (double)(mqc_now_ns() - t0) / (double)frames;
		/* wslay, write */
		out.off = out.len = 0;
		struct mem m = { .out = &out };
		struct wslay_frame_callbacks cb = { mem_send, mem_recv, mem_mask };
		wslay_frame_context_ptr ctx;
		if (wslay_frame_context_init(&ctx, &cb, &m) != 0)
			return 1;
		t0 = mqc_now_ns();
		for (size_t i = 0; i < frames; i++) {
			struct wslay_frame_iocb io = { .fin = 1,
				.opcode = WSLAY_BINARY_FRAME,
				.mask = 1,
				.payload_length = size,
				.data = packet,
				.data_length = size };
			if (wslay_frame_send(ctx, &io) != (ssize_t)size)
				return 1;
		}
		t[1][r] = (double)(mqc_now_ns() - t0) / (double)frames;
		wslay_frame_context_free(ctx);
		/* ours, read: 16 KiB at a time, as the pool's reads deliver them */
		struct mqc_ws_reader reader = { 0 };
		struct mqc_ws_control ctl;
		char err[128];
		struct mqc_buf in = { 0 };
		rx.off = rx.len = 0;
		t0 = mqc_now_ns();
		for (size_t at = 0; at < wire.len; at += READ) {
			size_t n = wire.len - at < READ ? wire.len - at : READ;
			if (mqc_buf_reserve(&in, n, SIZE_MAX) != 0)
				return 1;
			memcpy(in.data + in.len, wire.data + at, n);
			in.len += n;
			if (mqc_ws_read(&reader, &in, &rx, SIZE_MAX, 1 << 20, &ctl, err, sizeof err)
			    != MQC_WS_AGAIN)
				return 1;
			rx.off = rx.len = 0; /* the packets taken, as the pool's parse would */
		}
		mqc_buf_free(&in);
		t[2][r] = (double)(mqc_now_ns() - t0) / (double)frames;
		/* wslay, read: its payload views copied into rx, as the pool would need them */
		m = (struct mem) { .in = wire.data, .in_len = wire.len };
		if (wslay_frame_context_init(&ctx, &cb, &m) != 0)
			return 1;
		t0 = mqc_now_ns();
		size_t got = 0;
		while (got < frames * size) {
			struct wslay_frame_iocb io;
			ssize_t n = wslay_frame_recv(ctx, &io);
			if (n < 0)
				return 1;
			if (mqc_buf_reserve(&rx, io.data_length, SIZE_MAX) != 0)
				return 1;
			memcpy(rx.data + rx.len, io.data, io.data_length);
			rx.off = rx.len = 0;
			got += io.data_length;
		}
		t[3][r] = (double)(mqc_now_ns() - t0) / (double)frames;
		wslay_frame_context_free(ctx);
	}
	const char *names[] = { "write, common/src/ws.c", "write, libwslay (frame layer)",
		"read, common/src/ws.c", "read, libwslay (frame layer)" };
	printf("ws_frames: %zu-byte packets, %zu frames a round, %d rounds: ns per frame\n", size,
	    frames, rounds);
	printf("%-32s %8s %8s %8s\n", "", "median", "min", "max");
	for (int k = 0; k < 4; k++) {
		qsort(t[k], (size_t)rounds, sizeof t[k][0], cmp_double);
		printf("%-32s %8.1f %8.1f %8.1f\n", names[k], t[k][rounds / 2], t[k][0], t[k][rounds - 1]);
	}
	mqc_buf_free(&wire);
	mqc_buf_free(&out);
	mqc_buf_free(&rx);
	return 0;
}
