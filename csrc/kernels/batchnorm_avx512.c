/* batchnorm_avx512.c - dense f32 segment helpers of batchnorm.c (batch / group norm) with AVX-512: the f64 sums of
 * dy and dy*(x - m) (eight f64 lanes, two accumulators each, then summed across lanes), and the per-channel
 * affine forms y = x*a + b and dx = dy*a + x*b + c in f32 with the same operations and rounding order as
 * batchnorm.c's scalar loops (multiplies and adds, not fused); the plain sum widens every element to f64 and
 * the squared deviations use reduce_avx512.c's nk_rd_sumsq_f32_avx512.
 * Call only when nk_cpu_avx512(). */
#include <immintrin.h>

#include "nk_avx512.h"
#include "nk_impl.h"

/* Sum of n floats in f64 (every element widened; masked-off lanes load 0). */
double nk_norm_sum_f32_avx512(const float *x, int64_t n)
{
	__m512d a0 = _mm512_setzero_pd(), a1 = a0;

	for (int64_t i = 0; i < n; i += 16) {
		__m512 v = _mm512_maskz_loadu_ps(nk_tail_mask16(n - i), x + i);

		a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
		a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

void nk_norm_dsums_f32_avx512(const float *dy, const float *x, int64_t n, double m, double *sdy, double *sdx)
{
	__m512d s1a = _mm512_setzero_pd(), s1b = s1a, s2a = s1a, s2b = s1a, vm = _mm512_set1_pd(m);

	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 g = _mm512_maskz_loadu_ps(k, dy + i), v = _mm512_maskz_loadu_ps(k, x + i);
		__m512d g0 = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
		__m512d g1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
		__m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
		__m512d x1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
		__mmask8 k0 = (__mmask8)k, k1 = (__mmask8)(k >> 8);

		/* masked-off lanes load 0 and add 0 (x - m is masked too: 0 * (0 - m) = 0 unless m is inf/NaN) */
		s1a = _mm512_add_pd(s1a, g0);
		s1b = _mm512_add_pd(s1b, g1);
		s2a = _mm512_mask_add_pd(s2a, k0, s2a, _mm512_mul_pd(g0, _mm512_sub_pd(x0, vm)));
		s2b = _mm512_mask_add_pd(s2b, k1, s2b, _mm512_mul_pd(g1, _mm512_sub_pd(x1, vm)));
	}
	*sdy += _mm512_reduce_add_pd(_mm512_add_pd(s1a, s1b));
	*sdx += _mm512_reduce_add_pd(_mm512_add_pd(s2a, s2b));
}

void nk_norm_affine_f32_avx512(float *y, const float *x, int64_t n, float a, float b)
{
	__m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);

	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);

		_mm512_mask_storeu_ps(y + i, k, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), va), vb));
	}
}

void nk_norm_bwd_f32_avx512(float *dx, const float *dy, const float *x, int64_t n, float a, float b, float c)
{
	__m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), vc = _mm512_set1_ps(c);

	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 g = _mm512_maskz_loadu_ps(k, dy + i), v = _mm512_maskz_loadu_ps(k, x + i);

		_mm512_mask_storeu_ps(dx + i, k, _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(g, va), _mm512_mul_ps(v, vb)), vc));
	}
}
