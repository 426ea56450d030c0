/* nrt_fuse.h - queue-level loop fusion of multi-tensor elementwise kernels (fuse.c).
 *
 * A kernel function registered with nrt_fuse_register launches records that describe a list of items
 * (one tensor index of a _foreach_* op: its position in the list, its element count and the memory of
 * its operands) and can run any element range of any item.  When a queue's executor takes such a
 * record and the records queued right behind it are fusable too, it runs that run of records tile by
 * tile instead of op by op: for each list position and each tile of TILE elements, every record of the
 * run that has an item at that position runs on the tile, in queue order.  The intermediate data of a
 * step (an optimizer's sequence of foreach ops) then stays in the cache between the ops.
 *
 * The result is the same as op by op because every kernel is elementwise per item and the run is
 * checked first: any two operand ranges of the run that overlap must be the same tensor (same start,
 * length, element size and stride) at the same list position, unless neither is written.  Items at
 * the same position must have the same element count.  The run stops before the first record that
 * breaks a rule (that record runs later, on its own or starting the next run), before any record that
 * is not fusable (other kernels, copies, event and wait records), at the records queued when the run
 * starts (the queue worker lets a run that starts with a record of 4 MiB or more grow while the host
 * keeps queueing fusable records: see fuse_wait_more) and at NRT_FUSE_MAX_RECORDS / NRT_FUSE_MAX_ITEMS.  A queue holding
 * a sticky error runs nothing fused.  The head of the queue moves past the whole run when it ends, so
 * events and synchronizing calls see the run complete at once.
 *
 * describe() must reject (return -1) any record whose kernel would fail: such a record then runs on its
 * own and reports its error as usual.  If a range() call fails anyway, the queue's sticky error names
 * that record and no further tile of the run starts; tiles of other records that already ran stay done
 * (op by op, the later records would have been skipped entirely).
 *
 * Dead ranges: a contiguous range that the run writes before it reads it (an out-of-place result, such
 * as the sqrt temporary of PyTorch's multi-tensor Adam) and whose memory is free in the allocator when
 * the run starts (the host already dropped the tensor) is never read again: when the run holds every
 * record queued at that moment, such ranges live in a per-thread tile buffer (range_ptrs) instead of
 * memory, which saves writing them back to DRAM.  Kernels without range_ptrs see no dead ranges.
 *
 * With the trace on, each record of a run is traced with a slice of the run's time proportional to the
 * bytes its operands cover (the run has no per-op times).
 */
#ifndef NRT_FUSE_H
#define NRT_FUSE_H

#include <stdbool.h>
#include <stdint.h>

#include "nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NRT_FUSE_MAX_OPERANDS 4
#define NRT_FUSE_MAX_RECORDS 64
#define NRT_FUSE_MAX_ITEMS 2048
#define NRT_FUSE_TILE_DEFAULT 16384 /* elements per tile: 64 KiB of f32 per operand, L2-resident */

typedef struct {
	const void *ptr;
	int64_t stride; /* bytes between elements; 0: one element read for every element (a scalar) */
	int32_t size;   /* bytes of one element */
	bool write;
} nrt_fuse_operand_t;

typedef struct {
	int64_t pos; /* the tensor's index in its list: items of a run are aligned by it */
	int64_t n;   /* elements */
	int nops;
	nrt_fuse_operand_t op[NRT_FUSE_MAX_OPERANDS];
} nrt_fuse_item_t;

typedef struct {
	/* Fills out[0 .. count) and returns count (<= cap), or -1: the record does not fuse (it would
	 * fail, or has more than cap items). */
	int (*describe)(const void *args, nrt_fuse_item_t *out, int cap);
	/* Runs elements [begin, end) of item `item`; 0, or nonzero after nrt_kernel_fail.  Called from
	 * several threads at once on disjoint ranges; must not change args. */
	int (*range)(void *args, int item, int64_t begin, int64_t end);
	/* Optional: as range, but operand k (describe()'s numbering) of element `begin` is at ptrs[k]
	 * where ptrs[k] is not NULL (contiguous from there, same element size).  The runtime passes
	 * thread-private tile buffers for dead ranges (see below). */
	int (*range_ptrs)(void *args, int item, int64_t begin, int64_t end, void *const *ptrs);
} nrt_fuse_kernel_t;

/* Marks records of fn as fusable (k must stay valid).  Idempotent; NRT_ERR_INVALID when the table of
 * fusable kernels (16) is full. */
int nrt_fuse_register(nrt_kernel_fn fn, const nrt_fuse_kernel_t *k);
/* On by default.  Off: every record runs on its own. */
void nrt_fuse_enable(bool on);
bool nrt_fuse_enabled(void);
/* Elements per tile (clamped to [64, 1 << 24]); NRT_FUSE_TILE_DEFAULT at start. */
void nrt_fuse_set_tile(int64_t elements);
int64_t nrt_fuse_tile(void);

/* On by default.  Off: dead ranges are written to memory like any other. */
void nrt_fuse_set_dead_buffers(bool on);
bool nrt_fuse_dead_buffers(void);

typedef struct {
	uint64_t runs;    /* fused runs executed */
	uint64_t records; /* records executed inside them */
	uint64_t dead;    /* dead ranges kept in tile buffers */
} nrt_fuse_stats_t;
void nrt_fuse_get_stats(nrt_fuse_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* NRT_FUSE_H */
