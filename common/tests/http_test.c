/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * http_test.c - unit tests of the raw HTTP client (mqc_http.h) against a server of its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mqc_http.h"

static int listen_any(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A server that answers one byte every 50 ms for 3 s: each recv would return in time. */
static void *trickle(void *arg)
{
	int c = accept(*(int *)arg, NULL, NULL);
	for (int i = 0; i < 60 && c >= 0; i++) {
		if (send(c, "H", 1, MSG_NOSIGNAL) != 1)
			break;
		nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
	}
	close(c);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void one_deadline_for_the_whole_call(void **state)
{
	(void)state;
	int port, fd = listen_any(&port);
	pthread_t t;
	pthread_create(&t, NULL, trickle, &fd);
	struct mqc_http_response r;
	double t0 = now_s();
	assert_int_equal(mqc_http_raw(port, "GET / HTTP/1.0\r\n\r\n", 18, 400, &r), -1);
	double took = now_s() - t0;
	assert_true(took >= 0.39 && took < 1.0); /* not 3 s of bytes that each came in time */
	pthread_join(t, NULL);
	close(fd);
}

static void a_path_that_does_not_fit_is_refused_not_cut(void **state)
{
	(void)state;
	char path[600];
	memset(path, 'a', sizeof path - 1);
	path[0] = '/';
	path[sizeof path - 1] = '\0';
	struct mqc_http_response r;
	assert_int_equal(mqc_http_get(1, path, &r), -1);
	assert_int_equal(r.status, -1);
	assert_null(r.body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_deadline_for_the_whole_call),
		cmocka_unit_test(a_path_that_does_not_fit_is_refused_not_cut),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
