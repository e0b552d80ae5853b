/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * cli.c - the one command-line parser: see mqc_cli.h.
 */
#define _GNU_SOURCE
#include "mqc_cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_strutil.h"

enum {
	K_CAFILE = 0x1000,
	K_CERT,
	K_KEY,
	K_PASSWORD_FILE,
	K_WS_HEADER,
	K_PROTOCOL,
	K_VERSION,
};

/* What the command line gave, so that it beats the URL, which beats the environment. */
struct given {
	const char *url;
	bool username, password;
};

/* The broker connection options; their scope is matched against mqc_cli.conn_opts. */
static const struct mqc_cli_opt conn_table[] = {
	{ NULL, 0, NULL, "Broker connection:", MQC_CLI_BROKER },
	{ "broker", 'b', "URL",
	    "mqtt://[USER[:PASSWORD]@]HOST[:PORT], mqtts://... for TLS\n(also tcp://, ssl://), "
	    "ws://HOST[:PORT][/PATH] and wss://... for\nMQTT over WebSockets (path /mqtt when "
	    "none); required",
	    MQC_CLI_BROKER },
	{ "cafile", K_CAFILE, "FILE",
	    "CA certificate for mqtts:// (default: the system's trust\nstore); the broker's "
	    "certificate and host name are always\nverified",
	    MQC_CLI_BROKER },
	{ "cert", K_CERT, "FILE", "client certificate (with --key)", MQC_CLI_BROKER },
	{ "ws-header", K_WS_HEADER, "'NAME: VALUE'",
	    "ws://, wss://: one more header for the upgrade\n(a proxy's 'Authorization: Bearer "
	    "...')",
	    MQC_CLI_BROKER },
	{ "key", K_KEY, "FILE", "the client certificate's private key", MQC_CLI_BROKER },
	{ "username", 'u', "USER", "user name (or MQTT_USERNAME, or in the URL)", MQC_CLI_BROKER },
	{ "password", 'P', "PASSWORD",
	    "password; ps shows it (in the URL too): prefer\nMQTT_PASSWORD or --password-file",
	    MQC_CLI_BROKER },
	{ "password-file", K_PASSWORD_FILE, "FILE", "the password is the first line of FILE",
	    MQC_CLI_BROKER },
	{ "client-id", 'i', "ID", "client id (default: a prefix and 64 random bits)",
	    MQC_CLI_CLIENT_ID },
	{ "qos", 'q', "0|1|2", "QoS", MQC_CLI_QOS },
	{ "protocol", K_PROTOCOL, "5|3.1.1", "MQTT version", MQC_CLI_PROTOCOL },
	MQC_CLI_END,
};

/* A usage error: into cli->err when the caller gave one (tests), else "PROG: ..." on stderr. */
static void say(const struct mqc_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(const struct mqc_cli *cli, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (cli->err && cli->errlen) {
		vsnprintf(cli->err, cli->errlen, fmt, ap);
	} else {
		fprintf(stderr, "%s: ", cli->prog);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

static bool is_heading(const struct mqc_cli_opt *o)
{
	return !o->name && o->help;
}

static bool at_end(const struct mqc_cli_opt *o)
{
	return !o->name && !o->help;
}

static bool in_scope(const struct mqc_cli_opt *o, unsigned scope)
{
	return o->scope == 0 || (o->scope & scope) != 0;
}

static bool is_shared(const struct mqc_cli_opt *o)
{
	return o >= conn_table && o < conn_table + sizeof conn_table / sizeof conn_table[0];
}

static unsigned scope_of(const struct mqc_cli *cli, const struct mqc_cli_opt *o)
{
	return is_shared(o) ? cli->conn_opts : cli->scope;
}

/* The entry for key, preferring one in scope; NULL when no table has it. */
static const struct mqc_cli_opt *find(const struct mqc_cli *cli, int key, bool *applies)
{
	const struct mqc_cli_opt *tables[] = { conn_table, cli->opts };
	const struct mqc_cli_opt *seen = NULL;
	for (size_t t = 0; t < 2; t++)
		for (const struct mqc_cli_opt *o = tables[t]; o && !at_end(o); o++) {
			if (is_heading(o) || o->key != key)
				continue;
			if (in_scope(o, scope_of(cli, o))) {
				*applies = true;
				return o;
			}
			seen = seen ? seen : o;
		}
	*applies = false;
	return seen;
}

static void print_wrapped(FILE *out, const char *text, int column)
{
	for (const char *p = text; *p; p++) {
		fputc(*p, out);
		if (*p == '\n')
			fprintf(out, "%*s", column, "");
	}
}

static void print_option(FILE *out, const struct mqc_cli_opt *o, const char *extra)
{
	enum { COLUMN = 30 };
	char left[96];
	int n;
	if (o->key > 0 && o->key < MQC_CLI_LONG)
		n = snprintf(left, sizeof left, "  -%c, --%s%s%s", o->key, o->name, o->arg ? " " : "",
		    o->arg ? o->arg : "");
	else
		n = snprintf(
		    left, sizeof left, "      --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
	fputs(left, out);
	if (n >= COLUMN - 1)
		fprintf(out, "\n%*s", COLUMN, "");
	else
		fprintf(out, "%*s", COLUMN - n, "");
	print_wrapped(out, o->help ? o->help : "", COLUMN);
	if (extra)
		fputs(extra, out);
	fputc('\n', out);
}

/* The table's entries in scope; headings only when something under them is. */
static void print_table(
    FILE *out, const struct mqc_cli *cli, const struct mqc_cli_opt *table, unsigned scope)
{
	for (const struct mqc_cli_opt *o = table; o && !at_end(o); o++) {
		if (!in_scope(o, scope))
			continue;
		if (is_heading(o)) {
			bool any = false;
			for (const struct mqc_cli_opt *u = o + 1; !at_end(u) && !is_heading(u); u++)
				any |= in_scope(u, scope);
			if (any)
				fprintf(out, "\n%s\n", o->help);
			continue;
		}
		char extra[128] = "";
		if (is_shared(o) && o->key == 'b' && (cli->conn_opts & MQC_CLI_BROKER_LIST))
			snprintf(extra, sizeof extra, "\n%30s%s", "",
			    "or several brokers: mqtt://HOST:PORT,HOST:PORT,...");
		else if (is_shared(o) && o->key == 'q' && cli->conn)
			snprintf(extra, sizeof extra, " (default %d)", cli->conn->qos);
		else if (is_shared(o) && o->key == K_PROTOCOL && cli->conn)
			snprintf(extra, sizeof extra, " (default %s)",
			    cli->conn->conn.protocol == 4 ? "3.1.1" : "5");
		print_option(out, o, extra[0] ? extra : NULL);
	}
}

void mqc_cli_usage(const struct mqc_cli *cli, FILE *out)
{
	fprintf(out, "Usage: %s %s\n", cli->prog, cli->synopsis ? cli->synopsis : "[OPTIONS]");
	if (cli->about)
		fprintf(out, "\n%s\n", cli->about);
	if (cli->conn_opts)
		print_table(out, cli, conn_table, cli->conn_opts);
	if (cli->opts && !is_heading(cli->opts))
		fprintf(out, "\nOptions:\n");
	print_table(out, cli, cli->opts, cli->scope);
	fprintf(out, "  -h, --help                  this text\n");
	fprintf(out, "      --version               the version\n");
	if (cli->epilog)
		fprintf(out, "\n%s\n", cli->epilog);
}

int mqc_cli_bad(const struct mqc_cli *cli, const char *name, const char *value, const char *expect)
{
	say(cli, "%s: expected %s, got '%s' (see --help)", name, expect, value ? value : "");
	return -1;
}

static int hex(int c)
{
	return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* Percent-decode src[0..len) into out (NUL-terminated). Returns 0, or -1 when it does not fit
 * or has a bad escape or a NUL. */
static int decode(const char *src, size_t len, char *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int c = (unsigned char)src[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -1;
			int hi = hex((unsigned char)src[i + 1]), lo = hex((unsigned char)src[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			c = hi * 16 + lo;
			i += 2;
		}
		if (n + 1 >= cap)
			return -1;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	return 0;
}

/* USER[:PASSWORD]@ out of the URL: the rest goes to mqc_url_parse, which takes no credentials.
 * They are used unless an option gave them. */
static int split_credentials(
    const struct mqc_cli *cli, struct mqc_cli_conn *c, const char *url, const struct given *g)
{
	const char *authority = strstr(url, "://");
	authority = authority ? authority + 3 : url;
	size_t span = strcspn(authority, "/?#");
	const char *at = memrchr(authority, '@', span);
	if (!at) {
		snprintf(c->url_text, sizeof c->url_text, "%s", url);
		return 0;
	}
	const char *colon = memchr(authority, ':', (size_t)(at - authority));
	size_t user_len = (size_t)((colon ? colon : at) - authority);
	char secret[sizeof c->secret_buf];
	if (decode(authority, user_len, c->user_buf, sizeof c->user_buf) != 0
	    || (colon && decode(colon + 1, (size_t)(at - colon - 1), secret, sizeof secret) != 0)) {
		say(cli,
		    "--broker: the user or password in the URL is too long or badly "
		    "percent-encoded");
		return -1;
	}
	if ((size_t)snprintf(
	        c->url_text, sizeof c->url_text, "%.*s%s", (int)(authority - url), url, at + 1)
	    >= sizeof c->url_text) {
		say(cli, "--broker: the URL is too long");
		return -1;
	}
	if (c->user_buf[0] && !g->username)
		c->conn.username = c->user_buf;
	if (colon && !g->password) {
		memcpy(c->secret_buf, secret, sizeof secret);
		c->conn.password = c->secret_buf;
	}
	explicit_bzero(secret, sizeof secret);
	return 0;
}

static int read_password_file(const struct mqc_cli *cli, struct mqc_cli_conn *c, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		say(cli, "--password-file %s: %s", path, strerror(errno));
		return -1;
	}
	c->secret_buf[0] = '\0'; /* an empty file: an empty password */
	bool ok = fgets(c->secret_buf, sizeof c->secret_buf, f) != NULL || feof(f);
	/* A full buffer without its newline: the line goes on, unless the file ends there. */
	bool cut = ok && strlen(c->secret_buf) == sizeof c->secret_buf - 1
	    && !strchr(c->secret_buf, '\n') && fgetc(f) != EOF;
	fclose(f);
	size_t n = strcspn(c->secret_buf, "\r\n");
	if (!ok || cut) {
		say(cli, "--password-file %s: %s", path,
		    ok ? "the first line is too long" : "cannot be read");
		return -1;
	}
	c->secret_buf[n] = '\0';
	c->conn.password = c->secret_buf;
	return 0;
}

static int shared_option(
    const struct mqc_cli *cli, int key, const char *name, const char *value, struct given *g)
{
	struct mqc_cli_conn *c = cli->conn;
	uint64_t u;
	if (!c) /* mqc_cli_parse refuses conn_opts without conn: not reached */
		return -1;
	switch (key) {
		case 'b':
			g->url = value;
			return 0;
		case K_CAFILE:
			c->conn.cafile = value;
			return 0;
		case K_WS_HEADER:
			if (strpbrk(value, "\r\n") || !strchr(value, ':'))
				return mqc_cli_bad(cli, name, value, "one 'Name: value' header line");
			c->ws_header = value;
			return 0;
		case K_CERT:
			c->conn.cert = value;
			return 0;
		case K_KEY:
			c->conn.key = value;
			return 0;
		case 'u':
			c->conn.username = value;
			g->username = true;
			return 0;
		case 'P':
			c->conn.password = value;
			g->password = true;
			return 0;
		case K_PASSWORD_FILE:
			g->password = true;
			return read_password_file(cli, c, value);
		case 'i':
			if (!*value)
				return mqc_cli_bad(cli, name, value, "a client id");
			c->conn.client_id = value;
			return 0;
		case 'q':
			if (mqc_parse_u64(value, 0, 2, &u) != 0)
				return mqc_cli_bad(cli, name, value, "0, 1 or 2");
			c->qos = (int)u;
			return 0;
		case K_PROTOCOL:
			if (strcmp(value, "5") == 0)
				c->conn.protocol = 5;
			else if (strcmp(value, "3.1.1") == 0 || strcmp(value, "4") == 0)
				c->conn.protocol = 4;
			else
				return mqc_cli_bad(cli, name, value, "5 or 3.1.1");
			return 0;
		default:
			return -1;
	}
}

/* After every option: the broker URL parsed, credentials and files that go together. */
static int finish_connection(const struct mqc_cli *cli, const struct given *g)
{
	struct mqc_cli_conn *c = cli->conn;
	if (!g->url) {
		say(cli, "--broker URL is required (see --help)");
		return -1;
	}
	if (split_credentials(cli, c, g->url, g) != 0)
		return -1;
	char err[256];
	if ((cli->conn_opts & MQC_CLI_BROKER_LIST)
	        ? mqc_url_list_parse(c->url_text, c->nodes, sizeof c->nodes / sizeof c->nodes[0],
	              &c->n_nodes, err, sizeof err)
	            != 0
	        : mqc_url_parse(c->url_text, &c->nodes[0], err, sizeof err) != 0) {
		say(cli, "--broker '%s': %s", c->url_text, err);
		return -1;
	}
	if (!(cli->conn_opts & MQC_CLI_BROKER_LIST))
		c->n_nodes = 1;
	if (c->ws_header && !c->nodes[0].ws) {
		say(cli, "--ws-header is for ws:// and wss:// brokers, not '%s'", c->url_text);
		return -1;
	}
	c->conn.url = c->nodes[0];
	c->broker = c->url_text;
	if (!c->conn.cert != !c->conn.key) {
		say(cli, "--cert and --key go together");
		return -1;
	}
	if (g->password && !c->conn.username) {
		say(cli,
		    "a password needs a user name (--username, MQTT_USERNAME or "
		    "USER@ in the URL)");
		return -1;
	}
	return 0;
}

int mqc_cli_parse(const struct mqc_cli *cli, int argc, char **argv)
{
	if (cli->conn_opts && !cli->conn) {
		say(cli, "conn_opts without conn (a bug in the program)");
		return 2;
	}
	const struct mqc_cli_opt *tables[] = { conn_table, cli->opts };
	size_t count = 0;
	for (size_t t = 0; t < 2; t++)
		for (const struct mqc_cli_opt *o = tables[t]; o && !at_end(o); o++)
			count++;
	struct option *longopts = calloc(count + 3, sizeof *longopts);
	char *shorts = calloc(2 * count + 8, 1);
	if (!longopts || !shorts) {
		free(longopts);
		free(shorts);
		say(cli, "out of memory");
		return 2;
	}
	size_t nl = 0, ns = 0;
	shorts[ns++] = ':'; /* a missing value is ':', told apart from an unknown option */
	shorts[ns++] = 'h';
	for (size_t t = 0; t < 2; t++)
		for (const struct mqc_cli_opt *o = tables[t]; o && !at_end(o); o++) {
			if (is_heading(o))
				continue;
			bool dup = false;
			for (size_t i = 0; i < nl && !dup; i++)
				dup = strcmp(longopts[i].name, o->name) == 0;
			if (!dup)
				longopts[nl++] = (struct option) { o->name,
					o->arg ? required_argument : no_argument, NULL, o->key };
			if (o->key > 0 && o->key < MQC_CLI_LONG && !memchr(shorts, o->key, ns)) {
				shorts[ns++] = (char)o->key;
				if (o->arg)
					shorts[ns++] = ':';
			}
		}
	longopts[nl++] = (struct option) { "help", no_argument, NULL, 'h' };
	longopts[nl++] = (struct option) { "version", no_argument, NULL, K_VERSION };

	if (cli->conn) {
		const char *user = getenv("MQTT_USERNAME"), *pass = getenv("MQTT_PASSWORD");
		cli->conn->conn.username = user && *user ? user : NULL;
		cli->conn->conn.password = pass && *pass ? pass : NULL;
	}
	struct given given = { 0 };
	int rc = 0, key, index = -1;
	optind = 1;
	opterr = 0;
	while (rc == 0 && (key = getopt_long(argc, argv, shorts, longopts, &index)) != -1) {
		char name[80];
		if (index >= 0)
			snprintf(name, sizeof name, "--%s", longopts[index].name);
		else
			snprintf(name, sizeof name, "-%c", optopt ? optopt : key);
		index = -1;
		if (key == 'h') {
			mqc_cli_usage(cli, stdout);
			rc = 1;
		} else if (key == K_VERSION) {
			printf("%s\n", cli->version ? cli->version : cli->prog);
			rc = 1;
		} else if (key == ':') {
			say(cli, "option '%s' needs a value (see --help)", argv[optind - 1]);
			rc = 2;
		} else if (key == '?') {
			say(cli, "unknown option '%s' (see --help)", argv[optind - 1]);
			rc = 2;
		} else {
			bool applies;
			const struct mqc_cli_opt *o = find(cli, key, &applies);
			if (!o || !applies) {
				say(cli, "%s does not apply to %s (see --help)", name,
				    cli->scope_name ? cli->scope_name : cli->prog);
				rc = 2;
			} else if (is_shared(o)) {
				rc = shared_option(cli, key, name, optarg, &given) == 0 ? 0 : 2;
			} else {
				rc = cli->on_option(cli, key, name, o->arg ? optarg : NULL) == 0 ? 0 : 2;
			}
		}
	}
	if (rc == 0 && optind < argc) {
		say(cli, "unexpected argument '%s' (see --help)", argv[optind]);
		rc = 2;
	}
	if (rc == 0 && (cli->conn_opts & MQC_CLI_BROKER) && finish_connection(cli, &given) != 0)
		rc = 2;
	free(longopts);
	free(shorts);
	return rc;
}
