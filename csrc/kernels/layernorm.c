/* layernorm.c - layer norm over the last `cols` of a contiguous [rows, cols], as aten native_layer_norm
 * and native_layer_norm_backward.
 *
 * Forward (per row): mean, var = biased variance (two passes, f64 sums; the AVX-512 f32 rows take one pass,
 * E[x^2] - mean^2, where that is exact enough: see layernorm_avx512.c), rstd = 1/sqrt(var + eps),
 * y = (x - mean)*rstd * w + b (bf16/f16: (x*rstd - rstd*mean) * w + b, as aten); mean and rstd are written in the input dtype.
 * Backward: xhat = (x - mean)*rstd, g = dy*w, dx = rstd*(g - mean(g) - xhat*mean(g*xhat)),
 * dw = sum over rows of dy*xhat, db = sum over rows of dy.
 * bf16/f16/f32 rows compute in f32 with f64 row sums; f64 computes in f64.
 * Threading: rows over the pool for y and dx.  dw/db (f32 compute) are fused with dx: fixed row chunks
 * (a function of rows and cols, never of the thread count) each sum their terms into a partial row,
 * added in chunk order in f64 - deterministic; f64 and very wide rows use blocks of columns that each
 * sum all rows in order.
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
#include "nk_lnops_impl.h"
#include "nk_workspace.h"
#include "nrt.h"


#define CH 1024 /* elements per chunk of a row (rows up to CH are converted once) */
#define CB 256 /* columns per dw/db task (at most) */

static const nk_lnops_t *lnops(void);

static int64_t row_grain(int64_t cols)
{
	return cols >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (cols + 1) + 1;
}

static void load_f64(double *buf, const void *p, int dtype, int64_t off, int64_t n)
{
	size_t es = nk_fp_elem_size(dtype);

	nk_block_load_f64(buf, (const char *)p + off * (int64_t)es, (int64_t)es, dtype, n);
}

static void store_f64(void *p, int dtype, int64_t off, const double *buf, int64_t n)
{
	if (dtype == NK_F32) {
		for (int64_t j = 0; j < n; j++)
			((float *)p)[off + j] = (float)buf[j];
		return;
	}
	for (int64_t j = 0; j < n; j++)
		nk_fp_stored(p, dtype, off + j, buf[j]);
}

static int ln_check(int dtype, int64_t rows, int64_t cols, const char *who)
{
	if (!nk_fp_is_float(dtype)) {
		nrt_kernel_fail("%s: unsupported dtype %s", who, nk_dtype_name(dtype));
		return -1;
	}
	if (rows < 0 || cols < 0) {
		nrt_kernel_fail("%s: negative size", who);
		return -1;
	}
	return 0;
}

/* ---- forward ------------------------------------------------------------------------------------ */

/* Sum of buf[0..n) in 8 f64 lanes (vectorizable; the lanes are folded at the end). */
static double sum_f64(const double *buf, int64_t n)
{
	double p[8] = { 0 }, s = 0;
	int64_t j = 0;

	for (; j + 8 <= n; j += 8)
		for (int l = 0; l < 8; l++)
			p[l] += buf[j + l];
	for (; j < n; j++)
		s += buf[j];
	for (int l = 0; l < 8; l++)
		s += p[l];
	return s;
}

/* Row mean and biased variance with f64 sums (two passes over the row). */
static void row_moments(const nk_layernorm_args_t *a, int64_t r, double *mean, double *var)
{
	double buf[CH], s = 0, q = 0, m;
	int64_t base = r * a->cols;

	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		load_f64(buf, a->x, a->dtype, base + c, n);
		s += sum_f64(buf, n);
	}
	m = a->cols ? s / (double)a->cols : 0;
	for (int64_t c = 0; c < a->cols; c += CH) {
		int64_t n = nk_min64(CH, a->cols - c);

		load_f64(buf, a->x, a->dtype, base + c, n);
		for (int64_t j = 0; j < n; j++)
			buf[j] = (buf[j] - m) * (buf[j] - m);
		q += sum_f64(buf, n);
	}
	*mean = m;
	*var = a->cols ? q / (double)a->cols : 0;
}

/* Sums over 16 f32 lanes (vectorizable), returned in f64: x, (x - m)^2 and x*y. */
static double lanes_sum(const float *x, int64_t n)
{
	float p[16] = { 0 };
	double s = 0;
	int64_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (int l = 0; l < 16; l++)
			p[l] += x[j + l];
	for (; j < n; j++)
		s += x[j];
	for (int l = 0; l < 16; l++)
		s += p[l];
	return s;
}

static double lanes_sqdev(const float *x, int64_t n, float m)
{
	float p[16] = { 0 };
	double s = 0;
	int64_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (int l = 0; l < 16; l++)
			p[l] += (x[j + l] - m) * (x[j + l] - m);
	for (; j < n; j++)
		s += (x[j] - m) * (x[j] - m);
	for (int l = 0; l < 16; l++)
		s += p[l];
	return s;
}

static double lanes_dot(const float *x, const float *y, int64_t n)
{
	float p[16] = { 0 };
	double s = 0;
	int64_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (int l = 0; l < 16; l++)
			p[l] += x[j + l] * y[j + l];
	for (; j < n; j++)
		s += x[j] * y[j];
	for (int l = 0; l < 16; l++)
		s += p[l];
	return s;
}

/* x = ((x - shift)*scale + bias) [* w] [+ b], PyTorch's order of operations: f32 rows center first
 * (shift = mean, bias = 0: (x - mean)*rstd, no cancellation when |mean| >> std), bf16/f16 rows use
 * x*rstd + (-rstd*mean) (shift = 0), both as aten's CPU layer_norm kernels. */
static void affine(float *y, const float *x, int64_t n, float shift, float scale, float bias, const float *restrict w,
		   const float *restrict b, int stream)
{
	(void)stream;
	if (w && b)
		for (int64_t j = 0; j < n; j++)
			y[j] = ((x[j] - shift) * scale + bias) * w[j] + b[j];
	else if (w)
		for (int64_t j = 0; j < n; j++)
			y[j] = ((x[j] - shift) * scale + bias) * w[j];
	else if (b)
		for (int64_t j = 0; j < n; j++)
			y[j] = (x[j] - shift) * scale + bias + b[j];
	else
		for (int64_t j = 0; j < n; j++)
			y[j] = (x[j] - shift) * scale + bias;
}

/* The (shift, scale, bias) of affine() for a row of `dtype` with moments mean, rstd. */
static void affine_consts(int dtype, double mean, double rstd, float *shift, float *scale, float *bias)
{
	*scale = (float)rstd;
	if (dtype == NK_F32) {
		*shift = (float)mean;
		*bias = 0;
	} else {
		*shift = 0;
		*bias = -*scale * (float)mean;
	}
}

/* Weight and bias of a short row, converted once per task (NULL when absent or the row is long). */
typedef struct {
	float w[CH], b[CH];
	const float *pw, *pb;
} ln_params_t;

static void ln_params_load(ln_params_t *p, const void *w, const void *b, int dtype, int64_t cols)
{
	p->pw = p->pb = NULL;
	if (cols > CH)
		return;
	if (w) {
		nk_fp_load_row_f32(p->w, w, dtype, 0, cols);
		p->pw = p->w;
	}
	if (b) {
		nk_fp_load_row_f32(p->b, b, dtype, 0, cols);
		p->pb = p->b;
	}
}

/* One bf16/f16 row, computed in f32.  A row of up to CH columns is converted once; longer rows take
 * three passes over chunks (sum, squared deviations, output).  f32 rows go to fwd_rows. */
static void ln_row_f32(const nk_layernorm_args_t *a, const ln_params_t *prm, int64_t r)
{
	float x[CH], w[CH], b[CH], m, sh, sc, bi;
	double mean, var = 0, rstd;
	const nk_lnops_t *L = lnops();
	int64_t base = r * a->cols, C = a->cols;

	if (C <= CH) {
		nk_fp_load_row_f32(x, a->x, a->dtype, base, C);
		mean = L->sum(x, C) / (double)C;
		var = L->sqdev(x, C, (float)mean) / (double)C;
		rstd = 1.0 / sqrt(var + a->eps);
		affine_consts(a->dtype, mean, rstd, &sh, &sc, &bi);
		L->affine(x, x, C, sh, sc, bi, prm->pw, prm->pb, 0);
		nk_fp_store_row_f32(a->y, a->dtype, base, x, C);
	} else {
		double s = 0;

		for (int64_t c = 0; c < C; c += CH) {
			int64_t n = nk_min64(CH, C - c);

			nk_fp_load_row_f32(x, a->x, a->dtype, base + c, n);
			s += L->sum(x, n);
		}
		mean = s / (double)C;
		m = (float)mean;
		for (int64_t c = 0; c < C; c += CH) {
			int64_t n = nk_min64(CH, C - c);

			nk_fp_load_row_f32(x, a->x, a->dtype, base + c, n);
			var += L->sqdev(x, n, m);
		}
		var /= (double)C;
		rstd = 1.0 / sqrt(var + a->eps);
		affine_consts(a->dtype, mean, rstd, &sh, &sc, &bi);
		for (int64_t c = 0; c < C; c += CH) {
			int64_t n = nk_min64(CH, C - c);

			nk_fp_load_row_f32(x, a->x, a->dtype, base + c, n);
			if (a->w)
				nk_fp_load_row_f32(w, a->w, a->dtype, c, n);
			if (a->b)
				nk_fp_load_row_f32(b, a->b, a->dtype, c, n);
			L->affine(x, x, n, sh, sc, bi, a->w ? w : NULL, a->b ? b : NULL, 0);
			nk_fp_store_row_f32(a->y, a->dtype, base + c, x, n);
		}
	}
	if (a->mean)
		nk_fp_stored(a->mean, a->dtype, r, mean);
	if (a->rstd)
		nk_fp_stored(a->rstd, a->dtype, r, rstd);
}

static void ln_row_f64(const nk_layernorm_args_t *a, int64_t r)
{
	const double *x = (const double *)a->x + r * a->cols, *w = a->w, *b = a->b;
	double *y = (double *)a->y + r * a->cols;
	double mean, var, rstd;

	row_moments(a, r, &mean, &var);
	rstd = 1.0 / sqrt(var + a->eps);
	for (int64_t j = 0; j < a->cols; j++) {
		double v = (x[j] - mean) * rstd;

		v = w ? v * w[j] : v;
		y[j] = b ? v + b[j] : v;
	}
	if (a->mean)
		((double *)a->mean)[r] = mean;
	if (a->rstd)
		((double *)a->rstd)[r] = rstd;
}

static void ln_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_layernorm_args_t *a = ctx;
	ln_params_t prm;

	if (a->dtype == NK_F32) {
		int64_t C = a->cols;
		int stream = a->rows * C * 4 >= NK_STREAM_MIN_BYTES && nk_family_avx512(NK_FAM_LAYERNORM);

		lnops()->fwd_rows((float *)a->y + r0 * C, (const float *)a->x + r0 * C, a->w, a->b, r1 - r0, C, a->eps,
				  a->mean ? (float *)a->mean + r0 : NULL, a->rstd ? (float *)a->rstd + r0 : NULL, stream);
		if (stream)
			nk_stream_fence();
		return;
	}
	if (a->dtype != NK_F64)
		ln_params_load(&prm, a->w, a->b, a->dtype, a->cols);
	for (int64_t r = r0; r < r1; r++) {
		if (a->dtype == NK_F64)
			ln_row_f64(a, r);
		else
			ln_row_f32(a, &prm, r);
	}
}

int nk_layernorm_run(void *args)
{
	const nk_layernorm_args_t *a = args;

	if (ln_check(a->dtype, a->rows, a->cols, "layer_norm"))
		return -1;
	if (nk_using_reference())
		return nk_layernorm_ref(args);
	if (a->rows > 0)
		nrt_parallel_for(a->rows, row_grain(a->cols), ln_rows, (void *)a);
	return 0;
}

/* ---- backward: dx by rows ----------------------------------------------------------------------- */

/* dy := g = dy*w (dy, w may be NULL), x := xhat = (x - mean)*rstd over n elements. */
static void ln_g_xhat(float *restrict dy, float *restrict x, const float *restrict w, int64_t n, float mean,
		      float rstd)
{
	if (dy && w)
		for (int64_t j = 0; j < n; j++)
			dy[j] *= w[j];
	if (mean != 0 || rstd != 1)
		for (int64_t j = 0; j < n; j++)
			x[j] = (x[j] - mean) * rstd;
}

/* dx = rstd*(g - mg - xhat*mgx), written into g. */
static void ln_dx_from(float *restrict g, const float *restrict xhat, int64_t n, float rstd, float mg, float mgx)
{
	for (int64_t j = 0; j < n; j++)
		g[j] = rstd * (g[j] - mg - xhat[j] * mgx);
}

/* sw[j] += dy[j]*xhat[j], sb[j] += dy[j] (the per-chunk dw/db partials; NULL when not wanted). */
static void ln_partials(float *restrict sw, float *restrict sb, const float *restrict dy, const float *restrict xhat,
			int64_t n)
{
	if (sw)
		for (int64_t j = 0; j < n; j++)
			sw[j] += dy[j] * xhat[j];
	if (sb)
		for (int64_t j = 0; j < n; j++)
			sb[j] += dy[j];
}

static void ln_bwd_sums(const float *restrict dy, const float *restrict x, const float *restrict w, int64_t n,
			float mean, float rstd, double *sg, double *sgx, float *restrict sw, float *restrict sb)
{
	float pg[16] = { 0 }, pgx[16] = { 0 };
	double s1 = 0, s2 = 0;
	int64_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (int l = 0; l < 16; l++) {
			float xh = (x[j + l] - mean) * rstd, g = w ? dy[j + l] * w[j + l] : dy[j + l];

			pg[l] += g;
			pgx[l] += g * xh;
		}
	for (; j < n; j++) {
		float xh = (x[j] - mean) * rstd, g = w ? dy[j] * w[j] : dy[j];

		s1 += g;
		s2 += g * xh;
	}
	for (int l = 0; l < 16; l++)
		s1 += pg[l], s2 += pgx[l];
	*sg += s1;
	*sgx += s2;
	if (sw)
		for (j = 0; j < n; j++)
			sw[j] += dy[j] * ((x[j] - mean) * rstd);
	if (sb)
		for (j = 0; j < n; j++)
			sb[j] += dy[j];
}

static void ln_bwd_dx(float *restrict dx, const float *restrict dy, const float *restrict x, const float *restrict w,
		      int64_t n, float mean, float rstd, float mg, float mgx, int stream)
{
	(void)stream;
	for (int64_t j = 0; j < n; j++) {
		float xh = (x[j] - mean) * rstd, g = w ? dy[j] * w[j] : dy[j];

		dx[j] = rstd * (g - mg - xh * mgx);
	}
}

static void scale_w(float *restrict y, const float *restrict x, int64_t n, float s, const float *restrict w, int stream)
{
	(void)stream;
	if (w)
		for (int64_t j = 0; j < n; j++)
			y[j] = x[j] * s * w[j];
	else
		for (int64_t j = 0; j < n; j++)
			y[j] = x[j] * s;
}

static double dot3(const float *restrict dy, const float *restrict w, const float *restrict x, int64_t n)
{
	float p[16] = { 0 };
	double s = 0;
	int64_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (int l = 0; l < 16; l++)
			p[l] += (w ? dy[j + l] * w[j + l] : dy[j + l]) * x[j + l];
	for (; j < n; j++)
		s += (w ? dy[j] * w[j] : dy[j]) * x[j];
	for (int l = 0; l < 16; l++)
		s += p[l];
	return s;
}

static void rms_dx(float *restrict dx, const float *restrict dy, const float *restrict x, const float *restrict w,
		   int64_t n, float rstd, float c, float *restrict sw, int stream)
{
	(void)stream;
	if (dx)
		for (int64_t j = 0; j < n; j++)
			dx[j] = rstd * ((w ? dy[j] * w[j] : dy[j]) - x[j] * c);
	if (sw)
		for (int64_t j = 0; j < n; j++)
			sw[j] += dy[j] * (x[j] * rstd);
}

static void bwd_rows(float *dx, const float *dy, const float *x, const float *w, int64_t nr, int64_t n,
		     const float *mean, const float *rstd, float *sw, float *sb, int stream)
{
	for (int64_t r = 0; r < nr; r++) {
		const float *dyr = dy + r * n, *xr = x + r * n;
		double sg = 0, sgx = 0;

		ln_bwd_sums(dyr, xr, dx ? w : NULL, n, mean[r], rstd[r], &sg, &sgx, sw, sb);
		if (dx)
			ln_bwd_dx(dx + r * n, dyr, xr, w, n, mean[r], rstd[r], (float)(sg / (double)n),
				  (float)(sgx / (double)n), stream);
	}
}

static void fwd_rows(float *y, const float *x, const float *w, const float *b, int64_t nr, int64_t n, double eps,
		     float *mean, float *rstd, int stream)
{
	for (int64_t r = 0; r < nr; r++) {
		const float *xr = x + r * n;
		double m = lanes_sum(xr, n) / (double)n, var = lanes_sqdev(xr, n, (float)m) / (double)n;
		double rs = 1.0 / sqrt(var + eps);

		affine(y + r * n, xr, n, (float)m, (float)rs, 0, w, b, stream);
		if (mean)
			mean[r] = (float)m;
		if (rstd)
			rstd[r] = (float)rs;
	}
}

/* The row primitives: these portable ones, or the AVX-512 ones of layernorm_avx512.c. */
const nk_lnops_t nk_lnops_ref = {
	.sum = lanes_sum,
	.sqdev = lanes_sqdev,
	.dot = lanes_dot,
	.affine = affine,
	.g_xhat = ln_g_xhat,
	.dx_from = ln_dx_from,
	.partials = ln_partials,
	.ln_bwd_sums = ln_bwd_sums,
	.ln_bwd_dx = ln_bwd_dx,
	.bwd_rows = bwd_rows,
	.fwd_rows = fwd_rows,
	.scale_w = scale_w,
	.dot3 = dot3,
	.rms_dx = rms_dx,
};

const nk_lnops_t *nk_lnops(void)
{
	return nk_kernels()->layernorm;
}

static const nk_lnops_t *lnops(void)
{
	return nk_lnops();
}

/* Non-temporal dx stores for a large f32 output (fenced at the end of each task). */
static int ln_bwd_stream(const nk_layernorm_bwd_args_t *a)
{
	return a->dtype == NK_F32 && a->rows * a->cols * 4 >= NK_STREAM_MIN_BYTES && nk_family_avx512(NK_FAM_LAYERNORM);
}

/* dx of row r (if a->dx) and, when sw/sb are given, the row's dw/db terms added to them.  Two passes
 * over the row: sums (and dw/db terms), then dx.  f32 rows are used in place (any length); bf16/f16
 * rows are converted in chunks of CH (rows up to CH once). */
static void ln_dx_row_f32(const nk_layernorm_bwd_args_t *a, const ln_params_t *prm, int64_t r, float *sw,
			  float *sb)
{
	float dyb[CH], xb[CH], wb[CH], dxb[CH];
	float mean = nk_fp_loadf(a->mean, a->dtype, r), rstd = nk_fp_loadf(a->rstd, a->dtype, r), mg = 0, mgx = 0;
	const nk_lnops_t *L = lnops();
	double sg = 0, sgx = 0;
	int64_t base = r * a->cols, C = a->cols;
	bool f32 = a->dtype == NK_F32, once = f32 || C <= CH;
	int stream = ln_bwd_stream(a);

	for (int pass = 0; pass < (a->dx ? 2 : 1); pass++) {
		for (int64_t c = 0; c < C; c += f32 ? C : CH) {
			int64_t n = f32 ? C : nk_min64(CH, C - c);
			const float *dy = dyb, *x = xb, *w = NULL;

			if (f32) {
				dy = (const float *)a->dy + base;
				x = (const float *)a->x + base;
				w = a->w;
			} else if (!once || pass == 0) {
				nk_fp_load_row_f32(dyb, a->dy, a->dtype, base + c, n);
				nk_fp_load_row_f32(xb, a->x, a->dtype, base + c, n);
				if (a->w && C > CH)
					nk_fp_load_row_f32(wb, a->w, a->dtype, c, n);
				w = a->w ? (C > CH ? wb : prm->pw) : NULL;
			} else {
				w = a->w ? prm->pw : NULL;
			}
			if (pass == 0) {
				L->ln_bwd_sums(dy, x, a->dx ? w : NULL, n, mean, rstd, &sg, &sgx, sw ? sw + c : NULL,
					       sb ? sb + c : NULL);
				continue;
			}
			if (f32) {
				L->ln_bwd_dx((float *)a->dx + base, dy, x, w, n, mean, rstd, mg, mgx, stream);
			} else {
				L->ln_bwd_dx(dxb, dy, x, w, n, mean, rstd, mg, mgx, 0);
				nk_fp_store_row_f32(a->dx, a->dtype, base + c, dxb, n);
			}
		}
		mg = (float)(sg / (double)C);
		mgx = (float)(sgx / (double)C);
	}
}

static void ln_dx_row_f64(const nk_layernorm_bwd_args_t *a, int64_t r)
{
	const double *dy = (const double *)a->dy + r * a->cols, *x = (const double *)a->x + r * a->cols;
	const double *w = a->w;
	double *dx = (double *)a->dx + r * a->cols;
	double mean = ((const double *)a->mean)[r], rstd = ((const double *)a->rstd)[r];
	double sg = 0, sgx = 0, mg, mgx;

	for (int64_t j = 0; j < a->cols; j++) {
		double g = w ? dy[j] * w[j] : dy[j];

		sg += g;
		sgx += g * (x[j] - mean) * rstd;
	}
	mg = sg / (double)a->cols;
	mgx = sgx / (double)a->cols;
	for (int64_t j = 0; j < a->cols; j++) {
		double g = w ? dy[j] * w[j] : dy[j];

		dx[j] = rstd * (g - mg - (x[j] - mean) * rstd * mgx);
	}
}

/* f32 rows [r0, r1) through bwd_rows, 16 at a time (dx when a->dx; terms into sw, sb when given). */
static void ln_bwd_rows_f32(const nk_layernorm_bwd_args_t *a, int64_t r0, int64_t r1, float *sw, float *sb)
{
	const nk_lnops_t *L = lnops();
	int64_t C = a->cols;

	for (int64_t r = r0; r < r1; r += 16)
		L->bwd_rows(a->dx ? (float *)a->dx + r * C : NULL, (const float *)a->dy + r * C, (const float *)a->x + r * C,
			    a->w, nk_min64(16, r1 - r), C, (const float *)a->mean + r, (const float *)a->rstd + r, sw, sb,
			    ln_bwd_stream(a));
}

static void ln_dx_rows(void *ctx, int64_t r0, int64_t r1)
{
	const nk_layernorm_bwd_args_t *a = ctx;
	ln_params_t prm;

	if (a->dtype == NK_F32) {
		ln_bwd_rows_f32(a, r0, r1, NULL, NULL);
		if (a->dx && ln_bwd_stream(a))
			nk_stream_fence();
		return;
	}

	if (a->dtype != NK_F64)
		ln_params_load(&prm, a->w, NULL, a->dtype, a->cols);
	for (int64_t r = r0; r < r1; r++) {
		if (a->dtype == NK_F64)
			ln_dx_row_f64(a, r);
		else
			ln_dx_row_f32(a, &prm, r, NULL, NULL);
	}
	if (a->dx && ln_bwd_stream(a))
		nk_stream_fence();
}

/* ---- backward: dw, db by column blocks ---------------------------------------------------------- */

typedef struct {
	const nk_layernorm_bwd_args_t *a;
	int64_t cb; /* columns per task */
} ln_cols_t;

/* Columns [c0, c0+n): sums over all rows, in row order, accumulated in f64 (products in f32, f64 for
 * f64). */
static void ln_dwdb_block(const nk_layernorm_bwd_args_t *a, int64_t c0, int64_t n)
{
	double sw[CB] = { 0 }, sb[CB] = { 0 };

	for (int64_t r = 0; r < a->rows; r++) {
		int64_t o = r * a->cols + c0;

		if (a->dtype == NK_F64) {
			const double *dy = (const double *)a->dy + o, *x = (const double *)a->x + o;
			double mean = ((const double *)a->mean)[r], rstd = ((const double *)a->rstd)[r];

			for (int64_t j = 0; j < n; j++) {
				sw[j] += dy[j] * ((x[j] - mean) * rstd);
				sb[j] += dy[j];
			}
			continue;
		}
		float dy[CB], x[CB];
		float mean = nk_fp_loadf(a->mean, a->dtype, r), rstd = nk_fp_loadf(a->rstd, a->dtype, r);

		nk_fp_load_row_f32(dy, a->dy, a->dtype, o, n);
		if (a->dw) {
			nk_fp_load_row_f32(x, a->x, a->dtype, o, n);
			for (int64_t j = 0; j < n; j++)
				sw[j] += dy[j] * ((x[j] - mean) * rstd);
		}
		for (int64_t j = 0; j < n; j++)
			sb[j] += dy[j];
	}
	for (int64_t j = 0; j < n; j++) {
		if (a->dw)
			nk_fp_stored(a->dw, a->dtype, c0 + j, sw[j]);
		if (a->db)
			nk_fp_stored(a->db, a->dtype, c0 + j, sb[j]);
	}
}

static void ln_dwdb_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const ln_cols_t *lc = ctx;

	for (int64_t t = t0; t < t1; t++) {
		int64_t c0 = t * lc->cb;

		ln_dwdb_block(lc->a, c0, nk_min64(lc->cb, lc->a->cols - c0));
	}
}

/* f32-computed dw/db fused with dx: the rows are cut into a fixed number of chunks (a function of
 * rows and cols only); a chunk's task computes dx of its rows and sums their dw/db terms in f32 into
 * its own partial row of the caller's scratch; the caller adds the partials in chunk order in f64.
 * Deterministic whatever the thread count; dy and x are read once. */
#define LN_PART_FLOATS (1 << 17)

typedef struct {
	const nk_layernorm_bwd_args_t *a;
	int64_t chunk_rows;
	float *part; /* [chunks][2][cols]: dw terms, then db terms */
} ln_fused_t;

static void ln_fused_tasks(void *ctx, int64_t t0, int64_t t1)
{
	const ln_fused_t *f = ctx;
	const nk_layernorm_bwd_args_t *a = f->a;
	ln_params_t prm;

	if (a->dtype != NK_F32)
		ln_params_load(&prm, a->w, NULL, a->dtype, a->cols);
	for (int64_t t = t0; t < t1; t++) {
		float *sw = f->part + t * 2 * a->cols, *sb = sw + a->cols;
		int64_t r1 = nk_min64(a->rows, (t + 1) * f->chunk_rows);

		memset(sw, 0, (size_t)(2 * a->cols) * sizeof(float));
		if (a->dtype == NK_F32) {
			ln_bwd_rows_f32(a, t * f->chunk_rows, r1, a->dw ? sw : NULL, a->db ? sb : NULL);
			continue;
		}
		for (int64_t r = t * f->chunk_rows; r < r1; r++)
			ln_dx_row_f32(a, &prm, r, a->dw ? sw : NULL, a->db ? sb : NULL);
	}
	if (a->dx && ln_bwd_stream(a))
		nk_stream_fence();
}

static int ln_bwd_fused(const nk_layernorm_bwd_args_t *a)
{
	float *part = nk_ws_get(NK_WS_PARTIALS, LN_PART_FLOATS * sizeof(float));
	int64_t max_chunks = LN_PART_FLOATS / (2 * a->cols);
	int64_t chunks = nk_min64(max_chunks, (a->rows + 63) / 64);
	ln_fused_t f = { .a = a, .part = part };

	if (!part) {
		nrt_kernel_fail("layer_norm_backward: out of host memory for the partial sums");
		return -1;
	}

	if (chunks < 1)
		chunks = 1;
	f.chunk_rows = (a->rows + chunks - 1) / chunks;
	chunks = a->rows ? (a->rows + f.chunk_rows - 1) / f.chunk_rows : 0;
	nrt_parallel_for(chunks, a->rows * a->cols >= NK_PARALLEL_GRAIN ? 1 : chunks, ln_fused_tasks, &f);
	/* partials added in chunk order in f64, CB columns at a time (vectorizable) */
	for (int64_t c0 = 0; c0 < a->cols; c0 += CB) {
		int64_t n = nk_min64(CB, a->cols - c0);
		double sw[CB] = { 0 }, sb[CB] = { 0 };

		for (int64_t t = 0; t < chunks; t++) {
			const float *pw = part + t * 2 * a->cols + c0, *pb = pw + a->cols;

			for (int64_t j = 0; j < n; j++) {
				sw[j] += pw[j];
				sb[j] += pb[j];
			}
		}
		if (a->dw)
			store_f64(a->dw, a->dtype, c0, sw, n);
		if (a->db)
			store_f64(a->db, a->dtype, c0, sb, n);
	}
	return 0;
}

int nk_layernorm_bwd_run(void *args)
{
	const nk_layernorm_bwd_args_t *a = args;

	if (ln_check(a->dtype, a->rows, a->cols, "layer_norm_backward"))
		return -1;
	if (nk_using_reference())
		return nk_layernorm_bwd_ref(args);
	if (a->cols <= 0)
		return 0;
	if ((a->dw || a->db) && a->dtype != NK_F64 && 2 * a->cols <= LN_PART_FLOATS)
		return ln_bwd_fused(a);
	if (a->dx && a->rows > 0)
		nrt_parallel_for(a->rows, row_grain(a->cols), ln_dx_rows, (void *)a);
	if (a->dw || a->db) {
		int nt = nrt_num_threads();
		ln_cols_t lc = { .a = a };
		int64_t ntasks;

		/* about 4 tasks per thread, 16..CB columns each */
		lc.cb = (a->cols + 4 * nt - 1) / (4 * nt);
		lc.cb = lc.cb < 16 ? 16 : lc.cb > CB ? CB : lc.cb;
		ntasks = (a->cols + lc.cb - 1) / lc.cb;
		nrt_parallel_for(ntasks, a->rows * a->cols >= NK_PARALLEL_GRAIN ? 1 : ntasks, ln_dwdb_tasks, &lc);
	}
	return 0;
}

/* ---- reference: element at a time in f64 ------------------------------------------------------ */

int nk_layernorm_ref(void *args)
{
	const nk_layernorm_args_t *a = args;

	if (ln_check(a->dtype, a->rows, a->cols, "layer_norm"))
		return -1;
	for (int64_t r = 0; r < a->rows; r++) {
		int64_t o = r * a->cols;
		double s = 0, q = 0, mean, rstd;

		for (int64_t j = 0; j < a->cols; j++)
			s += nk_fp_loadd(a->x, a->dtype, o + j);
		mean = a->cols ? s / (double)a->cols : 0;
		for (int64_t j = 0; j < a->cols; j++) {
			double d = nk_fp_loadd(a->x, a->dtype, o + j) - mean;

			q += d * d;
		}
		rstd = 1.0 / sqrt((a->cols ? q / (double)a->cols : 0) + a->eps);
		for (int64_t j = 0; j < a->cols; j++) {
			double v = (nk_fp_loadd(a->x, a->dtype, o + j) - mean) * rstd;

			if (a->w)
				v *= nk_fp_loadd(a->w, a->dtype, j);
			if (a->b)
				v += nk_fp_loadd(a->b, a->dtype, j);
			nk_fp_stored(a->y, a->dtype, o + j, v);
		}
		if (a->mean)
			nk_fp_stored(a->mean, a->dtype, r, mean);
		if (a->rstd)
			nk_fp_stored(a->rstd, a->dtype, r, rstd);
	}
	return 0;
}

int nk_layernorm_bwd_ref(void *args)
{
	const nk_layernorm_bwd_args_t *a = args;

	if (ln_check(a->dtype, a->rows, a->cols, "layer_norm_backward"))
		return -1;
	for (int64_t r = 0; r < a->rows && a->dx; r++) {
		int64_t o = r * a->cols;
		double mean = nk_fp_loadd(a->mean, a->dtype, r), rstd = nk_fp_loadd(a->rstd, a->dtype, r);
		double sg = 0, sgx = 0;

		for (int64_t j = 0; j < a->cols; j++) {
			double dy = nk_fp_loadd(a->dy, a->dtype, o + j);
			double g = a->w ? dy * nk_fp_loadd(a->w, a->dtype, j) : dy;
			double xhat = (nk_fp_loadd(a->x, a->dtype, o + j) - mean) * rstd;

			sg += g;
			sgx += g * xhat;
		}
		for (int64_t j = 0; j < a->cols; j++) {
			double dy = nk_fp_loadd(a->dy, a->dtype, o + j);
			double g = a->w ? dy * nk_fp_loadd(a->w, a->dtype, j) : dy;
			double xhat = (nk_fp_loadd(a->x, a->dtype, o + j) - mean) * rstd;

			nk_fp_stored(a->dx, a->dtype, o + j, rstd * (g - sg / (double)a->cols - xhat * sgx / (double)a->cols));
		}
	}
	for (int64_t j = 0; j < a->cols && (a->dw || a->db); j++) {
		double sw = 0, sb = 0;

		for (int64_t r = 0; r < a->rows; r++) {
			double dy = nk_fp_loadd(a->dy, a->dtype, r * a->cols + j);
			double mean = nk_fp_loadd(a->mean, a->dtype, r), rstd = nk_fp_loadd(a->rstd, a->dtype, r);

			sw += dy * (nk_fp_loadd(a->x, a->dtype, r * a->cols + j) - mean) * rstd;
			sb += dy;
		}
		if (a->dw)
			nk_fp_stored(a->dw, a->dtype, j, sw);
		if (a->db)
			nk_fp_stored(a->db, a->dtype, j, sb);
	}
	return 0;
}
