/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * broker.c - start, probe for readiness, restart and stop a real mosquitto.
 */
#define _GNU_SOURCE /* realpath */
#include "tb_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <mosquitto.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_strutil.h"

#ifndef TB_PROBE_PATH
#define TB_PROBE_PATH ""
#endif
#ifndef TB_SANITIZER_PRELOAD
#define TB_SANITIZER_PRELOAD ""
#endif

enum { MAX_PORT_RETRIES = 5, STOP_GRACE_MS = 5000 };

struct tb_broker {
	struct tb_info info;
	char mosquitto[TB_PATH_MAX];
	char stderr_log[TB_PATH_MAX + 32];
	char preload[TB_PATH_MAX];
	uint64_t start_timeout_ns;
	bool any_connack; /* without a password file the test user may be refused: still an answer */
	/* the probe's endpoint may want TLS or a password (plugin_opt_web_config): loaded with the
	 * plugin before the broker answers CONNECT, it is not asked for a plain 200 */
	bool metrics_secured;
	bool exited;
	int status;
};

const char *tb_default_probe_path(void)
{
	return TB_PROBE_PATH;
}

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_init(void)
{
	mosquitto_lib_init();
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ms * 1000000L };
	nanosleep(&ts, NULL);
}

static void on_connect(struct mosquitto *m, void *userdata, int rc)
{
	(void)m;
	*(int *)userdata = rc;
}

static bool connack_in(const void *arg)
{
	return *(const int *)arg >= 0;
}

static bool connecting(const void *arg)
{
	return !connack_in(arg);
}

/*
 * One MQTT CONNECT as the test user. Returns 0 on CONNACK 0, a positive CONNACK code when the
 * broker refused, -1 when it did not answer (not listening yet, or no CONNACK by the deadline).
 */
static int try_connect(const struct tb_broker *b, uint64_t deadline)
{
	int connack = -1;
	struct mqc_conn_opts o = {
		.url = { .port = b->info.port },
		.username = b->info.username,
		.password = b->info.password,
		.id_prefix = "tb-ping",
		.protocol = 4, /* on_connect below is the 3.1.1 callback: CONNACK return codes */
	};
	snprintf(o.url.host, sizeof o.url.host, "127.0.0.1");
	char err[256];
	struct mosquitto *m = mqc_client_new(&o, &connack, NULL, err, sizeof err);
	if (!m)
		return -1;
	mosquitto_connect_callback_set(m, on_connect);
	if (mqc_client_connect(m, &o, err, sizeof err) == 0)
		mqc_client_wait(m, connack_in, connecting, &connack, deadline);
	mqc_client_close(m, 100);
	return connack;
}

/* Returns the HTTP status of GET /metrics, or -1. */
static int http_status(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	struct sockaddr_in addr = { .sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int status = -1;
	static const char request[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
	char reply[64] = "";
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0
	    && send(fd, request, sizeof request - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof request - 1)
	    && recv(fd, reply, sizeof reply - 1, 0) > 12 && strncmp(reply, "HTTP/1.", 7) == 0)
		status = (int)strtol(reply + 9, NULL, 10);
	close(fd);
	return status;
}

bool tb_broker_alive(struct tb_broker *b, int *status)
{
	if (!b->exited) {
		int st;
		pid_t r = waitpid(b->info.pid, &st, WNOHANG);
		if (r == b->info.pid) {
			b->exited = true;
			b->status = st;
		}
	}
	if (b->exited && status)
		*status = b->status;
	return !b->exited;
}

static void describe_exit(const struct tb_broker *b, char *err, size_t errlen)
{
	/* An error line from the log, else one from stderr, else stderr's last words. */
	char why[512] = "no log output", other[512];
	if (tb__log_excerpt(b->info.log_file, why, sizeof why) != 1
	    && tb__log_excerpt(b->stderr_log, other, sizeof other) >= 0)
		memcpy(why, other, sizeof why);
	if (WIFEXITED(b->status))
		snprintf(err, errlen, "mosquitto exited with status %d during start-up: %s",
		    WEXITSTATUS(b->status), why);
	else
		snprintf(err, errlen, "mosquitto was killed by signal %d during start-up: %s",
		    WTERMSIG(b->status), why);
}

/* Launch the broker on the written configuration and wait until it serves. */
static int launch(struct tb_broker *b, char *err, size_t errlen)
{
	char *argv[] = { b->mosquitto, "-c", b->info.conf_file, NULL };
	b->exited = false;
	b->info.pid = tb__spawn(argv, b->stderr_log, b->preload[0] ? b->preload : NULL, err, errlen);
	if (b->info.pid < 0)
		return -1;

	uint64_t deadline = mqc_now_ns() + b->start_timeout_ns;
	for (;;) {
		if (!tb_broker_alive(b, NULL)) {
			describe_exit(b, err, errlen);
			return -1;
		}
		int connack = try_connect(b, deadline);
		if (connack == 0)
			break;
		if (connack > 0 && b->any_connack)
			break;
		if (connack > 0) {
			/* Another test's broker may have taken our free port between the check and our
			 * broker's bind: then that one refused us (other credentials) and ours is on its
			 * way out with "Address already in use". Give it a moment to say so, so that the
			 * caller picks new ports instead of failing. */
			for (int i = 0; i < 100 && tb_broker_alive(b, NULL); i++)
				sleep_ms(10);
			if (!tb_broker_alive(b, NULL)) {
				describe_exit(b, err, errlen);
				return -1;
			}
			snprintf(err, errlen, "mosquitto refused the test user's CONNECT: %s",
			    mosquitto_connack_string(connack));
			goto kill;
		}
		if (mqc_now_ns() >= deadline) {
			/* A broker that failed to start may still hang on its way out (seen: 2.1.2 under a
			 * sanitizer runtime, in a library destructor): say what its log says. */
			char why[512];
			if (tb__log_excerpt(b->info.log_file, why, sizeof why) == 1
			    || tb__log_excerpt(b->stderr_log, why, sizeof why) == 1)
				snprintf(err, errlen,
				    "mosquitto did not answer CONNECT on port %d within %.1f s: %s", b->info.port,
				    (double)b->start_timeout_ns / 1e9, why);
			else
				snprintf(err, errlen, "mosquitto did not answer CONNECT on port %d within %.1f s",
				    b->info.port, (double)b->start_timeout_ns / 1e9);
			goto kill;
		}
		sleep_ms(10);
	}
	while (
	    b->info.metrics_port && !b->metrics_secured && http_status(b->info.metrics_port) != 200) {
		if (!tb_broker_alive(b, NULL)) {
			describe_exit(b, err, errlen);
			return -1;
		}
		if (mqc_now_ns() >= deadline) {
			snprintf(err, errlen, "the probe did not serve %s within %.1f s", b->info.metrics_url,
			    (double)b->start_timeout_ns / 1e9);
			goto kill;
		}
		sleep_ms(10);
	}
	return 0;

kill:
	b->status = tb__terminate(b->info.pid, STOP_GRACE_MS);
	b->exited = true;
	return -1;
}

static const char *plugin_opt_value(const char *const *opts, const char *key)
{
	size_t klen = strlen(key);
	for (const char *const *o = opts; o && *o; o++) {
		const char *item = *o;
		if (strncmp(item, "plugin_opt_", 11) == 0)
			item += 11;
		if (strncmp(item, key, klen) == 0 && item[klen] == '=')
			return item + klen + 1;
	}
	return NULL;
}

static int pick_port(
    int wanted, const int *taken, size_t ntaken, const char *what, char *err, size_t errlen)
{
	if (wanted) {
		if (!tb__port_is_free(wanted)) {
			snprintf(err, errlen, "%s port %d is already in use on 127.0.0.1", what, wanted);
			return -1;
		}
		return wanted;
	}
	for (int attempt = 0; attempt < 100; attempt++) {
		int port = tb__free_port();
		bool clash = port < 0;
		for (size_t i = 0; i < ntaken && !clash; i++)
			clash = taken[i] == port;
		if (!clash)
			return port;
	}
	snprintf(err, errlen, "no free port on 127.0.0.1 for the %s listener", what);
	return -1;
}

static int write_file(const char *path, int (*writer)(FILE *, const void *), const void *arg,
    char *err, size_t errlen)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	int rc = writer(f, arg);
	if (fclose(f) != 0 || rc != 0) {
		snprintf(err, errlen, "cannot write %s", path);
		return -1;
	}
	return 0;
}

static int write_acl(FILE *f, const void *arg)
{
	(void)arg;
	return tb__write_acl(f);
}

static int write_passwd(FILE *f, const void *arg)
{
	const struct tb_info *info = arg;
	if (tb__write_password_line(f, info->username, info->password) != 0
	    || tb__write_password_line(f, info->other_username, info->other_password) != 0)
		return -1;
	/* The devices: user i and its password are the templates with %06i as i. */
	for (unsigned i = 0; i < info->users; i++) {
		char user[64], password[64];
		snprintf(user, sizeof user, "device-%06u", i);
		snprintf(password, sizeof password, "%.*s%06u",
		    (int)(strlen(info->user_password_template) - 4), info->user_password_template, i);
		if (tb__write_password_line(f, user, password) != 0)
			return -1;
	}
	return 0;
}

struct conf_args {
	const struct tb_conf *conf;
	char *err;
	size_t errlen;
};

static int write_conf(FILE *f, const void *arg)
{
	const struct conf_args *a = arg;
	return tb__write_conf(f, a->conf, a->err, a->errlen);
}

static void current_user(char *out, size_t len)
{
	struct passwd *pw = getpwuid(geteuid());
	if (pw)
		mqc_strlcpy(out, pw->pw_name, len);
	else
		snprintf(out, len, "%u", (unsigned)geteuid());
}

int tb_broker_start(
    const struct tb_options *options, struct tb_broker **out, char *err, size_t errlen)
{
	static const struct tb_options defaults = { 0 };
	const struct tb_options *o = options ? options : &defaults;
	char parent[TB_PATH_MAX];
	struct tb_broker *b = calloc(1, sizeof *b);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_once(&lib_once, lib_init);
	struct tb_info *info = &b->info;
	info->username = TB_USERNAME;
	info->other_username = TB_OTHER_USERNAME;
	b->start_timeout_ns = (uint64_t)((o->start_timeout_s > 0 ? o->start_timeout_s : 10.0) * 1e9);
	if (o->preload)
		mqc_strlcpy(b->preload, o->preload, sizeof b->preload);
	b->any_connack = o->no_password_file;
	b->metrics_secured = plugin_opt_value(o->plugin_opts, "web_config") != NULL;

	const char *binary = o->mosquitto ? o->mosquitto : getenv("TB_MOSQUITTO");
	if (tb__find_program(binary ? binary : "mosquitto", "/usr/sbin:/usr/local/sbin", b->mosquitto,
	        sizeof b->mosquitto)
	    != 0) {
		if (binary)
			snprintf(err, errlen, "mosquitto not found at '%s'", binary);
		else
			snprintf(err, errlen,
			    "mosquitto not found in $PATH, /usr/sbin or /usr/local/sbin: "
			    "install it (scripts/setup) or give its path");
		free(b);
		return -1;
	}

	const char *plugin = NULL;
	if (o->plugin) {
		if (access(o->plugin, R_OK) != 0) {
			snprintf(err, errlen, "plugin '%s' not readable: %s", o->plugin, strerror(errno));
			free(b);
			return -1;
		}
		plugin = o->plugin;
	} else if (!o->no_probe && strcmp(TB_PROBE_PATH, "") != 0 && access(TB_PROBE_PATH, R_OK) == 0) {
		plugin = TB_PROBE_PATH;
	}
	if (plugin && !realpath(plugin, info->plugin))
		mqc_strlcpy(info->plugin, plugin, sizeof info->plugin);
	/* A sanitized build of the probe needs its runtime preloaded into the stock broker. */
	if (plugin && !o->preload && strcmp(TB_SANITIZER_PRELOAD, "") != 0
	    && strcmp(plugin, TB_PROBE_PATH) == 0)
		mqc_strlcpy(b->preload, TB_SANITIZER_PRELOAD, sizeof b->preload);

	const char *tmp = o->parent_dir ? o->parent_dir : getenv("TMPDIR");
	snprintf(parent, sizeof parent, "%s", tmp && *tmp ? tmp : "/tmp");
	if ((size_t)snprintf(info->dir, sizeof info->dir, "%s/mqp-broker-XXXXXX", parent)
	        >= sizeof info->dir
	    || !mkdtemp(info->dir)) {
		snprintf(err, errlen, "cannot create a directory in %s: %s", parent, strerror(errno));
		free(b);
		return -1;
	}
	/* From here on failures remove the directory. */
	snprintf(info->conf_file, sizeof info->conf_file, "%s/mosquitto.conf", info->dir);
	snprintf(info->log_file, sizeof info->log_file, "%s/mosquitto.log", info->dir);
	snprintf(b->stderr_log, sizeof b->stderr_log, "%s/broker.stderr", info->dir);
	char acl[TB_PATH_MAX + 16], passwd[TB_PATH_MAX + 16];
	snprintf(acl, sizeof acl, "%s/acl", info->dir);
	snprintf(passwd, sizeof passwd, "%s/passwd", info->dir);
	char token[17];
	if (tb__random_password(info->password, 25) != 0
	    || tb__random_password(info->other_password, 25) != 0
	    || tb__random_password(token, sizeof token) != 0) {
		snprintf(err, errlen, "cannot generate passwords (OpenSSL RAND_bytes failed)");
		goto fail;
	}
	info->users = o->users > TB_MAX_USERS ? TB_MAX_USERS : o->users;
	snprintf(info->user_template, sizeof info->user_template, "device-%%06i");
	snprintf(
	    info->user_password_template, sizeof info->user_password_template, "pw-%s-%%06i", token);
	if (write_file(acl, write_acl, NULL, err, errlen) != 0
	    || write_file(passwd, write_passwd, info, err, errlen) != 0)
		goto fail;
	if (!o->no_tls) {
		if (tb__make_certs(info->dir, err, errlen) != 0)
			goto fail;
		snprintf(info->ca_file, sizeof info->ca_file, "%s/ca.crt", info->dir);
		snprintf(info->client_cert, sizeof info->client_cert, "%s/client.crt", info->dir);
		snprintf(info->client_key, sizeof info->client_key, "%s/client.key", info->dir);
	}
	char server_cert[TB_PATH_MAX + 16], server_key[TB_PATH_MAX + 16], user[256];
	snprintf(server_cert, sizeof server_cert, "%s/server.crt", info->dir);
	snprintf(server_key, sizeof server_key, "%s/server.key", info->dir);
	current_user(user, sizeof user);

	/* The probe serves /metrics on a port we choose, unless told otherwise. */
	const char **plugin_opts = NULL;
	size_t nopts = 0;
	while (o->plugin_opts && o->plugin_opts[nopts])
		nopts++;
	plugin_opts = calloc(nopts + 2, sizeof *plugin_opts);
	if (!plugin_opts) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < nopts; i++)
		plugin_opts[i] = o->plugin_opts[i];
	char listen_opt[64];
	bool is_probe = plugin && strstr(plugin, "mqtt_probe");
	const char *http_listen = plugin_opt_value(o->plugin_opts, "http_listen");

	for (int attempt = 0;; attempt++) {
		int taken[7];
		size_t ntaken = 0;
		if ((info->port = pick_port(o->port, taken, ntaken, "plain", err, errlen)) < 0)
			goto fail_opts;
		taken[ntaken++] = info->port;
		info->tls_port = info->mtls_port = info->other_host_port = info->metrics_port = 0;
		info->ws_port = info->wss_port = 0;
		if (o->websockets) {
			if ((info->ws_port = pick_port(0, taken, ntaken, "WebSockets", err, errlen)) < 0)
				goto fail_opts;
			taken[ntaken++] = info->ws_port;
			if (!o->no_tls
			    && (info->wss_port = pick_port(0, taken, ntaken, "WebSockets TLS", err, errlen))
			        < 0)
				goto fail_opts;
			if (info->wss_port)
				taken[ntaken++] = info->wss_port;
		}
		if (!o->no_tls) {
			if ((info->tls_port = pick_port(o->tls_port, taken, ntaken, "TLS", err, errlen)) < 0)
				goto fail_opts;
			taken[ntaken++] = info->tls_port;
			if ((info->mtls_port
			        = pick_port(o->mtls_port, taken, ntaken, "mutual-TLS", err, errlen))
			    < 0)
				goto fail_opts;
			taken[ntaken++] = info->mtls_port;
			if ((info->other_host_port = pick_port(0, taken, ntaken, "other-host TLS", err, errlen))
			    < 0)
				goto fail_opts;
			taken[ntaken++] = info->other_host_port;
		}
		if (is_probe && !http_listen) {
			if ((info->metrics_port = pick_port(0, taken, ntaken, "metrics", err, errlen)) < 0)
				goto fail_opts;
			snprintf(listen_opt, sizeof listen_opt, "http_listen=127.0.0.1:%d", info->metrics_port);
			plugin_opts[nopts] = listen_opt;
		} else if (is_probe && strcmp(http_listen, "off") != 0) {
			const char *colon = strrchr(http_listen, ':');
			info->metrics_port = colon ? (int)strtol(colon + 1, NULL, 10) : 0; /* ours: valid */
		}
		snprintf(info->mqtt_url, sizeof info->mqtt_url, "mqtt://127.0.0.1:%d", info->port);
		info->mqtts_url[0] = info->mtls_url[0] = info->other_host_url[0] = info->metrics_url[0]
		    = '\0';
		if (info->tls_port) {
			snprintf(
			    info->mqtts_url, sizeof info->mqtts_url, "mqtts://127.0.0.1:%d", info->tls_port);
			snprintf(
			    info->mtls_url, sizeof info->mtls_url, "mqtts://127.0.0.1:%d", info->mtls_port);
			snprintf(info->other_host_url, sizeof info->other_host_url, "mqtts://127.0.0.1:%d",
			    info->other_host_port);
		}
		info->ws_url[0] = info->wss_url[0] = '\0';
		if (info->ws_port)
			snprintf(info->ws_url, sizeof info->ws_url, "ws://127.0.0.1:%d/mqtt", info->ws_port);
		if (info->wss_port)
			snprintf(
			    info->wss_url, sizeof info->wss_url, "wss://127.0.0.1:%d/mqtt", info->wss_port);
		if (info->metrics_port)
			snprintf(info->metrics_url, sizeof info->metrics_url, "http://127.0.0.1:%d/metrics",
			    info->metrics_port);

		struct tb_conf conf = {
			.user = user,
			.port = info->port,
			.tls_port = info->tls_port,
			.mtls_port = info->mtls_port,
			.other_host_port = info->other_host_port,
			.ws_port = info->ws_port,
			.wss_port = info->wss_port,
			.dir = info->dir,
			.ca_file = info->ca_file,
			.server_cert = server_cert,
			.server_key = server_key,
			.plugin = plugin ? info->plugin : NULL,
			.plugin_opts = plugin_opts,
			.conf_lines = o->conf_lines,
			.allow_anonymous = o->allow_anonymous,
			.password_file = !o->no_password_file,
			.acl_file = !o->no_acl_file,
		};
		struct conf_args args = { &conf, err, errlen };
		if (write_file(info->conf_file, write_conf, &args, err, errlen) != 0)
			goto fail_opts;
		if (launch(b, err, errlen) == 0)
			break;
		/* Another process may take a free port between our check and the broker's bind. */
		bool fixed_http = http_listen && strcmp(http_listen, "off") != 0;
		bool auto_ports = !o->port && !o->tls_port && !o->mtls_port && !fixed_http;
		if (!auto_ports || attempt + 1 >= MAX_PORT_RETRIES || !strstr(err, "in use"))
			goto fail_opts;
		unlink(info->log_file);
		unlink(b->stderr_log);
	}
	free(plugin_opts);
	*out = b;
	return 0;

fail_opts:
	free(plugin_opts);
fail:
	tb__remove_tree(info->dir);
	free(b);
	return -1;
}

const struct tb_info *tb_broker_info(const struct tb_broker *b)
{
	return &b->info;
}

int tb_broker_restart(struct tb_broker *b, char *err, size_t errlen)
{
	if (!b->exited)
		b->status = tb__terminate(b->info.pid, STOP_GRACE_MS);
	b->exited = true;
	return launch(b, err, errlen);
}

int tb_broker_signal(struct tb_broker *b, int sig)
{
	if (!tb_broker_alive(b, NULL))
		return -1;
	return kill(b->info.pid, sig);
}

static void copy_file(const char *title, const char *path, FILE *out)
{
	FILE *f = fopen(path, "r");
	fprintf(out, "----- %s (%s) -----\n", title, path);
	if (!f) {
		fprintf(out, "(missing)\n");
		return;
	}
	char buf[4096];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		fwrite(buf, 1, n, out);
	fclose(f);
}

void tb_broker_dump_log(const struct tb_broker *b, FILE *out)
{
	copy_file("broker log", b->info.log_file, out);
	copy_file("broker stdout/stderr", b->stderr_log, out);
	fprintf(out, "----- end of broker log -----\n");
	fflush(out);
}

void tb_broker_stop(struct tb_broker *b)
{
	if (!b)
		return;
	if (!b->exited)
		tb__terminate(b->info.pid, STOP_GRACE_MS);
	tb__remove_tree(b->info.dir);
	free(b);
}
