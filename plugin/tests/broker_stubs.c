/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * broker_stubs.c - the few broker functions the probe's core calls, recorded for unit tests.
 */
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <stdlib.h>
#include <string.h>

#include "broker_stubs.h"

struct stub_record stub;

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
	return client ? (const char *)client : NULL; /* tests pass the id string as the client */
}

bool mosquitto_client_clean_session(const struct mosquitto *client)
{
	(void)client;
	return true;
}

int mosquitto_property_add_string_pair(
    mosquitto_property **proplist, int identifier, const char *name, const char *value)
{
	(void)proplist;
	if (stub.fail_property_add)
		return MOSQ_ERR_NOMEM;
	stub.pairs++;
	stub.last_identifier = identifier;
	snprintf(stub.last_name, sizeof stub.last_name, "%s", name);
	snprintf(stub.last_value, sizeof stub.last_value, "%s", value);
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_property_add_int32(mosquitto_property **proplist, int identifier, uint32_t value)
{
	(void)identifier;
	stub.expiry = value;
	*proplist = (mosquitto_property *)&stub; /* any non-NULL marker */
	return MOSQ_ERR_SUCCESS;
}

void mosquitto_property_free_all(mosquitto_property **proplist)
{
	*proplist = NULL;
}

int mosquitto_broker_publish(const char *clientid, const char *topic, int payloadlen, void *payload,
    int qos, bool retain, mosquitto_property *properties)
{
	(void)properties;
	stub.publishes++;
	stub.publish_clientid_null = clientid == NULL;
	snprintf(stub.publish_topic, sizeof stub.publish_topic, "%s", topic);
	free(stub.publish_payload);
	stub.publish_payload = calloc(1, (size_t)payloadlen + 1);
	memcpy(stub.publish_payload, payload, (size_t)payloadlen);
	free(payload); /* the broker owns it on success */
	stub.publish_qos = qos;
	stub.publish_retain = retain;
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_client_protocol_version(const struct mosquitto *client)
{
	(void)client;
	return stub.protocol_version ? stub.protocol_version : 5;
}

/* Enough of MQTT topic matching for the tests: + is one level, a trailing # the rest. */
int mosquitto_topic_matches_sub(const char *sub, const char *topic, bool *result)
{
	*result = false;
	while (*sub) {
		if (sub[0] == '#') {
			*result = true;
			return MOSQ_ERR_SUCCESS;
		}
		if (sub[0] == '+') {
			while (*topic && *topic != '/')
				topic++;
			sub++;
		} else {
			if (*sub != *topic)
				return MOSQ_ERR_SUCCESS;
			sub++;
			topic++;
		}
		if (*sub == '/' && sub[1] == '#' && *topic == '\0') {
			*result = true; /* "a/#" matches "a" */
			return MOSQ_ERR_SUCCESS;
		}
	}
	*result = *topic == '\0';
	return MOSQ_ERR_SUCCESS;
}
