/* test_conv.c - the convolution family (nk_conv.h): the im2col+GEMM path against the direct reference
 * for every mode (forward, backward data, weight, bias) and dtype on random geometries (1-3 spatial dims,
 * groups, strides, padding, dilation, odd and zero sizes, chunked batches); the reference modes against
 * each other (adjoint identities in f64) and a hand-computed case; im2col/col2im against their reference;
 * bad arguments refused. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"

static const int dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64 };

static double atol_of(int dt)
{
	return dt == NK_F64 ? 1e-10 : dt == NK_F32 ? 1e-4 : dt == NK_BF16 ? 2e-2 : dt == NK_F16 ? 4e-3 : 0;
}

static double rtol_of(int dt)
{
	return dt == NK_F64 ? 1e-10 : dt == NK_F32 ? 1e-4 : dt == NK_BF16 ? 1.0 / 64 : dt == NK_F16 ? 1.0 / 256 : 0;
}

static void *alloc_n(int dt, int64_t n)
{
	return calloc((size_t)(n > 0 ? n : 1), nk_dtype_size(dt));
}

static void fill(void *p, int dt, int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		if (dt == NK_I64)
			((int64_t *)p)[i] = nkt_randint(-4, 5);
		else
			nk_fp_stored(p, dt, i, nkt_uniform(-1, 1));
	}
}

/* err <= 1 means within tolerance (floats); integers must match exactly. */
static double diff(const void *a, const void *b, int dt, int64_t n, double scale)
{
	if (dt == NK_I64)
		return memcmp(a, b, (size_t)(n > 0 ? n : 0) * 8) ? INFINITY : 0;
	return nkt_err(a, b, dt, n, atol_of(dt) * scale, rtol_of(dt));
}

typedef struct {
	int nsp;
	int64_t N, C, O, G, in[3], out[3], k[3], s[3], p[3], d[3];
} geom_t;

static int64_t vol(const int64_t *v, int nsp)
{
	int64_t r = 1;

	for (int i = 0; i < nsp; i++)
		r *= v[i];
	return r;
}

/* A random valid geometry; out derived from in (floor), sometimes with in enlarged (output_padding). */
static geom_t random_geom(int nsp, bool big)
{
	geom_t g = { .nsp = nsp };

	g.G = nkt_randint(1, 4);
	g.C = g.G * nkt_randint(big ? 1 : 0, big ? 9 : 4);
	g.O = g.G * nkt_randint(1, big ? 9 : 4);
	g.N = nkt_randint(big ? 1 : 0, big ? 5 : 4);
	for (int i = 0; i < nsp; i++) {
		int64_t ext;

		g.k[i] = nkt_randint(1, 4);
		g.s[i] = nkt_randint(1, 4);
		g.d[i] = nkt_randint(1, 3);
		g.p[i] = nkt_randint(0, 3);
		ext = g.d[i] * (g.k[i] - 1) + 1;
		g.in[i] = nkt_randint(nsp == 3 ? 1 : 1, (nsp == 3 ? 7 : nsp == 2 ? 12 : 40) + (big ? 20 / nsp : 0));
		if (g.in[i] + 2 * g.p[i] < ext)
			g.in[i] = ext - 2 * g.p[i] + nkt_randint(0, 3);
		if (g.in[i] < 0)
			g.in[i] = 0;
		g.out[i] = (g.in[i] + 2 * g.p[i] - ext) / g.s[i] + 1;
		if (nkt_randint(0, 4) == 0)
			g.in[i] += nkt_randint(0, g.s[i]); /* output_padding of a transposed convolution */
	}
	return g;
}

static nk_conv_args_t args_of(const geom_t *g, int mode, int dt)
{
	nk_conv_args_t a = { .mode = mode, .dtype = dt, .nsp = g->nsp, .N = g->N, .C = g->C, .O = g->O, .G = g->G };

	for (int i = 0; i < 3; i++) {
		a.in[i] = g->in[i], a.out[i] = g->out[i], a.k[i] = g->k[i];
		a.stride[i] = g->s[i], a.pad[i] = g->p[i], a.dil[i] = g->d[i];
	}
	return a;
}

/* Runs the optimized path with the workspace it asks for. */
static int run_opt(nk_conv_args_t *a)
{
	size_t ws = nk_conv_workspace(a);
	void *w = ws ? malloc(ws) : NULL;
	int rc;

	a->work = w, a->work_bytes = ws;
	rc = nk_conv_run(a);
	free(w);
	a->work = NULL, a->work_bytes = 0;
	return rc;
}

static void describe(char *buf, size_t n, const geom_t *g, int dt)
{
	snprintf(buf, n, "%s nsp=%d N=%lld C=%lld O=%lld G=%lld in=%lldx%lldx%lld out=%lldx%lldx%lld k=%lldx%lldx%lld "
		 "s=%lld,%lld,%lld p=%lld,%lld,%lld d=%lld,%lld,%lld", nkt_dtype_name(dt), g->nsp, (long long)g->N,
		 (long long)g->C, (long long)g->O, (long long)g->G, (long long)g->in[0], (long long)g->in[1],
		 (long long)g->in[2], (long long)g->out[0], (long long)g->out[1], (long long)g->out[2],
		 (long long)g->k[0], (long long)g->k[1], (long long)g->k[2], (long long)g->s[0], (long long)g->s[1],
		 (long long)g->s[2], (long long)g->p[0], (long long)g->p[1], (long long)g->p[2], (long long)g->d[0],
		 (long long)g->d[1], (long long)g->d[2]);
}

static void check_geom(const geom_t *g, int dt)
{
	int64_t kv = vol(g->k, g->nsp), nx = g->N * g->C * vol(g->in, g->nsp), ny = g->N * g->O * vol(g->out, g->nsp);
	int64_t nw = g->O * (g->C / g->G) * kv;
	void *x = alloc_n(dt, nx), *w = alloc_n(dt, nw), *bo = alloc_n(dt, g->O), *bc = alloc_n(dt, g->C);
	void *dy = alloc_n(dt, ny), *r0 = alloc_n(dt, nx + ny + nw + g->O), *r1 = alloc_n(dt, nx + ny + nw + g->O);
	/* products of K terms: scale the absolute tolerance with sqrt(K) */
	double sk = sqrt((double)((g->C / g->G) * kv + 1)), e;
	char what[512];
	nk_conv_args_t a;

	describe(what, sizeof what, g, dt);
	fill(x, dt, nx), fill(w, dt, nw), fill(bo, dt, g->O), fill(bc, dt, g->C), fill(dy, dt, ny);

	for (int bias = 0; bias < 2; bias++) {
		a = args_of(g, NK_CONV_FWD, dt);
		a.x = x, a.w = w, a.b = bias ? bo : NULL, a.y = r0;
		CHECK(nk_conv_ref(&a) == 0, "fwd ref %s", what);
		a.y = r1;
		memset(r1, 0xff, (size_t)(ny > 0 ? ny : 1) * nk_dtype_size(dt)); /* everything must be written */
		CHECK(run_opt(&a) == 0, "fwd run %s", what);
		e = diff(r1, r0, dt, ny, sk);
		CHECK(e <= 1, "fwd bias=%d %s: err %g", bias, what, e);

		a = args_of(g, NK_CONV_BWD_DATA, dt);
		a.dy = dy, a.w = w, a.b = bias ? bc : NULL, a.dx = r0;
		CHECK(nk_conv_ref(&a) == 0, "bwd data ref %s", what);
		a.dx = r1;
		memset(r1, 0xff, (size_t)(nx > 0 ? nx : 1) * nk_dtype_size(dt));
		CHECK(run_opt(&a) == 0, "bwd data run %s", what);
		e = diff(r1, r0, dt, nx, sqrt((double)(g->O / g->G * kv + 1)));
		CHECK(e <= 1, "bwd data bias=%d %s: err %g", bias, what, e);
	}

	a = args_of(g, NK_CONV_BWD_WEIGHT, dt);
	a.dy = dy, a.x = x, a.dw = r0;
	CHECK(nk_conv_ref(&a) == 0, "bwd weight ref %s", what);
	a.dw = r1;
	memset(r1, 0xff, (size_t)(nw > 0 ? nw : 1) * nk_dtype_size(dt));
	CHECK(run_opt(&a) == 0, "bwd weight run %s", what);
	e = diff(r1, r0, dt, nw, sqrt((double)(g->N * vol(g->out, g->nsp) + 1)));
	CHECK(e <= 1, "bwd weight %s: err %g", what, e);

	a = args_of(g, NK_CONV_BWD_BIAS, dt);
	a.dy = dy, a.db = r0;
	CHECK(nk_conv_ref(&a) == 0, "bwd bias ref %s", what);
	a.db = r1;
	CHECK(run_opt(&a) == 0, "bwd bias run %s", what);
	e = diff(r1, r0, dt, g->O, sqrt((double)(g->N * vol(g->out, g->nsp) + 1)));
	CHECK(e <= 1, "bwd bias %s: err %g", what, e);

	free(x), free(w), free(bo), free(bc), free(dy), free(r0), free(r1);
}

static void test_conv_vs_ref(void)
{
	int iters = NK_TEST_SMALL ? 4 : 15;

	for (int di = 0; di < 5; di++)
		for (int nsp = 1; nsp <= 3; nsp++)
			for (int it = 0; it < iters; it++) {
				geom_t g = random_geom(nsp, it % 5 == 4 && !NK_TEST_SMALL);

				check_geom(&g, dtypes[di]);
			}
}

/* [h-cnn] f32 shapes of conv_avx512.c's implicit GEMM: several 14-row weight panels, partial 32-position
 * tiles, groups, padding, dilation, stride (forward) and stride-1 backward data; plus one sample of the
 * benchmark CNN's middle layer. */
static void test_conv_implicit(void)
{
	static const geom_t gs[] = {
		{ .nsp = 2, .N = 3, .C = 5, .O = 31, .G = 1, .in = { 11, 13 }, .out = { 11, 13 }, .k = { 3, 3 },
		  .s = { 1, 1 }, .p = { 1, 1 }, .d = { 1, 1 } },
		{ .nsp = 2, .N = 2, .C = 6, .O = 30, .G = 3, .in = { 9, 17 }, .out = { 5, 13 }, .k = { 3, 3 },
		  .s = { 1, 1 }, .p = { 0, 0 }, .d = { 2, 2 } },
		{ .nsp = 2, .N = 2, .C = 4, .O = 15, .G = 1, .in = { 10, 21 }, .out = { 5, 11 }, .k = { 3, 3 },
		  .s = { 2, 2 }, .p = { 1, 1 }, .d = { 1, 1 } },
		{ .nsp = 1, .N = 2, .C = 3, .O = 17, .G = 1, .in = { 70 }, .out = { 68 }, .k = { 5 },
		  .s = { 1 }, .p = { 1 }, .d = { 1 } },
		{ .nsp = 3, .N = 1, .C = 2, .O = 16, .G = 2, .in = { 4, 5, 6 }, .out = { 4, 5, 6 }, .k = { 3, 3, 3 },
		  .s = { 1, 1, 1 }, .p = { 1, 1, 1 }, .d = { 1, 1, 1 } },
		{ .nsp = 2, .N = 2, .C = 32, .O = 64, .G = 1, .in = { 16, 16 }, .out = { 16, 16 }, .k = { 3, 3 },
		  .s = { 1, 1 }, .p = { 1, 1 }, .d = { 1, 1 } },
	};

	for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
		check_geom(&gs[i], NK_F32);
}

/* Batches larger than one workspace chunk: a sample of 2.2M positions forces nb < N. */
static void test_conv_chunked(void)
{
	geom_t g = { .nsp = 3, .N = 3, .C = 1, .O = 1, .G = 1, .in = { 130, 130, 130 }, .k = { 1, 1, 1 },
		     .s = { 1, 1, 1 }, .p = { 0, 0, 0 }, .d = { 1, 1, 1 } };
	nk_conv_args_t a;

	g.out[0] = g.out[1] = g.out[2] = 130;
	a = args_of(&g, NK_CONV_FWD, NK_F32);
	nk_conv_workspace(&a);
	CHECK(a.nb >= 1 && a.nb < g.N, "chunking expected, nb = %lld", (long long)a.nb);
	check_geom(&g, NK_F32);
}

/* One sample larger than the workspace cap: output-row tiles (nb = 1; backward data accumulates the tiles
 * of a sample in a compute-dtype buffer, rounded once). */
static void test_conv_tiled(void)
{
	int64_t n = NK_TEST_SMALL ? 100 : 110;
	geom_t g = { .nsp = 3, .N = 2, .C = 1, .O = 1, .G = 1, .in = { n, n, n }, .k = { 3, 3, 3 },
		     .s = { 1, 1, 2 }, .p = { 1, 0, 2 }, .d = { 1, 2, 1 } };
	nk_conv_args_t a;
	size_t ws;

	for (int i = 0; i < 3; i++)
		g.out[i] = (g.in[i] + 2 * g.p[i] - g.d[i] * (g.k[i] - 1) - 1) / g.s[i] + 1;
	a = args_of(&g, NK_CONV_BWD_DATA, NK_F32);
	ws = nk_conv_workspace(&a);
	CHECK(a.nb == 1 && ws < (size_t)(28 * vol(g.out, 3) * 4), "tiling expected: nb %lld, workspace %zu",
	      (long long)a.nb, ws);
	check_geom(&g, NK_F32);
	check_geom(&g, NK_BF16);
}

/* sum(conv(x, w) * dy) == sum(x * bwd_data(dy, w)) == sum(w * bwd_weight(x, dy)), and db == sum dy: the
 * reference's modes are adjoint to each other (f64). */
static void test_conv_adjoint(void)
{
	for (int it = 0; it < 30; it++) {
		geom_t g = random_geom(1 + it % 3, false);
		int64_t kv = vol(g.k, g.nsp), nx = g.N * g.C * vol(g.in, g.nsp), ny = g.N * g.O * vol(g.out, g.nsp);
		int64_t nw = g.O * (g.C / g.G) * kv;
		double *x = alloc_n(NK_F64, nx), *w = alloc_n(NK_F64, nw), *dy = alloc_n(NK_F64, ny);
		double *y = alloc_n(NK_F64, ny), *dx = alloc_n(NK_F64, nx), *dw = alloc_n(NK_F64, nw);
		double s0 = 0, s1 = 0, s2 = 0;
		nk_conv_args_t a;

		fill(x, NK_F64, nx), fill(w, NK_F64, nw), fill(dy, NK_F64, ny);
		a = args_of(&g, NK_CONV_FWD, NK_F64), a.x = x, a.w = w, a.y = y;
		nk_conv_ref(&a);
		a = args_of(&g, NK_CONV_BWD_DATA, NK_F64), a.dy = dy, a.w = w, a.dx = dx;
		nk_conv_ref(&a);
		a = args_of(&g, NK_CONV_BWD_WEIGHT, NK_F64), a.dy = dy, a.x = x, a.dw = dw;
		nk_conv_ref(&a);
		for (int64_t i = 0; i < ny; i++)
			s0 += y[i] * dy[i];
		for (int64_t i = 0; i < nx; i++)
			s1 += x[i] * dx[i];
		for (int64_t i = 0; i < nw; i++)
			s2 += w[i] * dw[i];
		CHECK(fabs(s0 - s1) < 1e-9 * (1 + fabs(s0)) && fabs(s0 - s2) < 1e-9 * (1 + fabs(s0)),
		      "adjoint: %g %g %g", s0, s1, s2);
		free(x), free(w), free(dy), free(y), free(dx), free(dw);
	}
}

/* 1-d, stride 2, pad 1, dilation 2: y[q] = sum_j x[2q - 1 + 2j] w[j]. */
static void test_conv_hand(void)
{
	float x[7] = { 1, 2, 3, 4, 5, 6, 7 }, w[2] = { 10, 1 }, b = 0.5f, y[4], want[4];
	nk_conv_args_t a = { .mode = NK_CONV_FWD, .dtype = NK_F32, .nsp = 1, .N = 1, .C = 1, .O = 1, .G = 1,
			     .in = { 7 }, .out = { 4 }, .k = { 2 }, .stride = { 2 }, .pad = { 1 }, .dil = { 2 },
			     .x = x, .w = w, .b = &b, .y = y };

	/* q=0: x[-1]*10 + x[1]*1 = 2; q=1: x[1]*10 + x[3] = 24; q=2: x[3]*10 + x[5] = 46; q=3: x[5]*10 + x[7]=0 */
	want[0] = 2.5f, want[1] = 24.5f, want[2] = 46.5f, want[3] = 60.5f;
	CHECK(run_opt(&a) == 0, "run");
	for (int i = 0; i < 4; i++)
		CHECK(y[i] == want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	memset(y, 0, sizeof y);
	CHECK(nk_conv_ref(&a) == 0, "ref");
	for (int i = 0; i < 4; i++)
		CHECK(y[i] == want[i], "ref y[%d] = %g, want %g", i, y[i], want[i]);
}

static void test_im2col(void)
{
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_U8 };

	for (int di = 0; di < 6; di++)
		for (int it = 0; it < 20; it++) {
			int dt = dts[di], nsp = 1 + it % 3;
			geom_t g = random_geom(nsp, false);
			int64_t kv = vol(g.k, nsp), ni = g.N * g.C * vol(g.in, nsp), nc = g.N * g.C * kv * vol(g.out, nsp);
			void *img = alloc_n(dt, ni), *col = alloc_n(dt, nc), *r0 = alloc_n(dt, ni + nc), *r1 = alloc_n(dt, ni + nc);
			nk_im2col_args_t a = { .dtype = dt, .nsp = nsp, .N = g.N, .C = g.C };
			char what[512];
			int fdt = dt == NK_U8 ? NK_I64 : dt;

			describe(what, sizeof what, &g, dt);
			for (int i = 0; i < 3; i++) {
				a.in[i] = g.in[i], a.out[i] = g.out[i], a.k[i] = g.k[i];
				a.stride[i] = g.s[i], a.pad[i] = g.p[i], a.dil[i] = g.d[i];
			}
			if (dt == NK_U8) {
				for (int64_t i = 0; i < ni; i++)
					((uint8_t *)img)[i] = (uint8_t)nkt_randint(0, 256);
				for (int64_t i = 0; i < nc; i++)
					((uint8_t *)col)[i] = (uint8_t)nkt_randint(0, 256);
			} else {
				fill(img, fdt, ni), fill(col, fdt, nc);
			}
			a.src = img, a.dst = r0;
			CHECK(nk_im2col_ref(&a) == 0, "im2col ref");
			a.dst = r1;
			memset(r1, 0xff, (size_t)(nc > 0 ? nc : 1) * nk_dtype_size(dt));
			CHECK(nk_im2col_run(&a) == 0, "im2col run");
			CHECK(!memcmp(r0, r1, (size_t)nc * nk_dtype_size(dt)), "im2col %s", what);

			a.col2im = true, a.src = col, a.dst = r0;
			CHECK(nk_im2col_ref(&a) == 0, "col2im ref");
			a.dst = r1;
			memset(r1, 0xff, (size_t)(ni > 0 ? ni : 1) * nk_dtype_size(dt));
			CHECK(nk_im2col_run(&a) == 0, "col2im run");
			if (dt == NK_U8)
				CHECK(!memcmp(r0, r1, (size_t)ni), "col2im %s", what);
			else
				CHECK(diff(r1, r0, dt, ni, sqrt((double)kv)) <= 1, "col2im %s", what);
			free(img), free(col), free(r0), free(r1);
		}
}

static void test_conv_errors(void)
{
	float x[4], w[4], y[4];
	nk_conv_args_t a = { .mode = NK_CONV_FWD, .dtype = NK_F32, .nsp = 1, .N = 1, .C = 3, .O = 2, .G = 2,
			     .in = { 4 }, .out = { 4 }, .k = { 1 }, .stride = { 1 }, .pad = { 0 }, .dil = { 1 },
			     .x = x, .w = w, .y = y };

	CHECK(nk_conv_run(&a) != 0 && nk_conv_ref(&a) != 0, "C not divisible by groups is refused");
	a.C = 2, a.stride[0] = 0;
	CHECK(nk_conv_run(&a) != 0, "stride 0 is refused");
	a.stride[0] = 1, a.nsp = 4;
	CHECK(nk_conv_run(&a) != 0, "4 spatial dims are refused");
	a.nsp = 1, a.mode = 7;
	CHECK(nk_conv_run(&a) != 0, "bad mode is refused");
	a.mode = NK_CONV_FWD, a.y = NULL;
	CHECK(nk_conv_run(&a) != 0, "missing output is refused");
	a.y = y, a.C = 8, a.O = 8, a.in[0] = 100, a.out[0] = 100;
	CHECK(nk_conv_workspace(&a) > 0 && nk_conv_run(&a) != 0, "missing workspace is refused");
}

int main(void)
{
	nkt_seed(11);
	RUN(test_conv_hand);
	RUN(test_conv_adjoint);
	RUN(test_conv_vs_ref);
	RUN(test_conv_implicit);
	RUN(test_conv_chunked);
	RUN(test_conv_tiled);
	RUN(test_im2col);
	RUN(test_conv_errors);
	return ctest_finish();
}
