/* test_index.c - the indexing kernels (index.c): gather / scatter / index_select / advanced-indexing
 * offsets / nonzero against the reference and against naive loops written here, over dtypes, strided
 * layouts and edge cases (empty, collisions, NaN, wrap-around, bad indices); repeat_interleave and
 * nonzero_static against direct formulas. */
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

static void *rand_pow2(int dt, int64_t n)
{
	static const int vals[3] = { -1, 1, 2 };
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)cnt(n), es);
	for (int64_t i = 0; i < n; i++) {
		int v = dt == NK_BOOL ? (int)nkt_randint(0, 2) : vals[nkt_randint(0, 3)];
		if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, v * 0.5);
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

static bool same_elem(double a, double b)
{
	return a == b || (isnan(a) && isnan(b));
}

/* ---- gather / scatter: [P, Q] index into [P, V] along dim 1 (x strided by rows of V) ------------- */
static void check_gather_scatter(int dt, int op, int64_t P, int64_t Q, int64_t V)
{
	size_t es = nk_dtype_size(dt);
	void *x = rand_elems(dt, P * V, -4, 5), *x2 = malloc((size_t)(P * V) * es + 1), *x3 = malloc((size_t)(P * V) * es + 1);
	/* products use y in {-1, 1, 2} (x0.5 for floats): powers of two stay exact in every dtype */
	void *y = op == NK_IDX_SCATTER_MUL ? rand_pow2(dt, P * Q) : rand_elems(dt, P * Q, -4, 5);
	void *y2 = calloc((size_t)cnt(P * Q), es);
	int64_t *idx = malloc((size_t)cnt(P * Q) * 8);
	for (int64_t i = 0; i < P * Q; i++)
		idx[i] = nkt_randint(0, V);
	memcpy(x2, x, (size_t)(P * V) * es);
	memcpy(x3, x, (size_t)(P * V) * es);
	nk_index_args_t a = { .op = op, .dtype = dt, .idx_dtype = NK_I64, .ndim = 2, .dim = 1, .err_dim = 1,
			      .shape = { P, Q }, .bound = V, .x = x2, .xs = { V, 0 }, .xk = 1, .y = op == NK_IDX_GATHER ? y2 : y,
			      .ys = { Q, 1 }, .idx = idx, .is = { Q, 1 } };
	CHECK(nk_index_run(&a) == 0, "index run");
	nk_index_args_t r = a;
	void *y3 = calloc((size_t)cnt(P * Q), es);
	r.x = x3;
	if (op == NK_IDX_GATHER)
		r.y = y3;
	CHECK(nk_index_ref(&r) == 0, "index ref");
	bool ok = true;
	if (op == NK_IDX_GATHER) {
		for (int64_t i = 0; i < P * Q; i++) {
			double want = elem(x, dt, (i / Q) * V + idx[i]);
			ok &= same_elem(elem(y2, dt, i), want) && same_elem(elem(y3, dt, i), want);
		}
	} else {
		/* naive: apply updates in row-major order; floats in double (exact for these values),
		 * integers in wrapping int64 */
		double *want = malloc((size_t)cnt(P * V) * sizeof(double));
		int64_t *iwant = malloc((size_t)cnt(P * V) * sizeof(int64_t));
		bool fl = nk_is_float(dt);
		for (int64_t i = 0; i < P * V; i++) {
			want[i] = elem(x, dt, i);
			iwant[i] = fl ? 0 : nk_load_i64((char *)x + i * (int64_t)es, dt);
		}
		for (int64_t i = 0; i < P * Q; i++) {
			int64_t t = (i / Q) * V + idx[i];
			double s = elem(y, dt, i);
			int64_t is = fl ? 0 : nk_load_i64((char *)y + i * (int64_t)es, dt);
			switch (op) {
			case NK_IDX_SCATTER: want[t] = s, iwant[t] = is; break;
			case NK_IDX_SCATTER_ADD: want[t] += s, iwant[t] = dt == NK_BOOL ? (iwant[t] || is) : (int64_t)((uint64_t)iwant[t] + (uint64_t)is); break;
			case NK_IDX_SCATTER_MUL: want[t] *= s, iwant[t] = (int64_t)((uint64_t)iwant[t] * (uint64_t)is); break;
			case NK_IDX_SCATTER_AMAX: want[t] = want[t] < s ? s : want[t], iwant[t] = iwant[t] < is ? is : iwant[t]; break;
			default: want[t] = want[t] > s ? s : want[t], iwant[t] = iwant[t] > is ? is : iwant[t]; break;
			}
		}
		for (int64_t i = 0; i < P * V; i++) {
			char tmp[8] = { 0 };
			if (fl)
				nk_store_f64(tmp, dt, want[i]);
			else
				nk_store_i64(tmp, dt, iwant[i]);
			double w = elem(tmp, dt, 0);
			ok &= same_elem(elem(x2, dt, i), w) && same_elem(elem(x3, dt, i), w);
		}
		free(iwant);
		free(want);
	}
	CHECK(ok, "op %d %s P=%lld Q=%lld V=%lld", op, dname(dt), (long long)P, (long long)Q, (long long)V);
	free(x), free(x2), free(x3), free(y), free(y2), free(y3), free(idx);
}

static void test_gather_scatter(void)
{
	static const int64_t shapes[][3] = { { 1, 1, 1 }, { 3, 4, 5 }, { 7, 33, 4 }, { 200, 300, 17 }, { 0, 3, 2 }, { 2, 0, 3 } };
	for (int s = 0; s < 6; s++)
		for (int d = 0; d < NDT; d++)
			for (int op = NK_IDX_GATHER; op <= NK_IDX_SCATTER_AMIN; op++)
				check_gather_scatter(all_dtypes[d], op, shapes[s][0], shapes[s][1], shapes[s][2]);
}

/* index_select-like gather with a broadcast 1-D index (strides 0) and i32 indices with wrap. */
static void test_index_select_wrap(void)
{
	int64_t P = 6, V = 9, Q = 5;
	float x[54], y[30];
	int32_t idx[5] = { 0, -1, 4, -9, 8 };
	for (int i = 0; i < 54; i++)
		x[i] = (float)i;
	nk_index_args_t a = { .op = NK_IDX_GATHER, .dtype = NK_F32, .idx_dtype = NK_I32, .ndim = 2, .dim = 1, .wrap = true,
			      .shape = { P, Q }, .bound = V, .x = x, .xs = { V, 0 }, .xk = 1, .y = y, .ys = { Q, 1 },
			      .idx = idx, .is = { 0, 1 } };
	CHECK(nk_index_run(&a) == 0, "wrap run");
	bool ok = true;
	for (int64_t p = 0; p < P; p++)
		for (int64_t q = 0; q < Q; q++) {
			int64_t k = idx[q] < 0 ? idx[q] + V : idx[q];
			ok &= y[p * Q + q] == x[p * V + k];
		}
	CHECK(ok, "index_select with wrap");
	/* scalar-value scatter (index_fill) */
	nk_index_args_t f = a;
	f.op = NK_IDX_SCATTER, f.y = NULL, f.value = -7, f.dim = 1;
	CHECK(nk_index_run(&f) == 0, "fill run");
	for (int64_t p = 0; p < P; p++)
		for (int64_t q = 0; q < Q; q++) {
			int64_t k = idx[q] < 0 ? idx[q] + V : idx[q];
			ok &= x[p * V + k] == -7;
		}
	CHECK(ok, "index_fill");
}

static void test_index_bad(void)
{
	float x[4] = { 0 }, y[2] = { 0 };
	int64_t idx[2] = { 1, 4 };
	nk_index_args_t a = { .op = NK_IDX_SCATTER, .dtype = NK_F32, .idx_dtype = NK_I64, .ndim = 1, .dim = 0, .err_dim = 0,
			      .shape = { 2 }, .bound = 4, .x = x, .xs = { 0 }, .xk = 1, .y = y, .ys = { 1 }, .idx = idx,
			      .is = { 1 } };
	y[0] = 5;
	nrt_kernel_fail_clear();
	CHECK(nk_index_run(&a) != 0, "out of range index fails");
	CHECK(strstr(nrt_kernel_fail_message(), "index 4 is out of bounds for dimension 0 with size 4") != NULL,
	      "message: %s", nrt_kernel_fail_message());
	CHECK(x[1] == 0, "nothing written before the failure");
	idx[1] = -1;
	nrt_kernel_fail_clear();
	CHECK(nk_index_ref(&a) != 0, "negative index without wrap fails (ref)");
	nrt_kernel_fail_clear();
}

/* ---- advanced-indexing offsets: x[i0, i1] on a [5, 7] tensor with strides (7, 1) ------------------ */
static void test_index_offsets(void)
{
	int64_t i0[3] = { 0, -1, 4 };   /* broadcast over the second dim of the index space [3, 2] */
	int32_t i1[2] = { 6, -7 };      /* broadcast over the first */
	int64_t out[6];
	nk_index_offsets_args_t a = { .n = 2, .ndim = 2, .shape = { 3, 2 }, .idx = { i0, i1 }, .idx_dtype = { NK_I64, NK_I32 },
				      .is = { { 1, 0 }, { 0, 1 } }, .size = { 5, 7 }, .stride = { 7, 1 }, .dim = { 0, 1 }, .out = out };
	CHECK(nk_index_offsets_run(&a) == 0, "offsets run");
	bool ok = true;
	for (int p = 0; p < 3; p++)
		for (int q = 0; q < 2; q++) {
			int64_t r = i0[p] < 0 ? i0[p] + 5 : i0[p], c = i1[q] < 0 ? i1[q] + 7 : i1[q];
			ok &= out[p * 2 + q] == r * 7 + c;
		}
	CHECK(ok, "offsets");
	i1[1] = 7;
	out[0] = -123;
	nrt_kernel_fail_clear();
	CHECK(nk_index_offsets_run(&a) != 0, "out of range fails");
	CHECK(strstr(nrt_kernel_fail_message(), "index 7 is out of bounds for dimension 1 with size 7") != NULL, "message: %s",
	      nrt_kernel_fail_message());
	CHECK(out[0] == -123, "nothing written");
	nrt_kernel_fail_clear();
}

/* ---- nonzero ----------------------------------------------------------------------------------- */
static void test_nonzero(void)
{
	float x[12] = { 0, 1, 0, NAN, 0, 0, -2, 0, 0, 0, 0, 3 };
	/* view x as [3, 4] transposed: shape [4, 3], strides [1, 4] */
	nk_nonzero_args_t a = { .dtype = NK_F32, .ndim = 2, .shape = { 4, 3 }, .strides = { 1, 4 }, .x = x };
	int64_t n = nk_nonzero_count(&a), out[10];
	CHECK(n == 4, "count %lld", (long long)n);
	nk_nonzero_write(&a, out, n);
	/* element (i, j) is x[i + 4j]: nonzero at (1,0) (3,0) (2,1) (3,2) */
	int64_t want[8] = { 1, 0, 2, 1, 3, 0, 3, 2 };
	CHECK(memcmp(out, want, sizeof want) == 0, "coordinates %lld,%lld %lld,%lld %lld,%lld %lld,%lld", (long long)out[0],
	      (long long)out[1], (long long)out[2], (long long)out[3], (long long)out[4], (long long)out[5],
	      (long long)out[6], (long long)out[7]);
	nk_nonzero_args_t z = { .dtype = NK_BOOL, .ndim = 0, .x = "\1" };
	CHECK(nk_nonzero_count(&z) == 1, "0-d nonzero");
}

static const int small_dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8 };

#define NSDT ((int)(sizeof small_dtypes / sizeof small_dtypes[0]))

static void *rand_small(int dt, int64_t n)
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

static void test_repeat_interleave(void)
{
	for (int w = 0; w < 2; w++) {
		int dt = w ? NK_I64 : NK_I32;
		for (int64_t n = 0; n < 20; n += 3) {
			int64_t rep[32], total = 0;
			int32_t rep32[32];
			for (int64_t i = 0; i < n; i++)
				rep[i] = nkt_randint(0, 5), rep32[i] = (int32_t)rep[i], total += rep[i];
			int64_t *o1 = calloc((size_t)total + 1, 8), *o2 = calloc((size_t)total + 1, 8);
			nk_repeat_interleave_args_t a = { .dtype = dt, .n = n, .total = total, .repeats = w ? (void *)rep : (void *)rep32, .out = o1 };
			CHECK(nk_repeat_interleave_run(&a) == 0, "repeat_interleave run");
			a.out = o2;
			CHECK(nk_repeat_interleave_ref(&a) == 0, "repeat_interleave ref");
			CHECK(memcmp(o1, o2, (size_t)total * nk_dtype_size(dt)) == 0, "repeat_interleave run != ref");
			int64_t j = 0;
			for (int64_t i = 0; i < n; i++)
				for (int64_t k = 0; k < rep[i]; k++, j++) {
					int64_t v = w ? o1[j] : ((int32_t *)o1)[j];
					CHECK(v == i, "repeat_interleave out[%lld] = %lld, want %lld", (long long)j, (long long)v, (long long)i);
				}
			free(o1), free(o2);
		}
	}
	/* a negative repeat and a wrong total fail the kernel without writing past out */
	nrt_kernel_fail_clear();
	int64_t rep[3] = { 1, -1, 2 }, out[4] = { 7, 7, 7, 7 };
	nk_repeat_interleave_args_t a = { .dtype = NK_I64, .n = 3, .total = 2, .repeats = rep, .out = out };
	CHECK(nk_repeat_interleave_run(&a) != 0 && nk_repeat_interleave_ref(&a) != 0, "negative repeat accepted");
	CHECK(strstr(nrt_kernel_fail_message(), "repeats can not be negative") != NULL, "message: %s", nrt_kernel_fail_message());
	rep[1] = 1;
	CHECK(nk_repeat_interleave_run(&a) != 0 && nk_repeat_interleave_ref(&a) != 0 && out[0] == 7, "bad total accepted");
	nrt_kernel_fail_clear();
}

static void test_nonzero_static(void)
{
	for (int di = 0; di < NSDT; di++) {
		int dt = small_dtypes[di];
		size_t es = nk_dtype_size(dt);
		int64_t R = 5, C = 7;
		char *x = rand_small(dt, R * C);
		int64_t cnt = 0;
		for (int64_t i = 0; i < R * C; i++)
			cnt += nk_is_float(dt) ? nk_load_f64(x + i * (int64_t)es, dt) != 0 : nk_load_i64(x + i * (int64_t)es, dt) != 0;
		for (int64_t size = 0; size < R * C + 4; size += 5) {
			int64_t *o = calloc((size_t)(2 * size + 1), 8);
			nk_nonzero_static_args_t a = { .nz = { .dtype = dt, .ndim = 2, .shape = { R, C }, .strides = { C, 1 }, .x = x },
						       .size = size, .fill = -3, .out = o };
			CHECK(nk_nonzero_static_run(&a) == 0, "nonzero_static");
			int64_t k = 0;
			for (int64_t i = 0; i < R * C && k < size; i++) {
				bool nz = nk_is_float(dt) ? nk_load_f64(x + i * (int64_t)es, dt) != 0 : nk_load_i64(x + i * (int64_t)es, dt) != 0;
				if (nz) {
					CHECK(o[2 * k] == i / C && o[2 * k + 1] == i % C, "nonzero_static row %lld", (long long)k);
					k++;
				}
			}
			CHECK(k == (cnt < size ? cnt : size), "nonzero_static count");
			for (; k < size; k++)
				CHECK(o[2 * k] == -3 && o[2 * k + 1] == -3, "nonzero_static fill row %lld", (long long)k);
			free(o);
		}
		free(x);
	}
}

int main(void)
{
	nkt_seed(7);
	RUN(test_gather_scatter);
	RUN(test_index_select_wrap);
	RUN(test_index_bad);
	RUN(test_index_offsets);
	RUN(test_nonzero);
	RUN(test_repeat_interleave);
	RUN(test_nonzero_static);
	return ctest_finish();
}
