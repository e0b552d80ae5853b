/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * conn.h - a pooled connection's life and its MQTT session (codec.h over wire.h) (conn.c). I/O
 * thread only. Completing what it carries is finish.h's; its node's health and liveness node.h's;
 * what the session sends session.h's; the legacy model's reply topics legacy.h's.
 *
 * Packets are queued in the connection's send buffer as operations start and as the broker's
 * packets ask for answers (PUBACK, PUBREC, PUBCOMP); the I/O loop sends every connection's queue
 * once per turn (mqp__conn_flush).
 */
#ifndef MQP_CONN_H
#define MQP_CONN_H

#include "finish.h"
#include "legacy.h"
#include "pool.h"
#include "session.h"

/* Start connecting slot c; on failure c stays closed and the pool backs off. */
void mqp__conn_open(struct mqp_pool *p, struct pconn *c, unsigned node);
/* c's broker name is being resolved: if the answer is in, the connect starts (or fails). */
void mqp__conn_poll(struct mqp_pool *p, struct pconn *c);
/* Close c now: its calls fail with MQP_ECONNLOST, its lease's messages are dropped. */
void mqp__conn_close(struct mqp_pool *p, struct pconn *c);
/* Say goodbye (DISCONNECT, sent at once) and close (the pool's end: nothing waits). */
void mqp__conn_disconnect(struct mqp_pool *p, struct pconn *c);
/* Retire c as a client should: its calls fail with MQP_ECONNLOST, DISCONNECT goes out and our
 * side is shut, and the socket closes once the broker has closed its side (or after two seconds):
 * what it sends meanwhile is read and dropped, so the close is never a reset. The slot stays
 * taken meanwhile (STAGE_CLOSING), counted as neither ready nor connecting. */
void mqp__conn_retire(struct mqp_pool *p, struct pconn *c);
/* epoll said c's socket is ready (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP): read, handle every
 * complete packet, answer what needs an answer (queued for the flush). */
void mqp__conn_io(struct mqp_pool *p, struct pconn *c, uint32_t events);
/* The end of a loop turn: send what c queued, in one send. */
void mqp__conn_flush(struct mqp_pool *p, struct pconn *c);
/* Every mqp__live_interval_ms: a retiring connection the broker never closed is closed, and
 * liveness is checked (mqp__live_check: pings, and the end of a connection nobody answers). */
void mqp__conn_misc(struct mqp_pool *p, struct pconn *c, uint64_t now);
/* After anything that may have ended c (an error, a DISCONNECT): close it, back off. */
void mqp__conn_settle(struct mqp_pool *p, struct pconn *c);

#endif
