/*
 * Integration tests of libmqttpool against the test broker and the responder.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mqtt_protocol.h>

#include "mqc_clock.h"
#include "mqttpool.h"
#include "tb_test_util.h"

static mqp_pool *new_pool(const char *url, struct mqp_pool_options *o)
{
	const struct tb_info *i = tb_test_info();
	struct mqp_pool_options defaults = { 0 };
	if (!o)
		o = &defaults;
	o->username = i->username;
	o->password = i->password;
	if (strncmp(url, "mqtts", 5) == 0 && !o->cafile)
		o->cafile = i->ca_file;
	mqp_pool *p = NULL;
	char err[256];
	int rc = mqp_pool_new(url, o, &p, err, sizeof err);
	if (rc != MQP_OK)
		fail_msg("mqp_pool_new: %s: %s", mqp_strerror(rc), err);
	return p;
}

static void two_pools_in_one_process_do_not_collide(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "two/cmd", NULL);
	mqp_pool *a = new_pool(tb_test_info()->mqtt_url, NULL);
	mqp_pool *b = new_pool(tb_test_info()->mqtt_url, NULL);
	for (int k = 0; k < 20; k++) {
		struct mqp_reply ra, rb;
		assert_int_equal(mqp_pool_request(a, "two/cmd", "a", 1, 0, 3000, &ra), MQP_OK);
		assert_int_equal(mqp_pool_request(b, "two/cmd", "b", 1, 0, 3000, &rb), MQP_OK);
		assert_string_equal(ra.payload, "a");
		assert_string_equal(rb.payload, "b");
		mqp_reply_free(&ra);
		mqp_reply_free(&rb);
	}
	struct mqp_pool_stats sa, sb;
	mqp_pool_stats(a, &sa);
	mqp_pool_stats(b, &sb);
	assert_int_equal(sa.connections_lost + sb.connections_lost, 0); /* no session takeover */
	mqp_pool_destroy(a);
	mqp_pool_destroy(b);
	tb_test_responder_stop(&r);
}

static void request_round_trip(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "rt/+/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "open", 4, 0, 5000, &reply), MQP_OK);
	assert_int_equal(reply.len, 4);
	assert_string_equal(reply.payload, "open");
	assert_non_null(strstr(reply.topic, "mqp/inbox/"));
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "", 0, 1, 5000, &reply), MQP_OK);
	assert_int_equal(reply.len, 0);
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_request(p, "rt/d1/cmd", "q2", 2, 2, 5000, &reply), MQP_OK);
	assert_string_equal(reply.payload, "q2");
	mqp_reply_free(&reply);
	assert_int_equal(mqp_pool_publish(p, "rt/other", "x", 1, 1, 0, 5000), MQP_OK);
	struct mqp_latency req, acq, conn;
	mqp_pool_latency(p, &req, &acq, &conn);
	assert_int_equal(req.count, 3);
	assert_true(req.p50_ns > 0 && req.p50_ns <= req.max_ns);
	assert_int_equal(acq.count, 0);
	assert_true(conn.count >= 1 && conn.p50_ns > 0);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.requests, 3);
	assert_int_equal(st.replies, 3);
	assert_int_equal(st.publishes, 1);
	assert_true(st.size >= 1 && st.size <= 10);
	mqp_pool_destroy(p);
	assert_int_equal(tb_test_responder_stop(&r).replies, 3);
}

static void bad_arguments_are_refused(void **state)
{
	(void)state;
	mqp_pool *p = NULL;
	char err[256] = "";
	assert_int_equal(mqp_pool_new("http://x", NULL, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "scheme"));
	assert_null(p);
	struct mqp_pool_options o = { .min_size = 5, .max_size = 2 };
	assert_int_equal(mqp_pool_new("mqtt://127.0.0.1:1", &o, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "min_size"));
	assert_int_equal(mqp_pool_new("mqtts://127.0.0.1:1", NULL, &p, err, sizeof err), MQP_EINVAL);
	assert_non_null(strstr(err, "cafile"));
	struct mqp_pool_options tls = { .cafile = "/nonexistent/ca.crt" };
	assert_int_equal(mqp_pool_new("mqtts://127.0.0.1:1", &tls, &p, err, sizeof err), MQP_ETLS);
	p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "a/+/b", "x", 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "", "x", 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "a", "x", 1, 3, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request(p, "a", NULL, 1, 0, 100, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_publish(p, "a/#", "x", 1, 0, 0, 100), MQP_EINVAL);
	mqp_pool_destroy(p);
	mqp_pool_destroy(NULL);
	/* No error buffer: the TLS failure is still reported, and nothing writes into itself. */
	assert_int_equal(mqp_pool_new("mqtts://127.0.0.1:1", &tls, &p, NULL, 0), MQP_ETLS);
	/* The accessors take a NULL pool. */
	struct mqp_pool_stats st = { .size = 7 };
	mqp_pool_stats(NULL, &st);
	assert_int_equal(st.size, 0);
	mqp_pool_stats(NULL, NULL);
	struct mqp_latency lat = { .count = 7 };
	mqp_pool_latency(NULL, &lat, NULL, NULL);
	assert_int_equal(lat.count, 0);
	char why[64];
	assert_string_equal(mqp_pool_last_error(NULL, why, sizeof why), "no pool (NULL)");
	assert_string_equal(mqp_strerror(MQP_ETIMEDOUT), "timed out");
	assert_string_equal(mqp_strerror(999), "unknown error");
}

static void timeout_when_the_device_never_answers(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "x", 1, 0, 300, &reply), MQP_ETIMEDOUT);
	uint64_t took = mqc_now_ns() - t0;
	assert_true(took >= 300 * MQC_NS_PER_MS && took < 1300 * MQC_NS_PER_MS);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.inflight, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct worker {
	mqp_pool *pool;
	int id, requests, ok, timeouts, mismatches, other;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int k = 0; k < w->requests; k++) {
		char nonce[64];
		int n = snprintf(nonce, sizeof nonce, "worker-%d-request-%d-%ld", w->id, k, random());
		struct mqp_reply reply;
		int rc = mqp_pool_request(w->pool, "adv/dev/cmd", nonce, (size_t)n, 0, 150, &reply);
		if (rc == MQP_OK) {
			w->ok++;
			if (reply.len != (size_t)n || memcmp(reply.payload, nonce, (size_t)n) != 0)
				w->mismatches++; /* somebody else's reply: the one thing that must not happen */
			mqp_reply_free(&reply);
		} else if (rc == MQP_ETIMEDOUT) {
			w->timeouts++;
		} else {
			w->other++;
		}
	}
	return NULL;
}

static void adversarial_device_never_crosses_replies(void **state)
{
	(void)state;
	/* Duplicates, replies with wrong correlation, and late replies after the caller's timeout. */
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "adv/+/cmd",
	    "--duplicate", "0.2", "--stray", "0.2", "--late", "0.05", "--late-delay", "400ms",
	    "--jitter", "5ms", "--seed", "11", NULL);
	struct mqp_pool_options o = { .max_size = 4, .max_inflight = 16 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	enum { THREADS = 8, EACH = 150 };
	pthread_t t[THREADS];
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker) { .pool = p, .id = i, .requests = EACH };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	int ok = 0, timeouts = 0, mismatches = 0, other = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		ok += w[i].ok;
		timeouts += w[i].timeouts;
		mismatches += w[i].mismatches;
		other += w[i].other;
	}
	nanosleep(&(struct timespec) { .tv_nsec = 500000000 }, NULL); /* let the late replies land */
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	print_message("ok %d timeouts %d other %d; stats: replies %llu late %llu strays %llu size %u\n",
	    ok, timeouts, other, (unsigned long long)st.replies, (unsigned long long)st.late_replies,
	    (unsigned long long)st.strays, st.size);
	assert_int_equal(mismatches, 0);
	assert_int_equal(other, 0);
	assert_int_equal(ok + timeouts, THREADS * EACH);
	assert_true(ok > THREADS * EACH * 8 / 10);
	assert_true(timeouts > 0);        /* the late replies fired... */
	assert_true(st.late_replies > 0); /* ...and arrived after their callers gave up */
	assert_true(st.strays > 0);       /* wrong correlation data was dropped */
	assert_int_equal(st.replies, (uint64_t)ok);
	assert_true(st.size <= 4);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct victim_call {
	mqp_pool *pool;
	int rc;
	struct mqp_reply reply;
};

static void *call_victim(void *arg)
{
	struct victim_call *v = arg;
	v->rc = mqp_pool_request(
	    v->pool, "devices/victim/commands/open", "honest", 6, 0, 5000, &v->reply);
	return NULL;
}

/* A device with the narrowest ACL that can still answer (read its own commands, write the
 * inboxes) sees one command sent to it, then tries to answer commands sent to another device
 * before that device does: every correlation value the old scheme would have used next, the one
 * it saw, and random ones. None may be accepted; the pool counts them all as strays or late. */
static void a_device_cannot_forge_replies_to_other_devices(void **state)
{
	(void)state;
	const struct tb_info *i = tb_test_info();
	struct tb_responder honest = tb_test_responder(
	    RESPONDER_PATH, "--filter", "devices/victim/commands/+", "--delay", "300ms", NULL);
	struct tb_client_options ao
	    = { .url = i->mqtt_url, .username = i->other_username, .password = i->other_password };
	struct tb_client *mallory;
	int reason;
	char err[256];
	assert_int_equal(tb_client_connect(&ao, &mallory, &reason, err, sizeof err), 0);
	assert_int_equal(tb_client_subscribe(mallory, "devices/mqp-limited/commands/+", 1, 0, NULL), 1);

	struct mqp_pool_options o = { .min_size = 1, .max_size = 1 };
	mqp_pool *p = new_pool(i->mqtt_url, &o);
	struct mqp_reply r;
	assert_int_equal(mqp_pool_request(p, "devices/mqp-limited/commands/peek", "x", 1, 0, 300, &r),
	    MQP_ETIMEDOUT);
	struct tb_message *seen = tb_client_receive(mallory, 2000);
	assert_non_null(seen);
	char *response_topic = NULL;
	void *corr = NULL;
	uint16_t corr_len = 0;
	assert_non_null(mosquitto_property_read_string(
	    seen->props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false));
	assert_non_null(mosquitto_property_read_binary(
	    seen->props, MQTT_PROP_CORRELATION_DATA, &corr, &corr_len, false));
	assert_int_equal(corr_len, 16);

	struct mqp_pool_stats before, after;
	mqp_pool_stats(p, &before);
	int forged = 0;
	for (int k = 0; k < 6; k++) {
		struct victim_call v = { .pool = p };
		pthread_t t;
		pthread_create(&t, NULL, call_victim, &v);
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL); /* the command is out */
		for (int guess = 0; guess < 12; guess++) {
			unsigned char c[16];
			memcpy(c, corr, 16);
			if (guess < 8) { /* the old scheme: the same nonce, the counter + 1, + 2, ... */
				uint64_t seq = 0;
				for (int b = 0; b < 8; b++)
					seq |= (uint64_t)c[8 + b] << (8 * b);
				seq += (uint64_t)(k + guess + 1);
				for (int b = 0; b < 8; b++)
					c[8 + b] = (unsigned char)(seq >> (8 * b));
			} else if (guess == 8) { /* a replay of what it saw */
			} else {                 /* random */
				for (int b = 0; b < 16; b++)
					c[b] = (unsigned char)rand();
			}
			mosquitto_property *props = NULL;
			mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, c, 16);
			assert_int_equal(
			    tb_client_publish(mallory, response_topic, "forged", 6, 1, false, props), 0);
			mosquitto_property_free_all(&props);
			forged++;
		}
		pthread_join(t, NULL);
		assert_int_equal(v.rc, MQP_OK);
		assert_string_equal(v.reply.payload, "honest");
		mqp_reply_free(&v.reply);
	}
	/* Every forgery reached the pool and was counted, none delivered. */
	for (int w = 0; w < 200; w++) {
		mqp_pool_stats(p, &after);
		if (after.strays + after.late_replies - before.strays - before.late_replies
		    >= (uint64_t)forged)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	}
	assert_int_equal(
	    after.strays + after.late_replies - before.strays - before.late_replies, forged);
	assert_int_equal(
	    after.late_replies - before.late_replies, 6); /* the replays: ours, not awaited */
	free(response_topic);
	free(corr);
	tb_message_free(seen);
	tb_client_destroy(mallory);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&honest);
}

static void unreachable_broker_fails_fast_with_the_reason(void **state)
{
	(void)state;
	mqp_pool *p = NULL;
	char err[256];
	struct mqp_pool_options o = { .min_size_zero = 1 };
	assert_int_equal(mqp_pool_new("mqtt://127.0.0.1:1", &o, &p, err, sizeof err), MQP_OK);
	struct mqp_reply reply;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 10000, &reply), MQP_ECONNECT);
	assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S); /* not the 10 s timeout */
	mqp_pool_last_error(p, err, sizeof err);
	assert_non_null(strstr(err, "127.0.0.1:1"));
	assert_non_null(strstr(err, "refused"));
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_true(st.connects_failed >= 1);
	mqp_pool_destroy(p);

	const struct tb_info *i = tb_test_info();
	struct mqp_pool_options bad = { .username = i->username, .password = "wrong" };
	assert_int_equal(mqp_pool_new(i->mqtt_url, &bad, &p, err, sizeof err), MQP_OK);
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 10000, &reply), MQP_ECONNECT);
	mqp_pool_last_error(p, err, sizeof err);
	assert_non_null(strstr(err, "refused CONNECT"));
	mqp_pool_destroy(p);

	/* A "broker" that takes TCP and never answers CONNECT: exhausted, and the error says why. */
	int silent = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof a;
	assert_int_equal(bind(silent, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(silent, 8), 0);
	assert_int_equal(getsockname(silent, (struct sockaddr *)&a, &alen), 0);
	char url[64];
	snprintf(url, sizeof url, "mqtt://127.0.0.1:%d", ntohs(a.sin_port));
	assert_int_equal(mqp_pool_new(url, &o, &p, err, sizeof err), MQP_OK);
	assert_int_equal(mqp_pool_request(p, "x/cmd", "x", 1, 0, 300, &reply), MQP_EEXHAUSTED);
	mqp_pool_last_error(p, err, sizeof err);
	assert_non_null(strstr(err, "no answer to CONNECT"));
	mqp_pool_destroy(p);
	close(silent);
}

/* A lease must not subscribe to its connection's own inbox filter: the subscription would
 * replace the inbox's, and releasing it would leave the connection deaf to every reply. */
static void a_lease_cannot_take_over_the_inbox(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "inbox/cmd", NULL);
	struct mqp_pool_options o = { .min_size = 1, .max_size = 1 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "inbox/cmd", "a", 1, 0, 3000, &reply), MQP_OK);
	char filter[300];
	snprintf(filter, sizeof filter, "%s/#", reply.topic); /* the reply came to the inbox */
	mqp_reply_free(&reply);
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, filter, 0, 0, 3000), MQP_EINVAL);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	for (int k = 0; k < 3; k++) { /* the one connection still answers requests */
		assert_int_equal(mqp_pool_request(p, "inbox/cmd", "b", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
	}
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void tls_with_one_shared_context(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "tls/cmd", NULL);
	const struct tb_info *i = tb_test_info();
	struct mqp_pool_options o = { .max_size = 3 };
	mqp_pool *p = new_pool(i->mqtts_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "secure", 6, 0, 5000, &reply), MQP_OK);
	assert_string_equal(reply.payload, "secure");
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	/* The wrong CA: a clear connect error, not a timeout. */
	struct mqp_pool_options wrong = { .cafile = i->client_cert, .min_size_zero = 1 };
	p = new_pool(i->mqtts_url, &wrong);
	assert_int_equal(mqp_pool_request(p, "tls/cmd", "x", 1, 0, 5000, &reply), MQP_ECONNECT);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct waiter {
	mqp_pool *pool;
	int rc;
};

static void *wait_forever(void *arg)
{
	struct waiter *w = arg;
	struct mqp_reply reply;
	w->rc = mqp_pool_request(w->pool, "mute/cmd", "x", 1, 0, 30000, &reply);
	return NULL;
}

static void destroy_completes_waiting_callers(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 5 };
	pthread_t t[N];
	struct waiter w[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct waiter) { .pool = p, .rc = -1 };
		pthread_create(&t[i], NULL, wait_forever, &w[i]);
	}
	nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
	uint64_t t0 = mqc_now_ns();
	mqp_pool_destroy(p);
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].rc, MQP_ECLOSED);
	}
	assert_true(mqc_now_ns() - t0 < MQC_NS_PER_S);
	tb_test_responder_stop(&r);
}

static void many_open_files_do_not_break_it(void **state)
{
	(void)state;
	/* select() fails above fd 1024; the pool uses epoll, so its sockets may be numbered high. */
	enum { EXTRA = 1100 };
	int fds[EXTRA];
	for (int i = 0; i < EXTRA; i++)
		assert_true((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "fd/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "fd/cmd", "high", 4, 0, 5000, &reply), MQP_OK);
	mqp_reply_free(&reply);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
	for (int i = 0; i < EXTRA; i++)
		close(fds[i]);
}

struct looper {
	mqp_pool *pool;
	atomic_int stop;
	int ok, failed;
};

static void *loop_requests(void *arg)
{
	struct looper *l = arg;
	while (!atomic_load(&l->stop)) {
		struct mqp_reply reply;
		int rc = mqp_pool_request(l->pool, "restart/cmd", "x", 1, 0, 500, &reply);
		if (rc == MQP_OK) {
			l->ok++;
			mqp_reply_free(&reply);
		} else {
			l->failed++;
			nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
		}
	}
	return NULL;
}

static void broker_restart_mid_load_recovers(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "restart/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 4 };
	pthread_t t[N];
	struct looper l[N];
	for (int i = 0; i < N; i++) {
		l[i] = (struct looper) { .pool = p };
		pthread_create(&t[i], NULL, loop_requests, &l[i]);
	}
	nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
	char err[512];
	if (tb_broker_restart(tb_test_broker(), err, sizeof err) != 0)
		fail_msg("restart: %s", err);
	tb_test_responder_kill(&r); /* it exits when its broker goes; start a new one */
	r = tb_test_responder(RESPONDER_PATH, "--filter", "restart/cmd", NULL);
	/* Callers get errors, nobody hangs, and the pool serves again. */
	struct mqp_reply reply;
	int rc = MQP_ECONNECT;
	uint64_t deadline = mqc_now_ns() + 10 * MQC_NS_PER_S;
	while (rc != MQP_OK && mqc_now_ns() < deadline) {
		rc = mqp_pool_request(p, "restart/cmd", "after", 5, 0, 500, &reply);
		if (rc == MQP_OK)
			mqp_reply_free(&reply);
	}
	assert_int_equal(rc, MQP_OK);
	for (int i = 0; i < N; i++)
		atomic_store(&l[i].stop, 1);
	int ok = 0, failed = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ok += l[i].ok;
		failed += l[i].failed;
	}
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	print_message("restart: ok %d failed %d lost %llu\n", ok, failed,
	    (unsigned long long)st.connections_lost);
	assert_true(ok > 0);
	assert_true(st.connections_lost >= 1);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static struct tb_client *outside_client(void)
{
	return tb_test_connect(tb_test_info()->mqtt_url, 5);
}

static void lease_subscribe_receive_release(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct tb_client *out = outside_client();
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, "lease/a/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "lease/a/x", "hello", 5, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&lease, 3000, &m), MQP_OK);
	assert_string_equal(m.topic, "lease/a/x");
	assert_string_equal(m.payload, "hello");
	assert_int_equal(m.qos, 1);
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&lease, 100, &m), MQP_ETIMEDOUT);
	/* Publishing through the lease reaches the outside. */
	assert_int_equal(tb_client_subscribe(out, "lease/b", 1, 0, NULL), 1);
	assert_int_equal(mqp_lease_publish(&lease, "lease/b", "out", 3, 1, 0, 3000), MQP_OK);
	struct tb_message *got = tb_client_receive(out, 3000);
	assert_non_null(got);
	assert_string_equal(got->payload, "out");
	tb_message_free(got);
	mqp_lease copy = lease;
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	/* Double release and use after release are reported, never a crash. */
	assert_int_equal(mqp_lease_release(&copy), MQP_ERELEASED);
	assert_int_equal(mqp_lease_receive(&copy, 100, &m), MQP_ERELEASED);
	assert_int_equal(mqp_lease_publish(&copy, "lease/b", "x", 1, 0, 0, 100), MQP_ERELEASED);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.acquires, 1);
	assert_int_equal(st.releases, 1);
	assert_int_equal(st.double_releases, 1);
	assert_int_equal(st.leased, 0);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

static void released_backlog_never_reaches_the_next_borrower(void **state)
{
	(void)state;
	/* One connection, so the second lease is on the very same connection. */
	struct mqp_pool_options o = { .max_size = 1, .min_size = 1 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct tb_client *out = outside_client();
	mqp_lease a;
	assert_int_equal(mqp_pool_acquire(p, 3000, &a), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&a, "backlog/#", 1, 0, 3000), MQP_OK);
	for (int i = 0; i < 200; i++)
		assert_int_equal(tb_client_publish(out, "backlog/old", "old", 3, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&a, 3000, &m), MQP_OK); /* takes one, leaves the rest */
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_release(&a), MQP_OK);

	mqp_lease b;
	assert_int_equal(mqp_pool_acquire(p, 3000, &b), MQP_OK);
	assert_int_equal(b.slot, a.slot);
	assert_int_equal(mqp_lease_subscribe(&b, "backlog/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "backlog/new", "new", 3, 1, false, NULL), 0);
	assert_int_equal(mqp_lease_receive(&b, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "new"); /* none of the 199 old ones */
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&b, 300, &m), MQP_ETIMEDOUT);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	print_message("stale dropped: %llu\n", (unsigned long long)st.stale_dropped);
	assert_true(st.stale_dropped >= 199);
	assert_int_equal(mqp_lease_release(&b), MQP_OK);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

struct acquirer {
	mqp_pool *pool;
	int rc;
	uint64_t got_at;
};

static void *acquire_one(void *arg)
{
	struct acquirer *a = arg;
	mqp_lease lease;
	a->rc = mqp_pool_acquire(a->pool, 5000, &lease);
	a->got_at = mqc_now_ns();
	if (a->rc == MQP_OK)
		mqp_lease_release(&lease);
	return NULL;
}

static void acquire_waits_in_fifo_order_and_times_out(void **state)
{
	(void)state;
	struct mqp_pool_options o = { .max_size = 1, .min_size = 1 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease held;
	assert_int_equal(mqp_pool_acquire(p, 3000, &held), MQP_OK);
	mqp_lease other;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_acquire(p, 200, &other), MQP_ETIMEDOUT);
	assert_true(mqc_now_ns() - t0 >= 200 * MQC_NS_PER_MS);
	/* Three waiters, started in order: served in that order once the lease comes back. */
	struct acquirer w[3];
	pthread_t t[3];
	for (int i = 0; i < 3; i++) {
		w[i] = (struct acquirer) { .pool = p };
		pthread_create(&t[i], NULL, acquire_one, &w[i]);
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
	}
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 3; i++)
		assert_int_equal(w[i].rc, MQP_OK);
	assert_true(w[0].got_at <= w[1].got_at && w[1].got_at <= w[2].got_at);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.acquire_timeouts, 1);
	assert_int_equal(st.size, 1);
	/* The timed-out acquire and the three waiters (and the first, if the pool was not warm). */
	assert_true(st.waits >= 4 && st.waits <= 5);
	/* Every lease is back: the one connection is available again (gauges follow within a loop). */
	uint64_t until = mqc_now_ns() + 2 * MQC_NS_PER_S;
	for (mqp_pool_stats(p, &st); (st.available != 1 || st.leased != 0) && mqc_now_ns() < until;
	     mqp_pool_stats(p, &st))
		nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	assert_int_equal(st.available, 1);
	assert_int_equal(mqp_pool_acquire(p, 3000, &held), MQP_OK);
	until = mqc_now_ns() + 2 * MQC_NS_PER_S;
	for (mqp_pool_stats(p, &st); st.available != 0 && mqc_now_ns() < until; mqp_pool_stats(p, &st))
		nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
	assert_int_equal(st.available, 0); /* borrowed is not available */
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	mqp_pool_destroy(p);
}

struct later {
	int delay_ms;
	const char *topic;
};

static void *publish_later(void *arg)
{
	struct later *l = arg;
	nanosleep(&(struct timespec) { .tv_nsec = (long)l->delay_ms * 1000000L }, NULL);
	struct tb_client *c = outside_client();
	tb_client_publish(c, l->topic, "once", 4, 1, false, NULL);
	tb_client_destroy(c);
	return NULL;
}

static void one_shot_receive_and_requests_beside_a_lease(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "beside/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	pthread_t t;
	struct later l = { .delay_ms = 300, .topic = "oneshot/t" };
	pthread_create(&t, NULL, publish_later, &l);
	struct mqp_message m;
	assert_int_equal(mqp_pool_receive(p, "oneshot/#", 1, 0, 5000, &m), MQP_OK);
	assert_string_equal(m.topic, "oneshot/t");
	mqp_message_free(&m);
	pthread_join(t, NULL);
	assert_int_equal(mqp_pool_receive(p, "oneshot/#", 0, 0, 200, &m), MQP_ETIMEDOUT);
	/* While a lease holds a connection, requests still flow on the others. */
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	struct mqp_reply reply;
	for (int i = 0; i < 10; i++) {
		assert_int_equal(mqp_pool_request(p, "beside/cmd", "r", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
	}
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.leased, 0);
	assert_int_equal(st.double_releases, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void idle_connections_above_min_close(void **state)
{
	(void)state;
	struct mqp_pool_options o
	    = { .max_size = 3, .min_size = 1, .idle_timeout_ms = 300, .eviction_interval_ms = 100 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease l[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(mqp_pool_acquire(p, 3000, &l[i]), MQP_OK);
	for (int i = 0; i < 3; i++)
		assert_int_equal(mqp_lease_release(&l[i]), MQP_OK);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.size, 3);
	nanosleep(&(struct timespec) { .tv_nsec = 900000000 }, NULL);
	mqp_pool_stats(p, &st);
	assert_int_equal(st.size, 1); /* back to min_size, never below */
	assert_int_equal(st.closes_idle, 2);
	mqp_pool_destroy(p);
}

static void old_connections_retire_without_failing_requests(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "life/cmd", NULL);
	struct mqp_pool_options o
	    = { .max_size = 1, .min_size = 1, .max_lifetime_ms = 300, .eviction_interval_ms = 50 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	for (int i = 0; i < 15; i++) {
		struct mqp_reply reply;
		assert_int_equal(mqp_pool_request(p, "life/cmd", "x", 1, 0, 3000, &reply), MQP_OK);
		mqp_reply_free(&reply);
		nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL);
	}
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_true(st.closes_lifetime >= 2);
	assert_true(st.connects_ok >= 3);
	assert_int_equal(st.connections_lost, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct log_capture {
	pthread_mutex_t lock;
	char last[512];
	int count;
};

static void capture_log(void *userdata, int level, const char *message)
{
	struct log_capture *c = userdata;
	(void)level;
	pthread_mutex_lock(&c->lock);
	snprintf(c->last, sizeof c->last, "%s", message);
	c->count++;
	pthread_mutex_unlock(&c->lock);
}

static void a_lease_held_too_long_is_reported_with_its_origin(void **state)
{
	(void)state;
	struct log_capture logs = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct mqp_pool_options o = { .leak_threshold_ms = 200,
		.eviction_interval_ms = 50,
		.log_cb = capture_log,
		.userdata = &logs };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease lease;
	int line = __LINE__ + 1;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	nanosleep(&(struct timespec) { .tv_nsec = 500000000 }, NULL);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.leaks, 1); /* reported once */
	char where[64];
	snprintf(where, sizeof where, "pool_test.c:%d", line);
	pthread_mutex_lock(&logs.lock);
	if (!strstr(logs.last, where) || !strstr(logs.last, "possible leak"))
		fail_msg("log '%s' does not name %s", logs.last, where);
	pthread_mutex_unlock(&logs.lock);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	mqp_pool_destroy(p);
}

struct async_call {
	char nonce[32];
	atomic_int calls; /* must end at exactly 1 */
	atomic_int result;
	atomic_int matched;
	mqp_pool *pool;
};

static void on_async_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct async_call *c = userdata;
	if (result == MQP_OK && reply && reply->len == strlen(c->nonce)
	    && memcmp(reply->payload, c->nonce, reply->len) == 0)
		atomic_store(&c->matched, 1);
	if (c->pool) { /* a blocking call from the pool's thread must refuse, not deadlock */
		struct mqp_reply r;
		if (mqp_pool_request(c->pool, "async/cmd", "x", 1, 0, 100, &r) != MQP_EDEADLK)
			atomic_store(&c->matched, -1);
	}
	atomic_store(&c->result, result);
	atomic_fetch_add(&c->calls, 1);
}

static bool wait_calls(struct async_call *calls, int n, int timeout_ms)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	for (;;) {
		int done = 0;
		for (int i = 0; i < n; i++)
			done += atomic_load(&calls[i].calls) > 0;
		if (done == n)
			return true;
		if (mqc_now_ns() > deadline)
			return false;
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	}
}

static void async_requests_complete_exactly_once(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "async/cmd", "--duplicate", "0.3", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 300 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		snprintf(calls[i].nonce, sizeof calls[i].nonce, "async-%d-%ld", i, random());
		calls[i].pool = i == 0 ? p : NULL;
		assert_int_equal(mqp_pool_request_async(p, "async/cmd", calls[i].nonce,
		                     strlen(calls[i].nonce), 0, 3000, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	assert_true(wait_calls(calls, N, 10000));
	nanosleep(
	    &(struct timespec) { .tv_nsec = 200000000 }, NULL); /* duplicates must not call again */
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), MQP_OK);
		assert_int_equal(atomic_load(&calls[i].matched), 1);
	}
	assert_int_equal(
	    mqp_pool_request_async(p, "async/+", "x", 1, 0, 100, on_async_reply, NULL, NULL),
	    MQP_EINVAL);
	assert_int_equal(
	    mqp_pool_request_async(p, "async/cmd", "x", 1, 0, 100, NULL, NULL, NULL), MQP_EINVAL);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

static void async_timeouts_and_destroy_complete_every_call(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 20 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		/* Half time out on their own; half are still waiting when the pool goes. */
		assert_int_equal(mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, i % 2 ? 100 : 30000,
		                     on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	nanosleep(&(struct timespec) { .tv_nsec = 400000000 }, NULL);
	mqp_pool_destroy(p); /* returns after every callback has run */
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), i % 2 ? MQP_ETIMEDOUT : MQP_ECLOSED);
	}
	tb_test_responder_stop(&r);
}

struct legacy_worker {
	mqp_pool *pool;
	int id, ok, mismatches;
};

static void *legacy_work(void *arg)
{
	struct legacy_worker *w = arg;
	for (int k = 0; k < 10; k++) {
		char nonce[48];
		int n = snprintf(nonce, sizeof nonce, "legacy-%d-%d", w->id, k);
		struct mqp_reply reply;
		if (mqp_pool_request_legacy(w->pool, "leg/d1/cmd", nonce, (size_t)n, 1, "leg/d1/cmd/reply",
		        NULL, NULL, 5000, &reply)
		    == MQP_OK) {
			w->ok++;
			if (reply.len != (size_t)n || memcmp(reply.payload, nonce, (size_t)n) != 0)
				w->mismatches++;
			mqp_reply_free(&reply);
		}
	}
	return NULL;
}

static int payload_starts_with_ok(void *userdata, const struct mqp_message *m)
{
	(void)userdata;
	return m->len >= 2 && memcmp(m->payload, "ok", 2) == 0;
}

/* A callback that takes its time: drain must not return before it has returned. */
static void on_slow_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)result;
	(void)reply;
	nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
	atomic_store((atomic_int *)userdata, 1);
}

static void drain_returns_only_after_the_last_callback_has(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "drain/cmd", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	atomic_int returned = 0;
	assert_int_equal(
	    mqp_pool_request_async(p, "drain/cmd", "x", 1, 0, 3000, on_slow_reply, &returned, NULL),
	    MQP_OK);
	nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL); /* the reply is in */
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp_pool_drain(p, 5000), MQP_OK);
	assert_int_equal(atomic_load(&returned), 1);
	assert_true(mqc_now_ns() - t0 < 2 * MQC_NS_PER_S); /* woken, not waiting out its timeout */
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* mqp_pool_destroy from the pool's own callback: deferred, no use after free (ASan). */
struct destroyer {
	mqp_pool *pool;
	atomic_int calls;
};

static void destroy_from_callback(void *userdata, int result, const struct mqp_reply *reply)
{
	(void)result;
	(void)reply;
	struct destroyer *d = userdata;
	if (atomic_fetch_add(&d->calls, 1) == 0) {
		mqp_pool_destroy(d->pool);
		struct mqp_pool_stats st; /* still usable until this callback returns */
		mqp_pool_stats(d->pool, &st);
	}
}

static void destroy_from_a_callback_is_deferred(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "destroy/cmd", NULL);
	struct destroyer d = { .pool = new_pool(tb_test_info()->mqtt_url, NULL) };
	assert_int_equal(mqp_pool_request_async(
	                     d.pool, "destroy/cmd", "x", 1, 0, 3000, destroy_from_callback, &d, NULL),
	    MQP_OK);
	assert_int_equal(mqp_pool_request_async(d.pool, "nobody/answers", "x", 1, 0, 30000,
	                     destroy_from_callback, &d, NULL),
	    MQP_OK);
	for (int k = 0; k < 300 && atomic_load(&d.calls) < 2; k++)
		nanosleep(&(struct timespec) { .tv_nsec = 10000000 }, NULL);
	assert_int_equal(atomic_load(&d.calls), 2); /* the second completed with MQP_ECLOSED */
	nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL); /* the pool frees itself */
	tb_test_responder_stop(&r);
}

static void legacy_fixed_reply_topic_is_safe(void **state)
{
	(void)state;
	/* A 3.1.1 device that answers on {topic}/reply, echoing the payload. */
	struct tb_responder r = tb_test_responder(
	    RESPONDER_PATH, "--filter", "leg/+/cmd", "--protocol", "3.1.1", "--qos", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request_legacy(
	                     p, "leg/d1/cmd", "x", 1, 1, "leg/+/reply", NULL, NULL, 1000, &reply),
	    MQP_EINVAL); /* wildcard */
	assert_int_equal(
	    mqp_pool_request_legacy(p, "leg/d1/cmd", "x", 1, 1, "leg/d1/cmd", NULL, NULL, 1000, &reply),
	    MQP_EINVAL); /* matches the command */
	/* Four threads share one reply topic: served one at a time, each gets its own echo. */
	enum { N = 4 };
	pthread_t t[N];
	struct legacy_worker w[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct legacy_worker) { .pool = p, .id = i };
		pthread_create(&t[i], NULL, legacy_work, &w[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].ok, 10);
		assert_int_equal(w[i].mismatches, 0);
	}
	/* A match callback skips what is not the reply. */
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "no", 2, 1, "leg/d1/cmd/reply",
	                     payload_starts_with_ok, NULL, 300, &reply),
	    MQP_ETIMEDOUT);
	assert_int_equal(mqp_pool_request_legacy(p, "leg/d1/cmd", "ok!", 3, 1, "leg/d1/cmd/reply",
	                     payload_starts_with_ok, NULL, 3000, &reply),
	    MQP_OK);
	assert_string_equal(reply.payload, "ok!");
	mqp_reply_free(&reply);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.leased, 0);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* Caller A times out on a fixed reply topic; the device answers A late, while caller B waits
 * on the same topic. B must get its own reply, never A's (it did in 3 of 3 trials before). */
static void legacy_a_late_reply_never_reaches_the_next_caller(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "slowleg/+/cmd",
	    "--protocol", "3.1.1", "--qos", "1", "--delay", "600ms", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct mqp_reply reply;
	for (int trial = 0; trial < 3; trial++) {
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-A", 6, 1,
		                     "slowleg/d1/cmd/reply", NULL, NULL, 400, &reply),
		    MQP_ETIMEDOUT);
		assert_int_equal(mqp_pool_request_legacy(p, "slowleg/d1/cmd", "from-B", 6, 1,
		                     "slowleg/d1/cmd/reply", NULL, NULL, 3000, &reply),
		    MQP_OK);
		assert_string_equal(reply.payload, "from-B");
		mqp_reply_free(&reply);
	}
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/* Retained messages: one subscription's option, not the lease's; and the one-shot receive can
 * read a device's last state (the JavaScript pool's own test: publish retained, then receive). */
static void retained_belongs_to_its_subscription_and_receive_reads_the_last_state(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	assert_int_equal(mqp_pool_publish(p, "state/d1", "world", 5, 1, 1, 3000), MQP_OK);
	assert_int_equal(mqp_pool_publish(p, "state/d2", "other", 5, 1, 1, 3000), MQP_OK);
	struct mqp_message m;
	assert_int_equal(mqp_pool_receive(p, "state/d1", 1, MQP_SUB_RETAINED, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "world");
	assert_true(m.retain);
	mqp_message_free(&m);
	assert_int_equal(mqp_pool_receive(p, "state/d1", 1, 0, 300, &m), MQP_ETIMEDOUT);
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&lease, "state/d1", 1, MQP_SUB_RETAINED, 3000), MQP_OK);
	assert_int_equal(mqp_lease_receive(&lease, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "world");
	mqp_message_free(&m);
	/* The same lease, another subscription without the option: its retained copy stays away. */
	assert_int_equal(mqp_lease_subscribe(&lease, "state/d2", 1, 0, 3000), MQP_OK);
	assert_int_equal(mqp_lease_receive(&lease, 300, &m), MQP_ETIMEDOUT);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	assert_int_equal(mqp_pool_publish(p, "state/d1", "", 0, 1, 1, 3000), MQP_OK); /* clear */
	assert_int_equal(mqp_pool_publish(p, "state/d2", "", 0, 1, 1, 3000), MQP_OK);
	mqp_pool_destroy(p);
}

static void drain_waits_for_calls_and_leases_then_refuses_new_work(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 6 };
	static struct async_call calls[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		assert_int_equal(
		    mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 300, on_async_reply, &calls[i], NULL),
		    MQP_OK);
	}
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_pool_drain(p, 600), MQP_ETIMEDOUT); /* the lease is still out */
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&calls[i].calls), 1); /* the calls did finish */
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "x", 1, 0, 100, &reply), MQP_ECLOSED);
	mqp_lease other;
	assert_int_equal(mqp_pool_acquire(p, 100, &other), MQP_ECLOSED);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK); /* lease calls still work */
	assert_int_equal(mqp_pool_drain(p, 1000), MQP_OK);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

struct done_call {
	atomic_int calls, result;
};

static void on_published(void *userdata, int result)
{
	struct done_call *d = userdata;
	atomic_store(&d->result, result);
	atomic_fetch_add(&d->calls, 1);
}

static void a_request_that_never_gets_a_connection_is_exhausted(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	struct mqp_reply reply;
	struct mqp_pool_stats st;
	/* One connection carrying one request at most: a second request waits in the queue and,
	 * never sent, ends with MQP_EEXHAUSTED rather than a timeout that hides whether the device
	 * got it. */
	struct mqp_pool_options o = { .max_size = 1, .min_size = 1, .max_inflight = 1 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	static struct done_call first;
	atomic_store(&first.calls, 0);
	assert_int_equal(
	    mqp_pool_publish_async(p, "mute/warm", "x", 1, 1, 0, 3000, on_published, &first, NULL),
	    MQP_OK); /* wait until the connection is up */
	uint64_t until = mqc_now_ns() + 3 * MQC_NS_PER_S;
	while (atomic_load(&first.calls) == 0 && mqc_now_ns() < until)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	assert_int_equal(atomic_load(&first.result), MQP_OK);
	static struct async_call busy;
	memset(&busy, 0, sizeof busy);
	assert_int_equal(
	    mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 5000, on_async_reply, &busy, NULL),
	    MQP_OK);
	assert_int_equal(mqp_pool_request(p, "mute/cmd", "y", 1, 0, 200, &reply), MQP_EEXHAUSTED);
	mqp_pool_stats(p, &st);
	assert_int_equal(st.requests, 1); /* the second was never published */
	assert_true(st.waits >= 1);
	assert_string_equal(
	    mqp_strerror(MQP_EEXHAUSTED), "no connection free before the deadline (not sent)");
	mqp_pool_destroy(p);
	assert_int_equal(atomic_load(&busy.result), MQP_ECLOSED);
	tb_test_responder_stop(&r);
}

static void async_publish_and_discard(void **state)
{
	(void)state;
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	struct tb_client *out = outside_client();
	assert_int_equal(tb_client_subscribe(out, "pubasync/#", 1, 0, NULL), 1);
	static struct done_call d;
	atomic_store(&d.calls, 0);
	assert_int_equal(
	    mqp_pool_publish_async(p, "pubasync/x", "hi", 2, 1, 0, 3000, on_published, &d, NULL),
	    MQP_OK);
	struct tb_message *m = tb_client_receive(out, 3000);
	assert_non_null(m);
	assert_string_equal(m->payload, "hi");
	tb_message_free(m);
	uint64_t deadline = mqc_now_ns() + 3 * MQC_NS_PER_S;
	while (atomic_load(&d.calls) == 0 && mqc_now_ns() < deadline)
		nanosleep(&(struct timespec) { .tv_nsec = 5000000 }, NULL);
	assert_int_equal(atomic_load(&d.calls), 1);
	assert_int_equal(atomic_load(&d.result), MQP_OK);
	/* Discard: the connection is closed, the handle is spent, the pool replaces it. */
	mqp_lease lease;
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_discard(&lease), MQP_OK);
	assert_int_equal(mqp_lease_discard(&lease), MQP_ERELEASED);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.leased, 0);
	assert_int_equal(st.double_releases, 1);
	assert_int_equal(st.connections_lost, 0); /* our own close is not a loss */
	assert_int_equal(mqp_pool_acquire(p, 3000, &lease), MQP_OK);
	assert_int_equal(mqp_lease_release(&lease), MQP_OK);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
}

struct async_lease {
	atomic_int calls, result;
	atomic_int released; /* the callback gave the lease back from the pool's thread */
	bool release_in_callback;
};

static void on_lease(void *userdata, int result, mqp_lease lease)
{
	struct async_lease *a = userdata;
	atomic_store(&a->result, result);
	if (result == MQP_OK && a->release_in_callback)
		atomic_store(&a->released, mqp_lease_release(&lease) == MQP_OK ? 1 : -1);
	atomic_fetch_add(&a->calls, 1);
}

static bool wait_flag(atomic_int *flag, int timeout_ms)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	while (atomic_load(flag) == 0 && mqc_now_ns() < deadline)
		nanosleep(&(struct timespec) { .tv_nsec = 2000000 }, NULL);
	return atomic_load(flag) != 0;
}

static void async_calls_can_be_cancelled(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "mute/cmd", "--drop", "1", NULL);
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, NULL);
	enum { N = 10 };
	static struct async_call calls[N];
	mqp_ticket tickets[N];
	for (int i = 0; i < N; i++) {
		memset(&calls[i], 0, sizeof calls[i]);
		assert_int_equal(mqp_pool_request_async(p, "mute/cmd", "x", 1, 0, 30000, on_async_reply,
		                     &calls[i], &tickets[i]),
		    MQP_OK);
		assert_true(tickets[i] != 0 && (i == 0 || tickets[i] != tickets[i - 1]));
	}
	uint64_t t0 = mqc_now_ns();
	for (int i = 0; i < N; i += 2)
		assert_int_equal(mqp_pool_cancel(p, tickets[i]), MQP_OK);
	for (int i = 0; i < N; i += 2)
		assert_true(wait_flag(&calls[i].calls, 3000));
	assert_true(mqc_now_ns() - t0 < 3 * MQC_NS_PER_S); /* not at the 30 s deadline */
	nanosleep(&(struct timespec) { .tv_nsec = 100000000 }, NULL);
	for (int i = 0; i < N; i++) {
		assert_int_equal(atomic_load(&calls[i].calls), i % 2 ? 0 : 1);
		if (i % 2 == 0)
			assert_int_equal(atomic_load(&calls[i].result), MQP_ECANCELED);
	}
	/* Cancelling twice, or a call that is gone, changes nothing. */
	assert_int_equal(mqp_pool_cancel(p, tickets[0]), MQP_OK);
	assert_int_equal(mqp_pool_cancel(p, 0), MQP_EINVAL);

	/* Async acquire: waits in the same FIFO as blocking acquirers; cancellable while it waits. */
	struct mqp_pool_options o = { .max_size = 1, .min_size = 1 };
	mqp_pool *q = new_pool(tb_test_info()->mqtt_url, &o);
	mqp_lease held;
	assert_int_equal(mqp_pool_acquire(q, 3000, &held), MQP_OK);
	static struct async_lease x, y;
	memset(&x, 0, sizeof x);
	memset(&y, 0, sizeof y);
	y.release_in_callback = true;
	mqp_ticket tx, ty;
	assert_int_equal(mqp_pool_acquire_async(q, 30000, on_lease, &x, &tx), MQP_OK);
	assert_int_equal(mqp_pool_acquire_async(q, 30000, on_lease, &y, &ty), MQP_OK);
	assert_int_equal(mqp_pool_cancel(q, tx), MQP_OK);
	assert_true(wait_flag(&x.calls, 3000));
	assert_int_equal(atomic_load(&x.result), MQP_ECANCELED);
	assert_int_equal(atomic_load(&y.calls), 0); /* still waiting behind the held lease */
	assert_int_equal(mqp_lease_release(&held), MQP_OK);
	assert_true(wait_flag(&y.calls, 3000));
	assert_int_equal(atomic_load(&y.result), MQP_OK);
	assert_int_equal(atomic_load(&y.released), 1);
	assert_int_equal(mqp_pool_cancel(q, ty), MQP_OK); /* granted already: no second callback */
	mqp_lease again; /* the lease released from the callback is back in the pool */
	assert_int_equal(mqp_pool_acquire(q, 3000, &again), MQP_OK);
	assert_int_equal(mqp_lease_release(&again), MQP_OK);
	assert_int_equal(atomic_load(&x.calls), 1);
	assert_int_equal(atomic_load(&y.calls), 1);
	struct mqp_pool_stats st;
	mqp_pool_stats(p, &st);
	assert_int_equal(st.cancels, N / 2);
	mqp_pool_stats(q, &st);
	assert_int_equal(st.cancels, 1);
	assert_true(st.waits >= 2);
	assert_int_equal(st.leased, 0);
	mqp_pool_destroy(q);
	mqp_pool_destroy(p); /* the other half complete now, with MQP_ECLOSED */
	for (int i = 1; i < N; i += 2) {
		assert_int_equal(atomic_load(&calls[i].calls), 1);
		assert_int_equal(atomic_load(&calls[i].result), MQP_ECLOSED);
	}
	tb_test_responder_stop(&r);
}

static void mqtt311_leases_work_and_are_discarded_after_subscribing(void **state)
{
	(void)state;
	struct tb_responder r
	    = tb_test_responder(RESPONDER_PATH, "--filter", "v3/+/cmd", "--protocol", "3.1.1", NULL);
	struct mqp_pool_options o = { .protocol = 4, .max_size = 1, .min_size = 1 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct mqp_reply reply;
	assert_int_equal(mqp_pool_request(p, "v3/d/cmd", "x", 1, 0, 1000, &reply), MQP_EINVAL);
	assert_int_equal(mqp_pool_request_legacy(
	                     p, "v3/d/cmd", "hello", 5, 1, "v3/d/cmd/reply", NULL, NULL, 3000, &reply),
	    MQP_OK);
	assert_string_equal(reply.payload, "hello");
	mqp_reply_free(&reply);
	/* A backlog left behind: the 3.1.1 lease is discarded, the next one starts clean. */
	struct tb_client *out = outside_client();
	mqp_lease a, b;
	assert_int_equal(mqp_pool_acquire(p, 3000, &a), MQP_OK);
	assert_int_equal(mqp_lease_subscribe(&a, "v3backlog/#", 1, 0, 3000), MQP_OK);
	for (int i = 0; i < 50; i++)
		assert_int_equal(tb_client_publish(out, "v3backlog/old", "old", 3, 1, false, NULL), 0);
	struct mqp_message m;
	assert_int_equal(mqp_lease_receive(&a, 3000, &m), MQP_OK);
	mqp_message_free(&m);
	struct mqp_pool_stats before;
	mqp_pool_stats(p, &before);
	assert_int_equal(mqp_lease_release(&a), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 3000, &b), MQP_OK);
	struct mqp_pool_stats after;
	mqp_pool_stats(p, &after);
	assert_int_equal(after.connects_ok, before.connects_ok + 1); /* a fresh connection */
	assert_int_equal(mqp_lease_subscribe(&b, "v3backlog/#", 1, 0, 3000), MQP_OK);
	assert_int_equal(tb_client_publish(out, "v3backlog/new", "new", 3, 1, false, NULL), 0);
	assert_int_equal(mqp_lease_receive(&b, 3000, &m), MQP_OK);
	assert_string_equal(m.payload, "new");
	mqp_message_free(&m);
	assert_int_equal(mqp_lease_receive(&b, 300, &m), MQP_ETIMEDOUT);
	assert_int_equal(mqp_lease_release(&b), MQP_OK);
	struct mqp_pool_options bad = { .protocol = 3 };
	mqp_pool *q = NULL;
	char err[128];
	assert_int_equal(mqp_pool_new(tb_test_info()->mqtt_url, &bad, &q, err, sizeof err), MQP_EINVAL);
	tb_client_destroy(out);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

/*
 * A blocking acquirer gives up (past its deadline and grace) while the I/O thread is held up in
 * another acquirer's callback, and is granted a lease just after: nobody holds that lease, so it
 * must come straight back. Two leases are freed together; A (async, its callback stalls 2.6 s)
 * and then B (blocking, 300 ms + 2 s grace) are granted in one pass, B after it has left.
 */
struct two_leases {
	mqp_lease l[2];
};

/* The first acquirer in the queue times out; its callback frees both leases at once. */
static void release_both(void *userdata, int result, mqp_lease lease)
{
	(void)result;
	(void)lease;
	struct two_leases *t = userdata; /* from the pool's thread: neither release waits */
	mqp_lease_release(&t->l[0]);
	mqp_lease_release(&t->l[1]);
}

static void stall_with_lease(void *userdata, int result, mqp_lease lease)
{
	if (result == MQP_OK) {
		nanosleep(&(struct timespec) { .tv_sec = 2, .tv_nsec = 600000000 }, NULL);
		mqp_lease_release(&lease);
	}
	atomic_store((atomic_int *)userdata, result == MQP_OK ? 1 : -1);
}

struct giving_up {
	mqp_pool *pool;
	int rc;
};

static void *acquire_and_give_up(void *arg)
{
	struct giving_up *g = arg;
	mqp_lease l;
	g->rc = mqp_pool_acquire(g->pool, 300, &l);
	return NULL;
}

static void an_abandoned_acquire_never_strands_a_lease(void **state)
{
	(void)state;
	struct tb_responder r = tb_test_responder(RESPONDER_PATH, "--filter", "stall/cmd", NULL);
	struct mqp_pool_options o = { .min_size = 2, .max_size = 2 };
	mqp_pool *p = new_pool(tb_test_info()->mqtt_url, &o);
	struct two_leases t;
	assert_int_equal(mqp_pool_acquire(p, 3000, &t.l[0]), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 3000, &t.l[1]), MQP_OK);
	atomic_int a_done = 0;
	assert_int_equal(mqp_pool_acquire_async(p, 100, release_both, &t, NULL), MQP_OK);
	assert_int_equal(mqp_pool_acquire_async(p, 10000, stall_with_lease, &a_done, NULL), MQP_OK);
	struct giving_up g = { .pool = p };
	pthread_t b;
	pthread_create(&b, NULL, acquire_and_give_up, &g); /* FIFO: the timer, A, then B */
	pthread_join(b, NULL);
	assert_int_equal(g.rc, MQP_ETIMEDOUT); /* B gave up after 300 ms + grace */
	assert_true(wait_flag(&a_done, 5000));
	struct mqp_pool_stats st = { 0 };
	for (int k = 0; k < 100; k++) {
		mqp_pool_stats(p, &st);
		if (st.leased == 0)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
	}
	assert_int_equal(st.leased, 0); /* nothing is held by nobody */
	mqp_lease x, y;                 /* and both connections can be borrowed again */
	assert_int_equal(mqp_pool_acquire(p, 1000, &x), MQP_OK);
	assert_int_equal(mqp_pool_acquire(p, 1000, &y), MQP_OK);
	mqp_lease_release(&x);
	mqp_lease_release(&y);
	mqp_pool_destroy(p);
	tb_test_responder_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(request_round_trip),
		cmocka_unit_test(bad_arguments_are_refused),
		cmocka_unit_test(two_pools_in_one_process_do_not_collide),
		cmocka_unit_test(timeout_when_the_device_never_answers),
		cmocka_unit_test(adversarial_device_never_crosses_replies),
		cmocka_unit_test(a_device_cannot_forge_replies_to_other_devices),
		cmocka_unit_test(unreachable_broker_fails_fast_with_the_reason),
		cmocka_unit_test(a_lease_cannot_take_over_the_inbox),
		cmocka_unit_test(tls_with_one_shared_context),
		cmocka_unit_test(destroy_completes_waiting_callers),
		cmocka_unit_test(many_open_files_do_not_break_it),
		cmocka_unit_test(broker_restart_mid_load_recovers),
		cmocka_unit_test(lease_subscribe_receive_release),
		cmocka_unit_test(released_backlog_never_reaches_the_next_borrower),
		cmocka_unit_test(acquire_waits_in_fifo_order_and_times_out),
		cmocka_unit_test(one_shot_receive_and_requests_beside_a_lease),
		cmocka_unit_test(idle_connections_above_min_close),
		cmocka_unit_test(old_connections_retire_without_failing_requests),
		cmocka_unit_test(a_lease_held_too_long_is_reported_with_its_origin),
		cmocka_unit_test(async_requests_complete_exactly_once),
		cmocka_unit_test(async_timeouts_and_destroy_complete_every_call),
		cmocka_unit_test(async_calls_can_be_cancelled),
		cmocka_unit_test(legacy_fixed_reply_topic_is_safe),
		cmocka_unit_test(legacy_a_late_reply_never_reaches_the_next_caller),
		cmocka_unit_test(retained_belongs_to_its_subscription_and_receive_reads_the_last_state),
		cmocka_unit_test(drain_returns_only_after_the_last_callback_has),
		cmocka_unit_test(destroy_from_a_callback_is_deferred),
		cmocka_unit_test(an_abandoned_acquire_never_strands_a_lease),
		cmocka_unit_test(drain_waits_for_calls_and_leases_then_refuses_new_work),
		cmocka_unit_test(async_publish_and_discard),
		cmocka_unit_test(a_request_that_never_gets_a_connection_is_exhausted),
		cmocka_unit_test(mqtt311_leases_work_and_are_discarded_after_subscribing),
	};
	return TB_TEST_RUN(tests, NULL);
}
