/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fuzz_web_config.c - libFuzzer: plugin_opt_web_config's reader (plugin/src/web.c) on any bytes.
 * The file is an operator's, not a stranger's, but a reader that crashes the broker on a typo is
 * still a crash: every input either loads (and frees cleanly) or fails with a message that names
 * the file.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("web.yml", MFD_CLOEXEC);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	char path[64], err[1024];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	err[0] = '\0';
	struct probe_web *w = probe_web__load(path, err, sizeof err);
	if (!w && strncmp(err, "web_config /proc/self/fd/", 25) != 0)
		abort(); /* a failure must say which file */
	if (w && w->nusers)
		(void)probe_web__user_hash(w, w->users[0].name);
	probe_web__free(w);
	close(fd);
	return 0;
}
