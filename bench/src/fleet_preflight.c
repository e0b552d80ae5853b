/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet_preflight.c - what a fleet checks before its first connection: the broker's address,
 * --source addresses, and whether the descriptors, the local ports (TIME_WAIT included) and the
 * broker's own file limit allow the run, said before it starts rather than as failures after.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "fleet.h"
#include "mqbench.h"

int fleet_resolve(struct fleet *r)
{
	const struct mqc_cli_conn *net = &r->o->net;
	r->naddr = (unsigned)(net->n_nodes ? net->n_nodes : 1);
	for (unsigned i = 0; i < r->naddr; i++) {
		const struct mqc_url *u = net->n_nodes ? &net->nodes[i] : &net->conn.url;
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		char port[16];
		snprintf(port, sizeof port, "%d", u->port);
		int rc = getaddrinfo(u->host, port, &hints, &res);
		if (rc != 0) {
			fprintf(stderr, "mqbench: cannot resolve %s: %s\n", u->host, gai_strerror(rc));
			return -1;
		}
		memcpy(&r->addr[i], res->ai_addr, res->ai_addrlen);
		r->addrlen[i] = res->ai_addrlen;
		freeaddrinfo(res);
	}
	return 0;
}

int bench_parse_sources(const char *spec, struct in_addr **out, unsigned *count)
{
	char first[32], last[32];
	const char *dash = strchr(spec, '-');
	size_t n = dash ? (size_t)(dash - spec) : strlen(spec);
	struct in_addr a, b;
	if (n >= sizeof first || strlen(dash ? dash + 1 : spec) >= sizeof last)
		goto bad;
	memcpy(first, spec, n);
	first[n] = '\0';
	snprintf(last, sizeof last, "%s", dash ? dash + 1 : spec);
	if (inet_pton(AF_INET, first, &a) != 1 || inet_pton(AF_INET, last, &b) != 1
	    || ntohl(b.s_addr) < ntohl(a.s_addr) || ntohl(b.s_addr) - ntohl(a.s_addr) > 1023)
		goto bad;
	*count = ntohl(b.s_addr) - ntohl(a.s_addr) + 1;
	if (out) {
		*out = calloc(*count, sizeof **out);
		if (!*out)
			return -1;
		for (unsigned i = 0; i < *count; i++)
			(*out)[i].s_addr = htonl(ntohl(a.s_addr) + i);
	}
	return 0;
bad:
	fprintf(stderr,
	    "mqbench: --source: expected A.B.C.D-E.F.G.H (at most 1024 addresses), got '%s'\n", spec);
	return -1;
}

int bench_preflight(const struct bench_opts *o, uint64_t connections, uint64_t time_wait,
    unsigned processes, unsigned nsources)
{
	int rc = 0;
	uint64_t per_process = (connections + processes - 1) / processes;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (per_process + 32 > rl.rlim_cur) {
		fprintf(stderr,
		    "mqbench: %llu connections in %u process%s need %llu file descriptors each; the limit "
		    "here is %llu (ulimit -n): use --processes %llu or more\n",
		    (unsigned long long)connections, processes, processes == 1 ? "" : "es",
		    (unsigned long long)per_process + 32, (unsigned long long)rl.rlim_cur,
		    (unsigned long long)((connections + rl.rlim_cur - 33)
		        / (rl.rlim_cur > 32 ? rl.rlim_cur - 32 : 1)));
		rc = -1;
	}
	unsigned lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = 32768, hi = 60999;
		fclose(f);
	}
	uint64_t ports = (uint64_t)(hi - lo + 1) * (nsources ? nsources : 1);
	unsigned long tw = 0;
	f = fopen("/proc/net/sockstat", "r");
	if (f) {
		char line[256];
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "TCP: inuse %*u orphan %*u tw %lu", &tw) == 1)
				break;
		fclose(f);
	}
	if (connections > ports) {
		fprintf(stderr,
		    "mqbench: %llu connections to one address need more than the %llu local ports "
		    "available (%u-%u x %u source addresses); add --source addresses\n",
		    (unsigned long long)connections, (unsigned long long)ports, lo, hi,
		    nsources ? nsources : 1);
		rc = -1;
	} else if (time_wait && connections + time_wait + tw > ports) {
		/* Churn: the client closes first, so each cycle's port waits 60 s in TIME_WAIT. */
		fprintf(stderr,
		    "mqbench: warning: churn leaves each closed connection's port in TIME_WAIT for 60 s: "
		    "about %llu at once here (and %lu now), more than the %llu local ports (%u-%u x %u "
		    "source addresses); past them connects fail with eaddrnotavail unless the kernel "
		    "reuses them (net.ipv4.tcp_tw_reuse: loopback only by default); add --source "
		    "addresses\n",
		    (unsigned long long)time_wait, tw, (unsigned long long)ports, lo, hi,
		    nsources ? nsources : 1);
	} else if (connections + tw > ports) {
		fprintf(stderr,
		    "mqbench: warning: %lu sockets in TIME_WAIT and %llu new connections may exhaust "
		    "%llu local ports; wait a minute or add --source addresses\n",
		    tw, (unsigned long long)connections, (unsigned long long)ports);
	}
	/* The broker's own limit: a broker started from a wrapper as root may get 1,024 files, and
	 * then every connection past it looks like a slow broker (timeouts), not a limit. */
	unsigned long long broker_files;
	unsigned long open_now;
	if (o->broker_pid && bench_proc_files(o->broker_pid, &broker_files, &open_now)
	    && connections + open_now > broker_files)
		fprintf(stderr,
		    "mqbench: warning: the broker (pid %d) may open %llu files and has %lu open: %llu "
		    "more connections pass its limit, and those past it will time out or be closed "
		    "(raise the broker's LimitNOFILE / ulimit -n)\n",
		    (int)o->broker_pid, broker_files, open_now, (unsigned long long)connections);
	return rc;
}
