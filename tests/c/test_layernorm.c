/* test_layernorm.c - layer norm forward (y, mean, rstd) and backward (dx, dw, db) against the reference
 * for every float dtype, odd sizes, with and without weight/bias; the backward against central
 * differences in f64; dw/db bitwise deterministic across runs. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"

static const int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 33 }, { 4, 100 }, { 2, 513 }, { 200, 64 }, { 7, 1100 }, { 3, 2100 }, { 130, 1030 } };
static const int dtypes[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

static double fwd_atol(int dtype)
{
	return dtype == NK_F64 ? 1e-12 : dtype == NK_F32 ? 1e-4 : dtype == NK_BF16 ? 2e-2 : 4e-3;
}

static double rtol_of(int dtype)
{
	return dtype == NK_F64 ? 1e-12 : dtype == NK_F32 ? 1e-5 : dtype == NK_BF16 ? 1.0 / 64 : 1.0 / 512;
}

/* affine: 0 none, 1 weight and bias, 2 weight only, 3 bias only */
static void check_case(int dtype, int64_t rows, int64_t cols, int affine)
{
	int64_t n = rows * cols;
	void *x = nkt_alloc(dtype, n), *w = nkt_alloc(dtype, cols), *bb = nkt_alloc(dtype, cols);
	void *y0 = nkt_alloc(dtype, n), *y1 = nkt_alloc(dtype, n);
	void *m0 = nkt_alloc(dtype, rows), *m1 = nkt_alloc(dtype, rows), *r0 = nkt_alloc(dtype, rows),
	     *r1 = nkt_alloc(dtype, rows);
	void *dy = nkt_alloc(dtype, n), *dx0 = nkt_alloc(dtype, n), *dx1 = nkt_alloc(dtype, n);
	void *dw0 = nkt_alloc(dtype, cols), *dw1 = nkt_alloc(dtype, cols), *db0 = nkt_alloc(dtype, cols),
	     *db1 = nkt_alloc(dtype, cols);
	nk_layernorm_args_t f = { .dtype = dtype, .rows = rows, .cols = cols, .eps = 1e-5, .x = x,
				  .w = affine == 1 || affine == 2 ? w : NULL, .b = affine == 1 || affine == 3 ? bb : NULL, .y = y0, .mean = m0, .rstd = r0 };
	nk_layernorm_bwd_args_t b = { .dtype = dtype, .rows = rows, .cols = cols, .dy = dy, .x = x, .mean = m0,
				      .rstd = r0, .w = f.w, .dx = dx0, .dw = dw0, .db = db0 };
	double atol = fwd_atol(dtype), rtol = rtol_of(dtype), e;

	nkt_fill(x, dtype, n, -3, 5);
	nkt_fill(w, dtype, cols, 0.5, 1.5);
	nkt_fill(bb, dtype, cols, -1, 1);
	nkt_fill(dy, dtype, n, -1, 1);
	CHECK(nk_layernorm_ref(&f) == 0, "ref");
	f.y = y1, f.mean = m1, f.rstd = r1;
	CHECK(nk_layernorm_run(&f) == 0, "run");
	e = nkt_err(y1, y0, dtype, n, atol, rtol);
	CHECK(e <= 1, "layernorm y %s %lldx%lld affine=%d: err %g", nkt_dtype_name(dtype), (long long)rows,
	      (long long)cols, affine, e);
	e = nkt_err(m1, m0, dtype, rows, atol, rtol) + nkt_err(r1, r0, dtype, rows, atol, rtol);
	CHECK(e <= 1, "layernorm mean/rstd %s %lldx%lld: err %g", nkt_dtype_name(dtype), (long long)rows,
	      (long long)cols, e);

	CHECK(nk_layernorm_bwd_ref(&b) == 0, "bwd ref");
	b.dx = dx1, b.dw = dw1, b.db = db1;
	CHECK(nk_layernorm_bwd_run(&b) == 0, "bwd run");
	e = nkt_err(dx1, dx0, dtype, n, dtype == NK_F32 ? 1e-4 : atol, rtol);
	CHECK(e <= 1, "layernorm dx %s %lldx%lld affine=%d: err %g", nkt_dtype_name(dtype), (long long)rows,
	      (long long)cols, affine, e);
	e = nkt_err(dw1, dw0, dtype, cols, atol * sqrt((double)rows), rtol) +
	    nkt_err(db1, db0, dtype, cols, atol * sqrt((double)rows), rtol);
	CHECK(e <= 1, "layernorm dw/db %s %lldx%lld: err %g", nkt_dtype_name(dtype), (long long)rows,
	      (long long)cols, e);

	/* determinism, and the optional outputs */
	memcpy(dw0, dw1, (size_t)cols * nk_fp_elem_size(dtype));
	b.dx = NULL, b.db = NULL;
	CHECK(nk_layernorm_bwd_run(&b) == 0, "bwd run dw only");
	CHECK(!memcmp(dw0, dw1, (size_t)cols * nk_fp_elem_size(dtype)), "dw is deterministic");
	free(x), free(w), free(bb), free(y0), free(y1), free(m0), free(m1), free(r0), free(r1);
	free(dy), free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1);
}

static void test_layernorm_vs_ref(void)
{
	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int affine = 0; affine < 2; affine++)
				check_case(dtypes[d], shapes[s][0], shapes[s][1], affine);
}

/* f32 rows go through the row-group kernel (4, 2 and 1 rows at a time): every group size and tail, widths
 * around the vector length and the group limit, weight and bias each alone. */
static void test_layernorm_row_groups(void)
{
	static const int64_t cols[] = { 1, 15, 16, 17, 31, 48, 1024, 1536, 1537, 2000 };

	for (int64_t rows = 1; rows <= 9; rows++)
		for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
			for (int affine = 0; affine < 4; affine++)
				check_case(NK_F32, rows, cols[c], affine);
	check_case(NK_BF16, 5, 17, 2);
	check_case(NK_F16, 5, 17, 3);
}

/* L = sum(dy * layer_norm(x, w, b)); gradients by central differences in f64. */
static double loss(const double *x, const double *w, const double *b, const double *dy, int64_t rows, int64_t cols)
{
	double y[3 * 5], m[3], r[3], s = 0;
	nk_layernorm_args_t f = { .dtype = NK_F64, .rows = rows, .cols = cols, .eps = 1e-5, .x = x, .w = w, .b = b,
				  .y = y, .mean = m, .rstd = r };

	nk_layernorm_run(&f);
	for (int64_t i = 0; i < rows * cols; i++)
		s += dy[i] * y[i];
	return s;
}

/* f32 outputs of 16 MiB and more are written with non-temporal stores. */
static void test_layernorm_streamed(void)
{
	check_case(NK_F32, 4097, 1024, true);
	check_case(NK_F32, 4097, 1025, false);
}

static void test_layernorm_bwd_numerical(void)
{
	enum { R = 3, C = 5 };
	double x[R * C], w[C], b[C], dy[R * C], y[R * C], m[R], r[R], dx[R * C], dw[C], db[C];
	nk_layernorm_args_t f = { .dtype = NK_F64, .rows = R, .cols = C, .eps = 1e-5, .x = x, .w = w, .b = b,
				  .y = y, .mean = m, .rstd = r };
	nk_layernorm_bwd_args_t g = { .dtype = NK_F64, .rows = R, .cols = C, .dy = dy, .x = x, .mean = m, .rstd = r,
				      .w = w, .dx = dx, .dw = dw, .db = db };
	double h = 1e-6;

	nkt_fill(x, NK_F64, R * C, -2, 2);
	nkt_fill(w, NK_F64, C, 0.5, 1.5);
	nkt_fill(b, NK_F64, C, -1, 1);
	nkt_fill(dy, NK_F64, R * C, -1, 1);
	nk_layernorm_run(&f);
	nk_layernorm_bwd_run(&g);
	for (int i = 0; i < R * C; i++) {
		double s = x[i], num;

		x[i] = s + h;
		num = loss(x, w, b, dy, R, C);
		x[i] = s - h;
		num = (num - loss(x, w, b, dy, R, C)) / (2 * h);
		x[i] = s;
		CHECK(fabs(num - dx[i]) < 1e-6, "dx[%d]: %g vs %g", i, num, dx[i]);
	}
	for (int j = 0; j < C; j++) {
		double s = w[j], num;

		w[j] = s + h;
		num = loss(x, w, b, dy, R, C);
		w[j] = s - h;
		num = (num - loss(x, w, b, dy, R, C)) / (2 * h);
		w[j] = s;
		CHECK(fabs(num - dw[j]) < 1e-6, "dw[%d]: %g vs %g", j, num, dw[j]);
		s = b[j];
		b[j] = s + h;
		num = loss(x, w, b, dy, R, C);
		b[j] = s - h;
		num = (num - loss(x, w, b, dy, R, C)) / (2 * h);
		b[j] = s;
		CHECK(fabs(num - db[j]) < 1e-6, "db[%d]: %g vs %g", j, num, db[j]);
	}
}

/* The f32 forward's one-pass moments (E[x^2] - mean^2) and its exact fallback: rows whose mean^2 exceeds
 * their variance (a large offset, a constant row, mean == std), rows whose squares overflow f32, and rows
 * that stay on the one-pass path, against moments computed here in f64 by two passes. */
static void test_layernorm_moments(void)
{
	enum { R = 8 };
	static const int64_t widths[] = { 1000, 1024 };

	for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
		int64_t C = widths[wi];
		float *x = malloc(sizeof(float) * R * C), *y = malloc(sizeof(float) * R * C), m[R], r[R];
		nk_layernorm_args_t f = { .dtype = NK_F32, .rows = R, .cols = C, .eps = 1e-5, .x = x, .y = y,
					  .mean = m, .rstd = r };

		nkt_fill(x, NK_F32, R * C, -1, 1);
		for (int64_t j = 0; j < C; j++) {
			x[0 * C + j] += 1000;		      /* mean^2 = 3e6 var */
			x[1 * C + j] = 3;		      /* var 0 */
			x[2 * C + j] = x[2 * C + j] * 1e-3f;  /* mean ~ 0, tiny var: one pass */
			x[3 * C + j] = x[3 * C + j] + 1;       /* mean 1, var 1/3: exact pass */
			x[4 * C + j] = x[4 * C + j] + 0.5f;    /* mean 0.5, var 1/3: one pass */
			x[5 * C + j] = 1e20f + x[5 * C + j] * 1e18f; /* x^2 overflows f32, (x - mean)^2 does not */
			x[6 * C + j] = x[6 * C + j] * 1e-20f;  /* x^2 underflows */
		}
		CHECK(nk_layernorm_run(&f) == 0, "run");
		for (int i = 0; i < R; i++) {
			const float *xr = x + i * C, *yr = y + i * C;
			double mean = 0, var = 0, rstd, err = 0, amax = 0, tol;

			for (int64_t j = 0; j < C; j++)
				mean += xr[j];
			mean /= (double)C;
			for (int64_t j = 0; j < C; j++)
				var += (xr[j] - mean) * (xr[j] - mean);
			var /= (double)C;
			rstd = 1 / sqrt(var + 1e-5);
			for (int64_t j = 0; j < C; j++)
				amax = fabs(xr[j]) > amax ? fabs(xr[j]) : amax;
			/* x - mean is formed in f32: a few ulps of |x| scaled by rstd */
			tol = 1e-5 + 8 * FLT_EPSILON * amax * rstd;
			for (int64_t j = 0; j < C; j++) {
				double e = fabs(yr[j] - (xr[j] - mean) * rstd);

				err = e > err ? e : err;
			}
			CHECK(err <= tol, "layernorm moments row %d width %lld: max |y - exact| %g (tol %g)", i, (long long)C, err, tol);
			CHECK(fabs(r[i] - rstd) <= 1e-5 * rstd, "row %d: rstd %g against %g", i, r[i], rstd);
			CHECK(fabs(m[i] - mean) <= 1e-6 * fabs(mean) + 1e-30, "row %d: mean %g against %g", i, m[i], mean);
		}
		free(x), free(y);
	}
}

static void test_layernorm_errors(void)
{
	nk_layernorm_args_t f = { .dtype = NK_I64, .rows = 1, .cols = 1 };

	CHECK(nk_layernorm_run(&f) != 0, "int64 is refused");
}

int main(void)
{
	nkt_seed(3);
	RUN(test_layernorm_vs_ref);
	RUN(test_layernorm_row_groups);
	RUN(test_layernorm_streamed);
	RUN(test_layernorm_moments);
	RUN(test_layernorm_bwd_numerical);
	RUN(test_layernorm_errors);
	return ctest_finish();
}
