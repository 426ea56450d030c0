/* histogram.c - bincount (counts or weighted sums of integer values) and histc (fixed-width bins over
 * [min, max] in the dtype's arithmetic, as aten's CPU kernel).  Serial: serial accumulation in input
 * order matches aten's rounding.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

/* ---- bincount -------------------------------------------------------------------------------------- */
int nk_bincount_run(void *args)
{
	const nk_bincount_args_t *a = args;
	bool ok = nk_dtype_valid(a->dtype) && !nk_is_float(a->dtype) && a->n >= 0 && a->nbins >= 0 &&
		  (a->w ? (a->w_dtype == NK_F32 || a->w_dtype == NK_F64) && a->w_dtype == a->out_dtype : a->out_dtype == NK_I64);
	if (!ok) {
		nrt_kernel_fail("nk_bincount: bad arguments (dtype %d, weights dtype %d, out dtype %d)", a->dtype, a->w_dtype,
				a->out_dtype);
		return -1;
	}
	size_t es = nk_dtype_size(a->dtype);
	for (int64_t i = 0; i < a->n; i++) {
		int64_t b = nk_load_i64((const char *)a->x + i * (int64_t)es, a->dtype);
		if (b < 0 || b >= a->nbins) {
			nrt_kernel_fail("bincount: value %lld outside [0, %lld)", (long long)b, (long long)a->nbins);
			return -1;
		}
	}
	memset(a->out, 0, (size_t)a->nbins * nk_dtype_size(a->out_dtype));
	for (int64_t i = 0; i < a->n; i++) { /* serial, in input order: aten's accumulation order */
		int64_t b = nk_load_i64((const char *)a->x + i * (int64_t)es, a->dtype);
		if (!a->w)
			((int64_t *)a->out)[b]++;
		else if (a->w_dtype == NK_F32)
			((float *)a->out)[b] += ((const float *)a->w)[i];
		else
			((double *)a->out)[b] += ((const double *)a->w)[i];
	}
	return 0;
}

/* ---- histc ----------------------------------------------------------------------------------------- */
/* x rounded to dtype dt (the arithmetic of c10::BFloat16 / c10::Half: each operation rounds) */
static inline double hist_round(double x, int dt)
{
	if (dt == NK_F64)
		return x;
	if (dt == NK_F32)
		return (float)x;
	if (dt == NK_BF16)
		return nk_bf16_to_f32(nk_f32_to_bf16((float)x));
	return nk_f16_to_f32(nk_f32_to_f16((float)x));
}

/* aten's histogramdd linear-interpolation kernel for histc: edges (nbins + 1 values of the dtype, from
 * aten's linspace); pos = (x - left) * nbins / (right - left) in the dtype's arithmetic; the last bin
 * includes its right edge; NaN and values outside [left, right] are skipped; counts accumulate in the
 * dtype. */
int nk_histc_run(void *args)
{
	const nk_histc_args_t *a = args;
	if (!nk_is_float(a->dtype) || a->n < 0 || a->nbins <= 0) {
		nrt_kernel_fail("nk_histc: bad arguments (dtype %d, bins %lld)", a->dtype, (long long)a->nbins);
		return -1;
	}
	size_t es = nk_dtype_size(a->dtype);
	int dt = a->dtype;
	double left = nk_load_f64(a->edges, dt), right = nk_load_f64((const char *)a->edges + a->nbins * (int64_t)es, dt);
	double nb = hist_round((double)a->nbins, dt);
	double width = hist_round(right - left, dt);
	char *out = a->out;
	for (int64_t b = 0; b < a->nbins; b++)
		nk_store_f64(out + b * (int64_t)es, dt, 0.0);
	for (int64_t i = 0; i < a->n; i++) {
		double x = nk_load_f64((const char *)a->x + i * (int64_t)es, dt);
		if (!(x >= left && x <= right))
			continue;
		double t = hist_round(hist_round(x - left, dt) * nb, dt);
		t = hist_round(t / width, dt);
		int64_t pos = (int64_t)(dt == NK_F64 ? t : (float)t);
		if (pos == a->nbins)
			pos--;
		if (pos < 0 || pos >= a->nbins) /* rounding cannot take it further; be safe */
			continue;
		char *p = out + pos * (int64_t)es;
		nk_store_f64(p, dt, hist_round(nk_load_f64(p, dt) + 1.0, dt));
	}
	return 0;
}
