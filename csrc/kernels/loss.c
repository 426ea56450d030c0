/* loss.c - the loss kernels on a contiguous [N, C] input.
 *
 * nll_loss forward and backward on logp [N, C] (contiguous) and target [N] (i64), matching
 * aten nll_loss_forward / nll_loss_backward: reduction none / mean / sum, optional class weights,
 * ignore_index, total_weight = sum of the weights of the non-ignored targets.  Mean with every target
 * ignored (or N = 0) gives NaN, like PyTorch; total_weight is 0 for reduction none.
 * Sums are taken in f64 (PyTorch uses a cascade sum in the dtype) and rounded once.
 * Targets are checked on the calling thread first; threading: rows over the pool where a row costs
 * O(C) (reduction none output is O(1) per row and stays on one thread below the grain).
 *
 * multi_margin_loss and multilabel_margin_loss (forward, backward) follow aten's CPU loops term by term
 * (LossMultiMargin.cpp, LossMultiLabelMargin.cpp): row sums in f64, divided by C; reduction mean/sum over
 * rows in f64, rounded once.  Targets are checked on the calling thread before any output is written; an
 * out-of-range target fails the kernel ("target out of range"), never an out-of-bounds access.
 * Threading: rows over the pool.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
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
			nrt_kernel_fail(NRT_INDEX_ERROR "Target %lld is out of bounds.", (long long)t);
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

/* ---- margin losses ------------------------------------------------------------------------------- */

static int margin_check(int dtype, int64_t N, int64_t C, int reduction, const char *who)
{
	if (!nk_fp_is_float(dtype) || N < 0 || C < 0 || reduction < NK_REDUCTION_NONE || reduction > NK_REDUCTION_SUM) {
		nrt_kernel_fail("%s: unsupported dtype %s, size or reduction", who, nk_dtype_name(dtype));
		return -1;
	}
	return 0;
}

/* ---- multi_margin_loss ----------------------------------------------------------------------------- */

static int mm_targets(const nk_multi_margin_args_t *a, const char *who)
{
	const int64_t *t = a->target;

	if (margin_check(a->dtype, a->N, a->C, a->reduction, who))
		return -1;
	if (a->p != 1 && a->p != 2) {
		nrt_kernel_fail("%s: only p == 1 and p == 2 supported", who);
		return -1;
	}
	for (int64_t i = 0; i < a->N; i++)
		if (t[i] < 0 || t[i] >= a->C) {
			nrt_kernel_fail("%s: target out of range (target %lld, %lld classes)", who, (long long)t[i], (long long)a->C);
			return -1;
		}
	return 0;
}

static double mm_row(const nk_multi_margin_args_t *a, int64_t i)
{
	int64_t y = ((const int64_t *)a->target)[i], base = i * a->C;
	double xy = nk_fp_loadd(a->x, a->dtype, base + y), w = a->w ? nk_fp_loadd(a->w, a->dtype, y) : 1.0, s = 0;

	for (int64_t d = 0; d < a->C; d++) {
		double z;

		if (d == y)
			continue;
		z = a->margin - xy + nk_fp_loadd(a->x, a->dtype, base + d);
		if (z > 0)
			s += (a->p == 1 ? z : z * z) * w;
	}
	return s / (double)a->C;
}

static void mm_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_multi_margin_args_t *a = ctx;

	for (int64_t i = i0; i < i1; i++)
		nk_fp_stored(a->out, a->dtype, i, mm_row(a, i));
}

int nk_multi_margin_run(void *args)
{
	const nk_multi_margin_args_t *a = args;
	double s = 0;

	if (mm_targets(a, "multi_margin_loss"))
		return -1;
	if (a->reduction == NK_REDUCTION_NONE) {
		nrt_parallel_for(a->N, NK_PARALLEL_GRAIN / (a->C + 1) + 1, mm_rows, (void *)a);
		return 0;
	}
	for (int64_t i = 0; i < a->N; i++)
		s += mm_row(a, i);
	if (a->reduction == NK_REDUCTION_MEAN)
		s = a->N ? s / (double)a->N : NAN;
	nk_fp_stored(a->out, a->dtype, 0, s);
	return 0;
}

static void mm_bwd_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_multi_margin_args_t *a = ctx;
	double g = (a->reduction == NK_REDUCTION_MEAN ? 1.0 / (double)(a->N * a->C) : 1.0 / (double)a->C);

	for (int64_t i = i0; i < i1; i++) {
		int64_t y = ((const int64_t *)a->target)[i], base = i * a->C;
		double xy = nk_fp_loadd(a->x, a->dtype, base + y), w = a->w ? nk_fp_loadd(a->w, a->dtype, y) : 1.0, gy = 0;
		double go = nk_fp_loadd(a->grad_out, a->dtype, a->reduction == NK_REDUCTION_NONE ? i : 0);

		for (int64_t d = 0; d < a->C; d++) {
			double z, h = 0;

			if (d == y)
				continue;
			z = a->margin - xy + nk_fp_loadd(a->x, a->dtype, base + d);
			if (z > 0) {
				h = (a->p == 1 ? g : 2 * g * z) * w;
				gy -= h;
			}
			nk_fp_stored(a->grad_in, a->dtype, base + d, h * go);
		}
		nk_fp_stored(a->grad_in, a->dtype, base + y, gy * go);
	}
}

int nk_multi_margin_bwd_run(void *args)
{
	const nk_multi_margin_args_t *a = args;

	if (mm_targets(a, "multi_margin_loss_backward"))
		return -1;
	nrt_parallel_for(a->N, NK_PARALLEL_GRAIN / (a->C + 1) + 1, mm_bwd_rows, (void *)a);
	return 0;
}

/* ---- multilabel_margin_loss ---------------------------------------------------------------------- */

static int ml_targets(const nk_multilabel_margin_args_t *a, const char *who)
{
	const int64_t *t = a->target;

	if (margin_check(a->dtype, a->N, a->C, a->reduction, who))
		return -1;
	for (int64_t i = 0; i < a->N; i++)
		for (int64_t j = 0; j < a->C; j++) {
			int64_t v = t[i * a->C + j];

			if (v == -1)
				break;
			if (v < 0 || v >= a->C) {
				nrt_kernel_fail("%s: target out of range (target %lld, %lld classes)", who, (long long)v, (long long)a->C);
				return -1;
			}
		}
	return 0;
}

/* Row i: sets is_target (when wanted) and returns the row's loss (f64, divided by C). */
static double ml_row(const nk_multilabel_margin_args_t *a, int64_t i, bool write_is_target)
{
	const int64_t *t = (const int64_t *)a->target + i * a->C;
	int64_t base = i * a->C;
	double s = 0;

	if (write_is_target) {
		for (int64_t d = 0; d < a->C; d++)
			nk_fp_stored(a->is_target, a->dtype, base + d, 0);
		for (int64_t j = 0; j < a->C && t[j] != -1; j++)
			nk_fp_stored(a->is_target, a->dtype, base + t[j], 1);
	}
	for (int64_t j = 0; j < a->C && t[j] != -1; j++) {
		double xy = nk_fp_loadd(a->x, a->dtype, base + t[j]);

		for (int64_t d = 0; d < a->C; d++) {
			double z;

			if (nk_fp_loadd(a->is_target, a->dtype, base + d) != 0)
				continue;
			z = 1 - xy + nk_fp_loadd(a->x, a->dtype, base + d);
			if (z > 0)
				s += z;
		}
	}
	return s / (double)a->C;
}

static void ml_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_multilabel_margin_args_t *a = ctx;

	for (int64_t i = i0; i < i1; i++)
		nk_fp_stored(a->out, a->dtype, i, ml_row(a, i, true));
}

int nk_multilabel_margin_run(void *args)
{
	const nk_multilabel_margin_args_t *a = args;
	double s = 0;

	if (ml_targets(a, "multilabel_margin_loss"))
		return -1;
	if (a->reduction == NK_REDUCTION_NONE) {
		nrt_parallel_for(a->N, NK_PARALLEL_GRAIN / (a->C * a->C + 1) + 1, ml_rows, (void *)a);
		return 0;
	}
	for (int64_t i = 0; i < a->N; i++)
		s += ml_row(a, i, true);
	if (a->reduction == NK_REDUCTION_MEAN)
		s = a->N ? s / (double)a->N : NAN;
	nk_fp_stored(a->out, a->dtype, 0, s);
	return 0;
}

static void ml_bwd_rows(void *ctx, int64_t i0, int64_t i1)
{
	const nk_multilabel_margin_args_t *a = ctx;
	double g = (a->reduction == NK_REDUCTION_MEAN ? 1.0 / (double)(a->N * a->C) : 1.0 / (double)a->C);
	double row[1024];

	for (int64_t i = i0; i < i1; i++) {
		const int64_t *t = (const int64_t *)a->target + i * a->C;
		int64_t base = i * a->C;
		double go = nk_fp_loadd(a->grad_out, a->dtype, a->reduction == NK_REDUCTION_NONE ? i : 0);

		/* accumulate the row in f64, in blocks of columns when C is large */
		for (int64_t d0 = 0; d0 < a->C; d0 += 1024) {
			int64_t nb = a->C - d0 < 1024 ? a->C - d0 : 1024;

			memset(row, 0, sizeof row);
			for (int64_t j = 0; j < a->C && t[j] != -1; j++) {
				double xy = nk_fp_loadd(a->x, a->dtype, base + t[j]);

				for (int64_t d = 0; d < a->C; d++) {
					double z;

					if (nk_fp_loadd(a->is_target, a->dtype, base + d) != 0)
						continue;
					z = 1 - xy + nk_fp_loadd(a->x, a->dtype, base + d);
					if (z > 0) {
						if (t[j] >= d0 && t[j] < d0 + nb)
							row[t[j] - d0] -= g;
						if (d >= d0 && d < d0 + nb)
							row[d - d0] += g;
					}
				}
			}
			for (int64_t d = 0; d < nb; d++)
				nk_fp_stored(a->grad_in, a->dtype, base + d0 + d, row[d] * go);
		}
	}
}

int nk_multilabel_margin_bwd_run(void *args)
{
	const nk_multilabel_margin_args_t *a = args;

	if (ml_targets(a, "multilabel_margin_loss_backward"))
		return -1;
	nrt_parallel_for(a->N, NK_PARALLEL_GRAIN / (a->C * a->C + 1) + 1, ml_bwd_rows, (void *)a);
	return 0;
}
