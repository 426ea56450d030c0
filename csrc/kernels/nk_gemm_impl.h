/* nk_gemm_impl.h - GEMM internals shared by gemm.c (driver, packing, reference) and the ISA files
 * (gemm_avx512.c: micro-kernels).  The micro-kernel contract is written out in docs/kernels.md.
 * Internal to csrc/kernels (and the C tests, which call the micro-kernels directly).
 */
#ifndef NK_GEMM_IMPL_H
#define NK_GEMM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "nk.h"

/* Register block: a micro-kernel computes an MR x NR tile of C. */
#define NK_GEMM_MR 14
#define NK_GEMM_NR 32
/* Cache blocks (Zen 4: 32 KiB L1d, 1 MiB L2 per core, 32 MiB shared L3).  An MR x KC panel of A
 * stays in L1 while the KC x NR panels of B stream past it from L2/L3 (docs/kernels.md).  KC and NC
 * are the defaults and the upper bounds of the f32 blocking a context chooses (nk_gemm_isa_t.kc/nc). */
#ifndef NK_GEMM_KC
#define NK_GEMM_KC 512      /* k per block, f32 panels */
#endif
#ifndef NK_GEMM_KC_BF16
#define NK_GEMM_KC_BF16 1024 /* k per block, bf16 pair panels (the A panel is 28 KiB: L2, see docs/kernels.md) */
#endif
#ifndef NK_GEMM_NC
#define NK_GEMM_NC 2048     /* columns of B per block (the packed B block, 4 MiB, lives in L3) */
#endif
#ifndef NK_GEMM_NC_ACC
#define NK_GEMM_NC_ACC 512  /* columns per block when C is bf16/f16 (accumulated in f32) */
#endif
#ifndef NK_GEMM_MC
#define NK_GEMM_MC 448      /* rows per f32 accumulation block when C is bf16/f16 (multiple of MR) */
#endif

/* f64: a 14 x 16 tile (28 zmm of 8 doubles), blocks of 256 k x 1024 columns (the 2 MiB B block). */
#define NK_DGEMM_MR 14
#define NK_DGEMM_NR 16
#define NK_DGEMM_KC 256
#define NK_DGEMM_NC 1024

/* f32 micro-kernel.  a: packed MR x k panel, a[p*MR + i]; b: packed k x NR panel, b[p*NR + j]; both
 * 64-byte aligned and zero-padded.  For i < m, j < n (m <= MR, n <= NR):
 *   C[i*rs_c + j*cs_c] = alpha * sum_p a[p*MR + i] * b[p*NR + j] + beta * C[i*rs_c + j*cs_c],
 * where beta == 0 does not read C.  Nothing outside the m x n tile is touched.  k may be 0. */
typedef void (*nk_sgemm_ukr_t)(int64_t k, const float *a, const float *b, float *c, int64_t rs_c,
			       int64_t cs_c, float alpha, float beta, int m, int n);
/* f32 micro-kernel over B read in place: the sgemm contract with b[p*ldb + j] (any alignment; the NR
 * columns j < NR of each of the k rows must be readable, whatever n is). */
typedef void (*nk_sgemm_b_ukr_t)(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				 int64_t cs_c, float alpha, float beta, int m, int n);
/* f32 micro-kernel with a bias row as C's old value (unit column stride): for i < m, j < n
 *   C[i*rs_c + j] = alpha * sum_p a[p*MR + i] * b[p*NR + j] + beta * bias[j],
 * rounded as the sgemm contract over a C holding the bias (fma of beta and it); C is not read. */
typedef void (*nk_sgemm_bias_ukr_t)(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
				    float beta, const float *bias, int m, int n);
/* f32 micro-kernel over row-major A read in place: row i's element p at a[i*lda + p] (rows m..MR-1 not
 * read), unit column stride C, bias as in the bias kernel or NULL (then beta * C as sgemm). */
typedef void (*nk_sgemm_a_ukr_t)(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
				 float alpha, float beta, const float *bias, int m, int n);
/* bf16 micro-kernel, same contract over kp k-pairs: a[pp*MR + i] holds the bf16 pair
 * (A[i][2pp], A[i][2pp+1]) in its low and high half, b[pp*NR + j] holds (B[2pp][j], B[2pp+1][j]);
 * products are summed in f32 (vdpbf16ps). */
typedef void (*nk_sbgemm_ukr_t)(int64_t kp, const uint32_t *a, const uint32_t *b, float *c,
				int64_t rs_c, int64_t cs_c, float alpha, float beta, int m, int n);
/* bf16 micro-kernel with a bf16 C (row stride rs_c, unit column stride): the sbgemm sum over kp pairs
 * plus acc[i*ld_acc + j] (f32 partial sums of earlier k, or NULL for none), then
 *   C[i*rs_c + j] = bf16(alpha * (sum + acc) + beta * C[i*rs_c + j])
 * rounded to nearest even (NaN -> 0x7fc0), beta == 0 not reading C; nothing outside m x n touched. */
typedef void (*nk_sbgemm_bf16c_ukr_t)(int64_t kp, const uint32_t *a, const uint32_t *b, const float *acc,
				      int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m,
				      int n);
/* The two bf16 micro-kernels with A read in place instead of packed (row-major bf16 A, K even): the
 * pair (A[i][2pp], A[i][2pp+1]) is the 32-bit word at byte address (const char *)a + i*lda + 4*pp (any
 * 2-byte alignment); rows m..MR-1 are not read.  Otherwise the sbgemm / sbgemm_bf16c contracts. */
typedef void (*nk_sbgemm_a_ukr_t)(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c,
				  int64_t rs_c, int64_t cs_c, float alpha, float beta, int m, int n);
typedef void (*nk_sbgemm_bf16c_a_ukr_t)(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b,
					const float *acc, int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha,
					float beta, int m, int n);
/* sgemm_b plus a prefetch of the caller's next A panel spread over the k loop: before k-steps 0, 4, 8, ...
 * the run of MR floats at pf (the lines of pf and pf + 4*(MR-1) bytes) is prefetched into L2, then pf
 * advances pfs bytes (pf NULL: no prefetch).  For a column-major A whose next panel is a run of MR
 * floats per k at a large stride, which the hardware prefetchers do not follow, one prefetch every
 * 4 k keeps the misses in flight alongside the FMAs instead of in a burst between calls. */
typedef void (*nk_sgemm_b_pf_ukr_t)(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				    int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs);
/* f64 micro-kernel: the f32 contract with doubles, MR = NK_DGEMM_MR, NR = NK_DGEMM_NR. */
typedef void (*nk_dgemm_ukr_t)(int64_t k, const double *a, const double *b, double *c, int64_t rs_c,
			       int64_t cs_c, double alpha, double beta, int m, int n);
/* Packing into the layouts above.  src points at element (0, 0) of the block, strides in elements,
 * dtype f32/bf16/f16 (converted to f32).  pack_a writes MR x k (rows m..MR-1 zero); pack_b writes
 * ceil(n/NR) panels of k x NR, panel q at dst + q*k*NR (columns past n zero). */
typedef void (*nk_gemm_pack_a_t)(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k,
				 float *dst);
typedef void (*nk_gemm_pack_b_t)(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n,
				 float *dst);

/* bf16 pair packing for the sbgemm micro-kernels (src is bf16; an odd k is padded with a zero k):
 * pack_a_pairs writes MR x ceil(k/2) pairs, pack_b_pairs ceil(n/NR) panels of ceil(k/2) x NR pairs,
 * panel q at dst + q*ceil(k/2)*NR. */
typedef void (*nk_gemm_pack_a_pairs_t)(const void *src, int64_t rs, int64_t cs, int m, int64_t k,
				       uint32_t *dst);
typedef void (*nk_gemm_pack_b_pairs_t)(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n,
				       uint32_t *dst);

/* One ISA's micro-kernels and packers.  sbgemm may be NULL (bf16 then goes through the f32 kernel). */
typedef struct {
	const char *name;
	/* f32 panel blocking of the packed driver (gemm.c): k per slice (at most NK_GEMM_KC) and columns per
	 * packed B block (kc * nc at most NK_GEMM_KC * NK_GEMM_NC, nc a multiple of NK_GEMM_NR); 0 means
	 * NK_GEMM_KC / NK_GEMM_NC.  The dispatch context sizes them from the caches per microarchitecture
	 * (dispatch.c).  Every driver slices K the same way, so a result does not depend on the driver or the
	 * thread count, but it does on kc: the slices are summed into C one after another. */
	int kc, nc;
	/* f32: kc slices of K per super block of the multi-thread driver's shared packed B (0: as many as its
	 * 8 MiB block holds).  1 keeps the slice all threads read in their L2 (Intel: a row panel's task
	 * otherwise streams every slice of the block from L3); the slices are summed in the same order either
	 * way, so the results are the same bits. */
	int shared_kslices;
	nk_sgemm_ukr_t sgemm;
	nk_sgemm_b_ukr_t sgemm_b; /* may be NULL (then B is packed) */
	nk_sgemm_b_pf_ukr_t sgemm_b_pf; /* may be NULL (then A panels are prefetched between calls) */
	nk_sgemm_bias_ukr_t sgemm_bias; /* may be NULL (then the bias is copied into C first) */
	nk_sgemm_a_ukr_t sgemm_a;       /* may be NULL (then A is packed) */
	nk_sbgemm_ukr_t sbgemm;
	nk_sbgemm_bf16c_ukr_t sbgemm_bf16c; /* with sbgemm; may be NULL (then f32 partials, rounded after) */
	nk_sbgemm_a_ukr_t sbgemm_a;             /* A read in place; both or neither, with sbgemm_bf16c */
	nk_sbgemm_bf16c_a_ukr_t sbgemm_bf16c_a;
	nk_dgemm_ukr_t dgemm;
	nk_gemm_pack_a_t pack_a;
	nk_gemm_pack_b_t pack_b;
	nk_gemm_pack_a_pairs_t pack_a_pairs;
	nk_gemm_pack_b_pairs_t pack_b_pairs;
	/* GEMV dot products of contiguous bf16 / f16 vectors summed in f32 (NULL: convert and use f32) */
	float (*dot_bf16)(const uint16_t *x, const uint16_t *y, int64_t n);
	float (*dot_f16)(const uint16_t *x, const uint16_t *y, int64_t n);
	float (*dot_f32)(const float *x, const float *y, int64_t n); /* GEMV f32 columns; may be NULL */
	/* AMX: whole GEMMs on the tile unit (gemm_amx.c); NULL below the amx level or without the feature.
	 * bf16_tiles: dtype bf16, arguments validated, M, N, K >= 1, bias / alpha / beta as nk_gemm_args_t,
	 * bf16 C rounded as the sbgemm_bf16c kernels.  i8_tiles: int8 (dtype NK_I8) or uint8 (NK_U8) A, int8 B, int32 C = A @ B (plus the old
	 * C when beta != 0; alpha ignored), M, N, K >= 1. */
	int (*bf16_tiles)(const nk_gemm_args_t *g);
	int (*i8_tiles)(const nk_gemm_args_t *g);
} nk_gemm_isa_t;

/* Portable reference micro-kernels (gemm.c) and the AVX-512 ones (gemm_avx512.c). */
void nk_sgemm_ref_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			float alpha, float beta, int m, int n);
void nk_sbgemm_ref_14x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t rs_c,
			 int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_avx512_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c,
			   int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_ref_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			  int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_avx512_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			     int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_ref_14x32_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			     int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs);
void nk_sgemm_avx512_14x32_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs);
void nk_sgemm_ref_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c, float alpha,
			  float beta, const float *bias, int m, int n);
void nk_sgemm_avx512_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
			     float alpha, float beta, const float *bias, int m, int n);
void nk_sgemm_ref_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
			     float beta, const float *bias, int m, int n);
void nk_sgemm_avx512_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
				float beta, const float *bias, int m, int n);
/* The five f32 AVX-512 kernels with the k loop unrolled twice (Intel cores; bitwise the same results). */
void nk_sgemm_avx512_14x32_k2(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			      float alpha, float beta, int m, int n);
void nk_sgemm_avx512_14x32_k2_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_avx512_14x32_k2_b_pf(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
				   int64_t cs_c, float alpha, float beta, int m, int n, const char *pf, int64_t pfs);
void nk_sgemm_avx512_14x32_k2_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
				float alpha, float beta, const float *bias, int m, int n);
void nk_sgemm_avx512_14x32_k2_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
				   float beta, const float *bias, int m, int n);
void nk_sbgemm_avx512_14x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t rs_c,
			    int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_ref_14x32_bf16c(int64_t kp, const uint32_t *a, const uint32_t *b, const float *acc, int64_t ld_acc,
			       uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_avx512_14x32_bf16c(int64_t kp, const uint32_t *a, const uint32_t *b, const float *acc,
				  int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_ref_14x32_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c, int64_t rs_c,
			   int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_ref_14x32_bf16c_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, const float *acc,
				 int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_avx512_14x32_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, float *c, int64_t rs_c,
			      int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sbgemm_avx512_14x32_bf16c_a(int64_t kp, const uint16_t *a, int64_t lda, const uint32_t *b, const float *acc,
				    int64_t ld_acc, uint16_t *c, int64_t rs_c, float alpha, float beta, int m, int n);
void nk_dgemm_ref_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			double alpha, double beta, int m, int n);
void nk_dgemm_avx512_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c,
			   int64_t cs_c, double alpha, double beta, int m, int n);
float nk_dot_bf16_avx512(const uint16_t *x, const uint16_t *y, int64_t n); /* vdpbf16ps */
float nk_dot_f16_avx512(const uint16_t *x, const uint16_t *y, int64_t n);  /* vcvtph2ps + FMA */
float nk_dot_f32_avx512(const float *x, const float *y, int64_t n);        /* 4 x 16-lane FMA sums */
void nk_gemm_pack_a_ref(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k, float *dst);
void nk_gemm_pack_b_ref(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n,
			float *dst);
void nk_gemm_pack_a_pairs_ref(const void *src, int64_t rs, int64_t cs, int m, int64_t k, uint32_t *dst);
void nk_gemm_pack_b_pairs_ref(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n, uint32_t *dst);
void nk_gemm_pack_a_pairs_avx512(const void *src, int64_t rs, int64_t cs, int m, int64_t k, uint32_t *dst);
void nk_gemm_pack_b_pairs_avx512(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n,
				 uint32_t *dst);
void nk_gemm_pack_a_avx512(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k,
			   float *dst);
void nk_gemm_pack_b_avx512(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n,
			   float *dst);

/* AVX2 + FMA micro-kernels (gemm_avx2.c): the f32 / f64 contracts above, computed in 6-row sub-tiles;
 * bit for bit the AVX-512 kernels' results. */
void nk_sgemm_avx2_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			 float alpha, float beta, int m, int n);
void nk_sgemm_avx2_14x32_b(int64_t k, const float *a, const float *b, int64_t ldb, float *c, int64_t rs_c,
			   int64_t cs_c, float alpha, float beta, int m, int n);
void nk_sgemm_avx2_14x32_bias(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, float alpha,
			      float beta, const float *bias, int m, int n);
void nk_sgemm_avx2_14x32_a(int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t rs_c,
			   float alpha, float beta, const float *bias, int m, int n);
void nk_dgemm_avx2_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			 double alpha, double beta, int m, int n);
float nk_dot_f32_avx2(const float *x, const float *y, int64_t n);

/* AMX tile GEMMs (gemm_amx.c; only with the OS's tile permission, through the dispatch context). */
int nk_gemm_amx_bf16(const nk_gemm_args_t *g);
int nk_gemm_amx_i8(const nk_gemm_args_t *g);

/* f64 packing (portable; the same layouts with MR = 14, NR = 16 doubles). */
void nk_dgemm_pack_a(const double *src, int64_t rs, int64_t cs, int m, int64_t k, double *dst);
void nk_dgemm_pack_b(const double *src, int64_t rs, int64_t cs, int64_t k, int64_t n, double *dst);

/* The tables: portable (gemm_ref.c), and AVX-512 (gemm_avx512.c; sbgemm needs avx512bf16).  The one in
 * use is the dispatch context's (dispatch.c); nk_gemm_isa_select returns a copy of it. */
extern const nk_gemm_isa_t nk_gemm_isa_ref;
extern const nk_gemm_isa_t nk_gemm_isa_avx512;
extern const nk_gemm_isa_t nk_gemm_isa_avx2; /* gemm_avx2.c: no bf16 pair kernels (bf16 via f32) */
nk_gemm_isa_t nk_gemm_isa_select(void);

/* Runs the packed driver with the given table (tests pass nk_gemm_isa_ref to check the driver with
 * the portable micro-kernel).  Arguments must already be validated: dtype f32/bf16/f16/f64, M, N >= 1. */
int nk_gemm_packed(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa);
/* The same on the calling thread only, one task per batch entry (for callers that are already
 * parallel, e.g. attention's tiles). */
int nk_gemm_packed_1t(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa);

/* M == 1 or N == 1 (gemv.c); arguments validated, K >= 1. */
int nk_gemv_run(const nk_gemm_args_t *g);

#endif /* NK_GEMM_IMPL_H */
