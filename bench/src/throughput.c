/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * throughput.c - the throughput and fanout scenarios.
 *
 * One thread drives every connection (epoll over libmosquitto's non-blocking loop) and the
 * schedule (epoll_pwait2 with a nanosecond timeout at the next slot). Each wake-up emits every slot
 * whose time has come, stamped with its intended time, so a stalled broker shows up as latency,
 * never as a lower rate. Nothing waits for an acknowledgement; if the unacknowledged backlog
 * passes 10 s of traffic the generator stops, says "generator saturated" and counts the unsent
 * slots as shortfall.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mqbench.h"
#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_tls.h"

struct conn {
	struct bench *b;
	struct mosquitto *m;
	int fd;
	unsigned index;
	bool publisher, connected, ready, out, lost;
	int connack;
	uint32_t broker_max_packet; /* MQTT 5: its CONNACK's Maximum Packet Size; 0: none said */
	uint64_t completed;
	uint64_t sent; /* publishers: messages handed to libmosquitto */
};

struct second {
	double t;
	uint64_t sent, delivered;
	uint64_t p50, p99, max; /* of the second's own deliveries (b->interval) */
};

struct bench {
	const struct bench_opts *o;
	int ep;
	struct conn *conns; /* publishers first, then subscribers */
	unsigned npubs, nsubs;
	uint16_t run_id;
	uint64_t mono0, wall0;
	struct bench_schedule sched;
	struct bench_stream *streams; /* [sub * npubs + pub] */
	/* to_broker: send -> broker-rx-ns. With broker-tx-ns: in_broker (rx -> tx) and from_broker
	 * (tx -> receive); without: from_broker_rx (rx -> receive, the broker's time included). */
	struct mqc_hist lat, actual, lag, to_broker, in_broker, from_broker, from_broker_rx;
	struct mqc_hist interval; /* lat of this second only, emptied each second (progress) */
	struct bench_counts n;
	uint64_t backlog_limit;
	uint64_t completed; /* written (QoS 0) or acknowledged (QoS 1/2), over all publishers */
	unsigned char *payload;
	char topic_base[128];
	char failure[256];
	bool stop; /* the schedule ends: every failure but a lost subscriber */
	struct second *seconds;
	size_t nseconds;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

__attribute__((format(printf, 2, 0))) static void vfail(
    struct bench *b, const char *fmt, va_list ap)
{
	if (!b->failure[0]) /* the first failure is the reason */
		vsnprintf(b->failure, sizeof b->failure, fmt, ap);
}

/* The run has failed and its schedule ends. */
__attribute__((format(printf, 2, 3))) static void fail(struct bench *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail(b, fmt, ap);
	va_end(ap);
	b->stop = true;
}

/* Connection c is gone. A publisher's end stops the schedule; a subscriber's does not: the
 * others keep receiving the load asked for, and what c misses counts as lost with it. */
__attribute__((format(printf, 3, 4))) static void conn_lost(
    struct bench *b, struct conn *c, const char *fmt, ...)
{
	c->lost = true;
	va_list ap;
	va_start(ap, fmt);
	vfail(b, fmt, ap);
	va_end(ap);
	if (c->publisher || !c->ready)
		b->stop = true;
}

static const char *o_broker(const struct bench *b)
{
	return b->o->net.broker;
}

static uint64_t to_wall(const struct bench *b, uint64_t mono)
{
	return b->wall0 + (mono - b->mono0);
}

static void topic_for(const struct bench *b, unsigned index, char *out, size_t len)
{
	if (b->o->pub_topic)
		snprintf(out, len, "%s", b->o->pub_topic);
	else
		snprintf(out, len, "%s/t/%u", b->topic_base, index % b->o->topics);
}

/* Whether subscriber sub receives what publisher pub sends (topic_for, the SUBSCRIBE). */
static bool sub_gets(const struct bench *b, unsigned sub, unsigned pub)
{
	return b->o->sub_filter || sub % b->o->topics == pub % b->o->topics;
}

static unsigned matching_subscribers(const struct bench *b, unsigned pub)
{
	if (b->o->sub_filter)
		return b->nsubs;
	unsigned t = pub % b->o->topics;
	return t < b->nsubs ? (b->nsubs - 1 - t) / b->o->topics + 1 : 0;
}

/* --- libmosquitto callbacks (on this thread, inside loop_read/loop_write) ---------------- */

static void on_connect(
    struct mosquitto *m, void *obj, int rc, int flags, const mosquitto_property *props)
{
	(void)flags;
	struct conn *c = obj;
	c->connack = rc;
	mosquitto_property_read_int32(
	    props, MQTT_PROP_MAXIMUM_PACKET_SIZE, &c->broker_max_packet, false);
	if (rc != 0) {
		fail(c->b, "CONNECT refused: %s",
		    c->b->o->net.conn.protocol == 5 ? mosquitto_reason_string(rc)
		                                    : mosquitto_connack_string(rc));
		return;
	}
	c->connected = true;
	if (c->publisher) {
		c->ready = true;
		return;
	}
	char filter[256];
	if (c->b->o->sub_filter)
		snprintf(filter, sizeof filter, "%s", c->b->o->sub_filter);
	else
		topic_for(c->b, c->index, filter, sizeof filter);
	if (mosquitto_subscribe_v5(m, NULL, filter, c->b->o->net.qos, 0, NULL) != MOSQ_ERR_SUCCESS)
		fail(c->b, "cannot subscribe to %s", filter);
}

static void on_subscribe(struct mosquitto *m, void *obj, int mid, int count, const int *granted,
    const mosquitto_property *props)
{
	(void)m;
	(void)mid;
	(void)props;
	struct conn *c = obj;
	if (count < 1 || granted[0] > 2) {
		fail(c->b, "the broker refused a subscription (%s)", "reason code >= 0x80");
		return;
	}
	c->ready = true;
}

static void on_publish(
    struct mosquitto *m, void *obj, int mid, int reason, const mosquitto_property *props)
{
	(void)m;
	(void)mid;
	(void)props;
	struct conn *c = obj;
	c->completed++;
	c->b->completed++;
	if (reason >= 0x80)
		fail(c->b, "the broker refused a publish (%s)", mosquitto_reason_string(reason));
}

static void on_disconnect(struct mosquitto *m, void *obj, int rc, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct conn *c = obj;
	c->connected = false;
	if (rc != 0 && c->connack < 0)
		conn_lost(c->b, c, "cannot connect to %s: %s", o_broker(c->b), mqc_client_strerror(rc));
	else if (rc != 0)
		conn_lost(c->b, c, "lost a connection to the broker: %s", mosquitto_strerror(rc));
	else
		c->lost = true; /* our own DISCONNECT, at the end */
}

/* The probe's stamps: broker-rx-ns (when the broker received the message) and, from a probe on
 * mosquitto 2.1 with tx_stamp, broker-tx-ns (when it sent this copy). The last of each wins (a
 * bridge may add more); 0 when absent. */
static void broker_stamps(const mosquitto_property *props, uint64_t *rx, uint64_t *tx)
{
	*rx = *tx = 0;
	bool first = true;
	for (const mosquitto_property *p = props; p;) {
		char *k = NULL, *v = NULL;
		p = mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &k, &v, !first);
		first = false;
		if (p && strcmp(k, "broker-rx-ns") == 0)
			*rx = strtoull(v, NULL, 10);
		else if (p && strcmp(k, "broker-tx-ns") == 0)
			*tx = strtoull(v, NULL, 10);
		free(k);
		free(v);
	}
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct conn *c = obj;
	struct bench *b = c->b;
	uint64_t now = mqc_now_ns();
	struct bench_header h;
	if (!bench_header_decode(msg->payload, (size_t)msg->payloadlen, &h) || h.run_id != b->run_id
	    || h.pub_id >= b->npubs) {
		b->n.foreign++; /* another run's traffic, or not ours at all */
		return;
	}
	struct bench_stream *s = &b->streams[(size_t)c->index * b->npubs + h.pub_id];
	if (!bench_stream_record(s, h.seq))
		return;
	uint64_t recv_wall = to_wall(b, now);
	uint64_t latency = recv_wall > h.intended_ns ? recv_wall - h.intended_ns : 0;
	mqc_hist_record(&b->lat, latency);
	mqc_hist_record(&b->interval, latency);
	uint64_t sent_wall = h.intended_ns;
	if ((size_t)msg->payloadlen >= BENCH_HEADER_ACTUAL_SIZE) {
		sent_wall += (uint64_t)bench_get_u32le((const unsigned char *)msg->payload + 16) * 1000;
		mqc_hist_record(&b->actual, recv_wall > sent_wall ? recv_wall - sent_wall : 0);
	}
	if (props) {
		uint64_t rx, tx;
		broker_stamps(props, &rx, &tx);
		if (rx) {
			uint64_t real_now = mqc_wall_ns();
			mqc_hist_record(&b->to_broker, rx > sent_wall ? rx - sent_wall : 0);
			if (tx >= rx) { /* three legs: the broker said when it sent this copy */
				mqc_hist_record(&b->in_broker, tx - rx);
				mqc_hist_record(&b->from_broker, real_now > tx ? real_now - tx : 0);
			} else {
				mqc_hist_record(&b->from_broker_rx, real_now > rx ? real_now - rx : 0);
			}
		}
	}
}

/* --- connections --------------------------------------------------------------------------- */

static void watch(struct bench *b, struct conn *c)
{
	bool want = mqc_client_want_write(c->m, c->connack < 0);
	if (want == c->out)
		return;
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0u), .data.ptr = c };
	if (epoll_ctl(b->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0) {
		fail(b, "epoll_ctl: %s", strerror(errno));
		return;
	}
	c->out = want;
}

static void flush(struct bench *b, struct conn *c)
{
	if (mosquitto_want_write(c->m))
		mosquitto_loop_write(c->m, 1);
	watch(b, c);
}

static int open_conn(struct bench *b, struct conn *c, const char *id)
{
	const struct bench_opts *o = b->o;
	c->b = b;
	c->connack = -1;
	struct mqc_conn_opts co = o->net.conn;
	co.client_id = id;
	co.keepalive_s = 60;
	char err[256];
	c->m = mqc_client_new(&co, c, NULL, err, sizeof err);
	if (!c->m) {
		fail(b, "%s: %s", id, err);
		return -1;
	}
	mosquitto_int_option(c->m, MOSQ_OPT_SEND_MAXIMUM, 1000);
	mosquitto_connect_v5_callback_set(c->m, on_connect);
	mosquitto_subscribe_v5_callback_set(c->m, on_subscribe);
	mosquitto_publish_v5_callback_set(c->m, on_publish);
	mosquitto_disconnect_v5_callback_set(c->m, on_disconnect);
	mosquitto_message_v5_callback_set(c->m, on_message);
	if (mqc_client_connect(c->m, &co, err, sizeof err) != 0) {
		fail(b, "cannot connect to %s: %s", o->net.broker, err);
		return -1;
	}
	c->fd = mosquitto_socket(c->m);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	if (epoll_ctl(b->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
		fail(b, "epoll_ctl: %s", strerror(errno));
		return -1;
	}
	flush(b, c);
	return 0;
}

static void handle_io(struct bench *b, struct epoll_event *ev)
{
	struct conn *c = ev->data.ptr;
	mqc_client_io(c->m, (ev->events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0,
	    (ev->events & EPOLLOUT) != 0, !c->connected);
	if (mosquitto_socket(c->m) != c->fd) {            /* closed by libmosquitto */
		const char *refused = mqc_tls_last_refusal(); /* a handshake that failed says why */
		if (!c->lost && c->connack < 0)
			conn_lost(b, c, "cannot connect to %s%s%s", o_broker(b), refused ? ": " : "",
			    refused ? refused : "");
		else if (!c->lost)
			conn_lost(b, c, "the broker closed a connection%s", "");
		return;
	}
	flush(b, c);
}

/* Wait for I/O until deadline (CLOCK_MONOTONIC ns; 0 = do not wait). epoll_pwait2 takes the
 * timeout in ns: re-arming a timerfd per slot cost half the CPU on a paravirtualised VM. */
static void pump(struct bench *b, uint64_t deadline)
{
	struct epoll_event events[64];
	uint64_t now = mqc_now_ns();
	struct timespec timeout = mqc_ns_to_ts(deadline > now ? deadline - now : 0);
	int n = epoll_pwait2(b->ep, events, 64, &timeout, NULL);
	for (int i = 0; i < n; i++)
		handle_io(b, &events[i]);
}

/* --- the run ------------------------------------------------------------------------------ */

static void emit(struct bench *b, uint64_t now)
{
	unsigned pub;
	uint32_t seq;
	uint64_t intended;
	char topic[256];
	int budget = 20000; /* then let the loop read; the rest follows at once */
	while (budget-- > 0 && !b->n.generator_saturated
	    && bench_schedule_due(&b->sched, now, &pub, &seq, &intended)) {
		struct conn *c = &b->conns[pub];
		uint64_t backlog = b->n.sent - b->completed; /* O(1): this is the send loop */
		if (backlog > b->backlog_limit) {
			b->n.generator_saturated = true;
			b->sched.next--; /* this slot was not sent */
			fprintf(stderr,
			    "mqbench: generator saturated: %llu messages unacknowledged; "
			    "stopping the schedule, the rest counts as shortfall\n",
			    (unsigned long long)backlog);
			break;
		}
		struct bench_header h = { .run_id = b->run_id,
			.pub_id = (uint16_t)pub,
			.seq = seq,
			.intended_ns = to_wall(b, intended) };
		bench_header_encode(&h, b->payload);
		uint64_t t = mqc_now_ns();
		mqc_hist_record(&b->lag, t - intended);
		if (b->o->size >= BENCH_HEADER_ACTUAL_SIZE)
			bench_put_u32le(b->payload + 16, (uint32_t)((t - intended) / 1000));
		topic_for(b, pub, topic, sizeof topic);
		int rc = mosquitto_publish_v5(
		    c->m, NULL, topic, (int)b->o->size, b->payload, b->o->net.qos, false, NULL);
		if (rc == MOSQ_ERR_OVERSIZE_PACKET) {
			fail(b,
			    "a publish of %zu payload bytes to %s is larger than the broker takes (its Maximum "
			    "Packet Size, %lu bytes): a smaller --size",
			    b->o->size, topic, (unsigned long)c->broker_max_packet);
			return;
		}
		if (rc != MOSQ_ERR_SUCCESS) {
			fail(b, "a publish to %s failed on a publisher connection: %s", topic,
			    mqc_client_strerror(rc));
			return;
		}
		b->n.sent++;
		c->sent++;
		b->n.expected += matching_subscribers(b, pub);
	}
	for (unsigned i = 0; i < b->npubs; i++)
		flush(b, &b->conns[i]);
}

static uint64_t delivered(const struct bench *b)
{
	uint64_t d = 0;
	for (size_t i = 0; i < (size_t)b->npubs * b->nsubs; i++)
		d += b->streams[i].unique;
	return d;
}

/* What subscriber sub should have received by now and has not. */
static uint64_t missing_at(const struct bench *b, unsigned sub)
{
	uint64_t missing = 0;
	for (unsigned pub = 0; pub < b->npubs; pub++) {
		if (!sub_gets(b, sub, pub))
			continue;
		uint64_t got = b->streams[(size_t)sub * b->npubs + pub].unique;
		uint64_t sent = b->conns[pub].sent;
		missing += sent > got ? sent - got : 0;
	}
	return missing;
}

/* Missing at subscribers whose connection is gone (lost: nothing more can reach them), or at
 * the healthy ones (still on their way, or never coming). */
static void missing(const struct bench *b, uint64_t *with_lost_subscribers, uint64_t *healthy)
{
	*with_lost_subscribers = *healthy = 0;
	for (unsigned s = 0; s < b->nsubs; s++)
		*(b->conns[b->npubs + s].lost ? with_lost_subscribers : healthy) += missing_at(b, s);
}

/* Every publish of a live publisher acknowledged (QoS 1/2; QoS 0 has nothing to wait for). */
static bool acks_done(const struct bench *b)
{
	if (b->o->net.qos == 0)
		return true;
	for (unsigned i = 0; i < b->npubs; i++)
		if (!b->conns[i].lost && b->conns[i].completed < b->conns[i].sent)
			return false;
	return true;
}

static void progress(struct bench *b, uint64_t now, uint64_t *last_sent, uint64_t *last_deliv)
{
	uint64_t d = delivered(b);
	double t = (double)(now - b->sched.t0_ns) / 1e9;
	struct second sec = { t, b->n.sent, d, mqc_hist_percentile(&b->interval, 50),
		mqc_hist_percentile(&b->interval, 99), b->interval.count ? b->interval.max : 0 };
	mqc_hist_reset(&b->interval);
	char p99[24];
	fprintf(stderr,
	    "%6.1fs  last 1s: sent %llu/s, delivered %llu/s, latency p99 %s | since start: sent %llu, "
	    "delivered %llu\n",
	    t, (unsigned long long)(b->n.sent - *last_sent), (unsigned long long)(d - *last_deliv),
	    bench_fmt_ns(sec.p99, p99, sizeof p99), (unsigned long long)b->n.sent,
	    (unsigned long long)d);
	struct second *grown = realloc(b->seconds, (b->nseconds + 1) * sizeof *grown);
	if (grown) {
		b->seconds = grown;
		b->seconds[b->nseconds++] = sec;
	}
	*last_sent = b->n.sent;
	*last_deliv = d;
	for (unsigned i = 0; i < b->npubs + b->nsubs; i++) {
		mosquitto_loop_misc(b->conns[i].m);
		flush(b, &b->conns[i]);
	}
}

static bool all_ready(const struct bench *b)
{
	for (unsigned i = 0; i < b->npubs + b->nsubs; i++)
		if (!b->conns[i].ready)
			return false;
	return true;
}

static uint64_t acked(const struct bench *b)
{
	uint64_t a = 0;
	for (unsigned i = 0; i < b->npubs; i++)
		a += b->conns[i].completed;
	return a;
}

static void report(struct bench *b, const struct probe_sample *p0, const struct probe_sample *p1,
    double self_cpu, double broker_cpu, uint64_t elapsed)
{
	const struct bench_opts *o = b->o;
	struct bench_counts *n = &b->n;
	double secs = (double)elapsed / 1e9;
	double loss_pct = n->expected ? 100.0 * (double)n->loss / (double)n->expected : 0;
	const char *name = o->scenario == SC_FANOUT ? "fanout" : "throughput";
	if (o->json) {
		cJSON *root = bench_result_new(o);
		cJSON_AddNumberToObject(root, "run_id", b->run_id);
		cJSON_AddStringToObject(root, "clock", "CLOCK_MONOTONIC mapped to the Unix epoch at start");
		if (b->failure[0]) /* the numbers are what came before it */
			cJSON_AddStringToObject(root, "failure", b->failure);
		cJSON *c = cJSON_AddObjectToObject(root, "counts");
		cJSON_AddNumberToObject(c, "scheduled", (double)n->scheduled);
		cJSON_AddNumberToObject(c, "sent", (double)n->sent);
		cJSON_AddNumberToObject(c, "acked", (double)n->acked);
		cJSON_AddNumberToObject(c, "expected", (double)n->expected);
		cJSON_AddNumberToObject(c, "delivered", (double)n->delivered);
		cJSON_AddNumberToObject(c, "duplicates", (double)n->duplicates);
		cJSON_AddNumberToObject(c, "out_of_order", (double)n->out_of_order);
		cJSON_AddNumberToObject(c, "loss", (double)n->loss);
		cJSON_AddNumberToObject(c, "shortfall", (double)n->shortfall);
		cJSON_AddNumberToObject(c, "foreign", (double)n->foreign);
		cJSON_AddBoolToObject(c, "generator_saturated", n->generator_saturated);
		cJSON_AddNumberToObject(c, "lost_with_subscriber", (double)n->lost_with_subscriber);
		cJSON_AddNumberToObject(c, "not_received", (double)n->not_received);
		cJSON_AddNumberToObject(root, "elapsed_ns", (double)elapsed);
		cJSON *l = cJSON_AddObjectToObject(root, "latency");
		cJSON_AddItemToObject(l, "intended", bench_latency_json(&b->lat));
		cJSON_AddItemToObject(l, "actual", bench_latency_json(&b->actual));
		cJSON_AddItemToObject(l, "schedule_lag", bench_latency_json(&b->lag));
		cJSON_AddItemToObject(l, "publisher_to_broker", bench_latency_json(&b->to_broker));
		if (b->in_broker.count) {
			cJSON_AddItemToObject(l, "inside_broker", bench_latency_json(&b->in_broker));
			cJSON_AddItemToObject(l, "broker_to_subscriber", bench_latency_json(&b->from_broker));
		} else {
			cJSON_AddItemToObject(
			    l, "broker_to_subscriber", bench_latency_json(&b->from_broker_rx));
		}
		cJSON *cpu = cJSON_AddObjectToObject(root, "cpu_seconds");
		cJSON_AddNumberToObject(cpu, "mqbench", self_cpu);
		cJSON_AddNumberToObject(cpu, "broker", broker_cpu);
		cJSON *tl = cJSON_AddArrayToObject(root, "timeline");
		for (size_t i = 0; i < b->nseconds; i++) {
			cJSON *s = cJSON_CreateObject();
			cJSON_AddNumberToObject(s, "t", b->seconds[i].t);
			cJSON_AddNumberToObject(s, "sent", (double)b->seconds[i].sent);
			cJSON_AddNumberToObject(s, "delivered", (double)b->seconds[i].delivered);
			cJSON_AddNumberToObject(s, "p50", (double)b->seconds[i].p50);
			cJSON_AddNumberToObject(s, "p99", (double)b->seconds[i].p99);
			cJSON_AddNumberToObject(s, "max", (double)b->seconds[i].max);
			cJSON_AddItemToArray(tl, s);
		}
		if (p0->ok && p1->ok) {
			cJSON *pr = cJSON_AddObjectToObject(root, "probe");
			if (p1->has_connects) /* only with the probe's observe_auth: absent, not 0 */
				cJSON_AddNumberToObject(pr, "connects", p1->connects - p0->connects);
			cJSON_AddNumberToObject(pr, "disconnects", p1->disconnects - p0->disconnects);
			cJSON_AddNumberToObject(pr, "messages_in", p1->messages_in - p0->messages_in);
			if (p0->has_deliveries && p1->has_deliveries)
				cJSON_AddNumberToObject(pr, "deliveries", p1->deliveries - p0->deliveries);
			cJSON_AddNumberToObject(pr, "routing_checks", p1->routing_checks - p0->routing_checks);
			cJSON_AddNumberToObject(pr, "routing_checks_per_message",
			    p1->routing_count > p0->routing_count
			        ? (p1->routing_sum - p0->routing_sum) / (p1->routing_count - p0->routing_count)
			        : 0.0);
		}
		bench_result_print(root);
		return;
	}
	printf("%s %upub x%.0f/s -> %usub qos%d against %s\n", name, b->npubs, o->rate, b->nsubs,
	    o->net.qos, o->net.broker);
	printf("duration %.3fs   clients %u\n", secs, b->npubs + b->nsubs);
	if (b->failure[0]) /* what was measured, and that it is not the run asked for */
		printf("the run failed: %s\n", b->failure);
	printf("sent %llu (%.0f/s)   delivered %llu of %llu expected   loss %.2f%%%s\n",
	    (unsigned long long)n->sent, (double)n->sent / secs, (unsigned long long)n->delivered,
	    (unsigned long long)n->expected, loss_pct,
	    b->failure[0] ? " (of what was sent before it failed)" : "");
	if (n->loss) {
		char drain[24];
		printf("   of which lost with a subscriber's connection %llu, not received by the end of "
		       "the drain (%s) %llu\n",
		    (unsigned long long)n->lost_with_subscriber,
		    bench_fmt_ns(o->drain_ns, drain, sizeof drain), (unsigned long long)n->not_received);
	}
	bench_print_latency(stdout, "latency", &b->lat);
	printf(
	    "scheduled %llu   shortfall %llu   duplicates %llu   out of order %llu   foreign %llu%s\n",
	    (unsigned long long)n->scheduled, (unsigned long long)n->shortfall,
	    (unsigned long long)n->duplicates, (unsigned long long)n->out_of_order,
	    (unsigned long long)n->foreign,
	    n->generator_saturated ? "   GENERATOR SATURATED: percentiles are lower bounds" : "");
	if (b->actual.count)
		bench_print_latency(stdout, "from actual send:", &b->actual);
	bench_print_latency(stdout, "schedule lag:", &b->lag);
	if (b->to_broker.count)
		bench_print_latency(stdout, "publisher->broker:", &b->to_broker);
	if (b->in_broker.count) {
		bench_print_latency(stdout, "inside broker:", &b->in_broker);
		bench_print_latency(stdout, "broker->subscriber:", &b->from_broker);
	}
	if (b->from_broker_rx.count) /* stamped on the way in only: the broker's time included */
		bench_print_latency(stdout, "broker(rx)->subscriber:", &b->from_broker_rx);
	if (o->metrics_url && !(p0->ok && p1->ok))
		printf("broker (probe): n/a (%s could not be read)\n", o->metrics_url);
	if (p0->ok && p1->ok) {
		double fc = p1->routing_count - p0->routing_count;
		printf("broker (probe): messages in +%.0f   disconnects +%.0f",
		    p1->messages_in - p0->messages_in, p1->disconnects - p0->disconnects);
		if (p1->has_connects)
			printf("   connects +%.0f", p1->connects - p0->connects);
		else
			printf("   connects n/a (the probe counts them only with observe_auth)");
		printf("\n");
		if (p0->has_deliveries && p1->has_deliveries)
			printf("broker (probe): deliveries +%.0f (PUBLISH packets sent: mosquitto 2.1's "
			       "MESSAGE_OUT, after ACL and queue limits; any client's, this run's included)\n",
			    p1->deliveries - p0->deliveries);
		/* What mosquitto 2.0 lets a plugin see is the routing, not the delivery: say so right
		 * under mqbench's own exact count. */
		if (fc > 0)
			printf("broker (probe): routing checks +%.0f (%.2f per message): ACL read checks, an "
			       "upper bound on deliveries (made before ACL denials and full queues)\n",
			    p1->routing_checks - p0->routing_checks, (p1->routing_sum - p0->routing_sum) / fc);
	}
	if (n->sent)
		printf("cpu per message sent: mqbench %.2fus%s", self_cpu / (double)n->sent * 1e6,
		    broker_cpu > 0 ? "" : "\n");
	if (n->sent && broker_cpu > 0)
		printf("   broker %.2fus\n", broker_cpu / (double)n->sent * 1e6);
}

static double self_cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6
	    + (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static double broker_cpu_seconds(const struct bench_opts *o)
{
	double cpu = 0, rss;
	if (o->broker_pid && bench_proc_read(o->broker_pid, &cpu, &rss))
		return cpu;
	struct probe_sample s;
	bench_probe_read(o->metrics_url, &s);
	return s.ok ? s.cpu_seconds : -1;
}

/* Everything a run holds, whatever of it was made. */
static void bench_free(struct bench *b)
{
	for (unsigned i = 0; b->conns && i < b->npubs + b->nsubs; i++)
		if (b->conns[i].m)
			mosquitto_destroy(b->conns[i].m);
	for (size_t i = 0; b->streams && i < (size_t)b->npubs * b->nsubs; i++)
		bench_stream_free(&b->streams[i]);
	free(b->streams);
	free(b->conns);
	free(b->payload);
	free(b->seconds);
	struct mqc_hist *hists[] = { &b->lat, &b->actual, &b->lag, &b->to_broker, &b->in_broker,
		&b->from_broker, &b->from_broker_rx, &b->interval };
	for (size_t i = 0; i < sizeof hists / sizeof hists[0]; i++)
		mqc_hist_free(hists[i]);
	if (b->ep >= 0)
		close(b->ep);
}

int bench_run_throughput(const struct bench_opts *o)
{
	struct bench b = { .o = o, .npubs = o->publishers, .nsubs = o->subscribers };
	int rc = 1;
	mosquitto_lib_init();
	srand((unsigned)o->seed);
	b.run_id = (uint16_t)(o->seed ^ (o->seed >> 16) ^ (o->seed >> 32));
	snprintf(b.topic_base, sizeof b.topic_base, "%s/%u", o->prefix, b.run_id);
	b.ep = epoll_create1(EPOLL_CLOEXEC);
	b.conns = calloc(b.npubs + b.nsubs, sizeof *b.conns);
	b.payload = calloc(1, o->size);
	double total_rate = o->rate * b.npubs;
	uint64_t per_pub = (uint64_t)((double)o->duration_ns / 1e9 * o->rate) + 2;
	b.streams = calloc((size_t)b.npubs * b.nsubs, sizeof *b.streams);
	if (!b.conns || !b.payload || !b.streams || per_pub > UINT32_MAX || mqc_hist_init(&b.lat, 10)
	    || mqc_hist_init(&b.actual, 10) || mqc_hist_init(&b.lag, 10)
	    || mqc_hist_init(&b.to_broker, 10) || mqc_hist_init(&b.in_broker, 10)
	    || mqc_hist_init(&b.from_broker, 10) || mqc_hist_init(&b.from_broker_rx, 10)
	    || mqc_hist_init(&b.interval, 10)) {
		fprintf(stderr, "mqbench: out of memory for this run\n");
		goto out;
	}
	for (size_t i = 0; i < (size_t)b.npubs * b.nsubs; i++)
		if (bench_stream_init(&b.streams[i], (uint32_t)per_pub) != 0) {
			fprintf(stderr, "mqbench: out of memory for the accounting\n");
			goto out;
		}
	memset(b.payload, 'm', o->size);
	b.backlog_limit = o->max_backlog          ? o->max_backlog
	    : (uint64_t)(total_rate * 10) > 10000 ? (uint64_t)(total_rate * 10)
	                                          : 10000;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	/* The broker's view starts before our first connection. */
	struct probe_sample p0, p1;
	bench_probe_read(o->metrics_url, &p0); /* warns when it cannot be read */

	/* Connect everything, wait for CONNACKs and SUBACKs (with a deadline). */
	for (unsigned i = 0; i < b.npubs + b.nsubs && !b.failure[0]; i++) {
		struct conn *c = &b.conns[i];
		c->publisher = i < b.npubs;
		c->index = c->publisher ? i : i - b.npubs;
		char id[128];
		snprintf(id, sizeof id, "%s-%s-%s-%u", o->prefix, c->publisher ? "pub" : "sub", o->token,
		    c->index);
		open_conn(&b, c, id);
	}
	uint64_t deadline = mqc_now_ns() + 30 * MQC_NS_PER_S;
	while (!b.failure[0] && !all_ready(&b) && !interrupted) {
		if (mqc_now_ns() > deadline) {
			fail(&b, "connections not ready after 30 s (%s)", "no CONNACK or SUBACK");
			break;
		}
		pump(&b, mqc_now_ns() + 100 * MQC_NS_PER_MS);
	}
	if (b.failure[0] || interrupted) {
		fprintf(stderr, "mqbench: %s\n", b.failure[0] ? b.failure : "interrupted");
		goto out;
	}

	double self0 = self_cpu_seconds(), broker0 = broker_cpu_seconds(o);
	b.mono0 = mqc_now_ns();
	b.wall0 = mqc_wall_ns();
	bench_schedule_init(
	    &b.sched, b.mono0 + 10 * MQC_NS_PER_MS, total_rate, o->duration_ns, b.npubs);
	b.n.scheduled = b.sched.total_slots;
	uint64_t next_tick = b.sched.t0_ns + MQC_NS_PER_S, last_sent = 0, last_deliv = 0;

	/* The schedule. */
	while (!b.stop && !interrupted && !b.n.generator_saturated
	    && bench_schedule_next_time(&b.sched) != UINT64_MAX) {
		uint64_t now = mqc_now_ns();
		emit(&b, now);
		if (now >= next_tick) {
			progress(&b, now, &last_sent, &last_deliv);
			next_tick += MQC_NS_PER_S;
		}
		uint64_t wake = bench_schedule_next_time(&b.sched);
		pump(&b, wake < next_tick ? wake : next_tick);
	}
	uint64_t end_of_schedule = mqc_now_ns();
	/*
	 * Drain, at every QoS and after a failure too: until every live publisher's messages are
	 * acknowledged and every live subscriber has everything it should get, or --drain has
	 * passed. Nothing else ends it early: a broker that stalls at the end of a QoS 0 run gives
	 * no sign of life, and its late deliveries are latency, not loss.
	 */
	uint64_t drain_end = end_of_schedule + o->drain_ns;
	while (!interrupted) {
		uint64_t now = mqc_now_ns(), gone, waiting;
		missing(&b, &gone, &waiting);
		if ((acks_done(&b) && waiting == 0) || now > drain_end)
			break;
		if (now >= next_tick) {
			progress(&b, now, &last_sent, &last_deliv);
			next_tick += MQC_NS_PER_S;
		}
		pump(&b, now + 50 * MQC_NS_PER_MS);
	}
	/* Before our own DISCONNECTs mark every connection gone. */
	missing(&b, &b.n.lost_with_subscriber, &b.n.not_received);
	b.n.delivered = delivered(&b);
	uint64_t elapsed = end_of_schedule - b.sched.t0_ns;
	double self_cpu = self_cpu_seconds() - self0;
	double broker1 = broker_cpu_seconds(o);
	double broker_cpu = broker0 >= 0 && broker1 >= 0 ? broker1 - broker0 : -1;
	for (unsigned i = 0; i < b.npubs + b.nsubs; i++) {
		mosquitto_disconnect(b.conns[i].m);
		mosquitto_loop_write(b.conns[i].m, 1);
	}
	/* The probe's read-out after the broker has seen every connection go (at most 3 s). */
	uint64_t probe_deadline = mqc_now_ns() + 3 * MQC_NS_PER_S;
	do {
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
		bench_probe_read(o->metrics_url, &p1);
	} while (p0.ok && p1.ok && p1.disconnects - p0.disconnects < b.npubs + b.nsubs
	    && mqc_now_ns() < probe_deadline);

	b.n.acked = o->net.qos ? acked(&b) : 0;
	for (size_t i = 0; i < (size_t)b.npubs * b.nsubs; i++) {
		b.n.duplicates += b.streams[i].duplicates;
		b.n.out_of_order += b.streams[i].out_of_order;
		b.n.foreign += b.streams[i].beyond;
	}
	b.n.loss = b.n.expected > b.n.delivered ? b.n.expected - b.n.delivered : 0;
	b.n.shortfall = b.n.scheduled - b.n.sent;
	if (interrupted)
		fprintf(stderr, "mqbench: interrupted; reporting what was measured\n");
	report(&b, &p0, &p1, self_cpu, broker_cpu, elapsed);
	bench_warn_delayed_ack("latency", &b.lat);

	double loss_pct = b.n.expected ? 100.0 * (double)b.n.loss / (double)b.n.expected : 0;
	if (b.failure[0])
		fprintf(stderr, "mqbench: %s\n", b.failure);
	else if (b.n.sent == 0)
		fprintf(stderr, "mqbench: nothing was sent\n");
	else if (b.n.delivered == 0 && b.n.expected > 0)
		fprintf(stderr,
		    "mqbench: nothing was delivered (%llu expected): check the ACL, the "
		    "topics and --sub-filter\n",
		    (unsigned long long)b.n.expected);
	else if (loss_pct > o->max_loss_pct && b.n.lost_with_subscriber == 0) {
		char drain[24];
		fprintf(stderr,
		    "mqbench: loss %.2f%% is above --max-loss %.2f%%: %llu messages not received by the "
		    "end of the drain (%s; the broker may still hold them: a longer --drain tells)\n",
		    loss_pct, o->max_loss_pct, (unsigned long long)b.n.not_received,
		    bench_fmt_ns(o->drain_ns, drain, sizeof drain));
		rc = 3;
	} else if (loss_pct > o->max_loss_pct)
		fprintf(
		    stderr, "mqbench: loss %.2f%% is above --max-loss %.2f%%\n", loss_pct, o->max_loss_pct);
	else if (!interrupted)
		rc = 0;
out:
	bench_free(&b);
	mosquitto_lib_cleanup();
	return rc;
}
