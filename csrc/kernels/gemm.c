/* gemm.c - C[b] = alpha * A[b] @ B[b] + beta * C[b].
 *
 * nk_gemm_run picks a path:
 *   - the portable reference nk_gemm_ref (also when NEURON_KERNELS=ref),
 *   - the GEMV path of gemv.c for M == 1 or N == 1 (no packing),
 *   - the packed, cache-blocked driver (BLIS-style) for f32/bf16/f16/f64 with the micro-kernels and packers
 *     of the ISA table the dispatch context holds (dispatch.c: AVX-512 in gemm_avx512.c, else the
 *     portable ones of gemm_ref.c).
 * The micro-kernel contract (packed panels, edge tiles, strides) is written out in docs/kernels.md.
 * Threading (nrt_parallel_for): with few batch entries and a small packed A (at most 1 MiB: M x K of
 * a few hundred rows), tasks are column chunks over all rows, claimed dynamically, each packing its own
 * B panels (f32: none, read in place) while A is packed once on first use (gemm_small); with several
 * threads and few batch entries otherwise, B is packed once per call by all threads (a pack job; f32
 * row-major B next to a column-major A, the weight gradient dY^T X, is read in place instead), then
 * tasks of one 14-row panel (times a column chunk when there are few panels) are claimed dynamically
 * (gemm_shared; bf16/f16 C with an A of at most 4 MiB: A read in place or packed once in the pack job,
 * and column chunks that keep their packed B in L2); row-major bf16 A with an even K is read in place
 * by the sbgemm_a kernels in gemm_small and (small A) gemm_shared; otherwise tasks are rectangles of C (and batch entries) that pack their own panels.  No task writes another's C and every element is summed
 * over the same k-slices in the same order, so results do not depend on the thread count.
 */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nk_gemm_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR
#define KC NK_GEMM_KC
#define KCB NK_GEMM_KC_BF16
#define NC NK_GEMM_NC
#define MC NK_GEMM_MC
#define NCA NK_GEMM_NC_ACC
#define DMR NK_DGEMM_MR
#define DNR NK_DGEMM_NR
#define DKC NK_DGEMM_KC
#define DNC NK_DGEMM_NC

/* Below this many multiply-adds a call runs on the calling thread only. */
#define GEMM_PAR_MIN_FMA (1 << 18)
/* Above this many multiply-adds per matrix, one task per thread. */
#define GEMM_BIG_FMA (1 << 28)

/* Address of element off (in elements) of a buffer of elem_size-byte elements. */
static const void *at(const void *p, int64_t off, size_t elem_size)
{
	return (const char *)p + off * (int64_t)elem_size;
}

/* Validates the arguments; fails the kernel (and returns -1) on a bad call. */
static int gemm_check(const nk_gemm_args_t *g)
{
	if (!g) {
		nrt_kernel_fail("gemm: null arguments");
		return -1;
	}
	if (!nk_fp_is_float(g->dtype)) {
		nrt_kernel_fail("gemm: unsupported dtype %s", nk_dtype_name(g->dtype));
		return -1;
	}
	if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 0) {
		nrt_kernel_fail("gemm: negative size (M %lld N %lld K %lld batch %lld)", (long long)g->M,
				(long long)g->N, (long long)g->K, (long long)g->batch);
		return -1;
	}
	if (g->M && g->N && g->batch && (!g->C || (g->K && (!g->A || !g->B)))) {
		nrt_kernel_fail("gemm: null data pointer");
		return -1;
	}
	return 0;
}

/* C[b][i0.., j0..] (m x n) = bias (same dtype: elements copied as they are). */
static void bias_fill(const nk_gemm_args_t *g, int64_t b, int64_t i0, int64_t m, int64_t j0, int64_t n)
{
	size_t es = nk_fp_elem_size(g->dtype);

	for (int64_t i = i0; i < i0 + m; i++) {
		const char *src = (const char *)g->bias + (b * g->bs_bias + i * g->rs_bias + j0 * g->cs_bias) * (int64_t)es;
		char *dst = (char *)g->C + (b * g->bs_c + i * g->rs_c + j0 * g->cs_c) * (int64_t)es;

		if (g->cs_bias == 1 && g->cs_c == 1)
			memcpy(dst, src, (size_t)n * es);
		else
			for (int64_t j = 0; j < n; j++)
				memcpy(dst + j * g->cs_c * (int64_t)es, src + j * g->cs_bias * (int64_t)es, es);
	}
}

static void bias_fill_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_gemm_args_t *g = ctx;

	for (int64_t r = r0; r < r1; r++)
		bias_fill(g, r / g->M, r % g->M, 1, 0, g->N);
}

/* Copies the bias into C over the pool and drops it from g (the paths without a fused copy). */
static void bias_prefill(nk_gemm_args_t *g)
{
	if (!g->bias)
		return;
	nrt_parallel_for(g->batch * g->M, nk_cdiv(1 << 14, g->N), bias_fill_rows, g);
	g->bias = NULL;
}

/* ---- reference ---------------------------------------------------------------------------------- */

/* Rows [r0, r1) of the flattened (batch, M) rows: one dot product per element of C, accumulated in
 * f32 (f64 for f64), then alpha/beta in the same precision.  beta == 0 does not read C. */
static void gemm_ref_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_gemm_args_t *g = ctx;

	for (int64_t r = r0; r < r1; r++) {
		int64_t b = r / g->M, i = r % g->M;
		int64_t oa = b * g->bs_a + i * g->rs_a, ob = b * g->bs_b, oc = b * g->bs_c + i * g->rs_c;

		if (g->bias && g->beta != 0)
			bias_fill(g, b, i, 1, 0, g->N);

		for (int64_t j = 0; j < g->N; j++) {
			int64_t c = oc + j * g->cs_c;

			if (g->dtype == NK_F64) {
				double acc = 0, v;

				for (int64_t k = 0; k < g->K; k++)
					acc += ((const double *)g->A)[oa + k * g->cs_a] *
					       ((const double *)g->B)[ob + k * g->rs_b + j * g->cs_b];
				v = g->alpha * acc;
				if (g->beta != 0)
					v += g->beta * ((double *)g->C)[c];
				((double *)g->C)[c] = v;
			} else {
				float acc = 0, v;

				for (int64_t k = 0; k < g->K; k++)
					acc += nk_fp_loadf(g->A, g->dtype, oa + k * g->cs_a) *
					       nk_fp_loadf(g->B, g->dtype, ob + k * g->rs_b + j * g->cs_b);
				v = (float)g->alpha * acc;
				if (g->beta != 0)
					v += (float)g->beta * nk_fp_loadf(g->C, g->dtype, c);
				nk_fp_storef(g->C, g->dtype, c, v);
			}
		}
	}
}

int nk_gemm_ref(void *args)
{
	const nk_gemm_args_t *g = args;

	if (gemm_check(g))
		return -1;
	if (!g->M || !g->N || !g->batch)
		return 0;
	nrt_parallel_for(g->batch * g->M, nk_cdiv(1 << 16, g->N * (g->K + 1)), gemm_ref_rows, (void *)g);
	return 0;
}

/* ---- the packed driver -------------------------------------------------------------------------- */

/* Per-thread workspace (nk_workspace.h): the packed B block, the packed A panel, and the f32 accumulation
 * block used when C is bf16/f16 (so K blocks are summed in f32, rounded once). */
#define WS_B_BYTES ((size_t)KC * NC * sizeof(float))
#define WS_A_BYTES ((size_t)(MR * KC * 4 > DMR * DKC * 8 ? MR * KC * 4 : DMR * DKC * 8))
#define WS_C_BYTES ((size_t)MC * NCA * sizeof(float))

typedef struct {
	float *a, *b, *c;
} gemm_bufs_t;

typedef struct {
	const nk_gemm_args_t *g;
	const nk_gemm_isa_t *isa;
	bool pairs;          /* bf16 through the sbgemm (pair) micro-kernel */
	bool inplace_a;      /* pairs read from A in place (sbgemm_a / sbgemm_bf16c_a; small and shared drivers) */
	int64_t kc, nc;      /* f32 panel blocking: k per slice, columns per packed B block (the table's) */
	size_t es;           /* element size of A, B, C */
	float alpha, beta;
	int64_t tm, tn;      /* task rectangle */
	int64_t tiles_m, tiles_n;
	atomic_int *failed;  /* set by a task that could not get its workspace */
} gemm_plan_t;

/* Prefetch of the next A panel (rows i0.., k pc..pc+kc) spread over the micro-kernel calls of the
 * current one, so that packing it finds it in cache (A rows are far apart: the hardware prefetcher
 * does not follow 14 strided streams well).  A "row" here is one contiguous run of the panel: a row of
 * kc elements for row-major A, the MR elements of one k for column-major A (a transposed operand, the
 * weight-gradient GEMMs' dY^T: kc runs of 56 bytes, each on another 4 KiB page, which no hardware
 * prefetcher follows). */
typedef struct {
	const char *row;  /* current run of the next panel */
	int64_t row_bytes, line, lines_per_row, rows_left, per_step;
} prefetch_t;

static prefetch_t prefetch_a_init(const gemm_plan_t *pl, const void *A, int64_t i0, int64_t m, int64_t pc,
				  int64_t kc, int64_t nc)
{
	const nk_gemm_args_t *g = pl->g;
	prefetch_t pf = { 0 };
	int64_t rows = nk_min64(MR, m - i0);

	if (rows <= 0 || kc <= 0 || (g->cs_a != 1 && g->rs_a != 1))
		return pf;
	pf.row = (const char *)at(A, i0 * g->rs_a + pc * g->cs_a, pl->es);
	if (g->cs_a == 1) {
		pf.row_bytes = g->rs_a * (int64_t)pl->es;
		pf.lines_per_row = nk_cdiv(kc * (int64_t)pl->es, 64);
		pf.rows_left = rows;
	} else {
		/* the run of one k may straddle two lines */
		pf.row_bytes = g->cs_a * (int64_t)pl->es;
		pf.lines_per_row = nk_cdiv(rows * (int64_t)pl->es, 64) + 1;
		pf.rows_left = kc;
	}
	pf.per_step = nk_cdiv(pf.rows_left * pf.lines_per_row, nk_cdiv(nc, NR));
	return pf;
}

static inline __attribute__((always_inline)) void prefetch_a_step(prefetch_t *pf)
{
	for (int64_t n = 0; n < pf->per_step && pf->rows_left > 0; n++) {
		__builtin_prefetch(pf->row + pf->line * 64, 0, 2);
		if (++pf->line == pf->lines_per_row) {
			pf->line = 0;
			pf->row += pf->row_bytes;
			pf->rows_left--;
		}
	}
}

/* f32 C: for each NC block of columns and KC block of k, pack B once, then for each MR panel of A pack
 * it (it stays in L1) and sweep the NR panels of B.  K blocks after the first accumulate (beta 1). */
static void gemm_rect_f32(const gemm_plan_t *pl, const gemm_bufs_t *ws, int64_t b, int64_t i0, int64_t m, int64_t j0,
			  int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	const void *A = at(g->A, b * g->bs_a + i0 * g->rs_a, pl->es);
	const void *B = at(g->B, b * g->bs_b + j0 * g->cs_b, pl->es);
	float *C = (float *)g->C + b * g->bs_c + i0 * g->rs_c + j0 * g->cs_c;

	for (int64_t jc = 0; jc < n; jc += pl->nc) {
		int64_t nc = nk_min64(pl->nc, n - jc);

		for (int64_t pc = 0; pc < g->K; pc += pl->kc) {
			int64_t kc = nk_min64(pl->kc, g->K - pc);
			float beta = pc == 0 ? pl->beta : 1.0f;

			pl->isa->pack_b(at(B, pc * g->rs_b + jc * g->cs_b, pl->es), g->dtype, g->rs_b, g->cs_b, kc,
					nc, ws->b);
			for (int64_t ir = 0; ir < m; ir += MR) {
				int mr = (int)nk_min64(MR, m - ir);
				prefetch_t pf = prefetch_a_init(pl, A, ir + MR, m, pc, kc, nc);

				pl->isa->pack_a(at(A, ir * g->rs_a + pc * g->cs_a, pl->es), g->dtype, g->rs_a,
						g->cs_a, mr, kc, ws->a);
				for (int64_t jr = 0; jr < nc; jr += NR) {
					prefetch_a_step(&pf);
					pl->isa->sgemm(kc, ws->a, ws->b + jr * kc,
						       C + ir * g->rs_c + (jc + jr) * g->cs_c, g->rs_c, g->cs_c,
						       pl->alpha, beta, mr, (int)nk_min64(NR, nc - jr));
				}
			}
		}
	}
}

/* C (bf16/f16, strided) = alpha * acc + beta * C for an mc x nc block accumulated in ws->c, a row
 * at a time through the block conversions. */
static void acc_store(const gemm_plan_t *pl, const gemm_bufs_t *ws, void *C, int64_t mc, int64_t nc)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t es = (int64_t)pl->es;
	float row[NCA];

	for (int64_t i = 0; i < mc; i++) {
		char *c = (char *)C + i * g->rs_c * es;
		const float *acc = ws->c + i * NCA;

		if (pl->beta != 0) {
			nk_block_load_f32(row, c, g->cs_c * es, g->dtype, nc);
			for (int64_t j = 0; j < nc; j++)
				row[j] = pl->alpha * acc[j] + pl->beta * row[j];
		} else {
			for (int64_t j = 0; j < nc; j++)
				row[j] = pl->alpha * acc[j];
		}
		nk_block_store_f32(c, g->cs_c * es, g->dtype, row, nc);
	}
}

/* One MC x NCA block's KC slice: pack A panels and run the micro-kernels into ws->c against the
 * packed B slice bp. */
static void acc_block_kslice(const gemm_plan_t *pl, const gemm_bufs_t *ws, const void *A, int64_t mc, int64_t nc,
			     int64_t kc, const float *bp, bool first)
{
	const nk_gemm_args_t *g = pl->g;
	float beta = first ? 0.0f : 1.0f;

	for (int64_t ir = 0; ir < mc; ir += MR) {
		int mr = (int)nk_min64(MR, mc - ir);
		const void *a = at(A, ir * g->rs_a, pl->es);

		if (pl->pairs) {
			int64_t kp = (kc + 1) / 2;

			pl->isa->pack_a_pairs(a, g->rs_a, g->cs_a, mr, kc, (uint32_t *)ws->a);
			for (int64_t jr = 0; jr < nc; jr += NR)
				pl->isa->sbgemm(kp, (const uint32_t *)ws->a, (const uint32_t *)bp + jr * kp,
						ws->c + ir * NCA + jr, NCA, 1, 1.0f, beta, mr, (int)nk_min64(NR, nc - jr));
		} else {
			pl->isa->pack_a(a, g->dtype, g->rs_a, g->cs_a, mr, kc, ws->a);
			for (int64_t jr = 0; jr < nc; jr += NR)
				pl->isa->sgemm(kc, ws->a, bp + jr * kc, ws->c + ir * NCA + jr, NCA, 1, 1.0f,
					       beta, mr, (int)nk_min64(NR, nc - jr));
		}
	}
}

/* Packs the KC slice pc.. of the B block into bp. */
static void acc_pack_b(const gemm_plan_t *pl, const void *B, int64_t pc, int64_t kc, int64_t jc, int64_t nc,
		       float *bp)
{
	const nk_gemm_args_t *g = pl->g;
	const void *src = at(B, pc * g->rs_b + jc * g->cs_b, pl->es);

	if (pl->pairs)
		pl->isa->pack_b_pairs(src, g->rs_b, g->cs_b, kc, nc, (uint32_t *)bp);
	else
		pl->isa->pack_b(src, g->dtype, g->rs_b, g->cs_b, kc, nc, bp);
}

/* bf16/f16 C: blocks of MC x NCA are accumulated over all of K in f32, then rounded once.  The K x NCA
 * block of B is packed once per column block when all its KC slices fit the workspace (K up to 2048
 * for bf16 pairs, 1024 for f32 panels); otherwise each MC block repacks its slices. */
static void gemm_rect_acc(const gemm_plan_t *pl, const gemm_bufs_t *ws, int64_t b, int64_t i0, int64_t m, int64_t j0,
			  int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	const void *A = at(g->A, b * g->bs_a + i0 * g->rs_a, pl->es);
	const void *B = at(g->B, b * g->bs_b + j0 * g->cs_b, pl->es);
	void *C = (char *)g->C + (b * g->bs_c + i0 * g->rs_c + j0 * g->cs_c) * (int64_t)pl->es;
	int64_t kcmax = pl->pairs ? KCB : pl->kc, slice = kcmax * NCA / (pl->pairs ? 2 : 1);
	bool resident = nk_cdiv(g->K, kcmax) * slice <= KC * NC;

	for (int64_t jc = 0; jc < n; jc += NCA) {
		int64_t nc = nk_min64(NCA, n - jc);

		for (int64_t pc = 0; resident && pc < g->K; pc += kcmax)
			acc_pack_b(pl, B, pc, nk_min64(kcmax, g->K - pc), jc, nc, ws->b + pc / kcmax * slice);
		for (int64_t ic = 0; ic < m; ic += MC) {
			int64_t mc = nk_min64(MC, m - ic);

			for (int64_t pc = 0; pc < g->K; pc += kcmax) {
				int64_t kc = nk_min64(kcmax, g->K - pc);
				float *bp = resident ? ws->b + pc / kcmax * slice : ws->b;

				if (!resident)
					acc_pack_b(pl, B, pc, kc, jc, nc, bp);
				acc_block_kslice(pl, ws, at(A, ic * g->rs_a + pc * g->cs_a, pl->es), mc, nc, kc, bp, pc == 0);
			}
			acc_store(pl, ws, (char *)C + (ic * g->rs_c + jc * g->cs_c) * (int64_t)pl->es, mc, nc);
		}
	}
}

/* f64 C: the f32 loop nest with doubles (B block DKC x DNC, then the A panel). */
static void gemm_rect_f64(const gemm_plan_t *pl, const gemm_bufs_t *ws, int64_t b, int64_t i0, int64_t m, int64_t j0,
			  int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	const double *A = (const double *)g->A + b * g->bs_a + i0 * g->rs_a;
	const double *B = (const double *)g->B + b * g->bs_b + j0 * g->cs_b;
	double *C = (double *)g->C + b * g->bs_c + i0 * g->rs_c + j0 * g->cs_c;
	double *bp = (double *)ws->b, *ap = (double *)ws->a;

	for (int64_t jc = 0; jc < n; jc += DNC) {
		int64_t nc = nk_min64(DNC, n - jc);

		for (int64_t pc = 0; pc < g->K; pc += DKC) {
			int64_t kc = nk_min64(DKC, g->K - pc);
			double beta = pc == 0 ? g->beta : 1.0;

			nk_dgemm_pack_b(B + pc * g->rs_b + jc * g->cs_b, g->rs_b, g->cs_b, kc, nc, bp);
			for (int64_t ir = 0; ir < m; ir += DMR) {
				int mr = (int)nk_min64(DMR, m - ir);

				nk_dgemm_pack_a(A + ir * g->rs_a + pc * g->cs_a, g->rs_a, g->cs_a, mr, kc, ap);
				for (int64_t jr = 0; jr < nc; jr += DNR)
					pl->isa->dgemm(kc, ap, bp + jr * kc, C + ir * g->rs_c + (jc + jr) * g->cs_c,
						       g->rs_c, g->cs_c, g->alpha, beta, mr, (int)nk_min64(DNR, nc - jr));
			}
		}
	}
}

/* This thread's buffers for the plan's dtype; false (and the plan marked failed) without memory. */
static bool gemm_bufs(const gemm_plan_t *pl, gemm_bufs_t *ws)
{
	bool acc = pl->g->dtype == NK_BF16 || pl->g->dtype == NK_F16;

	ws->b = nk_ws_get(NK_WS_GEMM_B, WS_B_BYTES);
	ws->a = nk_ws_get(NK_WS_GEMM_A, WS_A_BYTES);
	ws->c = acc ? nk_ws_get(NK_WS_GEMM_C, WS_C_BYTES) : NULL;
	if (ws->b && ws->a && (ws->c || !acc))
		return true;
	atomic_store(pl->failed, 1);
	return false;
}

static void gemm_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const gemm_plan_t *pl = ctx;
	int64_t per = pl->tiles_m * pl->tiles_n;
	gemm_bufs_t ws;

	if (!gemm_bufs(pl, &ws))
		return;
	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / per, r = t % per;
		int64_t i0 = r / pl->tiles_n * pl->tm, j0 = r % pl->tiles_n * pl->tn;
		int64_t m = nk_min64(pl->tm, pl->g->M - i0), n = nk_min64(pl->tn, pl->g->N - j0);

		if (pl->g->dtype == NK_F32)
			gemm_rect_f32(pl, &ws, b, i0, m, j0, n);
		else if (pl->g->dtype == NK_F64)
			gemm_rect_f64(pl, &ws, b, i0, m, j0, n);
		else
			gemm_rect_acc(pl, &ws, b, i0, m, j0, n);
	}
}

/* Cuts each matrix into about `want` rectangles: rows first (pieces of at least 4 MR panels; every
 * task packs its own B, which is cheap, and keeps the wide NC blocks), then columns (pieces of at
 * least 256). */
static void gemm_partition(gemm_plan_t *pl, int64_t want)
{
	int64_t M = pl->g->M, N = pl->g->N;
	int64_t tm = nk_min64(want, nk_cdiv(M, 4 * MR)), tn;

	if (tm < 1)
		tm = 1;
	tn = nk_min64(nk_cdiv(want, tm), nk_cdiv(N, 256));
	if (tn < 1)
		tn = 1;
	pl->tn = nk_cdiv(nk_cdiv(N, tn), NR) * NR;
	pl->tm = nk_cdiv(nk_cdiv(M, tm), MR) * MR;
	pl->tiles_n = nk_cdiv(N, pl->tn);
	pl->tiles_m = nk_cdiv(M, pl->tm);
}

/* How many of MR rows stride_bytes apart share one set of the 32 KiB, 8-way L1 (64 sets of 64-byte
 * lines, a 4 KiB period): A read in place keeps one line of each of its MR rows in L1 at a time, and a
 * row stride of a multiple of 4 KiB puts all of them in one set (f32 2048^3: 216 -> 158 GFLOP/s).  Up
 * to 7 (f32 K = 512 or 1536: strides of 2 or 6 KiB) measured the same as packing or better. */
#define INPLACE_A_MAX_ROWS_PER_SET 7
static int rows_per_l1_set(int64_t stride_bytes)
{
	int64_t lines = (stride_bytes / 64) % 64, g = 64, period;

	for (int64_t x = lines; x; ) { /* gcd(lines, 64) */
		int64_t r = g % x;
		g = x;
		x = r;
	}
	period = 64 / g;
	return (int)((MR + period - 1) / period);
}

static gemm_plan_t gemm_plan(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa, atomic_int *failed)
{
	gemm_plan_t pl = {
		.g = g,
		.isa = isa,
		.pairs = g->dtype == NK_BF16 && isa->sbgemm,
		/* row-major bf16 A with an even K: each pair is one 32-bit word of an A row, no packing.  Only
		 * for K >= 512: with a short K the packing costs little and the kernel calls are short, and
		 * 1024 x 4096 x 64 measured 0.88-0.98 of the packed A (4096 x 4096 x 4: 0.93-0.98); and not
		 * with a row stride that crowds the 14 rows into one L1 set (K = 2048 bf16, 4 KiB: 512 x 2048 x
		 * 2048 323 against 431 GFLOP/s packed) */
		.inplace_a = g->dtype == NK_BF16 && isa->sbgemm && isa->sbgemm_a && isa->sbgemm_bf16c_a && g->cs_a == 1 &&
			     g->K % 2 == 0 && g->K >= 512 && rows_per_l1_set(g->rs_a * 2) <= INPLACE_A_MAX_ROWS_PER_SET,
		.kc = isa->kc > 0 && isa->kc <= KC ? isa->kc : KC,
		.es = nk_fp_elem_size(g->dtype),
		.alpha = (float)g->alpha,
		.beta = (float)g->beta,
		.failed = failed,
	};

	/* the B block within the workspace (KC x NC floats), whole NR panels */
	pl.nc = isa->nc > 0 ? nk_min64(isa->nc, (int64_t)KC * NC / pl.kc) / NR * NR : NC;
	if (pl.nc < NR)
		pl.nc = NR;
	return pl;
}

static int gemm_failed(atomic_int *failed)
{
	if (!atomic_load(failed))
		return 0;
	nrt_kernel_fail("gemm: out of host memory for the packing workspace");
	return -1;
}

/* One bf16 pair micro-kernel call of the small and shared drivers: the kp pairs of A (packed panel `ap`,
 * or in place from `a16` with rows lda bytes apart when ap is NULL) against packed B panel bq; the last
 * k-slice of a bf16 C with unit column stride (direct) adds the f32 partials (acc, unless first) and
 * stores bf16, the others leave f32 partials in acc (overwritten on the first slice). */
static inline __attribute__((always_inline)) void pairs_tile(const gemm_plan_t *pl, int64_t kp, const uint32_t *ap,
							     const uint16_t *a16, int64_t lda, const uint32_t *bq,
							     float *acc, int64_t ldacc, uint16_t *c, bool direct,
							     bool first, bool last, int mr, int nr)
{
	const nk_gemm_args_t *g = pl->g;

	if (direct && last) {
		if (ap)
			pl->isa->sbgemm_bf16c(kp, ap, bq, first ? NULL : acc, ldacc, c, g->rs_c, pl->alpha, pl->beta, mr, nr);
		else
			pl->isa->sbgemm_bf16c_a(kp, a16, lda, bq, first ? NULL : acc, ldacc, c, g->rs_c, pl->alpha, pl->beta,
						mr, nr);
	} else if (ap) {
		pl->isa->sbgemm(kp, ap, bq, acc, ldacc, 1, 1.0f, first ? 0.0f : 1.0f, mr, nr);
	} else {
		pl->isa->sbgemm_a(kp, a16, lda, bq, acc, ldacc, 1, 1.0f, first ? 0.0f : 1.0f, mr, nr);
	}
}

/* ---- shared packing: B packed once per call by all threads, then row panels over the pool ---------- */

/* Budget of the shared packed B (the calling thread's NK_WS_GEMM_B): a super block of columns
 * jc..jc+nc and k-slices pc..; f32 blocks are KC x NC per slice, bf16/f16 C keeps all of K in one
 * super block so that each C panel is accumulated over all of K in f32 and rounded once. */
#define SHARED_B_BYTES ((size_t)8 << 20)
/* bf16/f16 C: all of packed A (all of K) is shared too when it is at most this big (e.g. 1024 x 1024
 * bf16: 2 MiB); the pack job packs it with B, and the compute tasks can then be cut finer (column
 * chunks of at most SHARED_CHUNK_BYTES of packed B, at least 16 tasks per thread) at no packing cost. */
#define SHARED_A_BYTES ((size_t)4 << 20)
#define SHARED_CHUNK_BYTES ((size_t)512 << 10)
#define SHARED_TASK_MACS ((int64_t)1 << 20) /* ... but no finer than this many multiply-adds per task */

typedef struct {
	const gemm_plan_t *pl;
	int64_t b;            /* batch entry */
	int64_t jc, nc;       /* columns of the super block */
	int64_t pc0, kc_all;  /* k range of the super block */
	int64_t kcmax;        /* k per slice (KC, or KCB for pairs) */
	int64_t panels_n, panels_m, cols_per_task, col_tasks;
	int64_t claim;              /* tasks per claim of the compute job */
	int64_t nt;                 /* threads of the pool */
	atomic_int_fast64_t next;   /* next unclaimed task of the compute job */
	float *bp;            /* shared packed B: slice s at bp + s * (kcmax / div) * panels_n * NR */
	bool acc;             /* C is bf16/f16: accumulate each panel in f32 over all of K */
	/* packed A shared by the threads (NULL: each task packs its own A panel): row panel r at
	 * ap + r * MR * kwords, its slice s at + MR * s * (kcmax / div); packed by the pack job of
	 * the first column super block */
	float *ap;
	int64_t kwords;
	bool pack_a;          /* this pack job also packs A (tasks past the B panels) */
	bool inplace_b;       /* f32 row-major B read in place (sgemm_b): no B panels packed */
} shared_t;

static int64_t shared_slice_words(const shared_t *sh)
{
	return (sh->pl->pairs ? sh->kcmax / 2 : sh->kcmax) * sh->panels_n * NR;
}

/* Words of packed k per full slice (kcmax k: kcmax / 2 pairs for bf16). */
static int64_t shared_kslice_words(const shared_t *sh)
{
	return sh->pl->pairs ? sh->kcmax / 2 : sh->kcmax;
}

/* Packs row panel r of A, all slices of the super block's k range, into the shared ap. */
static void shared_pack_a(const shared_t *sh, int64_t r)
{
	const gemm_plan_t *pl = sh->pl;
	const nk_gemm_args_t *g = pl->g;
	int mr = (int)nk_min64(MR, g->M - r * MR);

	for (int64_t s = 0; s * sh->kcmax < sh->kc_all; s++) {
		int64_t pc = sh->pc0 + s * sh->kcmax, kc = nk_min64(sh->kcmax, sh->pc0 + sh->kc_all - pc);
		const void *src = at(g->A, sh->b * g->bs_a + r * MR * g->rs_a + pc * g->cs_a, pl->es);
		float *d = sh->ap + r * MR * sh->kwords + MR * s * shared_kslice_words(sh);

		if (pl->pairs)
			pl->isa->pack_a_pairs(src, g->rs_a, g->cs_a, mr, kc, (uint32_t *)d);
		else
			pl->isa->pack_a(src, g->dtype, g->rs_a, g->cs_a, mr, kc, d);
	}
}

/* Phase 1: packs panel (slice s, column panel q) of the super block; one task per panel. */
static void shared_pack(void *ctx, int64_t t0, int64_t t1)
{
	const shared_t *sh = ctx;
	const gemm_plan_t *pl = sh->pl;
	const nk_gemm_args_t *g = pl->g;
	int64_t npb = sh->inplace_b ? 0 : nk_cdiv(sh->kc_all, sh->kcmax) * sh->panels_n; /* B panel tasks; then A panels */

	for (int64_t t = t0, t2; t < t1; t = t2) {
		if (t >= npb) {
			shared_pack_a(sh, t - npb);
			t2 = t + 1;
			continue;
		}
		int64_t s = t / sh->panels_n, q = t % sh->panels_n;
		int64_t pc = sh->pc0 + s * sh->kcmax, kc = nk_min64(sh->kcmax, sh->pc0 + sh->kc_all - pc);
		int64_t j = sh->jc + q * NR, n;

		/* the consecutive panels of this slice in one call */
		t2 = nk_min64(nk_min64(t1, npb), (s + 1) * sh->panels_n);
		n = nk_min64((t2 - t) * NR, sh->jc + sh->nc - j);
		const void *src = at(g->B, sh->b * g->bs_b + pc * g->rs_b + j * g->cs_b, pl->es);
		float *dst = sh->bp + s * shared_slice_words(sh) + q * (pl->pairs ? (kc + 1) / 2 : kc) * NR;

		if (pl->pairs)
			pl->isa->pack_b_pairs(src, g->rs_b, g->cs_b, kc, n, (uint32_t *)dst);
		else
			pl->isa->pack_b(src, g->dtype, g->rs_b, g->cs_b, kc, n, dst);
	}
}

/* C (bf16/f16) rows i.. = alpha * acc + beta * C for an m x n block of acc (leading dimension ld). */
static void shared_acc_store(const gemm_plan_t *pl, const float *acc, int64_t ld, char *C, int m, int64_t n)
{
	const nk_gemm_args_t *g = pl->g;
	int64_t es = (int64_t)pl->es;
	float row[512];

	for (int i = 0; i < m; i++)
		for (int64_t j0 = 0; j0 < n; j0 += 512) {
			int64_t w = nk_min64(512, n - j0);
			char *c = C + (i * g->rs_c + j0 * g->cs_c) * es;
			const float *a = acc + i * ld + j0;

			if (pl->beta != 0) {
				nk_block_load_f32(row, c, g->cs_c * es, g->dtype, w);
				for (int64_t j = 0; j < w; j++)
					row[j] = pl->alpha * a[j] + pl->beta * row[j];
			} else {
				for (int64_t j = 0; j < w; j++)
					row[j] = pl->alpha * a[j];
			}
			nk_block_store_f32(c, g->cs_c * es, g->dtype, row, w);
		}
}

static void shared_compute_range(const shared_t *sh, float *ap, float *acc, int64_t t0, int64_t t1);

/* Phase 2 entry, once per thread: claims ranges of `claim` consecutive tasks from the shared counter
 * (single tasks near the end) until none is left, so the last thread to finish waits for at most one
 * task (the pool's own
 * chunks are fixed fractions of the job: with 20 tasks, chunks of 3 left one thread 11 tasks and
 * the other 9).  Nobody waits for work: a thread that finds the counter exhausted returns. */
static void shared_compute(void *ctx, int64_t u0, int64_t u1)
{
	shared_t *sh = ctx;
	int64_t ldacc = sh->cols_per_task * NR, ntasks = sh->panels_m * sh->col_tasks;
	float *ap = nk_ws_get(NK_WS_GEMM_A, WS_A_BYTES), *acc = NULL;

	if (sh->acc)
		acc = nk_ws_get(NK_WS_GEMM_C, (size_t)MR * ldacc * sizeof(float));
	if (!ap || (sh->acc && !acc)) {
		atomic_store(sh->pl->failed, 1);
		return;
	}
	for (int64_t u = u0; u < u1; u++)
		for (;;) {
			/* single tasks for the last two claims per thread, so that the thread that finishes
			 * last waits for at most one task */
			int64_t c = sh->claim > 1 && atomic_load_explicit(&sh->next, memory_order_relaxed) +
							      2 * sh->nt * sh->claim >= ntasks ? 1 : sh->claim;
			int64_t t0 = atomic_fetch_add(&sh->next, c);

			if (t0 >= ntasks)
				break;
			shared_compute_range(sh, ap, acc, t0, nk_min64(ntasks, t0 + c));
		}
}

/* Phase 2, tasks t0..t1-1: task t = (column chunk t / panels_m, row panel t % panels_m).  For its MR
 * rows, every k-slice: pack the A panel (into this thread's buffer ap), sweep the chunk's B panels
 * (bf16/f16 C: f32 partials in acc). */
static void shared_compute_range(const shared_t *sh, float *ap, float *acc, int64_t t0, int64_t t1)
{
	const gemm_plan_t *pl = sh->pl;
	const nk_gemm_args_t *g = pl->g;
	int64_t nslices = nk_cdiv(sh->kc_all, sh->kcmax), slice = shared_slice_words(sh);
	int64_t ldacc = sh->cols_per_task * NR;
	/* bf16 C with unit column stride: the last k-slice's micro-kernel adds the f32 partials and
	 * stores bf16 itself */
	bool direct = pl->pairs && pl->isa->sbgemm_bf16c && g->cs_c == 1;
	/* f32 C and a bias row (addmm's): the first k-slice's micro-kernel stores alpha A B + beta bias
	 * itself, instead of a copy of the bias into C read back as C */
	bool bias_ukr = g->bias && sh->pc0 == 0 && !sh->inplace_b && !pl->pairs && !sh->acc && g->dtype == NK_F32 && g->cs_c == 1 &&
			g->rs_bias == 0 && g->cs_bias == 1 && pl->isa->sgemm_bias;
	/* f32 row-major A whose task covers every column of the super block: the micro-kernel reads the
	 * task's rows in place (each row is read by one task only; a packed panel would be a transpose of
	 * it, ~4 % of a K = 1152 GEMM) unless the row stride crowds the rows into one L1 set */
	bool a_inplace = !pl->pairs && !sh->acc && !sh->ap && g->dtype == NK_F32 && g->cs_a == 1 && g->cs_c == 1 &&
			 sh->col_tasks == 1 && pl->isa->sgemm_a && rows_per_l1_set(g->rs_a * 4) <= INPLACE_A_MAX_ROWS_PER_SET;
	/* f32 column-major A packed per task: its next panel prefetched from inside the micro-kernels */
	bool spread = !pl->pairs && !sh->acc && !sh->ap && g->dtype == NK_F32 && g->rs_a == 1 && g->cs_a != 1 &&
		      pl->isa->sgemm_b_pf;

	for (int64_t t = t0; t < t1; t++) {
		int64_t ct = t / sh->panels_m, ir = t % sh->panels_m * MR;
		int64_t q0 = ct * sh->cols_per_task, q1 = nk_min64(sh->panels_n, q0 + sh->cols_per_task);
		int64_t j0 = sh->jc + q0 * NR, ncols = nk_min64(sh->jc + sh->nc, sh->jc + q1 * NR) - j0;
		int mr = (int)nk_min64(MR, g->M - ir);
		const void *A = at(g->A, sh->b * g->bs_a + ir * g->rs_a, pl->es);
		float *C = (float *)g->C + sh->b * g->bs_c + ir * g->rs_c + j0 * g->cs_c;
		char *Cb = (char *)g->C + (sh->b * g->bs_c + ir * g->rs_c + j0 * g->cs_c) * (int64_t)pl->es;

		if (g->bias && sh->pc0 == 0 && !bias_ukr) /* C's old value: the bias, copied into these rows just before use */
			bias_fill(g, sh->b, ir, mr, j0, ncols);
		for (int64_t s = 0; s < nslices; s++) {
			int64_t pc = sh->pc0 + s * sh->kcmax, kc = nk_min64(sh->kcmax, sh->pc0 + sh->kc_all - pc);
			const float *bs = sh->bp + s * slice;
			bool first = pc == 0;
			prefetch_t pf;

			/* the next A panel to pack: the next slice of these rows, else the next rows */
			if (sh->ap || pl->inplace_a || spread)
				pf = (prefetch_t){ 0 };
			else if (s + 1 < nslices)
				pf = prefetch_a_init(pl, A, ir, g->M, pc + kc, nk_min64(sh->kcmax, sh->pc0 + sh->kc_all - pc - kc), ncols);
			else if (t + 1 < t1 && (t + 1) % sh->panels_m)
				pf = prefetch_a_init(pl, A, ir + MR, g->M, sh->pc0, nk_min64(sh->kcmax, sh->kc_all), ncols);
			else
				pf = (prefetch_t){ 0 };
			/* prefetch_a_init takes offsets from A's panel base: rows relative to the panel */
			if (pf.row)
				pf.row -= ir * g->rs_a * (int64_t)pl->es;
			/* f32 column-major A (dY^T of a weight gradient): the next panel is prefetched by the
			 * micro-kernels, one run of MR floats every 4 k (sgemm_b_pf), not in bursts between
			 * calls (a burst of ~40 misses at a 4-6 KiB stride filled the miss queue and stalled
			 * on the prefetch instructions themselves: dW 1536 x 384 at K = 2048 spent 3.6 % of its
			 * samples there and ran 5-6 % slower) */
			const char *pfb = NULL;
			int64_t pfk = 0;

			if (spread) {
				int64_t ir2 = ir, k2 = pc + kc;

				if (s + 1 < nslices)
					pfk = nk_min64(sh->kcmax, sh->pc0 + sh->kc_all - pc - kc);
				else if (t + 1 < t1 && (t + 1) % sh->panels_m)
					ir2 = ir + MR, k2 = sh->pc0, pfk = nk_min64(sh->kcmax, sh->kc_all);
				pfb = (const char *)g->A + (sh->b * g->bs_a + ir2 + k2 * g->cs_a) * 4;
			}
			const float *as = ap;

			if (sh->ap)
				as = sh->ap + ir * sh->kwords + MR * s * shared_kslice_words(sh);
			if (pl->pairs) {
				int64_t kp = (kc + 1) / 2;

				if (pl->inplace_a)
					as = NULL;
				else if (!sh->ap)
					pl->isa->pack_a_pairs(at(A, pc * g->cs_a, pl->es), g->rs_a, g->cs_a, mr, kc,
							      (uint32_t *)ap);
				for (int64_t q = q0; q < q1; q++) {
					int64_t jr = (q - q0) * NR;
					int nr = (int)nk_min64(NR, ncols - jr);
					const uint32_t *bq = (const uint32_t *)bs + q * kp * NR;

					prefetch_a_step(&pf);
					pairs_tile(pl, kp, (const uint32_t *)as, (const uint16_t *)A + pc, g->rs_a * 2, bq,
						   acc + jr, ldacc, (uint16_t *)Cb + jr, direct, first, s == nslices - 1, mr,
						   nr);
				}
			} else {
				if (!sh->ap && !a_inplace)
					pl->isa->pack_a(at(A, pc * g->cs_a, pl->es), g->dtype, g->rs_a, g->cs_a, mr, kc, ap);
				for (int64_t q = q0; q < q1; q++) {
					int64_t jr = (q - q0) * NR;
					int nr = (int)nk_min64(NR, ncols - jr);

					/* spread: this call prefetches k-rows q'*ceil(kc/4).. of the next panel */
					int64_t k0 = (q - q0) * ((kc + 3) / 4);
					const char *pq = spread && k0 < pfk ? pfb + k0 * g->cs_a * 4 : NULL;

					prefetch_a_step(&pf);
					if (spread && !(first && bias_ukr))
						pl->isa->sgemm_b_pf(kc, as,
								    sh->inplace_b ? (const float *)g->B + sh->b * g->bs_b + pc * g->rs_b + j0 + jr
										  : bs + q * kc * NR,
								    sh->inplace_b ? g->rs_b : NR, C + jr * g->cs_c, g->rs_c, g->cs_c,
								    pl->alpha, first ? pl->beta : 1.0f, mr, nr, pq, g->cs_a * 4);
					else if (sh->acc)
						pl->isa->sgemm(kc, as, bs + q * kc * NR, acc + jr, ldacc, 1, 1.0f,
							       first ? 0.0f : 1.0f, mr, nr);
					else if (sh->inplace_b)
						pl->isa->sgemm_b(kc, as,
								 (const float *)g->B + sh->b * g->bs_b + pc * g->rs_b + j0 + jr,
								 g->rs_b, C + jr * g->cs_c, g->rs_c, g->cs_c, pl->alpha,
								 first ? pl->beta : 1.0f, mr, nr);
					else if (a_inplace)
						pl->isa->sgemm_a(kc, (const float *)A + pc, g->rs_a, bs + q * kc * NR, C + jr, g->rs_c,
								 pl->alpha, first ? pl->beta : 1.0f,
								 first && bias_ukr ? (const float *)g->bias + sh->b * g->bs_bias + j0 + jr
										   : NULL,
								 mr, nr);
					else if (first && bias_ukr)
						pl->isa->sgemm_bias(kc, as, bs + q * kc * NR, C + jr, g->rs_c, pl->alpha, pl->beta,
								    (const float *)g->bias + sh->b * g->bs_bias + j0 + jr, mr, nr);
					else
						pl->isa->sgemm(kc, as, bs + q * kc * NR, C + jr * g->cs_c, g->rs_c,
							       g->cs_c, pl->alpha, first ? pl->beta : 1.0f, mr, nr);
				}
			}
		}
		if (sh->acc && !direct)
			shared_acc_store(pl, acc, ldacc, Cb, mr, ncols);
	}
}

/* One batch entry with B packed once per super block and shared by the threads (two pool jobs per
 * super block: pack, compute).  Returns false when the shape does not suit it (then the caller uses
 * the per-task driver). */
static bool gemm_shared(gemm_plan_t *pl, int nt)
{
	const nk_gemm_args_t *g = pl->g;
	shared_t sh = { .pl = pl, .acc = g->dtype != NK_F32 };
	int64_t elem = pl->pairs ? 2 : 4; /* bytes of packed B per k per column */
	int64_t ncmax, kpad;
	size_t abytes = 0;
	bool fine = false;    /* fine column chunks (A costs nothing per task) */
	float *bp;

	sh.kcmax = pl->pairs ? KCB : pl->kc;
	kpad = nk_cdiv(g->K, sh.kcmax) * sh.kcmax;
	if (sh.acc) {
		/* all of K per super block */
		ncmax = (int64_t)SHARED_B_BYTES / (kpad * elem) / NR * NR;
		if (ncmax < 4 * NR)
			return false;
	} else {
		ncmax = pl->nc;
	}
	sh.panels_m = nk_cdiv(g->M, MR);
	if (sh.acc) {
		sh.kwords = nk_cdiv(g->K, sh.kcmax) * shared_kslice_words(&sh);
		abytes = (size_t)(sh.panels_m * MR * sh.kwords) * sizeof(float);
		if (abytes > SHARED_A_BYTES)
			abytes = 0;
		/* A read in place when it is small enough to stay in L3 (a bigger A, re-read by every
		 * column chunk from DRAM, made 2048^3 23 % slower): no packed A at all, tasks cut as finely
		 * as with a shared one */
		if ((size_t)(g->M * g->K) * 2 > SHARED_A_BYTES)
			pl->inplace_a = false;
		if (pl->inplace_a)
			abytes = 0, fine = true;
	}
	bp = nk_ws_get(NK_WS_GEMM_B, SHARED_B_BYTES + abytes);
	if (!bp) {
		atomic_store(pl->failed, 1);
		return true;
	}
	sh.bp = bp;
	sh.ap = abytes ? bp + SHARED_B_BYTES / sizeof(float) : NULL;
	fine = fine || sh.ap;
	for (int64_t b = 0; b < g->batch; b++)
		for (int64_t jc = 0; jc < g->N; jc += ncmax) {
			int64_t ksb; /* k per super block (f32: as many KC slices as fit) */

			sh.b = b;
			sh.jc = jc;
			sh.nc = nk_min64(ncmax, g->N - jc);
			sh.panels_n = nk_cdiv(sh.nc, NR);
			/* f32 B with unit column stride, rows at most a page apart, whole panels, and an A that
			 * is packed anyway (not row-major; the weight gradient dY^T X): B is read in place, with
			 * no pack job before the compute (the pack job read and wrote all of B while the
			 * cores did nothing else: dW 384 x 384, K = 2048, 3-5 % faster without it; with
			 * 6 KiB rows the micro-kernel lost what the pack job cost) */
			sh.inplace_b = !sh.acc && !pl->pairs && g->dtype == NK_F32 && g->cs_b == 1 && g->cs_a != 1 &&
				       g->rs_b * 4 <= 4096 && sh.nc % NR == 0 && pl->isa->sgemm_b;
			if (sh.acc || sh.inplace_b)
				ksb = g->K;
			else
				ksb = (int64_t)SHARED_B_BYTES / (sh.kcmax * sh.panels_n * NR * 4) * sh.kcmax;
			if (!sh.acc && !sh.inplace_b && pl->isa->shared_kslices > 0)
				ksb = nk_min64(ksb, pl->isa->shared_kslices * sh.kcmax);
			/* enough tasks for a dynamic balance: split columns when there are few row panels
			 * (shared A: chunks whose packed B stays in L2, at least 16 tasks per thread) */
			sh.col_tasks = nk_min64(sh.panels_n, nk_cdiv(8 * (int64_t)nt, sh.panels_m));
			if (fine) {
				int64_t cw = (int64_t)SHARED_CHUNK_BYTES / (sh.kwords * NR * (int64_t)sizeof(float));

				/* a small K makes tiny tasks: at most this many column chunks */
				int64_t most = sh.panels_n / nk_cdiv(SHARED_TASK_MACS, MR * NR * g->K);

				sh.col_tasks = nk_cdiv(sh.panels_n, cw < 1 ? 1 : cw);
				if (sh.col_tasks * sh.panels_m < 16 * (int64_t)nt)
					sh.col_tasks = nk_cdiv(16 * (int64_t)nt, sh.panels_m);
				sh.col_tasks = nk_min64(nk_min64(sh.panels_n, most < 1 ? 1 : most), sh.col_tasks);
			}
			sh.cols_per_task = nk_cdiv(sh.panels_n, sh.col_tasks);
			sh.col_tasks = nk_cdiv(sh.panels_n, sh.cols_per_task);
			for (int64_t pc0 = 0; pc0 < g->K; pc0 += ksb) {
				int64_t np;

				sh.pc0 = pc0;
				sh.kc_all = nk_min64(ksb, g->K - pc0);
				np = sh.inplace_b ? 0 : nk_cdiv(sh.kc_all, sh.kcmax) * sh.panels_n;
				/* shared A: packed with the first column super block (all of K: pc0 is 0) */
				sh.pack_a = sh.ap && jc == 0;
				if (sh.pack_a)
					np += sh.panels_m;
				if (np)
					nrt_parallel_for(np, 1, shared_pack, &sh);
				/* pairs of tasks per claim (the first prefetches the second's A rows) while
				 * that leaves at least 4 claims per thread */
				sh.claim = !fine && sh.panels_m * sh.col_tasks >= 8 * (int64_t)nt ? 2 : 1;
				sh.nt = nt;
				atomic_store(&sh.next, 0);
				nrt_parallel_for(nt, 1, shared_compute, &sh);
			}
		}
	return true;
}

/* ---- small M: A packed once and shared, B packed per column chunk by the thread that uses it ------- */

/* When all of packed A fits in L2 (M x K small), every task is a chunk of columns over all rows: its
 * thread packs the chunk's B panels (all of K) into its own buffer, where they stay in L2 while all the
 * row panels of A pass over them.  B is packed exactly once, by the thread that reads it, and never
 * goes through L3 (the shared driver's packed block is written by one core and read by both, and each
 * row panel streams it again).  Each element of C sums the same k-slices in the same order as the other
 * drivers. */
#define SMALL_A_BYTES ((size_t)1 << 20)    /* packed A (all row panels, all of K) at most: L2 */
#define SMALL_PANEL_BYTES ((size_t)256 << 10) /* one packed B panel (all of K) at most */
#define SMALL_CHUNK_PANELS 4                /* B panels per task at most */

typedef struct {
	const gemm_plan_t *pl;
	int64_t b;                  /* batch entry */
	int64_t kcmax, nslices;     /* k per slice (KC, or KCB for pairs), slices of K */
	int64_t kwords;             /* 32-bit words of one packed row of A (or column of B) over all of K */
	int64_t panels_m, panels_n, cw, ntasks; /* task t: B panels t*cw .. t*cw+cw-1 */
	int64_t nt;                 /* threads of the pool */
	atomic_int_fast64_t next;   /* next unclaimed task */
	float *ap;                  /* packed A: panel r at ap + r*MR*kwords, slice s at + MR*small_off(s) */
	atomic_int *state;          /* per row panel of ap: 0 not packed, 1 being packed, 2 ready */
	bool acc;                   /* C is bf16/f16: accumulate in f32 */
	bool inplace_b;             /* f32 B with unit column stride: full panels read in place (sgemm_b) */
} small_t;

/* Words of packed k before slice s (full slices hold kcmax k, kcmax/2 pairs), and in slice s. */
static int64_t small_off(const small_t *sm, int64_t s)
{
	return s * (sm->pl->pairs ? sm->kcmax / 2 : sm->kcmax);
}

static int64_t small_kc(const small_t *sm, int64_t s)
{
	return nk_min64(sm->kcmax, sm->pl->g->K - s * sm->kcmax);
}

/* Packs row panel r of A (all slices) into dst. */
static void small_pack_a(const small_t *sm, int64_t r, float *dst)
{
	const gemm_plan_t *pl = sm->pl;
	const nk_gemm_args_t *g = pl->g;
	int mr = (int)nk_min64(MR, g->M - r * MR);

	for (int64_t s = 0; s < sm->nslices; s++) {
		int64_t kc = small_kc(sm, s);
		const void *src = at(g->A, sm->b * g->bs_a + r * MR * g->rs_a + s * sm->kcmax * g->cs_a, pl->es);
		float *d = dst + MR * small_off(sm, s);

		if (pl->pairs)
			pl->isa->pack_a_pairs(src, g->rs_a, g->cs_a, mr, kc, (uint32_t *)d);
		else
			pl->isa->pack_a(src, g->dtype, g->rs_a, g->cs_a, mr, kc, d);
	}
}

/* Row panel r of packed A: the first thread to need it packs it into the shared buffer; a thread that
 * finds it being packed by another packs its own copy into `own` rather than wait. */
static const float *small_a_panel(const small_t *sm, int64_t r, float *own)
{
	atomic_int *st = &sm->state[r];
	int v = atomic_load_explicit(st, memory_order_acquire);
	float *dst = sm->ap + r * MR * sm->kwords;

	if (v == 2)
		return dst;
	if (v == 0 && atomic_compare_exchange_strong_explicit(st, &v, 1, memory_order_acquire, memory_order_acquire)) {
		small_pack_a(sm, r, dst);
		atomic_store_explicit(st, 2, memory_order_release);
		return dst;
	}
	if (v == 2)
		return dst;
	small_pack_a(sm, r, own);
	return own;
}

/* Task t: packs its B panels (slice s of the chunk at bp + small_off(s)*cw*NR, panel q of it at
 * + q*words(s)*NR), then runs every row panel of A over them. */
static void small_task(const small_t *sm, float *bp, float *acc, float *own, int64_t t)
{
	const gemm_plan_t *pl = sm->pl;
	const nk_gemm_args_t *g = pl->g;
	int64_t q0 = t * sm->cw, q1 = nk_min64(sm->panels_n, q0 + sm->cw), j0 = q0 * NR;
	int64_t ncols = nk_min64(g->N, q1 * NR) - j0, ldacc = sm->cw * NR, es = (int64_t)pl->es;
	bool direct = pl->pairs && pl->isa->sbgemm_bf16c && g->cs_c == 1;
	/* row-major f32 B: full panels are read in place (sgemm_b), only a ragged last panel is packed */
	int64_t qpack = sm->inplace_b ? ncols / NR : 0;

	for (int64_t s = 0; s < sm->nslices && qpack * NR < ncols; s++) {
		int64_t kc = small_kc(sm, s), jp = j0 + qpack * NR;
		const void *src = at(g->B, sm->b * g->bs_b + s * sm->kcmax * g->rs_b + jp * g->cs_b, pl->es);
		float *dst = bp + small_off(sm, s) * ldacc;

		if (pl->pairs)
			pl->isa->pack_b_pairs(src, g->rs_b, g->cs_b, kc, ncols - qpack * NR,
					      (uint32_t *)dst + qpack * ((kc + 1) / 2) * NR);
		else
			pl->isa->pack_b(src, g->dtype, g->rs_b, g->cs_b, kc, ncols - qpack * NR, dst + qpack * kc * NR);
	}
	/* the first tasks (one per thread, run at the same time) start at different row panels, so that they
	 * pack different panels of A instead of both wanting panel 0 */
	int64_t r0 = t % sm->nt * sm->panels_m / sm->nt;

	for (int64_t ri = 0; ri < sm->panels_m; ri++) {
		int64_t r = (r0 + ri) % sm->panels_m, ir = r * MR;
		int mr = (int)nk_min64(MR, g->M - ir);

		/* A read in place: the rows are spread evenly over the panels (128 = 8 x 13 + 2 x 12 rather
		 * than 9 x 14 + 2: a 2-row tile runs at 65 % of the peak, a 12-row one at the full rate) */
		if (pl->inplace_a) {
			ir = r * g->M / sm->panels_m;
			mr = (int)((r + 1) * g->M / sm->panels_m - ir);
		}
		/* pairs read from A in place need no packed panel */
		const float *ar = pl->inplace_a ? NULL : small_a_panel(sm, r, own);
		const uint16_t *a16 = (const uint16_t *)g->A + sm->b * g->bs_a + ir * g->rs_a;

		if (g->bias) /* C's old value: the bias, copied into the tile rows just before they are used */
			bias_fill(g, sm->b, ir, mr, j0, ncols);
		float *C = (float *)g->C + sm->b * g->bs_c + ir * g->rs_c + j0 * g->cs_c;
		char *Cb = (char *)g->C + (sm->b * g->bs_c + ir * g->rs_c + j0 * g->cs_c) * es;

		for (int64_t s = 0; s < sm->nslices; s++) {
			int64_t kc = small_kc(sm, s), kw = pl->pairs ? (kc + 1) / 2 : kc;
			const float *as = ar ? ar + MR * small_off(sm, s) : NULL, *bs = bp + small_off(sm, s) * ldacc;
			bool first = s == 0, last = s == sm->nslices - 1;

			for (int64_t q = 0; q < q1 - q0; q++) {
				int64_t jr = q * NR;
				int nr = (int)nk_min64(NR, ncols - jr);
				const float *bq = bs + q * kw * NR;

				if (pl->pairs)
					pairs_tile(pl, kw, (const uint32_t *)as, a16 + s * sm->kcmax, g->rs_a * 2,
						   (const uint32_t *)bq, acc + jr, ldacc, (uint16_t *)Cb + jr, direct, first,
						   last, mr, nr);
				else if (sm->acc)
					pl->isa->sgemm(kc, as, bq, acc + jr, ldacc, 1, 1.0f, first ? 0.0f : 1.0f, mr, nr);
				else if (q < qpack)
					pl->isa->sgemm_b(kc, as,
							 (const float *)g->B + sm->b * g->bs_b + s * sm->kcmax * g->rs_b + j0 + jr,
							 g->rs_b, C + jr * g->cs_c, g->rs_c, g->cs_c, pl->alpha,
							 first ? pl->beta : 1.0f, mr, nr);
				else
					pl->isa->sgemm(kc, as, bq, C + jr * g->cs_c, g->rs_c, g->cs_c, pl->alpha,
						       first ? pl->beta : 1.0f, mr, nr);
			}
		}
		if (sm->acc && !direct)
			shared_acc_store(pl, acc, ldacc, Cb, mr, ncols);
	}
}

/* Phase 2 entry, once per thread: claims tasks one at a time until none is left. */
static void small_compute(void *ctx, int64_t u0, int64_t u1)
{
	small_t *sm = ctx;
	/* the B chunk, then a private A panel */
	size_t bbytes = (size_t)(sm->kwords * sm->cw * NR) * sizeof(float);
	size_t abytes = (size_t)(MR * sm->kwords) * sizeof(float);
	float *bp = nk_ws_get(NK_WS_GEMM_A, bbytes + abytes > WS_A_BYTES ? bbytes + abytes : WS_A_BYTES), *acc = NULL;

	if (sm->acc)
		acc = nk_ws_get(NK_WS_GEMM_C, (size_t)MR * (size_t)(sm->cw * NR) * sizeof(float));
	if (!bp || (sm->acc && !acc)) {
		atomic_store(sm->pl->failed, 1);
		return;
	}
	for (int64_t u = u0; u < u1; u++)
		for (;;) {
			int64_t t = atomic_fetch_add(&sm->next, 1);

			if (t >= sm->ntasks)
				break;
			small_task(sm, bp, acc, bp + bbytes / sizeof(float), t);
		}
}

/* The small-M driver when the shape suits it (packed A and one B panel small enough, and enough
 * column panels for the threads); returns false otherwise. */
static bool gemm_small(gemm_plan_t *pl, int nt)
{
	const nk_gemm_args_t *g = pl->g;
	small_t sm = { .pl = pl, .acc = g->dtype != NK_F32, .inplace_b = g->dtype == NK_F32 && g->cs_b == 1 && pl->isa->sgemm_b };
	size_t abytes;

	if (g->dtype == NK_F64)
		return false;
	sm.kcmax = pl->pairs ? KCB : pl->kc;
	sm.nslices = nk_cdiv(g->K, sm.kcmax);
	sm.kwords = small_off(&sm, sm.nslices - 1) + (pl->pairs ? (small_kc(&sm, sm.nslices - 1) + 1) / 2 :
							   small_kc(&sm, sm.nslices - 1));
	sm.panels_m = nk_cdiv(g->M, MR);
	sm.panels_n = nk_cdiv(g->N, NR);
	if ((size_t)(sm.panels_m * MR * sm.kwords) * sizeof(float) > SMALL_A_BYTES ||
	    (size_t)(sm.kwords * NR) * sizeof(float) > SMALL_PANEL_BYTES || sm.panels_n < 2 * (int64_t)nt)
		return false;
	/* at least 8 tasks per thread where there are enough panels (a late thread costs half a task on
	 * average), at most SMALL_CHUNK_PANELS panels (and SMALL_PANEL_BYTES) each */
	sm.cw = nk_min64(SMALL_CHUNK_PANELS, sm.panels_n / (16 * (int64_t)nt));
	sm.cw = nk_min64(sm.cw, (int64_t)(SMALL_PANEL_BYTES / ((size_t)(sm.kwords * NR) * sizeof(float))));
	if (sm.cw < 1)
		sm.cw = 1;
	sm.ntasks = nk_cdiv(sm.panels_n, sm.cw);
	sm.nt = nt;
	/* packed A, then the panel states */
	abytes = (size_t)(sm.panels_m * MR * sm.kwords) * sizeof(float);
	sm.ap = nk_ws_get(NK_WS_GEMM_B, abytes + (size_t)sm.panels_m * sizeof(atomic_int));
	if (!sm.ap) {
		atomic_store(pl->failed, 1);
		return true;
	}
	sm.state = (atomic_int *)((char *)sm.ap + abytes);
	for (int64_t b = 0; b < g->batch; b++) {
		sm.b = b;
		for (int64_t r = 0; r < sm.panels_m; r++)
			atomic_store_explicit(&sm.state[r], 0, memory_order_relaxed);
		atomic_store(&sm.next, 0);
		nrt_parallel_for(nt, 1, small_compute, &sm);
	}
	return true;
}

int nk_gemm_packed(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa)
{
	atomic_int failed = 0;
	nk_gemm_args_t nb;
	gemm_plan_t pl;
	double fma = (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
	int nt = nrt_num_threads();
	int64_t want = 1, ntasks;

	if (g->bias && g->beta == 0) {
		nb = *g;
		nb.bias = NULL;
		g = &nb;
	}
	pl = gemm_plan(g, isa, &failed);

	/* small M: A packed once, B per column chunk in the thread's own buffer (gemm_small) */
	if (fma >= GEMM_PAR_MIN_FMA && g->batch < 2 * nt && gemm_small(&pl, nt))
		return gemm_failed(&failed);
	/* a few batch entries on several threads: B packed once and shared (gemm_shared; it copies the
	 * bias into each task's rows of C just before their first k-slice) */
	if (nt > 1 && fma >= GEMM_PAR_MIN_FMA && g->batch < 2 * nt && g->dtype != NK_F64 && gemm_shared(&pl, nt))
		return gemm_failed(&failed);
	if (g->bias) {
		/* the other drivers read the old C: the bias is copied there first */
		nb = *g;
		bias_prefill(&nb);
		g = pl.g = &nb;
	}
	/* per-task packing (f64, many batch entries, K too long for the shared bf16/f16 block): one
	 * task per thread for big matrices (each task packs all of its B), two for load balance
	 * otherwise */
	if (nt > 1 && fma >= GEMM_PAR_MIN_FMA && g->batch < 2 * nt)
		want = nk_cdiv((fma / g->batch >= GEMM_BIG_FMA ? 1 : 2) * nt, g->batch);
	gemm_partition(&pl, want);
	ntasks = g->batch * pl.tiles_m * pl.tiles_n;
	nrt_parallel_for(ntasks, fma >= GEMM_PAR_MIN_FMA ? 1 : ntasks, gemm_tasks, &pl);
	return gemm_failed(&failed);
}

int nk_gemm_packed_1t(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa)
{
	atomic_int failed = 0;
	nk_gemm_args_t nb;
	gemm_plan_t pl;

	if (g->bias) {
		nb = *g;
		if (g->beta != 0)
			for (int64_t b = 0; b < g->batch; b++)
				bias_fill(g, b, 0, g->M, 0, g->N);
		nb.bias = NULL;
		g = &nb;
	}
	pl = gemm_plan(g, isa, &failed);

	gemm_partition(&pl, 1);
	gemm_tasks(&pl, 0, g->batch * pl.tiles_m * pl.tiles_n);
	return gemm_failed(&failed);
}

/* ---- entry point -------------------------------------------------------------------------------- */

/* K == 0: C = beta * C (beta == 0 writes zeros without reading C). */
static void gemm_scale_c(const nk_gemm_args_t *g)
{
	for (int64_t b = 0; b < g->batch; b++)
		for (int64_t i = 0; i < g->M; i++)
			for (int64_t j = 0; j < g->N; j++) {
				int64_t o = b * g->bs_c + i * g->rs_c + j * g->cs_c;
				double v = g->beta == 0 ? 0 : g->beta * nk_fp_loadd(g->C, g->dtype, o);

				nk_fp_stored(g->C, g->dtype, o, v);
			}
}

/* bf16 on the AMX tiles (gemm_amx.c) rather than the AVX-512 pair kernels.  Measured on the Intel Xeon
 * (one thread, GFLOP/s, tiles / pairs): 4x768x768 41 / 28, 12x768x768 118 / 64, 64x64x16 73 / 19,
 * 256x256x16 82 / 71, 768x768x8 49 / 51, 32^3 84 / 44: the tiles win from 4 rows or columns and 16 k,
 * even mostly padding. */
static bool amx_suits(const nk_gemm_args_t *g)
{
	return g->M >= 4 && g->N >= 4 && g->K >= 16;
}

int nk_gemm_run(void *args)
{
	const nk_gemm_args_t *g0 = args;
	nk_gemm_args_t g;
	nk_gemm_isa_t isa;

	if (gemm_check(g0))
		return -1;
	if (!g0->M || !g0->N || !g0->batch)
		return 0;
	if (nk_using_reference())
		return nk_gemm_ref(args);
	g = *g0;
	if (g.beta == 0)
		g.bias = NULL;
	if (!g.K || g.M == 1 || g.N == 1)
		bias_prefill(&g);
	if (!g.K) {
		gemm_scale_c(&g);
		return 0;
	}
	if (g.M == 1 || g.N == 1)
		return nk_gemv_run(&g);
	if (g.rs_c == 1 && g.cs_c != 1) {
		/* column-major C: compute C^T = B^T A^T, whose C is row-major */
		nk_gemm_args_t t = g;

		t.M = g.N, t.N = g.M;
		t.A = g.B, t.rs_a = g.cs_b, t.cs_a = g.rs_b, t.bs_a = g.bs_b;
		t.B = g.A, t.rs_b = g.cs_a, t.cs_b = g.rs_a, t.bs_b = g.bs_a;
		t.rs_c = g.cs_c, t.cs_c = g.rs_c;
		t.rs_bias = g.cs_bias, t.cs_bias = g.rs_bias;
		g = t;
	}
	isa = nk_gemm_isa_select();
	if (g.dtype == NK_BF16 && isa.bf16_tiles && amx_suits(&g))
		return isa.bf16_tiles(&g);
	return nk_gemm_packed(&g, &isa);
}
