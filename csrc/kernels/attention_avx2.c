/* attention_avx2.c - AVX2 + FMA tile operations of the tiled attention (nk_attention_impl.h): the online
 * softmax of the forward column tiles, the backward P / dP tiles, and the 8-row micro-kernel (the AVX2
 * GEMM kernel on at most 8 rows); the transposes and bf16 pair packers stay portable at this level.
 * Compiled with the AVX2 flags, called only through nk_attops_avx2 at the avx2 level.  A tile row is
 * NK_ATT_W = 32 floats, four ymm.  exp as attention_avx512.c: the Cephes core for the running-max
 * corrections (exp0) and a 2^n 2^r form for scores minus their max or lse, which are <= 0 (exp_neg);
 * both exactly 0 below -87.3 (exp(-inf) = 0 for masked scores), scalef done as two exponent-field
 * scalings (nk_avx2.h). */
#include <immintrin.h>
#include <math.h>

#include "nk_attention_impl.h"
#include "nk_avx2.h"

_Static_assert(NK_ATT_W == 32, "a tile row is four ymm");

static inline __attribute__((always_inline)) __m256 exp0(__m256 x)
{
	__m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_NLT_UQ); /* x >= lo or NaN */

	x = _mm256_min_ps(_mm256_set1_ps(88.37626f), x);
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500E-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
	p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	return _mm256_and_ps(keep, nk_v8_scale2(p, _mm256_max_ps(n, _mm256_set1_ps(-150.0f))));
}

static inline __attribute__((always_inline)) __m256 exp_neg(__m256 x)
{
	__m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_NLT_UQ); /* x >= lo or NaN */
	__m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504f));
	__m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_sub_ps(t, n);
	__m256 p = _mm256_set1_ps(1.5353583148680627e-4f);

	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3398966984823346e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.61843691766262e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.5503323674201965e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.4022647738456726e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.931471824645996e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	/* n below the masked range (-inf scores) is clamped so the exponent arithmetic stays defined */
	return _mm256_and_ps(keep, nk_v8_scale2(p, _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-150.0f)),
								 _mm256_set1_ps(128.0f))));
}

void nk_att_fwd_cols_avx2(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv)
{
	__m256 mx[4], sub[4], c[4], s[4];
	__m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);
	int changed = 0;

	for (int q = 0; q < 4; q++)
		mx[q] = _mm256_loadu_ps(m + 8 * q), s[q] = _mm256_setzero_ps();
	for (int64_t r = 0; r < n; r++)
		for (int q = 0; q < 4; q++)
			mx[q] = _mm256_max_ps(_mm256_loadu_ps(S + r * 32 + 8 * q), mx[q]);
	for (int q = 0; q < 4; q++) {
		/* columns with nothing visible subtract 0: exp(-inf - 0) = 0 */
		sub[q] = _mm256_blendv_ps(mx[q], _mm256_setzero_ps(), _mm256_cmp_ps(mx[q], ninf, _CMP_EQ_OQ));
		c[q] = exp0(_mm256_sub_ps(_mm256_loadu_ps(m + 8 * q), sub[q]));
	}
	for (int64_t r = 0; r < n; r++)
		for (int q = 0; q < 4; q++) {
			__m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(S + r * 32 + 8 * q), sub[q]));

			_mm256_storeu_ps(S + r * 32 + 8 * q, e);
			s[q] = _mm256_add_ps(s[q], e);
		}
	for (int q = 0; q < 4; q++) {
		_mm256_storeu_ps(l + 8 * q, _mm256_fmadd_ps(_mm256_loadu_ps(l + 8 * q), c[q], s[q]));
		_mm256_storeu_ps(m + 8 * q, mx[q]);
		changed |= _mm256_movemask_ps(_mm256_cmp_ps(c[q], one, _CMP_NEQ_UQ));
	}
	if (!changed)
		return;
	for (int64_t d = 0; d < dv; d++)
		for (int q = 0; q < 4; q++)
			_mm256_storeu_ps(Ot + d * 32 + 8 * q, _mm256_mul_ps(_mm256_loadu_ps(Ot + d * 32 + 8 * q), c[q]));
}

/* lse = -inf (nothing visible) subtracts +inf so that P = 0. */
static inline __m256 lse_sub(__m256 x)
{
	return _mm256_blendv_ps(x, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

void nk_att_bwd_cols_avx2(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	__m256 lq[4], dq[4];

	for (int q = 0; q < 4; q++)
		lq[q] = lse_sub(_mm256_loadu_ps(lse + 8 * q)), dq[q] = _mm256_loadu_ps(dd + 8 * q);
	for (int64_t r = 0; r < n; r++)
		for (int q = 0; q < 4; q++) {
			float *s = S + r * 32 + 8 * q, *dp = dP + r * 32 + 8 * q;
			__m256 p = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s), lq[q]));

			_mm256_storeu_ps(s, p);
			_mm256_storeu_ps(dp, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp), dq[q])));
		}
}

void nk_att_bwd_rows_avx2(float *S, float *dP, int64_t n, const float *lse, const float *dd)
{
	for (int64_t r = 0; r < n; r++) {
		__m256 l = lse_sub(_mm256_set1_ps(lse[r])), d = _mm256_set1_ps(dd[r]);

		for (int q = 0; q < 4; q++) {
			float *s = S + r * 32 + 8 * q, *dp = dP + r * 32 + 8 * q;
			__m256 p = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s), l));

			_mm256_storeu_ps(s, p);
			_mm256_storeu_ps(dp, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp), d)));
		}
	}
}

/* At most 8 rows of the sgemm contract (B panels W = NR wide): the AVX2 GEMM micro-kernel computes only
 * the rows it is given (6-row sub-tiles). */
void nk_att_ukr8_avx2(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta, int m,
		      int n)
{
	nk_sgemm_avx2_14x32(k, a, b, c, ldc, 1, alpha, beta, m, n);
}

const nk_attops_t nk_attops_avx2 = {
	.b_pairs = nk_att_b_pairs_ref,
	.a_pairs = nk_att_a_pairs_ref,
	.ukr8 = nk_att_ukr8_avx2,
	.tr = nk_att_tr_ref,
	.tr_rows = nk_att_tr_rows_ref,
	.fwd_cols = nk_att_fwd_cols_avx2,
	.bwd_cols = nk_att_bwd_cols_avx2,
	.bwd_rows = nk_att_bwd_rows_avx2,
};
