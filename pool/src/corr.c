/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * corr.c - correlation data nobody can guess or forge.
 *
 * A request's correlation data is one AES-128 block: the connection's request sequence number
 * (8 bytes, little-endian) and 8 zero bytes, encrypted under a random key of the connection's
 * own. To anyone without the key the 16 bytes are indistinguishable from random, so a device
 * that sees its own commands learns nothing about the correlation data of commands sent to
 * others (a counter in clear, as before, let it answer them first). The pool can still tell its
 * own late replies from strays: decrypting gives the sequence back, and the zero half shows the
 * block is one it made.
 */
#include <openssl/evp.h>
#include <string.h>

#include "corr.h"
#include "mqc_random.h"

int mqp__corr_init(struct mqp_corr *k)
{
	unsigned char key[16];
	*k = (struct mqp_corr) { 0 };
	if (mqc_random_bytes(key, sizeof key) != 0)
		return -1;
	k->enc = EVP_CIPHER_CTX_new();
	k->dec = EVP_CIPHER_CTX_new();
	int ok = k->enc && k->dec && EVP_EncryptInit_ex(k->enc, EVP_aes_128_ecb(), NULL, key, NULL) == 1
	    && EVP_DecryptInit_ex(k->dec, EVP_aes_128_ecb(), NULL, key, NULL) == 1
	    && EVP_CIPHER_CTX_set_padding(k->enc, 0) == 1 && EVP_CIPHER_CTX_set_padding(k->dec, 0) == 1;
	memset(key, 0, sizeof key);
	if (!ok) {
		mqp__corr_free(k);
		return -1;
	}
	return 0;
}

void mqp__corr_free(struct mqp_corr *k)
{
	EVP_CIPHER_CTX_free(k->enc);
	EVP_CIPHER_CTX_free(k->dec);
	*k = (struct mqp_corr) { 0 };
}

int mqp__corr_seal(struct mqp_corr *k, uint64_t seq, unsigned char out[MQP_CORR_LEN])
{
	unsigned char block[MQP_CORR_LEN] = { 0 };
	for (int i = 0; i < 8; i++)
		block[i] = (unsigned char)(seq >> (8 * i));
	int n = 0;
	return EVP_EncryptUpdate(k->enc, out, &n, block, sizeof block) == 1 && n == MQP_CORR_LEN ? 0
	                                                                                         : -1;
}

bool mqp__corr_open(struct mqp_corr *k, const void *corr, size_t len, uint64_t *seq)
{
	static const unsigned char zeros[8];
	unsigned char block[MQP_CORR_LEN];
	int n = 0;
	if (!corr || len != MQP_CORR_LEN || !k->dec
	    || EVP_DecryptUpdate(k->dec, block, &n, corr, MQP_CORR_LEN) != 1 || n != MQP_CORR_LEN
	    || memcmp(block + 8, zeros, sizeof zeros) != 0)
		return false;
	*seq = 0;
	for (int i = 0; i < 8; i++)
		*seq |= (uint64_t)block[i] << (8 * i);
	return true;
}
