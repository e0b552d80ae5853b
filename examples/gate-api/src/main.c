/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * gate-api - POST /devices/{id}/commands/{name}: send a command to a device over MQTT and answer
 * with its reply as JSON, through libmqttpool (or, on /naive/..., a connection per request).
 *
 * Server model: libmicrohttpd with a thread per HTTP connection, each calling the pool's
 * blocking API. See README.md for why not the async API with suspend/resume.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <mosquitto.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gate.h"
#include "mqc_cli.h"
#include "mqc_clock.h"
#include "mqc_mhd.h"
#include "mqc_strutil.h"

struct gate {
	mqp_pool *pool;
	struct mqc_conn_opts naive; /* the /naive route's connections */
	const char *topic_prefix;
	unsigned timeout_ms;
	int qos;
	size_t max_body, max_reply;
	unsigned max_pending;
	struct mqc_mhd_deadline *deadline; /* for receiving each request: mqc_mhd.h */
	atomic_bool stopping;
	atomic_uint active; /* HTTP requests from their headers until their response is sent */
	struct gate_counters counters;
};

/* Per HTTP request: the route and the body as it arrives. */
struct call {
	int status; /* nonzero: already decided (bad route) */
	char why[256];
	struct gate_route route;
	char *body;
	size_t len;
	bool too_big;
};

static enum MHD_Result send_text(
    struct MHD_Connection *conn, int status, const char *type, char *text, bool retry_after)
{
	if (!text)
		return MHD_NO; /* out of memory: drop the connection */
	struct MHD_Response *r
	    = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == 405)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, GET, HEAD");
	if (retry_after)
		MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct gate *g, struct MHD_Connection *conn,
    const struct gate_route *route, int status, const char *code, const char *message)
{
	if (route && route->kind == GATE_COMMAND)
		gate_count(&g->counters, route->backend, status);
	return send_text(
	    conn, status, "application/json", gate_error_json(code, message), status == 503);
}

static enum MHD_Result run_command(struct gate *g, struct MHD_Connection *conn, struct call *c)
{
	const struct gate_route *rt = &c->route;
	if (c->too_big) {
		char why[96];
		snprintf(why, sizeof why, "the body is larger than %zu bytes", g->max_body);
		return send_error(g, conn, rt, 413, "body_too_large", why);
	}
	if (!gate_body_ok(c->body, c->len))
		return send_error(g, conn, rt, 400, "bad_json",
		    "the body must be empty or one JSON value, in UTF-8, without NUL");
	if (atomic_load(&g->stopping))
		return send_error(g, conn, rt, 503, "shutting_down", "the gateway is shutting down");
	/* Admission: beyond max_pending the pool is exhausted; say so now instead of queueing. */
	if (atomic_fetch_add(&g->counters.pending, 1) >= g->max_pending) {
		atomic_fetch_sub(&g->counters.pending, 1);
		return send_error(
		    g, conn, rt, 503, "pool_exhausted", "too many commands in flight; retry shortly");
	}
	char topic[3 * GATE_NAME_MAX + 128];
	snprintf(topic, sizeof topic, "%s/%s/commands/%s", g->topic_prefix, rt->device, rt->command);
	struct mqp_reply reply;
	char why[256] = "";
	uint64_t t0 = mqc_now_ns();
	int rc = rt->backend == GATE_POOL
	    ? (int)mqp_pool_request(g->pool, topic, c->body, c->len, g->qos, g->timeout_ms, &reply)
	    : gate_naive_request(
	        &g->naive, topic, c->body, c->len, g->qos, g->timeout_ms, &reply, why, sizeof why);
	uint64_t took = mqc_now_ns() - t0;
	atomic_fetch_sub(&g->counters.pending, 1);
	if (rc == MQP_OK && reply.len > g->max_reply) {
		mqp_reply_free(&reply);
		snprintf(why, sizeof why, "device %s answered %s with more than %zu bytes (--max-reply)",
		    rt->device, rt->command, g->max_reply);
		return send_error(g, conn, rt, 502, "reply_too_large", why);
	}
	if (rc == MQP_OK) {
		gate_observe_duration(&g->counters, rt->backend, took);
		gate_count(&g->counters, rt->backend, 200);
		char *text = gate_reply_json(rt, reply.payload, reply.len, took);
		mqp_reply_free(&reply);
		return send_text(conn, 200, "application/json", text, false);
	}
	if (rc == MQP_ETIMEDOUT)
		snprintf(why, sizeof why, "device %s did not answer %s within %u ms", rt->device,
		    rt->command, g->timeout_ms);
	else if ((rc == MQP_ECONNECT || rc == MQP_ECONNLOST) && rt->backend == GATE_POOL)
		mqp_pool_last_error(g->pool, why, sizeof why);
	if (!why[0])
		snprintf(why, sizeof why, "%s", mqp_strerror(rc));
	return send_error(g, conn, rt, gate_http_status(rc), gate_error_code(rc), why);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload_data, size_t *upload_data_size,
    void **state)
{
	(void)version;
	struct gate *g = cls;
	struct call *c = *state;
	if (!c) { /* the headers are in: route now, read the body in the next calls */
		c = calloc(1, sizeof *c);
		if (!c)
			return MHD_NO;
		*state = c;
		atomic_fetch_add(&g->active, 1);
		int st = gate_route_parse(method, url, &c->route, c->why, sizeof c->why);
		c->status = st;
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		uint64_t declared = 0;
		if (st == 0 && cl && mqc_parse_u64(cl, 0, UINT64_MAX, &declared) == 0
		    && declared > g->max_body) {
			c->too_big = true; /* answer now: no need to read what we refuse */
			return run_command(g, conn, c);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (c->status || c->too_big)
			return MHD_YES; /* discard */
		/* Past the limit: stop reading now (the rest could be endless). libmicrohttpd cannot
		 * answer in the middle of a body, so a chunked body gets its 413 counted and the
		 * connection closed; a declared Content-Length was answered before reading. */
		if (c->len + n > g->max_body) {
			c->too_big = true;
			free(c->body);
			c->body = NULL;
			c->len = 0;
			return run_command(g, conn, c);
		}
		char *grown = realloc(c->body, c->len + n + 1);
		if (!grown)
			return MHD_NO;
		memcpy(grown + c->len, upload_data, n);
		c->body = grown;
		c->len += n;
		c->body[c->len] = '\0';
		return MHD_YES;
	}
	if (c->too_big)
		return MHD_YES;                         /* answered (413) while the body came in */
	mqc_mhd_deadline_disarm(g->deadline, conn); /* the request is in: its deadline is met */
	if (c->status) {
		const char *code = c->status == 400 ? "bad_request"
		    : c->status == 404              ? "not_found"
		                                    : "method_not_allowed";
		return send_error(g, conn, c->status == 400 ? &c->route : NULL, c->status, code, c->why);
	}
	switch (c->route.kind) {
		case GATE_HEALTH: {
			struct mqp_pool_stats s;
			mqp_pool_stats(g->pool, &s, sizeof s);
			bool ok = s.ready > 0;
			char *text
			    = strdup(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"no broker connection\"}");
			return send_text(conn, ok ? 200 : 503, "application/json", text, false);
		}
		case GATE_METRICS:
			return send_text(conn, 200, "text/plain; version=0.0.4",
			    gate_metrics_text(&g->counters, g->pool), false);
		case GATE_COMMAND:
		default:
			return run_command(g, conn, c);
	}
}

static void on_completed(
    void *cls, struct MHD_Connection *conn, void **state, enum MHD_RequestTerminationCode why)
{
	(void)why;
	struct gate *g = cls;
	struct call *c = *state;
	mqc_mhd_deadline_arm(g->deadline, conn); /* the next request on this connection */
	if (c) {
		free(c->body);
		free(c);
		atomic_fetch_sub(&g->active, 1);
	}
	*state = NULL;
}

/* libmicrohttpd's messages, at most one a second: past the connection limit it has one for every
 * refused connection, and a flood of them must not become a flood of log lines. */
static void log_limited(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t last_ns;
	static unsigned long suppressed;
	uint64_t now = mqc_now_ns();
	pthread_mutex_lock(&lock);
	if (last_ns && now - last_ns < MQC_NS_PER_S) {
		suppressed++;
		pthread_mutex_unlock(&lock);
		return;
	}
	if (suppressed)
		fprintf(stderr, "mqp-gate-api: (%lu more HTTP server messages in the last second)\n",
		    suppressed);
	suppressed = 0;
	last_ns = now;
	fprintf(stderr, "mqp-gate-api: ");
	vfprintf(stderr, fmt, ap);
	pthread_mutex_unlock(&lock);
}

/* libmicrohttpd must not decode the path: gate_route_parse decodes each segment itself. */
static size_t keep_escaped(void *cls, struct MHD_Connection *conn, char *s)
{
	(void)cls;
	(void)conn;
	return strlen(s);
}

enum {
	O_LISTEN = 'l',
	O_TOPIC_PREFIX = MQC_CLI_LONG,
	O_TIMEOUT,
	O_POOL_MAX,
	O_POOL_MIN,
	O_MAX_BODY,
	O_MAX_REPLY,
	O_REQUEST_DEADLINE,
	O_MAX_PER_ADDRESS,
	O_MAX_PENDING,
	O_THREADS,
	O_DRAIN,
};

static const struct mqc_cli_opt options[] = {
	{ "listen", O_LISTEN, "ADDR:PORT",
	    "IPv4 address and port to serve on (default 127.0.0.1:8080;\nport 0 picks a free one); "
	    "prints GATE_API_READY url=... when\nready",
	    0 },
	{ "topic-prefix", O_TOPIC_PREFIX, "P",
	    "commands go to P/{id}/commands/{name} (default devices)", 0 },
	{ "timeout", O_TIMEOUT, "D", "how long to wait for a device (default 5s; 250ms, 2s, ...)", 0 },
	{ "pool-max", O_POOL_MAX, "N", "pool connections at most (default 10)", 0 },
	{ "pool-min", O_POOL_MIN, "N", "pool connections kept warm (default 2)", 0 },
	{ "max-body", O_MAX_BODY, "BYTES",
	    "a larger declared body gets 413 before it is read; a chunked\nbody is cut off "
	    "(connection closed) once it passes it\n(default 16384)",
	    0 },
	{ "max-reply", O_MAX_REPLY, "BYTES",
	    "a larger device reply is dropped: 502 reply_too_large\n(default 1M)", 0 },
	{ "request-deadline", O_REQUEST_DEADLINE, "D",
	    "headers and body must be in within D of the request's start\n(or of the last response "
	    "on a kept-alive connection), however\nslowly they trickle; then the connection is "
	    "closed (default 10s)",
	    0 },
	{ "max-per-address", O_MAX_PER_ADDRESS, "N",
	    "HTTP connections from one client address (default 64)", 0 },
	{ "max-pending", O_MAX_PENDING, "N",
	    "commands in flight before 503 pool_exhausted (default 256)", 0 },
	{ "threads", O_THREADS, "N", "HTTP connections served at once (default 512)", 0 },
	{ "drain", O_DRAIN, "D",
	    "on SIGINT/SIGTERM: stop accepting, finish commands in\nflight for at most D (default "
	    "10s), then exit 0",
	    0 },
	MQC_CLI_END,
};

/* What the command line sets besides the connection. */
struct settings {
	struct gate *g;
	struct mqp_pool_options *po;
	const char *listen;
	uint64_t request_deadline_ns, per_address, drain_ns, threads;
};

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct settings *st = cli->ctx;
	struct gate *g = st->g;
	uint64_t v;
	switch (key) {
		case O_LISTEN:
			st->listen = value;
			return 0;
		case O_TOPIC_PREFIX:
			if (!*value || strpbrk(value, "+#") || value[strlen(value) - 1] == '/')
				return mqc_cli_bad(cli, name, value, "a topic without wildcards or a trailing '/'");
			g->topic_prefix = value;
			return 0;
		case O_TIMEOUT:
			if (mqc_parse_duration(value, MQC_NS_PER_MS, &v) != 0 || v < MQC_NS_PER_MS
			    || v > 600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration from 1ms to 600s");
			g->timeout_ms = (unsigned)(v / MQC_NS_PER_MS);
			return 0;
		case O_POOL_MAX:
			if (mqc_parse_u64(value, 1, 1000, &v) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 1000");
			st->po->max_size = (unsigned)v;
			return 0;
		case O_POOL_MIN:
			if (mqc_parse_u64(value, 0, 1000, &v) != 0)
				return mqc_cli_bad(cli, name, value, "0 to 1000");
			st->po->min_size = (unsigned)v;
			return 0;
		case O_MAX_BODY:
		case O_MAX_REPLY:
			if (mqc_parse_count(value, 256ULL << 20, &v) != 0)
				return mqc_cli_bad(cli, name, value, "a byte count up to 256M");
			*(key == O_MAX_BODY ? &g->max_body : &g->max_reply) = (size_t)v;
			return 0;
		case O_REQUEST_DEADLINE:
			if (mqc_parse_duration(value, MQC_NS_PER_S, &st->request_deadline_ns) != 0
			    || st->request_deadline_ns < 100 * MQC_NS_PER_MS
			    || st->request_deadline_ns > 3600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration from 100ms to 1h");
			return 0;
		case O_MAX_PER_ADDRESS:
			if (mqc_parse_u64(value, 1, 100000, &st->per_address) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 100000");
			return 0;
		case O_MAX_PENDING:
			if (mqc_parse_u64(value, 1, 1000000, &v) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 1000000");
			g->max_pending = (unsigned)v;
			return 0;
		case O_THREADS:
			if (mqc_parse_u64(value, 1, 10000, &st->threads) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 10000");
			return 0;
		case O_DRAIN:
			if (mqc_parse_duration(value, MQC_NS_PER_S, &st->drain_ns) != 0
			    || st->drain_ns > 3600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration up to 1h");
			return 0;
		default:
			return -1;
	}
}

static int parse_listen(const char *text, struct sockaddr_in *sa)
{
	const char *colon = strrchr(text, ':');
	char host[64];
	uint64_t port;
	if (!colon || (size_t)(colon - text) >= sizeof host
	    || mqc_parse_u64(colon + 1, 0, 65535, &port) != 0)
		return -1;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	*sa = (struct sockaddr_in) { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (!host[0])
		strcpy(host, "0.0.0.0");
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	static struct gate g = { .topic_prefix = "devices",
		.timeout_ms = 5000,
		.max_body = 16384,
		.max_reply = (size_t)1 << 20,
		.max_pending = 256 };
	static struct mqc_cli_conn conn = { .qos = 1, .conn.id_prefix = "gate" };
	struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
	struct settings st = { .g = &g,
		.po = &po,
		.listen = "127.0.0.1:8080",
		.request_deadline_ns = 10 * MQC_NS_PER_S,
		.per_address = 64,
		.drain_ns = 10 * MQC_NS_PER_S,
		.threads = 512 };
	const struct mqc_cli cli = {
		.prog = "mqp-gate-api",
		.synopsis = "--broker URL [OPTIONS]",
		.about = "HTTP gateway: POST /devices/{id}/commands/{name} publishes the body (empty or "
		         "JSON) to\nPREFIX/{id}/commands/{name} as an MQTT v5 request and answers with "
		         "the device's reply.\n"
		         "  POST /devices/{id}/commands/{name}        through libmqttpool (warm "
		         "connections)\n"
		         "  POST /naive/devices/{id}/commands/{name}  a new MQTT connection per request\n"
		         "  GET /healthz, GET /metrics (Prometheus: responses, latency, the pool's "
		         "statistics)\n"
		         "Statuses: 200 reply, 400 bad id/name/body, 403 the broker refused the command, "
		         "404,\n405, 413 body too large, 502 broker unreachable, 503 pool exhausted or "
		         "shutting down,\n504 device timeout.",
		.version = "mqp-gate-api " MQTTPOOL_VERSION,
		.opts = options,
		.conn_opts = MQC_CLI_BROKER | MQC_CLI_QOS,
		.conn = &conn,
		.on_option = on_option,
		.ctx = &st,
	};
	int parsed = mqc_cli_parse(&cli, argc, argv);
	if (parsed != 0)
		return parsed == 1 ? 0 : 2;
	g.qos = conn.qos;
	g.naive = conn.conn;
	po.username = conn.conn.username;
	po.password = conn.conn.password;
	po.cafile = conn.conn.cafile;
	po.certfile = conn.conn.cert;
	po.keyfile = conn.conn.key;
	if (po.min_size > po.max_size)
		po.min_size = po.max_size;
	const char *broker = conn.broker, *listen = st.listen;
	uint64_t drain_ns = st.drain_ns, threads = st.threads, per_address = st.per_address;
	uint64_t request_deadline_ns = st.request_deadline_ns;
	char err[256];
	struct sockaddr_in sa;
	if (parse_listen(listen, &sa) != 0) {
		mqc_cli_bad(&cli, "--listen", listen, "IPV4:PORT, e.g. 127.0.0.1:8080 or :0");
		return 2;
	}

	/* Signals are taken by this thread only (sigwait below): block them before any thread. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	mosquitto_lib_init();
	int rc = mqp_pool_new(broker, &po, &g.pool, err, sizeof err);
	if (rc != MQP_OK) {
		fprintf(stderr, "mqp-gate-api: cannot create the pool: %s: %s\n", mqp_strerror(rc), err);
		return 1;
	}
	g.deadline
	    = mqc_mhd_deadline_new((unsigned)threads, (unsigned)(request_deadline_ns / MQC_NS_PER_MS));
	struct MHD_Daemon *d = !g.deadline
	    ? NULL
	    : MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD
	            | MHD_USE_ERROR_LOG | MHD_USE_POLL | MHD_USE_ITC,
	        0, NULL, NULL, on_request, &g, MHD_OPTION_EXTERNAL_LOGGER, log_limited, NULL,
	        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
	        (unsigned)threads, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)per_address,
	        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(request_deadline_ns / MQC_NS_PER_S + 1),
	        MHD_OPTION_NOTIFY_COMPLETED, on_completed, &g, MHD_OPTION_NOTIFY_CONNECTION,
	        mqc_mhd_deadline_notify, g.deadline, MHD_OPTION_UNESCAPE_CALLBACK, keep_escaped, NULL,
	        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "mqp-gate-api: cannot listen on %s: %s\n", listen, strerror(errno));
		mqc_mhd_deadline_free(g.deadline);
		mqp_pool_destroy(g.pool);
		return 1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	char addr[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
	printf("GATE_API_READY url=http://%s:%u broker=%s\n", addr, info ? info->port : 0, broker);
	fflush(stdout);

	int sig = 0;
	sigwait(&stop, &sig);
	fprintf(stderr, "mqp-gate-api: %s: draining (at most %llu ms)\n", strsignal(sig),
	    (unsigned long long)(drain_ns / MQC_NS_PER_MS));
	atomic_store(&g.stopping, true);
	MHD_socket listen_fd = MHD_quiesce_daemon(d); /* no new connections */
	if (listen_fd != MHD_INVALID_SOCKET)
		close(listen_fd);
	/* Requests in flight finish and their responses go out (libmicrohttpd reports each one
	 * completed once it is sent); new ones on open connections get 503 shutting_down. */
	uint64_t deadline = mqc_now_ns() + drain_ns;
	while (atomic_load(&g.active) > 0 && mqc_now_ns() < deadline)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	uint64_t now = mqc_now_ns();
	int drained
	    = mqp_pool_drain(g.pool, now < deadline ? (unsigned)((deadline - now) / MQC_NS_PER_MS) : 0);
	if (atomic_load(&g.active) > 0)
		drained = MQP_ETIMEDOUT;
	MHD_stop_daemon(d); /* joins the connection threads */
	mqc_mhd_deadline_free(g.deadline);
	mqp_pool_destroy(g.pool);
	mosquitto_lib_cleanup();
	uint64_t ok[GATE_BACKENDS];
	for (int b = 0; b < GATE_BACKENDS; b++)
		ok[b] = atomic_load(&g.counters.responses[b][0]);
	fprintf(stderr, "mqp-gate-api: stopped%s; 200 responses: pool %llu, naive %llu\n",
	    drained == MQP_OK ? "" : " (the drain timed out)", (unsigned long long)ok[GATE_POOL],
	    (unsigned long long)ok[GATE_NAIVE]);
	return 0;
}
