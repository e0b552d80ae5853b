/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * events.c - what the probe does on each broker event. Broker thread only.
 *
 * Every handler returns MOSQ_ERR_SUCCESS, except the opt-in auth and ACL observers, which return
 * MOSQ_ERR_PLUGIN_DEFER: they never decide anything (see README: the observe_auth precondition).
 */
#include <limits.h>
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mqtt_protocol.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "probe.h"

/*
 * observe_auth's client set. A connected client is in it from its BASIC_AUTH to its DISCONNECT.
 * A client that leaves a persistent session behind (clean session off) stays in it as an
 * offline session, with its client id: a SIGHUP makes mosquitto authenticate every session it
 * holds again, and an offline one must not be taken for a new connection (it never sends a
 * DISCONNECT again, so the connected gauge grew with every reload). A new connection with the
 * same client id takes the session over and ends the entry.
 */
struct probe_client {
	const struct mosquitto *client;
	char *offline_id;               /* NULL: connected; else the client id of an offline session */
	UT_hash_handle hh;              /* s->clients, by client pointer */
	UT_hash_handle hh_id;           /* s->offline, offline sessions by client id */
	struct probe_slow_stats window; /* 2.1: this window's in-broker waits (slow subscribers) */
	/* 2.1 with observe_auth: its backlog (see probe.h) */
	struct probe_backlog_stats bl;
	uint64_t routed, sent;
	const void *await;  /* the message routed to it last, until it is sent or known not to be */
	uint32_t await_len; /* its payload bytes */
	uint8_t await_qos;
};

/* Offline sessions kept at most: past this they are forgotten (as before, a SIGHUP may count
 * them), so a broker with endless distinct persistent client ids cannot grow the probe. */
#define PROBE_OFFLINE_MAX 100000u

static void client_drop(struct probe_state *s, struct probe_client *c)
{
	HASH_DEL(s->clients, c);
	if (c->offline_id) {
		HASH_DELETE(hh_id, s->offline, c);
		free(c->offline_id);
	}
	free(c);
}

static void offline_forget(struct probe_state *s, const char *id)
{
	struct probe_client *o;
	HASH_FIND(hh_id, s->offline, id, strlen(id), o);
	if (o)
		client_drop(s, o);
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* "00" "01" ... "99": two digits a division (the stamp formats a 19-digit number per message). */
static const char digit_pairs[]
    = "00010203040506070809101112131415161718192021222324252627282930313233"
      "34353637383940414243444546474849505152535455565758596061626364656667"
      "6869707172737475767778798081828384858687888990919293949596979899";

size_t probe_u64_to_dec(uint64_t v, char *buf)
{
	char tmp[20];
	char *p = tmp + sizeof tmp;
	while (v >= 100) {
		size_t r = (size_t)(v % 100);
		v /= 100;
		p -= 2;
		memcpy(p, digit_pairs + 2 * r, 2);
	}
	if (v >= 10) {
		p -= 2;
		memcpy(p, digit_pairs + 2 * v, 2);
	} else {
		*--p = (char)('0' + v);
	}
	size_t n = (size_t)(tmp + sizeof tmp - p);
	memcpy(buf, p, n);
	buf[n] = '\0';
	return n;
}

/* Whether this message gets the stamp: the topic filter first, then 1 in stamp_every. */
static bool stamp_this(struct probe_state *s, const char *topic)
{
	const struct probe_config *cfg = &s->cfg;
	if (!cfg->stamp)
		return false;
	if (cfg->stamp_topics) {
		bool match = false;
		for (unsigned i = 0; i < cfg->stamp_topics && !match; i++)
			if (mosquitto_topic_matches_sub(cfg->stamp_topic[i], topic, &match) != MOSQ_ERR_SUCCESS)
				match = false;
		if (!match)
			return false;
	}
	if (cfg->stamp_every > 1 && s->stamp_seq++ % cfg->stamp_every != 0)
		return false;
	return true;
}

int probe_events__message(int event, void *event_data, void *userdata)
{
	(void)event;
	struct mosquitto_evt_message *ed = event_data;
	struct probe_state *s = userdata;
	int qos = ed->qos > 2 ? 2 : ed->qos;

	probe_add(&s->metrics.received[qos][ed->retain ? 1 : 0], 1);
	probe_add(&s->metrics.payload_bytes, ed->payloadlen);
	probe_metrics__observe_size(&s->metrics, ed->payloadlen);
	if (s->cfg.observe_auth)
		probe_fanout__message(&s->fanout, &s->metrics, ed->payload, qos,
		    qos == 2 ? clock_ns(CLOCK_MONOTONIC_COARSE) : 0); /* the tick's clock */
	if (stamp_this(s, ed->topic)) {
		/* Appended after the publisher's properties; never replaces or reorders them. */
		char value[24];
		probe_u64_to_dec(clock_ns(CLOCK_REALTIME), value);
		if (mosquitto_property_add_string_pair(
		        &ed->properties, MQTT_PROP_USER_PROPERTY, PROBE_STAMP_KEY, value)
		    == MOSQ_ERR_SUCCESS)
			probe_add(&s->metrics.stamped, 1);
		else
			probe_add(&s->metrics.stamp_failures, 1);
	}
	return MOSQ_ERR_SUCCESS; /* anything else would drop the message or kick the publisher */
}

/* mosquitto 2.1's codes (include/mosquitto/defs.h there). The 2.0 headers this is built with
 * number some of them differently (ADMINISTRATIVE_ACTION is 30 there), so they are spelled out. */
enum {
	M21_SUCCESS = 0,
	M21_NOMEM = 1,
	M21_PROTOCOL = 2,
	M21_CONN_LOST = 7,
	M21_PAYLOAD_SIZE = 9,
	M21_NOT_SUPPORTED = 10,
	M21_AUTH = 11,
	M21_ERRNO = 14,
	M21_KEEPALIVE = 19,
	M21_MALFORMED_PACKET = 21,
	M21_QOS_NOT_SUPPORTED = 24,
	M21_OVERSIZE_PACKET = 25,
	M21_BAD_USERNAME_OR_PASSWORD = 134,
	M21_SESSION_TAKEN_OVER = 142,
	M21_RECEIVE_MAXIMUM_EXCEEDED = 147,
	M21_ADMINISTRATIVE_ACTION = 152,
};

enum probe_reason probe_reason_of(int mosq_err)
{
	switch (mosq_err) {
		case M21_SUCCESS:
			return PROBE_REASON_NORMAL;
		case M21_CONN_LOST:
		case M21_ERRNO:
			return PROBE_REASON_CLOSED;
		case M21_KEEPALIVE:
			return PROBE_REASON_KEEPALIVE;
		case M21_PROTOCOL:
		case M21_PAYLOAD_SIZE:
		case M21_NOT_SUPPORTED:
		case M21_MALFORMED_PACKET:
		case M21_QOS_NOT_SUPPORTED:
		case M21_OVERSIZE_PACKET:
		case M21_RECEIVE_MAXIMUM_EXCEEDED:
			return PROBE_REASON_PROTOCOL;
		case M21_AUTH:
		case M21_BAD_USERNAME_OR_PASSWORD:
			return PROBE_REASON_AUTH;
		case M21_SESSION_TAKEN_OVER:
			return PROBE_REASON_TAKEN_OVER;
		case M21_ADMINISTRATIVE_ACTION:
			return PROBE_REASON_ADMIN;
		default: /* NOMEM and codes 2.1 does not pass today */
			return PROBE_REASON_OTHER;
	}
}

/* The first fields of 2.1's CONNECT, DISCONNECT and CLIENT_OFFLINE event data (the 2.0
 * headers this is built with do not declare the first and the last). */
struct probe_evt_client {
	void *future;
	struct mosquitto *client;
	int reason; /* DISCONNECT and CLIENT_OFFLINE only */
};

/* 2.1: a connection accepted (after its CONNACK) joins the set, once. */
int probe_events__connect(int event, void *event_data, void *userdata)
{
	(void)event;
	const struct probe_evt_client *ed = event_data;
	struct probe_state *s = userdata;
	struct probe_client *c;
	HASH_FIND_PTR(s->clients, &ed->client, c);
	if (!c && (c = calloc(1, sizeof *c))) {
		c->client = ed->client;
		HASH_ADD_PTR(s->clients, client, c);
		probe_add(&s->metrics.connected, 1);
	}
	probe_add(&s->metrics.connects, 1);
	return MOSQ_ERR_SUCCESS;
}

/* A message's identity from routing to sending: its stored payload (the ACL check and
 * MESSAGE_OUT both pass the stored message's), or its topic when it has no payload. */
static const void *message_key(const void *payload, const char *topic)
{
	return payload ? payload : (const void *)topic;
}

/* The message routed to c last was not sent at once (the broker sends at once or never in the
 * same call): it was queued, or dropped when c's queue was full; a QoS 0 one is never queued. */
static void backlog_settle(struct probe_state *s, struct probe_client *c)
{
	if (!c->await)
		return;
	c->await = NULL;
	if (c->await_qos == 0 || (s->backlog.limit && c->bl.queued >= s->backlog.limit)) {
		c->bl.dropped++;
		c->bl.dropped_window++;
		probe_add(&s->metrics.dropped_queue_full, 1);
	} else {
		c->bl.queued++;
		c->bl.queued_bytes += c->await_len;
	}
}

/* Retained messages are left out on both sides: those sent on SUBSCRIBE are written after every
 * one of them has been checked (not at once), and would look queued or dropped. */
static void backlog_routed(struct probe_state *s, const struct mosquitto_evt_acl_check *ed)
{
	if (ed->retain)
		return;
	struct probe_client *c;
	HASH_FIND_PTR(s->clients, &ed->client, c);
	if (!c || c->offline_id)
		return;
	backlog_settle(s, c);
	c->routed++;
	c->await = message_key(ed->payload, ed->topic);
	c->await_len = ed->payloadlen;
	c->await_qos = (uint8_t)ed->qos;
}

static void backlog_sent(
    struct probe_state *s, struct probe_client *c, const struct mosquitto_evt_message *ed)
{
	if (ed->retain)
		return;
	c->sent++;
	if (c->await && c->await == message_key(ed->payload, ed->topic)) {
		c->await = NULL; /* sent at once */
		return;
	}
	backlog_settle(s, c);
	if (c->bl.queued) { /* one of its queue goes out */
		c->bl.queued--;
		c->bl.queued_bytes
		    -= ed->payloadlen < c->bl.queued_bytes ? ed->payloadlen : c->bl.queued_bytes;
	}
}

static void backlog_stats(struct probe_client *c, struct probe_backlog_stats *out)
{
	*out = c->bl;
	out->unsent = c->routed > c->sent ? c->routed - c->sent : 0;
}

/* 2.1: a connection ended (DISCONNECT or CLIENT_OFFLINE). identity="client" means it had been
 * accepted, "none" that it had a client id but was refused; 2.1 reports nothing for a socket
 * that never sent CONNECT (it has no client id). */
static void gone21(struct probe_state *s, const struct mosquitto *client, int reason)
{
	struct probe_client *c;
	probe_add(&s->metrics.disconnect_reasons[probe_reason_of(reason)], 1);
	HASH_FIND_PTR(s->clients, &client, c);
	if (c) {
		probe_add(&s->metrics.disconnects_identified, 1);
		probe_sub(&s->metrics.connected, 1);
		if (s->slow_on && c->window.deliveries) /* ranked now: its window ends with it */
			probe_slow__rank(&s->slow_building, &s->slow, mosquitto_client_id(client), &c->window);
		if (s->backlog_on) { /* its queue goes with it (a clean session) or waits offline */
			struct probe_backlog_stats st;
			backlog_settle(s, c);
			backlog_stats(c, &st);
			if (st.dropped_window)
				probe_backlog__rank(
				    &s->backlog_building, &s->backlog, mosquitto_client_id(client), &st);
		}
		client_drop(s, c);
	} else {
		probe_add(&s->metrics.disconnects_anonymous, 1);
	}
}

int probe_events__client_offline(int event, void *event_data, void *userdata)
{
	(void)event;
	const struct probe_evt_client *ed = event_data;
	gone21(userdata, ed->client, ed->reason);
	return MOSQ_ERR_SUCCESS;
}

int probe_events__disconnect(int event, void *event_data, void *userdata)
{
	(void)event;
	struct mosquitto_evt_disconnect *ed = event_data;
	struct probe_state *s = userdata;
	if (s->events21) {
		gone21(s, ed->client, ((const struct probe_evt_client *)event_data)->reason);
		return MOSQ_ERR_SUCCESS;
	}
	if (mosquitto_client_id(ed->client))
		probe_add(&s->metrics.disconnects_identified, 1);
	else
		probe_add(&s->metrics.disconnects_anonymous, 1);
	if (s->cfg.observe_auth) {
		struct probe_client *c;
		HASH_FIND_PTR(s->clients, &ed->client, c);
		if (c && !c->offline_id) {
			probe_sub(&s->metrics.connected, 1);
			const char *id = mosquitto_client_id(ed->client);
			if (id && !mosquitto_client_clean_session(ed->client)
			    && HASH_CNT(hh_id, s->offline) < PROBE_OFFLINE_MAX) {
				offline_forget(s, id);
				c->offline_id = strdup(id);
			}
			if (c->offline_id)
				HASH_ADD_KEYPTR(hh_id, s->offline, c->offline_id, strlen(c->offline_id), c);
			else
				client_drop(s, c);
		}
	}
	return MOSQ_ERR_SUCCESS;
}

/* mosquitto 2.1's HTTP API authenticates each request through the plugins' auth and ACL hooks,
 * with a made-up client ("http-api"), on libmicrohttpd's thread: not a connect, a client or a
 * delivery, and not a thread that may touch the probe's state. */
static bool foreign_thread(const struct probe_state *s)
{
	return s->broker_thread_known && !pthread_equal(pthread_self(), s->broker_thread);
}

int probe_events__basic_auth(int event, void *event_data, void *userdata)
{
	(void)event;
	struct mosquitto_evt_basic_auth *ed = event_data;
	struct probe_state *s = userdata;
	struct probe_client *c;
	if (s->events21 || foreign_thread(s))
		return MOSQ_ERR_PLUGIN_DEFER; /* 2.1 counts connects from CONNECT */
	/* SIGHUP re-runs authentication for every session: a connected client is counted once,
	 * an offline session not at all. */
	HASH_FIND_PTR(s->clients, &ed->client, c);
	const char *id = mosquitto_client_id(ed->client);
	if (c && c->offline_id) {
		if (id && strcmp(id, c->offline_id) == 0)
			return MOSQ_ERR_PLUGIN_DEFER; /* the offline session, authenticated again */
		client_drop(s, c); /* that session is gone and its memory holds a new client */
		c = NULL;
	}
	if (!c) {
		if (id)
			offline_forget(s, id); /* a new connection takes the session over */
		c = calloc(1, sizeof *c);
		if (c) {
			c->client = ed->client;
			HASH_ADD_PTR(s->clients, client, c);
			probe_add(&s->metrics.connected, 1);
		}
		probe_add(&s->metrics.connects, 1);
	}
	return MOSQ_ERR_PLUGIN_DEFER;
}

/* 2.1: one call per PUBLISH the broker sends. The message goes out as it is, unless tx_stamp
 * asks for broker-tx-ns: then this delivery alone gets a copy of the properties with it (the
 * stored message is shared by every delivery; 2.1 frees the copy after sending). */
int probe_events__message_out(int event, void *event_data, void *userdata)
{
	(void)event;
	struct mosquitto_evt_message *ed = event_data;
	struct probe_state *s = userdata;
	probe_add(&s->metrics.deliveries, 1);
	probe_add(&s->metrics.sent_payload_bytes, ed->payloadlen);
	struct probe_client *c = NULL;
	if (s->backlog_on) {
		HASH_FIND_PTR(s->clients, &ed->client, c);
		if (c)
			backlog_sent(s, c, ed);
	}
	uint64_t rx;
	if (!s->hold || !probe_props__find_u64(ed->properties, PROBE_STAMP_KEY, &rx))
		return MOSQ_ERR_SUCCESS; /* not stamped when it came in */
	uint64_t tx = clock_ns(CLOCK_REALTIME);
	uint64_t hold = tx > rx ? tx - rx : 0;
	probe_metrics__observe_hold(&s->metrics, hold);
	if (s->slow_on && !s->backlog_on) /* looked up above when the backlog is tracked */
		HASH_FIND_PTR(s->clients, &ed->client, c);
	if (s->slow_on && c) {
		if (hold > c->window.max_ns)
			c->window.max_ns = hold;
		c->window.sum_ns += hold;
		c->window.deliveries++;
	}
	if (s->cfg.tx_stamp && mosquitto_client_protocol_version(ed->client) == 5) {
		char value[24];
		mosquitto_property *copy;
		probe_u64_to_dec(tx, value);
		if (probe_props__copy_add(&copy, ed->properties, PROBE_TX_STAMP_KEY, value)
		    == MOSQ_ERR_SUCCESS)
			ed->properties = copy;
		else
			probe_add(&s->metrics.stamp_failures, 1);
	}
	return MOSQ_ERR_SUCCESS;
}

int probe_events__acl_check(int event, void *event_data, void *userdata)
{
	(void)event;
	struct mosquitto_evt_acl_check *ed = event_data;
	struct probe_state *s = userdata;
	if (foreign_thread(s))
		return MOSQ_ERR_PLUGIN_DEFER;
	if (ed->access == MOSQ_ACL_READ) {
		probe_fanout__read(&s->fanout, &s->metrics, ed->payload);
		if (s->backlog_on)
			backlog_routed(s, ed);
	} else if (ed->access == MOSQ_ACL_SUBSCRIBE)
		probe_add(&s->metrics.subscribe_checks[0], 1);
	else if (ed->access == MOSQ_ACL_UNSUBSCRIBE)
		probe_add(&s->metrics.subscribe_checks[1], 1);
	return MOSQ_ERR_PLUGIN_DEFER;
}

void probe_events__publish_sys(struct probe_state *s)
{
	struct probe_process proc;
	probe_process__read(&proc, NULL);
	struct probe_buf json = { 0 };
	probe_metrics__render_json(
	    &s->metrics, &proc, s->cfg.observe_auth, clock_ns(CLOCK_REALTIME), &json);
	void *payload = json.failed ? NULL : mosquitto_malloc(json.len);
	mosquitto_property *props = NULL;
	uint32_t expiry = s->cfg.sys_interval_s * 2 + 1;
	if (!payload
	    || mosquitto_property_add_int32(&props, MQTT_PROP_MESSAGE_EXPIRY_INTERVAL, expiry)
	        != MOSQ_ERR_SUCCESS) {
		mosquitto_free(payload);
		mosquitto_property_free_all(&props);
		probe_add(&s->metrics.sys_publish_failures, 1);
		probe_buf__free(&json);
		return;
	}
	memcpy(payload, json.data, json.len);
	/* On success the broker owns payload and props; on failure we still do. */
	if (mosquitto_broker_publish(NULL, PROBE_SYS_TOPIC, (int)json.len, payload, 0, true, props)
	    != MOSQ_ERR_SUCCESS) {
		mosquitto_free(payload);
		mosquitto_property_free_all(&props);
		probe_add(&s->metrics.sys_publish_failures, 1);
	}
	probe_buf__free(&json);
}

void probe_events__id_key(struct probe_state *s)
{
	struct probe_slow *slow = &s->slow;
	if (s->id_key_drawn)
		return;
	s->id_key_drawn = true;
	if (getrandom(slow->id_key, sizeof slow->id_key, 0) != sizeof slow->id_key) {
		/* no kernel randomness: a key nobody outside this process can know, if weaker */
		slow->id_key[0] = clock_ns(CLOCK_REALTIME) ^ (uint64_t)(uintptr_t)slow;
		slow->id_key[1] = clock_ns(CLOCK_MONOTONIC) ^ ((uint64_t)getpid() << 32);
	}
}

void probe_events__slow_start(struct probe_state *s)
{
	struct probe_slow *slow = &s->slow;
	if (!s->hold || !s->events21 || s->cfg.slow_top == 0 || s->slow_on)
		return;
	slow->top = s->cfg.slow_top;
	slow->threshold_ns = (uint64_t)s->cfg.slow_threshold_ms * 1000000ULL;
	slow->window_s = s->cfg.slow_window_s;
	char why[256];
	slow->hide_ids = !probe_options__show_client_ids(&s->cfg, why, sizeof why);
	probe_events__id_key(s);
	if (probe_lock__init(&slow->lock) != 0)
		return; /* no ranking rather than an unusable lock */
	s->slow_next_ns = clock_ns(CLOCK_MONOTONIC_COARSE) + (uint64_t)slow->window_s * 1000000000ULL;
	s->slow_on = true;
	/* s->metrics.slow already points here: the caller sets it before the HTTP process starts */
	atomic_store(&slow->enabled, true);
}

void probe_events__backlog_start(struct probe_state *s)
{
	struct probe_backlog *b = &s->backlog;
	if (!s->events21 || !s->cfg.observe_auth || s->cfg.backlog_top == 0 || s->backlog_on)
		return;
	b->top = s->cfg.backlog_top;
	b->threshold = s->cfg.backlog_threshold;
	b->window_s = s->cfg.slow_window_s;
	struct probe_queue_limits q;
	char conf[PATH_MAX];
	bool known = probe_conf__path(conf, sizeof conf);
	bool read = probe_conf__queue_limits(known ? conf : NULL, &q) == 0;
	b->limit = q.max_queued_messages == 0 && q.max_queued_bytes == 0
	    ? 0
	    : (uint64_t)(q.max_queued_messages > 0 ? q.max_queued_messages : 0)
	        + (uint64_t)(q.max_inflight_messages > 0 ? q.max_inflight_messages : 0);
	snprintf(b->limit_from, sizeof b->limit_from,
	    "max_queued_messages %ld + max_inflight_messages %ld%s%s", q.max_queued_messages,
	    q.max_inflight_messages,
	    !read         ? " (mosquitto's defaults: its configuration file could not be read)"
	        : q.found ? " (its configuration)"
	                  : " (mosquitto's defaults: not set in its configuration)",
	    q.max_queued_bytes ? "; max_queued_bytes is set and not modelled" : "");
	char why[256];
	b->hide_ids = !probe_options__show_client_ids(&s->cfg, why, sizeof why);
	probe_events__id_key(s);
	b->id_key = s->slow.id_key;
	if (probe_lock__init(&b->lock) != 0)
		return;
	s->backlog_next_ns = clock_ns(CLOCK_MONOTONIC_COARSE) + (uint64_t)b->window_s * 1000000000ULL;
	s->backlog_on = true;
	atomic_store(&b->enabled, true);
}

static void backlog_tick(struct probe_state *s, uint64_t now)
{
	if (now >= s->backlog_next_ns) {
		struct probe_backlog_view *v = &s->backlog_building;
		for (struct probe_client *c = s->clients; c; c = c->hh.next) {
			if (c->offline_id)
				continue;
			backlog_settle(s, c);
			struct probe_backlog_stats st;
			backlog_stats(c, &st);
			if (st.queued || st.dropped || st.unsent)
				probe_backlog__rank(v, &s->backlog, mosquitto_client_id(c->client), &st);
			c->bl.dropped_window = 0;
		}
		s->backlog_pending = *v;
		memset(v, 0, sizeof *v);
		s->backlog_unpublished = true;
		s->backlog_next_ns = now + (uint64_t)s->backlog.window_s * 1000000000ULL;
	}
	if (s->backlog_unpublished && probe_backlog__publish(&s->backlog, &s->backlog_pending))
		s->backlog_unpublished = false;
}

/* A window ended: rank every connected client's (those that left during it are ranked already),
 * start the next, hand the ranking over. The walk is over the connected clients, once a window
 * (10 s by default). */
static void slow_tick(struct probe_state *s, uint64_t now)
{
	if (now >= s->slow_next_ns) {
		struct probe_slow_view *v = &s->slow_building;
		for (struct probe_client *c = s->clients; c; c = c->hh.next) {
			if (c->window.deliveries)
				probe_slow__rank(v, &s->slow, mosquitto_client_id(c->client), &c->window);
			c->window = (struct probe_slow_stats) { 0 };
		}
		s->slow_pending = *v;
		memset(v, 0, sizeof *v);
		s->slow_unpublished = true;
		s->slow_next_ns = now + (uint64_t)s->slow.window_s * 1000000000ULL;
	}
	if (s->slow_unpublished && probe_slow__publish(&s->slow, &s->slow_pending))
		s->slow_unpublished = false;
}

/* mosquitto calls TICK on every pass of its loop, which under load is about once per message:
 * the clock read here is the coarse one (a few ns; the $SYS interval is seconds, the QoS 2 TTL
 * 30 s). 2.1 lets a plugin ask to be called less often (next_ms), but forgets that request on the
 * passes where the plugin is not due, so its loop may then sleep far past it (the next $SYS
 * document and the last fan-out would wait for unrelated traffic): the probe does not use it. */
int probe_events__tick(int event, void *event_data, void *userdata)
{
	(void)event;
	(void)event_data;
	struct probe_state *s = userdata;
	uint64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
	s->tick_ns = now;
	if (s->cfg.observe_auth)
		probe_fanout__tick(&s->fanout, &s->metrics, now, PROBE_QOS2_TTL_NS);
	if (s->slow_on)
		slow_tick(s, now);
	if (s->backlog_on)
		backlog_tick(s, now);
	if (s->cfg.sys_interval_s && now >= s->next_sys_ns) {
		probe_events__publish_sys(s);
		s->next_sys_ns = now + (uint64_t)s->cfg.sys_interval_s * 1000000000ULL;
	}
	return MOSQ_ERR_SUCCESS;
}

void probe_events__clear(struct probe_state *s)
{
	/* HASH_DEL moves the head to the next entry (NULL after the last); the analyzer cannot see
	 * through uthash's macros and takes the freed head for the new one. */
	while (s->clients)
		client_drop(s, s->clients); /* NOLINT(clang-analyzer-unix.Malloc) */
	if (s->slow_on) {               /* the readers are gone (the HTTP process is reaped first) */
		atomic_store(&s->slow.enabled, false);
		pthread_mutex_destroy(&s->slow.lock);
		s->slow_on = false;
	}
	if (s->backlog_on) {
		atomic_store(&s->backlog.enabled, false);
		pthread_mutex_destroy(&s->backlog.lock);
		s->backlog_on = false;
	}
}
