/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_net.h - socket options the project's programs share, and listening addresses as users type
 * them.
 */
#ifndef MQC_NET_H
#define MQC_NET_H

#include <stddef.h>
#include <sys/socket.h>

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

/**
 * Data written to the TCP socket fd and not acknowledged within ms fails the connection
 * (TCP_USER_TIMEOUT; its connect too): a link that went dark is an error in bounded time even
 * when nothing is read, instead of after tcp_retries2 (about 15 minutes). Does nothing for fd < 0
 * or ms 0; errors are ignored.
 */
void mqc_tcp_user_timeout(int fd, unsigned ms);

/**
 * A numeric address to listen on, as users type it: `IPV4:PORT`, `:PORT` (every IPv4 address),
 * `[IPV6]:PORT` (`[::]:PORT`: every address, IPv4 too unless the system says otherwise). PORT
 * 0 to 65535 (0: a free one). Fills out and *len; 0, or -1 when text is not such an address (out
 * untouched).
 */
int mqc_listen_parse(const char *text, struct sockaddr_storage *out, socklen_t *len);

/** sa (AF_INET or AF_INET6) as `host:port`, an IPv6 host bracketed; "?" for another family. */
void mqc_sockaddr_text(const struct sockaddr *sa, char *out, size_t len);

/** The port of sa (AF_INET or AF_INET6; 0 otherwise), and setting it. */
unsigned mqc_sockaddr_port(const struct sockaddr *sa);
void mqc_sockaddr_set_port(struct sockaddr *sa, unsigned port);

#endif
