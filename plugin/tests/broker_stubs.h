/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * broker_stubs.h - what the probe's unit tests put in place of the broker's functions.
 */
#ifndef BROKER_STUBS_H
#define BROKER_STUBS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct stub_record {
	bool fail_property_add;
	int pairs, last_identifier;
	char last_name[64], last_value[64];
	uint32_t expiry;
	int publishes;
	bool publish_clientid_null, publish_retain;
	int publish_qos;
	char publish_topic[128];
	char *publish_payload;
	int protocol_version; /* what mosquitto_client_protocol_version answers; 0 means 5 */
};

extern struct stub_record stub;

#endif
