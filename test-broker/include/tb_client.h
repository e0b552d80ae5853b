/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * tb_client.h - a small synchronous MQTT client for tests, on libmosquitto.
 *
 * Every call drives the connection itself (mosquitto_loop) until its answer arrives or its
 * deadline passes, so tests read top to bottom and never hang. Received messages are queued
 * until tb_client_receive() takes them.
 *
 * Threads: a client belongs to the thread that created it.
 */
#ifndef TB_CLIENT_H
#define TB_CLIENT_H

#include <mosquitto.h>
#include <stdbool.h>
#include <stddef.h>

struct tb_client_options {
	const char *url; /* mqtt:// or mqtts:// */
	const char *username, *password;
	const char *cafile;     /* required for mqtts:// */
	const char *cert, *key; /* client certificate */
	const char *client_id;  /* NULL: generated */
	int protocol;           /* 5 (default when 0) or 4 for 3.1.1 */
	int timeout_ms;         /* per operation; 0: 5000 */
};

struct tb_message {
	char *topic;
	void *payload;
	int payloadlen;
	int qos;
	bool retain;
	mosquitto_property *props; /* v5 properties as received */
	struct tb_message *next;
};

struct tb_client;

/**
 * Connect and wait for CONNACK. Returns 0 when accepted; otherwise -1 with err describing why
 * and *reason set to the CONNACK code (v5 reason code or 3.1.1 return code), or -1 when no
 * CONNACK came (TCP or TLS failure, timeout).
 */
int tb_client_connect(const struct tb_client_options *options, struct tb_client **out, int *reason,
    char *err, size_t errlen);

/** Subscribe and wait for SUBACK. Returns the granted QoS / reason code, or -1 on timeout. */
int tb_client_subscribe(
    struct tb_client *c, const char *filter, int qos, int options, const mosquitto_property *props);

/**
 * Publish; for QoS 1/2 wait for the acknowledgement. Returns 0, the v5 PUBACK/PUBCOMP reason code
 * when it is an error (>= 0x80), or -1 on failure or timeout. props are copied.
 */
int tb_client_publish(struct tb_client *c, const char *topic, const void *payload, int len, int qos,
    bool retain, const mosquitto_property *props);

/** Take the next received message, waiting up to timeout_ms. Returns NULL on timeout. */
struct tb_message *tb_client_receive(struct tb_client *c, int timeout_ms);

void tb_message_free(struct tb_message *m);

/** Disconnect cleanly and free. Accepts NULL. */
void tb_client_destroy(struct tb_client *c);

#endif
