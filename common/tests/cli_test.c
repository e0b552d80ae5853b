/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* Unit tests: the one command-line parser (mqc_cli.h) and its shared connection options. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mqc_cli.h"

enum { O_COUNT = 'n', O_FLAG = MQC_CLI_LONG, O_ONLY_B };

static const struct mqc_cli_opt table[] = {
	{ NULL, 0, NULL, "Things:", 0 },
	{ "count", O_COUNT, "N", "how many", 0 },
	{ "flag", O_FLAG, NULL, "a switch", 0 },
	{ "only-b", O_ONLY_B, "X", "for scope 2 only", 2 },
	MQC_CLI_END,
};

struct seen {
	int count;
	bool flag;
	const char *only_b;
};

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct seen *s = cli->ctx;
	switch (key) {
		case O_COUNT:
			if (strcmp(value, "bad") == 0)
				return mqc_cli_bad(cli, name, value, "a number");
			s->count = atoi(value);
			return 0;
		case O_FLAG:
			s->flag = value == NULL;
			return 0;
		case O_ONLY_B:
			s->only_b = value;
			return 0;
		default:
			return -1;
	}
}

struct run {
	struct mqc_cli_conn conn;
	struct seen seen;
	char err[256];
	int rc;
};

/* Parse NULL-terminated args with the connection options in conn_opts and scope. */
static void parse(struct run *r, unsigned conn_opts, unsigned scope, ...)
{
	char *argv[32] = { "prog" };
	int argc = 1;
	va_list ap;
	va_start(ap, scope);
	for (char *a; (a = va_arg(ap, char *));)
		argv[argc++] = a;
	va_end(ap);
	memset(r, 0, sizeof *r);
	r->conn.qos = 1;
	r->conn.conn.protocol = 5;
	const struct mqc_cli cli = { .prog = "prog",
		.opts = table,
		.scope = scope,
		.scope_name = "scope one",
		.conn_opts = conn_opts,
		.conn = &r->conn,
		.on_option = on_option,
		.ctx = &r->seen,
		.err = r->err,
		.errlen = sizeof r->err };
	r->rc = mqc_cli_parse(&cli, argc, argv);
}

#define ALL (MQC_CLI_BROKER | MQC_CLI_CLIENT_ID | MQC_CLI_QOS | MQC_CLI_PROTOCOL)

static void long_and_short_options(void **state)
{
	(void)state;
	struct run r;
	parse(&r, ALL, 1, "-b", "mqtts://broker.example:8884", "-q", "2", "--protocol", "3.1.1", "-i",
	    "me", "-n", "7", "--flag", "--cafile", "ca.pem", NULL);
	assert_int_equal(r.rc, 0);
	assert_true(r.conn.conn.url.tls);
	assert_string_equal(r.conn.conn.url.host, "broker.example");
	assert_int_equal(r.conn.conn.url.port, 8884);
	assert_string_equal(r.conn.broker, "mqtts://broker.example:8884");
	assert_int_equal(r.conn.qos, 2);
	assert_int_equal(r.conn.conn.protocol, 4);
	assert_string_equal(r.conn.conn.client_id, "me");
	assert_string_equal(r.conn.conn.cafile, "ca.pem");
	assert_int_equal(r.seen.count, 7);
	assert_true(r.seen.flag);
	/* Defaults stay when not given; --count=N works too. */
	parse(&r, ALL, 1, "--broker=mqtt://h", "--count=3", NULL);
	assert_int_equal(r.rc, 0);
	assert_int_equal(r.conn.qos, 1);
	assert_int_equal(r.conn.conn.url.port, 1883);
	assert_int_equal(r.seen.count, 3);
}

static void errors_name_the_option(void **state)
{
	(void)state;
	static const struct {
		const char *a, *b, *needle;
	} cases[] = {
		{ "--qos", "3", "--qos: expected 0, 1 or 2, got '3'" },
		{ "-q", "9", "-q: expected 0, 1 or 2, got '9'" },
		{ "--protocol", "6", "--protocol: expected 5 or 3.1.1, got '6'" },
		{ "--count", "bad", "--count: expected a number, got 'bad'" },
		{ "--bogus", "x", "unknown option '--bogus'" },
		{ "--only-b", "x", "--only-b does not apply to scope one" },
		{ "--cert", "c.pem", "--cert and --key go together" },
		{ "--password", "p", "a password needs a user name" },
		{ "--password-file", "/nonexistent/pw", "--password-file /nonexistent/pw" },
		{ "extra", NULL, "unexpected argument 'extra'" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct run r;
		parse(&r, ALL, 1, "-b", "mqtt://h", cases[i].a, cases[i].b, NULL);
		if (r.rc != 2 || !strstr(r.err, cases[i].needle))
			fail_msg("%s %s: rc %d, message '%s' lacks '%s'", cases[i].a,
			    cases[i].b ? cases[i].b : "", r.rc, r.err, cases[i].needle);
	}
	struct run r;
	parse(&r, ALL, 1, "--count", NULL);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "needs a value"));
	parse(&r, ALL, 1, NULL);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "--broker URL is required"));
	parse(&r, ALL, 1, "-b", "http://h", NULL);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "--broker 'http://h'"));
	/* A program without the QoS option refuses it by name. */
	parse(&r, MQC_CLI_BROKER, 1, "-b", "mqtt://h", "--qos", "1", NULL);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "--qos does not apply"));
	/* Scope 2 takes --only-b. */
	parse(&r, ALL, 2, "-b", "mqtt://h", "--only-b", "yes", NULL);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.seen.only_b, "yes");
}

static void credentials_from_url_file_and_environment(void **state)
{
	(void)state;
	struct run r;
	unsetenv("MQTT_USERNAME");
	unsetenv("MQTT_PASSWORD");
	/* user:password@ is taken out of the URL, percent-decoded. */
	parse(&r, ALL, 1, "-b", "mqtt://al%40ice:p%3Ass@h:1884", NULL);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.conn.conn.username, "al@ice");
	assert_string_equal(r.conn.conn.password, "p:ss");
	assert_string_equal(r.conn.broker, "mqtt://h:1884");
	assert_string_equal(r.conn.conn.url.host, "h");
	parse(&r, ALL, 1, "-b", "mqtt://a:b%zz@h", NULL);
	assert_int_equal(r.rc, 2);
	assert_non_null(strstr(r.err, "percent-encoded"));
	/* The environment, below the URL, below the options. */
	setenv("MQTT_USERNAME", "env-user", 1);
	setenv("MQTT_PASSWORD", "env-pass", 1);
	parse(&r, ALL, 1, "-b", "mqtt://h", NULL);
	assert_string_equal(r.conn.conn.username, "env-user");
	assert_string_equal(r.conn.conn.password, "env-pass");
	parse(&r, ALL, 1, "-b", "mqtt://url-user:url-pass@h", NULL);
	assert_string_equal(r.conn.conn.username, "url-user");
	assert_string_equal(r.conn.conn.password, "url-pass");
	parse(&r, ALL, 1, "-b", "mqtt://url-user:url-pass@h", "-u", "opt-user", "-P", "opt-pass", NULL);
	assert_string_equal(r.conn.conn.username, "opt-user");
	assert_string_equal(r.conn.conn.password, "opt-pass");
	unsetenv("MQTT_USERNAME");
	unsetenv("MQTT_PASSWORD");
	/* --password-file: the first line, without its newline. */
	char path[] = "/tmp/mqc-cli-test-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "s3cret\nsecond line\n", 19), 19);
	close(fd);
	parse(&r, ALL, 1, "-b", "mqtt://h", "-u", "me", "--password-file", path, NULL);
	unlink(path);
	assert_int_equal(r.rc, 0);
	assert_string_equal(r.conn.conn.password, "s3cret");
}

static void help_and_version_stop_the_program(void **state)
{
	(void)state;
	struct run r;
	FILE *saved = stdout;
	stdout = fopen("/dev/null", "w");
	assert_non_null(stdout);
	parse(&r, ALL, 1, "--help", NULL);
	int help = r.rc;
	parse(&r, ALL, 1, "-h", NULL);
	int h = r.rc;
	parse(&r, ALL, 1, "--version", NULL);
	fclose(stdout);
	stdout = saved;
	assert_int_equal(help, 1);
	assert_int_equal(h, 1);
	assert_int_equal(r.rc, 1);
}

static void help_lists_what_applies(void **state)
{
	(void)state;
	struct mqc_cli_conn conn = { .qos = 2, .conn.protocol = 4 };
	const struct mqc_cli cli = { .prog = "prog",
		.opts = table,
		.scope = 1,
		.conn_opts = MQC_CLI_BROKER | MQC_CLI_QOS | MQC_CLI_PROTOCOL,
		.conn = &conn };
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	mqc_cli_usage(&cli, f);
	fclose(f);
	assert_non_null(strstr(text, "-b, --broker URL"));
	assert_non_null(strstr(text, "-n, --count N"));
	assert_non_null(strstr(text, "--password-file FILE"));
	assert_non_null(strstr(text, "(default 2)"));     /* the QoS default as set */
	assert_non_null(strstr(text, "(default 3.1.1)")); /* the protocol default as set */
	assert_null(strstr(text, "--only-b"));            /* not in scope 1 */
	assert_null(strstr(text, "--client-id"));         /* not taken */
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(long_and_short_options),
		cmocka_unit_test(errors_name_the_option),
		cmocka_unit_test(credentials_from_url_file_and_environment),
		cmocka_unit_test(help_and_version_stop_the_program),
		cmocka_unit_test(help_lists_what_applies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
