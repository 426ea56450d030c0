/* test_norm.c - batch norm, group norm, rms norm and the small activations (nk_norm.h) against their
 * references for every float dtype (and the mixed bf16/f16 input with f32 parameters), on random odd
 * shapes incl. zero-size; batch/group norm backward against central differences in f64; margin
 * losses against central differences; the grad scaler kernels; bad input fails cleanly. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"

static const int dtypes[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

static double atol_of(int dtype)
{
	return dtype == NK_F64 ? 1e-12 : dtype == NK_F32 ? 1e-4 : dtype == NK_BF16 ? 2e-2 : 4e-3;
}

static double rtol_of(int dtype)
{
	return dtype == NK_F64 ? 1e-11 : dtype == NK_F32 ? 1e-5 : dtype == NK_BF16 ? 1.0 / 64 : 1.0 / 512;
}

/* ---- batch norm ---------------------------------------------------------------------------------- */

static void bn_case(int dtype, int pdtype, int64_t N, int64_t C, int64_t S, bool training, bool affine)
{
	int64_t n = N * C * S;
	void *x = nkt_alloc(dtype, n), *y0 = nkt_alloc(dtype, n), *y1 = nkt_alloc(dtype, n);
	void *w = nkt_alloc(pdtype, C), *b = nkt_alloc(pdtype, C);
	void *rm0 = nkt_alloc(pdtype, C), *rv0 = nkt_alloc(pdtype, C), *rm1 = nkt_alloc(pdtype, C), *rv1 = nkt_alloc(pdtype, C);
	void *sm0 = nkt_alloc(pdtype, C), *si0 = nkt_alloc(pdtype, C), *sm1 = nkt_alloc(pdtype, C), *si1 = nkt_alloc(pdtype, C);
	void *dy = nkt_alloc(dtype, n), *dx0 = nkt_alloc(dtype, n), *dx1 = nkt_alloc(dtype, n);
	void *dw0 = nkt_alloc(pdtype, C), *dw1 = nkt_alloc(pdtype, C), *db0 = nkt_alloc(pdtype, C), *db1 = nkt_alloc(pdtype, C);
	double at = atol_of(dtype), rt = rtol_of(dtype), e;

	nkt_fill(x, dtype, n, -3, 7); /* mean far from 0: the variance must not cancel */
	nkt_fill(w, pdtype, C, 0.5, 1.5);
	nkt_fill(b, pdtype, C, -1, 1);
	nkt_fill(rm0, pdtype, C, -1, 1);
	nkt_fill(rv0, pdtype, C, 0.5, 2);
	memcpy(rm1, rm0, (size_t)C * nk_fp_elem_size(pdtype));
	memcpy(rv1, rv0, (size_t)C * nk_fp_elem_size(pdtype));
	nkt_fill(dy, dtype, n, -1, 1);
	nk_batchnorm_args_t f = { .dtype = dtype, .pdtype = pdtype, .N = N, .C = C, .S = S, .training = training,
				  .momentum = 0.1, .eps = 1e-5, .x = x, .w = affine ? w : NULL, .b = affine ? b : NULL,
				  .running_mean = rm0, .running_var = rv0, .y = y0, .save_mean = sm0, .save_invstd = si0 };
	CHECK(nk_batchnorm_ref(&f) == 0, "bn ref");
	f.running_mean = rm1, f.running_var = rv1, f.y = y1, f.save_mean = sm1, f.save_invstd = si1;
	CHECK(nk_batchnorm_run(&f) == 0, "bn run");
	e = nkt_err(y1, y0, dtype, n, at, rt);
	CHECK(e <= 1, "bn y %s/%s %lldx%lldx%lld train=%d affine=%d: err %g", nkt_dtype_name(dtype), nkt_dtype_name(pdtype),
	      (long long)N, (long long)C, (long long)S, training, affine, e);
	e = nkt_err(rm1, rm0, pdtype, C, 1e-6, 1e-6) + nkt_err(rv1, rv0, pdtype, C, 1e-6, 1e-6);
	CHECK(e <= 1, "bn running stats %s: err %g", nkt_dtype_name(dtype), e);
	if (training) {
		e = nkt_err(sm1, sm0, pdtype, C, 1e-6, 1e-6) + nkt_err(si1, si0, pdtype, C, 1e-6, 1e-6);
		CHECK(e <= 1, "bn save stats %s: err %g", nkt_dtype_name(dtype), e);
	}
	nk_batchnorm_bwd_args_t bb = { .dtype = dtype, .pdtype = pdtype, .N = N, .C = C, .S = S, .training = training, .eps = 1e-5,
				       .dy = dy, .x = x, .w = affine ? w : NULL, .mean = training ? sm0 : rm0,
				       .invstd = training ? si0 : rv0, .dx = dx0, .dw = dw0, .db = db0 };
	CHECK(nk_batchnorm_bwd_ref(&bb) == 0, "bn bwd ref");
	bb.dx = dx1, bb.dw = dw1, bb.db = db1;
	CHECK(nk_batchnorm_bwd_run(&bb) == 0, "bn bwd run");
	e = nkt_err(dx1, dx0, dtype, n, dtype == NK_F32 ? 1e-4 : at, rt);
	CHECK(e <= 1, "bn dx %s %lldx%lldx%lld train=%d: err %g", nkt_dtype_name(dtype), (long long)N, (long long)C, (long long)S, training, e);
	e = nkt_err(dw1, dw0, pdtype, C, 1e-5 * sqrt((double)(N * S) + 1), 1e-5) + nkt_err(db1, db0, pdtype, C, 1e-5 * sqrt((double)(N * S) + 1), 1e-5);
	CHECK(e <= 1, "bn dw/db %s: err %g", nkt_dtype_name(dtype), e);
	free(x), free(y0), free(y1), free(w), free(b), free(rm0), free(rv0), free(rm1), free(rv1);
	free(sm0), free(si0), free(sm1), free(si1), free(dy), free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1);
}

static void test_batchnorm_vs_ref(void)
{
	static const int64_t shapes[][3] = { { 2, 1, 1 }, { 3, 5, 7 }, { 4, 3, 1 }, { 2, 17, 33 }, { 8, 4, 600 }, { 1, 3, 5000 }, { 0, 3, 4 } };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int tr = 0; tr < 2; tr++) {
				if (tr && shapes[s][0] == 0)
					continue; /* training on no elements: NaN statistics by definition */
				bn_case(dtypes[d], dtypes[d], shapes[s][0], shapes[s][1], shapes[s][2], tr, tr);
				if (dtypes[d] == NK_BF16 || dtypes[d] == NK_F16)
					bn_case(dtypes[d], NK_F32, shapes[s][0], shapes[s][1], shapes[s][2], tr, !tr);
			}
}

/* sum(dy * batch_norm(x)) in f64, training mode, for the central differences */
static double bn_loss(const double *x, const double *w, const double *b, const double *dy, int64_t N, int64_t C, int64_t S)
{
	int64_t n = N * C * S;
	double *y = malloc((size_t)n * sizeof *y), *sm = malloc((size_t)C * sizeof *sm), *si = malloc((size_t)C * sizeof *si), s = 0;
	nk_batchnorm_args_t f = { .dtype = NK_F64, .pdtype = NK_F64, .N = N, .C = C, .S = S, .training = true, .eps = 1e-5,
				  .x = x, .w = w, .b = b, .y = y, .save_mean = sm, .save_invstd = si };

	nk_batchnorm_ref(&f);
	for (int64_t i = 0; i < n; i++)
		s += dy[i] * y[i];
	free(y), free(sm), free(si);
	return s;
}

static void test_batchnorm_bwd_numerical(void)
{
	enum { N = 3, C = 2, S = 4, n = N * C * S };
	double x[n], dy[n], w[C], b[C], y[n], sm[C], si[C], dx[n], dw[C], db[C], h = 1e-6;

	for (int i = 0; i < n; i++)
		x[i] = nkt_uniform(-2, 3), dy[i] = nkt_uniform(-1, 1);
	for (int c = 0; c < C; c++)
		w[c] = nkt_uniform(0.5, 1.5), b[c] = nkt_uniform(-1, 1);
	nk_batchnorm_args_t f = { .dtype = NK_F64, .pdtype = NK_F64, .N = N, .C = C, .S = S, .training = true, .eps = 1e-5,
				  .x = x, .w = w, .b = b, .y = y, .save_mean = sm, .save_invstd = si };
	CHECK(nk_batchnorm_run(&f) == 0, "bn f64");
	nk_batchnorm_bwd_args_t bb = { .dtype = NK_F64, .pdtype = NK_F64, .N = N, .C = C, .S = S, .training = true, .eps = 1e-5,
				       .dy = dy, .x = x, .w = w, .mean = sm, .invstd = si, .dx = dx, .dw = dw, .db = db };
	CHECK(nk_batchnorm_bwd_run(&bb) == 0, "bn bwd f64");
	for (int i = 0; i < n; i++) {
		double s = x[i], num;

		x[i] = s + h;
		num = bn_loss(x, w, b, dy, N, C, S);
		x[i] = s - h;
		num = (num - bn_loss(x, w, b, dy, N, C, S)) / (2 * h);
		x[i] = s;
		CHECK(fabs(num - dx[i]) < 1e-6, "bn dx[%d]: %g vs %g", i, num, dx[i]);
	}
	for (int c = 0; c < C; c++) {
		double s = w[c], num;

		w[c] = s + h;
		num = bn_loss(x, w, b, dy, N, C, S);
		w[c] = s - h;
		num = (num - bn_loss(x, w, b, dy, N, C, S)) / (2 * h);
		w[c] = s;
		CHECK(fabs(num - dw[c]) < 1e-6, "bn dw[%d]: %g vs %g", c, num, dw[c]);
	}
}

/* ---- group norm ---------------------------------------------------------------------------------- */

static void gn_case(int dtype, int pdtype, int64_t N, int64_t C, int64_t S, int64_t G, bool affine)
{
	int64_t n = N * C * S;
	void *x = nkt_alloc(dtype, n), *y0 = nkt_alloc(dtype, n), *y1 = nkt_alloc(dtype, n), *w = nkt_alloc(pdtype, C), *b = nkt_alloc(pdtype, C);
	void *m0 = nkt_alloc(pdtype, N * G), *r0 = nkt_alloc(pdtype, N * G), *m1 = nkt_alloc(pdtype, N * G), *r1 = nkt_alloc(pdtype, N * G);
	void *dy = nkt_alloc(dtype, n), *dx0 = nkt_alloc(dtype, n), *dx1 = nkt_alloc(dtype, n);
	void *dw0 = nkt_alloc(pdtype, C), *dw1 = nkt_alloc(pdtype, C), *db0 = nkt_alloc(pdtype, C), *db1 = nkt_alloc(pdtype, C);
	double at = atol_of(dtype), rt = rtol_of(dtype), e;

	nkt_fill(x, dtype, n, -2, 6);
	nkt_fill(w, pdtype, C, 0.5, 1.5);
	nkt_fill(b, pdtype, C, -1, 1);
	nkt_fill(dy, dtype, n, -1, 1);
	nk_groupnorm_args_t f = { .dtype = dtype, .pdtype = pdtype, .N = N, .C = C, .S = S, .G = G, .eps = 1e-5, .x = x,
				  .w = affine ? w : NULL, .b = affine ? b : NULL, .y = y0, .mean = m0, .rstd = r0 };
	CHECK(nk_groupnorm_ref(&f) == 0, "gn ref");
	f.y = y1, f.mean = m1, f.rstd = r1;
	CHECK(nk_groupnorm_run(&f) == 0, "gn run");
	e = nkt_err(y1, y0, dtype, n, at, rt);
	CHECK(e <= 1, "gn y %s %lldx%lldx%lld G=%lld: err %g", nkt_dtype_name(dtype), (long long)N, (long long)C, (long long)S, (long long)G, e);
	e = nkt_err(m1, m0, pdtype, N * G, at, rt) + nkt_err(r1, r0, pdtype, N * G, at, rt);
	CHECK(e <= 1, "gn mean/rstd %s: err %g", nkt_dtype_name(dtype), e);
	nk_groupnorm_bwd_args_t bb = { .dtype = dtype, .pdtype = pdtype, .N = N, .C = C, .S = S, .G = G, .dy = dy, .x = x, .mean = m0,
				       .rstd = r0, .w = affine ? w : NULL, .dx = dx0, .dw = dw0, .db = db0 };
	CHECK(nk_groupnorm_bwd_ref(&bb) == 0, "gn bwd ref");
	bb.dx = dx1, bb.dw = dw1, bb.db = db1;
	CHECK(nk_groupnorm_bwd_run(&bb) == 0, "gn bwd run");
	e = nkt_err(dx1, dx0, dtype, n, dtype == NK_F32 ? 1e-4 : at, rt);
	CHECK(e <= 1, "gn dx %s %lldx%lldx%lld G=%lld: err %g", nkt_dtype_name(dtype), (long long)N, (long long)C, (long long)S, (long long)G, e);
	e = nkt_err(dw1, dw0, pdtype, C, 1e-5 * sqrt((double)(N * S) + 1), 1e-5) + nkt_err(db1, db0, pdtype, C, 1e-5 * sqrt((double)(N * S) + 1), 1e-5);
	CHECK(e <= 1, "gn dw/db %s: err %g", nkt_dtype_name(dtype), e);
	free(x), free(y0), free(y1), free(w), free(b), free(m0), free(r0), free(m1), free(r1);
	free(dy), free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1);
}

static void test_groupnorm_vs_ref(void)
{
	static const int64_t shapes[][4] = { { 2, 6, 5, 3 }, { 1, 4, 1, 4 }, { 3, 9, 17, 1 }, { 2, 32, 49, 8 }, { 2, 4, 3000, 2 }, { 0, 4, 3, 2 } };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int affine = 0; affine < 2; affine++) {
				gn_case(dtypes[d], dtypes[d], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], affine);
				if (dtypes[d] == NK_BF16)
					gn_case(dtypes[d], NK_F32, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], affine);
			}
}

/* ---- rms norm ------------------------------------------------------------------------------------ */

static void test_rmsnorm_vs_ref(void)
{
	/* odd sizes, rows longer than a converted chunk (2048), several dw chunks (64 rows), a 16 MiB f32
	 * output (non-temporal stores; 1025 columns: rows alternate aligned / unaligned), zero-size */
	static const int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 5, 513 }, { 64, 33 }, { 0, 5 }, { 5, 0 },
					     { 3, 2100 }, { 300, 130 }, { 4097, 1025 } };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			int dt = dtypes[d], rdt = dt == NK_F64 ? NK_F64 : NK_F32;

			if (shapes[s][0] * shapes[s][1] > 1000000 && dt != NK_F32)
				continue;
			int64_t R = shapes[s][0], Cc = shapes[s][1], n = R * Cc;
			void *x = nkt_alloc(dt, n), *w = nkt_alloc(dt, Cc), *y0 = nkt_alloc(dt, n), *y1 = nkt_alloc(dt, n);
			void *r0 = nkt_alloc(rdt, R), *r1 = nkt_alloc(rdt, R), *dy = nkt_alloc(dt, n), *dx0 = nkt_alloc(dt, n),
			     *dx1 = nkt_alloc(dt, n), *dw0 = nkt_alloc(dt, Cc), *dw1 = nkt_alloc(dt, Cc);
			double e;

			nkt_fill(x, dt, n, -2, 2);
			nkt_fill(w, dt, Cc, 0.5, 1.5);
			nkt_fill(dy, dt, n, -1, 1);
			nk_rmsnorm_args_t f = { .dtype = dt, .rows = R, .cols = Cc, .eps = 1e-6, .x = x, .w = w, .y = y0, .rstd = r0 };
			CHECK(nk_rmsnorm_ref(&f) == 0, "rms ref");
			f.y = y1, f.rstd = r1;
			CHECK(nk_rmsnorm_run(&f) == 0, "rms run");
			e = nkt_err(y1, y0, dt, n, atol_of(dt), rtol_of(dt)) + nkt_err(r1, r0, rdt, R, 1e-6, 1e-6);
			CHECK(e <= 1, "rms y %s %lldx%lld: err %g", nkt_dtype_name(dt), (long long)R, (long long)Cc, e);
			nk_rmsnorm_bwd_args_t b = { .dtype = dt, .rows = R, .cols = Cc, .dy = dy, .x = x, .rstd = r0, .w = w, .dx = dx0, .dw = dw0 };
			/* without weight, and dw only */
			f.w = NULL, f.y = y0, f.rstd = r0;
			CHECK(nk_rmsnorm_ref(&f) == 0, "rms ref nw");
			f.y = y1, f.rstd = r1;
			CHECK(nk_rmsnorm_run(&f) == 0, "rms run nw");
			e = nkt_err(y1, y0, dt, n, atol_of(dt), rtol_of(dt)) + nkt_err(r1, r0, rdt, R, 1e-6, 1e-6);
			CHECK(e <= 1, "rms y (no weight) %s %lldx%lld: err %g", nkt_dtype_name(dt), (long long)R, (long long)Cc, e);
			b.w = NULL;
			CHECK(nk_rmsnorm_bwd_ref(&b) == 0, "rms bwd ref nw");
			b.dx = dx1;
			CHECK(nk_rmsnorm_bwd_run(&b) == 0, "rms bwd run nw");
			e = nkt_err(dx1, dx0, dt, n, atol_of(dt), rtol_of(dt));
			CHECK(e <= 1, "rms dx (no weight) %s %lldx%lld: err %g", nkt_dtype_name(dt), (long long)R, (long long)Cc, e);
			b.w = w, b.dx = NULL, b.dw = dw1;
			CHECK(nk_rmsnorm_bwd_run(&b) == 0, "rms bwd run dw only");
			b.dx = dx0, b.dw = dw0;
			CHECK(nk_rmsnorm_bwd_ref(&b) == 0, "rms bwd ref dw only");
			e = nkt_err(dw1, dw0, dt, Cc, atol_of(dt) * (1 + R / 64), rtol_of(dt));
			CHECK(e <= 1, "rms dw only %s %lldx%lld: err %g", nkt_dtype_name(dt), (long long)R, (long long)Cc, e);
			/* the full backward with weight */
			CHECK(nk_rmsnorm_bwd_ref(&b) == 0, "rms bwd ref");
			b.dx = dx1, b.dw = dw1;
			CHECK(nk_rmsnorm_bwd_run(&b) == 0, "rms bwd run");
			e = nkt_err(dx1, dx0, dt, n, atol_of(dt), rtol_of(dt)) + nkt_err(dw1, dw0, dt, Cc, atol_of(dt), rtol_of(dt));
			CHECK(e <= 1, "rms dx/dw %s %lldx%lld: err %g", nkt_dtype_name(dt), (long long)R, (long long)Cc, e);
			free(x), free(w), free(y0), free(y1), free(r0), free(r1), free(dy), free(dx0), free(dx1), free(dw0), free(dw1);
		}
}

/* ---- activations --------------------------------------------------------------------------------- */

/* A [rows, cols] iterator over nops operands; operand k has row stride rs[k] (elements; 0 = broadcast
 * along rows) and column stride 1. */
static void act_case(int op, int dtype, int nin, int64_t rows, int64_t cols, double a, int64_t ia)
{
	int64_t n = rows * cols;
	void *in[3], *o0 = nkt_alloc(dtype, n), *o1 = nkt_alloc(dtype, n);
	nk_act_args_t A = { .op = op, .a = a, .ia = ia };
	size_t es = nk_fp_elem_size(dtype);
	double e;

	for (int k = 0; k < nin; k++) {
		in[k] = nkt_alloc(dtype, 2 * n + 1);
		nkt_fill(in[k], dtype, 2 * n + 1, op == NK_ACT_LOGIT_BWD && k == 1 ? -0.2 : -2, op == NK_ACT_LOGIT_BWD && k == 1 ? 1.2 : 2);
	}
	A.it.ndim = 2, A.it.nops = 1 + nin;
	A.it.shape[0] = cols, A.it.shape[1] = rows;
	A.it.data[0] = o0;
	A.it.strides[0][0] = (int64_t)es, A.it.strides[0][1] = cols * (int64_t)es;
	for (int k = 0; k < nin; k++) {
		A.it.data[k + 1] = in[k];
		A.it.strides[k + 1][0] = (k == 1 ? 2 : 1) * (int64_t)es;  /* the second input is strided */
		A.it.strides[k + 1][1] = (k == 2 ? 0 : 2 * cols) * (int64_t)es; /* the third broadcasts over rows */
	}
	for (int k = 0; k < 1 + nin; k++)
		A.it.dtype[k] = (int8_t)dtype;
	CHECK(nk_act_ref(&A) == 0, "act ref");
	A.it.data[0] = o1;
	CHECK(nk_act_run(&A) == 0, "act run");
	e = nkt_err(o1, o0, dtype, n, 0, 0);
	CHECK(e == 0, "act op %d %s %lldx%lld: err %g", op, nkt_dtype_name(dtype), (long long)rows, (long long)cols, e);
	for (int k = 0; k < nin; k++)
		free(in[k]);
	free(o0), free(o1);
}

static void test_act_vs_ref(void)
{
	static const int nin[NK_ACT_COUNT] = { 1, 2, 1, 2, 2, 2, 3, 3, 2, 3, 2 };
	static const int64_t shapes[][2] = { { 1, 1 }, { 3, 7 }, { 17, 300 }, { 0, 4 } };

	for (int op = 0; op < NK_ACT_COUNT; op++)
		for (int d = 0; d < 4; d++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
				act_case(op, dtypes[d], nin[op], shapes[s][0], shapes[s][1], 0.5, 0);
				if (op == NK_ACT_LOGIT_BWD)
					act_case(op, dtypes[d], nin[op], shapes[s][0], shapes[s][1], 0.1, 1);
			}
	/* spot values */
	double x[4] = { -1.0, -0.3, 0.3, NAN }, o[4];
	nk_act_args_t A = { .op = NK_ACT_SOFTSHRINK, .a = 0.5 };
	A.it.ndim = 1, A.it.nops = 2, A.it.shape[0] = 4, A.it.data[0] = (char *)o, A.it.data[1] = (char *)x;
	A.it.strides[0][0] = A.it.strides[1][0] = 8, A.it.dtype[0] = A.it.dtype[1] = NK_F64;
	CHECK(nk_act_run(&A) == 0 && o[0] == -0.5 && o[1] == 0 && o[2] == 0 && isnan(o[3]), "softshrink values");
	A.op = NK_ACT_HARDSHRINK;
	CHECK(nk_act_run(&A) == 0 && o[0] == -1.0 && o[1] == 0 && o[2] == 0 && isnan(o[3]), "hardshrink values");
	A.it.dtype[1] = NK_I64;
	CHECK(nk_act_run(&A) != 0, "mixed dtypes are refused");
}

static void test_rrelu(void)
{
	enum { n = 1000 };
	float x[n], y[n], noise[n], y2[n], noise2[n];
	nk_rrelu_args_t a = { .dtype = NK_F32, .n = n, .lower = 0.125, .upper = 1.0 / 3, .seed = 42, .offset = 8, .x = x, .noise = noise, .y = y };

	for (int i = 0; i < n; i++)
		x[i] = (float)nkt_uniform(-1, 1);
	CHECK(nk_rrelu_run(&a) == 0, "rrelu");
	a.noise = noise2, a.y = y2;
	CHECK(nk_rrelu_run(&a) == 0, "rrelu again");
	int bad = 0, distinct = 0;
	for (int i = 0; i < n; i++) {
		if (x[i] > 0)
			bad += noise[i] != 1.0f || y[i] != x[i];
		else
			bad += noise[i] < 0.125f || noise[i] > (float)(1.0 / 3) || y[i] != x[i] * noise[i];
		distinct += i && x[i] <= 0 && noise[i] != noise[i - 1];
		bad += noise[i] != noise2[i] || y[i] != y2[i];
	}
	CHECK(bad == 0, "rrelu: %d bad elements", bad);
	CHECK(distinct > 100, "rrelu noise varies (%d)", distinct);
}

/* ---- margin losses ------------------------------------------------------------------------------- */

static double mm_loss_f64(const double *x, const int64_t *t, const double *w, int64_t N, int64_t C, int64_t p, int reduction)
{
	double out = 0;
	nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = p, .margin = 1.0, .reduction = reduction, .x = x, .target = t, .w = w, .out = &out };

	nk_multi_margin_run(&a);
	return out;
}

static void test_margin_losses(void)
{
	enum { N = 4, C = 5 };
	double x[N * C], w[C], gi[N * C], go = 1.0, h = 1e-6, out[N];
	int64_t t[N] = { 0, 3, 4, 2 }, tl[N * C];

	for (int i = 0; i < N * C; i++)
		x[i] = nkt_uniform(-1, 1);
	for (int c = 0; c < C; c++)
		w[c] = nkt_uniform(0.5, 1.5);
	for (int64_t p = 1; p <= 2; p++)
		for (int red = 1; red <= 2; red++) {
			nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = p, .margin = 1.0, .reduction = red, .x = x, .target = t,
						     .w = w, .grad_out = &go, .grad_in = gi };
			CHECK(nk_multi_margin_bwd_run(&a) == 0, "mm bwd");
			for (int i = 0; i < N * C; i++) {
				double s = x[i], num;

				x[i] = s + h;
				num = mm_loss_f64(x, t, w, N, C, p, red);
				x[i] = s - h;
				num = (num - mm_loss_f64(x, t, w, N, C, p, red)) / (2 * h);
				x[i] = s;
				CHECK(fabs(num - gi[i]) < 1e-6, "multi_margin p=%lld red=%d grad[%d]: %g vs %g", (long long)p, red, i, num, gi[i]);
			}
		}
	/* reduction none sums to reduction sum */
	nk_multi_margin_args_t a = { .dtype = NK_F64, .N = N, .C = C, .p = 1, .margin = 1.0, .reduction = NK_REDUCTION_NONE, .x = x, .target = t, .out = out };
	CHECK(nk_multi_margin_run(&a) == 0, "mm none");
	CHECK(fabs(out[0] + out[1] + out[2] + out[3] - mm_loss_f64(x, t, NULL, N, C, 1, NK_REDUCTION_SUM)) < 1e-12, "none sums to sum");
	int64_t bad[N] = { 0, 5, 1, 1 };
	a.target = bad;
	CHECK(nk_multi_margin_run(&a) != 0, "target out of range fails");

	/* multilabel: labels {1, 3} / {0} / {} / {4, 2, 0} */
	static const int64_t labels[N][C] = { { 1, 3, -1, 0, 0 }, { 0, -1, 2, 2, 2 }, { -1, 1, 1, 1, 1 }, { 4, 2, 0, -1, 3 } };
	double ist[N * C], loss, lp;
	memcpy(tl, labels, sizeof tl);
	nk_multilabel_margin_args_t m = { .dtype = NK_F64, .N = N, .C = C, .reduction = NK_REDUCTION_SUM, .x = x, .target = tl, .out = &loss,
					  .is_target = ist, .grad_out = &go, .grad_in = gi };
	CHECK(nk_multilabel_margin_run(&m) == 0 && nk_multilabel_margin_bwd_run(&m) == 0, "multilabel");
	CHECK(ist[1] == 1 && ist[3] == 1 && ist[0] == 0 && ist[5] == 1 && ist[6] == 0 && ist[10] == 0, "is_target");
	for (int i = 0; i < N * C; i++) {
		double s = x[i], num;

		m.out = &lp;
		x[i] = s + h;
		nk_multilabel_margin_run(&m);
		num = lp;
		x[i] = s - h;
		nk_multilabel_margin_run(&m);
		num = (num - lp) / (2 * h);
		x[i] = s;
		CHECK(fabs(num - gi[i]) < 1e-6, "multilabel grad[%d]: %g vs %g", i, num, gi[i]);
	}
	tl[0] = 7;
	CHECK(nk_multilabel_margin_run(&m) != 0, "multilabel target out of range fails");
}

/* ---- grad scaler --------------------------------------------------------------------------------- */

static void test_amp(void)
{
	float g[100], inv = 0.5f, found = 0;
	uint16_t hb[3] = { 0x3f80, 0x7f80, 0x4000 }; /* bf16 1, inf, 2 */
	nk_amp_unscale_args_t a = { .dtype = NK_F32, .n = 100, .x = g, .inv_scale = &inv, .found_inf = &found };

	for (int i = 0; i < 100; i++)
		g[i] = (float)i;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 0 && g[10] == 5.0f && g[99] == 49.5f, "unscale finite");
	g[50] = NAN;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 1.0f, "unscale finds NaN");
	a.dtype = NK_BF16, a.n = 3, a.x = hb, found = 0;
	CHECK(nk_amp_unscale_run(&a) == 0 && found == 1.0f && hb[0] == 0x3f00 && hb[2] == 0x3f80, "unscale bf16 inf");

	float scale = 1024.0f, fi = 0;
	int32_t tracker = 0;
	nk_amp_update_args_t u = { .scale = &scale, .growth_tracker = &tracker, .found_inf = &fi, .growth = 2.0, .backoff = 0.5, .interval = 3 };
	nk_amp_update_run(&u);
	nk_amp_update_run(&u);
	CHECK(scale == 1024.0f && tracker == 2, "tracker counts");
	nk_amp_update_run(&u);
	CHECK(scale == 2048.0f && tracker == 0, "scale grows at the interval");
	fi = 1;
	nk_amp_update_run(&u);
	CHECK(scale == 1024.0f && tracker == 0, "scale backs off on inf");
	fi = 0, scale = 3e38f, tracker = 2;
	nk_amp_update_run(&u);
	CHECK(scale == 3e38f && tracker == 0, "an infinite grown scale is not taken");
}

static void test_errors(void)
{
	nk_batchnorm_args_t f = { .dtype = NK_I64, .pdtype = NK_I64, .N = 1, .C = 1, .S = 1, .training = true };
	CHECK(nk_batchnorm_run(&f) != 0, "int64 batch norm is refused");
	f.dtype = NK_F32, f.pdtype = NK_F32, f.training = false;
	CHECK(nk_batchnorm_run(&f) != 0, "eval without running stats is refused");
	nk_groupnorm_args_t g = { .dtype = NK_F32, .pdtype = NK_F32, .N = 1, .C = 5, .S = 1, .G = 2 };
	CHECK(nk_groupnorm_run(&g) != 0, "C %% G != 0 is refused");
	nk_batchnorm_args_t m = { .dtype = NK_F64, .pdtype = NK_F32, .N = 1, .C = 1, .S = 1, .training = true };
	CHECK(nk_batchnorm_run(&m) != 0, "f64 input with f32 parameters is refused");
}

/* ---- act_avx512.c: the dedicated gelu / silu loops against the formulas in double ----------------- */

bool nk_cpu_avx512(void);

static double ulp_f(double v)
{
	float f = (float)fabs(v);

	return f < 1.17549435e-38f ? 1.4e-45 : (double)(nextafterf(f, INFINITY) - f);
}

/* The op in double, exactly: gelu = x * Phi(x), its derivative Phi(x) + x * phi(x) (erf form), and the
 * tanh form with its derivative; silu and silu_backward. */
static double act_double(int op, int64_t ia, double g, double x)
{
	double beta = M_SQRT2 * M_2_SQRTPI * 0.5, k = 0.044715;

	if (op == NK_OP_GELU && ia)
		return 0.5 * x * (1 + tanh(beta * (x + k * x * x * x)));
	if (op == NK_OP_GELU)
		return x * 0.5 * erfc(-x * M_SQRT1_2);
	if (op == NK_OP_GELU_BACKWARD && ia) {
		double t = tanh(beta * (x + k * x * x * x));

		return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * beta * (1 + 3 * k * x * x));
	}
	if (op == NK_OP_GELU_BACKWARD)
		return g * (0.5 * erfc(-x * M_SQRT1_2) + x * M_2_SQRTPI * M_SQRT1_2 * 0.5 * exp(-0.5 * x * x));
	if (op == NK_OP_SILU)
		return x / (1 + exp(-x));
	double s = 1 / (1 + exp(-x)); /* NK_OP_SILU_BACKWARD */

	return g * s * (1 + x * (1 - s));
}

static void test_act_avx512(void)
{
	static const int ops[][2] = { { NK_OP_GELU, 0 }, { NK_OP_GELU, 1 }, { NK_OP_GELU_BACKWARD, 0 },
				      { NK_OP_GELU_BACKWARD, 1 }, { NK_OP_SILU, 0 }, { NK_OP_SILU_BACKWARD, 0 } };
	static const int64_t sizes[] = { 0, 1, 15, 16, 17, 31, 33, 100, 1027 };
	static const float special[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 3.0f, -3.0f, 9.0f, -9.0f, 30.0f, -30.0f,
					 200.0f, -200.0f };
	enum { N = 1027 + 16 };
	float x[N], g[N], o[N + 16];

	if (!nk_cpu_avx512())
		return;
	CHECK(!nk_act_f32_avx512(NK_OP_ADD, 0, o, x, g, 4, false), "act: other ops are not taken");
	for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
			for (int stream = 0; stream < 2; stream++)
				for (int off = 0; off < 2; off++) { /* off: an unaligned output */
					int op = ops[k][0], ia = ops[k][1], bin = op == NK_OP_GELU_BACKWARD || op == NK_OP_SILU_BACKWARD;
					int64_t n = sizes[s];
					double worst = 0;

					for (int64_t i = 0; i < n; i++) {
						x[i] = i < (int64_t)(sizeof special / sizeof special[0]) ? special[i]
							: (float)(((double)rand() / RAND_MAX) * 16 - 8);
						g[i] = (float)(((double)rand() / RAND_MAX) * 2 - 1);
					}
					o[off + n] = 12345.0f;
					/* gelu_backward / silu_backward take (grad, input) */
					CHECK(nk_act_f32_avx512(op, ia, o + off, bin ? g : x, bin ? x : NULL, n, stream), "act op %d", op);
					if (stream)
						nk_stream_fence();
					CHECK(o[off + n] == 12345.0f, "act op %d n=%lld: wrote past the end", op, (long long)n);
					for (int64_t i = 0; i < n; i++) {
						double ref = act_double(op, ia, g[i], x[i]), got = o[off + i];
						/* gelu (both forms) and its backward: 2 ulp of the result plus 2^-24 |x| |g| (the
						 * tables' absolute error is < 1.6e-8, far below what PyTorch's own f32 sum
						 * 1 + erf rounds away for x < 0); silu: a few ulp, plus the f32 rounding of 1 + ... */
						double tol = op == NK_OP_SILU || op == NK_OP_SILU_BACKWARD
							? 4 * ulp_f(ref) + 2.4e-7 * fabs(x[i]) * (bin ? fabs(g[i]) + 1e-30 : 1) + 1e-37
							: 2 * ulp_f(ref) + 6e-8 * fabs(x[i]) * (bin ? fabs(g[i]) : 1) + 1e-37;

						double e = fabs(got - ref) / tol;

						if (!(e <= worst))
							worst = e;
					}
					CHECK(worst <= 1, "act op %d ia %d n=%lld stream=%d: error %g of tolerance", op, ia, (long long)n, stream,
					      worst);
				}
	/* NaN passes, infinities as the formulas */
	float xs[4] = { NAN, INFINITY, -INFINITY, 0 }, os[4], gs[4] = { 1, 1, 1, 1 };

	for (int ia = 0; ia < 2; ia++) {
		nk_act_f32_avx512(NK_OP_GELU, ia, os, xs, NULL, 4, false);
		/* (-inf * 0 in the formula: NaN, as PyTorch's; +inf is the limit) */
		CHECK(isnan(os[0]) && os[1] == INFINITY && isnan(os[2]) && os[3] == 0, "gelu ia %d (nan, inf, -inf, 0) = %g %g %g %g",
		      ia, os[0], os[1], os[2], os[3]);
		nk_act_f32_avx512(NK_OP_GELU_BACKWARD, ia, os, gs, xs, 4, false);
		/* the backward: NaN at both infinities, as PyTorch's (inf * 0); the tanh form also where x^2
		 * overflows (checked in test_pointwise against the scalar formula) */
		CHECK(isnan(os[0]) && isnan(os[1]) && isnan(os[2]) && os[3] == 0.5f, "gelu' ia %d (nan, inf, -inf, 0) = %g %g %g %g",
		      ia, os[0], os[1], os[2], os[3]);
	}
	/* far tails: exactly x and -0 (gelu), 1 and 0 (its derivative), at every interval edge nearby */
	for (float v = 4.0f; v < 40.0f; v += 1.0f / 64) {
		float pv[2] = { v, -v }, po[2], pg[2] = { 1, 1 };

		for (int ia = 0; ia < 2; ia++) {
			nk_act_f32_avx512(NK_OP_GELU, ia, po, pv, NULL, 2, false);
			CHECK(fabs(po[0] - act_double(NK_OP_GELU, ia, 0, v)) <= ulp_f(v) && fabs(po[1] - act_double(NK_OP_GELU, ia, 0, -v)) < 6e-8 * v && !(po[1] > 0),
			      "gelu ia %d tails at %g: %g %g", ia, v, po[0], po[1]);
			nk_act_f32_avx512(NK_OP_GELU_BACKWARD, ia, po, pg, pv, 2, false);
			CHECK(fabs(po[0] - act_double(NK_OP_GELU_BACKWARD, ia, 1, v)) < 2e-7 && fabs(po[1] - act_double(NK_OP_GELU_BACKWARD, ia, 1, -v)) < 2e-7,
			      "gelu' ia %d tails at %g: %g %g", ia, v, po[0], po[1]);
		}
	}
	nk_act_f32_avx512(NK_OP_SILU, 0, os, xs, NULL, 4, false);
	CHECK(isnan(os[0]) && os[1] == INFINITY, "silu(nan, inf) = %g %g", os[0], os[1]);
}

int main(void)
{
	nkt_seed(11);
	RUN(test_batchnorm_vs_ref);
	RUN(test_batchnorm_bwd_numerical);
	RUN(test_groupnorm_vs_ref);
	RUN(test_rmsnorm_vs_ref);
	RUN(test_act_vs_ref);
	RUN(test_act_avx512);
	RUN(test_rrelu);
	RUN(test_margin_losses);
	RUN(test_amp);
	RUN(test_errors);
	return ctest_finish();
}
