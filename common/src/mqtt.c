#include "mqc_mqtt.h"

#include <string.h>

size_t mqc_mqtt_put_str(unsigned char *out, const char *s)
{
	size_t len = strlen(s);
	out[0] = (unsigned char)(len >> 8);
	out[1] = (unsigned char)len;
	memcpy(out + 2, s, len);
	return len + 2;
}

size_t mqc_mqtt_put_varint(unsigned char *out, size_t value)
{
	size_t n = 0;
	do {
		unsigned char byte = value % 128;
		value /= 128;
		out[n++] = (unsigned char)(byte | (value ? 0x80 : 0));
	} while (value);
	return n;
}

size_t mqc_mqtt_packet(
    unsigned char *out, unsigned char type, const unsigned char *body, size_t len)
{
	out[0] = type;
	size_t n = 1 + mqc_mqtt_put_varint(out + 1, len);
	memmove(out + n, body, len);
	return n + len;
}

size_t mqc_mqtt_connect(unsigned char *out, int protocol, const char *client_id,
    const char *username, const char *password, unsigned keepalive)
{
	/* The body goes after the largest fixed header (5 bytes), then moves into place. */
	unsigned char *body = out + 5;
	size_t n = mqc_mqtt_put_str(body, "MQTT");
	body[n++] = (unsigned char)protocol;
	body[n++] = (unsigned char)(0x02 | (username ? 0x80 : 0) | (password ? 0x40 : 0));
	body[n++] = (unsigned char)(keepalive >> 8);
	body[n++] = (unsigned char)keepalive;
	if (protocol == 5)
		body[n++] = 0; /* no properties */
	n += mqc_mqtt_put_str(body + n, client_id);
	if (username)
		n += mqc_mqtt_put_str(body + n, username);
	if (password)
		n += mqc_mqtt_put_str(body + n, password);
	return mqc_mqtt_packet(out, 0x10, body, n);
}
