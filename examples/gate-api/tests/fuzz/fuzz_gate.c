/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: the gateway's handling of what a client sends — the route with its ids (raw,
 * percent-encoded path), the body check — and of what a device answers (the reply embedded in
 * the answer). Input: a method byte, the path up to the first newline, the rest as body and
 * reply. Every answer must be valid UTF-8 JSON; an accepted id never holds + # / or NUL.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "mqc_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	static const char *const methods[] = { "POST", "GET", "HEAD", "PUT" };
	const char *method = methods[data[0] % 4];
	const uint8_t *rest = data + 1, *nl = memchr(rest, '\n', size - 1);
	size_t url_len = nl ? (size_t)(nl - rest) : size - 1;
	char *url = malloc(url_len + 1);
	if (!url)
		return 0;
	memcpy(url, rest, url_len);
	url[url_len] = '\0';
	const char *body = nl ? (const char *)nl + 1 : "";
	size_t body_len = nl ? size - 1 - url_len - 1 : 0;

	struct gate_route r;
	char why[256] = "";
	if (gate_route_parse(method, url, &r, why, sizeof why) == 0 && r.kind == GATE_COMMAND) {
		if (strpbrk(r.device, "+#/") || strpbrk(r.command, "+#/") || !r.device[0] || !r.command[0])
			abort();
		gate_body_ok(body, body_len);
		char *text = gate_reply_json(&r, body, body_len, 1000);
		if (text) {
			cJSON *j = cJSON_Parse(text);
			if (!j || !mqc_utf8_valid(text, strlen(text)))
				abort();
			cJSON_Delete(j);
			free(text);
		}
	}
	char *err = gate_error_json("bad_request", why);
	free(err);
	free(url);
	return 0;
}
