/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * claims.c - the process's legacy reply topics (claims.h): one hash table under one mutex.
 */
#define _GNU_SOURCE
#include "claims.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct claim {
	char *topic;
	uint64_t until; /* 0: a request holds it; else quarantined until then */
	uint64_t conn;  /* the connection the last request went out on */
	bool free;      /* nobody holds it: kept only to remember conn */
	UT_hash_handle hh;
};

/* A free topic is remembered this long: a copy of its last reply in another connection's pipe
 * arrives within that, or never. */
#define REMEMBER_NS (60 * (uint64_t)1000000000)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct claim *claims;
static unsigned claims_since_sweep;

static void drop(struct claim *c)
{
	/* uthash frees its table with the last item; the analyzer takes that for c. */
	HASH_DEL(claims, c); /* NOLINT(clang-analyzer-unix.Malloc) */
	free(c->topic);
	free(c);
}

enum mqp_claim mqp__claim(const char *topic, uint64_t now, uint64_t *until, uint64_t *last)
{
	pthread_mutex_lock(&lock);
	if (++claims_since_sweep == 256) { /* topics nobody asked for in a while */
		claims_since_sweep = 0;
		struct claim *c, *tmp;
		HASH_ITER (hh, claims, c, tmp)
			if (c->until && c->until + REMEMBER_NS <= now)
				drop(c);
	}
	struct claim *c = NULL;
	HASH_FIND_STR(claims, topic, c);      /* NOLINT(clang-analyzer-unix.Malloc): as in drop() */
	if (c && c->until && c->until <= now) /* a quarantine that has ended */
		c->free = true;
	if (c && !c->free) {
		*until = c->until;
		pthread_mutex_unlock(&lock);
		return MQP_CLAIM_BUSY;
	}
	*last = c && c->until + REMEMBER_NS > now ? c->conn : 0;
	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c || !(c->topic = strdup(topic))) {
			free(c);
			pthread_mutex_unlock(&lock);
			return MQP_CLAIM_NOMEM;
		}
		HASH_ADD_KEYPTR(hh, claims, c->topic, strlen(c->topic), c);
	}
	c->until = 0; /* held */
	c->free = false;
	pthread_mutex_unlock(&lock);
	return MQP_CLAIM_OK;
}

void mqp__unclaim(const char *topic, uint64_t now, uint64_t quarantine_ns, uint64_t conn)
{
	pthread_mutex_lock(&lock);
	struct claim *c = NULL;
	HASH_FIND_STR(claims, topic, c);
	if (c && !c->until && !c->free) { /* ours: a quarantine is nobody's to lift */
		if (conn)
			c->conn = conn;
		/* Free at once, or after the quarantine; either way the entry stays a while to say
		 * which connection the topic's last reply went to. */
		c->until = now + (quarantine_ns ? quarantine_ns : 1);
		c->free = !quarantine_ns;
	}
	pthread_mutex_unlock(&lock);
}

uint64_t mqp__conn_token(void)
{
	static atomic_uint_fast64_t next;
	return atomic_fetch_add(&next, 1) + 1;
}
