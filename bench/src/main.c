/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * main.c - mqbench: the command line's first word (a scenario, merge, report, hgrm) and the
 * process-wide setup before any of them runs.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "mqbench.h"

static void usage_main(FILE *out)
{
	fprintf(out,
	    "Usage: mqbench SCENARIO [OPTIONS]   (mqbench SCENARIO --help for its options)\n"
	    "       mqbench --version\n"
	    "An open-loop MQTT load generator: every message and connection has an intended time\n"
	    "on a fixed schedule, latency is measured from it, loss is counted against expected\n"
	    "deliveries.\n\n"
	    "Scenarios:\n"
	    "  connect      open N connections on a schedule, hold them, report connect latency;\n"
	    "               --reconnect: through broker restarts, each reconnect storm reported\n"
	    "  churn        connect, (publish or subscribe once,) disconnect at a fixed rate\n"
	    "  throughput   P publishers at R msg/s each -> S subscribers\n"
	    "  fanout       one publisher -> S subscribers\n"
	    "  request      command/reply through a device: naive, pool and dedicated connections\n"
	    "  merge        combine --json results: mqbench merge a.json b.json ...\n"
	    "  report       an HTML page of --json results: mqbench report a.json ... > r.html\n"
	    "  hgrm         a latency histogram in HdrHistogram's .hgrm text: mqbench hgrm a.json\n\n"
	    "Exit status: 0 success; 1 the run failed (unreachable broker, refused CONNECT, a lost\n"
	    "connection, nothing delivered, loss above --max-loss); 2 bad options; 3 loss above\n"
	    "--max-loss that is all 'not received by the end of the drain' (late or never coming:\n"
	    "no connection was lost).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage_main(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("mqbench %s\n", MQBENCH_VERSION);
		return 0;
	}
	/* A peer that goes away while we write is an error to handle, never the end of the process.
	 * libmosquitto 2.0 ignored SIGPIPE for the whole process; 2.0.15 and later do not, and
	 * OpenSSL writes TLS records with write(2) (mqbench died of it over TLS with 2.1's). */
	signal(SIGPIPE, SIG_IGN);
	/* Wake-ups on the schedule: the default 50 us timer slack would add to every slot's lag. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	/* Before any thread: reading the probe uses libcurl from the scenarios' threads. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "mqbench: curl_global_init failed\n");
		return 1;
	}
	if (strcmp(argv[1], "merge") == 0)
		return bench_merge(argc - 1, argv + 1);
	if (strcmp(argv[1], "hgrm") == 0)
		return bench_hgrm(argc - 1, argv + 1);
	if (strcmp(argv[1], "report") == 0)
		return bench_report(argc - 1, argv + 1);
	for (int sc = 0; sc < SC_COUNT; sc++) {
		if (strcmp(argv[1], bench_scenario_names[sc]) != 0)
			continue;
		struct bench_opts o;
		int rc = bench_parse(argc - 1, argv + 1, (enum bench_scenario)sc, &o);
		if (rc)
			return rc == 1 ? 0 : rc;
		if ((sc == SC_CONNECT || sc == SC_CHURN) && o.processes > 1)
			return bench_run_processes(&o, argc - 1, argv + 1);
		return sc == SC_CONNECT ? bench_run_connect(&o)
		    : sc == SC_CHURN    ? bench_run_churn(&o)
		    : sc == SC_REQUEST  ? bench_run_request(&o)
		                        : bench_run_throughput(&o);
	}
	fprintf(stderr,
	    "mqbench: unknown scenario '%s' (connect, churn, throughput, fanout, request, merge, "
	    "report, hgrm)\n",
	    argv[1]);
	return 2;
}
