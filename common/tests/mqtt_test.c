#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "mqc_mqtt.h"

static void connect_v311_with_credentials(void **state)
{
	(void)state;
	unsigned char out[128];
	size_t n = mqc_mqtt_connect(out, 4, "c1", "u", "p", 60);
	static const unsigned char expected[] = { 0x10, 20, /* CONNECT, remaining length */
		0, 4, 'M', 'Q', 'T', 'T', 4, 0xc2,              /* protocol, level 4, user+password+clean */
		0, 60,                                          /* keepalive */
		0, 2, 'c', '1', 0, 1, 'u', 0, 1, 'p' };
	assert_int_equal(n, sizeof expected);
	assert_memory_equal(out, expected, sizeof expected);
}

static void connect_v5_anonymous(void **state)
{
	(void)state;
	unsigned char out[128];
	size_t n = mqc_mqtt_connect(out, 5, "x", NULL, NULL, 0);
	static const unsigned char expected[]
	    = { 0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0 /* properties */, 0, 1, 'x' };
	assert_int_equal(n, sizeof expected);
	assert_memory_equal(out, expected, sizeof expected);
}

static void varint_boundaries(void **state)
{
	(void)state;
	unsigned char b[4];
	assert_int_equal(mqc_mqtt_put_varint(b, 127), 1);
	assert_int_equal(b[0], 127);
	assert_int_equal(mqc_mqtt_put_varint(b, 128), 2);
	assert_int_equal(b[0], 0x80);
	assert_int_equal(b[1], 1);
	assert_int_equal(mqc_mqtt_put_varint(b, 268435455), 4);
	assert_int_equal(b[3], 0x7f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connect_v311_with_credentials),
		cmocka_unit_test(connect_v5_anonymous),
		cmocka_unit_test(varint_boundaries),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
