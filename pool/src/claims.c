/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * claims.c - the process's legacy reply topics (claims.h): one hash table under one mutex.
 */
#define _GNU_SOURCE
#include "claims.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct claim {
	char *topic;
	uint64_t until; /* 0: a request holds it; else quarantined until then */
	UT_hash_handle hh;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct claim *claims;
static unsigned claims_since_sweep;

static void drop(struct claim *c)
{
	HASH_DEL(claims, c);
	free(c->topic);
	free(c);
}

enum mqp_claim mqp__claim(const char *topic, uint64_t now, uint64_t *until)
{
	pthread_mutex_lock(&lock);
	if (++claims_since_sweep == 256) { /* ended quarantines of topics nobody asks for again */
		claims_since_sweep = 0;
		struct claim *c, *tmp;
		HASH_ITER (hh, claims, c, tmp)
			if (c->until && c->until <= now)
				drop(c);
	}
	struct claim *c = NULL;
	HASH_FIND_STR(claims, topic, c);
	if (c && c->until && c->until <= now) { /* a quarantine that has ended */
		drop(c);
		c = NULL;
	}
	if (c) {
		*until = c->until;
		pthread_mutex_unlock(&lock);
		return MQP_CLAIM_BUSY;
	}
	c = calloc(1, sizeof *c);
	if (!c || !(c->topic = strdup(topic))) {
		free(c);
		pthread_mutex_unlock(&lock);
		return MQP_CLAIM_NOMEM;
	}
	HASH_ADD_KEYPTR(hh, claims, c->topic, strlen(c->topic), c);
	pthread_mutex_unlock(&lock);
	return MQP_CLAIM_OK;
}

void mqp__unclaim(const char *topic, uint64_t now, uint64_t quarantine_ns)
{
	pthread_mutex_lock(&lock);
	struct claim *c = NULL;
	HASH_FIND_STR(claims, topic, c);
	if (c && !c->until) { /* ours: a quarantine is nobody's to lift */
		if (quarantine_ns)
			c->until = now + quarantine_ns;
		else
			drop(c);
	}
	pthread_mutex_unlock(&lock);
}
