/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: the reply-topic template of every tool (mqc_template.h: {topic}, {1}..{9}) checked
 * and expanded against any topic: never writes past its buffer, the result is NUL-terminated
 * within it, and a template the check accepts expands for a topic with nine levels.
 * Input: the template up to the first newline, the topic after it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"

#include "mqc_template.h"

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
	int n = mqc_template_expand(text, topic, out, sizeof out);
	if (n >= 0 && (size_t)n >= sizeof out)
		abort();
	if (n >= 0 && strlen(out) != (size_t)n)
		abort();
	char why[128], big[65536];
	if (mqc_template_check(text, why, sizeof why) == 0
	    && (mqc_template_expand(text, "a/b/c/d/e/f/g/h/i", big, sizeof big) < 0
	        || strpbrk(big, "+#")))
		abort(); /* accepted, then refused, or a wildcard in a reply topic */
	free(text);
	return 0;
}
