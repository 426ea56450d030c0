/* weight_norm.c - weight normalization forward and backward (aten _weight_norm_interface, nk_weight_norm.h).
 * The index d of the normalized dim is the unit of work: a task takes a block of WB consecutive d and walks
 * v as [outer, D, inner] in memory order within it, so dim 0 (inner rows) and the last dim (outer rows of
 * D) both stream.  The _ref twins run the same formulas one d at a time on one thread.
 */
#include <math.h>
#include <stdlib.h>

#include "nk.h"
#include "nk_impl.h"
#include "nk_weight_norm.h"
#include "nrt.h"

#define WB 16 /* d per task block */

static int wn_check(int dtype, int ndtype, int64_t outer, int64_t D, int64_t inner, const char *who)
{
	if (!nk_fp_is_float(dtype) || ndtype != (dtype == NK_F64 ? NK_F64 : NK_F32) || outer < 0 || D < 0 || inner < 0) {
		nrt_kernel_fail("%s: unsupported dtype %s / norm dtype %s or negative size", who, nk_dtype_name(dtype),
				nk_dtype_name(ndtype));
		return -1;
	}
	return 0;
}

/* acc[d - d0] = sum over (o, i) of x[o, d, i] * y[o, d, i] (y == NULL: x squared), for d in [d0, d1). */
static void wn_dot(int dt, const void *x, const void *y, int64_t outer, int64_t D, int64_t inner, int64_t d0, int64_t d1,
		   double *acc)
{
	for (int64_t d = d0; d < d1; d++)
		acc[d - d0] = 0;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t d = d0; d < d1; d++) {
			int64_t base = (o * D + d) * inner;
			double s = 0;
			for (int64_t i = 0; i < inner; i++) {
				double a = nk_fp_loadd(x, dt, base + i);
				s += a * (y ? nk_fp_loadd(y, dt, base + i) : a);
			}
			acc[d - d0] += s;
		}
}

static void wn_fwd_block(const nk_weight_norm_args_t *a, int64_t d0, int64_t d1)
{
	double acc[WB], scale[WB];

	wn_dot(a->dtype, a->v, NULL, a->outer, a->D, a->inner, d0, d1, acc);
	for (int64_t d = d0; d < d1; d++) {
		double n = sqrt(acc[d - d0]);
		if (a->ndtype == NK_F32)
			n = (float)n;
		nk_fp_stored(a->norm, a->ndtype, d, n);
		scale[d - d0] = nk_fp_loadd(a->g, a->dtype, d) / n;
	}
	for (int64_t o = 0; o < a->outer; o++)
		for (int64_t d = d0; d < d1; d++) {
			int64_t base = (o * a->D + d) * a->inner;
			double s = scale[d - d0];
			for (int64_t i = 0; i < a->inner; i++)
				nk_fp_stored(a->w, a->dtype, base + i, nk_fp_loadd(a->v, a->dtype, base + i) * s);
		}
}

static void wn_fwd_tasks(void *ctx, int64_t b0, int64_t b1)
{
	const nk_weight_norm_args_t *a = ctx;

	for (int64_t b = b0; b < b1; b++)
		wn_fwd_block(a, b * WB, nk_min64((b + 1) * WB, a->D));
}

static int64_t wn_grain(int64_t blocks, int64_t total)
{
	return total >= NK_PARALLEL_GRAIN ? 1 : blocks > 0 ? blocks : 1;
}

int nk_weight_norm_run(void *args)
{
	nk_weight_norm_args_t *a = args;
	int64_t blocks;

	if (wn_check(a->dtype, a->ndtype, a->outer, a->D, a->inner, "weight_norm"))
		return -1;
	blocks = nk_cdiv(a->D, WB);
	nrt_parallel_for(blocks, wn_grain(blocks, a->outer * a->D * a->inner), wn_fwd_tasks, a);
	return 0;
}

int nk_weight_norm_ref(void *args)
{
	nk_weight_norm_args_t *a = args;

	if (wn_check(a->dtype, a->ndtype, a->outer, a->D, a->inner, "weight_norm"))
		return -1;
	for (int64_t d = 0; d < a->D; d++)
		wn_fwd_block(a, d, d + 1);
	return 0;
}

static void wn_bwd_block(const nk_weight_norm_bwd_args_t *a, int64_t d0, int64_t d1)
{
	double acc[WB], gn[WB], gg[WB];

	wn_dot(a->dtype, a->gw, a->v, a->outer, a->D, a->inner, d0, d1, acc);
	for (int64_t d = d0; d < d1; d++) {
		double n = nk_fp_loadd(a->norm, a->ndtype, d);
		gg[d - d0] = acc[d - d0] / n;
		gn[d - d0] = nk_fp_loadd(a->g, a->dtype, d) / n;
		if (a->gg)
			nk_fp_stored(a->gg, a->dtype, d, gg[d - d0]);
		gg[d - d0] /= n; /* the coefficient of v in gv */
	}
	if (!a->gv)
		return;
	for (int64_t o = 0; o < a->outer; o++)
		for (int64_t d = d0; d < d1; d++) {
			int64_t base = (o * a->D + d) * a->inner;
			double c = gg[d - d0], s = gn[d - d0];
			for (int64_t i = 0; i < a->inner; i++) {
				double gw = nk_fp_loadd(a->gw, a->dtype, base + i), v = nk_fp_loadd(a->v, a->dtype, base + i);
				nk_fp_stored(a->gv, a->dtype, base + i, s * (gw - v * c));
			}
		}
}

static void wn_bwd_tasks(void *ctx, int64_t b0, int64_t b1)
{
	const nk_weight_norm_bwd_args_t *a = ctx;

	for (int64_t b = b0; b < b1; b++)
		wn_bwd_block(a, b * WB, nk_min64((b + 1) * WB, a->D));
}

int nk_weight_norm_bwd_run(void *args)
{
	nk_weight_norm_bwd_args_t *a = args;
	int64_t blocks;

	if (wn_check(a->dtype, a->ndtype, a->outer, a->D, a->inner, "weight_norm_backward"))
		return -1;
	blocks = nk_cdiv(a->D, WB);
	nrt_parallel_for(blocks, wn_grain(blocks, a->outer * a->D * a->inner), wn_bwd_tasks, a);
	return 0;
}

int nk_weight_norm_bwd_ref(void *args)
{
	nk_weight_norm_bwd_args_t *a = args;

	if (wn_check(a->dtype, a->ndtype, a->outer, a->D, a->inner, "weight_norm_backward"))
		return -1;
	for (int64_t d = 0; d < a->D; d++)
		wn_bwd_block(a, d, d + 1);
	return 0;
}
