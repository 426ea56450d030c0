/* loss2.c - multi_margin_loss and multilabel_margin_loss (forward, backward) on a contiguous x [N, C],
 * and the grad scaler's two kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
 *
 * Margin losses follow aten's CPU loops term by term (LossMultiMargin.cpp, LossMultiLabelMargin.cpp):
 * row sums in f64, divided by C; reduction mean/sum over rows in f64, rounded once.  Targets are checked
 * on the calling thread before any output is written; an out-of-range target fails the kernel
 * ("target out of range"), never an out-of-bounds access.  Threading: rows over the pool.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_fp.h"
#include "nrt.h"

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

/* ---- AMP grad scaler ----------------------------------------------------------------------------- */

typedef struct {
	const nk_amp_unscale_args_t *a;
	float inv;
	int any; /* set (racy but idempotent: only ever 0 -> 1) when a chunk saw a non-finite value */
} amp_ctx_t;

static void amp_range(void *ctx, int64_t i0, int64_t i1)
{
	amp_ctx_t *c = ctx;
	const nk_amp_unscale_args_t *a = c->a;
	int bad = 0;

	if (a->dtype == NK_F64) {
		double *x = a->x, inv = (double)c->inv;

		for (int64_t i = i0; i < i1; i++) {
			bad |= !isfinite(x[i]);
			x[i] = c->inv == 1.0f ? x[i] : x[i] * inv;
		}
	} else if (a->dtype == NK_F32) {
		float *x = a->x;

		for (int64_t i = i0; i < i1; i++) {
			bad |= !isfinite(x[i]);
			x[i] = c->inv == 1.0f ? x[i] : x[i] * c->inv;
		}
	} else {
		for (int64_t i = i0; i < i1; i++) {
			float v = nk_fp_loadf(a->x, a->dtype, i);

			bad |= !isfinite(v);
			nk_fp_storef(a->x, a->dtype, i, c->inv == 1.0f ? v : v * c->inv);
		}
	}
	if (bad)
		__atomic_store_n(&c->any, 1, __ATOMIC_RELAXED);
}

int nk_amp_unscale_run(void *args)
{
	const nk_amp_unscale_args_t *a = args;
	amp_ctx_t c = { .a = a };

	if (!nk_fp_is_float(a->dtype) || a->n < 0 || !a->inv_scale || !a->found_inf) {
		nrt_kernel_fail("_amp_foreach_non_finite_check_and_unscale_: unsupported dtype %s", nk_dtype_name(a->dtype));
		return -1;
	}
	c.inv = a->inv_scale[0];
	nrt_parallel_for(a->n, NK_PARALLEL_GRAIN, amp_range, &c);
	if (c.any)
		a->found_inf[0] = 1.0f;
	return 0;
}

int nk_amp_update_run(void *args)
{
	const nk_amp_update_args_t *a = args;

	if (a->found_inf[0] != 0.0f) {
		a->scale[0] = (float)((double)a->scale[0] * a->backoff);
		a->growth_tracker[0] = 0;
	} else {
		int32_t next = a->growth_tracker[0] + 1;

		if (next == a->interval) {
			float s = (float)((double)a->scale[0] * a->growth);

			if (isfinite(s))
				a->scale[0] = s;
			a->growth_tracker[0] = 0;
		} else {
			a->growth_tracker[0] = next;
		}
	}
	return 0;
}
