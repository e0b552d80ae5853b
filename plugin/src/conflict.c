/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conflict.c - the probe's HTTP address against everything else that may want it.
 *
 * Two checks, both at load, both so that the probe never quietly takes a port:
 * - the broker's own configuration: mosquitto initialises plugins before it opens its listeners,
 *   so a probe on the address of a listener would win the port. mosquitto 2.1 then loses its
 *   http_api listener without a word (http_api__start's result is not checked). The listeners
 *   are read from the file given with -c (and its include_dir files), and an overlap refuses the
 *   load with both lines named.
 * - a bind that fails anyway: the process that holds the port, from /proc/net/tcp{,6} and the
 *   descriptors under /proc/PID/fd.
 *
 * Nothing here runs after load; it reads files only, with bounded sizes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"

enum { INCLUDE_DEPTH_MAX = 4, PROC_SCAN_MAX = 32768, INODES_MAX = 16 };

struct reader {
	struct probe_listener *out;
	int max, count;
	struct probe_listener *current; /* the last listener: protocol lines apply to it */
	struct probe_listener deflt;    /* the deprecated `port`/`bind_address` default listener */
	bool has_default;
	struct probe_conf_line *option;    /* where plugin_opt_http_listen was, if asked */
	struct probe_queue_limits *limits; /* the queue limits, if asked */
};

static char *next_token(char **s)
{
	char *p = *s;
	while (*p && isspace((unsigned char)*p))
		p++;
	if (!*p)
		return NULL;
	char *start = p;
	while (*p && !isspace((unsigned char)*p))
		p++;
	if (*p)
		*p++ = '\0';
	*s = p;
	return start;
}

static void set_where(struct probe_conf_line *w, const char *file, int line)
{
	snprintf(w->file, sizeof w->file, "%s", file);
	w->line = line;
}

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_file(struct reader *r, const char *path, int depth);

/* mosquitto reads the *.conf files of an include_dir in sorted order, where the line stands. */
static void read_dir(struct reader *r, const char *dir, int depth)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char *names[256];
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < sizeof names / sizeof names[0]) {
		size_t len = strlen(e->d_name);
		if (len > 5 && strcmp(e->d_name + len - 5, ".conf") == 0)
			if ((names[n] = strdup(e->d_name)))
				n++;
	}
	closedir(d);
	qsort(names, n, sizeof names[0], compare_names);
	for (size_t i = 0; i < n; i++) {
		char path[PATH_MAX];
		if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path)
			read_file(r, path, depth + 1);
		free(names[i]);
	}
}

static void read_line(struct reader *r, char *text, const char *path, int lineno, int depth)
{
	char *s = text;
	char *key = next_token(&s);
	if (!key || key[0] == '#')
		return;
	if (strcmp(key, "listener") == 0) {
		char *port = next_token(&s), *host = next_token(&s);
		r->current = NULL;
		if (!port || r->count == r->max)
			return;
		struct probe_listener *l = &r->out[r->count++];
		*l = (struct probe_listener) { .port = atoi(port) };
		snprintf(l->protocol, sizeof l->protocol, "mqtt");
		if (host)
			snprintf(l->host, sizeof l->host, "%s", host);
		set_where(&l->where, path, lineno);
		r->current = l;
	} else if (strcmp(key, "protocol") == 0) {
		char *p = next_token(&s);
		if (p && r->current) {
			snprintf(r->current->protocol, sizeof r->current->protocol, "%s", p);
			set_where(&r->current->protocol_where, path, lineno);
		}
	} else if (strcmp(key, "port") == 0 || strcmp(key, "bind_address") == 0) {
		char *v = next_token(&s);
		if (!v)
			return;
		if (!r->has_default) {
			r->has_default = true;
			r->deflt = (struct probe_listener) { .port = 1883 };
			snprintf(r->deflt.protocol, sizeof r->deflt.protocol, "mqtt");
		}
		if (key[0] == 'p') {
			r->deflt.port = atoi(v);
			set_where(&r->deflt.where, path, lineno);
		} else {
			snprintf(r->deflt.host, sizeof r->deflt.host, "%s", v);
			if (!r->deflt.where.line)
				set_where(&r->deflt.where, path, lineno);
		}
	} else if (strcmp(key, "include_dir") == 0) {
		char *dir = next_token(&s);
		if (dir && depth < INCLUDE_DEPTH_MAX)
			read_dir(r, dir, depth);
	} else if (r->limits
	    && (strcmp(key, "max_queued_messages") == 0 || strcmp(key, "max_inflight_messages") == 0
	        || strcmp(key, "max_queued_bytes") == 0)) {
		char *v = next_token(&s);
		if (!v)
			return;
		long n = strtol(v, NULL, 10); /* the last line wins, as in mosquitto */
		if (key[4] == 'i')
			r->limits->max_inflight_messages = n;
		else if (strcmp(key, "max_queued_bytes") == 0)
			r->limits->max_queued_bytes = n;
		else
			r->limits->max_queued_messages = n;
		r->limits->found = true;
	} else if (r->option && !r->option->line && strcmp(key, "plugin_opt_http_listen") == 0) {
		set_where(r->option, path, lineno);
	}
}

static int read_file(struct reader *r, const char *path, int depth)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char text[1024];
	int lineno = 0;
	while (fgets(text, sizeof text, f)) {
		lineno++;
		size_t len = strlen(text);
		bool whole = len && text[len - 1] == '\n';
		read_line(r, text, path, lineno, depth);
		while (!whole && fgets(text, sizeof text, f)) /* past 1 KiB: the rest is not ours */
			whole = text[strlen(text) - 1] == '\n';
	}
	fclose(f);
	return 0;
}

int probe_conf__read(
    const char *path, struct probe_listener *out, int max, struct probe_conf_line *option)
{
	struct reader r = { .out = out, .max = max, .option = option };
	if (option)
		*option = (struct probe_conf_line) { 0 };
	if (read_file(&r, path, 0) != 0)
		return -1;
	if (r.has_default && r.count < r.max)
		out[r.count++] = r.deflt;
	return r.count;
}

int probe_conf__queue_limits(const char *path, struct probe_queue_limits *out)
{
	*out = (struct probe_queue_limits) { .max_queued_messages = 1000, .max_inflight_messages = 20 };
	if (!path)
		return -1;
	struct probe_listener none;
	struct reader r = { .out = &none, .max = 0, .limits = out };
	return read_file(&r, path, 0);
}

bool probe_conf__path(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/cmdline", "re");
	if (!f)
		return false;
	char cmd[4096];
	size_t n = fread(cmd, 1, sizeof cmd - 1, f);
	fclose(f);
	cmd[n] = '\0';
	bool next = false;
	for (size_t i = 0; i < n; i += strlen(cmd + i) + 1) {
		const char *arg = cmd + i;
		if (next) {
			snprintf(buf, len, "%s", arg);
			return true;
		}
		next = strcmp(arg, "-c") == 0 || strcmp(arg, "--config-file") == 0;
	}
	return false;
}

/* The addresses a listener's host names; none (wildcard) when it has no host. */
static int host_addresses(const char *host, struct sockaddr_storage *out, int max)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct addrinfo *res;
	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return 0;
	int n = 0;
	for (struct addrinfo *a = res; a && n < max; a = a->ai_next)
		if (a->ai_addrlen <= sizeof out[0])
			memcpy(&out[n++], a->ai_addr, a->ai_addrlen);
	freeaddrinfo(res);
	return n;
}

static bool is_wildcard(const char *numeric)
{
	return strcmp(numeric, "0.0.0.0") == 0 || strcmp(numeric, "::") == 0;
}

bool probe_conf__overlaps(const struct probe_listener *l, const char *host, int port)
{
	if (l->port != port || port == 0)
		return false;
	if (!l->host[0] || is_wildcard(host) || is_wildcard(l->host))
		return true; /* a wildcard on either side takes every address of the port */
	unsigned char want[16];
	int family = inet_pton(AF_INET, host, want) == 1 ? AF_INET : AF_INET6;
	if (family == AF_INET6 && inet_pton(AF_INET6, host, want) != 1)
		return false;
	struct sockaddr_storage addrs[8];
	int n = host_addresses(l->host, addrs, 8);
	for (int i = 0; i < n; i++) {
		if (addrs[i].ss_family != family)
			continue;
		const void *a = family == AF_INET
		    ? (const void *)&((struct sockaddr_in *)&addrs[i])->sin_addr
		    : (const void *)&((struct sockaddr_in6 *)&addrs[i])->sin6_addr;
		if (memcmp(a, want, family == AF_INET ? 4 : 16) == 0)
			return true;
	}
	return false;
}

static void describe_line(const struct probe_conf_line *w, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%d", w->file, w->line);
}

bool probe_conf__conflict(
    const char *conf_path, const char *host, int port, bool option_given, char *err, size_t errlen)
{
	struct probe_listener ls[64];
	struct probe_conf_line option;
	int n = probe_conf__read(conf_path, ls, 64, &option);
	for (int i = 0; i < n; i++) {
		const struct probe_listener *l = &ls[i];
		if (!probe_conf__overlaps(l, host, port))
			continue;
		char probe_at[PATH_MAX + 96], listener_at[PATH_MAX + 16], proto_at[PATH_MAX + 64] = "";
		if (option_given && option.line)
			describe_line(&option, probe_at, sizeof probe_at);
		else
			snprintf(probe_at, sizeof probe_at,
			    option_given ? "its plugin options"
			                 : "the probe's default: no plugin_opt_http_listen line");
		describe_line(&l->where, listener_at, sizeof listener_at);
		if (l->protocol_where.line) {
			char at[PATH_MAX + 16];
			describe_line(&l->protocol_where, at, sizeof at);
			snprintf(proto_at, sizeof proto_at, " with 'protocol %s' (%s)", l->protocol, at);
		}
		bool api = strcmp(l->protocol, "http_api") == 0;
		snprintf(err, errlen,
		    "plugin_opt_http_listen %s:%d (%s) is the address of the broker's 'listener %d%s%s' "
		    "(%s)%s%s; give the probe another port (its default is %s)",
		    host, port, probe_at, l->port, l->host[0] ? " " : "", l->host, listener_at, proto_at,
		    api ? ": the probe would take the port and mosquitto 2.1 would lose its HTTP API "
		          "without a word"
		        : "",
		    PROBE_DEFAULT_HTTP);
		return true;
	}
	return false;
}

/* --- who holds a port --------------------------------------------------------------------- */

/* Inodes of the listening sockets on port in one /proc/net/tcp* file. */
static int listening_inodes(const char *table, int port, unsigned long *inodes, int n, int max)
{
	FILE *f = fopen(table, "re");
	if (!f)
		return n;
	char line[512];
	if (!fgets(line, sizeof line, f)) { /* the header */
		fclose(f);
		return n;
	}
	while (n < max && fgets(line, sizeof line, f)) {
		char local[64], remote[64];
		unsigned state;
		unsigned long inode;
		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, "%*s %63s %63s %x %*s %*s %*s %*s %*s %lu", local, remote, &state, &inode)
		    != 4)
			continue;
		const char *colon = strrchr(local, ':');
		if (state == 0x0A && colon && strtol(colon + 1, NULL, 16) == port)
			inodes[n++] = inode;
	}
	fclose(f);
	return n;
}

static bool pid_has_socket(const char *pid, const unsigned long *inodes, int n)
{
	char dir[sizeof "/proc//fd" + NAME_MAX];
	snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		char path[sizeof dir + sizeof e->d_name + 1], target[64];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		ssize_t len = readlink(path, target, sizeof target - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		unsigned long inode;
		if (sscanf(target, "socket:[%lu]", &inode) != 1)
			continue;
		for (int i = 0; i < n && !found; i++)
			found = inodes[i] == inode;
	}
	closedir(d);
	return found;
}

void probe_port__holder(int port, char *out, size_t len)
{
	unsigned long inodes[INODES_MAX];
	int n = listening_inodes("/proc/net/tcp", port, inodes, 0, INODES_MAX);
	n = listening_inodes("/proc/net/tcp6", port, inodes, n, INODES_MAX);
	if (n == 0) {
		snprintf(out, len, "no socket listens on port %d in this network namespace now", port);
		return;
	}
	DIR *d = opendir("/proc");
	struct dirent *e;
	int scanned = 0;
	while (d && (e = readdir(d)) && scanned++ < PROC_SCAN_MAX) {
		if (!isdigit((unsigned char)e->d_name[0]) || !pid_has_socket(e->d_name, inodes, n))
			continue;
		long pid = strtol(e->d_name, NULL, 10); /* before closedir: e lives in d */
		closedir(d);
		if (pid == (long)getpid()) {
			snprintf(out, len, "held by this broker process itself (pid %ld)", pid);
			return;
		}
		char path[64], comm[64] = "?";
		snprintf(path, sizeof path, "/proc/%ld/comm", pid);
		FILE *f = fopen(path, "re");
		if (f) {
			if (fgets(comm, sizeof comm, f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		snprintf(out, len, "held by pid %ld (%s)", pid, comm);
		return;
	}
	if (d)
		closedir(d);
	snprintf(out, len,
	    "a socket listens on port %d (inode %lu) but no process this user may inspect holds it",
	    port, inodes[0]);
}
