/* test_gemm.c - GEMM: AVX-512 micro-kernels and packers against the portable ones, nk_gemm_run against
 * nk_gemm_ref over dtypes, odd sizes (edge tiles), transposed strides, batch, alpha/beta (beta 0 with
 * NaN in C), the GEMV and f64 paths; then informational GFLOP/s for 512^3, 1024^3 (and 2048^3). */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_gemm_impl.h"
#include "nk_test.h"
#include "nrt.h"

static bool have_avx512, have_bf16;

/* ---- micro-kernels ---------------------------------------------------------------------------- */

static void check_ukr_case(int64_t k, int m, int n, float beta, bool strided)
{
	float a[NK_GEMM_MR * 300] __attribute__((aligned(64)));
	float b[300 * NK_GEMM_NR] __attribute__((aligned(64)));
	float c0[NK_GEMM_MR * NK_GEMM_NR * 2], c1[NK_GEMM_MR * NK_GEMM_NR * 2];
	int64_t rs = strided ? 1 : NK_GEMM_NR + 3, cs = strided ? NK_GEMM_MR + 1 : 1;

	nkt_fill(a, NK_F32, NK_GEMM_MR * k, -1, 1);
	nkt_fill(b, NK_F32, k * NK_GEMM_NR, -1, 1);
	for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++)
		c0[i] = c1[i] = beta == 0 ? NAN : (float)nkt_uniform(-1, 1);
	nk_sgemm_ref_14x32(k, a, b, c0, rs, cs, 0.75f, beta, m, n);
	nk_sgemm_avx512_14x32(k, a, b, c1, rs, cs, 0.75f, beta, m, n);
	for (int i = 0; i < NK_GEMM_MR; i++)
		for (int j = 0; j < NK_GEMM_NR; j++) {
			int64_t o = i * rs + j * cs;
			bool inside = i < m && j < n;

			if (!inside) {
				CHECK(isnan(c1[o]) == isnan(c0[o]) && (isnan(c0[o]) || c1[o] == c0[o]),
				      "sgemm ukr wrote outside the tile k=%lld m=%d n=%d (%d,%d)", (long long)k, m,
				      n, i, j);
				continue;
			}
			CHECK(fabsf(c1[o] - c0[o]) <= 1e-5f * (float)(k + 1), "sgemm ukr k=%lld m=%d n=%d (%d,%d): %g vs %g",
			      (long long)k, m, n, i, j, c1[o], c0[o]);
		}
}

static void test_sgemm_ukr(void)
{
	static const int64_t ks[] = { 0, 1, 5, 300 };
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 17 }, { 14, 16 }, { 3, 31 }, { 7, 32 } };
	static const float betas[] = { 0, 1, 0.5f };

	if (!have_avx512)
		return;
	for (size_t a = 0; a < 4; a++)
		for (size_t b = 0; b < sizeof mn / sizeof mn[0]; b++)
			for (size_t c = 0; c < 3; c++)
				for (int s = 0; s < 2; s++)
					check_ukr_case(ks[a], mn[b][0], mn[b][1], betas[c], s);
}

/* sgemm_b (B rows read in place, row stride ldb, unaligned) against the packed-B kernel on the same
 * numbers: the same products in the same order, so the results are equal. */
static void test_sgemm_b_ukr(void)
{
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 17 }, { 14, 16 }, { 2, 32 } };
	static const int64_t ks[] = { 0, 1, 7, 300 };
	int64_t ldb = NK_GEMM_NR + 13;
	float *a = nkt_alloc(NK_F32, NK_GEMM_MR * 300), *bp = nkt_alloc(NK_F32, 300 * NK_GEMM_NR);
	float *bs = nkt_alloc(NK_F32, 300 * ldb + 1), *b = bs + 1; /* not 64-byte aligned */
	float c0[NK_GEMM_MR * 40], c1[NK_GEMM_MR * 40], c2[NK_GEMM_MR * 40], init[NK_GEMM_MR * 40];

	nkt_fill(a, NK_F32, NK_GEMM_MR * 300, -1, 1);
	nkt_fill(bs, NK_F32, 300 * ldb + 1, -1, 1);
	for (int64_t p = 0; p < 300; p++)
		memcpy(bp + p * NK_GEMM_NR, b + p * ldb, NK_GEMM_NR * sizeof(float));
	for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
		for (size_t t = 0; t < sizeof mn / sizeof mn[0]; t++)
			for (int v = 0; v < 2; v++) {
				float beta = v ? 0.5f : 0.0f;
				int m = mn[t][0], n = mn[t][1];

				for (int i = 0; i < NK_GEMM_MR * 40; i++)
					init[i] = c0[i] = c1[i] = c2[i] = v ? (float)nkt_uniform(-1, 1) : NAN;
				nk_sgemm_ref_14x32(ks[q], a, bp, c0, 40, 1, 0.75f, beta, m, n);
				nk_sgemm_ref_14x32_b(ks[q], a, b, ldb, c1, 40, 1, 0.75f, beta, m, n);
				for (int i = 0; i < NK_GEMM_MR * 40; i++)
					CHECK(isnan(c0[i]) ? isnan(c1[i]) : c0[i] == c1[i],
					      "sgemm_ref_b k=%lld m=%d n=%d at %d", (long long)ks[q], m, n, i);
				if (!have_avx512)
					continue;
				memcpy(c0, init, sizeof c0);
				nk_sgemm_avx512_14x32(ks[q], a, bp, c0, 40, 1, 0.75f, beta, m, n);
				nk_sgemm_avx512_14x32_b(ks[q], a, b, ldb, c2, 40, 1, 0.75f, beta, m, n);
				for (int i = 0; i < NK_GEMM_MR * 40; i++)
					CHECK(isnan(c0[i]) ? isnan(c2[i]) : c0[i] == c2[i],
					      "sgemm_avx512_b k=%lld m=%d n=%d at %d", (long long)ks[q], m, n, i);
				/* with the spread prefetch (of a, strided, and of nothing): the same results */
				for (int f = 0; f < 2; f++) {
					memcpy(c2, init, sizeof c2);
					nk_sgemm_avx512_14x32_b_pf(ks[q], a, b, ldb, c2, 40, 1, 0.75f, beta, m, n,
								   f ? (const char *)a : NULL, 4 * NK_GEMM_MR);
					for (int i = 0; i < NK_GEMM_MR * 40; i++)
						CHECK(isnan(c0[i]) ? isnan(c2[i]) : c0[i] == c2[i],
						      "sgemm_avx512_b_pf k=%lld m=%d n=%d pf %d at %d", (long long)ks[q], m, n, f, i);
				}
			}
	free(a), free(bp), free(bs);
}

/* sgemm_a (row-major A read in place) and sgemm_bias (C's old value a bias row, C not read) against the
 * packed kernel on the same numbers (with a bias: over a C filled with it): the same products and fma in
 * the same order, equal bit for bit; rows m.. of A not read (NaN there), nothing outside the tile
 * written.  Portable and AVX-512. */
static void test_sgemm_inplace_a_bias_ukr(void)
{
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 17 }, { 14, 16 }, { 2, 32 }, { 9, 31 } };
	static const int64_t ks[] = { 0, 1, 7, 300 };
	const int64_t lda = 300 + 5;
	float *A = nkt_alloc(NK_F32, NK_GEMM_MR * lda), *ap = nkt_alloc(NK_F32, NK_GEMM_MR * 300);
	float *bp = nkt_alloc(NK_F32, 300 * NK_GEMM_NR);
	float bias[NK_GEMM_NR], c0[NK_GEMM_MR * 40], c1[NK_GEMM_MR * 40], c2[NK_GEMM_MR * 40];

	nkt_fill(bp, NK_F32, 300 * NK_GEMM_NR, -1, 1);
	nkt_fill(bias, NK_F32, NK_GEMM_NR, -1, 1);
	for (int isa = 0; isa < 1 + have_avx512; isa++)
		for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
			for (size_t t = 0; t < sizeof mn / sizeof mn[0]; t++)
				for (int v = 0; v < 3; v++) { /* beta 0, beta 1 over a C, a bias row with beta 0.75 */
					float beta = v == 2 ? 0.75f : (float)v;
					const float *bv = v == 2 ? bias : NULL;
					int m = mn[t][0], n = mn[t][1];

					nkt_fill(A, NK_F32, NK_GEMM_MR * lda, -1, 1);
					for (int i = m; i < NK_GEMM_MR; i++) /* rows past m: never read */
						for (int64_t p = 0; p < lda; p++)
							A[i * lda + p] = NAN;
					for (int64_t p = 0; p < ks[q]; p++)
						for (int i = 0; i < NK_GEMM_MR; i++)
							ap[p * NK_GEMM_MR + i] = i < m ? A[i * lda + p] : 0.0f;
					for (int i = 0; i < NK_GEMM_MR * 40; i++)
						c0[i] = c1[i] = c2[i] = v == 1 ? (float)(i % 7) - 3 : NAN;
					for (int i = 0; bv && i < m; i++)
						memcpy(c0 + i * 40, bias, (size_t)n * sizeof(float));
					(isa ? nk_sgemm_avx512_14x32 : nk_sgemm_ref_14x32)(ks[q], ap, bp, c0, 40, 1, 0.5f, beta, m, n);
					(isa ? nk_sgemm_avx512_14x32_a : nk_sgemm_ref_14x32_a)(ks[q], A, lda, bp, c1, 40, 0.5f, beta, bv,
											       m, n);
					if (bv)
						(isa ? nk_sgemm_avx512_14x32_bias : nk_sgemm_ref_14x32_bias)(ks[q], ap, bp, c2, 40, 0.5f,
													  beta, bv, m, n);
					for (int i = 0; i < NK_GEMM_MR * 40; i++) {
						CHECK(isnan(c0[i]) ? isnan(c1[i]) : c0[i] == c1[i], "sgemm_a %s k=%lld m=%d n=%d v=%d at %d",
						      isa ? "avx512" : "ref", (long long)ks[q], m, n, v, i);
						CHECK(!bv || (isnan(c0[i]) ? isnan(c2[i]) : c0[i] == c2[i]),
						      "sgemm_bias %s k=%lld m=%d n=%d at %d", isa ? "avx512" : "ref", (long long)ks[q], m, n, i);
					}
				}
	free(A), free(ap), free(bp);
}

/* The _k2 kernels (k loop unrolled twice, the Intel context's) against the plain AVX-512 ones: the same
 * products in the same order, so equal bit for bit, over every row count, the half and full column tiles,
 * odd and even k, beta 0 (NaN in C, not read) / 1 / 0.5, a strided C, B read in place (unaligned, with
 * and without the spread A prefetch), row-major A in place (NaN in the rows past m) and a bias row.
 * Nothing outside the tile is written (NaN or the old value compared there too). */
static bool same_f32(const float *x, const float *y, int n)
{
	for (int i = 0; i < n; i++)
		if (isnan(x[i]) ? !isnan(y[i]) : x[i] != y[i])
			return false;
	return true;
}

static void test_sgemm_k2_ukr(void)
{
	static const int ns[] = { 1, 15, 16, 17, 31, 32 };
	static const int64_t ks[] = { 0, 1, 2, 3, 8, 301 };
	enum { LD = 40, KMAX = 301 };
	const int64_t lda = KMAX + 5, ldb = NK_GEMM_NR + 13;
	float *ap = nkt_alloc(NK_F32, NK_GEMM_MR * KMAX), *bp = nkt_alloc(NK_F32, KMAX * NK_GEMM_NR);
	float *A = nkt_alloc(NK_F32, NK_GEMM_MR * lda), *bs = nkt_alloc(NK_F32, KMAX * ldb + 1), *b = bs + 1;
	float bias[NK_GEMM_NR], init[NK_GEMM_MR * LD], c0[NK_GEMM_MR * LD], c1[NK_GEMM_MR * LD];

	if (!have_avx512)
		goto out;
	nkt_fill(bp, NK_F32, KMAX * NK_GEMM_NR, -1, 1);
	nkt_fill(bs, NK_F32, KMAX * ldb + 1, -1, 1);
	nkt_fill(bias, NK_F32, NK_GEMM_NR, -1, 1);
	for (int m = 1; m <= NK_GEMM_MR; m++) {
		nkt_fill(A, NK_F32, NK_GEMM_MR * lda, -1, 1);
		for (int i = m; i < NK_GEMM_MR; i++) /* rows past m: never read */
			for (int64_t p = 0; p < lda; p++)
				A[i * lda + p] = NAN;
		for (int64_t p = 0; p < KMAX; p++)
			for (int i = 0; i < NK_GEMM_MR; i++)
				ap[p * NK_GEMM_MR + i] = i < m ? A[i * lda + p] : 0.0f;
		for (size_t q = 0; q < sizeof ks / sizeof ks[0]; q++)
			for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++)
				for (int v = 0; v < 4; v++) { /* beta 0, 1, 0.5; v 3: beta 0.5 over a strided C */
					int n = ns[t];
					int64_t k = ks[q], rs = v == 3 ? 1 : LD, cs = v == 3 ? NK_GEMM_MR + 1 : 1;
					float beta = v == 0 ? 0.0f : v == 1 ? 1.0f : 0.5f;

					for (int i = 0; i < NK_GEMM_MR * LD; i++)
						init[i] = v ? (float)nkt_uniform(-1, 1) : NAN;
					memcpy(c0, init, sizeof c0), memcpy(c1, init, sizeof c1);
					nk_sgemm_avx512_14x32(k, ap, bp, c0, rs, cs, 0.75f, beta, m, n);
					nk_sgemm_avx512_14x32_k2(k, ap, bp, c1, rs, cs, 0.75f, beta, m, n);
					CHECK(same_f32(c0, c1, NK_GEMM_MR * LD), "sgemm k2 k=%lld m=%d n=%d v=%d", (long long)k, m, n, v);
					memcpy(c0, init, sizeof c0), memcpy(c1, init, sizeof c1);
					nk_sgemm_avx512_14x32_b(k, ap, b, ldb, c0, rs, cs, 0.75f, beta, m, n);
					nk_sgemm_avx512_14x32_k2_b(k, ap, b, ldb, c1, rs, cs, 0.75f, beta, m, n);
					CHECK(same_f32(c0, c1, NK_GEMM_MR * LD), "sgemm k2_b k=%lld m=%d n=%d v=%d", (long long)k, m, n, v);
					for (int f = 0; f < 2; f++) {
						memcpy(c1, init, sizeof c1);
						nk_sgemm_avx512_14x32_k2_b_pf(k, ap, b, ldb, c1, rs, cs, 0.75f, beta, m, n,
									      f ? (const char *)A : NULL, 4 * lda);
						CHECK(same_f32(c0, c1, NK_GEMM_MR * LD), "sgemm k2_b_pf k=%lld m=%d n=%d v=%d pf %d",
						      (long long)k, m, n, v, f);
					}
					if (v == 3)
						continue;
					/* A in place, with a bias row (v 2) or C's old value */
					const float *bv = v == 2 ? bias : NULL;

					memcpy(c0, init, sizeof c0), memcpy(c1, init, sizeof c1);
					nk_sgemm_avx512_14x32_a(k, A, lda, bp, c0, LD, 0.5f, beta, bv, m, n);
					nk_sgemm_avx512_14x32_k2_a(k, A, lda, bp, c1, LD, 0.5f, beta, bv, m, n);
					CHECK(same_f32(c0, c1, NK_GEMM_MR * LD), "sgemm k2_a k=%lld m=%d n=%d v=%d", (long long)k, m, n, v);
					if (!bv)
						continue;
					memcpy(c0, init, sizeof c0), memcpy(c1, init, sizeof c1);
					nk_sgemm_avx512_14x32_bias(k, ap, bp, c0, LD, 0.5f, beta, bv, m, n);
					nk_sgemm_avx512_14x32_k2_bias(k, ap, bp, c1, LD, 0.5f, beta, bv, m, n);
					CHECK(same_f32(c0, c1, NK_GEMM_MR * LD), "sgemm k2_bias k=%lld m=%d n=%d", (long long)k, m, n);
				}
	}
out:
	free(ap), free(bp), free(A), free(bs);
}

/* n packed bf16 pairs (two random bf16 values in [-1, 1] per word), as the pair micro-kernels read them. */
static void fill_pairs(uint32_t *p, int64_t n)
{
	uint16_t h[2];

	for (int64_t i = 0; i < n; i++) {
		nkt_fill(h, NK_BF16, 2, -1, 1);
		p[i] = h[0] | (uint32_t)h[1] << 16;
	}
}

static void check_sbukr_case(int64_t kp, int m, int n, float beta)
{
	uint32_t a[NK_GEMM_MR * 200] __attribute__((aligned(64)));
	uint32_t b[200 * NK_GEMM_NR] __attribute__((aligned(64)));
	float c0[NK_GEMM_MR * NK_GEMM_NR], c1[NK_GEMM_MR * NK_GEMM_NR];

	fill_pairs(a, NK_GEMM_MR * kp);
	fill_pairs(b, kp * NK_GEMM_NR);
	for (int i = 0; i < NK_GEMM_MR * NK_GEMM_NR; i++)
		c0[i] = c1[i] = beta == 0 ? NAN : (float)nkt_uniform(-1, 1);
	nk_sbgemm_ref_14x32(kp, a, b, c0, NK_GEMM_NR, 1, 1.5f, beta, m, n);
	nk_sbgemm_avx512_14x32(kp, a, b, c1, NK_GEMM_NR, 1, 1.5f, beta, m, n);
	for (int i = 0; i < NK_GEMM_MR * NK_GEMM_NR; i++) {
		bool inside = i / NK_GEMM_NR < m && i % NK_GEMM_NR < n;

		if (inside)
			CHECK(fabsf(c1[i] - c0[i]) <= 1e-4f * (float)(kp + 1), "sbgemm ukr kp=%lld m=%d n=%d [%d]: %g vs %g",
			      (long long)kp, m, n, i, c1[i], c0[i]);
		else
			CHECK(isnan(c0[i]) ? isnan(c1[i]) : c1[i] == c0[i], "sbgemm ukr wrote outside the tile");
	}
}

static void test_sbgemm_ukr(void)
{
	if (!have_bf16)
		return;
	check_sbukr_case(0, 14, 32, 1);
	check_sbukr_case(1, 14, 32, 0);
	check_sbukr_case(7, 5, 20, 0.5f);
	check_sbukr_case(128, 14, 32, 0);
	check_sbukr_case(33, 13, 31, 1);
}

/* The bf16-C kernel against its reference: acc partials or none, beta 0 with NaN in C, edge tiles,
 * padded row stride; elements outside the tile must stay as they were. */
/* The C tiles of the bf16-C kernel checks (NK_GEMM_MR x 40): random bf16, or NaN when beta == 0 (C
 * must not be read then); c1 a copy of c0. */
static void fill_c_bf16(uint16_t *c0, uint16_t *c1, float beta)
{
	nkt_fill(c0, NK_BF16, NK_GEMM_MR * 40, -1, 1);
	if (beta == 0)
		for (int i = 0; i < NK_GEMM_MR * 40; i++)
			c0[i] = 0x7fc0;
	memcpy(c1, c0, NK_GEMM_MR * 40 * sizeof *c0);
}

static void check_sbc_case(int64_t kp, int m, int n, float beta, bool with_acc)
{
	uint32_t a[NK_GEMM_MR * 200] __attribute__((aligned(64)));
	uint32_t b[200 * NK_GEMM_NR] __attribute__((aligned(64)));
	float acc[NK_GEMM_MR * 40];
	uint16_t c0[NK_GEMM_MR * 40], c1[NK_GEMM_MR * 40];
	int64_t rs = 37, ld = 40;

	fill_pairs(a, NK_GEMM_MR * kp);
	fill_pairs(b, kp * NK_GEMM_NR);
	nkt_fill(acc, NK_F32, NK_GEMM_MR * 40, -4, 4);
	fill_c_bf16(c0, c1, beta);
	nk_sbgemm_ref_14x32_bf16c(kp, a, b, with_acc ? acc : NULL, ld, c0, rs, -1.5f, beta, m, n);
	nk_sbgemm_avx512_14x32_bf16c(kp, a, b, with_acc ? acc : NULL, ld, c1, rs, -1.5f, beta, m, n);
	for (int i = 0; i < NK_GEMM_MR * 37 && i < NK_GEMM_MR * 40; i++) {
		int r = i / (int)rs, col = i % (int)rs;
		bool inside = r < m && col < n;
		float x0 = nk_bf16_to_f32(c0[i]), x1 = nk_bf16_to_f32(c1[i]);

		if (inside)
			CHECK(fabsf(x1 - x0) <= 1e-4f * (float)(kp + 1) + fabsf(x0) / 128,
			      "sbgemm bf16c ukr kp=%lld m=%d n=%d beta=%g acc=%d (%d,%d): %g vs %g", (long long)kp, m,
			      n, beta, with_acc, r, col, x1, x0);
		else
			CHECK(c1[i] == c0[i], "sbgemm bf16c ukr wrote outside the tile (%d,%d)", r, col);
	}
}

static void test_sbgemm_bf16c_ukr(void)
{
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 31 }, { 2, 16 }, { 7, 17 } };

	if (!have_bf16)
		return;
	for (size_t q = 0; q < sizeof mn / sizeof mn[0]; q++)
		for (int v = 0; v < 4; v++) {
			check_sbc_case(v ? 37 : 0, mn[q][0], mn[q][1], v & 1 ? 0.5f : 0.0f, v & 2);
			check_sbc_case(128, mn[q][0], mn[q][1], v & 1 ? 1.0f : 0.0f, v & 2);
		}
}

/* The bf16 kernels that read A in place (row-major bf16, rows lda bytes apart, any 2-byte alignment,
 * only rows < m allocated: ASan sees a read past them) against the packed-A kernels: bitwise the same. */
static void check_inplace_a_case(int64_t kp, int m, int n, float beta, bool with_acc, int64_t lda_el)
{
	uint32_t a[NK_GEMM_MR * 200] __attribute__((aligned(64)));
	uint32_t b[200 * NK_GEMM_NR] __attribute__((aligned(64)));
	float acc[NK_GEMM_MR * 40], f0[NK_GEMM_MR * 40], f1[NK_GEMM_MR * 40];
	uint16_t c0[NK_GEMM_MR * 40], c1[NK_GEMM_MR * 40];
	/* one element of offset: the rows start 2-byte aligned (odd lda_el keeps alternating) */
	uint16_t *mem = malloc((size_t)(m * lda_el + 1) * sizeof(uint16_t)), *A = mem + 1;
	int64_t rs = 37, ld = 40;
	bool same = true;

	nkt_fill(mem, NK_BF16, m * lda_el + 1, -1, 1);
	nk_gemm_pack_a_pairs_ref(A, lda_el, 1, m, 2 * kp, a);
	fill_pairs(b, kp * NK_GEMM_NR);
	nkt_fill(acc, NK_F32, NK_GEMM_MR * 40, -4, 4);
	fill_c_bf16(c0, c1, beta);
	nk_sbgemm_avx512_14x32_bf16c(kp, a, b, with_acc ? acc : NULL, ld, c0, rs, -1.5f, beta, m, n);
	nk_sbgemm_avx512_14x32_bf16c_a(kp, A, lda_el * 2, b, with_acc ? acc : NULL, ld, c1, rs, -1.5f, beta, m, n);
	same &= !memcmp(c0, c1, sizeof c0);
	for (int i = 0; i < NK_GEMM_MR * 40; i++)
		f0[i] = f1[i] = beta == 0 ? NAN : (float)nkt_uniform(-1, 1);
	nk_sbgemm_avx512_14x32(kp, a, b, f0, ld, 1, 0.75f, beta, m, n);
	nk_sbgemm_avx512_14x32_a(kp, A, lda_el * 2, b, f1, ld, 1, 0.75f, beta, m, n);
	for (int i = 0; i < NK_GEMM_MR * 40; i++)
		same &= isnan(f0[i]) ? isnan(f1[i]) : f0[i] == f1[i];
	CHECK(same, "in-place A ukr differs from packed: kp=%lld m=%d n=%d beta=%g acc=%d lda=%lld", (long long)kp, m, n,
	      beta, with_acc, (long long)lda_el);
	/* the portable in-place references against the packed ones: the same sums, bitwise */
	memcpy(c1, c0, sizeof c0);
	nk_sbgemm_ref_14x32_bf16c(kp, a, b, with_acc ? acc : NULL, ld, c0, rs, 0.5f, beta, m, n);
	nk_sbgemm_ref_14x32_bf16c_a(kp, A, lda_el * 2, b, with_acc ? acc : NULL, ld, c1, rs, 0.5f, beta, m, n);
	same = !memcmp(c0, c1, sizeof c0);
	memcpy(f1, f0, sizeof f0);
	nk_sbgemm_ref_14x32(kp, a, b, f0, ld, 1, 0.75f, beta, m, n);
	nk_sbgemm_ref_14x32_a(kp, A, lda_el * 2, b, f1, ld, 1, 0.75f, beta, m, n);
	for (int i = 0; i < NK_GEMM_MR * 40; i++)
		same &= isnan(f0[i]) ? isnan(f1[i]) : f0[i] == f1[i];
	CHECK(same, "in-place A reference differs from the packed one: kp=%lld m=%d n=%d beta=%g acc=%d", (long long)kp, m,
	      n, beta, with_acc);
	free(mem);
}

static void test_sbgemm_inplace_a_ukr(void)
{
	static const int mn[][2] = { { 14, 32 }, { 1, 1 }, { 13, 31 }, { 2, 16 }, { 7, 17 } };

	if (!have_bf16)
		return;
	for (size_t q = 0; q < sizeof mn / sizeof mn[0]; q++)
		for (int v = 0; v < 4; v++) {
			check_inplace_a_case(v ? 37 : 0, mn[q][0], mn[q][1], v & 1 ? 0.5f : 0.0f, v & 2, 2 * 37 + 3);
			check_inplace_a_case(128, mn[q][0], mn[q][1], v & 1 ? 1.0f : 0.0f, v & 2, 256);
		}
}

static void test_dgemm_ukr(void)
{
	static const int mn[][2] = { { 14, 16 }, { 1, 1 }, { 13, 9 }, { 14, 8 }, { 3, 15 } };
	double a[NK_DGEMM_MR * 100] __attribute__((aligned(64)));
	double b[100 * NK_DGEMM_NR] __attribute__((aligned(64)));
	double c0[NK_DGEMM_MR * NK_DGEMM_NR * 2], c1[NK_DGEMM_MR * NK_DGEMM_NR * 2];

	if (!have_avx512)
		return;
	for (int64_t k = 0; k <= 99; k += 33)
		for (size_t q = 0; q < sizeof mn / sizeof mn[0]; q++)
			for (int v = 0; v < 4; v++) {
				double beta = v & 1 ? 0.5 : 0;
				int64_t rs = v & 2 ? 1 : NK_DGEMM_NR + 1, cs = v & 2 ? NK_DGEMM_MR + 2 : 1;
				int m = mn[q][0], n = mn[q][1];
				bool ok = true;

				nkt_fill(a, NK_F64, NK_DGEMM_MR * k, -1, 1);
				nkt_fill(b, NK_F64, k * NK_DGEMM_NR, -1, 1);
				for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++)
					c0[i] = c1[i] = beta == 0 ? NAN : nkt_uniform(-1, 1);
				nk_dgemm_ref_14x16(k, a, b, c0, rs, cs, -1.25, beta, m, n);
				nk_dgemm_avx512_14x16(k, a, b, c1, rs, cs, -1.25, beta, m, n);
				for (size_t i = 0; i < sizeof c0 / sizeof c0[0]; i++)
					ok &= isnan(c0[i]) ? isnan(c1[i]) : fabs(c1[i] - c0[i]) <= 1e-13 * (double)(k + 1);
				CHECK(ok, "dgemm ukr k=%lld m=%d n=%d beta=%g strided=%d", (long long)k, m, n, beta, v >> 1);
			}
}

/* ---- packers ---------------------------------------------------------------------------------- */

static void test_packers(void)
{
	static const int dts[] = { NK_F32, NK_BF16, NK_F16 };
	static float src[80 * 80];
	static float d0[NK_GEMM_MR * 80 * 4 + 64] __attribute__((aligned(64)));
	static float d1[NK_GEMM_MR * 80 * 4 + 64] __attribute__((aligned(64)));
	static float e0[80 * 96] __attribute__((aligned(64))), e1[80 * 96] __attribute__((aligned(64)));
	static const int64_t strides[][2] = { { 80, 1 }, { 1, 80 }, { 3, 7 } };
	static const int ms[] = { 1, 13, 14 };
	static const int64_t ks[] = { 1, 5, 17, 64 };
	static const int64_t ns[] = { 1, 31, 32, 33, 70 };

	if (!have_avx512)
		return;
	for (int d = 0; d < 3; d++) {
		nkt_fill(src, dts[d], 80 * 80, -2, 2);
		for (int s = 0; s < 3; s++) {
			int64_t rs = strides[s][0], cs = strides[s][1];

			for (int mi = 0; mi < 3; mi++)
				for (int ki = 0; ki < 4; ki++) {
					int m = ms[mi];
					int64_t k = ks[ki];

					memset(d0, 0x7f, sizeof d0);
					memset(d1, 0x7f, sizeof d1);
					nk_gemm_pack_a_ref(src, dts[d], rs, cs, m, k, d0);
					nk_gemm_pack_a_avx512(src, dts[d], rs, cs, m, k, d1);
					CHECK(!memcmp(d0, d1, sizeof d0), "pack_a %s rs=%lld cs=%lld m=%d k=%lld",
					      nkt_dtype_name(dts[d]), (long long)rs, (long long)cs, m, (long long)k);
					if (dts[d] != NK_BF16)
						continue;
					memset(d0, 0x7f, sizeof d0);
					memset(d1, 0x7f, sizeof d1);
					nk_gemm_pack_a_pairs_ref(src, rs, cs, m, k, (uint32_t *)d0);
					nk_gemm_pack_a_pairs_avx512(src, rs, cs, m, k, (uint32_t *)d1);
					CHECK(!memcmp(d0, d1, sizeof d0), "pack_a_pairs rs=%lld cs=%lld m=%d k=%lld",
					      (long long)rs, (long long)cs, m, (long long)k);
				}
			for (int ni = 0; ni < 5; ni++)
				for (int ki = 0; ki < 4; ki++) {
					int64_t n = ns[ni], k = ks[ki];

					memset(e0, 0x7f, sizeof e0);
					memset(e1, 0x7f, sizeof e1);
					nk_gemm_pack_b_ref(src, dts[d], rs, cs, k, n, e0);
					nk_gemm_pack_b_avx512(src, dts[d], rs, cs, k, n, e1);
					CHECK(!memcmp(e0, e1, sizeof e0), "pack_b %s rs=%lld cs=%lld n=%lld k=%lld",
					      nkt_dtype_name(dts[d]), (long long)rs, (long long)cs, (long long)n,
					      (long long)k);
					if (dts[d] != NK_BF16)
						continue;
					memset(e0, 0x7f, sizeof e0);
					memset(e1, 0x7f, sizeof e1);
					nk_gemm_pack_b_pairs_ref(src, rs, cs, k, n, (uint32_t *)e0);
					nk_gemm_pack_b_pairs_avx512(src, rs, cs, k, n, (uint32_t *)e1);
					CHECK(!memcmp(e0, e1, sizeof e0), "pack_b_pairs rs=%lld cs=%lld n=%lld k=%lld",
					      (long long)rs, (long long)cs, (long long)n, (long long)k);
				}
		}
	}
}

/* Row-major B wider than the 4-panel sweep of the packers (5 and 6 panels, a ragged last one). */
static void test_packers_wide(void)
{
	static const int dts[] = { NK_F32, NK_BF16, NK_F16 };
	static const int64_t ns[] = { 150, 161, 192 }, ks[] = { 1, 37, 40 };
	int64_t ld = 200;
	float *src = nkt_alloc(NK_F32, 40 * 200);
	/* packed panels are 64-byte aligned */
	float *e0 = aligned_alloc(64, (40 * 192 + 64) * sizeof(float));
	float *e1 = aligned_alloc(64, (40 * 192 + 64) * sizeof(float));

	if (!have_avx512)
		goto out;
	for (int d = 0; d < 3; d++) {
		nkt_fill(src, dts[d], 40 * 200, -2, 2);
		for (int ni = 0; ni < 3; ni++)
			for (int ki = 0; ki < 3; ki++) {
				int64_t n = ns[ni], k = ks[ki];
				size_t bytes = (size_t)(40 * 192 + 64) * sizeof(float);

				memset(e0, 0x7f, bytes);
				memset(e1, 0x7f, bytes);
				nk_gemm_pack_b_ref(src, dts[d], ld, 1, k, n, e0);
				nk_gemm_pack_b_avx512(src, dts[d], ld, 1, k, n, e1);
				CHECK(!memcmp(e0, e1, bytes), "pack_b wide %s n=%lld k=%lld", nkt_dtype_name(dts[d]),
				      (long long)n, (long long)k);
				if (dts[d] != NK_BF16)
					continue;
				memset(e0, 0x7f, bytes);
				memset(e1, 0x7f, bytes);
				nk_gemm_pack_b_pairs_ref(src, ld, 1, k, n, (uint32_t *)e0);
				nk_gemm_pack_b_pairs_avx512(src, ld, 1, k, n, (uint32_t *)e1);
				CHECK(!memcmp(e0, e1, bytes), "pack_b_pairs wide n=%lld k=%lld", (long long)n,
				      (long long)k);
			}
	}
out:
	free(src), free(e0), free(e1);
}

/* ---- whole GEMM against the reference ------------------------------------------------------- */

typedef struct {
	int64_t M, N, K, batch;
	bool ta, tb, tc; /* A, B stored transposed; C column-major */
	double alpha, beta;
} gcase_t;

typedef int (*gemm_fn)(const nk_gemm_args_t *g);

static int run_gemm(const nk_gemm_args_t *g)
{
	return nk_gemm_run((void *)g);
}

static int run_packed_portable(const nk_gemm_args_t *g)
{
	return nk_gemm_packed(g, &nk_gemm_isa_ref);
}

/* Lays out one operand of rows x cols (padded leading dimension, padded batch stride). */
static int64_t layout(int64_t rows, int64_t cols, bool trans, int64_t batch, int64_t *rs, int64_t *cs, int64_t *bs)
{
	int64_t ld = (trans ? rows : cols) + 3;

	*rs = trans ? 1 : ld;
	*cs = trans ? ld : 1;
	*bs = (trans ? cols : rows) * ld + 5;
	return *bs * batch;
}

static void check_gemm(int dtype, gcase_t c, gemm_fn fn, const char *what)
{
	nk_gemm_args_t g = { .dtype = dtype, .M = c.M, .N = c.N, .K = c.K, .batch = c.batch,
			     .alpha = c.alpha, .beta = c.beta };
	int64_t na = layout(c.M, c.K, c.ta, c.batch, &g.rs_a, &g.cs_a, &g.bs_a);
	int64_t nb = layout(c.K, c.N, c.tb, c.batch, &g.rs_b, &g.cs_b, &g.bs_b);
	int64_t ncc = layout(c.M, c.N, c.tc, c.batch, &g.rs_c, &g.cs_c, &g.bs_c);
	void *A = nkt_alloc(dtype, na), *B = nkt_alloc(dtype, nb);
	void *C0 = nkt_alloc(dtype, ncc), *C1 = nkt_alloc(dtype, ncc);
	nk_gemm_args_t r;
	double atol, rtol, err;

	nkt_fill(A, dtype, na, -1, 1);
	nkt_fill(B, dtype, nb, -1, 1);
	if (c.beta == 0)
		for (int64_t i = 0; i < ncc; i++)
			nk_fp_stored(C0, dtype, i, NAN); /* beta == 0 must not read C */
	else
		nkt_fill(C0, dtype, ncc, -1, 1);
	memcpy(C1, C0, (size_t)ncc * nk_fp_elem_size(dtype));
	g.A = A, g.B = B;
	r = g;
	r.C = C0;
	g.C = C1;
	CHECK(nk_gemm_ref(&r) == 0, "ref failed");
	CHECK(fn(&g) == 0, "%s failed", what);
	switch (dtype) {
	case NK_F64: atol = 1e-13 * (double)(c.K + 1), rtol = 1e-12; break;
	case NK_F32: atol = 2e-6 * (double)(c.K + 1), rtol = 1e-5; break;
	case NK_BF16: atol = 1e-4 * sqrt((double)c.K + 1), rtol = 1.0 / 128; break;
	default: atol = 1e-4 * sqrt((double)c.K + 1), rtol = 1.0 / 1024; break;
	}
	/* padding between rows is NaN in both (when beta == 0) or equal: compared as well */
	err = nkt_err(C1, C0, dtype, ncc, atol, rtol);
	CHECK(err <= 1, "%s %s M=%lld N=%lld K=%lld batch=%lld ta=%d tb=%d tc=%d alpha=%g beta=%g: err %g", what,
	      nkt_dtype_name(dtype), (long long)c.M, (long long)c.N, (long long)c.K, (long long)c.batch, c.ta,
	      c.tb, c.tc, c.alpha, c.beta, err);
	free(A), free(B), free(C0), free(C1);
}

static const gcase_t shapes[] = {
	{ 1, 1, 1, 1 },     { 1, 7, 33, 1 },     { 7, 1, 33, 1 },     { 7, 33, 1, 1 },
	{ 33, 100, 7, 1 },  { 100, 33, 257, 1 }, { 14, 32, 256, 1 },  { 15, 33, 513, 1 },
	{ 29, 65, 300, 2 }, { 2, 3, 4, 3 },      { 1, 300, 70, 2 },   { 300, 1, 70, 2 },
	{ 64, 600, 40, 1 }, { 250, 70, 600, 1 }, { 130, 130, 1030, 1 }, { 1, 129, 1000, 1 },
	{ 463, 40, 530, 1 }, /* 34 row panels: the shared driver pairs them, the last pair ragged */
	/* the small-M driver (gemm_small): M not a multiple of MR, N not of NR, K over several slices
	 * with an odd last slice (bf16 pairs), a few batch entries */
	{ 45, 300, 1031, 1 }, { 20, 200, 77, 3 }, { 3, 129, 600, 1 },
};

static void test_gemm_layouts(void)
{
	static const int dts[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };
	size_t nshapes = sizeof shapes / sizeof shapes[0];

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < nshapes; s++) {
			gcase_t c = shapes[s];

			if (NK_TEST_SMALL && c.M * c.N * c.K > 3000000)
				continue;
			for (int t = 0; t < 8; t++) {
				c.ta = t & 1, c.tb = (t >> 1) & 1, c.tc = (t >> 2) & 1;
				c.alpha = t % 3 == 2 ? -0.5 : 1.0;
				c.beta = t % 3 == 0 ? 0.0 : t % 3 == 1 ? 1.0 : 0.25;
				check_gemm(dts[d], c, run_gemm, "run");
			}
		}
}

static void test_gemm_portable_driver(void)
{
	static const int dts[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			gcase_t c = shapes[s];

			if (c.M * c.N * c.K > (NK_TEST_SMALL ? 300000 : 2000000))
				continue;
			c.tb = s & 1;
			c.beta = s & 2 ? 1.0 : 0.0;
			c.alpha = 1;
			check_gemm(dts[d], c, run_packed_portable, "packed-portable");
		}
}

/* The shared-packing driver (several threads) and the per-task one (nk_gemm_packed_1t, what a
 * single thread runs) give bitwise equal results: the same k-slices summed in the same order. */
static void test_gemm_drivers_agree(void)
{
	static const int64_t sz[][3] = { { 130, 200, 1100 }, { 40, 700, 300 }, { 300, 65, 517 }, { 128, 768, 768 },
					  { 463, 70, 600 }, { 45, 300, 1031 }, { 300, 700, 520 },
					  /* the shared driver with shared packed A (bf16): odd K, 2-3 k-slices */
					  { 600, 96, 1100 }, { 1030, 33, 515 }, { 200, 40, 2100 } };
	nk_gemm_isa_t isa = nk_gemm_isa_select();

	for (int d = 0; d < 2; d++)
		for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
			for (int v = 0; v < 2; v++) {
				int dt = d ? NK_BF16 : NK_F32;
				int64_t M = sz[q][0], N = sz[q][1], K = sz[q][2];
				size_t es = nk_fp_elem_size(dt);
				void *A = nkt_alloc(dt, M * K), *B = nkt_alloc(dt, K * N);
				void *C0 = nkt_alloc(dt, M * N), *C1 = nkt_alloc(dt, M * N);
				nk_gemm_args_t g = { .dtype = dt, .M = M, .N = N, .K = K, .batch = 1, .alpha = 0.75,
						     .beta = v ? 0.5 : 0, .A = A, .B = B, .rs_a = K, .cs_a = 1,
						     .rs_b = N, .cs_b = 1, .rs_c = N, .cs_c = 1 };

				nkt_fill(A, dt, M * K, -1, 1);
				nkt_fill(B, dt, K * N, -1, 1);
				nkt_fill(C0, dt, M * N, -1, 1);
				memcpy(C1, C0, (size_t)(M * N) * es);
				g.C = C0;
				CHECK(nk_gemm_packed(&g, &isa) == 0, "packed");
				g.C = C1;
				CHECK(nk_gemm_packed_1t(&g, &isa) == 0, "packed_1t");
				CHECK(!memcmp(C0, C1, (size_t)(M * N) * es), "drivers differ: %s %lldx%lldx%lld beta %g",
				      nkt_dtype_name(dt), (long long)M, (long long)N, (long long)K, g.beta);
				free(A), free(B), free(C0), free(C1);
			}
}

/* Other f32 blockings than the table's (the context picks kc and nc per microarchitecture, dispatch.c):
 * a table with a small kc and nc (many k-slices and B blocks, ragged last ones) and, with AVX-512, the
 * Intel context's _k2 kernels, against the reference over the layouts, and the shared and per-task drivers
 * bitwise equal under it (every driver slices K by the table's kc). */
static nk_gemm_isa_t blocked_isa;

static int run_packed_blocked(const nk_gemm_args_t *g)
{
	return nk_gemm_packed(g, &blocked_isa);
}

static void test_gemm_blocking(void)
{
	static const int64_t sz[][3] = { { 100, 33, 257 }, { 130, 200, 1100 }, { 45, 300, 1031 }, { 300, 65, 517 },
					  { 29, 700, 300 } };
	static const int blk[][2] = { { 96, 64 }, { 256, 1024 }, { 100, 33 } }; /* nc 33: whole NR panels */

	for (size_t b = 0; b < sizeof blk / sizeof blk[0]; b++) {
		blocked_isa = nk_gemm_isa_select();
		blocked_isa.kc = blk[b][0], blocked_isa.nc = blk[b][1];
		blocked_isa.shared_kslices = (int)b + 1; /* 1 and 2 slices per shared super block, then 3 */
		if (have_avx512 && b != 2) {
			blocked_isa.sgemm = nk_sgemm_avx512_14x32_k2;
			blocked_isa.sgemm_b = nk_sgemm_avx512_14x32_k2_b;
			blocked_isa.sgemm_b_pf = nk_sgemm_avx512_14x32_k2_b_pf;
			blocked_isa.sgemm_bias = nk_sgemm_avx512_14x32_k2_bias;
			blocked_isa.sgemm_a = nk_sgemm_avx512_14x32_k2_a;
		}
		for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
			for (int t = 0; t < 8; t++) {
				gcase_t c = { sz[q][0], sz[q][1], sz[q][2], 1 };

				if (NK_TEST_SMALL && c.M * c.N * c.K > 3000000)
					continue;
				c.ta = t & 1, c.tb = (t >> 1) & 1, c.tc = (t >> 2) & 1;
				c.alpha = t % 3 == 2 ? -0.5 : 1.0;
				c.beta = t % 3 == 0 ? 0.0 : t % 3 == 1 ? 1.0 : 0.25;
				check_gemm(NK_F32, c, run_packed_blocked, "packed-blocked");
				if (t < 2)
					check_gemm(NK_BF16, c, run_packed_blocked, "packed-blocked");
			}
		for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
			for (int v = 0; v < 3; v++) {
				int64_t M = sz[q][0], N = sz[q][1], K = sz[q][2];
				float *A = nkt_alloc(NK_F32, M * K), *B = nkt_alloc(NK_F32, K * N), *bias = nkt_alloc(NK_F32, N);
				float *C0 = nkt_alloc(NK_F32, M * N), *C1 = nkt_alloc(NK_F32, M * N);
				nk_gemm_args_t g = { .dtype = NK_F32, .M = M, .N = N, .K = K, .batch = 1, .alpha = 0.75,
						     .beta = v ? 0.5 : 0, .A = A, .B = B, .rs_a = K, .cs_a = 1,
						     .rs_b = N, .cs_b = 1, .rs_c = N, .cs_c = 1 };

				if (v == 2) /* the weight-gradient layout: A column-major */
					g.rs_a = 1, g.cs_a = M, g.bias = bias, g.rs_bias = 0, g.cs_bias = 1;
				nkt_fill(A, NK_F32, M * K, -1, 1);
				nkt_fill(B, NK_F32, K * N, -1, 1);
				nkt_fill(bias, NK_F32, N, -1, 1);
				nkt_fill(C0, NK_F32, M * N, -1, 1);
				memcpy(C1, C0, (size_t)(M * N) * sizeof(float));
				g.C = C0;
				CHECK(nk_gemm_packed(&g, &blocked_isa) == 0, "packed");
				g.C = C1;
				CHECK(nk_gemm_packed_1t(&g, &blocked_isa) == 0, "packed_1t");
				CHECK(!memcmp(C0, C1, (size_t)(M * N) * sizeof(float)),
				      "drivers differ under kc %d nc %d: %lldx%lldx%lld v %d", blk[b][0], blk[b][1], (long long)M,
				      (long long)N, (long long)K, v);
				/* the table's kc reaches the drivers: slices of 96 k round differently from the
				 * default slices (this seed: most elements), in the per-task and the multi-thread driver */
				if (b == 0 && K > NK_GEMM_KC && v == 0) {
					nk_gemm_isa_t def = nk_gemm_isa_select();

					def.kc = 0, def.nc = 0;
					memcpy(C1, C0, (size_t)(M * N) * sizeof(float));
					g.C = C1;
					CHECK(nk_gemm_packed_1t(&g, &def) == 0, "packed_1t");
					CHECK(memcmp(C0, C1, (size_t)(M * N) * sizeof(float)) != 0, "kc 96 did not reach the per-task driver");
					CHECK(nk_gemm_packed(&g, &def) == 0 && memcmp(C0, C1, (size_t)(M * N) * sizeof(float)) != 0,
					      "kc 96 did not reach the multi-thread driver");
				}
				free(A), free(B), free(bias), free(C0), free(C1);
			}
	}
}

/* The weight-gradient layout (A column-major, B row-major with whole 32-column panels, A too big for
 * the small-M driver): the shared driver reads B in place (no pack job) and its micro-kernel prefetches
 * the next A panel (sgemm_b_pf).  Against the reference, and
 * bitwise against the per-task driver (the same k-slices in the same order); B rows padded (unaligned
 * rows) and a bias row (copied into C first, not fused into the micro-kernel). */
static void test_gemm_inplace_b(void)
{
	/* the last: B rows over 4 KiB apart, so B is packed (the next A panel prefetched all the same) */
	static const int64_t sz[][3] = { { 300, 64, 1100 }, { 383, 96, 2048 }, { 29, 256, 9000 }, { 300, 1056, 1100 } };
	nk_gemm_isa_t isa = nk_gemm_isa_select();

	for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
		for (int v = 0; v < 3; v++) {
			int64_t M = sz[q][0], N = sz[q][1], K = sz[q][2], ldb = N + (v == 1 ? 3 : 0);
			float *A = nkt_alloc(NK_F32, M * K), *B = nkt_alloc(NK_F32, K * ldb), *bias = nkt_alloc(NK_F32, N);
			float *C0 = nkt_alloc(NK_F32, M * N), *C1 = nkt_alloc(NK_F32, M * N), *C2 = nkt_alloc(NK_F32, M * N);
			nk_gemm_args_t g = { .dtype = NK_F32, .M = M, .N = N, .K = K, .batch = 1, .alpha = 0.75,
					     .beta = v ? 0.5 : 0, .A = A, .B = B, .rs_a = 1, .cs_a = M,
					     .rs_b = ldb, .cs_b = 1, .rs_c = N, .cs_c = 1,
					     .bias = v == 2 ? bias : NULL, .cs_bias = 1 };

			if (NK_TEST_SMALL && M * N * K > 40000000)
				goto next;
			nkt_fill(A, NK_F32, M * K, -1, 1);
			nkt_fill(B, NK_F32, K * ldb, -1, 1);
			nkt_fill(bias, NK_F32, N, -1, 1);
			nkt_fill(C0, NK_F32, M * N, -1, 1);
			memcpy(C1, C0, (size_t)(M * N) * 4);
			memcpy(C2, C0, (size_t)(M * N) * 4);
			g.C = C0;
			CHECK(nk_gemm_ref(&g) == 0, "ref");
			g.C = C1;
			CHECK(nk_gemm_packed(&g, &isa) == 0, "packed");
			g.C = C2;
			CHECK(nk_gemm_packed_1t(&g, &isa) == 0, "packed_1t");
			CHECK(nkt_err(C1, C0, NK_F32, M * N, 2e-6 * (double)(K + 1), 1e-5) <= 1,
			      "in-place B %lldx%lldx%lld variant %d: against the reference", (long long)M, (long long)N,
			      (long long)K, v);
			CHECK(!memcmp(C1, C2, (size_t)(M * N) * 4), "in-place B %lldx%lldx%lld variant %d: drivers differ",
			      (long long)M, (long long)N, (long long)K, v);
next:
			free(A), free(B), free(bias), free(C0), free(C1), free(C2);
		}
}

/* [gemm bias] C = alpha*A@B + beta*bias with C full of NaN (not read): against the reference run on a
 * C that holds the expanded bias, for each driver (small-M, shared, per-task f64, GEMV, K = 0, col-major
 * C) and bias layouts (addmm's row of N, a column, a full matrix). */
static void test_gemm_bias(void)
{
	static const int64_t sz[][4] = { { 45, 300, 1031, 1 }, { 1000, 100, 300, 1 }, { 1, 300, 70, 1 },
					  { 5, 7, 0, 1 }, { 20, 200, 77, 3 }, { 130, 130, 64, 1 } };
	static const int dts[] = { NK_F32, NK_BF16, NK_F16, NK_F64 };

	for (size_t q = 0; q < sizeof sz / sizeof sz[0]; q++)
		for (int d = 0; d < 4; d++)
			for (int lay = 0; lay < 4; lay++) {
				int dt = dts[d];
				int64_t M = sz[q][0], N = sz[q][1], K = sz[q][2], B = sz[q][3];
				size_t es = nk_fp_elem_size(dt);
				bool cm = lay == 3; /* column-major C */
				void *A = nkt_alloc(dt, B * M * K + 1), *Bm = nkt_alloc(dt, B * K * N + 1);
				void *bias = nkt_alloc(dt, B * M * N), *C0 = nkt_alloc(dt, B * M * N), *C1 = nkt_alloc(dt, B * M * N);
				nk_gemm_args_t g = { .dtype = dt, .M = M, .N = N, .K = K, .batch = B, .alpha = 0.5, .beta = 0.75,
						     .A = A, .rs_a = K, .cs_a = 1, .bs_a = M * K, .B = Bm, .rs_b = N, .cs_b = 1,
						     .bs_b = K * N, .rs_c = cm ? 1 : N, .cs_c = cm ? M : 1, .bs_c = M * N };
				double err;

				nkt_fill(A, dt, B * M * K + 1, -1, 1);
				nkt_fill(Bm, dt, B * K * N + 1, -1, 1);
				nkt_fill(bias, dt, B * M * N, -1, 1);
				/* lay 0: a row of N (addmm), 1: a column of M, 2 and 3: a full M x N matrix per batch */
				g.rs_bias = lay == 0 ? 0 : lay == 1 ? 1 : N;
				g.cs_bias = lay == 0 ? 1 : lay == 1 ? 0 : 1;
				g.bs_bias = lay < 2 ? 0 : M * N;
				for (int64_t b = 0; b < B; b++)
					for (int64_t i = 0; i < M; i++)
						for (int64_t j = 0; j < N; j++)
							memcpy((char *)C0 + (b * g.bs_c + i * g.rs_c + j * g.cs_c) * es,
							       (char *)bias + (b * g.bs_bias + i * g.rs_bias + j * g.cs_bias) * es, es);
				g.C = C0;
				CHECK(nk_gemm_ref(&g) == 0, "ref");
				for (int64_t i = 0; i < B * M * N; i++)
					nk_fp_stored(C1, dt, i, NAN);
				g.C = C1;
				g.bias = bias;
				CHECK(nk_gemm_run(&g) == 0, "run with bias");
				err = nkt_err(C1, C0, dt, B * M * N, 1e-4 * sqrt((double)K + 1), dt == NK_BF16 ? 1.0 / 128 : 1e-3);
				CHECK(err <= 1, "bias %s %lldx%lldx%lld batch %lld layout %d: err %g", nkt_dtype_name(dt),
				      (long long)M, (long long)N, (long long)K, (long long)B, lay, err);
				/* the reference with a bias and a NaN C agrees too; beta = 0 ignores the bias */
				for (int64_t i = 0; i < B * M * N; i++)
					nk_fp_stored(C1, dt, i, NAN);
				CHECK(nk_gemm_ref(&g) == 0, "ref with bias");
				CHECK(nkt_err(C1, C0, dt, B * M * N, 1e-4 * sqrt((double)K + 1), dt == NK_BF16 ? 1.0 / 128 : 1e-3) <= 1,
				      "ref with bias %s layout %d", nkt_dtype_name(dt), lay);
				if (K && !cm && M > 1 && N > 1) {
					for (int64_t i = 0; i < B * M * N; i++)
						nk_fp_stored(C1, dt, i, NAN);
					g.beta = 0;
					CHECK(nk_gemm_run(&g) == 0, "run beta 0");
					for (int64_t i = 0; i < B * M * N; i++)
						CHECK(!isnan(nk_fp_loadd(C1, dt, i)), "beta 0 with bias left C unwritten at %lld", (long long)i);
				}
				free(A), free(Bm), free(bias), free(C0), free(C1);
			}
}

static void test_gemm_k0_and_errors(void)
{
	float c[6] = { 1, 2, 3, 4, 5, 6 };
	nk_gemm_args_t g = { .dtype = NK_F32, .M = 2, .N = 3, .K = 0, .batch = 1, .alpha = 1, .beta = 2,
			     .C = c, .rs_c = 3, .cs_c = 1 };

	CHECK(nk_gemm_run(&g) == 0, "K = 0");
	CHECK(c[0] == 2 && c[5] == 12, "K = 0 scales C by beta: %g %g", c[0], c[5]);
	g.beta = 0;
	c[0] = NAN;
	CHECK(nk_gemm_run(&g) == 0 && c[0] == 0 && c[5] == 0, "K = 0, beta = 0 zeroes C");
	g.dtype = NK_I32;
	CHECK(nk_gemm_run(&g) != 0, "int32 gemm is refused");
	g.dtype = NK_F32;
	g.M = -1;
	CHECK(nk_gemm_run(&g) != 0, "negative M is refused");
}

/* ---- bench (informational) ------------------------------------------------------------------ */

static double cpu_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best wall time, and best process CPU time (GFLOP per core-second: meaningful on a shared machine). */
static void bench(int dtype, int64_t n, int reps)
{
	nk_gemm_args_t g = { .dtype = dtype, .M = n, .N = n, .K = n, .batch = 1, .alpha = 1, .beta = 0,
			     .rs_a = n, .cs_a = 1, .rs_b = n, .cs_b = 1, .rs_c = n, .cs_c = 1 };
	void *A = nkt_alloc(dtype, n * n), *B = nkt_alloc(dtype, n * n), *C = nkt_alloc(dtype, n * n);
	double best = 1e30, best_cpu = 1e30, flop = 2.0 * (double)n * (double)n * (double)n;

	nkt_fill(A, dtype, n * n, -1, 1);
	nkt_fill(B, dtype, n * n, -1, 1);
	g.A = A, g.B = B, g.C = C;
	nk_gemm_run(&g);
	for (int r = 0; r < reps; r++) {
		double t0 = nkt_now(), c0 = cpu_seconds(), t, c;

		nk_gemm_run(&g);
		t = nkt_now() - t0;
		c = cpu_seconds() - c0;
		best = t < best ? t : best;
		best_cpu = c < best_cpu ? c : best_cpu;
	}
	printf("  gemm %-4s %5lld^3  %7.1f GFLOP/s  (%d threads, best of %d; %.1f GFLOP per core-second)\n",
	       nkt_dtype_name(dtype), (long long)n, flop / best * 1e-9, nrt_num_threads(), reps,
	       flop / best_cpu * 1e-9);
	free(A), free(B), free(C);
}

int main(void)
{
	__builtin_cpu_init();
	have_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
	have_bf16 = have_avx512 && __builtin_cpu_supports("avx512bf16");
	nkt_seed(1);
	RUN(test_sgemm_ukr);
	RUN(test_sgemm_b_ukr);
	RUN(test_sgemm_inplace_a_bias_ukr);
	RUN(test_sgemm_k2_ukr);
	RUN(test_sbgemm_ukr);
	RUN(test_sbgemm_bf16c_ukr);
	RUN(test_sbgemm_inplace_a_ukr);
	RUN(test_dgemm_ukr);
	RUN(test_packers);
	RUN(test_packers_wide);
	RUN(test_gemm_layouts);
	RUN(test_gemm_portable_driver);
	RUN(test_gemm_drivers_agree);
	RUN(test_gemm_blocking);
	RUN(test_gemm_inplace_b);
	RUN(test_gemm_bias);
	RUN(test_gemm_k0_and_errors);
	if (!NK_TEST_SMALL && !nk_using_reference()) {
		bench(NK_F32, 512, 5);
		bench(NK_F32, 1024, 5);
		bench(NK_F32, 2048, 3);
		bench(NK_BF16, 1024, 5);
		bench(NK_BF16, 2048, 3);
		bench(NK_F64, 1024, 3);
	}
	return ctest_finish();
}
