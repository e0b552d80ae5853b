/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* libFuzzer: mqc_url_parse never reads past its input, and what it accepts formats back. */
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
		    || again.tls != url.tls || strcmp(again.host, url.host) != 0)
			abort();
	}
	free(text);
	return 0;
}
