/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * node.c - the broker nodes of the pool's URL: which one a new connection goes to, how each
 * fares (backoff after a failed connect, redirects, lost connections), and whether a
 * connection's broker still answers, from what the connection receives (node.h). I/O thread
 * only.
 *
 * Liveness. A broker that dies is a reset; one that hangs (stopped, a full disk, a pause) or a
 * link that goes dark (a NAT or firewall dropping state) sends nothing at all, and TCP notices
 * after tcp_retries2 (about 15 minutes) or never. Sending proves nothing, so the pool watches
 * what arrives: a connection with calls outstanding and nothing received for
 * options.silence_ms asks with a PINGREQ; an idle one asks after half the keepalive. Nothing
 * within ping_timeout_ms of the PINGREQ and the connection is unresponsive: dead, its calls to
 * fail with the reason, and its node suspect until a new connection there has answered one.
 */
#include "node.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "finish.h"
#include "logic.h"
#include "mqc_clock.h"
#include "mqc_codec.h"
#include "mqc_random.h"

/* --- choosing and judging nodes ------------------------------------------------------------ */

/* Randomness for spreading retries and retirements (not for secrets): the clock when the
 * kernel has none to give. */
uint32_t mqp__random32(void)
{
	uint32_t r;
	return mqc_random_bytes(&r, sizeof r) == 0 ? r : (uint32_t)mqc_now_ns();
}

/* Whether every node is failing, and when the first of them may be tried again. */
static void nodes_failing(struct mqp_pool *p)
{
	p->connect_failed = true;
	p->backoff_until = UINT64_MAX;
	for (unsigned i = 0; i < p->nnodes; i++) {
		const struct pnode *n = &p->nodes[i];
		p->connect_failed &= n->failing;
		if (n->failing && n->backoff_until < p->backoff_until)
			p->backoff_until = n->backoff_until;
	}
}

/* A connect to node failed (p->last_error says why): it waits, longer each time in a row. */
void mqp__node_failed(struct mqp_pool *p, unsigned node)
{
	struct pnode *n = &p->nodes[node];
	atomic_fetch_add(&p->stats.connects_failed, 1);
	atomic_fetch_add(&n->connects_failed, 1);
	n->backoff_ms = mqp__backoff_next(n->backoff_ms);
	unsigned wait = mqp__backoff_wait_ms(n->backoff_ms, mqp__random32());
	n->backoff_until = mqc_now_ns() + (uint64_t)wait * MQC_NS_PER_MS;
	n->failing = true;
	atomic_store(&n->a_failing, 1);
	nodes_failing(p);
	char why[512];
	pthread_mutex_lock(&p->report_lock);
	snprintf(why, sizeof why, "%s", p->last_error);
	snprintf(n->last_error, sizeof n->last_error, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
	if (p->nnodes > 1)
		mqp__log(
		    p, MQP_LOG_WARNING, "mqttpool: %s; next attempt at %s in %u ms", why, n->where, wait);
	else
		mqp__log(p, MQP_LOG_WARNING, "mqttpool: %s; next attempt in %u ms", why, wait);
}

/* A ready connection of node c was lost (p->last_error says how). */
void mqp__node_lost(struct mqp_pool *p, const struct pconn *c)
{
	struct pnode *n = &p->nodes[c->node];
	atomic_fetch_add(&p->stats.connections_lost, 1);
	atomic_fetch_add(&n->connections_lost, 1);
	pthread_mutex_lock(&p->report_lock);
	snprintf(n->last_error, sizeof n->last_error, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
}

void mqp__node_hold(struct mqp_pool *p, unsigned node)
{
	struct pnode *n = &p->nodes[node];
	n->backoff_ms = mqp__backoff_next(n->backoff_ms);
	n->backoff_until = mqc_now_ns()
	    + (uint64_t)mqp__backoff_wait_ms(n->backoff_ms, mqp__random32()) * MQC_NS_PER_MS;
	n->failing = true;
	atomic_store(&n->a_failing, 1);
	nodes_failing(p);
}

/* c is leaving the node's gauges (closing, or closed). */
void mqp__node_leave(struct mqp_pool *p, struct pconn *c)
{
	if (c->probe || !c->open)
		return;
	struct pnode *n = &p->nodes[c->node];
	if (c->ready)
		atomic_fetch_sub(&n->a_ready, 1);
	if (c->stage != STAGE_CLOSING) {
		n->conns--;
		atomic_fetch_sub(&n->a_conns, 1);
	}
}

/* The node of c said not to come back for now: shutting down (0x8B), use another server (0x9C),
 * or moved (0x9D). It waits its backoff like a node that failed, so new connections go to the
 * other nodes; a Server Reference naming one of the listed nodes ("host[:port]", the first of a
 * space-separated list) is where the next connection goes - once per redirect, and never to a
 * server outside the list (an address the broker sends is not one the application chose). */
void mqp__node_redirect(struct mqp_pool *p, const struct pconn *c, struct mqc_str ref)
{
	if (c->probe)
		return;
	struct pnode *n = &p->nodes[c->node];
	atomic_fetch_add(&n->redirects, 1);
	mqp__node_hold(p, c->node);
	if (!ref.p)
		return;
	size_t len = 0;
	while (len < ref.len && ref.p[len] != ' ')
		len++;
	char target[MQC_URL_HOST_MAX + 16];
	if (len == 0 || len >= sizeof target)
		return;
	memcpy(target, ref.p, len);
	target[len] = '\0';
	for (unsigned i = 0; i < p->nnodes; i++) {
		char alone[MQC_URL_HOST_MAX + 8];
		snprintf(alone, sizeof alone, "%s", p->nodes[i].url.host);
		if (i != c->node
		    && (strcmp(target, p->nodes[i].where) == 0 || strcmp(target, alone) == 0)) {
			p->redirect_to = (int)i;
			return;
		}
	}
	mqp__log(p, MQP_LOG_WARNING,
	    "mqttpool: the broker at %s named %s as the server to use: not one of the pool's "
	    "brokers, so not followed",
	    c->w.where, target);
}

/* The nodes as mqp__pick_node sees them now. */
void mqp__node_views(const struct mqp_pool *p, uint64_t now, struct mqp_node_view *v)
{
	for (unsigned i = 0; i < p->nnodes; i++)
		v[i] = (struct mqp_node_view) { .conns = p->nodes[i].conns,
			.available = !p->nodes[i].failing || now >= p->nodes[i].backoff_until };
}

/* Which node the next connection goes to: one a broker's Server Reference named (once), else
 * as load_balance says among those not waiting for their backoff; -1: none now. */
int mqp__node_next(struct mqp_pool *p, uint64_t now)
{
	struct mqp_node_view v[MQP_NODES_MAX];
	mqp__node_views(p, now, v);
	int node = p->redirect_to;
	p->redirect_to = -1;
	if (node >= 0 && v[node].available)
		return node;
	return mqp__pick_node(v, p->nnodes, p->opt.load_balance == MQP_LB_IN_ORDER, mqp__random32());
}

/* --- liveness ----------------------------------------------------------------------------- */

static uint64_t ms(uint64_t ns)
{
	return ns / MQC_NS_PER_MS;
}

static void ping(struct pconn *c, uint64_t now)
{
	if (mqc_enc_pingreq(&c->w.tx) == 0) {
		c->ping_out = true;
		c->ping_sent = now;
		c->pings_sent++; /* in the count a barrier waits on */
	}
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Node of c is suspect from now: it takes no new connection until its backoff is over, and every
 * other ready connection there carries nothing new until it has answered a PINGREQ sent now. */
static void node_suspect(struct mqp_pool *p, const struct pconn *c, uint64_t now)
{
	struct pnode *n = &p->nodes[c->node];
	atomic_fetch_add(&n->unresponsive, 1);
	if (!n->suspect) {
		n->suspect = true;
		n->suspect_at = now;
		atomic_store(&n->a_suspect, 1);
		atomic_store(&n->suspect_since_ms, wall_ms());
	}
	mqp__node_hold(p, c->node);
	for (unsigned i = 0; i < p->opt.max_size; i++) {
		struct pconn *o = &p->conns[i];
		if (o == c || !o->open || !o->ready || o->dead || o->node != c->node
		    || o->stage != STAGE_READY)
			continue;
		o->doubted = true;
		if (!o->ping_out)
			ping(o, now);
	}
}

static void unresponsive(struct mqp_pool *p, struct pconn *c, uint64_t now)
{
	uint64_t heard = c->last_rx > c->ready_at ? c->last_rx : c->ready_at, oldest = now;
	unsigned calls = 0;
	for (const struct op *op = c->ops; op; op = op->conn_next, calls++)
		if (op->submitted < oldest)
			oldest = op->submitted;
	char outstanding[96] = "nothing outstanding";
	if (calls)
		snprintf(outstanding, sizeof outstanding, "%u call%s outstanding, the oldest for %llu ms",
		    calls, calls == 1 ? "" : "s", (unsigned long long)ms(now - oldest));
	mqp__set_error(p,
	    "%s is unresponsive: nothing received for %llu ms, a PINGREQ unanswered for %llu ms "
	    "(ping_timeout_ms), %s",
	    c->w.where, (unsigned long long)ms(now - heard), (unsigned long long)ms(now - c->ping_sent),
	    outstanding);
	c->dead = true;
	mqp__node_lost(p, c);
	char why[512];
	pthread_mutex_lock(&p->report_lock);
	snprintf(why, sizeof why, "%s", p->last_error);
	pthread_mutex_unlock(&p->report_lock);
	mqp__log(p, MQP_LOG_WARNING, "mqttpool: %s", why);
	node_suspect(p, c, now);
}

bool mqp__live_check(struct mqp_pool *p, struct pconn *c, uint64_t now)
{
	if (!c->open || c->dead || c->probe || c->stage != STAGE_READY || !c->keepalive_s)
		return false;
	uint64_t heard = c->last_rx > c->ready_at ? c->last_rx : c->ready_at;
	if (c->ping_out && c->last_rx < c->ping_sent
	    && now - c->ping_sent >= (uint64_t)p->opt.ping_timeout_ms * MQC_NS_PER_MS) {
		unresponsive(p, c, now);
		return true;
	}
	if (c->ping_out)
		return false;
	uint64_t keepalive = (uint64_t)c->keepalive_s * MQC_NS_PER_S;
	uint64_t sent = c->last_tx > c->ready_at ? c->last_tx : c->ready_at;
	bool busy = c->ops != NULL || c->held != NULL;
	if ((busy && p->opt.silence_ms != MQP_NEVER
	        && now - heard >= (uint64_t)p->opt.silence_ms * MQC_NS_PER_MS)
	    || now - heard >= keepalive / 2     /* idle: heard from within half a keepalive */
	    || now - sent >= keepalive * 3 / 4) /* the broker closes after 1.5 keepalives unsent */
		ping(c, now);
	return false;
}

void mqp__node_up(struct mqp_pool *p, struct pconn *c)
{
	struct pnode *n = &p->nodes[c->node];
	atomic_fetch_add(&n->connects_ok, 1);
	atomic_fetch_add(&n->a_ready, 1);
	n->backoff_ms = 0;
	n->failing = false;
	atomic_store(&n->a_failing, 0);
	p->connect_failed = false;
	if (n->suspect) {
		c->doubted = true; /* it carries work once its PINGREQ is answered */
		ping(c, mqc_now_ns());
	}
}

void mqp__live_pingresp(struct mqp_pool *p, struct pconn *c)
{
	if (!c->doubted)
		return;
	c->doubted = false;
	struct pnode *n = &p->nodes[c->node];
	if (n->suspect && c->ready_at > n->suspect_at) { /* a fresh CONNACK, and a PINGRESP */
		n->suspect = false;
		atomic_store(&n->a_suspect, 0);
		atomic_store(&n->suspect_since_ms, 0);
		mqp__log(p, MQP_LOG_WARNING, "mqttpool: %s answers again (a new connection's PINGREQ)",
		    c->w.where);
	}
}

unsigned mqp__live_interval_ms(const struct mqp_pool_options *o)
{
	unsigned every = 1000;
	if (o->silence_ms != MQP_NEVER && o->silence_ms / 5 < every)
		every = o->silence_ms / 5;
	if (o->ping_timeout_ms / 5 < every)
		every = o->ping_timeout_ms / 5;
	return every < 10 ? 10 : every;
}

unsigned mqp__live_user_timeout_ms(const struct mqp_pool_options *o)
{
	uint64_t silence = o->silence_ms == MQP_NEVER ? 0 : o->silence_ms;
	uint64_t t = 2 * (silence + o->ping_timeout_ms);
	return t < 3000 ? 3000 : t > 600000 ? 600000 : (unsigned)t;
}
