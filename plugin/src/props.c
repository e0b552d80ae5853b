/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * props.c - reading and extending a message's properties on mosquitto 2.1's MESSAGE_OUT path.
 *
 * 2.1 has accessors that read a property in place (mosquitto_property_string_name and friends);
 * 2.0 has none of them, and upstream 2.0 builds do not even export mosquitto_property_next. A
 * plugin that named them would not load on 2.0, so they are looked up when the probe loads and
 * used only on 2.1's MESSAGE_OUT, which 2.0 never calls.
 */
#include <dlfcn.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <string.h>

#include "probe.h"

static struct probe_props_api api;
static bool have_api;

bool probe_props__init(void)
{
	struct probe_props_api a = {
		.next = (const mosquitto_property *(*)(const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_next"),
		.identifier
		= (int (*)(const mosquitto_property *))dlsym(RTLD_DEFAULT, "mosquitto_property_identifier"),
		.string_name = (const char *(*)(const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_string_name"),
		.string_name_length = (uint16_t(*)(const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_string_name_length"),
		.string_value = (const char *(*)(const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_string_value"),
		.string_value_length = (uint16_t(*)(const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_string_value_length"),
		.copy_all = (int (*)(mosquitto_property **, const mosquitto_property *))dlsym(
		    RTLD_DEFAULT, "mosquitto_property_copy_all"),
	};
	probe_props__set_api(&a);
	return have_api;
}

void probe_props__set_api(const struct probe_props_api *a)
{
	api = *a;
	have_api = api.next && api.identifier && api.string_name && api.string_name_length
	    && api.string_value && api.string_value_length && api.copy_all;
}

bool probe_props__find_u64(const mosquitto_property *props, const char *key, uint64_t *out)
{
	if (!have_api)
		return false;
	size_t key_len = strlen(key);
	bool found = false;
	for (const mosquitto_property *p = props; p; p = api.next(p)) {
		if (api.identifier(p) != MQTT_PROP_USER_PROPERTY || api.string_name_length(p) != key_len
		    || memcmp(api.string_name(p), key, key_len) != 0)
			continue;
		const char *v = api.string_value(p);
		uint16_t n = api.string_value_length(p);
		uint64_t value = 0;
		uint16_t i = 0;
		while (i < n && i < 20 && v[i] >= '0' && v[i] <= '9')
			value = value * 10 + (uint64_t)(v[i++] - '0');
		if (i == n && n > 0) { /* only a whole decimal number; the last one wins */
			*out = value;
			found = true;
		}
	}
	return found;
}

int probe_props__copy_add(
    mosquitto_property **out, const mosquitto_property *props, const char *key, const char *value)
{
	*out = NULL;
	int rc = have_api ? api.copy_all(out, props) : MOSQ_ERR_NOT_SUPPORTED;
	if (rc == MOSQ_ERR_SUCCESS)
		rc = mosquitto_property_add_string_pair(out, MQTT_PROP_USER_PROPERTY, key, value);
	if (rc != MOSQ_ERR_SUCCESS)
		mosquitto_property_free_all(out);
	return rc;
}
