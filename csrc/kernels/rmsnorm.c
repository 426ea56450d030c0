/* rmsnorm.c - rms norm forward and backward (aten _fused_rms_norm) over the last `cols` of a contiguous
 * [rows, cols]: y = x * rstd * w.  f32/bf16/f16 rows run through the layer-norm row operations
 * (nk_lnops_impl.h); f64 rows in double.  Threading: rows over the pool (column blocks for dw); every sum
 * is taken in a fixed order, so results do not depend on the thread count.  The _ref twins run the same
 * formulas one element at a time on one thread.
 */
#include <math.h>
#include <string.h>

#include "nk_dispatch_impl.h"
#include "nk.h"
#include "nk_impl.h"
#include "nk_lnops_impl.h"
#include "nk_workspace.h"
#include "nrt.h"

/* ---- rms norm ------------------------------------------------------------------------------------ */

static int rms_check(int dtype, int64_t rows, int64_t cols, const char *who)
{
	if (!nk_fp_is_float(dtype) || rows < 0 || cols < 0) {
		nrt_kernel_fail("%s: unsupported dtype %s or negative size", who, nk_dtype_name(dtype));
		return -1;
	}
	return 0;
}

static int rstd_dtype(int dtype)
{
	return dtype == NK_F64 ? NK_F64 : NK_F32;
}

#define RCH 2048 /* bf16/f16 elements per converted chunk of an rms row */

static int rms_stream(int dtype, int64_t rows, int64_t cols)
{
	return dtype == NK_F32 && rows * cols * 4 >= NK_STREAM_MIN_BYTES && nk_family_avx512(NK_FAM_LAYERNORM);
}

static int64_t rms_grain(int64_t cols)
{
	return cols >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (cols + 1) + 1;
}

/* f64 rows: plain loops over the row (vectorizable). */
static void rms_row_f64(const nk_rmsnorm_args_t *a, int64_t r)
{
	const double *x = (const double *)a->x + r * a->cols, *w = a->w;
	double *y = (double *)a->y + r * a->cols, q = 0, rstd;

	for (int64_t j = 0; j < a->cols; j++)
		q += x[j] * x[j];
	rstd = 1.0 / sqrt(q / (double)a->cols + a->eps);
	((double *)a->rstd)[r] = rstd;
	for (int64_t j = 0; j < a->cols; j++)
		y[j] = w ? x[j] * rstd * w[j] : x[j] * rstd;
}

/* f32-computed rows: sum of squares in f32 lanes folded in f64, y = x*rstd*w.  f32 rows are used in
 * place; bf16/f16 rows are converted in chunks of RCH (rows up to RCH once). */
static void rms_row_f32(const nk_rmsnorm_args_t *a, const nk_lnops_t *L, const float *wrow, int64_t r, int stream)
{
	float xb[RCH], wb[RCH];
	int64_t base = r * a->cols, C = a->cols;
	double q = 0, rstd;

	if (a->dtype == NK_F32) {
		const float *x = (const float *)a->x + base;

		rstd = 1.0 / sqrt((C ? L->sqdev(x, C, 0.0f) : 0.0) / (double)C + a->eps); /* NaN for C = 0, as aten */
		L->scale_w((float *)a->y + base, x, C, (float)rstd, a->w, stream);
		((float *)a->rstd)[r] = (float)rstd;
		return;
	}
	for (int64_t c = 0; c < C; c += RCH) {
		int64_t n = nk_min64(RCH, C - c);

		nk_block_load_f32(xb, (const char *)a->x + (base + c) * 2, 2, a->dtype, n);
		q += L->sqdev(xb, n, 0.0f);
	}
	rstd = 1.0 / sqrt(q / (double)C + a->eps);
	((float *)a->rstd)[r] = (float)rstd;
	for (int64_t c = 0; c < C; c += RCH) {
		int64_t n = nk_min64(RCH, C - c);

		if (C > RCH)
			nk_block_load_f32(xb, (const char *)a->x + (base + c) * 2, 2, a->dtype, n);
		if (a->w && !wrow)
			nk_block_load_f32(wb, (const char *)a->w + c * 2, 2, a->dtype, n);
		L->scale_w(xb, xb, n, (float)rstd, a->w ? (wrow ? wrow : wb) : NULL, 0);
		nk_block_store_f32((char *)a->y + (base + c) * 2, 2, a->dtype, xb, n);
	}
}

static void rms_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_rmsnorm_args_t *a = ctx;
	const nk_lnops_t *L = nk_lnops();
	int stream = rms_stream(a->dtype, a->rows, a->cols);
	float wrow[RCH];
	const float *wp = NULL;

	if (a->dtype == NK_BF16 || a->dtype == NK_F16) {
		if (a->w && a->cols <= RCH) {
			nk_block_load_f32(wrow, a->w, 2, a->dtype, a->cols);
			wp = wrow;
		}
	}
	for (int64_t r = r0; r < r1; r++) {
		if (a->dtype == NK_F64)
			rms_row_f64(a, r);
		else
			rms_row_f32(a, L, wp, r, stream);
	}
	if (stream)
		nk_stream_fence();
}

int nk_rmsnorm_run(void *args)
{
	const nk_rmsnorm_args_t *a = args;

	if (rms_check(a->dtype, a->rows, a->cols, "rms_norm"))
		return -1;
	if (nk_using_reference())
		return nk_rmsnorm_ref(args);
	if (a->rows > 0)
		nrt_parallel_for(a->rows, rms_grain(a->cols), rms_rows, (void *)a);
	return 0;
}

int nk_rmsnorm_ref(void *args)
{
	const nk_rmsnorm_args_t *a = args;

	if (rms_check(a->dtype, a->rows, a->cols, "rms_norm"))
		return -1;
	for (int64_t r = 0; r < a->rows; r++) {
		double q = 0, rstd;

		for (int64_t j = 0; j < a->cols; j++) {
			double x = nk_fp_loadd(a->x, a->dtype, r * a->cols + j);

			q += x * x;
		}
		rstd = 1.0 / sqrt(q / (double)a->cols + a->eps);
		nk_fp_stored(a->rstd, rstd_dtype(a->dtype), r, rstd);
		for (int64_t j = 0; j < a->cols; j++) {
			double x = nk_fp_loadd(a->x, a->dtype, r * a->cols + j), w = nk_fp_loadd_or(a->w, a->dtype, j, 1.0);

			if (a->dtype == NK_F64)
				nk_fp_stored(a->y, a->dtype, r * a->cols + j, x * rstd * w);
			else
				nk_fp_storef(a->y, a->dtype, r * a->cols + j, (float)x * (float)rstd * (float)w);
		}
	}
	return 0;
}

/* Reference dx row r: dx = rstd*(g - xhat*mean(g*xhat)) with g = dy*w, xhat = x*rstd (f64 per element). */
static void rms_bwd_row(const nk_rmsnorm_bwd_args_t *a, int64_t r)
{
	double rstd = nk_fp_loadd(a->rstd, rstd_dtype(a->dtype), r), s = 0;
	int64_t base = r * a->cols;

	for (int64_t j = 0; j < a->cols; j++)
		s += nk_fp_loadd(a->dy, a->dtype, base + j) * nk_fp_loadd_or(a->w, a->dtype, j, 1.0) * nk_fp_loadd(a->x, a->dtype, base + j) * rstd;
	double m = a->cols ? s / (double)a->cols : 0;

	for (int64_t j = 0; j < a->cols; j++) {
		double g = nk_fp_loadd(a->dy, a->dtype, base + j) * nk_fp_loadd_or(a->w, a->dtype, j, 1.0);
		double xh = nk_fp_loadd(a->x, a->dtype, base + j) * rstd;

		nk_fp_stored(a->dx, a->dtype, base + j, rstd * (g - xh * m));
	}
}

/* Reference dw: column sums over all rows in row order. */
static void rms_bwd_cols(const nk_rmsnorm_bwd_args_t *a)
{
	for (int64_t j = 0; j < a->cols; j++) {
		double s = 0;

		for (int64_t r = 0; r < a->rows; r++)
			s += nk_fp_loadd(a->dy, a->dtype, r * a->cols + j) * nk_fp_loadd(a->x, a->dtype, r * a->cols + j) *
			     nk_fp_loadd(a->rstd, rstd_dtype(a->dtype), r);
		nk_fp_stored(a->dw, a->dtype, j, s);
	}
}

/* The fast backward: rows are cut into a fixed number of chunks (a function of rows and cols only);
 * a chunk's task computes dx of its rows and sums their dw terms (dy*x*rstd, f32) into its own partial
 * row; the partials are added in chunk order in f64.  dy and x are read once per row (bf16/f16 rows
 * longer than RCH twice).  Deterministic whatever the thread count. */
#define RMS_PART_FLOATS (1 << 17)

typedef struct {
	const nk_rmsnorm_bwd_args_t *a;
	int64_t chunk_rows;
	float *part; /* [chunks][cols] (NULL without dw) */
} rms_bwd_t;

/* f64 row: dx and the dw terms (in f64, into swd). */
static void rms_bwd_row_f64(const nk_rmsnorm_bwd_args_t *a, int64_t r, double *swd)
{
	const double *dy = (const double *)a->dy + r * a->cols, *x = (const double *)a->x + r * a->cols, *w = a->w;
	double rstd = ((const double *)a->rstd)[r], s = 0, c;

	if (a->dx) {
		double *dx = (double *)a->dx + r * a->cols;

		for (int64_t j = 0; j < a->cols; j++)
			s += (w ? dy[j] * w[j] : dy[j]) * x[j];
		c = a->cols ? s * rstd * rstd / (double)a->cols : 0;
		for (int64_t j = 0; j < a->cols; j++)
			dx[j] = rstd * ((w ? dy[j] * w[j] : dy[j]) - x[j] * c);
	}
	if (swd)
		for (int64_t j = 0; j < a->cols; j++)
			swd[j] += dy[j] * (x[j] * rstd);
}

static void rms_bwd_row_f32(const nk_rmsnorm_bwd_args_t *a, const nk_lnops_t *L, const float *wrow, int64_t r,
			    float *sw, int stream)
{
	float dyb[RCH], xb[RCH], wb[RCH], dxb[RCH];
	float rstd = ((const float *)a->rstd)[r], c = 0;
	int64_t base = r * a->cols, C = a->cols;
	double s = 0;

	if (a->dtype == NK_F32) {
		const float *dy = (const float *)a->dy + base, *x = (const float *)a->x + base;

		if (a->dx)
			s = L->dot3(dy, a->w, x, C);
		c = (float)(s * rstd * rstd / (double)C);
		L->rms_dx(a->dx ? (float *)a->dx + base : NULL, dy, x, a->w, C, rstd, c, sw, stream);
		return;
	}
	for (int pass = a->dx ? 0 : 1; pass < 2; pass++) {
		for (int64_t k = 0; k < C; k += RCH) {
			int64_t n = nk_min64(RCH, C - k);
			const float *w = a->w ? (wrow ? wrow : wb) : NULL;

			if (C > RCH || pass == 0 || !a->dx) {
				nk_block_load_f32(dyb, (const char *)a->dy + (base + k) * 2, 2, a->dtype, n);
				nk_block_load_f32(xb, (const char *)a->x + (base + k) * 2, 2, a->dtype, n);
				if (a->w && !wrow)
					nk_block_load_f32(wb, (const char *)a->w + k * 2, 2, a->dtype, n);
			}
			if (pass == 0) {
				s += L->dot3(dyb, w, xb, n);
				continue;
			}
			L->rms_dx(a->dx ? dxb : NULL, dyb, xb, w, n, rstd, c, sw ? sw + k : NULL, 0);
			if (a->dx)
				nk_block_store_f32((char *)a->dx + (base + k) * 2, 2, a->dtype, dxb, n);
		}
		c = (float)(s * rstd * rstd / (double)C);
	}
}

static void rms_bwd_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const rms_bwd_t *f = ctx;
	const nk_rmsnorm_bwd_args_t *a = f->a;
	const nk_lnops_t *L = nk_lnops();
	int stream = a->dx && rms_stream(a->dtype, a->rows, a->cols);
	float wrow[RCH];
	const float *wp = NULL;

	if ((a->dtype == NK_BF16 || a->dtype == NK_F16) && a->w && a->cols <= RCH) {
		nk_block_load_f32(wrow, a->w, 2, a->dtype, a->cols);
		wp = wrow;
	}
	for (int64_t t = t0; t < t1; t++) {
		int64_t r1 = nk_min64(a->rows, (t + 1) * f->chunk_rows);
		float *sw = f->part ? f->part + t * a->cols : NULL;

		if (sw)
			memset(sw, 0, (size_t)a->cols * sizeof(float));
		for (int64_t r = t * f->chunk_rows; r < r1; r++)
			rms_bwd_row_f32(a, L, wp, r, sw, stream);
	}
	if (stream)
		nk_stream_fence();
}

static void rms_bwd_rows_f64(void *ctx, int64_t r0, int64_t r1)
{
	for (int64_t r = r0; r < r1; r++)
		rms_bwd_row_f64(ctx, r, NULL);
}

/* f64 dw by column blocks: each block sums all rows in row order. */
static void rms_dw_f64(void *ctx, int64_t b0, int64_t b1)
{
	const nk_rmsnorm_bwd_args_t *a = ctx;
	const double *rs = a->rstd;

	for (int64_t b = b0; b < b1; b++) {
		int64_t j0 = b * 256, n = nk_min64(256, a->cols - j0);
		double s[256] = { 0 };

		for (int64_t r = 0; r < a->rows; r++) {
			const double *dy = (const double *)a->dy + r * a->cols + j0, *x = (const double *)a->x + r * a->cols + j0;

			for (int64_t j = 0; j < n; j++)
				s[j] += dy[j] * (x[j] * rs[r]);
		}
		memcpy((double *)a->dw + j0, s, (size_t)n * sizeof(double));
	}
}

int nk_rmsnorm_bwd_run(void *args)
{
	const nk_rmsnorm_bwd_args_t *a = args;

	if (rms_check(a->dtype, a->rows, a->cols, "rms_norm_backward"))
		return -1;
	if (nk_using_reference())
		return nk_rmsnorm_bwd_ref(args);
	if (a->cols == 0)
		return 0;
	if (a->dtype == NK_F64) {
		if (a->dx && a->rows > 0)
			nrt_parallel_for(a->rows, rms_grain(a->cols), rms_bwd_rows_f64, (void *)a);
		if (a->dw)
			nrt_parallel_for((a->cols + 255) / 256, a->rows * a->cols >= NK_PARALLEL_GRAIN ? 1 : a->cols, rms_dw_f64, (void *)a);
		return 0;
	}
	if (a->dw && a->cols > RMS_PART_FLOATS) { /* very wide rows: dx by rows, dw by the reference's column sums */
		nk_rmsnorm_bwd_args_t b = *a;

		b.dw = NULL;
		if (b.dx)
			nk_rmsnorm_bwd_run(&b);
		rms_bwd_cols(a);
		return 0;
	}
	rms_bwd_t f = { .a = a };
	int64_t chunks = (a->rows + 63) / 64;

	if (a->dw) {
		f.part = nk_ws_get(NK_WS_PARTIALS, RMS_PART_FLOATS * sizeof(float));
		if (!f.part) {
			nrt_kernel_fail("rms_norm_backward: out of host memory for the partial sums");
			return -1;
		}
		chunks = nk_min64(chunks, RMS_PART_FLOATS / a->cols);
	}
	if (chunks < 1)
		chunks = 1;
	f.chunk_rows = (a->rows + chunks - 1) / chunks;
	chunks = a->rows ? (a->rows + f.chunk_rows - 1) / f.chunk_rows : 0;
	if (chunks)
		nrt_parallel_for(chunks, a->rows * a->cols >= NK_PARALLEL_GRAIN ? 1 : chunks, rms_bwd_tasks, &f);
	if (a->dw) {
		for (int64_t j = 0; j < a->cols; j++) {
			double s = 0;

			for (int64_t t = 0; t < chunks; t++)
				s += f.part[t * a->cols + j];
			nk_fp_stored(a->dw, a->dtype, j, s);
		}
	}
	return 0;
}

int nk_rmsnorm_bwd_ref(void *args)
{
	const nk_rmsnorm_bwd_args_t *a = args;

	if (rms_check(a->dtype, a->rows, a->cols, "rms_norm_backward"))
		return -1;
	if (a->dx)
		for (int64_t r = 0; r < a->rows; r++)
			rms_bwd_row(a, r);
	if (a->dw)
		rms_bwd_cols(a);
	return 0;
}
