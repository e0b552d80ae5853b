/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* libFuzzer: mqc_url_parse and mqc_url_list_parse never read past their input, what they accept
 * formats back, and a list never holds one broker twice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"

#include "mqc_url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	if (!text)
		return 0;
	struct mqc_url url;
	char err[128], out[512];
	if (mqc_url_parse(text, &url, err, sizeof err) == 0) {
		if (url.port < 1 || url.port > 65535 || !url.host[0])
			abort();
		mqc_url_format(&url, out, sizeof out);
		struct mqc_url again; /* a formatted URL parses to the same thing */
		if (mqc_url_parse(out, &again, err, sizeof err) != 0 || again.port != url.port
		    || again.tls != url.tls || again.ws != url.ws || strcmp(again.host, url.host) != 0
		    || (url.ws && strcmp(again.path, url.path) != 0))
			abort();
	}
	struct mqc_url list[4];
	size_t n = 0;
	if (mqc_url_list_parse(text, list, 4, &n, err, sizeof err) == 0) {
		if (n < 1 || n > 4)
			abort();
		for (size_t i = 0; i < n; i++) {
			mqc_url_format(&list[i], out, sizeof out);
			struct mqc_url again;
			if (mqc_url_parse(out, &again, err, sizeof err) != 0 || again.tls != list[0].tls)
				abort();
			for (size_t j = 0; j < i; j++)
				if (list[j].port == list[i].port && strcmp(list[j].host, list[i].host) == 0)
					abort();
		}
	}
	free(text);
	return 0;
}
