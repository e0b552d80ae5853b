/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* libFuzzer: reading the probe's /metrics text (bench_prom_sum) never reads past the text. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_text.h"

#include "bench_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	if (!text)
		return 0;
	static const char *const names[] = { "mosquitto_connects_total",
		"mosquitto_messages_received_total", "mosquitto_message_routing_checks_sum", "a", "" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		bool found = false;
		bench_prom_sum(text, names[i], &found);
	}
	free(text);
	return 0;
}
