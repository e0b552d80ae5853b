/*
 * tb_http.h - a raw HTTP/1.0 client for tests of the probe's endpoint: every call has a
 * deadline, and the request is sent byte for byte as given (so tests can send garbage).
 */
#ifndef TB_HTTP_H
#define TB_HTTP_H

#include <stddef.h>

struct tb_http_response {
	int status;    /* -1 when no status line came */
	char *headers; /* the raw header block */
	char *body;    /* NUL-terminated */
	size_t body_len;
};

/** Send request to 127.0.0.1:port, read until the server closes. Returns 0, or -1 on a
 *  connection failure or timeout. */
int tb_http_raw(
    int port, const char *request, size_t len, int timeout_ms, struct tb_http_response *out);

/** GET path (HTTP/1.0, Connection: close). */
int tb_http_get(int port, const char *path, struct tb_http_response *out);

void tb_http_response_free(struct tb_http_response *r);

/**
 * The value of a Prometheus sample line "name value" (name may include {labels}) in text, or
 * -1 when absent.
 */
double tb_prom_value(const char *text, const char *name);

#endif
