/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_identity.c - who client k of a fleet is: its client id, user name, password and
 * certificate from their templates (%i), and its CONNECT.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_codec.h"

const char *fleet_identity(const char *tpl, uint64_t k, char *buf, size_t cap)
{
	if (!tpl)
		return NULL;
	return bench_identity(tpl, k, buf, cap, NULL, 0) >= 0 ? buf : NULL;
}

/* Client k's CONNECT into out: clean start, --keepalive (default 0: held connections stay quiet
 * unless the broker sets a Server Keep Alive), MQTT 5: packets up to RX_CAP, the client id and
 * credentials from their templates. -1 when it cannot be made (checked before the run). */
int fleet_build_connect(const struct bench_opts *o, uint64_t k, struct mqc_buf *out)
{
	char id[256], user[MQC_STR_MAX + 1], pass[MQC_STR_MAX + 1];
	if (o->client_id_tpl) {
		if (!fleet_identity(o->client_id_tpl, k, id, sizeof id))
			return -1;
	} else {
		snprintf(id, sizeof id, "%s-%s-%llu", o->prefix, o->token, (unsigned long long)k);
	}
	const char *u = o->net.conn.username;
	const char *p = o->net.conn.password;
	if (u && !(u = fleet_identity(u, k, user, sizeof user)))
		return -1;
	if (p && !(p = fleet_identity(p, k, pass, sizeof pass)))
		return -1;
	struct mqc_connect c = { .protocol = o->net.conn.protocol,
		.client_id = id,
		.username = u,
		.password = p,
		.keepalive_s = o->keepalive_s,
		.max_packet = RX_CAP };
	out->off = out->len = 0;
	return mqc_enc_connect(out, &c) == MQC_ENC_OK ? 0 : -1;
}

/* Every template's '%' sequences, and whether the longest identity fits. */
int bench_connect_check(const struct bench_opts *o, char *err, size_t errlen)
{
	const struct {
		const char *name, *tpl;
		size_t max;
	} t[] = {
		{ "--username", o->net.conn.username, MQC_STR_MAX },
		{ "--password", o->net.conn.password, MQC_STR_MAX },
		{ "--client-id", o->client_id_tpl, 255 },
		{ "--cert", o->net.conn.cert, 4095 },
		{ "--key", o->net.conn.key, 4095 },
	};
	uint64_t last = o->clients ? o->clients - 1 : 0;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (!t[i].tpl)
			continue;
		char *buf = malloc(t[i].max + 1), why[300];
		int n = buf ? bench_identity(t[i].tpl, last, buf, t[i].max + 1, why, sizeof why) : -2;
		free(buf);
		if (n == -1) {
			snprintf(err, errlen, "%s %s (%%%% for a literal %%)", t[i].name, why);
			return -1;
		}
		if (n < 0) {
			snprintf(err, errlen, "%s: longer than MQTT allows (%zu bytes) for client %llu",
			    t[i].name, t[i].max, (unsigned long long)last);
			return -1;
		}
	}
	if (!o->client_id_tpl && strlen(o->prefix) > 64) {
		snprintf(err, errlen, "--prefix: longer than MQTT allows (64 bytes)");
		return -1;
	}
	return 0;
}

uint64_t fleet_identity_slot(const struct fleet *r, uint64_t k)
{
	return (k - r->first) % r->count;
}
