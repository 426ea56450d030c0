/* nrt.h - TorchNeuron runtime: devices, memory, queues, events, errors, thread pool.
 *
 * The execution target is a host NeuronCore: each device has its own memory arena (host memory with a
 * size limit), a caching allocator on top, in-order queues run by worker threads and a kernel thread
 * pool.  Every fallible call returns 0 or a negative NRT_ERR_* code; nrt_last_error() returns a
 * thread-local message with the details of the last failure on this thread.  Nothing here exits,
 * aborts or asserts.  No PyTorch types appear in this layer.
 */
#ifndef NRT_H
#define NRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
	NRT_OK = 0,
	NRT_ERR_INVALID = -1,   /* bad argument (null handle, unknown device index, bad pointer) */
	NRT_ERR_OOM = -2,       /* device arena limit reached (after freeing cached blocks and retrying) */
	NRT_ERR_ENV = -3,       /* garbage in an NEURON_* environment variable; message names it */
	NRT_ERR_KERNEL = -4,    /* a kernel launched on a queue failed; message names the op */
	NRT_ERR_HOST = -5,      /* the host refused memory or a thread */
	NRT_ERR_NOT_READY = -6, /* event/queue query: work still pending (not an error for callers) */
	NRT_ERR_TIMEOUT = -7,
	NRT_ERR_FORK = -8,      /* a forked child of a process whose runtime had started its threads */
};

const char *nrt_status_string(int status);
/* Details of the last failing call on this thread ("" if none).  Valid until the next failing call. */
const char *nrt_last_error(void);

/* ---- devices ---------------------------------------------------------------------------------- */
/* Parses NEURON_RT_VISIBLE_CORES ("0", "0-1", "0,2"; unset = 1 device) and NEURON_RT_MEMORY_LIMIT
 * (bytes, or with a suffix K/M/G/T, KiB/MiB/GiB/TiB, KB/MB/GB/TB; unset = half of physical RAM) and
 * NEURON_LAUNCH_BLOCKING.  Idempotent and thread-safe; a parse error is returned every time (NRT_ERR_ENV,
 * message names the variable) and leaves device_count at 0. */
int nrt_init(void);
/* Fork: a process forked after the runtime started a thread (a queue worker, which the first launch on
 * a queue starts, or the kernel pool) cannot use the device in the child: those threads, and whatever
 * they held, are gone.  There every call that would touch a device returns NRT_ERR_FORK ("Cannot
 * re-initialize neuron in forked subprocess...") at once, nrt_init included; the frees return NRT_OK
 * and leave the child's copy alone, so a child that never uses the device (a data-loading worker)
 * exits cleanly.  A child forked before any runtime thread existed uses the device normally. */
bool nrt_in_forked_child(void);
/* Number of visible devices; 0 if nrt_init failed.  Never fails. */
int nrt_device_count(void);
int nrt_device_memory_limit(int dev, size_t *bytes);
bool nrt_launch_blocking(void);
/* Test hooks: parse helpers exposed so tests can check them without touching the environment. */
int nrt_parse_visible_cores(const char *s, int *count);
int nrt_parse_bytes(const char *s, size_t *bytes);
/* Re-read the environment (tests only; no device memory may be live). */
int nrt_reinit_for_testing(void);

/* ---- queues ----------------------------------------------------------------------------------- */
typedef struct nrt_queue nrt_queue_t;
typedef struct nrt_event nrt_event_t;

/* A kernel: runs on the queue's worker thread.  Returns 0, or nonzero after calling
 * nrt_kernel_fail() with a message; the queue then holds a sticky error naming the op. */
typedef int (*nrt_kernel_fn)(void *args);
#define NRT_MAX_ARGS 2048 /* bytes of arguments copied into a launch record */

nrt_queue_t *nrt_queue_default(int dev); /* NULL if dev invalid; created at init, never destroyed */
int nrt_queue_create(int dev, int priority, nrt_queue_t **out);
int nrt_queue_destroy(nrt_queue_t *q); /* synchronizes first */
int nrt_queue_device(const nrt_queue_t *q);
int nrt_queue_id(const nrt_queue_t *q);   /* small integer, unique per device; default queue is 0 */
nrt_queue_t *nrt_queue_by_id(int dev, int id); /* NULL if none */
int nrt_queue_priority(const nrt_queue_t *q);
/* Copies args_size bytes of args into the queue's ring and returns; allocation-free, no syscall unless
 * the worker is parked.  name must be a string with static lifetime (the op name).  With
 * NEURON_LAUNCH_BLOCKING=1 the kernel runs before this returns and its error is returned here. */
int nrt_queue_launch(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t args_size, const char *name);
/* nrt_queue_launch with an estimate of the kernel's work (bytes it reads and writes, or an equivalent
 * for compute-bound kernels).  A kernel at or under the inline threshold, launched on an idle queue (no
 * record pending or running), runs at once on the calling thread under the queue's execution claim
 * instead of being handed to the worker: ordering, sticky errors, events and tracing are the same as
 * for a queued record (a kernel failure is still reported at the next synchronizing call, never here),
 * it only saves the wake-up and hand-off that dominate a small op.  Queues with pending work always
 * queue the record.  Threshold: NEURON_INLINE_BYTES (bytes, 0 disables), default 8 MiB. */
int nrt_queue_launch_cost(nrt_queue_t *q, nrt_kernel_fn fn, const void *args, size_t args_size, const char *name,
			  size_t cost_bytes);
void nrt_set_inline_bytes(size_t bytes);
size_t nrt_inline_bytes(void);
/* Whether new arena segments that are 2 MiB multiples are 2 MiB-aligned and advised as transparent huge
 * pages (NEURON_HUGEPAGES, default on; existing segments keep what they got). */
void nrt_set_hugepages(bool on);
uint64_t nrt_inline_launches(void); /* launches that ran inline so far (statistics, tests) */
/* Waits until all launched work is done.  Returns the sticky error (NRT_ERR_KERNEL, message
 * "<op>: <detail>") if a kernel failed since the last synchronizing call, and clears it. Kernels
 * launched after a failure are skipped until the error is reported. */
int nrt_queue_synchronize(nrt_queue_t *q);
int nrt_queue_query(nrt_queue_t *q);    /* NRT_OK if idle, NRT_ERR_NOT_READY if work pending */
int nrt_device_synchronize(int dev);    /* all queues of the device */
int nrt_queue_wait_event(nrt_queue_t *q, nrt_event_t *e); /* later work on q waits for e */

/* Inside a kernel: record why it failed (printf format).  Thread-local to the worker. */
void nrt_kernel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A kernel message that starts with NRT_INDEX_ERROR is an index error (the layer above raises it as
 * the CPU does, Python's IndexError); the tag is not part of the message users see. */
#define NRT_INDEX_ERROR "[index] "

/* ---- events ----------------------------------------------------------------------------------- */
enum { NRT_EVENT_TIMING = 1, NRT_EVENT_BLOCKING = 2 };
int nrt_event_create(int dev, unsigned flags, nrt_event_t **out);
void nrt_event_destroy(nrt_event_t *e);
int nrt_event_record(nrt_event_t *e, nrt_queue_t *q);   /* completes when q reaches this point */
int nrt_event_query(nrt_event_t *e);                     /* NRT_OK done (or never recorded), NOT_READY */
int nrt_event_synchronize(nrt_event_t *e);
int nrt_event_elapsed_ms(nrt_event_t *start, nrt_event_t *end, double *ms); /* both need TIMING */

/* ---- device memory: caching allocator over a per-device arena ---------------------------------- */
/* Allocates nbytes (0 allowed: returns NULL and NRT_OK) for use on queue q.  Blocks are 64-byte
 * aligned.  Size classes, splitting, reuse ordered by the queue.  When the arena limit would be
 * exceeded, cached free blocks are released and the allocation retried once (num_alloc_retries);
 * then NRT_ERR_OOM (num_ooms) with a message giving requested, allocated, reserved and limit bytes. */
int nrt_malloc(nrt_queue_t *q, size_t nbytes, void **ptr);
/* Frees ptr.  Reusable at once by later work on its queue; on other queues only after the work
 * recorded with nrt_record_queue on them has completed. */
int nrt_free(void *ptr);
int nrt_record_queue(void *ptr, nrt_queue_t *q);
/* Poisoned outputs.  A kernel that fails, and every kernel skipped behind it until the error is
 * reported, leaves its outputs unwritten; the blocks they were allocated for stay poisoned for their
 * lifetime (until nrt_free), and this returns NRT_ERR_KERNEL with that kernel's error for them, however
 * often it is asked and whichever thread reported the error first.  NRT_OK for any other pointer.
 * ptr is a pointer nrt_malloc returned.  If the error has not been reported yet, this reports it: it
 * waits for the queue and clears its sticky error, as nrt_queue_synchronize would.
 * Inside an op bracket (below) a block's producers are the op's records; outside one, the first record
 * queued on its queue after the allocation. */
int nrt_check_readable(const void *ptr);

/* Op brackets: what one op of the layer above launches, allocates and writes.  Between nrt_op_begin and
 * nrt_op_end (nested brackets belong to the outermost) the records the calling thread queues are the
 * op's (those on the queue of its first record), the blocks it allocates are its outputs and
 * nrt_op_write names the blocks it writes in place (out=, self of an in-place op).  At nrt_op_end they
 * are all produced by the op: poisoned if any of its records fails or is skipped, whichever kernel of
 * the op it was and whatever other threads queue meanwhile; an output of an op that launched nothing
 * (empty) has no producer.  A block stays poisoned until freed, however often it is written again.
 * nrt_op_begin returns whether any kernel has failed in this process so far; only then do reads need
 * nrt_op_read: NRT_ERR_KERNEL with the error for a poisoned block whose error has been reported (the op
 * must not run: it would read garbage), NRT_OK otherwise; a block whose error is still pending passes
 * its poison on to the op's outputs instead (the op's records are skipped behind the error, unless
 * another thread reports it first).  Pointers that are not device blocks are ignored. */
bool nrt_op_begin(void);
int nrt_op_read(const void *ptr);
void nrt_op_write(void *ptr);
void nrt_op_end(void);
int nrt_empty_cache(int dev);
int nrt_ptr_device(const void *ptr, int *dev); /* NRT_ERR_INVALID if not a live device block */

typedef struct {
	int64_t current, peak, allocated, freed;
} nrt_stat_t;

typedef struct {
	nrt_stat_t allocation;      /* count of live allocations */
	nrt_stat_t segment;         /* count of arena segments */
	nrt_stat_t active;          /* count of live + pending-free blocks */
	nrt_stat_t inactive_split;  /* count of free split blocks */
	nrt_stat_t allocated_bytes; /* bytes in live allocations (rounded block sizes) */
	nrt_stat_t reserved_bytes;  /* bytes in arena segments */
	nrt_stat_t active_bytes;
	nrt_stat_t inactive_split_bytes;
	nrt_stat_t requested_bytes; /* bytes the callers asked for */
	int64_t num_alloc_retries;
	int64_t num_ooms;
	int64_t num_device_alloc;   /* segments taken from the arena */
	int64_t num_device_free;    /* segments returned to the arena */
	int64_t limit_bytes;
} nrt_mem_stats_t;

int nrt_memory_stats(int dev, nrt_mem_stats_t *out);
int nrt_reset_peak_stats(int dev);
int nrt_reset_accumulated_stats(int dev);
/* Fault injection: make the n-th segment allocation from now fail as if the arena were full
 * (n = 1 fails the next one).  n = 0 disables.  Global, for tests. */
void nrt_fault_inject_alloc(int64_t n);

/* ---- pinned host memory ------------------------------------------------------------------------ */
int nrt_host_alloc(size_t nbytes, void **ptr);
int nrt_host_free(void *ptr);
bool nrt_host_is_pinned(const void *ptr); /* true for any address inside a live pinned block */

/* ---- copies (queue-ordered) -------------------------------------------------------------------- */
/* Enqueue a contiguous byte copy on q.  Works for device<->device and device<->host memory
 * (host memory must stay valid until the copy runs: synchronize, or use pinned memory + an event). */
int nrt_memcpy_async(nrt_queue_t *q, void *dst, const void *src, size_t nbytes);

/* ---- kernel thread pool ------------------------------------------------------------------------ */
/* fn(ctx, begin, end) over [0, n) in chunks of at least grain; runs inline when n <= grain or when
 * called from a pool thread.  Workers park (futex/condvar) when idle: they never spin for long.
 * Thread count: NEURON_NUM_THREADS, else the number of online CPUs. */
typedef void (*nrt_parallel_fn)(void *ctx, int64_t begin, int64_t end);
void nrt_parallel_for(int64_t n, int64_t grain, nrt_parallel_fn fn, void *ctx);
int nrt_num_threads(void);

/* ---- trace ------------------------------------------------------------------------------------- */
/* Per-launch records in a ring buffer (op name, queue, start/end ns), enabled by nrt_trace_enable. */
typedef struct {
	const char *name;
	int dev, queue;
	int64_t start_ns, end_ns;
} nrt_trace_rec_t;
void nrt_trace_enable(bool on);
/* Copies up to cap records (oldest first) recorded since the last drain; returns the count. */
int nrt_trace_drain(nrt_trace_rec_t *out, int cap);

int64_t nrt_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* NRT_H */
