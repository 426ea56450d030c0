/* scan.c - cumulative ops along R of a contiguous [O, R, I] tensor: cumsum, cumprod, cummax/cummin
 * (with int64 indices) and logcumsumexp, as aten's CPU kernels (cpu_cum_base_kernel):
 *   - sums and products accumulate in aten's acc_type: f64 for f32 and f64, f32 for bf16/f16, int64
 *     (wrapping) for integers and bool; each output is the accumulator cast to the dtype;
 *   - cummax/cummin take x when x is NaN or (the running value is not NaN and x >= / <= it): ties and
 *     NaN runs give the later index;
 *   - logcumsumexp folds log_add_exp(x, acc) from -inf in the acc_type.
 * Input and output have the same dtype (the glue casts first, as aten does for dtype=).
 * Threading: the O*I lines over the pool (each line is sequential).  nk_scan_ref: the definitions, written apart.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define SCAN_GRAIN 16384

/* aten's log_add_exp_helper (NaN in acc propagates, -inf + -inf stays -inf). */
static double scan_log_add_exp(double x, double y)
{
	double mn = isnan(y) ? y : (x < y ? x : y);
	double mx = isnan(y) ? y : (x < y ? y : x);
	if (mn != mx || isfinite(mn))
		return log1p(exp(mn - mx)) + mx;
	return x;
}

static float scan_log_add_expf(float x, float y)
{
	float mn = isnan(y) ? y : (x < y ? x : y);
	float mx = isnan(y) ? y : (x < y ? y : x);
	if (mn != mx || isfinite(mn))
		return log1pf(expf(mn - mx)) + mx;
	return x;
}

/* One line: n elements at stride st (elements) from in/out/idx. */
static void scan_line(const nk_scan_args_t *a, const char *in, char *out, int64_t *idx, int64_t st)
{
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	int64_t n = a->R, bs = st * (int64_t)es;
	if (a->op == NK_SCAN_MAX || a->op == NK_SCAN_MIN) {
		bool is_max = a->op == NK_SCAN_MAX;
		if (nk_is_float(dt)) {
			double best = n ? nk_load_f64(in, dt) : 0;
			int64_t bi = 0;
			for (int64_t r = 0; r < n; r++) {
				double x = nk_load_f64(in + r * bs, dt);
				if (isnan(x) || (!isnan(best) && (is_max ? x >= best : x <= best)))
					best = x, bi = r;
				nk_store_f64(out + r * bs, dt, best);
				idx[r * st] = bi;
			}
		} else {
			int64_t best = n ? nk_load_i64(in, dt) : 0, bi = 0;
			for (int64_t r = 0; r < n; r++) {
				int64_t x = nk_load_i64(in + r * bs, dt);
				if (is_max ? x >= best : x <= best)
					best = x, bi = r;
				nk_store_i64(out + r * bs, dt, best);
				idx[r * st] = bi;
			}
		}
		return;
	}
	if (dt == NK_F32 || dt == NK_F64) {
		double acc = a->op == NK_SCAN_SUM ? 0 : a->op == NK_SCAN_PROD ? 1 : -INFINITY;
		for (int64_t r = 0; r < n; r++) {
			double x = nk_load_f64(in + r * bs, dt);
			acc = a->op == NK_SCAN_SUM ? acc + x : a->op == NK_SCAN_PROD ? acc * x : scan_log_add_exp(x, acc);
			nk_store_f64(out + r * bs, dt, acc);
		}
	} else if (nk_is_float(dt)) {
		float acc = a->op == NK_SCAN_SUM ? 0 : a->op == NK_SCAN_PROD ? 1 : -INFINITY;
		for (int64_t r = 0; r < n; r++) {
			float x = nk_load_f32(in + r * bs, dt);
			acc = a->op == NK_SCAN_SUM ? acc + x : a->op == NK_SCAN_PROD ? acc * x : scan_log_add_expf(x, acc);
			nk_store_f32(out + r * bs, dt, acc);
		}
	} else {
		uint64_t acc = a->op == NK_SCAN_SUM ? 0 : 1;
		for (int64_t r = 0; r < n; r++) {
			uint64_t x = (uint64_t)nk_load_i64(in + r * bs, dt);
			acc = a->op == NK_SCAN_SUM ? acc + x : acc * x;
			nk_store_i64(out + r * bs, dt, (int64_t)acc);
		}
	}
}

static void scan_lines(void *ctx, int64_t l0, int64_t l1)
{
	const nk_scan_args_t *a = ctx;
	size_t es = nk_dtype_size(a->dtype);
	for (int64_t l = l0; l < l1; l++) {
		int64_t o = l / a->I, i = l % a->I, base = o * a->R * a->I + i;
		scan_line(a, (const char *)a->in + base * (int64_t)es, (char *)a->out + base * (int64_t)es,
			  a->idx ? (int64_t *)a->idx + base : NULL, a->I);
	}
}

static int scan_check(const nk_scan_args_t *a)
{
	bool minmax = a->op == NK_SCAN_MAX || a->op == NK_SCAN_MIN;
	if (a->op < NK_SCAN_SUM || a->op > NK_SCAN_LOGSUMEXP || !nk_dtype_valid(a->dtype) || a->O < 0 ||
	    a->R < 0 || a->I < 0 || (minmax && !a->idx) || (a->op == NK_SCAN_LOGSUMEXP && !nk_is_float(a->dtype))) {
		nrt_kernel_fail("nk_scan: bad arguments (op %d, dtype %s)", a->op, nk_dtype_name(a->dtype));
		return -1;
	}
	return 0;
}

/* The reference: element (o, r, i) from the definitions, walking each line in r with its own running
 * state: sums/products in the acc type, cummax/cummin as "the last NaN so far, else the last position
 * of the running extreme", logcumsumexp by log_add_exp.  Written apart from scan_line. */
int nk_scan_ref(void *args)
{
	const nk_scan_args_t *a = args;
	int dt;
	size_t es;

	if (scan_check(a))
		return -1;
	dt = a->dtype, es = nk_dtype_size(dt);
	for (int64_t o = 0; o < a->O; o++)
		for (int64_t i = 0; i < a->I; i++) {
			int64_t bi = 0, nan_at = -1;
			double d = a->op == NK_SCAN_PROD ? 1 : a->op == NK_SCAN_LOGSUMEXP ? -INFINITY : 0;
			float f = (float)d;
			uint64_t u = a->op == NK_SCAN_PROD ? 1 : 0;

			for (int64_t r = 0; r < a->R; r++) {
				int64_t e = (o * a->R + r) * a->I + i;
				const char *x = (const char *)a->in + e * (int64_t)es;
				char *y = (char *)a->out + e * (int64_t)es;

				if (a->op == NK_SCAN_MAX || a->op == NK_SCAN_MIN) {
					bool mx = a->op == NK_SCAN_MAX;
					const char *b = (const char *)a->in + ((o * a->R + bi) * a->I + i) * (int64_t)es;

					if (nk_is_float(dt)) {
						double v = nk_load_f64(x, dt), best = nk_load_f64(b, dt);

						if (isnan(v))
							nan_at = r;
						if (nan_at >= 0)
							bi = nan_at;
						else if (r == 0 || (mx ? v >= best : v <= best))
							bi = r;
						b = (const char *)a->in + ((o * a->R + bi) * a->I + i) * (int64_t)es;
						nk_store_f64(y, dt, nk_load_f64(b, dt));
					} else {
						int64_t v = nk_load_i64(x, dt), best = nk_load_i64(b, dt);

						if (r == 0 || (mx ? v >= best : v <= best))
							bi = r;
						b = (const char *)a->in + ((o * a->R + bi) * a->I + i) * (int64_t)es;
						nk_store_i64(y, dt, nk_load_i64(b, dt));
					}
					a->idx[e] = bi;
				} else if (dt == NK_F32 || dt == NK_F64) {
					double v = nk_load_f64(x, dt);

					d = a->op == NK_SCAN_SUM ? d + v : a->op == NK_SCAN_PROD ? d * v : scan_log_add_exp(v, d);
					nk_store_f64(y, dt, d);
				} else if (nk_is_float(dt)) {
					float v = nk_load_f32(x, dt);

					f = a->op == NK_SCAN_SUM ? f + v : a->op == NK_SCAN_PROD ? f * v : scan_log_add_expf(v, f);
					nk_store_f32(y, dt, f);
				} else {
					uint64_t v = (uint64_t)nk_load_i64(x, dt);

					u = a->op == NK_SCAN_SUM ? u + v : u * v;
					nk_store_i64(y, dt, (int64_t)u);
				}
			}
		}
	return 0;
}

int nk_scan_run(void *args)
{
	const nk_scan_args_t *a = args;
	if (nk_using_reference())
		return nk_scan_ref(args);
	if (scan_check(a))
		return -1;
	int64_t lines = a->O * a->I, grain = a->R ? SCAN_GRAIN / a->R : SCAN_GRAIN;
	if (lines)
		nrt_parallel_for(lines, grain > 0 ? grain : 1, scan_lines, (void *)a);
	return 0;
}
