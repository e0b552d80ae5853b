/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * bench_core_test.c - unit tests of mqbench's measurement logic (bench_core.h) on synthetic
 * streams: the header, the schedule, accounting, identities, shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bench_core.h"
#include "mqc_hist.h"

static void header_round_trips_little_endian(void **state)
{
	(void)state;
	struct bench_header h = { .run_id = 0x1234,
		.pub_id = 0xbeef,
		.seq = 0xa1b2c3d4,
		.intended_ns = 0x0102030405060708ULL },
	                    back;
	unsigned char buf[16];
	bench_header_encode(&h, buf);
	static const unsigned char expected[16] = { 0x34, 0x12, 0xef, 0xbe, 0xd4, 0xc3, 0xb2, 0xa1,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01 };
	assert_memory_equal(buf, expected, 16);
	assert_true(bench_header_decode(buf, 16, &back));
	assert_int_equal(back.run_id, h.run_id);
	assert_int_equal(back.pub_id, h.pub_id);
	assert_int_equal(back.seq, h.seq);
	assert_int_equal(back.intended_ns, h.intended_ns);
	assert_false(bench_header_decode(buf, 15, &back));
}

static void schedule_staggers_publishers_and_never_skips(void **state)
{
	(void)state;
	struct bench_schedule s;
	/* 2 publishers x 1000/s for 1 s: 2000 slots, 0.5 ms apart. */
	bench_schedule_init(&s, 1000000, 2000, 1000000000ULL, 2);
	assert_int_equal(s.total_slots, 2000);
	unsigned pub;
	uint32_t seq;
	uint64_t t;
	assert_false(bench_schedule_due(&s, 999999, &pub, &seq, &t)); /* not yet */
	assert_true(bench_schedule_due(&s, 1000000, &pub, &seq, &t));
	assert_int_equal(pub, 0);
	assert_int_equal(seq, 0);
	assert_int_equal(t, 1000000);
	assert_false(bench_schedule_due(&s, 1000000, &pub, &seq, &t));
	assert_true(bench_schedule_due(&s, 1500000, &pub, &seq, &t));
	assert_int_equal(pub, 1);
	assert_int_equal(seq, 0);
	assert_int_equal(t, 1500000);
	/* A 100 ms stall: every slot comes out, each with its own intended time. */
	uint64_t now = 1000000 + 101000000, emitted = 0, last = 0;
	while (bench_schedule_due(&s, now, &pub, &seq, &t)) {
		assert_true(t > last);
		last = t;
		emitted++;
	}
	assert_int_equal(emitted, 201); /* slots 2..202 */
	assert_int_equal(s.next, 203);
	/* The plan ends: nothing more, however late. */
	while (bench_schedule_due(&s, UINT64_MAX / 2, &pub, &seq, &t))
		emitted++;
	assert_int_equal(s.next, 2000);
	assert_int_equal(seq, 999);
	assert_int_equal(bench_schedule_next_time(&s), UINT64_MAX);
}

static void accounting_separates_loss_duplicates_and_reordering(void **state)
{
	(void)state;
	struct bench_stream s;
	assert_int_equal(bench_stream_init(&s, 100), 0);
	/* 0..99 with 10 lost (seq % 10 == 3), 5 duplicated, and 7 swapped with 8. */
	for (uint32_t seq = 0; seq < 100; seq++) {
		if (seq % 10 == 3)
			continue;
		uint32_t actual = seq == 7 ? 8 : seq == 8 ? 7 : seq;
		bench_stream_record(&s, actual);
		if (seq % 20 == 0)
			bench_stream_record(&s, actual); /* QoS 1 duplicate */
	}
	bench_stream_record(&s, 1000); /* not in the plan */
	assert_int_equal(s.unique, 90);
	assert_int_equal(s.duplicates, 5);
	assert_int_equal(s.out_of_order, 1);
	assert_int_equal(s.beyond, 1);
	/* Duplicates never hide loss: a second copy of 5 does not stand in for lost 3. */
	assert_int_equal(100 - s.unique, 10);
	bench_stream_free(&s);
}

static void delayed_ack_share_finds_40ms_multiples(void **state)
{
	(void)state;
	struct mqc_hist h;
	assert_int_equal(mqc_hist_init(&h, 7), 0);
	assert_true(bench_delayed_ack_share(&h) == 0);
	for (int i = 0; i < 60; i++) /* a broker that Nagles: 40-ms-and-a-bit and 80-ms-and-a-bit */
		mqc_hist_record(&h, (i % 2 ? 41 : 82) * 1000000ULL + (uint64_t)i * 50000);
	for (int i = 0; i < 40; i++) /* and a healthy sub-millisecond path */
		mqc_hist_record(&h, 400000 + (uint64_t)i * 1000);
	double share = bench_delayed_ack_share(&h);
	assert_true(share > 0.59 && share < 0.61);
	mqc_hist_free(&h);
	assert_int_equal(mqc_hist_init(&h, 7), 0);
	for (int i = 0; i < 100; i++) /* slow, but not on the 40 ms grid */
		mqc_hist_record(&h, (20 + (uint64_t)i % 15) * 1000000ULL);
	assert_true(bench_delayed_ack_share(&h) == 0);
	mqc_hist_free(&h);
}

static void identity_templates_expand_the_index(void **state)
{
	(void)state;
	char out[32], err[128];
	assert_int_equal(bench_identity("dev-%i", 7, out, sizeof out, err, sizeof err), 5);
	assert_string_equal(out, "dev-7");
	assert_int_equal(bench_identity("d%06i/%i", 42, out, sizeof out, NULL, 0), 10);
	assert_string_equal(out, "d000042/42");
	assert_int_equal(bench_identity("%3i", 12345, out, sizeof out, NULL, 0), 5);
	assert_string_equal(out, "12345"); /* a width is a minimum, never a cut */
	assert_int_equal(bench_identity("100%% %i", 1, out, sizeof out, NULL, 0), 6);
	assert_string_equal(out, "100% 1");
	assert_int_equal(bench_identity("no index", 9, out, sizeof out, NULL, 0), 8);
	assert_int_equal(bench_identity("bad %d", 1, out, sizeof out, err, sizeof err), -1);
	assert_non_null(strstr(err, "followed by i"));
	assert_int_equal(bench_identity("trailing %", 1, out, sizeof out, NULL, 0), -1);
	assert_int_equal(bench_identity("%21i", 1, out, sizeof out, NULL, 0), -1);
	assert_int_equal(bench_identity("%20i", 1, out, 8, NULL, 0), -2); /* does not fit */
	assert_int_equal(bench_identity("1234567", 1, out, 8, NULL, 0), 7);
	assert_int_equal(bench_identity("12345678", 1, out, 8, NULL, 0), -2);
	assert_true(bench_identity_varies("u%i") && bench_identity_varies("u%08i"));
	assert_false(bench_identity_varies("u%%i") || bench_identity_varies("plain")
	    || bench_identity_varies(NULL));
}

static void shards_cover_every_client_once(void **state)
{
	(void)state;
	for (unsigned shards = 1; shards <= 7; shards++) {
		uint64_t next = 0;
		for (unsigned i = 0; i < shards; i++) {
			uint64_t first, count;
			bench_shard_range(18000 + shards, i, shards, &first, &count);
			assert_int_equal(first, next);
			assert_true(
			    count == (18000 + shards) / shards || count == (18000 + shards) / shards + 1);
			next = first + count;
		}
		assert_int_equal(next, 18000 + shards);
	}
	unsigned i, n;
	assert_int_equal(bench_shard_parse("2/3", &i, &n), 0);
	assert_true(i == 2 && n == 3);
	assert_int_equal(bench_shard_parse("3/3", &i, &n), -1);
	assert_int_equal(bench_shard_parse("0/0", &i, &n), -1);
	assert_int_equal(bench_shard_parse("-1/3", &i, &n), -1);
	assert_int_equal(bench_shard_parse("1/3x", &i, &n), -1);
	assert_int_equal(bench_shard_parse("1", &i, &n), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_round_trips_little_endian),
		cmocka_unit_test(schedule_staggers_publishers_and_never_skips),
		cmocka_unit_test(accounting_separates_loss_duplicates_and_reordering),
		cmocka_unit_test(delayed_ack_share_finds_40ms_multiples),
		cmocka_unit_test(identity_templates_expand_the_index),
		cmocka_unit_test(shards_cover_every_client_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
