/* random_avx512.c - AVX-512 Philox4x32-10 for 16 consecutive counters at once, and dropout on dense
 * f32 built on it.  Bit-identical to the scalar nk_philox4x32_10 of nk_impl.h (same counters, same
 * words), so random.c may mix both freely.  Built with the AVX-512 flags; called only when
 * nk_cpu_avx512().
 */
#include <immintrin.h>

#include "nk_impl.h"

/* hi and lo 32-bit halves of a * m for 16 lanes. */
static inline __m512i mulhilo(__m512i a, __m512i m, __m512i *lo)
{
	*lo = _mm512_mullo_epi32(a, m);
	__m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32);
	__m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
	return _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, odd);
}

/* w[j][l] = word j of the Philox block for key and counter (ctr + l, 0), l < 16. */
void nk_philox16_avx512(uint64_t key, uint64_t ctr, uint32_t w[4][16])
{
	const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
	__m512i lo8 = _mm512_add_epi64(_mm512_set1_epi64((long long)ctr), lane);
	__m512i hi8 = _mm512_add_epi64(lo8, _mm512_set1_epi64(8));
	/* split the 16 64-bit counters into low (c0) and high (c1) words, lanes in order */
	const __m512i pick_lo = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i pick_hi = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	__m512i c0 = _mm512_permutex2var_epi32(lo8, pick_lo, hi8);
	__m512i c1 = _mm512_permutex2var_epi32(lo8, pick_hi, hi8);
	__m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
	__m512i k0 = _mm512_set1_epi32((int)(uint32_t)key), k1 = _mm512_set1_epi32((int)(uint32_t)(key >> 32));
	const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u), m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
	const __m512i w0 = _mm512_set1_epi32((int)0x9E3779B9u), w1 = _mm512_set1_epi32((int)0xBB67AE85u);
	for (int r = 0; r < 10; r++) {
		__m512i lo0, lo1;
		__m512i hi0 = mulhilo(c0, m0, &lo0);
		__m512i hi1 = mulhilo(c2, m1, &lo1);
		c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), k0);
		c1 = lo1;
		c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), k1);
		c3 = lo0;
		k0 = _mm512_add_epi32(k0, w0);
		k1 = _mm512_add_epi32(k1, w1);
	}
	_mm512_storeu_si512(w[0], c0);
	_mm512_storeu_si512(w[1], c1);
	_mm512_storeu_si512(w[2], c2);
	_mm512_storeu_si512(w[3], c3);
}

/* Dropout of dense f32 elements [i0, i1): keep iff the 53-bit uniform of element i (words 0, 1 of
 * counter offset + i) is >= p, i.e. iff (w1:w0) >> 11 >= thresh = ceil(p * 2^53). */
void nk_dropout_f32_avx512(uint64_t seed, uint64_t offset, uint64_t thresh, float scale, const float *x,
			   float *out, uint8_t *mask, int64_t i0, int64_t i1)
{
	uint32_t w[4][16];
	const __m512i th = _mm512_set1_epi64((long long)thresh);
	const __m512 vs = _mm512_set1_ps(scale);
	const __m512i pick_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i pick_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
	for (int64_t i = i0; i < i1; i += 16) {
		int64_t n = i1 - i;
		__mmask16 k = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
		nk_philox16_avx512(seed, offset + (uint64_t)i, w);
		__m512i a = _mm512_loadu_si512(w[0]), b = _mm512_loadu_si512(w[1]);
		/* interleave to 64-bit (w1 << 32 | w0) for lanes 0-7 and 8-15 */
		__m512i u_lo = _mm512_srli_epi64(_mm512_permutex2var_epi32(a, pick_lo, b), 11);
		__m512i u_hi = _mm512_srli_epi64(_mm512_permutex2var_epi32(a, pick_hi, b), 11);
		__mmask16 keep = (__mmask16)(_mm512_cmpge_epu64_mask(u_lo, th) |
					     ((unsigned)_mm512_cmpge_epu64_mask(u_hi, th) << 8));
		keep &= k;
		__m512 v = _mm512_maskz_loadu_ps(k, x + i);
		_mm512_mask_storeu_ps(out + i, k, _mm512_maskz_mul_ps(keep, v, vs));
		if (mask)
			_mm_mask_storeu_epi8(mask + i, k, _mm_maskz_set1_epi8(keep, 1));
	}
}

/* ---- transforms of 16 words ----------------------------------------------------------------------- */
/* Cephes logf for x in (0, 1]: frexp by getmant/getexp, degree-8 polynomial; < 2 ulp. */
static inline __m512 v_logf(__m512 x)
{
	__m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_p5_1, _MM_MANT_SIGN_src); /* [0.5, 1) */
	__m512 e = _mm512_add_ps(_mm512_getexp_ps(x), _mm512_set1_ps(1.0f));
	__mmask16 small = _mm512_cmp_ps_mask(m, _mm512_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
	e = _mm512_mask_sub_ps(e, small, e, _mm512_set1_ps(1.0f));
	m = _mm512_mask_add_ps(m, small, m, m);
	m = _mm512_sub_ps(m, _mm512_set1_ps(1.0f));
	__m512 z = _mm512_mul_ps(m, m);
	__m512 p = _mm512_set1_ps(7.0376836292E-2f);
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(-1.1514610310E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(1.1676998740E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(-1.2420140846E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(1.4249322787E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(-1.6668057665E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(2.0000714765E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(-2.4999993993E-1f));
	p = _mm512_fmadd_ps(p, m, _mm512_set1_ps(3.3333331174E-1f));
	__m512 y = _mm512_mul_ps(_mm512_mul_ps(p, z), m);
	y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
	y = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), y);
	return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(m, y));
}

/* cos(2 pi t) for t in [0, 1): exact reduction to a quarter turn, Cephes sin/cos polynomials. */
static inline __m512 v_cos2pi(__m512 t)
{
	const int rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
	__m512 r = _mm512_sub_ps(t, _mm512_roundscale_ps(t, rnd));          /* [-0.5, 0.5] */
	__m512 q = _mm512_roundscale_ps(_mm512_mul_ps(r, _mm512_set1_ps(4.0f)), rnd);
	__m512 f = _mm512_fnmadd_ps(q, _mm512_set1_ps(0.25f), r);           /* [-1/8, 1/8], exact */
	__m512 x = _mm512_mul_ps(f, _mm512_set1_ps(6.28318530717958648f));  /* [-pi/4, pi/4] */
	__m512 x2 = _mm512_mul_ps(x, x);
	__m512 s = _mm512_set1_ps(-1.9515295891E-4f);
	s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(8.3321608736E-3f));
	s = _mm512_fmadd_ps(s, x2, _mm512_set1_ps(-1.6666654611E-1f));
	s = _mm512_fmadd_ps(_mm512_mul_ps(s, x2), x, x);
	__m512 c = _mm512_set1_ps(2.443315711809948E-5f);
	c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(-1.388731625493765E-3f));
	c = _mm512_fmadd_ps(c, x2, _mm512_set1_ps(4.166664568298827E-2f));
	c = _mm512_fmadd_ps(_mm512_mul_ps(c, x2), x2, _mm512_fnmadd_ps(x2, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
	/* quarter turns q (mod 4): cos, -sin, -cos, sin */
	__m512i qi = _mm512_and_si512(_mm512_cvtps_epi32(q), _mm512_set1_epi32(3));
	__mmask16 use_sin = _mm512_test_epi32_mask(qi, _mm512_set1_epi32(1));
	__mmask16 neg = _mm512_cmpeq_epi32_mask(qi, _mm512_set1_epi32(1)) | _mm512_cmpeq_epi32_mask(qi, _mm512_set1_epi32(2));
	__m512 v = _mm512_mask_blend_ps(use_sin, c, s);
	return _mm512_mask_sub_ps(v, neg, _mm512_setzero_ps(), v);
}

/* out[l] = mean + std * sqrt(-2 log(1 - u(w0))) cos(2 pi u(w1)) in float, u(w) = (w >> 8) 2^-24. */
void nk_normal16_f32_avx512(const uint32_t w[4][16], float mean, float std, float out[16])
{
	const __m512 scale = _mm512_set1_ps(0x1p-24f);
	__m512 u0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(w[0]), 8)), scale);
	__m512 u1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(w[1]), 8)), scale);
	__m512 rad = _mm512_sqrt_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0f), v_logf(_mm512_sub_ps(_mm512_set1_ps(1.0f), u0))));
	__m512 z = _mm512_mul_ps(rad, v_cos2pi(u1));
	_mm512_storeu_ps(out, _mm512_add_ps(_mm512_set1_ps(mean), _mm512_mul_ps(_mm512_set1_ps(std), z)));
}

/* out[l] = (float)(a + (b - a) * u(w0)) in double, exactly as the scalar uniform (callers still step
 * results that reached b). */
void nk_uniform16_f32_avx512(const uint32_t w[4][16], double a, double b, float out[16])
{
	const __m512d va = _mm512_set1_pd(a), vr = _mm512_set1_pd(b - a);
	__m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_loadu_si512(w[0]), 8)),
				 _mm512_set1_ps(0x1p-24f));
	__m512d lo = _mm512_add_pd(va, _mm512_mul_pd(vr, _mm512_cvtps_pd(_mm512_castps512_ps256(u))));
	__m512d hi = _mm512_add_pd(va, _mm512_mul_pd(vr, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)))));
	_mm256_storeu_ps(out, _mm512_cvtpd_ps(lo));
	_mm256_storeu_ps(out + 8, _mm512_cvtpd_ps(hi));
}
