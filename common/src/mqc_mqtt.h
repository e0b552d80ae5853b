/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_mqtt.h - the few MQTT packets the raw-socket clients write themselves (the connect storm
 * and the probe's overhead benchmark): strings, remaining lengths, CONNECT.
 *
 * Every writer is told how much room it has and writes nothing that does not fit: it returns the
 * bytes written, or 0 when the value cannot be encoded (a string over 65,535 bytes, a remaining
 * length over 268,435,455) or does not fit in cap. No valid result is 0 bytes long.
 */
#ifndef MQC_MQTT_H
#define MQC_MQTT_H

#include <stdbool.h>
#include <stddef.h>

#define MQC_MQTT_STR_MAX    65535u
#define MQC_MQTT_VARINT_MAX 268435455u

/** A two-byte length and the bytes of s. */
size_t mqc_mqtt_put_str(unsigned char *out, size_t cap, const char *s);

/** A remaining length (1-4 bytes, 7 bits each). */
size_t mqc_mqtt_put_varint(unsigned char *out, size_t cap, size_t value);

/** A fixed header (type byte, remaining length) and body (which may lie inside out). */
size_t mqc_mqtt_packet(
    unsigned char *out, size_t cap, unsigned char type, const unsigned char *body, size_t len);

/** The bytes mqc_mqtt_connect needs for these strings (NULL: absent). */
size_t mqc_mqtt_connect_size(const char *client_id, const char *username, const char *password);

/**
 * A CONNECT packet with clean start: protocol 4 (3.1.1) or 5 (no properties), optional username
 * and password. Returns the packet length, or 0 when a string is over 65,535 bytes or the packet
 * does not fit in cap.
 */
size_t mqc_mqtt_connect(unsigned char *out, size_t cap, int protocol, const char *client_id,
    const char *username, const char *password, unsigned keepalive);

/**
 * A CONNACK's code in words: an MQTT 5 reason code, or, when v311, a 3.1.1 return code (which
 * are different numbers: 3.1.1's 1 is "unacceptable protocol version", v5's 0x01 is no CONNACK
 * code at all). "accepted" for 0; never NULL.
 */
const char *mqc_mqtt_connack_text(unsigned code, bool v311);

/** An MQTT 5 reason code in words (PUBACK, SUBACK, DISCONNECT, ...). Never NULL. */
const char *mqc_mqtt_reason_text(unsigned code);

#endif
