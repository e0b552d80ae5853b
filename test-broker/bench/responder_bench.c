/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * responder_bench - how many requests per second the responder answers on this machine.
 *
 * Starts a test broker and a responder, then keeps a window of v5 requests in flight from one
 * client (each reply releases the next request) for a fixed time, and prints replies per second
 * and the CPU time the responder and the broker used per request. A benchmark: prints numbers,
 * asserts nothing.
 *
 * Usage: responder_bench [seconds (default 5)] [window (default 64)]
 */
#define _GNU_SOURCE
#include <mqtt_protocol.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_strutil.h"
#include "tb_broker.h"
#include "tb_client.h"
#include "tb_internal.h"

static double cpu_seconds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char buf[1024];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	unsigned long utime = 0, stime = 0;
	/* fields after the command: state(3) ... utime(14) stime(15) */
	if (!p
	    || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime)
	        != 2)
		return -1;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static int publish_request(struct tb_client *c, unsigned seq)
{
	mosquitto_property *p = NULL;
	mosquitto_property_add_string(&p, MQTT_PROP_RESPONSE_TOPIC, "bench/inbox");
	mosquitto_property_add_binary(&p, MQTT_PROP_CORRELATION_DATA, &seq, sizeof seq);
	int rc
	    = tb_client_publish(c, "devices/bench/commands/ping", "0123456789abcdef", 16, 0, false, p);
	mosquitto_property_free_all(&p);
	return rc;
}

int main(int argc, char **argv)
{
	double seconds = 5;
	uint64_t window_u = 64;
	if ((argc > 1 && mqc_parse_double(argv[1], 0.1, 3600, &seconds) != 0)
	    || (argc > 2 && mqc_parse_u64(argv[2], 1, 100000, &window_u) != 0) || argc > 3) {
		fprintf(stderr, "usage: responder_bench [seconds] [window]\n");
		return 2;
	}
	int window = (int)window_u;
	struct tb_options opt = { .no_tls = true, .no_probe = true };
	struct tb_broker *broker;
	char err[512];
	if (tb_broker_start(&opt, &broker, err, sizeof err) != 0) {
		fprintf(stderr, "responder_bench: %s\n", err);
		return 1;
	}
	const struct tb_info *info = tb_broker_info(broker);
	char log[] = "/tmp/responder-bench-XXXXXX";
	close(mkstemp(log));
	char *args[] = { strdup(RESPONDER_PATH), strdup("--broker"), strdup(info->mqtt_url),
		strdup("--username"), strdup(info->username), strdup("--password"), strdup(info->password),
		NULL };
	pid_t responder = tb__spawn(args, log, NULL, err, sizeof err);
	for (char **a = args; *a; a++)
		free(*a);
	struct tb_client_options co
	    = { .url = info->mqtt_url, .username = info->username, .password = info->password };
	struct tb_client *c = NULL;
	int reason;
	int rc = 1;
	if (responder < 0 || tb_client_connect(&co, &c, &reason, err, sizeof err) != 0) {
		fprintf(stderr, "responder_bench: %s\n", err);
		goto out;
	}
	tb_client_subscribe(c, "bench/inbox", 0, 0, NULL);
	/* Wait until the responder answers. */
	struct tb_message *m = NULL;
	for (int i = 0; i < 100 && !m; i++) {
		publish_request(c, 0);
		m = tb_client_receive(c, 50);
	}
	if (!m) {
		fprintf(stderr, "responder_bench: the responder never answered\n");
		goto out;
	}
	tb_message_free(m);
	while ((m = tb_client_receive(c, 200)))
		tb_message_free(m);

	double responder_cpu0 = cpu_seconds(responder), broker_cpu0 = cpu_seconds(info->pid);
	uint64_t start = mqc_now_ns(), end = start + (uint64_t)(seconds * 1e9);
	unsigned long sent = 0, replies = 0;
	for (; sent < (unsigned long)window; sent++)
		publish_request(c, (unsigned)sent);
	while (mqc_now_ns() < end) {
		m = tb_client_receive(c, 1000);
		if (!m)
			break;
		tb_message_free(m);
		replies++;
		publish_request(c, (unsigned)sent++);
	}
	uint64_t elapsed = mqc_now_ns() - start;
	double responder_cpu = cpu_seconds(responder) - responder_cpu0;
	double broker_cpu = cpu_seconds(info->pid) - broker_cpu0;
	double rate = (double)replies / ((double)elapsed / 1e9);
	printf("responder_bench: window %d, %.1f s: %lu replies, %.0f requests/s\n", window,
	    (double)elapsed / 1e9, replies, rate);
	printf("responder_bench: CPU per request: responder %.1f us, broker %.1f us "
	       "(broker handles request and reply)\n",
	    responder_cpu / (double)replies * 1e6, broker_cpu / (double)replies * 1e6);
	rc = 0;
out:
	tb_client_destroy(c);
	if (responder > 0)
		tb__terminate(responder, 2000);
	unlink(log);
	tb_broker_stop(broker);
	return rc;
}
