/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_tls.h - a TLS client context as every client of the project makes it (tls.c): the
 * broker's certificate verified against cafile or the system's trust store, and its host name
 * (or IP address) checked; a client certificate when given. The pool, mqbench's connect storm and
 * the 3.1.1 check (mqc_client_explain_connect_failure) use it.
 */
#ifndef MQC_TLS_H
#define MQC_TLS_H

#include <stddef.h>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

/**
 * A client context for host. cafile NULL: the system's store. certfile and keyfile go together.
 * @return the context, or NULL with err saying which file or step failed.
 */
SSL_CTX *mqc_tls_client_ctx(const char *cafile, const char *certfile, const char *keyfile,
    const char *host, char *err, size_t errlen);

/** Server Name Indication for host on ssl, unless host is an IP address (SNI is for names). */
void mqc_tls_set_sni(SSL *ssl, const char *host);

/** This connection's server: its name (or IP address) is what the certificate must hold, and
 *  a name is sent as SNI - for clients whose connections go to several servers on one context.
 *  0, or -1 when OpenSSL cannot take it. */
int mqc_tls_set_peer(SSL *ssl, const char *host);

/**
 * Why a handshake on ssl failed, in words: "certificate verification failed: hostname mismatch"
 * when the peer's certificate was refused, else OpenSSL's first queued error (or "the handshake
 * failed" when it queued none). Takes the error from this thread's OpenSSL queue.
 */
void mqc_tls_failure(const SSL *ssl, char *out, size_t len);

/**
 * The last certificate a context of mqc_tls_client_ctx refused on this thread, in words
 * ("certificate verification failed: IP address mismatch"), or NULL; mqc_tls_clear_refusal()
 * forgets it. For clients whose SSL object another library owns and frees on failure
 * (libmosquitto): their handshake runs on the caller's thread.
 */
const char *mqc_tls_last_refusal(void);
void mqc_tls_clear_refusal(void);

#endif
