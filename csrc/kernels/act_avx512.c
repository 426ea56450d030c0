/* act_avx512.c - dedicated AVX-512 f32 loops for the hot activations: gelu (erf and tanh), silu and
 * their backward.  Called from nk_pointwise_f32_avx512 (pointwise_avx512.c) before its generic
 * per-vector switch; compiled with the AVX-512 flags, used only after nk_cpu_avx512().
 *
 * Why a separate loop: the generic loop evaluates one 16-lane vector per iteration behind a switch on
 * the op; these functions are long dependency chains (exp, a division, polynomials) and the core then
 * waits on latency.  Here each iteration evaluates two independent vectors, interleaved, and the op is
 * chosen once per call.
 *
 * Numerics (f32, against PyTorch's CPU kernels, ATen/native/cpu/Gelu.h and Activation.cpp):
 *  - gelu (erf): PyTorch's own formula, x*0.5*(1 + erf(x/sqrt2)) with the Abramowitz-Stegun 7.1.26 erf
 *    that Vectorized<float>::erf uses (same constants, same order); its t = 1/(1 + p|z|) by rcp14 and a
 *    Newton step (~1 ulp), its exp(-z^2) by a short 2^f polynomial (exp_neg, ~2 ulp; PyTorch uses Sleef's
 *    expf): the terms they feed are scaled by t*r <= 0.26, so results agree to a few ulp of 1 + erf.
 *  - gelu backward (erf): dy*(cdf + x*pdf) as PyTorch, but exp(-x^2/2) is computed once and shared by the
 *    erf and the pdf (PyTorch evaluates it twice with differently rounded arguments: ~1 ulp apart).
 *  - gelu (tanh) and its backward: 0.5*(1 + tanh(u)) is evaluated as the equal sigmoid(2u) = 1/(1 +
 *    exp(-2u)), and 1 - tanh(u)^2 as 4*s*(1 - s): one exp and one division instead of tanh's exp,
 *    division and polynomial.  Identical in exact arithmetic; in f32 within a few ulp of PyTorch where
 *    its result is accurate (PyTorch's 1 + tanh(u) cancels for u << 0, where this form is the more
 *    accurate one; the absolute difference stays below ulp(x)).
 *  - silu and its backward: the formulas of pointwise_ops.h (x / (1 + exp(-x)), dy*s*(1 + x*(1 - s))).
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "nk.h"
#include "nk_avx512.h"

/* 1 + erf(z) as PyTorch computes it (A-S 7.1.26: sign*(1 - t*r*exp(-z^2)), t = 1/(1 + p|z|), then +1),
 * with e = exp(-z^2) given. */
static inline __m512 one_plus_erf(__m512 z, __m512 e)
{
	const __m512 one = _mm512_set1_ps(1.0f), neg0 = _mm512_set1_ps(-0.0f);
	__m512 sign = _mm512_and_ps(neg0, z);
	/* t = 1/d: rcp14 and one Newton step (~1 ulp) */
	/* |z| capped at 16 (e = 0 there): no inf*0 in the Newton step */
	__m512 az = _mm512_min_ps(_mm512_abs_ps(z), _mm512_set1_ps(16.0f));
	__m512 d = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), az, one), t = _mm512_rcp14_ps(d);
	t = _mm512_fmadd_ps(t, _mm512_fnmadd_ps(d, t, one), t);
	__m512 r = _mm512_fmadd_ps(_mm512_set1_ps(1.061405429f), t, _mm512_set1_ps(-1.453152027f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(1.421413741f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-0.284496736f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.254829592f));
	/* PyTorch: (-e * t) * r + 1, sign applied, then 1 + that */
	__m512 y = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_xor_ps(neg0, e), t), r, one);
	return _mm512_add_ps(one, _mm512_xor_ps(sign, y));
}

/* exp(w) for w <= 0 (w = -z^2): 2^(w log2 e) = 2^n * 2^f, |f| <= 1/2, Taylor degree 6 in f (relative
 * error < 1.3e-7 plus the rounding of w*log2(e), |w|*2^-24 relative: negligible next to the A-S
 * formula's own 1.5e-7 absolute error, which it multiplies by t*r <= 0.26) */
static inline __m512 exp_neg(__m512 w)
{
	__m512 m = _mm512_mul_ps(_mm512_max_ps(w, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(1.44269504088896341f));
	__m512 n = _mm512_roundscale_ps(m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 f = _mm512_sub_ps(m, n);
	__m512 p = _mm512_set1_ps(1.5403530393381609e-4f);
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

static inline __m512 gelu_erf(__m512 x)
{
	__m512 z = _mm512_mul_ps(x, _mm512_set1_ps((float)M_SQRT1_2));
	__m512 e = exp_neg(_mm512_xor_ps(_mm512_set1_ps(-0.0f), _mm512_mul_ps(z, z)));

	return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), one_plus_erf(z, e));
}

static inline __m512 gelu_erf_bwd(__m512 dy, __m512 x)
{
	__m512 z = _mm512_mul_ps(x, _mm512_set1_ps((float)M_SQRT1_2));
	__m512 e = exp_neg(_mm512_xor_ps(_mm512_set1_ps(-0.0f), _mm512_mul_ps(z, z))); /* exp(-x^2/2) */
	__m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), one_plus_erf(z, e));
	__m512 pdf = _mm512_mul_ps(_mm512_set1_ps((float)(M_2_SQRTPI * M_SQRT1_2 * 0.5)), e);

	return _mm512_mul_ps(dy, _mm512_fmadd_ps(x, pdf, cdf));
}

/* s = sigmoid(2u) = 0.5*(1 + tanh(u)), u = beta*(x + kappa*x^3) */
static inline __m512 gelu_tanh_s(__m512 x, __m512 xsq)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 cube = _mm512_mul_ps(xsq, x);
	__m512 u = _mm512_mul_ps(_mm512_set1_ps((float)(M_SQRT2 * M_2_SQRTPI * 0.5)),
				 _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), cube, x));

	return _mm512_div_ps(one, _mm512_add_ps(one, nk_v_exp(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)))));
}

static inline __m512 gelu_tanh(__m512 x)
{
	return _mm512_mul_ps(x, gelu_tanh_s(x, _mm512_mul_ps(x, x)));
}

/* dy*(s + 0.5x*(1 - tanh^2)*beta*(1 + 3 kappa x^2)) with 1 - tanh^2 = 4 s (1 - s) */
static inline __m512 gelu_tanh_bwd(__m512 dy, __m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 xsq = _mm512_mul_ps(x, x), s = gelu_tanh_s(x, xsq);
	__m512 sech2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(4.0f), s), _mm512_sub_ps(one, s));
	__m512 dr = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), sech2),
				  _mm512_set1_ps((float)(M_SQRT2 * M_2_SQRTPI * 0.5)));

	dr = _mm512_mul_ps(dr, _mm512_fmadd_ps(_mm512_set1_ps(3.0f * 0.044715f), xsq, one));
	return _mm512_mul_ps(dy, _mm512_add_ps(s, dr));
}

static inline __m512 silu(__m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);

	return _mm512_div_ps(x, _mm512_add_ps(one, nk_v_exp(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));
}

static inline __m512 silu_bwd(__m512 dy, __m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 s = _mm512_div_ps(one, _mm512_add_ps(one, nk_v_exp(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));

	return _mm512_mul_ps(_mm512_mul_ps(dy, s), _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one));
}

/* o = F(x) (UNARY) or F(x, y): two vectors per iteration; the 64-byte-aligned part of o with
 * non-temporal stores when stream. */
#define ACT_LOOP(F, BIN)                                                                                     \
	do {                                                                                                 \
		int64_t i = 0;                                                                               \
		if (stream && ((uintptr_t)o & 3) == 0) {                                                     \
			int64_t head = (int64_t)((64 - ((uintptr_t)o & 63)) & 63) / 4;                      \
			if (head > n)                                                                        \
				head = n;                                                                    \
			if (head) {                                                                          \
				__mmask16 m = nk_tail_mask16(head);                                               \
				__m512 a0 = _mm512_maskz_loadu_ps(m, x);                                     \
				_mm512_mask_storeu_ps(o, m, BIN ? F(a0, _mm512_maskz_loadu_ps(m, y)) : F(a0, a0)); \
			}                                                                                    \
			for (i = head; i + 32 <= n; i += 32) {                                               \
				__m512 a0 = _mm512_loadu_ps(x + i), a1 = _mm512_loadu_ps(x + i + 16);        \
				__m512 b0 = BIN ? _mm512_loadu_ps(y + i) : a0;                              \
				__m512 b1 = BIN ? _mm512_loadu_ps(y + i + 16) : a1;                         \
				_mm512_stream_ps(o + i, F(a0, b0));                                          \
				_mm512_stream_ps(o + i + 16, F(a1, b1));                                     \
			}                                                                                    \
		} else {                                                                                     \
			for (; i + 32 <= n; i += 32) {                                                       \
				__m512 a0 = _mm512_loadu_ps(x + i), a1 = _mm512_loadu_ps(x + i + 16);        \
				__m512 b0 = BIN ? _mm512_loadu_ps(y + i) : a0;                              \
				__m512 b1 = BIN ? _mm512_loadu_ps(y + i + 16) : a1;                         \
				_mm512_storeu_ps(o + i, F(a0, b0));                                          \
				_mm512_storeu_ps(o + i + 16, F(a1, b1));                                     \
			}                                                                                    \
		}                                                                                            \
		for (; i < n; i += 16) {                                                                     \
			__mmask16 m = nk_tail_mask16(n - i);                                                      \
			__m512 a0 = _mm512_maskz_loadu_ps(m, x + i);                                         \
			__m512 b0 = BIN ? _mm512_maskz_loadu_ps(m, y + i) : a0;                              \
			_mm512_mask_storeu_ps(o + i, m, F(a0, b0));                                          \
		}                                                                                            \
	} while (0)

/* unary ops take (x, x) */
#define U_GELU_ERF(a, b) ((void)(b), gelu_erf(a))
#define U_GELU_TANH(a, b) ((void)(b), gelu_tanh(a))
#define U_SILU(a, b) ((void)(b), silu(a))

bool nk_act_f32_avx512(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream)
{
	switch (op) {
	case NK_OP_GELU:
		if (ia)
			ACT_LOOP(U_GELU_TANH, 0);
		else
			ACT_LOOP(U_GELU_ERF, 0);
		return true;
	case NK_OP_GELU_BACKWARD: /* x = grad, y = input */
		if (ia)
			ACT_LOOP(gelu_tanh_bwd, 1);
		else
			ACT_LOOP(gelu_erf_bwd, 1);
		return true;
	case NK_OP_SILU:
		ACT_LOOP(U_SILU, 0);
		return true;
	case NK_OP_SILU_BACKWARD:
		ACT_LOOP(silu_bwd, 1);
		return true;
	default:
		return false;
	}
}
