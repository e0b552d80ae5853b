/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * verdict.c - whether a broker speaks only MQTT 3.1.1, in words (mqc_verdict.h).
 */
#include "mqc_verdict.h"

#include <stdio.h>

#include "mqc_codec.h"

bool mqc_v5_refused(uint8_t code, bool v311_form)
{
	return v311_form ? code == 1 : code == MQC_RC_UNSUPPORTED_PROTOCOL;
}

void mqc_v5_refused_cause(uint8_t code, bool v311_form, char *out, size_t len)
{
	snprintf(out, len,
	    v311_form ? "answered the MQTT 5 CONNECT with a 3.1.1 CONNACK (3.1.1 return code %u: %s)"
	              : "answered the MQTT 5 CONNECT with a CONNACK (reason code 0x%02X: %s)",
	    code, mqc_connack_text(code, v311_form));
}

void mqc_v5_closed_cause(const char *sent, char *out, size_t len)
{
	snprintf(out, len,
	    "closed the connection in answer to an MQTT 5 CONNECT without a CONNACK (%s)", sent);
}

void mqc_v311_seen(bool answered, uint8_t code, const char *why, char *out, size_t len)
{
	if (answered && code == 0)
		snprintf(out, len, "an MQTT 3.1.1 CONNECT right after was accepted");
	else if (answered)
		snprintf(out, len, "an MQTT 3.1.1 CONNECT right after was refused too (return code %u: %s)",
		    code, mqc_connack_text(code, true));
	else
		snprintf(out, len, "an MQTT 3.1.1 CONNECT right after fared no better (%s)", why);
}

void mqc_v5_verdict(const struct mqc_v5_check *c, char *out, size_t len)
{
	if (c->said)
		snprintf(out, len, "the broker at %s does not accept MQTT 5 (confirmed: it %s; %s)%s%s",
		    c->where, c->cause, c->seen, c->v311_works ? ": " : "", c->v311_works ? c->fix : "");
	else if (c->v311_works)
		snprintf(out, len,
		    "the broker at %s %s; %s: if it speaks only MQTT 3.1.1 (RabbitMQ 3 closes an MQTT 5 "
		    "CONNECT so), %s (not confirmed: it did not say why it closed)",
		    c->where, c->cause, c->seen, c->fix);
	else
		snprintf(out, len,
		    "the broker at %s %s, and %s: not a matter of the protocol version as far as can be "
		    "seen; a broker at its connection limit (mosquitto's max_connections, or its open-file "
		    "limit), a proxy or a firewall closes connections like this",
		    c->where, c->cause, c->seen);
}
