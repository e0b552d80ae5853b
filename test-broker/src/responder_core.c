/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
#include "responder_core.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqc_strutil.h"

static void usage(void)
{
	printf(
	    "Usage: responder --broker URL [OPTIONS]\n"
	    "A device simulator: subscribes to a command filter and answers every request.\n"
	    "MQTT v5 requests with a Response Topic are answered there, echoing their Correlation\n"
	    "Data; requests without one (legacy devices) on --reply-topic or --reply-template.\n"
	    "Prints RESPONDER_READY once subscribed, and what it did when it exits (SIGINT/SIGTERM).\n"
	    "\n"
	    "  --broker URL          mqtt://host:port or mqtts://host:port (required)\n"
	    "  --cafile FILE         CA certificate for mqtts:// (verification and hostname check)\n"
	    "  --cert FILE --key FILE  client certificate and key\n"
	    "  --username U --password P   broker credentials (or MQTT_USERNAME, MQTT_PASSWORD)\n"
	    "  --client-id ID        default responder-<64 random bits>\n"
	    "  --filter FILTER       command filter (default " RSP_DEFAULT_FILTER ")\n"
	    "  --qos 0|1|2           subscription and reply QoS (default 0)\n"
	    "  --protocol 5|3.1.1    default 5\n"
	    "  --reply-template T    legacy reply topic; {topic} = request topic, {1}..{9} = its\n"
	    "                        levels (default " RSP_DEFAULT_TEMPLATE ")\n"
	    "  --reply-topic TOPIC   fixed legacy reply topic (overrides the template)\n"
	    "  --reply TEXT          reply payload (default: echo the request payload)\n"
	    "  --delay DURATION      hold every reply (e.g. 5ms; bare numbers are ms; default 0)\n"
	    "  --jitter DURATION     plus a uniform random 0..jitter\n"
	    "  --drop P              probability of not answering (0..1)\n"
	    "  --duplicate P         probability of answering twice\n"
	    "  --late P              probability of answering after --late-delay instead\n"
	    "  --late-delay DURATION default 2s\n"
	    "  --stray P             probability of an extra reply with wrong correlation data (v5)\n"
	    "  --retain              publish replies retained (adversarial)\n"
	    "  --seed N              PRNG seed for the probabilities (default 1)\n"
	    "  --max-pending N       delayed replies held at once (default 65536)\n"
	    "  -h, --help\n"
	    "  --version\n");
}

static int bad(char *err, size_t errlen, const char *opt, const char *value, const char *expect)
{
	snprintf(err, errlen, "%s: expected %s, got '%s'", opt, expect, value);
	return -1;
}

int rsp_parse_args(int argc, char **argv, struct rsp_options *o, char *err, size_t errlen)
{
	enum {
		O_BROKER = 256,
		O_CAFILE,
		O_CERT,
		O_KEY,
		O_USER,
		O_PASS,
		O_ID,
		O_FILTER,
		O_QOS,
		O_PROTO,
		O_TEMPLATE,
		O_TOPIC,
		O_REPLY,
		O_DELAY,
		O_JITTER,
		O_DROP,
		O_DUP,
		O_LATE,
		O_LATE_DELAY,
		O_STRAY,
		O_RETAIN,
		O_SEED,
		O_MAX_PENDING
	};
	static const struct option longopts[] = {
		{ "broker", required_argument, NULL, O_BROKER },
		{ "cafile", required_argument, NULL, O_CAFILE },
		{ "cert", required_argument, NULL, O_CERT },
		{ "key", required_argument, NULL, O_KEY },
		{ "username", required_argument, NULL, O_USER },
		{ "password", required_argument, NULL, O_PASS },
		{ "client-id", required_argument, NULL, O_ID },
		{ "filter", required_argument, NULL, O_FILTER },
		{ "qos", required_argument, NULL, O_QOS },
		{ "protocol", required_argument, NULL, O_PROTO },
		{ "reply-template", required_argument, NULL, O_TEMPLATE },
		{ "reply-topic", required_argument, NULL, O_TOPIC },
		{ "reply", required_argument, NULL, O_REPLY },
		{ "delay", required_argument, NULL, O_DELAY },
		{ "jitter", required_argument, NULL, O_JITTER },
		{ "drop", required_argument, NULL, O_DROP },
		{ "duplicate", required_argument, NULL, O_DUP },
		{ "late", required_argument, NULL, O_LATE },
		{ "late-delay", required_argument, NULL, O_LATE_DELAY },
		{ "stray", required_argument, NULL, O_STRAY },
		{ "retain", no_argument, NULL, O_RETAIN },
		{ "seed", required_argument, NULL, O_SEED },
		{ "max-pending", required_argument, NULL, O_MAX_PENDING },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct rsp_options) {
		.filter = RSP_DEFAULT_FILTER,
		.protocol = 5,
		.reply_template = RSP_DEFAULT_TEMPLATE,
		.late_ns = 2 * MQC_NS_PER_S,
		.seed = 1,
		.max_pending = 65536,
		.username = getenv("MQTT_USERNAME"),
		.password = getenv("MQTT_PASSWORD"),
	};
	uint64_t u;
	optind = 1;
	opterr = 0;
	int c, index = -1;
	char name[32];
	while ((c = getopt_long(argc, argv, ":h", longopts, &index)) != -1) {
		/* For "--opt value" argv[optind - 1] is the value: name the option from the table. */
		if (index >= 0)
			snprintf(name, sizeof name, "--%s", longopts[index].name);
		else
			snprintf(name, sizeof name, "%s", argv[optind - 1]);
		index = -1;
		switch (c) {
			case O_BROKER:
				if (mqc_url_parse(optarg, &o->url, err, errlen) != 0)
					return -1;
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
			case O_ID:
				o->client_id = optarg;
				break;
			case O_FILTER:
				o->filter = optarg;
				break;
			case O_TEMPLATE:
				o->reply_template = optarg;
				break;
			case O_TOPIC:
				o->reply_topic = optarg;
				break;
			case O_REPLY:
				o->reply_payload = optarg;
				break;
			case O_RETAIN:
				o->retain = true;
				break;
			case O_QOS:
				if (mqc_parse_u64(optarg, 0, 2, &u) != 0)
					return bad(err, errlen, "--qos", optarg, "0, 1 or 2");
				o->qos = (int)u;
				break;
			case O_PROTO:
				if (strcmp(optarg, "5") == 0)
					o->protocol = 5;
				else if (strcmp(optarg, "3.1.1") == 0)
					o->protocol = 4;
				else
					return bad(err, errlen, "--protocol", optarg, "5 or 3.1.1");
				break;
			case O_DELAY:
			case O_JITTER:
			case O_LATE_DELAY: {
				uint64_t ns;
				if (mqc_parse_duration(optarg, MQC_NS_PER_MS, &ns) != 0 || ns > 3600 * MQC_NS_PER_S)
					return bad(err, errlen, name, optarg, "a duration such as 5ms or 1.5s (<= 1h)");
				*(c == O_DELAY ? &o->delay_ns : c == O_JITTER ? &o->jitter_ns : &o->late_ns) = ns;
				break;
			}
			case O_DROP:
			case O_DUP:
			case O_LATE:
			case O_STRAY: {
				double p;
				if (mqc_parse_double(optarg, 0, 1, &p) != 0)
					return bad(err, errlen, name, optarg, "a probability between 0 and 1");
				*(c == O_DROP         ? &o->drop
				        : c == O_DUP  ? &o->duplicate
				        : c == O_LATE ? &o->late
				                      : &o->stray)
				    = p;
				break;
			}
			case O_SEED:
				if (mqc_parse_u64(optarg, 0, UINT64_MAX, &o->seed) != 0)
					return bad(err, errlen, "--seed", optarg, "an unsigned integer");
				break;
			case O_MAX_PENDING:
				if (mqc_parse_u64(optarg, 1, 1u << 24, &u) != 0)
					return bad(err, errlen, "--max-pending", optarg, "1..16777216");
				o->max_pending = (size_t)u;
				break;
			case 'h':
				usage();
				return 1;
			case 'V':
				printf("responder %s\n", MQTTPOOL_VERSION);
				return 1;
			case ':':
				snprintf(err, errlen, "option '%s' needs a value (see --help)", name);
				return -1;
			default:
				snprintf(err, errlen, "unknown option '%s' (see --help)", name);
				return -1;
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
		return -1;
	}
	if (!o->broker) {
		snprintf(err, errlen, "--broker URL is required (see --help)");
		return -1;
	}
	if (!o->cert != !o->key) {
		snprintf(err, errlen, "--cert and --key go together");
		return -1;
	}
	if (o->url.tls && !o->cafile) {
		snprintf(err, errlen, "%s needs --cafile to verify the broker", o->broker);
		return -1;
	}
	if (o->stray > 0 && o->protocol != 5) {
		snprintf(err, errlen, "--stray needs --protocol 5 (stray replies carry correlation data)");
		return -1;
	}
	char probe[512];
	if (!o->reply_topic
	    && rsp_expand_template(o->reply_template, "a/b/c/d/e/f/g/h/i", probe, sizeof probe) < 0) {
		snprintf(err, errlen, "--reply-template '%s': unmatched brace or unknown field",
		    o->reply_template);
		return -1;
	}
	return 0;
}

/* Level n (1-based) of topic: pointer and length, or NULL. */
static const char *topic_level(const char *topic, int n, size_t *len)
{
	const char *p = topic;
	for (int i = 1; i < n; i++) {
		p = strchr(p, '/');
		if (!p)
			return NULL;
		p++;
	}
	*len = strcspn(p, "/");
	return p;
}

int rsp_expand_template(const char *tmpl, const char *topic, char *out, size_t len)
{
	size_t n = 0;
	for (const char *t = tmpl; *t;) {
		const char *piece = t;
		size_t piece_len = 1;
		if (*t == '{') {
			const char *close = strchr(t, '}');
			if (!close)
				return -1;
			size_t name_len = (size_t)(close - t - 1);
			if (name_len == 5 && strncmp(t + 1, "topic", 5) == 0) {
				piece = topic;
				piece_len = strlen(topic);
			} else if (name_len == 1 && t[1] >= '1' && t[1] <= '9') {
				piece = topic_level(topic, t[1] - '0', &piece_len);
				if (!piece)
					return -1;
			} else {
				return -1;
			}
			t = close + 1;
		} else {
			if (*t == '}')
				return -1;
			t++;
		}
		if (n + piece_len >= len)
			return -1;
		memcpy(out + n, piece, piece_len);
		n += piece_len;
	}
	if (n >= len)
		return -1;
	out[n] = '\0';
	return (int)n;
}

uint64_t rsp_rng_next(struct rsp_rng *rng)
{
	uint64_t z = (rng->state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double rsp_rng_unit(struct rsp_rng *rng)
{
	return (double)(rsp_rng_next(rng) >> 11) * 0x1.0p-53;
}

struct rsp_plan rsp_plan_next(const struct rsp_options *o, struct rsp_rng *rng)
{
	struct rsp_plan plan = { .copies = 1, .delay_ns = o->delay_ns };
	if (o->drop > 0 && rsp_rng_unit(rng) < o->drop) {
		plan.drop = true;
		plan.copies = 0;
		return plan;
	}
	if (o->jitter_ns)
		plan.delay_ns += (uint64_t)(rsp_rng_unit(rng) * (double)o->jitter_ns);
	if (o->late > 0 && rsp_rng_unit(rng) < o->late) {
		plan.late = true;
		plan.delay_ns += o->late_ns;
	}
	if (o->duplicate > 0 && rsp_rng_unit(rng) < o->duplicate)
		plan.copies = 2;
	if (o->stray > 0 && rsp_rng_unit(rng) < o->stray)
		plan.stray = true;
	return plan;
}
