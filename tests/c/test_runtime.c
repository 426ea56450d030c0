/* test_runtime.c - runtime: environment parsing, queues, events, sticky errors, launch blocking,
 * thread pool, concurrent launches, memcpy, trace, pinned host memory, the target interface. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctest.h"
#include "nrt.h"
#include "nrt_target.h"
#include "nrt_observe.h"

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* ---- kernels used by the tests ---------------------------------------------------------------- */
struct append_args {
	int *log;
	atomic_int *n;
	int value;
};

static int k_append(void *p)
{
	struct append_args *a = p;

	a->log[atomic_fetch_add(a->n, 1)] = a->value;
	return 0;
}

struct count_args {
	atomic_int *n;
};

static int k_count(void *p)
{
	struct count_args *a = p;

	atomic_fetch_add(a->n, 1);
	return 0;
}

static int k_fail(void *p)
{
	nrt_kernel_fail("bad index %d", *(int *)p);
	return 1;
}

static int k_sleep(void *p)
{
	sleep_ms(*(int *)p);
	return 0;
}

struct flag_args {
	atomic_int *flag;
	int value;
	int delay_ms;
};

static int k_set_flag(void *p)
{
	struct flag_args *a = p;

	if (a->delay_ms)
		sleep_ms(a->delay_ms);
	atomic_store(a->flag, a->value);
	return 0;
}

struct read_args {
	atomic_int *flag;
	int *seen;
};

static int k_read_flag(void *p)
{
	struct read_args *a = p;

	*a->seen = atomic_load(a->flag);
	return 0;
}

struct self_args {
	pthread_t *who;
};

static int k_whoami(void *p)
{
	struct self_args *a = p;

	*a->who = pthread_self();
	return 0;
}

/* ---- environment ------------------------------------------------------------------------------- */
static void test_env_parse_good(void)
{
	static const struct { const char *s; int n; } cores[] = {
		{ "0", 1 }, { "0-1", 2 }, { "0,2", 2 }, { "3", 1 }, { "0-3,5", 5 }, { "1,0", 2 },
	};
	static const struct { const char *s; size_t n; } bytes[] = {
		{ "1024", 1024 }, { "4GiB", (size_t)4 << 30 }, { "512MiB", (size_t)512 << 20 },
		{ "4G", (size_t)4 << 30 }, { "1K", 1024 }, { "2KB", 2048 }, { "3mb", (size_t)3 << 20 },
		{ "1TiB", (size_t)1 << 40 }, { "100B", 100 },
	};

	for (size_t i = 0; i < sizeof cores / sizeof *cores; i++) {
		int n = -1;
		int rc = nrt_parse_visible_cores(cores[i].s, &n);

		CHECK(rc == NRT_OK && n == cores[i].n, "cores \"%s\": rc %d n %d", cores[i].s, rc, n);
	}
	for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++) {
		size_t n = 0;
		int rc = nrt_parse_bytes(bytes[i].s, &n);

		CHECK(rc == NRT_OK && n == bytes[i].n, "bytes \"%s\": rc %d n %zu", bytes[i].s, rc, n);
	}
}

static void test_env_parse_garbage(void)
{
	static const char *const cores[] = { "abc", "1-0", "", "0,,1", "-1", "0,", ",0", "0-", "1 ", "0,0",
					     "0-1,1", "0x1", "99999999999999999999", "0-100" };
	static const char *const bytes[] = { "abc", "", "1.5GiB", "4XB", "-1", "99999999999999999999",
					     "0", "4 GiB", "GiB", "12Gi", "1e9", "4GiBs" };

	for (size_t i = 0; i < sizeof cores / sizeof *cores; i++) {
		int n = -1;
		int rc = nrt_parse_visible_cores(cores[i], &n);
		char want[64];

		snprintf(want, sizeof want, "\"%s\"", cores[i]);
		CHECK(rc == NRT_ERR_ENV, "cores \"%s\": rc %d", cores[i], rc);
		CHECK(strstr(nrt_last_error(), "NEURON_RT_VISIBLE_CORES") && strstr(nrt_last_error(), want),
		      "message: %s", nrt_last_error());
		CHECK(n == -1, "count written on error");
	}
	for (size_t i = 0; i < sizeof bytes / sizeof *bytes; i++) {
		size_t n = 7;
		int rc = nrt_parse_bytes(bytes[i], &n);
		char want[64];

		snprintf(want, sizeof want, "\"%s\"", bytes[i]);
		CHECK(rc == NRT_ERR_ENV, "bytes \"%s\": rc %d", bytes[i], rc);
		CHECK(strstr(nrt_last_error(), "NEURON_RT_MEMORY_LIMIT") && strstr(nrt_last_error(), want),
		      "message: %s", nrt_last_error());
		CHECK(n == 7, "bytes written on error");
	}
}

/* Garbage in the real environment: nrt_init reports it every time and no device is visible. */
static void test_env_init_errors(void)
{
	static const struct { const char *var, *val; } bad[] = {
		{ "NEURON_RT_VISIBLE_CORES", "abc" }, { "NEURON_RT_MEMORY_LIMIT", "lots" },
		{ "NEURON_LAUNCH_BLOCKING", "yes" }, { "NEURON_NUM_THREADS", "-2" },
		{ "NEURON_INLINE_BYTES", "small" }, { "NEURON_HUGEPAGES", "yes" },
	};
	size_t lim = 0;

	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int rc;

		setenv(bad[i].var, bad[i].val, 1);
		rc = nrt_reinit_for_testing();
		CHECK(rc == NRT_ERR_ENV, "%s=%s: rc %d", bad[i].var, bad[i].val, rc);
		CHECK(nrt_device_count() == 0, "device count %d", nrt_device_count());
		for (int k = 0; k < 2; k++) { /* re-reported on every call */
			rc = nrt_init();
			CHECK(rc == NRT_ERR_ENV && strstr(nrt_last_error(), bad[i].var) &&
			      strstr(nrt_last_error(), bad[i].val), "call %d: rc %d msg %s", k, rc, nrt_last_error());
		}
		CHECK(nrt_queue_default(0) == NULL, "no queue while init fails");
		unsetenv(bad[i].var);
	}
	setenv("NEURON_RT_VISIBLE_CORES", "0-1", 1);
	setenv("NEURON_RT_MEMORY_LIMIT", "512MiB", 1);
	CHECK(nrt_reinit_for_testing() == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_device_count() == 2, "count %d", nrt_device_count());
	CHECK(nrt_device_memory_limit(1, &lim) == NRT_OK && lim == (size_t)512 << 20, "limit %zu", lim);
	CHECK(nrt_device_memory_limit(2, &lim) == NRT_ERR_INVALID, "device 2 is not visible");
	CHECK(nrt_queue_default(1) != NULL && nrt_queue_default(2) == NULL, "default queues");
	CHECK(nrt_queue_device(nrt_queue_default(1)) == 1, "queue device");
	unsetenv("NEURON_RT_VISIBLE_CORES");
	unsetenv("NEURON_RT_MEMORY_LIMIT");
	CHECK(nrt_reinit_for_testing() == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_device_count() == 1, "count %d", nrt_device_count());
	CHECK(nrt_device_memory_limit(0, &lim) == NRT_OK && lim > 0, "default limit %zu", lim);
	CHECK(!nrt_launch_blocking(), "blocking off by default");
	CHECK(nrt_inline_bytes() == ((size_t)8 << 20), "inline threshold %zu", nrt_inline_bytes());
	setenv("NEURON_INLINE_BYTES", "0", 1);
	CHECK(nrt_reinit_for_testing() == NRT_OK && nrt_inline_bytes() == 0, "0 disables: %zu", nrt_inline_bytes());
	setenv("NEURON_INLINE_BYTES", "4KiB", 1);
	CHECK(nrt_reinit_for_testing() == NRT_OK && nrt_inline_bytes() == 4096, "4KiB: %zu", nrt_inline_bytes());
	unsetenv("NEURON_INLINE_BYTES");
	CHECK(nrt_reinit_for_testing() == NRT_OK && nrt_inline_bytes() == ((size_t)8 << 20), "default again");
}

static void test_status_strings(void)
{
	for (int s = NRT_ERR_TIMEOUT; s <= 0; s++)
		CHECK(nrt_status_string(s) && *nrt_status_string(s), "status %d", s);
	CHECK(strcmp(nrt_status_string(NRT_ERR_OOM), nrt_status_string(NRT_OK)) != 0, "distinct");
	CHECK(nrt_status_string(12345) != NULL, "unknown");
}

/* ---- queues ------------------------------------------------------------------------------------- */
static void test_queue_order(void)
{
	enum { N = 5000 }; /* several times the ring, so launchers also wait for slots */
	nrt_queue_t *q = nrt_queue_default(0);
	static int log[N];
	atomic_int n = 0;
	int ok = 1;

	for (int i = 0; i < N; i++) {
		struct append_args a = { log, &n, i };

		if (nrt_queue_launch(q, k_append, &a, sizeof a, "test::append"))
			ok = 0;
	}
	CHECK(ok, "launch failed: %s", nrt_last_error());
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "%s", nrt_last_error());
	CHECK(atomic_load(&n) == N, "ran %d", atomic_load(&n));
	for (int i = 0; i < N; i++)
		if (log[i] != i) {
			CHECK(0, "log[%d] = %d", i, log[i]);
			break;
		}
}

static void test_queue_ids_and_query(void)
{
	nrt_queue_t *q1 = NULL, *q2 = NULL;
	int ms = 30;

	CHECK(nrt_queue_id(nrt_queue_default(0)) == 0, "default id");
	CHECK(nrt_queue_create(0, -1, &q1) == NRT_OK && q1, "%s", nrt_last_error());
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK && q2, "%s", nrt_last_error());
	CHECK(nrt_queue_create(5, 0, &q2) == NRT_ERR_INVALID, "bad device");
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_id(q1) > 0 && nrt_queue_id(q2) > nrt_queue_id(q1), "ids %d %d", nrt_queue_id(q1),
	      nrt_queue_id(q2));
	CHECK(nrt_queue_priority(q1) == -1, "priority");
	CHECK(nrt_queue_by_id(0, nrt_queue_id(q1)) == q1, "by id");
	CHECK(nrt_queue_by_id(0, 0) == nrt_queue_default(0), "by id 0");
	CHECK(nrt_queue_by_id(0, 9999) == NULL, "unknown id");
	CHECK(nrt_queue_launch(q1, k_sleep, &ms, sizeof ms, "test::sleep") == NRT_OK, "launch");
	CHECK(nrt_queue_query(q1) == NRT_ERR_NOT_READY, "busy");
	CHECK(nrt_queue_synchronize(q1) == NRT_OK, "sync");
	CHECK(nrt_queue_query(q1) == NRT_OK, "idle");
	CHECK(nrt_queue_launch(q1, NULL, NULL, 0, "x") == NRT_ERR_INVALID, "null kernel");
	CHECK(nrt_queue_launch(q1, k_sleep, &ms, NRT_MAX_ARGS + 1, "x") == NRT_ERR_INVALID, "args too big");
	CHECK(nrt_queue_destroy(nrt_queue_default(0)) == NRT_ERR_INVALID, "default queue stays");
	int id = nrt_queue_id(q1);
	CHECK(nrt_queue_destroy(q1) == NRT_OK, "destroy");
	CHECK(nrt_queue_by_id(0, id) == NULL, "destroyed queue not found");
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
}

static void test_sticky_error(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0;
	struct count_args c = { &n };
	int idx = 7, rc;

	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK, "launch");
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::index") == NRT_OK, "launch");
	for (int i = 0; i < 10; i++)
		CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK, "launch");
	rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL, "rc %d", rc);
	CHECK(strcmp(nrt_last_error(), "aten::index: bad index 7") == 0, "message '%s'", nrt_last_error());
	CHECK(atomic_load(&n) == 1, "kernels after the failure were skipped: ran %d", atomic_load(&n));
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "cleared");
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK && atomic_load(&n) == 2, "queue usable again");

	/* reported by device synchronize */
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::gather") == NRT_OK, "launch");
	rc = nrt_device_synchronize(0);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::gather"), "rc %d %s", rc,
	      nrt_last_error());
	CHECK(nrt_device_synchronize(0) == NRT_OK, "cleared");

	/* reported by event synchronize */
	nrt_event_t *e = NULL;
	CHECK(nrt_event_create(0, 0, &e) == NRT_OK, "event");
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::scatter") == NRT_OK, "launch");
	CHECK(nrt_event_record(e, q) == NRT_OK, "record");
	rc = nrt_event_synchronize(e);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::scatter: bad index 7"), "rc %d %s", rc,
	      nrt_last_error());
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "cleared");
	nrt_event_destroy(e);
}

/* A fork never catches a runtime lock held (issue 16, 12): while another thread of a process without
 * runtime threads (so its children may use the device) allocates, frees, reads statistics, the trace
 * and the queue table in a loop, each child forked from the main thread allocates, launches and
 * synchronizes at once.  Without the atfork handlers taking the runtime's locks, a child that caught
 * the allocator's or the map's lock held hung (alarm: SIGALRM).  Must run before any runtime thread. */
static atomic_bool churn_stop;

static void *churn(void *p)
{
	nrt_queue_t *q = nrt_queue_default(0);
	nrt_trace_rec_t r[4];
	nrt_mem_stats_t st;

	while (!atomic_load(&churn_stop)) {
		void *a = NULL, *b = NULL, *h = NULL;

		nrt_malloc(q, 1 << 16, &a);
		nrt_malloc(q, 4 << 20, &b);
		nrt_free(a);
		nrt_free(b);
		nrt_host_alloc(4096, &h);
		nrt_host_free(h);
		nrt_trace_drain(r, 4);
		(void)nrt_queue_by_id(0, 0);
		nrt_memory_stats(0, &st);
		nrt_empty_cache(0);
	}
	return NULL;
}

static int fork_child_uses_device(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0;
	struct count_args c = { &n };
	nrt_mem_stats_t st;
	void *a = NULL, *h = NULL;
	int bad = 0;

	alarm(20);
	bad |= nrt_in_forked_child();
	bad |= nrt_malloc(q, 1 << 16, &a) != NRT_OK || nrt_free(a) != NRT_OK;
	bad |= nrt_host_alloc(4096, &h) != NRT_OK || nrt_host_free(h) != NRT_OK;
	bad |= nrt_memory_stats(0, &st) != NRT_OK || nrt_empty_cache(0) != NRT_OK;
	bad |= nrt_queue_by_id(0, 0) != q;
	bad |= nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") != NRT_OK;
	bad |= nrt_queue_synchronize(q) != NRT_OK || atomic_load(&n) != 1;
	return bad;
}

static void test_fork_catches_no_lock(void)
{
	int hung = 0, failed = 0;
	pthread_t t;

	CHECK(!nrt_in_forked_child(), "no runtime thread yet");
	atomic_store(&churn_stop, false);
	CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "thread");
	for (int i = 0; i < 40; i++) {
		int status = 0;
		pid_t pid = fork();

		if (pid == 0)
			_exit(fork_child_uses_device());
		CHECK(pid > 0, "fork");
		if (pid <= 0 || waitpid(pid, &status, 0) != pid)
			continue;
		if (WIFSIGNALED(status))
			hung++;
		else if (!WIFEXITED(status) || WEXITSTATUS(status))
			failed++;
	}
	atomic_store(&churn_stop, true);
	pthread_join(t, NULL);
	CHECK(hung == 0 && failed == 0, "of 40 children %d hung on a lock held at the fork, %d failed", hung, failed);
}

/* A failed kernel's output and the outputs of the kernels skipped behind it stay poisoned after the
 * error has been reported (here: consumed by another thread's synchronize), as long as they live; the
 * inputs and what runs after the report stay readable (issue 16, 13). */
static void *sync_thread(void *p)
{
	int *rc = p;

	*rc = nrt_queue_synchronize(nrt_queue_default(0));
	return NULL;
}

static void test_poisoned_outputs(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0;
	struct count_args c = { &n };
	void *x = NULL, *y = NULL, *z = NULL, *w = NULL, *y2 = NULL;
	int idx = 3, rc = 0;
	pthread_t t;

	CHECK(nrt_queue_synchronize(q) == NRT_OK, "clean start");
	CHECK(nrt_malloc(q, 4096, &x) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::fill") == NRT_OK, "launch");
	CHECK(nrt_malloc(q, 4096, &y) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::index_select") == NRT_OK, "launch");
	CHECK(nrt_malloc(q, 1 << 20, &z) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::skipped") == NRT_OK, "launch");
	CHECK(pthread_create(&t, NULL, sync_thread, &rc) == 0, "thread");
	pthread_join(t, NULL);
	CHECK(rc == NRT_ERR_KERNEL, "the other thread got the error: rc %d", rc);
	CHECK(atomic_load(&n) == 1, "the record behind the failure was skipped");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "reported once");
	for (int i = 0; i < 2; i++) {
		rc = nrt_check_readable(y);
		CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "aten::index_select: bad index 3"),
		      "the failed output reads as an error (%d): rc %d '%s'", i, rc, nrt_last_error());
		rc = nrt_check_readable(z);
		CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::index_select"),
		      "the skipped output reads as an error (%d): rc %d", i, rc);
	}
	CHECK(nrt_check_readable(x) == NRT_OK, "an input of the failed kernel stays readable");
	CHECK(nrt_malloc(q, 4096, &w) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::after") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK && atomic_load(&n) == 2, "runs after the report");
	CHECK(nrt_check_readable(w) == NRT_OK, "an output made after the report is readable");
	/* the poison belongs to the allocation: a new tensor in the same block is clean */
	CHECK(nrt_free(y) == NRT_OK, "free");
	CHECK(nrt_malloc(q, 4096, &y2) == NRT_OK, "%s", nrt_last_error());
	CHECK(y2 == y, "same block reused");
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::refill") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(nrt_check_readable(y2) == NRT_OK, "the reused block is readable");
	CHECK(nrt_check_readable(&n) == NRT_OK, "host memory is never poisoned");

	/* a read before any synchronize reports the error itself: once, then the queue runs again */
	nrt_free(w);
	CHECK(nrt_malloc(q, 4096, &w) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::gather") == NRT_OK, "launch");
	while (nrt_queue_query(q) == NRT_ERR_NOT_READY)
		sleep_ms(1);
	rc = nrt_check_readable(w);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::gather"), "rc %d", rc);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "reported by the read, not again by the synchronize");
	CHECK(nrt_check_readable(w) == NRT_ERR_KERNEL, "still poisoned");
	nrt_free(x);
	nrt_free(y2);
	nrt_free(z);
	nrt_free(w);
}

/* Op brackets (issue 16, 13): in-place outputs of failed and skipped ops, ops of several kernels, ops
 * reading poisoned data after the report, and the producer attribution when ops share a queue. */
struct bracket_args {
	atomic_int *step;
	void *out;
	int rc;
};

static void *bracket_thread(void *p)
{
	struct bracket_args *a = p;
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0;
	struct count_args c = { &n };

	nrt_op_begin();
	a->rc = nrt_malloc(q, 4096, &a->out);
	atomic_store(a->step, 1);
	while (atomic_load(a->step) != 2)
		sleep_ms(1);
	a->rc |= nrt_queue_launch(q, k_count, &c, sizeof c, "test::op_a");
	nrt_op_end();
	return NULL;
}

static void test_op_brackets(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0, step = 0;
	struct count_args c = { &n };
	struct bracket_args ta = { &step, NULL, 0 };
	void *x = NULL, *w = NULL, *y = NULL, *z = NULL, *e = NULL, *f = NULL;
	int idx = 5, rc;
	pthread_t t;

	CHECK(nrt_queue_synchronize(q) == NRT_OK, "clean start");
	CHECK(nrt_malloc(q, 4096, &x) == NRT_OK && nrt_malloc(q, 4096, &w) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::fill") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK && nrt_check_readable(x) == NRT_OK, "x is data");

	/* in place: x written by the failed op, w by one skipped behind it */
	nrt_op_begin();
	nrt_op_write(x);
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::index_copy_") == NRT_OK, "launch");
	nrt_op_end();
	nrt_op_begin();
	nrt_op_write(w);
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "aten::add_") == NRT_OK, "launch");
	nrt_op_end();
	rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "aten::index_copy_: bad index 5"), "rc %d", rc);
	rc = nrt_check_readable(x);
	CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "aten::index_copy_: bad index 5"),
	      "written in place by the failed op: rc %d '%s'", rc, nrt_last_error());
	CHECK(nrt_check_readable(w) == NRT_ERR_KERNEL, "written in place by a skipped op");
	/* poisoned for good: a later in-place op that succeeds does not make it data */
	nrt_op_begin();
	nrt_op_write(x);
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "aten::mul_") == NRT_OK, "launch");
	nrt_op_end();
	CHECK(nrt_queue_synchronize(q) == NRT_OK && nrt_check_readable(x) == NRT_ERR_KERNEL, "still poisoned");

	/* an op of two kernels whose second fails: its output is poisoned (the first kernel was its producer) */
	nrt_op_begin();
	CHECK(nrt_malloc(q, 4096, &y) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "aten::topk") == NRT_OK, "launch");
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::topk") == NRT_OK, "launch");
	nrt_op_end();
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "reported");
	rc = nrt_check_readable(y);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::topk: bad index 5"), "second kernel: rc %d", rc);

	/* reading a poisoned block after the report: the op is refused with the error */
	nrt_op_begin();
	rc = nrt_op_read(y);
	nrt_op_end();
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::topk: bad index 5"), "read after report: rc %d", rc);
	CHECK(nrt_op_read(&n) == NRT_OK, "host memory is never poisoned");
	/* ...and while the error is pending, the reader's output inherits it even if the error is reported
	 * (here by the reader's own thread) before the reader's kernel runs */
	nrt_free(y);
	nrt_op_begin();
	CHECK(nrt_malloc(q, 4096, &y) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::gather") == NRT_OK, "launch");
	nrt_op_end();
	while (nrt_queue_query(q) == NRT_ERR_NOT_READY)
		sleep_ms(1);
	nrt_op_begin();
	CHECK(nrt_op_read(y) == NRT_OK, "pending: not refused");
	CHECK(nrt_malloc(q, 4096, &z) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "reported before the reader's kernel");
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "aten::add") == NRT_OK, "launch");
	nrt_op_end();
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "the reader ran");
	rc = nrt_check_readable(z);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::gather"), "inherited: rc %d", rc);

	/* attribution: an op that launched nothing has no producer; of two ops sharing the queue, the one
	 * that failed is named and the other's output is clean */
	nrt_op_begin();
	CHECK(nrt_malloc(q, 4096, &e) == NRT_OK, "%s", nrt_last_error());
	nrt_op_end();
	CHECK(pthread_create(&t, NULL, bracket_thread, &ta) == 0, "thread");
	while (atomic_load(&step) != 1)
		sleep_ms(1);
	nrt_op_begin();
	CHECK(nrt_malloc(q, 4096, &f) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::index_select") == NRT_OK, "launch");
	nrt_op_end();
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "reported");
	atomic_store(&step, 2);
	pthread_join(t, NULL);
	CHECK(ta.rc == NRT_OK && nrt_queue_synchronize(q) == NRT_OK, "op a ran");
	CHECK(nrt_check_readable(e) == NRT_OK, "an empty op's output is not the next op's: '%s'", nrt_last_error());
	CHECK(nrt_check_readable(ta.out) == NRT_OK, "the other thread's op succeeded: '%s'", nrt_last_error());
	rc = nrt_check_readable(f);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "aten::index_select"), "the failed op's: rc %d", rc);
	/* ...but an empty op's output is produced by the thread's next record outside any bracket (a
	 * compiled program launched through the C API into tensors allocated for it) */
	void *g = NULL;
	nrt_op_begin();
	CHECK(nrt_malloc(q, 4096, &g) == NRT_OK, "%s", nrt_last_error());
	nrt_op_end();
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "neuron::compiled") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "reported");
	rc = nrt_check_readable(g);
	CHECK(rc == NRT_ERR_KERNEL && strstr(nrt_last_error(), "neuron::compiled"), "unbracketed producer: rc %d", rc);
	CHECK(nrt_check_readable(e) == NRT_OK, "not the earlier empty output, claimed by no record");
	nrt_free(g);
	nrt_free(x);
	nrt_free(w);
	nrt_free(y);
	nrt_free(z);
	nrt_free(e);
	nrt_free(f);
	nrt_free(ta.out);
}

/* A child forked while the queue is busy (a kernel running, more queued) is refused at once, never hangs;
 * its frees succeed without touching the runtime (issue 16, 12).  The parent's queue is unaffected. */
static int fork_child_checks(void *inherited)
{
	nrt_queue_t *q = nrt_queue_default(0);
	void *p = NULL;
	int idx = 1, bad = 0;

	alarm(20); /* a hang fails the test instead of blocking it */
	bad |= q != NULL;
	bad |= nrt_init() != NRT_ERR_FORK;
	bad |= strstr(nrt_last_error(), "Cannot re-initialize neuron in forked subprocess") == NULL;
	bad |= !nrt_in_forked_child();
	bad |= nrt_malloc(nrt_queue_by_id(0, 0), 64, &p) != NRT_ERR_FORK;
	bad |= nrt_device_synchronize(0) != NRT_ERR_FORK;
	bad |= nrt_empty_cache(0) != NRT_ERR_FORK;
	bad |= nrt_free(inherited) != NRT_OK; /* a data-loading child exits, freeing what it inherited */
	bad |= nrt_device_count() != 1;
	(void)idx;
	return bad;
}

static void test_fork_refused_in_child(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int n = 0;
	struct count_args c = { &n };
	int ms = 200, status = 0;
	void *x = NULL;
	pid_t pid;

	CHECK(nrt_malloc(q, 4096, &x) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_sleep, &ms, sizeof ms, "test::sleep") == NRT_OK, "launch");
	for (int i = 0; i < 100; i++)
		CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK, "launch");
	CHECK(!nrt_in_forked_child(), "parent");
	pid = fork();
	if (pid == 0)
		_exit(fork_child_checks(x));
	CHECK(pid > 0, "fork");
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status 0x%x (a signal: it hung)", status);
	CHECK(nrt_queue_synchronize(q) == NRT_OK && atomic_load(&n) == 100, "the parent's queue ran");
	CHECK(nrt_free(x) == NRT_OK, "free");
}

/* nrt_queue_launch_cost: a small kernel on an idle queue runs on the calling thread; on a busy queue,
 * or above the threshold, it is queued behind the pending work; order, sticky errors and events hold. */
static void test_inline_launch(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	size_t saved = nrt_inline_bytes();
	pthread_t who = 0;
	struct self_args s = { &who };
	static int log[64];
	atomic_int n = 0;
	uint64_t before;
	int ms = 40, idx = 3, rc;

	CHECK(saved == ((size_t)8 << 20), "default threshold %zu", saved);
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "%s", nrt_last_error());

	/* idle queue, small kernel: inline, done before the launch returns */
	before = nrt_inline_launches();
	CHECK(nrt_queue_launch_cost(q, k_whoami, &s, sizeof s, "test::whoami", 64) == NRT_OK, "launch");
	CHECK(pthread_equal(who, pthread_self()), "ran on the calling thread");
	CHECK(nrt_inline_launches() == before + 1, "counted");
	CHECK(nrt_queue_query(q) == NRT_OK, "idle after an inline launch");

	/* above the threshold: queued (the worker or a synchronizing thread runs it) */
	before = nrt_inline_launches();
	CHECK(nrt_queue_launch_cost(q, k_whoami, &s, sizeof s, "test::whoami", saved + 1) == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(nrt_inline_launches() == before, "big kernel queued");

	/* busy queue: small kernels queue behind the pending work, in order */
	CHECK(nrt_queue_launch(q, k_sleep, &ms, sizeof ms, "test::sleep") == NRT_OK, "launch");
	before = nrt_inline_launches();
	for (int i = 0; i < 64; i++) {
		struct append_args a = { log, &n, i };

		CHECK(nrt_queue_launch_cost(q, k_append, &a, sizeof a, "test::append", 8) == NRT_OK, "launch");
	}
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(atomic_load(&n) == 64, "ran %d", atomic_load(&n));
	for (int i = 0; i < 64; i++)
		if (log[i] != i) {
			CHECK(0, "log[%d] = %d", i, log[i]);
			break;
		}
	CHECK(nrt_inline_launches() - before < 64, "not all inline behind a sleeping kernel");

	/* a failing inline kernel: no error at launch, sticky at the next synchronize, later work skipped */
	atomic_store(&n, 0);
	struct count_args c = { &n };
	CHECK(nrt_queue_launch_cost(q, k_fail, &idx, sizeof idx, "aten::index", 4) == NRT_OK, "launch");
	CHECK(nrt_queue_launch_cost(q, k_count, &c, sizeof c, "test::count", 4) == NRT_OK, "launch");
	rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL && strcmp(nrt_last_error(), "aten::index: bad index 3") == 0, "rc %d '%s'", rc,
	      nrt_last_error());
	CHECK(atomic_load(&n) == 0, "skipped after the failure");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "cleared");

	/* an event recorded after inline work is complete at once */
	nrt_event_t *e = NULL;
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &e) == NRT_OK, "event");
	CHECK(nrt_queue_launch_cost(q, k_count, &c, sizeof c, "test::count", 4) == NRT_OK, "launch");
	CHECK(nrt_event_record(e, q) == NRT_OK, "record");
	CHECK(nrt_event_query(e) == NRT_OK, "event done");
	nrt_event_destroy(e);

	/* threshold 0 disables inline execution */
	nrt_set_inline_bytes(0);
	before = nrt_inline_launches();
	CHECK(nrt_queue_launch_cost(q, k_whoami, &s, sizeof s, "test::whoami", 0) == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(nrt_inline_launches() == before, "disabled: queued");
	nrt_set_inline_bytes(saved);
}

static void test_launch_blocking(void)
{
	nrt_queue_t *q;
	pthread_t who = 0;
	struct self_args s = { &who };
	atomic_int n = 0;
	struct count_args c = { &n };
	int idx = 3, rc, ms = 20;
	nrt_event_t *e0 = NULL, *e1 = NULL;
	double el = -1;

	setenv("NEURON_LAUNCH_BLOCKING", "1", 1);
	CHECK(nrt_reinit_for_testing() == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_launch_blocking(), "blocking on");
	q = nrt_queue_default(0);
	CHECK(nrt_queue_launch(q, k_whoami, &s, sizeof s, "test::whoami") == NRT_OK, "launch");
	CHECK(pthread_equal(who, pthread_self()), "kernel ran on the caller");
	rc = nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::take");
	CHECK(rc == NRT_ERR_KERNEL && strcmp(nrt_last_error(), "aten::take: bad index 3") == 0, "rc %d '%s'",
	      rc, nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK && atomic_load(&n) == 1,
	      "next launch runs");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "nothing sticky");
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &e0) == NRT_OK, "event");
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &e1) == NRT_OK, "event");
	CHECK(nrt_event_record(e0, q) == NRT_OK, "record");
	CHECK(nrt_queue_launch(q, k_sleep, &ms, sizeof ms, "test::sleep") == NRT_OK, "sleep");
	CHECK(nrt_event_record(e1, q) == NRT_OK, "record");
	CHECK(nrt_event_query(e1) == NRT_OK, "already done");
	CHECK(nrt_event_elapsed_ms(e0, e1, &el) == NRT_OK && el >= ms - 1, "elapsed %f", el);
	nrt_event_destroy(e0);
	nrt_event_destroy(e1);
	unsetenv("NEURON_LAUNCH_BLOCKING");
	CHECK(nrt_reinit_for_testing() == NRT_OK, "%s", nrt_last_error());
	CHECK(!nrt_launch_blocking(), "blocking off");
}

/* ---- events ------------------------------------------------------------------------------------- */
static void test_events(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	nrt_event_t *a = NULL, *b = NULL, *plain = NULL, *never = NULL;
	int ms = 25;
	double el = -1;

	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &a) == NRT_OK, "create");
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING | NRT_EVENT_BLOCKING, &b) == NRT_OK, "create");
	CHECK(nrt_event_create(0, 0, &plain) == NRT_OK, "create");
	CHECK(nrt_event_create(0, NRT_EVENT_TIMING, &never) == NRT_OK, "create");
	nrt_event_t *bad = (nrt_event_t *)&ms;
	CHECK(nrt_event_create(3, 0, &bad) == NRT_ERR_INVALID && bad == NULL, "bad device");
	CHECK(nrt_event_query(never) == NRT_OK, "unrecorded query");
	CHECK(nrt_event_synchronize(never) == NRT_OK, "unrecorded sync");
	CHECK(nrt_event_record(a, q) == NRT_OK, "record");
	CHECK(nrt_queue_launch(q, k_sleep, &ms, sizeof ms, "test::sleep") == NRT_OK, "launch");
	CHECK(nrt_event_record(b, q) == NRT_OK, "record");
	CHECK(nrt_event_record(plain, q) == NRT_OK, "record");
	CHECK(nrt_event_query(b) == NRT_ERR_NOT_READY, "pending");
	CHECK(nrt_event_elapsed_ms(a, b, &el) == NRT_ERR_NOT_READY, "not complete yet");
	CHECK(nrt_event_synchronize(b) == NRT_OK, "sync");
	CHECK(nrt_event_query(b) == NRT_OK && nrt_event_query(plain) == NRT_OK, "done");
	CHECK(nrt_event_elapsed_ms(a, b, &el) == NRT_OK, "%s", nrt_last_error());
	CHECK(el >= ms - 1 && el < 2000, "elapsed %f ms", el);
	CHECK(nrt_event_elapsed_ms(a, plain, &el) == NRT_ERR_INVALID, "plain event has no timing");
	CHECK(strstr(nrt_last_error(), "TIMING") != NULL, "%s", nrt_last_error());
	CHECK(nrt_event_elapsed_ms(a, never, &el) == NRT_ERR_INVALID, "never recorded");
	CHECK(strstr(nrt_last_error(), "never recorded") != NULL, "%s", nrt_last_error());
	nrt_event_destroy(a);
	nrt_event_destroy(b);
	nrt_event_destroy(plain);
	nrt_event_destroy(never);
	nrt_event_destroy(NULL);
}

static void test_wait_event_across_queues(void)
{
	nrt_queue_t *q1 = NULL, *q2 = NULL;
	nrt_event_t *e = NULL;
	atomic_int flag = 0;
	int seen = -1;

	CHECK(nrt_queue_create(0, 0, &q1) == NRT_OK && nrt_queue_create(0, 0, &q2) == NRT_OK, "queues");
	CHECK(nrt_event_create(0, 0, &e) == NRT_OK, "event");
	for (int round = 0; round < 3; round++) {
		struct flag_args f = { &flag, round + 1, 30 };
		struct read_args r = { &flag, &seen };

		CHECK(nrt_queue_launch(q1, k_set_flag, &f, sizeof f, "test::set") == NRT_OK, "launch");
		CHECK(nrt_event_record(e, q1) == NRT_OK, "record");
		CHECK(nrt_queue_wait_event(q2, e) == NRT_OK, "wait");
		CHECK(nrt_queue_launch(q2, k_read_flag, &r, sizeof r, "test::read") == NRT_OK, "launch");
		CHECK(nrt_queue_synchronize(q2) == NRT_OK, "sync");
		CHECK(seen == round + 1, "q2 ran before q1's event: saw %d", seen);
	}
	CHECK(nrt_queue_synchronize(q1) == NRT_OK, "sync");
	nrt_event_destroy(e);
	CHECK(nrt_queue_destroy(q1) == NRT_OK && nrt_queue_destroy(q2) == NRT_OK, "destroy");
}

/* ---- concurrency ---------------------------------------------------------------------------------- */
enum { CL_THREADS = 4, CL_LAUNCHES = 20000 };

struct order_args {
	int *last;      /* last value seen per launching thread */
	atomic_int *bad;
	int thread, value;
};

static int k_order(void *p)
{
	struct order_args *a = p;

	if (a->last[a->thread] != a->value - 1)
		atomic_fetch_add(a->bad, 1);
	a->last[a->thread] = a->value;
	return 0;
}

struct launcher {
	nrt_queue_t *q;
	int thread;
	int *last;
	atomic_int *bad;
	int errors;
};

static void *launch_thread(void *p)
{
	struct launcher *l = p;

	for (int i = 0; i < CL_LAUNCHES; i++) {
		struct order_args a = { l->last, l->bad, l->thread, i };

		/* odd threads launch small kernels, which run inline whenever they find the queue idle */
		int rc = l->thread & 1 ? nrt_queue_launch_cost(l->q, k_order, &a, sizeof a, "test::order", 8)
				       : nrt_queue_launch(l->q, k_order, &a, sizeof a, "test::order");

		if (rc)
			l->errors++;
	}
	return NULL;
}

static void test_concurrent_launches(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	int last[CL_THREADS];
	atomic_int bad = 0;
	struct launcher l[CL_THREADS];
	pthread_t t[CL_THREADS];

	for (int i = 0; i < CL_THREADS; i++) {
		last[i] = -1;
		l[i] = (struct launcher){ q, i, last, &bad, 0 };
		pthread_create(&t[i], NULL, launch_thread, &l[i]);
	}
	for (int i = 0; i < CL_THREADS; i++) {
		pthread_join(t[i], NULL);
		CHECK(l[i].errors == 0, "thread %d: %d launch errors", i, l[i].errors);
	}
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	for (int i = 0; i < CL_THREADS; i++)
		CHECK(last[i] == CL_LAUNCHES - 1, "thread %d: last %d", i, last[i]);
	CHECK(atomic_load(&bad) == 0, "%d kernels ran out of their thread's order", atomic_load(&bad));
}

/* ---- thread pool ---------------------------------------------------------------------------------- */
struct sum_ctx {
	const int32_t *v;
	atomic_llong sum;
	atomic_int calls, nested_inline;
};

static void nested_fn(void *p, int64_t b, int64_t e)
{
	struct sum_ctx *c = p;

	atomic_fetch_add(&c->nested_inline, (int)(e - b));
}

static void sum_fn(void *p, int64_t b, int64_t e)
{
	struct sum_ctx *c = p;
	long long s = 0;

	for (int64_t i = b; i < e; i++)
		s += c->v[i];
	atomic_fetch_add(&c->sum, s);
	atomic_fetch_add(&c->calls, 1);
	if (b == 0) /* a nested call must run inline (no deadlock) */
		nrt_parallel_for(1000, 1, nested_fn, c);
}

static void *pool_thread(void *p)
{
	struct sum_ctx *c = p;

	for (int i = 0; i < 20; i++)
		nrt_parallel_for(1 << 20, 4096, sum_fn, c);
	return NULL;
}

static void test_thread_pool(void)
{
	enum { N = 1 << 20 };
	int32_t *v = malloc(N * sizeof *v);
	long long want = 0;
	struct sum_ctx c = { 0 };
	struct sum_ctx c2[2];
	pthread_t t[2];

	CHECK(v != NULL, "malloc");
	if (!v)
		return;
	for (int i = 0; i < N; i++) {
		v[i] = (int32_t)((i * 2654435761u) >> 12) - 500000;
		want += v[i];
	}
	CHECK(nrt_num_threads() >= 1, "threads %d", nrt_num_threads());
	c.v = v;
	nrt_parallel_for(N, 1000, sum_fn, &c);
	CHECK(atomic_load(&c.sum) == want, "sum %lld want %lld", (long long)atomic_load(&c.sum), want);
	CHECK(atomic_load(&c.nested_inline) == 1000, "nested %d", atomic_load(&c.nested_inline));
	CHECK(nrt_num_threads() == 1 || atomic_load(&c.calls) > 1, "split into %d chunks", atomic_load(&c.calls));

	atomic_store(&c.sum, 0);
	atomic_store(&c.calls, 0);
	nrt_parallel_for(N, N, sum_fn, &c); /* n <= grain: one inline call */
	CHECK(atomic_load(&c.sum) == want && atomic_load(&c.calls) == 1, "inline");
	nrt_parallel_for(0, 1, sum_fn, &c);
	CHECK(atomic_load(&c.calls) == 1, "empty range");

	/* two callers at once (as from two queue workers) */
	for (int i = 0; i < 2; i++) {
		c2[i] = (struct sum_ctx){ .v = v };
		pthread_create(&t[i], NULL, pool_thread, &c2[i]);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK(atomic_load(&c2[i].sum) == want * 20, "concurrent caller %d", i);
	}
	free(v);
}

/* Many short jobs back to back (workers join while spinning, late joiners must back off from a closed
 * job) and jobs after pauses longer than the spin (workers park and are woken): every index is covered
 * exactly once per job. */
struct mark_ctx {
	atomic_int *hits;
	int64_t n;
};

static void mark_fn(void *p, int64_t b, int64_t e)
{
	struct mark_ctx *c = p;

	for (int64_t i = b; i < e; i++)
		atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

static void test_pool_stress(void)
{
	enum { N = 4096 };
	static atomic_int hits[N];
	struct mark_ctx c = { hits, N };
	int bad = 0;

	for (int job = 0; job < 3000; job++) {
		int64_t n = 1 + (job * 7919) % N;

		for (int64_t i = 0; i < n; i++)
			atomic_store_explicit(&hits[i], 0, memory_order_relaxed);
		c.n = n;
		nrt_parallel_for(n, 1 + job % 64, mark_fn, &c);
		for (int64_t i = 0; i < n && !bad; i++)
			if (atomic_load(&hits[i]) != 1) {
				bad = 1;
				CHECK(0, "job %d (n %lld): index %lld hit %d times", job, (long long)n, (long long)i,
				      atomic_load(&hits[i]));
			}
		if (job % 500 == 499) { /* longer than the workers' spin: they park */
			struct timespec ts = { 0, 2000000 };

			nanosleep(&ts, NULL);
		}
	}
	CHECK(!bad, "all jobs covered exactly once");
}

/* ---- copies, trace, host memory ------------------------------------------------------------------ */
static void test_memcpy_and_host(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	size_t n = (size_t)5 << 20; /* large enough for the parallel path */
	unsigned char *h = NULL, *h2 = NULL;
	void *d = NULL;
	nrt_event_t *e = NULL;
	int ok = 1;

	CHECK(nrt_host_alloc(n, (void **)&h) == NRT_OK && h, "host alloc");
	CHECK(nrt_host_alloc(n, (void **)&h2) == NRT_OK && h2, "host alloc");
	CHECK(h && ((uintptr_t)h & 4095) == 0, "page aligned");
	if (!h || !h2)
		return;
	CHECK(nrt_host_is_pinned(h) && nrt_host_is_pinned(h + n - 1) && nrt_host_is_pinned(h + 12345),
	      "interior");
	CHECK(!nrt_host_is_pinned(&n), "stack is not pinned");
	CHECK(nrt_host_free(h + 1) == NRT_ERR_INVALID, "interior free refused");
	for (size_t i = 0; i < n; i++)
		h[i] = (unsigned char)(i * 31 + 7);
	memset(h2, 0, n);
	CHECK(nrt_malloc(q, n, &d) == NRT_OK && d, "%s", nrt_last_error());
	CHECK(nrt_event_create(0, 0, &e) == NRT_OK, "event");
	CHECK(nrt_memcpy_async(q, d, h, n) == NRT_OK, "h2d");
	CHECK(nrt_memcpy_async(q, h2, d, n) == NRT_OK, "d2h");
	CHECK(nrt_memcpy_async(q, h2, NULL, n) == NRT_ERR_INVALID, "null src");
	CHECK(nrt_event_record(e, q) == NRT_OK, "record");
	CHECK(nrt_event_synchronize(e) == NRT_OK, "sync");
	for (size_t i = 0; i < n && ok; i++)
		ok = h2[i] == (unsigned char)(i * 31 + 7);
	CHECK(ok, "round trip");
	CHECK(nrt_free(d) == NRT_OK, "free");
	nrt_event_destroy(e);
	CHECK(nrt_host_free(h) == NRT_OK && !nrt_host_is_pinned(h), "host free");
	CHECK(nrt_host_free(h2) == NRT_OK, "host free");
	CHECK(nrt_host_free(NULL) == NRT_OK, "free NULL");
}

static void test_trace(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	nrt_trace_rec_t r[16];
	atomic_int n = 0;
	struct count_args c = { &n };
	int got;

	nrt_trace_drain(r, 16);
	nrt_trace_enable(true);
	nrt_queue_launch(q, k_count, &c, sizeof c, "aten::add");
	nrt_queue_launch(q, k_count, &c, sizeof c, "aten::mul");
	nrt_queue_synchronize(q);
	nrt_trace_enable(false);
	nrt_queue_launch(q, k_count, &c, sizeof c, "aten::sub");
	nrt_queue_synchronize(q);
	got = nrt_trace_drain(r, 16);
	CHECK(got == 2, "records %d", got);
	if (got == 2) {
		CHECK(!strcmp(r[0].name, "aten::add") && !strcmp(r[1].name, "aten::mul"), "names");
		CHECK(r[0].dev == 0 && r[0].queue == 0, "dev/queue");
		CHECK(r[0].start_ns <= r[0].end_ns && r[0].end_ns <= r[1].start_ns, "times");
	}
	CHECK(nrt_trace_drain(r, 16) == 0, "drained");
	CHECK(nrt_now_ns() > 0, "clock");
}

/* Correlation ids and launch sites travel with the record; a second reader has its own cursor; a
 * failing record's site is in the sticky error. */
static uint64_t site_42(void)
{
	return 42;
}

static void site_fmt(uint64_t site, char *buf, size_t cap)
{
	snprintf(buf, cap, "train.py:%d in forward", (int)site);
}

static void test_trace_corr_site(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	nrt_trace_event_t r[16];
	nrt_trace_rec_t rd[16];
	atomic_int n = 0;
	struct count_args c = { &n };
	int idx = 7, got;
	uint64_t cur;

	nrt_trace_drain(rd, 16);
	cur = nrt_trace_cursor();
	nrt_trace_enable(true);
	nrt_trace_enable(true); /* two users: one off keeps it on */
	nrt_trace_set_corr(11);
	nrt_queue_launch(q, k_count, &c, sizeof c, "aten::add");
	nrt_trace_set_corr(0);
	nrt_trace_host(0, 0, "aten::foo (CPU fallback)", 5, 6);
	nrt_queue_synchronize(q);
	nrt_trace_enable(false);
	CHECK(nrt_trace_on(), "still on for the second user");
	nrt_trace_enable(false);
	CHECK(!nrt_trace_on(), "off");
	got = nrt_trace_read(&cur, r, 16, NULL);
	CHECK(got == 2, "reader records %d", got);
	if (got == 2) { /* in the order they finished: the kernel may run after the host record */
		int k = r[0].kind == NRT_TRACE_KERNEL ? 0 : 1;

		CHECK(r[k].corr == 11 && r[k].kind == NRT_TRACE_KERNEL, "corr %llu kind %d", (unsigned long long)r[k].corr,
		      r[k].kind);
		CHECK(r[1 - k].corr == 0 && r[1 - k].kind == NRT_TRACE_HOST && r[1 - k].start_ns == 5, "host record");
	}
	CHECK(nrt_trace_drain(rd, 16) == 2, "the drain reader still sees them");

	nrt_set_site_hooks(site_42, site_fmt);
	CHECK(nrt_queue_launch(q, k_fail, &idx, sizeof idx, "aten::index") == NRT_OK, "launch");
	CHECK(nrt_queue_synchronize(q) == NRT_ERR_KERNEL, "sticky");
	CHECK(strstr(nrt_last_error(), "aten::index") && strstr(nrt_last_error(), "stream 0") &&
		      strstr(nrt_last_error(), "train.py:42 in forward"),
	      "site in message: %s", nrt_last_error());
	nrt_set_site_hooks(NULL, NULL);
}

/* A kernel that traces two parts of itself (as a compiled program's segment does). */
static int k_parts(void *p)
{
	(void)p;
	nrt_trace_sub("part one", 100, 200);
	nrt_trace_sub("part two", 200, 300);
	return 0;
}

/* nrt_trace_sub: the parts are PART records of the running record's queue with its correlation id,
 * before the record itself (which ends after them); the drain (one record per launch) leaves them out;
 * off the trace, or outside a record, nothing. */
static void test_trace_sub(void)
{
	nrt_queue_t *q = NULL;
	nrt_trace_event_t r[16];
	uint64_t cur;
	int got;

	CHECK(nrt_queue_create(0, 0, &q) == NRT_OK, "queue: %s", nrt_last_error());
	{
		nrt_trace_rec_t d[64];

		while (nrt_trace_drain(d, 64) > 0)
			; /* earlier tests' records */
	}
	nrt_trace_sub("outside", 1, 2); /* trace off */
	cur = nrt_trace_cursor();
	nrt_trace_enable(true);
	nrt_trace_sub("not in a record", 1, 2);
	nrt_trace_set_corr(77);
	CHECK(nrt_queue_launch(q, k_parts, NULL, 0, "neuron_compiled.seg0") == NRT_OK, "launch");
	nrt_trace_set_corr(0);
	nrt_queue_synchronize(q);
	nrt_trace_enable(false);
	got = nrt_trace_read(&cur, r, 16, NULL);
	CHECK(got == 3, "records %d", got);
	if (got == 3) {
		CHECK(!strcmp(r[0].name, "part one") && !strcmp(r[1].name, "part two") && !strcmp(r[2].name, "neuron_compiled.seg0"),
		      "names %s / %s / %s", r[0].name, r[1].name, r[2].name);
		for (int i = 0; i < 3; i++)
			CHECK(r[i].corr == 77 && r[i].kind == (i < 2 ? NRT_TRACE_PART : NRT_TRACE_KERNEL) && r[i].queue == nrt_queue_id(q) &&
				      r[i].dev == 0,
			      "record %d: corr %llu kind %d queue %d", i, (unsigned long long)r[i].corr, r[i].kind, r[i].queue);
		CHECK(r[0].start_ns == 100 && r[1].end_ns == 300, "the parts' times");
	}
	{
		nrt_trace_rec_t d[16];
		int nd = nrt_trace_drain(d, 16);

		CHECK(nd == 1 && !strcmp(d[0].name, "neuron_compiled.seg0"), "the drain gives the launch only (%d records)", nd);
	}
	nrt_queue_destroy(q);
}

struct walk_acc {
	size_t active, blocks;
	const void *want;
	bool found;
};

static void walk_cb(void *ctx, const nrt_mem_block_t *b)
{
	struct walk_acc *a = ctx;

	a->blocks++;
	if (b->state == NRT_BLOCK_ACTIVE)
		a->active += b->size;
	if (b->ptr == a->want && b->state == NRT_BLOCK_ACTIVE && b->requested == 1000)
		a->found = true;
}

static void test_memory_walk(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	struct walk_acc a = { 0 };
	void *p = NULL;

	CHECK(nrt_malloc(q, 1000, &p) == NRT_OK && p, "malloc");
	a.want = p;
	CHECK(nrt_memory_walk(0, walk_cb, &a) == NRT_OK, "walk");
	CHECK(a.found && a.blocks >= 2 && a.active >= 1024, "block seen (%zu blocks)", a.blocks);
	CHECK(nrt_addr_on_device((char *)p + 999) && !nrt_addr_on_device(&a), "address test");
	nrt_free(p);
}

/* ---- the target interface (nrt_target.h) ------------------------------------------------------- */
/* A probe target: counts every call and delegates to the host NeuronCore, or fails on request. */
struct probe {
	atomic_int alloc, free, launch, copy, sync, rec, wait;
	atomic_int fail_launch, fail_copy; /* the next one fails */
	atomic_bool fail_alloc;            /* every one fails while set */
};

static int probe_alloc(void *ctx, int dev, size_t size, void **ptr)
{
	struct probe *p = ctx;
	const nrt_target_t *h = nrt_target_host();

	atomic_fetch_add(&p->alloc, 1);
	if (atomic_load(&p->fail_alloc))
		return NRT_ERR_OOM;
	return h->iface.alloc(h->context, dev, size, ptr);
}

static void probe_free(void *ctx, int dev, void *ptr, size_t size)
{
	struct probe *p = ctx;
	const nrt_target_t *h = nrt_target_host();

	atomic_fetch_add(&p->free, 1);
	h->iface.free(h->context, dev, ptr, size);
}

static int probe_launch(void *ctx, int dev, int queue, nrt_kernel_fn fn, void *args)
{
	struct probe *p = ctx;
	const nrt_target_t *h = nrt_target_host();

	atomic_fetch_add(&p->launch, 1);
	if (atomic_exchange(&p->fail_launch, 0)) {
		nrt_kernel_fail("injected launch fault on queue %d", queue);
		return 1;
	}
	return h->iface.launch(h->context, dev, queue, fn, args);
}

static int probe_copy(void *ctx, int dev, int queue, void *dst, const void *src, size_t n)
{
	struct probe *p = ctx;
	const nrt_target_t *h = nrt_target_host();

	atomic_fetch_add(&p->copy, 1);
	if (atomic_exchange(&p->fail_copy, 0)) {
		nrt_kernel_fail("injected copy fault (%zu bytes)", n);
		return 1;
	}
	return h->iface.copy(h->context, dev, queue, dst, src, n);
}

static int probe_sync(void *ctx, int dev, int queue)
{
	atomic_fetch_add(&((struct probe *)ctx)->sync, 1);
	return NRT_OK;
}

static int probe_record(void *ctx, int dev, int queue, uint64_t seq)
{
	atomic_fetch_add(&((struct probe *)ctx)->rec, 1);
	return NRT_OK;
}

static int probe_wait(void *ctx, int dev, int queue, int src_queue, uint64_t seq)
{
	atomic_fetch_add(&((struct probe *)ctx)->wait, 1);
	return NRT_OK;
}

static struct probe probe;
static const nrt_target_t probe_target = {
	.iface = { .name = "probe", .alloc = probe_alloc, .free = probe_free, .launch = probe_launch,
		   .copy = probe_copy, .synchronize = probe_sync, .event_record = probe_record,
		   .event_wait = probe_wait },
	.context = &probe,
};

static void test_target_interface(void)
{
	nrt_queue_t *q = nrt_queue_default(0), *q2 = NULL;
	atomic_int n = 0;
	struct count_args c = { &n };
	const nrt_target_i bad = { .name = "incomplete", .alloc = probe_alloc };
	const nrt_target_t bad_target = { bad, NULL };
	char src[256], dst[256];
	void *x = NULL, *y = NULL, *z = NULL;
	nrt_event_t *e = NULL;
	int rc;

	CHECK(nrt_target_get(0) == nrt_target_host(), "the host NeuronCore first");
	CHECK(!strcmp(nrt_target_host()->iface.name, "host NeuronCore"), "name");
	CHECK(nrt_target_set(0, &bad_target) == NRT_ERR_INVALID, "a target without launch is refused");
	CHECK(nrt_target_set(0, &probe_target) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_target_get(0) == &probe_target, "set");

	/* every device operation goes through the table */
	CHECK(nrt_malloc(q, 4096, &x) == NRT_OK && atomic_load(&probe.alloc) == 1, "alloc: %d",
	      atomic_load(&probe.alloc));
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK, "launch");
	CHECK(nrt_queue_launch_cost(q, k_count, &c, sizeof c, "test::count", 64) == NRT_OK, "launch inline");
	for (int i = 0; i < (int)sizeof src; i++)
		src[i] = (char)i;
	memset(dst, 0, sizeof dst);
	CHECK(nrt_memcpy_async(q, dst, src, sizeof src) == NRT_OK, "memcpy");
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	CHECK(nrt_event_create(0, 0, &e) == NRT_OK && nrt_event_record(e, q) == NRT_OK, "record");
	CHECK(nrt_queue_wait_event(q2, e) == NRT_OK, "wait");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "sync");
	CHECK(atomic_load(&n) == 2 && atomic_load(&probe.launch) == 2, "launches %d ran %d",
	      atomic_load(&probe.launch), atomic_load(&n));
	CHECK(atomic_load(&probe.copy) == 1 && !memcmp(dst, src, sizeof src), "copy %d", atomic_load(&probe.copy));
	CHECK(atomic_load(&probe.rec) == 1 && atomic_load(&probe.wait) == 1, "events %d %d",
	      atomic_load(&probe.rec), atomic_load(&probe.wait));
	CHECK(atomic_load(&probe.sync) >= 1, "synchronize");

	/* a fault injected through the target is a failing kernel: sticky, named, skips and poisons */
	atomic_store(&probe.fail_launch, 1);
	CHECK(nrt_malloc(q, 4096, &y) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "aten::index_select") == NRT_OK, "launch");
	CHECK(nrt_malloc(q, 4096, &z) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::skipped") == NRT_OK, "launch");
	rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "aten::index_select: injected launch fault on queue 0"),
	      "rc %d '%s'", rc, nrt_last_error());
	CHECK(atomic_load(&n) == 2, "the failed record and the one behind it did not run: %d", atomic_load(&n));
	CHECK(nrt_check_readable(y) == NRT_ERR_KERNEL && nrt_check_readable(z) == NRT_ERR_KERNEL, "poisoned");
	CHECK(nrt_check_readable(x) == NRT_OK, "older data stays readable");
	CHECK(nrt_queue_synchronize(q) == NRT_OK, "reported once");
	atomic_store(&probe.fail_copy, 1);
	CHECK(nrt_memcpy_async(q, dst, src, sizeof src) == NRT_OK, "memcpy");
	rc = nrt_queue_synchronize(q);
	CHECK(rc == NRT_ERR_KERNEL && !strcmp(nrt_last_error(), "nrt::memcpy: injected copy fault (256 bytes)"),
	      "rc %d '%s'", rc, nrt_last_error());
	CHECK(nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK &&
	      nrt_queue_synchronize(q) == NRT_OK && atomic_load(&n) == 3, "the queue runs again");
	atomic_store(&probe.fail_alloc, true);
	void *big = NULL;
	rc = nrt_malloc(q, (size_t)64 << 20, &big);
	CHECK(rc == NRT_ERR_OOM && big == NULL && strstr(nrt_last_error(), "out of memory on neuron:0: tried to allocate 64.00 MiB"),
	      "rc %d '%s'", rc, nrt_last_error());
	atomic_store(&probe.fail_alloc, false);

	/* a block from one target is never freed through another */
	CHECK(nrt_target_set(0, NULL) == NRT_ERR_INVALID && nrt_target_get(0) == &probe_target, "live memory");
	nrt_event_destroy(e);
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	nrt_free(x);
	nrt_free(y);
	nrt_free(z);
	CHECK(nrt_target_set(0, NULL) == NRT_OK && nrt_target_get(0) == nrt_target_host(), "%s", nrt_last_error());
	CHECK(atomic_load(&probe.free) == atomic_load(&probe.alloc) - 2, "every segment went back through free: %d of %d",
	      atomic_load(&probe.free), atomic_load(&probe.alloc));
	CHECK(nrt_malloc(q, 4096, &x) == NRT_OK && nrt_queue_launch(q, k_count, &c, sizeof c, "test::count") == NRT_OK &&
	      nrt_queue_synchronize(q) == NRT_OK, "host again");
	CHECK(atomic_load(&probe.launch) == 4 && atomic_load(&n) == 4, "the probe sees nothing after it left");
	nrt_free(x);
}

int main(void)
{
	unsetenv("NEURON_RT_VISIBLE_CORES");
	unsetenv("NEURON_RT_MEMORY_LIMIT");
	unsetenv("NEURON_LAUNCH_BLOCKING");
	unsetenv("NEURON_NUM_THREADS");
	if (nrt_init() != NRT_OK) {
		fprintf(stderr, "nrt_init: %s\n", nrt_last_error());
		return 1;
	}
	RUN(test_fork_catches_no_lock); /* first: before any runtime thread */
	RUN(test_status_strings);
	RUN(test_env_parse_good);
	RUN(test_env_parse_garbage);
	RUN(test_env_init_errors);
	RUN(test_queue_order);
	RUN(test_queue_ids_and_query);
	RUN(test_sticky_error);
	RUN(test_poisoned_outputs);
	RUN(test_op_brackets);
	RUN(test_fork_refused_in_child);
	RUN(test_inline_launch);
	RUN(test_launch_blocking);
	RUN(test_events);
	RUN(test_wait_event_across_queues);
	RUN(test_concurrent_launches);
	RUN(test_thread_pool);
	RUN(test_pool_stress);
	RUN(test_memcpy_and_host);
	RUN(test_trace);
	RUN(test_trace_corr_site);
	RUN(test_trace_sub);
	RUN(test_memory_walk);
	RUN(test_target_interface);
	return ctest_finish();
}
