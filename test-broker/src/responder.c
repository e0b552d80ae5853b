/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * responder.c - the device simulator: one epoll thread over libmosquitto's non-blocking loop.
 *
 * Immediate replies are published from the message callback. Delayed ones wait in a fixed-size
 * min-heap of preallocated slots (inline buffers for small messages), driven by a timerfd, so the
 * program allocates nothing per message itself; libmosquitto allocates its packets and the
 * property copies its readers return.
 *
 * A lost broker connection is made again as a device does (backoff with jitter, the filter
 * subscribed again in on_connect), unless --exit-on-disconnect: the first connection must work,
 * so that a wrong URL or password is said at once instead of retried for ever.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "mqc_client.h"
#include "mqc_clock.h"
#include "mqc_heap.h"
#include "mqc_net.h"
#include "mqc_template.h"
#include "responder_core.h"

enum { SLOT_INLINE = 480, TOPIC_MAX = 1024, EV_SOCKET = 1, EV_TIMER, EV_SIGNAL };

#define BACKOFF_MIN_NS (100 * MQC_NS_PER_MS)
#define BACKOFF_MAX_NS (5 * MQC_NS_PER_S)

struct slot {
	int copies;
	bool stray, has_corr;
	uint16_t topic_len, corr_len;
	uint32_t payload_len;
	char *data; /* inline or heap: topic NUL, correlation, payload */
	char inline_data[SLOT_INLINE];
};

struct stats {
	unsigned long requests, replies, dropped, duplicated, late, stray, retained_ignored,
	    loops_refused, overflow, pending_discarded, publish_errors, large, reconnects;
};

struct responder {
	struct rsp_options o;
	struct rsp_rng rng;
	struct mosquitto *m;
	struct slot *slots;
	struct mqc_heap heap; /* slots waiting, keyed by when their replies are due */
	size_t *free_list, free_len;
	struct stats st;
	bool connected, stopping;
	bool was_connected; /* once: later losses are reconnected */
	uint64_t retry_at;  /* when to connect again (0: not waiting to) */
	uint64_t backoff_ns;
	int exit_code;
};

/* --- replies ------------------------------------------------------------------------------ */

static void publish_one(struct responder *r, const char *topic, const void *corr, int corr_len,
    bool has_corr, const void *payload, int payload_len)
{
	mosquitto_property *props = NULL;
	if (has_corr
	    && mosquitto_property_add_binary(
	           &props, MQTT_PROP_CORRELATION_DATA, corr, (uint16_t)corr_len)
	        != MOSQ_ERR_SUCCESS) {
		r->st.publish_errors++;
		return;
	}
	int rc = mosquitto_publish_v5(
	    r->m, NULL, topic, payload_len, payload, r->o.net.qos, r->o.retain, props);
	mosquitto_property_free_all(&props);
	if (rc == MOSQ_ERR_SUCCESS)
		r->st.replies++;
	else
		r->st.publish_errors++;
}

static void send_replies(struct responder *r, const char *topic, const unsigned char *corr,
    int corr_len, bool has_corr, const void *payload, int payload_len, int copies, bool stray)
{
	for (int i = 0; i < copies; i++)
		publish_one(r, topic, corr, corr_len, has_corr, payload, payload_len);
	if (stray) {
		/* Same topic, correlation data that belongs to no request. */
		unsigned char wrong[64] = "stray";
		int wrong_len = 5;
		if (has_corr && corr_len > 0) {
			wrong_len = corr_len < (int)sizeof wrong ? corr_len : (int)sizeof wrong;
			memcpy(wrong, corr, (size_t)wrong_len);
			wrong[0] ^= 0xff;
		}
		publish_one(r, topic, wrong, wrong_len, true, payload, payload_len);
		r->st.stray++;
	}
}

static void hold_reply(struct responder *r, uint64_t due, const char *topic, const void *corr,
    int corr_len, bool has_corr, const void *payload, int payload_len, const struct rsp_plan *plan)
{
	if (r->free_len == 0) {
		r->st.overflow++;
		return;
	}
	size_t topic_len = strlen(topic);
	size_t need = topic_len + 1 + (size_t)corr_len + (size_t)payload_len;
	size_t idx = r->free_list[--r->free_len];
	struct slot *s = &r->slots[idx];
	s->data = s->inline_data;
	if (need > SLOT_INLINE) {
		s->data = malloc(need);
		r->st.large++;
		if (!s->data) {
			r->free_list[r->free_len++] = idx;
			r->st.overflow++;
			return;
		}
	}
	memcpy(s->data, topic, topic_len + 1);
	if (corr && corr_len > 0) /* legacy requests have no correlation data: corr is NULL */
		memcpy(s->data + topic_len + 1, corr, (size_t)corr_len);
	if (payload && payload_len > 0)
		memcpy(s->data + topic_len + 1 + corr_len, payload, (size_t)payload_len);
	s->copies = plan->copies;
	s->stray = plan->stray;
	s->has_corr = has_corr;
	s->topic_len = (uint16_t)topic_len;
	s->corr_len = (uint16_t)corr_len;
	s->payload_len = (uint32_t)payload_len;
	mqc_heap_push(&r->heap, due, s); /* room for max_pending was reserved: cannot fail */
}

static void release_slot(struct responder *r, size_t idx)
{
	struct slot *s = &r->slots[idx];
	if (s->data != s->inline_data)
		free(s->data);
	s->data = NULL;
	r->free_list[r->free_len++] = idx;
}

static void fire_due(struct responder *r, uint64_t now)
{
	while (r->heap.len && r->heap.v[0].key <= now) {
		struct slot *s = mqc_heap_pop(&r->heap);
		size_t idx = (size_t)(s - r->slots);
		const char *corr = s->data + s->topic_len + 1;
		send_replies(r, s->data, (const unsigned char *)corr, s->corr_len, s->has_corr,
		    corr + s->corr_len, (int)s->payload_len, s->copies, s->stray);
		release_slot(r, idx);
	}
}

/* --- reconnecting ------------------------------------------------------------------------- */

/* The next attempt: the backoff doubles from 100 ms to 5 s, and each wait is drawn from its upper
 * half, so devices that lost the same broker do not come back in one wave. */
static void schedule_retry(struct responder *r)
{
	r->backoff_ns = r->backoff_ns ? r->backoff_ns * 2 : BACKOFF_MIN_NS;
	if (r->backoff_ns > BACKOFF_MAX_NS)
		r->backoff_ns = BACKOFF_MAX_NS;
	double half = (double)r->backoff_ns / 2;
	r->retry_at = mqc_now_ns() + (uint64_t)(half + half * rsp_rng_unit(&r->rng));
}

/* Due: start a new connection (CONNECT queued; on_connect subscribes again). A failure that is
 * known at once (refused on loopback, no route) waits for the next attempt. */
static void reconnect(struct responder *r)
{
	r->retry_at = 0;
	int rc = mosquitto_reconnect_async(r->m);
	if (rc != MOSQ_ERR_SUCCESS)
		schedule_retry(r);
}

/* --- libmosquitto callbacks (run inside loop_read on this thread) ------------------------- */

static void on_connect(
    struct mosquitto *m, void *obj, int rc, int flags, const mosquitto_property *props)
{
	(void)flags;
	(void)props;
	struct responder *r = obj;
	if (rc != 0) {
		/* In words, a 3.1.1 return code as 3.1.1's; "does not accept MQTT 5" confirmed. */
		char why[768];
		mqc_client_explain_connect_failure(
		    &r->o.net.conn, r->o.net.conn.protocol, rc, "--protocol 3.1.1", NULL, why, sizeof why);
		fprintf(stderr, "responder: %s\n", why);
		if (r->was_connected && !r->o.exit_on_disconnect)
			return; /* a broker coming back may refuse for a moment: on_disconnect retries */
		r->exit_code = 1;
		r->stopping = true;
		return;
	}
	if (r->was_connected) {
		r->st.reconnects++;
		fprintf(stderr, "responder: connected again (reconnect %lu)\n", r->st.reconnects);
	}
	r->connected = r->was_connected = true;
	r->backoff_ns = 0;
	int options = r->o.net.conn.protocol == 5 ? MQTT_SUB_OPT_NO_LOCAL : 0;
	if (mosquitto_subscribe_v5(m, NULL, r->o.filter, r->o.net.qos, options, NULL)
	    != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "responder: cannot subscribe to '%s'\n", r->o.filter);
		r->exit_code = 1;
		r->stopping = true;
	}
}

static void on_subscribe(struct mosquitto *m, void *obj, int mid, int count, const int *granted,
    const mosquitto_property *props)
{
	(void)m;
	(void)mid;
	(void)props;
	struct responder *r = obj;
	if (count < 1 || granted[0] > 2) {
		fprintf(stderr, "responder: the broker refused the subscription to '%s' (reason %d)\n",
		    r->o.filter, count ? granted[0] : -1);
		r->exit_code = 1;
		r->stopping = true;
		return;
	}
	printf("RESPONDER_READY filter=%s\n", r->o.filter);
	fflush(stdout);
}

static void on_disconnect(struct mosquitto *m, void *obj, int rc, const mosquitto_property *props)
{
	(void)m;
	(void)props;
	struct responder *r = obj;
	if (!r->stopping && !r->was_connected && rc == MOSQ_ERR_CONN_LOST) {
		/* Closed in answer to CONNECT, without a CONNACK: a broker that does not speak the
		 * protocol asked for, or one at its connection limit. Which, is checked. */
		char why[768];
		mqc_client_explain_connect_failure(
		    &r->o.net.conn, r->o.net.conn.protocol, -1, "--protocol 3.1.1", NULL, why, sizeof why);
		fprintf(stderr, "responder: %s\n", why);
		r->exit_code = 1;
		r->stopping = true;
	}
	bool was = r->connected;
	r->connected = false;
	if (r->stopping)
		return;
	if (!r->was_connected || r->o.exit_on_disconnect) {
		fprintf(stderr, "responder: lost the broker connection: %s\n", mosquitto_strerror(rc));
		r->exit_code = 1;
		r->stopping = true;
		return;
	}
	if (was)
		fprintf(stderr, "responder: lost the broker connection: %s; connecting again\n",
		    mosquitto_strerror(rc));
	schedule_retry(r);
}

static void on_message(struct mosquitto *m, void *obj, const struct mosquitto_message *msg,
    const mosquitto_property *props)
{
	(void)m;
	struct responder *r = obj;
	if (msg->retain) {
		r->st.retained_ignored++; /* a device never acts on a stale retained command */
		return;
	}
	r->st.requests++;

	char *response_topic = NULL;
	void *corr = NULL;
	uint16_t corr_len = 0;
	char legacy[TOPIC_MAX];
	const char *topic;
	if (r->o.net.conn.protocol == 5
	    && mosquitto_property_read_string(props, MQTT_PROP_RESPONSE_TOPIC, &response_topic, false)
	    && response_topic) {
		mosquitto_property_read_binary(props, MQTT_PROP_CORRELATION_DATA, &corr, &corr_len, false);
		topic = response_topic;
	} else if (r->o.reply_topic) {
		topic = r->o.reply_topic;
	} else if (mqc_template_expand(r->o.reply_template, msg->topic, legacy, sizeof legacy) >= 0) {
		topic = legacy;
	} else {
		r->st.loops_refused++;
		return;
	}
	bool matches;
	if (!response_topic && r->o.net.conn.protocol != 5
	    && mosquitto_topic_matches_sub(r->o.filter, topic, &matches) == MOSQ_ERR_SUCCESS
	    && matches) {
		r->st.loops_refused++; /* 3.1.1 has no no-local: our reply would come back as a request */
		return;
	}

	struct rsp_plan plan = rsp_plan_next(&r->o, &r->rng);
	const void *payload = r->o.reply_payload ? r->o.reply_payload : msg->payload;
	int payload_len = r->o.reply_payload ? (int)strlen(r->o.reply_payload) : msg->payloadlen;
	if (plan.drop) {
		r->st.dropped++;
	} else {
		r->st.duplicated += plan.copies > 1;
		r->st.late += plan.late;
		if (plan.delay_ns == 0)
			send_replies(r, topic, corr, corr_len, corr != NULL, payload, payload_len, plan.copies,
			    plan.stray);
		else
			hold_reply(r, mqc_now_ns() + plan.delay_ns, topic, corr, corr_len, corr != NULL,
			    payload, payload_len, &plan);
	}
	free(response_topic);
	free(corr);
}

/* --- event loop --------------------------------------------------------------------------- */

static bool connecting(const void *arg)
{
	const struct responder *r = arg;
	return !r->connected && !r->stopping;
}

static bool connack_in(const void *arg)
{
	return !connecting(arg);
}

/* Connected and subscribing (on_connect subscribes) within 30 s, or a message saying why not. */
static int setup_client(struct responder *r)
{
	char err[256];
	r->m = mqc_client_new(&r->o.net.conn, r, NULL, err, sizeof err);
	if (!r->m) {
		fprintf(stderr, "responder: %s\n", err);
		return -1;
	}
	mosquitto_connect_v5_callback_set(r->m, on_connect);
	mosquitto_subscribe_v5_callback_set(r->m, on_subscribe);
	mosquitto_disconnect_v5_callback_set(r->m, on_disconnect);
	mosquitto_message_v5_callback_set(r->m, on_message);
	if (mqc_client_connect(r->m, &r->o.net.conn, err, sizeof err) != 0) {
		fprintf(stderr, "responder: cannot connect: %s\n", err);
		return -1;
	}
	int rc = mqc_client_wait(r->m, connack_in, connecting, r, mqc_now_ns() + 30 * MQC_NS_PER_S);
	if (!r->connected) {
		if (!r->stopping) /* on_connect said why when the broker refused */
			fprintf(stderr, "responder: cannot connect to %s: %s\n", r->o.net.broker,
			    rc == MOSQ_ERR_TIMEOUT ? "no CONNACK within 30 s" : mqc_client_strerror(rc));
		return -1;
	}
	return 0;
}

static void arm_timer(int tfd, uint64_t at_ns)
{
	struct itimerspec its = { .it_value = mqc_ns_to_ts(at_ns) };
	timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static int run(struct responder *r, int sfd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	int sock = mosquitto_socket(r->m); /* TCP_USER_TIMEOUT set by mqc_client_connect */
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = EV_SOCKET };
	struct epoll_event tev = { .events = EPOLLIN, .data.u32 = EV_TIMER };
	struct epoll_event sev = { .events = EPOLLIN, .data.u32 = EV_SIGNAL };
	if (ep < 0 || tfd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sock, &ev) != 0
	    || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev) != 0
	    || epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &sev) != 0) {
		perror("responder: epoll");
		return 1;
	}

	bool want_out = false;
	uint64_t next_misc = mqc_now_ns() + MQC_NS_PER_S;
	while (!r->stopping) {
		if (sock >= 0 && mosquitto_socket(r->m) != sock) {
			sock = -1; /* closed by libmosquitto, and so out of the epoll set */
			if (!r->retry_at && !r->stopping)
				schedule_retry(r); /* in case no on_disconnect said so */
		}
		if (sock < 0 && mosquitto_socket(r->m) >= 0) { /* a new connection */
			sock = mosquitto_socket(r->m);
			/* Reconnected: the socket is new, so is its TCP_USER_TIMEOUT (2 keepalives). */
			mqc_tcp_user_timeout(sock, 2000 * r->o.net.conn.keepalive_s);
			want_out = true;
			ev = (struct epoll_event) { .events = EPOLLIN | EPOLLOUT, .data.u32 = EV_SOCKET };
			if (epoll_ctl(ep, EPOLL_CTL_ADD, sock, &ev) != 0) {
				perror("responder: epoll_ctl");
				r->exit_code = 1;
				break;
			}
		}
		bool need_out = sock >= 0 && mqc_client_want_write(r->m, !r->connected);
		if (sock >= 0 && need_out != want_out) {
			ev = (struct epoll_event) { .events = EPOLLIN | (need_out ? EPOLLOUT : 0u),
				.data.u32 = EV_SOCKET };
			if (epoll_ctl(ep, EPOLL_CTL_MOD, sock, &ev) != 0) {
				perror("responder: epoll_ctl");
				r->exit_code = 1;
				break;
			}
			want_out = need_out;
		}
		uint64_t wake = next_misc;
		if (r->heap.len && r->heap.v[0].key < wake)
			wake = r->heap.v[0].key;
		if (r->retry_at && r->retry_at < wake)
			wake = r->retry_at;
		arm_timer(tfd, wake);

		struct epoll_event events[4];
		int n = epoll_wait(ep, events, 4, -1);
		if (n < 0 && errno != EINTR) {
			perror("responder: epoll_wait");
			r->exit_code = 1;
			break;
		}
		for (int i = 0; i < n && !r->stopping; i++) {
			switch (events[i].data.u32) {
				case EV_SOCKET:
					if (sock >= 0 && mosquitto_socket(r->m) == sock)
						mqc_client_io(r->m,
						    (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0,
						    (events[i].events & EPOLLOUT) != 0, !r->connected);
					break;
				case EV_TIMER: {
					uint64_t expirations;
					ssize_t got = read(tfd, &expirations, sizeof expirations);
					(void)got;
					uint64_t now = mqc_now_ns();
					fire_due(r, now);
					if (r->retry_at && now >= r->retry_at && mosquitto_socket(r->m) < 0)
						reconnect(r);
					if (now >= next_misc) {
						mqc_client_misc(r->m);
						next_misc = now + MQC_NS_PER_S;
					}
					break;
				}
				case EV_SIGNAL: {
					struct signalfd_siginfo si;
					ssize_t got = read(sfd, &si, sizeof si);
					(void)got;
					r->stopping = true;
					break;
				}
			}
		}
		if (!r->stopping && r->connected && mosquitto_want_write(r->m))
			mosquitto_loop_write(r->m, 1); /* replies queued by callbacks go out now */
	}
	close(tfd);
	close(ep);
	return r->exit_code;
}

int main(int argc, char **argv)
{
	/* A peer that goes away while we write is an error to handle, never the end of the process.
	 * libmosquitto 2.0 ignored SIGPIPE for the whole process; 2.0.15 and later do not, and
	 * OpenSSL writes TLS records with write(2) (mqbench died of it over TLS with 2.1's). */
	signal(SIGPIPE, SIG_IGN);
	struct responder r = { 0 };
	char err[512];
	int parsed = rsp_parse_args(argc, argv, &r.o, err, sizeof err);
	if (parsed == 1)
		return 0;
	if (parsed < 0) {
		fprintf(stderr, "responder: %s\n", err);
		return 2;
	}
	r.rng.state = r.o.seed;
	r.slots = calloc(r.o.max_pending, sizeof *r.slots);
	r.free_list = calloc(r.o.max_pending, sizeof *r.free_list);
	if (!r.slots || mqc_heap_reserve(&r.heap, r.o.max_pending) != 0 || !r.free_list) {
		fprintf(stderr, "responder: cannot allocate %zu reply slots\n", r.o.max_pending);
		free(r.slots);
		free(r.free_list);
		mqc_heap_free(&r.heap);
		return 1;
	}
	for (size_t i = 0; i < r.o.max_pending; i++)
		r.free_list[r.free_len++] = r.o.max_pending - 1 - i;

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	mosquitto_lib_init();
	int rc = setup_client(&r) == 0 ? run(&r, sfd) : 1;
	r.st.pending_discarded = r.heap.len;
	while (r.heap.len)
		release_slot(&r, (size_t)((struct slot *)mqc_heap_pop(&r.heap) - r.slots));
	printf("responder: requests=%lu replies=%lu dropped=%lu duplicated=%lu late=%lu stray=%lu "
	       "retained_ignored=%lu loops_refused=%lu overflow=%lu pending_discarded=%lu "
	       "publish_errors=%lu reconnects=%lu\n",
	    r.st.requests, r.st.replies, r.st.dropped, r.st.duplicated, r.st.late, r.st.stray,
	    r.st.retained_ignored, r.st.loops_refused, r.st.overflow, r.st.pending_discarded,
	    r.st.publish_errors, r.st.reconnects);
	fflush(stdout);
	mqc_client_close(r.m, 1000); /* DISCONNECT when still connected */
	mosquitto_lib_cleanup();
	free(r.slots);
	mqc_heap_free(&r.heap);
	free(r.free_list);
	close(sfd);
	return rc;
}
