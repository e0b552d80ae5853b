/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * random.c - unguessable bytes and client ids, from the kernel's CSPRNG.
 */
#include "mqc_random.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

int mqc_random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int mqc_random_id(char *out, size_t len, const char *prefix)
{
	static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	size_t plen = strlen(prefix);
	uint64_t v;
	if (plen + MQC_RANDOM_ID_CHARS + 1 > len || mqc_random_bytes(&v, sizeof v) != 0)
		return -1;
	memcpy(out, prefix, plen);
	for (int i = 0; i < MQC_RANDOM_ID_CHARS; i++) { /* 62^11 > 2^64: every bit is kept */
		out[plen + (size_t)i] = digits[v % 62];
		v /= 62;
	}
	out[plen + MQC_RANDOM_ID_CHARS] = '\0';
	return 0;
}
