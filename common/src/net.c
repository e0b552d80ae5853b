/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * net.c - socket options the project's MQTT clients share.
 */
#include "mqc_net.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* -1 not read yet, 0 off, 1 on: MQTTPOOL_TCP_QUICKACK=0 turns it off (to measure it). */
static atomic_int quickack = -1;

void mqc_tcp_quickack(int fd)
{
	int on = atomic_load_explicit(&quickack, memory_order_relaxed);
	if (on < 0) {
		const char *v = getenv("MQTTPOOL_TCP_QUICKACK");
		on = !(v && strcmp(v, "0") == 0);
		atomic_store_explicit(&quickack, on, memory_order_relaxed);
	}
	if (!on || fd < 0)
		return;
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}
