/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fake_props.c - see fake_props.h.
 */
#include "fake_props.h"

#include <mosquitto.h>
#include <string.h>

struct fake_prop fake_props_copy;

static const struct fake_prop *fp(const mosquitto_property *p)
{
	return (const struct fake_prop *)p;
}

static const mosquitto_property *fp_next(const mosquitto_property *p)
{
	return (const mosquitto_property *)fp(p)->next;
}

static int fp_id(const mosquitto_property *p)
{
	return fp(p)->id;
}

static const char *fp_name(const mosquitto_property *p)
{
	return fp(p)->name;
}

static uint16_t fp_name_len(const mosquitto_property *p)
{
	return (uint16_t)strlen(fp(p)->name);
}

static const char *fp_value(const mosquitto_property *p)
{
	return fp(p)->value;
}

static uint16_t fp_value_len(const mosquitto_property *p)
{
	return (uint16_t)strlen(fp(p)->value);
}

static int fp_copy(mosquitto_property **out, const mosquitto_property *in)
{
	(void)in;
	*out = (mosquitto_property *)&fake_props_copy;
	return MOSQ_ERR_SUCCESS;
}

const struct probe_props_api fake_props_api
    = { fp_next, fp_id, fp_name, fp_name_len, fp_value, fp_value_len, fp_copy };
