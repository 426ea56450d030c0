/* softmax_avx2.c - AVX2 + FMA row primitives for softmax and attention (nk_softmax_impl.h): the AVX-512
 * file's algorithms on 8-lane vectors (compiled with the AVX2 flags, called only through nk_rowops() at
 * the avx2 level).  exp: nk_avx2.h (the same Cephes and row polynomials, scalef done as two exponent-field
 * scalings).  No non-temporal stores at this level (softmax.c asks for them only at the avx512 level). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "nk_avx2.h"
#include "nk_softmax_impl.h"

float nk_row_max_avx2(const float *x, int64_t n)
{
	__m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	int64_t i = 0;

	/* max(v, m) returns m where v is NaN: NaN elements are skipped, as the contract says */
	for (; i + 32 <= n; i += 32) {
		m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
		m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
		m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
		m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
	}
	for (; i < n; i += 8) {
		__m256i k = nk_tail_mask8(n - i);
		__m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));

		m0 = _mm256_max_ps(v, m0);
	}
	return nk_hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
}

float nk_row_exp_sum_avx2(float *x, int64_t n, float sub)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, vs = _mm256_set1_ps(sub);
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 e0 = nk_v8_exp_ord(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), 1);
		__m256 e1 = nk_v8_exp_ord(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs), 1);

		_mm256_storeu_ps(x + i, e0);
		_mm256_storeu_ps(x + i + 8, e1);
		s0 = _mm256_add_ps(s0, e0);
		s1 = _mm256_add_ps(s1, e1);
	}
	for (; i < n; i += 8) {
		__m256i k = nk_tail_mask8(n - i);
		__m256 e = _mm256_and_ps(nk_v8_exp_ord(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vs), 1), _mm256_castsi256_ps(k));

		_mm256_maskstore_ps(x + i, k, e);
		s0 = _mm256_add_ps(s0, e);
	}
	return nk_hsum8(_mm256_add_ps(s0, s1));
}

/* sum of exp(x - mx) over a row, e = the terms unless e is NULL: four vectors per step, four chains. */
static float exp_row_sum(const float *x, float *e, int64_t n, float mx)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, vm = _mm256_set1_ps(mx);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 e0 = nk_v8_exp_row(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
		__m256 e1 = nk_v8_exp_row(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
		__m256 e2 = nk_v8_exp_row(_mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vm));
		__m256 e3 = nk_v8_exp_row(_mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vm));

		if (e) {
			_mm256_storeu_ps(e + i, e0);
			_mm256_storeu_ps(e + i + 8, e1);
			_mm256_storeu_ps(e + i + 16, e2);
			_mm256_storeu_ps(e + i + 24, e3);
		}
		s0 = _mm256_add_ps(s0, e0);
		s1 = _mm256_add_ps(s1, e1);
		s2 = _mm256_add_ps(s2, e2);
		s3 = _mm256_add_ps(s3, e3);
	}
	for (; i < n; i += 8) {
		__m256i k = nk_tail_mask8(n - i);
		__m256 v = _mm256_and_ps(nk_v8_exp_row(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vm)), _mm256_castsi256_ps(k));

		if (e)
			_mm256_maskstore_ps(e + i, k, v);
		s1 = _mm256_add_ps(s1, v);
	}
	return nk_hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* One output vector: softmax scale (e*inv), log_softmax (x - max - lse), softmax backward
 * (y*(dy - dot)), log_softmax backward (dy - exp(y)*dot, exp clamped above at 89). */
enum { F_SCALE, F_LOG, F_BWD, F_LOG_BWD };

static inline __attribute__((always_inline)) __m256 row_val(int f, __m256 a, __m256 b, __m256 c0, __m256 c1)
{
	switch (f) {
	case F_SCALE: return _mm256_mul_ps(a, c0);
	case F_LOG: return _mm256_sub_ps(_mm256_sub_ps(a, c0), c1);
	case F_BWD: return _mm256_mul_ps(b, _mm256_sub_ps(a, c0));
	default: return _mm256_fnmadd_ps(nk_v8_exp_row(_mm256_min_ps(_mm256_set1_ps(89.0f), b)), c0, a);
	}
}

static inline __attribute__((always_inline)) void row_map(int f, float *out, const float *a, const float *b,
							  int64_t n, __m256 c0, __m256 c1)
{
	const int two = f >= F_BWD;
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m256 v0 = row_val(f, _mm256_loadu_ps(a + i), two ? _mm256_loadu_ps(b + i) : c0, c0, c1);
		__m256 v1 = row_val(f, _mm256_loadu_ps(a + i + 8), two ? _mm256_loadu_ps(b + i + 8) : c0, c0, c1);

		_mm256_storeu_ps(out + i, v0);
		_mm256_storeu_ps(out + i + 8, v1);
	}
	for (; i < n; i += 8) {
		__m256i k = nk_tail_mask8(n - i);

		_mm256_maskstore_ps(out + i, k, row_val(f, _mm256_maskload_ps(a + i, k), two ? _mm256_maskload_ps(b + i, k) : c0,
							c0, c1));
	}
}

static void softmax_row(const float *x, float *y, float *tmp, int64_t n, int log, int stream)
{
	float mx = nk_row_max_avx2(x, n);

	(void)tmp, (void)stream;
	if (log) {
		__m256 vl = _mm256_set1_ps(logf(exp_row_sum(x, NULL, n, mx)));

		row_map(F_LOG, y, x, NULL, n, _mm256_set1_ps(mx), vl);
		return;
	}
	__m256 inv = _mm256_set1_ps(1.0f / exp_row_sum(x, y, n, mx));

	row_map(F_SCALE, y, y, NULL, n, inv, inv);
}

static void softmax_bwd_row(const float *dy, const float *y, float *dx, int64_t n, int log, int stream)
{
	__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, vd;
	int64_t i = 0;

	(void)stream;
	if (log) {
		for (; i + 32 <= n; i += 32) {
			s0 = _mm256_add_ps(s0, _mm256_loadu_ps(dy + i));
			s1 = _mm256_add_ps(s1, _mm256_loadu_ps(dy + i + 8));
			s2 = _mm256_add_ps(s2, _mm256_loadu_ps(dy + i + 16));
			s3 = _mm256_add_ps(s3, _mm256_loadu_ps(dy + i + 24));
		}
		for (; i < n; i += 8)
			s0 = _mm256_add_ps(s0, _mm256_maskload_ps(dy + i, nk_tail_mask8(n - i)));
	} else {
		for (; i + 32 <= n; i += 32) {
			s0 = _mm256_fmadd_ps(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(y + i), s0);
			s1 = _mm256_fmadd_ps(_mm256_loadu_ps(dy + i + 8), _mm256_loadu_ps(y + i + 8), s1);
			s2 = _mm256_fmadd_ps(_mm256_loadu_ps(dy + i + 16), _mm256_loadu_ps(y + i + 16), s2);
			s3 = _mm256_fmadd_ps(_mm256_loadu_ps(dy + i + 24), _mm256_loadu_ps(y + i + 24), s3);
		}
		for (; i < n; i += 8) {
			__m256i k = nk_tail_mask8(n - i);

			s0 = _mm256_fmadd_ps(_mm256_maskload_ps(dy + i, k), _mm256_maskload_ps(y + i, k), s0);
		}
	}
	vd = _mm256_set1_ps(nk_hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))));
	row_map(log ? F_LOG_BWD : F_BWD, dx, dy, y, n, vd, vd);
}

const nk_rowops_t nk_rowops_avx2 = {
	.max = nk_row_max_avx2,
	.exp_sum = nk_row_exp_sum_avx2,
	.softmax_row = softmax_row,
	.softmax_bwd_row = softmax_bwd_row,
};
