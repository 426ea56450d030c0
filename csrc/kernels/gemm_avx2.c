/* gemm_avx2.c - AVX2 + FMA GEMM micro-kernels (compiled with -mavx2 -mfma; called only through
 * nk_gemm_isa_avx2, the dispatch context's table at the avx2 level: x86 CPUs without AVX-512, or
 * NEURON_KERNELS=avx2).
 *
 * The micro-kernel contract is the AVX-512 one (docs/kernels.md): an MR x NR = 14 x 32 f32 tile over
 * the same packed panels, so the driver, the packers and the panel layouts are shared by every level.
 * AVX2 has 16 ymm registers, too few for the 14 x 32 tile's 56 accumulators, so a tile is computed as
 * sub-tiles of up to 6 rows by 16 columns (12 accumulators, 2 B vectors and a broadcast: the classic
 * Haswell 6 x 16 kernel), each over the whole k: for each 16-column half of B, rows 0-5, 6-11 and
 * 12-13.  Each element is still the fma chain over p = 0..k-1 in order, then alpha * acc (+ beta * C by
 * fma), so the results are bit for bit those of the AVX-512 micro-kernels.  f64 (14 x 16 doubles) is
 * the same with 4-lane vectors: 6 x 8 sub-tiles.
 */
#include <immintrin.h>
#include <string.h>

#include "nk_impl.h"
#include "nk_gemm_impl.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR
#define DNR NK_DGEMM_NR
#define RB 6 /* rows per sub-tile */

#define SUBROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* Lanes j < n (0..8) of an 8-lane mask; of a 4-lane double mask. */
static inline __m256i mask8(int n)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __m256i mask4d(int n)
{
	return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}

/* ---- f32: 6 x 16 sub-tiles of the 14 x 32 tile ------------------------------------------------- */

/* A sub-tile row (16 columns, the first n written, unit column stride) = alpha*acc + beta*old, where old
 * is C (bias NULL) or the bias row; beta == 0 reads neither. */
static inline __attribute__((always_inline)) void store_row(float *c, const float *bias, __m256 x0, __m256 x1,
							     __m256 va, __m256 vb, float beta, __m256i m0, __m256i m1)
{
	const float *old = bias ? bias : c;

	x0 = _mm256_mul_ps(va, x0);
	x1 = _mm256_mul_ps(va, x1);
	if (beta != 0) {
		x0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(old, m0), x0);
		x1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(old + 8, m1), x1);
	}
	_mm256_maskstore_ps(c, m0, x0);
	_mm256_maskstore_ps(c + 8, m1, x1);
}

/* Rows i0 .. i0+R-1 of the tile (R <= RB) by the columns j0 .. j0+n-1 (n <= 16; H: n <= 8, one vector):
 * row i's A value at k-step p is the float at byte address a + i*ars + p*aks, B's row p at b + p*ldb.
 * The rows at or past m are not stored.  bias: C's old value is bias[j] (unit column stride only). */
static inline __attribute__((always_inline)) void sgemm_sub(const int R, const bool H, int i0, int j0, int64_t k,
							    const char *a, int64_t ars, int64_t aks, const float *b,
							    int64_t ldb, float *c, int64_t rs_c, int64_t cs_c,
							    float alpha, float beta, int m, int n, const float *bias)
{
#define DECL(i) __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps();
	SUBROWS(DECL)
#undef DECL
	a += i0 * ars;
	b += j0;
#define FMA_ROW(i)                                                            \
	if (i < R) {                                                          \
		__m256 ai = _mm256_broadcast_ss((const float *)(a + i * ars)); \
		c##i##_0 = _mm256_fmadd_ps(ai, b0, c##i##_0);                 \
		if (!H)                                                       \
			c##i##_1 = _mm256_fmadd_ps(ai, b1, c##i##_1);         \
	}
	for (int64_t p = 0; p < k; p++) {
		__m256 b0 = _mm256_loadu_ps(b), b1 = H ? b0 : _mm256_loadu_ps(b + 8);

		_mm_prefetch((const char *)(b + 8 * ldb), _MM_HINT_T0);
		SUBROWS(FMA_ROW)
		a += aks;
		b += ldb;
	}
#undef FMA_ROW
	c += i0 * rs_c + j0 * cs_c;
	if (cs_c == 1) {
		__m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
		__m256i m0 = mask8(n), m1 = mask8(H ? 0 : n - 8);

		if (bias)
			bias += j0;
#define STORE(i)                                                                              \
	if (i < R && i0 + i < m)                                                              \
		store_row(c + i * rs_c, bias, c##i##_0, c##i##_1, va, vb, beta, m0, m1);
		SUBROWS(STORE)
#undef STORE
		return;
	}
	/* a non-unit column stride: the AVX-512 kernels' scalar store (v = alpha*acc, then + beta*C) */
	float t[RB * 16] __attribute__((aligned(32)));
#define SPILL(i)                                          \
	if (i < R) {                                      \
		_mm256_store_ps(t + i * 16, c##i##_0);    \
		_mm256_store_ps(t + i * 16 + 8, c##i##_1); \
	}
	SUBROWS(SPILL)
#undef SPILL
	for (int i = 0; i < R && i0 + i < m; i++)
		for (int j = 0; j < n; j++) {
			float *q = c + i * rs_c + j * cs_c;
			float v = alpha * t[i * 16 + j];

			*q = beta == 0 ? v : v + beta * *q;
		}
}

/* One sub-tile with its row count known at compile time (1..RB), half width or full. */
#define SUB_CASE(r)                                                                                        \
	case r:                                                                                            \
		if (nn > 8)                                                                                \
			sgemm_sub(r, false, i0, j0, k, a, ars, aks, b, ldb, c, rs_c, cs_c, alpha, beta, m, nn, bias); \
		else                                                                                       \
			sgemm_sub(r, true, i0, j0, k, a, ars, aks, b, ldb, c, rs_c, cs_c, alpha, beta, m, nn, bias); \
		break;

/* The m x n corner (m <= MR, n <= NR) of the tile: each 16-column half of B against the row groups. */
static void sgemm_tile(int64_t k, const char *a, int64_t ars, int64_t aks, const float *b, int64_t ldb, float *c,
		       int64_t rs_c, int64_t cs_c, float alpha, float beta, int m, int n, const float *bias)
{
	if (m > MR)
		m = MR;
	for (int j0 = 0; j0 < n; j0 += 16) {
		int nn = n - j0 < 16 ? n - j0 : 16;

		for (int i0 = 0; i0 < m; i0 += RB)
			switch (m - i0 < RB ? m - i0 : RB) {
				SUB_CASE(1) SUB_CASE(2) SUB_CASE(3) SUB_CASE(4) SUB_CASE(5) SUB_CASE(6)
			}
	}
}
#undef SUB_CASE

void nk_sgemm_avx2_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			 float alpha, float beta, int m, int n)
{
	sgemm_tile(k, (const char *)a, 4, 4 * MR, b, NR, c, rs_c, cs_c, alpha, beta, m, n, NULL);
}

/* B rows read in place (row p at b + p*ldb, any alignment). */
void nk_sgemm_avx2_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			   int64_t cs_c, float alpha, float beta, int m, int n)
{
	sgemm_tile(k, (const char *)a, 4, 4 * MR, b, ldb, c, rs_c, cs_c, alpha, beta, m, n, NULL);
}

/* C's old value a bias row: C = alpha*A B + beta*bias[j] (unit column stride), C not read. */
void nk_sgemm_avx2_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
			      float beta, const float *bias, int m, int n)
{
	sgemm_tile(k, (const char *)a, 4, 4 * MR, b, NR, c, rs_c, 1, alpha, beta, m, n, bias);
}

/* Row-major A read in place (row i at a + i*lda floats; rows m..MR-1 not read), unit column stride C,
 * bias as in sgemm_bias or NULL. */
void nk_sgemm_avx2_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
			   float alpha, float beta, const float *bias, int m, int n)
{
	sgemm_tile(k, (const char *)a, 4 * lda, 4, b, NR, c, rs_c, 1, alpha, beta, m, n, bias);
}

/* ---- f64: 6 x 8 sub-tiles of the 14 x 16 tile ----------------------------------------------------- */

static inline __attribute__((always_inline)) void dgemm_sub(const int R, const bool H, int i0, int j0, int64_t k,
							    const double *a, const double *b, double *c, int64_t rs_c,
							    int64_t cs_c, double alpha, double beta, int m, int n)
{
#define DECL(i) __m256d c##i##_0 = _mm256_setzero_pd(), c##i##_1 = _mm256_setzero_pd();
	SUBROWS(DECL)
#undef DECL
	a += i0;
	b += j0;
#define FMA_ROW(i)                                                    \
	if (i < R) {                                                  \
		__m256d ai = _mm256_broadcast_sd(a + i);               \
		c##i##_0 = _mm256_fmadd_pd(ai, b0, c##i##_0);         \
		if (!H)                                               \
			c##i##_1 = _mm256_fmadd_pd(ai, b1, c##i##_1); \
	}
	for (int64_t p = 0; p < k; p++) {
		__m256d b0 = _mm256_loadu_pd(b), b1 = H ? b0 : _mm256_loadu_pd(b + 4);

		SUBROWS(FMA_ROW)
		a += NK_DGEMM_MR;
		b += DNR;
	}
#undef FMA_ROW
	c += i0 * rs_c + j0 * cs_c;
	if (cs_c == 1) {
		__m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
		__m256i m0 = mask4d(n), m1 = mask4d(H ? 0 : n - 4);
#define STORE(i)                                                                                 \
	if (i < R && i0 + i < m) {                                                               \
		double *q = c + i * rs_c;                                                        \
		__m256d x0 = _mm256_mul_pd(va, c##i##_0), x1 = _mm256_mul_pd(va, c##i##_1);    \
		if (beta != 0) {                                                                 \
			x0 = _mm256_fmadd_pd(vb, _mm256_maskload_pd(q, m0), x0);                 \
			x1 = _mm256_fmadd_pd(vb, _mm256_maskload_pd(q + 4, m1), x1);             \
		}                                                                                \
		_mm256_maskstore_pd(q, m0, x0);                                                  \
		_mm256_maskstore_pd(q + 4, m1, x1);                                              \
	}
		SUBROWS(STORE)
#undef STORE
		return;
	}
	double t[RB * 8] __attribute__((aligned(32)));
#define SPILL(i)                                         \
	if (i < R) {                                     \
		_mm256_store_pd(t + i * 8, c##i##_0);     \
		_mm256_store_pd(t + i * 8 + 4, c##i##_1); \
	}
	SUBROWS(SPILL)
#undef SPILL
	for (int i = 0; i < R && i0 + i < m; i++)
		for (int j = 0; j < n; j++) {
			double *q = c + i * rs_c + j * cs_c;
			double v = alpha * t[i * 8 + j];

			*q = beta == 0 ? v : v + beta * *q;
		}
}

#define DSUB_CASE(r)                                                                                \
	case r:                                                                                     \
		if (nn > 4)                                                                         \
			dgemm_sub(r, false, i0, j0, k, a, b, c, rs_c, cs_c, alpha, beta, m, nn);    \
		else                                                                                \
			dgemm_sub(r, true, i0, j0, k, a, b, c, rs_c, cs_c, alpha, beta, m, nn);     \
		break;

void nk_dgemm_avx2_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			 double alpha, double beta, int m, int n)
{
	if (m > NK_DGEMM_MR)
		m = NK_DGEMM_MR;
	for (int j0 = 0; j0 < n; j0 += 8) {
		int nn = n - j0 < 8 ? n - j0 : 8;

		for (int i0 = 0; i0 < m; i0 += RB)
			switch (m - i0 < RB ? m - i0 : RB) {
				DSUB_CASE(1) DSUB_CASE(2) DSUB_CASE(3) DSUB_CASE(4) DSUB_CASE(5) DSUB_CASE(6)
			}
	}
}
#undef DSUB_CASE

/* ---- GEMV dot ------------------------------------------------------------------------------------- */

/* f32 dot of contiguous vectors: 8 x 8-lane FMA sums, reduced pairwise. */
float nk_dot_f32_avx2(const float *x, const float *y, int64_t n)
{
	__m256 s[8];
	int64_t i = 0;

	for (int q = 0; q < 8; q++)
		s[q] = _mm256_setzero_ps();
	for (; i + 64 <= n; i += 64)
		for (int q = 0; q < 8; q++)
			s[q] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * q), _mm256_loadu_ps(y + i + 8 * q), s[q]);
	for (; i < n; i += 8) {
		__m256i k = mask8((int)(n - i < 8 ? n - i : 8));

		s[0] = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, k), _mm256_maskload_ps(y + i, k), s[0]);
	}
	__m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])),
				 _mm256_add_ps(_mm256_add_ps(s[4], s[5]), _mm256_add_ps(s[6], s[7])));
	__m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));

	h = _mm_add_ps(h, _mm_movehl_ps(h, h));
	h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
	return _mm_cvtss_f32(h);
}

/* The portable packers (gemm_ref.c) serve this level: packing is O(n^2) of an O(n^3) call, and the
 * vectorizer gives them the baseline vector code. */
const nk_gemm_isa_t nk_gemm_isa_avx2 = {
	.name = "avx2",
	.sgemm = nk_sgemm_avx2_14x32,
	.sgemm_b = nk_sgemm_avx2_14x32_b,
	.sgemm_bias = nk_sgemm_avx2_14x32_bias,
	.sgemm_a = nk_sgemm_avx2_14x32_a,
	.dgemm = nk_dgemm_avx2_14x16,
	.pack_a = nk_gemm_pack_a_ref,
	.pack_b = nk_gemm_pack_b_ref,
	.pack_a_pairs = nk_gemm_pack_a_pairs_ref,
	.pack_b_pairs = nk_gemm_pack_b_pairs_ref,
	.dot_f32 = nk_dot_f32_avx2,
};
