/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * plugin.c - mqtt_probe's entry points (mosquitto plugin interface v5, broker 2.0.x).
 *
 * The probe stamps every accepted inbound PUBLISH with the user property broker-rx-ns and exports
 * message, disconnect and process metrics over HTTP (/metrics) and on $SYS. By default it
 * registers only events that cannot change an authentication or authorization decision
 * (MESSAGE, DISCONNECT, TICK). With plugin_opt_observe_auth true it also observes BASIC_AUTH and
 * ACL_CHECK, always deferring, to count connects and fan-out (see README for the precondition).
 *
 * With per_listener_settings true mosquitto initialises the plugin once per listener: every
 * instance shares one process-wide state and one HTTP server (reference counted).
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include <limits.h>
#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "probe.h"

#define PROBE_EXPORT __attribute__((visibility("default")))

struct probe_instance {
	mosquitto_plugin_id_t *id;
	bool observe_auth;
	bool message_out; /* mosquitto 2.1: MESSAGE_OUT registered */
	bool events21;    /* mosquitto 2.1: CONNECT and CLIENT_OFFLINE registered */
};

/* The state lives in a shared anonymous mapping, not in the library's data: the probe's HTTP
 * process (http.c), forked from the broker, reads the metrics where the broker writes them. Mapped
 * at the first initialisation, unmapped when the library is unloaded (the counters survive a
 * re-initialisation as they would in static data). */
static struct probe_state *state;

static bool map_state(void)
{
	if (state)
		return true;
	void *p = mmap(NULL, sizeof *state, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return false;
	state = p; /* zero-filled */
	return true;
}

__attribute__((destructor)) static void unmap_state(void)
{
	if (state)
		munmap(state, sizeof *state);
	state = NULL;
}

/* The broker's tick: the probe's, then the HTTP process (started at the first, replaced if it
 * died) on the clock the probe's tick read. */
static int tick(int event, void *event_data, void *userdata)
{
	struct probe_state *s = userdata;
	int rc = probe_events__tick(event, event_data, userdata);
	if (s->http) {
		char msg[384];
		int level = probe_http__tick(s->http, s->tick_ns, msg, sizeof msg);
		if (level)
			mosquitto_log_printf(level, "%s", msg);
	}
	return rc;
}

static const struct {
	int event;
	MOSQ_FUNC_generic_callback cb;
	bool observe_only;
} events[] = {
	{ MOSQ_EVT_MESSAGE, probe_events__message, false },
	{ MOSQ_EVT_DISCONNECT, probe_events__disconnect, false },
	{ MOSQ_EVT_TICK, tick, false },
	{ MOSQ_EVT_BASIC_AUTH, probe_events__basic_auth, true },
	{ MOSQ_EVT_ACL_CHECK, probe_events__acl_check, true },
};
#define NEVENTS (sizeof events / sizeof events[0])

PROBE_EXPORT int mosquitto_plugin_version(
    int supported_version_count, const int *supported_versions)
{
	for (int i = 0; i < supported_version_count; i++)
		if (supported_versions[i] == 5)
			return 5;
	return -1;
}

static void unregister(const struct probe_instance *inst, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (!events[i].observe_only || inst->observe_auth)
			mosquitto_callback_unregister(inst->id, events[i].event, events[i].cb, NULL);
}

static void log_web(const struct probe_web *w, const struct probe_config *cfg)
{
	char users[32] = "no basic auth";
	if (w->nusers)
		snprintf(
		    users, sizeof users, "basic auth (%u user%s)", w->nusers, w->nusers == 1 ? "" : "s");
	static const char *const certs[] = { [PROBE_WEB_NO_CLIENT_CERT] = "no client certificates",
		[PROBE_WEB_VERIFY_CLIENT_CERT_IF_GIVEN] = "client certificates verified if given",
		[PROBE_WEB_REQUIRE_CLIENT_CERT] = "client certificates required" };
	mosquitto_log_printf(MOSQ_LOG_NOTICE,
	    "mqtt_probe: web_config %s: %s, %s, %s; re-read within a second of a change",
	    cfg->web_config, w->tls ? (w->min_tls13 ? "TLS 1.3" : "TLS 1.2 and 1.3") : "plain HTTP",
	    users, certs[w->client_cert]);
	if (w->nusers && !w->tls)
		mosquitto_log_printf(MOSQ_LOG_WARNING,
		    "mqtt_probe: web_config %s: basic auth without TLS sends passwords in the clear",
		    cfg->web_config);
}

static bool same_config(const struct probe_config *a, const struct probe_config *b)
{
	return a->http_enabled == b->http_enabled && a->http_port == b->http_port
	    && strcmp(a->http_host, b->http_host) == 0 && a->sys_interval_s == b->sys_interval_s
	    && a->observe_auth == b->observe_auth && a->stamp == b->stamp
	    && a->stamp_every == b->stamp_every && a->stamp_topics == b->stamp_topics
	    && memcmp(a->stamp_topic, b->stamp_topic, sizeof a->stamp_topic) == 0
	    && a->tx_stamp == b->tx_stamp && a->slow_top == b->slow_top
	    && a->slow_threshold_ms == b->slow_threshold_ms && a->slow_window_s == b->slow_window_s
	    && a->client_ids == b->client_ids && strcmp(a->web_config, b->web_config) == 0
	    && a->backlog_top == b->backlog_top && a->backlog_threshold == b->backlog_threshold;
}

PROBE_EXPORT int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **userdata,
    struct mosquitto_opt *options, int option_count)
{
	struct probe_opt opts[64];
	char err[1024];
	if (option_count > (int)(sizeof opts / sizeof opts[0])) {
		mosquitto_log_printf(
		    MOSQ_LOG_ERR, "mqtt_probe: Error: too many plugin_opt_* lines (%d)", option_count);
		return MOSQ_ERR_INVAL;
	}
	for (int i = 0; i < option_count; i++)
		opts[i] = (struct probe_opt) { options[i].key, options[i].value };
	struct probe_config cfg;
	if (probe_options__parse(opts, option_count, &cfg, err, sizeof err) != 0) {
		mosquitto_log_printf(MOSQ_LOG_ERR, "mqtt_probe: Error: %s", err);
		return MOSQ_ERR_INVAL;
	}

	if (!map_state()) {
		mosquitto_log_printf(MOSQ_LOG_ERR, "mqtt_probe: Error: cannot map the probe's state");
		return MOSQ_ERR_NOMEM;
	}
	if (state->refs == 0) {
		state->cfg = cfg;
		/* The broker calls every event on this thread; 2.1's HTTP API calls the auth chain
		 * from its own, and the probe must not count (or touch anything) there. */
		state->broker_thread = pthread_self();
		state->metrics.slow = &state->slow;       /* read only once slow.enabled is set */
		state->metrics.backlog = &state->backlog; /* likewise backlog.enabled */
		state->broker_thread_known = true;
		char conf[PATH_MAX];
		bool given = false;
		for (int i = 0; i < option_count; i++)
			given = given || strcmp(opts[i].key, "http_listen") == 0;
		if (cfg.http_enabled && probe_conf__path(conf, sizeof conf)
		    && probe_conf__conflict(conf, cfg.http_host, cfg.http_port, given, err, sizeof err)) {
			mosquitto_log_printf(MOSQ_LOG_ERR, "mqtt_probe: Error: %s", err);
			return MOSQ_ERR_INVAL;
		}
		struct probe_web *web = NULL;
		if (cfg.web_config[0]) {
			web = probe_web__load(cfg.web_config, err, sizeof err);
			if (!web) {
				mosquitto_log_printf(MOSQ_LOG_ERR, "mqtt_probe: Error: %s", err);
				return MOSQ_ERR_INVAL;
			}
			state->cfg.web_auth = probe_web__requires_auth(web);
			state->metrics.web = &state->web_stats;
			log_web(web, &state->cfg);
		}
		if (cfg.http_enabled) {
			/* With ids shown because of the web config's authentication, a re-read that
			 * drops it is refused. */
			char why[8];
			bool keep_auth = state->cfg.web_auth && state->cfg.client_ids == PROBE_IDS_AUTO
			    && probe_options__show_client_ids(&state->cfg, why, sizeof why);
			state->http = probe_http__open(cfg.http_host, cfg.http_port, &state->metrics,
			    cfg.observe_auth, web, keep_auth, err, sizeof err);
			if (!state->http) {
				mosquitto_log_printf(MOSQ_LOG_ERR, "mqtt_probe: Error: %s", err);
				return MOSQ_ERR_INVAL;
			}
		}
		state->next_sys_ns = 0; /* publish at the first tick */
	} else if (!same_config(&cfg, &state->cfg)) {
		mosquitto_log_printf(MOSQ_LOG_WARNING,
		    "mqtt_probe: initialised again (per_listener_settings) with other "
		    "options; the first initialisation's options apply");
	}

	int rc = MOSQ_ERR_NOMEM;
	struct probe_instance *inst = calloc(1, sizeof *inst);
	if (!inst)
		goto fail;
	inst->id = identifier;
	inst->observe_auth = state->cfg.observe_auth;
	for (size_t i = 0; i < NEVENTS; i++) {
		if (events[i].observe_only && !inst->observe_auth)
			continue;
		rc = mosquitto_callback_register(identifier, events[i].event, events[i].cb, NULL, state);
		if (rc != MOSQ_ERR_SUCCESS) { /* the broker's reason, not "out of memory" */
			/* mosquitto_strerror is not exported by upstream broker builds: print the code. */
			mosquitto_log_printf(MOSQ_LOG_ERR,
			    "mqtt_probe: Error: cannot register event %d (error %d)", events[i].event, rc);
			unregister(inst, i);
			free(inst);
			goto fail;
		}
	}
	/* One .so for 2.0 and 2.1: 2.1 knows MESSAGE_OUT and so counts true deliveries; 2.0
	 * answers MOSQ_ERR_NOT_SUPPORTED and the probe keeps its 2.0 counts. */
	rc = mosquitto_callback_register(
	    identifier, PROBE_EVT_MESSAGE_OUT, probe_events__message_out, NULL, state);
	inst->message_out = rc == MOSQ_ERR_SUCCESS;
	if (rc != MOSQ_ERR_SUCCESS && rc != MOSQ_ERR_NOT_SUPPORTED)
		mosquitto_log_printf(MOSQ_LOG_WARNING,
		    "mqtt_probe: cannot register MESSAGE_OUT (error %d): no delivery count", rc);
	if (inst->message_out) {
		atomic_store(&state->metrics.has_deliveries, true);
		/* rx-to-tx needs the stamp in and 2.1's in-place property accessors */
		if (state->cfg.stamp && probe_props__init()) {
			state->hold = true;
			atomic_store(&state->metrics.has_hold, true);
		} else if (state->cfg.stamp) {
			mosquitto_log_printf(MOSQ_LOG_WARNING,
			    "mqtt_probe: this broker has MESSAGE_OUT but not mosquitto 2.1's property "
			    "accessors: no time-in-broker histogram");
		}
	}
	if (state->cfg.tx_stamp && !state->hold)
		mosquitto_log_printf(MOSQ_LOG_WARNING,
		    "mqtt_probe: plugin_opt_tx_stamp needs mosquitto 2.1 (MESSAGE_OUT): "
		    "no " PROBE_TX_STAMP_KEY " on this broker");
	/* 2.1 also says when a connection is accepted and when a persistent client leaves: exact
	 * connects, connected clients and disconnects without observe_auth. Both or neither. */
	if (mosquitto_callback_register(
	        identifier, PROBE_EVT_CONNECT, probe_events__connect, NULL, state)
	    == MOSQ_ERR_SUCCESS) {
		if (mosquitto_callback_register(
		        identifier, PROBE_EVT_CLIENT_OFFLINE, probe_events__client_offline, NULL, state)
		    == MOSQ_ERR_SUCCESS)
			inst->events21 = true;
		else
			mosquitto_callback_unregister(
			    identifier, PROBE_EVT_CONNECT, probe_events__connect, NULL);
	}
	if (inst->events21) {
		state->events21 = true;
		atomic_store(&state->metrics.connect_events, true);
	}
	probe_events__slow_start(state);
	probe_events__backlog_start(state);
	state->refs++;
	*userdata = inst;

	char where[96] = "off";
	if (state->cfg.http_enabled)
		snprintf(where, sizeof where, "http://%s:%d/metrics", state->cfg.http_host,
		    state->cfg.http_port);
	char stamp[96] = "off";
	if (state->cfg.stamp)
		snprintf(stamp, sizeof stamp, "%s%s on 1 in %u messages%s", PROBE_STAMP_KEY,
		    state->cfg.tx_stamp && state->hold ? " and " PROBE_TX_STAMP_KEY : "",
		    state->cfg.stamp_every, state->cfg.stamp_topics ? " of the stamp_topic filters" : "");
	mosquitto_log_printf(MOSQ_LOG_NOTICE,
	    "mqtt_probe %s: stamp %s, metrics %s, " PROBE_SYS_TOPIC
	    " every %u s, observe_auth %s, deliveries %s",
	    PROBE_VERSION, stamp, where, state->cfg.sys_interval_s,
	    state->cfg.observe_auth ? "ON" : "off",
	    inst->message_out ? "counted (MESSAGE_OUT)" : "not visible (no MESSAGE_OUT: 2.0)");
	if (state->slow_on) {
		char why[256];
		probe_options__show_client_ids(&state->cfg, why, sizeof why);
		mosquitto_log_printf(MOSQ_LOG_NOTICE,
		    state->slow.hide_ids
		        ? "mqtt_probe: the slowest subscribers are named by a keyed hash of their client "
		          "id (h:...), not the id: %s"
		        : "mqtt_probe: the slowest subscribers are named by their client ids: %s",
		    why);
	}
	if (state->backlog_on)
		mosquitto_log_printf(MOSQ_LOG_NOTICE,
		    "mqtt_probe: clients falling behind: the %u with the largest queues (at least %u "
		    "messages, or a drop) each %u s, named %s; queue limit %llu from %s",
		    state->backlog.top, (unsigned)state->backlog.threshold, state->backlog.window_s,
		    state->backlog.hide_ids ? "by keyed hashes (h:...)" : "by client id",
		    (unsigned long long)state->backlog.limit, state->backlog.limit_from);
	if (state->cfg.observe_auth)
		mosquitto_log_printf(MOSQ_LOG_WARNING,
		    "mqtt_probe: observe_auth is ON: the probe answers DEFER to every authentication and "
		    "ACL check to count connects and fan-out. This is neutral ONLY if another "
		    "authenticator (password_file or an auth plugin) AND another ACL decider (acl_file or "
		    "an ACL plugin) are configured in the same scope. Without them mosquitto refuses "
		    "every client that sends a username and denies every publish and subscribe.");
	return MOSQ_ERR_SUCCESS;

fail:
	if (state->refs == 0) {
		probe_http__stop(state->http);
		state->http = NULL;
	}
	return rc;
}

PROBE_EXPORT int mosquitto_plugin_cleanup(
    void *userdata, struct mosquitto_opt *options, int option_count)
{
	(void)options;
	(void)option_count;
	struct probe_instance *inst = userdata;
	if (!inst)
		return MOSQ_ERR_SUCCESS;
	unregister(inst, NEVENTS); /* 2.0 does not do it for us */
	if (inst->message_out)
		mosquitto_callback_unregister(
		    inst->id, PROBE_EVT_MESSAGE_OUT, probe_events__message_out, NULL);
	if (inst->events21) {
		mosquitto_callback_unregister(inst->id, PROBE_EVT_CONNECT, probe_events__connect, NULL);
		mosquitto_callback_unregister(
		    inst->id, PROBE_EVT_CLIENT_OFFLINE, probe_events__client_offline, NULL);
	}
	free(inst);
	if (--state->refs == 0) {
		probe_http__stop(state->http); /* reaps the HTTP process */
		state->http = NULL;
		probe_events__clear(state);
	}
	return MOSQ_ERR_SUCCESS;
}
