/* test_select.c - the selection, unique, search and histogram kernels (select.c, unique.c, search.c,
 * histogram.c): each optimized entry point against its reference (and naive checks written here), over
 * every dtype, odd sizes, inner strides (I > 1), ties, NaN and zero-size. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctest.h"
#include "nk_test.h"
#include "nrt.h"
#include "nrt_impl.h"

static const int all_dtypes[] = { NK_F32, NK_F64, NK_BF16, NK_F16, NK_I64, NK_I32, NK_I16, NK_I8, NK_U8, NK_BOOL };

#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static int64_t cnt(int64_t n)
{
	return n > 0 ? n : 1;
}

/* n elements of dt, small integers (ties), floats halved, some NaN when nan_every > 0 */
static void *rand_elems(int dt, int64_t n, int lo, int hi, int nan_every)
{
	size_t es = nk_dtype_size(dt);
	char *p = calloc((size_t)cnt(n), es);
	for (int64_t i = 0; i < n; i++) {
		int64_t v = nkt_randint(lo, hi);
		if (dt == NK_BOOL)
			p[i] = (char)(v & 1);
		else if (nk_is_float(dt))
			nk_store_f64(p + i * (int64_t)es, dt, nan_every && nkt_randint(0, nan_every) == 0 ? NAN : (double)v * 0.5);
		else
			nk_store_i64(p + i * (int64_t)es, dt, dt == NK_U8 ? (v < 0 ? -v : v) : v);
	}
	return p;
}

static double elem(const void *p, int dt, int64_t i)
{
	const char *c = (const char *)p + i * (int64_t)nk_dtype_size(dt);
	return nk_is_float(dt) ? nk_load_f64(c, dt) : (double)nk_load_i64(c, dt);
}

static bool same(double a, double b)
{
	return a == b || (isnan(a) && isnan(b));
}

/* ---- select: run vs ref, and the values against a sorted copy ----------------------------------- */
static void check_select(int dt, int op, int64_t O, int64_t R, int64_t I, int64_t k, bool largest, int nan_every)
{
	size_t es = nk_dtype_size(dt);
	int64_t K = op == NK_SEL_TOPK ? k : 1;
	void *in = rand_elems(dt, O * R * I, -5, 6, nan_every);
	void *o1 = calloc((size_t)cnt(O * K * I), es), *o2 = calloc((size_t)cnt(O * K * I), es);
	int64_t *i1 = calloc((size_t)cnt(O * K * I), 8), *i2 = calloc((size_t)cnt(O * K * I), 8);
	size_t ws = nk_select_workspace(R, O * I);
	void *w1 = ws ? malloc(ws) : NULL, *w2 = malloc(ws > 0 ? ws : 1);
	nk_select_args_t a = { .op = op, .dtype = dt, .O = O, .R = R, .I = I, .k = k, .largest = largest, .in = in,
			       .out = o1, .idx = i1, .work = w1 };
	CHECK(nk_select_run(&a) == 0, "select run op %d", op);
	nk_select_args_t r = a;
	r.out = o2, r.idx = i2, r.work = w2;
	CHECK(nk_select_ref(&r) == 0, "select ref op %d", op);
	bool ok = true;
	/* mode's index among equal values is libstdc++'s sort order (the reference, counting, gives the
	 * largest index: the same for lines of <= 16, insertion-sorted); with NaN its answer is aten's
	 * undefined one */
	bool cmp_val = !(op == NK_SEL_MODE && nan_every), cmp_idx = cmp_val && !(op == NK_SEL_MODE && R > 16);
	for (int64_t e = 0; e < O * K * I; e++) {
		ok &= !cmp_idx || i1[e] == i2[e];
		ok &= !cmp_val || memcmp((char *)o1 + e * (int64_t)es, (char *)o2 + e * (int64_t)es, es) == 0;
		/* the value is the input's at the index */
		int64_t o = e / (K * I), i = e % I;
		ok &= i1[e] >= 0 && i1[e] < R && same(elem(o1, dt, e), elem(in, dt, (o * R + i1[e]) * I + i));
	}
	CHECK(ok, "select %s op %d O%lld R%lld I%lld k%lld largest %d", nk_dtype_name(dt), op, (long long)O, (long long)R,
	      (long long)I, (long long)k, largest);
	free(in), free(o1), free(o2), free(i1), free(i2), free(w1), free(w2);
}

static void test_select(void)
{
	static const int64_t shapes[][3] = { { 1, 1, 1 }, { 3, 7, 1 }, { 2, 10, 3 }, { 1, 33, 2 }, { 4, 600, 1 }, { 0, 5, 2 } };
	for (int d = 0; d < NDT; d++) {
		int dt = all_dtypes[d];
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			int64_t O = shapes[s][0], R = shapes[s][1], I = shapes[s][2];
			int nan_every = nk_is_float(dt) ? 5 : 0;
			for (int nn = 0; nn < 2; nn++) {
				int ne = nn ? nan_every : 0;
				check_select(dt, NK_SEL_TOPK, O, R, I, R < 3 ? R : 3, true, ne);
				check_select(dt, NK_SEL_TOPK, O, R, I, R, false, ne);
				check_select(dt, NK_SEL_TOPK, O, R, I, 0, true, ne);
				check_select(dt, NK_SEL_KTHVALUE, O, R, I, 1 + R / 2, false, ne);
				check_select(dt, NK_SEL_KTHVALUE, O, R, I, R, false, ne);
				check_select(dt, NK_SEL_MEDIAN, O, R, I, 1, false, ne);
				check_select(dt, NK_SEL_NANMEDIAN, O, R, I, 1, false, ne);
				check_select(dt, NK_SEL_MODE, O, R, I, 1, false, ne);
			}
		}
	}
	/* known answers: [3, 1, 2, 1, NaN] */
	float x[5] = { 3, 1, 2, 1, NAN }, v;
	int64_t idx;
	nk_select_args_t a = { .op = NK_SEL_MEDIAN, .dtype = NK_F32, .O = 1, .R = 5, .I = 1, .k = 1, .in = x, .out = &v, .idx = &idx };
	CHECK(nk_select_run(&a) == 0 && isnan(v) && idx == 4, "median with NaN: %g %lld", v, (long long)idx);
	a.op = NK_SEL_NANMEDIAN;
	CHECK(nk_select_run(&a) == 0 && v == 1 && idx == 3, "nanmedian: %g %lld", v, (long long)idx);
	a.op = NK_SEL_MODE, a.R = 4; /* (without the NaN) */
	CHECK(nk_select_run(&a) == 0 && v == 1 && idx == 3, "mode: %g %lld", v, (long long)idx);
	a.R = 5;
	a.op = NK_SEL_KTHVALUE, a.k = 5;
	CHECK(nk_select_run(&a) == 0 && isnan(v) && idx == 4, "kthvalue 5: %g %lld", v, (long long)idx);
	a.k = 6;
	nrt_kernel_fail_clear();
	CHECK(nk_select_run(&a) != 0 && strstr(nrt_kernel_fail_message(), "out of range"), "kthvalue k > R: %s",
	      nrt_kernel_fail_message());
	nrt_kernel_fail_clear();
}

/* ---- unique: run vs ref, groups checked naively --------------------------------------------------- */
static void check_unique(int dt, int64_t N, int64_t M, bool sort)
{
	void *x = rand_elems(dt, N * M, -2, 3, nk_is_float(dt) ? 7 : 0);
	int64_t *b1 = calloc((size_t)cnt(4 * N + 1), 8), *b2 = calloc((size_t)cnt(4 * N + 1), 8);
	void *w1 = malloc(nk_unique_workspace(N, M) + 8), *w2 = malloc(nk_unique_workspace(N, M) + 8);
	nk_unique_args_t a = { .dtype = dt, .N = N, .M = M, .sort = sort, .x = x, .perm = b1, .rep = b1 + N, .inverse = b1 + 2 * N,
			       .counts = b1 + 3 * N, .n_unique = b1 + 4 * N, .work = w1 };
	nk_unique_args_t r = { .dtype = dt, .N = N, .M = M, .sort = sort, .x = x, .perm = b2, .rep = b2 + N, .inverse = b2 + 2 * N,
			       .counts = b2 + 3 * N, .n_unique = b2 + 4 * N, .work = w2 };
	CHECK(nk_unique_run(&a) == 0 && nk_unique_ref(&r) == 0, "unique run/ref");
	int64_t n = b1[4 * N];
	bool ok = n == b2[4 * N] && memcmp(b1 + N, b2 + N, (size_t)n * 8) == 0 && memcmp(b1 + 2 * N, b2 + 2 * N, (size_t)N * 8) == 0 &&
		  memcmp(b1 + 3 * N, b2 + 3 * N, (size_t)n * 8) == 0;
	/* every row equals its group's representative (NaN rows are their own group), counts add to N */
	int64_t total = 0;
	for (int64_t g = 0; g < n; g++)
		total += b1[3 * N + g];
	ok &= total == N;
	for (int64_t i = 0; i < N; i++) {
		int64_t g = b1[2 * N + i], rep = b1[N + g];
		ok &= g >= 0 && g < n;
		for (int64_t m = 0; m < M; m++)
			ok &= same(elem(x, dt, i * M + m), elem(x, dt, rep * M + m));
	}
	if (sort) /* representatives strictly increasing in their first element (NaN last) */
		for (int64_t g = 1; g < n && M == 1; g++) {
			double p = elem(x, dt, b1[N + g - 1]), q = elem(x, dt, b1[N + g]);
			ok &= p < q || isnan(q);
		}
	CHECK(ok, "unique %s N%lld M%lld sort %d (n %lld vs %lld)", nk_dtype_name(dt), (long long)N, (long long)M, sort, (long long)n,
	      (long long)b2[4 * N]);
	free(x), free(b1), free(b2), free(w1), free(w2);
}

static void test_unique(void)
{
	for (int d = 0; d < NDT; d++)
		for (int s = 0; s < 2; s++) {
			check_unique(all_dtypes[d], 0, 1, s);
			check_unique(all_dtypes[d], 1, 1, s);
			check_unique(all_dtypes[d], 37, 1, s);
			check_unique(all_dtypes[d], 23, 2, s);
			check_unique(all_dtypes[d], 300, 1, s);
		}
}

/* ---- search: run vs ref (bounds, sorter, isin) ---------------------------------------------------- */
static void check_search(int dt, int op, int64_t O, int64_t n, int64_t nb, bool shared, bool use_sorter, int out_dt)
{
	size_t es = nk_dtype_size(dt);
	int64_t rows = shared ? 1 : O;
	char *bd = rand_elems(dt, rows * nb, -4, 5, op == NK_SEARCH_ISIN && nk_is_float(dt) ? 9 : 0);
	int64_t *sorter = NULL;
	if (use_sorter) { /* a sorter: argsort of each row (insertion sort, NaN last) */
		sorter = malloc((size_t)cnt(rows * nb) * 8);
		for (int64_t r = 0; r < rows; r++) {
			int64_t *s = sorter + r * nb;
			for (int64_t j = 0; j < nb; j++) {
				int64_t q = j;
				double v = elem(bd, dt, r * nb + j);
				while (q > 0) {
					double u = elem(bd, dt, r * nb + s[q - 1]);
					if (!(isnan(u) && !isnan(v)) && !(u > v))
						break;
					s[q] = s[q - 1];
					q--;
				}
				s[q] = j;
			}
		}
	} else { /* sort the rows in place */
		for (int64_t r = 0; r < rows; r++)
			for (int64_t j = 1; j < nb; j++)
				for (int64_t q = j; q > 0; q--) {
					double u = elem(bd, dt, r * nb + q - 1), v = elem(bd, dt, r * nb + q);
					if (!((isnan(u) && !isnan(v)) || u > v))
						break;
					char t[8];
					memcpy(t, bd + (r * nb + q) * (int64_t)es, es);
					memcpy(bd + (r * nb + q) * (int64_t)es, bd + (r * nb + q - 1) * (int64_t)es, es);
					memcpy(bd + (r * nb + q - 1) * (int64_t)es, t, es);
				}
	}
	void *x = rand_elems(dt, O * n, -5, 6, nk_is_float(dt) ? 9 : 0);
	size_t os = nk_dtype_size(out_dt);
	void *o1 = calloc((size_t)cnt(O * n), os), *o2 = calloc((size_t)cnt(O * n), os);
	nk_search_args_t a = { .op = op, .dtype = dt, .out_dtype = out_dt, .invert = false, .O = O, .n = n, .nb = nb,
			       .bso = shared ? 0 : nb, .x = x, .bd = bd, .sorter = sorter, .out = o1 };
	nk_search_args_t r = a;
	r.out = o2;
	CHECK(nk_search_run(&a) == 0 && nk_search_ref(&r) == 0, "search run/ref");
	CHECK(memcmp(o1, o2, (size_t)(O * n) * os) == 0, "search %s op %d O%lld n%lld nb%lld shared %d sorter %d", nk_dtype_name(dt), op,
	      (long long)O, (long long)n, (long long)nb, shared, use_sorter);
	free(bd), free(sorter), free(x), free(o1), free(o2);
}

static void test_search(void)
{
	for (int d = 0; d < NDT; d++) {
		int dt = all_dtypes[d];
		for (int op = NK_SEARCH_LEFT; op <= NK_SEARCH_RIGHT; op++) {
			check_search(dt, op, 3, 11, 7, false, false, NK_I64);
			check_search(dt, op, 3, 11, 7, true, false, NK_I32);
			check_search(dt, op, 2, 5, 9, false, true, NK_I64);
			check_search(dt, op, 1, 4, 0, true, false, NK_I64);
			check_search(dt, op, 0, 4, 3, true, false, NK_I64);
		}
		check_search(dt, NK_SEARCH_ISIN, 1, 40, 6, true, false, NK_BOOL);
		check_search(dt, NK_SEARCH_ISIN, 1, 9, 0, true, false, NK_BOOL);
	}
	/* a bad sorter fails */
	float bd[3] = { 1, 2, 3 }, x = 2;
	int64_t sorter[3] = { 0, 5, 1 }, out;
	nk_search_args_t a = { .op = NK_SEARCH_LEFT, .dtype = NK_F32, .out_dtype = NK_I64, .O = 1, .n = 1, .nb = 3, .x = &x, .bd = bd,
			       .sorter = sorter, .out = &out };
	nrt_kernel_fail_clear();
	CHECK(nk_search_run(&a) != 0 && strstr(nrt_kernel_fail_message(), "sorter"), "bad sorter: %s", nrt_kernel_fail_message());
	nrt_kernel_fail_clear();
}

/* ---- bincount / histc: against naive counts -------------------------------------------------------- */
static void test_bincount_histc(void)
{
	int64_t x[9] = { 0, 3, 3, 1, 7, 3, 0, 2, 7 }, out[9];
	double w[9] = { 1, .5, .25, 2, 4, 8, 16, 32, 64 }, wout[9];
	nk_bincount_args_t a = { .dtype = NK_I64, .out_dtype = NK_I64, .n = 9, .nbins = 9, .x = x, .out = out };
	CHECK(nk_bincount_run(&a) == 0 && out[0] == 2 && out[3] == 3 && out[7] == 2 && out[8] == 0, "bincount");
	a.w = w, a.w_dtype = NK_F64, a.out_dtype = NK_F64, a.out = wout;
	CHECK(nk_bincount_run(&a) == 0 && wout[0] == 17 && wout[3] == 8.75 && wout[7] == 68, "bincount weights");
	x[2] = 9;
	nrt_kernel_fail_clear();
	CHECK(nk_bincount_run(&a) != 0, "bincount out of range fails");
	nrt_kernel_fail_clear();

	for (int d = 0; d < 4; d++) {
		int dt = all_dtypes[d];
		int64_t n = 257, nb = 7;
		void *xs = rand_elems(dt, n, -6, 7, 11);
		/* edges of [-2.5, 2.5]: linspace */
		void *edges = nkt_alloc(dt, nb + 1), *h = nkt_alloc(dt, nb);
		for (int64_t j = 0; j <= nb; j++)
			nk_store_f64((char *)edges + j * (int64_t)nk_dtype_size(dt), dt, -2.5 + 5.0 * (double)j / (double)nb);
		nk_histc_args_t hc = { .dtype = dt, .n = n, .nbins = nb, .x = xs, .edges = edges, .out = h };
		CHECK(nk_histc_run(&hc) == 0, "histc");
		double total = 0, want = 0;
		for (int64_t j = 0; j < nb; j++)
			total += elem(h, dt, j);
		for (int64_t i = 0; i < n; i++) {
			double v = elem(xs, dt, i);
			want += v >= -2.5 && v <= 2.5;
		}
		CHECK(total == want, "histc %s total %g want %g", nk_dtype_name(dt), total, want);
		free(xs), free(edges), free(h);
	}
}

int main(void)
{
	nkt_seed(11);
	RUN(test_select);
	RUN(test_unique);
	RUN(test_search);
	RUN(test_bincount_histc);
	return ctest_finish();
}
