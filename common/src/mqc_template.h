/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_template.h - where a legacy device answers a command (template.c): the one reply-topic
 * template language of every tool (the responder, mqbench, the gateway).
 *
 * A template is a topic with placeholders: {topic} is the whole command topic, {1} to {9} its
 * levels (1-based). The default, replies/{topic}, puts every reply outside any command filter
 * (devices/+/commands/# included): a device subscribed to its commands never takes its own reply
 * for a command.
 */
#ifndef MQC_TEMPLATE_H
#define MQC_TEMPLATE_H

#include <stddef.h>

#define MQC_REPLY_TEMPLATE_DEFAULT "replies/{topic}"

/**
 * Whether tpl is a template: every brace closes, names {topic} or {1}..{9}, and no wildcard
 * ('+', '#') stands outside a placeholder. 0, or -1 with why in words ("unknown placeholder
 * {prefix}", "a wildcard outside a placeholder", ...).
 */
int mqc_template_check(const char *tpl, char *why, size_t len);

/**
 * The reply topic of tpl for the command topic, NUL-terminated in out. Returns its length, or -1
 * when it does not fit in len, names a level the topic does not have, or tpl is not a template.
 */
int mqc_template_expand(const char *tpl, const char *topic, char *out, size_t len);

#endif
