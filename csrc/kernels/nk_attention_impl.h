/* nk_attention_impl.h - attention internals shared by attention.c (driver, portable tile ops,
 * reference) and attention_avx512.c (AVX-512 tile ops), and the C test that compares the two.
 * Internal to csrc/kernels.
 *
 * The tiled path multiplies packed panels with the GEMM micro-kernel (nk_gemm_isa_t.sgemm, an
 * NK_GEMM_MR x NK_GEMM_NR tile): tiles of scores are NK_GEMM_NR (= 32) columns wide and row-major,
 * ld = NK_GEMM_NR.  "Column" tiles have keys as rows and queries as columns (the forward and the dq
 * pass), "row" tiles queries as rows and keys as columns (the dk/dv pass).
 */
#ifndef NK_ATTENTION_IMPL_H
#define NK_ATTENTION_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "nk.h"
#include "nk_gemm_impl.h"

#define NK_ATT_W NK_GEMM_NR /* tile width */

typedef struct {
	/* Forward online softmax over n key rows of S (n x W): per column c the running max m[c] and
	 * sum l[c] are updated, S becomes P = exp(S - m_new) and the W columns of Ot (dv rows x W) are
	 * rescaled by exp(m_old - m_new).  Columns without a visible key keep m = -inf, P = 0. */
	void (*fwd_cols)(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv);
	/* Backward, column tiles (n rows x W): S := P = exp(S - lse[c]) (0 where lse[c] = -inf),
	 * dP := P * (dP - dd[c]). */
	void (*bwd_cols)(float *S, float *dP, int64_t n, const float *lse, const float *dd);
	/* Backward, row tiles (n rows x W): the same with lse[r], dd[r] per row. */
	void (*bwd_rows)(float *S, float *dP, int64_t n, const float *lse, const float *dd);
	/* Rows of X (n x W) as GEMM A panels of MR rows by W: dst[t*MR*W + c*MR + i] = X[t*MR + i][c],
	 * 0 for rows >= n. */
	void (*tr_rows)(const float *X, int64_t n, float *dst);
	/* dst[c*ld_dst + r] = src[r*ld_src + c] for r < rows (<= 16), c < cols; lanes rows..lanes-1 of each
	 * dst row (lanes <= 16) get 0. */
	void (*tr)(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst, int64_t ld_dst, int lanes);
	/* The sgemm micro-kernel contract for tiles of at most 8 rows (the tail panel of a head dim of 64 =
	 * 4 x 14 + 8 costs 8/14 of a full one): a[p*MR + i] for i < 8, b[p*W + j]. */
	void (*ukr8)(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta, int m,
		     int n);
	/* bf16 products (the sbgemm micro-kernel): a tile X (n rows x W, ld W) as one B panel of k-pairs
	 * over its rows, dst[pp*W + c] = (bf16 X[2pp][c], bf16 X[2pp+1][c]) (high half 0 past row n). */
	void (*b_pairs)(const float *X, int64_t n, uint32_t *dst);
	/* ... and its rows as A panels of MR rows by k-pairs of its first nc columns: panel t at
	 * dst + t*MR*(W/2), dst[pp*MR + i] = (bf16 X[t*MR+i][2pp], bf16 X[t*MR+i][2pp+1]); 0 past row nr
	 * and column nc.  bf16 as nk_f32_to_bf16 (nearest even, NaN 0x7fc0). */
	void (*a_pairs)(const float *X, int64_t nr, int64_t nc, uint32_t *dst);
} nk_attops_t;

void nk_att_fwd_cols_ref(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv);
void nk_att_bwd_cols_ref(float *S, float *dP, int64_t n, const float *lse, const float *dd);
void nk_att_bwd_rows_ref(float *S, float *dP, int64_t n, const float *lse, const float *dd);
void nk_att_tr_rows_ref(const float *X, int64_t n, float *dst);
void nk_att_tr_rows_avx512(const float *X, int64_t n, float *dst);
void nk_att_ukr8_ref(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta, int m,
		     int n);
void nk_att_ukr8_avx512(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta,
			int m, int n);
void nk_att_tr_ref(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst, int64_t ld_dst, int lanes);
void nk_att_tr_avx512(const float *src, int64_t ld_src, int64_t rows, int64_t cols, float *dst, int64_t ld_dst,
		      int lanes);
void nk_att_fwd_cols_avx512(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv);
void nk_att_b_pairs_ref(const float *X, int64_t n, uint32_t *dst);
void nk_att_b_pairs_avx512(const float *X, int64_t n, uint32_t *dst);
void nk_att_a_pairs_ref(const float *X, int64_t nr, int64_t nc, uint32_t *dst);
void nk_att_a_pairs_avx512(const float *X, int64_t nr, int64_t nc, uint32_t *dst);
void nk_att_bwd_cols_avx512(float *S, float *dP, int64_t n, const float *lse, const float *dd);
void nk_att_bwd_rows_avx512(float *S, float *dP, int64_t n, const float *lse, const float *dd);

extern const nk_attops_t nk_attops_ref;
extern const nk_attops_t nk_attops_avx512; /* only where the dispatch context chose it */
extern const nk_attops_t nk_attops_avx2;   /* attention_avx2.c: the avx2 level's */
void nk_att_fwd_cols_avx2(float *S, int64_t n, float *m, float *l, float *Ot, int64_t dv);
void nk_att_bwd_cols_avx2(float *S, float *dP, int64_t n, const float *lse, const float *dd);
void nk_att_bwd_rows_avx2(float *S, float *dP, int64_t n, const float *lse, const float *dd);
void nk_att_ukr8_avx2(int64_t k, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta, int m,
		      int n);

/* The tiled forward / backward (f32, bf16, f16) with the given tables; nk_attention_run and
 * nk_attention_bwd_run pass the best ones (the tests also the portable ones).  Arguments as for
 * nk_attention_run; validated inside. */
int nk_attention_tiled(const nk_attention_args_t *a, const nk_gemm_isa_t *isa, const nk_attops_t *ops);
int nk_attention_bwd_tiled(const nk_attention_bwd_args_t *g, const nk_gemm_isa_t *isa, const nk_attops_t *ops);

#endif /* NK_ATTENTION_IMPL_H */
