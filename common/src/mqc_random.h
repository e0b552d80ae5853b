/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_random.h - unguessable bytes and client ids, from the kernel's CSPRNG (getrandom).
 */
#ifndef MQC_RANDOM_H
#define MQC_RANDOM_H

#include <stddef.h>

/** Fill buf with n random bytes. Returns 0, or -1 (errno set) when the kernel gives none. */
int mqc_random_bytes(void *buf, size_t n);

/** Characters mqc_random_id adds after the prefix: 64 random bits in base 62. */
#define MQC_RANDOM_ID_CHARS 11

/**
 * An MQTT client id: prefix followed by 64 random bits as 11 characters of [0-9A-Za-z] (so a
 * prefix of at most 12 characters keeps it within MQTT 3.1.1's guaranteed 23). Nobody can guess
 * it to take the connection over by connecting with the same id. Returns 0, or -1 when the
 * kernel gives no random bytes or out (len bytes) is too small.
 */
int mqc_random_id(char *out, size_t len, const char *prefix);

#endif
