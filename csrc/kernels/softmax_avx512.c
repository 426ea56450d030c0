/* softmax_avx512.c - AVX-512 row primitives for softmax and attention (nk_softmax_impl.h); compiled
 * with the AVX-512 flags and called only through nk_rowops() after the CPU check.
 * exp: n = round(x / ln 2), r = x - n ln 2 (two-part constant), Cephes degree-6 polynomial, then
 * scalef(p, n) = p * 2^n, which gives 0 and inf at the ends of the range; about 1 ulp. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "nk_softmax_impl.h"
#include "nk_avx512.h"

static inline __m512 exp512(__m512 x)
{
	__m512 n, p;

	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* max/min return x when x is NaN */
	x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
	p = nk_v_exp_core(x, &n, 1);
	return _mm512_scalef_ps(p, n);
}

float nk_row_max_avx512(const float *x, int64_t n)
{
	__m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
		m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
		m2 = _mm512_max_ps(_mm512_loadu_ps(x + i + 32), m2);
		m3 = _mm512_max_ps(_mm512_loadu_ps(x + i + 48), m3);
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);

		m0 = _mm512_mask_max_ps(m0, k, _mm512_maskz_loadu_ps(k, x + i), m0);
	}
	return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

float nk_row_exp_sum_avx512(float *x, int64_t n, float sub)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, vs = _mm512_set1_ps(sub);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
		__m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vs));

		_mm512_storeu_ps(x + i, e0);
		_mm512_storeu_ps(x + i + 16, e1);
		s0 = _mm512_add_ps(s0, e0);
		s1 = _mm512_add_ps(s1, e1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs));

		_mm512_mask_storeu_ps(x + i, k, e);
		s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, e));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* exp(x) for the x - max of a softmax row (x <= 0, or NaN): clamped below only (max returns its second
 * operand for NaN), n = round(x / ln 2), r = x - n ln 2, a degree-5 polynomial with p(0) = 1 exactly
 * (relative-error fit on [-ln2/2, ln2/2], 1.05e-7), then scalef(p, n): about 2 ulp near 1, and the
 * one-part ln 2 (off by 1.9e-9) adds a relative 1.9e-9*|n| for the small terms (3e-7 at e^-100).
 * Five fewer operations than exp512 above; x > 89 overflows to inf through scalef as it should. */
static inline __attribute__((always_inline)) __m512 exp_row(__m512 x)
{
	__m512 n, r, p;

	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182f), x);
	p = _mm512_set1_ps(8.3127012476e-3f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1890170425e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6667112708e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.9999231100e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

/* sum of exp(x - mx) over a row, e = the terms unless e is NULL.  Two vectors per step (the exp chains
 * are long: the pair overlaps), four sum chains, one masked tail. */
static inline __attribute__((always_inline)) float exp_row_sum(const float *x, float *e, int64_t n, float mx)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, vm = _mm512_set1_ps(mx);
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m512 e0 = exp_row(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
		__m512 e1 = exp_row(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vm));
		__m512 e2 = exp_row(_mm512_sub_ps(_mm512_loadu_ps(x + i + 32), vm));
		__m512 e3 = exp_row(_mm512_sub_ps(_mm512_loadu_ps(x + i + 48), vm));

		if (e) {
			_mm512_storeu_ps(e + i, e0);
			_mm512_storeu_ps(e + i + 16, e1);
			_mm512_storeu_ps(e + i + 32, e2);
			_mm512_storeu_ps(e + i + 48, e3);
		}
		s0 = _mm512_add_ps(s0, e0);
		s1 = _mm512_add_ps(s1, e1);
		s2 = _mm512_add_ps(s2, e2);
		s3 = _mm512_add_ps(s3, e3);
	}
	for (; i + 16 <= n; i += 16) {
		__m512 v = exp_row(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));

		if (e)
			_mm512_storeu_ps(e + i, v);
		s0 = _mm512_add_ps(s0, v);
	}
	if (i < n) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 v = _mm512_maskz_mov_ps(k, exp_row(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));

		if (e)
			_mm512_mask_storeu_ps(e + i, k, v);
		s1 = _mm512_add_ps(s1, v);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static inline int nt_ok(const float *p, int stream)
{
	return stream && ((uintptr_t)p & 63) == 0;
}

/* One output vector: softmax scale (e*inv), log_softmax (x - max - lse), softmax backward
 * (y*(dy - dot)), log_softmax backward (dy - exp(y)*dot; exp_row clamped above at 89 as exp512). */
enum { F_SCALE, F_LOG, F_BWD, F_LOG_BWD };

static inline __attribute__((always_inline)) __m512 row_val(int f, __m512 a, __m512 b, __m512 c0, __m512 c1)
{
	switch (f) {
	case F_SCALE: return _mm512_mul_ps(a, c0);
	case F_LOG: return _mm512_sub_ps(_mm512_sub_ps(a, c0), c1);
	case F_BWD: return _mm512_mul_ps(b, _mm512_sub_ps(a, c0));
	default: return _mm512_fnmadd_ps(exp_row(_mm512_min_ps(_mm512_set1_ps(89.0f), b)), c0, a); /* NaN passes */
	}
}

/* out = row_val(f, a, b) over a row (b is read only for the backward forms): whole vectors two at a time
 * with plain stores or, when nt (out 64-byte aligned), one at a time non-temporal; one masked tail. */
static inline __attribute__((always_inline)) void row_map(int f, float *out, const float *a, const float *b,
							  int64_t n, __m512 c0, __m512 c1, int nt)
{
	const int two = f >= F_BWD;
	int64_t i = 0;

	if (nt) {
		for (; i + 16 <= n; i += 16)
			_mm512_stream_ps(out + i, row_val(f, _mm512_loadu_ps(a + i), two ? _mm512_loadu_ps(b + i) : c0, c0, c1));
	} else {
		for (; i + 32 <= n; i += 32) {
			__m512 v0 = row_val(f, _mm512_loadu_ps(a + i), two ? _mm512_loadu_ps(b + i) : c0, c0, c1);
			__m512 v1 = row_val(f, _mm512_loadu_ps(a + i + 16), two ? _mm512_loadu_ps(b + i + 16) : c0, c0, c1);

			_mm512_storeu_ps(out + i, v0);
			_mm512_storeu_ps(out + i + 16, v1);
		}
		for (; i + 16 <= n; i += 16)
			_mm512_storeu_ps(out + i, row_val(f, _mm512_loadu_ps(a + i), two ? _mm512_loadu_ps(b + i) : c0, c0, c1));
	}
	if (i < n) {
		__mmask16 k = nk_tail_mask16(n - i);

		_mm512_mask_storeu_ps(out + i, k, row_val(f, _mm512_maskz_loadu_ps(k, a + i),
							  two ? _mm512_maskz_loadu_ps(k, b + i) : c0, c0, c1));
	}
}

/* Three passes over an L1-resident row: max, exp (stored into y, or tmp when streaming) and its sum,
 * scale; log: max, sum of exp (not stored), x - max - log(sum). */
static void softmax_row(const float *x, float *y, float *tmp, int64_t n, int log, int stream)
{
	float mx = nk_row_max_avx512(x, n);
	int nt = nt_ok(y, stream);

	if (log) {
		__m512 vl = _mm512_set1_ps(logf(exp_row_sum(x, NULL, n, mx)));

		row_map(F_LOG, y, x, NULL, n, _mm512_set1_ps(mx), vl, nt);
		return;
	}
	float *e = nt ? tmp : y;
	__m512 inv = _mm512_set1_ps(1.0f / exp_row_sum(x, e, n, mx));

	row_map(F_SCALE, y, e, NULL, n, inv, inv, nt);
}

/* dot = sum(dy*y) (log: sum(dy)) with four chains, then dx = y*(dy - dot) (log: dy - exp(y)*dot); the
 * row of dy and y stays in L1 between the two passes. */
static void softmax_bwd_row(const float *dy, const float *y, float *dx, int64_t n, int log, int stream)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, vd;
	int nt = nt_ok(dx, stream);
	int64_t i = 0;

	if (log) {
		for (; i + 64 <= n; i += 64) {
			s0 = _mm512_add_ps(s0, _mm512_loadu_ps(dy + i));
			s1 = _mm512_add_ps(s1, _mm512_loadu_ps(dy + i + 16));
			s2 = _mm512_add_ps(s2, _mm512_loadu_ps(dy + i + 32));
			s3 = _mm512_add_ps(s3, _mm512_loadu_ps(dy + i + 48));
		}
		for (; i < n; i += 16)
			s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(nk_tail_mask16(n - i), dy + i));
	} else {
		for (; i + 64 <= n; i += 64) {
			s0 = _mm512_fmadd_ps(_mm512_loadu_ps(dy + i), _mm512_loadu_ps(y + i), s0);
			s1 = _mm512_fmadd_ps(_mm512_loadu_ps(dy + i + 16), _mm512_loadu_ps(y + i + 16), s1);
			s2 = _mm512_fmadd_ps(_mm512_loadu_ps(dy + i + 32), _mm512_loadu_ps(y + i + 32), s2);
			s3 = _mm512_fmadd_ps(_mm512_loadu_ps(dy + i + 48), _mm512_loadu_ps(y + i + 48), s3);
		}
		for (; i < n; i += 16) {
			__mmask16 k = nk_tail_mask16(n - i);

			s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, dy + i), _mm512_maskz_loadu_ps(k, y + i), s0);
		}
	}
	vd = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))));
	if (log)
		row_map(F_LOG_BWD, dx, dy, y, n, vd, vd, nt);
	else
		row_map(F_BWD, dx, dy, y, n, vd, vd, nt);
}

const nk_rowops_t nk_rowops_avx512 = {
	.max = nk_row_max_avx512,
	.exp_sum = nk_row_exp_sum_avx512,
	.softmax_row = softmax_row,
	.softmax_bwd_row = softmax_bwd_row,
};
