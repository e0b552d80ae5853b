/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * certs.c - a throw-away CA with a server and a client certificate, and a server certificate for
 * another host name (host-name verification tests), made with the openssl command.
 *
 * EC P-256 keys: generating all four takes about 50 ms here, so every test broker gets its own.
 */
#include "tb_internal.h"

#include <stdio.h>
#include <string.h>

#define EC_ARGS "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "7"

int tb__make_certs(const char *dir, char *err, size_t errlen)
{
	char openssl[TB_PATH_MAX];
	if (tb__find_program("openssl", "/usr/bin", openssl, sizeof openssl) != 0) {
		snprintf(err, errlen, "the openssl command was not found: install it (scripts/setup)");
		return -1;
	}
	char ca_key[TB_PATH_MAX + 16], ca_crt[TB_PATH_MAX + 16], log[TB_PATH_MAX + 16];
	char key[TB_PATH_MAX + 16], crt[TB_PATH_MAX + 16];
	snprintf(ca_key, sizeof ca_key, "%s/ca.key", dir);
	snprintf(ca_crt, sizeof ca_crt, "%s/ca.crt", dir);
	snprintf(log, sizeof log, "%s/openssl.log", dir);

	char *ca[] = { openssl, "req", "-x509", EC_ARGS, "-keyout", ca_key, "-out", ca_crt, "-subj",
		"/CN=mqtt-pool test CA", "-addext", "keyUsage=critical,keyCertSign,cRLSign", NULL };
	int rc = tb__run(ca, log, 10000, err, errlen);
	if (rc != 0)
		goto failed;

	static const struct {
		char *name, *subject, *usage, *san;
	} leaves[] = {
		{ "server", "/CN=localhost", "extendedKeyUsage=serverAuth",
		    "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" },
		{ "client", "/CN=" TB_USERNAME, "extendedKeyUsage=clientAuth", NULL },
		/* signed by the same CA for another host: what a client that checks names refuses */
		{ "other-host", "/CN=other-host.invalid", "extendedKeyUsage=serverAuth",
		    "subjectAltName=DNS:other-host.invalid" },
	};
	for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++) {
		snprintf(key, sizeof key, "%s/%s.key", dir, leaves[i].name);
		snprintf(crt, sizeof crt, "%s/%s.crt", dir, leaves[i].name);
		char *argv[] = { openssl, "req", "-x509", "-CA", ca_crt, "-CAkey", ca_key, EC_ARGS,
			"-keyout", key, "-out", crt, "-subj", leaves[i].subject, "-addext",
			"basicConstraints=critical,CA:FALSE", "-addext", leaves[i].usage,
			leaves[i].san ? "-addext" : NULL, leaves[i].san, NULL };
		rc = tb__run(argv, log, 10000, err, errlen);
		if (rc != 0)
			goto failed;
	}
	return 0;

failed:
	if (rc > 0) {
		char why[256] = "no output";
		tb__log_excerpt(log, why, sizeof why);
		snprintf(err, errlen, "openssl failed (status %d) making test certificates: %s", rc, why);
	}
	return -1;
}
