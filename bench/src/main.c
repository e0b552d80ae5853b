/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * main.c - mqbench: the command line.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "mqbench.h"
#include "mqc_clock.h"
#include "mqc_random.h"
#include "mqc_strutil.h"

static const char *const scenario_names[] = { "connect", "throughput", "fanout", "request" };

static void usage_main(FILE *out)
{
	fprintf(out,
	    "Usage: mqbench SCENARIO [OPTIONS]   (mqbench SCENARIO --help for its options)\n"
	    "       mqbench --version\n"
	    "An open-loop MQTT load generator: every message and connection has an intended time\n"
	    "on a fixed schedule, latency is measured from it, loss is counted against expected\n"
	    "deliveries.\n\n"
	    "Scenarios:\n"
	    "  connect      open N connections on a schedule, hold them, report connect latency\n"
	    "  throughput   P publishers at R msg/s each -> S subscribers\n"
	    "  fanout       one publisher -> S subscribers\n"
	    "  request      command/reply through a device: naive, pool and dedicated connections\n"
	    "  merge        combine --json results: mqbench merge a.json b.json ...\n"
	    "  report       an HTML page of --json results: mqbench report a.json ... > r.html\n"
	    "  hgrm         a latency histogram in HdrHistogram's .hgrm text: mqbench hgrm a.json\n\n"
	    "Exit status: 0 success; 1 the run failed (unreachable broker, refused CONNECT, a lost\n"
	    "connection, nothing delivered, loss above --max-loss); 2 bad options; 3 loss above\n"
	    "--max-loss that is all 'not received by the end of the drain' (late or never coming:\n"
	    "no connection was lost).\n");
}

static void usage(enum bench_scenario sc)
{
	printf("Usage: mqbench %s [OPTIONS]\n\n", scenario_names[sc]);
	printf(
	    "Common options:\n"
	    "  --broker URL          mqtt://host:port or mqtts://host:port (required)\n"
	    "  --cafile F --cert F --key F   TLS (CA verification and hostname check)\n"
	    "  --username U --password P   credentials (or MQTT_USERNAME, MQTT_PASSWORD: not in ps)\n"
	    "  --qos 0|1|2           default 0\n"
	    "  --protocol 3.1.1|5    default 5\n"
	    "  --duration D          run length (default 10s; e.g. 500ms, 2m)\n"
	    "  --prefix P            client ids start with P (default mqbench)\n"
	    "  --label L             names the run in --json, merge and report (default: --prefix)\n"
	    "  --size N              payload bytes, >= 16 (default 16; >= 20 adds actual-send time)\n"
	    "  --seed N              run id and choices (default: from the clock)\n"
	    "  --json                JSON result on stdout (progress stays on stderr)\n"
	    "  --metrics-url URL     the probe's /metrics (http[s]://host:port/metrics, any host):\n"
	    "                        report what the broker saw; n/a when it cannot be read\n"
	    "  --broker-pid PID      sample the broker's CPU and memory from /proc\n"
	    "  --max-loss PCT        exit 1 when loss exceeds PCT percent (default: report only)\n"
	    "  --drain D             after the last send, wait until every expected message has\n"
	    "                        arrived, at most D (10s); what is missing then is reported as\n"
	    "                        'not received by the end of the drain'\n");
	if (sc == SC_REQUEST)
		printf(
		    "\nrequest options:\n"
		    "  --mode naive|pool|dedicated|all   default all (one after another, same settings)\n"
		    "                        naive: connect, subscribe, publish, wait, disconnect per\n"
		    "                        request; pool: libmqttpool; dedicated: one persistent\n"
		    "                        connection per worker (the upper bound)\n"
		    "  --concurrency C       worker threads (default 10)\n"
		    "  --rate R              requests per second in all, open loop (latency from the\n"
		    "                        intended time); default: closed loop\n"
		    "  --topic T             command topic a device answers (default\n"
		    "                        devices/bench/commands/ping; run test-broker/responder)\n"
		    "  --timeout D           per request (default 5s)\n"
		    "  --pool-size N         the pool's max_size (default 10)\n"
		    "(--qos, --size, --protocol, --drain, --max-loss do not apply: requests are QoS 0, "
		    "v5.)\n");
	else if (sc == SC_CONNECT)
		printf("\nconnect options:\n"
		       "  --clients N           connections to open (default 1000; <= ~15000 here)\n"
		       "  --rate R              attempts per second on the schedule (default 1000)\n"
		       "  --concurrency C       attempts in progress at most (default 100)\n"
		       "  --hold D              keep them open this long after the last (default 1s)\n"
		       "  --connect-timeout D   per attempt (default 10s)\n"
		       "  --source A-B          bind to source addresses A..B round robin\n"
		       "                        (e.g. 127.0.0.2-127.0.0.5; IP_BIND_ADDRESS_NO_PORT)\n");
	else
		printf(
		    "\n%s options:\n"
		    "  --publishers P        default 1%s\n"
		    "  --rate R              messages per second per publisher (default 1000)\n"
		    "  --subscribers S       default 1\n"
		    "  --topics T            publisher p -> topic p %% T, subscriber s <- topic s %% T\n"
		    "                        (default 1: every subscriber gets every message)\n"
		    "  --max-backlog N       unacknowledged messages before the generator stops and says\n"
		    "                        'generator saturated' (default: 10 s of traffic)\n"
		    "  --pub-topic T         publish every message to T instead\n"
		    "  --sub-filter F        every subscriber subscribes to F instead (with\n"
		    "                        --pub-topic: e.g. through a device that echoes)\n",
		    scenario_names[sc], sc == SC_FANOUT ? " (fanout: always 1)" : "");
}

static int bad(const char *opt, const char *value, const char *expect)
{
	fprintf(stderr, "mqbench: %s: expected %s, got '%s'\n", opt, expect, value);
	return 2;
}

static int parse_duration(const char *opt, const char *v, uint64_t *out)
{
	if (mqc_parse_duration(v, MQC_NS_PER_S, out) != 0 || *out > 24ULL * 3600 * MQC_NS_PER_S)
		return bad(opt, v, "a duration such as 10s, 500ms or 2m");
	return 0;
}

int bench_parse(int argc, char **argv, enum bench_scenario sc, struct bench_opts *o)
{
	enum {
		O_BROKER = 256,
		O_CAFILE,
		O_CERT,
		O_KEY,
		O_USER,
		O_PASS,
		O_QOS,
		O_PROTO,
		O_DURATION,
		O_PREFIX,
		O_LABEL,
		O_JSON,
		O_SIZE,
		O_SEED,
		O_METRICS,
		O_PID,
		O_MAXLOSS,
		O_DRAIN,
		O_PUBS,
		O_RATE,
		O_SUBS,
		O_TOPICS,
		O_PUBTOPIC,
		O_SUBFILTER,
		O_CLIENTS,
		O_CONC,
		O_HOLD,
		O_CTIMEOUT,
		O_SOURCE,
		O_MODE,
		O_POOLSIZE,
		O_TOPIC,
		O_TIMEOUT,
		O_BACKLOG
	};
	static const struct option longopts[] = {
		{ "broker", required_argument, NULL, O_BROKER },
		{ "cafile", required_argument, NULL, O_CAFILE },
		{ "cert", required_argument, NULL, O_CERT },
		{ "key", required_argument, NULL, O_KEY },
		{ "username", required_argument, NULL, O_USER },
		{ "password", required_argument, NULL, O_PASS },
		{ "qos", required_argument, NULL, O_QOS },
		{ "protocol", required_argument, NULL, O_PROTO },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "label", required_argument, NULL, O_LABEL },
		{ "json", no_argument, NULL, O_JSON },
		{ "size", required_argument, NULL, O_SIZE },
		{ "seed", required_argument, NULL, O_SEED },
		{ "metrics-url", required_argument, NULL, O_METRICS },
		{ "broker-pid", required_argument, NULL, O_PID },
		{ "max-loss", required_argument, NULL, O_MAXLOSS },
		{ "drain", required_argument, NULL, O_DRAIN },
		{ "publishers", required_argument, NULL, O_PUBS },
		{ "rate", required_argument, NULL, O_RATE },
		{ "subscribers", required_argument, NULL, O_SUBS },
		{ "topics", required_argument, NULL, O_TOPICS },
		{ "pub-topic", required_argument, NULL, O_PUBTOPIC },
		{ "sub-filter", required_argument, NULL, O_SUBFILTER },
		{ "clients", required_argument, NULL, O_CLIENTS },
		{ "concurrency", required_argument, NULL, O_CONC },
		{ "hold", required_argument, NULL, O_HOLD },
		{ "connect-timeout", required_argument, NULL, O_CTIMEOUT },
		{ "source", required_argument, NULL, O_SOURCE },
		{ "mode", required_argument, NULL, O_MODE },
		{ "pool-size", required_argument, NULL, O_POOLSIZE },
		{ "topic", required_argument, NULL, O_TOPIC },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "max-backlog", required_argument, NULL, O_BACKLOG },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct bench_opts) {
		.scenario = sc,
		.qos = 0,
		.protocol = 5,
		.duration_ns = 10 * MQC_NS_PER_S,
		.prefix = "mqbench",
		.username = getenv("MQTT_USERNAME"),
		.password = getenv("MQTT_PASSWORD"),
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
	};
	if (sc == SC_REQUEST) {
		o->rate = 0; /* closed loop unless --rate */
		o->concurrency = 10;
		o->pub_topic = "devices/bench/commands/ping";
	}
	bool connect_only[O_BACKLOG + 1] = { 0 }, flow_only[O_BACKLOG + 1] = { 0 };
	bool request_only[O_BACKLOG + 1] = { 0 }, not_request[O_BACKLOG + 1] = { 0 };
	flow_only[O_BACKLOG] = true;
	request_only[O_MODE] = request_only[O_POOLSIZE] = request_only[O_TOPIC] = true;
	request_only[O_TIMEOUT] = true;
	not_request[O_QOS] = not_request[O_SIZE] = not_request[O_PROTO] = not_request[O_DRAIN] = true;
	not_request[O_MAXLOSS] = not_request[O_CLIENTS] = not_request[O_HOLD] = true;
	not_request[O_CTIMEOUT] = not_request[O_SOURCE] = true;
	connect_only[O_CLIENTS] = connect_only[O_CONC] = connect_only[O_HOLD] = true;
	connect_only[O_CTIMEOUT] = connect_only[O_SOURCE] = true;
	flow_only[O_PUBS] = flow_only[O_SUBS] = flow_only[O_TOPICS] = true;
	flow_only[O_PUBTOPIC] = flow_only[O_SUBFILTER] = true;
	uint64_t u;
	double d;
	int c, index = -1;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, &index)) != -1) {
		char name[40];
		snprintf(name, sizeof name, "--%s", index >= 0 ? longopts[index].name : "?");
		if (index < 0 && c != 'h')
			snprintf(name, sizeof name, "%s", argv[optind - 1]);
		index = -1;
		bool request = sc == SC_REQUEST, conn_or_req = sc == SC_CONNECT || request;
		if (c >= O_BROKER && c <= O_BACKLOG
		    && ((connect_only[c] && sc != SC_CONNECT && !(request && c == O_CONC))
		        || (flow_only[c] && conn_or_req) || (request_only[c] && !request)
		        || (not_request[c] && request) || (c == O_PUBS && sc == SC_FANOUT))) {
			fprintf(stderr, "mqbench: %s does not apply to the %s scenario (see --help)\n", name,
			    scenario_names[sc]);
			return 2;
		}
		switch (c) {
			case O_BROKER:
				o->broker = optarg;
				break;
			case O_CAFILE:
				o->cafile = optarg;
				break;
			case O_CERT:
				o->cert = optarg;
				break;
			case O_KEY:
				o->key = optarg;
				break;
			case O_USER:
				o->username = optarg;
				break;
			case O_PASS:
				o->password = optarg;
				break;
			case O_PREFIX:
				o->prefix = optarg;
				break;
			case O_LABEL:
				o->label = optarg;
				break;
			case O_JSON:
				o->json = true;
				break;
			case O_METRICS:
				o->metrics_url = optarg;
				break;
			case O_PUBTOPIC:
				o->pub_topic = optarg;
				break;
			case O_SUBFILTER:
				o->sub_filter = optarg;
				break;
			case O_SOURCE:
				o->sources = optarg;
				break;
			case O_TOPIC:
				if (!*optarg || strpbrk(optarg, "+#"))
					return bad(name, optarg, "a topic without wildcards");
				o->pub_topic = optarg;
				break;
			case O_MODE:
				if (strcmp(optarg, "naive") == 0)
					o->request_mode = 0;
				else if (strcmp(optarg, "pool") == 0)
					o->request_mode = 1;
				else if (strcmp(optarg, "dedicated") == 0)
					o->request_mode = 2;
				else if (strcmp(optarg, "all") == 0)
					o->request_mode = -1;
				else
					return bad(name, optarg, "naive, pool, dedicated or all");
				break;
			case O_POOLSIZE:
				if (mqc_parse_u64(optarg, 1, 1000, &u) != 0)
					return bad(name, optarg, "a size from 1 to 1000");
				o->pool_size = (unsigned)u;
				break;
			case O_BACKLOG:
				if (mqc_parse_count(optarg, 100000000, &o->max_backlog) != 0 || o->max_backlog == 0)
					return bad(name, optarg, "a count above zero");
				break;
			case O_TIMEOUT:
				if (parse_duration(name, optarg, &o->timeout_ns) || o->timeout_ns == 0)
					return bad(name, optarg, "a duration above zero");
				break;
			case O_QOS:
				if (mqc_parse_u64(optarg, 0, 2, &u) != 0)
					return bad(name, optarg, "0, 1 or 2");
				o->qos = (int)u;
				break;
			case O_PROTO:
				if (strcmp(optarg, "5") == 0)
					o->protocol = 5;
				else if (strcmp(optarg, "3.1.1") == 0)
					o->protocol = 4;
				else
					return bad(name, optarg, "5 or 3.1.1");
				break;
			case O_DURATION:
				if (parse_duration(name, optarg, &o->duration_ns) || o->duration_ns == 0)
					return o->duration_ns ? 2 : bad(name, optarg, "a duration above zero");
				break;
			case O_DRAIN:
				if (parse_duration(name, optarg, &o->drain_ns))
					return 2;
				break;
			case O_HOLD:
				if (parse_duration(name, optarg, &o->hold_ns))
					return 2;
				break;
			case O_CTIMEOUT:
				if (parse_duration(name, optarg, &o->connect_timeout_ns)
				    || o->connect_timeout_ns == 0)
					return bad(name, optarg, "a duration above zero");
				break;
			case O_SIZE:
				if (mqc_parse_count(optarg, 256ULL << 20, &u) != 0 || u < BENCH_HEADER_SIZE)
					return bad(name, optarg, "bytes from 16 (the header) to 256M");
				o->size = (size_t)u;
				break;
			case O_SEED:
				if (mqc_parse_u64(optarg, 0, UINT64_MAX, &o->seed) != 0)
					return bad(name, optarg, "an unsigned integer");
				break;
			case O_PID:
				if (mqc_parse_u64(optarg, 1, 4194304, &u) != 0)
					return bad(name, optarg, "a process id");
				o->broker_pid = (pid_t)u;
				break;
			case O_MAXLOSS:
				if (mqc_parse_double(optarg, 0, 100, &o->max_loss_pct) != 0)
					return bad(name, optarg, "a percentage 0-100");
				break;
			case O_PUBS:
			case O_SUBS:
			case O_TOPICS:
			case O_CLIENTS:
			case O_CONC:
				if (mqc_parse_count(optarg, 1000000, &u) != 0 || u == 0
				    || (c == O_PUBS && u > 65535))
					return bad(name, optarg, "a count above zero (k and M suffixes allowed)");
				*(c == O_PUBS            ? &o->publishers
				        : c == O_SUBS    ? &o->subscribers
				        : c == O_TOPICS  ? &o->topics
				        : c == O_CLIENTS ? &o->clients
				                         : &o->concurrency)
				    = (unsigned)u;
				break;
			case O_RATE: {
				const char *v = optarg;
				char buf[64];
				size_t n = strlen(v);
				if (n > 2 && n < sizeof buf && strcmp(v + n - 2, "/s") == 0) {
					memcpy(buf, v, n - 2); /* "5000/s" */
					buf[n - 2] = '\0';
					v = buf;
				}
				uint64_t k;
				if (mqc_parse_count(v, 100000000, &k) == 0)
					d = (double)k;
				else if (mqc_parse_double(v, 0, 1e8, &d) != 0)
					return bad(name, optarg, "a rate such as 1000, 5k or 2000/s");
				if (d <= 0)
					return bad(name, optarg, "a rate above zero");
				*(sc == SC_CONNECT ? &o->connrate : &o->rate) = d;
				break;
			}
			case 'h':
				usage(sc);
				return 1;
			case ':':
				fprintf(
				    stderr, "mqbench: option '%s' needs a value (see --help)\n", argv[optind - 1]);
				return 2;
			default:
				fprintf(stderr, "mqbench: unknown option '%s' for %s (see --help)\n",
				    argv[optind - 1], scenario_names[sc]);
				return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mqbench: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	char err[256];
	if (!o->broker) {
		fprintf(stderr, "mqbench: --broker URL is required (see --help)\n");
		return 2;
	}
	if (mqc_url_parse(o->broker, &o->url, err, sizeof err) != 0) {
		fprintf(stderr, "mqbench: --broker: %s\n", err);
		return 2;
	}
	if (o->metrics_url && bench_metrics_url_check(o->metrics_url, err, sizeof err) != 0) {
		fprintf(stderr, "mqbench: --metrics-url: %s\n", err);
		return 2;
	}
	if (sc == SC_CONNECT && bench_connect_check(o, err, sizeof err) != 0) {
		fprintf(stderr, "mqbench: %s\n", err);
		return 2;
	}
	if (o->url.tls && !o->cafile) {
		fprintf(stderr, "mqbench: %s needs --cafile to verify the broker\n", o->broker);
		return 2;
	}
	if (!o->cert != !o->key) {
		fprintf(stderr, "mqbench: --cert and --key go together\n");
		return 2;
	}
	if (mqc_random_id(o->token, sizeof o->token, "") != 0) {
		perror("mqbench: no random bytes for client ids");
		return 2;
	}
	if (sc == SC_FANOUT)
		o->publishers = 1;
	if (sc != SC_REQUEST && !o->pub_topic != !o->sub_filter) {
		fprintf(stderr, "mqbench: --pub-topic and --sub-filter go together\n");
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage_main(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("mqbench %s\n", MQBENCH_VERSION);
		return 0;
	}
	/* Wake-ups on the schedule: the default 50 us timer slack would add to every slot's lag. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	/* Before any thread: reading the probe uses libcurl from the scenarios' threads. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "mqbench: curl_global_init failed\n");
		return 1;
	}
	if (strcmp(argv[1], "merge") == 0)
		return bench_merge(argc - 1, argv + 1);
	if (strcmp(argv[1], "hgrm") == 0)
		return bench_hgrm(argc - 1, argv + 1);
	if (strcmp(argv[1], "report") == 0)
		return bench_report(argc - 1, argv + 1);
	for (int sc = 0; sc < 4; sc++) {
		if (strcmp(argv[1], scenario_names[sc]) != 0)
			continue;
		struct bench_opts o;
		int rc = bench_parse(argc - 1, argv + 1, (enum bench_scenario)sc, &o);
		if (rc)
			return rc == 1 ? 0 : rc;
		return sc == SC_CONNECT ? bench_run_connect(&o)
		    : sc == SC_REQUEST  ? bench_run_request(&o)
		                        : bench_run_throughput(&o);
	}
	fprintf(stderr,
	    "mqbench: unknown scenario '%s' (connect, throughput, fanout, request, merge, report, "
	    "hgrm)\n",
	    argv[1]);
	return 2;
}
