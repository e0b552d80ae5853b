/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * gate-api - POST /devices/{id}/commands/{name}: send a command to a device over MQTT and answer
 * with its reply as JSON, through libmqttpool (or, on /naive/..., a connection per request).
 *
 * Server model: one event loop per worker (default: per core), each with its HTTP connections
 * and a pool on the same loop (server.h). This file: the command line, signals and the
 * lifecycle.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <mosquitto.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mqc_cli.h"
#include "mqc_clock.h"
#include "mqc_net.h"
#include "mqc_strutil.h"
#include "mqc_template.h"
#include "server.h"

enum {
	O_LISTEN = 'l',
	O_TOPIC_PREFIX = MQC_CLI_LONG,
	O_TIMEOUT,
	O_POOL_MAX,
	O_POOL_MIN,
	O_SILENCE,
	O_PING_TIMEOUT,
	O_MAX_BODY,
	O_MAX_REPLY,
	O_REQUEST_DEADLINE,
	O_MAX_PER_ADDRESS,
	O_MAX_PENDING,
	O_MAX_CONNECTIONS,
	O_WORKERS,
	O_DRAIN,
	O_REPLY_TEMPLATE,
};

static const struct mqc_cli_opt options[] = {
	{ "listen", O_LISTEN, "ADDR:PORT",
	    "address and port to serve on: IPV4:PORT, :PORT (every\nIPv4 address) or [IPV6]:PORT "
	    "([::]:PORT: every address);\ndefault 127.0.0.1:8080; port 0 picks a free one; prints\n"
	    "GATE_API_READY url=... when ready",
	    0 },
	{ "topic-prefix", O_TOPIC_PREFIX, "P",
	    "commands go to P/{id}/commands/{name} (default devices)", 0 },
	{ "timeout", O_TIMEOUT, "D", "how long to wait for a device (default 5s; 250ms, 2s, ...)", 0 },
	{ "pool-max", O_POOL_MAX, "N",
	    "pool connections at most (default 10), shared out among the\nworkers (each has its own "
	    "pool: at least one connection)",
	    0 },
	{ "pool-min", O_POOL_MIN, "N", "pool connections kept warm (default 2), shared out alike", 0 },
	{ "silence", O_SILENCE, "D",
	    "a pool connection with commands in flight that has received\nnothing for D sends a "
	    "PINGREQ (default 500ms; idle ones ping\nafter half the keepalive)",
	    0 },
	{ "ping-timeout", O_PING_TIMEOUT, "D",
	    "nothing back within D of that PINGREQ: the broker is\nunresponsive (hung, or the link "
	    "went dark) - its commands get\n502 with the reason, /healthz names it, the other "
	    "brokers serve\n(default 1s: noticed within about 1.6 s under load)",
	    0 },
	{ "max-body", O_MAX_BODY, "BYTES",
	    "a larger body gets 413 (a declared one before it is read, a\nchunked one the moment "
	    "it passes the limit), then the connection\ncloses (default 16384)",
	    0 },
	{ "max-reply", O_MAX_REPLY, "BYTES",
	    "a larger device reply is dropped: 502 reply_too_large\n(default 1M)", 0 },
	{ "request-deadline", O_REQUEST_DEADLINE, "D",
	    "headers and body must be in within D of the request's start\n(or of the last response "
	    "on a kept-alive connection), however\nslowly they trickle; then the connection is "
	    "closed (default 10s)",
	    0 },
	{ "max-per-address", O_MAX_PER_ADDRESS, "N",
	    "HTTP connections from one client address, all workers together\n(default: no limit "
	    "but --max-connections: behind a proxy or a load\nbalancer every connection comes from "
	    "one address; set it when\nclients reach the gateway directly)",
	    0 },
	{ "max-pending", O_MAX_PENDING, "N",
	    "commands in flight before 503 pool_exhausted (default 256)", 0 },
	{ "max-connections", O_MAX_CONNECTIONS, "N",
	    "open HTTP connections at most, all workers together (default\n10000, and no more than "
	    "the open-file limit allows); past it a\nnew connection is closed at once",
	    0 },
	{ "workers", O_WORKERS, "N",
	    "event loops, one thread each (default: one per CPU this process\nmay use - affinity "
	    "and a cgroup's CPU quota - at most --pool-max);\neach has its own pool and accepts on "
	    "the same port (SO_REUSEPORT)",
	    0 },
	{ "drain", O_DRAIN, "D",
	    "on SIGINT/SIGTERM: stop accepting, finish commands in\nflight for at most D (default "
	    "10s), then exit 0",
	    0 },
	{ "reply-topic-template", O_REPLY_TEMPLATE, "T",
	    "the legacy model (implied by --protocol 3.1.1): devices answer\non T, where {topic} is "
	    "the command topic and {1}..{9} its levels\n(default " MQC_REPLY_TEMPLATE_DEFAULT
	    "); one command per device at a time in the\npool, the first message on T is the reply",
	    0 },
	MQC_CLI_END,
};

/* Whether the reply template names only levels a command topic, P/ID/commands/CMD, has: the
 * gateway's commands all have the prefix's levels and three more. */
static bool reply_template_fits(const struct gate_config *g)
{
	char topic[512], reply[1024];
	snprintf(topic, sizeof topic, "%s/id/commands/cmd", g->topic_prefix);
	int levels = 1;
	for (const char *p = topic; *p; p++)
		levels += *p == '/';
	if (mqc_template_expand(g->reply_template, topic, reply, sizeof reply) >= 0)
		return true;
	fprintf(stderr,
	    "mqp-gate-api: --reply-topic-template '%s' names a level a command topic does not have: "
	    "commands are %s/{id}/commands/{command}, levels {1} to {%d}\n",
	    g->reply_template, g->topic_prefix, levels);
	return false;
}

/* What the command line sets besides the connection. */
struct settings {
	struct gate_config *g;
	struct mqp_pool_options *po;
	const char *listen;
	uint64_t request_deadline_ns, per_address, drain_ns, max_connections, workers;
};

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct settings *st = cli->ctx;
	struct gate_config *g = st->g;
	uint64_t v;
	switch (key) {
		case O_LISTEN:
			st->listen = value;
			return 0;
		case O_REPLY_TEMPLATE: {
			char why[160], expect[200];
			if (mqc_template_check(value, why, sizeof why) != 0) {
				snprintf(expect, sizeof expect, "a reply-topic template (%s)", why);
				return mqc_cli_bad(cli, name, value, expect);
			}
			g->reply_template = value;
			return 0;
		}
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
		case O_SILENCE:
		case O_PING_TIMEOUT:
			if (mqc_parse_duration(value, MQC_NS_PER_MS, &v) != 0 || v < 10 * MQC_NS_PER_MS
			    || v > 600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration from 10ms to 600s");
			*(key == O_SILENCE ? &st->po->silence_ms : &st->po->ping_timeout_ms)
			    = (unsigned)(v / MQC_NS_PER_MS);
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
		case O_MAX_CONNECTIONS:
			if (mqc_parse_u64(value, 1, 1000000, &st->max_connections) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 1000000");
			return 0;
		case O_WORKERS:
			if (mqc_parse_u64(value, 1, 256, &st->workers) != 0)
				return mqc_cli_bad(cli, name, value, "1 to 256");
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

/* Raise the soft limit on open files to the hard one (each HTTP connection is a descriptor),
 * and return how many connections fit: the limit less some for the pool, the broker connections
 * of the naive route, the loops and the standard streams. */
static uint64_t connections_that_fit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return UINT64_MAX;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX
	    : rl.rlim_cur > 1024            ? (uint64_t)rl.rlim_cur - 1024
	                                    : (uint64_t)rl.rlim_cur / 2;
}

/* The CPUs this process may use: its affinity mask, and a cgroup v2 CPU quota (a container's
 * --cpus, a Kubernetes CPU limit) rounded up. */
static unsigned usable_cpus(void)
{
	cpu_set_t set;
	long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
	                                                     : sysconf(_SC_NPROCESSORS_ONLN);
	FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
	if (f) {
		unsigned long long quota, period;
		if (fscanf(f, "%llu %llu", &quota, &period) == 2 && period > 0) {
			long q = (long)((quota + period - 1) / period);
			if (q >= 1 && q < n)
				n = q;
		}
		fclose(f); /* "max 100000": no quota */
	}
	return n < 1 ? 1 : n > GATE_MAX_WORKERS ? GATE_MAX_WORKERS : (unsigned)n;
}

int main(int argc, char **argv)
{
	static struct gate_config g = { .topic_prefix = "devices",
		.timeout_ms = 5000,
		.max_body = 16384,
		.max_reply = (size_t)1 << 20,
		.max_pending = 256 };
	static struct mqc_cli_conn conn = { .qos = 1, .conn.id_prefix = "gate" };
	struct mqp_pool_options po = MQP_POOL_OPTIONS_INIT;
	po.v311_advice = "run mqp-gate-api with --protocol 3.1.1";
	struct settings st = { .g = &g,
		.po = &po,
		.listen = "127.0.0.1:8080",
		.request_deadline_ns = 10 * MQC_NS_PER_S,
		.per_address = 0, /* --max-connections */
		.drain_ns = 10 * MQC_NS_PER_S,
		.max_connections = 10000 };
	const struct mqc_cli cli = {
		.prog = "mqp-gate-api",
		.synopsis = "--broker URL [OPTIONS]",
		.about
		= "HTTP gateway: POST /devices/{id}/commands/{name} publishes the body (empty or "
		  "JSON) to\nPREFIX/{id}/commands/{name} as an MQTT v5 request (--protocol 3.1.1: a "
		  "fixed reply topic)\nand answers with the device's reply.\n"
		  "  POST /devices/{id}/commands/{name}        through libmqttpool (warm "
		  "connections)\n"
		  "  POST /naive/devices/{id}/commands/{name}  a new MQTT connection per request\n"
		  "  GET /healthz, GET /metrics (Prometheus: responses, latency, the pool's "
		  "statistics)\n"
		  "Statuses: 200 reply, 400 bad id/name/body, 403 the broker refused the command, "
		  "404,\n405, 413 body too large, 501 the route cannot reach this broker (/naive over "
		  "ws://\nand wss://: its libmosquitto has no WebSockets), 502 broker unreachable or "
		  "refused the\ngateway, 503 pool exhausted, no device subscribed (the broker said so) "
		  "or shutting\ndown, 504 device timeout. A broker that refuses the gateway at start "
		  "stops it (exit 1,\nthe broker's reason). --broker takes several brokers: the pool "
		  "spreads over them,\n/healthz and /metrics say each one's state.",
		.version = "mqp-gate-api " MQTTPOOL_VERSION,
		.opts = options,
		.conn_opts = MQC_CLI_BROKER | MQC_CLI_QOS | MQC_CLI_PROTOCOL | MQC_CLI_BROKER_LIST,
		.conn = &conn,
		.on_option = on_option,
		.ctx = &st,
	};
	/* A peer that goes away while we write is an error to handle, never the end of the process.
	 * libmosquitto 2.0 ignored SIGPIPE for the whole process; 2.0.15 and later do not, and
	 * OpenSSL writes TLS records with write(2). */
	signal(SIGPIPE, SIG_IGN);
	int parsed = mqc_cli_parse(&cli, argc, argv);
	if (parsed != 0)
		return parsed == 1 ? 0 : 2;
	g.qos = conn.qos;
	g.naive = conn.conn;
	g.nodes = conn.nodes;
	g.n_nodes = conn.n_nodes;
	g.broker = conn.broker;
	po.ws_header = conn.ws_header;
	po.protocol = conn.conn.protocol == 4 ? 4 : 5;
	if (conn.conn.protocol == 4 && !g.reply_template)
		g.reply_template = MQC_REPLY_TEMPLATE_DEFAULT;
	if (g.reply_template && !reply_template_fits(&g))
		return 2;
	po.username = conn.conn.username;
	po.password = conn.conn.password;
	po.cafile = conn.conn.cafile;
	po.certfile = conn.conn.cert;
	po.keyfile = conn.conn.key;
	if (po.min_size > po.max_size)
		po.min_size = po.max_size;
	unsigned workers = (unsigned)st.workers;
	if (!workers) {
		workers = usable_cpus();
		if (workers > po.max_size)
			workers = po.max_size;
	} else if (workers > po.max_size) {
		fprintf(stderr,
		    "mqp-gate-api: --workers %u needs --pool-max %u or more (each worker has its own "
		    "pool)\n",
		    workers, workers);
		return 2;
	}
	g.pool = po; /* max_size and min_size: the totals, shared out by gate_server_start */
	g.request_deadline_ms = (unsigned)(st.request_deadline_ns / MQC_NS_PER_MS);
	g.per_address = (unsigned)st.per_address;
	uint64_t fit = connections_that_fit();
	if (st.max_connections > fit) {
		fprintf(stderr,
		    "mqp-gate-api: --max-connections %llu is more than the open-file limit allows; "
		    "serving %llu\n",
		    (unsigned long long)st.max_connections, (unsigned long long)fit);
		st.max_connections = fit;
	}
	g.max_connections = (unsigned)st.max_connections;
	if (!g.per_address || g.per_address > g.max_connections)
		g.per_address = g.max_connections; /* no limit of its own */
	if (mqc_listen_parse(st.listen, &g.listen, &g.listen_len) != 0) {
		mqc_cli_bad(&cli, "--listen", st.listen,
		    "IPV4:PORT or [IPV6]:PORT, e.g. 127.0.0.1:8080, :0, [::1]:8080 or [::]:8080");
		return 2;
	}

	/* Signals are taken by this thread only (sigwait below): block them before any thread. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	mosquitto_lib_init();
	struct gate_server *server;
	char err[256];
	if (gate_server_start(&g, workers, &server, err, sizeof err) != 0) {
		fprintf(stderr, "mqp-gate-api: %s\n", err);
		mosquitto_lib_cleanup();
		return 1;
	}
	/* A broker that refuses the gateway (credentials, authorization, a protocol it does not
	 * speak) will refuse every command: say so and stop. One that cannot be reached now may be
	 * later: serve (commands get 502 with the reason meanwhile, /healthz 503 says why). */
	char why[512] = "";
	bool v311_only = false;
	int broker = gate_server_broker_check(server,
	    g.pool.connect_timeout_ms ? g.pool.connect_timeout_ms : 5000, &v311_only, why, sizeof why);
	if (broker < 0) {
		fprintf(stderr, "mqp-gate-api: the broker refuses the gateway: %s%s\n", why,
		    v311_only ? " (for mqp-gate-api: --protocol 3.1.1)" : "");
		uint64_t ok[GATE_BACKENDS];
		gate_server_stop(server, 0, ok);
		mosquitto_lib_cleanup();
		return 1;
	}
	if (broker > 0)
		fprintf(stderr,
		    "mqp-gate-api: no broker connection yet (serving; commands get 502 until "
		    "there is): %s\n",
		    why);
	struct sockaddr_storage at = g.listen;
	mqc_sockaddr_set_port((struct sockaddr *)&at, gate_server_port(server));
	char addr[INET6_ADDRSTRLEN + 8];
	mqc_sockaddr_text((struct sockaddr *)&at, addr, sizeof addr);
	printf("GATE_API_READY url=http://%s broker=%s workers=%u%s\n", addr, g.broker, workers,
	    g.reply_template ? " model=legacy" : "");
	fflush(stdout);

	int sig = 0;
	sigwait(&stop, &sig);
	fprintf(stderr, "mqp-gate-api: %s: draining (at most %llu ms)\n", strsignal(sig),
	    (unsigned long long)(st.drain_ns / MQC_NS_PER_MS));
	uint64_t ok[GATE_BACKENDS];
	bool drained = gate_server_stop(server, (unsigned)(st.drain_ns / MQC_NS_PER_MS), ok);
	mosquitto_lib_cleanup();
	fprintf(stderr, "mqp-gate-api: stopped%s; 200 responses: pool %llu, naive %llu\n",
	    drained ? "" : " (the drain timed out)", (unsigned long long)ok[GATE_POOL],
	    (unsigned long long)ok[GATE_NAIVE]);
	return 0;
}
