/* optim_avx512.c - the dense f32 Adam/AdamW update of optim.c in AVX-512, operation for operation
 * (separate multiplies and adds, IEEE division and square root), so results are bit-identical to the
 * scalar loop and to nk_adam_ref; and the f32 loops of the multi-tensor elementwise kernels
 * (nk_foreach.h), bit-identical to the pointwise engine's scalar formulas.  Built with the AVX-512
 * flags; called only when nk_cpu_avx512().
 */
#include <immintrin.h>
#include <math.h>

#include "nk_impl.h"

void nk_adam_f32_avx512(const nk_adam_f32_consts_t *k, float *p, float *m, float *v, const float *g, int64_t n)
{
	const __m512 gs = _mm512_set1_ps(k->grad_scale), sign = _mm512_set1_ps(k->sign);
	const __m512 wd = _mm512_set1_ps(k->wd), decay = _mm512_set1_ps(k->decay), w1 = _mm512_set1_ps(k->w1);
	const __m512 b2 = _mm512_set1_ps(k->b2), omb2 = _mm512_set1_ps(k->omb2), bc2 = _mm512_set1_ps(k->bc2);
	const __m512 eps = _mm512_set1_ps(k->eps), nss = _mm512_set1_ps(k->nss);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 t = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		__m512 gi = _mm512_maskz_loadu_ps(t, g + i);
		__m512 pi = _mm512_maskz_loadu_ps(t, p + i);
		__m512 mi = _mm512_maskz_loadu_ps(t, m + i);
		__m512 vi = _mm512_maskz_loadu_ps(t, v + i);
		if (k->scaled)
			gi = _mm512_div_ps(gi, gs);
		gi = _mm512_mul_ps(gi, sign);
		if (k->l2)
			gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, pi));
		if (k->decoupled)
			pi = _mm512_mul_ps(pi, decay);
		mi = _mm512_add_ps(mi, _mm512_mul_ps(w1, _mm512_sub_ps(gi, mi)));
		vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
		__m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
		pi = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(nss, mi), denom));
		_mm512_mask_storeu_ps(m + i, t, mi);
		_mm512_mask_storeu_ps(v + i, t, vi);
		_mm512_mask_storeu_ps(p + i, t, pi);
	}
}

/* ---- multi-tensor elementwise (nk_foreach.h): the f32 ops of the optimizers, operation for operation
 * as pointwise_ops.h computes them (no contraction), full vectors then one masked tail. */
#include "nk_foreach.h"

/* PyTorch's lerp with a scalar weight w: exact at both ends (the weight picks the formula). */
static inline __m512 fe_lerp(__m512 x, __m512 y, __m512 w, __m512 omw, bool low)
{
	__m512 d = _mm512_sub_ps(y, x);
	return low ? _mm512_add_ps(x, _mm512_mul_ps(w, d)) : _mm512_sub_ps(y, _mm512_mul_ps(d, omw));
}

/* One op over n elements: whole vectors unmasked, then one masked tail.  ybc / zbc are constants at
 * each call site (scalar y / z), so every variant is a plain loop. */
#define FE_BODY(LOAD, STORE, EXPR)                                                                     \
	do {                                                                                          \
		__m512 vx = LOAD(x + i), vy = !y ? zero : ybc ? ys : LOAD(y + i);                     \
		__m512 vz = !z ? zero : zbc ? zs : LOAD(z + i);                                       \
		(void)vy;                                                                             \
		(void)vz;                                                                             \
		STORE(o + i, (EXPR));                                                                 \
	} while (0)
#define FE_LD(p) _mm512_loadu_ps(p)
#define FE_ST(p, v) _mm512_storeu_ps(p, v)
#define FE_LDM(p) _mm512_maskz_loadu_ps(m, p)
#define FE_STM(p, v) _mm512_mask_storeu_ps(p, m, v)
#define FE_LOOP(EXPR)                                                                                 \
	for (; i + 16 <= n; i += 16)                                                                  \
		FE_BODY(FE_LD, FE_ST, EXPR);                                                          \
	if (i < n) {                                                                                  \
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                      \
		FE_BODY(FE_LDM, FE_STM, EXPR);                                                        \
	}                                                                                             \
	return true

static inline __attribute__((always_inline)) bool
fe_f32(int op, float a, float *o, const float *x, const float *y, const float *z, const bool ybc, const bool zbc,
       int64_t n)
{
	const __m512 va = _mm512_set1_ps(a), zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
	const __m512 ys = y && ybc ? _mm512_set1_ps(*y) : zero, zs = z && zbc ? _mm512_set1_ps(*z) : zero;
	const __m512 omw = _mm512_set1_ps(1.0f - a), sign = _mm512_set1_ps(-0.0f);
	const bool low = fabsf(a) < 0.5f;
	int64_t i = 0;
	switch (op) {
	case NK_OP_ADD: FE_LOOP(_mm512_add_ps(vx, _mm512_mul_ps(va, vy)));
	case NK_OP_SUB: FE_LOOP(_mm512_sub_ps(vx, _mm512_mul_ps(va, vy)));
	case NK_OP_MUL: FE_LOOP(_mm512_mul_ps(vx, vy));
	case NK_OP_DIV: FE_LOOP(_mm512_div_ps(vx, vy));
	case NK_OP_SQRT: FE_LOOP(_mm512_sqrt_ps(vx));
	case NK_OP_NEG: FE_LOOP(_mm512_xor_ps(vx, sign));
	case NK_OP_ABS: FE_LOOP(_mm512_andnot_ps(sign, vx));
	case NK_OP_RECIPROCAL: FE_LOOP(_mm512_div_ps(one, vx));
	case NK_OP_ADDCMUL: FE_LOOP(_mm512_add_ps(vx, _mm512_mul_ps(_mm512_mul_ps(va, vy), vz)));
	case NK_OP_ADDCDIV: FE_LOOP(_mm512_add_ps(vx, _mm512_div_ps(_mm512_mul_ps(va, vy), vz)));
	case NK_OP_LERP_SCALAR:
		if (low) {
			FE_LOOP(fe_lerp(vx, vy, va, omw, true));
		}
		FE_LOOP(fe_lerp(vx, vy, va, omw, false));
	default: return false;
	}
}

bool nk_foreach_f32_avx512(int op, float a, float *o, const float *x, const float *y, const float *z, bool ybc,
			   bool zbc, int64_t n)
{
	if (ybc)
		return zbc ? fe_f32(op, a, o, x, y, z, true, true, n) : fe_f32(op, a, o, x, y, z, true, false, n);
	return zbc ? fe_f32(op, a, o, x, y, z, false, true, n) : fe_f32(op, a, o, x, y, z, false, false, n);
}
