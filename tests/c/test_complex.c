/* test_complex.c - the complex kernels (complex.c): the formulas PyTorch's CPU uses (plain products,
 * numpy's scaled division and its divide-by-zero results, sgn(0) = 0, cancellation-free log1p/expm1
 * near 0) against long double complex references, casts between complex and real dtypes (integers to
 * c64 rounded once), the copy's conj/neg flags, broadcasting strides, the pooled path on a large
 * tensor against its one-row evaluation, the product reduction, and bad input failing cleanly. */
#include <complex.h>
#undef I
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_complex.h"
#include "nk_test.h"
#include "nrt.h"

static nk_pointwise_args_t args1d(int op, int nops, int64_t n, const int *dt, void *const *data, const int64_t *stride)
{
	nk_pointwise_args_t a;
	memset(&a, 0, sizeof a);
	a.op = op;
	a.it.ndim = 1;
	a.it.nops = nops;
	a.it.shape[0] = n;
	for (int k = 0; k < nops; k++) {
		a.it.data[k] = data[k];
		a.it.dtype[k] = (int8_t)dt[k];
		a.it.strides[k][0] = stride[k];
	}
	return a;
}

static double cerr(double complex got, long double complex want)
{
	long double m = cabsl(want);
	return (double)(cabsl((long double complex)got - want) / (m > 1 ? m : 1));
}

/* z op w in c128 through the kernel */
static double complex bin128(int op, double complex x, double complex y)
{
	double complex o, xs = x, ys = y;
	int dt[3] = {NK_C128, NK_C128, NK_C128};
	void *d[3] = {&o, &xs, &ys};
	int64_t st[3] = {16, 16, 16};
	nk_pointwise_args_t a = args1d(op, 3, 1, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) == 0, "op %d", op);
	return o;
}

static double complex un128(int op, double complex x)
{
	double complex o, xs = x;
	int dt[2] = {NK_C128, NK_C128};
	void *d[2] = {&o, &xs};
	int64_t st[2] = {16, 16};
	nk_pointwise_args_t a = args1d(op, 2, 1, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) == 0, "op %d", op);
	return o;
}

static void test_formulas(void)
{
	nkt_seed(1);
	for (int i = 0; i < 200; i++) {
		double complex x = CMPLX(nkt_uniform(-3, 3), nkt_uniform(-3, 3)), y = CMPLX(nkt_uniform(-3, 3), nkt_uniform(-3, 3));
		long double complex lx = x, ly = y;
		CHECK(cerr(bin128(NK_OP_MUL, x, y), lx * ly) < 1e-15, "mul");
		CHECK(cerr(bin128(NK_OP_DIV, x, y), lx / ly) < 1e-15, "div");
		CHECK(cerr(bin128(NK_OP_POW, x, y), cpowl(lx, ly)) < 1e-13, "pow");
		CHECK(cerr(un128(NK_OP_EXP, x), cexpl(lx)) < 1e-15, "exp");
		CHECK(cerr(un128(NK_OP_LOG, x), clogl(lx)) < 1e-15, "log");
		CHECK(cerr(un128(NK_OP_SQRT, x), csqrtl(lx)) < 1e-15, "sqrt");
		CHECK(cerr(un128(NK_OP_TANH, x), ctanhl(lx)) < 1e-14, "tanh");
		CHECK(cerr(un128(NK_OP_SIGMOID, x), 1.0L / (1.0L + cexpl(-lx))) < 1e-14, "sigmoid");
		CHECK(cerr(un128(NK_OP_RECIPROCAL, x), 1.0L / lx) < 1e-15, "reciprocal");
		long double m = cabsl(lx);
		CHECK(cerr(un128(NK_OP_SIGN, x), lx / m) < 1e-15, "sgn");
		CHECK(fabs(creal(un128(NK_OP_ABS, x)) - (double)m) < 1e-15 * (double)m, "abs");
	}
	/* near 0, log1p and expm1 keep their digits (log(1 + z) would lose them) */
	double complex t = CMPLX(1e-10, -2e-10);
	CHECK(cerr(un128(NK_OP_LOG1P, t), clogl(1.0L + (long double complex)t)) < 1e-6 && fabs(creal(un128(NK_OP_LOG1P, t)) - 1e-10) < 1e-15,
	      "log1p near 0: %g", creal(un128(NK_OP_LOG1P, t)));
	double complex e1 = un128(NK_OP_EXPM1, t);
	long double er = expm1l(1e-10L) * cosl(-2e-10L) - 2 * sinl(-1e-10L) * sinl(-1e-10L), ei = expl(1e-10L) * sinl(-2e-10L);
	CHECK(fabsl(creal(e1) - er) < 1e-15L * fabsl(er) && fabsl(cimag(e1) - ei) < 1e-15L * fabsl(ei), "expm1 near 0");
	double complex z = un128(NK_OP_SIGN, 0);
	CHECK(creal(z) == 0 && cimag(z) == 0, "sgn(0) = 0");
	z = bin128(NK_OP_DIV, CMPLX(1, 1), 0); /* numpy's a/|c|, b/|d| */
	CHECK(isinf(creal(z)) && isinf(cimag(z)), "(1+1i)/0 = inf+inf i");
	z = bin128(NK_OP_DIV, 0, 0);
	CHECK(isnan(creal(z)) && isnan(cimag(z)), "0/0 = nan");
	/* a plain product: (1e308 i)^2 overflows to -inf as (ac - bd, ad + bc) says */
	z = bin128(NK_OP_MUL, CMPLX(0, 1e308), CMPLX(0, 1e308));
	CHECK(isinf(creal(z)) && creal(z) < 0, "plain product");
}

static void test_casts_and_flags(void)
{
	int64_t iv[3] = {((int64_t)1 << 62) + 1, -((int64_t)1 << 53) - 1, 16777217};
	float c64[6];
	int dt[2] = {NK_C64, NK_I64};
	void *d[2] = {c64, iv};
	int64_t st[2] = {8, 8};
	nk_pointwise_args_t a = args1d(NK_CX_COPY, 2, 3, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) == 0, "i64 -> c64");
	for (int i = 0; i < 3; i++)
		CHECK(c64[2 * i] == (float)iv[i] && c64[2 * i + 1] == 0, "i64 %lld -> c64 rounds once", (long long)iv[i]);
	/* c64 -> c128 with conj, then negate; c128 -> f32 keeps the real part */
	float src[4] = {1.5f, -2.0f, 3.0f, 4.0f};
	double dst[4];
	int dt2[2] = {NK_C128, NK_C64};
	void *d2[2] = {dst, src};
	int64_t st2[2] = {16, 8};
	a = args1d(NK_CX_COPY, 2, 2, dt2, d2, st2);
	a.ia = 1;
	CHECK(nk_complex_pointwise_run(&a) == 0, "conj copy");
	CHECK(dst[0] == 1.5 && dst[1] == 2.0 && dst[2] == 3.0 && dst[3] == -4.0, "conj flag");
	a.ia = 3;
	CHECK(nk_complex_pointwise_run(&a) == 0, "conj+neg copy");
	CHECK(dst[0] == -1.5 && dst[1] == -2.0 && dst[2] == -3.0 && dst[3] == 4.0, "conj+neg flags");
	float re[2];
	int dt3[2] = {NK_F32, NK_C128};
	void *d3[2] = {re, dst};
	int64_t st3[2] = {4, 16};
	a = args1d(NK_CX_COPY, 2, 2, dt3, d3, st3);
	CHECK(nk_complex_pointwise_run(&a) == 0 && re[0] == -1.5f && re[1] == -3.0f, "c128 -> f32 is the real part");
	/* broadcasting: a 0-stride complex scalar times a row */
	float row[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s[2] = {0, 1}, out[8];
	int dt4[3] = {NK_C64, NK_C64, NK_C64};
	void *d4[3] = {out, row, s};
	int64_t st4[3] = {8, 8, 0};
	a = args1d(NK_OP_MUL, 3, 4, dt4, d4, st4);
	CHECK(nk_complex_pointwise_run(&a) == 0, "broadcast mul");
	for (int i = 0; i < 4; i++)
		CHECK(out[2 * i] == -row[2 * i + 1] && out[2 * i + 1] == row[2 * i], "i * z at %d", i);
}

/* the pooled path over a large strided tensor equals element-by-element evaluation */
static void test_pooled_matches_rows(void)
{
	int64_t n = 300000;
	double *x = malloc((size_t)n * 2 * 16), *o = malloc((size_t)n * 16), *r = malloc(16);
	nkt_seed(2);
	for (int64_t i = 0; i < 4 * n; i++)
		x[i] = nkt_uniform(-2, 2);
	int dt[2] = {NK_C128, NK_C128};
	void *d[2] = {o, x};
	int64_t st[2] = {16, 32};
	nk_pointwise_args_t a = args1d(NK_OP_COS, 2, n, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) == 0, "pooled cos");
	int bad = 0;
	for (int64_t i = 0; i < n; i += 997) {
		double complex v = ccos(CMPLX(x[4 * i], x[4 * i + 1]));
		bad += creal(v) != o[2 * i] || cimag(v) != o[2 * i + 1];
	}
	CHECK(bad == 0, "%d pooled elements differ", bad);
	free(x), free(o), free(r);
}

static void test_prod(void)
{
	/* [O=2, R=3, I=2] c64 */
	float in[24], out[8];
	for (int i = 0; i < 12; i++)
		in[2 * i] = (float)(i % 5) * 0.5f + 0.5f, in[2 * i + 1] = (float)(i % 3) - 1.0f;
	nk_complex_prod_args_t p = {in, out, NK_C64, 2, 3, 2, false};
	CHECK(nk_complex_prod_run(&p) == 0, "prod");
	for (int o = 0; o < 2; o++)
		for (int i = 0; i < 2; i++) {
			long double complex acc = 1;
			for (int r = 0; r < 3; r++) {
				int k = (o * 3 + r) * 2 + i;
				acc *= CMPLXL(in[2 * k], in[2 * k + 1]);
			}
			CHECK(cerr(CMPLX(out[2 * (o * 2 + i)], out[2 * (o * 2 + i) + 1]), acc) < 1e-6, "prod [%d, %d]", o, i);
		}
	float cum[24];
	nk_complex_prod_args_t q = {in, cum, NK_C64, 2, 3, 2, true};
	CHECK(nk_complex_prod_run(&q) == 0, "cumprod");
	for (int o = 0; o < 2; o++)
		for (int i = 0; i < 2; i++) {
			long double complex acc = 1;
			for (int r = 0; r < 3; r++) {
				int k = (o * 3 + r) * 2 + i;
				acc *= CMPLXL(in[2 * k], in[2 * k + 1]);
				CHECK(cerr(CMPLX(cum[2 * k], cum[2 * k + 1]), acc) < 1e-6, "cumprod [%d, %d, %d]", o, r, i);
			}
		}
	p.dtype = NK_F32;
	CHECK(nk_complex_prod_run(&p) != 0, "a real dtype is refused");
	p.dtype = NK_C64, p.R = -1;
	CHECK(nk_complex_prod_run(&p) != 0, "a negative size is refused");
}

static void test_bad_input(void)
{
	double complex o, x = 1;
	int dt[2] = {NK_C128, NK_C128};
	void *d[2] = {&o, &x};
	int64_t st[2] = {16, 16};
	nk_pointwise_args_t a = args1d(NK_OP_FLOOR, 2, 1, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) != 0, "an op without a complex kernel is refused");
	a = args1d(NK_OP_MUL, 2, 1, dt, d, st);
	CHECK(nk_complex_pointwise_run(&a) != 0, "a wrong operand count is refused");
	a = args1d(NK_OP_EXP, 2, 1, dt, d, st);
	a.it.dtype[1] = 77;
	CHECK(nk_complex_pointwise_run(&a) != 0, "an invalid dtype is refused");
	a = args1d(NK_OP_EXP, 2, 1, dt, d, st);
	a.it.shape[0] = -3;
	CHECK(nk_complex_pointwise_run(&a) != 0, "a negative size is refused");
	CHECK(nk_complex_op_arity(NK_OP_EXP) == 2 && nk_complex_op_arity(NK_OP_WHERE) == 4 && nk_complex_op_arity(NK_OP_LT) == 0,
	      "arity table");
}

int main(void)
{
	RUN(test_formulas);
	RUN(test_casts_and_flags);
	RUN(test_pooled_matches_rows);
	RUN(test_prod);
	RUN(test_bad_input);
	return ctest_finish();
}
