/* linalg.c - small linear-algebra kernels: trace, cross (over [O, 3, I]) and renorm (over [O, R, I]).
 * trace and cross have a portable reference (*_ref) beside the entry point the glue launches (*_run). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

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
