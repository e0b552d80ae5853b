/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * url.c - broker URLs (mqc_url.h): parsed, checked and formatted back.
 */
#include "mqc_url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *text, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "bad broker URL '%s': %s", text, why);
	return -1;
}

int mqc_url_parse(const char *text, struct mqc_url *out, char *err, size_t errlen)
{
	struct mqc_url url = { 0 };
	const char *p;

	if (!text || !*text)
		return fail(err, errlen, "", "empty (expected mqtt://host:port or mqtts://host:port)");
	/* The names other MQTT tools use too: tcp:// is mqtt://, ssl:// is mqtts://. */
	static const struct {
		const char *prefix;
		bool tls, ws;
		int port;
	} schemes[] = {
		{ "mqtt://", false, false, 1883 },
		{ "mqtts://", true, false, 8883 },
		{ "tcp://", false, false, 1883 },
		{ "ssl://", true, false, 8883 },
		{ "ws://", false, true, 80 },
		{ "wss://", true, true, 443 },
	};
	p = NULL;
	for (size_t i = 0; i < sizeof schemes / sizeof schemes[0] && !p; i++)
		if (strncmp(text, schemes[i].prefix, strlen(schemes[i].prefix)) == 0) {
			p = text + strlen(schemes[i].prefix);
			url.tls = schemes[i].tls;
			url.ws = schemes[i].ws;
			url.port = schemes[i].port;
		}
	if (!p)
		return fail(
		    err, errlen, text, "scheme must be mqtt://, mqtts://, tcp://, ssl://, ws:// or wss://");

	size_t authority = strcspn(p, "/?#");
	if (url.ws) {
		const char *path = p + authority;
		if (*path == '?' || *path == '#')
			return fail(err, errlen, text, "the path must begin with '/'");
		if (!*path)
			path = "/mqtt";
		if (strlen(path) >= sizeof url.path)
			return fail(err, errlen, text, "the path is too long");
		for (const char *c = path; *c; c++)
			if (*c <= ' ' || *c >= 0x7f || *c == '#')
				return fail(err, errlen, text,
				    "the path holds a space, a control character or a fragment ('#')");
		snprintf(url.path, sizeof url.path, "%s", path);
	} else if (p[authority] == '?' || p[authority] == '#'
	    || (p[authority] == '/' && p[authority + 1])) {
		return fail(
		    err, errlen, text, "paths and queries are not allowed (except on ws:// and wss://)");
	}
	if (memchr(p, ',', authority))
		return fail(
		    err, errlen, text, "a list of brokers (host1,host2) is not taken here: give one");
	if (memchr(p, '@', authority))
		return fail(err, errlen, text,
		    "credentials in the URL are not supported (use --username/--password)");

	const char *host = p, *host_end, *port = NULL;
	if (*p == '[') {
		const char *close = memchr(p, ']', authority);
		if (!close)
			return fail(err, errlen, text, "unterminated '[' in IPv6 address");
		host = p + 1;
		host_end = close;
		if (close + 1 < p + authority) {
			if (close[1] != ':')
				return fail(err, errlen, text, "expected ':' after ']'");
			port = close + 2;
		}
	} else {
		const char *colon = memchr(p, ':', authority);
		host_end = colon ? colon : p + authority;
		if (colon)
			port = colon + 1;
	}
	size_t host_len = (size_t)(host_end - host);
	if (host_len == 0)
		return fail(err, errlen, text, "missing host");
	if (host_len >= sizeof url.host)
		return fail(err, errlen, text, "host name too long");
	memcpy(url.host, host, host_len);
	url.host[host_len] = '\0';
	/* A name (letters, digits, - . _) or, in brackets, an IPv6 address (hex digits, : and .). */
	const char *allowed = *p == '['
	    ? "0123456789abcdefABCDEF:."
	    : "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._";
	if (strspn(url.host, allowed) != host_len || (*p == '[' && !strchr(url.host, ':')))
		return fail(err, errlen, text,
		    *p == '[' ? "not an IPv6 address inside [ ]"
		              : "the host holds a character no host name has");

	if (port) {
		const char *port_end = p + authority;
		if (port == port_end)
			return fail(err, errlen, text, "empty port");
		long value = 0;
		for (const char *c = port; c < port_end; c++) {
			if (*c < '0' || *c > '9')
				return fail(err, errlen, text, "port is not a number");
			value = value * 10 + (*c - '0');
			if (value > 65535)
				return fail(err, errlen, text, "port out of range 1-65535");
		}
		if (value == 0)
			return fail(err, errlen, text, "port out of range 1-65535");
		url.port = (int)value;
	}
	*out = url;
	return 0;
}

int mqc_url_format(const struct mqc_url *url, char *buf, size_t len)
{
	const char *scheme = url->ws ? (url->tls ? "wss" : "ws") : url->tls ? "mqtts" : "mqtt";
	const char *path = url->ws ? url->path : "";
	if (strchr(url->host, ':'))
		return snprintf(buf, len, "%s://[%s]:%d%s", scheme, url->host, url->port, path);
	return snprintf(buf, len, "%s://%s:%d%s", scheme, url->host, url->port, path);
}

int mqc_url_list_parse(
    const char *text, struct mqc_url *out, size_t max, size_t *n, char *err, size_t errlen)
{
	const char *rest = text ? strstr(text, "://") : NULL;
	if (!rest) /* no scheme: mqc_url_parse says what is wrong */
		return mqc_url_parse(text, out, err, errlen) == 0 ? (*n = 1, 0) : -1;
	rest += 3;
	/* A WebSocket path after the last item is every item's: the items end where it begins. */
	bool ws = strncmp(text, "ws", 2) == 0;
	const char *tail = ws ? rest + strcspn(rest, "/?#") : rest + strlen(rest);
	size_t scheme_len = (size_t)(rest - text), count = 0;
	for (const char *item = rest;; item++) {
		size_t len = strcspn(item, ",");
		if (item + len > tail)
			len = (size_t)(tail - item);
		char one[MQC_URL_HOST_MAX + MQC_URL_PATH_MAX + 32];
		if (len == 0 || (len == 1 && *item == '/'))
			return fail(err, errlen, text, "an empty broker in the list");
		if (scheme_len + len + strlen(tail) >= sizeof one)
			return fail(err, errlen, text, "a broker in the list is too long");
		if (count == max) {
			char why[64];
			snprintf(why, sizeof why, "more than %zu brokers", max);
			return fail(err, errlen, text, why);
		}
		snprintf(
		    one, sizeof one, "%.*s%.*s%s", (int)scheme_len, text, (int)len, item, ws ? tail : "");
		if (mqc_url_parse(one, &out[count], err, errlen) != 0)
			return -1;
		for (size_t i = 0; i < count; i++)
			if (out[i].port == out[count].port && strcmp(out[i].host, out[count].host) == 0)
				return fail(err, errlen, text, "a broker is listed twice");
		count++;
		item += len;
		if (!*item || item == tail)
			break;
	}
	*n = count;
	return 0;
}
