/* reduce_avx2.c - AVX2 + FMA inner loops of reduce.c for dense f32 rows at the avx2 level: sums and sums
 * of squared deviations accumulated in double, and NaN-propagating extrema (reduce_avx512.c's contracts
 * on 8-lane vectors).  Built with the AVX2 flags; reduce.c calls these only when the dispatch context's
 * reduce family is avx2.  Tails use masked loads.
 *
 * Sums use four accumulators of 4 doubles; the plain sum first adds blocks of 4 vectors (32 floats, 4
 * per lane) as a pairwise tree in float (2 roundings deep), then widens, as the AVX-512 loop does with 8.
 * Extrema are exact. */
#include <immintrin.h>
#include <math.h>

#include "nk_avx2.h"
#include "nk_impl.h"

/* 8 floats as two vectors of 4 doubles, minus shift. */
static inline __attribute__((always_inline)) void widen(__m256 v, __m256d shift, __m256d *lo, __m256d *hi)
{
	*lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), shift);
	*hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), shift);
}

static inline double hsum4d(__m256d v)
{
	__m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));

	return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* sum (x - shift)^power, power 1 or 2, every element widened to double first. */
static double sum_widened(const float *x, int64_t n, double shift, int power)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, s = _mm256_set1_pd(shift);
	int64_t i = 0;

	for (; i < n; i += 16) {
		__m256i k0 = nk_tail_mask8(n - i), k1 = nk_tail_mask8(n - i - 8);
		__m256d d0, d1, d2, d3;

		widen(_mm256_maskload_ps(x + i, k0), s, &d0, &d1);
		widen(_mm256_maskload_ps(x + i + 8, k1), s, &d2, &d3);
		/* masked-off lanes loaded 0 and became -shift: zero them */
		d0 = _mm256_and_pd(d0, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(k0))));
		d1 = _mm256_and_pd(d1, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(k0, 1))));
		d2 = _mm256_and_pd(d2, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(k1))));
		d3 = _mm256_and_pd(d3, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(k1, 1))));
		if (power == 2) {
			a0 = _mm256_fmadd_pd(d0, d0, a0);
			a1 = _mm256_fmadd_pd(d1, d1, a1);
			a2 = _mm256_fmadd_pd(d2, d2, a2);
			a3 = _mm256_fmadd_pd(d3, d3, a3);
		} else {
			a0 = _mm256_add_pd(a0, d0);
			a1 = _mm256_add_pd(a1, d1);
			a2 = _mm256_add_pd(a2, d2);
			a3 = _mm256_add_pd(a3, d3);
		}
	}
	return hsum4d(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
}

static inline __attribute__((always_inline)) __m256 tree4(const float *p)
{
	return _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)),
			     _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24)));
}

double nk_rd_sum_f32_avx2(const float *x, int64_t n)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, z = a0;
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m256d d0, d1, d2, d3;

		widen(tree4(x + i), z, &d0, &d1);
		widen(tree4(x + i + 32), z, &d2, &d3);
		a0 = _mm256_add_pd(a0, d0);
		a1 = _mm256_add_pd(a1, d1);
		a2 = _mm256_add_pd(a2, d2);
		a3 = _mm256_add_pd(a3, d3);
	}
	double r = hsum4d(_mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
	return i < n ? r + sum_widened(x + i, n - i, 0, 1) : r;
}

double nk_rd_sumsq_f32_avx2(const float *x, int64_t n, double shift)
{
	return sum_widened(x, n, shift, 2);
}

/* The largest (is_max) or smallest of n > 0 dense floats; NaN if any is NaN. */
float nk_rd_extremum_f32_avx2(const float *x, int64_t n, bool is_max)
{
	const __m256 init = _mm256_set1_ps(is_max ? -INFINITY : INFINITY);
	__m256 b0 = init, b1 = init, b2 = init, b3 = init, nan = _mm256_setzero_ps();
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
		__m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);

		nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q), _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
		b0 = is_max ? _mm256_max_ps(b0, v0) : _mm256_min_ps(b0, v0);
		b1 = is_max ? _mm256_max_ps(b1, v1) : _mm256_min_ps(b1, v1);
		b2 = is_max ? _mm256_max_ps(b2, v2) : _mm256_min_ps(b2, v2);
		b3 = is_max ? _mm256_max_ps(b3, v3) : _mm256_min_ps(b3, v3);
	}
	for (; i < n; i += 8) {
		__m256i k = nk_tail_mask8(n - i);
		__m256 v = _mm256_blendv_ps(init, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));

		nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
		b0 = is_max ? _mm256_max_ps(b0, v) : _mm256_min_ps(b0, v);
	}
	if (_mm256_movemask_ps(nan))
		return NAN;
	if (is_max)
		return nk_hmax8(_mm256_max_ps(_mm256_max_ps(b0, b1), _mm256_max_ps(b2, b3)));
	__m256 m = _mm256_min_ps(_mm256_min_ps(b0, b1), _mm256_min_ps(b2, b3));
	__m128 h = _mm_min_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));

	h = _mm_min_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_min_ss(h, _mm_shuffle_ps(h, h, 1)));
}
