/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* Unit tests: the generated mosquitto.conf, ACL and password files say what they claim. */
#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_internal.h"

static char *render(const struct tb_conf *conf, int *rc, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	*rc = tb__write_conf(f, conf, err, errlen);
	fclose(f);
	return text;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return true;
	return false;
}

static void conf_has_every_promised_setting(void **state)
{
	(void)state;
	const char *opts[] = { "sys_interval=2", "plugin_opt_observe_auth=true", NULL };
	const char *lines[] = { "max_queued_messages 5000", "keyfile {dir}/server.key", NULL };
	struct tb_conf conf = {
		.user = "alice",
		.port = 1111,
		.tls_port = 2222,
		.mtls_port = 3333,
		.dir = "/d",
		.ca_file = "/d/ca.crt",
		.server_cert = "/d/server.crt",
		.server_key = "/d/server.key",
		.plugin = "/p/mqtt_probe.so",
		.plugin_opts = opts,
		.conf_lines = lines,
		.password_file = true,
		.acl_file = true,
	};
	char err[256];
	int rc;
	char *text = render(&conf, &rc, err, sizeof err);
	assert_int_equal(rc, 0);
	static const char *expected[] = {
		"user alice",
		"allow_anonymous false",
		"password_file /d/passwd",
		"acl_file /d/acl",
		"persistence false",
		"set_tcp_nodelay true",
		"log_dest file /d/mosquitto.log",
		"per_listener_settings false",
		"plugin /p/mqtt_probe.so",
		"plugin_opt_sys_interval 2",
		"plugin_opt_observe_auth true",
		"max_queued_messages 5000",
		"keyfile /d/server.key",
		"listener 1111 127.0.0.1",
		"listener 2222 127.0.0.1",
		"listener 3333 127.0.0.1",
		"cafile /d/ca.crt",
		"certfile /d/server.crt",
		"require_certificate false",
		"require_certificate true",
	};
	for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
		if (!has_line(text, expected[i]))
			fail_msg("missing line '%s' in:\n%s", expected[i], text);
	/* The plugin line comes before its options, and the options before the listeners. */
	assert_true(strstr(text, "plugin /p") < strstr(text, "plugin_opt_sys_interval"));
	assert_true(strstr(text, "plugin_opt_observe_auth") < strstr(text, "listener 1111"));
	free(text);
}

static void conf_without_tls_plugin_or_files(void **state)
{
	(void)state;
	struct tb_conf conf = { .user = "bob", .port = 1111, .dir = "/d", .allow_anonymous = true };
	char err[256];
	int rc;
	char *text = render(&conf, &rc, err, sizeof err);
	assert_int_equal(rc, 0);
	assert_true(has_line(text, "allow_anonymous true"));
	assert_null(strstr(text, "password_file"));
	assert_null(strstr(text, "acl_file"));
	assert_null(strstr(text, "plugin"));
	assert_null(strstr(text, "cafile"));
	assert_null(strstr(text, "require_certificate"));
	free(text);
}

static void rejects_malformed_plugin_options(void **state)
{
	(void)state;
	static const char *bad[] = { "novalue", "Bad-Key=1", "=1", "k=a\nlistener 1" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *opts[] = { bad[i], NULL };
		struct tb_conf conf
		    = { .user = "u", .port = 1, .dir = "/d", .plugin = "/p.so", .plugin_opts = opts };
		char err[256] = "";
		int rc;
		free(render(&conf, &rc, err, sizeof err));
		assert_int_equal(rc, -1);
		assert_non_null(strstr(err, "bad plugin option"));
	}
}

static void acl_admits_test_users(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(tb__write_acl(f), 0);
	fclose(f);
	const char *user = strstr(text, "user " TB_USERNAME "\n");
	assert_non_null(user);
	assert_non_null(strstr(user, "topic readwrite #"));
	assert_non_null(strstr(user, "topic read $SYS/#"));
	const char *other = strstr(text, "user " TB_OTHER_USERNAME "\n");
	assert_non_null(other);
	assert_non_null(strstr(other, "topic readwrite limited/#"));
	free(text);
}

/* Recompute the PBKDF2 hash from the written salt: the line is what mosquitto 2.0 verifies. */
static void password_line_is_mosquitto_pbkdf2(void **state)
{
	(void)state;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_int_equal(tb__write_password_line(f, "u1", "s3cret"), 0);
	fclose(f);
	char salt64[64], hash64[128];
	assert_int_equal(sscanf(text, "u1:$7$101$%63[^$]$%127[^\n]", salt64, hash64), 2);
	unsigned char salt[48], hash[96], expect[64];
	int salt_len = EVP_DecodeBlock(salt, (unsigned char *)salt64, (int)strlen(salt64));
	int hash_len = EVP_DecodeBlock(hash, (unsigned char *)hash64, (int)strlen(hash64));
	assert_int_equal(salt_len, 12); /* 12 bytes encode to 16 characters, no padding */
	assert_true(hash_len >= 64);
	assert_int_equal(PKCS5_PBKDF2_HMAC("s3cret", 6, salt, 12, 101, EVP_sha512(), 64, expect), 1);
	assert_memory_equal(hash, expect, 64);
	free(text);
}

static void random_passwords_differ(void **state)
{
	(void)state;
	char a[25], b[25];
	assert_int_equal(tb__random_password(a, sizeof a), 0);
	assert_int_equal(tb__random_password(b, sizeof b), 0);
	assert_int_equal(strlen(a), 24);
	assert_string_not_equal(a, b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(conf_has_every_promised_setting),
		cmocka_unit_test(conf_without_tls_plugin_or_files),
		cmocka_unit_test(rejects_malformed_plugin_options),
		cmocka_unit_test(acl_admits_test_users),
		cmocka_unit_test(password_line_is_mosquitto_pbkdf2),
		cmocka_unit_test(random_passwords_differ),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
