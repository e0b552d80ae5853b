/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * probe_overhead - broker throughput with and without the probe, alternated in one run.
 *
 * For each round, starts a fresh broker without the probe, with it, and with it in observe_auth
 * mode, and drives each to saturation: one publisher writes batches of QoS 0 PUBLISH packets
 * (16-byte payloads) as fast as the broker reads them, one MQTT v5 subscriber (so the stamp is
 * encoded on every delivery) counts what arrives. Both are raw-socket clients that cost far less
 * per message than the broker, so the broker is the bottleneck. The broker is pinned to CPU 0 and
 * the clients to CPU 1. Prints deliveries per second per run and the median ratios.
 *
 * The modes take turns at going first: round r runs them from mode r (modulo their number) on,
 * so over as many rounds as there are modes each mode has run in every position once. A fixed
 * order let position pass for cost (a mode always second measured slower than a mode always third
 * that does more). Each ratio is printed with its spread over the rounds, and how many rounds it
 * would take to tell a 3 % difference at that spread.
 *
 * Modes: no probe; counters only; counters and the stamp (the default); the stamp on 1 in 100;
 * observe_auth; and on mosquitto 2.1 (--mosquitto) tx_stamp, where the default also counts
 * deliveries and times each stamped one inside the broker.
 *
 * With --perf DIR, each measured window is also sampled by `perf record -e cpu-clock` on the
 * broker's process, one file a run (DIR/MODE-rROUND.data): plugin/bench/probe_profile.py reads
 * them and says where the broker's time per message went in each mode.
 *
 * Usage: probe_overhead [--rounds N (5)] [--seconds S (3)] [--size BYTES (16)]
 *                       [--mosquitto PATH] [--perf DIR] [--short]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_strutil.h"
#include "tb_broker.h"

enum { BATCH = 256, RXBUF = 1 << 18 };

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	struct sockaddr_in a = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const unsigned char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool send_buf(int fd, struct mqc_buf *b)
{
	bool ok = send_all(fd, b->data + b->off, mqc_buf_live(b));
	mqc_buf_free(b);
	return ok;
}

/* The first packet fd sends, into buf (the socket's 5 s receive timeout bounds the wait). */
static bool read_packet(int fd, unsigned char *buf, size_t cap, struct mqc_packet *pk)
{
	size_t have = 0;
	mqc_malformed why;
	enum mqc_frame_result fr;
	while ((fr = mqc_frame(buf, have, cap, pk, &why)) == MQC_FRAME_MORE && have < cap) {
		ssize_t n = recv(fd, buf + have, cap - have, 0);
		if (n <= 0)
			return false;
		have += (size_t)n;
	}
	return fr == MQC_FRAME_OK;
}

/* CONNECT with credentials, wait for CONNACK 0. Returns the socket or -1. */
static int mqtt_connect(const struct tb_info *i, const char *id, int level)
{
	int fd = dial(i->port);
	if (fd < 0)
		return -1;
	struct mqc_buf out = { 0 };
	unsigned char in[256];
	struct mqc_packet pk;
	struct mqc_connack ack;
	if (mqc_enc_connect(&out,
	        &(struct mqc_connect) { .protocol = level,
	            .client_id = id,
	            .username = i->username,
	            .password = i->password,
	            .keepalive_s = 60 })
	        != MQC_ENC_OK
	    || !send_buf(fd, &out) || !read_packet(fd, in, sizeof in, &pk) || pk.type != MQC_CONNACK
	    || mqc_dec_connack(&pk, level, &ack) != NULL || ack.code != 0) {
		mqc_buf_free(&out);
		close(fd);
		return -1;
	}
	return fd;
}

/* SUBSCRIBE to filter at QoS 0 and wait for a SUBACK that grants it. */
static bool mqtt_subscribe(int fd, int level, const char *filter)
{
	struct mqc_buf out = { 0 };
	unsigned char in[256];
	struct mqc_packet pk;
	struct mqc_suback ack;
	if (mqc_enc_subscribe(&out, level, 1, filter, 0, 0, 0) != MQC_ENC_OK) {
		mqc_buf_free(&out);
		return false;
	}
	return send_buf(fd, &out) && read_packet(fd, in, sizeof in, &pk) && pk.type == MQC_SUBACK
	    && mqc_dec_suback(&pk, level, &ack) == NULL && ack.count == 1 && ack.codes[0] < 0x80;
}

struct run {
	int pub, sub;
	atomic_bool stop;
	atomic_uint_fast64_t delivered, sent;
	size_t size;
};

static void *publisher(void *arg)
{
	struct run *r = arg;
	char payload[1024]; /* --size <= 1024 */
	memset(payload, 'p', r->size);
	struct mqc_buf one = { 0 };
	if (mqc_enc_publish(&one, 4, "bench/flood", 0, false, 0, NULL, payload, r->size)
	    != MQC_ENC_OK) {
		mqc_buf_free(&one);
		return NULL;
	}
	size_t plen = mqc_buf_live(&one);
	unsigned char *batch = malloc(plen * BATCH);
	for (int k = 0; batch && k < BATCH; k++)
		memcpy(batch + (size_t)k * plen, one.data + one.off, plen);
	mqc_buf_free(&one);
	while (batch && !atomic_load(&r->stop)) {
		if (!send_all(r->pub, batch, plen * BATCH))
			break;
		atomic_fetch_add(&r->sent, BATCH);
	}
	free(batch);
	return NULL;
}

static void *subscriber(void *arg)
{
	struct run *r = arg;
	unsigned char *buf = malloc(RXBUF);
	size_t have = 0;
	while (!atomic_load(&r->stop)) {
		ssize_t got = recv(r->sub, buf + have, RXBUF - have, 0);
		if (got <= 0)
			break;
		have += (size_t)got;
		size_t at = 0;
		uint64_t publishes = 0;
		struct mqc_packet pk;
		mqc_malformed why;
		while (mqc_frame(buf + at, have - at, RXBUF, &pk, &why) == MQC_FRAME_OK) {
			publishes += pk.type == MQC_PUBLISH;
			at += pk.size;
		}
		atomic_fetch_add(&r->delivered, publishes);
		memmove(buf, buf + at, have - at);
		have -= at;
	}
	free(buf);
	return NULL;
}

static void pin(pid_t pid, int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(pid, sizeof set, &set);
}

static double cpu_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	unsigned long ut = 0, st = 0;
	const char *p = strrchr(buf, ')');
	if (p)
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static const char *mosquitto_path; /* --mosquitto: another broker binary (2.1) */
static const char *perf_dir;       /* --perf: sample the broker during each window */

/* perf record on pid for seconds into DIR/<mode>-r<round>.data; returns its pid or -1. */
static pid_t perf_start(pid_t pid, const char *name, int round, double seconds)
{
	char out[1024], target[16], dur[32], slug[64];
	size_t k = 0;
	for (const char *c = name; *c && k + 1 < sizeof slug; c++) {
		bool plain = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9');
		slug[k++] = *c;
		if (!plain)
			slug[k - 1] = '_';
	}
	slug[k] = '\0';
	snprintf(out, sizeof out, "%s/%s-r%d.data", perf_dir, slug, round + 1);
	snprintf(target, sizeof target, "%d", (int)pid);
	snprintf(dur, sizeof dur, "%.3f", seconds);
	pid_t child = fork();
	if (child == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		execlp("perf", "perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-p", target, "-o",
		    out, "--", "sleep", dur, (char *)NULL);
		_exit(127);
	}
	return child;
}

/* What each run loads: no probe, or the probe with these options. */
struct mode {
	const char *name;
	const char *opts[3];
	bool no_probe, needs21;
	const char *plugin;  /* another plugin instead of the probe (the floor) */
	double target_pct;   /* the issue's target at full broker speed; < 0: none */
	double target_ratio; /* deliveries/s against no probe, median of paired rounds; 0: none */
};

static const struct mode modes[] = {
	{ "no probe", { NULL }, true, false, NULL, -1, 0 },
	/* a plugin on MESSAGE, DISCONNECT and TICK that does nothing: what the broker's dispatch
	 * costs before the probe does anything */
	{ "a plugin doing nothing", { NULL }, false, false, NOOP_PLUGIN, -1, 0 },
	{ "a plugin doing nothing, a thread waiting", { "thread=true", NULL }, false, false,
	    NOOP_PLUGIN, -1, 0 },
	{ "counters", { "stamp=false", NULL }, false, false, NULL, 3, 0.97 },
	{ "counters+stamp", { NULL }, false, false, NULL, 6, 0.94 }, /* the default */
	{ "counters+stamp 1 in 100", { "stamp_every=100", NULL }, false, false, NULL, -1, 0 },
	{ "counters+stamp+observe_auth", { "observe_auth=true", NULL }, false, false, NULL, 6, 0 },
	/* on 2.1 observe_auth also tracks each client's backlog: the same without it */
	{ "counters+stamp+observe_auth, no backlog", { "observe_auth=true", "backlog_top=0", NULL },
	    false, true, NULL, -1, 0 },
	{ "counters+stamp+tx_stamp", { "tx_stamp=true", NULL }, false, true, NULL, -1, 0 },
};
enum { NMODES = sizeof modes / sizeof modes[0] };

/* Deliveries per second over `seconds` after a 1 s warm-up, or -1. */
static double measure(
    const struct mode *m, int round, double seconds, size_t size, double *backlog, double cpu[2])
{
	struct tb_options o = { .no_tls = true,
		.no_probe = m->no_probe,
		.plugin = m->plugin,
		.plugin_opts = m->opts[0] ? m->opts : NULL,
		.mosquitto = mosquitto_path };
	struct tb_broker *b;
	char err[1024];
	if (tb_broker_start(&o, &b, err, sizeof err) != 0) {
		fprintf(stderr, "probe_overhead: %s\n", err);
		return -1;
	}
	const struct tb_info *i = tb_broker_info(b);
	pin(i->pid, 0);
	struct run r = { .size = size };
	r.sub = mqtt_connect(i, "bench-sub", 5);
	r.pub = mqtt_connect(i, "bench-pub", 4);
	double rate = -1;
	if (r.sub < 0 || r.pub < 0 || !mqtt_subscribe(r.sub, 5, "bench/#")) {
		fprintf(stderr, "probe_overhead: connect/subscribe failed\n");
		goto out;
	}
	pthread_t tp, ts;
	pthread_create(&ts, NULL, subscriber, &r);
	pthread_create(&tp, NULL, publisher, &r);
	nanosleep(&(struct timespec) { .tv_sec = 1 }, NULL);
	uint64_t d0 = atomic_load(&r.delivered), t0 = mqc_now_ns();
	double broker0 = cpu_of(i->pid), self0 = cpu_of(getpid());
	pid_t perf = perf_dir ? perf_start(i->pid, m->name, round, seconds) : -1;
	nanosleep(&(struct timespec) { .tv_sec = (time_t)seconds,
	              .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9) },
	    NULL);
	uint64_t d1 = atomic_load(&r.delivered), s1 = atomic_load(&r.sent), t1 = mqc_now_ns();
	double broker1 = cpu_of(i->pid), self1 = cpu_of(getpid());
	if (perf > 0)
		waitpid(perf, NULL, 0);
	atomic_store(&r.stop, true);
	shutdown(r.pub, SHUT_RDWR);
	shutdown(r.sub, SHUT_RDWR);
	pthread_join(tp, NULL);
	pthread_join(ts, NULL);
	rate = (double)(d1 - d0) / ((double)(t1 - t0) / 1e9);
	/* Written by the publisher, not yet delivered: the broker is the bottleneck when this is
	 * large (the publisher runs ahead into socket buffers, so a send rate means nothing). */
	*backlog = (double)s1 - (double)d1;
	cpu[0] = (broker1 - broker0) / ((double)(t1 - t0) / 1e9) * 100;
	cpu[1] = (self1 - self0) / ((double)(t1 - t0) / 1e9) * 100;
out:
	if (r.pub >= 0)
		close(r.pub);
	if (r.sub >= 0)
		close(r.sub);
	tb_broker_stop(b);
	return rate;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* 2.1 or later: from `mosquitto -h`, whose first line names the version. */
static bool broker_is_21(void)
{
	if (!mosquitto_path)
		return false; /* the test-broker default: Debian's 2.0 */
	char cmd[1100], line[256];
	snprintf(cmd, sizeof cmd, "'%s' -h 2>&1", mosquitto_path);
	FILE *f = popen(cmd, "r");
	bool is21 = false;
	while (f && fgets(line, sizeof line, f)) {
		int major, minor;
		if (sscanf(line, "mosquitto version %d.%d", &major, &minor) == 2)
			is21 = major > 2 || (major == 2 && minor >= 1);
	}
	if (f)
		pclose(f);
	return is21;
}

int main(int argc, char **argv)
{
	uint64_t rounds_u = 5, size_u = 16;
	double seconds = 3;
	bool bad = false;
	for (int k = 1; k < argc && !bad; k++) {
		if (strcmp(argv[k], "--rounds") == 0 && k + 1 < argc)
			bad = mqc_parse_u64(argv[++k], 1, 50, &rounds_u) != 0;
		else if (strcmp(argv[k], "--seconds") == 0 && k + 1 < argc)
			bad = mqc_parse_double(argv[++k], 0.1, 3600, &seconds) != 0;
		else if (strcmp(argv[k], "--size") == 0 && k + 1 < argc)
			bad = mqc_parse_u64(argv[++k], 1, 1024, &size_u) != 0;
		else if (strcmp(argv[k], "--mosquitto") == 0 && k + 1 < argc)
			mosquitto_path = argv[++k];
		else if (strcmp(argv[k], "--perf") == 0 && k + 1 < argc)
			perf_dir = argv[++k];
		else if (strcmp(argv[k], "--short") == 0) {
			rounds_u = 1;
			seconds = 1;
		} else {
			fprintf(stderr,
			    "usage: probe_overhead [--rounds N (5)] [--seconds S (3)] [--size BYTES (16)] "
			    "[--mosquitto PATH] [--perf DIR (perf record the broker, a file a run)] "
			    "[--short (1 round of 1 s: does it run, not what it costs)]\n");
			return 2;
		}
	}
	if (bad) {
		fprintf(stderr, "probe_overhead: --rounds 1-50, --seconds 0.1-3600, --size 1-1024\n");
		return 2;
	}
	int rounds = (int)rounds_u;
	size_t size = (size_t)size_u;
	if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
		pin(0, 1);
	bool is21 = broker_is_21();
	printf("probe_overhead: QoS 0, %zu-byte payloads, 1 publisher -> 1 v5 subscriber, %.1f s per "
	       "run, %d rounds, broker %s on CPU 0, clients on CPU 1\n",
	    size, seconds, rounds, is21 ? "2.1 (MESSAGE_OUT: deliveries, time in broker)" : "2.0");
	double rates[NMODES][50], ns[NMODES][50]; /* ns: broker CPU time per delivered message */
	for (int round = 0; round < rounds; round++) {
		printf("round %d:", round + 1);
		for (int k = 0; k < NMODES; k++) {
			int mode = (round + k) % NMODES; /* each mode first in its turn */
			if (modes[mode].needs21 && !is21)
				continue;
			double backlog = 0, cpu[2] = { 0, 0 };
			rates[mode][round] = measure(&modes[mode], round, seconds, size, &backlog, cpu);
			if (rates[mode][round] <= 0)
				return 1;
			ns[mode][round] = cpu[0] / 100 / rates[mode][round] * 1e9;
			printf("  %s %.0f/s (backlog %.0f, CPU broker %.0f%% clients %.0f%%)", modes[mode].name,
			    rates[mode][round], backlog, cpu[0], cpu[1]);
			fflush(stdout);
		}
		printf("\n");
	}
	/*
	 * Slow periods of a shared machine hit all modes of a round alike: pair them. A ratio depends
	 * on how fast the broker is (the same cost is 2 % of a slow broker and 11 % of a fast one);
	 * the broker's CPU time per delivered message does not, so both are printed: the probe's
	 * cost is the paired per-round difference in ns.
	 */
	double base_ns[50], median_rate[NMODES];
	for (int round = 0; round < rounds; round++)
		base_ns[round] = ns[0][round];
	for (int mode = 0; mode < NMODES; mode++)
		if (!modes[mode].needs21 || is21)
			median_rate[mode] = median_of(rates[mode], rounds);
	double base = median_of(base_ns, rounds);
	printf("median deliveries/s: no probe %.0f; broker CPU per delivered message %.0f ns\n",
	    median_rate[0], base);
	for (int mode = 1; mode < NMODES; mode++) {
		if (modes[mode].needs21 && !is21)
			continue;
		double ratio[50], extra[50];
		for (int round = 0; round < rounds; round++) {
			ratio[round] = rates[mode][round] / rates[0][round];
			extra[round] = ns[mode][round] - ns[0][round];
		}
		double e = median_of(extra, rounds), pct = 100 * e / base;
		double mr = median_of(ratio, rounds);
		/* The spread: the range, and the standard deviation of a round's ratio; a median of n
		 * rounds tells two modes 3 % apart (at 95 %) when 1.96 * sd * sqrt(2 / n) < 0.03. */
		double lo = ratio[0], hi = ratio[0], mean = 0, var = 0;
		for (int round = 0; round < rounds; round++) {
			lo = ratio[round] < lo ? ratio[round] : lo;
			hi = ratio[round] > hi ? ratio[round] : hi;
			mean += ratio[round] / rounds;
		}
		for (int round = 0; round < rounds; round++)
			var += (ratio[round] - mean) * (ratio[round] - mean) / (rounds > 1 ? rounds - 1 : 1);
		double sd = sqrt(var), need = 2 * (1.96 * sd / 0.03) * (1.96 * sd / 0.03);
		char target[200] = "";
		if (modes[mode].target_pct >= 0)
			snprintf(target, sizeof target, "; target <= %.0f %% at this broker's speed: %s",
			    modes[mode].target_pct, pct <= modes[mode].target_pct ? "met" : "NOT met");
		if (modes[mode].target_ratio > 0)
			snprintf(target + strlen(target), sizeof target - strlen(target),
			    "; ratio target >= %.2f: %s", modes[mode].target_ratio,
			    mr >= modes[mode].target_ratio ? "met" : "NOT met");
		printf("%-28s %8.0f/s  ratio %.3f  %+.0f ns per message (%.1f %%%s)\n", modes[mode].name,
		    median_rate[mode], mr, e, pct, target);
		if (rounds >= 3)
			printf("%-28s            spread %.3f-%.3f, sd %.3f: a 3 %% difference needs %.0f "
			       "round(s) at this spread\n",
			    "", lo, hi, sd, need < 1 ? 1 : ceil(need));
		else
			printf("%-28s            spread %.3f-%.3f (3 rounds or more say what a 3 %% "
			       "difference needs)\n",
			    "", lo, hi);
	}
	printf("(the probe's own code per message, without the broker's noise: probe_path)\n");
	return 0;
}
