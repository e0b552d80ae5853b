/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_internal.h - pieces of the test-broker launcher shared by its sources and unit tests.
 */
#ifndef TB_INTERNAL_H
#define TB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "tb_broker.h"

/** Everything that goes into mosquitto.conf. */
struct tb_conf {
	const char *user;              /* `user` line: the invoking user */
	int port, tls_port, mtls_port; /* tls ports 0: no TLS listener */
	int other_host_port;           /* TLS with a certificate for another host; 0: none */
	int ws_port, wss_port;         /* MQTT over WebSockets, plain and TLS; 0: none */
	const char *dir;               /* log, password and ACL files live here */
	const char *ca_file, *server_cert, *server_key;
	const char *plugin;             /* NULL: no plugin line */
	const char *const *plugin_opts; /* "key=value" */
	const char *const *conf_lines;
	bool allow_anonymous;
	bool password_file, acl_file;
};

/** Write the configuration text. Returns 0, or -1 with err set (bad plugin option syntax). */
int tb__write_conf(FILE *out, const struct tb_conf *conf, char *err, size_t errlen);

/** Write the ACL file for the test users. */
int tb__write_acl(FILE *out);

/**
 * Write one password file line in mosquitto 2.0's format ($7$: PBKDF2-SHA512, 101 iterations,
 * 12-byte random salt). Returns 0 or -1.
 */
int tb__write_password_line(FILE *out, const char *user, const char *password);

/** A random password of [a-zA-Z0-9], len - 1 characters. Returns 0 or -1. */
int tb__random_password(char *buf, size_t len);

/**
 * Generate ca.crt, server.crt/key (SAN 127.0.0.1, ::1, localhost) and client.crt/key in dir
 * with the openssl command. Returns 0 or -1 with err set.
 */
int tb__make_certs(const char *dir, char *err, size_t errlen);

/**
 * Run argv to completion with stdout and stderr appended to log_path (NULL: /dev/null), killing
 * it after timeout_ms. Returns its exit status (0-255), or -1 with err set if it could not run,
 * was killed, or timed out.
 */
int tb__run(char *const argv[], const char *log_path, int timeout_ms, char *err, size_t errlen);

/**
 * Start argv in the background with stdout and stderr appended to log_path; preload, when not
 * NULL, becomes LD_PRELOAD. Returns the pid or -1 with err set.
 */
pid_t tb__spawn(
    char *const argv[], const char *log_path, const char *preload, char *err, size_t errlen);

/** SIGTERM, wait up to grace_ms, then SIGKILL; reaps the child. Returns its wait status. */
int tb__terminate(pid_t pid, int grace_ms);

/** Find an executable: an explicit path, else every $PATH entry, then extra_dirs (":"-list). */
int tb__find_program(const char *name, const char *extra_dirs, char *out, size_t len);

/** Remove a directory tree (the launcher's own temporary directory only). */
void tb__remove_tree(const char *path);

/** A free TCP port on 127.0.0.1 (bind port 0, read it back, close). Returns the port or -1. */
int tb__free_port(void);

/** Whether 127.0.0.1:port can be bound right now. */
bool tb__port_is_free(int port);

/**
 * The first line of a log file that mentions an error (returns 1), else its last non-empty
 * line (returns 0); -1 if the file is missing or empty.
 */
int tb__log_excerpt(const char *path, char *out, size_t len);

#endif
