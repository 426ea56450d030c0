/* batchnorm.c - batch norm and group norm, forward and backward (aten native_batch_norm /
 * native_batch_norm_backward, native_group_norm / native_group_norm_backward), both over a contiguous
 * [N, C, S] (S = product of the spatial dims; the glue copies channels_last input to this layout).
 * Statistics: two passes (mean, then the sum of squared deviations) with f64 sums for every dtype, so
 * the variance is not subject to the cancellation of E[x^2] - E[x]^2.  Elements are converted to f64
 * in chunks of CH.  Outputs are y = x*alpha + beta with per-channel alpha, beta (aten's CPU form),
 * computed in f32 for f32/bf16/f16 and f64 for f64; dense f32 segments run in batchnorm_avx512.c.
 * Threading: batch norm over channels, group norm over (n, g) (and channels for dw/db); every sum is
 * taken in a fixed order, so results do not depend on the thread count.  The _ref twins run the same
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

#define CH 512 /* elements per converted chunk */

static int norm_check(int dtype, int pdtype, const char *who)
{
	if (!nk_fp_is_float(dtype) || (pdtype != dtype && !(pdtype == NK_F32 && (dtype == NK_BF16 || dtype == NK_F16)))) {
		nrt_kernel_fail("%s: unsupported dtypes %s / %s", who, nk_dtype_name(dtype), nk_dtype_name(pdtype));
		return -1;
	}
	return 0;
}

/* Sum of n elements at p (dtype) from element off, in f64. */
static double seg_sum(const void *p, int dtype, int64_t off, int64_t n)
{
	double buf[CH], s = 0;
	size_t es = nk_fp_elem_size(dtype);

	if (dtype == NK_F32 && nk_family_avx512(NK_FAM_NORM)) /* [h-cnn] */
		return nk_norm_sum_f32_avx512((const float *)p + off, n);
	for (int64_t j = 0; j < n; j += CH) {
		int64_t m = nk_min64(CH, n - j);

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

	if (dtype == NK_F32 && nk_family_avx512(NK_FAM_NORM)) /* [h-cnn] */
		return nk_rd_sumsq_f32_avx512((const float *)p + off, n, m);
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = nk_min64(CH, n - j);

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

	if (dtype == NK_F32 && nk_family_avx512(NK_FAM_NORM)) { /* [h-cnn] */
		nk_norm_dsums_f32_avx512((const float *)dy + off, (const float *)x + off, n, m, sdy, sdx);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = nk_min64(CH, n - j);

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

	if (dtype == NK_F32 && nk_family_avx512(NK_FAM_NORM)) { /* [h-cnn] */
		nk_norm_affine_f32_avx512((float *)ys, (const float *)xs, n, a, b);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t c = nk_min64(CH, n - j);

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

	if (dtype == NK_F32 && nk_family_avx512(NK_FAM_NORM)) { /* [h-cnn] */
		nk_norm_bwd_f32_avx512((float *)os, (const float *)ds, (const float *)xs, n, fa, fb, fc);
		return;
	}
	for (int64_t j = 0; j < n; j += CH) {
		int64_t m = nk_min64(CH, n - j);

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
	double alpha = invstd * nk_fp_loadd_or(a->w, a->pdtype, c, 1.0);
	double beta = nk_fp_loadd_or(a->b, a->pdtype, c, 0.0) - mean * alpha;

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
		double alpha = invstd * nk_fp_loadd_or(a->w, a->pdtype, c, 1.0), beta = nk_fp_loadd_or(a->b, a->pdtype, c, 0.0) - mean * alpha;

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
	double w = nk_fp_loadd_or(a->w, a->pdtype, c, 1.0), sdy = 0, sdx = 0;

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
		double w = nk_fp_loadd_or(a->w, a->pdtype, c, 1.0), sdy = 0, sdx = 0;

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
			double alpha = rstd * nk_fp_loadd_or(a->w, a->pdtype, c, 1.0);

			seg_affine(a->y, a->x, a->dtype, base + d * a->S, a->S, alpha, nk_fp_loadd_or(a->b, a->pdtype, c, 0.0) - mean * alpha);
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
			double alpha = rstd * nk_fp_loadd_or(a->w, a->pdtype, c, 1.0), beta = nk_fp_loadd_or(a->b, a->pdtype, c, 0.0) - mean * alpha;
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
			double sdy = 0, sdx = 0, w = nk_fp_loadd_or(a->w, a->pdtype, g * D + d, 1.0);

			seg_dsums(a->dy, a->x, a->dtype, base + d * a->S, a->S, mean, &sdy, &sdx);
			sg += w * sdy;
			sgx += w * sdx;
		}
		/* dx = rstd*(g - sg/M - xhat*sgx*rstd/M), xhat = (x - mean)*rstd */
		double k = M ? sgx * rstd * rstd / (double)M : 0, m = M ? sg / (double)M : 0;

		for (int64_t d = 0; d < D; d++) {
			double A = rstd * nk_fp_loadd_or(a->w, a->pdtype, g * D + d, 1.0);

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
				double g = nk_fp_loadd(a->dy, a->dtype, base + k) * nk_fp_loadd_or(a->w, a->pdtype, r % a->G * D + k / a->S, 1.0);

				sg += g;
				sgx += g * (nk_fp_loadd(a->x, a->dtype, base + k) - mean) * rstd;
			}
			for (int64_t k = 0; k < M; k++) {
				double g = nk_fp_loadd(a->dy, a->dtype, base + k) * nk_fp_loadd_or(a->w, a->pdtype, r % a->G * D + k / a->S, 1.0);
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
