/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * responder_core.c - the device simulator's options and decisions, without sockets or threads
 * (responder_core.h): what to answer, when, and how to misbehave on purpose.
 */
#include "responder_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqc_strutil.h"
#include "mqc_template.h"

enum {
	O_FILTER = 'f',
	O_TEMPLATE = MQC_CLI_LONG,
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
	O_MAX_PENDING,
	O_EXIT_ON_DISCONNECT,
	O_KEEPALIVE,
};

static const struct mqc_cli_opt options[] = {
	{ "filter", O_FILTER, "FILTER", "command filter (default " RSP_DEFAULT_FILTER ")", 0 },
	{ "reply-template", O_TEMPLATE, "T",
	    "legacy reply topic; {topic} = request topic, {1}..{9} = its\nlevels "
	    "(default " MQC_REPLY_TEMPLATE_DEFAULT ": outside every command\nfilter)",
	    0 },
	{ "reply-topic", O_TOPIC, "TOPIC", "fixed legacy reply topic (overrides the template)", 0 },
	{ "reply", O_REPLY, "TEXT", "reply payload (default: echo the request payload)", 0 },
	{ NULL, 0, NULL, "Adversarial behaviour:", 0 },
	{ "delay", O_DELAY, "D", "hold every reply (e.g. 5ms; bare numbers are ms; default 0)", 0 },
	{ "jitter", O_JITTER, "D", "plus a uniform random 0..jitter", 0 },
	{ "drop", O_DROP, "P", "probability of not answering (0..1)", 0 },
	{ "duplicate", O_DUP, "P", "probability of answering twice", 0 },
	{ "late", O_LATE, "P", "probability of answering after --late-delay instead", 0 },
	{ "late-delay", O_LATE_DELAY, "D", "default 2s", 0 },
	{ "stray", O_STRAY, "P", "probability of an extra reply with wrong correlation data (v5)", 0 },
	{ "retain", O_RETAIN, NULL, "publish replies retained", 0 },
	{ "seed", O_SEED, "N", "PRNG seed for the probabilities (default 1)", 0 },
	{ "max-pending", O_MAX_PENDING, "N", "delayed replies held at once (default 65536)", 0 },
	{ "keepalive", O_KEEPALIVE, "S",
	    "PINGREQ after S seconds without traffic either way; no PINGRESP\nwithin S more: the "
	    "broker hangs or the link went dark - connect\nagain (noticed within 2 S; default 10; "
	    "5..65535, libmosquitto's\nminimum); TCP_USER_TIMEOUT 2 S too",
	    0 },
	{ "exit-on-disconnect", O_EXIT_ON_DISCONNECT, NULL,
	    "exit 1 when the broker connection is lost (default: connect\nagain with backoff, "
	    "subscribe again, keep the counters)",
	    0 },
	MQC_CLI_END,
};

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct rsp_options *o = cli->ctx;
	uint64_t u;
	switch (key) {
		case O_FILTER:
			o->filter = value;
			return 0;
		case O_TEMPLATE:
			o->reply_template = value;
			return 0;
		case O_TOPIC:
			o->reply_topic = value;
			return 0;
		case O_REPLY:
			o->reply_payload = value;
			return 0;
		case O_RETAIN:
			o->retain = true;
			return 0;
		case O_EXIT_ON_DISCONNECT:
			o->exit_on_disconnect = true;
			return 0;
		case O_KEEPALIVE:
			if (mqc_parse_u64(value, 5, 65535, &u) != 0) /* libmosquitto takes no less */
				return mqc_cli_bad(cli, name, value, "seconds, 5..65535");
			o->net.conn.keepalive_s = (unsigned)u;
			return 0;
		case O_DELAY:
		case O_JITTER:
		case O_LATE_DELAY: {
			uint64_t ns;
			if (mqc_parse_duration(value, MQC_NS_PER_MS, &ns) != 0 || ns > 3600 * MQC_NS_PER_S)
				return mqc_cli_bad(cli, name, value, "a duration such as 5ms or 1.5s (<= 1h)");
			*(key == O_DELAY ? &o->delay_ns : key == O_JITTER ? &o->jitter_ns : &o->late_ns) = ns;
			return 0;
		}
		case O_DROP:
		case O_DUP:
		case O_LATE:
		case O_STRAY: {
			double p;
			if (mqc_parse_double(value, 0, 1, &p) != 0)
				return mqc_cli_bad(cli, name, value, "a probability between 0 and 1");
			*(key == O_DROP         ? &o->drop
			        : key == O_DUP  ? &o->duplicate
			        : key == O_LATE ? &o->late
			                        : &o->stray)
			    = p;
			return 0;
		}
		case O_SEED:
			if (mqc_parse_u64(value, 0, UINT64_MAX, &o->seed) != 0)
				return mqc_cli_bad(cli, name, value, "an unsigned integer");
			return 0;
		case O_MAX_PENDING:
			if (mqc_parse_u64(value, 1, 1u << 24, &u) != 0)
				return mqc_cli_bad(cli, name, value, "1..16777216");
			o->max_pending = (size_t)u;
			return 0;
		default:
			return -1;
	}
}

int rsp_parse_args(int argc, char **argv, struct rsp_options *o, char *err, size_t errlen)
{
	*o = (struct rsp_options) {
		.net = { .conn = { .protocol = 5, .id_prefix = "responder", .keepalive_s = 10 } },
		.filter = RSP_DEFAULT_FILTER,
		.reply_template = MQC_REPLY_TEMPLATE_DEFAULT,
		.late_ns = 2 * MQC_NS_PER_S,
		.seed = 1,
		.max_pending = 65536,
	};
	const struct mqc_cli cli = {
		.prog = "mqp-responder",
		.synopsis = "--broker URL [OPTIONS]",
		.about = "A device simulator: subscribes to a command filter and answers every request.\n"
		         "MQTT v5 requests with a Response Topic are answered there, echoing their "
		         "Correlation\nData; requests without one (legacy devices) on --reply-topic or "
		         "--reply-template.\nPrints RESPONDER_READY once subscribed (again after each "
		         "reconnect), and what it\ndid when it exits (SIGINT/SIGTERM). A lost broker "
		         "connection is made again, as a\ndevice does: backoff from 100 ms to 5 s with "
		         "jitter, the filter subscribed again.",
		.version = "mqp-responder " MQTTPOOL_VERSION,
		.opts = options,
		.conn_opts = MQC_CLI_BROKER | MQC_CLI_CLIENT_ID | MQC_CLI_QOS | MQC_CLI_PROTOCOL,
		.conn = &o->net,
		.on_option = on_option,
		.ctx = o,
		.err = err,
		.errlen = errlen,
	};
	int rc = mqc_cli_parse(&cli, argc, argv);
	if (rc != 0)
		return rc == 1 ? 1 : -1;
	if (o->stray > 0 && o->net.conn.protocol != 5) {
		snprintf(err, errlen, "--stray needs --protocol 5 (stray replies carry correlation data)");
		return -1;
	}
	char why[128];
	if (!o->reply_topic && mqc_template_check(o->reply_template, why, sizeof why) != 0) {
		snprintf(err, errlen, "--reply-template '%s': %s", o->reply_template, why);
		return -1;
	}
	return 0;
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
