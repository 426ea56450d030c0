/* activation.c - small activations and their backward on a strided iterator (hardshrink, softshrink, logit
 * backward, glu, prelu: nk_act_op_t), and rrelu's training forward with Philox noise.
 *
 * nk_act_run walks the coalesced iterator row by row (nk_loop_parallel); a row is converted to f64 in
 * chunks (nk_block_load_f64 with the operands' byte strides), computed in f64 and stored back (f64
 * math rounds once to the dtype: within an ulp of aten's f32/bf16 math).  nk_act_ref computes one
 * element at a time from nk_iter_offset.  Every operand has the same float dtype.
 */
#include <math.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define CH 256

static double sigm(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

static double act_one(int op, double a, int64_t ia, double x, double y, double z)
{
	switch (op) {
	case NK_ACT_HARDSHRINK: return (x >= -a && x <= a) ? 0.0 : x;
	case NK_ACT_HARDSHRINK_BWD: return (y >= -a && y <= a) ? 0.0 : x;
	case NK_ACT_SOFTSHRINK: return x > a ? x - a : x < -a ? x + a : (x != x ? x : 0.0);
	case NK_ACT_SOFTSHRINK_BWD: return (y >= -a && y <= a) ? 0.0 : x;
	case NK_ACT_LOGIT_BWD:
		if (ia)
			return (y < a || y > 1.0 - a) ? 0.0 : x / (y * (1.0 - y));
		return (y < 0.0 || y > 1.0) ? NAN : x / (y * (1.0 - y));
	case NK_ACT_GLU: return x * sigm(y);
	case NK_ACT_GLU_BWD_A: return x * sigm(z);
	case NK_ACT_GLU_BWD_B: {
		double s = sigm(z);

		return x * y * s * (1.0 - s);
	}
	case NK_ACT_PRELU: return x > 0 ? x : y * x;
	case NK_ACT_PRELU_BWD_X: return y > 0 ? x : z * x;
	case NK_ACT_PRELU_BWD_W: return y > 0 ? 0.0 : y * x;
	default: return NAN;
	}
}

static int act_nin(int op)
{
	switch (op) {
	case NK_ACT_HARDSHRINK: case NK_ACT_SOFTSHRINK: return 1;
	case NK_ACT_GLU_BWD_A: case NK_ACT_GLU_BWD_B: case NK_ACT_PRELU_BWD_X: return 3;
	default: return 2;
	}
}

static int act_check(const nk_act_args_t *a)
{
	if (a->op < 0 || a->op >= NK_ACT_COUNT || a->it.nops != 1 + act_nin(a->op)) {
		nrt_kernel_fail("nk_act: bad op %d or operand count %d", a->op, a->it.nops);
		return -1;
	}
	for (int k = 0; k < a->it.nops; k++)
		if (!nk_is_float(a->it.dtype[k]) || a->it.dtype[k] != a->it.dtype[0]) {
			nrt_kernel_fail("nk_act: operands must share one float dtype");
			return -1;
		}
	return 0;
}

typedef struct {
	const nk_act_args_t *a;
	int dt, nin;
} act_ctx_t;

static void act_row(void *ctx, char *const *data, const int64_t *st, int64_t n, int64_t lin)
{
	const act_ctx_t *c = ctx;
	double in[3][CH], out[CH];

	for (int64_t j = 0; j < n; j += CH) {
		int64_t m = n - j < CH ? n - j : CH;

		for (int k = 0; k < c->nin; k++)
			nk_block_load_f64(in[k], data[k + 1] + j * st[k + 1], st[k + 1], c->dt, m);
		for (int64_t i = 0; i < m; i++)
			out[i] = act_one(c->a->op, c->a->a, c->a->ia, in[0][i], c->nin > 1 ? in[1][i] : 0, c->nin > 2 ? in[2][i] : 0);
		nk_block_store_f64(data[0] + j * st[0], st[0], c->dt, out, m);
	}
}

int nk_act_run(void *args)
{
	const nk_act_args_t *a = args;
	nk_loop_t L;
	act_ctx_t c = { .a = a };

	if (act_check(a) || nk_loop_init(&L, &a->it, 2, 4, "nk_act"))
		return -1;
	c.dt = a->it.dtype[0];
	c.nin = act_nin(a->op);
	nk_loop_parallel(&L, NK_PARALLEL_GRAIN / 8, act_row, &c);
	return 0;
}

int nk_act_ref(void *args)
{
	const nk_act_args_t *a = args;
	int64_t n;
	int nin;

	if (act_check(a))
		return -1;
	n = nk_iter_numel(&a->it);
	nin = act_nin(a->op);
	for (int64_t i = 0; i < n; i++) {
		double v[3] = { 0, 0, 0 };

		for (int k = 0; k < nin; k++)
			v[k] = nk_load_f64(a->it.data[k + 1] + nk_iter_offset(&a->it, k + 1, i), a->it.dtype[k + 1]);
		nk_store_f64(a->it.data[0] + nk_iter_offset(&a->it, 0, i), a->it.dtype[0], act_one(a->op, a->a, a->ia, v[0], v[1], v[2]));
	}
	return 0;
}

/* ---- rrelu ------------------------------------------------------------------------------------- */

static void rrelu_range(void *ctx, int64_t i0, int64_t i1)
{
	const nk_rrelu_args_t *a = ctx;

	for (int64_t i = i0; i < i1; i++) {
		double x = nk_fp_loadd(a->x, a->dtype, i), r = 1.0;

		if (x <= 0) {
			nk_philox_out_t w = nk_philox4x32_10(a->seed, a->offset + (uint64_t)i, 0);

			r = a->lower + (a->upper - a->lower) * (double)nk_u32_to_unit_f32(w.v[0]);
		}
		nk_fp_stored(a->noise, a->dtype, i, r);
		r = nk_fp_loadd(a->noise, a->dtype, i); /* the slope as stored, times x in the dtype's math */
		if (a->dtype == NK_F64)
			nk_fp_stored(a->y, a->dtype, i, x <= 0 ? x * r : x);
		else
			nk_fp_storef(a->y, a->dtype, i, x <= 0 ? (float)x * (float)r : (float)x);
	}
}

int nk_rrelu_run(void *args)
{
	const nk_rrelu_args_t *a = args;

	if (!nk_is_float(a->dtype) || a->n < 0) {
		nrt_kernel_fail("rrelu_with_noise: unsupported dtype %s", nk_dtype_name(a->dtype));
		return -1;
	}
	nrt_parallel_for(a->n, NK_PARALLEL_GRAIN / 8, rrelu_range, (void *)a);
	return 0;
}
