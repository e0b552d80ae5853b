/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mhd_deadline.c - absolute deadlines for libmicrohttpd connections (mqc_mhd.h).
 */
#define _GNU_SOURCE
#include "mqc_mhd.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct watched {
	int fd;            /* our dup() of the connection's socket; -1: a free slot */
	uint64_t deadline; /* CLOCK_MONOTONIC ns; 0: disarmed */
};

struct mqc_mhd_deadline {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool stopping;
	uint64_t deadline_ns;
	unsigned long cut;
	size_t n;
	struct watched conns[]; /* n: the limit, plus room for connections still closing */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *watch(void *arg)
{
	struct mqc_mhd_deadline *w = arg;
	pthread_mutex_lock(&w->lock);
	while (!w->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += 250000000; /* cuts land within a quarter second of the deadline */
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&w->wake, &w->lock, &until);
		uint64_t now = now_ns();
		for (size_t i = 0; i < w->n; i++)
			if (w->conns[i].fd >= 0 && w->conns[i].deadline && now >= w->conns[i].deadline) {
				shutdown(w->conns[i].fd, SHUT_RDWR); /* libmicrohttpd then closes it */
				w->conns[i].deadline = 0;
				w->cut++;
			}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

struct mqc_mhd_deadline *mqc_mhd_deadline_new(unsigned max_connections, unsigned deadline_ms)
{
	size_t n = (size_t)max_connections + max_connections / 4 + 4;
	struct mqc_mhd_deadline *w = calloc(1, sizeof *w + n * sizeof w->conns[0]);
	if (!w)
		return NULL;
	w->n = n;
	w->deadline_ns = (uint64_t)deadline_ms * 1000000u;
	for (size_t i = 0; i < n; i++)
		w->conns[i].fd = -1;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&w->thread, NULL, watch, w) != 0) {
		pthread_cond_destroy(&w->wake);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return NULL;
	}
	return w;
}

void mqc_mhd_deadline_notify(void *watcher, struct MHD_Connection *connection,
    void **socket_context, enum MHD_ConnectionNotificationCode code)
{
	struct mqc_mhd_deadline *w = watcher;
	pthread_mutex_lock(&w->lock);
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *info
		    = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = NULL;
		for (size_t i = 0; info && i < w->n; i++)
			if (w->conns[i].fd < 0) {
				int fd = fcntl(info->connect_fd, F_DUPFD_CLOEXEC, 0);
				if (fd >= 0) {
					w->conns[i]
					    = (struct watched) { .fd = fd, .deadline = now_ns() + w->deadline_ns };
					*socket_context = &w->conns[i];
				}
				break;
			}
	} else if (*socket_context) { /* MHD_CONNECTION_NOTIFY_CLOSED */
		struct watched *c = *socket_context;
		close(c->fd);
		*c = (struct watched) { .fd = -1 };
		*socket_context = NULL;
	}
	pthread_mutex_unlock(&w->lock);
}

static void set_deadline(struct mqc_mhd_deadline *w, struct MHD_Connection *connection, bool arm)
{
	const union MHD_ConnectionInfo *info
	    = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (!info || !info->socket_context)
		return;
	pthread_mutex_lock(&w->lock);
	struct watched *c = info->socket_context;
	if (c->fd >= 0)
		c->deadline = arm ? now_ns() + w->deadline_ns : 0;
	pthread_mutex_unlock(&w->lock);
}

void mqc_mhd_deadline_disarm(struct mqc_mhd_deadline *w, struct MHD_Connection *connection)
{
	set_deadline(w, connection, false);
}

void mqc_mhd_deadline_arm(struct mqc_mhd_deadline *w, struct MHD_Connection *connection)
{
	set_deadline(w, connection, true);
}

unsigned long mqc_mhd_deadline_cut(struct mqc_mhd_deadline *w)
{
	pthread_mutex_lock(&w->lock);
	unsigned long cut = w->cut;
	pthread_mutex_unlock(&w->lock);
	return cut;
}

void mqc_mhd_deadline_free(struct mqc_mhd_deadline *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	for (size_t i = 0; i < w->n; i++)
		if (w->conns[i].fd >= 0)
			close(w->conns[i].fd);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
