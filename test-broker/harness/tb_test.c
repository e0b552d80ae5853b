/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_test.c - the test harness (tb_test.h): one real broker per test executable, spawned
 * programs, and skips that say why.
 */
#include "tb_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "tb_internal.h"

static struct tb_broker *broker;
static bool skipped; /* a test was skipped: the executable exits 77 if nothing failed */

void tb__test_skipping(const char *why)
{
	const char *no_skip = getenv("MQTTPOOL_NO_SKIP");
	if (no_skip && strcmp(no_skip, "1") == 0)
		fail_msg("cannot run: %s (MQTTPOOL_NO_SKIP=1 turns a skip into a failure)", why);
	print_message("SKIPPED: %s\n", why);
	skipped = true;
}

struct tb_broker *tb_test_broker(void)
{
	return broker;
}

const struct tb_info *tb_test_info(void)
{
	return tb_broker_info(broker);
}

int tb_test_log_count(const char *a, const char *b)
{
	FILE *f = fopen(tb_test_info()->log_file, "r");
	if (!f)
		return 0;
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, a) && (!b || strstr(line, b));
	fclose(f);
	return n;
}

struct tb_client *tb_test_connect(const char *url, int protocol)
{
	const struct tb_info *info = tb_test_info();
	struct tb_client_options o = {
		.url = url,
		.username = info->username,
		.password = info->password,
		.cafile = info->ca_file,
		.protocol = protocol,
	};
	struct tb_client *c = NULL;
	int reason;
	char err[256];
	if (tb_client_connect(&o, &c, &reason, err, sizeof err) != 0)
		fail_msg("connect to %s: %s", url, err);
	return c;
}

static int revive_broker(void **state)
{
	(void)state;
	if (tb_broker_alive(broker, NULL))
		return 0;
	char err[1024];
	if (tb_broker_restart(broker, err, sizeof err) != 0) {
		fprintf(stderr, "the broker died in a test and did not restart: %s\n", err);
		return -1;
	}
	return 0;
}

/* Whether case is in list (comma-separated names). */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		if (len == n && strncmp(p, name, n) == 0)
			return true;
		p += len + (p[len] == ',');
	}
	return false;
}

/* Every name of list is a case of tests: an entry never runs nothing because a case was renamed. */
static bool all_known(const char *name, const char *var, const char *list,
    const struct CMUnitTest *tests, size_t count)
{
	bool ok = true;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		bool found = false;
		for (size_t i = 0; i < count && !found; i++)
			found = strlen(tests[i].name) == len && strncmp(tests[i].name, p, len) == 0;
		if (!found && len) {
			fprintf(stderr, "%s: %s names '%.*s', which is no case of this test\n", name, var,
			    (int)len, p);
			ok = false;
		}
		p += len + (p[len] == ',');
	}
	return ok;
}

int tb_test_run(const char *name, const struct CMUnitTest *tests, size_t count,
    const struct tb_options *options)
{
	/* The ctest entries of one executable run parts of it (cmake/mqttpool_helpers.cmake): the
	 * cases that need mosquitto 2.1 in an entry of their own. */
	const char *only = getenv("TB_TEST_ONLY"), *except = getenv("TB_TEST_EXCLUDE");
	if ((only && !all_known(name, "TB_TEST_ONLY", only, tests, count))
	    || (except && !all_known(name, "TB_TEST_EXCLUDE", except, tests, count)))
		return 1;
	/* A test that fails between killing the broker and restarting it must not fail the ones
	 * after it: each test without a teardown of its own gets one that revives the broker. */
	struct CMUnitTest *own = calloc(count, sizeof *own);
	if (!own)
		return 1;
	size_t chosen = 0;
	for (size_t i = 0; i < count; i++) {
		if ((only && !listed(only, tests[i].name)) || (except && listed(except, tests[i].name)))
			continue;
		own[chosen] = tests[i];
		if (!own[chosen].teardown_func)
			own[chosen].teardown_func = revive_broker;
		chosen++;
	}
	if (chosen == 0) {
		fprintf(stderr, "%s: TB_TEST_ONLY / TB_TEST_EXCLUDE leave no case to run\n", name);
		free(own);
		return 1;
	}
	char err[1024];
	if (tb_broker_start(options, &broker, err, sizeof err) != 0) {
		fprintf(stderr, "%s: cannot start the test broker: %s\n", name, err);
		free(own);
		return 1;
	}
	int failed = _cmocka_run_group_tests(name, own, chosen, NULL, NULL);
	free(own);
	if (failed)
		tb_broker_dump_log(broker, stderr);
	tb_broker_stop(broker);
	return failed ? failed : skipped ? 77 : 0;
}

static bool log_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[1024];
	bool found = false;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

struct tb_responder tb_test_spawn(const char *ready, const char *const argv[])
{
	struct tb_responder r;
	snprintf(r.log, sizeof r.log, "/tmp/tb-test-proc-XXXXXX");
	int fd = mkstemp(r.log);
	assert_true(fd >= 0);
	close(fd);
	int argc = 0;
	char *copy[64] = { NULL };
	while (argv[argc] && argc < 63) {
		copy[argc] = strdup(argv[argc]);
		argc++;
	}
	char err[256];
	r.pid = tb__spawn(copy, r.log, NULL, err, sizeof err);
	for (int i = 0; i < argc; i++)
		free(copy[i]);
	if (r.pid < 0)
		fail_msg("spawn %s: %s", argv[0], err);
	uint64_t deadline = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (!log_contains(r.log, ready)) {
		int status;
		if (waitpid(r.pid, &status, WNOHANG) == r.pid || mqc_now_ns() > deadline) {
			char cmd[128];
			snprintf(cmd, sizeof cmd, "cat %s >&2", r.log);
			if (system(cmd) != 0)
				fprintf(stderr, "(no log)\n");
			fail_msg("%s did not print %s", argv[0], ready);
		}
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	}
	return r;
}

struct tb_responder tb_test_spawn_va(
    const char *ready, const char *const head[], const char *first, va_list extra)
{
	const struct tb_info *info = tb_test_info();
	const char *args[64];
	int argc = 0;
	for (; head[argc] && argc < 40; argc++)
		args[argc] = head[argc];
	const char *user[] = { "--username", info->username, "--password", info->password };
	for (size_t i = 0; i < 4; i++)
		args[argc++] = user[i];
	for (const char *a = first; a && argc < 63; a = va_arg(extra, const char *))
		args[argc++] = a;
	args[argc] = NULL;
	return tb_test_spawn(ready, args);
}

struct tb_responder tb_test_responder(const char *path, const char *first, ...)
{
	const char *head[] = { path, "--broker", tb_test_info()->mqtt_url, NULL };
	va_list ap;
	va_start(ap, first);
	struct tb_responder r = tb_test_spawn_va("RESPONDER_READY", head, first, ap);
	va_end(ap);
	return r;
}

struct tb_responder_summary tb_test_responder_stop(struct tb_responder *r)
{
	kill(r->pid, SIGTERM);
	int status;
	assert_int_equal(waitpid(r->pid, &status, 0), r->pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	struct tb_responder_summary s = { 0 };
	FILE *f = fopen(r->log, "r");
	assert_non_null(f);
	char line[1024];
	bool found = false;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "responder: requests=%lu replies=%lu dropped=%lu duplicated=%lu",
		        &s.requests, &s.replies, &s.dropped, &s.duplicated)
		    == 4)
			found = true;
		const char *rc = strstr(line, " reconnects=");
		if (rc)
			s.reconnects = strtoul(rc + strlen(" reconnects="), NULL, 10);
	}
	fclose(f);
	unlink(r->log);
	assert_true(found);
	return s;
}

void tb_test_responder_kill(struct tb_responder *r)
{
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	unlink(r->log);
}

int tb_test_free_port(void)
{
	return tb__free_port();
}

struct tb_broker *tb_test_broker_21_ws(const char *mosquitto21)
{
	if (access(mosquitto21, X_OK) != 0) {
		char why[TB_PATH_MAX + 96];
		snprintf(why, sizeof why,
		    "no mosquitto 2.1.2 at %s (scripts/mosquitto-2.1 builds it from ../shared/vendor)",
		    mosquitto21);
		tb_test_skip(why);
	}
	struct tb_options o = { .mosquitto = mosquitto21,
		.no_probe = true,
		.websockets = true,
		.allow_anonymous = true,
		.no_password_file = true,
		.no_acl_file = true };
	struct tb_broker *b = NULL;
	char err[1024];
	if (tb_broker_start(&o, &b, err, sizeof err) != 0)
		fail_msg("mosquitto 2.1 with WebSockets listeners: %s", err);
	return b;
}
