/* test_gemm_amx.c - the AMX tile GEMMs (gemm_amx.c) against the reference: bf16 (TDPBF16PS) against
 * nk_gemm_ref over edge shapes (M, N not multiples of 16, K not of 32), transposed operands, column-major
 * C, batch, alpha/beta (beta 0 with NaN in C), a broadcast bias row, super blocks of B; int8 (TDPBSSD)
 * and uint8 x int8 (TDPBUSD) exactly against an int32 triple loop, and nk_int_mm_run / nk_int_mm_ref (torch._int_mm) at every
 * level.  The AMX cases are skipped (and say so) where the CPU or the OS gives no tiles; the level in
 * force is printed (NEURON_KERNELS=avx512 / portable run the int_mm cases on their own paths). */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_dispatch.h"
#include "nk_gemm_impl.h"
#include "nk_igemm.h"
#include "nk_test.h"
#include "nrt.h"

static bool amx_bf16, amx_i8;

/* Operands on whole cache lines (64-byte aligned base, rows and batch entries a multiple of 64 bytes
 * apart) take the kernels' direct path (A tiles loaded from the source); the others are packed. */
static bool aligned_rows;

/* Lays out one operand of rows x cols of es-byte elements (padded leading dimension, padded batch
 * stride; with aligned_rows, both rounded up to 64 bytes, plus a line). */
static int64_t layout_es(int64_t rows, int64_t cols, bool trans, int64_t batch, int64_t es, int64_t *rs, int64_t *cs,
			 int64_t *bs)
{
	int64_t per = 64 / es, ld = aligned_rows ? ((trans ? rows : cols) + per - 1) / per * per + per : (trans ? rows : cols) + 3;

	*rs = trans ? 1 : ld;
	*cs = trans ? ld : 1;
	*bs = (trans ? cols : rows) * ld + (aligned_rows ? per : 5);
	return *bs * batch;
}

static int64_t layout(int64_t rows, int64_t cols, bool trans, int64_t batch, int64_t *rs, int64_t *cs, int64_t *bs)
{
	return layout_es(rows, cols, trans, batch, 2, rs, cs, bs);
}

/* n elements of es bytes, zeroed, 64-byte aligned. */
static void *alloc_lines(int64_t n, int64_t es)
{
	size_t bytes = ((size_t)(n > 0 ? n : 1) * (size_t)es + 63) / 64 * 64;
	void *p = aligned_alloc(64, bytes);

	if (p)
		memset(p, 0, bytes);
	return p;
}

typedef struct {
	int64_t M, N, K, batch;
} shape_t;

static const shape_t shapes[] = {
	{ 16, 16, 32, 1 },   { 32, 32, 64, 1 },   { 17, 33, 31, 1 },    { 1, 16, 32, 1 },    { 16, 1, 32, 1 },
	{ 15, 15, 33, 2 },   { 47, 81, 95, 1 },   { 64, 64, 1, 1 },     { 100, 300, 1030, 1 }, { 257, 250, 515, 1 },
	{ 33, 700, 77, 3 },  { 600, 40, 300, 1 }, { 128, 768, 768, 1 }, { 300, 129, 2049, 1 },
};

static void check_bf16(shape_t s, bool ta, bool tb, bool tc, double alpha, double beta, bool bias)
{
	nk_gemm_args_t g = { .dtype = NK_BF16, .M = s.M, .N = s.N, .K = s.K, .batch = s.batch, .alpha = alpha, .beta = beta };
	int64_t na = layout(s.M, s.K, ta, s.batch, &g.rs_a, &g.cs_a, &g.bs_a);
	int64_t nb = layout(s.K, s.N, tb, s.batch, &g.rs_b, &g.cs_b, &g.bs_b);
	int64_t nc = layout(s.M, s.N, tc, s.batch, &g.rs_c, &g.cs_c, &g.bs_c);
	uint16_t *A = alloc_lines(na, 2), *B = nkt_alloc(NK_BF16, nb), *bv = nkt_alloc(NK_BF16, s.N);
	uint16_t *C0 = nkt_alloc(NK_BF16, nc), *C1 = nkt_alloc(NK_BF16, nc);
	nk_gemm_args_t r;
	double err;

	nkt_fill(A, NK_BF16, na, -1, 1);
	nkt_fill(B, NK_BF16, nb, -1, 1);
	nkt_fill(bv, NK_BF16, s.N, -1, 1);
	if (beta == 0 || bias)
		for (int64_t i = 0; i < nc; i++)
			nk_fp_stored(C0, NK_BF16, i, NAN); /* not to be read */
	else
		nkt_fill(C0, NK_BF16, nc, -1, 1);
	memcpy(C1, C0, (size_t)nc * 2);
	g.A = A, g.B = B;
	if (bias)
		g.bias = bv, g.rs_bias = 0, g.cs_bias = 1, g.bs_bias = 0;
	r = g;
	r.C = C0;
	g.C = C1;
	CHECK(nk_gemm_ref(&r) == 0, "ref failed");
	CHECK(nk_gemm_amx_bf16(&g) == 0, "amx failed");
	/* padding between rows stays NaN (or as it was) in both: compared as well */
	err = nkt_err(C1, C0, NK_BF16, nc, 1e-4 * sqrt((double)s.K + 1), 1.0 / 128);
	CHECK(err <= 1, "amx bf16 M=%lld N=%lld K=%lld batch=%lld ta=%d tb=%d tc=%d alpha=%g beta=%g bias=%d aligned=%d: err %g",
	      (long long)s.M, (long long)s.N, (long long)s.K, (long long)s.batch, ta, tb, tc, alpha, beta, bias,
	      aligned_rows, err);
	free(A), free(B), free(bv), free(C0), free(C1);
}

static void test_amx_bf16(void)
{
	if (!amx_bf16) {
		printf("  (no AMX bf16 tiles on this CPU / OS: skipped)\n");
		return;
	}
	for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
		shape_t s = shapes[q];

		if (NK_TEST_SMALL && s.M * s.N * s.K * s.batch > 3000000)
			continue;
		for (int t = 0; t < 8; t++) {
			double beta = t % 3 == 0 ? 0.0 : t % 3 == 1 ? 1.0 : 0.25;

			check_bf16(s, t & 1, (t >> 1) & 1, (t >> 2) & 1, t % 3 == 2 ? -0.5 : 1.0, beta, false);
		}
		check_bf16(s, false, true, false, 1.0, 1.0, true);
	}
}

/* The direct path (A on whole cache lines, as the device allocator gives it): its k tail (K % 32), the
 * last row tile (M % 16), both, several k slices (K over 2048), batch entries, and the tasks split by
 * rows; the packed path is the shapes above. */
static const shape_t direct_shapes[] = {
	{ 16, 16, 32, 1 },  { 17, 33, 64, 1 },   { 33, 50, 95, 1 },     { 1, 40, 64, 1 },    { 100, 300, 1030, 1 },
	{ 40, 70, 2100, 1 }, { 15, 15, 33, 2 },  { 257, 250, 515, 1 }, { 64, 40, 4200, 1 }, { 700, 48, 64, 2 },
};

static void test_amx_bf16_direct(void)
{
	if (!amx_bf16) {
		printf("  (no AMX bf16 tiles on this CPU / OS: skipped)\n");
		return;
	}
	aligned_rows = true;
	for (size_t q = 0; q < sizeof direct_shapes / sizeof direct_shapes[0]; q++) {
		shape_t s = direct_shapes[q];

		if (NK_TEST_SMALL && s.M * s.N * s.K * s.batch > 3000000)
			continue;
		for (int t = 0; t < 4; t++)
			check_bf16(s, false, t & 1, (t >> 1) & 1, t == 3 ? -0.5 : 1.0, t == 2 ? 0.25 : 0.0, false);
		check_bf16(s, false, true, false, 1.0, 1.0, true);
	}
	aligned_rows = false;
}

/* Through nk_gemm_run (what linear / matmul / bmm / conv call): the AMX path where the level is amx. */
static void test_amx_bf16_run(void)
{
	static const shape_t big[] = { { 512, 512, 512, 1 }, { 96, 1000, 4100, 1 } };

	for (size_t q = 0; q < sizeof big / sizeof big[0]; q++) {
		shape_t s = big[q];
		nk_gemm_args_t g = { .dtype = NK_BF16, .M = s.M, .N = s.N, .K = s.K, .batch = 1, .alpha = 1, .beta = 0,
				     .rs_a = s.K, .cs_a = 1, .rs_b = 1, .cs_b = s.K, .rs_c = s.N, .cs_c = 1 };
		uint16_t *A = nkt_alloc(NK_BF16, s.M * s.K), *B = nkt_alloc(NK_BF16, s.K * s.N);
		uint16_t *C0 = nkt_alloc(NK_BF16, s.M * s.N), *C1 = nkt_alloc(NK_BF16, s.M * s.N);
		nk_gemm_args_t r;

		if (NK_TEST_SMALL && s.M * s.N * s.K > 3000000)
			goto next;
		nkt_fill(A, NK_BF16, s.M * s.K, -1, 1);
		nkt_fill(B, NK_BF16, s.K * s.N, -1, 1);
		g.A = A, g.B = B, g.C = C1;
		r = g;
		r.C = C0;
		CHECK(nk_gemm_ref(&r) == 0 && nk_gemm_run(&g) == 0, "gemm failed");
		CHECK(nkt_err(C1, C0, NK_BF16, s.M * s.N, 1e-4 * sqrt((double)s.K + 1), 1.0 / 128) <= 1,
		      "nk_gemm_run bf16 %lldx%lldx%lld (level %s)", (long long)s.M, (long long)s.N, (long long)s.K,
		      nk_isa_name(nk_kernels_level()));
next:
		free(A), free(B), free(C0), free(C1);
	}
}

/* ---- int8 -> int32 --------------------------------------------------------------------------------- */

static void fill_i8(int8_t *p, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = (int8_t)(int)nkt_uniform(-128, 128);
	if (n > 2)
		p[0] = -128, p[1] = 127; /* the ends of the range */
}

typedef int (*i8_fn)(const nk_gemm_args_t *g);

static int run_int_mm(const nk_gemm_args_t *g)
{
	return nk_int_mm_run((void *)g);
}

static int run_int_mm_ref(const nk_gemm_args_t *g)
{
	return nk_int_mm_ref((void *)g);
}

static void check_i8(shape_t s, bool ta, bool tb, bool tc, double beta, bool u8, i8_fn fn, const char *what)
{
	nk_gemm_args_t g = { .dtype = u8 ? NK_U8 : NK_I8, .M = s.M, .N = s.N, .K = s.K, .batch = s.batch, .alpha = 1, .beta = beta };
	int64_t na = layout_es(s.M, s.K, ta, s.batch, 1, &g.rs_a, &g.cs_a, &g.bs_a);
	int64_t nb = layout_es(s.K, s.N, tb, s.batch, 1, &g.rs_b, &g.cs_b, &g.bs_b);
	int64_t nc = layout(s.M, s.N, tc, s.batch, &g.rs_c, &g.cs_c, &g.bs_c);
	int8_t *A = alloc_lines(na, 1), *B = malloc((size_t)nb);
	int32_t *C0 = malloc((size_t)nc * 4), *C1 = malloc((size_t)nc * 4);
	int64_t bad = 0;

	fill_i8(A, na);
	fill_i8(B, nb);
	for (int64_t i = 0; i < nc; i++)
		C0[i] = (int32_t)(i * 2654435761u);
	memcpy(C1, C0, (size_t)nc * 4);
	for (int64_t b = 0; b < s.batch; b++)
		for (int64_t i = 0; i < s.M; i++)
			for (int64_t j = 0; j < s.N; j++) {
				int32_t acc = 0;
				int32_t *c = C0 + b * g.bs_c + i * g.rs_c + j * g.cs_c;

				for (int64_t k = 0; k < s.K; k++)
					acc += (u8 ? (int32_t)(uint8_t)A[b * g.bs_a + i * g.rs_a + k * g.cs_a]
						   : (int32_t)A[b * g.bs_a + i * g.rs_a + k * g.cs_a]) *
					       B[b * g.bs_b + k * g.rs_b + j * g.cs_b];
				*c = (int32_t)((uint32_t)acc + (beta != 0 ? (uint32_t)*c : 0u));
			}
	g.A = A, g.B = B, g.C = C1;
	CHECK(fn(&g) == 0, "%s failed", what);
	for (int64_t i = 0; i < nc; i++)
		bad += C0[i] != C1[i];
	CHECK(bad == 0, "%s%s M=%lld N=%lld K=%lld batch=%lld ta=%d tb=%d tc=%d beta=%g aligned=%d: %lld wrong", what,
	      u8 ? " u8" : "", (long long)s.M, (long long)s.N, (long long)s.K, (long long)s.batch, ta, tb, tc, beta,
	      aligned_rows, (long long)bad);
	free(A), free(B), free(C0), free(C1);
}

static void i8_cases(i8_fn fn, const char *what, int64_t limit)
{
	static const shape_t extra[] = { { 16, 16, 64, 1 }, { 17, 33, 65, 1 }, { 5, 300, 1100, 1 }, { 64, 64, 3, 2 } };

	for (int x = 0; x < 2; x++)
		for (size_t q = 0; q < (x ? sizeof extra / sizeof extra[0] : sizeof shapes / sizeof shapes[0]); q++) {
			shape_t s = x ? extra[q] : shapes[q];

			if (s.M * s.N * s.K * s.batch > limit)
				continue;
			for (int t = 0; t < 8; t++)
				check_i8(s, t & 1, (t >> 1) & 1, (t >> 2) & 1, t & 4 ? 1.0 : 0.0, t % 3 == 1, fn, what);
		}
}

static void test_amx_i8(void)
{
	if (!amx_i8) {
		printf("  (no AMX int8 tiles on this CPU / OS: skipped)\n");
		return;
	}
	i8_cases(nk_gemm_amx_i8, "amx int8", NK_TEST_SMALL ? 3000000 : 200000000);
}

static void test_amx_i8_direct(void)
{
	if (!amx_i8) {
		printf("  (no AMX int8 tiles on this CPU / OS: skipped)\n");
		return;
	}
	aligned_rows = true;
	for (size_t q = 0; q < sizeof direct_shapes / sizeof direct_shapes[0]; q++) {
		shape_t s = direct_shapes[q];

		if (NK_TEST_SMALL && s.M * s.N * s.K * s.batch > 3000000)
			continue;
		for (int t = 0; t < 4; t++)
			check_i8(s, false, t & 1, (t >> 1) & 1, t & 2 ? 1.0 : 0.0, t == 1, nk_gemm_amx_i8, "amx int8 direct");
	}
	aligned_rows = false;
}

static void test_int_mm(void)
{
	i8_cases(run_int_mm, "int_mm", NK_TEST_SMALL ? 3000000 : 200000000);
	i8_cases(run_int_mm_ref, "int_mm ref", 3000000);
}

int main(void)
{
	const nk_cpu_t *c = nk_cpu();

	amx_bf16 = c->amx_bf16 && c->amx_permitted;
	amx_i8 = c->amx_int8 && c->amx_permitted;
	printf("  level %s, AMX bf16 %s, int8 %s\n", nk_isa_name(nk_kernels_level()), amx_bf16 ? "yes" : "no",
	       amx_i8 ? "yes" : "no");
	nkt_seed(3);
	RUN(test_amx_bf16);
	RUN(test_amx_bf16_direct);
	RUN(test_amx_bf16_run);
	RUN(test_amx_i8);
	RUN(test_amx_i8_direct);
	RUN(test_int_mm);
	return ctest_finish();
}
