/* nk_avx2.h - small AVX2 + FMA helpers shared by the *_avx2.c kernel files.  Include it only from files
 * compiled with the AVX2 flags (the *_avx2.c names). */
#ifndef NK_AVX2_H
#define NK_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes [0, min(n, 8)) set, for maskload / maskstore. */
static inline __m256i nk_tail_mask8(int64_t n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float nk_hsum8(__m256 v)
{
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static inline float nk_hmax8(__m256 v)
{
	__m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* p * 2^n for integral n in [-150, 128] (AVX-512's scalef on that range): two exponent-field scalings
 * of 2^(n/2) each, so that the small results come out as denormals or 0 and the large ones as inf.
 * NaN in p stays NaN. */
static inline __attribute__((always_inline)) __m256 nk_v8_scale2(__m256 p, __m256 n)
{
	__m256i ni = _mm256_cvtps_epi32(n);
	__m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
	__m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
	__m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));

	return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* The Cephes expf core of nk_avx512.h's nk_v_exp_core on 8 lanes: n = round(x / ln 2), r = x - n ln 2
 * (two-part constant), degree-6 polynomial; exp(x) = p * 2^n, which the caller applies.  pr_order picks
 * the last step's order as there: (p*r)*r (softmax rows, attention) or p*(r*r) (pointwise). */
static inline __attribute__((always_inline)) __m256 nk_v8_exp_core(__m256 x, __m256 *n, const int pr_order)
{
	*n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500E-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
	if (pr_order)
		return _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

/* expf with x clamped to [-104, 89] first (max / min return their second operand, x, for NaN, so NaN
 * passes), the given last-step order: about 1 ulp; nk_avx512.h's nk_v_exp for pr_order 0. */
static inline __attribute__((always_inline)) __m256 nk_v8_exp_ord(__m256 x, const int pr_order)
{
	__m256 n, p;

	x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
	x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
	p = nk_v8_exp_core(x, &n, pr_order);
	return nk_v8_scale2(p, n);
}

static inline __attribute__((always_inline)) __m256 nk_v8_exp(__m256 x)
{
	return nk_v8_exp_ord(x, 0);
}

/* exp(x) for the x - max of a softmax row (x <= 0, or NaN; above 89 it overflows to inf): softmax_avx512.c's
 * exp_row, a degree-5 polynomial with p(0) = 1 exactly after a one-part ln 2 reduction, clamped below at
 * -104 (0 there). */
static inline __attribute__((always_inline)) __m256 nk_v8_exp_row(__m256 x)
{
	x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182f), x);
	__m256 p = _mm256_set1_ps(8.3127012476e-3f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1890170425e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6667112708e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999231100e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	n = _mm256_min_ps(n, _mm256_set1_ps(128.0f)); /* x past 89: inf, not a wrapped exponent */
	return nk_v8_scale2(p, n);
}

#endif /* NK_AVX2_H */
