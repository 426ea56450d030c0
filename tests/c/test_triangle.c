/* test_triangle.c - the triangle kernels (triangle.c): tril/triu run vs ref vs a naive mask over every
 * dtype, a transposed input and offsets on both sides; tril/triu_indices run vs ref vs a naive count
 * over shapes and offsets incl. empty. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctest.h"
#include "nk_impl.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static const int all_dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8, NK_BOOL };

#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* an allocation count: at least 1 */
static int64_t cnt(int64_t n)
{
	return n > 0 ? n : 1;
}

static const char *dname(int dt)
{
	return nk_dtype_name(dt);
}

/* n random elements of dtype dt (small integers, so that sums/products stay exact and ties occur). */
static void *rand_elems(int dt, int64_t n, int lo, int hi)
{
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)cnt(n), es);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = nkt_randint(lo, hi);
		if (dt == NK_BOOL)
			p[i] = (char)(v & 1);
		else if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, (double)v * 0.5);
		else
			nk_store_i64(p + i * (int64_t)es, dt, v);
	}
	return p;
}

static double elem(const void *p, int dt, int64_t i)
{
	const char *c = (const char *)p + i * (int64_t)nk_dtype_size(dt);
	return nk_is_float(dt) ? nk_load_f64(c, dt) : (double)nk_load_i64(c, dt);
}

/* ---- tril / triu --------------------------------------------------------------------------------- */
static void test_tri_mask(void)
{
	static const int64_t ks[] = { -3, -1, 0, 1, 2, 9 };
	int64_t B = 2, M = 5, N = 7;
	for (int d = 0; d < NDT; d++)
		for (int lower = 0; lower < 2; lower++)
			for (int t = 0; t < 6; t++) {
				int dt = all_dtypes[d];
				size_t es = nk_dtype_size(dt);
				void *in = rand_elems(dt, B * M * N, 1, 5), *o1 = calloc((size_t)(B * M * N), es), *o2 = calloc((size_t)(B * M * N), es);
				/* input read transposed in the last two dims: [B, M, N] view of a [B, N, M] buffer */
				nk_tri_args_t a = { .dtype = dt, .lower = lower, .k = ks[t], .B = B, .M = M, .N = N, .in = in,
						    .si = { M * N, 1, M }, .out = o1, .so = { M * N, N, 1 } };
				nk_tri_args_t b = a;
				b.out = o2;
				CHECK(nk_tri_run(&a) == 0 && nk_tri_ref(&b) == 0, "tri run");
				bool ok = memcmp(o1, o2, (size_t)(B * M * N) * es) == 0;
				for (int64_t bb = 0; bb < B; bb++)
					for (int64_t i = 0; i < M; i++)
						for (int64_t j = 0; j < N; j++) {
							bool keep = lower ? j - i <= ks[t] : j - i >= ks[t];
							double want = keep ? elem(in, dt, bb * M * N + j * M + i) : 0;
							ok &= elem(o1, dt, (bb * M + i) * N + j) == want;
						}
				CHECK(ok, "tri %s lower=%d k=%lld", dname(dt), lower, (long long)ks[t]);
				free(in), free(o1), free(o2);
			}
}

static void test_tri_indices(void)
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

int main(void)
{
	nkt_seed(7);
	RUN(test_tri_mask);
	RUN(test_tri_indices);
	return ctest_finish();
}
