/* softmax.c - softmax / log_softmax over the last dim of a contiguous [rows, cols], and backward.
 *
 * Numerically stable: y = exp(x - max) / sum exp(x - max), log: y = x - max - log(sum).  f32, bf16 and
 * f16 rows are computed in f32 (read and written in chunks through an f32 buffer), f64 in f64.
 * Threading: rows over the pool (grain ~32k elements).  The reference computes everything in f64.
 */
/* The vectorizer's dynamic cost model for this file (what NK_VECTORIZE_FILE does), set before the
 * headers so that their inline helpers get the same options and stay inlinable. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <math.h>
#include <string.h>

#include "nk_dispatch_impl.h"
#include "nk.h"
#include "nk_impl.h"
#include "nk_softmax_impl.h"
#include "nrt.h"


#define CH 2048 /* elements per chunk of a row: rows up to CH are read once and exp'd once */
#define LANES 16

static int softmax_check(int dtype, int64_t rows, int64_t cols, const void *a, const void *b, const void *c,
			 const char *who)
{
	if (!nk_fp_is_float(dtype)) {
		nrt_kernel_fail("%s: unsupported dtype %s", who, nk_dtype_name(dtype));
		return -1;
	}
	if (rows < 0 || cols < 0) {
		nrt_kernel_fail("%s: negative size", who);
		return -1;
	}
	if (rows * cols > 0 && (!a || !b || !c)) {
		nrt_kernel_fail("%s: null data pointer", who);
		return -1;
	}
	return 0;
}

static int64_t row_grain(int64_t cols)
{
	return cols >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (cols + 1) + 1;
}

/* A large f32 output (NK_STREAM_MIN_BYTES or more, AVX-512): rows are written with non-temporal
 * stores (no write-allocate read), fenced at the end of each task. */
static bool stream_out(int dtype, int64_t rows, int64_t cols)
{
	return dtype == NK_F32 && rows * cols * 4 >= NK_STREAM_MIN_BYTES && nk_family_avx512(NK_FAM_SOFTMAX);
}

static void store_row(void *p, int dtype, int64_t off, const float *buf, int64_t n, bool stream)
{
	if (stream)
		nk_stream_copy_f32_avx512((float *)p + off, buf, n);
	else
		nk_fp_store_row_f32(p, dtype, off, buf, n);
}

/* ---- row primitives (nk_softmax_impl.h) ------------------------------------------------------- */

float nk_row_max_ref(const float *x, int64_t n)
{
	float m[LANES], r;
	int64_t j = 0;

	for (int l = 0; l < LANES; l++)
		m[l] = -INFINITY;
	for (; j + LANES <= n; j += LANES)
		for (int l = 0; l < LANES; l++)
			m[l] = x[j + l] > m[l] ? x[j + l] : m[l];
	for (; j < n; j++)
		m[0] = x[j] > m[0] ? x[j] : m[0];
	r = m[0];
	for (int l = 1; l < LANES; l++)
		r = m[l] > r ? m[l] : r;
	return r;
}

static float lanes_sum(const float *x, int64_t n)
{
	float s[LANES] = { 0 }, r = 0;
	int64_t j = 0;

	for (; j + LANES <= n; j += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += x[j + l];
	for (; j < n; j++)
		r += x[j];
	for (int l = 0; l < LANES; l++)
		r += s[l];
	return r;
}

/* sum of x*y in the lanes of lanes_sum (the products rounded to f32 first, as dy *= y then lanes_sum) */
static float lanes_dot(const float *x, const float *y, int64_t n)
{
	float s[LANES] = { 0 }, r = 0;
	int64_t j = 0;

	for (; j + LANES <= n; j += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += x[j + l] * y[j + l];
	for (; j < n; j++)
		r += x[j] * y[j];
	for (int l = 0; l < LANES; l++)
		r += s[l];
	return r;
}

float nk_row_exp_sum_ref(float *x, int64_t n, float sub)
{
	for (int64_t j = 0; j < n; j++)
		x[j] = nk_fp_expf(x[j] - sub);
	return lanes_sum(x, n);
}

/* sum of expf(x - sub) in the lanes of lanes_sum, without storing the terms */
static float lanes_exp_sum(const float *x, int64_t n, float sub)
{
	float s[LANES] = { 0 }, r = 0;
	int64_t j = 0;

	for (; j + LANES <= n; j += LANES)
		for (int l = 0; l < LANES; l++)
			s[l] += nk_fp_expf(x[j + l] - sub);
	for (; j < n; j++)
		r += nk_fp_expf(x[j] - sub);
	for (int l = 0; l < LANES; l++)
		r += s[l];
	return r;
}

/* Any length: tmp is not needed here (y holds the exp terms; y may be x). */
void nk_softmax_row_ref(const float *x, float *y, float *tmp, int64_t n, int log, int stream)
{
	float mx = nk_row_max_ref(x, n), lse, inv;

	(void)tmp, (void)stream;
	if (log) {
		lse = logf(lanes_exp_sum(x, n, mx));
		for (int64_t j = 0; j < n; j++)
			y[j] = (x[j] - mx) - lse;
		return;
	}
	for (int64_t j = 0; j < n; j++)
		y[j] = nk_fp_expf(x[j] - mx);
	inv = 1.0f / lanes_sum(y, n);
	for (int64_t j = 0; j < n; j++)
		y[j] *= inv;
}

void nk_softmax_bwd_row_ref(const float *dy, const float *y, float *dx, int64_t n, int log, int stream)
{
	(void)stream;
	if (log) {
		float dot = lanes_sum(dy, n);

		for (int64_t j = 0; j < n; j++)
			dx[j] = dy[j] - nk_fp_expf(y[j]) * dot;
		return;
	}
	float dot = lanes_dot(dy, y, n);

	for (int64_t j = 0; j < n; j++)
		dx[j] = y[j] * (dy[j] - dot);
}

const nk_rowops_t nk_rowops_ref = {
	.max = nk_row_max_ref,
	.exp_sum = nk_row_exp_sum_ref,
	.softmax_row = nk_softmax_row_ref,
	.softmax_bwd_row = nk_softmax_bwd_row_ref,
};

const nk_rowops_t *nk_rowops(void)
{
	return nk_kernels()->softmax;
}

/* ---- forward ------------------------------------------------------------------------------------ */

/* One f32-computed row (f32, bf16, f16 storage).  A row that fits one chunk is read once; longer rows
 * take three passes (max, sum, output). */
static void softmax_row_f32(const nk_softmax_args_t *a, const nk_rowops_t *ops, int64_t r)
{
	float buf[CH], mx = -INFINITY, sum = 0, lse, inv;
	int64_t base = r * a->cols;

	/* f32: from x to y in one call; any length when not streaming (tmp is used only when streaming, so
	 * long rows, e.g. a vocabulary, skip the chunk copies and the second exp of the chunked path) */
	if (a->dtype == NK_F32 && (a->cols <= CH || !stream_out(a->dtype, a->rows, a->cols))) {
		ops->softmax_row((const float *)a->x + base, (float *)a->y + base, buf, a->cols, a->log,
				 stream_out(a->dtype, a->rows, a->cols));
		return;
	}
	if (a->cols <= CH) { /* bf16, f16: converted once, the f32 row primitive in place */
		nk_fp_load_row_f32(buf, a->x, a->dtype, base, a->cols);
		ops->softmax_row(buf, buf, NULL, a->cols, a->log, 0);
		nk_fp_store_row_f32(a->y, a->dtype, base, buf, a->cols);
		return;
	}
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);
		float m;

		nk_fp_load_row_f32(buf, a->x, a->dtype, base + c, n);
		m = ops->max(buf, n);
		mx = m > mx ? m : mx;
	}
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		nk_fp_load_row_f32(buf, a->x, a->dtype, base + c, n);
		sum += ops->exp_sum(buf, n, mx);
	}
	lse = logf(sum);
	inv = 1.0f / sum;
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		nk_fp_load_row_f32(buf, a->x, a->dtype, base + c, n);
		if (a->log) {
			for (int64_t j = 0; j < n; j++)
				buf[j] = (buf[j] - mx) - lse;
		} else {
			ops->exp_sum(buf, n, mx);
			for (int64_t j = 0; j < n; j++)
				buf[j] *= inv;
		}
		nk_fp_store_row_f32(a->y, a->dtype, base + c, buf, n);
	}
}

static void softmax_row_f64(const nk_softmax_args_t *a, int64_t r)
{
	const double *x = (const double *)a->x + r * a->cols;
	double *y = (double *)a->y + r * a->cols;
	double mx = -INFINITY, sum = 0;

	for (int64_t j = 0; j < a->cols; j++)
		mx = x[j] > mx ? x[j] : mx;
	for (int64_t j = 0; j < a->cols; j++)
		sum += exp(x[j] - mx);
	for (int64_t j = 0; j < a->cols; j++)
		y[j] = a->log ? x[j] - mx - log(sum) : exp(x[j] - mx) / sum;
}

static void softmax_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_softmax_args_t *a = ctx;
	const nk_rowops_t *ops = nk_rowops();

	for (int64_t r = r0; r < r1; r++) {
		if (a->dtype == NK_F64)
			softmax_row_f64(a, r);
		else
			softmax_row_f32(a, ops, r);
	}
	if (stream_out(a->dtype, a->rows, a->cols))
		nk_stream_fence();
}

int nk_softmax_run(void *args)
{
	const nk_softmax_args_t *a = args;

	if (softmax_check(a->dtype, a->rows, a->cols, a->x, a->y, a->y, "softmax"))
		return -1;
	if (nk_using_reference())
		return nk_softmax_ref(args);
	if (a->rows * a->cols > 0)
		nrt_parallel_for(a->rows, row_grain(a->cols), softmax_rows, (void *)a);
	return 0;
}

/* ---- backward ----------------------------------------------------------------------------------- */

/* softmax: dx = y * (dy - sum(dy * y));  log: dx = dy - exp(y) * sum(dy). */
static void softmax_bwd_row_f32(const nk_softmax_bwd_args_t *a, const nk_rowops_t *ops, int64_t r)
{
	float dy[CH], y[CH], dot = 0;
	int64_t base = r * a->cols;

	if (a->dtype == NK_F32) { /* straight from dy, y to dx, any length */
		ops->softmax_bwd_row((const float *)a->dy + base, (const float *)a->y + base, (float *)a->dx + base,
				     a->cols, a->log, stream_out(a->dtype, a->rows, a->cols));
		return;
	}
	if (a->cols <= CH) { /* one chunk: dy and y are read once */
		int64_t n = a->cols;

		nk_fp_load_row_f32(dy, a->dy, a->dtype, base, n);
		nk_fp_load_row_f32(y, a->y, a->dtype, base, n);
		if (a->log) {
			dot = lanes_sum(dy, n);
			ops->exp_sum(y, n, 0.0f); /* y = exp(log-probability) */
			for (int64_t j = 0; j < n; j++)
				dy[j] = dy[j] - y[j] * dot;
		} else {
			dot = lanes_dot(dy, y, n);
			for (int64_t j = 0; j < n; j++)
				dy[j] = y[j] * (dy[j] - dot);
		}
		store_row(a->dx, a->dtype, base, dy, n, stream_out(a->dtype, a->rows, a->cols));
		return;
	}
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		nk_fp_load_row_f32(dy, a->dy, a->dtype, base + c, n);
		if (!a->log) {
			nk_fp_load_row_f32(y, a->y, a->dtype, base + c, n);
			for (int64_t j = 0; j < n; j++)
				dy[j] *= y[j];
		}
		dot += lanes_sum(dy, n);
	}
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		nk_fp_load_row_f32(dy, a->dy, a->dtype, base + c, n);
		nk_fp_load_row_f32(y, a->y, a->dtype, base + c, n);
		if (a->log) {
			ops->exp_sum(y, n, 0.0f); /* y = exp(log-probability) */
			for (int64_t j = 0; j < n; j++)
				dy[j] = dy[j] - y[j] * dot;
		} else {
			for (int64_t j = 0; j < n; j++)
				dy[j] = y[j] * (dy[j] - dot);
		}
		nk_fp_store_row_f32(a->dx, a->dtype, base + c, dy, n);
	}
}

static void softmax_bwd_row_f64(const nk_softmax_bwd_args_t *a, int64_t r)
{
	const double *dy = (const double *)a->dy + r * a->cols, *y = (const double *)a->y + r * a->cols;
	double *dx = (double *)a->dx + r * a->cols, dot = 0;

	for (int64_t j = 0; j < a->cols; j++)
		dot += a->log ? dy[j] : dy[j] * y[j];
	for (int64_t j = 0; j < a->cols; j++)
		dx[j] = a->log ? dy[j] - exp(y[j]) * dot : y[j] * (dy[j] - dot);
}

static void softmax_bwd_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_softmax_bwd_args_t *a = ctx;
	const nk_rowops_t *ops = nk_rowops();

	for (int64_t r = r0; r < r1; r++) {
		if (a->dtype == NK_F64)
			softmax_bwd_row_f64(a, r);
		else
			softmax_bwd_row_f32(a, ops, r);
	}
	if (stream_out(a->dtype, a->rows, a->cols))
		nk_stream_fence();
}

int nk_softmax_bwd_run(void *args)
{
	const nk_softmax_bwd_args_t *a = args;

	if (softmax_check(a->dtype, a->rows, a->cols, a->dy, a->y, a->dx, "softmax_backward"))
		return -1;
	if (nk_using_reference())
		return nk_softmax_bwd_ref(args);
	if (a->rows * a->cols > 0)
		nrt_parallel_for(a->rows, row_grain(a->cols), softmax_bwd_rows, (void *)a);
	return 0;
}

/* ---- reference: one element at a time, f64 arithmetic ---------------------------------------- */

int nk_softmax_ref(void *args)
{
	const nk_softmax_args_t *a = args;

	if (softmax_check(a->dtype, a->rows, a->cols, a->x, a->y, a->y, "softmax"))
		return -1;
	for (int64_t r = 0; r < a->rows; r++) {
		int64_t o = r * a->cols;
		double mx = -INFINITY, sum = 0;

		for (int64_t j = 0; j < a->cols; j++) {
			double v = nk_fp_loadd(a->x, a->dtype, o + j);

			mx = v > mx ? v : mx;
		}
		for (int64_t j = 0; j < a->cols; j++)
			sum += exp(nk_fp_loadd(a->x, a->dtype, o + j) - mx);
		for (int64_t j = 0; j < a->cols; j++) {
			double v = nk_fp_loadd(a->x, a->dtype, o + j) - mx;

			nk_fp_stored(a->y, a->dtype, o + j, a->log ? v - log(sum) : exp(v) / sum);
		}
	}
	return 0;
}

int nk_softmax_bwd_ref(void *args)
{
	const nk_softmax_bwd_args_t *a = args;

	if (softmax_check(a->dtype, a->rows, a->cols, a->dy, a->y, a->dx, "softmax_backward"))
		return -1;
	for (int64_t r = 0; r < a->rows; r++) {
		int64_t o = r * a->cols;
		double dot = 0;

		for (int64_t j = 0; j < a->cols; j++) {
			double dy = nk_fp_loadd(a->dy, a->dtype, o + j), y = nk_fp_loadd(a->y, a->dtype, o + j);

			dot += a->log ? dy : dy * y;
		}
		for (int64_t j = 0; j < a->cols; j++) {
			double dy = nk_fp_loadd(a->dy, a->dtype, o + j), y = nk_fp_loadd(a->y, a->dtype, o + j);

			nk_fp_stored(a->dx, a->dtype, o + j, a->log ? dy - exp(y) * dot : y * (dy - dot));
		}
	}
	return 0;
}
