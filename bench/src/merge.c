#include <stdio.h>

#include "mqbench.h"

int bench_merge(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "mqbench: merge is not implemented yet\n");
	return 2;
}
