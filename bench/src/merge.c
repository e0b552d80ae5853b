/*
 * merge.c - `mqbench merge a.json b.json ...`: one result from several processes or machines.
 *
 * Counts are added; latency histograms are merged bucket by bucket, so the merged percentiles
 * are those of all samples together (never an average of percentiles).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"

#define MAX_HISTS 8

struct merged {
	char scenario[32];
	int runs;
	cJSON *counts; /* summed numbers, OR-ed booleans */
	char names[MAX_HISTS][48];
	struct mqc_hist hists[MAX_HISTS];
	int nhists;
};

char *bench_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 >= cap) {
			char *grown = realloc(buf, cap *= 2);
			if (!grown) {
				free(buf);
				buf = NULL;
			}
			buf = grown;
		}
	}
	fclose(f);
	if (buf)
		buf[len] = '\0';
	return buf;
}

static int add_hist(struct merged *m, const char *name, const cJSON *h, const char *path)
{
	const cJSON *bits = cJSON_GetObjectItem(h, "sub_bits"),
	            *buckets = cJSON_GetObjectItem(h, "buckets");
	if (!cJSON_IsNumber(bits) || !cJSON_IsArray(buckets)) {
		fprintf(stderr, "mqbench merge: %s: histogram '%s' is malformed\n", path, name);
		return -1;
	}
	int i = 0;
	while (i < m->nhists && strcmp(m->names[i], name) != 0)
		i++;
	if (i == m->nhists) {
		if (m->nhists == MAX_HISTS || mqc_hist_init(&m->hists[i], (unsigned)bits->valuedouble)) {
			fprintf(stderr, "mqbench merge: %s: cannot take histogram '%s'\n", path, name);
			return -1;
		}
		snprintf(m->names[i], sizeof m->names[i], "%s", name);
		m->nhists++;
	}
	struct mqc_hist one;
	if (bench_hist_from_json(h, &one) != 0) {
		fprintf(stderr, "mqbench merge: %s: bad buckets in '%s'\n", path, name);
		return -1;
	}
	int rc = mqc_hist_merge(&m->hists[i], &one);
	mqc_hist_free(&one);
	if (rc != 0)
		fprintf(stderr, "mqbench merge: %s: '%s' has another resolution\n", path, name);
	return rc;
}

static int add_file(struct merged *m, const char *path)
{
	char *text = bench_slurp(path);
	if (!text) {
		fprintf(stderr, "mqbench merge: cannot read %s\n", path);
		return -1;
	}
	cJSON *doc = cJSON_Parse(text);
	free(text);
	const cJSON *scenario = cJSON_GetObjectItem(doc, "scenario");
	const cJSON *counts = cJSON_GetObjectItem(doc, "counts");
	const cJSON *latency = cJSON_GetObjectItem(doc, "latency");
	if (!cJSON_IsString(scenario) || !cJSON_IsObject(counts) || !cJSON_IsObject(latency)) {
		fprintf(stderr, "mqbench merge: %s is not an mqbench --json result\n", path);
		cJSON_Delete(doc);
		return -1;
	}
	if (m->runs && strcmp(m->scenario, scenario->valuestring) != 0) {
		fprintf(stderr, "mqbench merge: %s is a %s result, the others are %s\n", path,
		    scenario->valuestring, m->scenario);
		cJSON_Delete(doc);
		return -1;
	}
	snprintf(m->scenario, sizeof m->scenario, "%s", scenario->valuestring);
	if (!m->counts)
		m->counts = cJSON_CreateObject();
	const cJSON *c;
	cJSON_ArrayForEach(c, counts)
	{
		cJSON *mine = cJSON_GetObjectItem(m->counts, c->string);
		if (cJSON_IsNumber(c)) {
			if (!mine)
				cJSON_AddNumberToObject(m->counts, c->string, c->valuedouble);
			else
				cJSON_SetNumberValue(mine, mine->valuedouble + c->valuedouble);
		} else if (cJSON_IsBool(c)) {
			bool v = cJSON_IsTrue(c) || cJSON_IsTrue(mine);
			if (mine)
				cJSON_DeleteItemFromObject(m->counts, c->string);
			cJSON_AddBoolToObject(m->counts, c->string, v);
		}
	}
	const cJSON *l;
	int rc = 0;
	cJSON_ArrayForEach(l, latency)
	{
		if (rc == 0)
			rc = add_hist(m, l->string, cJSON_GetObjectItem(l, "hist"), path);
	}
	cJSON_Delete(doc);
	m->runs++;
	return rc;
}

int bench_merge(int argc, char **argv)
{
	bool json = false;
	struct merged m = { 0 };
	int files = 0, rc = 0;
	for (int i = 1; i < argc && rc == 0; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("Usage: mqbench merge [--json] RESULT.json...\n"
			       "Combine --json results of one scenario from several processes or machines:\n"
			       "counts are added, latency histograms merged bucket by bucket.\n");
			return 0;
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "mqbench merge: unknown option '%s' (see --help)\n", argv[i]);
			return 2;
		} else {
			files++;
			if (add_file(&m, argv[i]) != 0)
				rc = 1;
		}
	}
	if (files == 0) {
		fprintf(stderr, "mqbench merge: no result files given (see --help)\n");
		return 2;
	}
	if (rc == 0 && json) {
		printf("{\"scenario\":\"%s\",\"merged\":%d,\"counts\":", m.scenario, m.runs);
		char *counts = cJSON_PrintUnformatted(m.counts);
		fputs(counts, stdout);
		free(counts);
		printf(",\"latency\":{");
		for (int i = 0; i < m.nhists; i++) {
			if (i)
				putchar(',');
			bench_json_hist(stdout, m.names[i], &m.hists[i]);
		}
		printf("}}\n");
	} else if (rc == 0) {
		printf("%s: %d results merged\ncounts:", m.scenario, m.runs);
		const cJSON *c;
		cJSON_ArrayForEach(c, m.counts)
		{
			if (cJSON_IsNumber(c))
				printf(" %s %.0f", c->string, c->valuedouble);
			else if (cJSON_IsTrue(c))
				printf(" %s", c->string);
		}
		printf("\n");
		for (int i = 0; i < m.nhists; i++) {
			char label[64];
			snprintf(label, sizeof label, "%s:", m.names[i]);
			bench_print_latency(stdout, label, &m.hists[i]);
		}
	}
	for (int i = 0; i < m.nhists; i++)
		mqc_hist_free(&m.hists[i]);
	cJSON_Delete(m.counts);
	return rc;
}
