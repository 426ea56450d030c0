/* norm.c - batch norm, group norm and rms norm, forward and backward (aten native_batch_norm /
 * native_batch_norm_backward, native_group_norm / native_group_norm_backward, _fused_rms_norm).
 *
 * Layout: batch and group norm take a contiguous [N, C, S] (S = product of the spatial dims; the glue
 * copies channels_last input to this layout); rms norm a contiguous [rows, cols].
 * Statistics: two passes (mean, then the sum of squared deviations) with f64 sums for every dtype, so
 * the variance is not subject to the cancellation of E[x^2] - E[x]^2.  Elements are converted to f64
 * in chunks of CH.  Outputs are y = x*alpha + beta with per-channel alpha, beta (aten's CPU form),
 * computed in f32 for f32/bf16/f16 and f64 for f64.
 * Threading: batch norm over channels, group norm over (n, g) (and channels for dw/db), rms norm over
 * rows (column blocks for dw); every sum is taken in a fixed order, so results do not depend on the
 * thread count.  The _ref twins run the same formulas one element at a time on one thread.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_fp.h"
#include "nk_impl.h"
#include "nk_lnops_impl.h"
#include "nk_ws.h"
#include "nrt.h"

#define CH 512 /* elements per converted chunk */

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int norm_check(int dtype, int pdtype, const char *who)
{
	if (!nk_fp_is_float(dtype) || (pdtype != dtype && !(pdtype == NK_F32 && (dtype == NK_BF16 || dtype == NK_F16)))) {
		nrt_kernel_fail("%s: unsupported dtypes %s / %s", who, nk_dtype_name(dtype), nk_dtype_name(pdtype));
		return -1;
	}
	return 0;
}

static double pload(const void *p, int dtype, int64_t i, double dflt)
{
	return p ? nk_fp_loadd(p, dtype, i) : dflt;
}

/* Sum of n elements at p (dtype) from element off, in f64. */
static double seg_sum(const void *p, int dtype, int64_t off, int64_t n)
{
	double buf[CH], s = 0;
	size_t es = nk_fp_elem_size(dtype);

	if (dtype == NK_F32 && nk_cpu_avx512()) /* [h-cnn] */
		return nk_norm_sum_f32_avx512((const float *)p + off, n);
	for (int64_t j = 0; j < n; j += CH) {
		int64_t m = min64(CH, n - j);

		nk_block_load_f64(buf, (const char *)p + (off + j) * (int64_t)es, (int64_t)es, dtype, m);
		for (int64_t k = 0; k < m; k++)
			s += buf[k];
	}
	return s;
}

/* Sum of (x - m)^2 over n elements. */
static double seg_sqdev(const void *p, int dtype, int64_t off, int64_t n, double m)
{
	double buf[CH], s = 0;
	size_t es = nk_fp_elem_size(dtype);

	if (dtype == NK_F32 && nk_cpu_avx512()) /* [h-cnn] */
		return nk_rd_sumsq_f32_avx512((const float *)p + off, n, m);
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = min64(CH, n - j);

		nk_block_load_f64(buf, (const char *)p + (off + j) * (int64_t)es, (int64_t)es, dtype, c);
		for (int64_t k = 0; k < c; k++)
			s += (buf[k] - m) * (buf[k] - m);
	}
	return s;
}

/* Sums of dy and dy*(x - m) over n elements of two arrays of the same dtype. */
static void seg_dsums(const void *dy, const void *x, int dtype, int64_t off, int64_t n, double m, double *sdy, double *sdx)
{
	double b1[CH], b2[CH], s1 = 0, s2 = 0;
	size_t es = nk_fp_elem_size(dtype);

	if (dtype == NK_F32 && nk_cpu_avx512()) { /* [h-cnn] */
		nk_norm_dsums_f32_avx512((const float *)dy + off, (const float *)x + off, n, m, sdy, sdx);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = min64(CH, n - j);

		nk_block_load_f64(b1, (const char *)dy + (off + j) * (int64_t)es, (int64_t)es, dtype, c);
		nk_block_load_f64(b2, (const char *)x + (off + j) * (int64_t)es, (int64_t)es, dtype, c);
		for (int64_t k = 0; k < c; k++) {
			s1 += b1[k];
			s2 += b1[k] * (b2[k] - m);
		}
	}
	*sdy += s1;
	*sdx += s2;
}

/* y[off..off+n) = x*alpha + beta (f32 math except for f64). */
static void seg_affine(void *y, const void *x, int dtype, int64_t off, int64_t n, double alpha, double beta)
{
	size_t es = nk_fp_elem_size(dtype);
	const char *xs = (const char *)x + off * (int64_t)es;
	char *ys = (char *)y + off * (int64_t)es;

	if (dtype == NK_F64) {
		const double *xd = (const double *)xs;
		double *yd = (double *)ys;

		for (int64_t k = 0; k < n; k++)
			yd[k] = xd[k] * alpha + beta;
		return;
	}
	float buf[CH], a = (float)alpha, b = (float)beta;

	if (dtype == NK_F32 && nk_cpu_avx512()) { /* [h-cnn] */
		nk_norm_affine_f32_avx512((float *)ys, (const float *)xs, n, a, b);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = min64(CH, n - j);

		nk_block_load_f32(buf, xs + j * (int64_t)es, (int64_t)es, dtype, c);
		for (int64_t k = 0; k < c; k++)
			buf[k] = buf[k] * a + b;
		nk_block_store_f32(ys + j * (int64_t)es, (int64_t)es, dtype, buf, c);
	}
}

/* dx = dy*a + x*b + c over n elements (the backward's per-channel affine form). */
static void seg_bwd(void *dx, const void *dy, const void *x, int dtype, int64_t off, int64_t n, double a, double b, double c)
{
	size_t es = nk_fp_elem_size(dtype);
	const char *ds = (const char *)dy + off * (int64_t)es, *xs = (const char *)x + off * (int64_t)es;
	char *os = (char *)dx + off * (int64_t)es;

	if (dtype == NK_F64) {
		const double *g = (const double *)ds, *xd = (const double *)xs;
		double *o = (double *)os;

		for (int64_t k = 0; k < n; k++)
			o[k] = g[k] * a + xd[k] * b + c;
		return;
	}
	float g[CH], xv[CH], fa = (float)a, fb = (float)b, fc = (float)c;

	if (dtype == NK_F32 && nk_cpu_avx512()) { /* [h-cnn] */
		nk_norm_bwd_f32_avx512((float *)os, (const float *)ds, (const float *)xs, n, fa, fb, fc);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t m = min64(CH, n - j);

		nk_block_load_f32(g, ds + j * (int64_t)es, (int64_t)es, dtype, m);
		nk_block_load_f32(xv, xs + j * (int64_t)es, (int64_t)es, dtype, m);
		for (int64_t k = 0; k < m; k++)
			g[k] = g[k] * fa + xv[k] * fb + fc;
		nk_block_store_f32(os + j * (int64_t)es, (int64_t)es, dtype, g, m);
	}
}

/* ---- batch norm ---------------------------------------------------------------------------------- */

static int bn_check(const nk_batchnorm_args_t *a, const char *who)
{
	if (norm_check(a->dtype, a->pdtype, who))
		return -1;
	if (a->N < 0 || a->C < 0 || a->S < 0) {
		nrt_kernel_fail("%s: negative size", who);
		return -1;
	}
	if (!a->training && (!a->running_mean || !a->running_var)) {
		nrt_kernel_fail("%s: running_mean and running_var must be defined in evaluation mode", who);
		return -1;
	}
	return 0;
}

/* Channel c: statistics (or running stats), outputs, running update.  elem: one element at a time. */
static void bn_channel(const nk_batchnorm_args_t *a, int64_t c)
{
	int64_t n = a->N * a->S;
	double mean, var, invstd;

	if (a->training) {
		double s = 0, q = 0;

		for (int64_t i = 0; i < a->N; i++)
			s += seg_sum(a->x, a->dtype, (i * a->C + c) * a->S, a->S);
		mean = n ? s / (double)n : 0;
		for (int64_t i = 0; i < a->N; i++)
			q += seg_sqdev(a->x, a->dtype, (i * a->C + c) * a->S, a->S, mean);
		var = n ? q / (double)n : 0;
		invstd = n ? 1.0 / sqrt(var + a->eps) : 0;
		if (!n)
			mean = NAN, var = NAN;
		if (a->save_mean)
			nk_fp_stored(a->save_mean, a->pdtype, c, n ? mean : 0);
		if (a->save_invstd)
			nk_fp_stored(a->save_invstd, a->pdtype, c, invstd);
		if (a->running_mean) {
			double r = nk_fp_loadd(a->running_mean, a->pdtype, c);

			nk_fp_stored(a->running_mean, a->pdtype, c, a->momentum * mean + (1 - a->momentum) * r);
		}
		if (a->running_var) {
			double r = nk_fp_loadd(a->running_var, a->pdtype, c);
			double unb = q / (double)(n - 1);

			nk_fp_stored(a->running_var, a->pdtype, c, a->momentum * unb + (1 - a->momentum) * r);
		}
	} else {
		mean = nk_fp_loadd(a->running_mean, a->pdtype, c);
		var = nk_fp_loadd(a->running_var, a->pdtype, c);
		invstd = 1.0 / sqrt(var + a->eps);
	}
	double alpha = invstd * pload(a->w, a->pdtype, c, 1.0);
	double beta = pload(a->b, a->pdtype, c, 0.0) - mean * alpha;

	for (int64_t i = 0; i < a->N; i++)
		seg_affine(a->y, a->x, a->dtype, (i * a->C + c) * a->S, a->S, alpha, beta);
}

static void bn_channels(void *ctx, int64_t c0, int64_t c1)
{
	for (int64_t c = c0; c < c1; c++)
		bn_channel(ctx, c);
}

int nk_batchnorm_run(void *args)
{
	const nk_batchnorm_args_t *a = args;

	if (bn_check(a, "batch_norm"))
		return -1;
	nrt_parallel_for(a->C, a->N * a->S >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (a->N * a->S + 1) + 1, bn_channels, (void *)a);
	return 0;
}

int nk_batchnorm_ref(void *args)
{
	const nk_batchnorm_args_t *a = args;

	if (bn_check(a, "batch_norm"))
		return -1;
	for (int64_t c = 0; c < a->C; c++) {
		int64_t n = a->N * a->S;
		double mean, var, invstd, s = 0, q = 0;

		if (a->training) {
			for (int64_t i = 0; i < a->N; i++)
				for (int64_t k = 0; k < a->S; k++)
					s += nk_fp_loadd(a->x, a->dtype, (i * a->C + c) * a->S + k);
			mean = n ? s / (double)n : NAN;
			for (int64_t i = 0; i < a->N; i++)
				for (int64_t k = 0; k < a->S; k++) {
					double d = nk_fp_loadd(a->x, a->dtype, (i * a->C + c) * a->S + k) - mean;

					q += d * d;
				}
			var = n ? q / (double)n : NAN;
			invstd = n ? 1.0 / sqrt(var + a->eps) : 0;
			if (a->save_mean)
				nk_fp_stored(a->save_mean, a->pdtype, c, n ? mean : 0);
			if (a->save_invstd)
				nk_fp_stored(a->save_invstd, a->pdtype, c, invstd);
			if (a->running_mean)
				nk_fp_stored(a->running_mean, a->pdtype, c,
					     a->momentum * mean + (1 - a->momentum) * nk_fp_loadd(a->running_mean, a->pdtype, c));
			if (a->running_var)
				nk_fp_stored(a->running_var, a->pdtype, c,
					     a->momentum * (q / (double)(n - 1)) + (1 - a->momentum) * nk_fp_loadd(a->running_var, a->pdtype, c));
		} else {
			mean = nk_fp_loadd(a->running_mean, a->pdtype, c);
			invstd = 1.0 / sqrt(nk_fp_loadd(a->running_var, a->pdtype, c) + a->eps);
		}
		double alpha = invstd * pload(a->w, a->pdtype, c, 1.0), beta = pload(a->b, a->pdtype, c, 0.0) - mean * alpha;

		for (int64_t i = 0; i < a->N; i++)
			for (int64_t k = 0; k < a->S; k++) {
				int64_t o = (i * a->C + c) * a->S + k;
				double x = nk_fp_loadd(a->x, a->dtype, o);

				if (a->dtype == NK_F64)
					nk_fp_stored(a->y, a->dtype, o, x * alpha + beta);
				else
					nk_fp_storef(a->y, a->dtype, o, (float)x * (float)alpha + (float)beta);
			}
	}
	return 0;
}

static void bn_bwd_channel(const nk_batchnorm_bwd_args_t *a, int64_t c)
{
	int64_t n = a->N * a->S;
	double mean = nk_fp_loadd(a->mean, a->pdtype, c), invstd = nk_fp_loadd(a->invstd, a->pdtype, c);
	double w = pload(a->w, a->pdtype, c, 1.0), sdy = 0, sdx = 0;

	if (!a->training)
		invstd = 1.0 / sqrt(invstd + a->eps);
	if (a->dw || a->db || (a->dx && a->training))
		for (int64_t i = 0; i < a->N; i++)
			seg_dsums(a->dy, a->x, a->dtype, (i * a->C + c) * a->S, a->S, mean, &sdy, &sdx);
	if (a->dw)
		nk_fp_stored(a->dw, a->pdtype, c, sdx * invstd);
	if (a->db)
		nk_fp_stored(a->db, a->pdtype, c, sdy);
	if (!a->dx)
		return;
	/* dx = (dy - sdy/n - (x - mean)*k) * invstd*w with k = sdx*invstd^2/n:  dy*A + x*B + C */
	double A = invstd * w, B = 0, Cc = 0;

	if (a->training && n) {
		double k = sdx * invstd * invstd / (double)n;

		B = -k * A;
		Cc = (mean * k - sdy / (double)n) * A;
	}
	for (int64_t i = 0; i < a->N; i++)
		seg_bwd(a->dx, a->dy, a->x, a->dtype, (i * a->C + c) * a->S, a->S, A, B, Cc);
}

static void bn_bwd_channels(void *ctx, int64_t c0, int64_t c1)
{
	for (int64_t c = c0; c < c1; c++)
		bn_bwd_channel(ctx, c);
}

static int bn_bwd_check(const nk_batchnorm_bwd_args_t *a)
{
	if (norm_check(a->dtype, a->pdtype, "batch_norm_backward"))
		return -1;
	if (a->N < 0 || a->C < 0 || a->S < 0 || !a->mean || !a->invstd) {
		nrt_kernel_fail("batch_norm_backward: bad size or missing statistics");
		return -1;
	}
	return 0;
}

int nk_batchnorm_bwd_run(void *args)
{
	const nk_batchnorm_bwd_args_t *a = args;

	if (bn_bwd_check(a))
		return -1;
	nrt_parallel_for(a->C, a->N * a->S >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (a->N * a->S + 1) + 1, bn_bwd_channels, (void *)a);
	return 0;
}

int nk_batchnorm_bwd_ref(void *args)
{
	const nk_batchnorm_bwd_args_t *a = args;

	if (bn_bwd_check(a))
		return -1;
	for (int64_t c = 0; c < a->C; c++) {
		int64_t n = a->N * a->S;
		double mean = nk_fp_loadd(a->mean, a->pdtype, c), invstd = nk_fp_loadd(a->invstd, a->pdtype, c);
		double w = pload(a->w, a->pdtype, c, 1.0), sdy = 0, sdx = 0;

		if (!a->training)
			invstd = 1.0 / sqrt(invstd + a->eps);
		for (int64_t i = 0; i < a->N; i++)
			for (int64_t k = 0; k < a->S; k++) {
				int64_t o = (i * a->C + c) * a->S + k;
				double g = nk_fp_loadd(a->dy, a->dtype, o);

				sdy += g;
				sdx += g * (nk_fp_loadd(a->x, a->dtype, o) - mean);
			}
		if (a->dw)
			nk_fp_stored(a->dw, a->pdtype, c, sdx * invstd);
		if (a->db)
			nk_fp_stored(a->db, a->pdtype, c, sdy);
		if (!a->dx)
			continue;
		for (int64_t i = 0; i < a->N; i++)
			for (int64_t k = 0; k < a->S; k++) {
				int64_t o = (i * a->C + c) * a->S + k;
				double g = nk_fp_loadd(a->dy, a->dtype, o), xh = nk_fp_loadd(a->x, a->dtype, o) - mean;
				double v = a->training && n ? (g - sdy / (double)n - xh * sdx * invstd * invstd / (double)n) : g;

				nk_fp_stored(a->dx, a->dtype, o, v * invstd * w);
			}
	}
	return 0;
}

/* ---- group norm ---------------------------------------------------------------------------------- */

static int gn_check(int dtype, int pdtype, int64_t N, int64_t C, int64_t S, int64_t G, const char *who)
{
	if (norm_check(dtype, pdtype, who))
		return -1;
	if (N < 0 || C < 0 || S < 0 || G <= 0 || C % G) {
		nrt_kernel_fail("%s: bad sizes N=%lld C=%lld S=%lld G=%lld", who, (long long)N, (long long)C, (long long)S, (long long)G);
		return -1;
	}
	return 0;
}

static void gn_groups(void *ctx, int64_t r0, int64_t r1)
{
	const nk_groupnorm_args_t *a = ctx;
	int64_t D = a->C / a->G, M = D * a->S;

	for (int64_t r = r0; r < r1; r++) {
		int64_t n = r / a->G, g = r % a->G, base = (n * a->C + g * D) * a->S;
		double mean = M ? seg_sum(a->x, a->dtype, base, M) / (double)M : 0;
		double var = M ? seg_sqdev(a->x, a->dtype, base, M, mean) / (double)M : 0;
		double rstd = 1.0 / sqrt(var + a->eps);

		if (!M)
			mean = NAN, rstd = NAN;
		nk_fp_stored(a->mean, a->pdtype, r, mean);
		nk_fp_stored(a->rstd, a->pdtype, r, rstd);
		for (int64_t d = 0; d < D; d++) {
			int64_t c = g * D + d;
			double alpha = rstd * pload(a->w, a->pdtype, c, 1.0);

			seg_affine(a->y, a->x, a->dtype, base + d * a->S, a->S, alpha, pload(a->b, a->pdtype, c, 0.0) - mean * alpha);
		}
	}
}

int nk_groupnorm_run(void *args)
{
	const nk_groupnorm_args_t *a = args;
	int64_t per;

	if (gn_check(a->dtype, a->pdtype, a->N, a->C, a->S, a->G, "group_norm"))
		return -1;
	per = a->C / a->G * a->S;
	nrt_parallel_for(a->N * a->G, per >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (per + 1) + 1, gn_groups, (void *)a);
	return 0;
}

int nk_groupnorm_ref(void *args)
{
	const nk_groupnorm_args_t *a = args;

	if (gn_check(a->dtype, a->pdtype, a->N, a->C, a->S, a->G, "group_norm"))
		return -1;
	int64_t D = a->C / a->G, M = D * a->S;

	for (int64_t r = 0; r < a->N * a->G; r++) {
		int64_t base = (r / a->G * a->C + r % a->G * D) * a->S;
		double s = 0, q = 0, mean, rstd;

		for (int64_t k = 0; k < M; k++)
			s += nk_fp_loadd(a->x, a->dtype, base + k);
		mean = M ? s / (double)M : NAN;
		for (int64_t k = 0; k < M; k++) {
			double d = nk_fp_loadd(a->x, a->dtype, base + k) - mean;

			q += d * d;
		}
		rstd = M ? 1.0 / sqrt(q / (double)M + a->eps) : NAN;
		nk_fp_stored(a->mean, a->pdtype, r, mean);
		nk_fp_stored(a->rstd, a->pdtype, r, rstd);
		for (int64_t k = 0; k < M; k++) {
			int64_t c = r % a->G * D + k / a->S;
			double alpha = rstd * pload(a->w, a->pdtype, c, 1.0), beta = pload(a->b, a->pdtype, c, 0.0) - mean * alpha;
			double x = nk_fp_loadd(a->x, a->dtype, base + k);

			if (a->dtype == NK_F64)
				nk_fp_stored(a->y, a->dtype, base + k, x * alpha + beta);
			else
				nk_fp_storef(a->y, a->dtype, base + k, (float)x * (float)alpha + (float)beta);
		}
	}
	return 0;
}

/* dx for groups [r0, r1): per channel sums of dy and dy*(x - mean), then dx = dy*A + x*B + C with
 * A = rstd*w[c] and B, C from the group's sums of g = dy*w and g*(x - mean). */
static void gn_bwd_groups(void *ctx, int64_t r0, int64_t r1)
{
	const nk_groupnorm_bwd_args_t *a = ctx;
	int64_t D = a->C / a->G, M = D * a->S;

	for (int64_t r = r0; r < r1; r++) {
		int64_t g = r % a->G, base = (r / a->G * a->C + g * D) * a->S;
		double mean = nk_fp_loadd(a->mean, a->pdtype, r), rstd = nk_fp_loadd(a->rstd, a->pdtype, r);
		double sg = 0, sgx = 0;

		for (int64_t d = 0; d < D; d++) {
			double sdy = 0, sdx = 0, w = pload(a->w, a->pdtype, g * D + d, 1.0);

			seg_dsums(a->dy, a->x, a->dtype, base + d * a->S, a->S, mean, &sdy, &sdx);
			sg += w * sdy;
			sgx += w * sdx;
		}
		/* dx = rstd*(g - sg/M - xhat*sgx*rstd/M), xhat = (x - mean)*rstd */
		double k = M ? sgx * rstd * rstd / (double)M : 0, m = M ? sg / (double)M : 0;

		for (int64_t d = 0; d < D; d++) {
			double A = rstd * pload(a->w, a->pdtype, g * D + d, 1.0);

			seg_bwd(a->dx, a->dy, a->x, a->dtype, base + d * a->S, a->S, A, -k * rstd, (mean * k - m) * rstd);
		}
	}
}

/* dw, db for channels [c0, c1): sums over n of dy*xhat and dy. */
static void gn_bwd_params(void *ctx, int64_t c0, int64_t c1)
{
	const nk_groupnorm_bwd_args_t *a = ctx;
	int64_t D = a->C / a->G;

	for (int64_t c = c0; c < c1; c++) {
		double sw = 0, sb = 0;

		for (int64_t n = 0; n < a->N; n++) {
			int64_t r = n * a->G + c / D;
			double mean = nk_fp_loadd(a->mean, a->pdtype, r), rstd = nk_fp_loadd(a->rstd, a->pdtype, r), sdy = 0, sdx = 0;

			seg_dsums(a->dy, a->x, a->dtype, (n * a->C + c) * a->S, a->S, mean, &sdy, &sdx);
			sw += sdx * rstd;
			sb += sdy;
		}
		if (a->dw)
			nk_fp_stored(a->dw, a->pdtype, c, sw);
		if (a->db)
			nk_fp_stored(a->db, a->pdtype, c, sb);
	}
}

int nk_groupnorm_bwd_run(void *args)
{
	const nk_groupnorm_bwd_args_t *a = args;
	int64_t per;

	if (gn_check(a->dtype, a->pdtype, a->N, a->C, a->S, a->G, "group_norm_backward"))
		return -1;
	per = a->C / a->G * a->S;
	if (a->dx)
		nrt_parallel_for(a->N * a->G, per >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (per + 1) + 1, gn_bwd_groups, (void *)a);
	if (a->dw || a->db)
		nrt_parallel_for(a->C, a->N * a->S >= NK_PARALLEL_GRAIN ? 1 : NK_PARALLEL_GRAIN / (a->N * a->S + 1) + 1, gn_bwd_params, (void *)a);
	return 0;
}

int nk_groupnorm_bwd_ref(void *args)
{
	const nk_groupnorm_bwd_args_t *a = args;

	if (gn_check(a->dtype, a->pdtype, a->N, a->C, a->S, a->G, "group_norm_backward"))
		return -1;
	int64_t D = a->C / a->G, M = D * a->S;

	if (a->dx)
		for (int64_t r = 0; r < a->N * a->G; r++) {
			int64_t base = (r / a->G * a->C + r % a->G * D) * a->S;
			double mean = nk_fp_loadd(a->mean, a->pdtype, r), rstd = nk_fp_loadd(a->rstd, a->pdtype, r), sg = 0, sgx = 0;

			for (int64_t k = 0; k < M; k++) {
				double g = nk_fp_loadd(a->dy, a->dtype, base + k) * pload(a->w, a->pdtype, r % a->G * D + k / a->S, 1.0);

				sg += g;
				sgx += g * (nk_fp_loadd(a->x, a->dtype, base + k) - mean) * rstd;
			}
			for (int64_t k = 0; k < M; k++) {
				double g = nk_fp_loadd(a->dy, a->dtype, base + k) * pload(a->w, a->pdtype, r % a->G * D + k / a->S, 1.0);
				double xh = (nk_fp_loadd(a->x, a->dtype, base + k) - mean) * rstd;

				nk_fp_stored(a->dx, a->dtype, base + k, rstd * (g - sg / (double)M - xh * sgx / (double)M));
			}
		}
	for (int64_t c = 0; c < a->C; c++) {
		double sw = 0, sb = 0;

		for (int64_t n = 0; n < a->N; n++) {
			int64_t r = n * a->G + c / D;
			double mean = nk_fp_loadd(a->mean, a->pdtype, r), rstd = nk_fp_loadd(a->rstd, a->pdtype, r);

			for (int64_t k = 0; k < a->S; k++) {
				int64_t o = (n * a->C + c) * a->S + k;
				double g = nk_fp_loadd(a->dy, a->dtype, o);

				sw += g * (nk_fp_loadd(a->x, a->dtype, o) - mean) * rstd;
				sb += g;
			}
		}
		if (a->dw)
			nk_fp_stored(a->dw, a->pdtype, c, sw);
		if (a->db)
			nk_fp_stored(a->db, a->pdtype, c, sb);
	}
	return 0;
}

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
	return dtype == NK_F32 && rows * cols * 4 >= NK_STREAM_MIN_BYTES && nk_cpu_avx512();
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
		int64_t n = min64(RCH, C - c);

		nk_block_load_f32(xb, (const char *)a->x + (base + c) * 2, 2, a->dtype, n);
		q += L->sqdev(xb, n, 0.0f);
	}
	rstd = 1.0 / sqrt(q / (double)C + a->eps);
	((float *)a->rstd)[r] = (float)rstd;
	for (int64_t c = 0; c < C; c += RCH) {
		int64_t n = min64(RCH, C - c);

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
			double x = nk_fp_loadd(a->x, a->dtype, r * a->cols + j), w = pload(a->w, a->dtype, j, 1.0);

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
		s += nk_fp_loadd(a->dy, a->dtype, base + j) * pload(a->w, a->dtype, j, 1.0) * nk_fp_loadd(a->x, a->dtype, base + j) * rstd;
	double m = a->cols ? s / (double)a->cols : 0;

	for (int64_t j = 0; j < a->cols; j++) {
		double g = nk_fp_loadd(a->dy, a->dtype, base + j) * pload(a->w, a->dtype, j, 1.0);
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
			int64_t n = min64(RCH, C - k);
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
		int64_t r1 = min64(a->rows, (t + 1) * f->chunk_rows);
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
		int64_t j0 = b * 256, n = min64(256, a->cols - j0);
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
		chunks = min64(chunks, RMS_PART_FLOATS / a->cols);
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
