/* gemm_avx512.c - AVX-512 GEMM micro-kernels and packers (compiled with the AVX-512 flags; called only
 * through nk_gemm_isa_avx512 after gemm.c has checked the CPU).
 *
 * nk_sgemm_avx512_14x32: 14 x 32 f32 tile in 28 zmm accumulators; per k one A column (14 broadcasts)
 * times one B row (2 zmm loads), 28 FMAs.  nk_sbgemm_avx512_14x32: the same tile over bf16 k-pairs with
 * vdpbf16ps (two multiply-adds per lane per instruction, f32 accumulation).  Contract: docs/kernels.md.
 */
#include <immintrin.h>
#include <string.h>

#include "nk_impl.h"
#include "nk_gemm_impl.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

static inline __mmask16 mask_n(int n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* C row (16 + 16 columns) = alpha*acc + beta*C, masked to the first n columns. */
static inline __attribute__((always_inline)) void store_row(float *c, __m512 x0, __m512 x1, __m512 va, __m512 vb,
							     float beta, __mmask16 m0, __mmask16 m1)
{
	x0 = _mm512_mul_ps(va, x0);
	x1 = _mm512_mul_ps(va, x1);
	if (beta != 0) {
		x0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), x0);
		x1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), x1);
	}
	_mm512_mask_storeu_ps(c, m0, x0);
	_mm512_mask_storeu_ps(c + 16, m1, x1);
}

/* Scalar store of an MR x NR tile for a C with a non-unit column stride. */
static void store_tile_strided(const float *t, float *c, int64_t rs_c, int64_t cs_c, float alpha, float beta,
			       int m, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float *p = c + i * rs_c + j * cs_c;
			float v = alpha * t[i * NR + j];

			*p = beta == 0 ? v : v + beta * *p;
		}
}

/* The kernel bodies, instantiated per row count R (1..MR) and half width H (n <= 16: one zmm column of
 * B and C): an edge tile computes only its own rows and columns (M = 128 leaves a 2-row panel, which
 * the full 14 x 32 tile would compute at the cost of 14 rows).  Rows past R and the second zmm column
 * under H compile away. */
#define DECL_R(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
#define STORE_R(i)                                                                 \
	if (i < R && i < m)                                                        \
		store_row(c + i * rs_c, c##i##_0, c##i##_1, va, vb, beta, m0, m1);
#define SPILL_R(i)                                          \
	if (i < R) {                                        \
		_mm512_store_ps(t + i * NR, c##i##_0);      \
		_mm512_store_ps(t + i * NR + 16, c##i##_1); \
	}
#define PREFETCH_R(i)                                                      \
	if (i < R && i < m) {                                              \
		_mm_prefetch((const char *)(c + i * rs_c), _MM_HINT_T0);      \
		_mm_prefetch((const char *)(c + i * rs_c + 31), _MM_HINT_T0); \
	}
#define STORE_TILE_R()                                                                \
	do {                                                                          \
		if (cs_c == 1) {                                                      \
			__m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta); \
			__mmask16 m0 = mask_n(n), m1 = H ? 0 : mask_n(n - 16);        \
			ROWS(STORE_R)                                                 \
		} else {                                                              \
			float t[MR * NR] __attribute__((aligned(64)));                \
			ROWS(SPILL_R)                                                 \
			store_tile_strided(t, c, rs_c, cs_c, alpha, beta, m, n);      \
		}                                                                     \
	} while (0)

/* C rows (unit column stride) = alpha*acc + beta*bias[j] (a row vector for every row): the store of the
 * bias micro-kernel, the same fma as beta*C over a C that holds the bias (bit for bit). */
#define STORE_BIAS_R(i)                                                                             \
	if (i < R && i < m) {                                                                       \
		_mm512_mask_storeu_ps(c + i * rs_c, m0, _mm512_fmadd_ps(vb, bv0, _mm512_mul_ps(va, c##i##_0))); \
		if (!H)                                                                             \
			_mm512_mask_storeu_ps(c + i * rs_c + 16, m1,                                \
					      _mm512_fmadd_ps(vb, bv1, _mm512_mul_ps(va, c##i##_1)));       \
	}

/* a: row i of the A panel at k-step p is the float at byte address a + i*ars + p*aks (packed: ars 4,
 * aks 4*MR; row-major A read in place: ars its row stride in bytes, aks 4).  U: the k loop unrolled U
 * times (1 or 2; the same operations in the same order, so the same bits). */
static inline __attribute__((always_inline)) void sgemm_body(const int R, const bool H, const int U, int64_t k, const char *a,
							     int64_t ars, int64_t aks, const float *b, int64_t ldb,
							     float *c, int64_t rs_c, int64_t cs_c, float alpha,
							     float beta, int m, int n, const float *bias,
							     const char *pf, int64_t pfs)
{
	ROWS(DECL_R)
	if (cs_c == 1) {
		ROWS(PREFETCH_R)
	}
#define FMA_ROW(i)                                                       \
	if (i < R) {                                                     \
		__m512 ai = _mm512_set1_ps(*(const float *)(a + i * ars)); \
		c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);            \
		if (!H)                                                  \
			c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);    \
	}
#define SG_KSTEP()                                                                           \
	{                                                                                    \
		__m512 b0 = _mm512_loadu_ps(b), b1 = H ? b0 : _mm512_loadu_ps(b + 16);       \
                                                                                             \
		_mm_prefetch((const char *)(b + 16 * ldb), _MM_HINT_T0);                     \
		_mm_prefetch((const char *)(b + 16 * ldb + 16), _MM_HINT_T0);                \
		if (pf && !(p & 3)) { /* the caller's next A panel, one run of MR floats per 4 k */ \
			_mm_prefetch(pf, _MM_HINT_T1);                                       \
			_mm_prefetch(pf + 4 * (MR - 1), _MM_HINT_T1);                        \
			pf += pfs;                                                           \
		}                                                                            \
		ROWS(FMA_ROW)                                                                \
		a += aks;                                                                    \
		b += ldb;                                                                    \
	}
	if (U == 2) {
		_Pragma("GCC unroll 2")
		for (int64_t p = 0; p < k; p++)
			SG_KSTEP()
	} else {
		for (int64_t p = 0; p < k; p++)
			SG_KSTEP()
	}
#undef SG_KSTEP
#undef FMA_ROW
	if (bias) {
		__m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
		__mmask16 m0 = mask_n(n), m1 = H ? 0 : mask_n(n - 16);
		__m512 bv0 = _mm512_maskz_loadu_ps(m0, bias), bv1 = H ? bv0 : _mm512_maskz_loadu_ps(m1, bias + 16);

		ROWS(STORE_BIAS_R)
		return;
	}
	STORE_TILE_R();
}

/* The bf16 pair loop of the bf16 micro-kernels: kp k-pairs of R rows (one broadcast pair of a each)
 * against the 32 (H: 16) columns of the packed B panel, accumulated in c<i>_0 / c<i>_1.  The pair of
 * row i at k-pair p is the 32-bit word at byte address a + i*ars + p*aks: packed A has ars = 4, aks =
 * 4*MR; A read in place (row-major bf16, K contiguous) has ars = its row stride in bytes, aks = 4. */
typedef uint32_t nk_u32_unaligned __attribute__((aligned(2), may_alias));
#define SB_DP_ROW(i)                                                                                     \
	if (i < R) {                                                                                     \
		__m512bh ai = (__m512bh)_mm512_set1_epi32((int)*(const nk_u32_unaligned *)(a + i * ars)); \
		c##i##_0 = _mm512_dpbf16_ps(c##i##_0, ai, b0);                                           \
		if (!H)                                                                                  \
			c##i##_1 = _mm512_dpbf16_ps(c##i##_1, ai, b1);                                   \
	}
#define SB_KLOOP()                                                                         \
	for (int64_t p = 0; p < kp; p++) {                                                 \
		__m512bh b0 = (__m512bh)_mm512_load_si512(b);                              \
		__m512bh b1 = H ? b0 : (__m512bh)_mm512_load_si512(b + 16);                \
                                                                                           \
		_mm_prefetch((const char *)(b + 16 * NR), _MM_HINT_T0);                    \
		_mm_prefetch((const char *)(b + 16 * NR + 16), _MM_HINT_T0);               \
		ROWS(SB_DP_ROW)                                                            \
		a += aks;                                                                  \
		b += NR;                                                                   \
	}

static inline __attribute__((always_inline)) void sbgemm_body(const int R, const bool H, int64_t kp,
							      const char *a, int64_t ars, int64_t aks,
							      const uint32_t *b, float *c,
							      int64_t rs_c, int64_t cs_c, float alpha, float beta,
							      int m, int n)
{
	ROWS(DECL_R)
	if (cs_c == 1) {
		ROWS(PREFETCH_R)
	}
	SB_KLOOP()
	STORE_TILE_R();
}

/* bf16 C row (16 + 16 columns) = bf16(alpha * (x + acc) + beta * C) (acc may be NULL), rounded to
 * nearest even, NaN -> 0x7fc0 (as nk_f32_to_bf16), masked to the first n columns. */
static inline __attribute__((always_inline)) __m256i f32_to_bf16x16(__m512 f)
{
	__m512i u = _mm512_castps_si512(f);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);

	r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
	return _mm512_cvtepi32_epi16(r);
}

static inline __attribute__((always_inline)) __m512 bf16x16_to_f32(__m256i h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void store_row_bf16(uint16_t *c, const float *acc, __m512 x0,
								  __m512 x1, __m512 va, __m512 vb, float beta,
								  __mmask16 m0, __mmask16 m1)
{
	if (acc) {
		x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, acc));
		x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, acc + 16));
	}
	x0 = _mm512_mul_ps(va, x0);
	x1 = _mm512_mul_ps(va, x1);
	if (beta != 0) { /* multiply, then add (no fma): the same rounding as the per-task driver */
		x0 = _mm512_add_ps(x0, _mm512_mul_ps(vb, bf16x16_to_f32(_mm256_maskz_loadu_epi16(m0, c))));
		x1 = _mm512_add_ps(x1, _mm512_mul_ps(vb, bf16x16_to_f32(_mm256_maskz_loadu_epi16(m1, c + 16))));
	}
	_mm256_mask_storeu_epi16(c, m0, f32_to_bf16x16(x0));
	_mm256_mask_storeu_epi16(c + 16, m1, f32_to_bf16x16(x1));
}

#define STORE_BF16_R(i)                                                                              \
	if (i < R && i < m)                                                                          \
		store_row_bf16(c + i * rs_c, acc ? acc + i * ld_acc : NULL, c##i##_0, c##i##_1, va, vb, beta, \
			       m0, m1);
#define PREFETCH_BF16_R(i)                                                \
	if (i < R && i < m)                                               \
		_mm_prefetch((const char *)(c + i * rs_c), _MM_HINT_T0);

static inline __attribute__((always_inline)) void sbgemm_bf16c_body(const int R, const bool H, int64_t kp,
								    const char *a, int64_t ars, int64_t aks,
								    const uint32_t *b,
								    const float *acc, int64_t ld_acc, uint16_t *c,
								    int64_t rs_c, float alpha, float beta, int m,
								    int n)
{
	ROWS(DECL_R)
	if (beta != 0) {
		ROWS(PREFETCH_BF16_R)
	}
	SB_KLOOP()
	{
		__m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
		__mmask16 m0 = mask_n(n), m1 = H ? 0 : mask_n(n - 16);

		ROWS(STORE_BF16_R)
	}
}

/* One case of the row-count switch: the body for R = r rows, full (32) or half (16) column tile. */
#define TILE_CASE(r, body, ...)                                  \
	case r:                                                  \
		if (n > 16)                                      \
			body(r, false, __VA_ARGS__);             \
		else                                             \
			body(r, true, __VA_ARGS__);              \
		return;
#define SG_CASE(r) TILE_CASE(r, sgemm_body, 1, k, (const char *)a, 4, 4 * MR, b, ldb, c, rs_c, cs_c, alpha, beta, m, n, NULL, NULL, 0)
#define SGP_CASE(r) TILE_CASE(r, sgemm_body, 1, k, (const char *)a, 4, 4 * MR, b, ldb, c, rs_c, cs_c, alpha, beta, m, n, NULL, pf, pfs)
#define SGB_CASE(r) TILE_CASE(r, sgemm_body, 1, k, (const char *)a, 4, 4 * MR, b, NR, c, rs_c, 1, alpha, beta, m, n, bias, NULL, 0)
#define SGA_CASE(r) TILE_CASE(r, sgemm_body, 1, k, (const char *)a, 4 * lda, 4, b, NR, c, rs_c, 1, alpha, beta, m, n, bias, NULL, 0)
/* the same with the k loop unrolled twice (the _k2 kernels) */
#define SG2_CASE(r) TILE_CASE(r, sgemm_body, 2, k, (const char *)a, 4, 4 * MR, b, ldb, c, rs_c, cs_c, alpha, beta, m, n, NULL, NULL, 0)
#define SGP2_CASE(r) TILE_CASE(r, sgemm_body, 2, k, (const char *)a, 4, 4 * MR, b, ldb, c, rs_c, cs_c, alpha, beta, m, n, NULL, pf, pfs)
#define SGB2_CASE(r) TILE_CASE(r, sgemm_body, 2, k, (const char *)a, 4, 4 * MR, b, NR, c, rs_c, 1, alpha, beta, m, n, bias, NULL, 0)
#define SGA2_CASE(r) TILE_CASE(r, sgemm_body, 2, k, (const char *)a, 4 * lda, 4, b, NR, c, rs_c, 1, alpha, beta, m, n, bias, NULL, 0)
#define SB_CASE(r) TILE_CASE(r, sbgemm_body, kp, ap, ars, aks, b, c, rs_c, cs_c, alpha, beta, m, n)
#define SBC_CASE(r) TILE_CASE(r, sbgemm_bf16c_body, kp, ap, ars, aks, b, acc, ld_acc, c, rs_c, alpha, beta, m, n)
#define ALL_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
/* A micro-kernel entry's switch on the tile's row count: one case per count below MR, MR otherwise. */
#define ROW_SWITCH(X)              \
	switch (m) {               \
	ALL_CASES(X)               \
	default:                   \
		X(MR)              \
	}

void nk_sbgemm_avx512_14x32_bf16c(int64_t kp, const uint32_t *a, const uint32_t *b, const float *acc,
				  int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n)
{
	const char *ap = (const char *)a;
	const int64_t ars = 4, aks = 4 * MR;

	ROW_SWITCH(SBC_CASE);
}

/* The same with A read in place: row i's pairs at a + i*lda (bytes), the rows m..MR-1 not read. */
void nk_sbgemm_avx512_14x32_bf16c_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, const float *acc,
				    int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n)
{
	const char *ap = (const char *)a;
	const int64_t ars = lda, aks = 4;

	ROW_SWITCH(SBC_CASE);
}

void nk_sbgemm_avx512_14x32_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c, int64_t rs_c,
			      int64_t cs_c, float alpha, float beta, int m, int n)
{
	const char *ap = (const char *)a;
	const int64_t ars = lda, aks = 4;

	ROW_SWITCH(SB_CASE);
}

void nk_sgemm_avx512_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			   float alpha, float beta, int m, int n)
{
	const int64_t ldb = NR;

	ROW_SWITCH(SG_CASE);
}

/* The same with unit column stride and C's old value a bias row: C = alpha*A B + beta*bias[j], C not read. */
void nk_sgemm_avx512_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
				float beta, const float *bias, int m, int n)
{
	ROW_SWITCH(SGB_CASE);
}

/* A read in place (row i at a + i*lda floats, the rows m..MR-1 not read), unit column stride C, bias as
 * in sgemm_bias or NULL: the same products in the same order as over a packed panel. */
void nk_sgemm_avx512_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
			     float alpha, float beta, const float *bias, int m, int n)
{
	ROW_SWITCH(SGA_CASE);
}

/* The same over B rows read in place (row p at b + p*ldb, unaligned): row-major f32 B needs no packing. */
void nk_sgemm_avx512_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			     int64_t cs_c, float alpha, float beta, int m, int n)
{
	ROW_SWITCH(SG_CASE);
}

/* sgemm_b that also prefetches the caller's next A panel, spread over the k loop (docs/kernels.md). */
void nk_sgemm_avx512_14x32_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs)
{
	if (!pf) {
		ROW_SWITCH(SG_CASE);
	}
	ROW_SWITCH(SGP_CASE);
}

/* The f32 kernels above with the k loop unrolled twice, for Intel cores (two 512-bit FMA ports: the
 * loop's own instructions and the B prefetches weigh more than on Zen 4's double-pumped units; chosen by
 * the dispatch context, dispatch.c).  The same products in the same order: bitwise the same C. */
void nk_sgemm_avx512_14x32_k2(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			      float alpha, float beta, int m, int n)
{
	const int64_t ldb = NR;

	ROW_SWITCH(SG2_CASE);
}

void nk_sgemm_avx512_14x32_k2_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
				   float beta, const float *bias, int m, int n)
{
	ROW_SWITCH(SGB2_CASE);
}

void nk_sgemm_avx512_14x32_k2_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
				float alpha, float beta, const float *bias, int m, int n)
{
	ROW_SWITCH(SGA2_CASE);
}

void nk_sgemm_avx512_14x32_k2_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				int64_t cs_c, float alpha, float beta, int m, int n)
{
	ROW_SWITCH(SG2_CASE);
}

void nk_sgemm_avx512_14x32_k2_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				   int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs)
{
	if (!pf) {
		ROW_SWITCH(SG2_CASE);
	}
	ROW_SWITCH(SGP2_CASE);
}

void nk_sbgemm_avx512_14x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t rs_c,
			    int64_t cs_c, float alpha, float beta, int m, int n)
{
	const char *ap = (const char *)a;
	const int64_t ars = 4, aks = 4 * MR;

	ROW_SWITCH(SB_CASE);
}

/* ---- f64: 14 x 16 ----------------------------------------------------------------------------- */

static inline __mmask8 mask8_n(int n)
{
	return n >= 8 ? (__mmask8)0xff : n <= 0 ? (__mmask8)0 : (__mmask8)((1u << n) - 1);
}

static inline void store_row_d(double *c, __m512d x0, __m512d x1, __m512d va, __m512d vb, double beta, __mmask8 m0,
			       __mmask8 m1)
{
	x0 = _mm512_mul_pd(va, x0);
	x1 = _mm512_mul_pd(va, x1);
	if (beta != 0) {
		x0 = _mm512_fmadd_pd(vb, _mm512_maskz_loadu_pd(m0, c), x0);
		x1 = _mm512_fmadd_pd(vb, _mm512_maskz_loadu_pd(m1, c + 8), x1);
	}
	_mm512_mask_storeu_pd(c, m0, x0);
	_mm512_mask_storeu_pd(c + 8, m1, x1);
}

#define DDECL(i) __m512d d##i##_0 = _mm512_setzero_pd(), d##i##_1 = _mm512_setzero_pd();
#define DSTORE(i) \
	if (i < m) \
		store_row_d(c + i * rs_c, d##i##_0, d##i##_1, va, vb, beta, m0, m1);
#define DSPILL(i)                                  \
	_mm512_store_pd(t + i * 16, d##i##_0);      \
	_mm512_store_pd(t + i * 16 + 8, d##i##_1);
#define DFMA_ROW(i)                                             \
	{                                                       \
		__m512d ai = _mm512_set1_pd(a[i]);              \
		d##i##_0 = _mm512_fmadd_pd(ai, b0, d##i##_0);   \
		d##i##_1 = _mm512_fmadd_pd(ai, b1, d##i##_1);   \
	}

void nk_dgemm_avx512_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			   double alpha, double beta, int m, int n)
{
	ROWS(DDECL)
	for (int64_t p = 0; p < k; p++) {
		__m512d b0 = _mm512_load_pd(b), b1 = _mm512_load_pd(b + 8);

		_mm_prefetch((const char *)(b + 16 * 16), _MM_HINT_T0);
		_mm_prefetch((const char *)(b + 16 * 16 + 8), _MM_HINT_T0);
		ROWS(DFMA_ROW)
		a += 14;
		b += 16;
	}
	if (cs_c == 1) {
		__m512d va = _mm512_set1_pd(alpha), vb = _mm512_set1_pd(beta);
		__mmask8 m0 = mask8_n(n), m1 = mask8_n(n - 8);

		ROWS(DSTORE)
	} else {
		double t[14 * 16] __attribute__((aligned(64)));

		ROWS(DSPILL)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++) {
				double *q = c + i * rs_c + j * cs_c, v = alpha * t[i * 16 + j];

				*q = beta == 0 ? v : v + beta * *q;
			}
	}
}

/* ---- packing ------------------------------------------------------------------------------------ */

/* 16 elements of dtype (f32, bf16, f16) at src[off..], lanes outside mk zero, as f32. */
static inline __m512 load16(const void *src, int dtype, int64_t off, __mmask16 mk)
{
	if (dtype == NK_F32)
		return _mm512_maskz_loadu_ps(mk, (const float *)src + off);
	__m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)src + off);

	if (dtype == NK_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline const void *at_elem(const void *src, int dtype, int64_t off)
{
	return (const char *)src + off * (dtype == NK_F32 ? 4 : 2);
}

/* In-register transpose of a 16 x 16 f32 block: r[c] becomes column c (unpack, unpack, 2 lane shuffles). */
static inline void transpose16(__m512 r[16])
{
	__m512 t[16];

	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		__m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
		__m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);

		r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
		r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
		r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
		r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
	}
	/* r[4i + k]: rows 4i..4i+3 of columns k, k+4, k+8, k+12 in its four 128-bit lanes */
	for (int i = 0; i < 4; i++) {
		t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
		t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
		t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
		t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
	}
	for (int i = 0; i < 4; i++) {
		r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
		r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
		r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
		r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
	}
}

#define RAW32 (-1) /* "dtype" of 32-bit words copied as they are (bf16 pairs) */

/* 16 elements of row (f32, bf16, f16 converted to f32; RAW32 words as they are) at byte address p. */
static inline __m512 load_row16(const char *p, int kind, __mmask16 mk)
{
	if (kind == RAW32)
		return _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(mk, p));
	return load16(p, kind, 0, mk);
}

/* dst[p*ld_dst + i] = element p of source row i for p < len, i < 16 (rows >= `rows` read as zero), writing
 * the lanes of store_mask: rows are read 16 elements at a time and transposed in registers.  Source row
 * i starts at src + i*row_bytes. */
static void transpose_into(const char *src, int kind, int64_t row_bytes, int rows, int64_t len, float *dst,
			   int64_t ld_dst, __mmask16 store_mask)
{
	int64_t es = kind == RAW32 || kind == NK_F32 ? 4 : 2;

	for (int64_t p0 = 0; p0 < len; p0 += 16) {
		int l = len - p0 < 16 ? (int)(len - p0) : 16;
		__mmask16 mk = mask_n(l);
		__m512 r[16];

		for (int i = 0; i < 16; i++)
			r[i] = i < rows ? load_row16(src + i * row_bytes + p0 * es, kind, mk) : _mm512_setzero_ps();
		transpose16(r);
		for (int c = 0; c < l; c++)
			_mm512_mask_storeu_ps(dst + (p0 + c) * ld_dst, store_mask, r[c]);
	}
}

void nk_gemm_pack_a_avx512(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k, float *dst)
{
	if (rs == 1) {
		__mmask16 mk = mask_n(m);

		for (int64_t p = 0; p < k; p++)
			_mm512_mask_storeu_ps(dst + p * MR, 0x3fff, load16(src, dtype, p * cs, mk));
		return;
	}
	if (cs != 1) {
		nk_gemm_pack_a_ref(src, dtype, rs, cs, m, k, dst);
		return;
	}
	transpose_into(src, dtype, rs * (int64_t)nk_fp_elem_size(dtype), m, k, dst, MR, 0x3fff);
}

void nk_gemm_pack_b_avx512(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n, float *dst)
{
	if (cs != 1 && rs != 1) {
		nk_gemm_pack_b_ref(src, dtype, rs, cs, k, n, dst);
		return;
	}
	if (cs == 1) {
		/* row-major B: up to 4 panels per sweep down the rows (128 contiguous columns per row, so
		 * several lines per row are in flight; rows are far apart), prefetching 16 rows ahead */
		for (int64_t q0 = 0; q0 * NR < n; q0 += 4) {
			int nq = (int)((n - q0 * NR + NR - 1) / NR < 4 ? (n - q0 * NR + NR - 1) / NR : 4);
			int64_t w = n - q0 * NR < 4 * NR ? n - q0 * NR : 4 * NR;
			__mmask16 mk[8];

			for (int h = 0; h < 8; h++)
				mk[h] = mask_n((int)(w - 16 * h));
			for (int64_t p = 0; p < k; p++) {
				if (p + 16 < k)
					for (int l = 0; l < nq * 2; l++)
						_mm_prefetch((const char *)at_elem(src, dtype, (p + 16) * rs + q0 * NR) + 64 * l,
							     _MM_HINT_T0);
				for (int qq = 0; qq < nq; qq++) {
					float *d = dst + (q0 + qq) * k * NR + p * NR;
					int64_t o = p * rs + (q0 + qq) * NR;

					_mm512_store_ps(d, load16(src, dtype, o, mk[2 * qq]));
					_mm512_store_ps(d + 16, load16(src, dtype, o + 16, mk[2 * qq + 1]));
				}
			}
		}
		return;
	}
	for (int64_t q = 0; q * NR < n; q++) {
		float *d = dst + q * k * NR;
		int nr = n - q * NR < NR ? (int)(n - q * NR) : NR;

		/* rs == 1: column j of the panel is contiguous in the source; two groups of 16 columns */
		for (int grp = 0; grp < 2; grp++) {
			int64_t es = (int64_t)nk_fp_elem_size(dtype);

			transpose_into((const char *)src + (q * NR + grp * 16) * cs * es, dtype, cs * es,
				       nr - grp * 16, k, d + grp * 16, NR, 0xffff);
		}
	}
}

/* bf16 pairs of rows contiguous in k: dst[pp*ld_dst + i] = pair pp of row i (one 32-bit word), for the
 * k/2 full pairs by the transpose above and the odd tail pair (x, 0) by hand; rows >= `rows` zero. */
static void transpose_pairs(const uint16_t *src, int64_t ld_src, int rows, int64_t k, uint32_t *dst, int ld_dst,
			    __mmask16 store_mask)
{
	int64_t kp = k / 2;

	transpose_into((const char *)src, RAW32, ld_src * 2, rows, kp, (float *)dst, ld_dst, store_mask);
	if (k & 1)
		for (int i = 0; i < 16; i++)
			if (store_mask >> i & 1)
				dst[kp * ld_dst + i] = i < rows ? src[i * ld_src + 2 * kp] : 0;
}

/* (lo, hi) bf16 rows of 16 -> 16 pairs. */
static inline __m512i pairs16(const uint16_t *lo, const uint16_t *hi, __mmask16 mk)
{
	__m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, lo));

	if (!hi)
		return l;
	return _mm512_or_si512(l, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, hi)), 16));
}

void nk_gemm_pack_a_pairs_avx512(const void *src, int64_t rs, int64_t cs, int m, int64_t k, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	if (rs == 1) {
		__mmask16 mk = mask_n(m);

		for (int64_t pp = 0; pp < kp; pp++) {
			const uint16_t *r0 = s + 2 * pp * cs, *r1 = 2 * pp + 1 < k ? r0 + cs : NULL;

			_mm512_mask_storeu_epi32(dst + pp * MR, 0x3fff, pairs16(r0, r1, mk));
		}
		return;
	}
	if (cs != 1) {
		nk_gemm_pack_a_pairs_ref(src, rs, cs, m, k, dst);
		return;
	}
	transpose_pairs(s, rs, m, k, dst, MR, 0x3fff);
}

void nk_gemm_pack_b_pairs_avx512(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	if (cs != 1 && rs != 1) {
		nk_gemm_pack_b_pairs_ref(src, rs, cs, k, n, dst);
		return;
	}
	if (cs == 1) {
		/* row-major B: up to 4 panels per sweep down the row pairs (as nk_gemm_pack_b_avx512); the
		 * 32 columns of a panel interleaved in two unpacks (pairs of columns 0-3, 8-11, .. and
		 * 4-7, 12-15, .. per 128-bit lane) and put in order by two qword permutes */
		const __m512i lo_idx = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
		const __m512i hi_idx = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);

		for (int64_t q0 = 0; q0 * NR < n; q0 += 4) {
			int nq = (int)((n - q0 * NR + NR - 1) / NR < 4 ? (n - q0 * NR + NR - 1) / NR : 4);
			int64_t w = n - q0 * NR < 4 * NR ? n - q0 * NR : 4 * NR;
			__mmask32 mk[4];

			for (int h = 0; h < 4; h++) {
				int64_t c = w - 32 * h;

				mk[h] = c >= 32 ? (__mmask32)0xffffffffu : c <= 0 ? 0 : (__mmask32)((1u << c) - 1);
			}
			for (int64_t pp = 0; pp < kp; pp++) {
				const uint16_t *r0 = s + 2 * pp * rs + q0 * NR;
				const uint16_t *r1 = 2 * pp + 1 < k ? r0 + rs : NULL;

				if (2 * pp + 17 < k)
					for (int l = 0; l < nq; l++) {
						_mm_prefetch((const char *)(r0 + 16 * rs) + 64 * l, _MM_HINT_T0);
						_mm_prefetch((const char *)(r0 + 17 * rs) + 64 * l, _MM_HINT_T0);
					}
				for (int qq = 0; qq < nq; qq++) {
					uint32_t *d = dst + (q0 + qq) * kp * NR + pp * NR;
					__m512i x0 = _mm512_maskz_loadu_epi16(mk[qq], r0 + qq * NR);
					__m512i x1 = r1 ? _mm512_maskz_loadu_epi16(mk[qq], r1 + qq * NR) : _mm512_setzero_si512();
					__m512i lo = _mm512_unpacklo_epi16(x0, x1), hi = _mm512_unpackhi_epi16(x0, x1);

					_mm512_store_si512(d, _mm512_permutex2var_epi64(lo, lo_idx, hi));
					_mm512_store_si512(d + 16, _mm512_permutex2var_epi64(lo, hi_idx, hi));
				}
			}
		}
		return;
	}
	for (int64_t q = 0; q * NR < n; q++) {
		uint32_t *d = dst + q * kp * NR;
		int nr = n - q * NR < NR ? (int)(n - q * NR) : NR;

		transpose_pairs(s + q * NR * cs, cs, nr, k, d, NR, 0xffff);
		transpose_pairs(s + (q * NR + 16) * cs, cs, nr - 16, k, d + 16, NR, 0xffff);
	}
}

/* ---- GEMV dot products -------------------------------------------------------------------------- */

float nk_dot_bf16_avx512(const uint16_t *x, const uint16_t *y, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		s0 = _mm512_dpbf16_ps(s0, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
		s1 = _mm512_dpbf16_ps(s1, (__m512bh)_mm512_loadu_si512(x + i + 32),
				      (__m512bh)_mm512_loadu_si512(y + i + 32));
	}
	for (; i < n; i += 32) {
		__mmask32 k = n - i >= 32 ? 0xffffffffu : (__mmask32)((1u << (n - i)) - 1);

		s0 = _mm512_dpbf16_ps(s0, (__m512bh)_mm512_maskz_loadu_epi16(k, x + i),
				      (__m512bh)_mm512_maskz_loadu_epi16(k, y + i));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float nk_dot_f16_avx512(const uint16_t *x, const uint16_t *y, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0;
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		s0 = _mm512_fmadd_ps(load16(x + i, NK_F16, 0, 0xffff), load16(y + i, NK_F16, 0, 0xffff), s0);
		s1 = _mm512_fmadd_ps(load16(x + i + 16, NK_F16, 0, 0xffff), load16(y + i + 16, NK_F16, 0, 0xffff), s1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = mask_n((int)(n - i < 16 ? n - i : 16));

		s0 = _mm512_fmadd_ps(load16(x + i, NK_F16, 0, k), load16(y + i, NK_F16, 0, k), s0);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* One column of F.linear's x @ W^T (a row of W, streamed from DRAM): four independent 16-lane sums, on
 * the hardware prefetcher alone.  The GEMV takes one column at a time, so each core reads one
 * sequential stream: a kernel taking four columns at once (four streams per core, x loaded once) was
 * 10-30 % slower from DRAM whenever this VM's memory was busy (4096 x 4096: 18.5-26.7 against 20.6-35.4
 * GB/s, alternating in one process; the same when it was quiet) and no faster from cache; the software
 * prefetch 1 KiB ahead this loop had made no difference from DRAM and cost 2-5 % from cache. */
float nk_dot_f32_avx512(const float *x, const float *y, int64_t n)
{
	__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
	int64_t i = 0;

	for (; i + 64 <= n; i += 64) {
		s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), s0);
		s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), s1);
		s2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), s2);
		s3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), s3);
	}
	for (; i < n; i += 16) {
		__mmask16 k = mask_n((int)(n - i < 16 ? n - i : 16));

		s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i), s0);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

const nk_gemm_isa_t nk_gemm_isa_avx512 = {
	.name = "avx512",
	.kc = NK_GEMM_KC,
	.nc = NK_GEMM_NC,
	.sgemm = nk_sgemm_avx512_14x32,
	.sgemm_b = nk_sgemm_avx512_14x32_b,
	.sgemm_b_pf = nk_sgemm_avx512_14x32_b_pf,
	.sgemm_bias = nk_sgemm_avx512_14x32_bias,
	.sgemm_a = nk_sgemm_avx512_14x32_a,
	.sbgemm = nk_sbgemm_avx512_14x32,
	.sbgemm_bf16c = nk_sbgemm_avx512_14x32_bf16c,
	.sbgemm_a = nk_sbgemm_avx512_14x32_a,
	.sbgemm_bf16c_a = nk_sbgemm_avx512_14x32_bf16c_a,
	.dgemm = nk_dgemm_avx512_14x16,
	.pack_a = nk_gemm_pack_a_avx512,
	.pack_b = nk_gemm_pack_b_avx512,
	.pack_a_pairs = nk_gemm_pack_a_pairs_avx512,
	.pack_b_pairs = nk_gemm_pack_b_pairs_avx512,
	.dot_bf16 = nk_dot_bf16_avx512,
	.dot_f16 = nk_dot_f16_avx512,
	.dot_f32 = nk_dot_f32_avx512,
};
