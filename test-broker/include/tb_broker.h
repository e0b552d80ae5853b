/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_broker.h - a real mosquitto on free loopback ports, for tests, benchmarks and the demo.
 *
 * tb_broker_start() generates a configuration in a fresh temporary directory (plain, TLS and
 * mutual-TLS listeners on 127.0.0.1, a CA with server and client certificates made on the spot,
 * a password file, an ACL file, the probe plugin when it has been built), starts Debian's
 * mosquitto on it, and returns once the broker has answered an MQTT CONNECT with CONNACK 0 (and
 * the probe's /metrics answers, when the probe is loaded). tb_broker_stop() stops the broker and
 * removes the directory. `test-broker/run` is the same launcher on the command line.
 *
 * Threads: none of these functions is thread-safe; call them from one thread.
 * Processes: the broker is a child of the calling process; stop it with tb_broker_stop().
 */
#ifndef TB_BROKER_H
#define TB_BROKER_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#define TB_USERNAME "mqp-test" /* the test user: read and write everything */
#define TB_OTHER_USERNAME                                               \
	"mqp-limited" /* a second user: limited/#, and a device's narrowest \
	                 rights: read devices/mqp-limited/commands/+, write \
	                 mqp/inbox/# (ACL and attacker tests) */
#define TB_PATH_MAX 4096

/** Options; a zeroed struct (or NULL) means every default. */
struct tb_options {
	const char *mosquitto;          /* broker binary; NULL: $TB_MOSQUITTO, $PATH, /usr/sbin */
	const char *parent_dir;         /* where the temporary directory goes; NULL: $TMPDIR or /tmp */
	int port;                       /* plain listener; 0: a free port (retried if taken) */
	int tls_port;                   /* TLS listener; 0: a free port */
	int mtls_port;                  /* TLS listener that requires a client certificate; 0: free */
	bool no_tls;                    /* no TLS listeners and no certificates */
	bool websockets;                /* ws:// and (unless no_tls) wss:// listeners too: mosquitto
	                                   2.1 (its built-in WebSockets); 2.0.11 refuses to start */
	bool no_probe;                  /* never load the probe */
	const char *plugin;             /* plugin path; NULL: the probe of this build, if built */
	const char *const *plugin_opts; /* "key=value" (plugin_opt_ prefix optional), NULL-ended */
	const char *const *conf_lines;  /* extra mosquitto.conf lines ("{dir}": the broker dir) */
	bool allow_anonymous;           /* default false: clients must log in */
	unsigned users;                 /* more users, one per device (tb_info's user templates) */
	bool no_password_file;          /* omit password_file (auth-neutrality tests); then any
	                                   CONNACK, even a refusal, counts as "ready" */
	bool no_acl_file;               /* omit acl_file (same) */
	double start_timeout_s;         /* how long to wait for CONNACK; 0: 10 s */
	const char *preload;            /* LD_PRELOAD for the broker (ASan builds of the plugin) */
};

/** What a started broker offers; valid until tb_broker_stop(). Empty strings mean "none". */
struct tb_info {
	char mqtt_url[64];       /* mqtt://127.0.0.1:PORT */
	char mqtts_url[64];      /* mqtts://127.0.0.1:PORT (server-authenticated TLS) */
	char mtls_url[64];       /* mqtts://127.0.0.1:PORT (client certificate required) */
	char other_host_url[64]; /* mqtts://127.0.0.1:PORT whose certificate (signed by the same CA)
	                            names other-host.invalid: a client that checks names refuses it */
	char metrics_url[96];    /* http://127.0.0.1:PORT/metrics when the probe serves it */
	char ws_url[64];         /* ws://127.0.0.1:PORT/mqtt (tb_options.websockets) */
	char wss_url[64];        /* wss://127.0.0.1:PORT/mqtt (the same, and TLS) */
	int port, tls_port, mtls_port, other_host_port, metrics_port, ws_port, wss_port;
	char dir[TB_PATH_MAX - 64]; /* the temporary directory (removed by stop) */
	char conf_file[TB_PATH_MAX];
	char log_file[TB_PATH_MAX];
	char ca_file[TB_PATH_MAX];
	char client_cert[TB_PATH_MAX];
	char client_key[TB_PATH_MAX];
	char plugin[TB_PATH_MAX];   /* loaded plugin, or empty */
	const char *username;       /* TB_USERNAME */
	char password[40];          /* random per broker */
	const char *other_username; /* TB_OTHER_USERNAME */
	char other_password[40];
	unsigned users;                  /* tb_options.users: device-000000 ... with passwords */
	char user_template[32];          /* "device-%06i": user i's name (%06i: i, 6 digits) */
	char user_password_template[48]; /* "pw-RANDOM-%06i": user i's password */
	pid_t pid;
};

#define TB_MAX_USERS 100000

struct tb_broker;

/**
 * Start a broker. On failure returns -1, writes a message naming the problem into err (for
 * example "mosquitto not found", "port 1883 is already in use", "cannot create a directory in
 * /x: Permission denied") and leaves nothing behind: no process, no directory.
 *
 * Ownership: *out belongs to the caller until tb_broker_stop().
 */
int tb_broker_start(
    const struct tb_options *options, struct tb_broker **out, char *err, size_t errlen);

/** The broker's URLs, files and credentials. */
const struct tb_info *tb_broker_info(const struct tb_broker *broker);

/**
 * Stop the broker process (SIGTERM, SIGKILL after 5 s) and start it again on the same ports and
 * configuration; returns 0 once it answers CONNECT again, -1 with err set otherwise.
 */
int tb_broker_restart(struct tb_broker *broker, char *err, size_t errlen);

/** Send a signal to the broker (SIGSTOP/SIGCONT for stall tests, SIGHUP for reloads). */
int tb_broker_signal(struct tb_broker *broker, int sig);

/**
 * Whether the broker process is still running; if it has exited, *status gets its wait status.
 */
bool tb_broker_alive(struct tb_broker *broker, int *status);

/** Copy the broker's log (and anything it wrote to stderr) to out, framed by marker lines. */
void tb_broker_dump_log(const struct tb_broker *broker, FILE *out);

/** Stop the broker and remove its directory. Accepts NULL. */
void tb_broker_stop(struct tb_broker *broker);

/** Path of the probe built with this tree (may not exist yet). */
const char *tb_default_probe_path(void);

#endif
