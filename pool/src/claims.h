/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * claims.h - the legacy reply topics of this process (claims.c): at most one legacy request per
 * reply topic is outstanding in the whole process (every pool shares this registry), and a topic
 * whose request was sent and not answered stays quarantined for a while, so the device's late
 * reply reaches nobody instead of the next caller. Thread-safe; never blocks (a pool whose claim
 * is refused tries again later).
 */
#ifndef MQP_CLAIMS_H
#define MQP_CLAIMS_H

#include <stdbool.h>
#include <stdint.h>

enum mqp_claim { MQP_CLAIM_OK, MQP_CLAIM_BUSY, MQP_CLAIM_NOMEM };

/* Claim topic for one request at time now (CLOCK_MONOTONIC ns). MQP_CLAIM_BUSY: held by another
 * request (*until 0) or quarantined until *until. */
enum mqp_claim mqp__claim(const char *topic, uint64_t now, uint64_t *until);
/* Give topic up: free at once (quarantine_ns 0), or quarantined until now + quarantine_ns. */
void mqp__unclaim(const char *topic, uint64_t now, uint64_t quarantine_ns);

#endif
