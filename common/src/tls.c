/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tls.c - the project's TLS client context, and why a handshake failed (mqc_tls.h).
 */
#include "mqc_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>

static _Thread_local char refusal[200];

/* OpenSSL's verification result unchanged; a refusal is remembered in words for this thread. */
static int remember_refusal(int ok, X509_STORE_CTX *store)
{
	if (!ok)
		snprintf(refusal, sizeof refusal, "certificate verification failed: %s",
		    X509_verify_cert_error_string(X509_STORE_CTX_get_error(store)));
	return ok;
}

const char *mqc_tls_last_refusal(void)
{
	return refusal[0] ? refusal : NULL;
}

void mqc_tls_clear_refusal(void)
{
	refusal[0] = '\0';
}

void mqc_tls_failure(const SSL *ssl, char *out, size_t len)
{
	long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
	unsigned long e = ERR_get_error();
	if (v != X509_V_OK)
		snprintf(out, len, "certificate verification failed: %s", X509_verify_cert_error_string(v));
	else if (e)
		ERR_error_string_n(e, out, len);
	else
		snprintf(out, len, "the handshake failed");
}

SSL_CTX *mqc_tls_client_ctx(const char *cafile, const char *certfile, const char *keyfile,
    const char *host, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char why[256] = "";
	if (!ctx)
		goto ssl_error;
	/* No cafile: the system's trust store, as a browser or curl would use. */
	if ((cafile ? SSL_CTX_load_verify_locations(ctx, cafile, NULL)
	            : SSL_CTX_set_default_verify_paths(ctx))
	    != 1)
		goto ssl_error;
	if (certfile
	    && (SSL_CTX_use_certificate_chain_file(ctx, certfile) != 1
	        || SSL_CTX_use_PrivateKey_file(ctx, keyfile, SSL_FILETYPE_PEM) != 1))
		goto ssl_error;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, remember_refusal);
	X509_VERIFY_PARAM *param = SSL_CTX_get0_param(ctx);
	unsigned char ip[16];
	if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
		X509_VERIFY_PARAM_set1_ip_asc(param, host);
	else
		X509_VERIFY_PARAM_set1_host(param, host, 0);
	return ctx;
ssl_error:
	ERR_error_string_n(ERR_get_error(), why, sizeof why);
	if (err && errlen) /* never into why itself: snprintf must not read what it writes */
		snprintf(err, errlen, "TLS setup failed (cafile %s, certfile %s): %s",
		    cafile ? cafile : "the system's", certfile ? certfile : "none", why);
	SSL_CTX_free(ctx);
	return NULL;
}

int mqc_tls_set_peer(SSL *ssl, const char *host)
{
	X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
	unsigned char ip[16];
	if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
		return X509_VERIFY_PARAM_set1_ip_asc(param, host) == 1 ? 0 : -1;
	if (X509_VERIFY_PARAM_set1_host(param, host, 0) != 1)
		return -1;
	mqc_tls_set_sni(ssl, host);
	return 0;
}

void mqc_tls_set_sni(SSL *ssl, const char *host)
{
	unsigned char ip[16];
	if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
		return;
	/* SSL_set_tlsext_host_name is a macro that casts its name to void * (OpenSSL copies it) */
	char name[256];
	if (snprintf(name, sizeof name, "%s", host) < (int)sizeof name)
		SSL_set_tlsext_host_name(ssl, name);
}
