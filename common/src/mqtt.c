/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
#include "mqc_mqtt.h"

#include <string.h>

size_t mqc_mqtt_put_str(unsigned char *out, size_t cap, const char *s)
{
	size_t len = strlen(s);
	if (len > MQC_MQTT_STR_MAX || cap < len + 2)
		return 0;
	out[0] = (unsigned char)(len >> 8);
	out[1] = (unsigned char)len;
	/* An MQTT string is length-prefixed, never NUL-terminated: */
	/* NOLINTNEXTLINE(bugprone-not-null-terminated-result) */
	memcpy(out + 2, s, len);
	return len + 2;
}

size_t mqc_mqtt_put_varint(unsigned char *out, size_t cap, size_t value)
{
	if (value > MQC_MQTT_VARINT_MAX)
		return 0;
	size_t n = 0;
	do {
		if (n == cap)
			return 0;
		unsigned char byte = value % 128;
		value /= 128;
		out[n++] = (unsigned char)(byte | (value ? 0x80 : 0));
	} while (value);
	return n;
}

size_t mqc_mqtt_packet(
    unsigned char *out, size_t cap, unsigned char type, const unsigned char *body, size_t len)
{
	unsigned char header[5];
	header[0] = type;
	size_t n = mqc_mqtt_put_varint(header + 1, sizeof header - 1, len);
	if (!n || cap < 1 + n + len)
		return 0;
	memmove(out + 1 + n, body, len); /* first: the body may lie where the header goes */
	memcpy(out, header, 1 + n);
	return 1 + n + len;
}

size_t mqc_mqtt_connect_size(const char *client_id, const char *username, const char *password)
{
	/* header 5, "MQTT" 6, level, flags, keepalive 2, properties 1, and the strings */
	return 16 + 2 + strlen(client_id) + (username ? 2 + strlen(username) : 0)
	    + (password ? 2 + strlen(password) : 0);
}

size_t mqc_mqtt_connect(unsigned char *out, size_t cap, int protocol, const char *client_id,
    const char *username, const char *password, unsigned keepalive)
{
	/* The body goes after the largest fixed header (5 bytes), then moves into place. */
	if (cap < 5 + 10)
		return 0;
	unsigned char *body = out + 5;
	size_t room = cap - 5, n = mqc_mqtt_put_str(body, room, "MQTT"), w;
	body[n++] = (unsigned char)protocol;
	body[n++] = (unsigned char)(0x02 | (username ? 0x80 : 0) | (password ? 0x40 : 0));
	body[n++] = (unsigned char)(keepalive >> 8);
	body[n++] = (unsigned char)keepalive;
	if (protocol == 5)
		body[n++] = 0; /* no properties */
	if (!(w = mqc_mqtt_put_str(body + n, room - n, client_id)))
		return 0;
	n += w;
	if (username) {
		if (!(w = mqc_mqtt_put_str(body + n, room - n, username)))
			return 0;
		n += w;
	}
	if (password) {
		if (!(w = mqc_mqtt_put_str(body + n, room - n, password)))
			return 0;
		n += w;
	}
	return mqc_mqtt_packet(out, cap, 0x10, body, n);
}
