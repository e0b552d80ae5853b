/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The probe never changes an authentication or authorization decision.
 *
 * For every combination of {password_file, acl_file} x {allow_anonymous true, false}, run the
 * same script of connects, subscribes, publishes and receives against a broker without the
 * probe and one with it (observe_auth off), and compare every outcome. With observe_auth on,
 * compare under its documented precondition (password_file and acl_file present), and show that
 * without the precondition it does change decisions: the reason it is opt-in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tb_broker.h"
#include "tb_client.h"

enum probe_mode { NO_PROBE, PROBE, PROBE_OBSERVE };

struct scenario {
	bool password_file, acl_file, anonymous;
};

static struct tb_client *connect_as(
    const struct tb_info *i, const char *user, const char *pass, int *code)
{
	struct tb_client_options o
	    = { .url = i->mqtt_url, .username = user, .password = pass, .timeout_ms = 3000 };
	struct tb_client *c = NULL;
	char err[256];
	if (tb_client_connect(&o, &c, code, err, sizeof err) != 0)
		return NULL;
	return c;
}

static int received(struct tb_client *c, const char *topic)
{
	struct tb_message *m;
	int got = 0;
	while ((m = tb_client_receive(c, 300))) {
		got += strcmp(m->topic, topic) == 0;
		tb_message_free(m);
	}
	return got;
}

/* One actor subscribes, publishes, and receives; the result is a line of outcomes. */
static void actor_outcomes(struct tb_client *c, const char *name, char *out, size_t len)
{
	if (!c) {
		snprintf(out, len, " %s:-", name);
		return;
	}
	int sub = tb_client_subscribe(c, "m/#", 1, 0, NULL);
	int sys = tb_client_subscribe(c, "$SYS/broker/version", 0, 0, NULL);
	char topic[32];
	snprintf(topic, sizeof topic, "m/%s", name);
	int pub = tb_client_publish(c, topic, "x", 1, 1, false, NULL);
	int other = tb_client_publish(c, "limited/x", "y", 1, 1, false, NULL);
	int got = received(c, topic) + received(c, "limited/x");
	snprintf(out, len, " %s:sub=%d,sys=%d,pub=%d,pub_limited=%d,recv=%d", name, sub, sys, pub,
	    other, got);
}

static void outcomes(const struct scenario *s, enum probe_mode mode, char *out, size_t len)
{
	const char *observe[] = { "observe_auth=true", "http_listen=off", NULL };
	const char *plain[] = { "http_listen=off", NULL };
	struct tb_options o = {
		.no_tls = true,
		.no_probe = mode == NO_PROBE,
		.plugin_opts = mode == PROBE_OBSERVE ? observe : plain,
		.no_password_file = !s->password_file,
		.no_acl_file = !s->acl_file,
		.allow_anonymous = s->anonymous,
	};
	struct tb_broker *b;
	char err[1024];
	if (tb_broker_start(&o, &b, err, sizeof err) != 0)
		fail_msg("broker start: %s", err);
	const struct tb_info *i = tb_broker_info(b);
	if (mode != NO_PROBE && !i->plugin[0])
		fail_msg("the probe was not loaded");
	int user = -1, anon = -1, limited = -1, wrong = -1;
	struct tb_client *cu = connect_as(i, i->username, i->password, &user);
	struct tb_client *ca = connect_as(i, NULL, NULL, &anon);
	struct tb_client *cl = connect_as(i, i->other_username, i->other_password, &limited);
	struct tb_client *cw = connect_as(i, i->username, "wrong", &wrong);
	int n = snprintf(
	    out, len, "connack user=%d anonymous=%d limited=%d wrong=%d |", user, anon, limited, wrong);
	actor_outcomes(cu, "user", out + n, len - (size_t)n);
	n = (int)strlen(out);
	actor_outcomes(ca, "anonymous", out + n, len - (size_t)n);
	n = (int)strlen(out);
	actor_outcomes(cl, "limited", out + n, len - (size_t)n);
	tb_client_destroy(cu);
	tb_client_destroy(ca);
	tb_client_destroy(cl);
	tb_client_destroy(cw);
	if (!tb_broker_alive(b, NULL))
		fail_msg("the broker died");
	tb_broker_stop(b);
}

static void describe(const struct scenario *s, char *out, size_t len)
{
	snprintf(out, len, "password_file=%d acl_file=%d allow_anonymous=%d", s->password_file,
	    s->acl_file, s->anonymous);
}

static void default_mode_changes_no_decision(void **state)
{
	(void)state;
	for (int bits = 0; bits < 8; bits++) {
		struct scenario s = { bits & 1, bits & 2, bits & 4 };
		char name[96], without[1024], with[1024];
		describe(&s, name, sizeof name);
		outcomes(&s, NO_PROBE, without, sizeof without);
		outcomes(&s, PROBE, with, sizeof with);
		printf("  %s\n    without: %s\n    probe:   %s\n", name, without, with);
		if (strcmp(without, with) != 0)
			fail_msg("%s: decisions differ\n without: %s\n with:    %s", name, without, with);
	}
}

static void observe_auth_changes_no_decision_under_its_precondition(void **state)
{
	(void)state;
	for (int anonymous = 0; anonymous < 2; anonymous++) {
		struct scenario s = { true, true, anonymous };
		char name[96], without[1024], with[1024];
		describe(&s, name, sizeof name);
		outcomes(&s, NO_PROBE, without, sizeof without);
		outcomes(&s, PROBE_OBSERVE, with, sizeof with);
		printf("  %s\n    without:       %s\n    observe_auth:  %s\n", name, without, with);
		if (strcmp(without, with) != 0)
			fail_msg("%s: decisions differ\n without: %s\n with:    %s", name, without, with);
	}
}

static void observe_auth_without_precondition_does_change_decisions(void **state)
{
	(void)state;
	/* No ACL decider: an always-DEFER ACL observer turns "allow" into "deny" (see README). */
	struct scenario s = { true, false, false };
	char without[1024], with[1024];
	outcomes(&s, NO_PROBE, without, sizeof without);
	outcomes(&s, PROBE_OBSERVE, with, sizeof with);
	printf("  password_file only\n    without:       %s\n    observe_auth:  %s\n", without, with);
	assert_string_not_equal(without, with);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(default_mode_changes_no_decision),
		cmocka_unit_test(observe_auth_changes_no_decision_under_its_precondition),
		cmocka_unit_test(observe_auth_without_precondition_does_change_decisions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
