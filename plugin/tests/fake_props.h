/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fake_props.h - a property list read through probe_props_api the way mosquitto 2.1's in-place
 * accessors read theirs (libmosquitto 2.0, which the tests and benchmarks link, has none).
 */
#ifndef FAKE_PROPS_H
#define FAKE_PROPS_H

#include "probe.h"

struct fake_prop {
	const struct fake_prop *next;
	int id; /* an MQTT_PROP_* */
	const char *name, *value;
};

/** The accessors over struct fake_prop lists; copy_all answers fake_props_copy. */
extern const struct probe_props_api fake_props_api;
extern struct fake_prop fake_props_copy;

#endif
