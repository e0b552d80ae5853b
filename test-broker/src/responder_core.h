/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * responder_core.h - the device simulator's decisions, free of sockets and threads.
 *
 * The responder answers commands: a v5 request with a Response Topic gets its reply there with
 * the Correlation Data echoed; a request without one (a "legacy device") gets it on a fixed
 * --reply-topic or on a topic computed from --reply-template. What it answers and when is
 * decided here, so the adversarial options (drop, duplicate, late, stray) can be unit-tested.
 */
#ifndef RESPONDER_CORE_H
#define RESPONDER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mqc_cli.h"

#define RSP_DEFAULT_FILTER "devices/+/commands/#"

struct rsp_options {
	struct mqc_cli_conn net;    /* broker, TLS, credentials, client id, QoS (subscribe and
	                               reply), protocol: the shared options (mqc_cli.h) */
	const char *filter;         /* command filter */
	const char *reply_template; /* legacy reply topic (mqc_template.h); default replies/{topic} */
	const char *reply_topic;    /* fixed legacy reply topic (overrides the template) */
	const char *reply_payload;  /* NULL: echo the request's payload */
	uint64_t delay_ns, jitter_ns;
	double drop;      /* probability a request gets no reply */
	double duplicate; /* probability a reply is sent twice */
	double late;      /* probability a reply is held back by late_ns instead */
	uint64_t late_ns;
	double stray; /* probability of an extra reply with wrong correlation data */
	bool retain;  /* publish replies with the retain flag */
	uint64_t seed;
	size_t max_pending;      /* delayed replies held at once */
	bool exit_on_disconnect; /* exit 1 when the broker connection is lost (default: reconnect) */
};

/**
 * Parse the command line into *o (defaults first). Returns 0 to run, 1 when --help or
 * --version was printed, -1 with a message naming the bad option in err.
 */
int rsp_parse_args(int argc, char **argv, struct rsp_options *o, char *err, size_t errlen);

/** What to do with one request. */
struct rsp_plan {
	bool drop;
	int copies; /* 1, or 2 when duplicated */
	bool late;
	bool stray;
	uint64_t delay_ns; /* from now */
};

/** Deterministic PRNG (splitmix64) for the decisions; seed it once. */
struct rsp_rng {
	uint64_t state;
};

uint64_t rsp_rng_next(struct rsp_rng *rng);
double rsp_rng_unit(struct rsp_rng *rng); /* [0, 1) */

/** Decide the fate of the next request. */
struct rsp_plan rsp_plan_next(const struct rsp_options *o, struct rsp_rng *rng);

#endif
