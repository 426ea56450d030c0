/* test_igemm.c - integer GEMM (igemm.c): nk_igemm_run against nk_igemm_ref and a naive wrapping
 * int64 product, for every integer dtype, transposed and batched layouts, alpha/beta, K = 0, and the
 * rejection of float dtypes. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static const int dts[] = { NK_I64, NK_I32, NK_I16, NK_I8, NK_U8 };

static void fill(void *p, int dt, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		nk_store_i64((char *)p + i * (int64_t)nk_dtype_size(dt), dt, nkt_randint(-100, 100));
}

static int64_t at(const void *p, int dt, int64_t i)
{
	return nk_load_i64((const char *)p + i * (int64_t)nk_dtype_size(dt), dt);
}

static void check(int dt, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, int64_t alpha, int64_t beta)
{
	size_t es = nk_dtype_size(dt);
	int64_t na = batch * M * K, nb = batch * K * N, nc = batch * M * N;
	void *A = calloc((size_t)(na + 1), es), *B = calloc((size_t)(nb + 1), es);
	void *C1 = calloc((size_t)(nc + 1), es), *C2 = calloc((size_t)(nc + 1), es), *C0 = calloc((size_t)(nc + 1), es);
	fill(A, dt, na), fill(B, dt, nb), fill(C0, dt, nc);
	memcpy(C1, C0, (size_t)nc * es), memcpy(C2, C0, (size_t)nc * es);
	nk_gemm_args_t g = { .dtype = dt, .M = M, .N = N, .K = K, .batch = batch, .alpha = (double)alpha, .beta = (double)beta,
			     .A = A, .rs_a = ta ? 1 : K, .cs_a = ta ? M : 1, .bs_a = M * K,
			     .B = B, .rs_b = N, .cs_b = 1, .bs_b = K * N,
			     .C = C1, .rs_c = N, .cs_c = 1, .bs_c = M * N };
	nk_gemm_args_t r = g;
	r.C = C2;
	CHECK(nk_igemm_run(&g) == 0 && nk_igemm_ref(&r) == 0, "igemm run");
	bool ok = memcmp(C1, C2, (size_t)nc * es) == 0;
	for (int64_t b = 0; b < batch; b++)
		for (int64_t i = 0; i < M; i++)
			for (int64_t j = 0; j < N; j++) {
				uint64_t acc = 0;
				for (int64_t k = 0; k < K; k++)
					acc += (uint64_t)at(A, dt, b * M * K + (ta ? k * M + i : i * K + k)) *
					       (uint64_t)at(B, dt, b * K * N + k * N + j);
				uint64_t v = (uint64_t)alpha * acc + (beta ? (uint64_t)beta * (uint64_t)at(C0, dt, b * M * N + i * N + j) : 0);
				char tmp[8];
				nk_store_i64(tmp, dt, (int64_t)v);
				ok &= at(C1, dt, b * M * N + i * N + j) == at(tmp, dt, 0);
			}
	CHECK(ok, "igemm %s batch=%lld M=%lld N=%lld K=%lld ta=%d alpha=%lld beta=%lld", nk_dtype_name(dt), (long long)batch,
	      (long long)M, (long long)N, (long long)K, ta, (long long)alpha, (long long)beta);
	free(A), free(B), free(C0), free(C1), free(C2);
}

static void test_igemm(void)
{
	static const int64_t shapes[][4] = { { 1, 1, 1, 1 }, { 1, 5, 7, 3 }, { 3, 17, 300, 9 }, { 2, 4, 4, 0 }, { 1, 64, 65, 130 } };
	for (int d = 0; d < 5; d++)
		for (int s = 0; s < 5; s++) {
			check(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], false, 1, 0);
			check(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], true, 3, 2);
			check(dts[d], shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], false, -2, 1);
		}
}

static void test_igemm_rejects_float(void)
{
	float x = 0;
	nk_gemm_args_t g = { .dtype = NK_F32, .M = 1, .N = 1, .K = 1, .batch = 1, .alpha = 1, .A = &x, .B = &x, .C = &x };
	nrt_kernel_fail_clear();
	CHECK(nk_igemm_run(&g) != 0, "float rejected");
	CHECK(strstr(nrt_kernel_fail_message(), "nk_igemm") != NULL, "message: %s", nrt_kernel_fail_message());
	nrt_kernel_fail_clear();
}

int main(void)
{
	nkt_seed(11);
	RUN(test_igemm);
	RUN(test_igemm_rejects_float);
	return ctest_finish();
}
