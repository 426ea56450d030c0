/* nrt_target.h - the execution target of a device: where a hardware target plugs into the runtime.
 *
 * The runtime's generic half (the caching allocator, in-order queues and their executor, sticky errors
 * and poisoned outputs, events, trace) reaches the device only through one table of functions per device,
 * after ggml's ggml_backend_i: a target is that table plus a context pointer.  The host NeuronCore
 * (host memory for the arena, kernels run on the host CPU with the kernel thread pool) is the first
 * implementation and every device's target at start; nrt_target_set replaces it.
 *
 *   alloc / free   one arena segment of device memory (the caching allocator carves blocks out of
 *                  segments and returns a segment only when no queued work can still use it)
 *   launch         run one kernel record, in queue order, on the thread that executes the queue
 *   copy           run one nrt_memcpy_async record (device or host memory on either side)
 *   synchronize    the queue's records are all complete on the host side: finish whatever the target
 *                  still has in flight for that queue
 *   event_record   a queue position was recorded (nrt_event_record), event_wait: later work on queue
 *                  waits for src_queue's position seq (nrt_queue_wait_event)
 *
 * Errors are values, as everywhere in the runtime: launch and copy return 0, or nonzero after
 * nrt_kernel_fail("..."), and the queue then holds the sticky error "<op>: <message>" and skips and
 * poisons what is queued behind it, exactly as for a failing kernel; alloc returns NRT_ERR_OOM when the
 * device has no memory (the allocator frees its cache, retries once and reports the OOM with sizes);
 * synchronize, event_record and event_wait return an NRT_ERR_* status that the calling function returns.
 * Members marked optional may be NULL.  Every member may be called from several threads at once (one
 * per queue executing, plus allocating threads).
 */
#ifndef NRT_TARGET_H
#define NRT_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nrt_target_i {
	const char *name;
	/* One segment of at least size bytes, 64-byte aligned at least; NRT_ERR_OOM if there is none. */
	int (*alloc)(void *ctx, int dev, size_t size, void **ptr);
	void (*free)(void *ctx, int dev, void *ptr, size_t size);
	int (*launch)(void *ctx, int dev, int queue, nrt_kernel_fn fn, void *args);
	int (*copy)(void *ctx, int dev, int queue, void *dst, const void *src, size_t nbytes);
	int (*synchronize)(void *ctx, int dev, int queue);                            /* optional */
	int (*event_record)(void *ctx, int dev, int queue, uint64_t seq);             /* optional */
	int (*event_wait)(void *ctx, int dev, int queue, int src_queue, uint64_t seq); /* optional */
	/* The target runs kernels on the host CPU, so the queue executor may run fusable records as one
	 * tiled run on the kernel pool (nrt_fuse.h) instead of launching them one by one. */
	bool host_fusion;
} nrt_target_i;

typedef struct nrt_target {
	nrt_target_i iface;
	void *context;
} nrt_target_t;

/* The host NeuronCore. */
const nrt_target_t *nrt_target_host(void);
/* The target of device dev (NULL if dev is not a visible device). */
const nrt_target_t *nrt_target_get(int dev);
/* Makes t (NULL: the host NeuronCore) dev's target; t must stay valid while it is set.  The device is
 * synchronized and its cached segments are returned to the old target first; NRT_ERR_INVALID if it
 * still holds memory (a block allocated from one target is never freed through another) or t lacks a
 * required member. */
int nrt_target_set(int dev, const nrt_target_t *t);

#ifdef __cplusplus
}
#endif
#endif /* NRT_TARGET_H */
