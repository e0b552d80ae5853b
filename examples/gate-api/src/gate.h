/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * gate.h - gate-api: an HTTP front for device commands ("a user clicks Open Gate; the server
 * sends a command and waits for Success"), with a pooled and a connect-per-request route.
 *
 * gate_core.c holds what needs no network (routes, validation, error mapping, JSON, metrics);
 * conn.c, command.c and worker.c the event-driven HTTP server (server.h, worker.h); main.c the
 * command line and the lifecycle.
 */
#ifndef GATE_H
#define GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mqttpool.h"

#define GATE_NAME_MAX 64 /* device ids and command names */

enum gate_backend { GATE_POOL, GATE_NAIVE, GATE_BACKENDS };

enum gate_route_kind { GATE_COMMAND, GATE_HEALTH, GATE_METRICS };

/* A parsed request line. */
struct gate_route {
	enum gate_route_kind kind;
	enum gate_backend backend;
	char device[GATE_NAME_MAX + 1];
	char command[GATE_NAME_MAX + 1];
};

/**
 * Route method and path (the raw path, still percent-encoded: each segment is decoded here, so
 * "%2F" cannot split a segment and "%00" is seen, not truncated).
 *   POST /devices/{id}/commands/{name}        the pool
 *   POST /naive/devices/{id}/commands/{name}  a connection per request
 *   GET  /healthz, GET /metrics
 * @return 0 with *out filled, or an HTTP status (400 bad id or name, 404 no such route, 405 wrong
 *         method) with a message for the client in why (why_len bytes).
 */
int gate_route_parse(
    const char *method, const char *path, struct gate_route *out, char *why, size_t why_len);

/** NULL when name is a valid device id or command name, else why not (a static string). */
const char *gate_name_problem(const char *name, size_t len);

/* The gateway's own result beside the mqp_err codes: the route cannot reach this broker (the
 * naive route's libmosquitto has no WebSockets). 501 not_supported. */
#define GATE_ENOTSUPPORTED 1001

/** The HTTP status for an mqp_err (or GATE_ENOTSUPPORTED) from a request. */
int gate_http_status(int mqp_err);

/** A stable machine-readable code for an mqp_err ("device_timeout", "broker_unreachable", ...). */
const char *gate_error_code(int mqp_err);

/**
 * The 200 body: {"device":..., "command":..., "route":"pool"|"naive", "latency_ms":...,
 * "reply":...}, where reply is the device's payload embedded as JSON when it parses as JSON and
 * as a JSON string otherwise; a payload that is not UTF-8 (or holds a NUL) is "reply_base64".
 * Always valid UTF-8 JSON. Returns a malloc'd string or NULL (out of memory).
 */
char *gate_reply_json(
    const struct gate_route *route, const void *payload, size_t len, uint64_t latency_ns);

/** An error body: {"error": code, "message": message}. malloc'd, or NULL. */
char *gate_error_json(const char *code, const char *message);

/** Nonzero when body (len bytes) is empty or one JSON value, in UTF-8, with no NUL (not even
 *  escaped as \u0000: the command would be cut there). */
bool gate_body_ok(const char *body, size_t len);

/* Responses by route and status, and how long successful commands took, for /metrics. */
enum { GATE_STATUS_SLOTS = 12, GATE_DURATION_BUCKETS = 15 };
struct gate_counters {
	atomic_uint_fast64_t responses[GATE_BACKENDS][GATE_STATUS_SLOTS];
	/* gate_api_command_duration_seconds: a Prometheus histogram per route (buckets not
	 * cumulative here; the exposition adds them up) */
	atomic_uint_fast64_t duration_buckets[GATE_BACKENDS][GATE_DURATION_BUCKETS + 1];
	atomic_uint_fast64_t duration_ns_sum[GATE_BACKENDS];
	atomic_uint_fast64_t abandoned[GATE_BACKENDS]; /* the client went away: request cancelled */
	atomic_uint pending;                           /* commands being served now */
};

void gate_count(struct gate_counters *c, enum gate_backend b, int status);

/** A successful command of route b that took ns: into the duration histogram. */
void gate_observe_duration(struct gate_counters *c, enum gate_backend b, uint64_t ns);

/**
 * The Prometheus text exposition of the gateway's counters and the statistics of its pools (n of
 * them, added up; NULL entries are skipped). Returns a malloc'd string or NULL.
 */
char *gate_metrics_text(const struct gate_counters *c, mqp_pool *const *pools, size_t n);

#endif
