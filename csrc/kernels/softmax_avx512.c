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
	__m512 n, r, p;

	x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* max/min return x when x is NaN */
	x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
	n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
				 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
	p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(p, n);
}

float nk_row_max_avx512(const float *x, int64_t n)
{
	__m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
		m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);

		m0 = _mm512_mask_max_ps(m0, k, _mm512_maskz_loadu_ps(k, x + i), m0);
	}
	return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
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

/* Store v (lanes k) at p; whole vectors non-temporal when nt (p then 64-byte aligned). */
static inline void put(float *p, __m512 v, __mmask16 k, int nt)
{
	if (nt && k == 0xffff)
		_mm512_stream_ps(p, v);
	else
		_mm512_mask_storeu_ps(p, k, v);
}

static inline int nt_ok(const float *p, int stream)
{
	return stream && ((uintptr_t)p & 63) == 0;
}

/* sum of exp(x - sub) without storing */
static float exp_sum_only(const float *x, int64_t n, float sub)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, vs = _mm512_set1_ps(sub);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_add_ps(s0, exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs)));
		s1 = _mm512_add_ps(s1, exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vs)));
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);

		s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs))));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static float exp_sum_to(const float *x, float *e, int64_t n, float sub)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, vs = _mm512_set1_ps(sub);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
		__m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vs));

		_mm512_storeu_ps(e + i, e0);
		_mm512_storeu_ps(e + i + 16, e1);
		s0 = _mm512_add_ps(s0, e0);
		s1 = _mm512_add_ps(s1, e1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 v = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs));

		_mm512_mask_storeu_ps(e + i, k, v);
		s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, v));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static void softmax_row(const float *x, float *y, float *tmp, int64_t n, int log, int stream)
{
	float mx = nk_row_max_avx512(x, n);
	int nt = nt_ok(y, stream);

	if (log) {
		__m512 vm = _mm512_set1_ps(mx), vl = _mm512_set1_ps(logf(exp_sum_only(x, n, mx)));

		for (int64_t i = 0; i < n; i += 16) {
			__mmask16 k = nk_tail_mask16(n - i);

			put(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vl), k, nt);
		}
		return;
	}
	float *e = nt ? tmp : y;
	__m512 inv = _mm512_set1_ps(1.0f / exp_sum_to(x, e, n, mx));

	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);

		put(y + i, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, e + i), inv), k, nt);
	}
}

static void softmax_bwd_row(const float *dy, const float *y, float *dx, int64_t n, int log, int stream)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, vd;
	int nt = nt_ok(dx, stream);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512 d0 = _mm512_loadu_ps(dy + i), d1 = _mm512_loadu_ps(dy + i + 16);

		if (log) {
			s0 = _mm512_add_ps(s0, d0);
			s1 = _mm512_add_ps(s1, d1);
		} else {
			s0 = _mm512_fmadd_ps(d0, _mm512_loadu_ps(y + i), s0);
			s1 = _mm512_fmadd_ps(d1, _mm512_loadu_ps(y + i + 16), s1);
		}
	}
	for (; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + i);

		s0 = log ? _mm512_add_ps(s0, d) : _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(k, y + i), s0);
	}
	vd = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)));
	for (i = 0; i < n; i += 16) {
		__mmask16 k = nk_tail_mask16(n - i);
		__m512 d = _mm512_maskz_loadu_ps(k, dy + i), yv = _mm512_maskz_loadu_ps(k, y + i);

		if (log)
			put(dx + i, _mm512_fnmadd_ps(exp512(yv), vd, d), k, nt);
		else
			put(dx + i, _mm512_mul_ps(yv, _mm512_sub_ps(d, vd)), k, nt);
	}
}

const nk_rowops_t nk_rowops_avx512 = {
	.max = nk_row_max_avx512,
	.exp_sum = nk_row_exp_sum_avx512,
	.softmax_row = softmax_row,
	.softmax_bwd_row = softmax_bwd_row,
};
