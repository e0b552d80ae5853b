/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * probe.h - mqtt_probe's private interfaces.
 *
 * Threads and processes: the broker calls every event handler on its single thread, which is the
 * only writer of the metrics. They live in a shared mapping (plugin.c) that the probe's HTTP
 * process, forked from the broker (http.c), only reads (atomics, and the two views under their
 * process-shared locks) with the broker's /proc; it never calls a mosquitto_* function. The broker
 * stays single-threaded: a thread of the probe's own would cost every message (README: Overhead).
 */
#ifndef PROBE_H
#define PROBE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef MQTTPOOL_VERSION
#define MQTTPOOL_VERSION "unknown" /* CMake defines it from the project's version */
#endif
#define PROBE_VERSION      MQTTPOOL_VERSION
#define PROBE_STAMP_KEY    "broker-rx-ns"
#define PROBE_TX_STAMP_KEY "broker-tx-ns"
#define PROBE_SYS_TOPIC    "$SYS/broker/probe/metrics"
/* Outside the Prometheus exporter range 9100-9999 (allocated in full) and away from every
 * mosquitto default: 1883, 8883, and 9883, where 2.1's official image puts its http_api
 * listener (README: the probe's port). */
#define PROBE_DEFAULT_HTTP "127.0.0.1:18830"

/* --- locks shared with the HTTP process ------------------------------------------------------
 * Process-shared and robust: a lock held by an HTTP process that died is taken over (the views it
 * guards are only read there, so they are whole). Every wait has a deadline. */

/** Initialise a lock in the shared mapping. Returns 0 or an errno. */
int probe_lock__init(pthread_mutex_t *m);
/** Take m within timeout_ms (0: only if free now). Returns false when it could not. */
bool probe_lock__take(pthread_mutex_t *m, unsigned timeout_ms);
/* A reader renders a view in microseconds; longer means its holder is stopped (a debugger). */
#define PROBE_READ_LOCK_MS 100

/* --- options --------------------------------------------------------------------------- */

#define PROBE_STAMP_TOPICS_MAX 8

struct probe_config {
	bool http_enabled;
	char http_host[64]; /* numeric IPv4 or IPv6 address */
	int http_port;
	unsigned sys_interval_s; /* 0: no $SYS publishing */
	bool observe_auth;
	bool stamp;
	unsigned stamp_every;  /* stamp 1 in N of the messages that pass the topic filter */
	unsigned stamp_topics; /* 0: every topic; else the filters below */
	char stamp_topic[PROBE_STAMP_TOPICS_MAX][256];
	bool tx_stamp; /* mosquitto 2.1: add broker-tx-ns to each stamped delivery */
	/* mosquitto 2.1 with the stamp: the slowest subscribers of each window (slow.c) */
	unsigned slow_top; /* K; 0: off */
	unsigned slow_threshold_ms;
	unsigned slow_window_s;
	/* mosquitto 2.1 with observe_auth: the clients falling behind, their queues and drops */
	unsigned backlog_top;       /* K; 0: off */
	unsigned backlog_threshold; /* queued messages that list a client (or a drop in the window) */
	/* client ids in the slow subscribers' labels: shown, or as keyed hashes (options.c) */
	enum probe_ids { PROBE_IDS_AUTO, PROBE_IDS_SHOWN, PROBE_IDS_HASHED } client_ids;
	char web_config[PATH_MAX]; /* "": none (plain HTTP, nobody asked for credentials) */
	bool web_auth; /* not an option: set once web_config is read and requires authentication */
};

struct probe_opt {
	const char *key, *value;
};

/**
 * Parse plugin_opt_* values (keys without the prefix) over the defaults. Returns 0, or -1 with a
 * message naming the option and what is wrong in err.
 */
int probe_options__parse(
    const struct probe_opt *opts, int count, struct probe_config *cfg, char *err, size_t errlen);
/**
 * Whether client ids are shown (true) or named by keyed hashes, and why, in words for the log:
 * plugin_opt_expose_client_ids true or false, or by default shown only when the HTTP endpoint
 * listens on a loopback address (nobody else can read it) or its web_config requires a password
 * or a client certificate ($SYS follows the same choice).
 */
bool probe_options__show_client_ids(const struct probe_config *cfg, char *why, size_t len);

/** SipHash-2-4 of data under a 128-bit key (hash.c). */
uint64_t probe_hash__siphash(const uint64_t key[2], const void *data, size_t len);

/* --- metrics ---------------------------------------------------------------------------- */

/* Payload bytes: 16 64 256 1Ki 4Ki 16Ki 64Ki 256Ki 1Mi +Inf. READ checks per message (the
 * routing-checks histogram): 0 1 2 5 10 20 50 100 1000 10000 +Inf. */
#define PROBE_SIZE_BUCKETS   10
#define PROBE_FANOUT_BUCKETS 11
/* Time inside the broker, seconds: 10us 50us 100us 250us 500us 1ms 2.5ms 5ms 10ms 25ms 50ms
 * 100ms 250ms 500ms 1s 2.5s 5s 10s 60s +Inf. */
#define PROBE_HOLD_BUCKETS 20

typedef atomic_uint_fast64_t probe_counter;

struct probe_web_stats;

/* --- slow subscribers (mosquitto 2.1 with the stamp) ----------------------------------------
 * Per connected client, a window's worth of in-broker waits (receive to MESSAGE_OUT) of the
 * stamped messages it was sent: constant memory a client. When a window ends the broker thread
 * ranks the clients whose longest wait reached the threshold, keeps the K slowest by name and
 * folds every other client into one "rest", and hands the result to the readers under a lock it
 * only ever tries (it never waits on the HTTP process). */

#define PROBE_SLOW_TOP_MAX 100
#define PROBE_SLOW_ID_MAX \
	128 /* bytes of a client id kept for its label (cut on a UTF-8 boundary) */

struct probe_slow_stats {
	uint64_t max_ns, sum_ns, deliveries;
};

struct probe_slow_entry {
	char client_id[PROBE_SLOW_ID_MAX + 1];
	struct probe_slow_stats stats;
};

/** One window's result. */
struct probe_slow_view {
	uint64_t over;                /* clients whose longest wait reached the threshold */
	unsigned n;                   /* of them, listed in top, slowest first */
	struct probe_slow_stats rest; /* every client that was sent something and is not listed */
	struct probe_slow_entry top[PROBE_SLOW_TOP_MAX];
};

/** What the readers see: set up at load, then the last window's view under the lock. */
struct probe_slow {
	atomic_bool enabled;
	unsigned top;
	uint64_t threshold_ns;
	unsigned window_s;
	bool hide_ids;      /* label clients "h:" and the hex of their id's SipHash under id_key */
	uint64_t id_key[2]; /* drawn at load: the same client, the same label, while it runs */
	pthread_mutex_t lock;
	struct probe_slow_view view;
};

/** Rank one client's window into view (which starts zeroed) by slow's K and threshold; the
 *  entry is labelled with its id or, when slow hides ids, its keyed hash. */
void probe_slow__rank(struct probe_slow_view *view, const struct probe_slow *slow,
    const char *client_id, const struct probe_slow_stats *stats);
/** Hand view to the readers if the lock is free now. Returns false if it was not (try later). */
bool probe_slow__publish(struct probe_slow *slow, const struct probe_slow_view *view);

struct probe_buf;
/** The last window's figures as Prometheus families, or nothing when slow is off. */
void probe_slow__render_prometheus(struct probe_slow *slow, struct probe_buf *out);
/** The same as a ,"slow_subscribers":{...} member of the JSON document. */
void probe_slow__render_json(struct probe_slow *slow, struct probe_buf *out);

/* --- clients falling behind (mosquitto 2.1 with observe_auth) -------------------------------
 * Per connected client: the messages routed to it (the ACL READ check the broker makes before it
 * queues or drops one for a subscriber) and those sent (MESSAGE_OUT). A message routed and not
 * sent at once was queued or dropped: queued while the client's queue is below the broker's
 * limit (max_queued_messages + the client's in-flight maximum, read from its configuration file),
 * else dropped; a QoS 0 message is never queued. Ranked each window like the slow subscribers. */

struct probe_backlog_stats {
	uint64_t queued, queued_bytes; /* now (an estimate: the broker's limit as configured) */
	uint64_t dropped;              /* since it connected, queue full (the same estimate) */
	uint64_t dropped_window;       /* of them in the last window */
	uint64_t unsent;               /* routed and not sent since it connected: queued + dropped */
};

struct probe_backlog_entry {
	char client_id[PROBE_SLOW_ID_MAX + 1];
	struct probe_backlog_stats stats;
};

struct probe_backlog_view {
	uint64_t over; /* clients at or over the threshold, or that dropped in the window */
	unsigned n;    /* of them, listed in top, the largest backlog first */
	struct probe_backlog_stats rest;
	struct probe_backlog_entry top[PROBE_SLOW_TOP_MAX];
};

struct probe_backlog {
	atomic_bool enabled;
	unsigned top;
	uint64_t threshold;
	unsigned window_s;
	uint64_t limit;       /* queued messages a client may have; 0: no limit */
	char limit_from[160]; /* where limit came from, for the log and README */
	bool hide_ids;        /* as the slow subscribers (probe_slow.hide_ids) */
	const uint64_t *id_key;
	pthread_mutex_t lock;
	struct probe_backlog_view view;
};

/** Rank one client's figures into view (which starts zeroed) by backlog's K and threshold. */
void probe_backlog__rank(struct probe_backlog_view *view, const struct probe_backlog *b,
    const char *client_id, const struct probe_backlog_stats *stats);
/** Hand view to the readers if the lock is free now. Returns false if it was not. */
bool probe_backlog__publish(struct probe_backlog *b, const struct probe_backlog_view *view);
void probe_backlog__render_prometheus(struct probe_backlog *b, struct probe_buf *out);
void probe_backlog__render_json(struct probe_backlog *b, struct probe_buf *out);

/* Why a connection ended, as mosquitto 2.1 reports it in DISCONNECT and CLIENT_OFFLINE (2.0
 * passes no reason). A small fixed set: a label value per broker error code would not be. */
enum probe_reason {
	PROBE_REASON_NORMAL,     /* the client sent DISCONNECT */
	PROBE_REASON_CLOSED,     /* the connection closed without DISCONNECT */
	PROBE_REASON_KEEPALIVE,  /* no packet within 1.5 keepalives */
	PROBE_REASON_PROTOCOL,   /* malformed or oversize packets, disallowed features */
	PROBE_REASON_AUTH,       /* not authorised */
	PROBE_REASON_TAKEN_OVER, /* a new connection with the same client id */
	PROBE_REASON_ADMIN,      /* an administrative action (a plugin kicked it) */
	PROBE_REASON_OTHER,
	PROBE_REASONS
};

extern const char *const probe_reason_names[PROBE_REASONS];

/** The reason class of a mosquitto 2.1 disconnect reason (a MOSQ_ERR_* code). */
enum probe_reason probe_reason_of(int mosq_err);

struct probe_metrics {
	probe_counter received[3][2]; /* [qos][retain] */
	probe_counter payload_bytes;
	probe_counter size_buckets[PROBE_SIZE_BUCKETS]; /* per bucket, not cumulative */
	probe_counter disconnects_identified;
	probe_counter disconnects_anonymous;             /* sockets that never had a client id */
	probe_counter disconnect_reasons[PROBE_REASONS]; /* 2.1 only: the broker's reason */
	probe_counter stamped;                           /* messages that got broker-rx-ns */
	probe_counter stamp_failures;
	probe_counter sys_publish_failures;
	probe_counter http_exits; /* the HTTP process ended without being asked (and was replaced) */
	/* mosquitto 2.1 (MESSAGE_OUT registered): PUBLISH packets sent to clients */
	atomic_bool has_deliveries; /* set once at load, before anything reads it */
	probe_counter deliveries;
	probe_counter sent_payload_bytes; /* their payload bytes */
	/* and with the stamp on: how long the broker held each stamped message, rx to tx */
	atomic_bool has_hold;
	probe_counter hold_buckets[PROBE_HOLD_BUCKETS];
	probe_counter hold_sum_ns;
	/* connects and connected: from CONNECT on 2.1 (set at load), else from observe_auth */
	atomic_bool connect_events;
	/* observe_auth only (and on 2.1, the two below) */
	probe_counter connects;
	probe_counter connected;
	probe_counter routing_checks;      /* ACL READ checks while routing: not deliveries */
	probe_counter subscribe_checks[2]; /* [0] SUBSCRIBE, [1] UNSUBSCRIBE filters checked */
	probe_counter fanout_buckets[PROBE_FANOUT_BUCKETS];
	probe_counter fanout_sum;
	struct probe_slow *slow;          /* NULL or not enabled: no slow-subscriber figures */
	struct probe_web_stats *web;      /* NULL or not enabled: no web_config */
	struct probe_backlog *backlog;    /* NULL or not enabled: no backlog figures */
	probe_counter dropped_queue_full; /* the backlog's estimate, every client */
};

/* Single writer (the broker thread): a relaxed load and store, no locked instruction. */
static inline void probe_add(probe_counter *c, uint64_t n)
{
	atomic_store_explicit(
	    c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static inline void probe_sub(probe_counter *c, uint64_t n)
{
	atomic_store_explicit(
	    c, atomic_load_explicit(c, memory_order_relaxed) - n, memory_order_relaxed);
}

static inline uint64_t probe_get(const probe_counter *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

extern const uint64_t probe_size_bounds[PROBE_SIZE_BUCKETS - 1];
extern const uint64_t probe_fanout_bounds[PROBE_FANOUT_BUCKETS - 1];
extern const uint64_t probe_hold_bounds_ns[PROBE_HOLD_BUCKETS - 1];

void probe_metrics__observe_size(struct probe_metrics *m, uint64_t bytes);
void probe_metrics__observe_fanout(struct probe_metrics *m, uint64_t checks);
void probe_metrics__observe_hold(struct probe_metrics *m, uint64_t ns);

/** Process figures in the Prometheus client conventions. */
struct probe_process {
	bool valid;
	double cpu_seconds;
	uint64_t resident_bytes;
	uint64_t open_fds;
	uint64_t max_fds;
	double start_time_seconds;
};

/** Read /proc/self. Safe from any thread. */
/** The broker's /proc/PID and /proc/PID/fd, opened at load: mosquitto makes itself undumpable
 *  when it drops root, and its fd directory can then no longer be opened by its own user. */
struct probe_proc_dirs {
	int pid, fds;
};
/** The broker's figures: from /proc/self (dirs NULL: on the broker's thread) or from dirs. */
void probe_process__read(struct probe_process *p, const struct probe_proc_dirs *dirs);

/** A growable text buffer (libc malloc; never handed to the broker). */
struct probe_buf {
	char *data;
	size_t len, cap;
	bool failed;
};

void probe_buf__printf(struct probe_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void probe_buf__free(struct probe_buf *b);

/** Render Prometheus text format 0.0.4. */
void probe_metrics__render_prometheus(const struct probe_metrics *m, const struct probe_process *p,
    bool observe_auth, struct probe_buf *out);

/** Render the same figures as one JSON object. */
void probe_metrics__render_json(const struct probe_metrics *m, const struct probe_process *p,
    bool observe_auth, uint64_t wall_ns, struct probe_buf *out);

/* --- fan-out tracking (observe_auth; broker thread only) ------------------------------- */

#define PROBE_QOS2_SLOTS 64

struct probe_fanout {
	const void *current; /* payload of the last QoS 0/1 message, or NULL */
	uint64_t current_count;
	bool current_open;
	struct {
		const void *payload;
		uint64_t count;
		uint64_t since_ns;
	} qos2[PROBE_QOS2_SLOTS]; /* QoS 2 messages wait for PUBREL to fan out */
};

/** A message was accepted: close the previous QoS 0/1 fan-out and open this one. */
void probe_fanout__message(
    struct probe_fanout *f, struct probe_metrics *m, const void *payload, int qos, uint64_t now_ns);

/** A READ check (one delivery) for payload. */
void probe_fanout__read(struct probe_fanout *f, struct probe_metrics *m, const void *payload);

/** Close what is complete: the open QoS 0/1 message, QoS 2 messages whose fan-out happened or
 *  that waited longer than ttl_ns. */
void probe_fanout__tick(
    struct probe_fanout *f, struct probe_metrics *m, uint64_t now_ns, uint64_t ttl_ns);

/* --- message properties on 2.1's MESSAGE_OUT (props.c) --------------------------------- */

typedef struct mqtt5__property mosquitto_property;

/** 2.1's in-place property accessors, looked up at load (2.0 has none of them). */
struct probe_props_api {
	const mosquitto_property *(*next)(const mosquitto_property *);
	int (*identifier)(const mosquitto_property *);
	const char *(*string_name)(const mosquitto_property *);
	uint16_t (*string_name_length)(const mosquitto_property *);
	const char *(*string_value)(const mosquitto_property *);
	uint16_t (*string_value_length)(const mosquitto_property *);
	int (*copy_all)(mosquitto_property **, const mosquitto_property *);
};

/** Look the accessors up in the broker. Returns false when it lacks any (2.0). */
bool probe_props__init(void);
/** Use these instead (unit tests). */
void probe_props__set_api(const struct probe_props_api *api);
/** The last user property `key` whose value is a decimal number, without copying anything. */
bool probe_props__find_u64(const mosquitto_property *props, const char *key, uint64_t *out);
/** *out = a copy of props with the user property key=value appended; on failure *out is NULL. */
int probe_props__copy_add(
    mosquitto_property **out, const mosquitto_property *props, const char *key, const char *value);

/* --- the web configuration (web.c) -------------------------------------------------------
 * plugin_opt_web_config FILE: the exporter-toolkit's format, the part that secures an endpoint
 * (TLS, client certificates, basic auth). Loaded whole or not at all; immutable once loaded. */

#define PROBE_WEB_USERS_MAX 64

enum probe_web_client_cert {
	PROBE_WEB_NO_CLIENT_CERT,
	PROBE_WEB_VERIFY_CLIENT_CERT_IF_GIVEN,
	PROBE_WEB_REQUIRE_CLIENT_CERT,
};

/** What a file was when read, to notice it changed (or appeared, or went). */
struct probe_web_file_stamp {
	uint64_t dev, ino;
	int64_t size, mtime_ns;
	int error;
};

struct probe_web_stamp {
	struct probe_web_file_stamp file[4]; /* the config, cert, key, client CA */
};

struct probe_web {
	char path[PATH_MAX];
	bool tls;
	bool min_tls13; /* else TLS 1.2 and 1.3 */
	enum probe_web_client_cert client_cert;
	char cert_file[PATH_MAX], key_file[PATH_MAX], client_ca_file[PATH_MAX];
	char *cert_pem, *key_pem, *ca_pem; /* the files' contents, checked by GnuTLS at load */
	unsigned nusers;
	struct probe_web_user {
		char name[128];
		char hash[61]; /* bcrypt */
	} * users;
	struct probe_web_stamp stamp; /* the files as they were read */
};

/** Read and check a web config; NULL with "web_config FILE, line N: reason" in err. */
struct probe_web *probe_web__load(const char *path, char *err, size_t errlen);
void probe_web__free(struct probe_web *w);
/** Whether nobody reads the endpoint without a password or a verified client certificate. */
bool probe_web__requires_auth(const struct probe_web *w);
/** The files' stamps now (compare with w->stamp to see a change). */
void probe_web__stamp(const struct probe_web *w, struct probe_web_stamp *s);
bool probe_web__same_stamp(const struct probe_web_stamp *a, const struct probe_web_stamp *b);
/**
 * Whether user/password match a basic_auth_users entry: bcrypt (crypt_rn) and comparisons that
 * take the same time whatever matched, an unknown user included. *hash_out: the user's hash, or
 * NULL for an unknown user.
 */
bool probe_web__check_password(
    const struct probe_web *w, const char *user, const char *password, const char **hash_out);
/** The user's bcrypt hash, or NULL. */
const char *probe_web__user_hash(const struct probe_web *w, const char *user);

/** What the HTTP process counts about the web config and who was turned away (atomics). */
enum probe_auth_failure {
	PROBE_AUTH_NO_CREDENTIALS,    /* no or malformed Authorization header */
	PROBE_AUTH_WRONG_CREDENTIALS, /* a user or password that does not match */
	PROBE_AUTH_CLIENT_CERT,       /* no client certificate, or one the CA did not sign */
	PROBE_AUTH_FAILURES
};

struct probe_web_stats {
	atomic_bool enabled;
	atomic_bool tls, basic_auth, client_cert;
	probe_counter auth_failures[PROBE_AUTH_FAILURES];
	probe_counter rate_limited; /* answered 429 without checking the password */
	probe_counter reloads[2];   /* [0] failed, [1] applied */
	atomic_bool last_reload_ok;
	atomic_uint_fast64_t last_reload_s; /* CLOCK_REALTIME seconds of the last applied read */
};

/* --- HTTP exporter ---------------------------------------------------------------------- */

struct probe_http;

/**
 * At load: listen on host:port for GET /metrics, over TLS and behind basic auth when web (owned
 * from now on, NULL: plain HTTP) says so. Nothing serves until the first probe_http__tick. With
 * keep_auth a re-read of web that would leave the endpoint without authentication is refused
 * (client ids are shown because of it). Returns NULL with err set (e.g. port in use).
 */
struct probe_http *probe_http__open(const char *host, int port, struct probe_metrics *m,
    bool observe_auth, struct probe_web *web, bool keep_auth, char *err, size_t errlen);
/** On the broker's ticks: start the HTTP process (the first), or another if it died. Returns 0,
 *  or a MOSQ_LOG_* level for what msg says (for the broker's log). */
int probe_http__tick(struct probe_http *h, uint64_t now_ns, char *msg, size_t len);
/** Stop the HTTP process (SIGTERM, then SIGKILL after 2 s), reap it, close the socket. */
void probe_http__stop(struct probe_http *h);

/* --- the probe's address against the broker's configuration (conflict.c) ---------------- */

struct probe_conf_line {
	char file[256];
	int line; /* 0: not there */
};

/** A listener in the broker's configuration. */
struct probe_listener {
	int port;
	char host[256];    /* empty: every address */
	char protocol[16]; /* mqtt, websockets, http_api */
	struct probe_conf_line where, protocol_where;
};

/**
 * Read the listeners of a mosquitto configuration file (its include_dir files too, in the
 * order mosquitto reads them) into out. option, when not NULL, gets where the first
 * plugin_opt_http_listen line is. Returns how many, or -1 when the file cannot be read.
 */
int probe_conf__read(
    const char *path, struct probe_listener *out, int max, struct probe_conf_line *option);
/** The broker's queue limits as its configuration sets them (mosquitto's defaults otherwise). */
struct probe_queue_limits {
	long max_queued_messages;   /* default 1000; 0: no limit (with max_queued_bytes 0) */
	long max_inflight_messages; /* default 20: MQTT 3.x clients' in-flight maximum */
	long max_queued_bytes;      /* default 0 */
	bool found;                 /* any of them set in the file */
};
/** Read them from the configuration at path (its include_dir files too); mosquitto's defaults
 *  where unset. -1 (the defaults in out): path NULL or unreadable. */
int probe_conf__queue_limits(const char *path, struct probe_queue_limits *out);
/** The configuration file this process was started with (-c FILE), from /proc/self/cmdline. */
bool probe_conf__path(char *buf, size_t len);
/** Whether a listener would want the probe's numeric host and port. */
bool probe_conf__overlaps(const struct probe_listener *l, const char *host, int port);
/**
 * Whether host:port is the address of a listener in the configuration at conf_path. If so, err
 * names both lines and what to do.
 */
bool probe_conf__conflict(
    const char *conf_path, const char *host, int port, bool option_given, char *err, size_t errlen);
/** Who listens on port: "held by pid N (comm)", or why that cannot be told. */
void probe_port__holder(int port, char *out, size_t len);

/* --- broker events (events.c) ------------------------------------------------------------ */

struct probe_client; /* connected-client set entry (observe_auth) */

/** Everything the probe keeps; one per broker process, shared by every initialisation. */
struct probe_state {
	struct probe_config cfg;
	struct probe_metrics metrics;
	struct probe_fanout fanout;
	struct probe_client *clients; /* uthash set of client pointers seen in BASIC_AUTH */
	struct probe_client *offline; /* the offline sessions among them, by client id */
	struct probe_http *http;
	uint64_t next_sys_ns;
	uint64_t tick_ns; /* the last tick's CLOCK_MONOTONIC_COARSE */
	int refs;
	unsigned stamp_seq; /* sampling: messages that passed the topic filter */
	bool hold;          /* 2.1 with the stamp on: rx-to-tx histogram */
	bool events21;      /* 2.1's CONNECT and CLIENT_OFFLINE registered: they keep the client set */
	struct probe_slow slow;
	struct probe_web_stats web_stats;     /* metrics.web points here with a web_config */
	struct probe_slow_view slow_building; /* this window: the clients that left during it */
	struct probe_slow_view slow_pending;  /* the last window, until the readers have it */
	bool slow_unpublished;
	uint64_t slow_next_ns; /* when the window ends (CLOCK_MONOTONIC_COARSE) */
	bool slow_on;          /* 2.1, the stamp, the client set and slow_top > 0 */
	struct probe_backlog backlog;
	struct probe_backlog_view backlog_building; /* this window: the clients that left during it */
	struct probe_backlog_view backlog_pending;
	bool backlog_unpublished;
	uint64_t backlog_next_ns;
	bool backlog_on;   /* 2.1 (MESSAGE_OUT, the client set), observe_auth and backlog_top > 0 */
	bool id_key_drawn; /* slow.id_key: the key of hidden client ids, for both lists */
	pthread_t broker_thread; /* the thread that loaded the probe: the broker's */
	bool broker_thread_known;
};

#define PROBE_QOS2_TTL_NS (30ULL * 1000000000ULL)

int probe_events__message(int event, void *event_data, void *userdata);
int probe_events__disconnect(int event, void *event_data, void *userdata);
int probe_events__tick(int event, void *event_data, void *userdata);
int probe_events__basic_auth(int event, void *event_data, void *userdata);
int probe_events__acl_check(int event, void *event_data, void *userdata);
/* mosquitto 2.1's MESSAGE_OUT (27): one call per PUBLISH the broker sends; 2.0 has no such event
 * and refuses its registration with MOSQ_ERR_NOT_SUPPORTED. */
#define PROBE_EVT_MESSAGE_OUT 27
int probe_events__message_out(int event, void *event_data, void *userdata);
/* mosquitto 2.1's CONNECT (11: a connection accepted, after CONNACK) and CLIENT_OFFLINE (28: a
 * client with a persistent session left; DISCONNECT reports only the others on 2.1). */
#define PROBE_EVT_CONNECT        11
#define PROBE_EVT_CLIENT_OFFLINE 28
int probe_events__connect(int event, void *event_data, void *userdata);
int probe_events__client_offline(int event, void *event_data, void *userdata);

/** Publish the JSON figures on PROBE_SYS_TOPIC (retained, with a message expiry). */
void probe_events__publish_sys(struct probe_state *s);

/** Start ranking slow subscribers (at load). s->metrics.slow must already point to s->slow. */
void probe_events__slow_start(struct probe_state *s);

/** Draw the key hidden client ids are hashed with, once (slow.id_key). */
void probe_events__id_key(struct probe_state *s);

/** Start tracking the clients' backlogs (at load). s->metrics.backlog must point to s->backlog. */
void probe_events__backlog_start(struct probe_state *s);

/** Forget the connected-client set. */
void probe_events__clear(struct probe_state *s);

/** Decimal digits of v into buf (at least 21 bytes), NUL-terminated. Returns the length. */
size_t probe_u64_to_dec(uint64_t v, char *buf);

#endif
