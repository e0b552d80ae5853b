/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * cost.c - what a run costs this process: system calls and CPU time (mqbench.h).
 *
 * System calls are counted by the kernel: a perf counter on the raw_syscalls:sys_enter
 * tracepoint, inherited by every thread created after it opens (the pool's I/O thread, the
 * workers), enabled only for the run itself. CPU is getrusage(RUSAGE_SELF): every thread, those
 * that ended included. Without the rights to open the counter (root, or CAP_PERFMON) the system
 * calls are unknown and say so; the CPU time is always there.
 */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mqbench.h"

static long tracepoint_id(void)
{
	static const char *const paths[] = {
		"/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
		"/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id",
	};
	for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
		FILE *f = fopen(paths[i], "r");
		if (!f)
			continue;
		long id = -1;
		if (fscanf(f, "%ld", &id) != 1)
			id = -1;
		fclose(f);
		if (id >= 0)
			return id;
	}
	return -1;
}

void bench_cost_open(struct bench_cost *c)
{
	*c = (struct bench_cost) { .fd = -1 };
	long id = tracepoint_id();
	if (id < 0)
		return;
	struct perf_event_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.type = PERF_TYPE_TRACEPOINT;
	attr.config = (unsigned long long)id;
	attr.disabled = 1;
	attr.inherit = 1; /* threads made from now on count too */
	attr.exclude_kernel = 0;
	c->fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
	    + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void bench_cost_start(struct bench_cost *c)
{
	if (c->fd >= 0) {
		ioctl(c->fd, PERF_EVENT_IOC_RESET, 0);
		ioctl(c->fd, PERF_EVENT_IOC_ENABLE, 0);
	}
	c->cpu0 = cpu_seconds();
	c->running = true;
}

void bench_cost_stop(struct bench_cost *c)
{
	if (!c->running)
		return;
	c->running = false;
	c->cpu_s = cpu_seconds() - c->cpu0;
	c->syscalls = -1;
	if (c->fd < 0)
		return;
	ioctl(c->fd, PERF_EVENT_IOC_DISABLE, 0);
	uint64_t n;
	if (read(c->fd, &n, sizeof n) == (ssize_t)sizeof n)
		c->syscalls = (double)n;
}

void bench_cost_close(struct bench_cost *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

const char *bench_cost_fmt(
    double value, double per, int decimals, const char *unit, char *buf, size_t len)
{
	if (value < 0 || per <= 0)
		snprintf(buf, len, "n/a");
	else
		snprintf(buf, len, "%.*f%s", decimals, value / per, unit);
	return buf;
}
