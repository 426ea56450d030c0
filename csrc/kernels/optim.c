/* optim.c - one fused Adam / AdamW step over n contiguous elements; fused SGD and Adagrad steps
 * (nk_optim.h); the multi-tensor _foreach_ kernels (nk_foreach.h).
 *
 * Per element, in PyTorch's single-tensor order (torch/optim/adam.py, _single_tensor_adam) with every
 * Python scalar cast to the compute type as ATen does (float for f32/bf16/f16, double for f64):
 *   g = grad / grad_scale (when != 1); g = -g if maximize
 *   AdamW: param *= 1 - lr*wd            Adam (wd != 0): g = g + wd*param
 *   exp_avg.lerp_(g, 1 - beta1)          exp_avg_sq = exp_avg_sq*beta2 + (1 - beta2)*g*g
 *   amsgrad: max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq) (NaN propagates), used below
 *   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
 *   param = param + (-lr / (1 - beta1^step)) * exp_avg / denom
 * bf16/f16 tensors (param and states alike) are widened to float and rounded back once per step.
 *
 * nk_adam_ref: the formula, element by element, through the dtype's scalar casts.
 * nk_adam_run: the same operations in the same order (so results match the reference bit for bit),
 * in dense loops with the flags hoisted out (AVX-512 in optim_avx512.c when the CPU has it), split
 * over the pool; bf16/f16 go through float blocks.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "nk_dispatch_impl.h"
#include "nk_foreach.h"
#include "nk_optim.h"
#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

#define ADAM_BLK 256

/* The step's scalars, computed once in double (Python floats) and cast per compute type. */
typedef struct {
	const nk_adam_args_t *a;
	double beta1_w, beta2, one_m_beta2, decay, wd, bc2_sqrt, eps, neg_step_size, grad_scale;
	bool l2, amsgrad, maximize, scaled;
} adam_ctx_t;

static int adam_prepare(adam_ctx_t *c, const nk_adam_args_t *a)
{
	memset(c, 0, sizeof *c);
	c->a = a;
	if (a->dtype != NK_F32 && a->dtype != NK_F64 && a->dtype != NK_BF16 && a->dtype != NK_F16) {
		nrt_kernel_fail("nk_adam: dtype %s is not supported (f32, f64, bf16, f16)",
				nk_dtype_name(a->dtype));
		return -1;
	}
	if (a->n < 0 || a->step < 1) {
		nrt_kernel_fail("nk_adam: bad n=%lld or step=%lld (step counts from 1)", (long long)a->n,
				(long long)a->step);
		return -1;
	}
	if (a->n > 0 && (!a->param || !a->grad || !a->exp_avg || !a->exp_avg_sq ||
			 (a->amsgrad && !a->max_exp_avg_sq))) {
		nrt_kernel_fail("nk_adam: null tensor pointer");
		return -1;
	}
	double step = (double)a->step;
	c->beta1_w = 1.0 - a->beta1;
	c->beta2 = a->beta2;
	c->one_m_beta2 = 1.0 - a->beta2;
	c->wd = a->weight_decay;
	c->decay = 1.0 - a->lr * a->weight_decay;
	c->bc2_sqrt = sqrt(1.0 - pow(a->beta2, step));
	c->eps = a->eps;
	c->neg_step_size = -(a->lr / (1.0 - pow(a->beta1, step)));
	c->grad_scale = a->grad_scale;
	c->l2 = !a->adamw && a->weight_decay != 0;
	c->amsgrad = a->amsgrad;
	c->maximize = a->maximize;
	c->scaled = a->grad_scale != 1.0;
	return 0;
}

/* PyTorch's lerp (exact at both ends: the weight picks the formula). */
static inline float adam_lerpf(float s, float e, float w)
{
	return fabsf(w) < 0.5f ? s + w * (e - s) : e - (e - s) * (1 - w);
}

static inline double adam_lerpd(double s, double e, double w)
{
	return fabs(w) < 0.5 ? s + w * (e - s) : e - (e - s) * (1 - w);
}

/* One element in float; p, m, v, vmax updated in place. */
static inline void adam_elem_f(const adam_ctx_t *c, float *p, float *m, float *v, float *vmax, float g)
{
	if (c->scaled) g = g / (float)c->grad_scale;
	if (c->maximize) g = -g;
	if (!c->a->adamw && c->wd != 0) g = g + (float)c->wd * *p;
	if (c->a->adamw && c->wd != 0) *p = *p * (float)c->decay;
	*m = adam_lerpf(*m, g, (float)c->beta1_w);
	*v = *v * (float)c->beta2 + (float)c->one_m_beta2 * g * g;
	float vv = *v;
	if (c->amsgrad) {
		*vmax = (*vmax != *vmax || vv != vv) ? NAN : (*vmax < vv ? vv : *vmax);
		vv = *vmax;
	}
	float denom = sqrtf(vv) / (float)c->bc2_sqrt + (float)c->eps;
	*p = *p + (float)c->neg_step_size * *m / denom;
}

static inline void adam_elem_d(const adam_ctx_t *c, double *p, double *m, double *v, double *vmax, double g)
{
	if (c->scaled) g = g / c->grad_scale;
	if (c->maximize) g = -g;
	if (!c->a->adamw && c->wd != 0) g = g + c->wd * *p;
	if (c->a->adamw && c->wd != 0) *p = *p * c->decay;
	*m = adam_lerpd(*m, g, c->beta1_w);
	*v = *v * c->beta2 + c->one_m_beta2 * g * g;
	double vv = *v;
	if (c->amsgrad) {
		*vmax = (*vmax != *vmax || vv != vv) ? NAN : (*vmax < vv ? vv : *vmax);
		vv = *vmax;
	}
	double denom = sqrt(vv) / c->bc2_sqrt + c->eps;
	*p = *p + c->neg_step_size * *m / denom;
}

/* ---- reference ------------------------------------------------------------------------------------ */
int nk_adam_ref(void *args)
{
	const nk_adam_args_t *a = args;
	adam_ctx_t c;
	if (adam_prepare(&c, a))
		return -1;
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	for (int64_t i = 0; i < a->n; i++) {
		size_t off = (size_t)i * es;
		char *pp = (char *)a->param + off, *mp = (char *)a->exp_avg + off;
		char *vp = (char *)a->exp_avg_sq + off;
		char *xp = a->amsgrad ? (char *)a->max_exp_avg_sq + off : NULL;
		const char *gp = (const char *)a->grad + off;
		if (dt == NK_F64) {
			double vmax = xp ? *(double *)xp : 0;
			adam_elem_d(&c, (double *)pp, (double *)mp, (double *)vp, &vmax, *(const double *)gp);
			if (xp) *(double *)xp = vmax;
			continue;
		}
		float p = nk_load_f32(pp, dt), m = nk_load_f32(mp, dt), v = nk_load_f32(vp, dt);
		float vmax = xp ? nk_load_f32(xp, dt) : 0;
		adam_elem_f(&c, &p, &m, &v, &vmax, nk_load_f32(gp, dt));
		nk_store_f32(pp, dt, p);
		nk_store_f32(mp, dt, m);
		nk_store_f32(vp, dt, v);
		if (xp) nk_store_f32(xp, dt, vmax);
	}
	return 0;
}

/* ---- optimized ------------------------------------------------------------------------------------ */
/* The dense f32 update with the flags as compile-time constants (always inlined), so every variant
 * is a branch-free loop the compiler vectorizes. */
static inline __attribute__((always_inline)) void
adam_f32_loop(const adam_ctx_t *c, float *restrict p, float *restrict m, float *restrict v,
	      const float *restrict g, int64_t n, const bool scaled, const bool l2, const bool decoupled)
{
	const float gs = (float)c->grad_scale, sign = c->maximize ? -1.0f : 1.0f;
	const float wd = (float)c->wd, decay = (float)c->decay, w1 = (float)c->beta1_w;
	const float b2 = (float)c->beta2, omb2 = (float)c->one_m_beta2, bc2 = (float)c->bc2_sqrt;
	const float eps = (float)c->eps, nss = (float)c->neg_step_size;
	for (int64_t i = 0; i < n; i++) {
		float gi = scaled ? g[i] / gs : g[i];
		gi = gi * sign;
		float pi = p[i];
		if (l2)
			gi = gi + wd * pi;
		if (decoupled)
			pi = pi * decay;
		float mi = m[i] + w1 * (gi - m[i]);
		float vi = v[i] * b2 + omb2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi + nss * mi / (sqrtf(vi) / bc2 + eps);
	}
}

/* Dense f32 step: specialized loops for the common shapes, the scalar step for the rest. */
static void adam_f32(const adam_ctx_t *c, float *p, float *m, float *v, float *vmax, const float *g, int64_t n)
{
	bool decoupled = c->a->adamw && c->wd != 0;
	if (!(fabsf((float)c->beta1_w) < 0.5f) || c->amsgrad) { /* rare shapes of the formula */
		for (int64_t i = 0; i < n; i++) {
			float x = vmax ? vmax[i] : 0;
			adam_elem_f(c, &p[i], &m[i], &v[i], &x, g[i]);
			if (vmax) vmax[i] = x;
		}
		return;
	}
	if (nk_family_avx512(NK_FAM_OPTIM)) {
		nk_adam_f32_consts_t k = {(float)c->grad_scale, c->maximize ? -1.0f : 1.0f, (float)c->wd,
					  (float)c->decay, (float)c->beta1_w, (float)c->beta2, (float)c->one_m_beta2,
					  (float)c->bc2_sqrt, (float)c->eps, (float)c->neg_step_size, c->scaled, c->l2,
					  decoupled};
		nk_adam_f32_avx512(&k, p, m, v, g, n);
		return;
	}
	switch ((c->scaled ? 4 : 0) | (c->l2 ? 2 : 0) | (decoupled ? 1 : 0)) {
	case 0: adam_f32_loop(c, p, m, v, g, n, false, false, false); return;
	case 1: adam_f32_loop(c, p, m, v, g, n, false, false, true); return;
	case 2: adam_f32_loop(c, p, m, v, g, n, false, true, false); return;
	case 4: adam_f32_loop(c, p, m, v, g, n, true, false, false); return;
	case 5: adam_f32_loop(c, p, m, v, g, n, true, false, true); return;
	default: adam_f32_loop(c, p, m, v, g, n, true, true, false); return;
	}
}

/* Elements [i0, i1) of any dtype: f32 in place, f64 through the scalar step, bf16/f16 widened to
 * float blocks, stepped, and rounded back. */
static void adam_range(const adam_ctx_t *c, int64_t i0, int64_t i1)
{
	const nk_adam_args_t *a = c->a;
	int dt = a->dtype;
	if (dt == NK_F32) {
		adam_f32(c, (float *)a->param + i0, (float *)a->exp_avg + i0, (float *)a->exp_avg_sq + i0,
			 a->amsgrad ? (float *)a->max_exp_avg_sq + i0 : NULL, (const float *)a->grad + i0, i1 - i0);
		return;
	}
	if (dt == NK_F64) {
		for (int64_t i = i0; i < i1; i++) {
			double *vm = a->amsgrad ? (double *)a->max_exp_avg_sq + i : NULL;
			double x = vm ? *vm : 0;
			adam_elem_d(c, (double *)a->param + i, (double *)a->exp_avg + i,
				    (double *)a->exp_avg_sq + i, &x, ((const double *)a->grad)[i]);
			if (vm) *vm = x;
		}
		return;
	}
	float p[ADAM_BLK], m[ADAM_BLK], v[ADAM_BLK], x[ADAM_BLK], g[ADAM_BLK];
	for (int64_t b = i0; b < i1; b += ADAM_BLK) {
		int64_t n = i1 - b < ADAM_BLK ? i1 - b : ADAM_BLK;
		int64_t off = b * 2;
		nk_block_load_f32(p, (const char *)a->param + off, 2, dt, n);
		nk_block_load_f32(m, (const char *)a->exp_avg + off, 2, dt, n);
		nk_block_load_f32(v, (const char *)a->exp_avg_sq + off, 2, dt, n);
		nk_block_load_f32(g, (const char *)a->grad + off, 2, dt, n);
		if (a->amsgrad)
			nk_block_load_f32(x, (const char *)a->max_exp_avg_sq + off, 2, dt, n);
		adam_f32(c, p, m, v, a->amsgrad ? x : NULL, g, n);
		nk_block_store_f32((char *)a->param + off, 2, dt, p, n);
		nk_block_store_f32((char *)a->exp_avg + off, 2, dt, m, n);
		nk_block_store_f32((char *)a->exp_avg_sq + off, 2, dt, v, n);
		if (a->amsgrad)
			nk_block_store_f32((char *)a->max_exp_avg_sq + off, 2, dt, x, n);
	}
}

static void adam_task(void *ctx, int64_t begin, int64_t end)
{
	adam_range(ctx, begin, end);
}

int nk_adam_run(void *args)
{
	if (nk_using_reference())
		return nk_adam_ref(args);
	const nk_adam_args_t *a = args;
	adam_ctx_t c;
	if (adam_prepare(&c, a))
		return -1;
	if (a->n > NK_PARALLEL_GRAIN)
		nrt_parallel_for(a->n, NK_PARALLEL_GRAIN, adam_task, &c);
	else
		adam_range(&c, 0, a->n);
	return 0;
}

/* ---- SGD and Adagrad (nk_optim.h) ------------------------------------------------------------------ */
static int optim_check(const char *name, int dt, int64_t n, const void *p, const void *g, const void *st)
{
	if (dt != NK_F32 && dt != NK_F64 && dt != NK_BF16 && dt != NK_F16) {
		nrt_kernel_fail("%s: dtype %s is not supported (f32, f64, bf16, f16)", name, nk_dtype_name(dt));
		return -1;
	}
	if (n < 0 || (n > 0 && (!p || !g || !st))) {
		nrt_kernel_fail("%s: bad n=%lld or null tensor pointer", name, (long long)n);
		return -1;
	}
	return 0;
}

/* One SGD element in T (float or double); buf NULL: no momentum.  Returns the grad to store back. */
#define SGD_ELEM(T, FMA)                                                                                  \
	static inline T sgd_elem_##T(const nk_sgd_args_t *a, T *p, T g, T *buf, T *gstore)              \
	{                                                                                                 \
		if (a->grad_scale != 1.0) {                                                               \
			g = g / (T)a->grad_scale;                                                         \
			*gstore = g;                                                                      \
		}                                                                                         \
		if (a->maximize) g = -g;                                                                  \
		if (a->weight_decay != 0) g = FMA(*p, (T)a->weight_decay, g);                             \
		if (buf) {                                                                                \
			T b = a->first_step ? g : FMA((T)(1 - a->dampening), g, *buf * (T)a->momentum);   \
			*buf = b;                                                                         \
			g = a->nesterov ? FMA(b, (T)a->momentum, g) : b;                                  \
		}                                                                                         \
		*p = *p + g * (T)(-a->lr);                                                                \
		return g;                                                                                 \
	}
SGD_ELEM(float, fmaf)
SGD_ELEM(double, fma)

#define ADAGRAD_ELEM(T, SQRT)                                                                             \
	static inline void adagrad_elem_##T(const nk_adagrad_args_t *a, T clr, T *p, T g, T *sum, T *gstore) \
	{                                                                                                 \
		if (a->grad_scale != 1.0) {                                                               \
			g = g / (T)a->grad_scale;                                                         \
			*gstore = g;                                                                      \
		}                                                                                         \
		if (a->maximize) g = -g;                                                                  \
		if (a->weight_decay != 0) g = g + *p * (T)a->weight_decay;                                \
		*sum = *sum + g * g;                                                                      \
		T sd = SQRT(*sum) + (T)a->eps;                                                            \
		*p = *p - g / sd * clr;                                                                   \
	}
ADAGRAD_ELEM(float, sqrtf)
ADAGRAD_ELEM(double, sqrt)

/* Elements [i0, i1): f32/f64 in place, bf16/f16 through float blocks. */
static void sgd_range(const nk_sgd_args_t *a, int64_t i0, int64_t i1)
{
	int dt = a->dtype;
	bool mom = a->momentum_buf != NULL;
	if (dt == NK_F64 || dt == NK_F32) {
		for (int64_t i = i0; i < i1; i++) {
			if (dt == NK_F64) {
				double *g = (double *)a->grad + i;
				sgd_elem_double(a, (double *)a->param + i, *g, mom ? (double *)a->momentum_buf + i : NULL, g);
			} else {
				float *g = (float *)a->grad + i;
				sgd_elem_float(a, (float *)a->param + i, *g, mom ? (float *)a->momentum_buf + i : NULL, g);
			}
		}
		return;
	}
	float p[ADAM_BLK], g[ADAM_BLK], b[ADAM_BLK];
	for (int64_t blk = i0; blk < i1; blk += ADAM_BLK) {
		int64_t n = i1 - blk < ADAM_BLK ? i1 - blk : ADAM_BLK, off = blk * 2;
		nk_block_load_f32(p, (const char *)a->param + off, 2, dt, n);
		nk_block_load_f32(g, (const char *)a->grad + off, 2, dt, n);
		if (mom)
			nk_block_load_f32(b, (const char *)a->momentum_buf + off, 2, dt, n);
		for (int64_t i = 0; i < n; i++)
			sgd_elem_float(a, &p[i], g[i], mom ? &b[i] : NULL, &g[i]);
		nk_block_store_f32((char *)a->param + off, 2, dt, p, n);
		if (a->grad_scale != 1.0)
			nk_block_store_f32((char *)a->grad + off, 2, dt, g, n);
		if (mom)
			nk_block_store_f32((char *)a->momentum_buf + off, 2, dt, b, n);
	}
}

static void adagrad_range(const nk_adagrad_args_t *a, int64_t i0, int64_t i1)
{
	int dt = a->dtype;
	double clr = a->lr / (1 + (a->step - 1) * a->lr_decay);
	if (dt == NK_F64 || dt == NK_F32) {
		for (int64_t i = i0; i < i1; i++) {
			if (dt == NK_F64) {
				double *g = (double *)a->grad + i;
				adagrad_elem_double(a, clr, (double *)a->param + i, *g, (double *)a->state_sum + i, g);
			} else {
				float *g = (float *)a->grad + i;
				adagrad_elem_float(a, (float)clr, (float *)a->param + i, *g, (float *)a->state_sum + i, g);
			}
		}
		return;
	}
	float p[ADAM_BLK], g[ADAM_BLK], v[ADAM_BLK];
	for (int64_t blk = i0; blk < i1; blk += ADAM_BLK) {
		int64_t n = i1 - blk < ADAM_BLK ? i1 - blk : ADAM_BLK, off = blk * 2;
		nk_block_load_f32(p, (const char *)a->param + off, 2, dt, n);
		nk_block_load_f32(g, (const char *)a->grad + off, 2, dt, n);
		nk_block_load_f32(v, (const char *)a->state_sum + off, 2, dt, n);
		for (int64_t i = 0; i < n; i++)
			adagrad_elem_float(a, (float)clr, &p[i], g[i], &v[i], &g[i]);
		nk_block_store_f32((char *)a->param + off, 2, dt, p, n);
		nk_block_store_f32((char *)a->state_sum + off, 2, dt, v, n);
		if (a->grad_scale != 1.0)
			nk_block_store_f32((char *)a->grad + off, 2, dt, g, n);
	}
}

/* The references: the same element functions, one element at a time through the dtype's casts. */
int nk_sgd_ref(void *args)
{
	const nk_sgd_args_t *a = args;
	if (optim_check("nk_sgd", a->dtype, a->n, a->param, a->grad, a->momentum_buf ? a->momentum_buf : a->param))
		return -1;
	for (int64_t i = 0; i < a->n; i++)
		sgd_range(a, i, i + 1);
	return 0;
}

int nk_adagrad_ref(void *args)
{
	const nk_adagrad_args_t *a = args;
	if (optim_check("nk_adagrad", a->dtype, a->n, a->param, a->grad, a->state_sum))
		return -1;
	for (int64_t i = 0; i < a->n; i++)
		adagrad_range(a, i, i + 1);
	return 0;
}

static void sgd_task(void *ctx, int64_t begin, int64_t end)
{
	sgd_range(ctx, begin, end);
}

static void adagrad_task(void *ctx, int64_t begin, int64_t end)
{
	adagrad_range(ctx, begin, end);
}

int nk_sgd_run(void *args)
{
	const nk_sgd_args_t *a = args;
	if (nk_using_reference())
		return nk_sgd_ref(args);
	if (optim_check("nk_sgd", a->dtype, a->n, a->param, a->grad, a->momentum_buf ? a->momentum_buf : a->param))
		return -1;
	if (a->n > NK_PARALLEL_GRAIN)
		nrt_parallel_for(a->n, NK_PARALLEL_GRAIN, sgd_task, (void *)a);
	else
		sgd_range(a, 0, a->n);
	return 0;
}

int nk_adagrad_run(void *args)
{
	const nk_adagrad_args_t *a = args;
	if (nk_using_reference())
		return nk_adagrad_ref(args);
	if (optim_check("nk_adagrad", a->dtype, a->n, a->param, a->grad, a->state_sum))
		return -1;
	if (a->n > NK_PARALLEL_GRAIN)
		nrt_parallel_for(a->n, NK_PARALLEL_GRAIN, adagrad_task, (void *)a);
	else
		adagrad_range(a, 0, a->n);
	return 0;
}

/* ---- multi-tensor elementwise kernels (nk_foreach.h) ---------------------------------------------- */
_Static_assert(sizeof(nk_foreach_args_t) <= NRT_MAX_ARGS, "foreach record larger than a launch record");
_Static_assert(offsetof(nk_foreach_args_t, items) <= NK_FOREACH_HEADER, "foreach header grew");

#define FE_PIECE ((int64_t)1 << 16) /* elements per parallel piece of nk_foreach_run */

int nk_foreach_check(const nk_foreach_args_t *a)
{
	if (a->op < 0 || a->op >= NK_OP_COUNT || a->nops < 1 || a->nops > NK_MAX_OPS || a->count < 0 ||
	    a->count > NK_FOREACH_ITEMS || a->sk < -1 || a->sk == 0 || a->sk >= a->nops) {
		nrt_kernel_fail("nk_foreach: bad record (op %d, %d operands, scalar operand %d, %d items)", a->op,
				a->nops, a->sk, a->count);
		return -1;
	}
	for (int k = 0; k < a->nops; k++) {
		int dt = a->dtype[k];
		if (!nk_dtype_valid(dt) || !nk_is_float(dt) ||
		    (a->esize[k] != 0 && a->esize[k] != (int64_t)nk_dtype_size(dt)) || (k == 0 && a->esize[0] == 0)) {
			nrt_kernel_fail("nk_foreach: operand %d: dtype %d with %lld bytes between elements (floating "
					"dtypes, dense or one element)", k, dt, (long long)a->esize[k]);
			return -1;
		}
	}
	for (int i = 0; i < a->count; i++) {
		const nk_foreach_item_t *t = &a->items[i];
		if (t->n < 0) {
			nrt_kernel_fail("nk_foreach: item %d has %lld elements", i, (long long)t->n);
			return -1;
		}
		for (int k = 0; k < a->nops; k++)
			if (t->n && k != a->sk && !t->data[k]) {
				nrt_kernel_fail("nk_foreach: item %d: null operand %d", i, k);
				return -1;
			}
	}
	/* the op and operand count as the pointwise engine takes them: its checks on an empty range */
	nk_pointwise_args_t z = {0};
	z.it.ndim = 1;
	z.it.nops = a->nops;
	for (int k = 0; k < a->nops; k++) {
		z.it.dtype[k] = a->dtype[k];
		z.it.data[k] = (char *)a;
	}
	z.op = a->op;
	z.b = a->b;
	z.a = a->count ? a->items[0].a : 0;
	z.ia = a->count ? a->items[0].ia : 0;
	return nk_pointwise_run(&z) ? -1 : 0;
}

/* Whether the dense f32 loops apply: every operand f32, the output and x dense. */
static bool fe_f32_dense(const nk_foreach_args_t *a)
{
	switch (a->op) {
	case NK_OP_SQRT: case NK_OP_NEG: case NK_OP_ABS: case NK_OP_RECIPROCAL:
		if (a->nops != 2) return false;
		break;
	case NK_OP_ADD: case NK_OP_SUB: case NK_OP_MUL: case NK_OP_DIV: case NK_OP_LERP_SCALAR:
		if (a->nops != 3) return false;
		break;
	case NK_OP_ADDCMUL: case NK_OP_ADDCDIV:
		if (a->nops != 4) return false;
		break;
	default:
		return false;
	}
	for (int k = 0; k < a->nops; k++)
		if (a->dtype[k] != NK_F32)
			return false;
	return a->esize[0] == 4 && a->esize[1] == 4;
}

/* PyTorch's lerp in float (pointwise_ops.h). */
static inline float fe_lerpf(float x, float y, float w)
{
	return fabsf(w) < 0.5f ? x + w * (y - x) : y - (y - x) * (1 - w);
}

/* The portable dense f32 loops: pointwise_ops.h's formulas; y / z scalars when ybc / zbc. */
static void fe_f32_loops(int op, float a, float *o, const float *x, const float *y, const float *z, bool ybc,
			 bool zbc, int64_t n)
{
	const int64_t ys = ybc ? 0 : 1, zs = zbc ? 0 : 1;
	switch (op) {
	case NK_OP_ADD: for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i * ys]; return;
	case NK_OP_SUB: for (int64_t i = 0; i < n; i++) o[i] = x[i] - a * y[i * ys]; return;
	case NK_OP_MUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] * y[i * ys]; return;
	case NK_OP_DIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] / y[i * ys]; return;
	case NK_OP_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]); return;
	case NK_OP_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; return;
	case NK_OP_ABS: for (int64_t i = 0; i < n; i++) o[i] = fabsf(x[i]); return;
	case NK_OP_RECIPROCAL: for (int64_t i = 0; i < n; i++) o[i] = 1 / x[i]; return;
	case NK_OP_ADDCMUL: for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i * ys] * z[i * zs]; return;
	case NK_OP_ADDCDIV: for (int64_t i = 0; i < n; i++) o[i] = x[i] + a * y[i * ys] / z[i * zs]; return;
	case NK_OP_LERP_SCALAR: for (int64_t i = 0; i < n; i++) o[i] = fe_lerpf(x[i], y[i * ys], a); return;
	default: return;
	}
}

/* Item i's elements [b, e) as a pointwise launch (operands offset to b). */
static void fe_pointwise_args(const nk_foreach_args_t *a, int i, int64_t b, int64_t e, nk_pointwise_args_t *pa)
{
	const nk_foreach_item_t *t = &a->items[i];
	memset(pa, 0, sizeof *pa);
	pa->it.ndim = 1;
	pa->it.nops = a->nops;
	pa->it.shape[0] = e - b;
	for (int k = 0; k < a->nops; k++) {
		pa->it.dtype[k] = a->dtype[k];
		pa->it.strides[k][0] = a->esize[k];
		pa->it.data[k] = k == a->sk ? (char *)&t->scal : t->data[k] + b * a->esize[k];
	}
	pa->op = a->op;
	pa->a = t->a;
	pa->ia = t->ia;
	pa->b = a->b;
}

/* Elements [begin, end) of item i; ov (may be NULL): ov[k] != NULL places operand k's element `begin`
 * there (queue-level fusion's tile buffers; contiguous operands only). */
static int fe_range(const nk_foreach_args_t *a, int i, int64_t begin, int64_t end, char *const *ov)
{
	const nk_foreach_item_t *t = &a->items[i];
	if (end <= begin)
		return 0;
	if (fe_f32_dense(a) && !nk_using_reference()) {
		const float *p[NK_MAX_OPS] = {NULL, NULL, NULL, NULL};
		for (int k = 0; k < a->nops; k++)
			p[k] = k == a->sk ? (const float *)&t->scal
			       : ov && ov[k] ? (const float *)ov[k]
			       : a->esize[k] ? (const float *)t->data[k] + begin : (const float *)t->data[k];
		float *o = (float *)p[0];
		bool ybc = a->nops > 2 && a->esize[2] == 0, zbc = a->nops > 3 && a->esize[3] == 0;
		int64_t n = end - begin;
		if (!(nk_family_avx512(NK_FAM_POINTWISE) && nk_foreach_f32_avx512(a->op, (float)t->a, o, p[1], p[2], p[3], ybc, zbc, n)))
			fe_f32_loops(a->op, (float)t->a, o, p[1], p[2], p[3], ybc, zbc, n);
		return 0;
	}
	nk_pointwise_args_t pa;
	fe_pointwise_args(a, i, begin, end, &pa);
	for (int k = 0; ov && k < a->nops; k++)
		if (ov[k] && k != a->sk)
			pa.it.data[k] = ov[k];
	return nk_pointwise_run(&pa);
}

int nk_foreach_range(const nk_foreach_args_t *a, int i, int64_t begin, int64_t end)
{
	return fe_range(a, i, begin, end, NULL);
}

typedef struct {
	const nk_foreach_args_t *a;
	int64_t first[NK_FOREACH_ITEMS + 1]; /* first piece of each item */
	atomic_int failed;                    /* 0, or 1 + the first item that failed */
} fe_run_ctx_t;

static void fe_task(void *ctx, int64_t begin, int64_t end)
{
	fe_run_ctx_t *c = ctx;
	int i = 0;
	for (int64_t p = begin; p < end; p++) {
		while (p >= c->first[i + 1])
			i++;
		int64_t b = (p - c->first[i]) * FE_PIECE, n = c->a->items[i].n;
		if (atomic_load_explicit(&c->failed, memory_order_relaxed))
			return;
		if (nk_foreach_range(c->a, i, b, n - b > FE_PIECE ? b + FE_PIECE : n)) {
			int none = 0;
			atomic_compare_exchange_strong(&c->failed, &none, 1 + i);
			return;
		}
	}
}

int nk_foreach_run(void *args)
{
	const nk_foreach_args_t *a = args;
	if (nk_using_reference())
		return nk_foreach_ref(args);
	if (nk_foreach_check(a))
		return -1;
	fe_run_ctx_t c;
	c.a = a;
	c.first[0] = 0;
	for (int i = 0; i < a->count; i++)
		c.first[i + 1] = c.first[i] + (a->items[i].n + FE_PIECE - 1) / FE_PIECE;
	atomic_init(&c.failed, 0);
	nrt_parallel_for(c.first[a->count], 1, fe_task, &c);
	int failed = atomic_load(&c.failed);
	if (failed) { /* not expected after the check: the pointwise engine fails only on integers */
		nrt_kernel_fail("nk_foreach: op %d failed on item %d (%lld elements)", a->op, failed - 1,
				(long long)a->items[failed - 1].n);
		return -1;
	}
	return 0;
}

int nk_foreach_ref(void *args)
{
	const nk_foreach_args_t *a = args;
	if (nk_foreach_check(a))
		return -1;
	for (int i = 0; i < a->count; i++) {
		nk_pointwise_args_t pa;
		fe_pointwise_args(a, i, 0, a->items[i].n, &pa);
		if (nk_pointwise_ref(&pa))
			return -1;
	}
	return 0;
}

/* ---- queue-level fusion: the record's items for nrt_fuse.h ---- */
static int fe_describe(const void *args, nrt_fuse_item_t *out, int cap)
{
	const nk_foreach_args_t *a = args;
	if (a->count > cap || nk_foreach_check(a))
		return -1;
	for (int i = 0; i < a->count; i++) {
		const nk_foreach_item_t *t = &a->items[i];
		nrt_fuse_item_t *it = &out[i];
		it->pos = t->pos;
		it->n = t->n;
		it->nops = 0;
		for (int k = 0; k < a->nops; k++) {
			if (k == a->sk)
				continue; /* lives in the record */
			it->op[it->nops++] = (nrt_fuse_operand_t){t->data[k], a->esize[k],
								  (int32_t)nk_dtype_size(a->dtype[k]), k == 0};
		}
	}
	return a->count;
}

static int fe_fuse_range(void *args, int item, int64_t begin, int64_t end)
{
	return nk_foreach_range(args, item, begin, end);
}

/* ptrs in describe()'s numbering: the record's operands without the scalar one. */
static int fe_fuse_range_ptrs(void *args, int item, int64_t begin, int64_t end, void *const *ptrs)
{
	const nk_foreach_args_t *a = args;
	char *ov[NK_MAX_OPS] = {NULL, NULL, NULL, NULL};
	for (int k = 0, j = 0; k < a->nops; k++)
		if (k != a->sk)
			ov[k] = ptrs[j++];
	return fe_range(a, item, begin, end, ov);
}

const nrt_fuse_kernel_t nk_foreach_fuse = {fe_describe, fe_fuse_range, fe_fuse_range_ptrs};
