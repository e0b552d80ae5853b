/* SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause */
/*
 * The hand-off between callers and the I/O thread (op.c), with no broker and no connections:
 * a fake I/O thread plays the pool's part (takes what callers post, completes each op exactly
 * once, at random times, with random results) while many caller threads post, wait with random
 * deadlines, give up, cancel, and the inbox stops or drains under them. Its point is the
 * sanitizer presets: TSan sees every field a completion publishes, ASan every reference.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mqc_clock.h"
#include "op.h"

/* --- a fake I/O thread ------------------------------------------------------------------ */

struct fake_io {
	struct op_inbox in;
	pthread_t thread;
	unsigned seed;
	unsigned complete_one_in; /* each pass completes each held op with probability 1/this */
	struct op **held;         /* ops taken and not yet completed */
	size_t nheld, cap;
	/* what it did */
	atomic_ulong woke;      /* completions a waiting caller took */
	atomic_ulong abandoned; /* completions nobody took (the caller had given up) */
	atomic_ulong callbacks; /* async completions */
	atomic_ulong cancelled; /* async ops completed with MQP_ECANCELED by a cancel */
};

static void hold(struct fake_io *io, struct op *op)
{
	if (io->nheld == io->cap) {
		io->cap = io->cap ? io->cap * 2 : 256;
		io->held = realloc(io->held, io->cap * sizeof(struct op *));
		assert_non_null(io->held);
	}
	io->held[io->nheld++] = op;
}

/* What the pool's finish() does: publish the result, wake or call back, drop the reference. */
static void complete(struct fake_io *io, struct op *op, int result)
{
	op->slot = (unsigned)op->line * 7u; /* a field the waiter may read only after a true wait */
	if (op->done_cb) {
		op->done_cb(op->userdata, result);
		atomic_fetch_add(&io->callbacks, 1);
	} else if (mqp__op_complete(op, result)) {
		atomic_fetch_add(&io->woke, 1);
	} else {
		atomic_fetch_add(&io->abandoned, 1);
	}
	mqp__inbox_done(&io->in);
	mqp__op_unref(op);
}

static void take(struct fake_io *io)
{
	for (struct op *op = mqp__inbox_take(&io->in), *next; op; op = next) {
		next = op->queue_next;
		if (op->kind != OP_CANCEL) {
			hold(io, op);
			continue;
		}
		for (size_t i = 0; i < io->nheld; i++) /* the target, if it has not completed yet */
			if (io->held[i]->ticket == op->ticket_target) {
				complete(io, io->held[i], MQP_ECANCELED);
				atomic_fetch_add(&io->cancelled, 1);
				io->held[i] = io->held[--io->nheld];
				break;
			}
		complete(io, op, MQP_OK);
	}
}

static void *fake_io_main(void *arg)
{
	struct fake_io *io = arg;
	for (;;) {
		struct pollfd pfd = { .fd = io->in.evfd, .events = POLLIN };
		struct timespec pass = { .tv_nsec = 100000 };
		ppoll(&pfd, 1, &pass, NULL);
		bool stopping = mqp__inbox_stopping(&io->in);
		take(io);
		for (size_t i = 0; i < io->nheld;) {
			if (stopping || rand_r(&io->seed) % io->complete_one_in == 0) {
				complete(io, io->held[i], stopping ? MQP_ECLOSED : MQP_OK);
				io->held[i] = io->held[--io->nheld];
			} else {
				i++;
			}
		}
		if (stopping) { /* nothing can be posted any more: one last look, then done */
			take(io);
			for (size_t i = 0; i < io->nheld; i++)
				complete(io, io->held[i], MQP_ECLOSED);
			io->nheld = 0;
			return NULL;
		}
	}
}

static struct fake_io *fake_io_start(unsigned complete_one_in)
{
	struct fake_io *io = calloc(1, sizeof *io);
	assert_non_null(io);
	assert_int_equal(mqp__inbox_init(&io->in), 0);
	io->seed = 12345;
	io->complete_one_in = complete_one_in;
	assert_int_equal(pthread_create(&io->thread, NULL, fake_io_main, io), 0);
	return io;
}

/* Stop it and wait until it has completed everything (what it counted stays readable). */
static void fake_io_stop(struct fake_io *io)
{
	mqp__inbox_stop(&io->in, false);
	pthread_join(io->thread, NULL);
	assert_int_equal(atomic_load(&io->in.outstanding), 0); /* every posted op completed */
}

static void fake_io_free(struct fake_io *io)
{
	mqp__inbox_free(&io->in);
	free(io->held);
	free(io);
}

/* --- callers ---------------------------------------------------------------------------- */

enum { CALLERS = 8 };

struct caller {
	struct fake_io *io;
	pthread_t thread;
	unsigned seed;
	int ops;
	int base;             /* ids base..base+ops-1 */
	unsigned max_wait_us; /* each wait: a random deadline up to this */
	/* what it saw */
	unsigned long ok, gave_up, closed, refused;
};

/* One blocking call as api.c makes it: post, wait, read the result only after a true wait. */
static void *blocking_caller(void *arg)
{
	struct caller *c = arg;
	for (int k = 0; k < c->ops; k++) {
		uint64_t wait_ns = (uint64_t)(rand_r(&c->seed) % (c->max_wait_us + 1)) * MQC_NS_PER_US;
		struct op *op = mqp__op_new(OP_REQUEST, "t", "x", 1, 0, 0, mqc_now_ns() + wait_ns);
		assert_non_null(op);
		op->line = c->base + k;
		if (mqp__inbox_post(&c->io->in, op, NULL) != MQP_OK) {
			c->refused++; /* freed by the refusal */
			continue;
		}
		if (mqp__op_wait(op, op->deadline)) {
			if (op->result == MQP_OK) {
				assert_int_equal(op->slot, (unsigned)op->line * 7u);
				c->ok++;
			} else {
				assert_int_equal(op->result, MQP_ECLOSED);
				c->closed++;
			}
		} else {
			c->gave_up++;
		}
		mqp__op_unref(op);
	}
	return NULL;
}

static void start_callers(
    struct caller *cs, struct fake_io *io, int ops, unsigned max_wait_us, void *(*main)(void *))
{
	for (int i = 0; i < CALLERS; i++) {
		cs[i] = (struct caller) { .io = io,
			.seed = (unsigned)i + 1,
			.ops = ops,
			.base = i * ops,
			.max_wait_us = max_wait_us };
		assert_int_equal(pthread_create(&cs[i].thread, NULL, main, &cs[i]), 0);
	}
}

static void every_wait_meets_its_completion_exactly_once(void **state)
{
	(void)state;
	struct fake_io *io = fake_io_start(3);
	struct caller cs[CALLERS];
	start_callers(cs, io, 2000, 400, blocking_caller);
	unsigned long ok = 0, gave_up = 0;
	for (int i = 0; i < CALLERS; i++) {
		pthread_join(cs[i].thread, NULL);
		ok += cs[i].ok;
		gave_up += cs[i].gave_up;
		assert_int_equal(cs[i].refused + cs[i].closed, 0);
	}
	fake_io_stop(io);
	/* Each completion went to exactly one side: a waiter that took it, or nobody. */
	assert_int_equal(ok + gave_up, CALLERS * 2000);
	assert_int_equal(atomic_load(&io->woke), ok);
	assert_int_equal(atomic_load(&io->abandoned), gave_up);
	/* Both paths ran, many times: the test is about their races. */
	assert_true(ok > 100 && gave_up > 100);
	fake_io_free(io);
}

/* --- async calls and cancels ------------------------------------------------------------ */

struct async_call {
	atomic_int calls;
	atomic_int result;
};

static void async_done(void *userdata, int result)
{
	struct async_call *a = userdata;
	atomic_store(&a->result, result);
	atomic_fetch_add(&a->calls, 1);
}

enum { ASYNC_OPS = 1500 };

struct async_caller {
	struct fake_io *io;
	pthread_t thread;
	unsigned seed;
	struct async_call calls[ASYNC_OPS];
	mqp_ticket last_ticket;
};

static void *async_caller_main(void *arg)
{
	struct async_caller *c = arg;
	for (int k = 0; k < ASYNC_OPS; k++) {
		struct op *op = mqp__op_new(OP_REQUEST, "t", "x", 1, 0, 0, UINT64_MAX);
		assert_non_null(op);
		atomic_store(&op->refs, 1); /* async: the I/O thread's reference only */
		op->done_cb = async_done;
		op->userdata = &c->calls[k];
		mqp_ticket ticket = 0;
		assert_int_equal(mqp__inbox_post(&c->io->in, op, &ticket), MQP_OK);
		assert_true(ticket > c->last_ticket); /* issued in order, never 0 */
		c->last_ticket = ticket;
		if (rand_r(&c->seed) % 2) { /* cancel every other one: before or after it completes */
			struct op *cancel = mqp__op_new(OP_CANCEL, "", NULL, 0, 0, 0, UINT64_MAX);
			assert_non_null(cancel);
			atomic_store(&cancel->refs, 1);
			cancel->ticket_target = ticket;
			assert_int_equal(mqp__inbox_post(&c->io->in, cancel, NULL), MQP_OK);
		}
	}
	return NULL;
}

static void every_async_call_is_called_back_exactly_once(void **state)
{
	(void)state;
	struct fake_io *io = fake_io_start(4);
	struct async_caller *cs = calloc(CALLERS / 2, sizeof *cs);
	assert_non_null(cs);
	for (int i = 0; i < CALLERS / 2; i++) {
		cs[i].io = io;
		cs[i].seed = (unsigned)i + 100;
		assert_int_equal(pthread_create(&cs[i].thread, NULL, async_caller_main, &cs[i]), 0);
	}
	for (int i = 0; i < CALLERS / 2; i++)
		pthread_join(cs[i].thread, NULL);
	fake_io_stop(io); /* what is still held completes with MQP_ECLOSED */
	unsigned long cancelled = 0;
	for (int i = 0; i < CALLERS / 2; i++)
		for (int k = 0; k < ASYNC_OPS; k++) {
			assert_int_equal(atomic_load(&cs[i].calls[k].calls), 1);
			int r = atomic_load(&cs[i].calls[k].result);
			assert_true(r == MQP_OK || r == MQP_ECANCELED || r == MQP_ECLOSED);
			cancelled += r == MQP_ECANCELED;
		}
	assert_int_equal(cancelled, atomic_load(&io->cancelled));
	assert_true(cancelled > 0);
	fake_io_free(io);
	free(cs);
}

/* --- stop and drain --------------------------------------------------------------------- */

/* Posts until refused; every wait is long, so only the stop ends them. */
static void *posting_until_refused(void *arg)
{
	struct caller *c = arg;
	for (int k = 0;; k++) {
		struct op *op
		    = mqp__op_new(OP_REQUEST, "t", "x", 1, 0, 0, mqc_now_ns() + 10 * MQC_NS_PER_S);
		assert_non_null(op);
		op->line = c->base + k;
		if (mqp__inbox_post(&c->io->in, op, NULL) != MQP_OK) {
			c->refused++;
			return NULL;
		}
		assert_true(mqp__op_wait(op, op->deadline)); /* never a give-up: the I/O answers all */
		if (op->result == MQP_OK)
			c->ok++;
		else
			c->closed += op->result == MQP_ECLOSED;
		mqp__op_unref(op);
	}
}

static void a_stop_while_callers_post_leaves_nobody_waiting(void **state)
{
	(void)state;
	struct fake_io *io = fake_io_start(2);
	struct caller cs[CALLERS];
	start_callers(cs, io, 0, 0, posting_until_refused);
	usleep(30 * 1000); /* not a measurement: just let them get going */
	uint64_t t0 = mqc_now_ns();
	mqp__inbox_stop(&io->in, false);
	unsigned long ok = 0;
	for (int i = 0; i < CALLERS; i++) {
		pthread_join(cs[i].thread, NULL);
		assert_int_equal(cs[i].refused, 1); /* each one's last post, after the stop */
		ok += cs[i].ok;
	}
	/* Nobody waited out a 10 s deadline: the stop completed everything at once. */
	assert_true(mqc_now_ns() - t0 < 5 * MQC_NS_PER_S);
	assert_true(ok > 0);
	pthread_join(io->thread, NULL);
	assert_int_equal(atomic_load(&io->in.outstanding), 0);
	struct op *late = mqp__op_new(OP_RELEASE, "", NULL, 0, 0, 0, UINT64_MAX);
	assert_int_equal(mqp__inbox_post(&io->in, late, NULL), MQP_ECLOSED); /* even a release */
	fake_io_free(io);
}

static atomic_int slow_returned;

static void slow_done(void *userdata, int result)
{
	(void)userdata;
	(void)result;
	usleep(1000);
	atomic_fetch_add(&slow_returned, 1);
}

static void drain_returns_after_the_last_callback_returned(void **state)
{
	(void)state;
	struct fake_io *io = fake_io_start(8);
	enum { N = 100 };
	atomic_store(&slow_returned, 0);
	for (int k = 0; k < N; k++) {
		struct op *op = mqp__op_new(OP_PUBLISH, "t", "x", 1, 0, 0, UINT64_MAX);
		atomic_store(&op->refs, 1);
		op->done_cb = slow_done;
		assert_int_equal(mqp__inbox_post(&io->in, op, NULL), MQP_OK);
	}
	assert_int_equal(mqp__inbox_drain(&io->in, NULL, 10000), MQP_OK);
	assert_int_equal(atomic_load(&slow_returned), N); /* not one callback still running */
	/* Draining: new work is refused, a lease's release is not. */
	struct op *fresh = mqp__op_new(OP_REQUEST, "t", "x", 1, 0, 0, UINT64_MAX);
	assert_int_equal(mqp__inbox_post(&io->in, fresh, NULL), MQP_ECLOSED);
	struct op *release = mqp__op_new(OP_RELEASE, "", NULL, 0, 0, 0, UINT64_MAX);
	atomic_store(&release->refs, 1);
	assert_int_equal(mqp__inbox_post(&io->in, release, NULL), MQP_OK);
	/* A count drain also waits for (leases out): it times out while one is held. */
	atomic_uint leased = 1;
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp__inbox_drain(&io->in, &leased, 50), MQP_ETIMEDOUT);
	assert_true(mqc_now_ns() - t0 >= 50 * MQC_NS_PER_MS);
	fake_io_stop(io);
	fake_io_free(io);
}

struct lease_out {
	struct op_inbox in;
	atomic_uint leased;
};

static void *release_later(void *arg)
{
	struct lease_out *s = arg;
	usleep(20 * 1000);
	atomic_store(&s->leased, 0);
	mqp__inbox_wake_drainers(&s->in);
	return NULL;
}

static void drain_wakes_when_the_last_lease_returns(void **state)
{
	(void)state;
	struct lease_out s;
	assert_int_equal(mqp__inbox_init(&s.in), 0);
	atomic_init(&s.leased, 1);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, release_later, &s), 0);
	uint64_t t0 = mqc_now_ns();
	assert_int_equal(mqp__inbox_drain(&s.in, &s.leased, 10000), MQP_OK);
	/* Not before the release (by the count, not by a clock: this thread may be descheduled
	 * between starting the releaser and reading t0), and woken rather than timed out. */
	assert_int_equal(atomic_load(&s.leased), 0);
	assert_true(mqc_now_ns() - t0 < 5 * MQC_NS_PER_S);
	pthread_join(t, NULL);
	mqp__inbox_free(&s.in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_wait_meets_its_completion_exactly_once),
		cmocka_unit_test(every_async_call_is_called_back_exactly_once),
		cmocka_unit_test(a_stop_while_callers_post_leaves_nobody_waiting),
		cmocka_unit_test(drain_returns_after_the_last_callback_returned),
		cmocka_unit_test(drain_wakes_when_the_last_lease_returns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
