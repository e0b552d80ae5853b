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

/* Claim topic for one request at time now (CLOCK_MONOTONIC ns). MQP_CLAIM_OK with *last: the
 * connection the topic's last request went out on (0: none, or the topic was free long enough
 * to be forgotten). MQP_CLAIM_BUSY: held by another request (*until 0) or quarantined until
 * *until. */
enum mqp_claim mqp__claim(const char *topic, uint64_t now, uint64_t *until, uint64_t *last);
/* Give topic up: free at once (quarantine_ns 0), or quarantined until now + quarantine_ns;
 * conn: the connection its request went out on (mqp__conn_token), 0 for none. */
void mqp__unclaim(const char *topic, uint64_t now, uint64_t quarantine_ns, uint64_t conn);
/* A number for a new connection, unique in the process (never 0). */
uint64_t mqp__conn_token(void);

#endif
