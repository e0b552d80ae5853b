/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * options.c - plugin_opt_* validation: an unknown key or a bad value stops the broker.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

static int parse_bool(const char *v, bool *out)
{
	if (strcmp(v, "true") == 0) {
		*out = true;
		return 0;
	}
	if (strcmp(v, "false") == 0) {
		*out = false;
		return 0;
	}
	return -1;
}

static int parse_uint(const char *v, unsigned long max, unsigned long *out)
{
	if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 9)
		return -1;
	*out = strtoul(v, NULL, 10);
	return *out <= max ? 0 : -1;
}

/* A non-empty filter whose wildcards stand alone in their level, # only last. */
static bool valid_filter(const char *f)
{
	if (!*f)
		return false;
	for (const char *c = f; *c; c++) {
		if (*c != '+' && *c != '#')
			continue;
		bool alone = (c == f || c[-1] == '/') && (c[1] == '\0' || c[1] == '/');
		if (!alone || (*c == '#' && c[1] != '\0'))
			return false;
	}
	return true;
}

static int parse_listen(const char *v, struct probe_config *cfg)
{
	if (strcmp(v, "off") == 0) {
		cfg->http_enabled = false;
		return 0;
	}
	const char *colon = strrchr(v, ':');
	if (!colon)
		return -1;
	const char *host = v;
	size_t host_len = (size_t)(colon - v);
	if (host_len >= 2 && v[0] == '[' && v[host_len - 1] == ']') {
		host++;
		host_len -= 2;
	}
	if (host_len == 0 || host_len >= sizeof cfg->http_host)
		return -1;
	char addr[sizeof cfg->http_host];
	memcpy(addr, host, host_len);
	addr[host_len] = '\0';
	unsigned char bin[16];
	if (inet_pton(AF_INET, addr, bin) != 1 && inet_pton(AF_INET6, addr, bin) != 1)
		return -1;
	unsigned long port;
	if (parse_uint(colon + 1, 65535, &port) != 0 || port == 0)
		return -1;
	memcpy(cfg->http_host, addr, host_len + 1);
	cfg->http_port = (int)port;
	cfg->http_enabled = true;
	return 0;
}

/* Whether a numeric address is a loopback one: 127.0.0.0/8 or ::1. */
static bool loopback(const char *addr)
{
	unsigned char bin[16];
	if (inet_pton(AF_INET, addr, bin) == 1)
		return bin[0] == 127;
	static const unsigned char one[16] = { [15] = 1 };
	return inet_pton(AF_INET6, addr, bin) == 1 && memcmp(bin, one, sizeof one) == 0;
}

bool probe_options__show_client_ids(const struct probe_config *cfg, char *why, size_t len)
{
	if (cfg->client_ids != PROBE_IDS_AUTO) {
		snprintf(why, len, "plugin_opt_expose_client_ids %s",
		    cfg->client_ids == PROBE_IDS_SHOWN ? "true" : "false");
		return cfg->client_ids == PROBE_IDS_SHOWN;
	}
	if (cfg->http_enabled && cfg->web_auth) {
		snprintf(why, len,
		    "the metrics endpoint requires a password or a client certificate (web_config %s)",
		    cfg->web_config);
		return true;
	}
	if (cfg->http_enabled && loopback(cfg->http_host)) {
		snprintf(why, len, "the metrics endpoint listens on loopback (%s) only", cfg->http_host);
		return true;
	}
	if (cfg->http_enabled)
		snprintf(why, len,
		    "the metrics endpoint (%s:%d) can be read from the network without a password; "
		    "plugin_opt_expose_client_ids true shows them",
		    cfg->http_host, cfg->http_port);
	else
		snprintf(why, len,
		    "who reads $SYS/broker/probe/metrics is the broker's ACL's to say, which the probe "
		    "cannot see; plugin_opt_expose_client_ids true shows them");
	return false;
}

int probe_options__parse(
    const struct probe_opt *opts, int count, struct probe_config *cfg, char *err, size_t errlen)
{
	*cfg = (struct probe_config) { .sys_interval_s = 10,
		.stamp = true,
		.stamp_every = 1,
		.slow_top = 10,
		.slow_threshold_ms = 10,
		.slow_window_s = 10,
		.backlog_top = 10,
		.backlog_threshold = 100 };
	parse_listen(PROBE_DEFAULT_HTTP, cfg);
	for (int i = 0; i < count; i++) {
		const char *k = opts[i].key, *v = opts[i].value ? opts[i].value : "";
		const char *expect = NULL;
		if (strcmp(k, "http_listen") == 0) {
			if (parse_listen(v, cfg) != 0)
				expect = "ADDRESS:PORT with a numeric IPv4 or [IPv6] address, or off";
		} else if (strcmp(k, "sys_interval") == 0) {
			unsigned long s;
			if (parse_uint(v, 86400, &s) != 0)
				expect = "whole seconds from 0 (off) to 86400";
			else
				cfg->sys_interval_s = (unsigned)s;
		} else if (strcmp(k, "observe_auth") == 0) {
			if (parse_bool(v, &cfg->observe_auth) != 0)
				expect = "true or false";
		} else if (strcmp(k, "stamp") == 0) {
			if (parse_bool(v, &cfg->stamp) != 0)
				expect = "true or false";
		} else if (strcmp(k, "stamp_every") == 0) {
			unsigned long n;
			if (parse_uint(v, 1000000, &n) != 0 || n == 0)
				expect = "a whole number from 1 (every message) to 1000000";
			else
				cfg->stamp_every = (unsigned)n;
		} else if (strcmp(k, "stamp_topic") == 0) {
			if (cfg->stamp_topics == PROBE_STAMP_TOPICS_MAX)
				expect = "at most 8 stamp_topic lines";
			else if (!valid_filter(v))
				expect = "an MQTT topic filter (+ and # as whole levels, # last)";
			else if (strlen(v) >= sizeof cfg->stamp_topic[0])
				expect = "a filter shorter than 256 bytes";
			else
				memcpy(cfg->stamp_topic[cfg->stamp_topics++], v, strlen(v) + 1);
		} else if (strcmp(k, "tx_stamp") == 0) {
			if (parse_bool(v, &cfg->tx_stamp) != 0)
				expect = "true or false";
		} else if (strcmp(k, "slow_top") == 0) {
			unsigned long n;
			if (parse_uint(v, PROBE_SLOW_TOP_MAX, &n) != 0)
				expect = "a whole number from 0 (off) to 100";
			else
				cfg->slow_top = (unsigned)n;
		} else if (strcmp(k, "slow_threshold_ms") == 0) {
			unsigned long n;
			if (parse_uint(v, 3600000, &n) != 0)
				expect = "whole milliseconds from 0 to 3600000";
			else
				cfg->slow_threshold_ms = (unsigned)n;
		} else if (strcmp(k, "expose_client_ids") == 0) {
			bool shown;
			if (strcmp(v, "auto") == 0)
				cfg->client_ids = PROBE_IDS_AUTO;
			else if (parse_bool(v, &shown) == 0)
				cfg->client_ids = shown ? PROBE_IDS_SHOWN : PROBE_IDS_HASHED;
			else
				expect = "true, false or auto";
		} else if (strcmp(k, "backlog_top") == 0) {
			unsigned long n;
			if (parse_uint(v, PROBE_SLOW_TOP_MAX, &n) != 0)
				expect = "a whole number from 0 (off) to 100";
			else
				cfg->backlog_top = (unsigned)n;
		} else if (strcmp(k, "backlog_threshold") == 0) {
			unsigned long n;
			if (parse_uint(v, 100000000, &n) != 0 || n == 0)
				expect = "a whole number of messages from 1 to 100000000";
			else
				cfg->backlog_threshold = (unsigned)n;
		} else if (strcmp(k, "web_config") == 0) {
			if (!*v || strlen(v) >= sizeof cfg->web_config)
				expect = "the path of a web configuration file (exporter-toolkit format)";
			else
				memcpy(cfg->web_config, v, strlen(v) + 1);
		} else if (strcmp(k, "slow_window") == 0) {
			unsigned long n;
			if (parse_uint(v, 3600, &n) != 0 || n == 0)
				expect = "whole seconds from 1 to 3600";
			else
				cfg->slow_window_s = (unsigned)n;
		} else {
			snprintf(err, errlen,
			    "unknown option plugin_opt_%s (known: http_listen, sys_interval, "
			    "observe_auth, stamp, stamp_every, stamp_topic, tx_stamp, slow_top, "
			    "slow_threshold_ms, slow_window, expose_client_ids, web_config, backlog_top, "
			    "backlog_threshold)",
			    k);
			return -1;
		}
		if (expect) {
			snprintf(err, errlen, "plugin_opt_%s '%s': expected %s", k, v, expect);
			return -1;
		}
	}
	if (cfg->web_config[0] && !cfg->http_enabled) {
		snprintf(err, errlen,
		    "plugin_opt_web_config secures the HTTP endpoint, which "
		    "plugin_opt_http_listen off turns off");
		return -1;
	}
	if (cfg->tx_stamp && !cfg->stamp) {
		snprintf(err, errlen, "plugin_opt_tx_stamp true needs plugin_opt_stamp true");
		return -1;
	}
	return 0;
}
