/* pointwise_avx512.c - AVX-512 f32 loops for the hot pointwise ops and the bf16 <-> f32 block
 * conversions.  Built with the AVX-512 flags (Makefile: files named *_avx512*); callers check
 * nk_cpu_avx512() first.  Tails use masked loads/stores, so any n works and nothing is read or written
 * past n.
 *
 * Transcendentals: exp is Cephes' expf (range reduction by ln2, degree-6 polynomial, scalef), < 2 ulp;
 * tanh is Cephes' tanhf (odd polynomial below 0.625, else 1 - 2/(exp(2|x|)+1)); erf for GELU is the
 * Abramowitz-Stegun 7.1.26 form (|error| < 1.5e-7) that PyTorch's own Vectorized<float>::erf uses for
 * GELU, so results track PyTorch's CPU GELU.  Everything else is exactly the scalar formula of
 * pointwise_ops.h (same operation order, IEEE ops).
 */
#include <immintrin.h>
#include <stdint.h>

#include "nk_impl.h"
#include "nk_avx512.h"

static inline __attribute__((always_inline)) __m512 v_tanh(__m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 ax = _mm512_abs_ps(x);
	__m512 s = _mm512_mul_ps(x, x);
	__m512 p = _mm512_set1_ps(-5.70498872745E-3f);
	p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(2.06390887954E-2f));
	p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531E-2f));
	p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036E-1f));
	p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422E-1f));
	__m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), x, x);
	__m512 e = nk_v_exp(_mm512_add_ps(ax, ax));
	__m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
	big = _mm512_or_ps(big, _mm512_and_ps(x, _mm512_set1_ps(-0.0f))); /* copy the sign */
	__mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
	return _mm512_mask_blend_ps(is_small, big, small);
}

/* PyTorch's Vectorized<float>::erf (Abramowitz-Stegun 7.1.26). */
static inline __attribute__((always_inline)) __m512 v_erf_as(__m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f), neg0 = _mm512_set1_ps(-0.0f);
	__m512 sign = _mm512_and_ps(neg0, x);
	__m512 ax = _mm512_abs_ps(x);
	__m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), ax, one));
	__m512 r = _mm512_fmadd_ps(_mm512_set1_ps(1.061405429f), t, _mm512_set1_ps(-1.453152027f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(1.421413741f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(-0.284496736f));
	r = _mm512_fmadd_ps(r, t, _mm512_set1_ps(0.254829592f));
	__m512 e = _mm512_xor_ps(neg0, nk_v_exp(_mm512_xor_ps(neg0, _mm512_mul_ps(x, x))));
	__m512 y = _mm512_fmadd_ps(_mm512_mul_ps(e, t), r, one);
	return _mm512_xor_ps(sign, y);
}

static inline __attribute__((always_inline)) __m512 v_sigmoid(__m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	return _mm512_div_ps(one, _mm512_add_ps(one, nk_v_exp(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));
}

static inline __attribute__((always_inline)) __m512 v_gelu(__m512 x, int64_t approx)
{
	const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
	if (approx) {
		const __m512 beta = _mm512_set1_ps((float)(M_SQRT2 * M_2_SQRTPI * 0.5));
		__m512 cube = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
		__m512 inner = _mm512_mul_ps(beta, _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), cube, x));
		return _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, v_tanh(inner)));
	}
	__m512 e = v_erf_as(_mm512_mul_ps(x, _mm512_set1_ps((float)M_SQRT1_2)));
	return _mm512_mul_ps(_mm512_mul_ps(x, half), _mm512_add_ps(one, e));
}

static inline __attribute__((always_inline)) __m512 v_gelu_backward(__m512 dy, __m512 x, int64_t approx)
{
	const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
	if (approx) {
		const __m512 beta = _mm512_set1_ps((float)(M_SQRT2 * M_2_SQRTPI * 0.5));
		const __m512 kappa = _mm512_set1_ps(0.044715f);
		__m512 xsq = _mm512_mul_ps(x, x), xcube = _mm512_mul_ps(xsq, x);
		__m512 t = v_tanh(_mm512_mul_ps(beta, _mm512_fmadd_ps(kappa, xcube, x)));
		__m512 dleft = _mm512_mul_ps(half, _mm512_add_ps(one, t));
		__m512 dright = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_fnmadd_ps(t, t, one));
		dright = _mm512_mul_ps(_mm512_mul_ps(dright, beta),
				       _mm512_fmadd_ps(_mm512_set1_ps(3.0f * 0.044715f), xsq, one));
		return _mm512_mul_ps(dy, _mm512_add_ps(dleft, dright));
	}
	const __m512 alpha = _mm512_set1_ps((float)(M_2_SQRTPI * M_SQRT1_2 * 0.5));
	__m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, v_erf_as(_mm512_mul_ps(x, _mm512_set1_ps((float)M_SQRT1_2)))));
	__m512 pdf = _mm512_mul_ps(alpha, nk_v_exp(_mm512_mul_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(-0.5f))));
	return _mm512_mul_ps(dy, _mm512_fmadd_ps(x, pdf, cdf));
}

/* One 16-lane step of op; x, y hold the inputs (unused ones are zero).  Always inlined into loops
 * specialised for one constant op (pw_loop), so the switch folds away. */
static inline __attribute__((always_inline)) __m512 v_op(int op, __m512 x, __m512 y, __m512 a, int64_t ia)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	switch (op) {
	case NK_OP_ADD: return _mm512_add_ps(x, _mm512_mul_ps(a, y));
	case NK_OP_SUB: return _mm512_sub_ps(x, _mm512_mul_ps(a, y));
	case -NK_OP_ADD: return _mm512_add_ps(x, y); /* alpha == 1: x + 1 * y is exactly x + y */
	case -NK_OP_SUB: return _mm512_sub_ps(x, y);
	case NK_OP_MUL: return _mm512_mul_ps(x, y);
	case NK_OP_DIV: return _mm512_div_ps(x, y);
	case NK_OP_EXP: return nk_v_exp(x);
	case NK_OP_TANH: return v_tanh(x);
	case NK_OP_SIGMOID: return v_sigmoid(x);
	case NK_OP_SILU:
		return _mm512_div_ps(x, _mm512_add_ps(one, nk_v_exp(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));
	case NK_OP_GELU: return v_gelu(x, ia);
	case NK_OP_GELU_BACKWARD: return v_gelu_backward(x, y, ia);
	/* x < 0 ? 0 : x (a NaN and -0 pass through, as the scalar loop) */
	case NK_OP_RELU: return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), x);
	/* y <= a ? 0 : x (grad x, input y; a NaN input passes the grad) */
	case NK_OP_THRESHOLD_BACKWARD: return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(y, a, _CMP_LE_OQ), x);
	case NK_OP_SILU_BACKWARD: {
		__m512 s = v_sigmoid(y);
		__m512 t = _mm512_fmadd_ps(y, _mm512_sub_ps(one, s), one);
		return _mm512_mul_ps(_mm512_mul_ps(x, s), t);
	}
	default: return x;
	}
}

/* o[i] = op(x[i], y[i]) for a constant op (binary: y != NULL).  Streamed stores (stream) after the
 * first 64-byte boundary of o; the main loop does 4 vectors per iteration; masked tails. */
static inline __attribute__((always_inline)) void pw_loop(int op, bool binary, __m512 va, int64_t ia, float *o,
							   const float *x, const float *y, int64_t n, bool stream)
{
	int64_t i = 0;
	if (stream && ((uintptr_t)o & 3) == 0) {
		int64_t head = (int64_t)((64 - ((uintptr_t)o & 63)) & 63) / 4;
		if (head > n)
			head = n;
		if (head) {
			__mmask16 m = nk_tail_mask16(head);
			__m512 vx = _mm512_maskz_loadu_ps(m, x);
			__m512 vy = binary ? _mm512_maskz_loadu_ps(m, y) : _mm512_setzero_ps();
			_mm512_mask_storeu_ps(o, m, v_op(op, vx, vy, va, ia));
		}
		for (i = head; i + 16 <= n; i += 16) {
			__m512 vx = _mm512_loadu_ps(x + i);
			__m512 vy = binary ? _mm512_loadu_ps(y + i) : _mm512_setzero_ps();
			_mm512_stream_ps(o + i, v_op(op, vx, vy, va, ia));
		}
	} else {
		for (; i + 64 <= n; i += 64) {
			__m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
			__m512 x2 = _mm512_loadu_ps(x + i + 32), x3 = _mm512_loadu_ps(x + i + 48);
			__m512 y0 = _mm512_setzero_ps(), y1 = y0, y2 = y0, y3 = y0;
			if (binary) {
				y0 = _mm512_loadu_ps(y + i);
				y1 = _mm512_loadu_ps(y + i + 16);
				y2 = _mm512_loadu_ps(y + i + 32);
				y3 = _mm512_loadu_ps(y + i + 48);
			}
			_mm512_storeu_ps(o + i, v_op(op, x0, y0, va, ia));
			_mm512_storeu_ps(o + i + 16, v_op(op, x1, y1, va, ia));
			_mm512_storeu_ps(o + i + 32, v_op(op, x2, y2, va, ia));
			_mm512_storeu_ps(o + i + 48, v_op(op, x3, y3, va, ia));
		}
		for (; i + 16 <= n; i += 16) {
			__m512 vx = _mm512_loadu_ps(x + i);
			__m512 vy = binary ? _mm512_loadu_ps(y + i) : _mm512_setzero_ps();
			_mm512_storeu_ps(o + i, v_op(op, vx, vy, va, ia));
		}
	}
	if (i < n) {
		__mmask16 m = nk_tail_mask16(n - i);
		__m512 vx = _mm512_maskz_loadu_ps(m, x + i);
		__m512 vy = binary ? _mm512_maskz_loadu_ps(m, y + i) : _mm512_setzero_ps();
		_mm512_mask_storeu_ps(o + i, m, v_op(op, vx, vy, va, ia));
	}
}

bool nk_pointwise_f32_avx512(int op, float a, float b, int64_t ia, float *o, const float *x,
			     const float *y, const float *z, int64_t n, bool stream)
{
	(void)b;
	(void)z;
	/* [h-norm] gelu / silu and their backward: dedicated two-vector loops in pointwise_act_avx512.c */
	if (nk_act_f32_avx512(op, ia, o, x, y, n, stream))
		return true;
	const __m512 va = _mm512_set1_ps(a);
#define PW_CASE(OP, BIN, IA) pw_loop(OP, BIN, va, IA, o, x, y, n, stream); return true
	switch (op) {
	case NK_OP_ADD: if (a == 1.0f) { PW_CASE(-NK_OP_ADD, true, 0); } PW_CASE(NK_OP_ADD, true, 0);
	case NK_OP_SUB: if (a == 1.0f) { PW_CASE(-NK_OP_SUB, true, 0); } PW_CASE(NK_OP_SUB, true, 0);
	case NK_OP_MUL: PW_CASE(NK_OP_MUL, true, 0);
	case NK_OP_DIV: PW_CASE(NK_OP_DIV, true, 0);
	case NK_OP_EXP: PW_CASE(NK_OP_EXP, false, 0);
	case NK_OP_TANH: PW_CASE(NK_OP_TANH, false, 0);
	case NK_OP_SIGMOID: PW_CASE(NK_OP_SIGMOID, false, 0);
	case NK_OP_SILU: PW_CASE(NK_OP_SILU, false, 0);
	/* gelu's ia: nonzero = tanh approximation */
	case NK_OP_GELU: if (ia) { PW_CASE(NK_OP_GELU, false, 1); } PW_CASE(NK_OP_GELU, false, 0);
	case NK_OP_GELU_BACKWARD: if (ia) { PW_CASE(NK_OP_GELU_BACKWARD, true, 1); } PW_CASE(NK_OP_GELU_BACKWARD, true, 0);
	case NK_OP_SILU_BACKWARD: PW_CASE(NK_OP_SILU_BACKWARD, true, 0);
	case NK_OP_RELU: PW_CASE(NK_OP_RELU, false, 0);
	case NK_OP_THRESHOLD_BACKWARD: PW_CASE(NK_OP_THRESHOLD_BACKWARD, true, 0);
	default: return false;
	}
#undef PW_CASE
}

void nk_stream_fence(void)
{
	_mm_sfence();
}

void nk_stream_copy_f32_avx512(float *dst, const float *src, int64_t n)
{
	int64_t i = 0;
	if (((uintptr_t)dst & 3) == 0) {
		int64_t head = (int64_t)((64 - ((uintptr_t)dst & 63)) & 63) / 4;
		if (head > n)
			head = n;
		if (head)
			_mm512_mask_storeu_ps(dst, nk_tail_mask16(head), _mm512_maskz_loadu_ps(nk_tail_mask16(head), src));
		for (i = head; i + 16 <= n; i += 16)
			_mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
	}
	for (; i < n; i += 16) {
		__mmask16 m = nk_tail_mask16(n - i);
		_mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
	}
}

/* ---- bf16 <-> f32 blocks ----------------------------------------------------------------------- */
void nk_bf16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n)
{
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = nk_tail_mask16(n - i);
		__m256i h = _mm256_maskz_loadu_epi16(m, src + i);
		__m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
		_mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(w));
	}
}

/* Round to nearest even; NaN -> 0x7fc0 (as nk_f32_to_bf16). */
void nk_f32_to_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
	const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
	const __m512i qnan = _mm512_set1_epi32(0x7fc0);
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 m = nk_tail_mask16(n - i);
		__m512 f = _mm512_maskz_loadu_ps(m, src + i);
		__m512i u = _mm512_castps_si512(f);
		__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
		__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
		r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), qnan);
		_mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
	}
}
