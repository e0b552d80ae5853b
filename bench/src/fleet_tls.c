/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_tls.c - TLS for a fleet's connections: one context (CA verification, a certificate all
 * clients share), each connection's SNI, host check, certificate (a template, or --cert-dir) and
 * session (--tls-resume), and a non-blocking handshake whose time and CPU are kept apart for full
 * and resumed handshakes.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_tls.h"

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return mqc_ts_to_ns(&ts);
}

enum fleet_tls_step fleet_tls_step(struct fleet *r, struct attempt *a)
{
	uint64_t c0 = thread_cpu_ns();
	ERR_clear_error(); /* the queue holds this handshake's errors only */
	int rc = SSL_connect(a->ssl);
	a->tls_cpu += thread_cpu_ns() - c0;
	if (rc == 1) {
		uint64_t took = mqc_now_ns() - a->tls_t0;
		if (SSL_session_reused(a->ssl)) {
			mqc_hist_record(&r->tls_resumed, took);
			r->tls_resumed_cpu += a->tls_cpu;
		} else {
			mqc_hist_record(&r->tls_full, took);
			r->tls_full_cpu += a->tls_cpu;
		}
		return FLEET_TLS_DONE;
	}
	int e = SSL_get_error(a->ssl, rc);
	if (e == SSL_ERROR_WANT_READ)
		return FLEET_TLS_WANT_READ;
	if (e == SSL_ERROR_WANT_WRITE)
		return FLEET_TLS_WANT_WRITE;
	if (!r->tls_why[0]) /* the first says why; the count says how often */
		mqc_tls_failure(a->ssl, r->tls_why, sizeof r->tls_why);
	return FLEET_TLS_FAILED;
}

void fleet_tls_keep_session(struct fleet *r, struct attempt *a)
{
	if (!r->sessions || !a->ssl)
		return;
	SSL_SESSION *s = SSL_get1_session(a->ssl);
	uint64_t i = fleet_identity_slot(r, a->k);
	if (s && SSL_SESSION_is_resumable(s)) {
		SSL_SESSION_free(r->sessions[i]);
		r->sessions[i] = s;
	} else {
		SSL_SESSION_free(s);
	}
}

int fleet_tls_begin(struct fleet *r, struct attempt *a)
{
	const struct bench_opts *o = r->o;
	a->ssl = SSL_new(r->ctx);
	if (!a->ssl)
		return -1;
	SSL_set_fd(a->ssl, a->fd);
	const struct mqc_url *u
	    = o->net.n_nodes > 1 ? &o->net.nodes[a->node % o->net.n_nodes] : &o->net.conn.url;
	if (mqc_tls_set_peer(a->ssl, u->host) != 0)
		return -1;
	char cert[4096], key[4096];
	const char *c = NULL, *k = NULL;
	if (r->ncerts) {
		c = r->cert_files[a->k % r->ncerts];
		size_t n = strlen(c);
		snprintf(key, sizeof key, "%.*s.key", (int)(n - 4), c); /* NAME.crt -> NAME.key */
		k = key;
	} else if (o->net.conn.cert && bench_identity_varies(o->net.conn.cert)) {
		c = fleet_identity(o->net.conn.cert, a->k, cert, sizeof cert);
		k = fleet_identity(o->net.conn.key, a->k, key, sizeof key);
	}
	if (c
	    && (!k || SSL_use_certificate_chain_file(a->ssl, c) != 1
	        || SSL_use_PrivateKey_file(a->ssl, k, SSL_FILETYPE_PEM) != 1)) {
		static bool said;
		if (!said)
			fprintf(stderr, "mqbench: client %llu: cannot use certificate %s with key %s\n",
			    (unsigned long long)a->k, c, k ? k : "?");
		said = true;
		return -1;
	}
	if (r->sessions && r->sessions[fleet_identity_slot(r, a->k)])
		SSL_set_session(a->ssl, r->sessions[fleet_identity_slot(r, a->k)]);
	a->tls_t0 = mqc_now_ns();
	a->tls_cpu = 0;
	return 0;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int fleet_tls_load_cert_dir(struct fleet *r)
{
	const char *dir = r->o->cert_dir;
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "mqbench: --cert-dir %s: %s\n", dir, strerror(errno));
		return -1;
	}
	struct dirent *e;
	unsigned cap = 0;
	int rc = 0;
	while ((e = readdir(d)) && rc == 0) {
		size_t n = strlen(e->d_name);
		if (n < 5 || strcmp(e->d_name + n - 4, ".crt") != 0)
			continue;
		char key[4096];
		snprintf(key, sizeof key, "%s/%.*s.key", dir, (int)(n - 4), e->d_name);
		if (access(key, R_OK) != 0)
			continue;
		if (r->ncerts == cap) {
			cap = cap ? 2 * cap : 64;
			char **grown = realloc(r->cert_files, cap * sizeof *grown);
			if (!grown) {
				rc = -1;
				break;
			}
			r->cert_files = grown;
		}
		if (asprintf(&r->cert_files[r->ncerts], "%s/%s", dir, e->d_name) < 0)
			rc = -1;
		else
			r->ncerts++;
	}
	closedir(d);
	if (rc == 0 && r->ncerts == 0) {
		fprintf(stderr, "mqbench: --cert-dir %s: no NAME.crt with a NAME.key beside it\n", dir);
		return -1;
	}
	if (rc == 0)
		qsort(r->cert_files, r->ncerts, sizeof *r->cert_files, name_cmp);
	return rc;
}

SSL_CTX *fleet_tls_ctx(const struct bench_opts *o)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	bool shared_cert = o->net.conn.cert && !bench_identity_varies(o->net.conn.cert);
	if (!ctx || SSL_CTX_load_verify_locations(ctx, o->net.conn.cafile, NULL) != 1
	    || (shared_cert
	        && (SSL_CTX_use_certificate_chain_file(ctx, o->net.conn.cert) != 1
	            || SSL_CTX_use_PrivateKey_file(ctx, o->net.conn.key, SSL_FILETYPE_PEM) != 1))) {
		char buf[256];
		ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
		fprintf(stderr, "mqbench: TLS setup failed: %s (check --cafile, --cert, --key)\n", buf);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL); /* plus SSL_set1_host per connection */
	if (o->tls_resume) /* sessions are kept per client (SSL_get1_session), not by OpenSSL */
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
	return ctx;
}

/* The TLS handshakes, full and resumed side by side: time and the client's CPU each. */
void fleet_print_tls(const struct fleet *r)
{
	if (!r->ctx)
		return;
	const struct {
		const char *name;
		const struct mqc_hist *h;
		uint64_t cpu;
	} kinds[] = { { "full", &r->tls_full, r->tls_full_cpu },
		{ "resumed", &r->tls_resumed, r->tls_resumed_cpu } };
	for (int i = 0; i < 2; i++) {
		char p50[24], p99[24];
		if (!kinds[i].h->count) {
			printf("tls handshakes %-7s 0%s\n", kinds[i].name,
			    i && r->o->tls_resume ? " (the broker resumed none)" : "");
			continue;
		}
		printf("tls handshakes %-7s %llu   p50 %s p99 %s   client CPU %.0fus each\n", kinds[i].name,
		    (unsigned long long)kinds[i].h->count,
		    bench_fmt_ns(mqc_hist_percentile(kinds[i].h, 50), p50, 24),
		    bench_fmt_ns(mqc_hist_percentile(kinds[i].h, 99), p99, 24),
		    (double)kinds[i].cpu / 1e3 / (double)kinds[i].h->count);
	}
}

void fleet_add_tls_json(cJSON *root, const struct fleet *r)
{
	if (!r->ctx)
		return;
	cJSON *t = cJSON_AddObjectToObject(root, "tls_handshakes");
	cJSON_AddNumberToObject(t, "full", (double)r->tls_full.count);
	cJSON_AddNumberToObject(t, "resumed", (double)r->tls_resumed.count);
	cJSON_AddNumberToObject(t, "full_client_cpu_ns", (double)r->tls_full_cpu);
	cJSON_AddNumberToObject(t, "resumed_client_cpu_ns", (double)r->tls_resumed_cpu);
}
