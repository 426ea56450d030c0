/* test_norm.c - batch norm, group norm, rms norm and weight norm (batchnorm.c, rmsnorm.c, weight_norm.c)
 * against their references
 * for every float dtype (and the mixed bf16/f16 input with f32 parameters), on random odd shapes incl.
 * zero-size; batch/group norm backward against central differences in f64; bad input fails cleanly.
 * Layer norm is tested in test_layernorm.c. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nk_weight_norm.h"
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

/* weight norm: the threaded run equals the one-d-at-a-time reference exactly (fixed-order double sums);
 * f64 gradients against central differences of L = sum(w * c) */
static void test_weight_norm(void)
{
	static const int64_t shapes[][3] = { { 1, 7, 33 }, { 40, 5, 1 }, { 1, 100, 3 }, { 0, 4, 1 }, { 3, 0, 2 } };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			int dt = dtypes[d], ndt = dt == NK_F64 ? NK_F64 : NK_F32;
			int64_t O = shapes[s][0], D = shapes[s][1], I = shapes[s][2], n = O * D * I;
			void *v = nkt_alloc(dt, n), *g = nkt_alloc(dt, D), *w0 = nkt_alloc(dt, n), *w1 = nkt_alloc(dt, n);
			void *n0 = nkt_alloc(ndt, D), *n1 = nkt_alloc(ndt, D), *gw = nkt_alloc(dt, n);
			void *gv0 = nkt_alloc(dt, n), *gv1 = nkt_alloc(dt, n), *gg0 = nkt_alloc(dt, D), *gg1 = nkt_alloc(dt, D);

			nkt_fill(v, dt, n, -2, 2);
			nkt_fill(g, dt, D, 0.5, 1.5);
			nkt_fill(gw, dt, n, -1, 1);
			nk_weight_norm_args_t f = { .dtype = dt, .ndtype = ndt, .outer = O, .D = D, .inner = I, .v = v, .g = g, .w = w0, .norm = n0 };
			CHECK(nk_weight_norm_ref(&f) == 0, "wn ref");
			f.w = w1, f.norm = n1;
			CHECK(nk_weight_norm_run(&f) == 0, "wn run");
			CHECK(nkt_err(w1, w0, dt, n, 0, 0) + nkt_err(n1, n0, ndt, D, 0, 0) == 0, "wn %s %lldx%lldx%lld: run != ref",
			      nkt_dtype_name(dt), (long long)O, (long long)D, (long long)I);
			nk_weight_norm_bwd_args_t b = { .dtype = dt, .ndtype = ndt, .outer = O, .D = D, .inner = I, .gw = gw, .v = v, .g = g,
							.norm = n0, .gv = gv0, .gg = gg0 };
			CHECK(nk_weight_norm_bwd_ref(&b) == 0, "wn bwd ref");
			b.gv = gv1, b.gg = gg1;
			CHECK(nk_weight_norm_bwd_run(&b) == 0, "wn bwd run");
			CHECK(nkt_err(gv1, gv0, dt, n, 0, 0) + nkt_err(gg1, gg0, dt, D, 0, 0) == 0, "wn bwd %s: run != ref", nkt_dtype_name(dt));
			if (dt == NK_F64 && n > 0 && n < 1000) {
				double *vv = v, *gd = g, *c = gw, h = 1e-6;
				for (int64_t k = 0; k < n + D; k++) {
					double *p = k < n ? &vv[k] : &gd[k - n], keep = *p, lp = 0, lm = 0;
					*p = keep + h;
					f.w = w1, f.norm = n1;
					nk_weight_norm_ref(&f);
					for (int64_t i = 0; i < n; i++)
						lp += ((double *)w1)[i] * c[i];
					*p = keep - h;
					nk_weight_norm_ref(&f);
					for (int64_t i = 0; i < n; i++)
						lm += ((double *)w1)[i] * c[i];
					*p = keep;
					double num = (lp - lm) / (2 * h), got = k < n ? ((double *)gv0)[k] : ((double *)gg0)[k - n];
					CHECK(fabs(num - got) < 1e-6, "wn grad[%lld]: %g vs %g", (long long)k, num, got);
				}
			}
			free(v), free(g), free(w0), free(w1), free(n0), free(n1), free(gw), free(gv0), free(gv1), free(gg0), free(gg1);
		}
	nk_weight_norm_args_t bad = { .dtype = NK_F32, .ndtype = NK_F64, .outer = 1, .D = 1, .inner = 1 };
	CHECK(nk_weight_norm_run(&bad) != 0, "an f64 norm for f32 v is refused");
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

int main(void)
{
	nkt_seed(11);
	RUN(test_batchnorm_vs_ref);
	RUN(test_batchnorm_bwd_numerical);
	RUN(test_groupnorm_vs_ref);
	RUN(test_rmsnorm_vs_ref);
	RUN(test_weight_norm);
	RUN(test_errors);
	return ctest_finish();
}
