/* test_small.c - the small-op kernels (small.c): tril/triu_indices run vs ref vs a naive count over
 * shapes and offsets incl. empty; trace run vs ref (strided, every dtype, zero length, integer
 * wraparound); cross run vs ref vs a direct formula over every dtype, odd O/I and zero-size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nk_impl.h"

static const int dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8 };
#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))

static void *rand_elems(int dt, int64_t n)
{
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)(n > 0 ? n : 1), es);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = nkt_randint(dt == NK_U8 ? 0 : -9, 10);
		if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, (double)v * 0.25);
		else
			nk_store_i64(p + i * (int64_t)es, dt, v);
	}
	return p;
}

static void test_tri(void)
{
	for (int lower = 0; lower < 2; lower++)
		for (int64_t row = 0; row < 8; row++)
			for (int64_t col = 0; col < 9; col += 2)
				for (int64_t off = -10; off <= 10; off += 3) {
					int64_t n = nk_tri_indices_count(row, col, off, lower);
					int64_t naive = 0;
					for (int64_t r = 0; r < row; r++)
						for (int64_t c = 0; c < col; c++)
							naive += lower ? c - r <= off : c - r >= off;
					CHECK(n == naive, "tri count %d %lld %lld %lld: %lld vs %lld", lower, (long long)row, (long long)col,
					      (long long)off, (long long)n, (long long)naive);
					int64_t *o1 = calloc((size_t)(2 * n + 1), 8), *o2 = calloc((size_t)(2 * n + 1), 8);
					nk_tri_indices_args_t a = { .row = row, .col = col, .offset = off, .n = n, .lower = lower, .out = o1 };
					CHECK(nk_tri_indices_run(&a) == 0, "tri run");
					a.out = o2;
					CHECK(nk_tri_indices_ref(&a) == 0, "tri ref");
					CHECK(memcmp(o1, o2, (size_t)(2 * n) * 8) == 0, "tri run != ref %d %lld %lld %lld", lower, (long long)row,
					      (long long)col, (long long)off);
					free(o1), free(o2);
				}
}

static void test_trace(void)
{
	for (int di = 0; di < NDT; di++) {
		int dt = dtypes[di];
		int ot = nk_is_float(dt) ? dt : NK_I64;
		for (int64_t n = 0; n < 40; n += 7)
			for (int64_t stride = 1; stride < 5; stride += 3) {
				void *in = rand_elems(dt, n * stride + 1);
				int64_t r1[1] = { 0 }, r2[1] = { 0 };
				nk_trace_args_t a = { .dtype = dt, .out_dtype = ot, .n = n, .stride = stride, .in = in, .out = r1 };
				CHECK(nk_trace_run(&a) == 0, "trace run");
				a.out = r2;
				CHECK(nk_trace_ref(&a) == 0, "trace ref");
				CHECK(memcmp(r1, r2, nk_dtype_size(ot)) == 0, "trace run != ref dt %d n %lld", dt, (long long)n);
				double want = 0;
				size_t es = nk_dtype_size(dt);
				for (int64_t i = 0; i < n; i++) {
					const char *p = (const char *)in + i * stride * (int64_t)es;
					want += nk_is_float(dt) ? nk_load_f64(p, dt) : (double)nk_load_i64(p, dt);
				}
				double got = nk_is_float(dt) ? nk_load_f64(r1, ot) : (double)nk_load_i64(r1, ot);
				CHECK(fabs(got - want) <= (dt == NK_BF16 || dt == NK_F16 ? 0.5 : 1e-9), "trace dt %d: %g vs %g", dt, got, want);
				free(in);
			}
	}
	/* int64 wraps */
	int64_t big[2] = { INT64_MAX, 1 }, r = 0;
	nk_trace_args_t a = { .dtype = NK_I64, .out_dtype = NK_I64, .n = 2, .stride = 1, .in = big, .out = &r };
	CHECK(nk_trace_run(&a) == 0 && r == INT64_MIN, "trace wrap %lld", (long long)r);
}

static void test_cross(void)
{
	static const int64_t sizes[][2] = { { 1, 1 }, { 5, 1 }, { 1, 7 }, { 3, 4 }, { 0, 3 }, { 2, 0 }, { 17, 5 } };
	for (int di = 0; di < NDT; di++) {
		int dt = dtypes[di];
		size_t es = nk_dtype_size(dt);
		for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
			int64_t O = sizes[si][0], I = sizes[si][1], n = O * 3 * I;
			void *x = rand_elems(dt, n), *y = rand_elems(dt, n);
			char *o1 = calloc((size_t)(n + 1), es), *o2 = calloc((size_t)(n + 1), es);
			nk_cross_args_t a = { .dtype = dt, .O = O, .I = I, .a = x, .b = y, .out = o1 };
			CHECK(nk_cross_run(&a) == 0, "cross run");
			a.out = o2;
			CHECK(nk_cross_ref(&a) == 0, "cross ref");
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "cross run != ref dt %d O %lld I %lld", dt, (long long)O, (long long)I);
			/* values are multiples of 1/4 below 10: exact in every float dtype; integers wrap */
			for (int64_t i = 0; i < O; i++)
				for (int64_t j = 0; j < I; j++)
					for (int c = 0; c < 3; c++) {
						int c1 = (c + 1) % 3, c2 = (c + 2) % 3;
#define EL(p, k) (nk_is_float(dt) ? nk_load_f64((const char *)(p) + ((i * 3 + (k)) * I + j) * (int64_t)es, dt) \
				 : (double)nk_load_i64((const char *)(p) + ((i * 3 + (k)) * I + j) * (int64_t)es, dt))
						double want = EL(x, c1) * EL(y, c2) - EL(x, c2) * EL(y, c1);
						if (!nk_is_float(dt)) {
							char tmp[8];
							nk_store_i64(tmp, dt, (int64_t)want);
							want = (double)nk_load_i64(tmp, dt);
						}
						CHECK(EL(o1, c) == want, "cross dt %d: %g vs %g", dt, EL(o1, c), want);
#undef EL
					}
			free(x), free(y), free(o1), free(o2);
		}
	}
}

int main(void)
{
	nkt_seed(5);
	RUN(test_tri);
	RUN(test_trace);
	RUN(test_cross);
	return ctest_finish();
}
