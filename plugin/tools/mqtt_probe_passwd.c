/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqtt-probe-passwd - a bcrypt hash for plugin_opt_web_config's basic_auth_users.
 *
 *   mqtt-probe-passwd [--cost N] < password-file     # prints $2b$N$... on stdout
 *
 * The password is read from standard input (its first line; never from the command line, where
 * other users' ps would see it). libxcrypt makes the salt and the hash, the same library the
 * probe checks it with.
 */
#define _GNU_SOURCE
#include <crypt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *to, int rc)
{
	fprintf(to,
	    "usage: mqtt-probe-passwd [--cost N] < PASSWORD\n"
	    "  Prints a bcrypt hash ($2b$) of the first line of standard input, for a\n"
	    "  basic_auth_users entry of the probe's web_config (user: HASH).\n"
	    "  --cost N   bcrypt's cost, 4 to 31 (default 10: about 90 ms a check on a 2020s CPU;\n"
	    "             the probe caches a success, so a scrape pays it once)\n");
	return rc;
}

int main(int argc, char **argv)
{
	unsigned long cost = 10;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return usage(stdout, 0);
		if (strcmp(argv[i], "--cost") == 0 && i + 1 < argc) {
			char *end;
			cost = strtoul(argv[++i], &end, 10);
			if (*end || cost < 4 || cost > 31) {
				fprintf(stderr, "mqtt-probe-passwd: --cost '%s': expected 4 to 31\n", argv[i]);
				return 2;
			}
		} else {
			fprintf(stderr, "mqtt-probe-passwd: unknown argument '%s'\n", argv[i]);
			return usage(stderr, 2);
		}
	}
	char password[1024];
	if (!fgets(password, sizeof password, stdin)) {
		fprintf(stderr, "mqtt-probe-passwd: no password on standard input\n");
		return 1;
	}
	size_t len = strcspn(password, "\r\n");
	if (len == sizeof password - 1) {
		fprintf(stderr, "mqtt-probe-passwd: the password is longer than %zu bytes\n", len);
		return 1;
	}
	password[len] = '\0';
	if (len == 0) {
		fprintf(stderr, "mqtt-probe-passwd: the password is empty\n");
		return 1;
	}
	if (len > 72)
		fprintf(stderr, "mqtt-probe-passwd: warning: bcrypt uses only the first 72 bytes\n");
	char salt[CRYPT_GENSALT_OUTPUT_SIZE];
	struct crypt_data *cd = calloc(1, sizeof *cd);
	const char *hash = NULL;
	if (cd && crypt_gensalt_rn("$2b$", cost, NULL, 0, salt, sizeof salt))
		hash = crypt_rn(password, salt, cd, (int)sizeof *cd);
	explicit_bzero(password, sizeof password);
	if (!hash || hash[0] == '*') {
		fprintf(stderr, "mqtt-probe-passwd: libxcrypt made no bcrypt hash\n");
		free(cd);
		return 1;
	}
	printf("%s\n", hash);
	free(cd);
	return 0;
}
