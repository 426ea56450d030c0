/* nk_avx512.h - small AVX-512 helpers shared by the *_avx512.c kernel files.  Include it only from files
 * compiled with the AVX-512 flags (the *_avx512.c names), after <immintrin.h>. */
#ifndef NK_AVX512_H
#define NK_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes [0, min(n, 16)) set. */
static inline __mmask16 nk_tail_mask16(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* The Cephes expf core: n = round(x / ln 2), r = x - n ln 2 (two-part constant), degree-6 polynomial p;
 * exp(x) = scalef(p, n) = p * 2^n, which the caller applies (masked or not) after clamping x as it needs.
 * pr_order picks the last step's rounding order, (p*r)*r (softmax rows, attention) or p*(r*r)
 * (pointwise): the two differ by an ulp, and each caller keeps the order its results were checked with. */
static inline __attribute__((always_inline)) __m512 nk_v_exp_core(__m512 x, __m512 *n, const int pr_order)
{
	*n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
				  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.9875691500E-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
	if (pr_order)
		return _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

/* expf, Cephes (about 1 ulp), x clamped to [-104, 89] first: 0 and inf at the ends through scalef.  NaN
 * passes through the clamps (max/min return their second operand for NaN). */
static inline __attribute__((always_inline)) __m512 nk_v_exp(__m512 x)
{
	__m512 n, p;

	x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
	p = nk_v_exp_core(x, &n, 0);
	return _mm512_scalef_ps(p, n);
}

#endif /* NK_AVX512_H */
