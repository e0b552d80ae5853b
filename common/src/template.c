/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * template.c - reply-topic templates: {topic} and its levels {1}..{9} (mqc_template.h).
 */
#include "mqc_template.h"

#include <stdio.h>
#include <string.h>

/* Level n (1-based) of topic: pointer and length, or NULL. */
static const char *topic_level(const char *topic, int n, size_t *len)
{
	const char *p = topic;
	for (int i = 1; i < n; i++) {
		p = strchr(p, '/');
		if (!p)
			return NULL;
		p++;
	}
	*len = strcspn(p, "/");
	return p;
}

/* The placeholder at t ('{'): 0 for {topic}, 1..9 for a level, -1 when it is neither; *end is
 * past its '}'. */
static int placeholder(const char *t, const char **end)
{
	const char *close = strchr(t, '}');
	if (!close)
		return -1;
	*end = close + 1;
	size_t name = (size_t)(close - t - 1);
	if (name == 5 && strncmp(t + 1, "topic", 5) == 0)
		return 0;
	if (name == 1 && t[1] >= '1' && t[1] <= '9')
		return t[1] - '0';
	return -1;
}

int mqc_template_check(const char *tpl, char *why, size_t len)
{
	if (!tpl || !*tpl) {
		snprintf(why, len, "an empty template");
		return -1;
	}
	for (const char *t = tpl; *t;) {
		const char *end;
		if (*t == '{') {
			if (placeholder(t, &end) < 0) {
				const char *close = strchr(t, '}');
				snprintf(why, len,
				    close ? "unknown placeholder %.*s: {topic} and {1}..{9} exist"
				          : "an unmatched '{'",
				    close ? (int)(close - t + 1) : 0, t);
				return -1;
			}
			t = end;
			continue;
		}
		if (*t == '}') {
			snprintf(why, len, "an unmatched '}'");
			return -1;
		}
		if (*t == '+' || *t == '#') {
			snprintf(why, len, "a wildcard outside a placeholder: a reply topic has none");
			return -1;
		}
		t++;
	}
	return 0;
}

int mqc_template_expand(const char *tpl, const char *topic, char *out, size_t len)
{
	size_t n = 0;
	for (const char *t = tpl; *t;) {
		const char *piece = t, *end = t + 1;
		size_t piece_len = 1;
		if (*t == '{') {
			int which = placeholder(t, &end);
			if (which < 0)
				return -1;
			if (which == 0) {
				piece = topic;
				piece_len = strlen(topic);
			} else if (!(piece = topic_level(topic, which, &piece_len))) {
				return -1;
			}
		} else if (*t == '}') {
			return -1;
		}
		if (n + piece_len >= len)
			return -1;
		memcpy(out + n, piece, piece_len);
		n += piece_len;
		t = end;
	}
	if (n >= len)
		return -1;
	out[n] = '\0';
	return (int)n;
}
