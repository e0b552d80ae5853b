/*
 * mqc_mqtt.h - the few MQTT packets the raw-socket clients write themselves (the connect storm
 * and the probe's overhead benchmark): strings, remaining lengths, CONNECT.
 */
#ifndef MQC_MQTT_H
#define MQC_MQTT_H

#include <stddef.h>

/** A two-byte length and the bytes of s. Returns the bytes written. */
size_t mqc_mqtt_put_str(unsigned char *out, const char *s);

/** A remaining length (1-4 bytes, 7 bits each). Returns the bytes written. */
size_t mqc_mqtt_put_varint(unsigned char *out, size_t value);

/** A fixed header (type byte, remaining length) and body into out. Returns the packet length. */
size_t mqc_mqtt_packet(
    unsigned char *out, unsigned char type, const unsigned char *body, size_t len);

/**
 * A CONNECT packet with clean start: protocol 4 (3.1.1) or 5 (no properties), optional username
 * and password. out must hold 32 bytes plus the strings. Returns the packet length.
 */
size_t mqc_mqtt_connect(unsigned char *out, int protocol, const char *client_id,
    const char *username, const char *password, unsigned keepalive);

#endif
