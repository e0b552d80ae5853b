/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mqc_mqtt.h"

static void connect_v311_with_credentials(void **state)
{
	(void)state;
	unsigned char out[128];
	size_t n = mqc_mqtt_connect(out, sizeof out, 4, "c1", "u", "p", 60);
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
	size_t n = mqc_mqtt_connect(out, sizeof out, 5, "x", NULL, NULL, 0);
	static const unsigned char expected[]
	    = { 0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 0, 0 /* properties */, 0, 1, 'x' };
	assert_int_equal(n, sizeof expected);
	assert_memory_equal(out, expected, sizeof expected);
}

static void varint_boundaries(void **state)
{
	(void)state;
	unsigned char b[4];
	assert_int_equal(mqc_mqtt_put_varint(b, sizeof b, 127), 1);
	assert_int_equal(b[0], 127);
	assert_int_equal(mqc_mqtt_put_varint(b, sizeof b, 128), 2);
	assert_int_equal(b[0], 0x80);
	assert_int_equal(b[1], 1);
	assert_int_equal(mqc_mqtt_put_varint(b, sizeof b, 268435455), 4);
	assert_int_equal(b[3], 0x7f);
	assert_int_equal(mqc_mqtt_put_varint(b, sizeof b, 268435456), 0); /* not encodable */
	assert_int_equal(mqc_mqtt_put_varint(b, 1, 128), 0);              /* does not fit */
}

/* A long password (a JWT, say) fits when there is room, and is refused, never truncated or
 * written past the end, when there is not. */
static void connect_refuses_what_does_not_fit(void **state)
{
	(void)state;
	static char jwt[2001];
	memset(jwt, 'j', sizeof jwt - 1);
	size_t need = mqc_mqtt_connect_size("c", "u", jwt);
	unsigned char *out = malloc(need + 8);
	memset(out, 0xee, need + 8);
	size_t n = mqc_mqtt_connect(out, need, 5, "c", "u", jwt, 0);
	assert_true(n > 2000 && n <= need);
	assert_int_equal(out[need], 0xee); /* nothing past cap */
	assert_int_equal(mqc_mqtt_connect(out, n - 1, 5, "c", "u", jwt, 0), 0);
	free(out);

	static char huge[70000];
	memset(huge, 'h', sizeof huge - 1);
	unsigned char big[80000];
	assert_int_equal(mqc_mqtt_connect(big, sizeof big, 5, "c", NULL, huge, 0), 0); /* > 65535 */
	assert_int_equal(mqc_mqtt_put_str(big, sizeof big, huge), 0);
	assert_int_equal(mqc_mqtt_put_str(big, 3, "ab"), 0);
	assert_int_equal(mqc_mqtt_put_str(big, 4, "ab"), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connect_v311_with_credentials),
		cmocka_unit_test(connect_v5_anonymous),
		cmocka_unit_test(varint_boundaries),
		cmocka_unit_test(connect_refuses_what_does_not_fit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
