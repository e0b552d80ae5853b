/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * bench_core.c - mqbench's measurement logic without sockets (bench_core.h): the payload header,
 * the open-loop schedule, delivery accounting, identities and shards.
 */
#include "bench_core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "mqc_hist.h"

void bench_put_u32le(unsigned char *out, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		out[i] = (unsigned char)(v >> (8 * i));
}

uint32_t bench_get_u32le(const unsigned char *in)
{
	return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

void bench_header_encode(const struct bench_header *h, unsigned char *out)
{
	out[0] = (unsigned char)h->run_id;
	out[1] = (unsigned char)(h->run_id >> 8);
	out[2] = (unsigned char)h->pub_id;
	out[3] = (unsigned char)(h->pub_id >> 8);
	bench_put_u32le(out + 4, h->seq);
	bench_put_u32le(out + 8, (uint32_t)h->intended_ns);
	bench_put_u32le(out + 12, (uint32_t)(h->intended_ns >> 32));
}

bool bench_header_decode(const unsigned char *in, size_t len, struct bench_header *h)
{
	if (len < BENCH_HEADER_SIZE)
		return false;
	h->run_id = (uint16_t)(in[0] | in[1] << 8);
	h->pub_id = (uint16_t)(in[2] | in[3] << 8);
	h->seq = bench_get_u32le(in + 4);
	h->intended_ns = (uint64_t)bench_get_u32le(in + 8) | (uint64_t)bench_get_u32le(in + 12) << 32;
	return true;
}

void bench_schedule_init(struct bench_schedule *s, uint64_t t0_ns, double total_rate,
    uint64_t duration_ns, unsigned publishers)
{
	s->t0_ns = t0_ns;
	s->interval_ns = 1e9 / total_rate;
	s->total_slots = (uint64_t)floor((double)duration_ns / s->interval_ns + 1e-9);
	s->next = 0;
	s->publishers = publishers;
}

uint64_t bench_schedule_time(const struct bench_schedule *s, uint64_t k)
{
	return s->t0_ns + (uint64_t)llround((double)k * s->interval_ns);
}

uint64_t bench_schedule_next_time(const struct bench_schedule *s)
{
	return s->next < s->total_slots ? bench_schedule_time(s, s->next) : UINT64_MAX;
}

bool bench_schedule_due(
    struct bench_schedule *s, uint64_t now_ns, unsigned *pub, uint32_t *seq, uint64_t *intended_ns)
{
	if (s->next >= s->total_slots)
		return false;
	uint64_t t = bench_schedule_time(s, s->next);
	if (t > now_ns)
		return false;
	*pub = (unsigned)(s->next % s->publishers);
	*seq = (uint32_t)(s->next / s->publishers);
	*intended_ns = t;
	s->next++;
	return true;
}

int bench_stream_init(struct bench_stream *s, uint32_t capacity)
{
	*s = (struct bench_stream) { 0 };
	s->capacity = capacity;
	s->seen = calloc((capacity + 63) / 64 + 1, sizeof *s->seen);
	return s->seen ? 0 : -1;
}

void bench_stream_free(struct bench_stream *s)
{
	free(s->seen);
	*s = (struct bench_stream) { 0 };
}

bool bench_stream_record(struct bench_stream *s, uint32_t seq)
{
	if (seq >= s->capacity) {
		s->beyond++; /* a sequence the plan never had: not ours */
		return false;
	}
	uint64_t bit = 1ULL << (seq % 64);
	if (s->seen[seq / 64] & bit) {
		s->duplicates++;
		return false;
	}
	s->seen[seq / 64] |= bit;
	s->unique++;
	if (seq + 1 < s->highest)
		s->out_of_order++;
	else
		s->highest = seq + 1;
	return true;
}

double bench_delayed_ack_share(const struct mqc_hist *h)
{
	if (!h->count)
		return 0;
	const uint64_t ms = 1000000;
	uint64_t near = 0;
	for (size_t i = 0; i < h->nbuckets; i++) {
		if (!h->counts[i])
			continue;
		uint64_t lo, hi;
		mqc_hist_bucket_range(h->sub_bits, i, &lo, &hi);
		uint64_t mid = lo / 2 + hi / 2;
		for (uint64_t k = 1; k <= 5; k++)
			if (mid >= k * 40 * ms - 2 * ms && mid <= k * 40 * ms + 8 * ms)
				near += h->counts[i];
	}
	return (double)near / (double)h->count;
}

/* --- reading the probe's text ---------------------------------------------------------------- */

double bench_prom_sum(const char *text, const char *name, bool *found)
{
	size_t n = strlen(name);
	double sum = 0;
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, name, n) != 0 || (p[n] != '{' && p[n] != ' '))
			continue;
		/* The value follows the name, or the label set's closing brace, after one space. */
		const char *v = p[n] == ' ' ? p + n + 1 : NULL;
		if (!v) {
			const char *close = strchr(p + n, '}'), *eol = strchr(p + n, '\n');
			if (!close || (eol && close > eol) || close[1] != ' ')
				continue; /* no value on this line */
			v = close + 2;
		}
		char *end;
		double x = strtod(v, &end);
		if (end != v && isfinite(x)) {
			sum += x;
			*found = true;
		}
	}
	return sum;
}

/* --- histograms in --json results ------------------------------------------------------------- */

/* item as a whole number in 0..max: false for anything else (NaN, negative, fractional, huge). */
static bool json_uint(const cJSON *item, double max, uint64_t *out)
{
	if (!cJSON_IsNumber(item))
		return false;
	double v = item->valuedouble;
	if (!(v >= 0 && v <= max) || v != floor(v))
		return false;
	*out = (uint64_t)v;
	return true;
}

int bench_hist_from_json(const cJSON *h, struct mqc_hist *out)
{
	const cJSON *buckets = cJSON_GetObjectItem(h, "buckets");
	uint64_t bits, overflow = 0, max = 0, min = 0;
	if (!json_uint(cJSON_GetObjectItem(h, "sub_bits"), 14, &bits) || bits < 1
	    || !cJSON_IsArray(buckets) || mqc_hist_init(out, (unsigned)bits) != 0)
		return -1;
	const double counts_max = 9007199254740992.0; /* 2^53: where doubles stop being exact */
	uint64_t count = 0;
	const cJSON *b;
	cJSON_ArrayForEach(b, buckets)
	{
		uint64_t idx, n;
		if (!json_uint(cJSON_GetArrayItem(b, 0), (double)out->nbuckets - 1, &idx)
		    || !json_uint(cJSON_GetArrayItem(b, 1), counts_max, &n)
		    || (double)(count + n) > counts_max) {
			mqc_hist_free(out);
			return -1;
		}
		out->counts[idx] += n;
		count += n;
	}
	const cJSON *o = cJSON_GetObjectItem(h, "overflow"), *mx = cJSON_GetObjectItem(h, "max"),
	            *mn = cJSON_GetObjectItem(h, "min"), *sum = cJSON_GetObjectItem(h, "sum");
	if ((o && !json_uint(o, counts_max, &overflow)) || (double)(count + overflow) > counts_max
	    || (mx && !json_uint(mx, 18446744073709549568.0, &max))
	    || (mn && !json_uint(mn, 18446744073709549568.0, &min))) {
		mqc_hist_free(out);
		return -1;
	}
	/* The count is what the buckets hold, whatever the file claims. */
	out->count = count + overflow;
	out->overflow = overflow;
	out->sum = cJSON_IsNumber(sum) && isfinite(sum->valuedouble) ? sum->valuedouble : 0;
	out->max = max;
	out->min = out->count ? min : UINT64_MAX;
	return 0;
}

cJSON *bench_hist_to_json(const struct mqc_hist *h)
{
	cJSON *j = cJSON_CreateObject(), *buckets = cJSON_CreateArray();
	cJSON_AddNumberToObject(j, "sub_bits", h->sub_bits);
	cJSON_AddNumberToObject(j, "count", (double)h->count);
	cJSON_AddNumberToObject(j, "min", (double)(h->count ? h->min : 0));
	cJSON_AddNumberToObject(j, "max", (double)h->max);
	cJSON_AddNumberToObject(j, "sum", h->sum);
	cJSON_AddNumberToObject(j, "overflow", (double)h->overflow);
	for (size_t i = 0; i < h->nbuckets; i++) {
		if (!h->counts[i])
			continue;
		cJSON *pair = cJSON_CreateArray();
		cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)i));
		cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)h->counts[i]));
		cJSON_AddItemToArray(buckets, pair);
	}
	cJSON_AddItemToObject(j, "buckets", buckets);
	return j;
}

int bench_identity(const char *tpl, uint64_t i, char *out, size_t cap, char *err, size_t errlen)
{
	size_t len = 0;
	for (const char *p = tpl; *p; p++) {
		char piece[32];
		size_t n;
		if (*p != '%') {
			piece[0] = *p;
			n = 1;
		} else if (p[1] == '%') {
			piece[0] = '%';
			n = 1;
			p++;
		} else {
			const char *q = p + 1;
			unsigned width = 0;
			while (*q >= '0' && *q <= '9' && width <= 20)
				width = width * 10 + (unsigned)(*q++ - '0');
			if (*q != 'i' || width > 20) {
				if (err)
					snprintf(err, errlen,
					    "'%s': '%%' must be followed by i, a width and i (%%06i), or %%", tpl);
				return -1;
			}
			n = (size_t)snprintf(piece, sizeof piece, "%0*llu", (int)width, (unsigned long long)i);
			p = q;
		}
		if (len + n >= cap)
			return -2;
		memcpy(out + len, piece, n);
		len += n;
	}
	if (cap == 0)
		return -2;
	out[len] = '\0';
	return (int)len;
}

bool bench_identity_varies(const char *tpl)
{
	for (const char *p = tpl; p && *p; p++) {
		if (*p != '%')
			continue;
		if (p[1] == '%') {
			p++;
			continue;
		}
		const char *q = p + 1;
		while (*q >= '0' && *q <= '9')
			q++;
		if (*q == 'i')
			return true;
	}
	return false;
}

void bench_shard_range(
    uint64_t clients, unsigned index, unsigned shards, uint64_t *first, uint64_t *count)
{
	uint64_t lo = clients * index / shards, hi = clients * (index + 1) / shards;
	*first = lo;
	*count = hi - lo;
}

int bench_shard_parse(const char *text, unsigned *index, unsigned *shards)
{
	char *end;
	errno = 0;
	if (!text || *text < '0' || *text > '9')
		return -1;
	unsigned long i = strtoul(text, &end, 10);
	if (*end != '/' || end[1] < '0' || end[1] > '9')
		return -1;
	unsigned long n = strtoul(end + 1, &end, 10);
	if (*end || errno || n == 0 || n > 100000 || i >= n)
		return -1;
	*index = (unsigned)i;
	*shards = (unsigned)n;
	return 0;
}
