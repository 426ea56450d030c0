/* test_alloc.c - caching allocator: stats, rounding, splitting and merging, queue-ordered reuse,
 * record_queue, OOM with retry, empty_cache, fault injection over every segment allocation, and a
 * seeded fuzz of alloc/free/record_queue on two queues. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctest.h"
#include "nrt.h"
#include "nrt_observe.h"

#define MiB ((size_t)1 << 20)

static nrt_mem_stats_t stats(void)
{
	nrt_mem_stats_t s;

	memset(&s, 0, sizeof s);
	CHECK(nrt_memory_stats(0, &s) == NRT_OK, "%s", nrt_last_error());
	return s;
}

static void check_no_live(const char *where)
{
	nrt_mem_stats_t s = stats();

	CHECK(s.allocation.current == 0 && s.allocated_bytes.current == 0 && s.requested_bytes.current == 0,
	      "%s: %lld allocations, %lld bytes allocated, %lld requested", where,
	      (long long)s.allocation.current, (long long)s.allocated_bytes.current,
	      (long long)s.requested_bytes.current);
	CHECK(s.active.current == 0 && s.active_bytes.current == 0, "%s: %lld active blocks", where,
	      (long long)s.active.current);
}

static int set_limit(const char *limit)
{
	int rc;

	nrt_device_synchronize(0);
	setenv("NEURON_RT_MEMORY_LIMIT", limit, 1);
	rc = nrt_reinit_for_testing();
	CHECK(rc == NRT_OK, "reinit with limit %s: %s", limit, nrt_last_error());
	return rc;
}

/* A kernel that blocks its queue until the test opens the gate. */
static int k_gate(void *p)
{
	atomic_int *gate = *(atomic_int **)p;
	struct timespec ts = { 0, 200000 };

	while (!atomic_load(gate))
		nanosleep(&ts, NULL);
	return 0;
}

/* ---- basics --------------------------------------------------------------------------------------- */
static void test_stats_back_to_zero(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	static const size_t sizes[] = { 1, 511, 512, 513, 4096, 100000, MiB, MiB + 1, 3 * MiB, 17 * MiB };
	void *p[sizeof sizes / sizeof *sizes];
	nrt_mem_stats_t s;
	void *z = (void *)&s;

	nrt_empty_cache(0);
	nrt_reset_accumulated_stats(0);
	CHECK(nrt_malloc(q, 0, &z) == NRT_OK && z == NULL, "zero bytes gives NULL");
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		CHECK(nrt_malloc(q, sizes[i], &p[i]) == NRT_OK && p[i], "malloc %zu: %s", sizes[i], nrt_last_error());
		CHECK(((uintptr_t)p[i] & 63) == 0, "aligned");
		memset(p[i], 0xab, sizes[i]);
	}
	s = stats();
	CHECK(s.allocation.current == 10 && s.active.current == 10, "10 live");
	CHECK(s.requested_bytes.current == (int64_t)(1 + 511 + 512 + 513 + 4096 + 100000 + MiB + MiB + 1 +
						     3 * MiB + 17 * MiB), "requested %lld",
	      (long long)s.requested_bytes.current);
	CHECK(s.allocated_bytes.current == (int64_t)(512 + 512 + 512 + 1024 + 4096 + 100352 + MiB + MiB + 512 +
						     3 * MiB + 18 * MiB), /* 1 MiB rest: not split */ "allocated %lld",
	      (long long)s.allocated_bytes.current);
	/* 2 MiB small segment (up to 1 MiB is small); 20 MiB for the 1 MiB+1 and 3 MiB blocks; 18 MiB for
	 * the 17 MiB block, which does not fit in the 16 MiB left of the 20 MiB segment */
	CHECK(s.reserved_bytes.current == (int64_t)(2 * MiB + 20 * MiB + 18 * MiB), "reserved %lld",
	      (long long)s.reserved_bytes.current);
	CHECK(s.segment.current == 3 && s.num_device_alloc == 3, "segments %lld", (long long)s.segment.current);
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		CHECK(nrt_free(p[i]) == NRT_OK, "free");
	check_no_live("after free");
	s = stats();
	CHECK(s.allocation.allocated == 10 && s.allocation.freed == 10 && s.allocation.peak == 10, "counts");
	CHECK(s.inactive_split.current == 0, "all merged back: %lld split", (long long)s.inactive_split.current);
	CHECK(s.reserved_bytes.current == (int64_t)(40 * MiB), "still cached");
	CHECK(nrt_empty_cache(0) == NRT_OK, "empty_cache");
	s = stats();
	CHECK(s.reserved_bytes.current == 0 && s.segment.current == 0 && s.num_device_free == 3, "released");
	CHECK(s.reserved_bytes.peak == (int64_t)(40 * MiB), "peak kept");
	CHECK(nrt_reset_peak_stats(0) == NRT_OK && stats().reserved_bytes.peak == 0, "reset peak");
	CHECK(nrt_reset_accumulated_stats(0) == NRT_OK, "reset accumulated");
	s = stats();
	CHECK(s.allocation.allocated == 0 && s.allocation.freed == 0 && s.num_device_alloc == 0 &&
	      s.num_device_free == 0, "accumulated cleared");
	CHECK(nrt_free(NULL) == NRT_OK, "free NULL");
	CHECK(nrt_free(&s) == NRT_ERR_INVALID, "free of a foreign pointer");
	CHECK(nrt_memory_stats(7, &s) == NRT_ERR_INVALID, "bad device");
}

static void test_split_merge_reuse(void)
{
	nrt_queue_t *q = nrt_queue_default(0), *q2 = NULL;
	void *a, *b, *c, *d, *e, *big1, *big2;
	nrt_mem_stats_t s;
	int dev = -1;

	nrt_empty_cache(0);
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	CHECK(nrt_malloc(q, 1000, &a) == NRT_OK && nrt_malloc(q, 1000, &b) == NRT_OK, "malloc");
	CHECK((char *)b == (char *)a + 1024, "b carved right after a: %p %p", a, b);
	s = stats();
	CHECK(s.inactive_split.current == 1 && s.inactive_split_bytes.current == (int64_t)(2 * MiB - 2048),
	      "one free remainder: %lld", (long long)s.inactive_split_bytes.current);
	CHECK(nrt_ptr_device(a, &dev) == NRT_OK && dev == 0, "ptr_device");
	CHECK(nrt_ptr_device((char *)a + 64, &dev) == NRT_ERR_INVALID, "interior pointer");
	CHECK(nrt_free(a) == NRT_OK, "free");
	CHECK(nrt_ptr_device(a, &dev) == NRT_ERR_INVALID, "freed pointer");
	CHECK(nrt_free(a) == NRT_ERR_INVALID, "double free");
	CHECK(nrt_malloc(q, 900, &c) == NRT_OK && c == a, "same queue reuses at once: %p %p", c, a);
	CHECK(nrt_free(c) == NRT_OK, "free");
	CHECK(nrt_malloc(q2, 900, &d) == NRT_OK && d != a, "another queue does not get q's block");
	CHECK(nrt_free(b) == NRT_OK, "free");
	/* a and b merged with the remainder: a 2 KiB request gets a's address */
	CHECK(nrt_malloc(q, 2048, &e) == NRT_OK && e == a, "merged: %p %p", e, a);
	CHECK(nrt_free(e) == NRT_OK && nrt_free(d) == NRT_OK, "free");
	s = stats();
	CHECK(s.inactive_split.current == 0, "merged back");

	/* large pool: a 20 MiB segment serves two 3 MiB requests */
	CHECK(nrt_malloc(q, 3 * MiB, &big1) == NRT_OK && nrt_malloc(q, 3 * MiB, &big2) == NRT_OK, "malloc");
	CHECK((char *)big2 == (char *)big1 + 3 * MiB, "carved from one segment");
	s = stats();
	CHECK(s.segment.current == 3, "small q, small q2, one large: %lld", (long long)s.segment.current);
	CHECK(nrt_free(big1) == NRT_OK && nrt_free(big2) == NRT_OK, "free");
	CHECK(nrt_malloc(q, 15 * MiB, &big1) == NRT_OK, "malloc");
	CHECK(stats().segment.current == 3, "15 MiB fits the cached 20 MiB segment");
	CHECK(nrt_malloc(q, 25 * MiB, &big2) == NRT_OK, "malloc");
	s = stats();
	CHECK(s.segment.current == 4 && s.reserved_bytes.current == (int64_t)(2 * 2 * MiB + 20 * MiB + 26 * MiB),
	      "25 MiB gets its own 26 MiB segment: %lld", (long long)s.reserved_bytes.current);
	CHECK(nrt_free(big2) == NRT_OK, "free");
	CHECK(nrt_free(big1) == NRT_OK, "free");
	check_no_live("split/merge");
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	nrt_empty_cache(0);
	CHECK(stats().reserved_bytes.current == 0, "empty");
}

static void test_record_queue(void)
{
	nrt_queue_t *q1 = nrt_queue_default(0), *q2 = NULL;
	atomic_int gate = 0;
	atomic_int *gp = &gate;
	void *p, *p2, *x, *y;
	nrt_mem_stats_t s;

	nrt_empty_cache(0);
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	CHECK(nrt_malloc(q1, 1000, &p) == NRT_OK && nrt_malloc(q1, 1000, &p2) == NRT_OK, "malloc");
	CHECK(nrt_record_queue(p, q2) == NRT_OK, "record");
	CHECK(nrt_record_queue(p, q2) == NRT_OK, "record twice");
	CHECK(nrt_record_queue(p, q1) == NRT_OK, "record on the owner: nothing to do");
	CHECK(nrt_record_queue(&s, q2) == NRT_ERR_INVALID, "not a device pointer");
	CHECK(nrt_queue_launch(q2, k_gate, &gp, sizeof gp, "test::gate") == NRT_OK, "launch");
	CHECK(nrt_free(p) == NRT_OK, "free");
	s = stats();
	CHECK(s.allocation.current == 1 && s.active.current == 2, "p is pending: %lld active",
	      (long long)s.active.current);
	CHECK(nrt_malloc(q1, 1000, &x) == NRT_OK && x != p, "pending block handed out on q1: %p", x);
	CHECK(nrt_queue_query(q2) == NRT_ERR_NOT_READY, "q2 still blocked");
	atomic_store(&gate, 1);
	CHECK(nrt_queue_synchronize(q2) == NRT_OK, "sync");
	CHECK(nrt_malloc(q1, 1000, &y) == NRT_OK && y == p, "after q2 passed the free, p is reused: %p %p", y, p);
	s = stats();
	CHECK(s.active.current == 3, "no pending left");

	/* a use recorded on a queue that is then destroyed does not keep the block */
	CHECK(nrt_record_queue(y, q2) == NRT_OK, "record");
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	CHECK(nrt_free(y) == NRT_OK && nrt_free(x) == NRT_OK && nrt_free(p2) == NRT_OK, "free");
	check_no_live("record_queue");
}

static void test_oom(void)
{
	nrt_queue_t *q, *q2 = NULL;
	void *a = NULL, *b = NULL, *c = NULL, *small = NULL;
	nrt_mem_stats_t s0, s;
	int rc;

	if (set_limit("64MiB"))
		return;
	q = nrt_queue_default(0);
	CHECK(stats().limit_bytes == (int64_t)(64 * MiB), "limit");
	CHECK(nrt_malloc(q, 40 * MiB, &a) == NRT_OK, "40 MiB");
	CHECK(nrt_malloc(q, 100, &small) == NRT_OK && nrt_free(small) == NRT_OK, "cache a small segment");
	s0 = stats();
	CHECK(s0.reserved_bytes.current == (int64_t)(42 * MiB), "reserved %lld", (long long)s0.reserved_bytes.current);
	rc = nrt_malloc(q, 30 * MiB, &b);
	CHECK(rc == NRT_ERR_OOM && b == NULL, "rc %d", rc);
	CHECK(strcmp(nrt_last_error(), "out of memory on neuron:0: tried to allocate 30.00 MiB; 40.00 MiB "
				       "allocated, 40.00 MiB reserved, limit 64.00 MiB (NEURON_RT_MEMORY_LIMIT)") == 0,
	      "message '%s'", nrt_last_error());
	s = stats();
	CHECK(s.num_alloc_retries == s0.num_alloc_retries + 1 && s.num_ooms == s0.num_ooms + 1, "counters");
	CHECK(s.reserved_bytes.current == (int64_t)(40 * MiB), "cached segment released before the retry");
	CHECK(nrt_malloc(q, 10 * MiB, &b) == NRT_OK, "next allocation works: %s", nrt_last_error());
	CHECK(nrt_free(b) == NRT_OK, "free");

	/* the retry succeeds once q's cached 40 MiB segment is released */
	CHECK(nrt_free(a) == NRT_OK, "free");
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	s0 = stats();
	CHECK(nrt_malloc(q2, 30 * MiB, &c) == NRT_OK, "retry succeeded: %s", nrt_last_error());
	s = stats();
	CHECK(s.num_alloc_retries == s0.num_alloc_retries + 1 && s.num_ooms == s0.num_ooms, "retry counted");
	CHECK(nrt_free(c) == NRT_OK, "free");
	rc = nrt_malloc(q, (size_t)1 << 40, &a);
	CHECK(rc == NRT_ERR_OOM && strstr(nrt_last_error(), "tried to allocate 1.00 TiB"), "%s", nrt_last_error());
	rc = nrt_malloc(q, SIZE_MAX - 10, &a);
	CHECK(rc == NRT_ERR_OOM, "huge request: rc %d", rc);
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	check_no_live("oom");
	set_limit("1GiB");
}

/* An OOM with pending frees waits for the queue that holds them and then reuses the memory. */
static void test_oom_waits_for_pending(void)
{
	nrt_queue_t *q, *q2 = NULL;
	atomic_int gate = 0;
	atomic_int *gp = &gate;
	void *a = NULL, *b = NULL;

	if (set_limit("32MiB"))
		return;
	q = nrt_queue_default(0);
	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	CHECK(nrt_malloc(q, 24 * MiB, &a) == NRT_OK, "malloc");
	CHECK(nrt_record_queue(a, q2) == NRT_OK, "record");
	CHECK(nrt_queue_launch(q2, k_gate, &gp, sizeof gp, "test::gate") == NRT_OK, "launch");
	CHECK(nrt_free(a) == NRT_OK, "free");
	atomic_store(&gate, 1); /* q2 finishes soon; the OOM path must wait for it, not fail */
	CHECK(nrt_malloc(q, 24 * MiB, &b) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_free(b) == NRT_OK, "free");
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	check_no_live("oom pending");
	set_limit("1GiB");
}

static void test_devices(void)
{
	void *p = NULL;
	int dev = -1;

	setenv("NEURON_RT_VISIBLE_CORES", "0,2", 1);
	if (set_limit("1GiB"))
		return;
	CHECK(nrt_device_count() == 2, "two devices");
	CHECK(nrt_malloc(nrt_queue_default(1), 5000, &p) == NRT_OK, "malloc on neuron:1");
	CHECK(nrt_ptr_device(p, &dev) == NRT_OK && dev == 1, "dev %d", dev);
	CHECK(nrt_record_queue(p, nrt_queue_default(0)) == NRT_ERR_INVALID, "cross-device record");
	CHECK(nrt_reinit_for_testing() == NRT_ERR_INVALID, "reinit refused while memory is live");
	CHECK(nrt_free(p) == NRT_OK, "free");
	unsetenv("NEURON_RT_VISIBLE_CORES");
	set_limit("1GiB");
	CHECK(nrt_device_count() == 1, "one device");
}

/* ---- fault injection -------------------------------------------------------------------------------- */
/* Allocates a fixed list of sizes; returns the first failure (pointers that succeeded stay in p). */
static const size_t fi_sizes[] = { 1000, 200000, 3 << 20, 700, 5000000, 12 << 20, 3 << 20, 64, 30 << 20,
				  2 << 20 };
#define FI_N (sizeof fi_sizes / sizeof *fi_sizes)

static int fi_scenario(nrt_queue_t *q, void *p[FI_N])
{
	for (size_t i = 0; i < FI_N; i++) {
		int rc = nrt_malloc(q, fi_sizes[i], &p[i]);

		if (rc)
			return rc;
		memset(p[i], (int)i, fi_sizes[i]);
	}
	return NRT_OK;
}

static void fi_free_all(void *p[FI_N])
{
	for (size_t i = 0; i < FI_N; i++) {
		CHECK(nrt_free(p[i]) == NRT_OK, "free %zu", i);
		p[i] = NULL;
	}
}

static void test_fault_injection(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	void *p[FI_N] = { 0 };
	int64_t nseg;
	int rc;

	nrt_empty_cache(0);
	nrt_reset_accumulated_stats(0);
	CHECK(fi_scenario(q, p) == NRT_OK, "clean run: %s", nrt_last_error());
	fi_free_all(p);
	nseg = stats().num_device_alloc;
	CHECK(nseg >= 4, "the scenario takes %lld segments", (long long)nseg);
	for (int64_t n = 1; n <= nseg; n++) {
		nrt_mem_stats_t s0, s;

		nrt_empty_cache(0);
		nrt_reset_accumulated_stats(0);
		s0 = stats();
		nrt_fault_inject_alloc(n);
		rc = fi_scenario(q, p);
		s = stats();
		CHECK(rc == NRT_ERR_OOM, "n=%lld: rc %d", (long long)n, rc);
		CHECK(strstr(nrt_last_error(), "out of memory on neuron:0") &&
		      strstr(nrt_last_error(), "NEURON_RT_MEMORY_LIMIT"), "n=%lld: %s", (long long)n, nrt_last_error());
		CHECK(s.num_device_alloc == n - 1, "n=%lld: failed at segment %lld", (long long)n,
		      (long long)s.num_device_alloc + 1);
		CHECK(s.num_ooms == s0.num_ooms + 1 && s.num_alloc_retries == s0.num_alloc_retries + 1,
		      "n=%lld: one retry, one OOM", (long long)n);
		fi_free_all(p);
		check_no_live("fault injection");
		CHECK(nrt_malloc(q, 100, &p[0]) == NRT_OK && nrt_free(p[0]) == NRT_OK, "usable afterwards");
		p[0] = NULL;
	}
	nrt_empty_cache(0);
	nrt_fault_inject_alloc(nseg + 1); /* one past the end: the scenario succeeds */
	CHECK(fi_scenario(q, p) == NRT_OK, "n past the end: %s", nrt_last_error());
	fi_free_all(p);
	nrt_fault_inject_alloc(0);
	nrt_empty_cache(0);
	CHECK(fi_scenario(q, p) == NRT_OK, "disabled: %s", nrt_last_error());
	fi_free_all(p);
	check_no_live("fault injection end");
	nrt_empty_cache(0);
}

/* ---- fuzz ------------------------------------------------------------------------------------------ */
enum { FZ_SLOTS = 128, FZ_OPS = 100000 };

struct fz_slot {
	char *p;
	size_t size;
	uint64_t id;
	int queue;
};

static uint64_t rng = 0x2545F4914F6CDD1DULL;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* One word per 512-byte granule (blocks start 512-aligned), so overlapping blocks clobber each other. */
static void fz_write(char *p, size_t size, uint64_t id)
{
	for (size_t off = 0; off < size; off += 512) {
		uint64_t v = id * 0x9E3779B97F4A7C15ULL + off;
		size_t n = size - off < 8 ? size - off : 8;

		memcpy(p + off, &v, n);
	}
}

static bool fz_check(const char *p, size_t size, uint64_t id)
{
	for (size_t off = 0; off < size; off += 512) {
		uint64_t v = id * 0x9E3779B97F4A7C15ULL + off, w = 0;
		size_t n = size - off < 8 ? size - off : 8;

		memcpy(&w, p + off, n);
		if (memcmp(&w, &v, n))
			return false;
	}
	return true;
}

struct fz_use_args {
	char *p;
	size_t size;
	uint64_t id;
	atomic_int *bad;
};

/* Runs on the other queue after record_queue: the block must still hold its pattern even if the host
 * freed it meanwhile (it may not be handed out again before this kernel is done). */
static int k_fz_use(void *a)
{
	struct fz_use_args *u = a;

	if (!fz_check(u->p, u->size, u->id))
		atomic_fetch_add(u->bad, 1);
	return 0;
}

static int k_fz_spin(void *a)
{
	int64_t until = nrt_now_ns() + *(int *)a * 1000;

	while (nrt_now_ns() < until)
		;
	return 0;
}

static size_t fz_size(void)
{
	uint64_t r = rnd() % 100;

	if (r < 70)
		return 1 + rnd() % 65536;
	if (r < 95)
		return 65536 + rnd() % (MiB - 65536 + 1);
	return MiB + rnd() % (3 * MiB);
}

static void test_fuzz(void)
{
	static struct fz_slot slot[FZ_SLOTS];
	nrt_queue_t *q[2] = { nrt_queue_default(0), NULL };
	atomic_int bad_use = 0;
	int bad_free = 0, errors = 0, records = 0, pending_seen = 0;
	uint64_t next_id = 1;
	nrt_mem_stats_t s;

	CHECK(nrt_queue_create(0, 0, &q[1]) == NRT_OK, "queue");
	if (!q[1])
		return;
	for (int op = 0; op < FZ_OPS; op++) {
		struct fz_slot *sl = &slot[rnd() % FZ_SLOTS];
		uint64_t r = rnd() % 1000;

		if (r < 2) {
			if (nrt_queue_synchronize(q[rnd() % 2]))
				errors++;
			continue;
		}
		if (r < 3) {
			if (nrt_device_synchronize(0) || nrt_empty_cache(0))
				errors++;
			continue;
		}
		if (r < 13) { /* some work on a queue so that uses stay pending for a while */
			int us = 20 + (int)(rnd() % 100);

			if (nrt_queue_launch(q[rnd() % 2], k_fz_spin, &us, sizeof us, "test::spin"))
				errors++;
			continue;
		}
		if (!sl->p) {
			sl->size = fz_size();
			sl->queue = (int)(rnd() % 2);
			sl->id = next_id++;
			if (nrt_malloc(q[sl->queue], sl->size, (void **)&sl->p) || !sl->p) {
				errors++;
				sl->p = NULL;
				continue;
			}
			fz_write(sl->p, sl->size, sl->id);
		} else if (r < 80) {
			struct fz_use_args u = { sl->p, sl->size, sl->id, &bad_use };
			nrt_queue_t *other = q[1 - sl->queue];

			if (nrt_record_queue(sl->p, other) ||
			    nrt_queue_launch(other, k_fz_use, &u, sizeof u, "test::use"))
				errors++;
			records++;
		} else {
			if (!fz_check(sl->p, sl->size, sl->id))
				bad_free++;
			if (nrt_free(sl->p))
				errors++;
			sl->p = NULL;
			if (op % 64 == 0 && stats().active.current > stats().allocation.current)
				pending_seen++;
		}
	}
	for (int i = 0; i < FZ_SLOTS; i++) {
		if (slot[i].p) {
			if (!fz_check(slot[i].p, slot[i].size, slot[i].id))
				bad_free++;
			if (nrt_free(slot[i].p))
				errors++;
			slot[i].p = NULL;
		}
	}
	CHECK(errors == 0, "%d calls failed (last: %s)", errors, nrt_last_error());
	CHECK(bad_free == 0, "%d blocks corrupted at free (overlapping blocks)", bad_free);
	CHECK(nrt_queue_synchronize(q[0]) == NRT_OK && nrt_queue_synchronize(q[1]) == NRT_OK, "sync");
	CHECK(atomic_load(&bad_use) == 0, "%d blocks reused before a recorded use finished", atomic_load(&bad_use));
	CHECK(records > 1000 && pending_seen > 0, "exercised record_queue: %d records, %d pending", records,
	      pending_seen);
	s = stats();
	CHECK(s.allocated_bytes.current == 0 && s.active.current == 0 && s.allocation.current == 0,
	      "end: %lld bytes allocated, %lld active", (long long)s.allocated_bytes.current,
	      (long long)s.active.current);
	CHECK(s.inactive_split.current == 0, "all merged: %lld", (long long)s.inactive_split.current);
	CHECK(nrt_queue_destroy(q[1]) == NRT_OK, "destroy");
	nrt_empty_cache(0);
	s = stats();
	CHECK(s.reserved_bytes.current == 0 && s.segment.current == 0, "released");
}

/* ---- threads ---------------------------------------------------------------------------------------- */
static void *alloc_thread(void *arg)
{
	nrt_queue_t *q = arg;
	int *bad = calloc(1, sizeof *bad);

	for (int i = 0; i < 5000 && bad; i++) {
		size_t n = 1 + (size_t)(i * 7919) % 300000;
		unsigned char *p = NULL;

		if (nrt_malloc(q, n, (void **)&p) || !p) {
			(*bad)++;
			continue;
		}
		p[0] = (unsigned char)i;
		p[n - 1] = (unsigned char)i;
		if (p[0] != (unsigned char)i || nrt_free(p))
			(*bad)++;
	}
	return bad;
}

static void test_threads(void)
{
	nrt_queue_t *q2 = NULL;
	pthread_t t[4];

	CHECK(nrt_queue_create(0, 0, &q2) == NRT_OK, "queue");
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, alloc_thread, i % 2 ? q2 : nrt_queue_default(0));
	for (int i = 0; i < 4; i++) {
		int *bad = NULL;

		pthread_join(t[i], (void **)&bad);
		CHECK(bad && *bad == 0, "thread %d: %d failures", i, bad ? *bad : -1);
		free(bad);
	}
	check_no_live("threads");
	CHECK(nrt_queue_destroy(q2) == NRT_OK, "destroy");
	nrt_empty_cache(0);
}

/* Segments that are 2 MiB multiples start on a 2 MiB boundary (huge pages advised) unless switched
 * off; either way the memory is usable to its last byte. */
static void test_huge_page_segments(void)
{
	nrt_queue_t *q = nrt_queue_default(0);

	for (int on = 1; on >= 0; on--) {
		void *p = NULL, *r = NULL;

		nrt_set_hugepages(on);
		CHECK(nrt_empty_cache(0) == NRT_OK, "%s", nrt_last_error());
		CHECK(nrt_malloc(q, 12 * MiB, &p) == NRT_OK && p, "12 MiB: %s", nrt_last_error());
		CHECK(nrt_malloc(q, 3 * MiB, &r) == NRT_OK && r, "3 MiB: %s", nrt_last_error());
		if (on)
			CHECK((uintptr_t)p % (2 * MiB) == 0 && (uintptr_t)r % (2 * MiB) == 0, "2 MiB aligned: %p %p", p, r);
		else
			CHECK((uintptr_t)p % 4096 == 0, "page aligned: %p", p);
		if (p && r) {
			memset(p, 0x5a, 12 * MiB);
			memset(r, 0xa5, 3 * MiB);
			CHECK(((unsigned char *)p)[12 * MiB - 1] == 0x5a && ((unsigned char *)r)[3 * MiB - 1] == 0xa5, "contents");
		}
		nrt_free(p);
		nrt_free(r);
		nrt_device_synchronize(0);
	}
	nrt_set_hugepages(true);
	check_no_live("huge pages");
}

/* ---- segments stay until their queued kernels are done (issue 16, 11) ------------------------------ */
/* A kernel that waits for its gate and then writes its whole block: the randn behind a freed tensor. */
struct late_write {
	atomic_int *gate;
	atomic_int *done;
	char *p;
	size_t n;
};

static int k_late_write(void *p)
{
	struct late_write *a = p;
	struct timespec ts = { 0, 200000 };

	while (!atomic_load(a->gate))
		nanosleep(&ts, NULL);
	memset(a->p, 0x5a, a->n);
	atomic_store(a->done, 1);
	return 0;
}

static void *open_gate_later(void *p)
{
	struct timespec ts = { 0, 30 * 1000 * 1000 };

	nanosleep(&ts, NULL);
	atomic_store((atomic_int *)p, 1);
	return NULL;
}

/* x = randn(20 << 20); del x; empty_cache(): the segment must not go back while the kernel writing it is
 * queued (under ASan the write would be a heap-use-after-free; here empty_cache also must have waited). */
static void test_empty_cache_waits_for_queued_kernels(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	atomic_int gate = 0, done = 0;
	struct late_write a = { &gate, &done, NULL, 80 * MiB };
	pthread_t t;

	nrt_empty_cache(0);
	CHECK(nrt_malloc(q, a.n, (void **)&a.p) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_late_write, &a, sizeof a, "test::late_write") == NRT_OK, "launch");
	CHECK(nrt_free(a.p) == NRT_OK, "free");
	CHECK(pthread_create(&t, NULL, open_gate_later, &gate) == 0, "thread");
	CHECK(nrt_empty_cache(0) == NRT_OK, "%s", nrt_last_error());
	CHECK(atomic_load(&done) == 1, "empty_cache returned the segment while its kernel was still queued");
	CHECK(stats().reserved_bytes.current == 0, "segment released after the kernel: %lld reserved",
	      (long long)stats().reserved_bytes.current);
	pthread_join(t, NULL);

	/* a freed input: the kernel reads (here: writes) a block whose tensor is gone, empty_cache from
	 * another queue's point of view changes nothing */
	gate = 0;
	done = 0;
	CHECK(nrt_malloc(q, 3 * MiB, (void **)&a.p) == NRT_OK, "%s", nrt_last_error());
	a.n = 3 * MiB;
	CHECK(nrt_queue_launch(q, k_late_write, &a, sizeof a, "test::late_write") == NRT_OK, "launch");
	CHECK(nrt_free(a.p) == NRT_OK, "free");
	CHECK(pthread_create(&t, NULL, open_gate_later, &gate) == 0, "thread");
	CHECK(nrt_empty_cache(0) == NRT_OK, "%s", nrt_last_error());
	CHECK(atomic_load(&done) == 1, "empty_cache released a small segment under a queued kernel");
	pthread_join(t, NULL);
	CHECK(nrt_device_synchronize(0) == NRT_OK, "sync");
	check_no_live("empty_cache waits");
}

/* The OOM retry releases cached segments too: it must wait for their kernels the same way. */
static void test_oom_retry_waits_for_queued_kernels(void)
{
	nrt_queue_t *q;
	atomic_int gate = 0, done = 0;
	struct late_write a = { &gate, &done, NULL, 40 * MiB };
	void *b = NULL;
	pthread_t t;

	if (set_limit("64MiB"))
		return;
	q = nrt_queue_default(0);
	CHECK(nrt_malloc(q, a.n, (void **)&a.p) == NRT_OK, "%s", nrt_last_error());
	CHECK(nrt_queue_launch(q, k_late_write, &a, sizeof a, "test::late_write") == NRT_OK, "launch");
	CHECK(nrt_free(a.p) == NRT_OK, "free");
	CHECK(pthread_create(&t, NULL, open_gate_later, &gate) == 0, "thread");
	/* 50 MiB fits only once the cached 40 MiB segment is gone */
	CHECK(nrt_malloc(q, 50 * MiB, &b) == NRT_OK, "%s", nrt_last_error());
	CHECK(atomic_load(&done) == 1, "the OOM retry released a segment while its kernel was still queued");
	CHECK(nrt_free(b) == NRT_OK, "free");
	pthread_join(t, NULL);
	CHECK(nrt_device_synchronize(0) == NRT_OK, "sync");
	check_no_live("oom retry waits");
	set_limit("1GiB");
}

/* ---- the memory observer: segments taken and returned ------------------------------------------------ */
static struct { int action; const void *ptr; size_t size; } obs_ev[64];
static int obs_n;

static void obs_fn(int action, int dev, const void *ptr, size_t size, size_t requested, int queue)
{
	(void)dev, (void)requested, (void)queue;
	if (obs_n < 64)
		obs_ev[obs_n].action = action, obs_ev[obs_n].ptr = ptr, obs_ev[obs_n].size = size, obs_n++;
}

/* A large allocation that needs a new segment is told as SEGMENT_ALLOC (the segment's address and size)
 * before its ALLOC; empty_cache returning the segment is SEGMENT_FREE with the same address and size;
 * a reuse of a cached segment tells no segment event. */
static void test_observer_segment_events(void)
{
	nrt_queue_t *q = nrt_queue_default(0);
	void *p = NULL;
	int seg = -1, al = -1, fr = -1, sfree = -1;

	nrt_empty_cache(0);
	obs_n = 0;
	nrt_set_mem_observer(obs_fn);
	CHECK(nrt_malloc(q, 48 * MiB, &p) == NRT_OK && p, "malloc: %s", nrt_last_error());
	nrt_free(p);
	void *p2 = NULL;
	CHECK(nrt_malloc(q, 48 * MiB, &p2) == NRT_OK && p2 == p, "the cached segment is reused");
	nrt_free(p2);
	nrt_device_synchronize(0);
	nrt_empty_cache(0);
	nrt_set_mem_observer(NULL);
	for (int i = 0; i < obs_n; i++) {
		if (obs_ev[i].action == NRT_MEM_SEGMENT_ALLOC && obs_ev[i].ptr == p) {
			CHECK(seg < 0, "one segment_alloc");
			seg = i;
		}
		if (obs_ev[i].action == NRT_MEM_ALLOC && obs_ev[i].ptr == p && al < 0)
			al = i;
		if (obs_ev[i].action == NRT_MEM_SEGMENT_FREE && obs_ev[i].ptr == p) {
			CHECK(sfree < 0, "one segment_free");
			sfree = i;
		}
		if (obs_ev[i].action == NRT_MEM_FREE && obs_ev[i].ptr == p)
			fr = i;
	}
	CHECK(seg >= 0 && al > seg && fr > al && sfree > fr, "order: segment_alloc %d, alloc %d, free %d, segment_free %d (%d events)",
	      seg, al, fr, sfree, obs_n);
	if (seg >= 0 && sfree >= 0)
		CHECK(obs_ev[seg].size >= 48 * MiB && obs_ev[seg].size == obs_ev[sfree].size, "segment sizes %zu / %zu",
		      obs_ev[seg].size, obs_ev[sfree].size);
	CHECK(obs_n == 6, "2 segment events and 2 allocs + 2 frees, got %d", obs_n);
	check_no_live("observer");
}

int main(void)
{
	unsetenv("NEURON_RT_VISIBLE_CORES");
	unsetenv("NEURON_LAUNCH_BLOCKING");
	setenv("NEURON_RT_MEMORY_LIMIT", "1GiB", 1);
	if (nrt_init() != NRT_OK) {
		fprintf(stderr, "nrt_init: %s\n", nrt_last_error());
		return 1;
	}
	RUN(test_stats_back_to_zero);
	RUN(test_huge_page_segments);
	RUN(test_split_merge_reuse);
	RUN(test_record_queue);
	RUN(test_oom);
	RUN(test_oom_waits_for_pending);
	RUN(test_empty_cache_waits_for_queued_kernels);
	RUN(test_oom_retry_waits_for_queued_kernels);
	RUN(test_observer_segment_events);
	RUN(test_devices);
	RUN(test_fault_injection);
	RUN(test_fuzz);
	RUN(test_threads);
	return ctest_finish();
}
