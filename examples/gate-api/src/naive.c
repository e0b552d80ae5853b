/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * naive.c - the /naive route: a connection per request, the way a handler without a pool does
 * it. The client is the project's one request/reply client (mqc_request.h), the same one that
 * gives mqbench's naive row, so the demo's two naive rows measure one client.
 */
#include "gate.h"
#include "mqc_clock.h"
#include "mqc_request.h"

int gate_naive_request(const struct mqc_conn_opts *conn, const char *topic, const void *payload,
    size_t len, int qos, unsigned timeout_ms, struct mqp_reply *reply, char *err, size_t err_len)
{
	uint64_t deadline = mqc_now_ns() + (uint64_t)timeout_ms * MQC_NS_PER_MS;
	struct mqc_req_reply r;
	int rc = mqc_request_once(
	    conn, "gate/inbox", topic, payload, len, qos, deadline, &r, err, err_len);
	*reply = (struct mqp_reply) { .payload = r.payload, .len = r.len, .topic = r.topic };
	switch (rc) {
		case MQC_REQ_OK:
			return MQP_OK;
		case MQC_REQ_TIMEDOUT:
			return MQP_ETIMEDOUT;
		case MQC_REQ_CONNECT:
			return MQP_ECONNECT;
		case MQC_REQ_DENIED:
			return MQP_EDENIED;
		case MQC_REQ_NOMEM:
			return MQP_ENOMEM;
		default:
			return MQP_ECONNLOST;
	}
}
