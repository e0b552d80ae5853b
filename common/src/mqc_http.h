/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_http.h - a raw HTTP/1.0 client for tests and the bench reading the probe: every call has a
 * deadline, and the request is sent byte for byte as given (so tests can send garbage).
 */
#ifndef MQC_HTTP_H
#define MQC_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct mqc_http_response {
	int status;    /* -1 when no status line came */
	char *headers; /* the raw header block */
	char *body;    /* NUL-terminated */
	size_t body_len;
};

/** Send request to 127.0.0.1:port, read until the server closes, all within timeout_ms (one
 *  deadline for the whole call, however slowly the server answers). Returns 0, or -1 on a
 *  connection failure, the deadline, out of memory or a response over 64 MiB. */
int mqc_http_raw(
    int port, const char *request, size_t len, int timeout_ms, struct mqc_http_response *out);

/** GET path (HTTP/1.0, Connection: close), 5 s in all. -1 also for a path over 400 bytes. */
int mqc_http_get(int port, const char *path, struct mqc_http_response *out);

void mqc_http_response_free(struct mqc_http_response *r);

/**
 * The value of a Prometheus sample line "name value" (name may include {labels}) in text, or
 * -1 when absent.
 */
double mqc_prom_value(const char *text, const char *name);

/**
 * Whether a Prometheus text exposition names one series twice (the same metric name and labels on
 * two sample lines: a real Prometheus keeps one and drops the other, and promtool does not say).
 * Returns true with the series in out (truncated to len), or false.
 */
bool mqc_prom_duplicate(const char *text, char *out, size_t len);

#endif
