/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * mqc_mhd.h - absolute deadlines for libmicrohttpd connections.
 *
 * libmicrohttpd's connection timeout is per idle period: a client that sends a byte every few
 * seconds keeps a connection (and, thread per connection, a thread) for as long as it likes.
 * A watcher holds a dup() of every connection's socket and shuts it down when the connection's
 * deadline passes; libmicrohttpd then sees the end of the stream and closes it. Shutting down
 * our own duplicate never touches a descriptor number libmicrohttpd may already have closed and
 * the process reused.
 *
 * A deadline is armed when the connection starts. A server that wants it only for receiving a
 * request (headers and body) disarms it once the body is in and re-arms it when the response is
 * complete (the next request on a kept-alive connection gets a fresh deadline).
 */
#ifndef MQC_MHD_H
#define MQC_MHD_H

#include <microhttpd.h>

struct mqc_mhd_deadline;

/**
 * A watcher for at most max_connections connections (the daemon's MHD_OPTION_CONNECTION_LIMIT),
 * each cut deadline_ms after it was (re-)armed. Starts its thread. NULL when out of memory or
 * threads.
 */
struct mqc_mhd_deadline *mqc_mhd_deadline_new(unsigned max_connections, unsigned deadline_ms);

/** Pass as MHD_OPTION_NOTIFY_CONNECTION, with the watcher as its closure. */
void mqc_mhd_deadline_notify(void *watcher, struct MHD_Connection *connection,
    void **socket_context, enum MHD_ConnectionNotificationCode code);

/** The connection's request is in (stop the clock), or its response is done (start it again). */
void mqc_mhd_deadline_disarm(struct mqc_mhd_deadline *w, struct MHD_Connection *connection);
void mqc_mhd_deadline_arm(struct mqc_mhd_deadline *w, struct MHD_Connection *connection);

/** Connections cut at their deadline so far. */
unsigned long mqc_mhd_deadline_cut(struct mqc_mhd_deadline *w);

/** Stop the thread and free. Call after MHD_stop_daemon. NULL is fine. */
void mqc_mhd_deadline_free(struct mqc_mhd_deadline *w);

#endif
