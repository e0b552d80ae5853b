/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: the responder's legacy reply-topic template ({topic}, {1}..{9}) expanded against
 * any topic: never writes past its buffer, and the result is NUL-terminated within it.
 * Input: the template up to the first newline, the topic after it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"

#include "responder_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	if (!text)
		return 0;
	char *nl = strchr(text, '\n');
	const char *topic = "a/b/c";
	if (nl) {
		*nl = '\0';
		topic = nl + 1;
	}
	char out[64];
	memset(out, 0x5a, sizeof out);
	int n = rsp_expand_template(text, topic, out, sizeof out);
	if (n >= 0 && (size_t)n >= sizeof out)
		abort();
	if (n >= 0 && strlen(out) != (size_t)n)
		abort();
	free(text);
	return 0;
}
