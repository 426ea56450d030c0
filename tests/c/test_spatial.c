/* test_spatial.c - the spatial family (pool.c, upsample.c, pad.c) against naive formulations written
 * here from the definitions: max/avg/adaptive pooling (values, first-max indices, NaN), the backward
 * kernels through the adjoint identity <F(x), g> = <x, F^T(g)> (an independent check of every scatter),
 * unpooling, nearest/linear/cubic interpolation, reflect/replicate padding (incl. negative pads);
 * _run against _ref; odd sizes, zero-size planes, f32/f64/bf16/f16 and integer dtypes; bad indices and
 * bad geometry fail cleanly. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static size_t esz(int dt)
{
	switch (dt) {
	case NK_F64: case NK_I64: return 8;
	case NK_F32: case NK_I32: return 4;
	case NK_F16: case NK_BF16: case NK_I16: return 2;
	default: return 1;
	}
}

static bool isflt(int dt)
{
	return dt == NK_F32 || dt == NK_F64 || dt == NK_BF16 || dt == NK_F16;
}

static double tget(const void *p, int dt, int64_t i)
{
	switch (dt) {
	case NK_I64: return (double)((const int64_t *)p)[i];
	case NK_I32: return ((const int32_t *)p)[i];
	case NK_I16: return ((const int16_t *)p)[i];
	case NK_I8: return ((const int8_t *)p)[i];
	case NK_U8: return ((const uint8_t *)p)[i];
	default: return nkt_get(p, dt, i);
	}
}

static void tset(void *p, int dt, int64_t i, double v)
{
	switch (dt) {
	case NK_I64: ((int64_t *)p)[i] = (int64_t)v; break;
	case NK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
	case NK_I16: ((int16_t *)p)[i] = (int16_t)v; break;
	case NK_I8: ((int8_t *)p)[i] = (int8_t)v; break;
	case NK_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
	default: nk_fp_stored(p, dt, i, v); break;
	}
}

static void *talloc(int dt, int64_t n)
{
	return calloc((size_t)(n > 0 ? n : 1), esz(dt));
}

/* Random values: small integers for integer dtypes (many ties), uniform for floats. */
static void tfill(void *p, int dt, int64_t n, bool nan)
{
	for (int64_t i = 0; i < n; i++) {
		double v = isflt(dt) ? nkt_uniform(-2, 2) : (double)nkt_randint(dt == NK_U8 ? 0 : -5, 6);

		if (nan && nkt_randint(0, 17) == 0)
			v = NAN;
		tset(p, dt, i, v);
	}
}

static const char *dtn(int dt)
{
	return nk_dtype_name(dt);
}

static double dot(const void *a, const void *b, int dt, int64_t n)
{
	double s = 0;

	for (int64_t i = 0; i < n; i++)
		s += tget(a, dt, i) * tget(b, dt, i);
	return s;
}

static double asum(const void *a, int dt, int64_t n)
{
	double s = 0;

	for (int64_t i = 0; i < n; i++)
		s += fabs(tget(a, dt, i));
	return s;
}

/* ---- pooling ----------------------------------------------------------------------------------- */

typedef struct {
	int64_t NC, in[3], k[3], s[3], p[3], dil[3];
	bool ceil;
	bool ties; /* float inputs drawn from a few values (and -inf): ties and all--inf windows */
} pcase_t;

static int64_t pool_osize(int64_t I, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil)
{
	int64_t num = I + 2 * p - dil * (k - 1) - 1 + (ceil ? s - 1 : 0);
	int64_t o = num / s + 1;

	if (ceil && (o - 1) * s >= I + p)
		o--;
	return o;
}

/* Naive max pooling of one output: scan the kernel offsets in order. */
static void naive_max(const void *x, int dt, const pcase_t *c, const int64_t o3[3], double *val, int64_t *idx)
{
	double best = -INFINITY;
	int64_t bi = -1;

	for (int64_t a = 0; a < c->k[0]; a++)
		for (int64_t b = 0; b < c->k[1]; b++)
			for (int64_t e = 0; e < c->k[2]; e++) {
				int64_t i0 = o3[0] * c->s[0] - c->p[0] + a * c->dil[0];
				int64_t i1 = o3[1] * c->s[1] - c->p[1] + b * c->dil[1];
				int64_t i2 = o3[2] * c->s[2] - c->p[2] + e * c->dil[2];
				int64_t k;
				double v;

				if (i0 < 0 || i0 >= c->in[0] || i1 < 0 || i1 >= c->in[1] || i2 < 0 || i2 >= c->in[2])
					continue;
				k = (i0 * c->in[1] + i1) * c->in[2] + i2;
				v = tget(x, dt, k);
				if (bi < 0 || v > best || isnan(v))
					best = v, bi = k;
			}
	*val = best, *idx = bi;
}

static void check_max_pool(int dt, const pcase_t *c)
{
	int64_t out[3], ipl = c->in[0] * c->in[1] * c->in[2], opl;
	nk_pool_args_t a = { .dtype = dt, .mode = NK_POOL_MAX, .NC = c->NC };

	for (int d = 0; d < 3; d++) {
		out[d] = pool_osize(c->in[d], c->k[d], c->s[d], c->p[d], c->dil[d], c->ceil);
		a.in[d] = c->in[d], a.out[d] = out[d], a.k[d] = c->k[d], a.s[d] = c->s[d], a.p[d] = c->p[d];
		a.dil[d] = c->dil[d];
	}
	opl = out[0] * out[1] * out[2];
	void *x = talloc(dt, c->NC * ipl), *y = talloc(dt, c->NC * opl), *y2 = talloc(dt, c->NC * opl);
	int64_t *ix = calloc((size_t)(c->NC * opl + 1), 8), *ix2 = calloc((size_t)(c->NC * opl + 1), 8);
	bool ok = true;

	tfill(x, dt, c->NC * ipl, isflt(dt));
	if (c->ties && isflt(dt))
		for (int64_t i = 0; i < c->NC * ipl; i++) {
			int r = nkt_randint(0, 40);

			tset(x, dt, i, r == 0 ? NAN : r < 20 ? -INFINITY : (double)(r % 3));
		}
	a.x = x, a.y = y, a.idx = ix;
	CHECK(nk_pool_run(&a) == 0, "max pool run");
	a.y = y2, a.idx = ix2;
	CHECK(nk_pool_ref(&a) == 0, "max pool ref");
	CHECK(!memcmp(y, y2, (size_t)(c->NC * opl) * esz(dt)) && !memcmp(ix, ix2, (size_t)(c->NC * opl) * 8), "max pool run == ref");
	for (int64_t nc = 0; nc < c->NC; nc++)
		for (int64_t o = 0; o < opl; o++) {
			int64_t o3[3] = { o / (out[1] * out[2]), o / out[2] % out[1], o % out[2] }, bi;
			double v, got = tget(y, dt, nc * opl + o);

			naive_max((char *)x + (size_t)(nc * ipl) * esz(dt), dt, c, o3, &v, &bi);
			if (ix[nc * opl + o] != bi || !(got == v || (isnan(got) && isnan(v))))
				ok = false;
		}
	CHECK(ok, "max pool %s NC=%lld in=%lldx%lldx%lld k=%lld s=%lld p=%lld dil=%lld ceil=%d", dtn(dt), (long long)c->NC,
	      (long long)c->in[0], (long long)c->in[1], (long long)c->in[2], (long long)c->k[2], (long long)c->s[2],
	      (long long)c->p[2], (long long)c->dil[2], c->ceil);

	if (isflt(dt)) { /* backward: <gather(x, idx), g> = <x, scatter(g, idx)> */
		void *g = talloc(dt, c->NC * opl), *gx = talloc(dt, c->NC * ipl), *gx2 = talloc(dt, c->NC * ipl);
		nk_pool_bwd_args_t b = { .dtype = dt, .mode = NK_POOL_MAX, .NC = c->NC, .gy = g, .idx = ix, .gx = gx };
		double lhs = 0, rhs;

		memcpy(b.in, a.in, sizeof a.in), memcpy(b.out, a.out, sizeof a.out), memcpy(b.k, a.k, sizeof a.k);
		memcpy(b.s, a.s, sizeof a.s), memcpy(b.p, a.p, sizeof a.p), memcpy(b.dil, a.dil, sizeof a.dil);
		tfill(g, dt, c->NC * opl, false);
		tfill(x, dt, c->NC * ipl, false);
		CHECK(nk_pool_bwd_run(&b) == 0, "max pool bwd run");
		b.gx = gx2;
		CHECK(nk_pool_bwd_ref(&b) == 0, "max pool bwd ref");
		CHECK(!memcmp(gx, gx2, (size_t)(c->NC * ipl) * esz(dt)), "max pool bwd run == ref");
		for (int64_t nc = 0; nc < c->NC; nc++)
			for (int64_t o = 0; o < opl; o++)
				lhs += tget(x, dt, nc * ipl + ix[nc * opl + o]) * tget(g, dt, nc * opl + o);
		rhs = dot(x, gx, dt, c->NC * ipl);
		CHECK(fabs(lhs - rhs) <= (dt == NK_F64 ? 1e-10 : dt == NK_F32 ? 1e-4 : 3e-2) * (asum(g, dt, c->NC * opl) * 2 + 1),
		      "max pool bwd adjoint %s: %g vs %g", dtn(dt), lhs, rhs);
		free(g), free(gx), free(gx2);
	}
	free(x), free(y), free(y2), free(ix), free(ix2);
}

static void check_avg_pool(int dt, const pcase_t *c, bool cip, int64_t divisor, bool adaptive, const int64_t *aout)
{
	int64_t out[3], ipl = c->in[0] * c->in[1] * c->in[2], opl;
	nk_pool_args_t a = { .dtype = dt, .mode = adaptive ? NK_POOL_ADAPTIVE_AVG : NK_POOL_AVG, .NC = c->NC,
			     .count_include_pad = cip, .divisor = divisor };
	double tol = dt == NK_F64 ? 1e-12 : dt == NK_F32 ? 1e-5 : dt == NK_BF16 ? 1e-2 : 2e-3;

	for (int d = 0; d < 3; d++) {
		out[d] = adaptive ? aout[d] : pool_osize(c->in[d], c->k[d], c->s[d], c->p[d], 1, c->ceil);
		a.in[d] = c->in[d], a.out[d] = out[d], a.k[d] = c->k[d], a.s[d] = c->s[d], a.p[d] = c->p[d], a.dil[d] = 1;
	}
	opl = out[0] * out[1] * out[2];
	void *x = talloc(dt, c->NC * ipl), *y = talloc(dt, c->NC * opl), *y2 = talloc(dt, c->NC * opl);
	double worst = 0;

	tfill(x, dt, c->NC * ipl, false);
	a.x = x, a.y = y;
	CHECK(nk_pool_run(&a) == 0, "avg pool run");
	a.y = y2;
	CHECK(nk_pool_ref(&a) == 0, "avg pool ref");
	CHECK(!memcmp(y, y2, (size_t)(c->NC * opl) * esz(dt)), "avg pool run == ref");
	/* naive: the window as a set of (clipped) input positions, the divisor from its definition */
	for (int64_t nc = 0; nc < c->NC; nc++)
		for (int64_t o = 0; o < opl; o++) {
			int64_t o3[3] = { o / (out[1] * out[2]), o / out[2] % out[1], o % out[2] }, lo[3], hi[3], cnt = 1, padcnt = 1;
			double s = 0, ref, got = tget(y, dt, nc * opl + o);

			for (int d = 0; d < 3; d++) {
				if (adaptive) {
					lo[d] = (int64_t)floor((double)(o3[d] * c->in[d]) / (double)out[d]);
					hi[d] = (int64_t)ceil((double)((o3[d] + 1) * c->in[d]) / (double)out[d]);
					padcnt *= hi[d] - lo[d];
				} else {
					int64_t l = o3[d] * c->s[d] - c->p[d], h = l + c->k[d];

					h = h < c->in[d] + c->p[d] ? h : c->in[d] + c->p[d];
					padcnt *= h - l;
					lo[d] = l < 0 ? 0 : l, hi[d] = h < c->in[d] ? h : c->in[d];
				}
				cnt *= hi[d] - lo[d];
			}
			for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
				for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
					for (int64_t i2 = lo[2]; i2 < hi[2]; i2++)
						s += tget(x, dt, nc * ipl + (i0 * c->in[1] + i1) * c->in[2] + i2);
			if (!isflt(dt))
				ref = (double)((int64_t)s / (divisor ? divisor : cip ? padcnt : cnt));
			else
				ref = s / (double)(adaptive ? cnt : divisor ? divisor : cip ? padcnt : cnt);
			worst = fmax(worst, fabs(got - ref) / (tol * (1 + fabs(ref))));
		}
	CHECK(worst <= 1, "%savg pool %s NC=%lld in=%lldx%lldx%lld cip=%d div=%lld: err %g", adaptive ? "adaptive " : "", dtn(dt),
	      (long long)c->NC, (long long)c->in[0], (long long)c->in[1], (long long)c->in[2], cip, (long long)divisor, worst);

	if (isflt(dt)) { /* backward adjoint: <avg(x), g> = <x, avg^T(g)> */
		void *g = talloc(dt, c->NC * opl), *gx = talloc(dt, c->NC * ipl), *gx2 = talloc(dt, c->NC * ipl);
		nk_pool_bwd_args_t b = { .dtype = dt, .mode = a.mode, .NC = c->NC, .count_include_pad = cip, .divisor = divisor,
					 .gy = g, .gx = gx };
		double lhs, rhs;

		memcpy(b.in, a.in, sizeof a.in), memcpy(b.out, a.out, sizeof a.out), memcpy(b.k, a.k, sizeof a.k);
		memcpy(b.s, a.s, sizeof a.s), memcpy(b.p, a.p, sizeof a.p), memcpy(b.dil, a.dil, sizeof a.dil);
		tfill(g, dt, c->NC * opl, false);
		CHECK(nk_pool_bwd_run(&b) == 0, "avg pool bwd run");
		b.gx = gx2;
		CHECK(nk_pool_bwd_ref(&b) == 0, "avg pool bwd ref");
		CHECK(!memcmp(gx, gx2, (size_t)(c->NC * ipl) * esz(dt)), "avg pool bwd run == ref");
		lhs = dot(y, g, dt, c->NC * opl), rhs = dot(x, gx, dt, c->NC * ipl);
		CHECK(fabs(lhs - rhs) <= 4 * tol * (asum(g, dt, c->NC * opl) * 2 + 1), "avg pool bwd adjoint %s: %g vs %g", dtn(dt), lhs, rhs);
		free(g), free(gx), free(gx2);
	}
	free(x), free(y), free(y2);
}

static void check_adaptive_max(int dt, int64_t NC, const int64_t in[3], const int64_t out[3])
{
	int64_t ipl = in[0] * in[1] * in[2], opl = out[0] * out[1] * out[2];
	void *x = talloc(dt, NC * ipl), *y = talloc(dt, NC * opl);
	int64_t *ix = calloc((size_t)(NC * opl + 1), 8);
	nk_pool_args_t a = { .dtype = dt, .mode = NK_POOL_ADAPTIVE_MAX, .NC = NC, .x = x, .y = y, .idx = ix };
	bool ok = true;

	memcpy(a.in, in, sizeof a.in), memcpy(a.out, out, sizeof a.out);
	tfill(x, dt, NC * ipl, true);
	CHECK(nk_pool_run(&a) == 0, "adaptive max run");
	for (int64_t nc = 0; nc < NC; nc++)
		for (int64_t o = 0; o < opl; o++) {
			int64_t o3[3] = { o / (out[1] * out[2]), o / out[2] % out[1], o % out[2] }, bi = -1;
			double best = -INFINITY, got = tget(y, dt, nc * opl + o);
			int64_t lo[3], hi[3];

			for (int d = 0; d < 3; d++)
				lo[d] = o3[d] * in[d] / out[d], hi[d] = ((o3[d] + 1) * in[d] + out[d] - 1) / out[d];
			for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
				for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
					for (int64_t i2 = lo[2]; i2 < hi[2]; i2++) {
						int64_t k = (i0 * in[1] + i1) * in[2] + i2;
						double v = tget(x, dt, nc * ipl + k);

						if (bi < 0 || v > best || isnan(v))
							best = v, bi = k;
					}
			if (ix[nc * opl + o] != bi || !(got == best || (isnan(got) && isnan(best))))
				ok = false;
		}
	CHECK(ok, "adaptive max %s in=%lldx%lldx%lld out=%lldx%lldx%lld", dtn(dt), (long long)in[0], (long long)in[1],
	      (long long)in[2], (long long)out[0], (long long)out[1], (long long)out[2]);
	free(x), free(y), free(ix);
}

static void test_pool(void)
{
	static const pcase_t cases[] = {
		{ 3, { 1, 1, 9 }, { 1, 1, 3 }, { 1, 1, 2 }, { 0, 0, 1 }, { 1, 1, 1 }, false },
		{ 2, { 1, 7, 8 }, { 1, 3, 2 }, { 1, 2, 2 }, { 0, 1, 1 }, { 1, 1, 1 }, true },
		{ 5, { 1, 6, 5 }, { 1, 2, 3 }, { 1, 1, 2 }, { 0, 1, 1 }, { 1, 2, 1 }, true },
		{ 2, { 4, 5, 6 }, { 2, 3, 2 }, { 2, 1, 2 }, { 1, 1, 0 }, { 1, 1, 2 }, false },
		{ 1, { 5, 4, 7 }, { 3, 2, 3 }, { 1, 2, 3 }, { 1, 0, 1 }, { 2, 1, 1 }, true },
		{ 70, { 1, 33, 31 }, { 1, 3, 3 }, { 1, 2, 2 }, { 0, 1, 1 }, { 1, 1, 1 }, false }, /* parallel */
		{ 0, { 1, 4, 4 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0, 0, 0 }, { 1, 1, 1 }, false },     /* zero-size */
		/* [h-cnn] rows wide enough for pool_avx512.c's 16-output blocks, strides 1/2/3, edges, ties */
		{ 3, { 1, 9, 70 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0, 0, 0 }, { 1, 1, 1 }, false },
		{ 3, { 1, 9, 71 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0, 0, 0 }, { 1, 1, 1 }, true },
		{ 2, { 1, 8, 67 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 1, 1 }, { 1, 1, 1 }, false },
		{ 2, { 1, 11, 83 }, { 1, 3, 4 }, { 1, 3, 3 }, { 0, 1, 2 }, { 1, 2, 2 }, true },
		{ 2, { 3, 6, 40 }, { 2, 2, 3 }, { 2, 2, 2 }, { 1, 1, 1 }, { 1, 1, 1 }, true },
		{ 4, { 1, 8, 64 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0, 0, 0 }, { 1, 1, 1 }, false, true },
		{ 4, { 1, 7, 45 }, { 1, 3, 3 }, { 1, 1, 5 }, { 0, 1, 1 }, { 1, 1, 3 }, true, true },
		{ 3, { 1, 5, 50 }, { 1, 3, 3 }, { 1, 2, 2 }, { 0, 1, 1 }, { 1, 2, 2 }, true, true },
	};
	static const int mdts[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8 };
	static const int adts[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64 };

	for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		for (size_t d = 0; d < sizeof mdts / sizeof mdts[0]; d++)
			check_max_pool(mdts[d], &cases[ci]);
		for (size_t d = 0; d < sizeof adts / sizeof adts[0]; d++) {
			pcase_t c = cases[ci];

			for (int dd = 0; dd < 3; dd++) /* avg: pad <= k/2 */
				c.p[dd] = c.p[dd] <= c.k[dd] / 2 ? c.p[dd] : c.k[dd] / 2;
			check_avg_pool(adts[d], &c, true, 0, false, NULL);
			check_avg_pool(adts[d], &c, false, 0, false, NULL);
			check_avg_pool(adts[d], &c, false, 3, false, NULL);
		}
	}
	{
		static const int64_t shapes[][6] = { { 1, 1, 10, 1, 1, 4 }, { 1, 7, 9, 1, 3, 4 }, { 1, 5, 5, 1, 7, 8 },
						     { 5, 6, 7, 2, 3, 4 }, { 3, 4, 5, 3, 4, 5 } };
		static const int fdts[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };

		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int d = 0; d < 4; d++) {
				pcase_t c = { 3, { shapes[s][0], shapes[s][1], shapes[s][2] } };

				check_avg_pool(fdts[d], &c, false, 0, true, &shapes[s][3]);
				check_adaptive_max(fdts[d], 3, shapes[s], &shapes[s][3]);
			}
	}
}

static void test_pool_errors(void)
{
	float x[8] = { 0 }, y[4];
	int64_t ix[4] = { 0, 1, 2, 9 };
	nk_pool_bwd_args_t b = { .dtype = NK_F32, .mode = NK_POOL_MAX, .NC = 1, .in = { 1, 2, 4 }, .out = { 1, 2, 2 },
				 .k = { 1, 1, 2 }, .s = { 1, 1, 2 }, .dil = { 1, 1, 1 }, .gy = y, .idx = ix, .gx = x };
	nk_pool_args_t f = { .dtype = NK_F32, .mode = NK_POOL_MAX, .NC = 1, .in = { 1, 2, 4 }, .out = { 1, 2, 2 },
			     .k = { 1, 1, 0 }, .s = { 1, 1, 2 }, .dil = { 1, 1, 1 }, .x = x, .y = y, .idx = ix };

	memset(y, 0, sizeof y);
	nrt_kernel_fail_clear();
	CHECK(nk_pool_bwd_run(&b) != 0, "index 9 of a plane of 8 fails");
	CHECK(strstr(nrt_kernel_fail_message(), "index 9 is out of bounds") != NULL, "message: %s", nrt_kernel_fail_message());
	ix[3] = -1;
	CHECK(nk_pool_bwd_ref(&b) != 0, "index -1 fails");
	CHECK(nk_pool_run(&f) != 0, "kernel size 0 fails");
	f.k[2] = 2, f.idx = NULL;
	CHECK(nk_pool_run(&f) != 0, "max pooling without an index output fails");
	f.idx = ix, f.dtype = NK_BOOL;
	CHECK(nk_pool_run(&f) != 0, "bool fails");
	b.dtype = NK_I32, ix[3] = 3;
	CHECK(nk_pool_bwd_run(&b) != 0, "integer backward fails");
	nrt_kernel_fail_clear();
}

static void test_unpool(void)
{
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_I64, NK_U8 };

	for (int d = 0; d < 5; d++) {
		int dt = dts[d];
		int64_t NC = 7, ipl = 6, opl = 20;
		void *x = talloc(dt, NC * ipl), *y = talloc(dt, NC * opl), *y2 = talloc(dt, NC * opl), *yr = talloc(dt, NC * opl);
		int64_t *ix = malloc((size_t)(NC * ipl) * 8);
		nk_unpool_args_t a = { .dtype = dt, .NC = NC, .in_plane = ipl, .out_plane = opl, .x = x, .idx = ix, .y = y };

		tfill(x, dt, NC * ipl, false);
		for (int64_t i = 0; i < NC * ipl; i++)
			ix[i] = nkt_randint(0, opl); /* repeats: the last write wins */
		for (int64_t nc = 0; nc < NC; nc++)
			for (int64_t i = 0; i < ipl; i++)
				memcpy((char *)yr + (size_t)(nc * opl + ix[nc * ipl + i]) * esz(dt), (char *)x + (size_t)(nc * ipl + i) * esz(dt), esz(dt));
		memset(y, 0x7f, (size_t)(NC * opl) * esz(dt));
		CHECK(nk_unpool_run(&a) == 0, "unpool run");
		a.y = y2;
		CHECK(nk_unpool_ref(&a) == 0, "unpool ref");
		CHECK(!memcmp(y, yr, (size_t)(NC * opl) * esz(dt)) && !memcmp(y2, yr, (size_t)(NC * opl) * esz(dt)), "unpool %s", dtn(dt));
		ix[5] = opl;
		nrt_kernel_fail_clear();
		CHECK(nk_unpool_run(&a) != 0, "unpool bad index fails");
		CHECK(strstr(nrt_kernel_fail_message(), "Found an invalid max index") != NULL, "message: %s", nrt_kernel_fail_message());
		nrt_kernel_fail_clear();
		free(x), free(y), free(y2), free(yr), free(ix);
	}
}

/* ---- interpolation ------------------------------------------------------------------------------ */

/* Naive taps in double (tolerance-compared): the textbook formulas. */
static int naive_taps(int mode, bool ac, int64_t o, int64_t I, int64_t O, double sc, int64_t *ix, double *w)
{
	double scale = sc > 0 ? 1 / sc : (double)I / (double)O;

	if (mode == NK_INTERP_NEAREST) {
		ix[0] = O == I ? o : O == 2 * I ? o / 2 : (int64_t)floor((double)o * scale); /* ATen's legacy shortcuts */
		ix[0] = ix[0] < I - 1 ? ix[0] : I - 1, w[0] = 1;
		return 1;
	}
	if (mode == NK_INTERP_NEAREST_EXACT) {
		ix[0] = (int64_t)floor(((double)o + 0.5) * scale);
		ix[0] = ix[0] < I - 1 ? ix[0] : I - 1, w[0] = 1;
		return 1;
	}
	double src = ac ? (O > 1 ? (double)(I - 1) / (double)(O - 1) : 0) * (double)o : scale * ((double)o + 0.5) - 0.5;
	if (mode == NK_INTERP_LINEAR) {
		if (O == I) { /* ATen's shortcut: a copy whatever the scale */
			ix[0] = ix[1] = o, w[0] = 1, w[1] = 0;
			return 2;
		}
		if (src < 0)
			src = 0;
		int64_t i0 = (int64_t)floor(src);
		double l = src - (double)i0;

		i0 = i0 < I - 1 ? i0 : I - 1;
		if (i0 == I - 1)
			l = 0;
		ix[0] = i0, ix[1] = i0 < I - 1 ? i0 + 1 : i0, w[0] = 1 - l, w[1] = l;
		return 2;
	}
	{
		int64_t i0 = (int64_t)floor(src);
		double t = src - (double)i0, A = -0.75;

		for (int j = 0; j < 4; j++) {
			int64_t k = i0 - 1 + j;
			double x = fabs(t - (double)(j - 1));

			ix[j] = k < 0 ? 0 : k > I - 1 ? I - 1 : k;
			w[j] = x <= 1 ? ((A + 2) * x - (A + 3)) * x * x + 1 : ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
		}
		return 4;
	}
}

static void check_interp(int dt, int mode, int nsp, bool ac, int64_t NC, const int64_t in[3], const int64_t out[3], const double sc[3])
{
	int64_t ipl = in[0] * in[1] * in[2], opl = out[0] * out[1] * out[2];
	void *x = talloc(dt, NC * ipl), *y = talloc(dt, NC * opl), *y2 = talloc(dt, NC * opl);
	nk_interp_args_t a = { .dtype = dt, .mode = mode, .nsp = nsp, .align_corners = ac, .NC = NC, .x = x, .y = y };
	double tol = dt == NK_F64 ? 1e-9 : dt == NK_F32 ? 1e-5 : dt == NK_BF16 ? 2e-2 : 3e-3, worst = 0;

	memcpy(a.in, in, sizeof a.in), memcpy(a.out, out, sizeof a.out), memcpy(a.scale, sc, sizeof a.scale);
	tfill(x, dt, NC * ipl, false);
	CHECK(nk_interp_run(&a) == 0, "interp run");
	a.y = y2;
	CHECK(nk_interp_ref(&a) == 0, "interp ref");
	CHECK(!memcmp(y, y2, (size_t)(NC * opl) * esz(dt)), "interp run == ref");
	for (int64_t nc = 0; nc < NC; nc++)
		for (int64_t o = 0; o < opl; o++) {
			int64_t o3[3] = { o / (out[1] * out[2]), o / out[2] % out[1], o % out[2] }, ti[3][4];
			double tw[3][4], ref = 0;
			int n[3];

			for (int d = 0; d < 3; d++)
				n[d] = naive_taps(d < 3 - nsp ? NK_INTERP_NEAREST : mode, ac, o3[d], in[d], out[d], sc[d], ti[d], tw[d]);
			for (int i = 0; i < n[0]; i++)
				for (int j = 0; j < n[1]; j++)
					for (int k = 0; k < n[2]; k++)
						ref += tw[0][i] * tw[1][j] * tw[2][k] *
						       tget(x, dt, nc * ipl + (ti[0][i] * in[1] + ti[1][j]) * in[2] + ti[2][k]);
			worst = fmax(worst, fabs(tget(y, dt, nc * opl + o) - ref) / (tol * (1 + fabs(ref))));
		}
	CHECK(worst <= 1, "interp %s mode %d nsp %d ac %d in %lldx%lldx%lld out %lldx%lldx%lld: err %g", dtn(dt), mode, nsp, ac,
	      (long long)in[0], (long long)in[1], (long long)in[2], (long long)out[0], (long long)out[1], (long long)out[2], worst);

	if (isflt(dt)) { /* backward adjoint */
		void *g = talloc(dt, NC * opl), *gx = talloc(dt, NC * ipl), *gx2 = talloc(dt, NC * ipl);
		nk_interp_bwd_args_t b = { .dtype = dt, .mode = mode, .nsp = nsp, .align_corners = ac, .NC = NC, .gy = g, .gx = gx };
		double lhs, rhs;

		memcpy(b.in, in, sizeof b.in), memcpy(b.out, out, sizeof b.out), memcpy(b.scale, sc, sizeof b.scale);
		tfill(g, dt, NC * opl, false);
		CHECK(nk_interp_bwd_run(&b) == 0, "interp bwd run");
		b.gx = gx2;
		CHECK(nk_interp_bwd_ref(&b) == 0, "interp bwd ref");
		CHECK(!memcmp(gx, gx2, (size_t)(NC * ipl) * esz(dt)), "interp bwd run == ref");
		lhs = dot(y, g, dt, NC * opl), rhs = dot(x, gx, dt, NC * ipl);
		CHECK(fabs(lhs - rhs) <= 8 * tol * (asum(g, dt, NC * opl) * 3 + 1), "interp bwd adjoint %s mode %d: %g vs %g", dtn(dt), mode, lhs, rhs);
		free(g), free(gx), free(gx2);
	}
	free(x), free(y), free(y2);
}

/* uint8 bilinear/bicubic (the fixed-point path: separable passes with a uint8 intermediate) against the
 * f64 path on the same values: at most 2 apart after clamping to [0, 255]; _run == _ref. */
static void check_interp_u8(int mode, bool ac, const int64_t in[3], const int64_t out[3])
{
	int64_t NC = 3, ipl = in[1] * in[2], opl = out[1] * out[2];
	uint8_t *x = talloc(NK_U8, NC * ipl), *y = talloc(NK_U8, NC * opl), *y2 = talloc(NK_U8, NC * opl);
	double *xf = talloc(NK_F64, NC * ipl), *yf = talloc(NK_F64, NC * opl), worst = 0;
	nk_interp_args_t a = { .dtype = NK_U8, .mode = mode, .nsp = 2, .align_corners = ac, .NC = NC, .x = x, .y = y };

	memcpy(a.in, in, sizeof a.in), memcpy(a.out, out, sizeof a.out);
	for (int64_t i = 0; i < NC * ipl; i++) /* smooth (no clamped overshoot in the intermediate) */
		x[i] = (uint8_t)(128 + 100 * sin(0.3 * (double)(i / in[2] % in[1])) * cos(0.2 * (double)(i % in[2])) +
				 (double)nkt_randint(-3, 4)),
		xf[i] = x[i];
	CHECK(nk_interp_run(&a) == 0, "u8 interp run");
	a.y = y2;
	CHECK(nk_interp_ref(&a) == 0, "u8 interp ref");
	CHECK(!memcmp(y, y2, (size_t)(NC * opl)), "u8 interp run == ref");
	a.dtype = NK_F64, a.x = xf, a.y = yf;
	CHECK(nk_interp_run(&a) == 0, "f64 interp run");
	for (int64_t i = 0; i < NC * opl; i++)
		worst = fmax(worst, fabs((double)y[i] - fmin(fmax(yf[i], 0), 255)));
	CHECK(worst <= 2, "u8 interp mode %d ac %d %lldx%lld -> %lldx%lld: %g from f64", mode, ac, (long long)in[1], (long long)in[2],
	      (long long)out[1], (long long)out[2], worst);
	free(x), free(y), free(y2), free(xf), free(yf);
}

static void test_interp(void)
{
	static const int64_t shapes[][7] = {
		/* nsp, in D H W, out D H W packed as nsp, in(3), out(3) */
		{ 1, 1, 1, 5, 1, 1, 11 }, { 1, 1, 1, 9, 1, 1, 4 }, { 1, 1, 1, 4, 1, 1, 8 }, { 1, 1, 1, 1, 1, 1, 3 },
		{ 2, 1, 5, 7, 1, 9, 4 }, { 2, 1, 6, 3, 1, 6, 3 }, { 2, 1, 3, 4, 1, 7, 13 }, { 2, 1, 40, 38, 1, 21, 77 },
		{ 3, 3, 4, 5, 5, 3, 7 }, { 3, 2, 2, 2, 4, 4, 4 },
	};
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };

	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		int nsp = (int)shapes[s][0];

		for (int mode = 0; mode < NK_INTERP_NMODES; mode++) {
			if (mode == NK_INTERP_CUBIC && nsp != 2)
				continue;
			for (int d = 0; d < 4; d++)
				for (int ac = 0; ac < 2; ac++) {
					double sc[3] = { 0, 0, 0 };

					if (ac && mode <= NK_INTERP_NEAREST_EXACT)
						continue;
					check_interp(dts[d], mode, nsp, ac, s == 7 ? 9 : 3, &shapes[s][1], &shapes[s][4], sc);
					if (!ac) { /* user scale factors (nearest's legacy index uses them as given) */
						for (int dd = 3 - nsp; dd < 3; dd++)
							sc[dd] = (double)shapes[s][4 + dd] / (double)shapes[s][1 + dd] + 0.01;
						check_interp(dts[d], mode, nsp, false, 2, &shapes[s][1], &shapes[s][4], sc);
					}
				}
		}
		{ /* nearest copies any dtype */
			double sc[3] = { 0, 0, 0 };

			check_interp(NK_U8, NK_INTERP_NEAREST, nsp, false, 2, &shapes[s][1], &shapes[s][4], sc);
			check_interp(NK_I64, NK_INTERP_NEAREST_EXACT, nsp, false, 2, &shapes[s][1], &shapes[s][4], sc);
		}
	}
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) /* uint8 2-d: within 2 of the f64 result */
		for (int mode = NK_INTERP_LINEAR; mode <= NK_INTERP_CUBIC && shapes[s][0] == 2; mode++)
			for (int ac = 0; ac < 2; ac++)
				check_interp_u8(mode, ac, &shapes[s][1], &shapes[s][4]);
	{
		int64_t in[3] = { 1, 1, 4 }, out[3] = { 1, 1, 8 };
		double sc[3] = { 0 };
		nk_interp_args_t a = { .dtype = NK_U8, .mode = NK_INTERP_LINEAR, .nsp = 1, .NC = 1 };

		memcpy(a.in, in, sizeof in), memcpy(a.out, out, sizeof out), memcpy(a.scale, sc, sizeof sc);
		CHECK(nk_interp_run(&a) != 0, "u8 linear is refused");
		a.dtype = NK_F32, a.nsp = 1, a.in[1] = 2;
		CHECK(nk_interp_run(&a) != 0, "a resized leading dim is refused");
		nrt_kernel_fail_clear();
	}
}

/* ---- padding ------------------------------------------------------------------------------------ */

static int64_t naive_pad_src(int mode, int64_t o, int64_t I, int64_t l)
{
	int64_t j = o - l; /* position relative to the input's start */

	if (mode == NK_PAD_REPLICATE)
		return j < 0 ? 0 : j > I - 1 ? I - 1 : j;
	if (j < 0)
		j = -j;
	if (j > I - 1)
		j = 2 * (I - 1) - j;
	return j;
}

static void check_pad(int dt, int mode, int64_t NC, const int64_t in[3], const int64_t lo[3], const int64_t hi[3])
{
	int64_t out[3], ipl = in[0] * in[1] * in[2], opl;
	bool ok = true;

	for (int d = 0; d < 3; d++)
		out[d] = in[d] + lo[d] + hi[d];
	opl = out[0] * out[1] * out[2];
	void *x = talloc(dt, NC * ipl), *y = talloc(dt, NC * opl), *y2 = talloc(dt, NC * opl);
	nk_pad_args_t a = { .dtype = dt, .mode = mode, .NC = NC, .x = x, .y = y };

	memcpy(a.in, in, sizeof a.in), memcpy(a.out, out, sizeof a.out), memcpy(a.lo, lo, sizeof a.lo);
	tfill(x, dt, NC * ipl, false);
	CHECK(nk_pad_run(&a) == 0, "pad run");
	a.y = y2;
	CHECK(nk_pad_ref(&a) == 0, "pad ref");
	CHECK(!memcmp(y, y2, (size_t)(NC * opl) * esz(dt)), "pad run == ref");
	for (int64_t nc = 0; nc < NC; nc++)
		for (int64_t o = 0; o < opl; o++) {
			int64_t o3[3] = { o / (out[1] * out[2]), o / out[2] % out[1], o % out[2] }, s[3];

			for (int d = 0; d < 3; d++)
				s[d] = naive_pad_src(mode, o3[d], in[d], lo[d]);
			if (tget(y, dt, nc * opl + o) != tget(x, dt, nc * ipl + (s[0] * in[1] + s[1]) * in[2] + s[2]))
				ok = false;
		}
	CHECK(ok, "pad %s mode %d in %lldx%lldx%lld lo %lld,%lld,%lld", dtn(dt), mode, (long long)in[0], (long long)in[1],
	      (long long)in[2], (long long)lo[0], (long long)lo[1], (long long)lo[2]);
	if (isflt(dt)) {
		void *g = talloc(dt, NC * opl), *gx = talloc(dt, NC * ipl), *gx2 = talloc(dt, NC * ipl);
		double tol = dt == NK_F64 ? 1e-12 : dt == NK_F32 ? 1e-5 : 2e-2, lhs, rhs;

		a.x = g, a.y = gx;
		tfill(g, dt, NC * opl, false);
		CHECK(nk_pad_bwd_run(&a) == 0, "pad bwd run");
		a.y = gx2;
		CHECK(nk_pad_bwd_ref(&a) == 0, "pad bwd ref");
		CHECK(!memcmp(gx, gx2, (size_t)(NC * ipl) * esz(dt)), "pad bwd run == ref");
		lhs = dot(y, g, dt, NC * opl), rhs = dot(x, gx, dt, NC * ipl);
		CHECK(fabs(lhs - rhs) <= tol * (asum(g, dt, NC * opl) * 2 + 1), "pad bwd adjoint %s: %g vs %g", dtn(dt), lhs, rhs);
		free(g), free(gx), free(gx2);
	}
	free(x), free(y), free(y2);
}

static void test_pad(void)
{
	static const int64_t cases[][9] = {
		/* in(3), lo(3), hi(3) */
		{ 1, 1, 5, 0, 0, 2, 0, 0, 4 }, { 1, 1, 5, 0, 0, -2, 0, 0, 3 }, { 1, 4, 6, 0, 3, 1, 0, 2, 5 },
		{ 1, 4, 6, 0, -1, 2, 0, 3, -2 }, { 3, 4, 5, 2, 1, 4, 1, 3, 0 }, { 1, 30, 40, 0, 7, 9, 0, 8, 2 },
	};
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I8, NK_U8 };

	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
			check_pad(dts[d], NK_PAD_REPLICATE, c == 5 ? 40 : 3, cases[c], &cases[c][3], &cases[c][6]);
			check_pad(dts[d], NK_PAD_REFLECT, 3, cases[c], &cases[c][3], &cases[c][6]);
		}
	{ /* zero planes; reflection with a pad as large as the input is refused */
		int64_t in[3] = { 1, 1, 3 }, lo[3] = { 0, 0, 3 }, hi[3] = { 0, 0, 0 }, out[3] = { 1, 1, 6 };
		float x[3] = { 0 }, y[6];
		nk_pad_args_t a = { .dtype = NK_F32, .mode = NK_PAD_REFLECT, .NC = 1, .x = x, .y = y };

		check_pad(NK_F32, NK_PAD_REFLECT, 0, in, (int64_t[3]){ 0, 0, 1 }, hi);
		memcpy(a.in, in, sizeof in), memcpy(a.out, out, sizeof out), memcpy(a.lo, lo, sizeof lo);
		nrt_kernel_fail_clear();
		CHECK(nk_pad_run(&a) != 0, "reflect pad 3 of 3 is refused");
		a.mode = NK_PAD_REPLICATE;
		CHECK(nk_pad_run(&a) == 0, "replicate pad 3 of 3 is fine");
		nrt_kernel_fail_clear();
	}
}

/* ---- grid sampling ------------------------------------------------------------------------------- */

static double grid_loss(nk_grid_sample_args_t *a, const double *g, double *y)
{
	a->y = y;
	nk_grid_sample_ref(a);
	return dot(y, g, NK_F64, a->N * a->C * a->OH * a->OW);
}

/* f64: identity sampling, adjoint of the input gradient, central differences for the grid gradient,
 * run == ref; f32/bf16 against f64. */
static void check_grid(int mode, int padding, bool ac)
{
	int64_t N = 2, C = 3, IH = 5, IW = 7, OH = 4, OW = 6, ni = N * C * IH * IW, no = N * C * OH * OW, ng = N * OH * OW * 2;
	double *x = talloc(NK_F64, ni), *grid = talloc(NK_F64, ng), *y = talloc(NK_F64, no), *y2 = talloc(NK_F64, no);
	double *g = talloc(NK_F64, no), *gx = talloc(NK_F64, ni), *gg = talloc(NK_F64, ng), *gx2 = talloc(NK_F64, ni), *gg2 = talloc(NK_F64, ng);
	nk_grid_sample_args_t a = { .dtype = NK_F64, .mode = mode, .padding = padding, .align_corners = ac, .N = N, .C = C, .IH = IH,
				    .IW = IW, .OH = OH, .OW = OW, .x = x, .grid = grid, .y = y };
	nk_grid_sample_bwd_args_t b = { .dtype = NK_F64, .mode = mode, .padding = padding, .align_corners = ac, .N = N, .C = C, .IH = IH,
					.IW = IW, .OH = OH, .OW = OW, .gy = g, .x = x, .grid = grid, .gx = gx, .ggrid = gg };
	double worst = 0;

	tfill(x, NK_F64, ni, false), tfill(g, NK_F64, no, false);
	for (int64_t i = 0; i < ng; i++)
		grid[i] = nkt_uniform(-1.3, 1.3); /* some points outside: padding matters */
	CHECK(nk_grid_sample_run(&a) == 0, "grid run");
	a.y = y2;
	CHECK(nk_grid_sample_ref(&a) == 0 && !memcmp(y, y2, (size_t)no * 8), "grid run == ref");
	CHECK(nk_grid_sample_bwd_run(&b) == 0, "grid bwd run");
	b.gx = gx2, b.ggrid = gg2;
	CHECK(nk_grid_sample_bwd_ref(&b) == 0 && !memcmp(gx, gx2, (size_t)ni * 8) && !memcmp(gg, gg2, (size_t)ng * 8), "grid bwd run == ref");
	CHECK(fabs(dot(y, g, NK_F64, no) - dot(x, gx, NK_F64, ni)) < 1e-9 * (1 + asum(g, NK_F64, no)), "grid adjoint mode %d pad %d", mode, padding);
	if (mode != NK_GRID_NEAREST)
		for (int64_t i = 0; i < ng; i++) {
			double keep = grid[i], h = 1e-6, lp, lm, fd;

			grid[i] = keep + h, lp = grid_loss(&a, g, y2);
			grid[i] = keep - h, lm = grid_loss(&a, g, y2);
			grid[i] = keep;
			fd = (lp - lm) / (2 * h);
			worst = fmax(worst, fabs(fd - gg[i]) / (1e-4 * (1 + fabs(fd))));
		}
	else
		for (int64_t i = 0; i < ng; i++)
			worst = fmax(worst, fabs(gg[i]) * 1e9);
	CHECK(worst <= 1, "grid gradient mode %d pad %d ac %d: err %g", mode, padding, ac, worst);
	/* identity grid (align_corners: pixel centres) reproduces the input */
	if (ac) {
		nk_grid_sample_args_t id = a;

		double *gi = talloc(NK_F64, N * IH * IW * 2);

		id.OH = IH, id.OW = IW, id.y = gx;

		for (int64_t n = 0; n < N; n++)
			for (int64_t h = 0; h < IH; h++)
				for (int64_t w = 0; w < IW; w++) {
					gi[((n * IH + h) * IW + w) * 2] = -1 + 2.0 * (double)w / (double)(IW - 1);
					gi[((n * IH + h) * IW + w) * 2 + 1] = -1 + 2.0 * (double)h / (double)(IH - 1);
				}
		id.grid = gi;
		CHECK(nk_grid_sample_run(&id) == 0, "identity run");
		CHECK(nkt_err(gx, x, NK_F64, ni, 1e-12, 1e-12) <= 1, "grid identity mode %d pad %d", mode, padding);
		free(gi);
	}
	{ /* f32 / bf16 against f64 */
		static const int dts[] = { NK_F32, NK_BF16 };

		for (int d = 0; d < 2; d++) {
			int dt = dts[d];
			void *xl = talloc(dt, ni), *gl = talloc(dt, ng), *yl = talloc(dt, no);
			nk_grid_sample_args_t l = a;

			for (int64_t i = 0; i < ni; i++)
				tset(xl, dt, i, x[i]);
			for (int64_t i = 0; i < ng; i++)
				tset(gl, dt, i, grid[i]), grid[i] = tget(gl, dt, i); /* same grid points */
			a.y = y, nk_grid_sample_ref(&a);
			l.dtype = dt, l.x = xl, l.grid = gl, l.y = yl;
			CHECK(nk_grid_sample_run(&l) == 0, "grid lowp run");
			worst = 0;
			for (int64_t i = 0; i < no; i++)
				worst = fmax(worst, fabs(tget(yl, dt, i) - y[i]) / ((dt == NK_F32 ? 1e-5 : mode == NK_GRID_BICUBIC ? 2e-1 : 8e-2) * (1 + fabs(y[i]))));
			CHECK(worst <= 1 || mode == NK_GRID_NEAREST, "grid %s mode %d pad %d: err %g", dtn(dt), mode, padding, worst);
			free(xl), free(gl), free(yl);
		}
	}
	free(x), free(grid), free(y), free(y2), free(g), free(gx), free(gg), free(gx2), free(gg2);
}

static void test_grid(void)
{
	for (int mode = 0; mode < NK_GRID_NMODES; mode++)
		for (int pad = 0; pad < NK_GRID_NPADS; pad++)
			for (int ac = 0; ac < 2; ac++)
				check_grid(mode, pad, ac);
	{
		nk_grid_sample_args_t a = { .dtype = NK_I32, .N = 1 };

		nrt_kernel_fail_clear();
		CHECK(nk_grid_sample_run(&a) != 0, "int grid sampling is refused");
		nrt_kernel_fail_clear();
	}
}

int main(void)
{
	nkt_seed(11);
	RUN(test_pool);
	RUN(test_pool_errors);
	RUN(test_unpool);
	RUN(test_interp);
	RUN(test_pad);
	RUN(test_grid);
	return ctest_finish();
}
