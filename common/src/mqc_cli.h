/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_cli.h - the one command-line parser of the project's programs (mqbench, the responder,
 * gate-api, test-broker/run), getopt_long underneath.
 *
 * A program describes its options in a table; the broker connection options every MQTT program
 * takes (-b/--broker, TLS files, credentials, client id, QoS, protocol) are one shared table
 * handled here, so they are spelled, checked and documented once. --help is printed from the
 * same tables, so it cannot drift from what is parsed; -h/--help and --version come with it.
 *
 *   static const struct mqc_cli_opt opts[] = {
 *       { "topic", 't', "TOPIC", "the command topic (default a/b)" },
 *       MQC_CLI_END,
 *   };
 *   struct mqc_cli cli = { .prog = "demo", .opts = opts, .conn_opts = MQC_CLI_BROKER,
 *       .conn = &conn, .on_option = handle, .ctx = &mine };
 *   int rc = mqc_cli_parse(&cli, argc, argv);   0: go on; 1: --help/--version shown; 2: error
 *
 * Credentials never need the command line, where ps shows them: MQTT_USERNAME and MQTT_PASSWORD,
 * --password-file, or user:password@ in the broker URL (percent-encoded).
 */
#ifndef MQC_CLI_H
#define MQC_CLI_H

#include <stdio.h>

#include "mqc_client.h"

/** Keys for options without a short letter start here (programs); 0x1000 and up are shared. */
#define MQC_CLI_LONG 256

struct mqc_cli_opt {
	const char *name; /* long name without "--"; NULL with help set: a heading */
	int key;          /* the short letter, or MQC_CLI_LONG + n for a long-only option */
	const char *arg;  /* the value's name in --help; NULL: the option takes no value */
	const char *help; /* '\n' starts a continuation line */
	unsigned scope;   /* 0: always; otherwise only where mqc_cli.scope shares a bit with it */
};

#define MQC_CLI_END            \
	{                          \
		NULL, 0, NULL, NULL, 0 \
	}

/* Which shared connection options a program takes (mqc_cli.conn_opts). */
#define MQC_CLI_BROKER    1u /* -b/--broker (required), --cafile, --cert, --key, credentials */
#define MQC_CLI_CLIENT_ID 2u /* -i/--client-id */
#define MQC_CLI_QOS       4u /* -q/--qos */
#define MQC_CLI_PROTOCOL  8u /* --protocol 5|3.1.1 */
#define MQC_CLI_BROKER_LIST                                                                   \
	16u /* --broker takes several brokers (mqtt://a:1883,b:1883): nodes[], conn.url the first \
	     */

/** What the shared options set. Set qos and conn.protocol to the defaults before parsing. */
struct mqc_cli_conn {
	const char *broker;        /* as given, without credentials */
	struct mqc_conn_opts conn; /* parsed URL, TLS files, credentials, client id, protocol */
	int qos;
	char url_text[512];       /* broker without user:password@ */
	struct mqc_url nodes[16]; /* MQC_CLI_BROKER_LIST: every broker of the list (conn.url: the
	                             first); otherwise the one */
	size_t n_nodes;
	const char *ws_header; /* --ws-header: one more line for a WebSocket upgrade, or NULL */
	char user_buf[256];    /* from the URL */
	char secret_buf[512];  /* from the URL or --password-file */
};

struct mqc_cli {
	const char *prog;               /* in messages and --help: "mqbench request" */
	const char *synopsis;           /* after "Usage: PROG " */
	const char *about;              /* the text before the options (may be NULL) */
	const char *epilog;             /* the text after them (may be NULL) */
	const char *version;            /* printed by --version */
	const struct mqc_cli_opt *opts; /* the program's own, ending with MQC_CLI_END */
	unsigned scope;                 /* selects opts with a scope (e.g. mqbench's scenario) */
	const char *scope_name;         /* "the fanout scenario": in "does not apply to ..." */
	unsigned conn_opts;             /* MQC_CLI_* bits */
	struct mqc_cli_conn *conn;      /* required when conn_opts is not 0 */
	/* Called for each of the program's options in order (cli->ctx is the program's). Returns
	 * 0, or -1 after printing why (mqc_cli_bad() does). name is the option as typed ("--rate"
	 * or "-r"); value is NULL for an option without one. */
	int (*on_option)(const struct mqc_cli *cli, int key, const char *name, const char *value);
	void *ctx;
	char *err; /* when set, usage errors are written here (errlen bytes), not to stderr */
	size_t errlen;
};

/**
 * Parse argv[1..]. Reads MQTT_USERNAME and MQTT_PASSWORD first (options override them).
 * @return 0 to go on; 1 when --help or --version was printed (exit 0); 2 on a usage error, after
 *         a message on stderr that names the option and what it expects.
 */
int mqc_cli_parse(const struct mqc_cli *cli, int argc, char **argv);

/** The --help text. */
void mqc_cli_usage(const struct mqc_cli *cli, FILE *out);

/** "NAME: expected EXPECT, got 'VALUE'" as a usage error (see mqc_cli.err); returns -1. */
int mqc_cli_bad(const struct mqc_cli *cli, const char *name, const char *value, const char *expect);

#endif
