/* nrt_impl.h - TorchNeuron runtime internals: struct layouts and helpers shared by the runtime's own
 * files.  Nothing outside csrc/runtime includes this header.
 */
#ifndef NRT_IMPL_H
#define NRT_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

#include "nrt.h"
#include "nrt_target.h"
#include "nrt_observe.h"

#define NRT_MAX_DEVICES 64
#define NRT_ERRMSG_MAX 1024
#define NRT_BLOCK_WRITERS 4 /* unresolved producers kept per block (alloc.c) */
#define NRT_OP_ORPHANS 16   /* outputs of empty ops waiting for a producer (op.c) */

/* Monotonic clock in ns (nrt_now_ns is the public name). */
static inline int64_t nrt_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin-wait hint. */
static inline void nrt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* How long idle workers spin before parking (the machine may have only 2 cores). */
#define NRT_SPIN_NS 30000

/* Default inline-execution threshold of nrt_queue_launch_cost (bytes of work).  Up to L3-sized work
 * (a [256, 1024] f32 add is 3 MiB) the launching thread runs the kernel itself, joining the pool like
 * an OpenMP master thread: on a few cores, handing it to the queue worker only adds a third runnable
 * thread and a wake-up per op, and the launcher has nothing to overlap with anyway.  Bigger kernels
 * (ms of DRAM traffic) stay asynchronous. */
#define NRT_INLINE_BYTES_DEFAULT ((size_t)8 << 20)

/* ---- fork.c ----------------------------------------------------------------------------- */
extern atomic_bool nrt_forked_child;
static inline bool nrt_bad_fork(void)
{
	return atomic_load_explicit(&nrt_forked_child, memory_order_relaxed);
}
/* Sets the fork message and returns NRT_ERR_FORK. */
int nrt_fork_error(void);
/* Called before the runtime creates a thread: from now on a forked child is refused. */
void nrt_note_thread_start(void);
/* Installs the atfork handlers (nrt_init calls it; idempotent). */
void nrt_fork_register(void);
/* The atfork handlers' lock and release of each file's locks (lock order: device, queue phase 0, alloc,
 * queue phase 1, host, fuse; released in reverse). */
void nrt_device_fork_locks(bool lock);
void nrt_queue_fork_locks(int phase, bool lock);
void nrt_alloc_fork_locks(bool lock);
void nrt_host_fork_locks(bool lock);
void nrt_fuse_fork_locks(bool lock);

/* ---- error.c ---------------------------------------------------------------------------------- */
/* Formats the thread's last-error message and returns status (so callers write
 * `return nrt_set_error(NRT_ERR_INVALID, "...")`). */
int nrt_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message the current thread's kernel passed to nrt_kernel_fail ("" if none), and its reset. */
const char *nrt_kernel_fail_message(void);
void nrt_kernel_fail_clear(void);
/* Formats a byte count as "1.00 GiB". */
void nrt_format_bytes(char *buf, size_t cap, uint64_t bytes);

/* ---- pool.c ----------------------------------------------------------------------------------- */
/* Parses a positive thread count (NEURON_NUM_THREADS syntax); NRT_ERR_ENV on garbage. */
int nrt_parse_num_threads(const char *s, int *count);

/* ---- queue.c: launch records, queues ---------------------------------------------------------- */
#define NRT_RING_SLOTS 1024 /* launch records per queue (power of two) */
#define NRT_TRACE_CAP 65536 /* trace records kept (ring) */

/* Kernel records run through the target's launch, copy records (nrt_memcpy_async, args: struct
 * nrt_copy_args) through its copy; internal records (event markers, waits) run their fn directly and
 * are never skipped or traced. */
enum { NRT_REC_KERNEL = 0, NRT_REC_INTERNAL = 1, NRT_REC_COPY = 2 };

struct nrt_copy_args {
	void *dst;
	const void *src;
	size_t n;
};

struct nrt_launch_rec {
	_Alignas(64) unsigned char args[NRT_MAX_ARGS];
	nrt_kernel_fn fn;
	const char *name;
	int kind;
	uint64_t corr; /* the launching thread's profiler correlation id (nrt_trace_set_corr) */
	uint64_t site; /* where it was launched (nrt_set_site_hooks) */
};

struct nrt_bad_range {
	uint64_t first, last; /* record numbers (0-based), inclusive */
	char *msg;            /* the error ("<op>: <detail>") */
};

/* Sequence numbers: tail counts records ever pushed, head counts records completed (run or skipped).
 * Record number s (0-based) is complete once head > s, so "complete(q, s + 1)" is head >= s + 1. */
struct nrt_queue {
	struct nrt_launch_rec *ring;
	_Alignas(64) atomic_uint_fast64_t tail;
	_Alignas(64) atomic_uint_fast64_t head;
	_Alignas(64) atomic_int worker_parked; /* worker waits on work_cv */
	atomic_int exec;                       /* 1 while some thread runs the record at head */
	atomic_int waiters;                    /* threads waiting on done_cv for head to move */
	atomic_int draining;                   /* threads in queue_wait (synchronize, events): [fuse] */
	atomic_uint_fast64_t wake_at;          /* least head value a parked waiter needs (UINT64_MAX: none) */
	atomic_bool shutdown;
	atomic_int err_flag;                   /* sticky error pending */

	pthread_mutex_t prod_lock; /* serializes launchers (uncontended: no syscall) */
	pthread_mutex_t lock;      /* parking protocol for work_cv / done_cv */
	pthread_cond_t work_cv, done_cv;
	pthread_mutex_t err_lock;
	char err_msg[NRT_ERRMSG_MAX];
	/* Records that failed or were skipped: one range per error, open (last grows as records are
	 * skipped) while err_flag is set; under err_lock.  Blocks whose producer falls in one are
	 * poisoned (nrt_check_readable). */
	struct nrt_bad_range *bad;
	int nbad, cap_bad;

	int dev, id, priority;
	_Atomic(const nrt_target_t *) target; /* the device's target (target.c keeps it current) */
	atomic_bool live;  /* false after nrt_queue_destroy (the struct stays for stale references) */
	atomic_bool has_worker; /* the worker starts with the first launch (a fork before that is fine) */
	pthread_t worker;
	struct nrt_queue *next; /* device's queue list */
};

/* Pushes a record (or, with NEURON_LAUNCH_BLOCKING, runs it inline after draining q); *seq (if not
 * NULL) receives the head value at which the record counts as complete.  inline_ok: when q is idle
 * (nothing queued, nobody executing) the calling thread runs the record itself under the exec claim,
 * which costs no hand-off to the worker (small kernels; see nrt_queue_launch_cost). */
int nrt_queue_push(struct nrt_queue *q, nrt_kernel_fn fn, const void *args, size_t args_size,
		   const char *name, int kind, uint64_t *seq, bool inline_ok);
/* Blocks until q's head reaches seq (spins briefly, then parks).  Never fails. */
void nrt_queue_wait_seq(struct nrt_queue *q, uint64_t seq);
static inline bool nrt_queue_reached(struct nrt_queue *q, uint64_t seq)
{
	return atomic_load_explicit(&q->head, memory_order_acquire) >= seq;
}
static inline uint64_t nrt_queue_submitted(struct nrt_queue *q)
{
	return atomic_load_explicit(&q->tail, memory_order_acquire);
}
/* Reports and clears q's sticky error: NRT_ERR_KERNEL with the message, or NRT_OK. */
int nrt_queue_take_error(struct nrt_queue *q);
int nrt_queue_start(struct nrt_queue *q, int dev, int id, int priority);
/* Later work on q waits until src reaches seq (a wait record; nothing if already done). */
int nrt_queue_wait_for(struct nrt_queue *q, struct nrt_queue *src, uint64_t seq);
/* Some queue has recorded a failed or skipped record (nrt_check_readable's fast path). */
extern atomic_bool nrt_poison_seen;
/* A range of record numbers [first, last] of q. */
struct nrt_writer {
	struct nrt_queue *q;
	uint64_t first, last;
};
/* If a record of w failed or was skipped, copies the error into msg, the bad range into *bad and
 * returns true; *open tells that the error is still pending (not yet reported by a synchronizing
 * call). */
bool nrt_queue_record_failed(const struct nrt_writer *w, char *msg, size_t cap, bool *open,
			     struct nrt_writer *bad);
/* The queue whose worker runs the current thread (NULL on other threads). */
struct nrt_queue *nrt_current_queue(void);

/* ---- fuse.c: the executor's second half, and the queue.c hooks it uses (nrt_fuse.h) ------------- */
/* Called by the queue executor (holding the exec claim, tail > head): runs the fused run starting at
 * head if there is one of at least two records and returns its length (the caller publishes head + k);
 * 0: run the record at head on its own. */
int nrt_fuse_exec(struct nrt_queue *q, uint64_t head, uint64_t tail);
/* queue.c: set q's sticky error for the record named name (message from nrt_kernel_fail), and trace. */
void nrt_queue_fail_record(struct nrt_queue *q, const char *name, int ret, uint64_t first, uint64_t last);
bool nrt_queue_trace_on(void);
/* True on a queue's own worker thread (not on a launching or synchronizing thread running records). */
bool nrt_queue_on_worker(void);
/* The tail of q now (acquire). */
uint64_t nrt_queue_tail_now(struct nrt_queue *q);
/* Traces record number seq of q (its name and correlation id) as running from t0 to t1. */
void nrt_queue_trace_record(struct nrt_queue *q, uint64_t seq, int64_t t0, int64_t t1);

/* ---- op.c: the calling thread's op bracket ------------------------------------------------------ */
struct nrt_op_block {
	void *ptr;
	uint64_t id;
	int dev;    /* fresh blocks: the device (written ones: -1, looked up) */
	bool fresh; /* allocated by the op (else written in place) */
};
struct nrt_op_state {
	int depth;
	struct nrt_queue *q;     /* the queue of the op's first record */
	uint64_t first, last;    /* its records there */
	int nrec;
	struct nrt_op_block *blk; /* allocated or written */
	int nblk, cap;
	struct nrt_writer inh[NRT_BLOCK_WRITERS]; /* pending bad ranges the op read */
	int ninh;
	/* outputs of ops that launched nothing (empty): the thread's next record outside any bracket is
	 * their producer (a program launched through the C API writes them); its next op's is not */
	struct nrt_op_block orphan[NRT_OP_ORPHANS];
	int norphan;
};
extern _Thread_local struct nrt_op_state nrt_op;
static inline bool nrt_op_active(void)
{
	return nrt_op.depth > 0;
}
/* queue.c: record number seq of q was queued by this thread inside the bracket. */
static inline void nrt_op_note_record(struct nrt_queue *q, uint64_t seq)
{
	nrt_op.norphan = 0;
	if (!nrt_op.nrec++) {
		nrt_op.q = q;
		nrt_op.first = seq;
	} else if (q != nrt_op.q) {
		nrt_op.nrec--; /* another queue: not tracked */
		return;
	}
	nrt_op.last = seq;
}
/* queue.c: record number seq of q, queued outside any bracket, produces the orphans. */
void nrt_op_adopt_orphans(struct nrt_queue *q, uint64_t seq);
/* alloc.c: the op allocated (fresh) or writes block ptr; false if the list cannot grow. */
bool nrt_op_note_block(void *ptr, uint64_t id, int dev, bool fresh);

/* ---- event.c ----------------------------------------------------------------------------------- */
struct nrt_event {
	int dev;
	unsigned flags;
	pthread_mutex_t lock;  /* protects q, seq, gen, recorded */
	struct nrt_queue *q;   /* queue of the last record */
	uint64_t seq;          /* complete when q's head reaches seq */
	uint64_t gen;          /* number of records so far */
	bool recorded;
	atomic_int_fast64_t ts;      /* NRT_EVENT_TIMING: time the marker ran */
	atomic_uint_fast64_t ts_gen; /* which record ts belongs to */
};

/* ---- alloc.c: caching allocator ---------------------------------------------------------------- */
struct nrt_block;

/* Free blocks of one pool, a treap keyed by (queue id, size, address). */
struct nrt_pool_tree {
	struct nrt_block *root;
};

struct nrt_use {           /* a queue other than the owner that used a block (nrt_record_queue) */
	struct nrt_queue *q;
	uint64_t seq;      /* at free time: q's submitted count, complete when q's head reaches it */
};

struct nrt_block {
	char *ptr;
	size_t size;           /* rounded size */
	size_t requested;      /* caller's size while allocated */
	int dev;
	int qid;               /* owning queue */
	struct nrt_queue *q;   /* the owning queue (structs are never freed) */
	uint64_t id;           /* allocation number (per device), tells a reused struct apart */
	struct nrt_writer w[NRT_BLOCK_WRITERS]; /* its producers still unresolved (poison: see op.c) */
	int nw;
	char *poison;          /* the error of a producer that failed or was skipped (sticky until free) */
	uint64_t free_seq;     /* free: q's submitted count when last freed; the memory may go back to the
				  arena only once q's head has reached it (queued kernels may still use it) */
	bool small;            /* pool */
	bool allocated;        /* handed out (or pending free) */
	bool in_pool;
	struct nrt_block *prev, *next; /* neighbours inside the segment (address order) */
	struct nrt_block *left, *right; /* treap */
	uint32_t prio;
	struct nrt_block *hnext;        /* hash chain / free list / pending list */
	struct nrt_use *uses;
	int nuses, cap_uses;
};

struct nrt_alloc {
	atomic_bool ready;             /* initialized (the device was created once) */
	pthread_mutex_t lock;
	const nrt_target_t *target;    /* segments come from and go back to it (under lock) */
	size_t limit;
	struct nrt_pool_tree small, large;
	struct nrt_block *pending;     /* freed blocks waiting for other queues */
	atomic_int npending;           /* lets syncs skip the lock when nothing is pending */
	uint64_t next_id;              /* allocation numbers */
	struct nrt_block *spare;       /* recycled block structs */
	nrt_mem_stats_t st;
	/* segment taken / returned events for the memory observer, queued under lock and delivered after it
	 * is dropped (only while an observer is set) */
	struct nrt_seg_event { int action; void *ptr; size_t size; int qid; } *seg_ev;
	int n_seg_ev, cap_seg_ev;
};

int nrt_alloc_device_init(int dev, size_t limit);
void nrt_alloc_set_limit(int dev, size_t limit);
size_t nrt_alloc_limit(int dev);
/* Returns blocks whose pending uses have completed to the free pools. */
void nrt_alloc_process_pending(int dev);
int64_t nrt_alloc_live_bytes(int dev);
/* Makes t the source of dev's segments; NRT_ERR_INVALID (nothing changed) while dev holds any. */
int nrt_alloc_set_target(int dev, const nrt_target_t *t);
/* Op brackets (op.c): the blocks of the op ending, with the records it queued and the pending bad
 * ranges it read; alloc.c gives each block the op as a producer. */
void nrt_alloc_op_end(const struct nrt_op_block *blk, int n, const struct nrt_writer *w, int nw);
/* ptr's poison: NRT_OK if clean (or not a device block); NRT_ERR_KERNEL (message set) if poisoned,
 * with *open the queue whose error is still pending (NULL if reported) and *bad its range. */
int nrt_alloc_poison(const void *ptr, struct nrt_queue **open, struct nrt_writer *bad);

/* [p, p + len) lies inside one free cached block of dev (no live tensor holds any of it). */
bool nrt_alloc_range_free(int dev, const void *p, size_t len);

/* ---- device.c ----------------------------------------------------------------------------------- */
struct nrt_device {
	bool created;
	pthread_mutex_t queues_lock;
	struct nrt_queue *queues;   /* all queues, default first */
	struct nrt_queue *default_queue;
	int next_queue_id;
	const nrt_target_t *target; /* under queues_lock; copied into each queue */
};

extern struct nrt_device nrt_devices[NRT_MAX_DEVICES];
/* Starts publishing the watch page /dev/shm/neuron-watch-<pid> (watch.c); once, after the devices exist. */
void nrt_watch_start(void);
/* Valid visible device index (nrt_init succeeded and dev < count). */
bool nrt_device_valid(int dev);

#endif /* NRT_IMPL_H */
