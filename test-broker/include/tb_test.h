/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_test.h - the test harness: one real broker per test executable, and spawned programs.
 *
 * tb_test_run() starts the broker, runs the cmocka group, dumps the broker log when a test
 * failed, and stops the broker. Tests reach the broker through tb_test_broker(). With
 * TB_TEST_ONLY or TB_TEST_EXCLUDE in the environment (comma-separated case names, every one a
 * case of the group) it runs only those cases, or all but those: how one executable's ctest
 * entries split it (cmake/mqttpool_helpers.cmake's CASES_21).
 */
#ifndef TB_TEST_H
#define TB_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tb_broker.h"
#include "tb_client.h"

int tb_test_run(const char *name, const struct CMUnitTest *tests, size_t count,
    const struct tb_options *options);

struct tb_broker *tb_test_broker(void);
const struct tb_info *tb_test_info(void);

/** Lines of the test broker's log that hold both a and b (b NULL: a alone). */
int tb_test_log_count(const char *a, const char *b);

/** Connect as the test user to url (plain or TLS with the broker's CA); fails the test if not. */
struct tb_client *tb_test_connect(const char *url, int protocol);

/** A responder started by a test: its pid and the file that holds its output. */
struct tb_responder {
	pid_t pid;
	char log[64];
};

/** What the responder said it did when it stopped. */
struct tb_responder_summary {
	unsigned long requests, replies, dropped, duplicated;
	unsigned long reconnects; /* broker connections made again after a loss */
};

/**
 * Start the responder at path against the test broker (as the test user) with extra arguments
 * (NULL-terminated), and wait until it prints RESPONDER_READY; fails the test otherwise.
 */
struct tb_responder tb_test_responder(const char *path, const char *first, ...);

/**
 * Start argv (NULL-terminated; argv[0] a path) with stdout and stderr in a temporary log file and
 * wait up to 5 s until the log holds the word ready; fails the test otherwise.
 */
struct tb_responder tb_test_spawn(const char *ready, const char *const argv[]);

/**
 * tb_test_spawn of head (NULL-terminated; head[0] a path) followed by the test user's
 * --username and --password and then the extra arguments: first and the rest of the va_list,
 * up to a NULL.
 */
struct tb_responder tb_test_spawn_va(
    const char *ready, const char *const head[], const char *first, va_list extra);

/** SIGTERM it, expect exit status 0, and parse its summary line. */
struct tb_responder_summary tb_test_responder_stop(struct tb_responder *r);

/** Kill it without looking at how it ended (SIGKILL: no summary). */
void tb_test_responder_kill(struct tb_responder *r);

/**
 * This test cannot run here (why: what is missing). It is skipped (cmocka's skip(), and the
 * executable exits 77 at the end, which ctest reports as skipped) - or, with MQTTPOOL_NO_SKIP=1 in
 * the environment (CI), it fails. Does not return.
 */
#define tb_test_skip(why)       \
	do {                        \
		tb__test_skipping(why); \
		skip();                 \
	} while (0)
void tb__test_skipping(const char *why);

/**
 * A second broker for one test: mosquitto 2.1 at mosquitto21 (the build of scripts/mosquitto-2.1)
 * with WebSockets listeners (tb_info's ws_url and wss_url), anonymous, without the probe; the
 * test is skipped (or fails, with MQTTPOOL_NO_SKIP=1) when that binary is not there, and fails
 * when it does not start. Stop it with tb_broker_stop().
 */
struct tb_broker *tb_test_broker_21_ws(const char *mosquitto21);

/** A TCP port on 127.0.0.1 that nothing listens on right now (bound to port 0, then closed). */
int tb_test_free_port(void);

#define TB_TEST_RUN(tests, options) \
	tb_test_run(__FILE__, tests, sizeof(tests) / sizeof((tests)[0]), options)

#endif
