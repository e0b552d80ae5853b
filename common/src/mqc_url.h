/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_url.h - broker URLs: mqtt://host:port and mqtts://host:port, also spelled tcp:// and ssl://,
 * and ws://host:port/path and wss://host:port/path for MQTT over WebSockets.
 */
#ifndef MQC_URL_H
#define MQC_URL_H

#include <stdbool.h>
#include <stddef.h>

#define MQC_URL_HOST_MAX 256

#define MQC_URL_PATH_MAX 256

struct mqc_url {
	bool tls;                    /* mqtts://, wss:// */
	bool ws;                     /* ws://, wss://: MQTT over WebSockets (mqc_ws.h) */
	char host[MQC_URL_HOST_MAX]; /* without IPv6 brackets */
	int port;                    /* 1883 / 8883 / 80 / 443 when the URL has none */
	char path[MQC_URL_PATH_MAX]; /* ws, wss: the HTTP path (and query), "/mqtt" when none */
};

/**
 * Parse a broker URL. Accepts `mqtt://HOST[:PORT]` and `mqtts://HOST[:PORT]` (and their other
 * names `tcp://` and `ssl://`), HOST a name, an IPv4 address or a bracketed IPv6 address, and an
 * optional trailing '/'; and `ws://HOST[:PORT][/PATH]`, `wss://HOST[:PORT][/PATH]` (ports 80 and
 * 443, path /mqtt when none; the path may hold a query, never a fragment, a space or a control
 * character). Credentials are rejected: they have their own options everywhere; so are paths
 * and queries on the MQTT schemes.
 *
 * @return 0 on success; -1 with a message naming the problem in err (NUL-terminated, truncated to
 *         errlen) and *out untouched.
 */
int mqc_url_parse(const char *text, struct mqc_url *out, char *err, size_t errlen);

/**
 * Parse a list of brokers: one scheme, then HOST[:PORT] items separated by commas, as libpq's
 * multi-host strings (`mqtt://a:1883,b:1883,[::1]:1884`); one item is a list of one. Every item
 * is checked as mqc_url_parse checks a URL, none may be empty or listed twice, at most max. A
 * WebSocket path follows the last item and is every item's (`ws://a:80,b:80/mqtt`).
 *
 * @return 0 with out[0..*n) filled; -1 with a message in err naming the problem.
 */
int mqc_url_list_parse(
    const char *text, struct mqc_url *out, size_t max, size_t *n, char *err, size_t errlen);

/** Format as `scheme://host:port` (IPv6 hosts bracketed; ws and wss with the path). Returns
 * snprintf's result. */
int mqc_url_format(const struct mqc_url *url, char *buf, size_t len);

#endif
