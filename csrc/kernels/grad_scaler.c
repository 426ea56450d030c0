/* grad_scaler.c - the AMP grad scaler's two kernels (_amp_foreach_non_finite_check_and_unscale_,
 * _amp_update_scale_), as aten's CPU kernels: unscale multiplies by inv_scale and flags any inf/NaN
 * seen before scaling; update grows or backs off the scale and steps the growth tracker.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

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
