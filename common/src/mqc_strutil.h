/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_strutil.h - strict parsing of command-line values.
 *
 * Each parser accepts the whole string or nothing: trailing garbage, empty strings, signs where
 * none make sense and overflow are all errors, so that `--rate 10k0` never silently means 10.
 */
#ifndef MQC_STRUTIL_H
#define MQC_STRUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Unsigned decimal integer within [min, max]. Returns 0 or -1. */
int mqc_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/** Finite decimal number within [min, max]. Returns 0 or -1. */
int mqc_parse_double(const char *text, double min, double max, double *out);

/**
 * Duration in nanoseconds: a number with a unit `ns`, `us`, `ms`, `s`, `m` or `h`; a bare number
 * means `default_unit_ns` (for example MQC_NS_PER_MS). Fractions are allowed ("1.5s").
 * Returns 0 or -1 (negative, non-finite, unknown unit, above ~292 years).
 */
int mqc_parse_duration(const char *text, uint64_t default_unit_ns, uint64_t *out_ns);

/**
 * Count with an optional SI suffix `k` (1e3) or `M` (1e6), e.g. "15k". Returns 0 or -1.
 */
int mqc_parse_count(const char *text, uint64_t max, uint64_t *out);

/** Copy src into dst (size len), always NUL-terminated. Returns false when truncated. */
bool mqc_strlcpy(char *dst, const char *src, size_t len);

#endif
