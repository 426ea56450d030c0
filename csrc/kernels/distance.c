/* distance.c - pairwise p-norm distances: cdist over [B, P, M] x [B, R, M] and pdist over the row
 * pairs of [N, M], forward and backward (aten's per-p derivative), computed in double. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

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
