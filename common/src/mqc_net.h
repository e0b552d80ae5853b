/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_net.h - socket options the project's MQTT clients share.
 */
#ifndef MQC_NET_H
#define MQC_NET_H

/**
 * Acknowledge what arrives next on the TCP socket fd at once (TCP_QUICKACK). The kernel leaves
 * quick-ack mode by itself, so call this after every read.
 *
 * Why: a broker that keeps mosquitto's default `set_tcp_nodelay false` holds a small packet while
 * an earlier one is unacknowledged (Nagle's algorithm), and a client that has nothing to send
 * delays its ACK (up to 40 ms on Linux). Acknowledging at once turns that wait into one round
 * trip. Does nothing for fd < 0; errors (a socket that is not TCP) are ignored. The environment
 * variable MQTTPOOL_TCP_QUICKACK=0 turns it off, to measure what it does.
 */
void mqc_tcp_quickack(int fd);

#endif
