/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_engine_test.c - the fleet engine (bench/src/fleet.c) without a broker: each attempt's
 * connection is one end of a socketpair, and the test plays the broker on the other, with
 * packets written here by hand (an oracle that does not share the codec it checks). Every
 * outcome is counted by its reason, exactly: accepted, refused in a CONNACK, answered in 3.1.1,
 * closed before CONNACK, malformed, silent until the deadline, dropped once held; keep-alive
 * kept at the broker's Server Keep Alive; and churn's SUBACK read from its first reason code
 * whatever else the packet carries.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "churn.h"
#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"

#define BYTES(...) \
	((const unsigned char[]) { __VA_ARGS__ }), sizeof((const unsigned char[]) { __VA_ARGS__ })

enum { MAX_PEERS = 16 };

/* The broker's side of every attempt, by client index. */
struct peers {
	int fd[MAX_PEERS];
	bool connect_seen[MAX_PEERS];
};
static struct peers peers;

static int socketpair_dial(struct fleet *r, struct attempt *a)
{
	(void)r;
	int sv[2];
	if (a->k >= MAX_PEERS
	    || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
		return -EMFILE;
	peers.fd[a->k] = sv[1];
	return sv[0];
}

/* The options of `mqbench SCENARIO ARGS...` (a broker address that is never dialled). The
 * words stay here while the options point into them: until the next call. */
static struct bench_opts opts(enum bench_scenario sc, const char *first, ...)
{
	static char words[32][64];
	char *argv[32];
	int argc = 0;
	const char *head[] = { bench_scenario_names[sc], "--broker", "mqtt://127.0.0.1:1" };
	for (size_t i = 0; i < 3; i++, argc++) {
		snprintf(words[argc], sizeof words[argc], "%s", head[i]);
		argv[argc] = words[argc];
	}
	va_list ap;
	va_start(ap, first);
	for (const char *s = first; s && argc < 31; s = va_arg(ap, const char *), argc++) {
		snprintf(words[argc], sizeof words[argc], "%s", s);
		argv[argc] = words[argc];
	}
	va_end(ap);
	struct bench_opts o;
	assert_int_equal(bench_parse(argc, argv, sc, &o), 0);
	return o;
}

static void setup_fleet(struct fleet *r)
{
	memset(&peers, 0, sizeof peers);
	for (int i = 0; i < MAX_PEERS; i++)
		peers.fd[i] = -1;
	r->ep = -1;
	r->dial = socketpair_dial;
	assert_int_equal(fleet_setup(r), 0);
	r->t0 = mqc_now_ns();
}

static void teardown_fleet(struct fleet *r)
{
	fleet_free(r);
	for (int i = 0; i < MAX_PEERS; i++)
		if (peers.fd[i] >= 0)
			close(peers.fd[i]);
}

static void peer_send(uint64_t k, const unsigned char *p, size_t len)
{
	assert_int_equal(send(peers.fd[k], p, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* The first byte of what peer k has been sent, when something came (-1: nothing yet). */
static int peer_read(uint64_t k)
{
	unsigned char buf[512];
	ssize_t n = recv(peers.fd[k], buf, sizeof buf, 0);
	return n > 0 ? buf[0] : -1;
}

/* Turn the engine until done(r) or 5 s; between turns, answer(k) for every peer whose
 * attempt's first packet (CONNECT) has come. */
static void run_until(struct fleet *r, bool (*done)(const struct fleet *), void (*answer)(uint64_t))
{
	uint64_t deadline = mqc_now_ns() + 5 * MQC_NS_PER_S;
	while (!done(r) && mqc_now_ns() < deadline) {
		fleet_turn(r, mqc_now_ns() + 5 * MQC_NS_PER_MS);
		for (uint64_t k = 0; k < MAX_PEERS; k++) {
			if (peers.fd[k] < 0 || peers.connect_seen[k])
				continue;
			int first = peer_read(k);
			if (first < 0)
				continue;
			assert_int_equal(first, 0x10); /* CONNECT */
			peers.connect_seen[k] = true;
			answer(k);
		}
	}
	assert_true(done(r));
}

/* --- the connect scenario's outcomes ------------------------------------------------------ */

enum behaviour { ACCEPT, REFUSE, V311_ANSWER, CLOSE, MALFORMED, SILENT, N_BEHAVIOURS };

static void answer_by_index(uint64_t k)
{
	switch ((enum behaviour)(k % N_BEHAVIOURS)) {
		case ACCEPT: /* CONNACK, success, no properties */
			peer_send(k, BYTES(0x20, 3, 0, 0x00, 0));
			break;
		case REFUSE: /* CONNACK 0x87 not authorized */
			peer_send(k, BYTES(0x20, 3, 0, 0x87, 0));
			break;
		case V311_ANSWER: /* a 3.1.1 CONNACK, return code 1, to a v5 CONNECT */
			peer_send(k, BYTES(0x20, 2, 0, 1));
			break;
		case CLOSE: /* the broker lets TCP in and closes before any CONNACK */
			close(peers.fd[k]);
			peers.fd[k] = -1;
			break;
		case MALFORMED: /* a remaining length of five bytes */
			peer_send(k, BYTES(0x20, 0xff, 0xff, 0xff, 0xff, 0x01));
			break;
		case SILENT:
		case N_BEHAVIOURS:
			break;
	}
}

static bool all_done(const struct fleet *r)
{
	return r->done == r->count;
}

static void connect_outcomes_are_counted_by_reason(void **state)
{
	(void)state;
	/* Twelve clients, two of each behaviour; a silent broker's attempt ends at 300 ms. */
	struct bench_opts o = opts(
	    SC_CONNECT, "--clients", "12", "--connect-timeout", "300ms", "--rate", "10000", NULL);
	static const struct fleet_ops hold = { .connected = fleet_hold, .packet = NULL };
	struct fleet r = { .o = &o, .ops = &hold, .plan = { .rate = o.connrate } };
	setup_fleet(&r);
	for (unsigned i = 0; i < r.nslots; i++) {
		r.a[i].k = r.first + i;
		r.a[i].intended = mqc_now_ns();
		fleet_start(&r, &r.a[i]);
	}
	run_until(&r, all_done, answer_by_index);
	assert_int_equal(r.held, 2);
	assert_int_equal(r.failed, 10);
	assert_int_equal(r.reasons[R_CONNACK], 4);
	assert_int_equal(r.connack_codes[0x87], 2);
	assert_int_equal(r.connack311_codes[1], 2); /* the broker's answer to the protocol, apart */
	assert_int_equal(r.reasons[R_CLOSED], 2);
	assert_int_equal(r.reasons[R_OTHER], 2);
	assert_int_equal(r.reasons[R_TIMEOUT], 2);
	assert_int_equal(r.in_progress, 0);
	assert_int_equal(r.connack.count, 2);
	/* A held connection the broker drops: without --reconnect, a failure of the run. */
	close(peers.fd[0]);
	peers.fd[0] = -1;
	uint64_t until = mqc_now_ns() + 2 * MQC_NS_PER_S;
	while (r.reasons[R_DROPPED] == 0 && mqc_now_ns() < until)
		fleet_turn(&r, mqc_now_ns() + 5 * MQC_NS_PER_MS);
	assert_int_equal(r.reasons[R_DROPPED], 1);
	assert_int_equal(r.held, 1);
	teardown_fleet(&r);
}

/* --- keep-alive at the broker's word ------------------------------------------------------ */

static void accept_with_server_keepalive(uint64_t k)
{
	/* CONNACK, success, Server Keep Alive 2 s */
	peer_send(k, BYTES(0x20, 6, 0, 0x00, 3, 0x13, 0, 2));
}

static void held_connections_ping_at_the_servers_keep_alive(void **state)
{
	(void)state;
	/* --keepalive 0 asks for none; the broker's Server Keep Alive 2 s is the one kept. */
	struct bench_opts o = opts(SC_CONNECT, "--clients", "1", "--keepalive", "0", NULL);
	static const struct fleet_ops hold = { .connected = fleet_hold, .packet = NULL };
	struct fleet r = { .o = &o, .ops = &hold, .plan = { .rate = o.connrate } };
	setup_fleet(&r);
	r.a[0].k = r.first;
	r.a[0].intended = mqc_now_ns();
	fleet_start(&r, &r.a[0]);
	run_until(&r, all_done, accept_with_server_keepalive);
	assert_int_equal(r.held, 1);
	assert_int_equal(r.a[0].keepalive_s, 2);
	uint64_t held_at = mqc_now_ns(), until = held_at + 3 * MQC_NS_PER_S;
	int got = -1;
	while (got < 0 && mqc_now_ns() < until) {
		fleet_turn(&r, mqc_now_ns() + 10 * MQC_NS_PER_MS);
		got = peer_read(0);
	}
	uint64_t after = mqc_now_ns() - held_at;
	assert_int_equal(got, 0xC0); /* PINGREQ */
	/* at three quarters of 2 s: 1.5 s (not before, and well before 2 s) */
	assert_true(after >= 1400 * MQC_NS_PER_MS && after < 1900 * MQC_NS_PER_MS);
	teardown_fleet(&r);
}

/* --- churn's SUBACK ----------------------------------------------------------------------- */

static void answer_subscribe(uint64_t k)
{
	peer_send(k, BYTES(0x20, 3, 0, 0x00, 0)); /* CONNACK */
}

/* SUBACKs by client: the packet id churn uses (1), no properties, then reason codes. Ours, the
 * only filter churn subscribes, is the first: what follows it decides nothing. */
static void suback_for(uint64_t k)
{
	switch (k) {
		case 0: /* granted, then a refusal that is not ours: the cycle completes */
			peer_send(k, BYTES(0x90, 5, 0, 1, 0, 0x00, 0x80));
			break;
		case 1: /* refused (0x87), then a grant that is not ours: a refused subscription */
			peer_send(k, BYTES(0x90, 5, 0, 1, 0, 0x87, 0x00));
			break;
		case 2: /* granted at QoS 1, then a refusal: the cycle completes */
			peer_send(k, BYTES(0x90, 5, 0, 1, 0, 0x01, 0x80));
			break;
		case 3: /* no reason code at all: malformed for the cycle */
			peer_send(k, BYTES(0x90, 3, 0, 1, 0));
			break;
		default:
			break;
	}
}

enum { CHURN_SLOTS = 4 };

static bool subscribed_or_failed(const struct fleet *r)
{
	return r->cycles + r->failed == CHURN_SLOTS;
}

static void churn_reads_its_suback_reason_from_the_packet(void **state)
{
	(void)state;
	struct bench_opts o = opts(SC_CHURN, "--action", "subscribe", "--concurrency", "4", NULL);
	struct fleet r = { .o = &o };
	struct churn c = { 0 };
	assert_int_equal(bench_churn_plan(&o, &r, &c), 0);
	setup_fleet(&r);
	assert_int_equal(r.nslots, CHURN_SLOTS);
	for (unsigned i = 0; i < CHURN_SLOTS; i++) {
		r.a[i].k = i;
		r.a[i].intended = mqc_now_ns();
		fleet_start(&r, &r.a[i]);
	}
	uint64_t deadline = mqc_now_ns() + 5 * MQC_NS_PER_S;
	bool subscribe_seen[CHURN_SLOTS] = { false };
	while (!subscribed_or_failed(&r) && mqc_now_ns() < deadline) {
		fleet_turn(&r, mqc_now_ns() + 5 * MQC_NS_PER_MS);
		for (uint64_t k = 0; k < CHURN_SLOTS; k++) {
			if (peers.fd[k] < 0)
				continue;
			int first = peer_read(k);
			if (first == 0x10 && !peers.connect_seen[k]) {
				peers.connect_seen[k] = true;
				answer_subscribe(k);
			} else if (first == 0x82 && !subscribe_seen[k]) { /* SUBSCRIBE */
				subscribe_seen[k] = true;
				suback_for(k);
			}
		}
	}
	assert_int_equal(r.cycles, 2);
	assert_int_equal(r.reasons[R_SUBACK], 1);
	assert_int_equal(r.reasons[R_OTHER], 1);
	assert_int_equal(r.in_progress, 0);
	/* every slot is free again: churn reuses them */
	for (unsigned i = 0; i < CHURN_SLOTS; i++)
		assert_int_equal(r.a[i].state, ST_WAITING);
	teardown_fleet(&r);
	free(c.topic);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connect_outcomes_are_counted_by_reason),
		cmocka_unit_test(held_connections_ping_at_the_servers_keep_alive),
		cmocka_unit_test(churn_reads_its_suback_reason_from_the_packet),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
