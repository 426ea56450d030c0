/* test_reduce.c - reductions: nk_reduce_run against nk_reduce_ref for every op over row (I == 1),
 * column (I > 1), chunked-R (few outputs, long R) and empty shapes, and exact known values (PyTorch
 * 2.13 CPU results, NaN propagation, first-occurrence indices, empty-R identities and errors). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Random values; specials (NaN, inf, 0) now and then when asked. */
static void fill(void *buf, int dt, int64_t n, bool specials)
{
	for (int64_t i = 0; i < n; i++) {
		char *p = (char *)buf + i * (int64_t)nk_dtype_size(dt);
		if (nk_is_float(dt)) {
			static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0};
			double v = (specials && rnd() % 97 == 0) ? sp[rnd() % 4] : rnd() / 4294967296.0 * 6 - 3;
			nk_store_f64(p, dt, v);
		} else {
			int64_t v = dt == NK_BOOL ? rnd() % 4 != 0 : dt == NK_U8 ? rnd() % 60 : (int64_t)(rnd() % 41) - 20;
			nk_store_i64(p, dt, v);
		}
	}
}

static bool close_elem(int dt, const void *a, const void *b, double rtol, double atol)
{
	if (!nk_is_float(dt))
		return nk_load_i64(a, dt) == nk_load_i64(b, dt);
	double x = nk_load_f64(a, dt), y = nk_load_f64(b, dt);
	if (x != x || y != y)
		return x != x && y != y;
	if (isinf(x) || isinf(y))
		return x == y;
	return fabs(x - y) <= atol + rtol * fabs(y);
}

/* The output dtype PyTorch would give op on dtype din. */
static int out_dtype(int op, int din)
{
	switch (op) {
	case NK_RED_ARGMAX: case NK_RED_ARGMIN: return NK_I64;
	case NK_RED_ANY: case NK_RED_ALL: return NK_BOOL;
	case NK_RED_SUM: case NK_RED_PROD: return nk_is_float(din) ? din : NK_I64;
	case NK_RED_AMAX: case NK_RED_AMIN: case NK_RED_MAX: case NK_RED_MIN: return din;
	default: return nk_is_float(din) ? din : NK_F32;
	}
}

/* One shape: run vs ref, outputs (and out2) compared.  Returns the run's rc. */
static int red_case(int op, int din, int64_t O, int64_t R, int64_t I, double a, bool specials)
{
	int dout = out_dtype(op, din);
	int64_t n = O * R * I, m = O * I;
	void *in = calloc((size_t)(n > 0 ? n : 1), nk_dtype_size(din));
	fill(in, din, n, specials);
	void *o1 = calloc((size_t)(m + 1), 8), *o2 = calloc((size_t)(m + 1), 8); /* room for int64 */
	void *x1 = calloc((size_t)(m + 1), 8), *x2 = calloc((size_t)(m + 1), 8);
	bool has2 = op == NK_RED_MAX || op == NK_RED_MIN || op == NK_RED_VAR || op == NK_RED_STD;
	nk_reduce_args_t A = {in, o1, has2 ? x1 : NULL, din, dout, O, R, I, op, a};
	nk_reduce_args_t B = {in, o2, has2 ? x2 : NULL, din, dout, O, R, I, op, a};
	int rr = nk_reduce_ref(&B), rn = nk_reduce_run(&A);
	CHECK((rr != 0) == (rn != 0), "op %d %s [%lld,%lld,%lld]: ref rc %d run rc %d", op, nk_dtype_name(din),
	      (long long)O, (long long)R, (long long)I, rr, rn);
	if (rr == 0 && rn == 0) {
		double rtol = dout == NK_F64 ? 1e-12 : dout == NK_F32 ? 2e-6 : 1e-2;
		double atol = rtol * 4 * sqrt((double)(R + 1));
		int ot = (op == NK_RED_ARGMAX || op == NK_RED_ARGMIN) ? NK_I64 : dout;
		int t2 = (op == NK_RED_MAX || op == NK_RED_MIN) ? NK_I64 : dout;
		int bad = 0;
		for (int64_t j = 0; j < m && bad < 3; j++) {
			size_t e = nk_dtype_size(ot), e2 = nk_dtype_size(t2);
			bool ok = close_elem(ot, (char *)o1 + j * e, (char *)o2 + j * e, rtol, atol);
			if (has2)
				ok = ok && close_elem(t2, (char *)x1 + j * e2, (char *)x2 + j * e2, rtol, atol);
			if (!ok) {
				bad++;
				CHECK(0, "op %d %s [%lld,%lld,%lld] out %lld: run %.10g ref %.10g (out2 %.10g %.10g)", op,
				      nk_dtype_name(din), (long long)O, (long long)R, (long long)I, (long long)j,
				      nk_load_f64((char *)o1 + j * e, ot), nk_load_f64((char *)o2 + j * e, ot),
				      nk_load_f64((char *)x1 + j * e2, t2), nk_load_f64((char *)x2 + j * e2, t2));
			}
		}
	}
	free(in), free(o1), free(o2), free(x1), free(x2);
	return rn;
}

static void test_vs_ref(void)
{
	static const int dts[] = {NK_F32, NK_BF16, NK_F16, NK_F64, NK_I64, NK_I32, NK_U8, NK_BOOL};
	static const int64_t shapes[][3] = {{3, 17, 1}, {2, 33, 5}, {1, 1, 1}, {5, 1, 3}, {0, 5, 3},
					    {64, 300, 1}, {2, 50, 300}, {1, 3, 1000}, {2, 0, 3}, {7, 700, 2}};
	static const double norms[] = {2, 1, 0, INFINITY, -INFINITY, 3.5};
	for (int op = 0; op < NK_RED_COUNT; op++)
		for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
				double a = op == NK_RED_NORM ? norms[rnd() % 6] : (op == NK_RED_VAR || op == NK_RED_STD) ? rnd() % 2 : 0;
				red_case(op, dts[t], shapes[s][0], shapes[s][1], shapes[s][2], a, s % 2 == 0);
			}
}

/* Long R: the chunked path (few outputs) and the parallel paths ... */
static void test_large_vs_ref(void)
{
	static const int dts[] = {NK_F32, NK_BF16, NK_I64, NK_F64};
	/* ... and wide column sums (I >= 256: chunks of 256 rows, the last ragged; I > 2048: two passes) */
	static const int64_t shapes[][3] = {{1, 100000, 1}, {3, 20000, 3}, {2, 9000, 40}, {5000, 20, 1},
					    {2, 1001, 300}, {1, 600, 2100}};
	for (int op = 0; op < NK_RED_COUNT; op++)
		for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
			for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
				red_case(op, dts[t], shapes[s][0], shapes[s][1], shapes[s][2], op == NK_RED_NORM ? 2 : 1,
					 false);
	/* wide column sums with a long R: 63 chunks of 320 rows (the chunk count is capped at 64) */
	for (int op = NK_RED_SUM; op <= NK_RED_MEAN; op++) {
		red_case(op, NK_F32, 1, 20000, 260, 0, false);
		red_case(op, NK_BF16, 1, 20000, 260, 0, false);
	}
	/* NaN far into a long row: max/argmax must still find it */
	for (int op = NK_RED_AMAX; op <= NK_RED_ARGMIN; op++)
		red_case(op, NK_F32, 2, 70000, 1, 0, true);
}

/* ---- known values ------------------------------------------------------------------------------------ */
static double red1(int op, int din, int dout, const void *in, int64_t R, double a, void *out2)
{
	char out[8] = {0};
	nk_reduce_args_t A = {in, out, out2, din, dout, 1, R, 1, op, a};
	CHECK(nk_reduce_run(&A) == 0, "op %d", op);
	return (op == NK_RED_ARGMAX || op == NK_RED_ARGMIN) ? (double)*(int64_t *)out : nk_load_f64(out, dout);
}

/* The unrolled dense f32 loops (sum: 256-element blocks, extrema: 64-element steps) and, for inputs
 * of 16 MiB and more, the DRAM loops, around their block edges: sums against the reference, extrema exact, one NaN anywhere (main loop or tail) wins. */
static void test_dense_f32_edges(void)
{
	static const int64_t lens[] = {1, 15, 16, 17, 63, 64, 65, 127, 255, 256, 257, 511, 1000, 4097, 100003,
				       (16 << 20) / 4 + 7 /* the DRAM loops */};
	for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
		int64_t n = lens[t];
		float *x = malloc((size_t)n * sizeof *x);
		double want = 0;
		float mx = -INFINITY, mn = INFINITY;
		for (int64_t i = 0; i < n; i++) {
			x[i] = (float)(rnd() / 4294967296.0 * 6 - 3);
			want += x[i];
			mx = x[i] > mx ? x[i] : mx;
			mn = x[i] < mn ? x[i] : mn;
		}
		double got = red1(NK_RED_SUM, NK_F32, NK_F64, x, n, 0, NULL);
		CHECK(fabs(got - want) <= 1e-6 * (1 + sqrt((double)n)), "sum n %lld: %.9g vs %.9g", (long long)n, got, want);
		CHECK(red1(NK_RED_AMAX, NK_F32, NK_F32, x, n, 0, NULL) == mx, "amax n %lld", (long long)n);
		CHECK(red1(NK_RED_AMIN, NK_F32, NK_F32, x, n, 0, NULL) == mn, "amin n %lld", (long long)n);
		int64_t pos[] = {0, n / 2, n - 1, n > 64 ? 63 : 0, n > 64 ? n - 65 : 0};
		for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
			float keep = x[pos[k]];
			x[pos[k]] = NAN;
			CHECK(isnan(red1(NK_RED_AMAX, NK_F32, NK_F32, x, n, 0, NULL)), "amax NaN at %lld of %lld",
			      (long long)pos[k], (long long)n);
			CHECK(isnan(red1(NK_RED_AMIN, NK_F32, NK_F32, x, n, 0, NULL)), "amin NaN at %lld", (long long)pos[k]);
			CHECK(isnan(red1(NK_RED_SUM, NK_F32, NK_F32, x, n, 0, NULL)), "sum NaN at %lld", (long long)pos[k]);
			x[pos[k]] = INFINITY;
			CHECK(red1(NK_RED_AMAX, NK_F32, NK_F32, x, n, 0, NULL) == INFINITY, "amax inf");
			x[pos[k]] = keep;
		}
		free(x);
	}
}

static void test_known_values(void)
{
	float v[] = {1, 2, 4, 8};
	CHECK(fabs(red1(NK_RED_VAR, NK_F32, NK_F32, v, 4, 1, NULL) - 9.583333015441895) < 1e-6, " ");
	float mean = 0;
	CHECK(fabs(red1(NK_RED_STD, NK_F32, NK_F32, v, 4, 0, &mean) - 2.6809513568878174) < 1e-6, " ");
	CHECK(mean == 3.75f, "mean %g", mean);
	float w[] = {3, -4, 1};
	CHECK(fabs(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, 3, NULL) - 4.514357566833496) < 1e-6, " ");
	CHECK(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, 0, NULL) == 3, " ");
	CHECK(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, INFINITY, NULL) == 4, " ");
	CHECK(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, -INFINITY, NULL) == 1, " ");
	CHECK(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, 1, NULL) == 8, " ");
	CHECK(fabs(red1(NK_RED_NORM, NK_F32, NK_F32, w, 3, 2, NULL) - sqrt(26)) < 1e-6, " ");
	float l[] = {1, 2, 3};
	CHECK(fabs(red1(NK_RED_LOGSUMEXP, NK_F32, NK_F32, l, 3, 0, NULL) - 3.4076058864593506) < 1e-6, " ");
	float li[] = {1, INFINITY, 3}, lm[] = {-INFINITY, -INFINITY}, ln[] = {1, NAN};
	CHECK(red1(NK_RED_LOGSUMEXP, NK_F32, NK_F32, li, 3, 0, NULL) == INFINITY, " ");
	CHECK(red1(NK_RED_LOGSUMEXP, NK_F32, NK_F32, lm, 2, 0, NULL) == -INFINITY, " ");
	CHECK(isnan(red1(NK_RED_LOGSUMEXP, NK_F32, NK_F32, ln, 2, 0, NULL)), " ");
	/* NaN: max propagates, argmax/argmin return the first NaN */
	float nn[] = {1, NAN, NAN, 5};
	int64_t idx = -7;
	CHECK(isnan(red1(NK_RED_MAX, NK_F32, NK_F32, nn, 4, 0, &idx)) && idx == 1, "idx %lld", (long long)idx);
	CHECK(red1(NK_RED_ARGMAX, NK_F32, NK_I64, nn, 4, 0, NULL) == 1, " ");
	CHECK(red1(NK_RED_ARGMIN, NK_F32, NK_I64, nn, 4, 0, NULL) == 1, " ");
	CHECK(isnan(red1(NK_RED_AMIN, NK_F32, NK_F32, nn, 4, 0, NULL)), " ");
	/* first occurrence */
	float f[] = {3, 5, 5, 1, 1};
	CHECK(red1(NK_RED_ARGMAX, NK_F32, NK_I64, f, 5, 0, NULL) == 1, " ");
	CHECK(red1(NK_RED_ARGMIN, NK_F32, NK_I64, f, 5, 0, NULL) == 3, " ");
	CHECK(red1(NK_RED_MIN, NK_F32, NK_F32, f, 5, 0, &idx) == 1 && idx == 3, " ");
	float ni[] = {-INFINITY, -INFINITY};
	CHECK(red1(NK_RED_ARGMAX, NK_F32, NK_I64, ni, 2, 0, NULL) == 0, "all -inf");
	/* integers are exact */
	int64_t big[] = {(int64_t)1 << 62, 5, -2};
	char out[8];
	nk_reduce_args_t S = {big, out, NULL, NK_I64, NK_I64, 1, 3, 1, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&S) == 0 && *(int64_t *)out == ((int64_t)1 << 62) + 3, "exact int64 sum");
	int32_t ip[] = {3, -4, 5};
	S = (nk_reduce_args_t){ip, out, NULL, NK_I32, NK_I64, 1, 3, 1, NK_RED_PROD, 0};
	CHECK(nk_reduce_run(&S) == 0 && *(int64_t *)out == -60, "int prod");
	uint8_t bb[] = {1, 1, 0, 1};
	S = (nk_reduce_args_t){bb, out, NULL, NK_BOOL, NK_I64, 1, 4, 1, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&S) == 0 && *(int64_t *)out == 3, "bool sum");
	S.op = NK_RED_ALL, S.dtype_out = NK_BOOL;
	CHECK(nk_reduce_run(&S) == 0 && out[0] == 0, "all");
	S.op = NK_RED_ANY;
	CHECK(nk_reduce_run(&S) == 0 && out[0] == 1, "any");
}

/* bf16 sums accumulate wider than bf16; f32 sums of a million values stay accurate. */
static void test_accuracy(void)
{
	enum { N = 1000000 };
	uint16_t *h = malloc(1000 * 2);
	for (int i = 0; i < 1000; i++) h[i] = nk_f32_to_bf16(0.1f);
	uint16_t r;
	nk_reduce_args_t A = {h, &r, NULL, NK_BF16, NK_BF16, 1, 1000, 1, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&A) == 0 && nk_bf16_to_f32(r) == 100.0f, "bf16 sum %g", nk_bf16_to_f32(r));
	float rf;
	A.out = &rf, A.dtype_out = NK_F32;
	CHECK(nk_reduce_run(&A) == 0 && rf == (float)(1000 * (double)nk_bf16_to_f32(h[0])), "bf16 -> f32 sum %.9g", rf);
	free(h);
	float *x = malloc(N * sizeof *x);
	for (int i = 0; i < N; i++) x[i] = 0.1f;
	nk_reduce_args_t S = {x, &rf, NULL, NK_F32, NK_F32, 1, N, 1, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&S) == 0 && fabs(rf - 100000.0) < 0.02, "f32 sum %.9g", rf);
	S.op = NK_RED_MEAN;
	CHECK(nk_reduce_run(&S) == 0 && rf == 0.1f, "f32 mean %.9g", rf);
	/* column sums of a tall matrix */
	S = (nk_reduce_args_t){x, NULL, NULL, NK_F32, NK_F32, 1, N / 4, 4, NK_RED_SUM, 0};
	float c4[4];
	S.out = c4;
	CHECK(nk_reduce_run(&S) == 0 && fabs(c4[3] - 25000.0) < 0.01, "column sum %.9g", c4[3]);
	S.op = NK_RED_VAR;
	S.a = 1;
	CHECK(nk_reduce_run(&S) == 0 && fabs(c4[0]) < 1e-12, "var of constants %g", c4[0]);
	free(x);
}

static void test_empty(void)
{
	float out[3] = {7, 7, 7};
	float in[1] = {0};
	nk_reduce_args_t A = {in, out, NULL, NK_F32, NK_F32, 1, 0, 3, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&A) == 0 && out[0] == 0 && out[2] == 0, "sum of nothing");
	A.op = NK_RED_PROD;
	CHECK(nk_reduce_run(&A) == 0 && out[1] == 1, "prod of nothing");
	A.op = NK_RED_MEAN;
	CHECK(nk_reduce_run(&A) == 0 && isnan(out[1]), "mean of nothing");
	A.op = NK_RED_VAR;
	CHECK(nk_reduce_run(&A) == 0 && isnan(out[1]), "var of nothing");
	A.op = NK_RED_LOGSUMEXP;
	CHECK(nk_reduce_run(&A) == 0 && out[1] == -INFINITY, "logsumexp of nothing");
	A.op = NK_RED_NORM;
	CHECK(nk_reduce_run(&A) == 0 && out[1] == 0, "2-norm of nothing");
	A.a = INFINITY;
	CHECK(nk_reduce_run(&A) != 0, "inf-norm of nothing fails");
	uint8_t b[3];
	A.out = b, A.dtype_out = NK_BOOL, A.op = NK_RED_ANY;
	CHECK(nk_reduce_run(&A) == 0 && b[0] == 0, "any of nothing");
	A.op = NK_RED_ALL;
	CHECK(nk_reduce_run(&A) == 0 && b[0] == 1, "all of nothing");
	for (int op = NK_RED_AMAX; op <= NK_RED_ARGMIN; op++) {
		int64_t o2[3];
		nk_reduce_args_t M = {in, o2, o2, NK_F32, NK_I64, 2, 0, 3, op, 0};
		CHECK(nk_reduce_run(&M) != 0 && nk_reduce_ref(&M) != 0, "op %d on no elements must fail", op);
		M.O = 0;
		CHECK(nk_reduce_run(&M) == 0, "op %d with no outputs is fine", op);
	}
	nk_reduce_args_t bad = {in, out, NULL, NK_F32, 42, 1, 1, 1, NK_RED_SUM, 0};
	CHECK(nk_reduce_run(&bad) != 0, "invalid dtype");
	bad.dtype_out = NK_F32, bad.op = 99;
	CHECK(nk_reduce_run(&bad) != 0, "invalid op");
}

/* The same tests on the portable optimized paths (NEURON_KERNELS=portable disables the AVX-512 ones),
 * in a child process: the choice is made once per process. */
static const char *self_exe;

static void test_portable_paths(void)
{
	if (getenv("NEURON_KERNELS"))
		return; /* already a variant run */
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "NEURON_KERNELS=portable '%s' > /dev/null", self_exe);
	CHECK(system(cmd) == 0, "%s with NEURON_KERNELS=portable failed", self_exe);
}

/* The AVX2 row loops (reduce_avx2.c) against double sums and exact extrema: every tail length, NaN
 * propagation, shifted squares. */
static void test_avx2_row_loops(void)
{
	float x[300];

	__builtin_cpu_init();
	if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
		return;
	for (int n = 1; n <= 300; n += n < 70 ? 1 : 23) {
		double s = 0, sq = 0, shift = 0.25;
		float mx = -INFINITY, mn = INFINITY;

		for (int i = 0; i < n; i++) {
			x[i] = (float)((i * 7919 % 1000) - 400) / 64.0f;
			s += x[i], sq += (x[i] - shift) * (x[i] - shift);
			mx = x[i] > mx ? x[i] : mx, mn = x[i] < mn ? x[i] : mn;
		}
		CHECK(fabs(nk_rd_sum_f32_avx2(x, n) - s) <= 1e-6 * (fabs(s) + n), "sum n=%d: %g vs %g", n, nk_rd_sum_f32_avx2(x, n), s);
		CHECK(fabs(nk_rd_sumsq_f32_avx2(x, n, shift) - sq) <= 1e-9 * sq, "sumsq n=%d", n);
		CHECK(nk_rd_extremum_f32_avx2(x, n, true) == mx && nk_rd_extremum_f32_avx2(x, n, false) == mn, "extrema n=%d", n);
		x[n - 1] = NAN;
		CHECK(isnan(nk_rd_extremum_f32_avx2(x, n, true)) && isnan(nk_rd_extremum_f32_avx2(x, n, false)), "NaN n=%d", n);
	}
}

int main(int argc, char **argv)
{
	(void)argc;
	self_exe = argv[0];
	RUN(test_known_values);
	RUN(test_avx2_row_loops);
	RUN(test_dense_f32_edges);
	RUN(test_accuracy);
	RUN(test_empty);
	RUN(test_vs_ref);
	RUN(test_large_vs_ref);
	RUN(test_portable_paths);
	return ctest_finish();
}
