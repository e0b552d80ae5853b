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
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqc_strutil.h"
#include "tb_broker.h"

#define PROG "test-broker/run"

static void usage(FILE *out)
{
	fprintf(out,
	    "Usage: " PROG " [OPTIONS]\n"
	    "Start a real mosquitto on free loopback ports with a generated configuration (plain,\n"
	    "TLS and mutual-TLS listeners, a password file, an ACL file, the mqtt_probe plugin when\n"
	    "it has been built). Once the broker answers an MQTT CONNECT, print KEY=value lines\n"
	    "(MQTT_URL, MQTTS_URL, MQTTS_MTLS_URL, CA_FILE, CLIENT_CERT, CLIENT_KEY, MQTT_USERNAME,\n"
	    "MQTT_PASSWORD, BROKER_PID, BROKER_LOG, METRICS_URL, ...) and stay in the foreground\n"
	    "until interrupted. On exit the broker is stopped and its directory removed.\n"
	    "\n"
	    "  --port N             plain listener port (default: a free port)\n"
	    "  --tls-port N         TLS listener port (default: a free port)\n"
	    "  --mtls-port N        mutual-TLS listener port (default: a free port)\n"
	    "  --no-tls             no TLS listeners, no certificates\n"
	    "  --no-probe           do not load the probe plugin\n"
	    "  --plugin PATH        load this plugin instead of the built probe\n"
	    "  --plugin-opt K=V     add `plugin_opt_K V` (repeatable)\n"
	    "  --conf-line LINE     append a line to mosquitto.conf (repeatable)\n"
	    "  --allow-anonymous    let clients connect without a username\n"
	    "  --mosquitto PATH     broker binary (default: $TB_MOSQUITTO, $PATH, /usr/sbin)\n"
	    "  --dir DIR            create the temporary directory in DIR (default: $TMPDIR, /tmp)\n"
	    "  --timeout SECONDS    how long to wait for the broker to answer (default 10)\n"
	    "  --daemon             print the lines, then detach; stop with kill $RUN_PID\n"
	    "  --export             print `export KEY=value`, so that after\n"
	    "                       eval \"$(" PROG " --daemon --export)\" programs started from\n"
	    "                       the shell see the variables too\n"
	    "  -h, --help           this text\n"
	    "  --version            the version\n"
	    "\n"
	    "Exit status: 0 after a clean stop, 1 if the broker could not start or died, 2 on bad\n"
	    "options.\n");
}

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
		print_line(out, "CA_FILE", info->ca_file);
		print_line(out, "CLIENT_CERT", info->client_cert);
		print_line(out, "CLIENT_KEY", info->client_key);
	}
	print_line(out, "MQTT_USERNAME", info->username);
	print_line(out, "MQTT_PASSWORD", info->password);
	print_line(out, "MQTT_OTHER_USERNAME", info->other_username);
	print_line(out, "MQTT_OTHER_PASSWORD", info->other_password);
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

static int parse_port(const char *opt, const char *text, int *out)
{
	uint64_t v;
	if (mqc_parse_u64(text, 1, 65535, &v) != 0) {
		fprintf(stderr, PROG ": %s expects a port number 1-65535, got '%s'\n", opt, text);
		return -1;
	}
	*out = (int)v;
	return 0;
}

/* Everything but the --plugin-opt and --conf-line lists, which main owns and frees. */
static int run(int argc, char **argv, const char ***plugin_opts, const char ***conf_lines)
{
	enum {
		O_PORT = 256,
		O_TLS_PORT,
		O_MTLS_PORT,
		O_NO_TLS,
		O_NO_PROBE,
		O_PLUGIN,
		O_PLUGIN_OPT,
		O_CONF_LINE,
		O_ANON,
		O_MOSQUITTO,
		O_DIR,
		O_TIMEOUT,
		O_DAEMON,
		O_EXPORT
	};
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, O_PORT },
		{ "tls-port", required_argument, NULL, O_TLS_PORT },
		{ "mtls-port", required_argument, NULL, O_MTLS_PORT },
		{ "no-tls", no_argument, NULL, O_NO_TLS },
		{ "no-probe", no_argument, NULL, O_NO_PROBE },
		{ "plugin", required_argument, NULL, O_PLUGIN },
		{ "plugin-opt", required_argument, NULL, O_PLUGIN_OPT },
		{ "conf-line", required_argument, NULL, O_CONF_LINE },
		{ "allow-anonymous", no_argument, NULL, O_ANON },
		{ "mosquitto", required_argument, NULL, O_MOSQUITTO },
		{ "dir", required_argument, NULL, O_DIR },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "daemon", no_argument, NULL, O_DAEMON },
		{ "export", no_argument, NULL, O_EXPORT },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct tb_options opt = { 0 };
	size_t nplugin_opts = 0, nconf_lines = 0;
	bool daemon_mode = false;

	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
			case O_PORT:
				if (parse_port("--port", optarg, &opt.port) != 0)
					return 2;
				break;
			case O_TLS_PORT:
				if (parse_port("--tls-port", optarg, &opt.tls_port) != 0)
					return 2;
				break;
			case O_MTLS_PORT:
				if (parse_port("--mtls-port", optarg, &opt.mtls_port) != 0)
					return 2;
				break;
			case O_NO_TLS:
				opt.no_tls = true;
				break;
			case O_NO_PROBE:
				opt.no_probe = true;
				break;
			case O_PLUGIN:
				opt.plugin = optarg;
				break;
			case O_PLUGIN_OPT:
				if (!strchr(optarg, '=')) {
					fprintf(stderr, PROG ": --plugin-opt expects KEY=VALUE, got '%s'\n", optarg);
					return 2;
				}
				if (add_item(plugin_opts, &nplugin_opts, optarg) != 0)
					return 1;
				break;
			case O_CONF_LINE:
				if (add_item(conf_lines, &nconf_lines, optarg) != 0)
					return 1;
				break;
			case O_ANON:
				opt.allow_anonymous = true;
				break;
			case O_MOSQUITTO:
				opt.mosquitto = optarg;
				break;
			case O_DIR:
				opt.parent_dir = optarg;
				break;
			case O_TIMEOUT:
				if (mqc_parse_double(optarg, 0.1, 3600, &opt.start_timeout_s) != 0) {
					fprintf(
					    stderr, PROG ": --timeout expects seconds (0.1-3600), got '%s'\n", optarg);
					return 2;
				}
				break;
			case O_DAEMON:
				daemon_mode = true;
				break;
			case O_EXPORT:
				export_lines = true;
				break;
			case 'h':
				usage(stdout);
				return 0;
			case 'V':
				printf(PROG " %s (mqtt-pool)\n", MQTTPOOL_VERSION);
				return 0;
			case ':':
				fprintf(
				    stderr, PROG ": option '%s' needs a value (see --help)\n", argv[optind - 1]);
				return 2;
			default:
				fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", argv[optind - 1]);
				return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
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
	const char **plugin_opts = NULL, **conf_lines = NULL;
	int rc = run(argc, argv, &plugin_opts, &conf_lines);
	free(plugin_opts);
	free(conf_lines);
	return rc;
}
