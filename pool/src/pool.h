/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * pool.h - libmqttpool's private types: a pooled connection and the pool itself.
 *
 * Types only. Which file does what:
 *   op.c     an operation's life and the hand-off between callers and the I/O thread (op.h)
 *   logic.c  the pool's decisions as pure functions (logic.h)
 *   corr.c   correlation data nobody can forge (corr.h)
 *   claims.c the process's legacy reply topics: one outstanding request each (claims.h)
 *   wire.c   one connection's socket, TLS and buffers (wire.h)
 *   finish.c completing the operations the I/O thread holds, ending leases, the error text
 *            and the log (finish.h)
 *   node.c   the broker nodes: where a new connection goes, backoff, redirects, and liveness
 *            (whether a connection's broker still answers: options.silence_ms) (node.h)
 *   session.c what a connection sends: packet identifiers, PUBLISH and the broker's quota,
 *            SUBSCRIBE, acknowledgements (session.h)
 *   legacy.c the legacy model's reply topics, subscribed once and kept (legacy.h)
 *   conn.c   a connection's life: connect, the 3.1.1 check, receiving and routing (conn.h)
 *   io.c     the I/O loop: dispatch, leases, deadlines, housekeeping, on the pool's own thread
 *            or inside an application's event loop (io.h)
 *   stats.c  the public accessors
 *   api.c    the public calls (on an event loop's thread they go straight to io.c);
 *            create.c new, destroy, and running on an event loop
 * Each depends only on those above it in that list (stats.c on op.c and these types); the
 * layers (tests/layers_test.sh checks them): op, logic, corr, claims; wire; finish; node;
 * session; legacy; conn; io, stats; api, create. MQTT's bytes are the project's codec's
 * (common/src/mqc_codec.h).
 */
#ifndef MQP_POOL_H
#define MQP_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "corr.h"
#include "mqc_hist.h"
#include "mqc_url.h"
#include "mqttpool.h"
#include "op.h"
#include "wire.h"

#define MQP_TOPIC_MAX 512
#define MQP_SCRATCH   65536 /* TLS: ciphertext read at once */

typedef struct ssl_ctx_st SSL_CTX;

/* A message queued for a lease. */
struct lmsg {
	struct mqp_message m;
	struct lmsg *next;
};

/* A packet identifier in use on a connection, and what it is for. */
enum mid_kind {
	MID_LSUB,  /* SUBSCRIBE to a legacy reply topic (it stays): waits for SUBACK */
	MID_PUB1,  /* QoS 1 PUBLISH: waits for PUBACK */
	MID_PUB2,  /* QoS 2 PUBLISH: waits for PUBREC */
	MID_REL,   /* PUBREL sent: waits for PUBCOMP */
	MID_SUB,   /* SUBSCRIBE: waits for SUBACK */
	MID_UNSUB, /* UNSUBSCRIBE: waits for UNSUBACK */
};
struct mid_use {
	uint16_t mid;
	uint8_t kind;  /* enum mid_kind */
	struct op *op; /* the call it completes, or NULL (the inbox, an op that ended first) */
};

/* A legacy reply topic a connection stays subscribed to, so the next request on it costs no
 * SUBSCRIBE: the pool's requests on a fixed reply topic reuse warm connections, on 3.1.1 too. */
struct lsub {
	char *topic;
	uint16_t mid;     /* its SUBSCRIBE waits for SUBACK; 0: granted */
	uint32_t barrier; /* the PINGREQ (c->pings_sent) a request on it waits for; 0: none */
	uint64_t last_used;
};
/* A reply topic unsubscribed to make room: what still arrives for it is dropped, not given to
 * a lease (UNSUBACK is not a barrier). */
struct ltomb {
	char *topic;
	uint64_t until;
};
#define MQP_LSUBS_MAX  256 /* reply topics one connection stays subscribed to */
#define MQP_LTOMBS_MAX 16

/* How far a connection got. */
enum pconn_stage {
	STAGE_TRANSPORT, /* TCP connect and TLS handshake */
	STAGE_CONNACK,   /* CONNECT sent */
	STAGE_INBOX,     /* MQTT 5: the inbox SUBSCRIBE sent */
	STAGE_READY,
	STAGE_CLOSING, /* retiring: DISCONNECT sent, our side shut; closed at the broker's close */
};

/* A broker node of the URL's list: where connections go, and how it fared. The I/O thread
 * decides with the plain fields; the atomics and last_error (report_lock) are for
 * mqp_pool_node_stats on any thread. */
#define MQP_NODES_MAX 16
struct pnode {
	struct mqc_url url;
	char where[MQC_URL_HOST_MAX + 8]; /* host:port, IPv6 bracketed */
	unsigned conns;                   /* open or opening on it */
	bool failing;                     /* its last connect failed: waits for backoff_until */
	unsigned backoff_ms;
	uint64_t backoff_until;
	unsigned next_addr; /* the address of its name the next connection tries first */
	/* A connection there went unresponsive: suspect since suspect_at, until one of its new
	 * connections has answered a PINGREQ (liveness.c). */
	bool suspect;
	uint64_t suspect_at;
	atomic_uint a_conns, a_ready, a_failing, a_inflight, a_suspect;
	atomic_uint_fast64_t unresponsive, suspect_since_ms;
	atomic_uint_fast64_t requests, connects_ok, connects_failed, connections_lost, redirects;
	char last_error[512];
};

/* One pooled connection (I/O thread only). */
struct pconn {
	struct mqp_pool *pool;
	struct mqp_wire w; /* its socket, TLS and buffers */
	unsigned node;     /* which of p->nodes it goes to */
	bool open, ready, dead, failed_connect;
	bool probe;   /* p->probe only: a 3.1.1 CONNECT to learn what the broker speaks */
	int protocol; /* 5, or 4 (MQTT 3.1.1) */
	enum pconn_stage stage;
	uint64_t connect_deadline;
	uint64_t closing_until; /* STAGE_CLOSING: closed then, if the broker has not closed first */
	size_t connect_len;     /* the CONNECT's size: said when the broker closes in answer to it */
	/* the MQTT session */
	struct mid_use *mids; /* packet identifiers in use */
	unsigned nmids, mids_cap;
	uint16_t next_mid, inbox_mid;
	unsigned quota;               /* QoS 1/2 publishes the broker takes unacknowledged */
	unsigned unacked;             /* of them, sent and not acknowledged */
	struct op *held, **held_tail; /* QoS 1/2 publishes waiting for quota (op->wait_next) */
	struct op *written;           /* QoS 0 publishes: done once the wire has sent everything */
	uint16_t *in2;                /* incoming QoS 2 packet identifiers waiting for PUBREL */
	unsigned nin2;
	uint8_t max_qos;
	bool retain_available, sub_ids_available;
	bool wildcards_available, shared_available; /* what its CONNACK said (MQTT 5; else true) */
	unsigned keepalive_s;
	struct lsub *lsubs; /* legacy reply topics subscribed, most recent use last */
	unsigned nlsubs;
	struct ltomb tombs[MQP_LTOMBS_MAX];
	uint64_t last_tx, last_rx, ping_sent;
	bool ping_out;
	bool doubted; /* its node is suspect: it carries nothing new until its PINGREQ is answered */
	bool read_in_turn; /* something was read since the last flush */
	uint64_t token;    /* unique in the process (claims.h): which connection a topic last used */
	uint32_t pings_sent, pings_answered; /* PINGREQs and PINGRESPs: a barrier's order */
	char id[64];
	char inbox[MQP_TOPIC_MAX - 32];
	struct mqp_corr corr; /* seals and opens this connection's correlation data */
	uint64_t next_seq;
	unsigned inflight;
	struct op *ops; /* requests and publishes carried by this connection */
	/* leases */
	bool leased, retained_ok;
	uint32_t epoch;      /* the current lease's subscription identifier (never 0) */
	uint64_t idle_since; /* when it was last released: the most recent goes first */
	uint64_t ready_at, retire_at, last_used, connect_start;
	struct lmsg *qhead, **qtail;
	struct op *receiver;
	char **filters;
	size_t nfilters;
};

struct pool_stats {
	atomic_uint size, ready, available, connecting, inflight, queued, leased;
	atomic_uint_fast64_t acquires, acquire_timeouts, releases, double_releases, stale_dropped;
	atomic_uint_fast64_t waits, cancels;
	atomic_uint_fast64_t closes_idle, closes_lifetime, leaks;
	atomic_uint_fast64_t requests, replies, timeouts, late_replies, strays, publishes;
	atomic_uint_fast64_t connects_ok, connects_failed, connections_lost, protocol_errors;
	atomic_uint v311_only; /* mqp_pool_stats.v311_only */
};

struct mqp_pool {
	/* set at creation, then read-only */
	struct mqp_pool_options opt;
	struct mqc_url url; /* the first node's: the scheme (TLS or not) is every node's */
	struct pnode *nodes;
	unsigned nnodes;
	char *client_prefix, *inbox_prefix, *username, *password, *cafile, *certfile, *keyfile;
	char *ws_header;                /* options.ws_header, copied */
	char *v311_advice;              /* options.v311_advice, copied (NULL: the library's words) */
	struct mqp_wire_opts wire_opts; /* ws_header, and TCP_USER_TIMEOUT from the liveness options */
	SSL_CTX *ssl_ctx;
	pthread_t thread;
	int ep;
	struct mqp_watcher watcher; /* the sockets' watcher: ep, or the loop's loop_watch */
	/* shared */
	struct op_inbox inbox;       /* callers to the I/O thread; drain and destroy */
	pthread_mutex_t report_lock; /* the histograms and last_error */
	struct mqc_hist h_request, h_acquire, h_connect;
	char last_error[512];
	struct pool_stats stats; /* atomics */
	/* I/O thread only */
	struct pconn *conns;      /* max_size slots */
	struct op_fifo queue;     /* requests and publishes waiting for a connection */
	struct op_fifo acquirers; /* waiting for a lease */
	uint64_t dispatches;      /* dispatch passes so far */
	uint32_t *lease_gen;      /* per slot: the generation of its current or next lease */
	bool *lease_held;         /* per slot: a lease handle is out */
	struct lease_info {       /* per slot, for leak reports */
		uint64_t since;
		const char *file;
		int line;
		bool reported;
	} * lease_info;
	uint64_t next_housekeeping;
	struct op *pending; /* requests by correlation */
	struct op *legacy;  /* legacy requests on a connection, by reply topic (hh_legacy) */
	struct op *legacy_wait, **legacy_wait_tail; /* legacy requests whose reply topic is busy */
	struct op *tickets;                         /* async calls by ticket */
	struct mqc_heap heap;                       /* every op the I/O thread holds, by deadline */
	uint64_t backoff_until; /* connect_failed: when the first node's backoff ends */
	int redirect_to;        /* a node a broker's Server Reference named: the next connection's,
	                           once; -1: none */
	int move_to, move_from; /* a connection moving between nodes (rebalance); -1: none */
	bool connect_failed;    /* every node's last connect failed */
	bool refused;       /* the last connect was refused (CONNACK, or a protocol the broker does not
	                       speak, confirmed): waiting calls fail at once with MQP_EREFUSED */
	uint64_t next_misc; /* keepalive for every connection */
	unsigned char *scratch; /* TLS: ciphertext as it is read (one I/O thread, many sockets) */
	/* Does the broker speak MQTT 3.1.1 only? One CONNECT at 3.1.1 says, when a v5 CONNECT was
	 * closed without a CONNACK or refused for its protocol version. */
	struct pconn probe;
	enum { PROBE_NONE, PROBE_RUNNING, PROBE_DONE } probe_state;
	char probe_cause[400]; /* what the v5 CONNECT met (and what it was), for the message */
	bool probe_said;       /* the broker said it: a CONNACK refusing the protocol version */
	char verdict[1024];    /* the probe's conclusion, said again at every such failure */
	bool refused_v5;       /* its conclusion: the broker said it does not take MQTT 5 */
	/* On the application's event loop (options.loop); the loop's thread only, but closed */
	bool on_loop;
	struct mqp_loop loop;
	bool busy;            /* inside mqp_pool_process or a call made on the loop's thread */
	bool defer_callbacks; /* inside such a call: completions wait for the next process */
	struct op *later, **later_tail; /* completed async ops whose callbacks wait */
	struct op *local, **local_tail; /* ops from the loop's thread while busy */
	bool destroy_requested;         /* destroy from a callback: at the end of this process */
	uint64_t scheduled_at;          /* when the loop was last asked to run the pool */
	atomic_bool closed;             /* the close sequence has run (destroy from another thread) */
};

#endif
