/* test_gemm_avx2.c - the AVX2 + FMA GEMM level (gemm_avx2.c): its micro-kernels against the portable
 * ones (edge tiles, strided C, beta 0 with NaN in C, nothing outside the tile written, B and A read in
 * place, a bias row) and bit for bit against the AVX-512 ones where the CPU has both; the packed driver
 * with the AVX2 table against nk_gemm_ref over dtypes, odd shapes, transposes, batch, alpha/beta and a
 * bias (f32 and f64 also bit for bit against the AVX-512 table); the GEMV dot against a double sum; and
 * NEURON_KERNELS=avx2 choosing the table.  Skipped (and says so) without AVX2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_dispatch.h"
#include "nk_gemm_impl.h"
#include "nk_test.h"
#include "nrt.h"

#define MR NK_GEMM_MR
#define NR NK_GEMM_NR
#define LDC 40

static bool have_avx2, have_avx512;

static bool same(float x, float y)
{
	return isnan(x) ? isnan(y) : x == y;
}

/* sgemm over packed panels, strided or unit-stride C: within rounding of the portable kernel, equal to
 * the AVX-512 kernel, and the elements outside the m x n tile untouched. */
static void check_sgemm_case(int64_t k, int m, int n, float beta, bool strided)
{
	static float a[MR * 300] __attribute__((aligned(64))), b[300 * NR] __attribute__((aligned(64)));
	float c0[MR * NR * 2], c1[MR * NR * 2], c2[MR * NR * 2];
	int64_t rs = strided ? 1 : NR + 3, cs = strided ? MR + 1 : 1;

	nkt_fill(a, NK_F32, MR * k, -1, 1);
	nkt_fill(b, NK_F32, k * NR, -1, 1);
	for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++)
		c0[i] = c1[i] = c2[i] = beta == 0 ? NAN : (float)nkt_uniform(-1, 1);
	nk_sgemm_ref_14x32(k, a, b, c0, rs, cs, 0.75f, beta, m, n);
	nk_sgemm_avx2_14x32(k, a, b, c1, rs, cs, 0.75f, beta, m, n);
	if (have_avx512)
		nk_sgemm_avx512_14x32(k, a, b, c2, rs, cs, 0.75f, beta, m, n);
	for (int i = 0; i < MR; i++)
		for (int j = 0; j < NR; j++) {
			int64_t o = i * rs + j * cs;

			if (!(i < m && j < n)) {
				CHECK(same(c1[o], c0[o]), "sgemm_avx2 wrote outside the tile k=%lld m=%d n=%d (%d,%d)",
				      (long long)k, m, n, i, j);
				continue;
			}
			CHECK(fabsf(c1[o] - c0[o]) <= 1e-5f * (float)(k + 1), "sgemm_avx2 k=%lld m=%d n=%d (%d,%d): %g vs %g",
			      (long long)k, m, n, i, j, c1[o], c0[o]);
			CHECK(!have_avx512 || same(c1[o], c2[o]), "sgemm_avx2 vs avx512 k=%lld m=%d n=%d (%d,%d): %g vs %g",
			      (long long)k, m, n, i, j, c1[o], c2[o]);
		}
}

static void test_sgemm_ukr(void)
{
	static const int64_t ks[] = { 0, 1, 5, 300 };
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 17 }, { 14, 16 }, { 3, 31 }, { 7, 32 }, { 6, 8 }, { 12, 9 } };
	static const float betas[] = { 0, 1, 0.5f };

	for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
		for (size_t t = 0; t < sizeof mn / sizeof mn[0]; t++)
			for (size_t v = 0; v < 3; v++)
				for (int s = 0; s < 2; s++)
					check_sgemm_case(ks[q], mn[t][0], mn[t][1], betas[v], s);
}

/* B read in place (unaligned, row stride ldb), A read in place (rows m.. NaN: never read) and the bias
 * kernel (C not read): each equal bit for bit to the packed kernel on the same numbers (over a C that
 * holds the bias, for the bias cases). */
static void test_sgemm_inplace_ukr(void)
{
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 17 }, { 14, 16 }, { 2, 32 }, { 9, 31 } };
	static const int64_t ks[] = { 0, 1, 7, 300 };
	const int64_t ldb = NR + 13, lda = 300 + 5;
	float *ap = nkt_alloc(NK_F32, MR * 300), *bp = nkt_alloc(NK_F32, 300 * NR);
	float *bs = nkt_alloc(NK_F32, 300 * ldb + 1), *b = bs + 1, *A = nkt_alloc(NK_F32, MR * lda);
	float bias[NR], c0[MR * LDC], c1[MR * LDC], c2[MR * LDC], c3[MR * LDC];

	nkt_fill(bs, NK_F32, 300 * ldb + 1, -1, 1);
	nkt_fill(bias, NK_F32, NR, -1, 1);
	for (int64_t p = 0; p < 300; p++)
		memcpy(bp + p * NR, b + p * ldb, NR * sizeof(float));
	for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
		for (size_t t = 0; t < sizeof mn / sizeof mn[0]; t++)
			for (int v = 0; v < 3; v++) { /* beta 0, beta 1 over a C, a bias row with beta 0.75 */
				float beta = v == 2 ? 0.75f : (float)v;
				const float *bv = v == 2 ? bias : NULL;
				int m = mn[t][0], n = mn[t][1];

				nkt_fill(A, NK_F32, MR * lda, -1, 1);
				for (int i = m; i < MR; i++)
					for (int64_t p = 0; p < lda; p++)
						A[i * lda + p] = NAN;
				for (int64_t p = 0; p < ks[q]; p++)
					for (int i = 0; i < MR; i++)
						ap[p * MR + i] = i < m ? A[i * lda + p] : 0.0f;
				for (int i = 0; i < MR * LDC; i++)
					c0[i] = c1[i] = c2[i] = c3[i] = v == 1 ? (float)(i % 7) - 3 : NAN;
				for (int i = 0; bv && i < m; i++)
					memcpy(c0 + i * LDC, bias, (size_t)n * sizeof(float));
				nk_sgemm_avx2_14x32(ks[q], ap, bp, c0, LDC, 1, 0.5f, beta, m, n);
				nk_sgemm_avx2_14x32_a(ks[q], A, lda, bp, c1, LDC, 0.5f, beta, bv, m, n);
				if (bv)
					nk_sgemm_avx2_14x32_bias(ks[q], ap, bp, c2, LDC, 0.5f, beta, bv, m, n);
				else
					nk_sgemm_avx2_14x32_b(ks[q], ap, b, ldb, c2, LDC, 1, 0.5f, beta, m, n);
				for (int i = 0; i < MR * LDC; i++) {
					CHECK(same(c0[i], c1[i]), "sgemm_avx2_a k=%lld m=%d n=%d v=%d at %d", (long long)ks[q], m, n, v, i);
					CHECK(same(c0[i], c2[i]), "sgemm_avx2_%s k=%lld m=%d n=%d at %d", bv ? "bias" : "b",
					      (long long)ks[q], m, n, i);
				}
				if (have_avx512 && bv) {
					nk_sgemm_avx512_14x32_bias(ks[q], ap, bp, c3, LDC, 0.5f, beta, bv, m, n);
					for (int i = 0; i < MR * LDC; i++)
						CHECK(same(c2[i], c3[i]), "sgemm_bias avx2 vs avx512 k=%lld m=%d n=%d at %d",
						      (long long)ks[q], m, n, i);
				}
			}
	free(ap), free(bp), free(bs), free(A);
}

static void test_dgemm_ukr(void)
{
	static const int mn[][2] = { { 14, 16 }, { 1, 1 }, { 13, 9 }, { 14, 8 }, { 3, 15 }, { 7, 4 } };
	static double a[NK_DGEMM_MR * 100] __attribute__((aligned(64))), b[100 * NK_DGEMM_NR] __attribute__((aligned(64)));
	double c0[NK_DGEMM_MR * NK_DGEMM_NR * 2], c1[NK_DGEMM_MR * NK_DGEMM_NR * 2], c2[NK_DGEMM_MR * NK_DGEMM_NR * 2];

	for (int64_t k = 0; k <= 99; k += 33)
		for (size_t q = 0; q < sizeof mn / sizeof mn[0]; q++)
			for (int v = 0; v < 4; v++) {
				double beta = v & 1 ? 0.5 : 0;
				int64_t rs = v & 2 ? 1 : NK_DGEMM_NR + 1, cs = v & 2 ? NK_DGEMM_MR + 2 : 1;
				int m = mn[q][0], n = mn[q][1];
				bool ok = true, eq = true;

				nkt_fill(a, NK_F64, NK_DGEMM_MR * k, -1, 1);
				nkt_fill(b, NK_F64, k * NK_DGEMM_NR, -1, 1);
				for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++)
					c0[i] = c1[i] = c2[i] = beta == 0 ? NAN : nkt_uniform(-1, 1);
				nk_dgemm_ref_14x16(k, a, b, c0, rs, cs, -1.25, beta, m, n);
				nk_dgemm_avx2_14x16(k, a, b, c1, rs, cs, -1.25, beta, m, n);
				if (have_avx512)
					nk_dgemm_avx512_14x16(k, a, b, c2, rs, cs, -1.25, beta, m, n);
				for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++) {
					ok &= isnan(c0[i]) ? isnan(c1[i]) : fabs(c1[i] - c0[i]) <= 1e-13 * (double)(k + 1);
					eq &= !have_avx512 || (isnan(c2[i]) ? isnan(c1[i]) : c1[i] == c2[i]);
				}
				CHECK(ok, "dgemm_avx2 k=%lld m=%d n=%d beta=%g strided=%d", (long long)k, m, n, beta, v >> 1);
				CHECK(eq, "dgemm_avx2 vs avx512 k=%lld m=%d n=%d beta=%g strided=%d", (long long)k, m, n, beta, v >> 1);
			}
}

static void test_dot(void)
{
	static const int64_t ns[] = { 1, 7, 8, 63, 64, 65, 200, 4099 };
	float *x = nkt_alloc(NK_F32, 4099), *y = nkt_alloc(NK_F32, 4099);

	nkt_fill(x, NK_F32, 4099, -1, 1);
	nkt_fill(y, NK_F32, 4099, -1, 1);
	for (size_t q = 0; q < sizeof ns / sizeof ns[0]; q++) {
		double s = 0;

		for (int64_t i = 0; i < ns[q]; i++)
			s += (double)x[i] * y[i];
		float d = nk_dot_f32_avx2(x, y, ns[q]);
		CHECK(fabs(d - s) <= 1e-6 * (double)ns[q], "dot_f32_avx2 n=%lld: %g vs %g", (long long)ns[q], d, s);
	}
	free(x), free(y);
}

/* ---- the packed driver with the AVX2 table against the reference ------------------------------- */

static int64_t layout(int64_t rows, int64_t cols, bool trans, int64_t batch, int64_t *rs, int64_t *cs, int64_t *bs)
{
	int64_t ld = (trans ? rows : cols) + 3;

	*rs = trans ? 1 : ld;
	*cs = trans ? ld : 1;
	*bs = (trans ? cols : rows) * ld + 5;
	return *bs * batch;
}

typedef struct {
	int64_t M, N, K, batch;
	bool ta, tb, tc, bias;
	double alpha, beta;
} gcase_t;

static void check_driver(int dtype, gcase_t c)
{
	nk_gemm_args_t g = { .dtype = dtype, .M = c.M, .N = c.N, .K = c.K, .batch = c.batch, .alpha = c.alpha, .beta = c.beta };
	int64_t na = layout(c.M, c.K, c.ta, c.batch, &g.rs_a, &g.cs_a, &g.bs_a);
	int64_t nb = layout(c.K, c.N, c.tb, c.batch, &g.rs_b, &g.cs_b, &g.bs_b);
	int64_t ncc = layout(c.M, c.N, c.tc, c.batch, &g.rs_c, &g.cs_c, &g.bs_c);
	void *A = nkt_alloc(dtype, na), *B = nkt_alloc(dtype, nb), *bias = nkt_alloc(dtype, c.N);
	void *C0 = nkt_alloc(dtype, ncc), *C1 = nkt_alloc(dtype, ncc), *C2 = nkt_alloc(dtype, ncc);
	size_t bytes = (size_t)ncc * nk_fp_elem_size(dtype);
	double atol, rtol, err;

	nkt_fill(A, dtype, na, -1, 1);
	nkt_fill(B, dtype, nb, -1, 1);
	nkt_fill(bias, dtype, c.N, -1, 1);
	if (c.beta == 0 || c.bias)
		for (int64_t i = 0; i < ncc; i++)
			nk_fp_stored(C0, dtype, i, NAN); /* not read */
	else
		nkt_fill(C0, dtype, ncc, -1, 1);
	memcpy(C1, C0, bytes);
	memcpy(C2, C0, bytes);
	g.A = A, g.B = B;
	if (c.bias)
		g.bias = bias, g.rs_bias = 0, g.cs_bias = 1, g.bs_bias = 0;
	nk_gemm_args_t r = g, h = g;
	r.C = C0, g.C = C1, h.C = C2;
	CHECK(nk_gemm_ref(&r) == 0, "ref failed");
	CHECK(nk_gemm_packed(&g, &nk_gemm_isa_avx2) == 0, "packed avx2 failed");
	switch (dtype) {
	case NK_F64: atol = 1e-13 * (double)(c.K + 1), rtol = 1e-12; break;
	case NK_F32: atol = 2e-6 * (double)(c.K + 1), rtol = 1e-5; break;
	case NK_BF16: atol = 1e-4 * sqrt((double)c.K + 1), rtol = 1.0 / 128; break;
	default: atol = 1e-4 * sqrt((double)c.K + 1), rtol = 1.0 / 1024; break;
	}
	err = nkt_err(C1, C0, dtype, ncc, atol, rtol);
	CHECK(err <= 1, "avx2 driver %s M=%lld N=%lld K=%lld batch=%lld ta=%d tb=%d tc=%d bias=%d alpha=%g beta=%g: err %g",
	      nkt_dtype_name(dtype), (long long)c.M, (long long)c.N, (long long)c.K, (long long)c.batch, c.ta, c.tb, c.tc,
	      c.bias, c.alpha, c.beta, err);
	/* f32 and f64 on the AVX-512 table: the same sums in the same order, so the same bits */
	if (have_avx512 && (dtype == NK_F32 || dtype == NK_F64)) {
		CHECK(nk_gemm_packed(&h, &nk_gemm_isa_avx512) == 0, "packed avx512 failed");
		CHECK(!memcmp(C1, C2, bytes), "avx2 vs avx512 driver %s M=%lld N=%lld K=%lld ta=%d tb=%d tc=%d bias=%d beta=%g",
		      nkt_dtype_name(dtype), (long long)c.M, (long long)c.N, (long long)c.K, c.ta, c.tb, c.tc, c.bias, c.beta);
	}
	free(A), free(B), free(bias), free(C0), free(C1), free(C2);
}

static void test_driver(void)
{
	static const gcase_t cases[] = {
		{ 1, 1, 1, 1, 0, 0, 0, 0, 1, 0 },         { 14, 32, 16, 1, 0, 0, 0, 0, 1, 0 },
		{ 15, 33, 17, 1, 1, 0, 0, 0, 1.5, 0.5 },  { 100, 77, 300, 2, 0, 1, 0, 0, 1, 1 },
		{ 129, 65, 513, 1, 1, 1, 1, 0, -1, 0.25 }, { 200, 300, 40, 1, 0, 0, 0, 1, 1, 1 },
		{ 64, 64, 1, 3, 0, 1, 1, 0, 2, 0 },       { 333, 130, 1100, 1, 0, 0, 0, 1, 0.5, 0.75 },
		{ 7, 2049, 33, 1, 1, 0, 0, 0, 1, 0 },
	};
	static const int dts[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };

	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
		for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++)
			if (!(cases[q].bias && dts[d] == NK_F64))
				check_driver(dts[d], cases[q]);
}

/* NEURON_KERNELS=avx2 (set before the first kernel call) makes the GEMM family's table the AVX2 one. */
static void test_level(void)
{
	CHECK(nk_kernels_level() == NK_ISA_AVX2, "level %s, not avx2", nk_isa_name(nk_kernels_level()));
	CHECK(nk_family_isa(NK_FAM_GEMM) == NK_ISA_AVX2, "gemm family at %s", nk_isa_name(nk_family_isa(NK_FAM_GEMM)));
	CHECK(strcmp(nk_gemm_isa_select().name, "avx2") == 0, "gemm table %s", nk_gemm_isa_select().name);
}

int main(void)
{
	__builtin_cpu_init();
	have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	have_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
	if (!have_avx2) {
		printf("test_gemm_avx2: this CPU has no AVX2 + FMA: skipped\n");
		return ctest_finish();
	}
	setenv("NEURON_KERNELS", "avx2", 1);
	nkt_seed(7);
	RUN(test_level);
	RUN(test_sgemm_ukr);
	RUN(test_sgemm_inplace_ukr);
	RUN(test_dgemm_ukr);
	RUN(test_dot);
	RUN(test_driver);
	return ctest_finish();
}
