/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * process.c - the standard Prometheus process metrics, from the broker's /proc/PID.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "probe.h"

static double boot_time_seconds(void)
{
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return 0;
	char line[256];
	double btime = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "btime %lf", &btime) == 1)
			break;
	fclose(f);
	return btime;
}

void probe_process__read(struct probe_process *p, const struct probe_proc_dirs *dirs)
{
	*p = (struct probe_process) { 0 };
	int sfd = dirs ? openat(dirs->pid, "stat", O_RDONLY | O_CLOEXEC)
	               : open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	FILE *f = sfd >= 0 ? fdopen(sfd, "r") : NULL;
	if (!f) {
		if (sfd >= 0)
			close(sfd);
		return;
	}
	char buf[1024];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *after = strrchr(buf, ')'); /* the command name may contain spaces */
	unsigned long utime, stime;
	unsigned long long start;
	long rss_pages;
	if (!after
	    || sscanf(after + 2,
	           "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %*d %*d %*d %*d "
	           "%*d %*d %llu %*u %ld",
	           &utime, &stime, &start, &rss_pages)
	        != 4)
		return;
	double tick = (double)sysconf(_SC_CLK_TCK);
	p->cpu_seconds = (double)(utime + stime) / tick;
	p->start_time_seconds = boot_time_seconds() + (double)start / tick;
	p->resident_bytes = (uint64_t)rss_pages * (uint64_t)sysconf(_SC_PAGESIZE);

	/* A directory opened before: a duplicate shares its offset, so rewind it. */
	int dfd = dirs ? dup(dirs->fds) : open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (d) {
		rewinddir(d);
		for (struct dirent *e; (e = readdir(d));)
			p->open_fds += e->d_name[0] != '.';
		closedir(d);
		if (!dirs)
			p->open_fds -= 1; /* the directory stream itself */
	} else if (dfd >= 0) {
		close(dfd);
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		p->max_fds = rl.rlim_cur;
	p->valid = true;
}
