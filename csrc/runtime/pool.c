/* pool.c - the kernel thread pool behind nrt_parallel_for.
 *
 * nthreads - 1 pthreads plus the calling thread share each job.  A job is [0, n) cut into chunks of at
 * least `grain`.  Thread t (the caller is 0) owns the t-th block of chunks and claims its own chunks
 * first, in order, then steals what is left in the others' blocks: the same thread gets the same part
 * of a tensor op after op, so repeated L2-sized work finds its data in that core's L2 (as with
 * OpenMP's static schedule), and a late or preempted worker's share still gets done.  One job runs at a time: a second
 * concurrent caller (another queue worker) and any call made from inside a pool task run inline on
 * their own thread, so nesting cannot deadlock.  The pool starts on first use and its threads live
 * until the process exits.
 *
 * The hand-off takes no lock while workers are awake.  `state` packs the job generation and an open
 * bit (gen << 1 | open).  The caller writes the job fields, then publishes state = new gen | open; a
 * worker that sees a new open generation registers in `active` and re-reads state: if it is unchanged
 * the job (and its fields) cannot be closed under it, because the caller closes a job by clearing the
 * open bit and then waits for active == 0 (both sides store, then load the other's word, sequentially
 * consistent, so one of them sees the other).  Idle workers spin for NRT_SPIN_NS and then park on
 * work_cv (counted in nparked; the caller only takes the lock to signal when somebody is parked); the
 * caller waiting for the last workers spins as long and then parks on done_cv (flagged in
 * caller_waits, which a leaving worker checks).  A spinning worker therefore joins a job within
 * nanoseconds, with no syscall on either side.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "nrt_impl.h"

#define NRT_POOL_MAX_THREADS 256
#define NRT_POOL_CHUNKS_PER_THREAD 4

struct nrt_pool {
	pthread_mutex_t lock;      /* parking only: work_cv and done_cv */
	pthread_cond_t work_cv;    /* workers park here */
	pthread_cond_t done_cv;    /* the caller waits here for active == 0 */
	pthread_mutex_t call_lock; /* held by the one caller whose job is running */
	int nthreads;              /* including the caller */

	/* current job: written by the caller while the job is closed and nobody is active */
	nrt_parallel_fn fn;
	void *ctx;
	int64_t n, chunk, nchunks;

	_Alignas(64) atomic_uint_fast64_t state; /* gen << 1 | open */
	_Alignas(64) atomic_int active;          /* workers registered in the current job */
	atomic_int nparked;                      /* workers waiting on work_cv */
	atomic_int caller_waits;                 /* the caller waits on done_cv */
};

/* Chunk claims of the block owned by one thread: next unclaimed chunk, and the block's end. */
struct nrt_pool_block {
	_Alignas(64) atomic_int_fast64_t next;
	int64_t end;
};
static struct nrt_pool_block pool_blocks[NRT_POOL_MAX_THREADS];

static struct nrt_pool pool = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work_cv = PTHREAD_COND_INITIALIZER,
	.done_cv = PTHREAD_COND_INITIALIZER,
	.call_lock = PTHREAD_MUTEX_INITIALIZER,
	.nthreads = 1,
};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static _Thread_local bool in_pool_task;

int nrt_parse_num_threads(const char *s, int *count)
{
	char *end;
	long v;

	if (!s || !*s || *s < '0' || *s > '9')
		return NRT_ERR_ENV;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 1 || v > NRT_POOL_MAX_THREADS)
		return NRT_ERR_ENV;
	*count = (int)v;
	return NRT_OK;
}

static void pool_run_block(struct nrt_pool_block *blk, nrt_parallel_fn fn, void *ctx, int64_t n, int64_t chunk)
{
	for (;;) {
		int64_t c = atomic_load_explicit(&blk->next, memory_order_relaxed);
		int64_t begin, end;

		if (c >= blk->end)
			return;
		c = atomic_fetch_add_explicit(&blk->next, 1, memory_order_relaxed);
		if (c >= blk->end)
			return;
		begin = c * chunk;
		end = n - begin > chunk ? begin + chunk : n;
		fn(ctx, begin, end);
	}
}

/* Thread self's own block, then everybody else's (starting with the next thread's). */
static void pool_run_chunks(int self, nrt_parallel_fn fn, void *ctx, int64_t n, int64_t chunk)
{
	int nt = pool.nthreads;

	for (int i = 0; i < nt; i++)
		pool_run_block(&pool_blocks[(self + i) % nt], fn, ctx, n, chunk);
}

/* An open job of a generation other than seen's. */
static inline bool pool_new_job(uint64_t st, uint64_t seen)
{
	return (st & 1) && st != seen;
}

/* Spins briefly for a new open job; returns the state seen last. */
static uint64_t pool_spin_for_work(uint64_t seen)
{
	int64_t deadline = nrt_mono_ns() + NRT_SPIN_NS;
	uint64_t st;

	do {
		for (int i = 0; i < 64; i++) {
			st = atomic_load_explicit(&pool.state, memory_order_acquire);
			if (pool_new_job(st, seen))
				return st;
			nrt_cpu_relax();
		}
	} while (nrt_mono_ns() < deadline);
	return st;
}

static void *pool_worker(void *arg)
{
	uint64_t seen = 0; /* state of the last job this worker looked at */
	int self = (int)(intptr_t)arg;

	in_pool_task = true;
	for (;;) {
		uint64_t st = pool_spin_for_work(seen);

		if (!pool_new_job(st, seen)) {
			pthread_mutex_lock(&pool.lock);
			atomic_fetch_add(&pool.nparked, 1); /* seq_cst: before the state load below */
			while (!pool_new_job(st = atomic_load(&pool.state), seen))
				pthread_cond_wait(&pool.work_cv, &pool.lock);
			atomic_fetch_sub(&pool.nparked, 1);
			pthread_mutex_unlock(&pool.lock);
		}
		seen = st;
		atomic_fetch_add(&pool.active, 1); /* seq_cst: before the state re-check */
		if (atomic_load(&pool.state) == st)
			/* registered while the job was open: its fields stay until active drops */
			pool_run_chunks(self, pool.fn, pool.ctx, pool.n, pool.chunk);
		if (atomic_fetch_sub(&pool.active, 1) == 1 && atomic_load(&pool.caller_waits)) {
			pthread_mutex_lock(&pool.lock);
			pthread_cond_signal(&pool.done_cv);
			pthread_mutex_unlock(&pool.lock);
		}
	}
	return NULL;
}

static void pool_start(void)
{
	const char *env = getenv("NEURON_NUM_THREADS");
	int want = 0;
	pthread_attr_t attr;

	if (!env || nrt_parse_num_threads(env, &want) != NRT_OK) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		/* garbage in NEURON_NUM_THREADS is reported by nrt_init; here we fall back */
		want = cpus < 1 ? 1 : cpus > NRT_POOL_MAX_THREADS ? NRT_POOL_MAX_THREADS : (int)cpus;
	}
	if (want > 1)
		nrt_note_thread_start();
	if (pthread_attr_init(&attr))
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 1; i < want; i++) {
		pthread_t t;

		if (pthread_create(&t, &attr, pool_worker, (void *)(intptr_t)i))
			break; /* run with the threads we got */
		pool.nthreads++;
	}
	pthread_attr_destroy(&attr);
}

int nrt_num_threads(void)
{
	pthread_once(&pool_once, pool_start);
	return pool.nthreads;
}

static void run_inline(int64_t n, nrt_parallel_fn fn, void *ctx)
{
	bool was = in_pool_task;

	in_pool_task = true;
	fn(ctx, 0, n);
	in_pool_task = was;
}

void nrt_parallel_for(int64_t n, int64_t grain, nrt_parallel_fn fn, void *ctx)
{
	int64_t chunk, nchunks, target, spin_deadline;
	uint64_t st;

	if (n <= 0 || !fn)
		return;
	if (grain < 1)
		grain = 1;
	if (n <= grain || in_pool_task || nrt_num_threads() == 1 || pthread_mutex_trylock(&pool.call_lock)) {
		run_inline(n, fn, ctx);
		return;
	}

	target = (int64_t)pool.nthreads * NRT_POOL_CHUNKS_PER_THREAD;
	chunk = (n + target - 1) / target;
	if (chunk < grain)
		chunk = grain;
	nchunks = (n + chunk - 1) / chunk;

	/* closed and nobody active (the previous call waited for that): the fields are ours */
	pool.fn = fn;
	pool.ctx = ctx;
	pool.n = n;
	pool.chunk = chunk;
	pool.nchunks = nchunks;
	for (int t = 0; t < pool.nthreads; t++) {
		/* block t: chunks [t * nchunks / nthreads, (t + 1) * nchunks / nthreads) */
		atomic_store_explicit(&pool_blocks[t].next, t * nchunks / pool.nthreads, memory_order_relaxed);
		pool_blocks[t].end = (t + 1) * nchunks / pool.nthreads;
	}
	st = (atomic_load_explicit(&pool.state, memory_order_relaxed) | 1) + 2; /* next gen, open */
	atomic_store(&pool.state, st); /* seq_cst: publishes the fields; before the nparked load */
	if (nchunks > 1 && atomic_load(&pool.nparked) > 0) {
		/* wake only as many parked workers as there are chunks beyond the caller's first one */
		pthread_mutex_lock(&pool.lock);
		for (int64_t w = nchunks - 1 < atomic_load(&pool.nparked) ? nchunks - 1 : atomic_load(&pool.nparked);
		     w > 0; w--)
			pthread_cond_signal(&pool.work_cv);
		pthread_mutex_unlock(&pool.lock);
	}

	in_pool_task = true;
	pool_run_chunks(0, fn, ctx, n, chunk);
	in_pool_task = false;

	/* All chunks are claimed: close the job (late workers back off) and wait for the ones inside. */
	atomic_store(&pool.state, st & ~(uint64_t)1); /* seq_cst: before the active loads */
	spin_deadline = nrt_mono_ns() + NRT_SPIN_NS;
	while (atomic_load(&pool.active) > 0 && nrt_mono_ns() < spin_deadline)
		for (int i = 0; i < 64; i++)
			nrt_cpu_relax();
	if (atomic_load(&pool.active) > 0) {
		pthread_mutex_lock(&pool.lock);
		atomic_store(&pool.caller_waits, 1); /* seq_cst: before the active load */
		while (atomic_load(&pool.active) > 0)
			pthread_cond_wait(&pool.done_cv, &pool.lock);
		atomic_store(&pool.caller_waits, 0);
		pthread_mutex_unlock(&pool.lock);
	}
	pthread_mutex_unlock(&pool.call_lock);
}
