/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests: the test broker really accepts what it promises and refuses the rest.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_internal.h"
#include "tb_test.h"

static int hostname_port; /* an extra TLS listener on 127.0.0.2, not named in the certificate */

static void round_trip(const char *url)
{
	struct tb_client *sub = tb_test_connect(url, 5);
	struct tb_client *pub = tb_test_connect(url, 5);
	assert_int_equal(tb_client_subscribe(sub, "rt/+", 1, 0, NULL), 1);
	assert_int_equal(tb_client_publish(pub, "rt/x", "hello", 5, 1, false, NULL), 0);
	struct tb_message *m = tb_client_receive(sub, 5000);
	assert_non_null(m);
	assert_string_equal(m->topic, "rt/x");
	assert_string_equal(m->payload, "hello");
	tb_message_free(m);
	tb_client_destroy(pub);
	tb_client_destroy(sub);
}

static void plain_round_trip(void **state)
{
	(void)state;
	round_trip(tb_test_info()->mqtt_url);
}

static void tls_round_trip_with_ca_and_hostname_check(void **state)
{
	(void)state;
	round_trip(tb_test_info()->mqtts_url);
}

static int try_connect(const char *url, const char *user, const char *password, const char *ca,
    const char *cert, const char *key, int protocol, int *reason)
{
	struct tb_client_options o = { .url = url,
		.username = user,
		.password = password,
		.cafile = ca,
		.cert = cert,
		.key = key,
		.protocol = protocol,
		.timeout_ms = 3000 };
	struct tb_client *c = NULL;
	char err[256];
	int rc = tb_client_connect(&o, &c, reason, err, sizeof err);
	tb_client_destroy(c);
	return rc;
}

static void wrong_password_and_anonymous_are_refused(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	int reason;
	assert_int_equal(
	    try_connect(i->mqtt_url, i->username, "wrong", NULL, NULL, NULL, 5, &reason), -1);
	/* mosquitto 2.0.11 answers a bad password on v5 with Not authorized (0x87). */
	assert_true(reason == 0x86 || reason == 0x87);
	assert_int_equal(
	    try_connect(i->mqtt_url, i->username, "wrong", NULL, NULL, NULL, 4, &reason), -1);
	assert_int_equal(reason, 5); /* 3.1.1: not authorised */
	assert_int_equal(try_connect(i->mqtt_url, NULL, NULL, NULL, NULL, NULL, 5, &reason), -1);
	assert_true(reason == 0x87 || reason == 0x86);
	assert_int_equal(try_connect(i->mqtt_url, i->other_username, i->other_password, NULL, NULL,
	                     NULL, 5, &reason),
	    0);
}

static void acl_limits_the_other_user(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	struct tb_client_options o
	    = { .url = i->mqtt_url, .username = i->other_username, .password = i->other_password };
	struct tb_client *limited, *full = tb_test_connect(i->mqtt_url, 5);
	int reason;
	char err[256];
	assert_int_equal(tb_client_connect(&o, &limited, &reason, err, sizeof err), 0);
	/* acl_file grants every SUBSCRIBE in 2.0 and filters at delivery (READ check). */
	assert_int_equal(tb_client_subscribe(limited, "#", 1, 0, NULL), 1);
	assert_int_equal(tb_client_publish(limited, "other/x", "x", 1, 1, false, NULL), 0x87);
	assert_int_equal(tb_client_publish(full, "other/y", "y", 1, 1, false, NULL), 0);
	assert_int_equal(tb_client_publish(full, "limited/z", "z", 1, 1, false, NULL), 0);
	struct tb_message *m = tb_client_receive(limited, 2000);
	assert_non_null(m);
	assert_string_equal(m->topic, "limited/z"); /* other/y was never delivered */
	tb_message_free(m);
	assert_null(tb_client_receive(limited, 200));
	tb_client_destroy(full);
	tb_client_destroy(limited);
}

static void tls_rejects_wrong_ca_and_wrong_hostname(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	int reason;
	/* The client certificate is not a CA: verification of the server must fail. */
	assert_int_equal(
	    try_connect(i->mqtts_url, i->username, i->password, i->client_cert, NULL, NULL, 5, &reason),
	    -1);
	assert_int_equal(reason, -1);
	/* Right CA, but 127.0.0.2 is not in the certificate's names. */
	char url[64];
	snprintf(url, sizeof url, "mqtts://127.0.0.2:%d", hostname_port);
	assert_int_equal(
	    try_connect(url, i->username, i->password, i->ca_file, NULL, NULL, 5, &reason), -1);
	assert_int_equal(reason, -1);
	/* "localhost" is in the certificate. */
	snprintf(url, sizeof url, "mqtts://localhost:%d", i->tls_port);
	assert_int_equal(
	    try_connect(url, i->username, i->password, i->ca_file, NULL, NULL, 5, &reason), 0);
}

static void mutual_tls_requires_a_client_certificate(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	int reason;
	assert_int_equal(
	    try_connect(i->mtls_url, i->username, i->password, i->ca_file, NULL, NULL, 5, &reason), -1);
	assert_int_equal(try_connect(i->mtls_url, i->username, i->password, i->ca_file, i->client_cert,
	                     i->client_key, 5, &reason),
	    0);
}

static void restart_keeps_ports_and_credentials(void **state)
{
	(void)state;
	struct tb_broker *b = tb_test_broker();
	pid_t before = tb_test_info()->pid;
	char err[512];
	if (tb_broker_restart(b, err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	assert_int_not_equal(tb_test_info()->pid, before);
	round_trip(tb_test_info()->mqtt_url);
}

/* --- start-up failures: a clear message and nothing left behind ------------------------- */

static char parent[64];

static int make_parent(void **state)
{
	(void)state;
	snprintf(parent, sizeof parent, "/tmp/tb-test-XXXXXX");
	return mkdtemp(parent) ? 0 : -1;
}

static int remove_parent(void **state)
{
	(void)state;
	DIR *d = opendir(parent);
	int leftovers = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		leftovers += e->d_name[0] != '.';
	if (d)
		closedir(d);
	tb__remove_tree(parent);
	if (leftovers)
		fprintf(stderr, "%d entries left behind in %s\n", leftovers, parent);
	return leftovers ? -1 : 0;
}

static void expect_start_failure(struct tb_options *o, const char *needle)
{
	struct tb_broker *b = NULL;
	char err[1024] = "";
	o->parent_dir = o->parent_dir ? o->parent_dir : parent;
	int rc = tb_broker_start(o, &b, err, sizeof err);
	if (rc == 0) {
		tb_broker_stop(b);
		fail_msg("start succeeded; expected an error containing '%s'", needle);
	}
	if (!strstr(err, needle))
		fail_msg("error '%s' lacks '%s'", err, needle);
}

static void missing_mosquitto_is_named(void **state)
{
	(void)state;
	struct tb_options o = { .mosquitto = "/nonexistent/mosquitto" };
	expect_start_failure(&o, "mosquitto not found at '/nonexistent/mosquitto'");
}

static void taken_port_is_named(void **state)
{
	(void)state;
	struct tb_options o = { .port = tb_test_info()->port, .no_tls = true };
	char needle[64];
	snprintf(needle, sizeof needle, "port %d is already in use", o.port);
	expect_start_failure(&o, needle);
}

static void unwritable_directory_is_named(void **state)
{
	(void)state;
	struct tb_options o = { .parent_dir = "/proc/self/fdinfo" };
	expect_start_failure(&o, "cannot create a directory in /proc/self/fdinfo");
}

static void broker_config_error_is_reported(void **state)
{
	(void)state;
	const char *lines[] = { "no_such_option 1", NULL };
	struct tb_options o = { .conf_lines = lines, .no_tls = true };
	expect_start_failure(&o, "mosquitto exited with status");
}

int main(void)
{
	hostname_port = tb__free_port();
	char listener[64];
	snprintf(listener, sizeof listener, "listener %d 127.0.0.2", hostname_port);
	const char *lines[] = { listener, "cafile {dir}/ca.crt", "certfile {dir}/server.crt",
		"keyfile {dir}/server.key", NULL };
	struct tb_options options = { .conf_lines = lines };
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(plain_round_trip),
		cmocka_unit_test(tls_round_trip_with_ca_and_hostname_check),
		cmocka_unit_test(wrong_password_and_anonymous_are_refused),
		cmocka_unit_test(acl_limits_the_other_user),
		cmocka_unit_test(tls_rejects_wrong_ca_and_wrong_hostname),
		cmocka_unit_test(mutual_tls_requires_a_client_certificate),
		cmocka_unit_test(restart_keeps_ports_and_credentials),
		cmocka_unit_test_setup_teardown(missing_mosquitto_is_named, make_parent, remove_parent),
		cmocka_unit_test_setup_teardown(taken_port_is_named, make_parent, remove_parent),
		cmocka_unit_test_setup_teardown(unwritable_directory_is_named, make_parent, remove_parent),
		cmocka_unit_test_setup_teardown(
		    broker_config_error_is_reported, make_parent, remove_parent),
	};
	return TB_TEST_RUN(tests, &options);
}
