/* igemm.c - integer GEMM: C[b] = alpha * A[b] @ B[b] + beta * C[b] for i64, i32, i16, i8 and u8, with
 * the strides of nk_gemm_args_t (any layout).  aten's CPU integer gemm computes in the dtype with
 * wrap-around; products and sums are ring operations, so accumulating in wrapping int64 and truncating
 * once on the store gives the same result.  alpha and beta are taken as integers (aten casts them to
 * the dtype); beta == 0 means C is not read.
 * nk_igemm_run: rows (b, i) over the pool, columns in blocks of IG_NB accumulators, k outer (A's
 * element broadcast over a row of B).  nk_igemm_ref: the triple loop, one element at a time.
 */
#include <string.h>

#include "nk.h"
#include "nk_gemm_impl.h"
#include "nk_igemm.h"
#include "nk_impl.h"
#include "nrt.h"

NK_VECTORIZE_FILE

#define IG_NB 256
#define IG_GRAIN 4096 /* multiply-adds per task, at least */

static bool ig_dtype(int dt)
{
	return dt == NK_I64 || dt == NK_I32 || dt == NK_I16 || dt == NK_I8 || dt == NK_U8;
}

static int ig_check(const nk_gemm_args_t *a)
{
	if (!ig_dtype(a->dtype) || a->M < 0 || a->N < 0 || a->K < 0 || a->batch < 0) {
		nrt_kernel_fail("nk_igemm: unsupported dtype %s or negative size", nk_dtype_name(a->dtype));
		return -1;
	}
	return 0;
}

static inline int64_t ig_ld(const void *base, int dt, int64_t off)
{
	return nk_load_i64((const char *)base + off * (int64_t)nk_dtype_size(dt), dt);
}

/* The stored value of row element j: beta*c + alpha*acc, wrapping, truncated to the dtype. */
static inline void ig_st(const nk_gemm_args_t *a, int64_t off, uint64_t acc, uint64_t al, uint64_t be)
{
	char *p = (char *)a->C + off * (int64_t)nk_dtype_size(a->dtype);
	uint64_t v = al * acc;
	if (a->beta != 0)
		v += be * (uint64_t)nk_load_i64(p, a->dtype);
	nk_store_i64(p, a->dtype, (int64_t)v);
}

static void ig_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_gemm_args_t *a = ctx;
	uint64_t al = (uint64_t)(int64_t)a->alpha, be = (uint64_t)(int64_t)a->beta, acc[IG_NB];
	for (int64_t r = r0; r < r1; r++) {
		int64_t b = r / a->M, i = r % a->M;
		for (int64_t j0 = 0; j0 < a->N; j0 += IG_NB) {
			int64_t nb = a->N - j0 < IG_NB ? a->N - j0 : IG_NB;
			memset(acc, 0, sizeof acc);
			for (int64_t k = 0; k < a->K; k++) {
				uint64_t x = (uint64_t)ig_ld(a->A, a->dtype, b * a->bs_a + i * a->rs_a + k * a->cs_a);
				int64_t boff = b * a->bs_b + k * a->rs_b + j0 * a->cs_b;
				if (x == 0)
					continue;
				for (int64_t j = 0; j < nb; j++)
					acc[j] += x * (uint64_t)ig_ld(a->B, a->dtype, boff + j * a->cs_b);
			}
			for (int64_t j = 0; j < nb; j++)
				ig_st(a, b * a->bs_c + i * a->rs_c + (j0 + j) * a->cs_c, acc[j], al, be);
		}
	}
}

int nk_igemm_run(void *args)
{
	const nk_gemm_args_t *a = args;
	if (nk_using_reference())
		return nk_igemm_ref(args);
	if (ig_check(a))
		return -1;
	int64_t rows = a->batch * a->M, work = a->N * (a->K ? a->K : 1);
	int64_t grain = work >= IG_GRAIN ? 1 : IG_GRAIN / (work ? work : 1);
	if (rows && a->N)
		nrt_parallel_for(rows, grain, ig_rows, (void *)a);
	return 0;
}

int nk_igemm_ref(void *args)
{
	const nk_gemm_args_t *a = args;
	if (ig_check(a))
		return -1;
	uint64_t al = (uint64_t)(int64_t)a->alpha, be = (uint64_t)(int64_t)a->beta;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->M; i++)
			for (int64_t j = 0; j < a->N; j++) {
				uint64_t acc = 0;
				for (int64_t k = 0; k < a->K; k++)
					acc += (uint64_t)ig_ld(a->A, a->dtype, b * a->bs_a + i * a->rs_a + k * a->cs_a) *
					       (uint64_t)ig_ld(a->B, a->dtype, b * a->bs_b + k * a->rs_b + j * a->cs_b);
				ig_st(a, b * a->bs_c + i * a->rs_c + j * a->cs_c, acc, al, be);
			}
	return 0;
}

/* ---- int8 x int8 -> int32 (torch._int_mm) ----------------------------------------------------------- */

static int im_check(const nk_gemm_args_t *a)
{
	if (!a || (a->dtype != NK_I8 && a->dtype != NK_U8) || a->M < 0 || a->N < 0 || a->K < 0 || a->batch < 0) {
		nrt_kernel_fail("_int_mm: expected int8 operands and non-negative sizes");
		return -1;
	}
	if (a->M && a->N && a->batch && (!a->C || (a->K && (!a->A || !a->B)))) {
		nrt_kernel_fail("_int_mm: null data pointer");
		return -1;
	}
	return 0;
}

/* Element off of A: uint8 (dtype NK_U8) or int8. */
static inline int32_t im_a(const nk_gemm_args_t *a, bool u8, int64_t off)
{
	return u8 ? (int32_t)((const uint8_t *)a->A)[off] : (int32_t)((const int8_t *)a->A)[off];
}

static inline void im_store(const nk_gemm_args_t *a, int32_t *c, uint32_t acc)
{
	*c = (int32_t)(acc + (a->beta != 0 ? (uint32_t)*c : 0u));
}

/* Rows (b, i): IG_NB int32 accumulators per block of columns, k outer (a row of B at a time). */
static void im_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_gemm_args_t *a = ctx;
	const int8_t *B = a->B;
	bool u8 = a->dtype == NK_U8;
	int32_t acc[IG_NB];

	for (int64_t r = r0; r < r1; r++) {
		int64_t b = r / a->M, i = r % a->M;
		int32_t *C = (int32_t *)a->C + b * a->bs_c + i * a->rs_c;

		for (int64_t j0 = 0; j0 < a->N; j0 += IG_NB) {
			int64_t nb = a->N - j0 < IG_NB ? a->N - j0 : IG_NB;

			memset(acc, 0, sizeof acc);
			for (int64_t k = 0; k < a->K; k++) {
				int32_t x = im_a(a, u8, b * a->bs_a + i * a->rs_a + k * a->cs_a);
				const int8_t *brow = B + b * a->bs_b + k * a->rs_b + j0 * a->cs_b;

				if (x == 0)
					continue;
				if (a->cs_b == 1)
					for (int64_t j = 0; j < nb; j++)
						acc[j] = (int32_t)((uint32_t)acc[j] + (uint32_t)(x * brow[j]));
				else
					for (int64_t j = 0; j < nb; j++)
						acc[j] = (int32_t)((uint32_t)acc[j] + (uint32_t)(x * brow[j * a->cs_b]));
			}
			for (int64_t j = 0; j < nb; j++)
				im_store(a, C + (j0 + j) * a->cs_c, (uint32_t)acc[j]);
		}
	}
}

/* K == 0: C = 0 (or kept when beta != 0). */
static void im_zero(const nk_gemm_args_t *a)
{
	if (a->beta != 0)
		return;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->M; i++)
			for (int64_t j = 0; j < a->N; j++)
				((int32_t *)a->C)[b * a->bs_c + i * a->rs_c + j * a->cs_c] = 0;
}

int nk_int_mm_run(void *args)
{
	const nk_gemm_args_t *a = args;
	nk_gemm_isa_t isa;

	if (nk_using_reference())
		return nk_int_mm_ref(args);
	if (im_check(a))
		return -1;
	if (!a->M || !a->N || !a->batch)
		return 0;
	if (!a->K) {
		im_zero(a);
		return 0;
	}
	isa = nk_gemm_isa_select();
	/* the tiles from a tile's size up (16 rows, 16 columns; any K: padded to 64) */
	if (isa.i8_tiles && a->M >= 16 && a->N >= 16)
		return isa.i8_tiles(a);
	int64_t rows = a->batch * a->M, work = a->N * a->K;
	nrt_parallel_for(rows, work >= IG_GRAIN ? 1 : IG_GRAIN / work, im_rows, (void *)a);
	return 0;
}

int nk_int_mm_ref(void *args)
{
	const nk_gemm_args_t *a = args;
	const int8_t *B;

	if (im_check(a))
		return -1;
	B = a->B;
	for (int64_t b = 0; b < a->batch; b++)
		for (int64_t i = 0; i < a->M; i++)
			for (int64_t j = 0; j < a->N; j++) {
				uint32_t acc = 0;

				for (int64_t k = 0; k < a->K; k++)
					acc += (uint32_t)(im_a(a, a->dtype == NK_U8, b * a->bs_a + i * a->rs_a + k * a->cs_a) *
							  (int32_t)B[b * a->bs_b + k * a->rs_b + j * a->cs_b]);
				im_store(a, (int32_t *)a->C + b * a->bs_c + i * a->rs_c + j * a->cs_c, acc);
			}
	return 0;
}
