/* nk_foreach.h - multi-tensor elementwise kernels (the _foreach_* ops; optim.c).
 *
 * One launch record holds up to NK_FOREACH_ITEMS tensors of a list ("items") and one pointwise op
 * (nk_op_t) applied to each: item i computes out = op(x, y, z) over its n contiguous elements, exactly
 * as nk_pointwise_run computes it for that tensor alone (same formula, same scalar casts), so results
 * match the single-tensor op bit for bit.  Operand 0 is the output, operands 1.. the inputs; every
 * operand has dtype[k] and esize[k] bytes between elements, esize 0 meaning one element read for all
 * (a scalar: the operand sk reads the item's `scal` bits, another stride-0 operand a 0-d tensor).
 * The per-item parameter a (alpha, value, weight) and the record's b feed the op as in
 * nk_pointwise_args_t.
 *
 * nk_foreach_run: the kernel (all items, split over the pool in pieces of items).  f32 add, sub, mul,
 * div, sqrt, neg, abs, reciprocal, addcmul, addcdiv and lerp have dense loops (AVX-512 when present);
 * everything else runs nk_pointwise_run on the piece.  nk_foreach_ref: nk_pointwise_ref per item.
 * nk_foreach_range: elements [begin, end) of one item, for queue-level fusion (nrt_fuse.h), which
 * nk_foreach_fuse describes; nk_foreach_check validates a record without running it.
 */
#ifndef NK_FOREACH_H
#define NK_FOREACH_H

#include "nk.h"
#include "nrt_fuse.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	char *data[NK_MAX_OPS]; /* operand k of this item (NULL for the scalar operand sk) */
	int64_t n;              /* elements */
	int64_t pos;            /* index of the tensor in its list (queue-level fusion aligns items by it) */
	uint64_t scal;          /* the scalar operand's bits, in dtype[sk] */
	double a;               /* op parameter (alpha, value, weight) */
	int64_t ia;
} nk_foreach_item_t;

#define NK_FOREACH_HEADER 64
#define NK_FOREACH_ITEMS ((NRT_MAX_ARGS - NK_FOREACH_HEADER) / (int)sizeof(nk_foreach_item_t))

typedef struct {
	int32_t op, nops, sk, count; /* sk: index of the scalar operand, -1 if none */
	int8_t dtype[NK_MAX_OPS];
	int32_t pad;
	int64_t esize[NK_MAX_OPS];
	double b;
	nk_foreach_item_t items[NK_FOREACH_ITEMS];
} nk_foreach_args_t;

int nk_foreach_run(void *args);
int nk_foreach_ref(void *args);
/* 0 if the record is well formed (op, operand count, dtypes, count); else nrt_kernel_fail and -1. */
int nk_foreach_check(const nk_foreach_args_t *a);
/* Elements [begin, end) of item i of a checked record. */
int nk_foreach_range(const nk_foreach_args_t *a, int i, int64_t begin, int64_t end);
extern const nrt_fuse_kernel_t nk_foreach_fuse;

/* The dense f32 loops (optim_avx512.c); y / z may be scalars (ybc / zbc: one value for all).
 * Returns false for an op it does not have. */
bool nk_foreach_f32_avx512(int op, float a, float *o, const float *x, const float *y, const float *z, bool ybc,
			   bool zbc, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* NK_FOREACH_H */
