/* test_linalg.c - the small linear-algebra and distance kernels (linalg.c, distance.c): trace run vs
 * ref (strided, every dtype, zero length, integer wraparound); cross run vs ref vs a direct formula over
 * every dtype, odd O/I and zero-size; renorm against a direct formula; cdist against a direct sum and
 * central differences, pdist against cdist. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_impl.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static const int dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8 };

#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))

static void *rand_elems(int dt, int64_t n)
{
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)(n > 0 ? n : 1), es);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = nkt_randint(dt == NK_U8 ? 0 : -9, 10);
		if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, (double)v * 0.25);
		else
			nk_store_i64(p + i * (int64_t)es, dt, v);
	}
	return p;
}

static void test_trace(void)
{
	for (int di = 0; di < NDT; di++) {
		int dt = dtypes[di];
		int ot = nk_is_float(dt) ? dt : NK_I64;
		for (int64_t n = 0; n < 40; n += 7)
			for (int64_t stride = 1; stride < 5; stride += 3) {
				void *in = rand_elems(dt, n * stride + 1);
				int64_t r1[1] = { 0 }, r2[1] = { 0 };
				nk_trace_args_t a = { .dtype = dt, .out_dtype = ot, .n = n, .stride = stride, .in = in, .out = r1 };
				CHECK(nk_trace_run(&a) == 0, "trace run");
				a.out = r2;
				CHECK(nk_trace_ref(&a) == 0, "trace ref");
				CHECK(memcmp(r1, r2, nk_dtype_size(ot)) == 0, "trace run != ref dt %d n %lld", dt, (long long)n);
				double want = 0;
				size_t es = nk_dtype_size(dt);
				for (int64_t i = 0; i < n; i++) {
					const char *p = (const char *)in + i * stride * (int64_t)es;
					want += nk_is_float(dt) ? nk_load_f64(p, dt) : (double)nk_load_i64(p, dt);
				}
				double got = nk_is_float(dt) ? nk_load_f64(r1, ot) : (double)nk_load_i64(r1, ot);
				CHECK(fabs(got - want) <= (dt == NK_BF16 || dt == NK_F16 ? 0.5 : 1e-9), "trace dt %d: %g vs %g", dt, got, want);
				free(in);
			}
	}
	/* int64 wraps */
	int64_t big[2] = { INT64_MAX, 1 }, r = 0;
	nk_trace_args_t a = { .dtype = NK_I64, .out_dtype = NK_I64, .n = 2, .stride = 1, .in = big, .out = &r };
	CHECK(nk_trace_run(&a) == 0 && r == INT64_MIN, "trace wrap %lld", (long long)r);
}

static void test_cross(void)
{
	static const int64_t sizes[][2] = { { 1, 1 }, { 5, 1 }, { 1, 7 }, { 3, 4 }, { 0, 3 }, { 2, 0 }, { 17, 5 } };
	for (int di = 0; di < NDT; di++) {
		int dt = dtypes[di];
		size_t es = nk_dtype_size(dt);
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int64_t O = sizes[si][0], I = sizes[si][1], n = O * 3 * I;
			void *x = rand_elems(dt, n), *y = rand_elems(dt, n);
			char *o1 = calloc((size_t)(n + 1), es), *o2 = calloc((size_t)(n + 1), es);
			nk_cross_args_t a = { .dtype = dt, .O = O, .I = I, .a = x, .b = y, .out = o1 };
			CHECK(nk_cross_run(&a) == 0, "cross run");
			a.out = o2;
			CHECK(nk_cross_ref(&a) == 0, "cross ref");
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "cross run != ref dt %d O %lld I %lld", dt, (long long)O, (long long)I);
			/* values are multiples of 1/4 below 10: exact in every float dtype; integers wrap */
			for (int64_t i = 0; i < O; i++)
				for (int64_t j = 0; j < I; j++)
					for (int c = 0; c < 3; c++) {
						int c1 = (c + 1) % 3, c2 = (c + 2) % 3;
#define EL(p, k) (nk_is_float(dt) ? nk_load_f64((const char *)(p) + ((i * 3 + (k)) * I + j) * (int64_t)es, dt) \
				 : (double)nk_load_i64((const char *)(p) + ((i * 3 + (k)) * I + j) * (int64_t)es, dt))
						double want = EL(x, c1) * EL(y, c2) - EL(x, c2) * EL(y, c1);
						if (!nk_is_float(dt)) {
							char tmp[8];
							nk_store_i64(tmp, dt, (int64_t)want);
							want = (double)nk_load_i64(tmp, dt);
						}
						CHECK(EL(o1, c) == want, "cross dt %d: %g vs %g", dt, EL(o1, c), want);
#undef EL
					}
			free(x), free(y), free(o1), free(o2);
		}
	}
}

static void test_renorm(void)
{
	static const double ps[] = { 1, 2, 3.5, INFINITY, 0.5 };
	static const int fdt[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };
	for (int di = 0; di < 4; di++) {
		int dt = fdt[di];
		size_t es = nk_dtype_size(dt);
		for (int pi = 0; pi < 5; pi++) {
			int64_t O = 3, R = 4, I = 5, n = O * R * I;
			char *x = rand_elems(dt, n), *y = calloc((size_t)n, es);
			nk_renorm_args_t a = { .dtype = dt, .O = O, .R = R, .I = I, .p = ps[pi], .maxnorm = 2.0, .in = x, .out = y };
			CHECK(nk_renorm_run(&a) == 0, "renorm");
			for (int64_t r = 0; r < R; r++) {
				double acc = 0;
				for (int64_t o = 0; o < O; o++)
					for (int64_t i = 0; i < I; i++) {
						double v = fabs(nk_load_f64(x + ((o * R + r) * I + i) * (int64_t)es, dt));
						acc = isinf(ps[pi]) ? fmax(acc, v) : acc + pow(v, ps[pi]);
					}
				double norm = isinf(ps[pi]) ? acc : pow(acc, 1 / ps[pi]);
				double f = norm > 2.0 ? 2.0 / (norm + 1e-7) : 1.0;
				double tol = dt == NK_F64 ? 1e-12 : dt == NK_F32 ? 1e-5 : 2e-2;
				for (int64_t o = 0; o < O; o++)
					for (int64_t i = 0; i < I; i++) {
						int64_t e = ((o * R + r) * I + i) * (int64_t)es;
						double want = nk_load_f64(x + e, dt) * f, got = nk_load_f64(y + e, dt);
						CHECK(fabs(got - want) <= tol * (1 + fabs(want)), "renorm dt %d p %g: %g vs %g", dt, ps[pi], got, want);
					}
			}
			free(x), free(y);
		}
	}
}

/* cdist: forward against a direct sum; the backward against central differences of sum(grad * dist) */
static void test_cdist(void)
{
	static const double ps[] = { 0, 1, 1.5, 2, 3, INFINITY, 0.5 };
	int64_t B = 2, P = 3, R = 4, M = 5;
	double x1[120], x2[160], d[24], g[24], gx[120], d2[24];
	for (int i = 0; i < B * P * M; i++)
		x1[i] = (double)nkt_randint(-20, 21) / 8 + 0.01 * i;
	for (int i = 0; i < B * R * M; i++)
		x2[i] = (double)nkt_randint(-20, 21) / 8 - 0.003 * i;
	for (int i = 0; i < B * P * R; i++)
		g[i] = (double)nkt_randint(-4, 5) / 4;
	for (int pi = 0; pi < 7; pi++) {
		double p = ps[pi];
		nk_cdist_args_t a = { .dtype = NK_F64, .B = B, .P = P, .R = R, .M = M, .p = p, .x1 = x1, .x2 = x2, .out = d };
		CHECK(nk_cdist_run(&a) == 0, "cdist");
		for (int64_t b = 0; b < B; b++)
			for (int64_t i = 0; i < P; i++)
				for (int64_t j = 0; j < R; j++) {
					double acc = 0;
					for (int64_t m = 0; m < M; m++) {
						double v = fabs(x1[(b * P + i) * M + m] - x2[(b * R + j) * M + m]);
						acc = p == 0 ? acc + (v != 0) : isinf(p) ? fmax(acc, v) : acc + pow(v, p);
					}
					double want = p == 0 || isinf(p) ? acc : pow(acc, 1 / p);
					CHECK(fabs(d[(b * P + i) * R + j] - want) <= 1e-12 * (1 + want), "cdist p %g: %g vs %g", p, d[(b * P + i) * R + j], want);
				}
		nk_cdist_bwd_args_t bw = { .dtype = NK_F64, .B = B, .P = P, .R = R, .M = M, .p = p, .grad = g, .x1 = x1, .x2 = x2, .dist = d, .out = gx };
		CHECK(nk_cdist_bwd_run(&bw) == 0, "cdist bwd");
		if (p == 0) {
			for (int i = 0; i < B * P * M; i++)
				CHECK(gx[i] == 0, "cdist p=0 grad");
			continue;
		}
		for (int e = 0; e < B * P * M; e++) {
			double h = 1e-6, s[2];
			for (int k = 0; k < 2; k++) {
				double save = x1[e];
				x1[e] = save + (k ? h : -h);
				a.out = d2;
				nk_cdist_run(&a);
				x1[e] = save;
				s[k] = 0;
				for (int i = 0; i < B * P * R; i++)
					s[k] += g[i] * d2[i];
			}
			a.out = d;
			double fd = (s[1] - s[0]) / (2 * h);
			CHECK(fabs(fd - gx[e]) <= 1e-4 * (1 + fabs(fd)), "cdist grad p %g elem %d: %g vs fd %g", p, e, gx[e], fd);
		}
	}
}

/* pdist against cdist of x with itself (upper triangle); its backward against the cdist backward */
static void test_pdist(void)
{
	static const double ps[] = { 0, 1, 1.5, 2, 3, INFINITY };
	int64_t N = 5, M = 3;
	double x[15], d[10], full[25], g[10], gfull[25], gx[15], gc[15];
	for (int i = 0; i < N * M; i++)
		x[i] = (double)nkt_randint(-20, 21) / 8 + 0.01 * i;
	for (int i = 0; i < 10; i++)
		g[i] = (double)nkt_randint(-4, 5) / 4;
	for (int pi = 0; pi < 6; pi++) {
		double p = ps[pi];
		nk_pdist_args_t a = { .dtype = NK_F64, .N = N, .M = M, .p = p, .x = x, .out = d };
		CHECK(nk_pdist_run(&a) == 0, "pdist");
		nk_cdist_args_t c = { .dtype = NK_F64, .B = 1, .P = N, .R = N, .M = M, .p = p, .x1 = x, .x2 = x, .out = full };
		CHECK(nk_cdist_run(&c) == 0, "cdist");
		memset(gfull, 0, sizeof gfull);
		int k = 0;
		for (int i = 0; i < N; i++)
			for (int j = i + 1; j < N; j++, k++) {
				CHECK(d[k] == full[i * N + j], "pdist p %g pair %d %d", p, i, j);
				gfull[i * N + j] = gfull[j * N + i] = g[k];
			}
		/* d/dx of sum_k g_k dist_k = cdist backward of the symmetric grad (x as x1) */
		nk_pdist_bwd_args_t b = { .dtype = NK_F64, .N = N, .M = M, .p = p, .grad = g, .x = x, .dist = d, .out = gx };
		CHECK(nk_pdist_bwd_run(&b) == 0, "pdist bwd");
		nk_cdist_bwd_args_t cb = { .dtype = NK_F64, .B = 1, .P = N, .R = N, .M = M, .p = p, .grad = gfull, .x1 = x, .x2 = x, .dist = full, .out = gc };
		CHECK(nk_cdist_bwd_run(&cb) == 0, "cdist bwd");
		for (int i = 0; i < N * M; i++)
			CHECK(fabs(gx[i] - gc[i]) <= 1e-12, "pdist grad p %g elem %d: %g vs %g", p, i, gx[i], gc[i]);
	}
}

int main(void)
{
	nkt_seed(5);
	RUN(test_trace);
	RUN(test_cross);
	RUN(test_renorm);
	RUN(test_cdist);
	RUN(test_pdist);
	return ctest_finish();
}
