/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * strutil.c - strict parsing of command-line values (mqc_strutil.h): whole strings or nothing.
 */
#include "mqc_strutil.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int mqc_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
	if (!text || *text < '0' || *text > '9')
		return -1;
	errno = 0;
	char *end;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno || *end || value < min || value > max)
		return -1;
	*out = value;
	return 0;
}

int mqc_parse_double(const char *text, double min, double max, double *out)
{
	if (!text || !*text)
		return -1;
	errno = 0;
	char *end;
	double value = strtod(text, &end);
	if (errno || *end || !isfinite(value) || value < min || value > max)
		return -1;
	*out = value;
	return 0;
}

int mqc_parse_duration(const char *text, uint64_t default_unit_ns, uint64_t *out_ns)
{
	static const struct {
		const char *suffix;
		double ns;
	} units[] = { { "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 }, { "m", 60e9 },
		{ "h", 3600e9 } };

	if (!text || ((*text < '0' || *text > '9') && *text != '.'))
		return -1;
	errno = 0;
	char *end;
	double value = strtod(text, &end);
	if (errno || end == text || !isfinite(value) || value < 0)
		return -1;
	double scale = (double)default_unit_ns;
	if (*end) {
		scale = 0;
		for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
			if (strcmp(end, units[i].suffix) == 0) {
				scale = units[i].ns;
				break;
			}
		}
		if (scale == 0)
			return -1;
	}
	double ns = value * scale;
	if (ns > 9.2e18)
		return -1;
	*out_ns = (uint64_t)llround(ns);
	return 0;
}

int mqc_parse_count(const char *text, uint64_t max, uint64_t *out)
{
	if (!text || *text < '0' || *text > '9')
		return -1;
	errno = 0;
	char *end;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno)
		return -1;
	uint64_t scale = 1;
	if (*end == 'k' && end[1] == '\0')
		scale = 1000;
	else if (*end == 'M' && end[1] == '\0')
		scale = 1000000;
	else if (*end)
		return -1;
	if (value > max / scale)
		return -1;
	*out = value * scale;
	return 0;
}

bool mqc_strlcpy(char *dst, const char *src, size_t len)
{
	size_t n = strlen(src);
	if (len == 0)
		return n == 0;
	if (n >= len) {
		memcpy(dst, src, len - 1);
		dst[len - 1] = '\0';
		return false;
	}
	memcpy(dst, src, n + 1);
	return true;
}
