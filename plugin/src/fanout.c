/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * fanout.c - routing checks per message: the READ checks mosquitto makes while routing (an
 * upper bound on deliveries: they come before the ACL decision and before a full queue drops).
 *
 * Mosquitto 2.0 has no per-delivery event; with observe_auth the probe sees one ACL READ check
 * per matching subscriber, carrying the stored message's payload pointer, the same pointer the
 * MESSAGE event saw. QoS 0/1 messages fan out synchronously right after MESSAGE, so the next
 * MESSAGE or TICK closes them; QoS 2 messages fan out at PUBREL, later, and wait in a small table
 * until their READ burst has happened (closed at the next tick) or a TTL passes.
 */
#include "probe.h"

static void close_current(struct probe_fanout *f, struct probe_metrics *m)
{
	if (f->current_open) {
		probe_metrics__observe_fanout(m, f->current_count);
		f->current_open = false;
		f->current = NULL;
		f->current_count = 0;
	}
}

static void close_qos2(struct probe_fanout *f, struct probe_metrics *m, int i)
{
	probe_metrics__observe_fanout(m, f->qos2[i].count);
	f->qos2[i].payload = NULL;
	f->qos2[i].count = 0;
}

void probe_fanout__message(
    struct probe_fanout *f, struct probe_metrics *m, const void *payload, int qos, uint64_t now_ns)
{
	close_current(f, m);
	if (!payload)
		return; /* empty payloads cannot be told apart: not observed */
	if (qos < 2) {
		f->current = payload;
		f->current_open = true;
		return;
	}
	int slot = 0;
	for (int i = 0; i < PROBE_QOS2_SLOTS; i++) {
		if (!f->qos2[i].payload) {
			slot = i;
			break;
		}
		if (f->qos2[i].since_ns < f->qos2[slot].since_ns)
			slot = i;
	}
	if (f->qos2[slot].payload)
		close_qos2(f, m, slot); /* table full: the oldest is closed early */
	f->qos2[slot].payload = payload;
	f->qos2[slot].count = 0;
	f->qos2[slot].since_ns = now_ns;
}

void probe_fanout__read(struct probe_fanout *f, struct probe_metrics *m, const void *payload)
{
	if (!payload)
		return; /* empty payloads cannot be told apart */
	if (f->current_open && payload == f->current) {
		f->current_count++;
		probe_add(&m->routing_checks, 1);
		return;
	}
	for (int i = 0; i < PROBE_QOS2_SLOTS; i++) {
		if (f->qos2[i].payload == payload) {
			f->qos2[i].count++;
			probe_add(&m->routing_checks, 1);
			return;
		}
	}
}

void probe_fanout__tick(
    struct probe_fanout *f, struct probe_metrics *m, uint64_t now_ns, uint64_t ttl_ns)
{
	close_current(f, m);
	for (int i = 0; i < PROBE_QOS2_SLOTS; i++)
		if (f->qos2[i].payload
		    && (f->qos2[i].count > 0
		        || (now_ns > f->qos2[i].since_ns && now_ns - f->qos2[i].since_ns > ttl_ns)))
			close_qos2(f, m, i);
}
