/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * buf.c - the growable text buffer every rendering writes into (probe.h: struct probe_buf).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe.h"

void probe_buf__printf(struct probe_buf *b, const char *fmt, ...)
{
	if (b->failed)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n
		    = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = true;
			return;
		}
		if (b->data && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 4096;
		while (cap < b->len + (size_t)n + 1)
			cap *= 2;
		char *grown = realloc(b->data, cap);
		if (!grown) {
			b->failed = true;
			return;
		}
		b->data = grown;
		b->cap = cap;
	}
}

void probe_buf__free(struct probe_buf *b)
{
	free(b->data);
	*b = (struct probe_buf) { 0 };
}
