/* test_special.c - the special functions (special.c): run vs ref over dtypes and strides, and known
 * values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static const int all_dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8, NK_BOOL };

static int64_t cnt(int64_t n)
{
	return n > 0 ? n : 1;
}

/* n elements of dt, small integers (ties), floats halved, some NaN when nan_every > 0 */
static void *rand_elems(int dt, int64_t n, int lo, int hi, int nan_every)
{
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)cnt(n), es);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = nkt_randint(lo, hi);
		if (dt == NK_BOOL)
			p[i] = (char)(v & 1);
		else if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, nan_every && nkt_randint(0, nan_every) == 0 ? NAN : (double)v * 0.5);
		else
			nk_store_i64(p + i * (int64_t)es, dt, dt == NK_U8 ? (v < 0 ? -v : v) : v);
	}
	return p;
}

/* ---- special functions: run vs ref over dtypes and strides, known values --------------------------- */
static double sp_one(int op, double x, double y, int64_t ia)
{
	double out;
	nk_special_args_t a = { .op = op, .ia = ia };
	a.it.ndim = 1, a.it.nops = op >= NK_SP_XLOG1PY ? 3 : 2, a.it.shape[0] = 1;
	a.it.data[0] = (char *)&out, a.it.data[1] = (char *)&x, a.it.data[2] = (char *)&y;
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_F64, a.it.strides[k][0] = 8;
	CHECK(nk_special_run(&a) == 0, "special op %d", op);
	return out;
}

static void test_special(void)
{
	const int64_t n = 301;
	static const int fdt[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };
	for (int op = 0; op < NK_SP_COUNT; op++) {
		bool bin = op >= NK_SP_XLOG1PY, ints = op == NK_SP_GCD || op == NK_SP_LCM;
		for (int d = 0; d < (ints ? 5 : 4); d++) {
			int dt = ints ? all_dtypes[4 + d] : fdt[d];
			if (op == NK_SP_NEXTAFTER && !nk_is_float(dt))
				continue;
			size_t es = nk_dtype_size(dt);
			void *x = rand_elems(dt, 2 * n, -9, 10, 0), *y = rand_elems(dt, n, ints ? -9 : 0, 10, 0);
			char *o1 = calloc((size_t)n, es), *o2 = calloc((size_t)n, es);
			nk_special_args_t a = { .op = op, .ia = op == NK_SP_POLYGAMMA ? 3 : 0 };
			a.it.ndim = 1, a.it.nops = bin ? 3 : 2, a.it.shape[0] = n;
			a.it.data[0] = o1, a.it.data[1] = x, a.it.data[2] = y; /* x read with stride 2 */
			a.it.strides[0][0] = (int64_t)es, a.it.strides[1][0] = 2 * (int64_t)es, a.it.strides[2][0] = (int64_t)es;
			for (int k = 0; k < 3; k++)
				a.it.dtype[k] = (int8_t)dt;
			CHECK(nk_special_run(&a) == 0, "special run op %d", op);
			a.it.data[0] = o2;
			CHECK(nk_special_ref(&a) == 0, "special ref op %d", op);
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "special op %d %s: run == ref", op, nk_dtype_name(dt));
			free(x), free(y), free(o1), free(o2);
		}
	}
	/* known values (double) */
	static const struct { int op; double x, y; int64_t ia; double want; } kv[] = {
		{ NK_SP_DIGAMMA, 1.0, 0, 0, -0.5772156649015329 },
		{ NK_SP_DIGAMMA, 0.5, 0, 0, -1.9635100260214235 },
		{ NK_SP_DIGAMMA, -0.5, 0, 0, 0.03648997397857652 },
		{ NK_SP_LGAMMA, 0.5, 0, 0, 0.5723649429247001 },
		{ NK_SP_POLYGAMMA, 1.0, 0, 1, 1.6449340676383375 }, /* PyTorch's trigamma series (5e-10 off pi^2/6) */
		{ NK_SP_POLYGAMMA, 2.0, 0, 2, -0.4041138063191886 },
		{ NK_SP_POLYGAMMA, 0.5, 0, 3, 97.40909103400242 },
		{ NK_SP_ZETA, 2.0, 1.0, 0, 1.6449340668482264 },
		{ NK_SP_ZETA, 3.0, 2.5, 0, 0.11810202582086368 },
		{ NK_SP_SINC, 0.5, 0, 0, 0.6366197723675814 },
		{ NK_SP_ENTR, 0.5, 0, 0, 0.34657359027997264 },
		{ NK_SP_XLOG1PY, 2.0, 1.0, 0, 1.3862943611198906 },
		{ NK_SP_CHEBYSHEV_T, 0.3, 3, 0, -0.792 },
		{ NK_SP_CHEBYSHEV_U, 0.3, 2, 0, -0.64 },
		{ NK_SP_HERMITE_H, 0.5, 3, 0, -5.0 },
		{ NK_SP_HERMITE_HE, 0.5, 3, 0, -1.375 },
		{ NK_SP_LAGUERRE_L, 0.5, 2, 0, 0.125 },
		{ NK_SP_LEGENDRE_P, 0.5, 2, 0, -0.125 },
		{ NK_SP_SHIFTED_CHEBYSHEV_T, 0.75, 2, 0, -0.5 },
		{ NK_SP_CHEBYSHEV_T, 0.3, 9, 0, 0.3888276480000005 }, /* trig branch (n > 6) */
	};
	for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
		double got = sp_one(kv[i].op, kv[i].x, kv[i].y, kv[i].ia);
		CHECK(fabs(got - kv[i].want) <= 1e-12 * (1 + fabs(kv[i].want)), "special op %d (%g, %g): %.17g want %.17g", kv[i].op,
		      kv[i].x, kv[i].y, got, kv[i].want);
	}
	/* I0, I1 and the scaled forms against aten's (Cephes) values, both sides of the series/asymptotic
	 * switch at 30 and into overflow */
	static const double bx[7] = { 1.0, -2.5, 29.9, 30.1, 50.0, 400.0, 720.0 };
	static const double bw[4][7] = {
		{ 1.2660658777520082, 3.289839144050123, 708478330489.0146, 862432920031.7792, 2.9325537838493355e+20,
		  1.0418584503521463e+172, INFINITY },
		{ 0.46575960759364043, 0.27004644161220276, 0.07326921904600191, 0.07302329413106094, 0.056561626647454184,
		  0.019953356281939987, 0.014870284185509173 },
		{ 0.5651591039924851, -2.5167162452886984, 696528308361.0928, 847983630191.5414, 2.9030785901035566e+20,
		  1.0405553112944217e+172, INFINITY },
		{ 0.2079104153497085, -0.20658464953126654, 0.0720333749118688, 0.07179985435101434, 0.055993123892895395,
		  0.01992839895890354, 0.014859954008658149 },
	};
	for (int f = 0; f < 4; f++)
		for (int i = 0; i < 7; i++) {
			double got = sp_one(NK_SP_I0 + f, bx[i], 0, 0), want = bw[f][i];
			CHECK(isinf(want) ? isinf(got) : fabs(got - want) <= 1e-13 * fabs(want), "bessel %d (%g): %.17g want %.17g", f,
			      bx[i], got, want);
		}
	CHECK(isinf(sp_one(NK_SP_DIGAMMA, 0.0, 0, 0)) && isnan(sp_one(NK_SP_DIGAMMA, -2.0, 0, 0)), "digamma poles");
	CHECK(sp_one(NK_SP_HEAVISIDE, 0.0, 0.25, 0) == 0.25 && sp_one(NK_SP_HEAVISIDE, -3.0, 0.25, 0) == 0, "heaviside");
	CHECK(sp_one(NK_SP_NEXTAFTER, 1.0, 2.0, 0) == nextafter(1.0, 2.0), "nextafter");
	int64_t g[3] = { 0, -12, 18 };
	nk_special_args_t a = { .op = NK_SP_GCD };
	a.it.ndim = 1, a.it.nops = 3, a.it.shape[0] = 1, a.it.data[0] = (char *)&g[0], a.it.data[1] = (char *)&g[1],
	a.it.data[2] = (char *)&g[2];
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_I64, a.it.strides[k][0] = 8;
	CHECK(nk_special_run(&a) == 0 && g[0] == 6, "gcd(-12, 18) = %lld", (long long)g[0]);
	a.op = NK_SP_LCM;
	CHECK(nk_special_run(&a) == 0 && g[0] == 36, "lcm(-12, 18) = %lld", (long long)g[0]);
	/* bf16 nextafter steps one bf16 ulp */
	uint16_t h[3] = { 0, 0x3f80, 0x4000 }; /* 1.0 -> 2.0 */
	a.op = NK_SP_NEXTAFTER;
	a.it.data[0] = (char *)&h[0], a.it.data[1] = (char *)&h[1], a.it.data[2] = (char *)&h[2];
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_BF16, a.it.strides[k][0] = 2;
	CHECK(nk_special_run(&a) == 0 && h[0] == 0x3f81, "nextafter bf16: %#x", h[0]);
}

int main(void)
{
	nkt_seed(11);
	RUN(test_special);
	return ctest_finish();
}
