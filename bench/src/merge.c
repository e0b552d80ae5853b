/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * merge.c - `mqbench merge a.json b.json ...`: one result from several processes or machines.
 *
 * Any scenario. The results must be of one scenario and, unless --force, have equal settings.
 * The body merges field by field: counts are added, latency histograms are merged bucket by bucket
 * (so the merged percentiles are those of all samples together, never an average of
 * percentiles), booleans are OR-ed, and durations take the longest. What every pod reads from the
 * same broker (the probe's counts, the broker's CPU and memory) cannot be added and is left out,
 * as are per-second timelines, ratios and each process's own descriptors and memory. Arrays of
 * objects (reconnect storms) are merged element by element: every process's n-th storm is the
 * same loss of the broker.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqbench.h"

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
			if (!grown)
				free(buf);
			buf = grown;
		}
	}
	fclose(f);
	if (buf)
		buf[len] = '\0';
	return buf;
}

/* Fields of a result that the merge does not add up. */
static const char *const header_keys[] = { "format", "format_version", "mqbench_version", "date",
	"label", "scenario", "broker", "settings", "config", "run_id", "clock", "merged", NULL };
static const char *const dropped_keys[] = { "probe", "broker_usage", "timeline", "cpu_seconds",
	"routing_checks_per_message", "sources", "mqbench_usage", NULL };
static const char *const longest_keys[] = { "elapsed_ns", NULL };
/* Rates recomputed from merged counts would need a common time base: added (pods run together). */

static bool listed(const char *key, const char *const *list)
{
	for (; key && *list; list++)
		if (strcmp(key, *list) == 0)
			return true;
	return false;
}

static bool is_latency(const cJSON *item)
{
	return cJSON_IsObject(item) && cJSON_IsObject(cJSON_GetObjectItem(item, "hist"));
}

/* A latency object (bench_latency_json) from its "hist"; NULL with a message when malformed. */
static cJSON *latency_of(const cJSON *item, const char *path, const char *key)
{
	struct mqc_hist h;
	if (bench_hist_from_json(cJSON_GetObjectItem(item, "hist"), &h) != 0) {
		fprintf(stderr, "mqbench merge: %s: histogram '%s' is malformed\n", path, key);
		return NULL;
	}
	cJSON *l = bench_latency_json(&h);
	mqc_hist_free(&h);
	return l;
}

static int merge_latency(cJSON *acc, const char *key, const cJSON *item, const char *path)
{
	cJSON *mine = cJSON_GetObjectItem(acc, key);
	struct mqc_hist a, b;
	if (bench_hist_from_json(cJSON_GetObjectItem(mine, "hist"), &a) != 0)
		return -1; /* checked when it was taken */
	if (bench_hist_from_json(cJSON_GetObjectItem(item, "hist"), &b) != 0) {
		mqc_hist_free(&a);
		fprintf(stderr, "mqbench merge: %s: histogram '%s' is malformed\n", path, key);
		return -1;
	}
	int rc = mqc_hist_merge(&a, &b);
	if (rc != 0)
		fprintf(stderr, "mqbench merge: %s: histogram '%s' has another resolution\n", path, key);
	else
		cJSON_ReplaceItemInObject(acc, key, bench_latency_json(&a));
	mqc_hist_free(&a);
	mqc_hist_free(&b);
	return rc;
}

/* Merge the fields of x into acc (both objects), recursively. */
static int merge_into(cJSON *acc, const cJSON *x, const char *path, bool top)
{
	const cJSON *item;
	cJSON_ArrayForEach(item, x)
	{
		const char *key = item->string;
		if ((top && listed(key, header_keys)) || listed(key, dropped_keys))
			continue;
		cJSON *mine = cJSON_GetObjectItem(acc, key);
		int rc = 0;
		if (is_latency(item)) {
			if (!mine) {
				cJSON *l = latency_of(item, path, key);
				rc = l ? (cJSON_AddItemToObject(acc, key, l), 0) : -1;
			} else {
				rc = merge_latency(acc, key, item, path);
			}
		} else if (cJSON_IsObject(item)) {
			if (!mine)
				mine = cJSON_AddObjectToObject(acc, key);
			rc = cJSON_IsObject(mine) ? merge_into(mine, item, path, false) : -1;
		} else if (cJSON_IsArray(item)) {
			/* Reconnect storms: the n-th of every process together (they lost the same broker). */
			if (!mine)
				mine = cJSON_AddArrayToObject(acc, key);
			const cJSON *el;
			int n = 0;
			cJSON_ArrayForEach(el, item)
			{
				if (!cJSON_IsObject(el))
					continue;
				cJSON *slot = cJSON_GetArrayItem(mine, n++);
				if (!slot) {
					slot = cJSON_CreateObject();
					cJSON_AddItemToArray(mine, slot);
				}
				if ((rc = merge_into(slot, el, path, false)) != 0)
					break;
			}
		} else if (cJSON_IsNumber(item)) {
			if (!mine)
				cJSON_AddNumberToObject(acc, key, item->valuedouble);
			else if (listed(key, longest_keys))
				cJSON_SetNumberValue(mine,
				    mine->valuedouble > item->valuedouble ? mine->valuedouble : item->valuedouble);
			else
				cJSON_SetNumberValue(mine, mine->valuedouble + item->valuedouble);
		} else if (cJSON_IsBool(item)) {
			bool v = cJSON_IsTrue(item) || cJSON_IsTrue(mine);
			cJSON_DeleteItemFromObject(acc, key);
			cJSON_AddBoolToObject(acc, key, v);
		} else if (cJSON_IsString(item) && !mine) {
			cJSON_AddStringToObject(acc, key, item->valuestring); /* e.g. a CONNACK reason */
		}
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The settings of a result (format 1 called them "config"). */
static const cJSON *settings_of(const cJSON *doc)
{
	const cJSON *s = cJSON_GetObjectItem(doc, "settings");
	return s ? s : cJSON_GetObjectItem(doc, "config");
}

/* The first setting that differs between a and b, in buf ("rate 1000 against 2000"). */
static const char *first_difference(const cJSON *a, const cJSON *b, char *buf, size_t len)
{
	const cJSON *x;
	cJSON_ArrayForEach(x, a)
	{
		const cJSON *y = cJSON_GetObjectItem(b, x->string);
		if (!y || !cJSON_Compare(x, y, true)) {
			char *xs = cJSON_PrintUnformatted(x), *ys = y ? cJSON_PrintUnformatted(y) : NULL;
			snprintf(buf, len, "%s %s against %s", x->string, xs ? xs : "?", ys ? ys : "none");
			free(xs);
			free(ys);
			return buf;
		}
	}
	cJSON_ArrayForEach(x, b)
	{
		if (!cJSON_GetObjectItem(a, x->string)) {
			snprintf(buf, len, "%s only in one of them", x->string);
			return buf;
		}
	}
	return NULL;
}

struct merged {
	cJSON *out;      /* the merged result */
	cJSON *settings; /* the first result's */
	char scenario[32];
	char labels[256];
	int runs;
	bool force, settings_differ;
};

static int add_file(struct merged *m, const char *path)
{
	char *text = bench_slurp(path);
	if (!text) {
		fprintf(stderr, "mqbench merge: cannot read %s\n", path);
		return -1;
	}
	cJSON *doc = cJSON_Parse(text);
	free(text);
	/* Format 1 kept the drain deadline among the counts: a setting, not added up (format 2 keeps
	 * it in "settings"). */
	cJSON *config = cJSON_GetObjectItem(doc, "config");
	cJSON *drain = cJSON_DetachItemFromObject(cJSON_GetObjectItem(doc, "counts"), "drain_ns");
	if (drain && cJSON_IsObject(config) && !cJSON_GetObjectItem(doc, "settings"))
		cJSON_AddItemToObject(config, "drain_ns", drain);
	else if (drain)
		cJSON_AddItemToObject(cJSON_GetObjectItem(doc, "counts"), "drain_ns", drain);
	const char *scenario = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "scenario"));
	const cJSON *settings = settings_of(doc);
	if (!scenario || !cJSON_IsObject(settings)) {
		fprintf(stderr, "mqbench merge: %s is not an mqbench --json result\n", path);
		cJSON_Delete(doc);
		return -1;
	}
	if (m->runs && strcmp(m->scenario, scenario) != 0) {
		fprintf(stderr, "mqbench merge: %s is a %s result, the others are %s\n", path, scenario,
		    m->scenario);
		cJSON_Delete(doc);
		return -1;
	}
	char diff[256];
	if (m->runs && first_difference(m->settings, settings, diff, sizeof diff)) {
		if (!m->force) {
			fprintf(stderr,
			    "mqbench merge: %s was run with other settings (%s): its numbers do not add up "
			    "with the others; --force merges them anyway\n",
			    path, diff);
			cJSON_Delete(doc);
			return -1;
		}
		m->settings_differ = true;
	}
	if (!m->runs) {
		snprintf(m->scenario, sizeof m->scenario, "%s", scenario);
		m->settings = cJSON_Duplicate(settings, true);
		m->out = cJSON_CreateObject();
		const char *broker = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "broker"));
		cJSON_AddStringToObject(m->out, "broker", broker ? broker : "?");
	}
	const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "label"));
	size_t used = strlen(m->labels);
	snprintf(
	    m->labels + used, sizeof m->labels - used, "%s%s", used ? " + " : "", label ? label : path);
	int rc = merge_into(m->out, doc, path, true);
	cJSON_Delete(doc);
	m->runs++;
	return rc;
}

static void print_text(const cJSON *o, const char *indent)
{
	const cJSON *item;
	bool numbers = false;
	cJSON_ArrayForEach(item, o)
	{
		if (!cJSON_IsNumber(item) && !cJSON_IsTrue(item))
			continue;
		printf("%s%s", numbers ? "   " : indent, item->string);
		if (cJSON_IsNumber(item))
			printf(" %.0f", item->valuedouble);
		numbers = true;
	}
	if (numbers)
		printf("\n");
	cJSON_ArrayForEach(item, o)
	{
		if (is_latency(item)) {
			struct mqc_hist h;
			if (bench_hist_from_json(cJSON_GetObjectItem(item, "hist"), &h) == 0) {
				char label[96];
				snprintf(label, sizeof label, "%s%s:", indent, item->string);
				bench_print_latency(stdout, label, &h);
				mqc_hist_free(&h);
			}
		} else if (cJSON_IsObject(item)) {
			char deeper[32];
			printf("%s%s:\n", indent, item->string);
			snprintf(deeper, sizeof deeper, "%s  ", indent);
			print_text(item, deeper);
		}
	}
}

int bench_merge(int argc, char **argv)
{
	bool json = false;
	struct merged m = { 0 };
	int files = 0, rc = 0;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--force") == 0)
			m.force = true;
	for (int i = 1; i < argc && rc == 0; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[i], "--force") == 0) {
			continue; /* taken above: it applies to every file */
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("Usage: mqbench merge [--json] [--force] RESULT.json...\n"
			       "Combine --json results of one scenario (any) from several processes or\n"
			       "machines: counts are added, latency histograms merged bucket by bucket. The\n"
			       "probe's counts and the broker's CPU and memory are left out (every pod reads\n"
			       "the same broker). Results whose settings differ are refused: --force merges\n"
			       "them anyway and marks the result settings_differ.\n");
			cJSON_Delete(m.out);
			cJSON_Delete(m.settings);
			return 0;
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "mqbench merge: unknown option '%s' (see --help)\n", argv[i]);
			rc = 2;
		} else {
			files++;
			if (add_file(&m, argv[i]) != 0)
				rc = 1;
		}
	}
	if (rc == 0 && files == 0) {
		fprintf(stderr, "mqbench merge: no result files given (see --help)\n");
		rc = 2;
	}
	if (rc == 0 && json) {
		/* The common fields, as a run would write them, then the merged body. */
		struct bench_opts none = { .prefix = m.labels, .net.broker = "" };
		cJSON *root = bench_result_new(&none);
		cJSON_ReplaceItemInObject(root, "scenario", cJSON_CreateString(m.scenario));
		cJSON_ReplaceItemInObject(root, "settings", m.settings);
		m.settings = NULL;
		cJSON_AddNumberToObject(root, "merged", m.runs);
		cJSON_AddBoolToObject(root, "settings_differ", m.settings_differ);
		cJSON *item;
		while ((item = m.out->child)) {
			/* cJSON frees the item's own key before copying the one it is given */
			char key[64];
			snprintf(key, sizeof key, "%s", item->string);
			cJSON_DetachItemViaPointer(m.out, item);
			if (cJSON_GetObjectItem(root, key))
				cJSON_ReplaceItemInObject(root, key, item);
			else
				cJSON_AddItemToObject(root, key, item);
		}
		if (bench_result_print(root) != 0)
			rc = 1;
	} else if (rc == 0) {
		printf("%s: %d results merged (%s)%s\n", m.scenario, m.runs, m.labels,
		    m.settings_differ ? "; their settings differ (--force)" : "");
		print_text(m.out, "");
	}
	cJSON_Delete(m.out);
	cJSON_Delete(m.settings);
	return rc;
}
