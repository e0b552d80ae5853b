/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fuzz_props.c - libFuzzer: the probe reading a message's properties on mosquitto 2.1's
 * MESSAGE_OUT path (plugin/src/props.c), where every name and value is the publisher's. The input
 * is a list of properties (an identifier byte, then a name and a value, each a length byte and
 * that many bytes, not NUL-terminated: the broker's strings are counted, not terminated); the
 * probe looks for its stamp's key and may read nothing past a length, and finds the value a
 * plain reading of the rule gives: the last user property with that name whose value is 1 to 20
 * decimal digits.
 */
#include <mqtt_protocol.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

/* A property as the fuzzer lays it out; the name and value point into their own allocations (so
 * ASan sees a read past either). */
struct prop {
	struct prop *next;
	int id;
	char *name, *value;
	uint16_t name_len, value_len;
};

static const struct prop *of(const mosquitto_property *p)
{
	return (const struct prop *)p;
}
static const mosquitto_property *next(const mosquitto_property *p)
{
	return (const mosquitto_property *)of(p)->next;
}
static int identifier(const mosquitto_property *p)
{
	return of(p)->id;
}
static const char *name(const mosquitto_property *p)
{
	return of(p)->name;
}
static uint16_t name_length(const mosquitto_property *p)
{
	return of(p)->name_len;
}
static const char *value(const mosquitto_property *p)
{
	return of(p)->value;
}
static uint16_t value_length(const mosquitto_property *p)
{
	return of(p)->value_len;
}
static int copy_all(mosquitto_property **out, const mosquitto_property *in)
{
	(void)in;
	*out = NULL;
	return 1; /* not used here */
}

static char *take(const uint8_t **p, const uint8_t *end, uint16_t *len)
{
	size_t n = *p < end ? **p : 0;
	*p += *p < end;
	if ((size_t)(end - *p) < n)
		n = (size_t)(end - *p);
	char *s = malloc(n ? n : 1);
	if (s && n)
		memcpy(s, *p, n);
	*p += n;
	*len = (uint16_t)n;
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct probe_props_api api
	    = { next, identifier, name, name_length, value, value_length, copy_all };
	probe_props__set_api(&api);
	static const char key[] = PROBE_STAMP_KEY;
	struct prop *head = NULL, **tail = &head;
	const uint8_t *p = data, *end = data + size;
	bool expect_found = false;
	uint64_t expect = 0;
	while (p < end) {
		struct prop *q = calloc(1, sizeof *q);
		if (!q)
			break;
		/* the low bit picks a user property most of the time */
		q->id = (*p & 1) ? *p >> 1 : MQTT_PROP_USER_PROPERTY;
		p++;
		q->name = take(&p, end, &q->name_len);
		q->value = take(&p, end, &q->value_len);
		*tail = q;
		tail = &q->next;
		if (q->id != MQTT_PROP_USER_PROPERTY || q->name_len != sizeof key - 1
		    || memcmp(q->name, key, sizeof key - 1) != 0)
			continue;
		bool digits = q->value_len >= 1 && q->value_len <= 20;
		uint64_t v = 0;
		for (uint16_t i = 0; digits && i < q->value_len; i++) {
			digits = q->value[i] >= '0' && q->value[i] <= '9';
			v = v * 10 + (uint64_t)(q->value[i] - '0');
		}
		if (digits)
			expect_found = true, expect = v;
	}
	uint64_t got = 0;
	bool found = probe_props__find_u64((const mosquitto_property *)head, key, &got);
	if (found != expect_found || (found && got != expect))
		abort();
	while (head) {
		struct prop *q = head;
		head = q->next;
		free(q->name);
		free(q->value);
		free(q);
	}
	return 0;
}
