/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_verdict.h - "does this broker speak only MQTT 3.1.1?" in words (verdict.c): the one text of
 * every part that asks (the pool, and through the shared client mqbench, the responder and the
 * gateway's naive route).
 *
 * When an MQTT 5 CONNECT fails without an ordinary refusal, a part sends one MQTT 3.1.1 CONNECT to
 * the same address and says what both met. "does not accept MQTT 5 (confirmed ...)" only when the
 * broker said so (a CONNACK refusing the protocol version); a close without a CONNACK is said as
 * what it is, with 3.1.1's acceptance only as a possibility: a broker that disliked a value of the
 * CONNECT closes it the same way.
 */
#ifndef MQC_VERDICT_H
#define MQC_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What an MQTT 5 CONNECT met, and what one MQTT 3.1.1 CONNECT to the same address then met. */
struct mqc_v5_check {
	const char *where; /* the broker's address, as the user gave it */
	const char *cause; /* what the MQTT 5 CONNECT met, after "the broker at WHERE ":
	                      mqc_v5_refused_cause() or mqc_v5_closed_cause() */
	bool said;         /* the broker said so: a CONNACK refusing the protocol version */
	bool v311_works;   /* the 3.1.1 CONNECT was accepted (and it was the protocol) */
	const char *seen;  /* what the 3.1.1 CONNECT met: mqc_v311_seen(), or the caller's words */
	const char *fix;   /* how to speak 3.1.1 with this tool ("use --protocol 3.1.1") */
};

/* Whether a CONNACK to an MQTT 5 CONNECT refuses its protocol version: a v5 one with reason code
 * 0x84, or a 3.1.1-shaped one (v311_form) with return code 1 (aedes answers so). */
bool mqc_v5_refused(uint8_t code, bool v311_form);

/* The cause for such a CONNACK: "answered the MQTT 5 CONNECT with a 3.1.1 CONNACK (3.1.1 return
 * code 1: unacceptable protocol version)". */
void mqc_v5_refused_cause(uint8_t code, bool v311_form, char *out, size_t len);

/* The cause for a close without a CONNACK, sent describing the CONNECT ("it was 60 bytes: clean
 * start, Keep Alive 30 s, ..."). */
void mqc_v5_closed_cause(const char *sent, char *out, size_t len);

/* What the 3.1.1 CONNECT met: accepted (answered, code 0), refused with a return code (answered),
 * or no answer (why). */
void mqc_v311_seen(bool answered, uint8_t code, const char *why, char *out, size_t len);

/* The verdict in words, from "the broker at WHERE ...". */
void mqc_v5_verdict(const struct mqc_v5_check *c, char *out, size_t len);

#endif
