/* small.c - small factory and linear-algebra helpers: tril_indices / triu_indices, trace, cross.
 * Each family has a portable reference (*_ref) and the entry point the glue launches (*_run); the run
 * versions walk the output directly, the references test every candidate element. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

/* ---- tril_indices / triu_indices -------------------------------------------------------------- */
/* Column range [c0, c1) of row r that is kept. */
static void tri_cols(const nk_tri_indices_args_t *a, int64_t r, int64_t *c0, int64_t *c1)
{
	int64_t lo, hi;
	if (a->lower) {
		lo = 0;
		hi = r + a->offset + 1;
	} else {
		lo = r + a->offset;
		hi = a->col;
	}
	if (lo < 0)
		lo = 0;
	if (hi > a->col)
		hi = a->col;
	if (hi < lo)
		hi = lo;
	*c0 = lo, *c1 = hi;
}

int nk_tri_indices_run(void *args)
{
	const nk_tri_indices_args_t *a = args;
	int64_t k = 0;
	for (int64_t r = 0; r < a->row && k < a->n; r++) {
		int64_t c0, c1;
		tri_cols(a, r, &c0, &c1);
		for (int64_t c = c0; c < c1 && k < a->n; c++, k++) {
			a->out[k] = r;
			a->out[a->n + k] = c;
		}
	}
	return 0;
}

int nk_tri_indices_ref(void *args)
{
	const nk_tri_indices_args_t *a = args;
	int64_t k = 0;
	for (int64_t r = 0; r < a->row; r++)
		for (int64_t c = 0; c < a->col; c++) {
			bool keep = a->lower ? c - r <= a->offset : c - r >= a->offset;
			if (keep && k < a->n) {
				a->out[k] = r;
				a->out[a->n + k] = c;
				k++;
			}
		}
	return 0;
}

int64_t nk_tri_indices_count(int64_t row, int64_t col, int64_t offset, bool lower)
{
	nk_tri_indices_args_t a = { .row = row, .col = col, .offset = offset, .lower = lower };
	int64_t n = 0;
	for (int64_t r = 0; r < row; r++) {
		int64_t c0, c1;
		tri_cols(&a, r, &c0, &c1);
		n += c1 - c0;
	}
	return n;
}

/* ---- trace: sum of in[i * (s0 + s1)], i < n ------------------------------------------------------ */
int nk_trace_ref(void *args)
{
	const nk_trace_args_t *a = args;
	size_t es = nk_dtype_size(a->dtype);
	const char *p = a->in;
	if (nk_is_float(a->dtype)) {
		double s = 0;
		for (int64_t i = 0; i < a->n; i++)
			s += nk_load_f64(p + i * a->stride * (int64_t)es, a->dtype);
		nk_store_f64(a->out, a->out_dtype, s);
	} else {
		uint64_t s = 0;
		for (int64_t i = 0; i < a->n; i++)
			s += (uint64_t)nk_load_i64(p + i * a->stride * (int64_t)es, a->dtype);
		nk_store_i64(a->out, a->out_dtype, (int64_t)s);
	}
	return 0;
}

int nk_trace_run(void *args)
{
	const nk_trace_args_t *a = args;
	switch (a->dtype) {
	case NK_F32: {
		const float *p = a->in;
		double s = 0;
		for (int64_t i = 0; i < a->n; i++)
			s += p[i * a->stride];
		nk_store_f64(a->out, a->out_dtype, s);
		return 0;
	}
	case NK_F64: {
		const double *p = a->in;
		double s = 0;
		for (int64_t i = 0; i < a->n; i++)
			s += p[i * a->stride];
		nk_store_f64(a->out, a->out_dtype, s);
		return 0;
	}
	case NK_I64: {
		const int64_t *p = a->in;
		uint64_t s = 0;
		for (int64_t i = 0; i < a->n; i++)
			s += (uint64_t)p[i * a->stride];
		nk_store_i64(a->out, a->out_dtype, (int64_t)s);
		return 0;
	}
	default: return nk_trace_ref(args);
	}
}

/* ---- cross over [O, 3, I] contiguous operands ------------------------------------------------------ */
/* Floats follow the CPU kernel: each product and the difference rounded to the dtype (bf16/f16 through
 * f32); integers wrap like the narrow C arithmetic truncated to the dtype. */
static double cross_round(double v, int dt)
{
	switch (dt) {
	case NK_F32: return (float)v;
	case NK_BF16: return nk_bf16_to_f32(nk_f32_to_bf16((float)v));
	case NK_F16: return nk_f16_to_f32(nk_f32_to_f16((float)v));
	default: return v;
	}
}

int nk_cross_ref(void *args)
{
	const nk_cross_args_t *a = args;
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	const char *x = a->a, *y = a->b;
	char *o = a->out;
	for (int64_t i = 0; i < a->O; i++)
		for (int64_t j = 0; j < a->I; j++)
			for (int c = 0; c < 3; c++) {
				int c1 = (c + 1) % 3, c2 = (c + 2) % 3;
				int64_t e1 = (i * 3 + c1) * a->I + j, e2 = (i * 3 + c2) * a->I + j, e = (i * 3 + c) * a->I + j;
				char *po = o + e * (int64_t)es;
				if (nk_is_float(dt)) {
					double p1 = cross_round(nk_load_f64(x + e1 * (int64_t)es, dt) * nk_load_f64(y + e2 * (int64_t)es, dt), dt);
					double p2 = cross_round(nk_load_f64(x + e2 * (int64_t)es, dt) * nk_load_f64(y + e1 * (int64_t)es, dt), dt);
					nk_store_f64(po, dt, cross_round(p1 - p2, dt));
				} else {
					uint64_t p1 = (uint64_t)nk_load_i64(x + e1 * (int64_t)es, dt) * (uint64_t)nk_load_i64(y + e2 * (int64_t)es, dt);
					uint64_t p2 = (uint64_t)nk_load_i64(x + e2 * (int64_t)es, dt) * (uint64_t)nk_load_i64(y + e1 * (int64_t)es, dt);
					nk_store_i64(po, dt, (int64_t)(p1 - p2));
				}
			}
	return 0;
}

#define CROSS_LOOP(T)                                                                                   \
	do {                                                                                            \
		const T *x = a->a, *y = a->b;                                                           \
		T *o = a->out;                                                                          \
		int64_t I = a->I;                                                                       \
		for (int64_t i = 0; i < a->O; i++) {                                                    \
			const T *x0 = x + i * 3 * I, *x1 = x0 + I, *x2 = x1 + I;                        \
			const T *y0 = y + i * 3 * I, *y1 = y0 + I, *y2 = y1 + I;                        \
			T *o0 = o + i * 3 * I, *o1 = o0 + I, *o2 = o1 + I;                              \
			for (int64_t j = 0; j < I; j++) {                                               \
				T a0 = x0[j], a1 = x1[j], a2 = x2[j], b0 = y0[j], b1 = y1[j], b2 = y2[j]; \
				o0[j] = a1 * b2 - a2 * b1;                                              \
				o1[j] = a2 * b0 - a0 * b2;                                              \
				o2[j] = a0 * b1 - a1 * b0;                                              \
			}                                                                               \
		}                                                                                       \
	} while (0)

int nk_cross_run(void *args)
{
	const nk_cross_args_t *a = args;
	switch (a->dtype) {
	case NK_F32: CROSS_LOOP(float); return 0;
	case NK_F64: CROSS_LOOP(double); return 0;
	case NK_I64: CROSS_LOOP(uint64_t); return 0;
	default: return nk_cross_ref(args);
	}
}

/* ---- repeat_interleave (repeats only) ------------------------------------------------------------ */
static int64_t rep_at(const nk_repeat_interleave_args_t *a, int64_t i)
{
	return a->dtype == NK_I64 ? ((const int64_t *)a->repeats)[i] : ((const int32_t *)a->repeats)[i];
}

static void rep_store(const nk_repeat_interleave_args_t *a, int64_t j, int64_t v)
{
	if (a->dtype == NK_I64)
		((int64_t *)a->out)[j] = v;
	else
		((int32_t *)a->out)[j] = (int32_t)v;
}

int nk_repeat_interleave_ref(void *args)
{
	const nk_repeat_interleave_args_t *a = args;
	int64_t sum = 0;
	for (int64_t i = 0; i < a->n; i++) {
		int64_t r = rep_at(a, i);
		if (r < 0) {
			nrt_kernel_fail("repeat_interleave: repeats can not be negative (repeats[%lld] = %lld)", (long long)i, (long long)r);
			return -1;
		}
		sum += r;
	}
	if (sum != a->total) {
		nrt_kernel_fail("repeat_interleave: output_size %lld does not match the sum of repeats %lld", (long long)a->total,
				(long long)sum);
		return -1;
	}
	int64_t j = 0;
	for (int64_t i = 0; i < a->n; i++)
		for (int64_t r = rep_at(a, i); r > 0; r--)
			rep_store(a, j++, i);
	return 0;
}

int nk_repeat_interleave_run(void *args)
{
	const nk_repeat_interleave_args_t *a = args;
	if (a->dtype != NK_I64)
		return nk_repeat_interleave_ref(args);
	const int64_t *rep = a->repeats;
	int64_t sum = 0;
	for (int64_t i = 0; i < a->n; i++) {
		if (rep[i] < 0) {
			nrt_kernel_fail("repeat_interleave: repeats can not be negative (repeats[%lld] = %lld)", (long long)i, (long long)rep[i]);
			return -1;
		}
		sum += rep[i];
	}
	if (sum != a->total) {
		nrt_kernel_fail("repeat_interleave: output_size %lld does not match the sum of repeats %lld", (long long)a->total,
				(long long)sum);
		return -1;
	}
	int64_t *o = a->out;
	for (int64_t i = 0; i < a->n; i++) {
		int64_t r = rep[i];
		for (int64_t k = 0; k < r; k++)
			o[k] = i;
		o += r;
	}
	return 0;
}

/* ---- nonzero_static ------------------------------------------------------------------------------- */
int nk_nonzero_static_run(void *args)
{
	const nk_nonzero_static_args_t *a = args;
	int64_t nd = a->nz.ndim;
	int64_t k = 0;
	bool empty = false;
	for (int d = 0; d < a->nz.ndim; d++)
		empty |= a->nz.shape[d] == 0;
	if (!empty) {
		k = nk_nonzero_count(&a->nz);
		if (k > a->size)
			k = a->size;
		if (k > 0 && nd > 0)
			nk_nonzero_write(&a->nz, a->out, k);
	}
	for (int64_t i = k * nd; i < a->size * nd; i++)
		a->out[i] = a->fill;
	return 0;
}

/* ---- renorm over [O, R, I] contiguous: slice r (all O, I) scaled to p-norm <= maxnorm --------------- */
static double renorm_norm(const nk_renorm_args_t *a, int64_t r)
{
	size_t es = nk_dtype_size(a->dtype);
	const char *x = a->in;
	double p = a->p, acc = 0;
	for (int64_t o = 0; o < a->O; o++)
		for (int64_t i = 0; i < a->I; i++) {
			double v = fabs(nk_load_f64(x + ((o * a->R + r) * a->I + i) * (int64_t)es, a->dtype));
			if (isinf(p))
				acc = p > 0 ? (v > acc || isnan(v) ? v : acc) : (o == 0 && i == 0 ? v : (v < acc || isnan(v) ? v : acc));
			else if (p == 0)
				acc += v != 0;
			else if (p == 1)
				acc += v;
			else if (p == 2)
				acc += v * v;
			else
				acc += pow(v, p);
		}
	if (isinf(p) || p == 0 || p == 1)
		return acc;
	return p == 2 ? sqrt(acc) : pow(acc, 1.0 / p);
}

int nk_renorm_run(void *args)
{
	const nk_renorm_args_t *a = args;
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	const char *x = a->in;
	char *y = a->out;
	for (int64_t r = 0; r < a->R; r++) {
		double norm = renorm_norm(a, r);
		if (dt != NK_F64)
			norm = (float)norm;
		double f = norm > a->maxnorm ? a->maxnorm / (norm + 1e-7) : 1.0;
		if (dt != NK_F64)
			f = (float)f;
		if (dt == NK_BF16 || dt == NK_F16) { /* the factor is rounded to the dtype, then multiplied there */
			char t[2];
			nk_store_f64(t, dt, f);
			f = nk_load_f64(t, dt);
		}
		for (int64_t o = 0; o < a->O; o++)
			for (int64_t i = 0; i < a->I; i++) {
				int64_t e = ((o * a->R + r) * a->I + i) * (int64_t)es;
				double v = nk_load_f64(x + e, dt) * f;
				nk_store_f64(y + e, dt, dt == NK_F64 ? v : (double)(float)v);
			}
	}
	return 0;
}

/* ---- cdist: out[b, i, j] = ||x1[b, i] - x2[b, j]||_p over contiguous [B, P, M], [B, R, M] ------------ */
static double cdist_pair(const nk_cdist_args_t *a, int64_t b, int64_t i, int64_t j)
{
	int dt = a->dtype;
	size_t es = nk_dtype_size(dt);
	const char *x = (const char *)a->x1 + ((b * a->P + i) * a->M) * (int64_t)es;
	const char *y = (const char *)a->x2 + ((b * a->R + j) * a->M) * (int64_t)es;
	double p = a->p, acc = 0;
	if ((dt == NK_F32 || dt == NK_F64) && (p == 1 || p == 2)) { /* the common norms on typed rows */
		if (dt == NK_F32) {
			const float *xf = (const float *)x, *yf = (const float *)y;
			for (int64_t m = 0; m < a->M; m++) {
				double d = fabs((double)(float)(xf[m] - yf[m]));
				acc += p == 1 ? d : d * d;
			}
		} else {
			const double *xd = (const double *)x, *yd = (const double *)y;
			for (int64_t m = 0; m < a->M; m++) {
				double d = fabs(xd[m] - yd[m]);
				acc += p == 1 ? d : d * d;
			}
		}
		return p == 1 ? acc : sqrt(acc);
	}
	for (int64_t m = 0; m < a->M; m++) {
		double d = fabs(nk_load_f64(x + m * (int64_t)es, dt) - nk_load_f64(y + m * (int64_t)es, dt));
		if (dt != NK_F64) /* the difference in the dtype, so that the inf-norm backward finds the max again */
			d = (float)d;
		if (p == 0)
			acc += d != 0;
		else if (p == 1)
			acc += d;
		else if (p == 2)
			acc += d * d;
		else if (isinf(p))
			acc = d > acc || isnan(d) ? d : acc;
		else
			acc += pow(d, p);
	}
	if (p == 0 || p == 1 || isinf(p))
		return acc;
	return p == 2 ? sqrt(acc) : pow(acc, 1.0 / p);
}

int nk_cdist_run(void *args)
{
	const nk_cdist_args_t *a = args;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t i = 0; i < a->P; i++)
			for (int64_t j = 0; j < a->R; j++)
				nk_store_f64((char *)a->out + ((b * a->P + i) * a->R + j) * (int64_t)nk_dtype_size(a->dtype), a->dtype,
					     cdist_pair(a, b, i, j));
	return 0;
}

/* d dist / d x1 times g for one coordinate difference, as aten's cdist/pdist backward */
static double dist_deriv(double p, double diff, double g, double dist)
{
	double s = (diff > 0) - (diff < 0);
	if (p == 0)
		return 0;
	if (p == 1)
		return s * g;
	if (isinf(p))
		return s * g * (fabs(diff) == dist);
	if (dist == 0)
		return 0;
	if (p < 2)
		return (diff == 0 && p < 1) ? 0 : s * pow(fabs(diff), p - 1) * g / pow(dist, p - 1);
	if (p == 2)
		return g * diff / dist;
	return diff * pow(fabs(diff), p - 2) * g / pow(dist, p - 1);
}

/* grad_x1[b, i, m] = sum_j grad[b, i, j] * d dist[b, i, j] / d x1[b, i, m], as aten's cdist backward */
int nk_cdist_bwd_run(void *args)
{
	const nk_cdist_bwd_args_t *a = args;
	int dt = a->dtype;
	int64_t es = (int64_t)nk_dtype_size(dt);
	double p = a->p;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t i = 0; i < a->P; i++)
			for (int64_t m = 0; m < a->M; m++) {
				double x = nk_load_f64((const char *)a->x1 + ((b * a->P + i) * a->M + m) * es, dt), acc = 0;
				for (int64_t j = 0; j < a->R; j++) {
					double y = nk_load_f64((const char *)a->x2 + ((b * a->R + j) * a->M + m) * es, dt);
					double g = nk_load_f64((const char *)a->grad + ((b * a->P + i) * a->R + j) * es, dt);
					double dist = nk_load_f64((const char *)a->dist + ((b * a->P + i) * a->R + j) * es, dt);
					acc += dist_deriv(p, dt == NK_F64 ? x - y : (double)(float)(x - y), g, dist);
				}
				nk_store_f64((char *)a->out + ((b * a->P + i) * a->M + m) * es, dt, acc);
			}
	return 0;
}

/* ---- pdist: out[k] = ||x[i] - x[j]||_p for i < j in row-major order over contiguous x [N, M] --------- */
static double pdist_pair(const nk_pdist_args_t *a, int64_t i, int64_t j)
{
	nk_cdist_args_t c = { .dtype = a->dtype, .B = 1, .P = a->N, .R = a->N, .M = a->M, .p = a->p, .x1 = a->x, .x2 = a->x };
	return cdist_pair(&c, 0, i, j);
}

int nk_pdist_run(void *args)
{
	const nk_pdist_args_t *a = args;
	int64_t k = 0, es = (int64_t)nk_dtype_size(a->dtype);
	for (int64_t i = 0; i < a->N; i++)
		for (int64_t j = i + 1; j < a->N; j++, k++)
			nk_store_f64((char *)a->out + k * es, a->dtype, pdist_pair(a, i, j));
	return 0;
}

/* grad_x[i, m] = sum_{j != i} grad[k(i, j)] * d dist(i, j) / d x[i, m] */
int nk_pdist_bwd_run(void *args)
{
	const nk_pdist_bwd_args_t *a = args;
	int dt = a->dtype;
	int64_t es = (int64_t)nk_dtype_size(dt), N = a->N, M = a->M;
	for (int64_t i = 0; i < N; i++)
		for (int64_t m = 0; m < M; m++) {
			double x = nk_load_f64((const char *)a->x + (i * M + m) * es, dt), acc = 0;
			for (int64_t j = 0; j < N; j++) {
				if (j == i)
					continue;
				int64_t lo = i < j ? i : j, hi = i < j ? j : i;
				int64_t k = lo * N - lo * (lo + 1) / 2 + (hi - lo - 1);
				double y = nk_load_f64((const char *)a->x + (j * M + m) * es, dt);
				double g = nk_load_f64((const char *)a->grad + k * es, dt), d = nk_load_f64((const char *)a->dist + k * es, dt);
				acc += dist_deriv(a->p, dt == NK_F64 ? x - y : (double)(float)(x - y), g, d);
			}
			nk_store_f64((char *)a->out + (i * M + m) * es, dt, acc);
		}
	return 0;
}
