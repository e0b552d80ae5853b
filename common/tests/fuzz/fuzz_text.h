/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fuzz_text.h - the fuzz input as a NUL-terminated string (malloc'd; NULL when out of memory),
 * for targets whose code under test takes C strings.
 */
#ifndef FUZZ_TEXT_H
#define FUZZ_TEXT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_text(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (text) {
		memcpy(text, data, size);
		text[size] = '\0';
	}
	return text;
}

#endif
