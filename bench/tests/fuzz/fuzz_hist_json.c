/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * libFuzzer: a histogram read back from a --json result (mqbench merge and report take files
 * from anywhere) is either refused or usable: percentiles, mean and a merge stay in bounds.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench_core.h"
#include "mqc_hist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cJSON *j = cJSON_ParseWithLength((const char *)data, size);
	struct mqc_hist h, sum;
	if (j && bench_hist_from_json(j, &h) == 0) {
		uint64_t p50 = mqc_hist_percentile(&h, 50), p99 = mqc_hist_percentile(&h, 99);
		if (p50 > p99 && h.count > h.overflow)
			abort(); /* percentiles must not go backwards */
		(void)mqc_hist_mean(&h);
		if (mqc_hist_init(&sum, h.sub_bits) == 0) {
			mqc_hist_merge(&sum, &h);
			mqc_hist_merge(&sum, &h);
			if (sum.count != 2 * h.count)
				abort();
			mqc_hist_free(&sum);
		}
		mqc_hist_free(&h);
	}
	cJSON_Delete(j);
	return 0;
}
