/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * command.c - what a gate-api request asks (worker.h): a device command, sent through the
 * worker's pool (mqp_pool_request_async, or its legacy form) or the naive route (a connection per
 * command, driven by the worker's loop), answered when the reply, the timeout or the client's
 * going away completes it; and /healthz and /metrics. Runs on the worker's thread.
 *
 * A call that waits for a device always completes (reply, timeout, error, or cancel when its
 * client goes away) before its connection reads the next request; a struct naive_op lives until
 * its handles close.
 */
#define _GNU_SOURCE
#include <mosquitto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqc_clock.h"
#include "mqc_request.h"
#include "mqc_template.h"
#include "worker.h"

enum { NODES_LISTED = 16 }; /* the pool takes at most 16 brokers in its URL */

/* --- answering a command ---------------------------------------------------------------------- */

/* A command's answer, once it is done. */
static void respond_command(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	struct conn *cn = c->cn;
	const struct gate_route *rt = &c->route;
	char why[512] = "";
	if (c->rc == MQP_OK && !c->reply) {
		snprintf(why, sizeof why, "device %s answered %s with more than %zu bytes (--max-reply)",
		    rt->device, rt->command, s->cfg.max_reply);
		gate_respond_error(cn, rt, 502, "reply_too_large", why);
		return;
	}
	if (c->rc == MQP_OK) {
		gate_observe_duration(&s->counters, rt->backend, c->took);
		gate_count(&s->counters, rt->backend, 200);
		gate_respond_text(cn, 200, "application/json",
		    gate_reply_json(rt, c->reply, c->reply_len, c->took), false, gate_closes(cn, 200));
		return;
	}
	if (c->rc == MQP_ETIMEDOUT)
		snprintf(why, sizeof why, "device %s did not answer %s within %u ms", rt->device,
		    rt->command, s->cfg.timeout_ms);
	else if (c->rc == MQP_ENORESPONDER)
		snprintf(why, sizeof why,
		    "the broker found nobody subscribed to device %s's %s command: the device is not "
		    "connected, or does not listen for it",
		    rt->device, rt->command);
	else if ((c->rc == MQP_ECONNECT || c->rc == MQP_EREFUSED || c->rc == MQP_ECONNLOST)
	    && rt->backend == GATE_POOL)
		mqp_pool_last_error(w->pool, why, sizeof why);
	else if (rt->backend == GATE_NAIVE)
		snprintf(why, sizeof why, "%s", c->err);
	if (!why[0])
		snprintf(why, sizeof why, "%s", mqp_strerror(c->rc));
	gate_respond_error(cn, rt, gate_http_status(c->rc), gate_error_code(c->rc), why);
}

/* The command is done (reply: a malloc'd copy or NULL): answer, or, when its client went away,
 * let the call go with its connection. */
static void complete(struct call *c, int rc, void *reply, size_t reply_len)
{
	struct conn *cn = c->cn;
	c->took = mqc_now_ns() - c->t0;
	c->rc = rc;
	c->reply = reply;
	c->reply_len = reply_len;
	c->state = CALL_DONE;
	atomic_fetch_sub(&cn->w->s->counters.pending, 1);
	if (c->client_gone || cn->closing) {
		gate_end_call(cn);
		gate_conn_close(cn);
		return;
	}
	respond_command(cn->w, c);
}

static void on_pool_reply(void *userdata, int result, const struct mqp_reply *reply)
{
	struct call *c = userdata;
	void *copy = NULL;
	size_t len = 0;
	if (result == MQP_OK && reply->len <= c->cn->w->s->cfg.max_reply) {
		copy = malloc(reply->len + 1);
		if (copy) {
			memcpy(copy, reply->payload, reply->len);
			((char *)copy)[reply->len] = '\0';
			len = reply->len;
		} else
			result = MQP_ENOMEM;
	}
	complete(c, result, copy, len);
}

/* --- the naive route on the loop ----------------------------------------------------------- */

static int naive_status(int mqc_req_result)
{
	switch (mqc_req_result) {
		case MQC_REQ_OK:
			return MQP_OK;
		case MQC_REQ_TIMEDOUT:
			return MQP_ETIMEDOUT;
		case MQC_REQ_CONNECT:
			return MQP_ECONNECT;
		case MQC_REQ_REFUSED:
			return MQP_EREFUSED;
		case MQC_REQ_DENIED:
			return MQP_EDENIED;
		case MQC_REQ_NORESPONDER:
			return MQP_ENORESPONDER;
		case MQC_REQ_NOMEM:
			return MQP_ENOMEM;
		default:
			return MQP_ECONNLOST;
	}
}

static void naive_closed(uv_handle_t *h)
{
	struct naive_op *op = h->data;
	if (--op->handles == 0)
		free(op);
}

/* Complete op's call with rc (and the reply on MQP_OK), close its connection, free it. */
static void naive_finish(struct naive_op *op, int rc, struct mqc_req_reply *reply)
{
	struct worker *w = op->w;
	struct call *c = op->call;
	op->call = NULL;
	if (c)
		c->naive = NULL;
	if (op->prev)
		op->prev->next = op->next;
	else
		w->naive_ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	uv_close((uv_handle_t *)&op->poll, naive_closed); /* before the socket closes */
	uv_close((uv_handle_t *)&op->timer, naive_closed);
	mqc_requester_abort(op->r);
	op->r = NULL;
	void *payload = NULL;
	size_t len = 0;
	if (rc == MQP_OK && reply) {
		if (reply->len <= w->s->cfg.max_reply) {
			payload = reply->payload;
			len = reply->len;
			reply->payload = NULL;
		}
		mqc_req_reply_free(reply);
	}
	if (c)
		complete(c, rc, payload, len);
}

static void naive_watch(struct naive_op *op);

static void naive_on_io(uv_poll_t *h, int status, int events)
{
	struct naive_op *op = h->data;
	struct mqc_req_reply reply;
	/* An error on the socket: read, and libmosquitto finds it. */
	bool readable = status < 0 || (events & (UV_READABLE | UV_DISCONNECT));
	int rc = mqc_request_step(op->r, readable, status == 0 && (events & UV_WRITABLE), &reply,
	    op->call->err, sizeof op->call->err);
	if (rc == MQC_REQ_PENDING)
		naive_watch(op);
	else
		naive_finish(op, naive_status(rc), &reply);
}

static void naive_watch(struct naive_op *op)
{
	int events = UV_READABLE | (mqc_requester_want_write(op->r) ? UV_WRITABLE : 0);
	uv_poll_start(&op->poll, events, naive_on_io);
}

static void naive_on_timeout(uv_timer_t *h)
{
	struct naive_op *op = h->data;
	naive_finish(
	    op, naive_status(mqc_request_expired(op->r, op->call->err, sizeof op->call->err)), NULL);
}

/* Start c's naive request (reply_topic: the legacy model's, or NULL). Returns MQP_OK (it
 * completes later) or why not (c->err says). */
static int naive_start(struct worker *w, struct call *c, const char *topic, const char *reply_topic)
{
	const struct gate_config *cfg = &w->s->cfg;
	if (cfg->naive.url.ws) {
		snprintf(c->err, sizeof c->err,
		    "the naive route connects with libmosquitto %d.%d, which has no WebSockets: "
		    "%s is reached on the pool's route",
		    LIBMOSQUITTO_MAJOR, LIBMOSQUITTO_MINOR, cfg->broker);
		return GATE_ENOTSUPPORTED;
	}
	struct naive_op *op = calloc(1, sizeof *op);
	if (!op)
		return MQP_ENOMEM;
	op->w = w;
	op->call = c;
	op->opts = cfg->naive;
	if (cfg->n_nodes > 1)
		op->opts.url = cfg->nodes[w->naive_next++ % cfg->n_nodes];
	int rc = reply_topic ? mqc_request_start_legacy(&op->opts, reply_topic, topic, c->body, c->len,
	             cfg->qos, &op->r, c->err, sizeof c->err)
	                     : mqc_request_start(&op->opts, "gate/inbox", topic, c->body, c->len,
	                         cfg->qos, &op->r, c->err, sizeof c->err);
	if (rc != MQC_REQ_OK) {
		free(op);
		return naive_status(rc);
	}
	if (uv_poll_init(&w->loop, &op->poll, mqc_requester_fd(op->r)) != 0) {
		mqc_requester_abort(op->r);
		free(op);
		return MQP_ENOMEM;
	}
	uv_timer_init(&w->loop, &op->timer);
	op->poll.data = op->timer.data = op;
	op->handles = 2;
	op->next = w->naive_ops;
	if (op->next)
		op->next->prev = op;
	w->naive_ops = op;
	c->naive = op;
	uv_timer_start(&op->timer, naive_on_timeout, cfg->timeout_ms, 0);
	naive_watch(op);
	return MQP_OK;
}

/* --- requests ------------------------------------------------------------------------------ */

/* The client went away (EOF or an error) while its command waits: cancel the MQTT request (a
 * naive one at once; the pool calls back with MQP_ECANCELED, or with the reply if it came
 * first). Counted; a device is not asked to act for a client that is gone. */
static void client_gone(struct conn *cn)
{
	struct call *c = cn->call;
	if (!c || c->state != CALL_WAITING || c->client_gone)
		return;
	c->client_gone = true;
	atomic_fetch_add(&cn->w->s->counters.abandoned[c->route.backend], 1);
	if (c->route.backend == GATE_POOL)
		mqp_pool_cancel(cn->w->pool, c->ticket);
	else if (c->naive)
		naive_finish(c->naive, MQP_ECANCELED, NULL);
}

static void run_command(struct worker *w, struct call *c)
{
	struct gate_server *s = w->s;
	const struct gate_config *cfg = &s->cfg;
	const struct gate_route *rt = &c->route;
	struct conn *cn = c->cn;
	if (!gate_body_ok(c->body, c->len)) {
		gate_respond_error(cn, rt, 400, "bad_json",
		    "the body must be empty or one JSON value, in UTF-8, without NUL");
		return;
	}
	if (atomic_load(&s->stopping)) {
		gate_respond_error(cn, rt, 503, "shutting_down", "the gateway is shutting down");
		return;
	}
	/* Admission: beyond max_pending the pool is exhausted; say so now instead of queueing. */
	if (atomic_fetch_add(&s->counters.pending, 1) >= cfg->max_pending) {
		atomic_fetch_sub(&s->counters.pending, 1);
		gate_respond_error(
		    cn, rt, 503, "pool_exhausted", "too many commands in flight; retry shortly");
		return;
	}
	char topic[3 * GATE_NAME_MAX + 128], reply_topic[3 * GATE_NAME_MAX + 256];
	snprintf(topic, sizeof topic, "%s/%s/commands/%s", cfg->topic_prefix, rt->device, rt->command);
	bool legacy = cfg->reply_template != NULL;
	int rc = MQP_OK;
	if (legacy
	    && mqc_template_expand(cfg->reply_template, topic, reply_topic, sizeof reply_topic) < 0)
		rc = MQP_ETOOBIG;
	c->t0 = mqc_now_ns();
	c->state = CALL_WAITING; /* before the call: a request refused at once completes now */
	if (rc == MQP_OK && rt->backend == GATE_POOL)
		rc = (int)(legacy ? mqp_pool_request_legacy_async(w->pool, topic, c->body, c->len, cfg->qos,
		               reply_topic, NULL, NULL, cfg->timeout_ms, on_pool_reply, c, &c->ticket)
		                  : mqp_pool_request_async(w->pool, topic, c->body, c->len, cfg->qos,
		                      cfg->timeout_ms, on_pool_reply, c, &c->ticket));
	else if (rc == MQP_OK)
		rc = naive_start(w, c, topic, legacy ? reply_topic : NULL);
	if (rc != MQP_OK) { /* never started: answer now */
		atomic_fetch_sub(&s->counters.pending, 1);
		c->rc = rc;
		c->state = CALL_DONE;
		respond_command(w, c);
		return;
	}
	http_parser_pause(&cn->parser, 1); /* the next request waits for this one's answer */
}

/* With several brokers: ,"nodes":{"host:port":"up"|"down"|"standby"|"unresponsive",...} - up
 * with a ready connection in some worker's pool, down when its last connect failed (or it sent
 * the pools elsewhere), unresponsive while a connection there went silent and no new one has
 * answered (then ,"unresponsive_since":{"host:port":UNIX_MS} too), standby otherwise (in order,
 * after the one in use). Pools' lock held. */
static void node_states(struct gate_server *s, char *out, size_t len)
{
	unsigned nodes = s->n && s->w[0].pool ? mqp_pool_node_stats(s->w[0].pool, 0, NULL, 0) : 0;
	if (nodes < 2)
		return;
	uint64_t since[NODES_LISTED] = { 0 }; /* unresponsive since (ms), per node */
	if (nodes > NODES_LISTED)
		nodes = NODES_LISTED;
	size_t at = (size_t)snprintf(out, len, ",\"nodes\":{");
	for (unsigned k = 0; k < nodes && at < len; k++) {
		struct mqp_node_stats one;
		unsigned ready = 0, failing = 0;
		for (unsigned i = 0; i < s->n; i++)
			if (s->w[i].pool && mqp_pool_node_stats(s->w[i].pool, k, &one, sizeof one) > k) {
				ready += one.ready;
				failing += one.failing;
				if (one.suspect && (!since[k] || one.unresponsive_since_ms < since[k]))
					since[k] = one.unresponsive_since_ms;
			}
		mqp_pool_node_stats(s->w[0].pool, k, &one, sizeof one);
		at += (size_t)snprintf(out + at, len - at, "%s\"%s\":\"%s\"", k ? "," : "", one.where,
		    since[k]      ? "unresponsive"
		        : ready   ? "up"
		        : failing ? "down"
		                  : "standby");
	}
	at += (size_t)snprintf(out + at, at < len ? len - at : 0, "}");
	bool first = true;
	for (unsigned k = 0; k < nodes && at < len; k++) {
		if (!since[k])
			continue;
		struct mqp_node_stats one;
		mqp_pool_node_stats(s->w[0].pool, k, &one, sizeof one);
		at += (size_t)snprintf(out + at, len - at, "%s\"%s\":%llu",
		    first ? ",\"unresponsive_since\":{" : ",", one.where, (unsigned long long)since[k]);
		first = false;
	}
	if (!first)
		at += (size_t)snprintf(out + at, at < len ? len - at : 0, "}");
	if (at >= len)
		out[0] = '\0'; /* cut short: better nothing than broken JSON */
}

/* /healthz: ready with a broker connection; otherwise 503 and why (the pools' last error). */
static void health(struct conn *cn)
{
	struct gate_server *s = cn->w->s;
	unsigned ready = 0;
	char why[512] = "";
	pthread_rwlock_rdlock(&s->pools_lock);
	for (unsigned i = 0; i < s->n; i++) {
		struct mqp_pool_stats st;
		mqp_pool_stats(s->w[i].pool, &st, sizeof st);
		ready += st.ready;
		if (!why[0] && s->w[i].pool)
			mqp_pool_last_error(s->w[i].pool, why, sizeof why);
	}
	char nodes[1024] = "";
	node_states(s, nodes, sizeof nodes);
	pthread_rwlock_unlock(&s->pools_lock);
	char *text = NULL;
	if (ready) {
		size_t need = strlen(nodes) + 32;
		if ((text = malloc(need)))
			snprintf(text, need, "{\"status\":\"ok\"%s}", nodes);
	} else {
		char *reason = gate_error_json("no_broker_connection", why[0] ? why : "connecting");
		/* {"error":...,"message":...} -> {"status":"no broker connection","reason":...} */
		size_t need = reason ? strlen(reason) + 64 : 0;
		if (reason && (text = malloc(need))) {
			const char *msg = strstr(reason, "\"message\":");
			snprintf(text, need, "{\"status\":\"no broker connection\",\"reason\":%s",
			    msg ? msg + 10 : "\"\"}");
		}
		free(reason);
	}
	gate_respond_text(cn, ready ? 200 : 503, "application/json", text, false, gate_closes(cn, 200));
}

static void metrics(struct conn *cn)
{
	struct gate_server *s = cn->w->s;
	mqp_pool *pools[GATE_MAX_WORKERS];
	pthread_rwlock_rdlock(&s->pools_lock);
	for (unsigned i = 0; i < s->n; i++)
		pools[i] = s->w[i].pool;
	char *text = gate_metrics_text(&s->counters, pools, s->n);
	pthread_rwlock_unlock(&s->pools_lock);
	gate_respond_text(cn, 200, "text/plain; version=0.0.4", text, false, gate_closes(cn, 200));
}

/* A parsed request, by its route. */
static void serve(struct conn *cn)
{
	switch (cn->call->route.kind) {
		case GATE_HEALTH:
			health(cn);
			break;
		case GATE_METRICS:
			metrics(cn);
			break;
		case GATE_COMMAND:
		default:
			run_command(cn->w, cn->call);
	}
}

const struct gate_handlers gate_command_handlers = { .serve = serve, .client_gone = client_gone };

void gate_naive_finish_all(struct worker *w, int rc)
{
	while (w->naive_ops)
		naive_finish(w->naive_ops, rc, NULL);
}
