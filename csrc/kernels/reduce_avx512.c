/* reduce_avx512.c - AVX-512 inner loops of reduce.c for dense f32 (and bf16/f64 sums): row sums and
 * sums of squared deviations accumulated in double, NaN-propagating extrema, first-occurrence
 * arg-extrema, and column sums of one row into a double accumulator.  Built with the AVX-512 flags;
 * reduce.c calls these only when nk_cpu_avx512().  Tails use masked loads.
 *
 * Sums use four independent accumulators of 8 doubles, so their order differs from the sequential
 * reference by rounding only (both accumulate in double); the plain f32 sum first adds blocks of 8
 * elements per lane as a pairwise tree in float (3 roundings deep), then widens.  Extrema and
 * arg-extrema are exact.
 */
#include <immintrin.h>

#include "nk_impl.h"

static inline __mmask16 m16(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

static inline __mmask8 m8(int64_t n)
{
	return n >= 8 ? (__mmask8)0xff : (__mmask8)((1u << n) - 1u);
}

/* 16 floats as two vectors of 8 doubles, minus shift. */
static inline void f32x16_to_f64(__m512 v, __m512d shift, __m512d *lo, __m512d *hi)
{
	*lo = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), shift);
	*hi = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), shift);
}

static inline __m512 bf16x16_load(const uint16_t *p, __mmask16 m)
{
	__m256i h = _mm256_maskz_loadu_epi16(m, p);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* sum (x - shift)^p for p = 1 or 2 over dense f32 or bf16. */
static double sum_f32ish(const void *x, bool bf16, int64_t n, double shift, int power)
{
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	const __m512d s = _mm512_set1_pd(shift);
	int64_t i = 0;
	if (!bf16 && power == 1 && shift == 0) {
		for (; i + 32 <= n; i += 32) {
			__m512d d0, d1, d2, d3;
			f32x16_to_f64(_mm512_loadu_ps((const float *)x + i), s, &d0, &d1);
			f32x16_to_f64(_mm512_loadu_ps((const float *)x + i + 16), s, &d2, &d3);
			a0 = _mm512_add_pd(a0, d0);
			a1 = _mm512_add_pd(a1, d1);
			a2 = _mm512_add_pd(a2, d2);
			a3 = _mm512_add_pd(a3, d3);
		}
	}
	for (; i < n; i += 32) {
		__mmask16 k0 = m16(n - i), k1 = m16(n - i - 16 > 0 ? n - i - 16 : 0);
		__m512 v0 = bf16 ? bf16x16_load((const uint16_t *)x + i, k0) : _mm512_maskz_loadu_ps(k0, (const float *)x + i);
		__m512 v1 = bf16 ? bf16x16_load((const uint16_t *)x + i + 16, k1)
				 : _mm512_maskz_loadu_ps(k1, (const float *)x + i + 16);
		__m512d d0, d1, d2, d3;
		f32x16_to_f64(v0, s, &d0, &d1);
		f32x16_to_f64(v1, s, &d2, &d3);
		/* masked-off lanes loaded 0 and became -shift: zero them */
		d0 = _mm512_maskz_mov_pd((__mmask8)k0, d0);
		d1 = _mm512_maskz_mov_pd((__mmask8)(k0 >> 8), d1);
		d2 = _mm512_maskz_mov_pd((__mmask8)k1, d2);
		d3 = _mm512_maskz_mov_pd((__mmask8)(k1 >> 8), d3);
		if (power == 2) {
			a0 = _mm512_fmadd_pd(d0, d0, a0);
			a1 = _mm512_fmadd_pd(d1, d1, a1);
			a2 = _mm512_fmadd_pd(d2, d2, a2);
			a3 = _mm512_fmadd_pd(d3, d3, a3);
		} else {
			a0 = _mm512_add_pd(a0, d0);
			a1 = _mm512_add_pd(a1, d1);
			a2 = _mm512_add_pd(a2, d2);
			a3 = _mm512_add_pd(a3, d3);
		}
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

/* Plain f32 sum: each main-loop step adds 8 vectors (128 floats) as a pairwise tree in float (every
 * lane sums 8 elements, error within 3 ulp of each of them) and widens the result into double
 * accumulators; the tail goes through sum_f32ish.  Far fewer conversions than widening every element,
 * so the loop runs at the cache's read bandwidth. */
static inline __attribute__((always_inline)) __m512 tree8(const float *p)
{
	__m512 v0 = _mm512_add_ps(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16));
	__m512 v1 = _mm512_add_ps(_mm512_loadu_ps(p + 32), _mm512_loadu_ps(p + 48));
	__m512 v2 = _mm512_add_ps(_mm512_loadu_ps(p + 64), _mm512_loadu_ps(p + 80));
	__m512 v3 = _mm512_add_ps(_mm512_loadu_ps(p + 96), _mm512_loadu_ps(p + 112));
	return _mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3));
}

double nk_rd_sum_f32_avx512(const float *x, int64_t n)
{
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	int64_t i = 0;
	for (; i + 256 <= n; i += 256) {
		__m512 t0 = tree8(x + i), t1 = tree8(x + i + 128);
		__m512d d0, d1, d2, d3;
		f32x16_to_f64(t0, _mm512_setzero_pd(), &d0, &d1);
		f32x16_to_f64(t1, _mm512_setzero_pd(), &d2, &d3);
		a0 = _mm512_add_pd(a0, d0);
		a1 = _mm512_add_pd(a1, d1);
		a2 = _mm512_add_pd(a2, d2);
		a3 = _mm512_add_pd(a3, d3);
	}
	double r = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
	return i < n ? r + sum_f32ish(x + i, false, n - i, 0, 1) : r;
}

double nk_rd_sum_bf16_avx512(const uint16_t *x, int64_t n)
{
	return sum_f32ish(x, true, n, 0, 1);
}

double nk_rd_sumsq_f32_avx512(const float *x, int64_t n, double shift)
{
	return sum_f32ish(x, false, n, shift, 2);
}

double nk_rd_sum_f64_avx512(const double *x, int64_t n)
{
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (int64_t i = 0; i < n; i += 32) {
		a0 = _mm512_add_pd(a0, _mm512_maskz_loadu_pd(m8(n - i), x + i));
		a1 = _mm512_add_pd(a1, _mm512_maskz_loadu_pd(m8(n - i - 8 > 0 ? n - i - 8 : 0), x + i + 8));
		a2 = _mm512_add_pd(a2, _mm512_maskz_loadu_pd(m8(n - i - 16 > 0 ? n - i - 16 : 0), x + i + 16));
		a3 = _mm512_add_pd(a3, _mm512_maskz_loadu_pd(m8(n - i - 24 > 0 ? n - i - 24 : 0), x + i + 24));
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

/* NaN-propagating max (is_max) or min of n > 0 dense floats: four independent accumulators, one
 * unordered compare per pair of vectors for NaN, masked tail (masked-off lanes keep best). */
static inline __attribute__((always_inline)) float extremum(const float *x, int64_t n, bool is_max)
{
	__m512 b0 = _mm512_set1_ps(is_max ? -INFINITY : INFINITY), b1 = b0, b2 = b0, b3 = b0;
	__mmask16 nan = 0;
	int64_t i = 0;
#define EXT(b, v) b = is_max ? _mm512_max_ps(b, v) : _mm512_min_ps(b, v)
	for (; i + 64 <= n; i += 64) {
		__m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
		__m512 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48);
		nan |= _mm512_cmp_ps_mask(v0, v1, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v2, v3, _CMP_UNORD_Q);
		EXT(b0, v0);
		EXT(b1, v1);
		EXT(b2, v2);
		EXT(b3, v3);
	}
	for (; i < n; i += 16) {
		__mmask16 k = m16(n - i);
		__m512 v = _mm512_mask_loadu_ps(b0, k, x + i);
		nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
		EXT(b0, v);
	}
	EXT(b0, b1);
	EXT(b2, b3);
	EXT(b0, b2);
#undef EXT
	if (nan)
		return NAN;
	return is_max ? _mm512_reduce_max_ps(b0) : _mm512_reduce_min_ps(b0);
}

float nk_rd_extremum_f32_avx512(const float *x, int64_t n, bool is_max)
{
	return is_max ? extremum(x, n, true) : extremum(x, n, false);
}

/* DRAM-resident inputs: on Zen 4 these simpler loops (one or two vectors a step, widening every
 * vector) stream from DRAM at full speed, while the unrolled loops above, 2-4x faster from L2/L3,
 * measured 2-4x slower from DRAM (64 MiB: 3.0 ms against 8-12 ms for the sum). */
double nk_rd_sum_f32_dram_avx512(const float *x, int64_t n)
{
	return sum_f32ish(x, false, n, 0, 1);
}

float nk_rd_extremum_f32_dram_avx512(const float *x, int64_t n, bool is_max)
{
	__m512 best = _mm512_set1_ps(is_max ? -INFINITY : INFINITY);
	__mmask16 nan = 0;
	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = m16(n - i);
		__m512 v = _mm512_mask_loadu_ps(best, k, x + i); /* masked-off lanes keep best */
		nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
		best = is_max ? _mm512_max_ps(best, v) : _mm512_min_ps(best, v);
	}
	if (nan)
		return NAN;
	return is_max ? _mm512_reduce_max_ps(best) : _mm512_reduce_min_ps(best);
}

/* Index of the first maximum (is_max) or minimum of n > 0 dense floats, a NaN counting as the extreme
 * (the first NaN wins); *val gets the value. */
int64_t nk_rd_argext_f32_avx512(const float *x, int64_t n, bool is_max, float *val)
{
	const float init = is_max ? -INFINITY : INFINITY;
	__m512 best = _mm512_set1_ps(init);
	__m512i bidx = _mm512_set1_epi32(-1);
	__m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512i step = _mm512_set1_epi32(16);
	int64_t i = 0;
	/* lanes track int32 positions within a window; windows of 2^30 keep them exact */
	int64_t base = 0, best_base = 0;
	int64_t found = -1;
	float found_val = init;
	while (base < n) {
		int64_t end = n - base > (1 << 30) ? base + (1 << 30) : n;
		best = _mm512_set1_ps(init);
		bidx = _mm512_set1_epi32(-1);
		idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
		for (i = base; i < end; i += 16) {
			__mmask16 k = m16(end - i);
			__m512 v = _mm512_maskz_loadu_ps(k, x + i);
			__mmask16 vnan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
			__mmask16 bnan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
			__mmask16 better = is_max ? _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) : _mm512_cmp_ps_mask(v, best, _CMP_LT_OQ);
			__mmask16 unset = _mm512_cmpeq_epi32_mask(bidx, _mm512_set1_epi32(-1));
			__mmask16 take = k & ((better & ~bnan) | (vnan & ~bnan) | (unset & ~bnan));
			best = _mm512_mask_mov_ps(best, take, v);
			bidx = _mm512_mask_mov_epi32(bidx, take, idx);
			idx = _mm512_add_epi32(idx, step);
		}
		/* across lanes: a NaN lane with the smallest index, else the extreme with the smallest index */
		float bv[16];
		int32_t bi[16];
		_mm512_storeu_ps(bv, best);
		_mm512_storeu_si512(bi, bidx);
		int64_t wi = -1;
		float wv = init;
		for (int l = 0; l < 16; l++) {
			if (bi[l] < 0)
				continue;
			bool lnan = bv[l] != bv[l], wnan = wv != wv;
			bool take = wi < 0 || (lnan && !wnan) || (lnan && wnan && bi[l] < wi) ||
				    (!lnan && !wnan && (is_max ? bv[l] > wv : bv[l] < wv)) ||
				    (!lnan && !wnan && bv[l] == wv && bi[l] < wi);
			if (take) {
				wi = bi[l];
				wv = bv[l];
			}
		}
		/* combine windows: later windows win only when strictly better */
		if (wi >= 0) {
			bool fnan = found_val != found_val, wnan = wv != wv;
			bool take = found < 0 || (wnan && !fnan) ||
				    (!wnan && !fnan && (is_max ? wv > found_val : wv < found_val));
			if (take) {
				found = wi;
				found_val = wv;
				best_base = base;
			}
		}
		base = end;
	}
	*val = found_val;
	return found < 0 ? -1 : best_base + found;
}

/* acc[i] += the sum over nrows rows (row r at base + r*rs bytes) of row[i], for i < w <= 128 (f32 or
 * bf16).  Blocks of 8 rows are summed in f32 registers (up to 8 vectors, masked loads for the tile's
 * width), then widened and added into acc: each block's f32 sum is within 7 ulps of its terms, below
 * the error of a float cascade over more than 128 rows, and acc is loaded and stored once per block
 * instead of once per row (the per-row form spent its time in those loads and stores). */
void nk_rd_colsum_rows_avx512(double *acc, const void *base, int64_t rs, int64_t nrows, bool bf16, int64_t w)
{
	__mmask16 km[8];

	for (int v = 0; v < 8; v++)
		km[v] = w > 16 * v ? m16(w - 16 * v) : 0;
	for (int64_t r = 0; r < nrows; r += 8) {
		int64_t rn = nrows - r < 8 ? nrows - r : 8;
		__m512 s[8];

		_Pragma("GCC unroll 8")
		for (int v = 0; v < 8; v++)
			s[v] = _mm512_setzero_ps();
		for (int64_t q = 0; q < rn; q++) {
			const char *row = (const char *)base + (r + q) * rs;

			_Pragma("GCC unroll 8")
			for (int v = 0; v < 8; v++)
				s[v] = _mm512_add_ps(s[v], bf16 ? bf16x16_load((const uint16_t *)row + 16 * v, km[v])
							       : _mm512_maskz_loadu_ps(km[v], (const float *)row + 16 * v));
		}
		_Pragma("GCC unroll 8")
		for (int v = 0; v < 8; v++) {
			__mmask8 k0 = (__mmask8)km[v], k1 = (__mmask8)(km[v] >> 8);
			__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(s[v]));
			__m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s[v]), 1)));

			if (!km[v])
				break;
			_mm512_mask_storeu_pd(acc + 16 * v, k0, _mm512_add_pd(_mm512_maskz_loadu_pd(k0, acc + 16 * v), lo));
			_mm512_mask_storeu_pd(acc + 16 * v + 8, k1, _mm512_add_pd(_mm512_maskz_loadu_pd(k1, acc + 16 * v + 8), hi));
		}
	}
}

/* acc[i] += the sum over nrows rows (row r at base + r*rs bytes) of row[i], for i < w (f32 or bf16),
 * one row at a time front to back (one sequential stream): blocks of 8 rows are summed in f32 in tmp
 * (w floats, L1-sized for the widths it is used for), in the row order of nk_rd_colsum_rows_avx512 (the
 * same f32 block sums bit for bit), then widened and added into acc. */
void nk_rd_colsum_seq_avx512(double *acc, const void *base, int64_t rs, int64_t nrows, bool bf16, int64_t w,
			     float *tmp)
{
	for (int64_t r = 0; r < nrows; r += 8) {
		int64_t rn = nrows - r < 8 ? nrows - r : 8;

		for (int64_t q = 0; q < rn; q++) {
			const char *row = (const char *)base + (r + q) * rs;
			int64_t i = 0;

			for (; i < w; i += 16) {
				__mmask16 k = m16(w - i);
				__m512 x = bf16 ? bf16x16_load((const uint16_t *)row + i, k)
						: _mm512_maskz_loadu_ps(k, (const float *)row + i);

				_mm512_mask_storeu_ps(tmp + i, k, q ? _mm512_add_ps(_mm512_maskz_loadu_ps(k, tmp + i), x) : x);
			}
		}
		for (int64_t i = 0; i < w; i += 8) {
			__mmask8 k = (__mmask8)m16(w - i);
			__m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, tmp + i));

			_mm512_mask_storeu_pd(acc + i, k, _mm512_add_pd(_mm512_maskz_loadu_pd(k, acc + i), v));
		}
	}
}
