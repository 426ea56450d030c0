/* test_softmax.c - softmax / log_softmax forward and backward: nk_softmax_run against nk_softmax_ref
 * for every float dtype over odd sizes, masked (-inf) entries, large magnitudes, all -inf and NaN rows;
 * the backward formula against central differences in f64. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nk_softmax_impl.h"
#include "nrt.h"

static const int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 1, 16 }, { 2, 17 }, { 3, 31 }, { 5, 33 }, { 2, 48 }, { 3, 64 }, { 2, 65 },
				       { 1, 127 }, { 4, 100 }, { 2, 513 }, { 5, 1024 }, { 1, 1039 }, { 3, 1500 }, { 64, 1000 },
				       { 2, 4100 } };
static const int dtypes[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

static void tolerances(int dtype, double *atol, double *rtol)
{
	switch (dtype) {
	case NK_F64: *atol = 1e-14, *rtol = 1e-12; break;
	case NK_F32: *atol = 1e-6, *rtol = 1e-5; break;
	case NK_BF16: *atol = 1e-6, *rtol = 1.0 / 128; break;
	default: *atol = 1e-7, *rtol = 1.0 / 1024; break;
	}
}

/* Random rows; row 1 has a masked (-inf) half, row 2 large magnitudes. */
static void fill_input(void *x, int dtype, int64_t rows, int64_t cols)
{
	nkt_fill(x, dtype, rows * cols, -5, 5);
	for (int64_t j = 0; rows > 1 && j < cols; j += 2)
		nk_fp_stored(x, dtype, cols + j, cols > 1 ? -INFINITY : 0);
	for (int64_t j = 0; rows > 2 && j < cols; j++)
		nk_fp_stored(x, dtype, 2 * cols + j, nkt_uniform(-3e4, 3e4));
}

static void check_case(int dtype, int64_t rows, int64_t cols, bool log)
{
	int64_t n = rows * cols;
	void *x = nkt_alloc(dtype, n), *y0 = nkt_alloc(dtype, n), *y1 = nkt_alloc(dtype, n);
	void *dy = nkt_alloc(dtype, n), *dx0 = nkt_alloc(dtype, n), *dx1 = nkt_alloc(dtype, n);
	nk_softmax_args_t f = { .dtype = dtype, .log = log, .rows = rows, .cols = cols, .x = x, .y = y0 };
	nk_softmax_bwd_args_t b = { .dtype = dtype, .log = log, .rows = rows, .cols = cols, .dy = dy, .y = y0 };
	double atol, rtol, e;

	tolerances(dtype, &atol, &rtol);
	fill_input(x, dtype, rows, cols);
	CHECK(nk_softmax_ref(&f) == 0, "softmax ref");
	f.y = y1;
	CHECK(nk_softmax_run(&f) == 0, "softmax run");
	e = nkt_err(y1, y0, dtype, n, atol, log ? rtol : rtol);
	CHECK(e <= 1, "softmax %s log=%d rows=%lld cols=%lld: err %g", nkt_dtype_name(dtype), log, (long long)rows,
	      (long long)cols, e);

	/* backward from the reference forward output; -inf log-probabilities are excluded (their y is -inf) */
	nkt_fill(dy, dtype, n, -1, 1);
	if (log)
		for (int64_t i = 0; i < n; i++)
			if (isinf(nkt_get(y0, dtype, i)))
				nk_fp_stored(dy, dtype, i, 0);
	b.dx = dx0;
	CHECK(nk_softmax_bwd_ref(&b) == 0, "softmax bwd ref");
	b.dx = dx1;
	CHECK(nk_softmax_bwd_run(&b) == 0, "softmax bwd run");
	e = nkt_err(dx1, dx0, dtype, n, dtype == NK_F32 ? 1e-5 : dtype == NK_F64 ? 1e-12 : 1e-2, rtol);
	CHECK(e <= 1, "softmax_bwd %s log=%d rows=%lld cols=%lld: err %g", nkt_dtype_name(dtype), log,
	      (long long)rows, (long long)cols, e);
	free(x), free(y0), free(y1), free(dy), free(dx0), free(dx1);
}

static void test_softmax_vs_ref(void)
{
	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int log = 0; log < 2; log++)
				check_case(dtypes[d], shapes[s][0], shapes[s][1], log);
}

/* f32 outputs (and backward dx) of 16 MiB and more are written with non-temporal stores. */
static void test_softmax_streamed(void)
{
	check_case(NK_F32, 4097, 1024, false);
	check_case(NK_F32, 4097, 1025, true); /* rows alternate between aligned (streamed) and not */
}

static void test_softmax_special_rows(void)
{
	float x[8] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, 1, NAN, 2, 3 }, y[8];
	nk_softmax_args_t f = { .dtype = NK_F32, .rows = 2, .cols = 4, .x = x, .y = y };

	for (int log = 0; log < 2; log++) {
		f.log = log;
		CHECK(nk_softmax_run(&f) == 0, "run");
		for (int j = 0; j < 8; j++)
			CHECK(isnan(y[j]), "all -inf and NaN rows give NaN (log=%d, y[%d]=%g)", log, j, y[j]);
	}
	f.dtype = NK_I32;
	CHECK(nk_softmax_run(&f) != 0, "int32 is refused");
}

/* d/dx of L = sum(dy * softmax(x)) by central differences, against the backward kernel (f64). */
static void test_softmax_bwd_numerical(void)
{
	enum { C = 7 };
	double x[C], y[C], dy[C], dx[C], xp[C], yp[C];

	for (int log = 0; log < 2; log++) {
		nk_softmax_args_t f = { .dtype = NK_F64, .log = log, .rows = 1, .cols = C, .x = x, .y = y };
		nk_softmax_bwd_args_t b = { .dtype = NK_F64, .log = log, .rows = 1, .cols = C, .dy = dy, .y = y,
					    .dx = dx };

		nkt_fill(x, NK_F64, C, -2, 2);
		nkt_fill(dy, NK_F64, C, -1, 1);
		nk_softmax_run(&f);
		nk_softmax_bwd_run(&b);
		for (int j = 0; j < C; j++) {
			double h = 1e-6, lp = 0, lm = 0;
			nk_softmax_args_t g = f;

			memcpy(xp, x, sizeof x);
			g.x = xp, g.y = yp;
			xp[j] = x[j] + h;
			nk_softmax_run(&g);
			for (int i = 0; i < C; i++)
				lp += dy[i] * yp[i];
			xp[j] = x[j] - h;
			nk_softmax_run(&g);
			for (int i = 0; i < C; i++)
				lm += dy[i] * yp[i];
			CHECK(fabs((lp - lm) / (2 * h) - dx[j]) < 1e-7, "numerical grad log=%d j=%d: %g vs %g", log, j,
			      (lp - lm) / (2 * h), dx[j]);
		}
	}
}

/* The ISA row-primitive tables this CPU runs (AVX-512, AVX2 + FMA), each checked against the portable one. */
typedef struct {
	const char *name;
	const nk_rowops_t *ops;
} isa_rowops_t;

static int isa_tables(isa_rowops_t *t)
{
	int n = 0;

	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		t[n++] = (isa_rowops_t){ "avx512", &nk_rowops_avx512 };
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		t[n++] = (isa_rowops_t){ "avx2", &nk_rowops_avx2 };
	return n;
}

/* ISA row primitives against the portable ones (exp within a few ulp), odd lengths, -inf, NaN; and the
 * backward row of each against the portable one. */
static void test_rowops(void)
{
	static const int64_t ns[] = { 0, 1, 7, 8, 16, 33, 100, 513 };
	float x[520], y0[520], y1[520], dy[520], d0[520], d1[520];
	isa_rowops_t t[2];
	int nt = isa_tables(t);

	for (int q = 0; q < nt; q++)
		for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
			int64_t n = ns[k];
			float s0, s1, m0, m1;
			bool ok = true;

			nkt_fill(x, NK_F32, n, -100, 30);
			if (n > 3)
				x[1] = -INFINITY, x[2] = NAN;
			m0 = nk_row_max_ref(x, n), m1 = t[q].ops->max(x, n);
			CHECK(m0 == m1, "%s row max n=%lld: %g vs %g", t[q].name, (long long)n, m0, m1);
			memcpy(y0, x, sizeof x);
			memcpy(y1, x, sizeof x);
			s0 = nk_row_exp_sum_ref(y0, n, 20);
			s1 = t[q].ops->exp_sum(y1, n, 20);
			for (int64_t i = 0; i < n; i++)
				ok &= isnan(y0[i]) ? isnan(y1[i]) : fabsf(y1[i] - y0[i]) <= 4e-7f * y0[i] + 1e-37f;
			CHECK(ok, "%s row exp n=%lld", t[q].name, (long long)n);
			CHECK(n > 3 ? isnan(s0) && isnan(s1) : fabsf(s1 - s0) <= 1e-6f * s0, "%s row exp sum n=%lld", t[q].name,
			      (long long)n);
			/* the backward rows over a softmax output (no NaN) */
			for (int log = 0; log < 2; log++) {
				nkt_fill(x, NK_F32, n, -5, 5);
				nkt_fill(dy, NK_F32, n, -1, 1);
				nk_rowops_ref.softmax_row(x, y0, NULL, n, log, 0);
				nk_rowops_ref.softmax_bwd_row(dy, y0, d0, n, log, 0);
				t[q].ops->softmax_bwd_row(dy, y0, d1, n, log, 0);
				ok = true;
				for (int64_t i = 0; i < n; i++)
					ok &= fabsf(d1[i] - d0[i]) <= 1e-5f * fabsf(d0[i]) + 1e-6f;
				CHECK(ok, "%s softmax_bwd_row n=%lld log=%d", t[q].name, (long long)n, log);
			}
		}
}

/* Whole rows longer than a chunk (a vocabulary) through the row primitive with no scratch (not
 * streaming): the portable and each ISA's rows against each other, and softmax over [3, 33000]. */
static void test_long_rows(void)
{
	static const int64_t ns[] = { 2049, 5000, 33000 };
	float *x = malloc(33000 * sizeof(float)), *y0 = malloc(33000 * sizeof(float)), *y1 = malloc(33000 * sizeof(float));
	isa_rowops_t t[2];
	int nt = isa_tables(t);

	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
		for (int log = 0; log < 2; log++)
			for (int q = 0; q < nt; q++) {
				int64_t n = ns[k];
				bool ok = true;

				nkt_fill(x, NK_F32, n, -20, 20);
				x[7] = -INFINITY;
				nk_rowops_ref.softmax_row(x, y0, NULL, n, log, 0);
				t[q].ops->softmax_row(x, y1, NULL, n, log, 0);
				for (int64_t i = 0; i < n; i++)
					ok &= y1[i] == y0[i] || fabsf(y1[i] - y0[i]) <= 1e-5f * fabsf(y0[i]) + (log ? 1e-5f : 1e-9f);
				CHECK(ok, "%s long row n=%lld log=%d", t[q].name, (long long)n, log);
				memcpy(y1, x, (size_t)n * sizeof(float)); /* in place */
				t[q].ops->softmax_row(y1, y1, NULL, n, log, 0);
				for (int64_t i = 0; i < n; i++)
					ok &= y1[i] == y0[i] || fabsf(y1[i] - y0[i]) <= 1e-5f * fabsf(y0[i]) + (log ? 1e-5f : 1e-9f);
				CHECK(ok, "%s long row in place n=%lld log=%d", t[q].name, (long long)n, log);
			}
	free(x), free(y0), free(y1);
	check_case(NK_F32, 3, 33000, false);
	check_case(NK_F32, 3, 33000, true);
}

int main(void)
{
	nkt_seed(2);
	RUN(test_rowops);
	RUN(test_softmax_vs_ref);
	RUN(test_softmax_streamed);
	RUN(test_softmax_special_rows);
	RUN(test_softmax_bwd_numerical);
	RUN(test_long_rows);
	return ctest_finish();
}
