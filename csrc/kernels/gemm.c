/* gemm.c - C[b] = alpha * A[b] @ B[b] + beta * C[b].
 *
 * nk_gemm_run picks a path:
 *   - the portable reference nk_gemm_ref (also when NEURON_KERNELS=ref),
 *   - a GEMV path for M == 1 or N == 1 (no packing),
 *   - the packed, cache-blocked driver (BLIS-style) for f32/bf16/f16/f64 with the micro-kernels and packers
 *     of the best ISA table (nk_gemm_isa_select: AVX-512 in gemm_avx512.c, else the portable ones here).
 * The micro-kernel contract (packed panels, edge tiles, strides) is written out in docs/kernels.md.
 * Threading: tasks are rectangles of C (and batch entries) run through nrt_parallel_for; no task
 * writes another's C, so results do not depend on the thread count.
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
#include "nk_fp.h"
#include "nk_gemm_impl.h"
#include "nk_ws.h"
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

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* Address of element off (in elements) of a buffer of elem_size-byte elements. */
static const void *at(const void *p, int64_t off, size_t elem_size)
{
	return (const char *)p + off * (int64_t)elem_size;
}

static bool gemm_dtype_ok(int dtype)
{
	return dtype == NK_F32 || dtype == NK_F64 || dtype == NK_BF16 || dtype == NK_F16;
}

/* Validates the arguments; fails the kernel (and returns -1) on a bad call. */
static int gemm_check(const nk_gemm_args_t *g)
{
	if (!g) {
		nrt_kernel_fail("gemm: null arguments");
		return -1;
	}
	if (!gemm_dtype_ok(g->dtype)) {
		nrt_kernel_fail("gemm: unsupported dtype %d", g->dtype);
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

/* ---- reference ---------------------------------------------------------------------------------- */

/* Rows [r0, r1) of the flattened (batch, M) rows: one dot product per element of C, accumulated in
 * f32 (f64 for f64), then alpha/beta in the same precision.  beta == 0 does not read C. */
static void gemm_ref_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_gemm_args_t *g = ctx;

	for (int64_t r = r0; r < r1; r++) {
		int64_t b = r / g->M, i = r % g->M;
		int64_t oa = b * g->bs_a + i * g->rs_a, ob = b * g->bs_b, oc = b * g->bs_c + i * g->rs_c;

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
	nrt_parallel_for(g->batch * g->M, cdiv(1 << 16, g->N * (g->K + 1)), gemm_ref_rows, (void *)g);
	return 0;
}

/* ---- portable micro-kernels and packing --------------------------------------------------------- */

/* Writes alpha*acc + beta*C for the m x n corner of an MR x NR f32 tile; beta == 0 does not read C. */
static void tile_store(const float *acc, float *c, int64_t rs_c, int64_t cs_c, float alpha, float beta,
		       int m, int n)
{
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			float *p = c + i * rs_c + j * cs_c;
			float v = alpha * acc[i * NR + j];

			*p = beta == 0 ? v : v + beta * *p;
		}
}

void nk_sgemm_ref_14x32(int64_t k, const float *a, const float *b, float *c, int64_t rs_c, int64_t cs_c,
			float alpha, float beta, int m, int n)
{
	float acc[MR * NR] = { 0 };

	for (int64_t p = 0; p < k; p++)
		for (int i = 0; i < MR; i++)
			for (int j = 0; j < NR; j++)
				acc[i * NR + j] += a[p * MR + i] * b[p * NR + j];
	tile_store(acc, c, rs_c, cs_c, alpha, beta, m, n);
}

void nk_sbgemm_ref_14x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t rs_c,
			 int64_t cs_c, float alpha, float beta, int m, int n)
{
	float acc[MR * NR] = { 0 };

	for (int64_t p = 0; p < kp; p++)
		for (int i = 0; i < MR; i++) {
			uint32_t x = a[p * MR + i];
			float a0 = nk_bf16_to_f32((uint16_t)x), a1 = nk_bf16_to_f32((uint16_t)(x >> 16));

			for (int j = 0; j < NR; j++) {
				uint32_t y = b[p * NR + j];

				acc[i * NR + j] += a0 * nk_bf16_to_f32((uint16_t)y) +
						   a1 * nk_bf16_to_f32((uint16_t)(y >> 16));
			}
		}
	tile_store(acc, c, rs_c, cs_c, alpha, beta, m, n);
}

void nk_dgemm_ref_14x16(int64_t k, const double *a, const double *b, double *c, int64_t rs_c, int64_t cs_c,
			double alpha, double beta, int m, int n)
{
	double acc[DMR * DNR] = { 0 };

	for (int64_t p = 0; p < k; p++)
		for (int i = 0; i < DMR; i++)
			for (int j = 0; j < DNR; j++)
				acc[i * DNR + j] += a[p * DMR + i] * b[p * DNR + j];
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double *q = c + i * rs_c + j * cs_c, v = alpha * acc[i * DNR + j];

			*q = beta == 0 ? v : v + beta * *q;
		}
}

void nk_dgemm_pack_a(const double *src, int64_t rs, int64_t cs, int m, int64_t k, double *dst)
{
	if (cs == 1)
		for (int i = 0; i < m; i++)
			for (int64_t p = 0; p < k; p++)
				dst[p * DMR + i] = src[i * rs + p];
	else
		for (int64_t p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				dst[p * DMR + i] = src[i * rs + p * cs];
	for (int64_t p = 0; p < k && m < DMR; p++)
		for (int i = m; i < DMR; i++)
			dst[p * DMR + i] = 0;
}

void nk_dgemm_pack_b(const double *src, int64_t rs, int64_t cs, int64_t k, int64_t n, double *dst)
{
	for (int64_t q = 0; q * DNR < n; q++) {
		double *d = dst + q * k * DNR;
		const double *s = src + q * DNR * cs;
		int nr = (int)min64(DNR, n - q * DNR);

		if (rs == 1 && cs != 1)
			for (int j = 0; j < nr; j++)
				for (int64_t p = 0; p < k; p++)
					d[p * DNR + j] = s[j * cs + p];
		else
			for (int64_t p = 0; p < k; p++)
				for (int j = 0; j < nr; j++)
					d[p * DNR + j] = s[p * rs + j * cs];
		for (int64_t p = 0; p < k && nr < DNR; p++)
			for (int j = nr; j < DNR; j++)
				d[p * DNR + j] = 0;
	}
}

void nk_gemm_pack_a_ref(const void *src, int dtype, int64_t rs, int64_t cs, int m, int64_t k, float *dst)
{
	if (dtype == NK_F32 && cs == 1) {
		const float *s = src;

		for (int i = 0; i < m; i++)
			for (int64_t p = 0; p < k; p++)
				dst[p * MR + i] = s[i * rs + p];
	} else {
		for (int64_t p = 0; p < k; p++)
			for (int i = 0; i < m; i++)
				dst[p * MR + i] = nk_fp_loadf(src, dtype, i * rs + p * cs);
	}
	for (int64_t p = 0; p < k; p++)
		for (int i = m; i < MR; i++)
			dst[p * MR + i] = 0;
}

void nk_gemm_pack_b_ref(const void *src, int dtype, int64_t rs, int64_t cs, int64_t k, int64_t n, float *dst)
{
	for (int64_t q = 0; q * NR < n; q++) {
		float *d = dst + q * k * NR;
		int nr = (int)min64(NR, n - q * NR);
		int64_t o = q * NR * cs;

		for (int64_t p = 0; p < k; p++) {
			if (dtype == NK_F32 && cs == 1)
				memcpy(d + p * NR, (const float *)src + o + p * rs, (size_t)nr * sizeof(float));
			else
				for (int j = 0; j < nr; j++)
					d[p * NR + j] = nk_fp_loadf(src, dtype, o + p * rs + j * cs);
			for (int j = nr; j < NR; j++)
				d[p * NR + j] = 0;
		}
	}
}

/* bf16 pair packing for the sbgemm micro-kernels (layouts in nk_gemm_impl.h); an odd k is padded with a
 * zero k. */
void nk_gemm_pack_a_pairs_ref(const void *src, int64_t rs, int64_t cs, int m, int64_t k, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	for (int64_t pp = 0; pp < kp; pp++) {
		int64_t p = 2 * pp;

		for (int i = 0; i < m; i++) {
			uint32_t lo = s[i * rs + p * cs];
			uint32_t hi = p + 1 < k ? s[i * rs + (p + 1) * cs] : 0;

			dst[pp * MR + i] = lo | hi << 16;
		}
		for (int i = m; i < MR; i++)
			dst[pp * MR + i] = 0;
	}
}

void nk_gemm_pack_b_pairs_ref(const void *src, int64_t rs, int64_t cs, int64_t k, int64_t n, uint32_t *dst)
{
	const uint16_t *s = src;
	int64_t kp = (k + 1) / 2;

	for (int64_t q = 0; q * NR < n; q++) {
		uint32_t *d = dst + q * kp * NR;
		int nr = (int)min64(NR, n - q * NR);
		const uint16_t *sq = s + q * NR * cs;

		for (int64_t pp = 0; pp < kp; pp++) {
			const uint16_t *r0 = sq + 2 * pp * rs, *r1 = r0 + rs;
			bool odd = 2 * pp + 1 >= k;

			for (int j = 0; j < nr; j++)
				d[pp * NR + j] = (uint32_t)r0[j * cs] | (odd ? 0u : (uint32_t)r1[j * cs] << 16);
			for (int j = nr; j < NR; j++)
				d[pp * NR + j] = 0;
		}
	}
}

const nk_gemm_isa_t nk_gemm_isa_ref = {
	.name = "portable",
	.sgemm = nk_sgemm_ref_14x32,
	.sbgemm = NULL,
	.dgemm = nk_dgemm_ref_14x16,
	.pack_a = nk_gemm_pack_a_ref,
	.pack_b = nk_gemm_pack_b_ref,
	.pack_a_pairs = nk_gemm_pack_a_pairs_ref,
	.pack_b_pairs = nk_gemm_pack_b_pairs_ref,
};

nk_gemm_isa_t nk_gemm_isa_select(void)
{
	nk_gemm_isa_t isa = nk_gemm_isa_ref;

#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
		isa = nk_gemm_isa_avx512;
		if (!__builtin_cpu_supports("avx512bf16"))
			isa.sbgemm = NULL;
	}
#endif
	return isa;
}

/* ---- the packed driver -------------------------------------------------------------------------- */

/* Per-thread workspace (nk_ws.h): the packed B block, the packed A panel, and the f32 accumulation
 * block used when C is bf16/f16 (so K blocks are summed in f32, rounded once). */
#define WS_B_BYTES ((size_t)KC * NC * sizeof(float))
#define WS_A_BYTES ((size_t)DMR * DKC * sizeof(double))
#define WS_C_BYTES ((size_t)MC * NCA * sizeof(float))

typedef struct {
	float *a, *b, *c;
} gemm_bufs_t;

typedef struct {
	const nk_gemm_args_t *g;
	const nk_gemm_isa_t *isa;
	bool pairs;          /* bf16 through the sbgemm (pair) micro-kernel */
	size_t es;           /* element size of A, B, C */
	float alpha, beta;
	int64_t tm, tn;      /* task rectangle */
	int64_t tiles_m, tiles_n;
	atomic_int *failed;  /* set by a task that could not get its workspace */
} gemm_plan_t;

/* Prefetch of the next A panel (rows i0.., k pc..pc+kc) spread over the micro-kernel calls of the
 * current one, so that packing it finds it in cache (A rows are far apart: the hardware prefetcher
 * does not follow 14 strided streams well). */
typedef struct {
	const char *base; /* row 0 of the panel at column pc */
	int64_t row_bytes, line_bytes, lines, next, per_step;
} prefetch_t;

static prefetch_t prefetch_a_init(const gemm_plan_t *pl, const void *A, int64_t i0, int64_t m, int64_t pc,
				  int64_t kc, int64_t nc)
{
	const nk_gemm_args_t *g = pl->g;
	prefetch_t pf = { 0 };
	int64_t rows = min64(MR, m - i0), steps = cdiv(nc, NR);

	if (rows <= 0 || g->cs_a != 1)
		return pf;
	pf.base = (const char *)at(A, i0 * g->rs_a + pc, pl->es);
	pf.row_bytes = g->rs_a * (int64_t)pl->es;
	pf.line_bytes = cdiv(kc * (int64_t)pl->es, 64);
	pf.lines = rows * pf.line_bytes;
	pf.per_step = cdiv(pf.lines, steps);
	return pf;
}

static void prefetch_a_step(prefetch_t *pf)
{
	for (int64_t n = 0; n < pf->per_step && pf->next < pf->lines; n++, pf->next++)
		__builtin_prefetch(pf->base + pf->next / pf->line_bytes * pf->row_bytes + pf->next % pf->line_bytes * 64,
				   0, 2);
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

	for (int64_t jc = 0; jc < n; jc += NC) {
		int64_t nc = min64(NC, n - jc);

		for (int64_t pc = 0; pc < g->K; pc += KC) {
			int64_t kc = min64(KC, g->K - pc);
			float beta = pc == 0 ? pl->beta : 1.0f;

			pl->isa->pack_b(at(B, pc * g->rs_b + jc * g->cs_b, pl->es), g->dtype, g->rs_b, g->cs_b, kc,
					nc, ws->b);
			for (int64_t ir = 0; ir < m; ir += MR) {
				int mr = (int)min64(MR, m - ir);
				prefetch_t pf = prefetch_a_init(pl, A, ir + MR, m, pc, kc, nc);

				pl->isa->pack_a(at(A, ir * g->rs_a + pc * g->cs_a, pl->es), g->dtype, g->rs_a,
						g->cs_a, mr, kc, ws->a);
				for (int64_t jr = 0; jr < nc; jr += NR) {
					prefetch_a_step(&pf);
					pl->isa->sgemm(kc, ws->a, ws->b + jr * kc,
						       C + ir * g->rs_c + (jc + jr) * g->cs_c, g->rs_c, g->cs_c,
						       pl->alpha, beta, mr, (int)min64(NR, nc - jr));
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
		int mr = (int)min64(MR, mc - ir);
		const void *a = at(A, ir * g->rs_a, pl->es);

		if (pl->pairs) {
			int64_t kp = (kc + 1) / 2;

			pl->isa->pack_a_pairs(a, g->rs_a, g->cs_a, mr, kc, (uint32_t *)ws->a);
			for (int64_t jr = 0; jr < nc; jr += NR)
				pl->isa->sbgemm(kp, (const uint32_t *)ws->a, (const uint32_t *)bp + jr * kp,
						ws->c + ir * NCA + jr, NCA, 1, 1.0f, beta, mr, (int)min64(NR, nc - jr));
		} else {
			pl->isa->pack_a(a, g->dtype, g->rs_a, g->cs_a, mr, kc, ws->a);
			for (int64_t jr = 0; jr < nc; jr += NR)
				pl->isa->sgemm(kc, ws->a, bp + jr * kc, ws->c + ir * NCA + jr, NCA, 1, 1.0f,
					       beta, mr, (int)min64(NR, nc - jr));
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
	int64_t kcmax = pl->pairs ? KCB : KC, slice = kcmax * NCA / (pl->pairs ? 2 : 1);
	bool resident = cdiv(g->K, kcmax) * slice <= KC * NC;

	for (int64_t jc = 0; jc < n; jc += NCA) {
		int64_t nc = min64(NCA, n - jc);

		for (int64_t pc = 0; resident && pc < g->K; pc += kcmax)
			acc_pack_b(pl, B, pc, min64(kcmax, g->K - pc), jc, nc, ws->b + pc / kcmax * slice);
		for (int64_t ic = 0; ic < m; ic += MC) {
			int64_t mc = min64(MC, m - ic);

			for (int64_t pc = 0; pc < g->K; pc += kcmax) {
				int64_t kc = min64(kcmax, g->K - pc);
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
		int64_t nc = min64(DNC, n - jc);

		for (int64_t pc = 0; pc < g->K; pc += DKC) {
			int64_t kc = min64(DKC, g->K - pc);
			double beta = pc == 0 ? g->beta : 1.0;

			nk_dgemm_pack_b(B + pc * g->rs_b + jc * g->cs_b, g->rs_b, g->cs_b, kc, nc, bp);
			for (int64_t ir = 0; ir < m; ir += DMR) {
				int mr = (int)min64(DMR, m - ir);

				nk_dgemm_pack_a(A + ir * g->rs_a + pc * g->cs_a, g->rs_a, g->cs_a, mr, kc, ap);
				for (int64_t jr = 0; jr < nc; jr += DNR)
					pl->isa->dgemm(kc, ap, bp + jr * kc, C + ir * g->rs_c + (jc + jr) * g->cs_c,
						       g->rs_c, g->cs_c, g->alpha, beta, mr, (int)min64(DNR, nc - jr));
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
		int64_t m = min64(pl->tm, pl->g->M - i0), n = min64(pl->tn, pl->g->N - j0);

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
	int64_t tm = min64(want, cdiv(M, 4 * MR)), tn;

	if (tm < 1)
		tm = 1;
	tn = min64(cdiv(want, tm), cdiv(N, 256));
	if (tn < 1)
		tn = 1;
	pl->tn = cdiv(cdiv(N, tn), NR) * NR;
	pl->tm = cdiv(cdiv(M, tm), MR) * MR;
	pl->tiles_n = cdiv(N, pl->tn);
	pl->tiles_m = cdiv(M, pl->tm);
}

static gemm_plan_t gemm_plan(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa, atomic_int *failed)
{
	gemm_plan_t pl = {
		.g = g,
		.isa = isa,
		.pairs = g->dtype == NK_BF16 && isa->sbgemm,
		.es = nk_fp_elem_size(g->dtype),
		.alpha = (float)g->alpha,
		.beta = (float)g->beta,
		.failed = failed,
	};

	return pl;
}

static int gemm_failed(atomic_int *failed)
{
	if (!atomic_load(failed))
		return 0;
	nrt_kernel_fail("gemm: out of host memory for the packing workspace");
	return -1;
}

int nk_gemm_packed(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa)
{
	atomic_int failed = 0;
	gemm_plan_t pl = gemm_plan(g, isa, &failed);
	double fma = (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
	int nt = nrt_num_threads();
	int64_t want = 1, ntasks;

	/* one task per thread for big matrices (each task packs all of its B), two for load balance
	 * otherwise */
	if (nt > 1 && fma >= GEMM_PAR_MIN_FMA && g->batch < 2 * nt)
		want = cdiv((fma / g->batch >= GEMM_BIG_FMA ? 1 : 2) * nt, g->batch);
	gemm_partition(&pl, want);
	ntasks = g->batch * pl.tiles_m * pl.tiles_n;
	nrt_parallel_for(ntasks, fma >= GEMM_PAR_MIN_FMA ? 1 : ntasks, gemm_tasks, &pl);
	return gemm_failed(&failed);
}

int nk_gemm_packed_1t(const nk_gemm_args_t *g, const nk_gemm_isa_t *isa)
{
	atomic_int failed = 0;
	gemm_plan_t pl = gemm_plan(g, isa, &failed);

	gemm_partition(&pl, 1);
	gemm_tasks(&pl, 0, g->batch * pl.tiles_m * pl.tiles_n);
	return gemm_failed(&failed);
}

/* ---- GEMV: y = alpha * x @ B + beta * y (x: K, B: K x N, y: N) ---------------------------------- */

typedef struct {
	int dtype;
	int64_t K, N, batch;
	const void *x; int64_t incx, bs_x;
	const void *B; int64_t rs, cs, bs_b;
	void *y; int64_t incy, bs_y;
	double alpha, beta;
} gemv_t;

#define GEMV_JB 4096 /* columns per task when rows of B are contiguous (one accumulator row) */
#define GEMV_JD 16   /* columns per task for the dot-product form */
#define GEMV_KC 512  /* k per chunk converted to f32 */

/* n elements at p + off*es, stride st (elements), as f32 (f64 narrowed is not used here). */
static void gemv_load(float *dst, const void *p, int dtype, int64_t off, int64_t st, int64_t n)
{
	int64_t es = (int64_t)nk_fp_elem_size(dtype);

	nk_block_load_f32(dst, (const char *)p + off * es, st * es, dtype, n);
}

static void gemv_store(const gemv_t *v, void *y, int64_t j, double acc)
{
	int64_t o = j * v->incy;

	if (v->dtype == NK_F64) {
		double r = v->alpha * acc;

		if (v->beta != 0)
			r += v->beta * ((double *)y)[o];
		((double *)y)[o] = r;
	} else {
		float r = (float)v->alpha * (float)acc;

		if (v->beta != 0)
			r += (float)v->beta * nk_fp_loadf(y, v->dtype, o);
		nk_fp_storef(y, v->dtype, o, r);
	}
}

/* Row segments of B are short and far apart (a page each), which the hardware prefetcher does not
 * follow: fetch the segment GEMV_PF rows ahead by hand. */
#define GEMV_PF 4

static void gemv_prefetch_row(const gemv_t *v, int64_t ob, int64_t k, int64_t n, int64_t es)
{
	const char *r;

	if (k + GEMV_PF >= v->K)
		return;
	r = (const char *)v->B + (ob + (k + GEMV_PF) * v->rs) * es;
	for (int64_t o = 0; o < n * es; o += 64)
		__builtin_prefetch(r + o, 0, 3);
}

/* acc[0..n) += sum over rows k in [k0, k1) of x[k] * B[k, j0..j0+n) for batch entry b, when rows of B
 * are contiguous: each row segment is converted to f32 and added (f64 into dacc for f64). */
static void gemv_rows_range(const gemv_t *v, int64_t b, int64_t j0, int64_t n, int64_t k0, int64_t k1, float *acc,
			    double *dacc)
{
	const void *x = at(v->x, b * v->bs_x, nk_fp_elem_size(v->dtype));
	int64_t ob = b * v->bs_b + j0, es = (int64_t)nk_fp_elem_size(v->dtype);
	float row[GEMV_JB];

	for (int64_t k = k0; k < k1; k++) {
		gemv_prefetch_row(v, ob, k, n, es);
		if (v->dtype == NK_F64) {
			const double *restrict r = (const double *)v->B + ob + k * v->rs;
			double xk = ((const double *)x)[k * v->incx];

			for (int64_t j = 0; j < n; j++)
				dacc[j] += xk * r[j];
		} else if (v->dtype == NK_F32) {
			const float *restrict r = (const float *)v->B + ob + k * v->rs;
			float xk = ((const float *)x)[k * v->incx];

			for (int64_t j = 0; j < n; j++)
				acc[j] += xk * r[j];
		} else {
			float xk = nk_fp_loadf(x, v->dtype, k * v->incx);

			gemv_load(row, v->B, v->dtype, ob + k * v->rs, 1, n);
			for (int64_t j = 0; j < n; j++)
				acc[j] += xk * row[j];
		}
	}
}

/* Columns [j0, j0+n) of batch entry b, all of K, on one thread. */
static void gemv_rows(const gemv_t *v, int64_t b, int64_t j0, int64_t n)
{
	void *y = (char *)v->y + (b * v->bs_y + j0 * v->incy) * (int64_t)nk_fp_elem_size(v->dtype);
	union {
		float f[GEMV_JB];
		double d[GEMV_JB];
	} acc;

	memset(&acc, 0, v->dtype == NK_F64 ? (size_t)n * sizeof(double) : (size_t)n * sizeof(float));
	gemv_rows_range(v, b, j0, n, 0, v->K, acc.f, acc.d);
	for (int64_t j = 0; j < n; j++)
		gemv_store(v, y, j, v->dtype == NK_F64 ? acc.d[j] : acc.f[j]);
}

/* sum x[k]*b[k] over n f32 values with 16 partial sums (vectorizable). */
static float dot_f32(const float *restrict x, const float *restrict b, int64_t n)
{
	float part[16] = { 0 }, s = 0;
	int64_t k = 0;

	for (; k + 16 <= n; k += 16)
		for (int l = 0; l < 16; l++)
			part[l] += x[k + l] * b[k + l];
	for (; k < n; k++)
		s += x[k] * b[k];
	for (int l = 0; l < 16; l++)
		s += part[l];
	return s;
}

/* Columns [j0, j0+n): one dot product per column; each column is read contiguously along K, in
 * chunks converted to f32 (f64 in f64). */
static void gemv_dots(const gemv_t *v, int64_t b, int64_t j0, int64_t n)
{
	size_t es = nk_fp_elem_size(v->dtype);
	void *y = (char *)v->y + (b * v->bs_y + j0 * v->incy) * (int64_t)es;
	int64_t ox = b * v->bs_x, ob = b * v->bs_b + j0 * v->cs;
	float xf[GEMV_KC], bf[GEMV_KC];

	for (int64_t j = 0; j < n; j++) {
		int64_t oc = ob + j * v->cs;

		if (v->dtype == NK_F64) {
			const double *x = (const double *)v->x + ox, *col = (const double *)v->B + oc;
			double s = 0;

			for (int64_t k = 0; k < v->K; k++)
				s += x[k * v->incx] * col[k * v->rs];
			gemv_store(v, y, j, s);
		} else if (v->dtype == NK_F32 && v->incx == 1 && v->rs == 1) {
			gemv_store(v, y, j, dot_f32((const float *)v->x + ox, (const float *)v->B + oc, v->K));
		} else {
			float s = 0;

			for (int64_t k0 = 0; k0 < v->K; k0 += GEMV_KC) {
				int64_t kn = min64(GEMV_KC, v->K - k0);

				gemv_load(xf, v->x, v->dtype, ox + k0 * v->incx, v->incx, kn);
				gemv_load(bf, v->B, v->dtype, oc + k0 * v->rs, v->rs, kn);
				s += dot_f32(xf, bf, kn);
			}
			gemv_store(v, y, j, s);
		}
	}
}

static bool gemv_uses_rows(const gemv_t *v)
{
	return v->cs == 1;
}

static void gemv_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const gemv_t *v = ctx;
	int64_t jb = gemv_uses_rows(v) ? GEMV_JB : GEMV_JD, per = cdiv(v->N, jb);

	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / per, j0 = t % per * jb, n = min64(jb, v->N - j0);

		if (gemv_uses_rows(v))
			gemv_rows(v, b, j0, n);
		else
			gemv_dots(v, b, j0, n);
	}
}

/* K split of the rows form: task t sums its K range of one column block into its own partial row of
 * the caller's scratch; the caller adds the partials in task order (deterministic). */
#define GEMV_KSPLIT_MAX 8
#define GEMV_KSPLIT_MIN_ROWS 256

typedef struct {
	const gemv_t *v;
	int64_t b, j0, n, kchunk;
	void *part; /* [GEMV_KSPLIT_MAX][GEMV_JB] of float (double for f64) */
} gemv_ksplit_t;

static void gemv_ksplit_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const gemv_ksplit_t *s = ctx;

	for (int64_t t = t0; t < t1; t++) {
		int64_t k0 = t * s->kchunk, k1 = min64(s->v->K, k0 + s->kchunk);
		float *acc = (float *)s->part + t * GEMV_JB;
		double *dacc = (double *)s->part + t * GEMV_JB;

		memset(s->v->dtype == NK_F64 ? (void *)dacc : (void *)acc, 0,
		       (size_t)s->n * (s->v->dtype == NK_F64 ? sizeof(double) : sizeof(float)));
		gemv_rows_range(s->v, s->b, s->j0, s->n, k0, k1, acc, dacc);
	}
}

/* Rows form with few column blocks: each block's K is split over the pool (the chunk count depends
 * on K only, never on the thread count, so results are reproducible). */
static int gemv_rows_ksplit(const gemv_t *v)
{
	int64_t nsplit = min64(GEMV_KSPLIT_MAX, cdiv(v->K, GEMV_KSPLIT_MIN_ROWS));
	gemv_ksplit_t s = { .v = v, .kchunk = cdiv(v->K, nsplit) };
	size_t es = nk_fp_elem_size(v->dtype);

	s.part = nk_ws_get(NK_WS_PARTIALS, GEMV_KSPLIT_MAX * GEMV_JB * sizeof(double));
	if (!s.part) {
		nrt_kernel_fail("gemm: out of host memory for the GEMV partial sums");
		return -1;
	}
	nsplit = cdiv(v->K, s.kchunk);
	for (int64_t b = 0; b < v->batch; b++)
		for (int64_t j0 = 0; j0 < v->N; j0 += GEMV_JB) {
			void *y = (char *)v->y + (b * v->bs_y + j0 * v->incy) * (int64_t)es;

			s.b = b, s.j0 = j0, s.n = min64(GEMV_JB, v->N - j0);
			nrt_parallel_for(nsplit, 1, gemv_ksplit_tasks, &s);
			for (int64_t j = 0; j < s.n; j++) {
				double t = 0;

				for (int64_t q = 0; q < nsplit; q++)
					t += v->dtype == NK_F64 ? ((const double *)s.part)[q * GEMV_JB + j]
								: (double)((const float *)s.part)[q * GEMV_JB + j];
				gemv_store(v, y, j, t);
			}
		}
	return 0;
}

/* M == 1 (x = row 0 of A) or N == 1 (the transposed problem: x = column 0 of B, B' = A^T). */
static int gemm_gemv(const nk_gemm_args_t *g)
{
	gemv_t v = { .dtype = g->dtype, .K = g->K, .batch = g->batch, .alpha = g->alpha, .beta = g->beta };
	int64_t jb, ntasks;

	if (g->M == 1) {
		v.N = g->N;
		v.x = g->A, v.incx = g->cs_a, v.bs_x = g->bs_a;
		v.B = g->B, v.rs = g->rs_b, v.cs = g->cs_b, v.bs_b = g->bs_b;
		v.y = g->C, v.incy = g->cs_c, v.bs_y = g->bs_c;
	} else {
		v.N = g->M;
		v.x = g->B, v.incx = g->rs_b, v.bs_x = g->bs_b;
		v.B = g->A, v.rs = g->cs_a, v.cs = g->rs_a, v.bs_b = g->bs_a;
		v.y = g->C, v.incy = g->rs_c, v.bs_y = g->bs_c;
	}
	if (v.N == 1)
		v.cs = 0; /* a single column: the dot-product form (its stride is unused) */
	jb = gemv_uses_rows(&v) ? GEMV_JB : GEMV_JD;
	ntasks = g->batch * cdiv(v.N, jb);
	if (gemv_uses_rows(&v) && ntasks < 2 * nrt_num_threads() && v.K >= 2 * GEMV_KSPLIT_MIN_ROWS &&
	    v.N * v.K >= (1 << 18))
		return gemv_rows_ksplit(&v);
	nrt_parallel_for(ntasks, cdiv(1 << 16, jb * (v.K + 1)), gemv_tasks, &v);
	return 0;
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
	if (!g.K) {
		gemm_scale_c(&g);
		return 0;
	}
	if (g.M == 1 || g.N == 1)
		return gemm_gemv(&g);
	if (g.rs_c == 1 && g.cs_c != 1) {
		/* column-major C: compute C^T = B^T A^T, whose C is row-major */
		nk_gemm_args_t t = g;

		t.M = g.N, t.N = g.M;
		t.A = g.B, t.rs_a = g.cs_b, t.cs_a = g.rs_b, t.bs_a = g.bs_b;
		t.B = g.A, t.rs_b = g.cs_a, t.cs_b = g.rs_a, t.bs_b = g.bs_a;
		t.rs_c = g.cs_c, t.cs_c = g.rs_c;
		g = t;
	}
	isa = nk_gemm_isa_select();
	return nk_gemm_packed(&g, &isa);
}
