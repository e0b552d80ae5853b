/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * Integration tests: the one MQTT client foundation (mqc_client.h) and the request/reply client
 * of the naive and dedicated baselines (mqc_request.h), against a real broker and responder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_request.h"
#include "tb_test.h"

static struct mqc_conn_opts opts_for(const char *url)
{
	const struct tb_info *i = tb_test_info();
	struct mqc_conn_opts o = { .username = i->username, .password = i->password };
	char err[128];
	assert_int_equal(mqc_url_parse(url, &o.url, err, sizeof err), 0);
	return o;
}

static uint64_t in_ms(unsigned ms)
{
	return mqc_now_ns() + (uint64_t)ms * MQC_NS_PER_MS;
}

static void naive_request_round_trip(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "client/cmd", NULL);
	struct mqc_conn_opts o = opts_for(tb_test_info()->mqtt_url);
	struct mqc_req_reply reply;
	char err[256] = "";
	int rc = mqc_request_once(
	    &o, "client/inbox", "client/cmd", "ping", 4, 1, in_ms(5000), &reply, err, sizeof err);
	if (rc != MQC_REQ_OK)
		fail_msg("rc %d: %s", rc, err);
	assert_int_equal(reply.len, 4);
	assert_string_equal(reply.payload, "ping");
	assert_non_null(strstr(reply.topic, "client/inbox/"));
	mqc_req_reply_free(&reply);
	assert_null(reply.payload);
	assert_int_equal(tb_test_responder_stop(&r).replies, 1);
}

/* libmosquitto's own loop uses select() and fails for a socket numbered 1024 or more. */
static void works_above_file_descriptor_1024(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "client/cmd", NULL);
	int fds[1100], n = 0;
	while (n < 1100 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		n++;
	if (n < 1100 || fds[n - 1] < 1024)
		tb_test_skip("this process may not open 1,100 files here");
	struct mqc_conn_opts o = opts_for(tb_test_info()->mqtt_url);
	struct mqc_requester *rq = NULL;
	char err[256] = "";
	int rc = mqc_requester_open(&o, "client/inbox", in_ms(5000), &rq, err, sizeof err);
	if (rc != MQC_REQ_OK)
		fail_msg("rc %d: %s", rc, err);
	/* The dedicated way: one connection, many requests. */
	for (int k = 0; k < 20; k++)
		assert_int_equal(
		    mqc_requester_request(rq, "client/cmd", "x", 1, 0, in_ms(5000), NULL), MQC_REQ_OK);
	mqc_requester_close(rq);
	for (int k = 0; k < n; k++)
		close(fds[k]);
	assert_int_equal(tb_test_responder_stop(&r).replies, 20);
}

static void failures_say_why(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	struct mqc_req_reply reply;
	char err[256] = "";
	/* Nothing listens: a connect error, not a timeout. */
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", tb_test_free_port());
	struct mqc_conn_opts o = opts_for(url);
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqc_request_once(&o, "client/inbox", "client/cmd", "x", 1, 0, in_ms(5000),
	                     &reply, err, sizeof err),
	    MQC_REQ_CONNECT);
	assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S);
	assert_non_null(strstr(err, "127.0.0.1"));
	/* A wrong password: the broker's refusal, named. */
	o = opts_for(i->mqtt_url);
	o.password = "wrong";
	assert_int_equal(mqc_request_once(&o, "client/inbox", "client/cmd", "x", 1, 0, in_ms(5000),
	                     &reply, err, sizeof err),
	    MQC_REQ_REFUSED);
	assert_non_null(strstr(err, "refused CONNECT: not authorized (reason code 0x87)"));
	/* Nobody answers: a timeout at the deadline. */
	o = opts_for(i->mqtt_url);
	t0 = mqc_now_ns();
	assert_int_equal(mqc_request_once(&o, "client/inbox", "client/nobody", "x", 1, 0, in_ms(300),
	                     &reply, err, sizeof err),
	    MQC_REQ_TIMEDOUT);
	assert_true(mqc_now_ns() - t0 >= 290 * MQC_NS_PER_MS);
	assert_null(reply.payload);
}

/* Drive a started request with poll(2), the way an event loop does, until it is done or the
 * deadline passes. */
static int run_started(
    struct mqc_requester *rq, uint64_t deadline, struct mqc_req_reply *reply, char *err, size_t len)
{
	for (;;) {
		uint64_t now = mqc_now_ns();
		if (now >= deadline)
			return mqc_request_expired(rq, err, len);
		struct pollfd p = { .fd = mqc_requester_fd(rq),
			.events = (short)(POLLIN | (mqc_requester_want_write(rq) ? POLLOUT : 0)) };
		if (poll(&p, 1, (int)((deadline - now) / MQC_NS_PER_MS) + 1) <= 0)
			continue;
		int rc = mqc_request_step(
		    rq, p.revents & (POLLIN | POLLHUP | POLLERR), p.revents & POLLOUT, reply, err, len);
		if (rc != MQC_REQ_PENDING)
			return rc;
	}
}

/* The naive request as a state machine (mqc_request_start/step): what the gateway runs on its
 * loop. The same outcomes and messages as the blocking client. */
static void the_naive_request_on_a_loop(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "client/cmd", NULL);
	struct mqc_conn_opts o = opts_for(i->mqtt_url);
	struct mqc_requester *rq;
	struct mqc_req_reply reply = { 0 };
	char err[256] = "";
	for (int qos = 0; qos <= 2; qos++) {
		assert_int_equal(mqc_request_start(&o, "client/inbox", "client/cmd", "ping", 4, qos, &rq,
		                     err, sizeof err),
		    MQC_REQ_OK);
		int rc = run_started(rq, in_ms(5000), &reply, err, sizeof err);
		if (rc != MQC_REQ_OK || !reply.payload || !reply.topic)
			fail_msg("qos %d: rc %d: %s", qos, rc, err);
		else {
			assert_string_equal(reply.payload, "ping");
			assert_non_null(strstr(reply.topic, "client/inbox/"));
		}
		mqc_req_reply_free(&reply);
		mqc_requester_abort(rq);
	}
	assert_int_equal(tb_test_responder_stop(&r).replies, 3);

	/* Nobody subscribed, at QoS 1: the broker's PUBACK says so (0x10), at once. */
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(
	    mqc_request_start(&o, "client/inbox", "client/nobody", "x", 1, 1, &rq, err, sizeof err),
	    MQC_REQ_OK);
	assert_int_equal(run_started(rq, in_ms(5000), &reply, err, sizeof err), MQC_REQ_NORESPONDER);
	assert_true(mqc_now_ns() - t0 < MQC_NS_PER_S);
	assert_string_equal(err, "nobody is subscribed to the command's topic");
	mqc_requester_abort(rq);

	/* Nobody answers, at QoS 0 (nothing can say so): the caller's deadline, and where it
	 * stopped. */
	t0 = mqc_now_ns();
	assert_int_equal(
	    mqc_request_start(&o, "client/inbox", "client/nobody", "x", 1, 0, &rq, err, sizeof err),
	    MQC_REQ_OK);
	assert_int_equal(run_started(rq, in_ms(300), &reply, err, sizeof err), MQC_REQ_TIMEDOUT);
	assert_true(mqc_now_ns() - t0 >= 290 * MQC_NS_PER_MS);
	assert_string_equal(err, "no reply by the deadline");
	assert_null(reply.payload);
	mqc_requester_abort(rq);

	/* A wrong password: the broker's refusal, named. */
	o.password = "wrong";
	assert_int_equal(
	    mqc_request_start(&o, "client/inbox", "client/cmd", "x", 1, 0, &rq, err, sizeof err),
	    MQC_REQ_OK);
	assert_int_equal(run_started(rq, in_ms(5000), &reply, err, sizeof err), MQC_REQ_REFUSED);
	assert_non_null(strstr(err, "refused CONNECT: not authorized (reason code 0x87)"));
	mqc_requester_abort(rq);

	/* Nothing listens: a connect error, at once or from the first step. */
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", tb_test_free_port());
	o = opts_for(url);
	int rc = mqc_request_start(&o, "client/inbox", "client/cmd", "x", 1, 0, &rq, err, sizeof err);
	if (rc == MQC_REQ_OK) {
		rc = run_started(rq, in_ms(5000), &reply, err, sizeof err);
		mqc_requester_abort(rq);
	}
	assert_int_equal(rc, MQC_REQ_CONNECT);
	assert_non_null(strstr(err, "127.0.0.1"));

	/* Abandoned half-way (its client went away): freed without waiting. */
	o = opts_for(i->mqtt_url);
	assert_int_equal(
	    mqc_request_start(&o, "client/inbox", "client/nobody", "x", 1, 0, &rq, err, sizeof err),
	    MQC_REQ_OK);
	assert_int_equal(run_started(rq, in_ms(50), &reply, err, sizeof err), MQC_REQ_TIMEDOUT);
	t0 = mqc_now_ns();
	mqc_requester_abort(rq);
	/* It waits for nothing from the broker; the bound only has to tell that from a request's
	 * timeout (seconds), with room for a sanitizer on a busy machine. */
	assert_true(mqc_now_ns() - t0 < 500 * MQC_NS_PER_MS);
}

static void tls_is_verified(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "client/cmd", NULL);
	const struct tb_info *i = tb_test_info();
	struct mqc_conn_opts o = opts_for(i->mqtts_url);
	o.cafile = i->ca_file;
	struct mqc_req_reply reply;
	char err[256] = "";
	int rc = mqc_request_once(
	    &o, "client/inbox", "client/cmd", "tls", 3, 0, in_ms(5000), &reply, err, sizeof err);
	if (rc != MQC_REQ_OK)
		fail_msg("rc %d: %s", rc, err);
	mqc_req_reply_free(&reply);
	/* Without a cafile the system's store decides, and it does not know the test CA. */
	o.cafile = NULL;
	assert_int_equal(mqc_request_once(&o, "client/inbox", "client/cmd", "tls", 3, 0, in_ms(5000),
	                     &reply, err, sizeof err),
	    MQC_REQ_CONNECT);
	tb_test_responder_stop(&r);
}

static void generated_ids_are_unguessable_and_distinct(void **state)
{
	(void)state;
	struct mqc_conn_opts o = opts_for(tb_test_info()->mqtt_url);
	o.id_prefix = "unit";
	char a[MQC_CLIENT_ID_MAX], b[MQC_CLIENT_ID_MAX], err[128];
	struct mosquitto *ma = mqc_client_new(&o, NULL, a, err, sizeof err);
	struct mosquitto *mb = mqc_client_new(&o, NULL, b, err, sizeof err);
	assert_non_null(ma);
	assert_non_null(mb);
	assert_int_equal(strncmp(a, "unit-", 5), 0);
	assert_int_equal(strlen(a), 5 + 11);
	assert_string_not_equal(a, b);
	mqc_client_close(ma, 0);
	mqc_client_close(mb, 0);
	o.client_id = "exactly-this";
	struct mosquitto *mc = mqc_client_new(&o, NULL, a, err, sizeof err);
	assert_string_equal(a, "exactly-this");
	mqc_client_close(mc, 0);
	mqc_client_close(NULL, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(naive_request_round_trip),
		cmocka_unit_test(works_above_file_descriptor_1024),
		cmocka_unit_test(failures_say_why),
		cmocka_unit_test(the_naive_request_on_a_loop),
		cmocka_unit_test(tls_is_verified),
		cmocka_unit_test(generated_ids_are_unguessable_and_distinct),
	};
	return TB_TEST_RUN(tests, NULL);
}
