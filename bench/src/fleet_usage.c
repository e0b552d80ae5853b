/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_usage.c - the broker's CPU and memory while a fleet runs (its /proc with --broker-pid,
 * else the probe), sampled on a thread of its own so that a slow probe never stops the loop that
 * times the connects; and mqbench's own descriptors and memory (churn's no-growth check).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "fleet.h"
#include "mqbench.h"
#include "mqc_clock.h"

/* A thread that takes no signals: SIGINT and SIGTERM stay with the loop's thread, whose
 * epoll_wait they interrupt. */
bool fleet_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool ok = pthread_create(t, NULL, fn, arg) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ok;
}

static bool broker_now(const struct bench_opts *o, double *cpu, double *rss)
{
	if (o->broker_pid)
		return bench_proc_read(o->broker_pid, cpu, rss);
	if (!o->metrics_url)
		return false;
	struct probe_sample p;
	bench_probe_read(o->metrics_url, &p);
	*cpu = p.cpu_seconds;
	*rss = p.resident_bytes;
	return p.ok;
}

void fleet_sample(const struct bench_opts *o, struct broker_usage *u)
{
	double cpu, rss, t = (double)mqc_now_ns() / 1e9;
	if (!broker_now(o, &cpu, &rss))
		return;
	if (!u->ok) {
		*u = (struct broker_usage) { .ok = true,
			.cpu0 = cpu,
			.rss0 = rss,
			.cpu_last = cpu,
			.t_last = t,
			.t0 = t,
			.rss_max = rss };
		return;
	}
	if (cpu < u->cpu_last) { /* restarted: a new process's counters */
		u->cpu_last = cpu;
		u->restarted = true;
	}
	if (t - u->t_last >= 0.2) {
		double pct = (cpu - u->cpu_last) / (t - u->t_last) * 100;
		if (pct > u->peak_pct)
			u->peak_pct = pct;
		u->cpu_last = cpu;
		u->t_last = t;
	}
	if (rss > u->rss_max)
		u->rss_max = rss;
}

static void *sampler_main(void *arg)
{
	struct fleet_sampler *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		pthread_mutex_unlock(&s->mu);
		fleet_sample(s->o, s->u);
		pthread_mutex_lock(&s->mu);
		uint64_t until = mqc_now_ns() + s->period_ns;
		struct timespec ts
		    = { .tv_sec = (time_t)(until / MQC_NS_PER_S), .tv_nsec = (long)(until % MQC_NS_PER_S) };
		while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void sampler_start(struct fleet_sampler *s)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* mqc_now_ns's clock */
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->stop = false;
	s->running = fleet_quiet_thread(&s->thread, sampler_main, s);
	if (!s->running) {
		fprintf(stderr,
		    "mqbench: warning: no thread to sample the broker: its peak CPU and "
		    "memory are from the run's start and end only\n");
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
	}
}

/* Stop and join the sampler's thread; a read in flight ends first (at most the probe's
 * timeout). */
void fleet_sampler_stop(struct fleet_sampler *s)
{
	if (!s->running)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	s->running = false;
}

void fleet_start_sampling(struct fleet *r, struct broker_usage *u, uint64_t period)
{
	r->sampler = (struct fleet_sampler) { .o = r->o, .u = u, .period_ns = period };
	if (r->o->broker_pid || r->o->metrics_url)
		sampler_start(&r->sampler);
}

void fleet_stop_sampling(struct fleet *r)
{
	fleet_sampler_stop(&r->sampler);
	if (r->sampler.u)
		fleet_sample(r->o, r->sampler.u);
	r->sampler.u = NULL;
}

/* This process's open descriptors and VmRSS (churn's no-growth check). */
void fleet_self_usage(unsigned *fds, double *rss)
{
	*fds = 0;
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			*fds += e->d_name[0] != '.';
		closedir(d);
		(*fds)--; /* the directory's own descriptor */
	}
	double cpu;
	if (!bench_proc_read(getpid(), &cpu, rss))
		*rss = -1;
}
