/* loss.c - nll_loss forward and backward on logp [N, C] (contiguous) and target [N] (i64), matching
 * aten nll_loss_forward / nll_loss_backward: reduction none / mean / sum, optional class weights,
 * ignore_index, total_weight = sum of the weights of the non-ignored targets.  Mean with every target
 * ignored (or N = 0) gives NaN, like PyTorch; total_weight is 0 for reduction none.
 * Sums are taken in f64 (PyTorch uses a cascade sum in the dtype) and rounded once.
 * Targets are checked on the calling thread first; threading: rows over the pool where a row costs
 * O(C) (reduction none output is O(1) per row and stays on one thread below the grain).
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_fp.h"
#include "nrt.h"

static int nll_check(int dtype, int64_t N, int64_t C, int reduction, const int64_t *target, int64_t ignore,
		     const char *who)
{
	if (!nk_fp_is_float(dtype)) {
		nrt_kernel_fail("%s: unsupported dtype %s", who, nk_dtype_name(dtype));
		return -1;
	}
	if (N < 0 || C < 0 || reduction < NK_REDUCTION_NONE || reduction > NK_REDUCTION_SUM) {
		nrt_kernel_fail("%s: bad size or reduction", who);
		return -1;
	}
	for (int64_t i = 0; i < N; i++) {
		int64_t t = target[i];

		if (t != ignore && (t < 0 || t >= C)) {
			nrt_kernel_fail("Target %lld is out of bounds.", (long long)t);
			return -1;
		}
	}
	return 0;
}

static void nll_none_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_nll_args_t *a = ctx;
	const int64_t *target = a->target;

	for (int64_t i = i0; i < i1; i++) {
		int64_t t = target[i];
		double v = 0;

		if (t != a->ignore_index) {
			double w = a->weight ? nk_fp_loadd(a->weight, a->dtype, t) : 1.0;

			v = -nk_fp_loadd(a->logp, a->dtype, i * a->C + t) * w;
		}
		nk_fp_stored(a->out, a->dtype, i, v);
	}
}

int nk_nll_run(void *args)
{
	const nk_nll_args_t *a = args;
	const int64_t *target = a->target;
	double loss = 0, tw = 0;

	if (nll_check(a->dtype, a->N, a->C, a->reduction, target, a->ignore_index, "nll_loss"))
		return -1;
	if (a->reduction == NK_REDUCTION_NONE) {
		if (a->total_weight)
			nk_fp_stored(a->total_weight, a->dtype, 0, 0);
		nrt_parallel_for(a->N, NK_PARALLEL_GRAIN, nll_none_rows, (void *)a);
		return 0;
	}
	for (int64_t i = 0; i < a->N; i++) {
		int64_t t = target[i];
		double w;

		if (t == a->ignore_index)
			continue;
		w = a->weight ? nk_fp_loadd(a->weight, a->dtype, t) : 1.0;
		loss -= nk_fp_loadd(a->logp, a->dtype, i * a->C + t) * w;
		tw += w;
	}
	if (a->reduction == NK_REDUCTION_MEAN)
		loss = a->N ? loss / tw : NAN; /* 0/0 = NaN when every target is ignored */
	nk_fp_stored(a->out, a->dtype, 0, loss);
	if (a->total_weight)
		nk_fp_stored(a->total_weight, a->dtype, 0, tw);
	return 0;
}

/* ---- backward ----------------------------------------------------------------------------------- */

typedef struct {
	const nk_nll_bwd_args_t *a;
	double grad; /* -(grad_out [/ total_weight]) for mean/sum */
} nll_bwd_t;

/* Rows [i0, i1) of grad_in: zero, then the target entry. */
static void nll_bwd_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nll_bwd_t *b = ctx;
	const nk_nll_bwd_args_t *a = b->a;
	const int64_t *target = a->target;
	size_t es = nk_fp_elem_size(a->dtype);

	memset((char *)a->grad_in + (size_t)i0 * (size_t)a->C * es, 0, (size_t)(i1 - i0) * (size_t)a->C * es);
	for (int64_t i = i0; i < i1; i++) {
		int64_t t = target[i];
		double w, g;

		if (t == a->ignore_index)
			continue;
		w = a->weight ? nk_fp_loadd(a->weight, a->dtype, t) : 1.0;
		if (a->reduction == NK_REDUCTION_NONE)
			g = -w * nk_fp_loadd(a->grad_out, a->dtype, i);
		else
			g = a->weight ? w * b->grad : b->grad;
		nk_fp_stored(a->grad_in, a->dtype, i * a->C + t, g);
	}
}

int nk_nll_bwd_run(void *args)
{
	const nk_nll_bwd_args_t *a = args;
	nll_bwd_t b = { .a = a };

	if (nll_check(a->dtype, a->N, a->C, a->reduction, a->target, a->ignore_index, "nll_loss_backward"))
		return -1;
	if (!a->N || !a->C)
		return 0;
	if (a->reduction != NK_REDUCTION_NONE) {
		double g = nk_fp_loadd(a->grad_out, a->dtype, 0);

		if (a->reduction == NK_REDUCTION_MEAN)
			g /= nk_fp_loadd(a->total_weight, a->dtype, 0);
		b.grad = -g;
	}
	nrt_parallel_for(a->N, NK_PARALLEL_GRAIN / (a->C + 1) + 1, nll_bwd_rows, &b);
	return 0;
}
