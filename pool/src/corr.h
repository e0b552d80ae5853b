/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * corr.h - correlation data nobody can guess or forge (corr.c): one AES-128 block per request.
 */
#ifndef MQP_CORR_H
#define MQP_CORR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MQP_CORR_LEN 16 /* one AES block */

/* A connection's correlation key: OpenSSL cipher contexts, I/O thread only. */
struct evp_cipher_ctx_st;
struct mqp_corr {
	struct evp_cipher_ctx_st *enc, *dec;
};

int mqp__corr_init(struct mqp_corr *k); /* a fresh random key; -1 when none can be had */
void mqp__corr_free(struct mqp_corr *k);
int mqp__corr_seal(struct mqp_corr *k, uint64_t seq, unsigned char out[MQP_CORR_LEN]);
/* Whether corr is one this key sealed; its sequence in *seq. */
bool mqp__corr_open(struct mqp_corr *k, const void *corr, size_t len, uint64_t *seq);

#endif
