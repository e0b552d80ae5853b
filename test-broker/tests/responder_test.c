/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests: the responder answers v5 and legacy requests, and its delay, drop and
 * duplicate options do what they say (counted both by us and by its own exit summary).
 */
#include <mqtt_protocol.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "tb_test.h"

static mosquitto_property *request_props(const char *response_topic, const void *corr, int len)
{
	mosquitto_property *p = NULL;
	assert_int_equal(
	    mosquitto_property_add_string(&p, MQTT_PROP_RESPONSE_TOPIC, response_topic), 0);
	assert_int_equal(
	    mosquitto_property_add_binary(&p, MQTT_PROP_CORRELATION_DATA, corr, (uint16_t)len), 0);
	return p;
}

static void v5_request_gets_reply_with_its_correlation(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "v5dev/+/commands/+", NULL);
	struct tb_client *c = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(c, "inbox/test/#", 0, 0, NULL), 0);
	const unsigned char corr[] = { 0x00, 0x01, 0xfe, 'n', 'o', 'n', 'c', 'e' };
	mosquitto_property *props = request_props("inbox/test/1", corr, sizeof corr);
	assert_int_equal(
	    tb_client_publish(c, "v5dev/d1/commands/open", "{\"open\":1}", 10, 0, false, props), 0);
	mosquitto_property_free_all(&props);
	struct tb_message *m = tb_client_receive(c, 5000);
	assert_non_null(m);
	assert_string_equal(m->topic, "inbox/test/1");
	assert_string_equal(m->payload, "{\"open\":1}");
	void *got = NULL;
	uint16_t got_len = 0;
	assert_non_null(mosquitto_property_read_binary(
	    m->props, MQTT_PROP_CORRELATION_DATA, &got, &got_len, false));
	assert_int_equal(got_len, sizeof corr);
	assert_memory_equal(got, corr, sizeof corr);
	free(got);
	tb_message_free(m);
	tb_client_destroy(c);
	struct tb_responder_summary s = tb_test_responder_stop(&r);
	assert_int_equal(s.requests, 1);
	assert_int_equal(s.replies, 1);
}

static void legacy_request_gets_reply_on_templated_topic(void **state)
{
	(void)state;
	struct tb_responder def = tb_test_responder(RESPONDER_PATH, "--filter", "legacy/+/commands/+",
	    "--protocol", "3.1.1", "--reply", "OK", NULL);
	struct tb_responder custom = tb_test_responder(RESPONDER_PATH, "--filter", "gate/+/cmd/+",
	    "--reply-template", "gate-replies/{2}/{4}", NULL);
	struct tb_client *c = tb_test_connect(tb_test_info()->mqtt_url, 4);
	assert_int_equal(tb_client_subscribe(c, "replies/legacy/d2/commands/reboot", 0, 0, NULL), 0);
	assert_int_equal(tb_client_subscribe(c, "gate-replies/#", 0, 0, NULL), 0);
	assert_int_equal(
	    tb_client_publish(c, "legacy/d2/commands/reboot", "now", 3, 0, false, NULL), 0);
	struct tb_message *m = tb_client_receive(c, 5000);
	assert_non_null(m);
	assert_string_equal(m->topic, "replies/legacy/d2/commands/reboot");
	assert_string_equal(m->payload, "OK");
	tb_message_free(m);
	assert_int_equal(tb_client_publish(c, "gate/g7/cmd/open", "go", 2, 0, false, NULL), 0);
	m = tb_client_receive(c, 5000);
	assert_non_null(m);
	assert_string_equal(m->topic, "gate-replies/g7/open");
	assert_string_equal(m->payload, "go");
	tb_message_free(m);
	/* A delayed legacy reply (no correlation data to copy: UBSan once caught memcpy(NULL)). */
	struct tb_responder slow = tb_test_responder(RESPONDER_PATH, "--filter", "slowgate/+/cmd/+",
	    "--protocol", "3.1.1", "--delay", "30ms", NULL);
	assert_int_equal(tb_client_subscribe(c, "replies/slowgate/g1/cmd/open", 0, 0, NULL), 0);
	assert_int_equal(tb_client_publish(c, "slowgate/g1/cmd/open", "", 0, 0, false, NULL), 0);
	m = tb_client_receive(c, 5000);
	assert_non_null(m);
	assert_string_equal(m->topic, "replies/slowgate/g1/cmd/open");
	assert_int_equal(m->payloadlen, 0);
	tb_message_free(m);
	tb_client_destroy(c);
	assert_int_equal(tb_test_responder_stop(&def).replies, 1);
	assert_int_equal(tb_test_responder_stop(&custom).replies, 1);
	assert_int_equal(tb_test_responder_stop(&slow).replies, 1);
}

static void delay_holds_every_reply(void **state)
{
	(void)state;
	const uint64_t delay = 150 * MQC_NS_PER_MS;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "slow/#", "--delay", "150ms", NULL);
	struct tb_client *c = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(c, "inbox/slow/#", 0, 0, NULL), 0);
	for (int i = 0; i < 5; i++) {
		mosquitto_property *props = request_props("inbox/slow/x", &i, sizeof i);
		uint64_t sent = mqc_now_ns();
		assert_int_equal(tb_client_publish(c, "slow/cmd", "x", 1, 0, false, props), 0);
		mosquitto_property_free_all(&props);
		struct tb_message *m = tb_client_receive(c, 5000);
		uint64_t rtt = mqc_now_ns() - sent;
		assert_non_null(m);
		tb_message_free(m);
		if (rtt < delay || rtt > delay + 1000 * MQC_NS_PER_MS)
			fail_msg("round trip %.1f ms for a 150 ms delay", (double)rtt / 1e6);
	}
	tb_client_destroy(c);
	assert_int_equal(tb_test_responder_stop(&r).replies, 5);
}

/* Send n requests with distinct correlation data; count the replies that come back. */
static int send_and_count(const char *filter_prefix, int n, int quiet_ms)
{
	char inbox[64], topic[64];
	snprintf(inbox, sizeof inbox, "inbox/%s/#", filter_prefix);
	snprintf(topic, sizeof topic, "%s/cmd", filter_prefix);
	struct tb_client *c = tb_test_connect(tb_test_info()->mqtt_url, 5);
	assert_int_equal(tb_client_subscribe(c, inbox, 1, 0, NULL), 1);
	snprintf(inbox, sizeof inbox, "inbox/%s/r", filter_prefix);
	for (int i = 0; i < n; i++) {
		mosquitto_property *props = request_props(inbox, &i, sizeof i);
		assert_int_equal(tb_client_publish(c, topic, "x", 1, 1, false, props), 0);
		mosquitto_property_free_all(&props);
	}
	int got = 0;
	for (struct tb_message *m; (m = tb_client_receive(c, quiet_ms)); got++)
		tb_message_free(m);
	tb_client_destroy(c);
	return got;
}

static void drop_leaves_requests_unanswered(void **state)
{
	(void)state;
	struct tb_responder all
	    = tb_test_responder(RESPONDER_PATH, "--filter", "dropall/#", "--drop", "1", NULL);
	assert_int_equal(send_and_count("dropall", 20, 300), 0);
	struct tb_responder_summary s = tb_test_responder_stop(&all);
	assert_int_equal(s.requests, 20);
	assert_int_equal(s.dropped, 20);
	assert_int_equal(s.replies, 0);

	struct tb_responder half = tb_test_responder(RESPONDER_PATH, "--filter", "drophalf/#", "--drop",
	    "0.5", "--seed", "3", "--qos", "1", NULL);
	int got = send_and_count("drophalf", 200, 500);
	s = tb_test_responder_stop(&half);
	assert_int_equal(s.requests, 200);
	assert_int_equal(s.replies, (unsigned long)got);
	assert_int_equal(s.dropped + s.replies, 200);
	assert_in_range(got, 60, 140); /* binomial(200, 0.5): 5 standard deviations */
}

static void duplicate_answers_twice(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(
	    RESPONDER_PATH, "--filter", "dup/#", "--duplicate", "1", "--qos", "1", NULL);
	assert_int_equal(send_and_count("dup", 10, 300), 20);
	struct tb_responder_summary s = tb_test_responder_stop(&r);
	assert_int_equal(s.duplicated, 10);
	assert_int_equal(s.replies, 20);
}

/* A device behind a link that goes dark, or on a broker that hangs (SIGSTOP: nothing answers,
 * nothing is reset), notices within 2 x --keepalive: with --exit-on-disconnect it exits 1 saying
 * so; without, it connects again once the broker answers (SIGCONT), subscribes again and
 * answers, its counters kept. */
static void a_hung_broker_is_noticed(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "hung/#", "--keepalive", "5", NULL);
	struct tb_responder quitter = tb_test_responder(
	    RESPONDER_PATH, "--filter", "quit/#", "--keepalive", "5", "--exit-on-disconnect", NULL);
	assert_int_equal(send_and_count("hung", 1, 300), 1);
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGSTOP), 0);
	uint64_t stopped = mqc_now_ns();
	int status = 0;
	pid_t got = 0;
	for (uint64_t until = stopped + 14 * MQC_NS_PER_S;
	     (got = waitpid(quitter.pid, &status, WNOHANG)) == 0 && mqc_now_ns() < until;)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	uint64_t noticed = mqc_now_ns() - stopped;
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGCONT), 0);
	if (got != quitter.pid)
		fail_msg("--keepalive 5: still connected to a stopped broker 14 s later");
	print_message("hung broker: the device noticed %.1f s after SIGSTOP (--keepalive 5)\n",
	    (double)noticed / 1e9);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	assert_true(noticed <= 11 * MQC_NS_PER_S); /* 2 x 5 s, on whole seconds */
	unlink(quitter.log);
	int answered = 0;
	for (uint64_t until = mqc_now_ns() + 15 * MQC_NS_PER_S; !answered && mqc_now_ns() < until;)
		answered = send_and_count("hung", 1, 300);
	assert_int_equal(answered, 1);
	struct tb_responder_summary s = tb_test_responder_stop(&r);
	assert_int_equal(s.replies, s.requests);
	assert_int_equal(s.reconnects, 1);
}

/* A device survives its broker: the broker SIGKILLed and started again on its port, the
 * responder connects again (backoff from 100 ms to 5 s), subscribes again and answers, its
 * counters kept. With --exit-on-disconnect it exits 1 instead. */
static void a_broker_restart_is_survived(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "again/#", NULL);
	struct tb_responder quitter
	    = tb_test_responder(RESPONDER_PATH, "--filter", "quit/#", "--exit-on-disconnect", NULL);
	assert_int_equal(send_and_count("again", 1, 300), 1);
	assert_int_equal(tb_broker_signal(tb_test_broker(), SIGKILL), 0);
	int status = 0;
	pid_t got = 0;
	for (uint64_t until = mqc_now_ns() + 5 * MQC_NS_PER_S;
	     (got = waitpid(quitter.pid, &status, WNOHANG)) == 0 && mqc_now_ns() < until;)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(got, quitter.pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	unlink(quitter.log);
	char err[512];
	if (tb_broker_restart(tb_test_broker(), err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	int answered = 0;
	for (uint64_t until = mqc_now_ns() + 10 * MQC_NS_PER_S; !answered && mqc_now_ns() < until;)
		answered = send_and_count("again", 1, 300); /* until it has subscribed again */
	assert_int_equal(answered, 1);
	struct tb_responder_summary s = tb_test_responder_stop(&r);
	assert_true(s.requests >= 2);
	assert_int_equal(s.replies, s.requests);
	assert_int_equal(s.reconnects, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(v5_request_gets_reply_with_its_correlation),
		cmocka_unit_test(legacy_request_gets_reply_on_templated_topic),
		cmocka_unit_test(delay_holds_every_reply),
		cmocka_unit_test(drop_leaves_requests_unanswered),
		cmocka_unit_test(duplicate_answers_twice), cmocka_unit_test(a_hung_broker_is_noticed),
		cmocka_unit_test(a_broker_restart_is_survived), /* last: it restarts the broker */
	};
	struct tb_options options = { .no_tls = true };
	return TB_TEST_RUN(tests, &options);
}
