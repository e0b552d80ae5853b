/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conformance_client.c - the pool's calls against any broker (scripts/conformance runs it against
 * the Paho test broker and FlashMQ): requests at QoS 0, 1 and 2 (MQTT 5, through a device that
 * answers devices/+/commands/#) or legacy requests (3.1.1, the device answering on
 * replies/{topic}, every tool's default), a lease that subscribes, publishes to itself and
 * receives, and a retained read. Prints "ok: ..." per check, "FAIL: ..." with the pool's own words,
 * exits 1 on any failure.
 *
 * Usage: pool_conformance URL 5|4 [--no-retained WHY]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mqttpool.h"

static int failures;

static void check(mqp_pool *p, mqp_err rc, const char *what)
{
	if (rc == MQP_OK) {
		printf("ok: %s\n", what);
		return;
	}
	char why[1024];
	mqp_pool_last_error(p, why, sizeof why);
	printf("FAIL: %s: %s (%s)\n", what, mqp_strerror(rc), why);
	failures++;
}

static int is_payload(void *userdata, const struct mqp_message *m)
{
	const char *want = userdata;
	return m->len == strlen(want) && memcmp(m->payload, want, m->len) == 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "5") != 0 && strcmp(argv[2], "4") != 0)) {
		fprintf(stderr, "usage: pool_conformance URL 5|4 [--no-retained WHY]\n");
		return 2;
	}
	const char *no_retained = argc > 4 && strcmp(argv[3], "--no-retained") == 0 ? argv[4] : NULL;
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.protocol = atoi(argv[2]);
	o.min_size = 2;
	o.max_size = 4;
	mqp_pool *p = NULL;
	char err[512];
	mqp_err rc = mqp_pool_new(argv[1], &o, &p, err, sizeof err);
	if (rc != MQP_OK) {
		printf("FAIL: mqp_pool_new(%s): %s: %s\n", argv[1], mqp_strerror(rc), err);
		return 1;
	}
	char tag[32];
	snprintf(tag, sizeof tag, "conf%d", (int)getpid());
	for (int qos = 0; qos <= 2; qos++) {
		char topic[96], what[160], payload[64];
		snprintf(topic, sizeof topic, "devices/%s-q%d/commands/ping", tag, qos);
		int ok = 0;
		rc = MQP_OK;
		for (int k = 0; k < 10 && rc == MQP_OK; k++) {
			int n = snprintf(payload, sizeof payload, "%s-%d-%d", tag, qos, k);
			struct mqp_reply reply;
			if (o.protocol == 5) {
				rc = mqp_pool_request(p, topic, payload, (size_t)n, qos, 5000, &reply);
			} else {
				char reply_topic[128];
				snprintf(reply_topic, sizeof reply_topic, "replies/%s", topic);
				rc = mqp_pool_request_legacy(p, topic, payload, (size_t)n, qos, reply_topic,
				    is_payload, payload, 5000, &reply);
			}
			if (rc == MQP_OK) {
				ok += reply.len == (size_t)n && memcmp(reply.payload, payload, (size_t)n) == 0;
				mqp_reply_free(&reply);
			}
		}
		snprintf(what, sizeof what, "%s requests at QoS %d: %d of 10 answered with their own reply",
		    o.protocol == 5 ? "MQTT 5" : "legacy (3.1.1)", qos, ok);
		check(p, rc == MQP_OK && ok != 10 ? MQP_EINVAL : rc, what);
	}

	/* A lease: subscribe, publish to itself, receive it, give it back. */
	mqp_lease lease;
	rc = mqp_pool_acquire(p, 5000, &lease);
	check(p, rc, "a lease");
	if (rc == MQP_OK) {
		char filter[64], topic[64];
		snprintf(filter, sizeof filter, "%s/lease/#", tag);
		snprintf(topic, sizeof topic, "%s/lease/x", tag);
		rc = mqp_lease_subscribe(&lease, filter, 1, 0, 5000);
		check(p, rc, "a lease's SUBSCRIBE");
		if (rc == MQP_OK)
			check(p, mqp_lease_publish(&lease, topic, "to-self", 7, 1, 0, 5000),
			    "a lease's PUBLISH at QoS 1");
		struct mqp_message m;
		rc = rc == MQP_OK ? mqp_lease_receive(&lease, 5000, &m) : rc;
		check(p, rc == MQP_OK && strcmp(m.payload, "to-self") != 0 ? MQP_EINVAL : rc,
		    "the lease receives what it published");
		if (rc == MQP_OK)
			mqp_message_free(&m);
		check(p, mqp_lease_release(&lease), "the lease given back");
	}

	/* A retained read: the device's last state. */
	char state[64];
	snprintf(state, sizeof state, "%s/state", tag);
	check(p, mqp_pool_publish(p, state, "on", 2, 1, 1, 5000), "a retained PUBLISH");
	if (no_retained) {
		printf("skipped: the retained read (%s)\n", no_retained);
	} else {
		struct mqp_message m;
		rc = mqp_pool_receive(p, state, 1, MQP_SUB_RETAINED, 5000, &m);
		check(p, rc == MQP_OK && (strcmp(m.payload, "on") != 0 || !m.retain) ? MQP_EINVAL : rc,
		    "a retained read (mqp_pool_receive with MQP_SUB_RETAINED)");
		if (rc == MQP_OK)
			mqp_message_free(&m);
	}
	check(p, mqp_pool_publish(p, state, "", 0, 1, 1, 5000), "the retained message cleared");
	mqp_pool_destroy(p);
	return failures ? 1 : 0;
}
