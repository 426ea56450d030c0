/* attention_avx512.c - AVX-512 tile operations of the tiled attention (nk_attention_impl.h);
 * compiled with the AVX-512 flags and called only through nk_attops_avx512 after the CPU check.
 * A tile row is NK_ATT_W = 32 floats, two zmm.  exp: the Cephes reduction and polynomial of
 * softmax_avx512.c (exp0, for the running-max corrections) and a cheaper 2^n 2^r form for the
 * scores minus their max or lse, which are <= 0 (exp_neg); both give exactly 0 for x < -87.3
 * (exp(-inf) = 0 for masked scores, no clamp needed below). */
#include <immintrin.h>
#include <math.h>

#include "nk_attention_impl.h"
#include "nk_avx512.h"

_Static_assert(NK_ATT_W == 32, "a tile row is two zmm");

static inline __m512 exp0(__m512 x)
{
	__mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ); /* x >= lo or NaN */
	__m512 n, p;

	x = _mm512_min_ps(_mm512_set1_ps(88.37626f), x); /* below -87.3 (and -inf, which gives NaN here) is
							      * zeroed by the mask */
	p = nk_v_exp_core(x, &n, 1);
	return _mm512_maskz_scalef_ps(keep, p, n);
}

/* exp(x) for x <= 0 (and -inf, NaN) in fewer operations than exp0, for scores minus their column max
 * (forward) or their row's lse (backward): t = x log2(e), 2^t = 2^n 2^r with n = round(t), |r| <= 1/2,
 * 2^r by a degree-6 polynomial fitted for relative error (1.0e-7 evaluated in f32).  Rounding t costs
 * a relative error of about |x| 6e-8 (1e-6 only for values below 1e-8, negligible in sums of ~1). */
static inline __m512 exp_neg(__m512 x)
{
	__mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ); /* x >= lo or NaN */
	__m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), n, r, p;

	n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm512_sub_ps(t, n);
	p = _mm512_set1_ps(1.5353583148680627e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3398966984823346e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.61843691766262e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5503323674201965e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4022647738456726e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931471824645996e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_maskz_scalef_ps(keep, p, n);
}

void nk_att_fwd_cols_avx512(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv)
{
	__m512 mx0 = _mm512_loadu_ps(m), mx1 = _mm512_loadu_ps(m + 16), s0 = _mm512_setzero_ps(), s1 = s0;
	__m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f), sub0, sub1, c0, c1;
	__mmask16 k0, k1;

	for (int64_t r = 0; r < n; r++) {
		mx0 = _mm512_max_ps(_mm512_loadu_ps(S + r * 32), mx0);
		mx1 = _mm512_max_ps(_mm512_loadu_ps(S + r * 32 + 16), mx1);
	}
	/* columns with nothing visible subtract 0: exp(-inf - 0) = 0 */
	sub0 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx0, ninf, _CMP_EQ_OQ), mx0, _mm512_setzero_ps());
	sub1 = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx1, ninf, _CMP_EQ_OQ), mx1, _mm512_setzero_ps());
	c0 = exp0(_mm512_sub_ps(_mm512_loadu_ps(m), sub0));
	c1 = exp0(_mm512_sub_ps(_mm512_loadu_ps(m + 16), sub1));
	for (int64_t r = 0; r < n; r++) {
		__m512 e0 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(S + r * 32), sub0));
		__m512 e1 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(S + r * 32 + 16), sub1));

		_mm512_storeu_ps(S + r * 32, e0);
		_mm512_storeu_ps(S + r * 32 + 16, e1);
		s0 = _mm512_add_ps(s0, e0);
		s1 = _mm512_add_ps(s1, e1);
	}
	_mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), c0, s0));
	_mm512_storeu_ps(l + 16, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16), c1, s1));
	_mm512_storeu_ps(m, mx0);
	_mm512_storeu_ps(m + 16, mx1);
	k0 = _mm512_cmp_ps_mask(c0, one, _CMP_NEQ_UQ);
	k1 = _mm512_cmp_ps_mask(c1, one, _CMP_NEQ_UQ);
	if (!(k0 | k1))
		return;
	for (int64_t d = 0; d < dv; d++) {
		_mm512_storeu_ps(Ot + d * 32, _mm512_mul_ps(_mm512_loadu_ps(Ot + d * 32), c0));
		_mm512_storeu_ps(Ot + d * 32 + 16, _mm512_mul_ps(_mm512_loadu_ps(Ot + d * 32 + 16), c1));
	}
}

/* lse = -inf (nothing visible) subtracts +inf so that P = 0. */
static inline __m512 lse_sub(__m512 x)
{
	return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), x,
				    _mm512_set1_ps(INFINITY));
}

void nk_att_bwd_cols_avx512(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	__m512 l0 = lse_sub(_mm512_loadu_ps(lse)), l1 = lse_sub(_mm512_loadu_ps(lse + 16));
	__m512 d0 = _mm512_loadu_ps(dd), d1 = _mm512_loadu_ps(dd + 16);

	for (int64_t r = 0; r < n; r++) {
		float *s = S + r * 32, *dp = dP + r * 32;
		__m512 p0 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s), l0));
		__m512 p1 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + 16), l1));

		_mm512_storeu_ps(s, p0);
		_mm512_storeu_ps(s + 16, p1);
		_mm512_storeu_ps(dp, _mm512_mul_ps(p0, _mm512_sub_ps(_mm512_loadu_ps(dp), d0)));
		_mm512_storeu_ps(dp + 16, _mm512_mul_ps(p1, _mm512_sub_ps(_mm512_loadu_ps(dp + 16), d1)));
	}
}

void nk_att_bwd_rows_avx512(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	for (int64_t r = 0; r < n; r++) {
		float *s = S + r * 32, *dp = dP + r * 32;
		__m512 l = lse_sub(_mm512_set1_ps(lse[r])), d = _mm512_set1_ps(dd[r]);
		__m512 p0 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s), l));
		__m512 p1 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + 16), l));

		_mm512_storeu_ps(s, p0);
		_mm512_storeu_ps(s + 16, p1);
		_mm512_storeu_ps(dp, _mm512_mul_ps(p0, _mm512_sub_ps(_mm512_loadu_ps(dp), d)));
		_mm512_storeu_ps(dp + 16, _mm512_mul_ps(p1, _mm512_sub_ps(_mm512_loadu_ps(dp + 16), d)));
	}
}

/* 16 x 16 transpose of r[0..15] in place. */
static inline __attribute__((always_inline)) void tr16(__m512 r[16])
{
	__m512 t[16];

	_Pragma("GCC unroll 16")
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
	}
	_Pragma("GCC unroll 16")
	for (int i = 0; i < 16; i += 4) {
		r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
		r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
		r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
	}
	/* r[4g + k] now holds, in each 128-bit lane L, elements (row 4L'.., col) of block g; combine lanes */
	_Pragma("GCC unroll 16")
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
		t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
		t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
		t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
	}
	_Pragma("GCC unroll 16")
	for (int i = 0; i < 4; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
		r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
		r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
		r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
	}
}

void nk_att_tr_rows_avx512(const float *X, int64_t n, float *dst)
{
	for (int64_t t = 0; t * NK_GEMM_MR < n; t++)
		for (int h = 0; h < 32; h += 16) {
			__m512 r[16];

			_Pragma("GCC unroll 16")
			for (int i = 0; i < 16; i++)
				r[i] = i < NK_GEMM_MR && t * NK_GEMM_MR + i < n
					       ? _mm512_loadu_ps(X + (t * NK_GEMM_MR + i) * 32 + h)
					       : _mm512_setzero_ps();
			tr16(r);
			_Pragma("GCC unroll 16")
			for (int c = 0; c < 16; c++)
				_mm512_mask_storeu_ps(dst + t * NK_GEMM_MR * 32 + (h + c) * NK_GEMM_MR,
						      (__mmask16)((1u << NK_GEMM_MR) - 1), r[c]);
		}
}

void nk_att_tr_avx512(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst, int64_t ld_dst,
		      int lanes)
{
	__mmask16 sm = (__mmask16)((1u << lanes) - 1);

	for (int64_t c0 = 0; c0 < cols; c0 += 16) {
		int64_t nc = cols - c0 < 16 ? cols - c0 : 16;
		__mmask16 lm = (__mmask16)((1u << nc) - 1);
		__m512 r[16];

		_Pragma("GCC unroll 16")
		for (int i = 0; i < 16; i++)
			r[i] = i < rows ? _mm512_maskz_loadu_ps(lm, src + i * ld_src + c0) : _mm512_setzero_ps();
		tr16(r);
		_Pragma("GCC unroll 16")
		for (int c = 0; c < 16; c++)
			if (c < nc)
				_mm512_mask_storeu_ps(dst + (c0 + c) * ld_dst, sm, r[c]);
	}
}

#define ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

void nk_att_ukr8_avx512(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta,
			int m, int n)
{
	__mmask16 m0 = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
	__mmask16 m1 = n >= 32 ? 0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
	__m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#define DECL8(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
	ROWS8(DECL8)
#undef DECL8
	for (int64_t p = 0; p < k; p++) {
		__m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#define FMA8(i)                                                          \
	{                                                                \
		__m512 ai = _mm512_set1_ps(a[i]);                        \
		c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);            \
		c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);            \
	}
		ROWS8(FMA8)
#undef FMA8
		a += NK_GEMM_MR;
		b += 32;
	}
#define STORE8(i)                                                                                  \
	if (i < m) {                                                                               \
		float *ci = c + i * ldc;                                                           \
		__m512 x0 = _mm512_mul_ps(va, c##i##_0), x1 = _mm512_mul_ps(va, c##i##_1);          \
		if (beta != 0) {                                                                   \
			x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), x0);               \
			x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), x1);          \
		}                                                                                  \
		_mm512_mask_storeu_ps(ci, m0, x0);                                                 \
		_mm512_mask_storeu_ps(ci + 16, m1, x1);                                            \
	}
	ROWS8(STORE8)
#undef STORE8
}

/* f32 -> bf16 bits in the low half of each 32-bit lane: nearest even, NaN 0x7fc0 (nk_f32_to_bf16). */
static inline __m512i bf16_bits(__m512 f)
{
	__m512i u = _mm512_castps_si512(f);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);

	return _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
}

void nk_att_b_pairs_avx512(const float *X, int64_t n, uint32_t *dst)
{
	for (int64_t pp = 0; 2 * pp < n; pp++) {
		const float *lo = X + 2 * pp * 32, *hi = lo + 32;

		for (int c = 0; c < 32; c += 16) {
			__m512i w = bf16_bits(_mm512_loadu_ps(lo + c));

			if (2 * pp + 1 < n)
				w = _mm512_or_si512(w, _mm512_slli_epi32(bf16_bits(_mm512_loadu_ps(hi + c)), 16));
			_mm512_storeu_si512(dst + pp * 32 + c, w);
		}
	}
}

void nk_att_a_pairs_avx512(const float *X, int64_t nr, int64_t nc, uint32_t *dst)
{
	__mmask16 m0 = nc >= 16 ? 0xffff : nc <= 0 ? 0 : (__mmask16)((1u << nc) - 1);
	__mmask16 m1 = nc >= 32 ? 0xffff : nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1);

	for (int64_t t = 0; t * NK_GEMM_MR < nr; t++) {
		__m512 r[16];

		/* row i: its 32 columns as 16 words of pairs (the 32-bit lanes narrowed to 16 bits) */
		_Pragma("GCC unroll 16")
		for (int i = 0; i < 16; i++) {
			int64_t row = t * NK_GEMM_MR + i;

			if (i < NK_GEMM_MR && row < nr) {
				__m512i b0 = bf16_bits(_mm512_maskz_loadu_ps(m0, X + row * 32));
				__m512i b1 = bf16_bits(_mm512_maskz_loadu_ps(m1, X + row * 32 + 16));

				r[i] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(b0)),
									      _mm512_cvtepi32_epi16(b1), 1));
			} else {
				r[i] = _mm512_setzero_ps();
			}
		}
		tr16(r);
		_Pragma("GCC unroll 16")
		for (int pp = 0; pp < 16; pp++)
			_mm512_mask_storeu_ps(dst + t * NK_GEMM_MR * 16 + pp * NK_GEMM_MR, (__mmask16)((1u << NK_GEMM_MR) - 1),
					      r[pp]);
	}
}

const nk_attops_t nk_attops_avx512 = {
	.b_pairs = nk_att_b_pairs_avx512,
	.a_pairs = nk_att_a_pairs_avx512,
	.ukr8 = nk_att_ukr8_avx512,
	.tr = nk_att_tr_avx512,
	.tr_rows = nk_att_tr_rows_avx512,
	.fwd_cols = nk_att_fwd_cols_avx512,
	.bwd_cols = nk_att_bwd_cols_avx512,
	.bwd_rows = nk_att_bwd_rows_avx512,
};
