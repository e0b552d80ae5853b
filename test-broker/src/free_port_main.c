/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/* tb-free-port: print a TCP port that is free on 127.0.0.1 right now (for shell tests). */
#include <stdio.h>

#include "tb_internal.h"

int main(void)
{
	int port = tb__free_port();
	if (port < 0) {
		perror("tb-free-port");
		return 1;
	}
	printf("%d\n", port);
	return 0;
}
