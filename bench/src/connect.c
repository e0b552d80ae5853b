/* connect.c - placeholder until the connect scenario lands (see below). */
#include <stdio.h>

#include "mqbench.h"

int bench_run_connect(const struct bench_opts *o)
{
	(void)o;
	fprintf(stderr, "mqbench: the connect scenario is not implemented yet\n");
	return 2;
}
