/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * churn.h - the churn scenario on the fleet engine (churn.c), for mqbench and its tests.
 */
#ifndef CHURN_H
#define CHURN_H

#include "fleet.h"

/* Churn's own state: the topic its cycles publish or subscribe to. */
struct churn {
	char *topic; /* PREFIX/TOKEN/churn; the caller frees it */
};

/* Connect, publish or subscribe once (or nothing), disconnect. */
extern const struct fleet_ops bench_churn_ops;

/** Churn's plan and ops on r, its state in c. 0, or -1 after a message. */
int bench_churn_plan(const struct bench_opts *o, struct fleet *r, struct churn *c);

#endif
