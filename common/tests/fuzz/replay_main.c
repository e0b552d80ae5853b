/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * replay_main.c - runs a fuzz target's LLVMFuzzerTestOneInput on every file of its corpus
 * directory, without libFuzzer: the seeds and every input that once crashed a target run in
 * each test build (and under the sanitizer presets). Exit 0, or the crash of the input.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int main(int argc, char **argv);

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	DIR *d = opendir(argv[1]);
	if (!d) {
		perror(argv[1]);
		return 1;
	}
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f) {
			perror(path);
			return 1;
		}
		uint8_t *buf = NULL;
		size_t len = 0, cap = 0;
		for (;;) {
			if (len == cap) {
				cap = cap ? cap * 2 : 4096;
				uint8_t *grown = realloc(buf, cap);
				if (!grown) {
					fprintf(stderr, "out of memory\n");
					return 1;
				}
				buf = grown;
			}
			size_t got = fread(buf + len, 1, cap - len, f);
			if (!got)
				break;
			len += got;
		}
		fclose(f);
		fprintf(stderr, "%s (%zu bytes)\n", path, len);
		LLVMFuzzerTestOneInput(buf, len);
		free(buf);
		n++;
	}
	closedir(d);
	printf("%d inputs replayed\n", n);
	return n > 0 ? 0 : 1;
}
