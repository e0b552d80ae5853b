/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * bench_core.h - mqbench's measurement logic, free of sockets: the payload header, the open-loop
 * schedule and the delivery accounting. Unit-tested with synthetic streams.
 */
#ifndef BENCH_CORE_H
#define BENCH_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- payload header (DESIGN.md contract): 16 bytes, little-endian ------------------------ */

#define BENCH_HEADER_SIZE        16
#define BENCH_HEADER_ACTUAL_SIZE 20 /* payloads >= 20 B also carry actual - intended (us) */

struct bench_header {
	uint16_t run_id;
	uint16_t pub_id;
	uint32_t seq;
	uint64_t intended_ns; /* ns since the Unix epoch */
};

void bench_header_encode(const struct bench_header *h, unsigned char *out);
/** Returns false when len < 16. */
bool bench_header_decode(const unsigned char *in, size_t len, struct bench_header *h);
void bench_put_u32le(unsigned char *out, uint32_t v);
uint32_t bench_get_u32le(const unsigned char *in);

/* --- open-loop schedule ------------------------------------------------------------------ */

/*
 * One global sequence of slots at total_rate = P x R: slot k goes to publisher k mod P at
 * t0 + k / total_rate, so every publisher runs at R with its phase staggered by 1/(P R). Slots
 * are never skipped or re-based: a late generator emits every slot whose time has come.
 */
struct bench_schedule {
	uint64_t t0_ns;       /* CLOCK_MONOTONIC start */
	double interval_ns;   /* 1e9 / total_rate */
	uint64_t total_slots; /* scheduled in the run */
	uint64_t next;        /* next slot to emit */
	unsigned publishers;
};

void bench_schedule_init(struct bench_schedule *s, uint64_t t0_ns, double total_rate,
    uint64_t duration_ns, unsigned publishers);
/** Intended time of slot k. */
uint64_t bench_schedule_time(const struct bench_schedule *s, uint64_t k);
/** True (and the slot's publisher, per-publisher sequence and time) if the next slot is due. */
bool bench_schedule_due(
    struct bench_schedule *s, uint64_t now_ns, unsigned *pub, uint32_t *seq, uint64_t *intended_ns);
/** When the next slot is due; UINT64_MAX when the plan is complete. */
uint64_t bench_schedule_next_time(const struct bench_schedule *s);

/* --- accounting -------------------------------------------------------------------------- */

/* One stream = one (subscriber, publisher) pair: which sequence numbers arrived. */
struct bench_stream {
	uint64_t *seen;    /* bitmap of seq */
	uint32_t capacity; /* seqs the bitmap covers */
	uint32_t highest;  /* highest seq seen + 1 (0: none yet) */
	uint64_t unique, duplicates, out_of_order, beyond;
};

int bench_stream_init(struct bench_stream *s, uint32_t capacity);
void bench_stream_free(struct bench_stream *s);
/** Record one arrival of seq; returns true for a first (unique) copy. */
bool bench_stream_record(struct bench_stream *s, uint32_t seq);

/** Totals of a run. */
struct bench_counts {
	uint64_t scheduled, sent, acked;
	uint64_t expected;  /* sum over sent messages of matching subscribers */
	uint64_t delivered; /* unique (subscriber, publisher, seq) */
	uint64_t duplicates, out_of_order, foreign;
	uint64_t loss; /* expected - delivered */
	/* loss, split: at subscribers whose connection was lost (nothing more can reach them), and
	 * at live subscribers when the drain ended (late, or never coming) */
	uint64_t lost_with_subscriber, not_received;
	uint64_t shortfall; /* scheduled - sent */
	bool generator_saturated;
};

/* --- reading the probe's text ---------------------------------------------------------------- */

/**
 * The sum of every sample in Prometheus text whose metric name is exactly name (any labels); sets
 * *found when there was one. Lines without a value are skipped.
 */
double bench_prom_sum(const char *text, const char *name, bool *found);

/* --- histograms in --json results ------------------------------------------------------------- */

struct cJSON;
struct mqc_hist;
/**
 * Rebuild a histogram from the "hist" object of a --json result. Every number must be a whole
 * number in range (a bucket index within the layout, counts below 2^53); the count is what the
 * buckets and the overflow hold. Returns 0, or -1 (nothing allocated) for anything else.
 */
int bench_hist_from_json(const struct cJSON *h, struct mqc_hist *out);
/** The "hist" object bench_hist_from_json reads (cJSON; NULL only when out of memory). */
struct cJSON *bench_hist_to_json(const struct mqc_hist *h);

/* --- a client identity each ---------------------------------------------------------------- */

/**
 * Expand an identity template for client index i: "%i" is the index, "%Ni" and "%0Ni" the index
 * zero-padded to N digits (N 1-20), "%%" a percent sign; every other byte is copied. Writes at
 * most cap bytes including the NUL. Returns the length, -1 when tpl has another '%' sequence
 * (said in err when err is not NULL), -2 when the result does not fit.
 */
int bench_identity(const char *tpl, uint64_t i, char *out, size_t cap, char *err, size_t errlen);
/** Whether tpl holds a "%i" (or "%Ni"): a template that differs per client. */
bool bench_identity_varies(const char *tpl);

/* --- shards: one run split over processes, replicas or pods -------------------------------- */

/**
 * The clients of shard index (0-based) of shards, out of clients in all: [*first, *first +
 * *count). Shard i takes clients [i*clients/shards, (i+1)*clients/shards): ranges that cover
 * every client once, sizes differing by one at most.
 */
void bench_shard_range(
    uint64_t clients, unsigned index, unsigned shards, uint64_t *first, uint64_t *count);
/** Parse "I/N" (0 <= I < N <= 100000). Returns 0, or -1. */
int bench_shard_parse(const char *text, unsigned *index, unsigned *shards);

/* --- diagnosis ---------------------------------------------------------------------------- */

/**
 * The share (0..1) of a latency histogram's samples that sit just above a multiple of 40 ms
 * (k x 40 ms - 2 ms to k x 40 ms + 8 ms, k = 1..5): the mark of Nagle's algorithm waiting for a
 * delayed ACK (Linux delays an ACK by at least 40 ms), as a broker with mosquitto's default
 * `set_tcp_nodelay false` shows on any real network. 0 for an empty histogram.
 */
double bench_delayed_ack_share(const struct mqc_hist *h);

#endif
