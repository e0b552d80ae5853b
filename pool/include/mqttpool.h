/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqttpool.h - warm MQTT connections for request/response servers.
 *
 * A pool keeps a few MQTT v5 connections open to one broker and multiplexes requests over them:
 * mqp_pool_request() publishes a command with a Response Topic (the connection's own inbox) and
 * Correlation Data (unique per request), and returns the reply that carries exactly that
 * correlation. Replies for other requests, late replies after a timeout, duplicates and strays
 * are dropped and counted; a reply never reaches the wrong caller.
 *
 * Threads: every function is thread-safe unless marked. One I/O thread per pool owns every
 * connection (epoll over non-blocking sockets; the pool speaks MQTT with its own codec, and TLS
 * through OpenSSL); callers hand it work and wait with a deadline. No wait is without one.
 *
 * Errors: functions return MQP_OK (0) or a positive mqp_err; mqp_strerror() names them.
 *
 * Durations: every timeout and interval is in milliseconds, and 0 (MQP_DEFAULT) always means
 * "the default": a call's timeout 0 is the pool's request_timeout_ms, an option 0 is the value
 * its comment gives. MQP_NO_WAIT (calls that can return what is ready now) and MQP_NEVER
 * (limits that can be switched off) are the only other special values.
 *
 * Binary compatibility: structs that may grow carry their size. mqp_pool_options starts with
 * struct_size (MQP_POOL_OPTIONS_INIT or mqp_pool_options_init() set it); mqp_pool_stats and
 * mqp_pool_latency take the size of the caller's struct. A program built against an older
 * header keeps working with a newer library; fields the library does not know are refused.
 * Processes: the pool never changes signal dispositions (it sends with MSG_NOSIGNAL) and does not
 * use libmosquitto.
 */
#ifndef MQTTPOOL_H
#define MQTTPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "mqttpool_version.h" /* MQP_VERSION_MAJOR, _MINOR, _PATCH, _STRING, _NUMBER */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MQP_API __attribute__((visibility("default")))
#else
#define MQP_API
#endif

/** Error codes: never renumbered. */
typedef enum mqp_err {
	MQP_OK = 0,
	MQP_EINVAL = 1, /* bad argument or option (the message says which) */
	MQP_ENOMEM = 2,
	MQP_ETIMEDOUT = 3,     /* the deadline passed: a request sent but not answered, an acquire
	                          with no connection free, a subscribe or receive with no answer */
	MQP_ECLOSED = 4,       /* the pool is being destroyed */
	MQP_ECONNECT = 5,      /* cannot connect to the broker: see mqp_pool_last_error() */
	MQP_ECONNLOST = 6,     /* the connection carrying the request dropped before the reply */
	MQP_EDENIED = 7,       /* the broker refused the publish (v5 reason code >= 0x80) */
	MQP_ETLS = 8,          /* TLS setup failed (CA, certificate or key file) */
	MQP_ETOOBIG = 9,       /* payload or topic too large */
	MQP_EDEADLK = 10,      /* a blocking call from the pool's own thread */
	MQP_ERELEASED = 11,    /* the lease was released (double release, use after release) */
	MQP_EBUSY = 12,        /* another receive is already waiting on this lease */
	MQP_ECANCELED = 13,    /* an async call cancelled by mqp_pool_cancel */
	MQP_EEXHAUSTED = 14,   /* no connection could take the request or publish before its deadline:
	                          it was never sent, so it is safe to retry */
	MQP_EREFUSED = 15,     /* the broker refused the connection (its CONNACK: credentials, not
	                          authorized, banned, or a protocol version it does not speak): not
	                          transient; mqp_pool_last_error() says why and what to change */
	MQP_ENORESPONDER = 16, /* v5, QoS 1/2: the broker acknowledged the request's command with
	                          "no matching subscribers" (0x10), so no reply can come; said at
	                          once instead of at the deadline. At QoS 0 nothing says so and
	                          the request waits for its timeout */
} mqp_err;

/* Special durations (see the top of this file). */
#define MQP_DEFAULT 0u          /* the default: for a call's timeout, request_timeout_ms */
#define MQP_NO_WAIT 0xfffffffeu /* acquire, lease receive, drain: only what is ready now */
#define MQP_NEVER   0xffffffffu /* idle_timeout_ms, max_lifetime_ms, leak_threshold_ms: off */

#define MQP_LOG_WARNING 1
#define MQP_LOG_ERROR   2

/** A static string naming err; "unknown error" for codes it does not know. Never NULL. */
MQP_API const char *mqp_strerror(int err);

/**
 * The version of the library linked at run time, "MAJOR.MINOR.PATCH"; MQP_VERSION_STRING is the
 * version of the headers compiled against. Never NULL.
 */
MQP_API const char *mqp_version(void);

typedef struct mqp_pool mqp_pool;

/**
 * Options: start from MQP_POOL_OPTIONS_INIT (or mqp_pool_options_init()), which holds every
 * default, and change what you need; NULL options mean every default. Strings are copied.
 * Counts are what they say (min_size 0: keep none warm); durations follow MQP_DEFAULT.
 */
struct mqp_pool_options {
	size_t struct_size;           /* sizeof(struct mqp_pool_options), set by the initialisers;
	                                 0 or a size this library does not know: MQP_EINVAL */
	unsigned max_size;            /* connections at most, 1 to 1000 (10) */
	unsigned min_size;            /* kept warm, 0 to max_size (2) */
	unsigned connect_timeout_ms;  /* TCP + TLS + CONNACK; 0: 5000 */
	unsigned request_timeout_ms;  /* every call's MQP_DEFAULT timeout; 0: 10000 */
	unsigned max_inflight;        /* requests per connection before another opens, >= 1 (64) */
	unsigned keepalive_s;         /* 0: 30 (minimum 5) */
	int protocol;                 /* 5 (when 0) or 4 for an MQTT 3.1.1 broker: then
	                                 mqp_pool_request needs v5 (MQP_EINVAL; use
	                                 mqp_pool_request_legacy, which keeps connections warm on
	                                 3.1.1 too), and a lease that subscribed is discarded at
	                                 release (3.1.1 has no subscription identifiers to tell a
	                                 previous borrower's messages apart). A broker that speaks
	                                 only 3.1.1 is recognised when 5 is asked for: the
	                                 connect error (mqp_pool_last_error) says so, confirmed */
	const char *client_id_prefix; /* 0: "mqp" (at most 8 characters); client ids are
	                                 PREFIX-<64 random bits> (11 characters) */
	const char *inbox_prefix;     /* 0: "mqp/inbox": replies come to PREFIX/<client id> */
	const char *username, *password;
	const char *cafile;             /* mqtts://: the CA (0: the system's trust store); the
	                                   certificate and host name are verified, always */
	const char *certfile, *keyfile; /* client certificate */
	unsigned idle_timeout_ms;       /* idle connections above min_size close after this; 0: 30000;
	                                   MQP_NEVER: they stay */
	unsigned max_lifetime_ms;       /* connections retire after this, minus up to 2.5 % jitter,
	                                   never while borrowed or carrying requests; 0: 1800000;
	                                   MQP_NEVER: they do not retire */
	unsigned eviction_interval_ms;  /* how often idle and old connections are checked; 0: 10000 */
	unsigned leak_threshold_ms;     /* a lease held longer is reported once, naming where it was
	                                   acquired; 0 and MQP_NEVER: off */
	/* Messages for the application (connect failures, leaks): called on the pool's I/O thread
	 * with no pool lock held; it must not block or call the pool. level: MQP_LOG_*. */
	void (*log_cb)(void *userdata, int level, const char *message);
	void *userdata;
	/* NULL: the pool runs its own I/O thread. Otherwise it runs on the application's event
	 * loop (see "on the application's event loop" below; mqttpool_uv.h and mqttpool_event.h
	 * are ready adapters): no thread of its own, and the thread that calls mqp_pool_new is the
	 * loop's thread. The struct must outlive the pool. */
	const struct mqp_loop *loop;
	/* With loop: the loop watches each of the pool's descriptors itself (its sockets, and one
	 * eventfd for calls from other threads) instead of the one epoll descriptor mqp_pool_fd()
	 * - no epoll inside the loop's, one system call less per turn. The pool calls it, on the
	 * loop's thread, to watch fd for events (MQP_IO_READ, MQP_IO_WRITE), again when they
	 * change, and with events 0 before it closes fd; the loop calls mqp_pool_io(pool, tag,
	 * ready) when fd is ready. data is loop->data. NULL: mqp_pool_fd() as before. Both
	 * adapters set it. */
	void (*loop_watch)(void *data, int fd, unsigned events, void *tag);
	/* (0.5) With several brokers in the URL: MQP_LB_RANDOM (0, the default) spreads the
	 * connections over the nodes that are up, the fewest first, ties at random; MQP_LB_IN_ORDER
	 * puts every connection on the first node that is up, the others standing by. */
	int load_balance;
	/* (0.5) The brokers as a list, for programs that build it: a NULL-terminated array of
	 * URLs (mqtt://host:port each, every one with the same scheme), given instead of
	 * mqp_pool_new's broker_url (which is then NULL; both: MQP_EINVAL). */
	const char *const *brokers;
	/* (0.5) ws:// and wss:// (MQTT over WebSockets): one more header line sent with the
	 * upgrade request, "Name: value" without CR or LF (a proxy's "Authorization: Bearer ...");
	 * NULL: none. */
	const char *ws_header;
	/* (0.5) With protocol 5, when the broker turns out to speak only MQTT 3.1.1: what the
	 * diagnosis (mqp_pool_last_error, the log) tells the user to do, in the program's own
	 * words - a tool with a flag for it names the flag ("use --protocol 3.1.1"). NULL: "set
	 * options.protocol = 4 (MQTT 3.1.1) and send requests with mqp_pool_request_legacy". */
	const char *v311_advice;
	/* (0.5) Liveness, from what a connection receives (see "A node that goes silent" in the
	 * README). A connection with calls outstanding that has received nothing for silence_ms
	 * sends a PINGREQ; an idle one does after half the keepalive. When nothing at all arrives
	 * within ping_timeout_ms of that PINGREQ the connection is unresponsive - a broker that
	 * hangs, a link that went dark - and its calls fail at once with MQP_ECONNLOST, naming
	 * the node, what was outstanding and for how long; the node is suspect: its other
	 * connections are pinged and carry nothing new until they answer, and it takes new
	 * connections again after a fresh CONNACK and PINGRESP. 0: 500 and 1000, a silent node
	 * noticed within about 1.6 s under load (the check runs every 100 ms). A slow device does
	 * not trip it (the broker answers the PINGREQ while the device thinks); a broker that
	 * stops for longer than both (a pause, a full disk) does, and its requests go to the
	 * other nodes. silence_ms MQP_NEVER: the idle pings only. Every socket also gets
	 * TCP_USER_TIMEOUT 2 x (silence_ms + ping_timeout_ms), at least 3000 ms, so a write
	 * nobody acknowledges fails even when nothing is being read. */
	unsigned silence_ms;
	unsigned ping_timeout_ms;
};

#define MQP_LB_RANDOM   0
#define MQP_LB_IN_ORDER 1

/** Every default, as a struct initialiser: struct mqp_pool_options o = MQP_POOL_OPTIONS_INIT; */
#define MQP_POOL_OPTIONS_INIT                                                          \
	{                                                                                  \
		.struct_size = sizeof(struct mqp_pool_options), .max_size = 10, .min_size = 2, \
		.max_inflight = 64                                                             \
	}

/**
 * How a pool on an application's event loop asks to be run (mqp_pool_options.loop). The loop
 * watches the pool's descriptors (options.loop_watch: each of them; otherwise the one
 * mqp_pool_fd()), keeps one timer, and calls mqp_pool_io() / mqp_pool_process() when they
 * fire. Both hooks run on the loop's thread.
 */
struct mqp_loop {
	/* The pool needs mqp_pool_process() in timeout_ms (-1: only when a descriptor is ready).
	 * 0: at the end of this turn of the loop, after the callbacks of the I/O that is ready now
	 * (libuv: a check handle; libevent: an active event) - calls made on the loop's thread
	 * queue their packets and ask for this, so all of a turn's calls share one send per
	 * connection. Replaces the previous request. */
	void (*schedule)(void *data, long timeout_ms);
	/* The pool is going away: stop watching mqp_pool_fd() (it is closed after this returns)
	 * and stop the timer. May be NULL. */
	void (*cleanup)(void *data);
	void *data;
};

/** Every default (the library's own, which may be newer than this header's). Accepts NULL. */
MQP_API void mqp_pool_options_init(struct mqp_pool_options *options);

/**
 * Create a pool for broker_url (mqtt://host:port or mqtts://host:port; ws://host:port/path or
 * wss://... for MQTT over WebSockets; or several brokers as mqtt://a:1883,b:1883: see
 * load_balance and mqp_pool_node_stats) and start its I/O thread,
 * which opens min_size connections in the background. An mqtt:// or mqtts:// URL may end with
 * the liveness settings, ?silence_ms=N&ping_timeout_ms=N (silence_ms=never too), used where
 * options leaves them 0; on ws:// and wss:// a query belongs to the HTTP path.
 *
 * @return MQP_OK, MQP_EINVAL (bad URL or options), MQP_ETLS (CA, certificate or key file
 *         unusable), MQP_ENOMEM; on failure err_out (when not NULL, err_len bytes) says why.
 * Ownership: *out belongs to the caller until mqp_pool_destroy().
 */
MQP_API mqp_err mqp_pool_new(const char *broker_url, const struct mqp_pool_options *options,
    mqp_pool **out, char *err_out, size_t err_len);

/**
 * Close every connection and free the pool. Requests still waiting complete with MQP_ECLOSED
 * first. Accepts NULL.
 * From one of the pool's own callbacks the destruction is deferred: this returns at once, the
 * pool completes what is left with MQP_ECLOSED, and it frees itself when that callback has
 * returned (the callback may still use the pool until it returns).
 * Threads: no other call on this pool may start afterwards.
 */
MQP_API void mqp_pool_destroy(mqp_pool *pool);

/** A reply: payload bytes (NUL-terminated for convenience) and the topic it arrived on. */
struct mqp_reply {
	void *payload;
	size_t len;
	char *topic;
};

/** Free what a reply holds (not the struct). Accepts NULL. */
MQP_API void mqp_reply_free(struct mqp_reply *reply);

/**
 * Send a command and wait for its reply (MQTT v5 request/response). The command carries the
 * Response Topic PREFIX/<client id> (the connection's inbox, the same for all its requests), 16
 * bytes of Correlation Data unique to this request and unguessable, and a Message Expiry of
 * ceil(timeout) seconds, so a device does not act on it after the caller gave up. No SUBSCRIBE
 * round trip: each connection subscribed to its inbox once.
 *
 * @param timeout_ms 0: the pool's request_timeout_ms.
 * @param qos 0, 1 or 2 for the command.
 * @return MQP_OK with *reply filled (free with mqp_reply_free), MQP_ETIMEDOUT (sent, no reply in
 *         time), MQP_EEXHAUSTED (every connection stayed busy: never sent), MQP_ECONNECT
 *         (no connection could be made; mqp_pool_last_error says why), MQP_EREFUSED (the broker
 *         refused the connection: see mqp_pool_last_error), MQP_ECONNLOST,
 *         MQP_ENORESPONDER (the broker's PUBACK or PUBREC said nobody is subscribed to the
 *         command's topic: mosquitto says so at QoS 1; its QoS 2 PUBREC never does),
 *         MQP_EDENIED, MQP_ECLOSED, MQP_EINVAL, MQP_ETOOBIG, MQP_ENOMEM, MQP_EDEADLK.
 */
MQP_API mqp_err mqp_pool_request(mqp_pool *pool, const char *topic, const void *payload, size_t len,
    int qos, unsigned timeout_ms, struct mqp_reply *reply);

/**
 * Publish one message and wait until it is written (QoS 0) or acknowledged (QoS 1/2), at most
 * timeout_ms (0: request_timeout_ms).
 * @return MQP_OK, MQP_ETIMEDOUT, MQP_EEXHAUSTED, MQP_ECONNECT, MQP_ECONNLOST, MQP_EDENIED,
 *         MQP_ECLOSED, MQP_EINVAL, MQP_ENOMEM, MQP_EDEADLK.
 */
MQP_API mqp_err mqp_pool_publish(mqp_pool *pool, const char *topic, const void *payload, size_t len,
    int qos, int retain, unsigned timeout_ms);

/* --- leases: a connection for one caller's own subscriptions ------------------------------ */

/**
 * A lease handle, filled by mqp_pool_acquire(). It is a value (pool, slot, generation): a handle
 * kept after release is detected (MQP_ERELEASED), never a crash.
 */
typedef struct mqp_lease {
	mqp_pool *pool;
	unsigned slot;
	uint32_t generation;
} mqp_lease;

/** A received message; free with mqp_message_free. */
struct mqp_message {
	char *topic;
	void *payload; /* NUL-terminated for convenience */
	size_t len;
	int qos;
	int retain;
};

MQP_API void mqp_message_free(struct mqp_message *m);

/** mqp_lease_subscribe and mqp_pool_receive option: also deliver retained messages (dropped by
 *  default). MQTT v5: for this subscription only (Retain Handling on the SUBSCRIBE); 3.1.1 cannot
 *  say which subscription a message came for, so there it applies to the whole lease. */
#define MQP_SUB_RETAINED 0x1

/**
 * Borrow a connection for exclusive use: strict FIFO among waiting callers, the most recently
 * released idle connection first, a new one opened when none is idle and size < max_size.
 * @return MQP_OK, MQP_ETIMEDOUT, MQP_ECONNECT (with mqp_pool_last_error), MQP_ECLOSED,
 *         MQP_EINVAL, MQP_ENOMEM, MQP_EDEADLK.
 */
MQP_API mqp_err mqp_pool_acquire(mqp_pool *pool, unsigned timeout_ms, mqp_lease *lease);

/** mqp_pool_acquire, recording the caller's file and line for leak reports (the macro below). */
MQP_API mqp_err mqp_pool_acquire_at(
    mqp_pool *pool, unsigned timeout_ms, mqp_lease *lease, const char *file, int line);
#define mqp_pool_acquire(pool, timeout_ms, lease) \
	mqp_pool_acquire_at(pool, timeout_ms, lease, __FILE__, __LINE__)

/**
 * Subscribe on the lease and wait for SUBACK. Every subscription of a lease carries the lease's
 * own subscription identifier, so messages for an earlier borrower never reach this one.
 * @return MQP_OK, MQP_EDENIED (SUBACK reason >= 0x80), MQP_ETIMEDOUT, MQP_ERELEASED,
 *         MQP_ECONNLOST, MQP_EINVAL (also for the connection's own inbox filter, which the
 *         subscription would replace), MQP_ECLOSED, MQP_ENOMEM.
 */
MQP_API mqp_err mqp_lease_subscribe(
    mqp_lease *lease, const char *filter, int qos, int options, unsigned timeout_ms);

/** Publish on the lease's connection (see mqp_pool_publish); MQP_ERELEASED after release. */
MQP_API mqp_err mqp_lease_publish(mqp_lease *lease, const char *topic, const void *payload,
    size_t len, int qos, int retain, unsigned timeout_ms);

/**
 * The next message for this lease's subscriptions, waiting up to timeout_ms. One receive at a
 * time per lease (MQP_EBUSY otherwise).
 * @return MQP_OK (free *msg with mqp_message_free), MQP_ETIMEDOUT, MQP_ERELEASED, MQP_ECONNLOST,
 *         MQP_EBUSY, MQP_ECLOSED, MQP_ENOMEM.
 */
MQP_API mqp_err mqp_lease_receive(mqp_lease *lease, unsigned timeout_ms, struct mqp_message *msg);

/**
 * Give the connection back, clean: the lease's filters are unsubscribed, queued messages
 * dropped, and its subscription identifier retired, so messages still in flight for it (UNSUBACK
 * is not a barrier) are dropped and counted as stale. Never fails for a valid lease.
 * @return MQP_OK, MQP_ERELEASED (already released: counted as a double release).
 */
MQP_API mqp_err mqp_lease_release(mqp_lease *lease);

/**
 * Give the connection back to be closed (it misbehaved). @return MQP_OK or MQP_ERELEASED.
 * From the pool's own thread (an async callback) release and discard do not wait: they return
 * MQP_OK at once and a double release is only counted.
 */
MQP_API mqp_err mqp_lease_discard(mqp_lease *lease);

/**
 * One message on filter: acquire, subscribe, receive, release, within timeout_ms in all. With
 * MQP_SUB_RETAINED in options a retained message counts: "read the device's last state".
 * @return as mqp_pool_acquire, mqp_lease_subscribe and mqp_lease_receive.
 */
MQP_API mqp_err mqp_pool_receive(mqp_pool *pool, const char *filter, int qos, int options,
    unsigned timeout_ms, struct mqp_message *msg);

/* --- legacy devices: a fixed reply topic ------------------------------------------------- */

/**
 * Decides whether a message on the reply topic is the reply (for devices that put a request id in
 * the payload): return nonzero to accept. Runs on the pool's I/O thread (the loop's thread for a
 * pool on an event loop) with no pool lock held, only while the request waits (its caller is
 * still inside the call); it must not block or call the pool. candidate is valid during the call.
 */
typedef int (*mqp_match_cb)(void *userdata, const struct mqp_message *candidate);

/**
 * A request to a device that answers on a fixed reply topic instead of a v5 Response Topic (the
 * JavaScript mqtt-pool's model, and the only request/reply MQTT 3.1.1 has), made safe and warm:
 *   - reply_topic must be an exact topic (no wildcards) that does not match the command topic;
 *     retained messages are never replies;
 *   - at most one such request per reply topic is outstanding in the process (others wait their
 *     turn within their timeout), and the reply is the first message on it that match accepts
 *     (without match: the first message);
 *   - the connection that carries it stays subscribed to the reply topic (up to 256 topics a
 *     connection), so the next request on it costs no SUBSCRIBE round trip; the first one's
 *     command goes out only after its SUBACK;
 *   - a command sent and not answered keeps its reply topic quarantined for its timeout again
 *     (unless a match callback tells replies apart): a late reply within that window reaches
 *     nobody instead of the next caller. A device that can answer later than that needs a match
 *     callback.
 * What MQTT cannot prevent: another client subscribed to the same reply topic (another process,
 * another pool's broker user) sees these replies.
 * @return MQP_OK (free *reply), MQP_ETIMEDOUT (sent and not answered, or its reply topic stayed
 *         busy until the deadline), MQP_EINVAL (wildcards, the reply topic matches the command
 *         topic), MQP_EDENIED (the broker refused the reply topic's SUBSCRIBE or the command),
 *         and the errors of mqp_pool_request.
 */
MQP_API mqp_err mqp_pool_request_legacy(mqp_pool *pool, const char *topic, const void *payload,
    size_t len, int qos, const char *reply_topic, mqp_match_cb match, void *match_userdata,
    unsigned timeout_ms, struct mqp_reply *reply);

/* --- the async API: for event-loop servers ------------------------------------------------ */

/**
 * Identifies an accepted async call for mqp_pool_cancel(). Unique within a pool; never 0.
 */
typedef uint64_t mqp_ticket;

/**
 * Completion of mqp_pool_request_async: result is an mqp_err; reply is valid only during the
 * call (copy what you keep) and only when result is MQP_OK.
 * Threads: runs on the pool's I/O thread with no pool lock held. It must not block; a blocking
 * pool call from it returns MQP_EDEADLK (mqp_pool_cancel, the async calls and
 * mqp_lease_release/discard work from it).
 */
typedef void (*mqp_request_cb)(void *userdata, int result, const struct mqp_reply *reply);

/** Completion of mqp_pool_publish_async (same rules). */
typedef void (*mqp_done_cb)(void *userdata, int result);

/**
 * Completion of mqp_pool_acquire_async (same rules): when result is MQP_OK the callback owns
 * lease and must release or discard it (from any thread, this callback included).
 */
typedef void (*mqp_acquire_cb)(void *userdata, int result, mqp_lease lease);

/**
 * mqp_pool_request without waiting. If it returns MQP_OK the callback runs exactly once — with
 * the reply, MQP_ETIMEDOUT, MQP_EEXHAUSTED, MQP_ECONNECT, MQP_ECONNLOST, MQP_ENORESPONDER,
 * MQP_EDENIED, MQP_ENOMEM, MQP_ECANCELED, or MQP_ECLOSED when the pool is destroyed first
 * (mqp_pool_destroy returns after every callback has run). If it returns an error the callback
 * never runs.
 * @param ticket NULL, or where to store the call's ticket for mqp_pool_cancel (stored before the
 *        callback can run).
 * @return MQP_OK, MQP_EINVAL, MQP_ETOOBIG, MQP_ENOMEM, MQP_ECLOSED.
 */
MQP_API mqp_err mqp_pool_request_async(mqp_pool *pool, const char *topic, const void *payload,
    size_t len, int qos, unsigned timeout_ms, mqp_request_cb cb, void *userdata,
    mqp_ticket *ticket);

/**
 * mqp_pool_request_legacy without waiting; the same contract as mqp_pool_request_async (match,
 * when given, runs on the pool's thread before cb).
 */
MQP_API mqp_err mqp_pool_request_legacy_async(mqp_pool *pool, const char *topic,
    const void *payload, size_t len, int qos, const char *reply_topic, mqp_match_cb match,
    void *match_userdata, unsigned timeout_ms, mqp_request_cb cb, void *userdata,
    mqp_ticket *ticket);

/** mqp_pool_publish without waiting; the same contract as mqp_pool_request_async. */
MQP_API mqp_err mqp_pool_publish_async(mqp_pool *pool, const char *topic, const void *payload,
    size_t len, int qos, int retain, unsigned timeout_ms, mqp_done_cb cb, void *userdata,
    mqp_ticket *ticket);

/**
 * mqp_pool_acquire without waiting: the callback runs exactly once, with a lease (MQP_OK) or
 * MQP_ETIMEDOUT, MQP_ECONNECT, MQP_ECANCELED, MQP_ECLOSED, MQP_ENOMEM. Waiting async and blocking
 * acquirers share one FIFO. The macro records the caller's file and line for leak reports.
 * @return MQP_OK (the callback will run), MQP_EINVAL, MQP_ENOMEM, MQP_ECLOSED.
 */
MQP_API mqp_err mqp_pool_acquire_async_at(mqp_pool *pool, unsigned timeout_ms, mqp_acquire_cb cb,
    void *userdata, mqp_ticket *ticket, const char *file, int line);
#define mqp_pool_acquire_async(pool, timeout_ms, cb, userdata, ticket) \
	mqp_pool_acquire_async_at(pool, timeout_ms, cb, userdata, ticket, __FILE__, __LINE__)

/**
 * Cancel an async call that has not completed: its callback then runs with MQP_ECANCELED (soon,
 * on the pool's thread; still exactly once). A call that completed first is unaffected, so the
 * callback, not this return value, says what happened. A cancelled request that was already
 * published may still be answered: the reply is dropped and counted as late, and the device may
 * have acted on the command. A granted lease is never taken back: release it.
 * Threads: any, the pool's callbacks included; never blocks.
 * @return MQP_OK (the cancel is on its way, or the call is gone), MQP_EINVAL (ticket 0),
 *         MQP_ENOMEM, MQP_ECLOSED (the pool is closing: every call completes with MQP_ECLOSED).
 */
MQP_API mqp_err mqp_pool_cancel(mqp_pool *pool, mqp_ticket ticket);

/**
 * Stop taking new requests, publishes and acquires (they return MQP_ECLOSED) and wait until every
 * queued and in-flight call has completed and every lease is back (lease calls still work), at
 * most timeout_ms (MQP_DEFAULT: request_timeout_ms; MQP_NO_WAIT: do not wait, say whether it is
 * idle). Afterwards only mqp_pool_stats, mqp_pool_latency and mqp_pool_destroy make sense.
 * @return MQP_OK when idle, MQP_ETIMEDOUT otherwise, MQP_EDEADLK from the pool's thread.
 */
MQP_API mqp_err mqp_pool_drain(mqp_pool *pool, unsigned timeout_ms);

/* --- on the application's event loop ------------------------------------------------------- */

/*
 * A pool made with options.loop runs on the thread that made it, inside the application's event
 * loop (one loop per core: one pool per loop). On that thread the async calls, mqp_pool_cancel
 * and lease release/discard act at once - no hand-off to another thread, no wake-up - and their
 * callbacks never run inside the call that started them (a completion that is already known is
 * delivered from the next mqp_pool_process()). Blocking calls there return MQP_EDEADLK (the loop
 * would stop), except mqp_pool_drain(pool, MQP_NO_WAIT). Other threads may call anything, as
 * with a threaded pool: their calls are handed to the loop. mqp_pool_destroy belongs on the
 * loop's thread; from another it waits (at most 10 s) for the loop to close the pool.
 */

/** The descriptor the loop watches for reading; -1 for a pool with its own thread, or one whose
 *  loop watches its descriptors itself (options.loop_watch). */
MQP_API int mqp_pool_fd(mqp_pool *pool);

/** What a descriptor is watched for (options.loop_watch) and ready for (mqp_pool_io). */
#define MQP_IO_READ  1u
#define MQP_IO_WRITE 2u

/**
 * A descriptor the pool asked to watch (options.loop_watch) is ready: ready is MQP_IO_READ and/or
 * MQP_IO_WRITE (an error or hang-up counts as MQP_IO_READ), tag the one the pool gave. Reads,
 * handles every complete packet, runs the callbacks that completed, and sends what they queued.
 * Never blocks. On the loop's thread only; mqp_pool_process() still runs the deadlines.
 */
MQP_API void mqp_pool_io(mqp_pool *pool, void *tag, unsigned ready);

/**
 * Do everything that is ready: I/O, completions and their callbacks, deadlines, housekeeping;
 * then ask for the next run (mqp_loop.schedule). Never blocks. On the loop's thread only; a
 * pool with its own thread ignores it.
 */
MQP_API void mqp_pool_process(mqp_pool *pool);

/** A latency distribution (nanoseconds; percentiles as HdrHistogram reports them). */
struct mqp_latency {
	uint64_t count, p50_ns, p90_ns, p99_ns, p999_ns, max_ns;
};

/** Which latency mqp_pool_latency reports. */
typedef enum mqp_latency_kind {
	MQP_LATENCY_REQUEST = 0, /* call to reply, successful requests */
	MQP_LATENCY_ACQUIRE = 1, /* the wait of successful acquires */
	MQP_LATENCY_CONNECT = 2, /* connect start to ready (inbox subscribed) */
} mqp_latency_kind;

/**
 * Latency since creation, into *out (out_size: sizeof *out; the library fills what both it and
 * the caller know and zeroes the rest). With a NULL pool or an unknown kind *out is zero.
 */
MQP_API void mqp_pool_latency(
    mqp_pool *pool, mqp_latency_kind kind, struct mqp_latency *out, size_t out_size);

/** A snapshot of the pool's gauges and counters. */
struct mqp_pool_stats {
	/* gauges */
	unsigned size;      /* connections open or opening */
	unsigned ready;     /* connected and subscribed to their inbox */
	unsigned available; /* ready, idle (no request in flight) and not leased */
	unsigned connecting;
	unsigned inflight; /* requests and publishes on a connection, awaiting completion */
	unsigned queued;   /* requests, publishes and acquires waiting for a connection */
	unsigned leased;   /* connections borrowed by mqp_pool_acquire */
	/* counters */
	uint64_t requests, replies, late_replies, strays, duplicates;
	uint64_t timeouts; /* calls that ended at their deadline (MQP_ETIMEDOUT, MQP_EEXHAUSTED) */
	uint64_t publishes;
	uint64_t acquires, acquire_timeouts, releases, double_releases, stale_dropped;
	uint64_t waits;   /* acquires, requests and publishes that found no connection free and
	                     queued (counted when they leave the queue) */
	uint64_t cancels; /* async calls completed with MQP_ECANCELED */
	uint64_t closes_idle, closes_lifetime, leaks;
	uint64_t connects_ok, connects_failed, connections_lost;
	uint64_t protocol_errors; /* connections closed because the broker sent a malformed packet
	                             (mqp_pool_last_error says which) */
	/* (0.4) 1 while the broker refuses MQTT 5 - its CONNACK refused the protocol version - and
	 * accepted an MQTT 3.1.1 CONNECT: options.protocol = 4 reaches it (mqp_pool_last_error says
	 * it in words). Calls fail with MQP_EREFUSED meanwhile. */
	unsigned v311_only;
};

/**
 * Fill *out (out_size: sizeof *out; the library fills what both it and the caller know and zeroes
 * the rest); with a NULL pool, all zero (a NULL out is ignored).
 */
MQP_API void mqp_pool_stats(mqp_pool *pool, struct mqp_pool_stats *out, size_t out_size);

/** One broker node of the pool's URL, as mqp_pool_node_stats gives it. */
struct mqp_node_stats {
	char where[272];      /* host:port as listed (IPv6 bracketed) */
	unsigned connections; /* open or opening on it */
	unsigned ready;
	unsigned failing;  /* 1: its last connect failed, or it said to go elsewhere (0x8B, 0x9C,
	                      0x9D): no connection goes there until its backoff is over */
	uint64_t requests; /* sent on its connections */
	uint64_t connects_ok, connects_failed, connections_lost;
	uint64_t redirects;   /* DISCONNECT or CONNACK 0x8B, 0x9C, 0x9D from it */
	char last_error[512]; /* what last went wrong there ("" when nothing has) */
	unsigned inflight;    /* requests and publishes on its connections awaiting completion */
	/* (0.5) 1 while it is suspect: a connection there went unresponsive (options.silence_ms),
	 * since unresponsive_since_ms (CLOCK_REALTIME, ms since the epoch; 0 when it is not), until
	 * a new connection's CONNACK and PINGRESP; unresponsive: how many of its connections went so.
	 */
	unsigned suspect;
	uint64_t unresponsive_since_ms;
	uint64_t unresponsive;
};

/**
 * The nodes of the pool's URL (mqtt://a:1883,b:1883: two; one URL: one): how many there are is
 * the return value, and when index is one of them, *out says how that node fares (out_size:
 * sizeof *out, as mqp_pool_stats). mqp_pool_node_stats(pool, 0, NULL, 0) counts them. A NULL
 * pool has none.
 */
MQP_API unsigned mqp_pool_node_stats(
    mqp_pool *pool, unsigned index, struct mqp_node_stats *out, size_t out_size);

/**
 * The last connection error, as text ("connect to 127.0.0.1:1: Connection refused", "no CONNACK
 * from 127.0.0.1:1883 within 5000 ms"), copied into buf. Returns buf; an empty string when there
 * has been none, "no pool (NULL)" for a NULL pool.
 */
MQP_API const char *mqp_pool_last_error(mqp_pool *pool, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
