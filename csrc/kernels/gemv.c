/* gemv.c - the GEMM path for M == 1 or N == 1: y = alpha * x @ B + beta * y (x: K, B: K x N, y: N),
 * with N == 1 solved as the transposed problem.  No packing.  Two forms:
 *   rows: rows of B contiguous - each row segment is streamed once into an f32 (f64) accumulator row
 *         (4096 columns per task, the next rows prefetched by hand); with few column blocks K is split
 *         over the pool into fixed chunks whose partial rows the caller adds in order;
 *   dots: otherwise - one dot product per column, contiguous f32/bf16/f16 columns through 16-lane f32
 *         sums or the AVX-512 dot kernels of the ISA table (vdpbf16ps for bf16).
 * Results do not depend on the thread count.
 */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nk_gemm_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

static const void *at(const void *p, int64_t off, size_t elem_size)
{
	return (const char *)p + off * (int64_t)elem_size;
}

typedef struct {
	int dtype;
	int64_t K, N, batch;
	const void *x; int64_t incx, bs_x;
	const void *B; int64_t rs, cs, bs_b;
	void *y; int64_t incy, bs_y;
	double alpha, beta;
	nk_gemm_isa_t isa;
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
			const float *xs = (const float *)v->x + ox, *col = (const float *)v->B + oc;

			gemv_store(v, y, j, v->isa.dot_f32 ? v->isa.dot_f32(xs, col, v->K) : dot_f32(xs, col, v->K));
		} else if (v->incx == 1 && v->rs == 1 && (v->dtype == NK_BF16 ? v->isa.dot_bf16 : v->isa.dot_f16)) {
			float (*dot)(const uint16_t *, const uint16_t *, int64_t) =
				v->dtype == NK_BF16 ? v->isa.dot_bf16 : v->isa.dot_f16;

			gemv_store(v, y, j, dot((const uint16_t *)v->x + ox, (const uint16_t *)v->B + oc, v->K));
		} else {
			float s = 0;

			for (int64_t k0 = 0; k0 < v->K; k0 += GEMV_KC) {
				int64_t kn = nk_min64(GEMV_KC, v->K - k0);

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
	int64_t jb = gemv_uses_rows(v) ? GEMV_JB : GEMV_JD, per = nk_cdiv(v->N, jb);

	for (int64_t t = t0; t < t1; t++) {
		int64_t b = t / per, j0 = t % per * jb, n = nk_min64(jb, v->N - j0);

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
		int64_t k0 = t * s->kchunk, k1 = nk_min64(s->v->K, k0 + s->kchunk);
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
	int64_t nsplit = nk_min64(GEMV_KSPLIT_MAX, nk_cdiv(v->K, GEMV_KSPLIT_MIN_ROWS));
	gemv_ksplit_t s = { .v = v, .kchunk = nk_cdiv(v->K, nsplit) };
	size_t es = nk_fp_elem_size(v->dtype);

	s.part = nk_ws_get(NK_WS_PARTIALS, GEMV_KSPLIT_MAX * GEMV_JB * sizeof(double));
	if (!s.part) {
		nrt_kernel_fail("gemm: out of host memory for the GEMV partial sums");
		return -1;
	}
	nsplit = nk_cdiv(v->K, s.kchunk);
	for (int64_t b = 0; b < v->batch; b++)
		for (int64_t j0 = 0; j0 < v->N; j0 += GEMV_JB) {
			void *y = (char *)v->y + (b * v->bs_y + j0 * v->incy) * (int64_t)es;

			s.b = b, s.j0 = j0, s.n = nk_min64(GEMV_JB, v->N - j0);
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
int nk_gemv_run(const nk_gemm_args_t *g)
{
	gemv_t v = { .dtype = g->dtype, .K = g->K, .batch = g->batch, .alpha = g->alpha, .beta = g->beta,
		     .isa = nk_gemm_isa_select() };
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
	ntasks = g->batch * nk_cdiv(v.N, jb);
	if (gemv_uses_rows(&v) && ntasks < 2 * nrt_num_threads() && v.K >= 2 * GEMV_KSPLIT_MIN_ROWS &&
	    v.N * v.K >= (1 << 18))
		return gemv_rows_ksplit(&v);
	nrt_parallel_for(ntasks, nk_cdiv(1 << 16, jb * (v.K + 1)), gemv_tasks, &v);
	return 0;
}
