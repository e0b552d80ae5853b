/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqbench.h - options and shared pieces of the mqbench command.
 */
#ifndef MQBENCH_H
#define MQBENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "bench_core.h"
#include "mqc_cli.h"
#include "mqc_hist.h"

enum bench_scenario { SC_CONNECT, SC_THROUGHPUT, SC_FANOUT, SC_REQUEST, SC_CHURN, SC_COUNT };
extern const char *const bench_scenario_names[SC_COUNT];

/** churn --action: what a client does between CONNACK and DISCONNECT. */
enum bench_churn_action { BENCH_CHURN_NONE, BENCH_CHURN_PUBLISH, BENCH_CHURN_SUBSCRIBE };
extern const char *const bench_churn_actions[3]; /* "none", "publish", "subscribe" */

struct bench_opts {
	enum bench_scenario scenario;
	struct mqc_cli_conn net; /* broker URL, TLS, credentials, QoS, protocol (mqc_cli.h) */
	uint64_t duration_ns;
	const char *prefix; /* client ids start with it */
	const char *label;  /* names the run in --json, merge and report (default: prefix) */
	char token[16];     /* 64 random bits in every client id: nobody can guess one */
	bool json;
	size_t size;
	uint64_t seed;
	const char *metrics_url;
	pid_t broker_pid;
	double max_loss_pct; /* fail above; 100 = never */
	uint64_t drain_ns;   /* longest wait for stragglers after the last slot */
	uint64_t
	    max_backlog; /* unacknowledged messages before 'generator saturated'; 0: 10 s of traffic */
	/* throughput / fanout */
	unsigned publishers, subscribers, topics;
	double rate;            /* per publisher, msg/s */
	const char *pub_topic;  /* override: every publisher publishes here */
	const char *sub_filter; /* override: every subscriber subscribes to this */
	/* connect and churn */
	unsigned clients, concurrency; /* churn: clients are the identities %i runs over */
	double connrate;
	uint64_t hold_ns, connect_timeout_ns;
	uint16_t keepalive_s; /* CONNECT's Keep Alive (0: none; the broker's Server Keep Alive wins) */
	const char *sources;  /* "127.0.0.2-127.0.0.5" */
	bool reconnect;       /* connect: reconnect what is lost, report each storm */
	uint64_t backoff_min_ns, backoff_max_ns;
	double reconnect_jitter;   /* a retry waits backoff x (1 - jitter x U[0,1)) */
	unsigned storms;           /* end the hold once this many storms are over; 0: --hold */
	const char *client_id_tpl; /* --client-id: a template (%i); NULL: PREFIX-TOKEN-k */
	const char *cert_dir;      /* --cert-dir: NAME.crt and NAME.key, client i takes the i-th */
	bool tls_resume;           /* resume each client's last TLS session */
	enum bench_churn_action churn_action;
	unsigned processes;     /* --processes N: worker processes (1: this one) */
	bool processes_worker;  /* this process is one of them (MQBENCH_T0 set) */
	unsigned shard, shards; /* --shard I/N: clients [I*N/clients, ...) at rate/N */
	/* request */
	int request_mode; /* -1: naive, pool and dedicated; 0 naive, 1 pool, 2 dedicated, 3 loop */
	unsigned pool_size;
	uint64_t timeout_ns;                  /* per request */
	unsigned silence_ms, ping_timeout_ms; /* the pool's liveness (0: its defaults) */
	uint64_t fail_after_ns;               /* a mode with only connection failures this long ends */
	const char *reply_template;           /* the legacy model's reply topic (mqc_template.h) */
	bool legacy; /* --protocol 3.1.1 or --reply-template: the legacy model */
	bool topic_given;
};

/** Parse argv (after the scenario name). Returns 0, 1 after --help, 2 on a usage error. */
/** naive, pool, dedicated, loop: the request scenario's modes, by number. */
enum { BENCH_REQUEST_MODES = 4 };
extern const char *const bench_request_modes[BENCH_REQUEST_MODES];

/* --- what a run costs this process (cost.c) ---------------------------------------------- */

/**
 * System calls (a perf counter on raw_syscalls:sys_enter, inherited by every thread created
 * after bench_cost_open: open it before the pool and the workers) and CPU time (getrusage, every
 * thread) between bench_cost_start and bench_cost_stop.
 */
struct bench_cost {
	int fd; /* the counter; -1: no rights (root or CAP_PERFMON) or no tracefs */
	bool running;
	double cpu0;
	double syscalls; /* after stop: the count, or -1 when it cannot be known */
	double cpu_s;    /* after stop: CPU seconds of every thread of the process */
};
void bench_cost_open(struct bench_cost *c);
void bench_cost_start(struct bench_cost *c);
void bench_cost_stop(struct bench_cost *c);
void bench_cost_close(struct bench_cost *c);
/** value / per with decimals and unit ("3.10", "21.8us"), or "n/a" when value < 0 or per is 0. */
const char *bench_cost_fmt(
    double value, double per, int decimals, const char *unit, char *buf, size_t len);

/* --- a request mode's failures, by cause (request.c) ---------------------------------------- */

enum { BENCH_CAUSES = 8 };

/**
 * Failures counted by their cause, each cause said once on stderr when it first happens (not
 * once per request). Connection failures (no connection could be had: unreachable, refused)
 * also drive --fail-after. Thread-safe.
 */
struct bench_failures {
	pthread_mutex_t lock;
	const char *mode;
	struct {
		char cause[512]; /* a pool's mqp_pool_last_error, whole */
		uint64_t count;
		bool connection;
	} c[BENCH_CAUSES];
	unsigned n;
	uint64_t others;                 /* failures whose cause did not fit in the table */
	uint64_t connection;             /* of all, connection failures */
	atomic_uint_fast64_t last_ok_ns; /* the last outcome that was not a connection failure */
	atomic_bool give_up;             /* --fail-after passed with nothing but those */
	char give_up_cause[512];
	/* pool and loop modes: nodes the pool found silent (a hung broker, a dark link) */
	uint64_t unresponsive;  /* connections called unresponsive, all nodes */
	char silent_nodes[512]; /* "HOST:PORT (N), ..." */
};
void bench_failures_init(struct bench_failures *f, const char *mode, uint64_t now);
void bench_failures_free(struct bench_failures *f);
/** Before the pool of a pool or loop mode goes: the nodes it found silent, into f. */
struct mqp_pool;
void bench_failures_nodes(struct bench_failures *f, struct mqp_pool *pool);
/** A failure with its cause; connection: no connection could be had. fail_after_ns: the run's
 *  --fail-after (the mode gives up when it passes with nothing else). */
void bench_failure(struct bench_failures *f, const char *cause, bool connection, uint64_t now,
    uint64_t fail_after_ns);
/** An outcome that shows the broker takes connections (a reply, a timeout). */
void bench_failures_ok(struct bench_failures *f, uint64_t now);
/** The causes, "cause (N)" joined by "; ", into out. */
void bench_failures_text(struct bench_failures *f, char *out, size_t len);

/* --- the legacy model (--protocol 3.1.1): a device per worker ------------------------------- */

/** The command topic of worker (or loop slot) id: --topic with {worker} replaced; and its reply
 *  topic: --reply-template with {topic} replaced. 0, or -1 when one does not fit. */
int bench_legacy_topics(
    const struct bench_opts *o, unsigned id, char *topic, size_t tlen, char *reply, size_t rlen);
/** A match callback for mqp_pool_request_legacy: the reply's payload equals userdata's
 *  NUL-terminated request id (the device echoes it). */
struct mqp_message;
int bench_legacy_match(void *userdata, const struct mqp_message *m);

/** What `request --mode loop` measured (request_loop.c). */
struct bench_loop_result {
	struct mqc_hist lat;
	uint64_t done, errors, timeouts, no_responder, elapsed_ns;
	struct bench_cost *cost; /* started when the run starts, stopped when it ends */
	struct bench_failures *failures;
};
struct mqp_pool_options;
/** Run --mode loop: the pool on a libuv loop in this thread. 0, or -1 after a message. */
int bench_request_loop(
    const struct bench_opts *o, const struct mqp_pool_options *po, struct bench_loop_result *r);

int bench_parse(int argc, char **argv, enum bench_scenario sc, struct bench_opts *o);

int bench_run_throughput(const struct bench_opts *o);
int bench_run_connect(const struct bench_opts *o);
int bench_run_churn(const struct bench_opts *o);
/** connect or churn over o->processes worker processes: one result (spread.c). */
int bench_run_processes(const struct bench_opts *o, int argc, char **argv);
/** "A.B.C.D-E.F.G.H" into addresses (malloc; out may be NULL to count). 0, or -1 said. */
struct in_addr;
int bench_parse_sources(const char *spec, struct in_addr **out, unsigned *count);
/** Whether connections open at once over processes and nsources source addresses can work:
 *  descriptors per process, ports x addresses, TIME_WAIT (time_wait: the sockets the run itself
 *  leaves there, churn's), the broker's file limit. -1 (said) when they cannot; warnings said. */
int bench_preflight(const struct bench_opts *o, uint64_t connections, uint64_t time_wait,
    unsigned processes, unsigned nsources);
/** The sockets churn at rate per second leaves in TIME_WAIT at once (60 s each). */
uint64_t bench_churn_time_wait(double rate, uint64_t duration_ns);
/** Whether connect's CONNECT packets can be built from these options; -1 with the reason. */
int bench_connect_check(const struct bench_opts *o, char *err, size_t errlen);
int bench_run_request(const struct bench_opts *o);
int bench_merge(int argc, char **argv);
int bench_report(int argc, char **argv);
int bench_hgrm(int argc, char **argv);

/** A whole file as a NUL-terminated string (malloc), or NULL. */
char *bench_slurp(const char *path);

/** Warn on stderr when h looks like Nagle meeting delayed ACKs (bench_delayed_ack_share). */
void bench_warn_delayed_ack(const char *what, const struct mqc_hist *h);

/* --- the broker's side ------------------------------------------------------------------- */

struct probe_sample {
	bool ok;
	bool has_connects; /* the probe counts connects only with its observe_auth */
	double connects, disconnects, messages_in;
	bool has_deliveries; /* mosquitto 2.1: the probe counts PUBLISH packets sent (MESSAGE_OUT) */
	double deliveries;
	/* ACL READ checks while routing (observe_auth): an upper bound on deliveries, not them */
	double routing_checks, routing_sum, routing_count;
	double cpu_seconds, resident_bytes;
	double start_time; /* the broker process's start (s since the epoch): a restart changes it */
};

/**
 * Check that url is an http:// or https:// URL with a host (any name, IPv4 or [IPv6] address,
 * any port). Returns 0, or -1 with the reason in err.
 */
int bench_metrics_url_check(const char *url, char *err, size_t errlen);

/**
 * GET the probe's /metrics (libcurl, 3 s deadline). ok=false when metrics_url is NULL or the page
 * cannot be read or holds no probe metrics; the first such failure is a warning on stderr.
 */
void bench_probe_read(const char *metrics_url, struct probe_sample *s);

/** CPU seconds and resident bytes of a process from /proc; false if it is gone. */
bool bench_proc_read(pid_t pid, double *cpu_seconds, double *resident_bytes);

/** A process's open-file limit (soft; ULLONG_MAX: unlimited) and the descriptors it has open,
 *  from /proc; false when they cannot be read. */
bool bench_proc_files(pid_t pid, unsigned long long *limit, unsigned long *open_now);

/* --- output ------------------------------------------------------------------------------ */

/** "744us", "3.953ms", "1.200s" */
const char *bench_fmt_ns(uint64_t ns, char *buf, size_t len);
void bench_print_latency(FILE *out, const char *label, const struct mqc_hist *h);

/* --- --json results (result.c): the one writer ------------------------------------------- */

#define BENCH_RESULT_FORMAT 2 /* 2: cJSON, settings, date, version, label; 1: hand-written */
#ifndef MQTTPOOL_VERSION
#define MQTTPOOL_VERSION "unknown" /* CMake defines it from the project's version */
#endif
#ifndef MQBENCH_VERSION
#define MQBENCH_VERSION MQTTPOOL_VERSION
#endif

struct cJSON;
/** A result's common fields: format, versions, date, label, scenario, broker, settings. */
struct cJSON *bench_result_new(const struct bench_opts *o);
/** A latency histogram as results carry it: percentiles, min, max, mean, and "hist". */
struct cJSON *bench_latency_json(const struct mqc_hist *h);
/** Print root on one line on stdout and free it; -1 (said on stderr) when it cannot be written. */
int bench_result_print(struct cJSON *root);

#endif
