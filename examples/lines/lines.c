/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * lines.c - libmqttpool on a libuv loop, in about a hundred lines: every line of standard input
 * is a command sent to TOPIC, and every reply is printed with its line's number as it arrives.
 *
 *   printf 'open\nclose\n' | mqp-lines mqtt://127.0.0.1:1883 devices/door-1/commands/set
 *
 * The user name and password come from MQTT_USERNAME and MQTT_PASSWORD (never argv: other users
 * see a command line). Exit status: 0 when every line was answered, 1 otherwise, 2 bad usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "mqttpool_uv.h"

struct app {
	uv_loop_t *loop;
	mqp_pool *pool;
	const char *topic;
	uv_fs_t read_req;
	char buf[4096], line[4096];
	size_t len;
	bool too_long; /* the line being read did not fit: it is refused, not cut */
	unsigned sent, answered, failed;
	bool eof;
};

/* One line in flight. */
struct ask {
	struct app *app;
	unsigned n;
};

/* Every line answered (or failed) after the end of input: the pool goes, and with its handles
 * closed the loop ends. */
static void finish_if_done(struct app *a)
{
	if (a->eof && a->answered + a->failed == a->sent && a->pool) {
		mqp_pool_destroy(a->pool);
		a->pool = NULL;
	}
}

static void on_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct ask *q = userdata;
	struct app *a = q->app;
	if (result == MQP_OK) {
		printf("%u: %.*s\n", q->n, (int)reply->len, (const char *)reply->payload);
		a->answered++;
	} else {
		char why[256];
		fprintf(stderr, "%u: %s: %s\n", q->n, mqp_strerror(result),
		    mqp_pool_last_error(a->pool, why, sizeof why));
		a->failed++;
	}
	free(q);
	finish_if_done(a);
}

static void send_line(struct app *a)
{
	struct ask *q = malloc(sizeof *q);
	if (!q || a->too_long) {
		fprintf(
		    stderr, "%u: %s\n", ++a->sent, q ? "longer than 4096 bytes: not sent" : "no memory");
		a->failed++;
		a->too_long = false;
		free(q);
		return;
	}
	*q = (struct ask) { .app = a, .n = ++a->sent };
	mqp_err rc
	    = mqp_pool_request_async(a->pool, a->topic, a->line, a->len, 1, 5000, on_reply, q, NULL);
	if (rc != MQP_OK) { /* the callback will not run */
		fprintf(stderr, "%u: %s\n", q->n, mqp_strerror(rc));
		a->failed++;
		free(q);
	}
}

/* Standard input through libuv's file reads (a pipe, a terminal or a file alike). */
static void on_read(uv_fs_t *req)
{
	struct app *a = req->data;
	ssize_t n = req->result;
	uv_fs_req_cleanup(req);
	for (ssize_t i = 0; i < n; i++) {
		if (a->buf[i] == '\n')
			send_line(a), a->len = 0;
		else if (a->len < sizeof a->line)
			a->line[a->len++] = a->buf[i];
		else
			a->too_long = true;
	}
	if (n > 0) {
		uv_buf_t b = uv_buf_init(a->buf, sizeof a->buf);
		uv_fs_read(a->loop, &a->read_req, 0, &b, 1, -1, on_read);
		return;
	}
	if (n < 0)
		fprintf(stderr, "mqp-lines: reading standard input: %s\n", uv_strerror((int)n));
	if (a->len) /* a last line without its newline */
		send_line(a), a->len = 0;
	a->eof = true;
	finish_if_done(a);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: mqp-lines BROKER_URL TOPIC < commands (one per line)\n");
		return 2;
	}
	struct app a = { .loop = uv_default_loop(), .topic = argv[2] };
	struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT;
	o.username = getenv("MQTT_USERNAME");
	o.password = getenv("MQTT_PASSWORD");
	char err[256];
	if (mqp_uv_pool_new(a.loop, argv[1], &o, &a.pool, err, sizeof err) != MQP_OK) {
		fprintf(stderr, "mqp-lines: %s\n", err);
		return 2;
	}
	a.read_req.data = &a;
	uv_buf_t b = uv_buf_init(a.buf, sizeof a.buf);
	uv_fs_read(a.loop, &a.read_req, 0, &b, 1, -1, on_read);
	uv_run(a.loop, UV_RUN_DEFAULT);
	uv_loop_close(a.loop);
	return a.failed || a.answered != a.sent ? 1 : 0;
}
