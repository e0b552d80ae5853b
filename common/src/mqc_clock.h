/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_clock.h - monotonic and wall-clock time in nanoseconds.
 *
 * Every deadline in the project is an absolute CLOCK_MONOTONIC time in ns; wall-clock (REALTIME)
 * time is used only where a contract says so (the probe's broker-rx-ns stamp).
 */
#ifndef MQC_CLOCK_H
#define MQC_CLOCK_H

#include <stdint.h>
#include <time.h>

#define MQC_NS_PER_US 1000ULL
#define MQC_NS_PER_MS 1000000ULL
#define MQC_NS_PER_S  1000000000ULL

static inline uint64_t mqc_ts_to_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * MQC_NS_PER_S + (uint64_t)ts->tv_nsec;
}

static inline struct timespec mqc_ns_to_ts(uint64_t ns)
{
	struct timespec ts
	    = { .tv_sec = (time_t)(ns / MQC_NS_PER_S), .tv_nsec = (long)(ns % MQC_NS_PER_S) };
	return ts;
}

/** Nanoseconds on CLOCK_MONOTONIC. */
static inline uint64_t mqc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return mqc_ts_to_ns(&ts);
}

/** Nanoseconds since the Unix epoch (CLOCK_REALTIME). */
static inline uint64_t mqc_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return mqc_ts_to_ns(&ts);
}

#endif
