/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * options.c - mqbench's scenarios' options: their table, --help, the defaults and the checks
 * across options (bench_parse).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"
#include "mqc_cli.h"
#include "mqc_clock.h"
#include "mqc_random.h"
#include "mqc_strutil.h"
#include "mqc_template.h"

/* Option scopes: the scenarios an option applies to. */
#define C_ (1u << SC_CONNECT)
#define T_ (1u << SC_THROUGHPUT)
#define F_ (1u << SC_FANOUT)
#define R_ (1u << SC_REQUEST)
#define H_ (1u << SC_CHURN)

enum {
	O_DURATION = 'd',
	O_RATE = 'r',
	O_CONC = 'c',
	O_TOPIC = 't',
	O_MODE = 'm',
	O_PREFIX = MQC_CLI_LONG,
	O_LABEL,
	O_JSON,
	O_SIZE,
	O_SEED,
	O_METRICS,
	O_PID,
	O_MAXLOSS,
	O_DRAIN,
	O_PUBS,
	O_SUBS,
	O_TOPICS,
	O_PUBTOPIC,
	O_SUBFILTER,
	O_CLIENTS,
	O_HOLD,
	O_KEEPALIVE,
	O_CTIMEOUT,
	O_SOURCE,
	O_POOLSIZE,
	O_SILENCE,
	O_PING_TIMEOUT,
	O_TIMEOUT,
	O_BACKLOG,
	O_REPLYTPL,
	O_FAILAFTER,
	O_RECONNECT,
	O_BACKOFF,
	O_JITTER,
	O_STORMS,
	O_CERTDIR,
	O_TLSRESUME,
	O_ACTION,
	O_PROCESSES,
	O_SHARD,
};

static const struct mqc_cli_opt options[] = {
	{ NULL, 0, NULL, "Run:", 0 },
	{ "duration", O_DURATION, "D", "run length (default 10s; e.g. 500ms, 2m)", 0 },
	{ "prefix", O_PREFIX, "P", "client ids start with P (default mqbench)", 0 },
	{ "label", O_LABEL, "L", "names the run in --json, merge and report (default: --prefix)", 0 },
	{ "size", O_SIZE, "N", "payload bytes, >= 16 (default 16; >= 20 adds actual-send time)",
	    C_ | T_ | F_ | H_ },
	{ "seed", O_SEED, "N", "run id and choices (default: from the clock)", 0 },
	{ "json", O_JSON, NULL, "JSON result on stdout (progress stays on stderr)", 0 },
	{ "metrics-url", O_METRICS, "URL",
	    "the probe's /metrics (http[s]://host:port/metrics, any host):\nreport what the broker "
	    "saw; n/a when it cannot be read. Behind a web_config:\nMQBENCH_METRICS_CA (a CA "
	    "file), MQBENCH_METRICS_USERNAME and\nMQBENCH_METRICS_PASSWORD from the environment",
	    0 },
	{ "broker-pid", O_PID, "PID", "sample the broker's CPU and memory from /proc", 0 },
	{ "max-loss", O_MAXLOSS, "PCT", "exit 1 when loss exceeds PCT percent (default: report only)",
	    C_ | T_ | F_ },
	{ "drain", O_DRAIN, "D",
	    "after the last send, wait until every expected message has\narrived, at most D (10s); "
	    "what is missing then is reported as\n'not received by the end of the drain'",
	    C_ | T_ | F_ },
	{ NULL, 0, NULL,
	    "connect and churn options (a client identity each: in --client-id, --username,\n"
	    "--password, --cert and --key, %i is the client's index, %06i the index zero-padded\n"
	    "to 6 digits, %% a '%'; the default client id is PREFIX-RANDOM-INDEX):",
	    C_ | H_ },
	{ "clients", O_CLIENTS, "N",
	    "connect: connections to open (default 1000; a process holds\n~15000 here, more with "
	    "--processes); churn: the identities\n%i runs over (default 1000)",
	    C_ | H_ },
	{ "rate", O_RATE, "R",
	    "attempts per second on the schedule (connect default 1000,\nchurn default 100), "
	    "for the whole run",
	    C_ | H_ },
	{ "concurrency", O_CONC, "C", "scheduled attempts in progress at most (default 100)", C_ | H_ },
	{ "hold", O_HOLD, "D", "keep them open this long after the last (default 1s)", C_ },
	{ "keepalive", O_KEEPALIVE, "S",
	    "Keep Alive in CONNECT, seconds (default 0: none); a held connection\npings at three "
	    "quarters of it, or of the broker's Server Keep Alive\nwhen its CONNACK sets one",
	    C_ | H_ },
	{ "connect-timeout", O_CTIMEOUT, "D", "per attempt (default 10s)", C_ | H_ },
	{ "source", O_SOURCE, "A-B",
	    "bind to source addresses A..B round robin\n(e.g. 127.0.0.2-127.0.0.5; "
	    "IP_BIND_ADDRESS_NO_PORT)",
	    C_ | H_ },
	{ "cert-dir", O_CERTDIR, "DIR",
	    "client certificates: every NAME.crt with a NAME.key beside it,\nsorted by name; "
	    "client i takes the i-th (modulo their count)",
	    C_ | H_ },
	{ "tls-resume", O_TLSRESUME, NULL,
	    "resume each client's last TLS session on its next connection\n(full and resumed "
	    "handshakes are reported side by side)",
	    C_ | H_ },
	{ "reconnect", O_RECONNECT, NULL,
	    "reconnect every connection that is lost while held (a broker\nrestart, a cutover), "
	    "with back-off and jitter; report each storm",
	    C_ },
	{ "reconnect-backoff", O_BACKOFF, "MIN[,MAX]",
	    "the first retry waits MIN, each failure doubles it up to MAX\n(default 1s,2m, like "
	    "device SDKs)",
	    C_ },
	{ "reconnect-jitter", O_JITTER, "F",
	    "each wait is backoff x (1 - F x random[0,1)) (default 0.5)", C_ },
	{ "storms", O_STORMS, "N", "end the hold once N storms are over (--hold is the deadline)", C_ },
	{ "action", O_ACTION, "none|publish|subscribe",
	    "between CONNACK and DISCONNECT (default none; publish: QoS 0,\n--size bytes; "
	    "subscribe: wait for the SUBACK)",
	    H_ },
	{ "processes", O_PROCESSES, "N",
	    "spread the run over N worker processes (one result, histograms\nmerged exactly; "
	    "each takes a range of the clients at rate/N)",
	    C_ | H_ },
	{ "shard", O_SHARD, "I/N",
	    "run only shard I (0-based) of N: clients [I*clients/N, (I+1)*\nclients/N) at rate/N "
	    "(replicas, pods); merge their --json",
	    C_ | H_ },
	{ NULL, 0, NULL, "throughput and fanout options:", T_ | F_ },
	{ "publishers", O_PUBS, "P", "default 1 (fanout: always 1)", T_ },
	{ "rate", O_RATE, "R", "messages per second per publisher (default 1000)", T_ | F_ },
	{ "subscribers", O_SUBS, "S", "default 1", T_ | F_ },
	{ "topics", O_TOPICS, "T",
	    "publisher p -> topic p % T, subscriber s <- topic s % T\n(default 1: every subscriber "
	    "gets every message)",
	    T_ | F_ },
	{ "max-backlog", O_BACKLOG, "N",
	    "unacknowledged messages before the generator stops and says\n'generator saturated' "
	    "(default: 10 s of traffic)",
	    T_ | F_ },
	{ "pub-topic", O_PUBTOPIC, "T", "publish every message to T instead", T_ | F_ },
	{ "sub-filter", O_SUBFILTER, "F",
	    "every subscriber subscribes to F instead (with\n--pub-topic: e.g. through a device that "
	    "echoes)",
	    T_ | F_ },
	{ NULL, 0, NULL,
	    "request options (--qos is the commands' QoS, default 0; --protocol 3.1.1 measures the\n"
	    "legacy model: replies on a fixed reply topic, no Correlation Data):",
	    R_ },
	{ "mode", O_MODE, "naive|pool|dedicated|loop|all",
	    "default all: naive, pool and dedicated, one after another\nwith the same settings. "
	    "naive: connect, subscribe, publish,\nwait, disconnect per request; pool: libmqttpool "
	    "from C\nworker threads; dedicated: one persistent connection per\nworker (the upper "
	    "bound); loop: libmqttpool on a libuv loop,\none thread, C requests in flight (no "
	    "hand-off)",
	    R_ },
	{ "concurrency", O_CONC, "C", "worker threads (default 10)", R_ },
	{ "rate", O_RATE, "R",
	    "requests per second in all, open loop (latency from the\nintended time); default: closed "
	    "loop",
	    R_ },
	{ "topic", O_TOPIC, "T",
	    "command topic a device answers (default\ndevices/bench/commands/ping; run "
	    "test-broker/responder);\n{worker} in it gives each worker a device of its own\n"
	    "(default with --protocol 3.1.1: devices/bench-{worker}/commands/ping)",
	    R_ },
	{ "reply-template", O_REPLYTPL, "T",
	    "the legacy model (implied by --protocol 3.1.1; over MQTT 5\nto compare): where a "
	    "command's reply comes, {topic} the\ncommand topic, {1}..{9} its levels "
	    "(default " MQC_REPLY_TEMPLATE_DEFAULT
	    ",\nas the responder answers); the reply is matched by the\n"
	    "request id the command carries",
	    R_ },
	{ "fail-after", O_FAILAFTER, "D",
	    "end a mode that has had nothing but connection failures\nfor D, with exit 1 and their "
	    "cause (default 2s)",
	    R_ },
	{ "timeout", O_TIMEOUT, "D", "per request (default 5s)", R_ },
	{ "pool-size", O_POOLSIZE, "N", "the pool's max_size (default 10)", R_ },
	{ "silence", O_SILENCE, "D",
	    "pool, loop: a connection with requests in flight that has\nreceived nothing for D "
	    "pings (default 500ms)",
	    R_ },
	{ "ping-timeout", O_PING_TIMEOUT, "D",
	    "pool, loop: nothing back within D of that ping: the broker\nis silent (hung, or the "
	    "link went dark) - what was in flight on it\nfails at once, counted and named, the "
	    "rest goes to the other\nnodes (default 1s)",
	    R_ },
	MQC_CLI_END,
};

static int parse_duration(
    const struct mqc_cli *cli, const char *name, const char *v, bool nonzero, uint64_t *out)
{
	if (mqc_parse_duration(v, MQC_NS_PER_S, out) != 0 || *out > 24ULL * 3600 * MQC_NS_PER_S)
		return mqc_cli_bad(cli, name, v, "a duration such as 10s, 500ms or 2m");
	if (nonzero && *out == 0)
		return mqc_cli_bad(cli, name, v, "a duration above zero");
	return 0;
}

static int parse_rate(const struct mqc_cli *cli, const char *name, const char *value, double *out)
{
	const char *v = value;
	char buf[64];
	size_t n = strlen(v);
	if (n > 2 && n < sizeof buf && strcmp(v + n - 2, "/s") == 0) {
		memcpy(buf, v, n - 2); /* "5000/s" */
		buf[n - 2] = '\0';
		v = buf;
	}
	uint64_t k;
	if (mqc_parse_count(v, 100000000, &k) == 0)
		*out = (double)k;
	else if (mqc_parse_double(v, 0, 1e8, out) != 0)
		return mqc_cli_bad(cli, name, value, "a rate such as 1000, 5k or 2000/s");
	if (*out <= 0)
		return mqc_cli_bad(cli, name, value, "a rate above zero");
	return 0;
}

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct bench_opts *o = cli->ctx;
	uint64_t u;
	switch (key) {
		case O_PREFIX:
			o->prefix = value;
			return 0;
		case O_LABEL:
			o->label = value;
			return 0;
		case O_JSON:
			o->json = true;
			return 0;
		case O_METRICS:
			o->metrics_url = value;
			return 0;
		case O_PUBTOPIC:
			o->pub_topic = value;
			return 0;
		case O_SUBFILTER:
			o->sub_filter = value;
			return 0;
		case O_SOURCE: {
			unsigned n;
			if (bench_parse_sources(value, NULL, &n) != 0)
				return -1;
			o->sources = value;
			return 0;
		}
		case O_CERTDIR:
			o->cert_dir = value;
			return 0;
		case O_TLSRESUME:
			o->tls_resume = true;
			return 0;
		case O_RECONNECT:
			o->reconnect = true;
			return 0;
		case O_BACKOFF: {
			char lo[64];
			const char *comma = strchr(value, ',');
			size_t n = comma ? (size_t)(comma - value) : strlen(value);
			if (n >= sizeof lo)
				return mqc_cli_bad(cli, name, value, "MIN[,MAX] durations, e.g. 1s,2m");
			memcpy(lo, value, n);
			lo[n] = '\0';
			if (parse_duration(cli, name, lo, true, &o->backoff_min_ns) != 0)
				return -1;
			if (comma && parse_duration(cli, name, comma + 1, true, &o->backoff_max_ns) != 0)
				return -1;
			if (!comma && o->backoff_max_ns < o->backoff_min_ns)
				o->backoff_max_ns = o->backoff_min_ns;
			if (o->backoff_max_ns < o->backoff_min_ns)
				return mqc_cli_bad(cli, name, value, "MIN no larger than MAX");
			return 0;
		}
		case O_JITTER:
			if (mqc_parse_double(value, 0, 1, &o->reconnect_jitter) != 0)
				return mqc_cli_bad(cli, name, value, "a fraction from 0 to 1");
			return 0;
		case O_STORMS:
			if (mqc_parse_u64(value, 1, 1000000, &u) != 0)
				return mqc_cli_bad(cli, name, value, "a count above zero");
			o->storms = (unsigned)u;
			return 0;
		case O_ACTION:
			for (int i = 0; i < 3; i++)
				if (strcmp(value, bench_churn_actions[i]) == 0) {
					o->churn_action = (enum bench_churn_action)i;
					return 0;
				}
			return mqc_cli_bad(cli, name, value, "none, publish or subscribe");
		case O_PROCESSES:
			if (mqc_parse_u64(value, 1, 64, &u) != 0)
				return mqc_cli_bad(cli, name, value, "a count from 1 to 64");
			o->processes = (unsigned)u;
			return 0;
		case O_SHARD:
			if (bench_shard_parse(value, &o->shard, &o->shards) != 0)
				return mqc_cli_bad(cli, name, value, "I/N with 0 <= I < N, e.g. 0/3");
			return 0;
		case O_TOPIC:
			if (!*value || strpbrk(value, "+#"))
				return mqc_cli_bad(cli, name, value, "a topic without wildcards");
			o->pub_topic = value;
			o->topic_given = true;
			return 0;
		case O_MODE:
			for (int m = 0; m < BENCH_REQUEST_MODES; m++)
				if (strcmp(value, bench_request_modes[m]) == 0) {
					o->request_mode = m;
					return 0;
				}
			if (strcmp(value, "all") != 0)
				return mqc_cli_bad(cli, name, value, "naive, pool, dedicated, loop or all");
			o->request_mode = -1;
			return 0;
		case O_SILENCE:
		case O_PING_TIMEOUT: {
			uint64_t ns;
			if (mqc_parse_duration(value, MQC_NS_PER_MS, &ns) != 0 || ns < 10 * MQC_NS_PER_MS
			    || ns > 600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration from 10ms to 600s");
			*(key == O_SILENCE ? &o->silence_ms : &o->ping_timeout_ms)
			    = (unsigned)(ns / MQC_NS_PER_MS);
			return 0;
		}
		case O_POOLSIZE:
			if (mqc_parse_u64(value, 1, 1000, &u) != 0)
				return mqc_cli_bad(cli, name, value, "a size from 1 to 1000");
			o->pool_size = (unsigned)u;
			return 0;
		case O_BACKLOG:
			if (mqc_parse_count(value, 100000000, &o->max_backlog) != 0 || o->max_backlog == 0)
				return mqc_cli_bad(cli, name, value, "a count above zero");
			return 0;
		case O_TIMEOUT:
			return parse_duration(cli, name, value, true, &o->timeout_ns);
		case O_FAILAFTER:
			return parse_duration(cli, name, value, true, &o->fail_after_ns);
		case O_REPLYTPL: {
			char why[160], expect[200];
			if (mqc_template_check(value, why, sizeof why) != 0) {
				snprintf(expect, sizeof expect, "a reply-topic template (%s)", why);
				return mqc_cli_bad(cli, name, value, expect);
			}
			o->reply_template = value;
			return 0;
		}
		case O_DURATION:
			return parse_duration(cli, name, value, true, &o->duration_ns);
		case O_DRAIN:
			return parse_duration(cli, name, value, false, &o->drain_ns);
		case O_HOLD:
			return parse_duration(cli, name, value, false, &o->hold_ns);
		case O_KEEPALIVE:
			if (mqc_parse_u64(value, 0, 65535, &u) != 0)
				return mqc_cli_bad(cli, name, value, "seconds from 0 to 65535");
			o->keepalive_s = (uint16_t)u;
			return 0;
		case O_CTIMEOUT:
			return parse_duration(cli, name, value, true, &o->connect_timeout_ns);
		case O_SIZE:
			if (mqc_parse_count(value, 256ULL << 20, &u) != 0 || u < BENCH_HEADER_SIZE)
				return mqc_cli_bad(cli, name, value, "bytes from 16 (the header) to 256M");
			o->size = (size_t)u;
			return 0;
		case O_SEED:
			if (mqc_parse_u64(value, 0, UINT64_MAX, &o->seed) != 0)
				return mqc_cli_bad(cli, name, value, "an unsigned integer");
			return 0;
		case O_PID:
			if (mqc_parse_u64(value, 1, 4194304, &u) != 0)
				return mqc_cli_bad(cli, name, value, "a process id");
			o->broker_pid = (pid_t)u;
			return 0;
		case O_MAXLOSS:
			if (mqc_parse_double(value, 0, 100, &o->max_loss_pct) != 0)
				return mqc_cli_bad(cli, name, value, "a percentage 0-100");
			return 0;
		case O_PUBS:
		case O_SUBS:
		case O_TOPICS:
		case O_CLIENTS:
		case O_CONC:
			if (mqc_parse_count(value, 1000000, &u) != 0 || u == 0 || (key == O_PUBS && u > 65535))
				return mqc_cli_bad(
				    cli, name, value, "a count above zero (k and M suffixes allowed)");
			*(key == O_PUBS            ? &o->publishers
			        : key == O_SUBS    ? &o->subscribers
			        : key == O_TOPICS  ? &o->topics
			        : key == O_CLIENTS ? &o->clients
			                           : &o->concurrency)
			    = (unsigned)u;
			return 0;
		case O_RATE:
			return parse_rate(
			    cli, name, value, o->scenario == SC_CONNECT ? &o->connrate : &o->rate);

		default:
			return -1;
	}
}

int bench_parse(int argc, char **argv, enum bench_scenario sc, struct bench_opts *o)
{
	*o = (struct bench_opts) {
		.scenario = sc,
		.net = { .qos = 0, .conn = { .protocol = 5 } },
		.duration_ns = 10 * MQC_NS_PER_S,
		.prefix = "mqbench",
		.size = 16,
		.seed = mqc_wall_ns(),
		.max_loss_pct = 100,
		.drain_ns = 10 * MQC_NS_PER_S,
		.publishers = 1,
		.subscribers = 1,
		.topics = 1,
		.rate = 1000,
		.clients = 1000,
		.concurrency = 100,
		.connrate = 1000,
		.hold_ns = MQC_NS_PER_S,
		.connect_timeout_ns = 10 * MQC_NS_PER_S,
		.request_mode = -1,
		.pool_size = 10,
		.timeout_ns = 5 * MQC_NS_PER_S,
		.fail_after_ns = 2 * MQC_NS_PER_S,
		.backoff_min_ns = MQC_NS_PER_S,
		.backoff_max_ns = 120 * MQC_NS_PER_S,
		.reconnect_jitter = 0.5,
		.processes = 1,
		.shards = 1,
	};
	if (sc == SC_CHURN)
		o->rate = 100;
	if (sc == SC_REQUEST) {
		o->rate = 0; /* closed loop unless --rate */
		o->concurrency = 10;
		o->pub_topic = "devices/bench/commands/ping";
	}
	char prog[32], scope_name[48];
	snprintf(prog, sizeof prog, "mqbench %s", bench_scenario_names[sc]);
	snprintf(scope_name, sizeof scope_name, "the %s scenario", bench_scenario_names[sc]);
	const struct mqc_cli cli = {
		.prog = prog,
		.synopsis = "--broker URL [OPTIONS]",
		.epilog = "Exit status: 0 success; 1 the run failed; 2 bad options; 3 loss that is all "
		          "'not received\nby the end of the drain' (mqbench --help says more).",
		.version = "mqbench " MQBENCH_VERSION,
		.opts = options,
		.scope = 1u << sc,
		.scope_name = scope_name,
		.conn_opts = MQC_CLI_BROKER | MQC_CLI_QOS | MQC_CLI_PROTOCOL
		    | (sc == SC_CONNECT || sc == SC_CHURN ? MQC_CLI_CLIENT_ID : 0)
		    | (sc == SC_CONNECT || sc == SC_CHURN || sc == SC_REQUEST ? MQC_CLI_BROKER_LIST : 0),
		.conn = &o->net,
		.on_option = on_option,
		.ctx = o,
	};
	int rc = mqc_cli_parse(&cli, argc, argv);
	if (rc != 0)
		return rc;
	o->net.conn.id_prefix = o->prefix;
	o->client_id_tpl = o->net.conn.client_id; /* connect and churn: a template */
	char err[256];
	if (o->metrics_url && bench_metrics_url_check(o->metrics_url, err, sizeof err) != 0) {
		fprintf(stderr, "mqbench: --metrics-url: %s\n", err);
		return 2;
	}
	if ((sc == SC_CONNECT || sc == SC_CHURN) && bench_connect_check(o, err, sizeof err) != 0) {
		fprintf(stderr, "mqbench: %s\n", err);
		return 2;
	}
	if (mqc_random_id(o->token, sizeof o->token, "") != 0) {
		perror("mqbench: no random bytes for client ids");
		return 2;
	}
	if (sc == SC_FANOUT)
		o->publishers = 1;
	o->processes_worker = getenv("MQBENCH_T0") != NULL;
	if (o->processes > 1 && o->shards > 1) {
		fprintf(stderr,
		    "mqbench: --processes and --shard: one or the other (a shard is one "
		    "process's part already)\n");
		return 2;
	}
	if (sc == SC_CHURN && o->size > 65536) {
		fprintf(
		    stderr, "mqbench: churn --size: at most 64K (a cycle writes its PUBLISH at once)\n");
		return 2;
	}
	if (o->storms && !o->reconnect) {
		fprintf(stderr, "mqbench: --storms needs --reconnect\n");
		return 2;
	}
	if ((o->cert_dir || o->tls_resume) && !o->net.conn.url.tls) {
		fprintf(stderr, "mqbench: %s needs an mqtts:// broker\n",
		    o->cert_dir ? "--cert-dir" : "--tls-resume");
		return 2;
	}
	if (o->cert_dir && o->net.conn.cert) {
		fprintf(stderr, "mqbench: --cert-dir and --cert: one or the other\n");
		return 2;
	}
	/* The legacy model: MQTT 3.1.1's only request/reply, or asked for over v5 to compare. */
	if (sc == SC_REQUEST && (o->net.conn.protocol == 4 || o->reply_template)) {
		o->legacy = true;
		if (!o->reply_template)
			o->reply_template = MQC_REPLY_TEMPLATE_DEFAULT;
		if (!o->topic_given)
			o->pub_topic = "devices/bench-{worker}/commands/ping";
	}
	/* Several brokers: the fleet spreads its clients, the pool its connections; libmosquitto's
	 * clients (request's naive and dedicated) take one broker. */
	if (sc == SC_REQUEST && o->net.n_nodes > 1 && o->request_mode != 1 && o->request_mode != 3) {
		fprintf(stderr,
		    "mqbench: request: several brokers in --broker are for --mode pool and --mode loop "
		    "(the pool spreads its connections over them); naive and dedicated take one\n");
		return 2;
	}
	/* ws:// and wss://: what runs on the project's own MQTT client. Debian's libmosquitto 2.0.11
	 * has no WebSocket transport at all. */
	if (o->net.conn.url.ws
	    && ((sc == SC_REQUEST && o->request_mode != 1 && o->request_mode != 3)
	        || sc == SC_THROUGHPUT || sc == SC_FANOUT)) {
		fprintf(stderr,
		    "mqbench: %s%s over ws:// and wss://: it connects with libmosquitto %d.%d, which has "
		    "no WebSockets; over WebSockets run connect, churn, or request --mode pool or "
		    "--mode loop\n",
		    bench_scenario_names[sc], sc == SC_REQUEST ? " --mode naive, dedicated or all" : "",
		    LIBMOSQUITTO_MAJOR, LIBMOSQUITTO_MINOR);
		return 2;
	}
	if (sc != SC_REQUEST && !o->pub_topic != !o->sub_filter) {
		fprintf(stderr, "mqbench: --pub-topic and --sub-filter go together\n");
		return 2;
	}
	return 0;
}
