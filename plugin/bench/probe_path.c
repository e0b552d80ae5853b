/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * probe_path - what the probe's own code costs per message, without a broker around it.
 *
 * probe_overhead measures the probe inside a real broker, where the broker's own cost per message
 * (tens of microseconds of system calls on a small VM, a few on a fast machine) and its noise
 * hide a few hundred nanoseconds. This calls the probe's event handlers in a loop with
 * libmosquitto's real property functions (the stamp's allocation, and freeing it as the broker
 * does after the last delivery) and prints nanoseconds per call, the median of 7 runs. The
 * broker-only functions are stubbed; 2.1's in-place property accessors are modelled by a list
 * walk (libmosquitto 2.0 has none). mosquitto 2.0 calls TICK on every pass of its loop, about
 * once per message under load; 2.1 only as often as the probe asks (every 100 ms).
 *
 * Usage: probe_path [--calls N (1000000)]
 */
#define _GNU_SOURCE
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mqtt_protocol.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_props.h"
#include "mqc_strutil.h"
#include "probe.h"

/* --- the broker functions the probe's core imports, as cheap as the broker's --------------- */

void *mosquitto_malloc(size_t size)
{
	return malloc(size);
}
void mosquitto_free(void *mem)
{
	free(mem);
}
const char *mosquitto_client_id(const struct mosquitto *client)
{
	(void)client;
	return "bench";
}
bool mosquitto_client_clean_session(const struct mosquitto *client)
{
	(void)client;
	return true;
}
int mosquitto_client_protocol_version(const struct mosquitto *client)
{
	(void)client;
	return 5;
}
int mosquitto_broker_publish(const char *clientid, const char *topic, int payloadlen, void *payload,
    int qos, bool retain, mosquitto_property *properties)
{
	(void)clientid, (void)topic, (void)payloadlen, (void)qos, (void)retain;
	free(payload);
	mosquitto_property_free_all(&properties);
	return MOSQ_ERR_SUCCESS;
}

/* --- the cases ----------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

enum kind { MESSAGE, MESSAGE_READ, MESSAGE_OUT, ROUTE_OUT, TICK };

struct path_case {
	const char *name;
	enum kind kind;
	struct probe_config cfg;
	bool hold;
	bool backlog; /* 2.1 with observe_auth: the client's backlog tracked (one connected client) */
};

static double run(const struct path_case *c, long calls)
{
	static struct probe_state s; /* large (the offline-session table heads, the metrics) */
	memset(&s, 0, sizeof s);
	s.cfg = c->cfg;
	s.hold = c->hold;
	static char client_storage[64]; /* the broker's struct mosquitto, by its address only */
	struct mosquitto *client = (struct mosquitto *)(void *)client_storage;
	if (c->kind == ROUTE_OUT) { /* 2.1: the client in the set, as its CONNECT puts it there */
		s.events21 = true;
		struct {
			void *future;
			struct mosquitto *client;
			int reason;
		} connect = { NULL, client, 0 };
		probe_events__connect(PROBE_EVT_CONNECT, &connect, &s);
		s.backlog_on = c->backlog;
		s.backlog.limit = 1020;
	}
	char topic[] = "bench/flood", payload[16] = "0123456789abcde";
	char rx[24];
	probe_u64_to_dec(1796300000000000000ULL, rx);
	struct fake_prop stamp = { NULL, MQTT_PROP_USER_PROPERTY, PROBE_STAMP_KEY, rx };
	struct fake_prop first = { &stamp, MQTT_PROP_USER_PROPERTY, "mine", "1" };
	uint64_t t0 = now_ns();
	for (long i = 0; i < calls; i++) {
		struct mosquitto_evt_message ed = { .topic = topic, .payload = payload, .payloadlen = 16 };
		switch (c->kind) {
			case MESSAGE:
			case MESSAGE_READ:
				probe_events__message(MOSQ_EVT_MESSAGE, &ed, &s);
				if (c->kind == MESSAGE_READ) {
					struct mosquitto_evt_acl_check acl
					    = { .payload = payload, .access = MOSQ_ACL_READ, .topic = topic };
					probe_events__acl_check(MOSQ_EVT_ACL_CHECK, &acl, &s);
				}
				mosquitto_property_free_all(&ed.properties); /* the broker, after delivering */
				break;
			case MESSAGE_OUT:
				ed.properties = (mosquitto_property *)&first;
				probe_events__message_out(PROBE_EVT_MESSAGE_OUT, &ed, &s);
				break;
			case ROUTE_OUT: { /* a READ check for the client, then its delivery at once */
				struct mosquitto_evt_acl_check acl = { .client = client,
					.payload = payload,
					.payloadlen = 16,
					.qos = 1,
					.access = MOSQ_ACL_READ,
					.topic = topic };
				probe_events__acl_check(MOSQ_EVT_ACL_CHECK, &acl, &s);
				ed.client = client;
				ed.properties = (mosquitto_property *)&first;
				probe_events__message_out(PROBE_EVT_MESSAGE_OUT, &ed, &s);
				break;
			}
			case TICK: {
				struct mosquitto_evt_tick tick = { 0 };
				probe_events__tick(MOSQ_EVT_TICK, &tick, &s);
				break;
			}
		}
	}
	double ns = (double)(now_ns() - t0) / (double)calls;
	probe_events__clear(&s);
	return ns;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	uint64_t calls_u = 1000000;
	for (int k = 1; k < argc; k++) {
		if (strcmp(argv[k], "--calls") == 0 && k + 1 < argc
		    && mqc_parse_count(argv[k + 1], 1000000000, &calls_u) == 0 && calls_u > 0)
			k++;
		else {
			fprintf(stderr, "usage: probe_path [--calls N (1000000)]\n");
			return 2;
		}
	}
	long calls = (long)calls_u;
	probe_props__set_api(&fake_props_api);
	struct path_case cases[] = {
		{ "MESSAGE, counters only (stamp=false)", MESSAGE, { .stamp_every = 1 }, false, false },
		{ "MESSAGE, counters + stamp (default)", MESSAGE, { .stamp = true, .stamp_every = 1 },
		    false, false },
		{ "MESSAGE, stamp 1 in 100", MESSAGE, { .stamp = true, .stamp_every = 100 }, false, false },
		{ "MESSAGE, stamp_topic not matching", MESSAGE,
		    { .stamp = true, .stamp_every = 1, .stamp_topics = 1 }, false, false },
		{ "MESSAGE + 1 READ check, observe_auth", MESSAGE_READ,
		    { .stamp = true, .stamp_every = 1, .observe_auth = true }, false, false },
		{ "MESSAGE_OUT (2.1), deliveries only", MESSAGE_OUT, { .stamp_every = 1 }, false, false },
		{ "MESSAGE_OUT (2.1), + time in broker", MESSAGE_OUT, { .stamp = true, .stamp_every = 1 },
		    true, false },
		{ "READ + MESSAGE_OUT (2.1, observe_auth)", ROUTE_OUT, { .observe_auth = true }, false,
		    false },
		{ "READ + MESSAGE_OUT, + the client's backlog", ROUTE_OUT, { .observe_auth = true }, false,
		    true },
		{ "TICK (2.0: every loop pass, ~1 per message)", TICK,
		    { .stamp = true, .stamp_every = 1, .sys_interval_s = 10 }, false, false },
	};
	strcpy(cases[3].cfg.stamp_topic[0], "sensors/+/temperature");
	printf(
	    "probe_path: ns per call of the probe's handlers, median of 7 runs of %ld calls\n", calls);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		double v[7];
		for (int r = 0; r < 7; r++)
			v[r] = run(&cases[i], calls);
		qsort(v, 7, sizeof v[0], cmp);
		printf("  %-40s %7.1f ns  (min %.1f, max %.1f)\n", cases[i].name, v[3], v[0], v[6]);
	}
	return 0;
}
