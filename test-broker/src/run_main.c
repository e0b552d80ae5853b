/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * run_main.c - `test-broker/run`: the test broker on the command line.
 *
 * Prints shell-style KEY=value lines (DESIGN.md contract) once the broker answers CONNECT, then
 * stays in the foreground until SIGINT/SIGTERM, or detaches with --daemon. On exit it stops the
 * broker and removes its directory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqc_cli.h"
#include "mqc_strutil.h"
#include "tb_broker.h"

#define PROG "test-broker/run"

static bool export_lines; /* --export */

static void print_line(FILE *out, const char *key, const char *value)
{
	if (export_lines)
		fputs("export ", out);
	bool plain = *value != '\0';
	for (const char *c = value; *c; c++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:@%+,=", *c))
			plain = false;
	if (plain) {
		fprintf(out, "%s=%s\n", key, value);
		return;
	}
	fprintf(out, "%s='", key);
	for (const char *c = value; *c; c++) {
		if (*c == '\'')
			fputs("'\\''", out);
		else
			fputc(*c, out);
	}
	fputs("'\n", out);
}

static void print_info(FILE *out, const struct tb_info *info, pid_t run_pid)
{
	char pid[32];
	print_line(out, "MQTT_URL", info->mqtt_url);
	if (info->mqtts_url[0]) {
		print_line(out, "MQTTS_URL", info->mqtts_url);
		print_line(out, "MQTTS_MTLS_URL", info->mtls_url);
		print_line(out, "MQTTS_OTHER_HOST_URL", info->other_host_url);
		print_line(out, "CA_FILE", info->ca_file);
		print_line(out, "CLIENT_CERT", info->client_cert);
		print_line(out, "CLIENT_KEY", info->client_key);
	}
	if (info->ws_url[0])
		print_line(out, "WS_URL", info->ws_url);
	if (info->wss_url[0])
		print_line(out, "WSS_URL", info->wss_url);
	print_line(out, "MQTT_USERNAME", info->username);
	print_line(out, "MQTT_PASSWORD", info->password);
	print_line(out, "MQTT_OTHER_USERNAME", info->other_username);
	print_line(out, "MQTT_OTHER_PASSWORD", info->other_password);
	if (info->users) {
		char n[16];
		snprintf(n, sizeof n, "%u", info->users);
		print_line(out, "USERS", n);
		print_line(out, "USER_TEMPLATE", info->user_template);
		print_line(out, "USER_PASSWORD_TEMPLATE", info->user_password_template);
	}
	if (info->metrics_url[0])
		print_line(out, "METRICS_URL", info->metrics_url);
	if (info->plugin[0])
		print_line(out, "PROBE", info->plugin);
	snprintf(pid, sizeof pid, "%d", (int)info->pid);
	print_line(out, "BROKER_PID", pid);
	print_line(out, "BROKER_LOG", info->log_file);
	print_line(out, "BROKER_CONF", info->conf_file);
	print_line(out, "BROKER_DIR", info->dir);
	snprintf(pid, sizeof pid, "%d", (int)run_pid);
	print_line(out, "RUN_PID", pid);
	fflush(out);
}

/* Wait for SIGINT/SIGTERM (clean stop, 0) or the broker's death (1). Signals are blocked. */
static int supervise(struct tb_broker *broker, const sigset_t *signals, bool quiet)
{
	for (;;) {
		struct timespec tick = { .tv_sec = 0, .tv_nsec = 200000000L };
		int sig = sigtimedwait(signals, NULL, &tick);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			tb_broker_stop(broker);
			return 0;
		}
		int status;
		if (!tb_broker_alive(broker, &status)) {
			if (!quiet) {
				fprintf(stderr, PROG ": mosquitto exited unexpectedly (%s %d); its log:\n",
				    WIFEXITED(status) ? "status" : "signal",
				    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
				tb_broker_dump_log(broker, stderr);
			}
			tb_broker_stop(broker);
			return 1;
		}
	}
}

static int add_item(const char ***list, size_t *n, const char *item)
{
	const char **grown = realloc(*list, (*n + 2) * sizeof **list);
	if (!grown)
		return -1;
	grown[(*n)++] = item;
	grown[*n] = NULL;
	*list = grown;
	return 0;
}

enum {
	O_PORT = MQC_CLI_LONG,
	O_TLS_PORT,
	O_MTLS_PORT,
	O_NO_TLS,
	O_WEBSOCKETS,
	O_NO_PROBE,
	O_PLUGIN,
	O_PLUGIN_OPT,
	O_CONF_LINE,
	O_ANON,
	O_USERS,
	O_MOSQUITTO,
	O_DIR,
	O_TIMEOUT,
	O_DAEMON,
	O_EXPORT,
};

static const struct mqc_cli_opt options[] = {
	{ "port", O_PORT, "N", "plain listener port (default: a free port)", 0 },
	{ "tls-port", O_TLS_PORT, "N", "TLS listener port (default: a free port)", 0 },
	{ "mtls-port", O_MTLS_PORT, "N", "mutual-TLS listener port (default: a free port)", 0 },
	{ "no-tls", O_NO_TLS, NULL, "no TLS listeners, no certificates", 0 },
	{ "websockets", O_WEBSOCKETS, NULL,
	    "MQTT over WebSockets listeners too: WS_URL, and WSS_URL unless --no-tls (mosquitto 2.1: "
	    "see --mosquitto)",
	    0 },
	{ "no-probe", O_NO_PROBE, NULL, "do not load the probe plugin", 0 },
	{ "plugin", O_PLUGIN, "PATH", "load this plugin instead of the built probe", 0 },
	{ "plugin-opt", O_PLUGIN_OPT, "K=V", "add `plugin_opt_K V` (repeatable)", 0 },
	{ "conf-line", O_CONF_LINE, "LINE", "append a line to mosquitto.conf (repeatable)", 0 },
	{ "allow-anonymous", O_ANON, NULL, "let clients connect without a username", 0 },
	{ "users", O_USERS, "N",
	    "N more users, one per device: USER_TEMPLATE and\nUSER_PASSWORD_TEMPLATE (%06i: the "
	    "index, 0..N-1) say their\nnames and passwords, as mqbench's --username and\n"
	    "--password take them",
	    0 },
	{ "mosquitto", O_MOSQUITTO, "PATH", "broker binary (default: $TB_MOSQUITTO, $PATH, /usr/sbin)",
	    0 },
	{ "dir", O_DIR, "DIR", "create the temporary directory in DIR (default: $TMPDIR, /tmp)", 0 },
	{ "timeout", O_TIMEOUT, "SECONDS", "how long to wait for the broker to answer (default 10)",
	    0 },
	{ "daemon", O_DAEMON, NULL, "print the lines, then detach; stop with kill $RUN_PID", 0 },
	{ "export", O_EXPORT, NULL,
	    "print `export KEY=value`, so that after\neval \"$(" PROG " --daemon --export)\" "
	    "programs\nstarted from the shell see the variables too",
	    0 },
	MQC_CLI_END,
};

/* What the command line sets; main owns and frees the two lists. */
struct settings {
	struct tb_options opt;
	const char ***plugin_opts, ***conf_lines;
	size_t nplugin_opts, nconf_lines;
	bool daemon_mode;
};

static int parse_port(const struct mqc_cli *cli, const char *name, const char *text, int *out)
{
	uint64_t v;
	if (mqc_parse_u64(text, 1, 65535, &v) != 0)
		return mqc_cli_bad(cli, name, text, "a port number 1-65535");
	*out = (int)v;
	return 0;
}

static int on_option(const struct mqc_cli *cli, int key, const char *name, const char *value)
{
	struct settings *st = cli->ctx;
	switch (key) {
		case O_PORT:
			return parse_port(cli, name, value, &st->opt.port);
		case O_TLS_PORT:
			return parse_port(cli, name, value, &st->opt.tls_port);
		case O_MTLS_PORT:
			return parse_port(cli, name, value, &st->opt.mtls_port);
		case O_NO_TLS:
			st->opt.no_tls = true;
			return 0;
		case O_WEBSOCKETS:
			st->opt.websockets = true;
			return 0;
		case O_NO_PROBE:
			st->opt.no_probe = true;
			return 0;
		case O_PLUGIN:
			st->opt.plugin = value;
			return 0;
		case O_PLUGIN_OPT:
			if (!strchr(value, '='))
				return mqc_cli_bad(cli, name, value, "KEY=VALUE");
			return add_item(st->plugin_opts, &st->nplugin_opts, value);
		case O_CONF_LINE:
			return add_item(st->conf_lines, &st->nconf_lines, value);
		case O_ANON:
			st->opt.allow_anonymous = true;
			return 0;
		case O_USERS: {
			uint64_t n;
			if (mqc_parse_u64(value, 1, TB_MAX_USERS, &n) != 0)
				return mqc_cli_bad(cli, name, value, "a count from 1 to 100000");
			st->opt.users = (unsigned)n;
			return 0;
		}
		case O_MOSQUITTO:
			st->opt.mosquitto = value;
			return 0;
		case O_DIR:
			st->opt.parent_dir = value;
			return 0;
		case O_TIMEOUT:
			if (mqc_parse_double(value, 0.1, 3600, &st->opt.start_timeout_s) != 0)
				return mqc_cli_bad(cli, name, value, "seconds (0.1-3600)");
			return 0;
		case O_DAEMON:
			st->daemon_mode = true;
			return 0;
		case O_EXPORT:
			export_lines = true;
			return 0;
		default:
			return -1;
	}
}

/* Everything but the --plugin-opt and --conf-line lists, which main owns and frees. */
static int run(int argc, char **argv, const char ***plugin_opts, const char ***conf_lines)
{
	struct settings st = { .plugin_opts = plugin_opts, .conf_lines = conf_lines };
	const struct mqc_cli cli = {
		.prog = PROG,
		.synopsis = "[OPTIONS]",
		.about
		= "Start a real mosquitto on free loopback ports with a generated configuration "
		  "(plain,\nTLS and mutual-TLS listeners, a TLS listener whose certificate names another "
		  "host,\na password file, an ACL file, the mqtt_probe plugin when it has been "
		  "built). Once\nthe broker answers an MQTT CONNECT, print KEY=value lines "
		  "(MQTT_URL, MQTTS_URL,\nMQTTS_MTLS_URL, MQTTS_OTHER_HOST_URL, WS_URL, WSS_URL, CA_FILE, "
		  "CLIENT_CERT, CLIENT_KEY, MQTT_USERNAME,\nMQTT_PASSWORD, BROKER_PID, BROKER_LOG, "
		  "METRICS_URL, ...) and stay in the foreground\nuntil interrupted. On exit the "
		  "broker is stopped and its directory removed.",
		.epilog = "Exit status: 0 after a clean stop, 1 if the broker could not start or died, "
		          "2 on bad\noptions.",
		.version = PROG " " MQTTPOOL_VERSION " (mqtt-pool)",
		.opts = options,
		.on_option = on_option,
		.ctx = &st,
	};
	int parsed = mqc_cli_parse(&cli, argc, argv);
	if (parsed != 0)
		return parsed == 1 ? 0 : 2;
	struct tb_options opt = st.opt;
	bool daemon_mode = st.daemon_mode;
	opt.plugin_opts = *plugin_opts;
	opt.conf_lines = *conf_lines;

	/* Signals are handled synchronously by supervise(); the broker gets a clean mask. */
	sigset_t signals;
	sigemptyset(&signals);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGHUP);
	sigprocmask(SIG_BLOCK, &signals, NULL);

	int report[2] = { -1, -1 };
	if (daemon_mode) {
		/* Detach before starting: the broker must be the child of the process that stays. */
		if (pipe2(report, O_CLOEXEC) != 0) {
			perror(PROG ": pipe");
			return 1;
		}
		pid_t child = fork();
		if (child < 0) {
			perror(PROG ": fork");
			return 1;
		}
		if (child > 0) {
			close(report[1]);
			FILE *in = fdopen(report[0], "r");
			char line[8192];
			int status = 1;
			while (in && fgets(line, sizeof line, in)) {
				if (strncmp(line, "ERROR ", 6) == 0) {
					fprintf(stderr, PROG ": %s", line + 6);
				} else if (strcmp(line, "READY\n") == 0) {
					status = 0;
					break;
				} else {
					fputs(line, stdout);
				}
			}
			if (status != 0)
				waitpid(child, NULL, 0);
			return status;
		}
		close(report[0]);
		setsid();
	}

	char err[1024];
	struct tb_broker *broker;
	int started = tb_broker_start(&opt, &broker, err, sizeof err);
	if (started != 0) {
		if (daemon_mode) {
			dprintf(report[1], "ERROR %s\n", err);
			return 1;
		}
		fprintf(stderr, PROG ": %s\n", err);
		return 1;
	}
	if (daemon_mode) {
		FILE *out = fdopen(report[1], "w");
		print_info(out, tb_broker_info(broker), getpid());
		fputs("READY\n", out);
		fclose(out);
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
		return supervise(broker, &signals, true);
	}
	print_info(stdout, tb_broker_info(broker), getpid());
	return supervise(broker, &signals, false);
}

int main(int argc, char **argv)
{
	/* A peer that goes away while we write is an error to handle, never the end of the process.
	 * libmosquitto 2.0 ignored SIGPIPE for the whole process; 2.0.15 and later do not, and
	 * OpenSSL writes TLS records with write(2) (mqbench died of it over TLS with 2.1's). */
	signal(SIGPIPE, SIG_IGN);
	const char **plugin_opts = NULL, **conf_lines = NULL;
	int rc = run(argc, argv, &plugin_opts, &conf_lines);
	free(plugin_opts);
	free(conf_lines);
	return rc;
}
