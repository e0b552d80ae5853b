/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fleet.h - the engine under `connect` and `churn`: raw non-blocking connections on a schedule,
 * each an attempt with a state, one epoll loop and one timer heap, reconnect storms, TLS (full
 * and resumed handshakes kept apart) and the counts a run reports. Internal to mqbench.
 *
 * The engine knows no scenario. A scenario (connect.c, churn.c) gives it a plan (the rate, the
 * slots, whether a slot is reused) and an ops table, as nng's protocols give theirs: what to do
 * once a CONNACK accepted an attempt, and with the packets of an attempt it awaits an answer on.
 * Its files, each calling only into the ones above it in this list:
 *
 *   fleet_identity.c   client k's identity and CONNECT
 *   fleet_preflight.c  before a run: the broker's address, source addresses, the limits
 *   fleet_usage.c      the broker's CPU and memory sampled on a thread, and mqbench's own
 *   fleet_report.c     failures by reason, CONNACK refusals in words, the exit status
 *   fleet_tls.c        TLS contexts, handshakes (full and resumed apart), --cert-dir
 *   fleet_ws.c         ws:// and wss://: each connection's upgrade, MQTT in frames
 *   fleet.c            the engine: attempts, the loop, timers, storms
 */
#ifndef FLEET_H
#define FLEET_H

#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "mqbench.h"
#include "mqc_codec.h"
#include "mqc_heap.h"
#include "mqc_hist.h"

struct cJSON;
typedef struct cJSON cJSON;

enum state {
	ST_WAITING, /* not started yet (a connect-storm client before its time, a free churn slot) */
	ST_TCP,
	ST_TLS,
	ST_UPGRADE, /* ws:// and wss://: the upgrade sent, its 101 awaited */
	ST_CONNACK,
	ST_AWAIT, /* connected; the scenario awaits the broker's answer (churn: a SUBACK) */
	ST_HELD,
	ST_BACKOFF, /* --reconnect: lost, waiting for the next attempt */
	ST_FAILED,
	ST_CLOSED
};
enum reason {
	R_REFUSED,
	R_TIMEOUT,
	R_CONNACK,
	R_EMFILE,
	R_EADDRNOTAVAIL,
	R_TLS,
	R_DROPPED,
	R_CLOSED, /* closed before any CONNACK (said after the run what a 3.1.1 CONNECT met) */
	R_SUBACK, /* a subscription the broker refused (its SUBACK) */
	R_WS,     /* the WebSocket upgrade refused, or a frame the server must not send */
	R_OTHER,
	R_COUNT
};
extern const char *const fleet_reason_names[R_COUNT];

enum { RX_CAP = 512 };

struct attempt {
	int fd;
	enum state state;
	uint64_t k;           /* the client's index in the whole run: its identity (%i) */
	uint64_t intended;    /* when this attempt should have started: latency counts from it */
	uint64_t due;         /* its deadline (in progress) or its next try (back-off): the heap key */
	uint64_t lost_at;     /* --reconnect: when its connection was lost; 0 otherwise */
	uint64_t backoff;     /* --reconnect: the next retry's delay before jitter */
	uint64_t tls_t0;      /* when the TLS handshake began */
	uint64_t tls_cpu;     /* the client's CPU in it so far (ns) */
	unsigned storm;       /* the storm it was last lost in (1-based; 0: none) */
	uint16_t keepalive_s; /* held: PINGREQ every three quarters of it (the broker's Server Keep
	                         Alive when its CONNACK gave one); 0: none */
	unsigned step;        /* the scenario's own state of this attempt (0 at its start) */
	unsigned node;        /* which broker of the list: client k's is k modulo their number,
	                         and a client whose connection was lost moves to the next */
	SSL *ssl;
	struct fleet_ws *ws; /* ws:// and wss:// only (fleet_ws.c) */
	unsigned rxlen;
	unsigned char rx[RX_CAP];
};

/* One reconnect storm: from the first loss after every connection was up to the last one back. */
struct rstorm {
	uint64_t first_loss, last_back;
	unsigned lost, back, relost; /* distinct clients lost; back now; lost again meanwhile */
	uint64_t attempts, fails[R_COUNT];
	struct mqc_hist latency; /* from each loss to its CONNACK */
	bool over;
	/* The probe at its end, read on a thread of its own (a probe that hangs takes up to 3 s,
	 * which the loop must not wait for: the next storm may begin). Read after
	 * fleet_storm_probes_wait() only. */
	struct probe_sample probe;
	const char *probe_url;
	pthread_t reader;
	bool reading; /* reader runs or has not been joined */
};

/* What happened in one second of the run: connects, their CONNACK latency, failures by reason. */
struct second {
	uint32_t ok, failed, fails[R_COUNT];
	uint64_t latency_sum, latency_max; /* CONNACK from the scheduled time, ns */
};

struct broker_usage {
	bool ok;
	bool restarted; /* the CPU counter went back: cpu0 belongs to another process */
	double cpu0, rss0, cpu_last, t_last, peak_pct, rss_max;
	double t0;
};

/* The broker's usage sampled on a thread of its own while the loop runs: a probe far away, or
 * one that hangs (up to its 3 s timeout), must not stop the loop that times the connects. The
 * thread owns *u from fleet_start_sampling until fleet_stop_sampling. */
struct fleet_sampler {
	const struct bench_opts *o;
	struct broker_usage *u;
	uint64_t period_ns;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, running;
};

struct fleet;

/* What a scenario does with the engine's attempts (its private state: fleet.scenario and
 * attempt.step). Called on the loop's thread. */
struct fleet_ops {
	/* CONNACK accepted the attempt (ST_HELD): hold it (fleet_hold), or go on: send something and
	 * fleet_await the answer, or fleet_leave. */
	void (*connected)(struct fleet *r, struct attempt *a, uint64_t now);
	/* A packet on an attempt in ST_AWAIT (pk stays in a->rx until fleet_answered or the
	 * attempt ends). */
	void (*packet)(struct fleet *r, struct attempt *a, const struct mqc_packet *pk, uint64_t now);
};

/* What a scenario asks of the engine, set before fleet_begin. */
struct fleet_plan {
	double rate;        /* attempts per second, all shards together */
	unsigned slots;     /* attempts at once (0: one per client of the shard) */
	uint64_t time_wait; /* ports this process leaves in TIME_WAIT (preflight's arithmetic) */
	bool reuse_slots;   /* a failed or finished attempt frees its slot (ST_WAITING) */
};

struct fleet {
	const struct bench_opts *o;
	const struct fleet_ops *ops;
	void *scenario; /* the scenario's own state */
	struct fleet_plan plan;
	/* How an attempt's connection is made: NULL, TCP to addr (from --source); a test gives a
	 * socketpair's end. Returns the descriptor (non-blocking), or -errno. */
	int (*dial)(struct fleet *r, struct attempt *a);
	int ep;
	struct attempt *a; /* connect: a client each; churn: --concurrency slots */
	unsigned nslots;
	uint64_t first, count;            /* this shard's clients: indexes first .. first+count-1 */
	double rate;                      /* this shard's attempts per second */
	struct sockaddr_storage addr[16]; /* each broker of --broker's list */
	socklen_t addrlen[16];
	unsigned naddr;
	struct in_addr *sources;
	unsigned nsources;
	SSL_CTX *ctx;
	SSL_SESSION **sessions; /* --tls-resume: the last session of each identity in the shard */
	char **cert_files;      /* --cert-dir: certificate files, sorted (keys beside them) */
	unsigned ncerts;
	struct mqc_heap timers;
	uint64_t t0;
	unsigned in_progress;  /* scheduled attempts in progress (--concurrency caps them) */
	unsigned reconnecting; /* reconnect attempts in progress */
	uint64_t held, failed, done, cycles;
	uint64_t reasons[R_COUNT];
	char tls_why[200];              /* the first TLS failure, in words ("" none) */
	char ws_why[300];               /* the first WebSocket failure, in words ("" none) */
	struct mqc_buf ws_out;          /* a frame being sent */
	uint64_t connack_codes[256];    /* refusals in CONNACKs of the protocol's own shape */
	uint64_t connack311_codes[256]; /* 3.1.1-shaped CONNACKs to a v5 CONNECT: return codes */
	struct mqc_hist tcp, connack, cycle, tls_full, tls_resumed;
	uint64_t tls_full_cpu, tls_resumed_cpu; /* the client's CPU in handshakes, ns */
	uint64_t last_done;
	struct rstorm **storms;
	unsigned nstorms, storms_cap;
	struct second *seconds;
	size_t nseconds;
	uint64_t rng;
	struct mqc_buf out; /* the packet being sent (mqc_codec.h), encoded here each time */
	struct fleet_sampler sampler;
};

extern volatile sig_atomic_t fleet_interrupted; /* SIGINT or SIGTERM during the run */

/** The per-second counts of the second now falls in (grown as needed); NULL when out of memory. */
struct second *fleet_second(struct fleet *r, uint64_t now);
/** Close an attempt's socket and TLS (its session stays resumable). */
void fleet_close(struct attempt *a);
/** A storm's failed attempts, every reason. */
uint64_t fleet_storm_failures(const struct rstorm *st);
/** The reconnect storm in progress, or NULL. */
struct rstorm *fleet_current_storm(struct fleet *r);
/* Waits for every storm's probe reading (each at most the probe's timeout). */
void fleet_storm_probes_wait(struct fleet *r);
/** An attempt failed: a reconnect tries again later, anything else counts as a failure. */
void fleet_failed(struct fleet *r, struct attempt *a, enum reason why);
/** Write a whole small packet (TLS or not); what send or SSL_write returned. */
ssize_t fleet_send(struct attempt *a, const unsigned char *p, size_t len);
/** Send the packet out holds (mqc_codec.h) whole: 0, or -1 when the socket did not take it. */
int fleet_send_out(struct fleet *r, struct attempt *a, const struct mqc_buf *out);
/** Start an attempt for a->k now; its latency counts from a->intended (or its loss). */
void fleet_start(struct fleet *r, struct attempt *a);
/** Drop pk, the packet at the front of a->rx, once handled. */
void fleet_consume(struct attempt *a, const struct mqc_packet *pk);
/** Keep a held connection: PINGREQ at three quarters of its keep-alive. */
void fleet_hold(struct fleet *r, struct attempt *a, uint64_t now);
/** The scenario waits for the broker's answer on a: it counts against --concurrency, and its
 * deadline (the connect timeout) runs, until fleet_answered. */
void fleet_await(struct fleet *r, struct attempt *a);
/** The answer came (pk, consumed). */
void fleet_answered(struct fleet *r, struct attempt *a, const struct mqc_packet *pk);
/** End the attempt the way a device leaves: DISCONNECT, TLS close_notify, close; a cycle done
 * (its time from a->intended is recorded). */
void fleet_leave(struct fleet *r, struct attempt *a, uint64_t now);
/** One turn of the loop: events until wake at most, then the timers that are due. */
void fleet_turn(struct fleet *r, uint64_t wake);
/* --- fleet_usage.c */

/** A thread that takes no signals (SIGINT and SIGTERM stay with the loop's thread). */
bool fleet_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg);
/** Stop the sampler's thread, if it runs (a read in flight ends first). */
void fleet_sampler_stop(struct fleet_sampler *s);
/** Sample the broker's CPU and memory (--broker-pid, else the probe). */
void fleet_sample(const struct bench_opts *o, struct broker_usage *u);
/** This process's open descriptors and VmRSS. */
void fleet_self_usage(unsigned *fds, double *rss);
/* --- fleet.c */

/** Everything a run holds, whatever of it was made. */
void fleet_free(struct fleet *r);
/** Resolve, parse sources, preflight, TLS, slots, timers. 0, or -1 after a message. */
int fleet_setup(struct fleet *r);
/* --- fleet_report.c */

/** Failures by reason, into a JSON object / a line. */
void fleet_add_reasons(cJSON *obj, const uint64_t *reasons);
void fleet_print_reasons(FILE *out, const uint64_t *reasons);
/** CONNACK refusals by code, in words (text, JSON). */
void fleet_connack_failures_text(const struct fleet *r);
void fleet_add_connack_refusals(cJSON *root, const struct fleet *r);
/** Why CONNECTs were closed or answered in 3.1.1, found out once (empty when neither). */
void fleet_explain(const struct fleet *r, char *why, size_t len);
/** "failures: refused 3 ... (CONNACK reason code ...)" on stdout, when anything failed. */
void fleet_print_failures(const struct fleet *r);
/** The exit status, with every failure and unfinished storm said on stderr. */
int fleet_finish_status(const struct fleet *r, const char *why, uint64_t scheduled);
/** Each second's connects, failures (by reason) and CONNACK latency (mean, max) from the
 *  scheduled time, as "timeline": the seconds that start before `until_ns` into the run. */
void fleet_add_timeline(cJSON *root, const struct fleet *r, uint64_t until_ns);
/** The probe's connects (with observe_auth) and disconnects between p0 and p1, as "probe". */
void fleet_add_probe_json(
    cJSON *root, const struct probe_sample *p0, const struct probe_sample *p1);
/* --- fleet_tls.c */

/** The TLS context of a run (its CA, a certificate all clients share); NULL after a message. */
SSL_CTX *fleet_tls_ctx(const struct bench_opts *o);
/** --cert-dir: every NAME.crt with a NAME.key beside it, sorted. 0, or -1 after a message. */
int fleet_tls_load_cert_dir(struct fleet *r);
/** The TLS side of a new connection: SNI, host check, this client's certificate and session. */
int fleet_tls_begin(struct fleet *r, struct attempt *a);
enum fleet_tls_step { FLEET_TLS_DONE, FLEET_TLS_WANT_READ, FLEET_TLS_WANT_WRITE, FLEET_TLS_FAILED };
/** One step of the handshake; when done, its time and CPU are recorded, full or resumed. */
enum fleet_tls_step fleet_tls_step(struct fleet *r, struct attempt *a);
/** Keep the session of a connected client for its next connection (--tls-resume). */
void fleet_tls_keep_session(struct fleet *r, struct attempt *a);
/** Full and resumed TLS handshakes side by side (text, JSON). */
void fleet_print_tls(const struct fleet *r);
void fleet_add_tls_json(cJSON *root, const struct fleet *r);

/* --- fleet_ws.c */

/** Send the upgrade for a's connection (its node's host, port and path, --ws-header). 0, or -1
 *  (out of memory, or the kernel did not take it whole). */
int fleet_ws_begin(struct fleet *r, struct attempt *a);
/** ST_UPGRADE and readable: 1 the 101 was right (frames after it kept), 0 not all there yet, -1
 *  refused or closed (r->ws_why says the first such failure). */
int fleet_ws_answer(struct fleet *r, struct attempt *a);
/** p[0..len), one MQTT packet or more, in one masked binary frame: 0, or -1. */
int fleet_ws_send(struct fleet *r, struct attempt *a, const unsigned char *p, size_t len);
/** Unframe into a->rx what has come (reading the socket when nothing is waiting), answering
 *  pings: >0 bytes added, 0 none yet, -1 closed or refused (*closed: by the server, with no
 *  byte of a packet in rx). */
ssize_t fleet_ws_read(struct fleet *r, struct attempt *a, bool *closed);
/** The attempt's WebSocket state, freed (at the end of a run). */
void fleet_ws_free(struct attempt *a);

/* --- fleet_identity.c */

/** Template tpl for client k, into buf; NULL when there is no template or it does not fit. */
const char *fleet_identity(const char *tpl, uint64_t k, char *buf, size_t cap);
/** Client k's CONNECT into out (out emptied first). 0, or -1 when it cannot be made. */
int fleet_build_connect(const struct bench_opts *o, uint64_t k, struct mqc_buf *out);
/** Client k's place among the shard's identities (its TLS session's slot). */
uint64_t fleet_identity_slot(const struct fleet *r, uint64_t k);

/* --- fleet_preflight.c */

/** The broker's address into r->addr. 0, or -1 after a message. */
int fleet_resolve(struct fleet *r);

/* --- fleet.c: the run */

/** fleet_setup, signals, the probe's and the broker's state before the run; t0 is set after
 * the reads. 0, or -1 (freed). */
int fleet_begin(struct fleet *r, struct probe_sample *p0, struct broker_usage *u);
/** Sample *u every period on the sampler's thread until fleet_stop_sampling. */
void fleet_start_sampling(struct fleet *r, struct broker_usage *u, uint64_t period);
/** Stop the sampling thread (waiting for a read in flight) and take one last sample. */
void fleet_stop_sampling(struct fleet *r);

#endif
