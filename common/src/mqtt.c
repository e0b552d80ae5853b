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

const char *mqc_mqtt_connack_text(unsigned code, bool v311)
{
	if (v311) {
		switch (code) {
			case 0:
				return "accepted";
			case 1:
				return "unacceptable protocol version";
			case 2:
				return "client identifier rejected";
			case 3:
				return "server unavailable";
			case 4:
				return "bad user name or password";
			case 5:
				return "not authorized";
			default:
				return "a return code 3.1.1 does not define";
		}
	}
	if (code > 0 && code < 0x80)
		return "a reason code that is not one of CONNACK's";
	return code == 0 ? "accepted" : mqc_mqtt_reason_text(code);
}

const char *mqc_mqtt_reason_text(unsigned code)
{
	switch (code) {
		case 0x00:
			return "success";
		case 0x01:
			return "granted QoS 1";
		case 0x02:
			return "granted QoS 2";
		case 0x04:
			return "disconnect with Will message";
		case 0x10:
			return "no matching subscribers";
		case 0x11:
			return "no subscription existed";
		case 0x80:
			return "unspecified error";
		case 0x81:
			return "malformed packet";
		case 0x82:
			return "protocol error";
		case 0x83:
			return "implementation specific error";
		case 0x84:
			return "unsupported protocol version";
		case 0x85:
			return "client identifier not valid";
		case 0x86:
			return "bad user name or password";
		case 0x87:
			return "not authorized";
		case 0x88:
			return "server unavailable";
		case 0x89:
			return "server busy";
		case 0x8A:
			return "banned";
		case 0x8B:
			return "server shutting down";
		case 0x8C:
			return "bad authentication method";
		case 0x8D:
			return "keep alive timeout";
		case 0x8E:
			return "session taken over";
		case 0x8F:
			return "topic filter invalid";
		case 0x90:
			return "topic name invalid";
		case 0x91:
			return "packet identifier in use";
		case 0x92:
			return "packet identifier not found";
		case 0x93:
			return "receive maximum exceeded";
		case 0x94:
			return "topic alias invalid";
		case 0x95:
			return "packet too large";
		case 0x96:
			return "message rate too high";
		case 0x97:
			return "quota exceeded";
		case 0x98:
			return "administrative action";
		case 0x99:
			return "payload format invalid";
		case 0x9A:
			return "retain not supported";
		case 0x9B:
			return "QoS not supported";
		case 0x9C:
			return "use another server";
		case 0x9D:
			return "server moved";
		case 0x9E:
			return "shared subscriptions not supported";
		case 0x9F:
			return "connection rate exceeded";
		case 0xA0:
			return "maximum connect time";
		case 0xA1:
			return "subscription identifiers not supported";
		case 0xA2:
			return "wildcard subscriptions not supported";
		default:
			return "a reason code MQTT 5 does not define";
	}
}
