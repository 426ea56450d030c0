/* nrt_observe.h - TorchNeuron runtime: what profilers and debuggers observe.  The trace ring's records
 * with their profiler correlation ids and kinds, a second reader of the ring, launch sites for async
 * errors, allocator events and a walk of the allocator's segments.  Kept out of nrt.h so that the glue
 * files that do not observe anything do not depend on it.
 */
#ifndef NRT_OBSERVE_H
#define NRT_OBSERVE_H

#include "nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- trace ------------------------------------------------------------------------------------- */
/* A trace record as nrt_trace_read gives it: nrt_trace_rec_t plus the profiler's correlation id the
 * launching thread had set (nrt_trace_set_corr) when the record was queued, and its kind (kernels,
 * copies by direction, host work such as the CPU fallback).  Times are CLOCK_MONOTONIC (nrt_now_ns). */
enum { NRT_TRACE_KERNEL = 0, NRT_TRACE_COPY_H2D = 1, NRT_TRACE_COPY_D2H = 2, NRT_TRACE_COPY_D2D = 3,
       NRT_TRACE_COPY_H2H = 4, NRT_TRACE_HOST = 5,
       NRT_TRACE_PART = 6 /* a part of a kernel record (nrt_trace_sub), inside its time span */ };
typedef struct {
	const char *name;
	int dev, queue;
	int64_t start_ns, end_ns;
	uint64_t corr;
	int kind;
} nrt_trace_event_t;
/* nrt_trace_enable is counted: each true must be matched by a false; records are kept while any user
 * has it on.  A reader with its own cursor (records ever written before which it has read; start it
 * at nrt_trace_cursor()) sees every record, whatever nrt_trace_drain takes.  Returns the count copied;
 * *lost (if not NULL) adds records overwritten unread. */
uint64_t nrt_trace_cursor(void);
int nrt_trace_read(uint64_t *cursor, nrt_trace_event_t *out, int cap, uint64_t *lost);
bool nrt_trace_on(void);
/* The calling thread's correlation id, copied into every record it queues from now on (0: none). */
void nrt_trace_set_corr(uint64_t corr);
uint64_t nrt_trace_corr(void);
/* Host work done on behalf of dev's queue (the CPU fallback), traced with the thread's correlation id;
 * name must have static lifetime.  Nothing unless the trace is on. */
void nrt_trace_host(int dev, int queue, const char *name, int64_t t0, int64_t t1);
/* A part of the record running on the calling thread (a kernel of a compiled program's segment),
 * traced as an NRT_TRACE_PART record of that record's queue with the record's correlation id, nested in
 * its slice; nrt_trace_drain (one record per queue launch) leaves the parts out, nrt_trace_read gives
 * them.  name must have static lifetime.  Nothing unless the trace is on and a record is running here. */
void nrt_trace_sub(const char *name, int64_t t0, int64_t t1);
/* Kernel records of fn are traced as copies, by the direction of the pointers ptrs reads from their
 * arguments (one such kernel: the glue's strided copy).  Classified only while the trace is on. */
typedef void (*nrt_copy_ptrs_fn)(const void *args, const void **dst, const void **src);
void nrt_trace_set_copy_kernel(nrt_kernel_fn fn, nrt_copy_ptrs_fn ptrs);

/* ---- launch sites ------------------------------------------------------------------------------ */
/* capture (optional) runs on the launching thread at every kernel or copy launch, before the queue's
 * launch lock, and returns an opaque site (0: none) stored with the record; when the record fails,
 * format(site) writes where it was launched ("train.py:41 in forward") into the queue's sticky error,
 * which then reads "<op>: <detail> (neuron:D stream S, launched at train.py:41 in forward)".  format runs
 * on whatever thread executed the record, with the queue's error lock held: it must not block.
 * NULL, NULL: off. */
typedef uint64_t (*nrt_site_capture_fn)(void);
typedef void (*nrt_site_format_fn)(uint64_t site, char *buf, size_t cap);
void nrt_set_site_hooks(nrt_site_capture_fn capture, nrt_site_format_fn format);

/* ---- memory ------------------------------------------------------------------------------------ */
/* fn (optional) is told of every allocation and free after the allocator lock is dropped (it may take
 * the GIL), of an OOM (ptr NULL, size the request), and of each segment the allocator takes from or
 * returns to the arena (ptr and size the segment's, requested 0; a segment taken for an allocation is
 * told before the allocation).  NULL: off. */
enum { NRT_MEM_ALLOC = 0, NRT_MEM_FREE = 1, NRT_MEM_OOM = 2, NRT_MEM_SEGMENT_ALLOC = 3, NRT_MEM_SEGMENT_FREE = 4 };
typedef void (*nrt_mem_observer_fn)(int action, int dev, const void *ptr, size_t size, size_t requested, int queue);
void nrt_set_mem_observer(nrt_mem_observer_fn fn);
/* One block of a segment, for nrt_memory_walk. */
enum { NRT_BLOCK_INACTIVE = 0, NRT_BLOCK_ACTIVE = 1, NRT_BLOCK_PENDING_FREE = 2 };
typedef struct {
	const void *segment; /* its segment's base */
	const void *ptr;
	size_t size, requested;
	int state;           /* NRT_BLOCK_* */
	int queue;           /* the owning queue */
	bool small;          /* small pool */
} nrt_mem_block_t;
/* Calls fn for every block of dev's segments, segment by segment in address order, under the
 * allocator lock (fn must not block or call the runtime).  NRT_ERR_HOST without memory to sort them. */
int nrt_memory_walk(int dev, void (*fn)(void *ctx, const nrt_mem_block_t *b), void *ctx);
/* ptr lies inside a live device allocation (a scan of every live block: for tracing only). */
bool nrt_addr_on_device(const void *ptr);

#ifdef __cplusplus
}
#endif
#endif /* NRT_OBSERVE_H */
