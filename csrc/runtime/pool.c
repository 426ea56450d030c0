/* pool.c - the kernel thread pool behind nrt_parallel_for.
 *
 * nthreads - 1 pthreads plus the calling thread share each job.  A job is [0, n) cut into chunks of at
 * least `grain`; threads claim chunks with an atomic counter.  Idle workers spin for NRT_SPIN_NS and then
 * park on a condition variable; a caller only signals when somebody is parked.  One job runs at a time:
 * a second concurrent caller (another queue worker) and any call made from inside a pool task run
 * inline on their own thread, so nesting cannot deadlock.  The pool starts on first use and its threads
 * live until the process exits.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "nrt_impl.h"

#define NRT_POOL_MAX_THREADS 256
#define NRT_POOL_CHUNKS_PER_THREAD 4

struct nrt_pool {
	pthread_mutex_t lock;      /* protects the job fields, gen, job_open, active, nparked */
	pthread_cond_t work_cv;    /* workers park here */
	pthread_cond_t done_cv;    /* the caller waits here for active == 0 */
	pthread_mutex_t call_lock; /* held by the one caller whose job is running */
	int nthreads;              /* including the caller */

	/* current job */
	nrt_parallel_fn fn;
	void *ctx;
	int64_t n, chunk, nchunks;
	atomic_int_fast64_t next;  /* next unclaimed chunk */
	atomic_uint gen;           /* bumped for every job */
	bool job_open;             /* workers may join */
	atomic_int active;         /* workers inside the current job (changed under lock) */
	int nparked;               /* workers waiting on work_cv */
};

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

static void pool_run_chunks(nrt_parallel_fn fn, void *ctx, int64_t n, int64_t chunk, int64_t nchunks)
{
	for (;;) {
		int64_t c = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
		int64_t begin, end;

		if (c >= nchunks)
			return;
		begin = c * chunk;
		end = n - begin > chunk ? begin + chunk : n;
		fn(ctx, begin, end);
	}
}

/* Spins briefly for a new generation; true if one appeared. */
static bool pool_spin_for_work(unsigned seen)
{
	int64_t deadline = nrt_mono_ns() + NRT_SPIN_NS;

	do {
		for (int i = 0; i < 64; i++) {
			if (atomic_load_explicit(&pool.gen, memory_order_acquire) != seen)
				return true;
			nrt_cpu_relax();
		}
	} while (nrt_mono_ns() < deadline);
	return false;
}

static void *pool_worker(void *arg)
{
	unsigned seen = 0;

	(void)arg;
	in_pool_task = true;
	for (;;) {
		nrt_parallel_fn fn;
		void *ctx;
		int64_t n, chunk, nchunks;

		pool_spin_for_work(seen);
		pthread_mutex_lock(&pool.lock);
		while (atomic_load_explicit(&pool.gen, memory_order_relaxed) == seen) {
			pool.nparked++;
			pthread_cond_wait(&pool.work_cv, &pool.lock);
			pool.nparked--;
		}
		seen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
		if (!pool.job_open) {
			pthread_mutex_unlock(&pool.lock);
			continue;
		}
		atomic_fetch_add(&pool.active, 1);
		fn = pool.fn;
		ctx = pool.ctx;
		n = pool.n;
		chunk = pool.chunk;
		nchunks = pool.nchunks;
		pthread_mutex_unlock(&pool.lock);

		pool_run_chunks(fn, ctx, n, chunk, nchunks);

		pthread_mutex_lock(&pool.lock);
		if (atomic_fetch_sub(&pool.active, 1) == 1)
			pthread_cond_signal(&pool.done_cv);
		pthread_mutex_unlock(&pool.lock);
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
	if (pthread_attr_init(&attr))
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 1; i < want; i++) {
		pthread_t t;

		if (pthread_create(&t, &attr, pool_worker, NULL))
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
	int64_t chunk, nchunks, target;
	int64_t spin_deadline;

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

	pthread_mutex_lock(&pool.lock);
	pool.fn = fn;
	pool.ctx = ctx;
	pool.n = n;
	pool.chunk = chunk;
	pool.nchunks = nchunks;
	atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
	pool.job_open = true;
	atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
	/* wake only as many parked workers as there are chunks beyond the caller's first one */
	for (int64_t w = nchunks - 1 < pool.nparked ? nchunks - 1 : pool.nparked; w > 0; w--)
		pthread_cond_signal(&pool.work_cv);
	pthread_mutex_unlock(&pool.lock);

	in_pool_task = true;
	pool_run_chunks(fn, ctx, n, chunk, nchunks);
	in_pool_task = false;

	/* All chunks are claimed; wait for the workers still running theirs, spinning briefly first. */
	pthread_mutex_lock(&pool.lock);
	pool.job_open = false; /* late wakers find nothing to claim and must not enter */
	pthread_mutex_unlock(&pool.lock);
	spin_deadline = nrt_mono_ns() + NRT_SPIN_NS;
	while (atomic_load(&pool.active) > 0 && nrt_mono_ns() < spin_deadline)
		for (int i = 0; i < 64; i++)
			nrt_cpu_relax();
	pthread_mutex_lock(&pool.lock);
	while (atomic_load(&pool.active) > 0)
		pthread_cond_wait(&pool.done_cv, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_mutex_unlock(&pool.call_lock);
}
