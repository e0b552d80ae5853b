/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * hash.c - SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash. The probe names a
 * client by it where its id must not be shown (plugin_opt_expose_client_ids): with a key drawn
 * at load, the same client gets the same label while the broker runs, and nobody without the key
 * can test a guessed id against a label. Small, bounded, no allocation; checked against the
 * paper's test vectors (probe_unit_test).
 */
#include <string.h>

#include "probe.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void sip_rounds(uint64_t v[4], int n)
{
	for (int i = 0; i < n; i++) {
		v[0] += v[1];
		v[1] = ROTL(v[1], 13) ^ v[0];
		v[0] = ROTL(v[0], 32);
		v[2] += v[3];
		v[3] = ROTL(v[3], 16) ^ v[2];
		v[0] += v[3];
		v[3] = ROTL(v[3], 21) ^ v[0];
		v[2] += v[1];
		v[1] = ROTL(v[1], 17) ^ v[2];
		v[2] = ROTL(v[2], 32);
	}
}

uint64_t probe_hash__siphash(const uint64_t key[2], const void *data, size_t len)
{
	uint64_t v[4] = { key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL,
		key[0] ^ 0x6c7967656e657261ULL, key[1] ^ 0x7465646279746573ULL };
	const unsigned char *p = data;
	size_t whole = len & ~(size_t)7;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = le64(p + i);
		v[3] ^= m;
		sip_rounds(v, 2);
		v[0] ^= m;
	}
	unsigned char last[8] = { 0 };
	memcpy(last, p + whole, len - whole);
	uint64_t b = le64(last) | (uint64_t)len << 56;
	v[3] ^= b;
	sip_rounds(v, 2);
	v[0] ^= b;
	v[2] ^= 0xff;
	sip_rounds(v, 4);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}
