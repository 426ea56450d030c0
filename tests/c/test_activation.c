/* test_activation.c - the small activations (activation.c) against their references for every float
 * dtype on strided and broadcast operands; rrelu's noise and output; the dedicated AVX-512 gelu / silu
 * loops (pointwise_act_avx512.c) against the formulas in double. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"

static const int dtypes[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

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
	RUN(test_act_vs_ref);
	RUN(test_act_avx512);
	RUN(test_rrelu);
	return ctest_finish();
}
