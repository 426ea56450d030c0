/* test_embedding.c - embedding gather and its deterministic scatter-add backward against naive loops:
 * i64/i32 indices, f32/bf16/f64 weights, odd sizes, padding_idx, repeated indices, bounds errors. */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static void *make_idx(int idx_dtype, int64_t n, int64_t V)
{
	void *p = calloc((size_t)(n ? n : 1), 8);

	for (int64_t i = 0; i < n; i++) {
		int64_t k = nkt_randint(0, V);

		if (idx_dtype == NK_I64)
			((int64_t *)p)[i] = k;
		else
			((int32_t *)p)[i] = (int32_t)k;
	}
	return p;
}

static int64_t idx_get(const void *p, int idx_dtype, int64_t i)
{
	return idx_dtype == NK_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

static void check_case(int dtype, int idx_dtype, int64_t n, int64_t V, int64_t C, int64_t pad)
{
	size_t es = nk_fp_elem_size(dtype);
	void *w = nkt_alloc(dtype, V * C), *out = nkt_alloc(dtype, n * C), *go = nkt_alloc(dtype, n * C);
	void *gw = nkt_alloc(dtype, V * C), *gw_ref = nkt_alloc(dtype, V * C);
	void *idx = make_idx(idx_dtype, n, V);
	nk_embedding_args_t f = { .dtype = dtype, .idx_dtype = idx_dtype, .n = n, .V = V, .C = C, .weight = w,
				  .idx = idx, .out = out };
	nk_embedding_bwd_args_t b = { .dtype = dtype, .idx_dtype = idx_dtype, .n = n, .V = V, .C = C,
				      .padding_idx = pad, .grad_out = go, .idx = idx, .grad_weight = gw };
	bool same = true;
	double e;

	nkt_fill(w, dtype, V * C, -1, 1);
	nkt_fill(go, dtype, n * C, -1, 1);
	nkt_fill(gw, dtype, V * C, 5, 6); /* must be overwritten */
	CHECK(nk_embedding_run(&f) == 0, "embedding run");
	for (int64_t i = 0; i < n; i++)
		same &= !memcmp((char *)out + i * C * (int64_t)es, (char *)w + idx_get(idx, idx_dtype, i) * C * (int64_t)es,
				(size_t)C * es);
	CHECK(same, "embedding gather %s n=%lld V=%lld C=%lld", nkt_dtype_name(dtype), (long long)n, (long long)V,
	      (long long)C);

	/* naive backward in the same per-add rounding */
	for (int64_t i = 0; i < n; i++) {
		int64_t k = idx_get(idx, idx_dtype, i);

		if (k == pad)
			continue;
		for (int64_t j = 0; j < C; j++) {
			double s = nkt_get(gw_ref, dtype, k * C + j) + nkt_get(go, dtype, i * C + j);

			if (dtype == NK_F64)
				((double *)gw_ref)[k * C + j] = s;
			else
				nk_fp_storef(gw_ref, dtype, k * C + j, (float)s);
		}
	}
	CHECK(nk_embedding_bwd_run(&b) == 0, "embedding bwd run");
	e = nkt_err(gw, gw_ref, dtype, V * C, 1e-6, 1e-6);
	CHECK(e <= 1, "embedding bwd %s n=%lld V=%lld C=%lld pad=%lld: err %g", nkt_dtype_name(dtype), (long long)n,
	      (long long)V, (long long)C, (long long)pad, e);
	free(w), free(out), free(go), free(gw), free(gw_ref), free(idx);
}

static void test_embedding_vs_naive(void)
{
	static const int64_t shapes[][3] = { { 1, 1, 1 }, { 7, 3, 33 }, { 100, 10, 7 }, { 33, 1000, 64 },
					     { 5000, 50, 16 }, { 300, 2000, 130 } };
	static const int dts[] = { NK_F32, NK_BF16, NK_F64, NK_F16 };

	for (int d = 0; d < 4; d++)
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
			for (int ix = 0; ix < 2; ix++)
				check_case(dts[d], ix ? NK_I32 : NK_I64, shapes[s][0], shapes[s][1], shapes[s][2],
					   s % 2 ? -1 : shapes[s][1] / 2);
}

static void test_embedding_bounds(void)
{
	float w[6] = { 0 }, out[6];
	int64_t idx[3] = { 0, 3, 1 };
	nk_embedding_args_t f = { .dtype = NK_F32, .idx_dtype = NK_I64, .n = 3, .V = 3, .C = 2, .weight = w,
				  .idx = idx, .out = out };
	nk_embedding_bwd_args_t b = { .dtype = NK_F32, .idx_dtype = NK_I64, .n = 3, .V = 3, .C = 2,
				      .padding_idx = -1, .grad_out = out, .idx = idx, .grad_weight = w };

	nrt_kernel_fail_clear();
	CHECK(nk_embedding_run(&f) != 0, "index 3 of 3 fails");
	CHECK(strstr(nrt_kernel_fail_message(), "index out of range in self (index 3, embedding of size 3)") != NULL,
	      "message: %s", nrt_kernel_fail_message());
	idx[1] = -1;
	CHECK(nk_embedding_run(&f) != 0, "index -1 fails");
	CHECK(nk_embedding_bwd_run(&b) != 0, "backward checks indices too");
	f.idx_dtype = NK_F32;
	CHECK(nk_embedding_run(&f) != 0, "float indices are refused");
}

int main(void)
{
	nkt_seed(4);
	RUN(test_embedding_vs_naive);
	RUN(test_embedding_bounds);
	return ctest_finish();
}
