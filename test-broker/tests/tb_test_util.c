#include "tb_test_util.h"

#include <stdio.h>
#include <stdlib.h>

static struct tb_broker *broker;

struct tb_broker *tb_test_broker(void)
{
	return broker;
}

const struct tb_info *tb_test_info(void)
{
	return tb_broker_info(broker);
}

struct tb_client *tb_test_connect(const char *url, int protocol)
{
	const struct tb_info *info = tb_test_info();
	struct tb_client_options o = {
		.url = url,
		.username = info->username,
		.password = info->password,
		.cafile = info->ca_file,
		.protocol = protocol,
	};
	struct tb_client *c = NULL;
	int reason;
	char err[256];
	if (tb_client_connect(&o, &c, &reason, err, sizeof err) != 0)
		fail_msg("connect to %s: %s", url, err);
	return c;
}

int tb_test_run(const char *name, const struct CMUnitTest *tests, size_t count,
    const struct tb_options *options)
{
	char err[1024];
	if (tb_broker_start(options, &broker, err, sizeof err) != 0) {
		fprintf(stderr, "%s: cannot start the test broker: %s\n", name, err);
		return 1;
	}
	int failed = _cmocka_run_group_tests(name, tests, count, NULL, NULL);
	if (failed)
		tb_broker_dump_log(broker, stderr);
	tb_broker_stop(broker);
	return failed;
}
