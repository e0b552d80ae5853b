/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * metrics.c - the probe's counters and their two renderings (Prometheus text and JSON).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe.h"

const uint64_t probe_size_bounds[PROBE_SIZE_BUCKETS - 1]
    = { 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576 };
const uint64_t probe_fanout_bounds[PROBE_FANOUT_BUCKETS - 1]
    = { 0, 1, 2, 5, 10, 20, 50, 100, 1000, 10000 };

const uint64_t probe_hold_bounds_ns[PROBE_HOLD_BUCKETS - 1] = { 10000, 50000, 100000, 250000,
	500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 250000000,
	500000000, 1000000000, 2500000000, 5000000000, 10000000000, 60000000000 };

static size_t bucket_of(const uint64_t *bounds, size_t n, uint64_t value)
{
	size_t i = 0;
	while (i < n && value > bounds[i])
		i++;
	return i; /* n means +Inf */
}

void probe_metrics__observe_size(struct probe_metrics *m, uint64_t bytes)
{
	probe_add(&m->size_buckets[bucket_of(probe_size_bounds, PROBE_SIZE_BUCKETS - 1, bytes)], 1);
}

void probe_metrics__observe_fanout(struct probe_metrics *m, uint64_t checks)
{
	probe_add(
	    &m->fanout_buckets[bucket_of(probe_fanout_bounds, PROBE_FANOUT_BUCKETS - 1, checks)], 1);
	probe_add(&m->fanout_sum, checks);
}

void probe_metrics__observe_hold(struct probe_metrics *m, uint64_t ns)
{
	probe_add(&m->hold_buckets[bucket_of(probe_hold_bounds_ns, PROBE_HOLD_BUCKETS - 1, ns)], 1);
	probe_add(&m->hold_sum_ns, ns);
}

const char *const probe_reason_names[PROBE_REASONS]
    = { "normal", "closed", "keepalive", "protocol", "auth", "taken_over", "admin", "other" };

/* --- Prometheus ------------------------------------------------------------------------- */

static void header(struct probe_buf *b, const char *name, const char *type, const char *help)
{
	probe_buf__printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct probe_buf *b, const char *name, const char *help, uint64_t v)
{
	header(b, name, "counter", help);
	probe_buf__printf(b, "%s %llu\n", name, (unsigned long long)v);
}

/* bounds and sum in nanoseconds when ns is set, rendered in seconds (Prometheus' base unit) */
static void histogram_in(struct probe_buf *b, const char *name, const char *help,
    const probe_counter *buckets, const uint64_t *bounds, size_t n, uint64_t sum, bool ns)
{
	header(b, name, "histogram", help);
	uint64_t cumulative = 0;
	for (size_t i = 0; i < n; i++) {
		cumulative += probe_get(&buckets[i]);
		if (i + 1 == n)
			probe_buf__printf(
			    b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
		else if (ns)
			probe_buf__printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bounds[i] / 1e9,
			    (unsigned long long)cumulative);
		else
			probe_buf__printf(b, "%s_bucket{le=\"%llu\"} %llu\n", name,
			    (unsigned long long)bounds[i], (unsigned long long)cumulative);
	}
	if (ns)
		probe_buf__printf(b, "%s_sum %.9f\n", name, (double)sum / 1e9);
	else
		probe_buf__printf(b, "%s_sum %llu\n", name, (unsigned long long)sum);
	probe_buf__printf(b, "%s_count %llu\n", name, (unsigned long long)cumulative);
}

static void histogram(struct probe_buf *b, const char *name, const char *help,
    const probe_counter *buckets, const uint64_t *bounds, size_t n, uint64_t sum)
{
	histogram_in(b, name, help, buckets, bounds, n, sum, false);
}

static const char *const auth_failure_names[PROBE_AUTH_FAILURES]
    = { "no_credentials", "wrong_credentials", "client_certificate" };

/* The endpoint's own security (plugin_opt_web_config): who was turned away, and its re-reads. */
static void render_web(const struct probe_web_stats *w, struct probe_buf *b)
{
	if (!w || !atomic_load(&w->enabled))
		return;
	header(b, "mosquitto_probe_web_config_info", "gauge",
	    "The metrics endpoint's web_config as last applied: TLS, basic auth, client "
	    "certificates.");
	probe_buf__printf(b,
	    "mosquitto_probe_web_config_info{tls=\"%s\",basic_auth=\"%s\",client_cert=\"%s\"} 1\n",
	    atomic_load(&w->tls) ? "true" : "false", atomic_load(&w->basic_auth) ? "true" : "false",
	    atomic_load(&w->client_cert) ? "true" : "false");
	header(b, "mosquitto_probe_http_auth_failures_total", "counter",
	    "Requests to the metrics endpoint turned away: without credentials (401), with a wrong "
	    "user or password (401, the same answer), or without a verified client certificate "
	    "(403).");
	for (int i = 0; i < PROBE_AUTH_FAILURES; i++)
		probe_buf__printf(b, "mosquitto_probe_http_auth_failures_total{reason=\"%s\"} %llu\n",
		    auth_failure_names[i], (unsigned long long)probe_get(&w->auth_failures[i]));
	counter(b, "mosquitto_probe_http_rate_limited_total",
	    "Requests answered 429 without their password checked: an address past 5 failed "
	    "logins (one more a second), or past the bcrypt budget of all addresses together (10 at "
	    "once, 2 a second).",
	    probe_get(&w->rate_limited));
	header(b, "mosquitto_probe_web_config_reloads_total", "counter",
	    "Re-reads of the web_config after its files changed, by result (a failed one keeps the "
	    "settings in force).");
	probe_buf__printf(b,
	    "mosquitto_probe_web_config_reloads_total{result=\"failure\"} %llu\n"
	    "mosquitto_probe_web_config_reloads_total{result=\"success\"} %llu\n",
	    (unsigned long long)probe_get(&w->reloads[0]),
	    (unsigned long long)probe_get(&w->reloads[1]));
	header(b, "mosquitto_probe_web_config_last_reload_successful", "gauge",
	    "1 when the web_config's files as they are now are the ones in force, 0 when the last "
	    "re-read failed.");
	probe_buf__printf(b, "mosquitto_probe_web_config_last_reload_successful %d\n",
	    atomic_load(&w->last_reload_ok) ? 1 : 0);
	header(b, "mosquitto_probe_web_config_last_reload_success_timestamp_seconds", "gauge",
	    "When the web_config in force was read (Unix time).");
	probe_buf__printf(b, "mosquitto_probe_web_config_last_reload_success_timestamp_seconds %llu\n",
	    (unsigned long long)atomic_load(&w->last_reload_s));
}

void probe_metrics__render_prometheus(const struct probe_metrics *m, const struct probe_process *p,
    bool observe_auth, struct probe_buf *b)
{
	bool deliveries = atomic_load(&m->has_deliveries);
	header(b, "mosquitto_probe_info", "gauge",
	    "The mqtt_probe plugin: version, mode, and which broker events it counts with "
	    "(events=\"2.1\": MESSAGE_OUT, true deliveries; \"2.0\": none).");
	probe_buf__printf(b, "mosquitto_probe_info{version=\"%s\",mode=\"%s\",events=\"%s\"} 1\n",
	    PROBE_VERSION, observe_auth ? "observe_auth" : "default", deliveries ? "2.1" : "2.0");
	if (deliveries) {
		counter(b, "mosquitto_deliveries_total",
		    "PUBLISH packets the broker sent to clients (mosquitto 2.1's MESSAGE_OUT): after "
		    "the ACL decision and queue limits; includes retained messages sent on subscribe "
		    "and QoS 1/2 resends.",
		    probe_get(&m->deliveries));
		counter(b, "mosquitto_sent_payload_bytes_total",
		    "Payload bytes of the PUBLISH packets the broker sent (mosquitto 2.1's MESSAGE_OUT).",
		    probe_get(&m->sent_payload_bytes));
	}

	if (atomic_load(&m->has_hold))
		histogram_in(b, "mosquitto_message_hold_seconds",
		    "Time inside the broker per delivery of a stamped message, from its broker-rx-ns to "
		    "the moment mosquitto 2.1 sends it (MESSAGE_OUT): routing, queues, slow and offline "
		    "subscribers; retained copies count from their first arrival.",
		    m->hold_buckets, probe_hold_bounds_ns, PROBE_HOLD_BUCKETS, probe_get(&m->hold_sum_ns),
		    true);

	probe_slow__render_prometheus(m->slow, b);
	if (m->backlog && atomic_load(&m->backlog->enabled)) {
		header(b, "mosquitto_dropped_messages_total", "counter",
		    "Messages the broker dropped for connected clients, by reason, as the probe estimates "
		    "them (queue_full: routed, not sent, and the client's queue at the broker's limit).");
		probe_buf__printf(b, "mosquitto_dropped_messages_total{reason=\"queue_full\"} %llu\n",
		    (unsigned long long)probe_get(&m->dropped_queue_full));
		probe_backlog__render_prometheus(m->backlog, b);
	}
	render_web(m->web, b);

	header(b, "mosquitto_messages_received_total", "counter",
	    "Inbound PUBLISH messages the broker accepted (after its ACL check), by QoS and "
	    "retain flag.");
	for (int qos = 0; qos < 3; qos++)
		for (int retain = 0; retain < 2; retain++)
			probe_buf__printf(b,
			    "mosquitto_messages_received_total{qos=\"%d\",retain=\"%s\"} %llu\n", qos,
			    retain ? "true" : "false",
			    (unsigned long long)probe_get(&m->received[qos][retain]));

	uint64_t bytes = probe_get(&m->payload_bytes);
	counter(b, "mosquitto_received_payload_bytes_total",
	    "Payload bytes of inbound PUBLISH messages the broker accepted.", bytes);
	histogram(b, "mosquitto_received_payload_size_bytes",
	    "Payload size of inbound PUBLISH messages the broker accepted.", m->size_buckets,
	    probe_size_bounds, PROBE_SIZE_BUCKETS, bytes);

	bool events21 = atomic_load(&m->connect_events);
	header(b, "mosquitto_disconnects_total", "counter",
	    events21 ? "Closed connections (mosquitto 2.1's DISCONNECT and CLIENT_OFFLINE): "
	               "identity=\"client\" had been accepted, identity=\"none\" was refused. 2.1 "
	               "reports no event for a socket that never sent CONNECT."
	             : "Closed connections: identity=\"client\" had a client id, identity=\"none\" "
	               "never did (no CONNECT, or authentication failed).");
	probe_buf__printf(b, "mosquitto_disconnects_total{identity=\"client\"} %llu\n",
	    (unsigned long long)probe_get(&m->disconnects_identified));
	probe_buf__printf(b, "mosquitto_disconnects_total{identity=\"none\"} %llu\n",
	    (unsigned long long)probe_get(&m->disconnects_anonymous));
	if (events21) {
		header(b, "mosquitto_disconnect_reasons_total", "counter",
		    "Closed connections by the reason mosquitto 2.1 gives: normal (DISCONNECT), closed "
		    "(no DISCONNECT), keepalive, protocol, auth, taken_over, admin, other.");
		for (int r = 0; r < PROBE_REASONS; r++)
			probe_buf__printf(b, "mosquitto_disconnect_reasons_total{reason=\"%s\"} %llu\n",
			    probe_reason_names[r], (unsigned long long)probe_get(&m->disconnect_reasons[r]));
	}
	counter(b, "mosquitto_probe_stamped_total",
	    "Inbound messages the probe stamped with " PROBE_STAMP_KEY " (all, or those chosen by "
	    "stamp_topic and stamp_every).",
	    probe_get(&m->stamped));
	counter(b, "mosquitto_probe_stamp_failures_total",
	    "Inbound messages the probe could not stamp; they were delivered unstamped.",
	    probe_get(&m->stamp_failures));
	counter(b, "mosquitto_probe_sys_publish_failures_total",
	    "Failed publications of " PROBE_SYS_TOPIC ".", probe_get(&m->sys_publish_failures));
	counter(b, "mosquitto_probe_http_process_exits_total",
	    "Times the probe's HTTP process ended unasked; the broker logged how and started another.",
	    probe_get(&m->http_exits));

	/* The same two figures from two sources, said in their help: 2.1's events, or 2.0's auth
	 * hook (observe_auth). */
	if (events21 || observe_auth) {
		counter(b, "mosquitto_connects_total",
		    events21 ? "Connections the broker accepted (mosquitto 2.1's CONNECT event, after "
		               "CONNACK)."
		             : "CONNECT packets that reached authentication (observe_auth), including "
		               "ones then refused.",
		    probe_get(&m->connects));
		header(b, "mosquitto_connected_clients", "gauge",
		    events21 ? "Accepted connections that have not closed (2.1: CONNECT, DISCONNECT, "
		               "CLIENT_OFFLINE)."
		             : "Connections that reached authentication and have not closed "
		               "(observe_auth).");
		probe_buf__printf(
		    b, "mosquitto_connected_clients %llu\n", (unsigned long long)probe_get(&m->connected));
	}
	if (observe_auth) {
		header(b, "mosquitto_subscription_checks_total", "counter",
		    "Topic filters in SUBSCRIBE and UNSUBSCRIBE packets the broker checked against its "
		    "ACL (observe_auth): requests, before the decision, not subscriptions held.");
		probe_buf__printf(b, "mosquitto_subscription_checks_total{packet=\"subscribe\"} %llu\n",
		    (unsigned long long)probe_get(&m->subscribe_checks[0]));
		probe_buf__printf(b, "mosquitto_subscription_checks_total{packet=\"unsubscribe\"} %llu\n",
		    (unsigned long long)probe_get(&m->subscribe_checks[1]));
		/* Not deliveries: mosquitto 2.0 makes the READ check before the ACL decision and
		 * before a full queue drops the message, and has no per-delivery event. */
		counter(b, "mosquitto_routing_checks_total",
		    "ACL READ checks made while routing accepted client messages, one per matching "
		    "subscription (observe_auth): an upper bound on deliveries, equal to them only "
		    "when no ACL denies a read and no queue is full.",
		    probe_get(&m->routing_checks));
		histogram(b, "mosquitto_message_routing_checks",
		    "ACL READ checks per accepted client message: its fan-out before ACL denials and "
		    "full queues (observe_auth).",
		    m->fanout_buckets, probe_fanout_bounds, PROBE_FANOUT_BUCKETS,
		    probe_get(&m->fanout_sum));
	}

	if (p && p->valid) {
		header(b, "process_cpu_seconds_total", "counter",
		    "Total user and system CPU time spent in seconds.");
		probe_buf__printf(b, "process_cpu_seconds_total %.2f\n", p->cpu_seconds);
		header(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
		probe_buf__printf(
		    b, "process_resident_memory_bytes %llu\n", (unsigned long long)p->resident_bytes);
		header(b, "process_open_fds", "gauge", "Number of open file descriptors.");
		probe_buf__printf(b, "process_open_fds %llu\n", (unsigned long long)p->open_fds);
		header(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
		probe_buf__printf(b, "process_max_fds %llu\n", (unsigned long long)p->max_fds);
		header(b, "process_start_time_seconds", "gauge",
		    "Start time of the process since unix epoch in seconds.");
		probe_buf__printf(b, "process_start_time_seconds %.2f\n", p->start_time_seconds);
	}
}

/* --- JSON ------------------------------------------------------------------------------- */

static void json_buckets(struct probe_buf *b, const char *name, const probe_counter *buckets,
    const uint64_t *bounds, size_t n)
{
	probe_buf__printf(b, "\"%s\":[", name);
	uint64_t cumulative = 0;
	for (size_t i = 0; i < n; i++) {
		cumulative += probe_get(&buckets[i]);
		if (i + 1 < n)
			probe_buf__printf(b, "%s[%llu,%llu]", i ? "," : "", (unsigned long long)bounds[i],
			    (unsigned long long)cumulative);
		else
			probe_buf__printf(b, ",[\"+Inf\",%llu]]", (unsigned long long)cumulative);
	}
}

void probe_metrics__render_json(const struct probe_metrics *m, const struct probe_process *p,
    bool observe_auth, uint64_t wall_ns, struct probe_buf *b)
{
	probe_buf__printf(b, "{\"probe_version\":\"%s\",\"mode\":\"%s\",\"time_ns\":%llu",
	    PROBE_VERSION, observe_auth ? "observe_auth" : "default", (unsigned long long)wall_ns);
	probe_buf__printf(b, ",\"messages_received\":{");
	for (int qos = 0; qos < 3; qos++)
		for (int retain = 0; retain < 2; retain++)
			probe_buf__printf(b, "%s\"qos%d%s\":%llu", qos || retain ? "," : "", qos,
			    retain ? "_retained" : "",
			    (unsigned long long)probe_get(&m->received[qos][retain]));
	probe_buf__printf(
	    b, "},\"payload_bytes\":%llu,", (unsigned long long)probe_get(&m->payload_bytes));
	json_buckets(b, "payload_size_buckets", m->size_buckets, probe_size_bounds, PROBE_SIZE_BUCKETS);
	probe_buf__printf(b, ",\"disconnects\":{\"client\":%llu,\"none\":%llu},\"stamp_failures\":%llu",
	    (unsigned long long)probe_get(&m->disconnects_identified),
	    (unsigned long long)probe_get(&m->disconnects_anonymous),
	    (unsigned long long)probe_get(&m->stamp_failures));
	if (atomic_load(&m->connect_events)) {
		probe_buf__printf(b, ",\"disconnect_reasons\":{");
		for (int r = 0; r < PROBE_REASONS; r++)
			probe_buf__printf(b, "%s\"%s\":%llu", r ? "," : "", probe_reason_names[r],
			    (unsigned long long)probe_get(&m->disconnect_reasons[r]));
		probe_buf__printf(b, "}");
	}
	if (atomic_load(&m->has_deliveries))
		probe_buf__printf(b, ",\"deliveries\":%llu,\"sent_payload_bytes\":%llu",
		    (unsigned long long)probe_get(&m->deliveries),
		    (unsigned long long)probe_get(&m->sent_payload_bytes));
	probe_buf__printf(b, ",\"stamped\":%llu", (unsigned long long)probe_get(&m->stamped));
	if (atomic_load(&m->has_hold)) {
		probe_buf__printf(b, ",");
		json_buckets(
		    b, "hold_ns_buckets", m->hold_buckets, probe_hold_bounds_ns, PROBE_HOLD_BUCKETS);
		probe_buf__printf(
		    b, ",\"hold_ns_sum\":%llu", (unsigned long long)probe_get(&m->hold_sum_ns));
	}
	probe_slow__render_json(m->slow, b);
	if (m->backlog && atomic_load(&m->backlog->enabled))
		probe_buf__printf(b, ",\"dropped\":{\"queue_full\":%llu}",
		    (unsigned long long)probe_get(&m->dropped_queue_full));
	probe_backlog__render_json(m->backlog, b);
	if (observe_auth || atomic_load(&m->connect_events))
		probe_buf__printf(b, ",\"connects\":%llu,\"connected\":%llu",
		    (unsigned long long)probe_get(&m->connects),
		    (unsigned long long)probe_get(&m->connected));
	if (observe_auth) {
		probe_buf__printf(b, ",\"subscription_checks\":{\"subscribe\":%llu,\"unsubscribe\":%llu}",
		    (unsigned long long)probe_get(&m->subscribe_checks[0]),
		    (unsigned long long)probe_get(&m->subscribe_checks[1]));
		probe_buf__printf(
		    b, ",\"routing_checks\":%llu,", (unsigned long long)probe_get(&m->routing_checks));
		json_buckets(b, "routing_checks_buckets", m->fanout_buckets, probe_fanout_bounds,
		    PROBE_FANOUT_BUCKETS);
		probe_buf__printf(
		    b, ",\"routing_checks_sum\":%llu", (unsigned long long)probe_get(&m->fanout_sum));
	}
	if (p && p->valid)
		probe_buf__printf(b,
		    ",\"process\":{\"cpu_seconds\":%.2f,\"resident_bytes\":%llu,"
		    "\"open_fds\":%llu,\"max_fds\":%llu,\"start_time_seconds\":%.2f}",
		    p->cpu_seconds, (unsigned long long)p->resident_bytes, (unsigned long long)p->open_fds,
		    (unsigned long long)p->max_fds, p->start_time_seconds);
	probe_buf__printf(b, "}");
}
