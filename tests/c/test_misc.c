/* test_misc.c - the selection, search, unique, histogram and random-distribution kernels (select.c,
 * random_dist.c): each optimized entry point against its reference (and naive checks written here),
 * over every dtype, odd sizes, inner strides (I > 1), ties, NaN and zero-size; randperm is a
 * permutation, the distributions have the expected moments and are reproducible. */
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

/* ---- distributions: run vs ref bit-identical, moments, reproducible ------------------------------ */
static void test_dist(void)
{
	const int64_t n = NK_TEST_SMALL ? 20000 : 200000;
	static const struct { int kind; double a, b, mean, var; } cases[] = {
		{ NK_DIST_EXPONENTIAL, 2.0, 0, 0.5, 0.25 },
		{ NK_DIST_GEOMETRIC, 0.25, 0, 4.0, 12.0 },
		{ NK_DIST_LOG_NORMAL, 0.0, 0.5, 1.1331484530668263, 0.3646958540698618 },
		{ NK_DIST_CAUCHY, 1.0, 2.0, NAN, NAN }, /* median 1, quartiles 1 -+ 2 */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		for (int dti = 0; dti < 2; dti++) {
			int dt = dti ? NK_F32 : NK_F64;
			size_t es = nk_dtype_size(dt);
			char *o1 = malloc((size_t)n * es), *o2 = malloc((size_t)n * es);
			nk_dist_args_t a = { .kind = cases[c].kind, .a = cases[c].a, .b = cases[c].b, .seed = 1234, .offset = 8 };
			a.it.ndim = 1, a.it.nops = 1, a.it.shape[0] = n, a.it.strides[0][0] = (int64_t)es, a.it.dtype[0] = (int8_t)dt;
			a.it.data[0] = o1;
			CHECK(nk_dist_run(&a) == 0, "dist run");
			a.it.data[0] = o2;
			CHECK(nk_dist_ref(&a) == 0, "dist ref");
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "dist kind %d %s: run == ref", cases[c].kind, nk_dtype_name(dt));
			if (!isnan(cases[c].mean)) {
				double s = 0, s2 = 0;
				for (int64_t i = 0; i < n; i++) {
					double v = elem(o1, dt, i);
					s += v, s2 += v * v;
				}
				double m = s / (double)n, var = s2 / (double)n - m * m, se = sqrt(cases[c].var / (double)n);
				CHECK(fabs(m - cases[c].mean) < 6 * se, "dist kind %d mean %g want %g", cases[c].kind, m, cases[c].mean);
				CHECK(fabs(var - cases[c].var) < 0.05 * cases[c].var, "dist kind %d var %g want %g", cases[c].kind, var,
				      cases[c].var);
			} else {
				int64_t below = 0, inq = 0;
				for (int64_t i = 0; i < n; i++) {
					double v = elem(o1, dt, i);
					below += v < 1.0;
					inq += v > -1.0 && v < 3.0;
				}
				CHECK(fabs((double)below / (double)n - 0.5) < 0.01 && fabs((double)inq / (double)n - 0.5) < 0.01,
				      "cauchy median/quartiles: %g %g", (double)below / (double)n, (double)inq / (double)n);
			}
			free(o1), free(o2);
		}
	}
	/* geometric on an integer dtype: >= 1 */
	int32_t g[1000];
	nk_dist_args_t a = { .kind = NK_DIST_GEOMETRIC, .a = 0.5, .seed = 9 };
	a.it.ndim = 1, a.it.nops = 1, a.it.shape[0] = 1000, a.it.strides[0][0] = 4, a.it.dtype[0] = NK_I32, a.it.data[0] = (char *)g;
	CHECK(nk_dist_run(&a) == 0, "geometric i32");
	bool ok = true;
	for (int i = 0; i < 1000; i++)
		ok &= g[i] >= 1;
	CHECK(ok, "geometric >= 1");
	a.a = 1.5;
	nrt_kernel_fail_clear();
	CHECK(nk_dist_run(&a) != 0, "geometric p = 1.5 fails");
	nrt_kernel_fail_clear();
}

static void test_randperm_multinomial(void)
{
	static const int64_t ns[] = { 0, 1, 2, 17, 1000 };
	for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
		int64_t n = ns[t];
		int64_t *o = malloc((size_t)cnt(n) * 8), *w = malloc((size_t)cnt(n) * 8), *o2 = malloc((size_t)cnt(n) * 8);
		char *seen = calloc((size_t)cnt(n), 1);
		nk_randperm_args_t a = { .dtype = NK_I64, .n = n, .out = o, .work = w, .seed = 5, .offset = 0 };
		CHECK(nk_randperm_run(&a) == 0, "randperm");
		bool ok = true;
		for (int64_t i = 0; i < n; i++) {
			ok &= o[i] >= 0 && o[i] < n && !seen[o[i]];
			if (o[i] >= 0 && o[i] < n)
				seen[o[i]] = 1;
		}
		a.out = o2;
		CHECK(nk_randperm_run(&a) == 0 && (n == 0 || memcmp(o, o2, (size_t)n * 8) == 0), "randperm reproducible");
		CHECK(ok, "randperm(%lld) is a permutation", (long long)n);
		free(o), free(w), free(o2), free(seen);
	}
	/* multinomial: frequencies follow the weights; without replacement: distinct, never zero weight */
	enum { D = 3, C = 5, S = 20000 };
	float p[D * C] = { 1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 5, 5, 0, 0, 10 };
	int64_t *out = malloc(sizeof(int64_t) * D * S);
	double *work = malloc(sizeof(double) * 2 * D * C);
	nk_multinomial_args_t m = { .dtype = NK_F32, .D = D, .C = C, .S = S, .replacement = true, .p = p, .out = out, .work = work,
				    .seed = 3 };
	CHECK(nk_multinomial_run(&m) == 0, "multinomial");
	for (int d = 0; d < D; d++) {
		double tot = 0, f[C] = { 0 };
		for (int c = 0; c < C; c++)
			tot += p[d * C + c];
		for (int s = 0; s < S; s++)
			f[out[d * S + s]] += 1.0 / S;
		for (int c = 0; c < C; c++)
			CHECK(fabs(f[c] - p[d * C + c] / tot) < 0.02, "multinomial row %d cat %d: %g vs %g", d, c, f[c], p[d * C + c] / tot);
	}
	m.replacement = false, m.S = 2, m.D = 1;
	for (int rep = 0; rep < 50; rep++) {
		m.seed = (uint64_t)rep;
		CHECK(nk_multinomial_run(&m) == 0 && out[0] != out[1] && p[out[0]] > 0 && p[out[1]] > 0, "multinomial w/o replacement");
	}
	m.S = 5; /* only 4 nonzero categories */
	nrt_kernel_fail_clear();
	CHECK(nk_multinomial_run(&m) != 0 && strstr(nrt_kernel_fail_message(), "multinomial"), "too few categories: %s",
	      nrt_kernel_fail_message());
	p[2] = NAN, m.S = 1;
	nrt_kernel_fail_clear();
	CHECK(nk_multinomial_run(&m) != 0 && strstr(nrt_kernel_fail_message(), "nan"), "NaN weight: %s", nrt_kernel_fail_message());
	nrt_kernel_fail_clear();
	free(out), free(work);
}

/* ---- special functions: run vs ref over dtypes and strides, known values --------------------------- */
static double sp_one(int op, double x, double y, int64_t ia)
{
	double out;
	nk_special_args_t a = { .op = op, .ia = ia };
	a.it.ndim = 1, a.it.nops = op >= NK_SP_XLOG1PY ? 3 : 2, a.it.shape[0] = 1;
	a.it.data[0] = (char *)&out, a.it.data[1] = (char *)&x, a.it.data[2] = (char *)&y;
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_F64, a.it.strides[k][0] = 8;
	CHECK(nk_special_run(&a) == 0, "special op %d", op);
	return out;
}

static void test_special(void)
{
	const int64_t n = 301;
	static const int fdt[] = { NK_F32, NK_F64, NK_BF16, NK_F16 };
	for (int op = 0; op < NK_SP_COUNT; op++) {
		bool bin = op >= NK_SP_XLOG1PY, ints = op == NK_SP_GCD || op == NK_SP_LCM;
		for (int d = 0; d < (ints ? 5 : 4); d++) {
			int dt = ints ? all_dtypes[4 + d] : fdt[d];
			if (op == NK_SP_NEXTAFTER && !nk_is_float(dt))
				continue;
			size_t es = nk_dtype_size(dt);
			void *x = rand_elems(dt, 2 * n, -9, 10, 0), *y = rand_elems(dt, n, ints ? -9 : 0, 10, 0);
			char *o1 = calloc((size_t)n, es), *o2 = calloc((size_t)n, es);
			nk_special_args_t a = { .op = op, .ia = op == NK_SP_POLYGAMMA ? 3 : 0 };
			a.it.ndim = 1, a.it.nops = bin ? 3 : 2, a.it.shape[0] = n;
			a.it.data[0] = o1, a.it.data[1] = x, a.it.data[2] = y; /* x read with stride 2 */
			a.it.strides[0][0] = (int64_t)es, a.it.strides[1][0] = 2 * (int64_t)es, a.it.strides[2][0] = (int64_t)es;
			for (int k = 0; k < 3; k++)
				a.it.dtype[k] = (int8_t)dt;
			CHECK(nk_special_run(&a) == 0, "special run op %d", op);
			a.it.data[0] = o2;
			CHECK(nk_special_ref(&a) == 0, "special ref op %d", op);
			CHECK(memcmp(o1, o2, (size_t)n * es) == 0, "special op %d %s: run == ref", op, nk_dtype_name(dt));
			free(x), free(y), free(o1), free(o2);
		}
	}
	/* known values (double) */
	static const struct { int op; double x, y; int64_t ia; double want; } kv[] = {
		{ NK_SP_DIGAMMA, 1.0, 0, 0, -0.5772156649015329 },
		{ NK_SP_DIGAMMA, 0.5, 0, 0, -1.9635100260214235 },
		{ NK_SP_DIGAMMA, -0.5, 0, 0, 0.03648997397857652 },
		{ NK_SP_LGAMMA, 0.5, 0, 0, 0.5723649429247001 },
		{ NK_SP_POLYGAMMA, 1.0, 0, 1, 1.6449340676383375 }, /* PyTorch's trigamma series (5e-10 off pi^2/6) */
		{ NK_SP_POLYGAMMA, 2.0, 0, 2, -0.4041138063191886 },
		{ NK_SP_POLYGAMMA, 0.5, 0, 3, 97.40909103400242 },
		{ NK_SP_ZETA, 2.0, 1.0, 0, 1.6449340668482264 },
		{ NK_SP_ZETA, 3.0, 2.5, 0, 0.11810202582086368 },
		{ NK_SP_SINC, 0.5, 0, 0, 0.6366197723675814 },
		{ NK_SP_ENTR, 0.5, 0, 0, 0.34657359027997264 },
		{ NK_SP_XLOG1PY, 2.0, 1.0, 0, 1.3862943611198906 },
		{ NK_SP_CHEBYSHEV_T, 0.3, 3, 0, -0.792 },
		{ NK_SP_CHEBYSHEV_U, 0.3, 2, 0, -0.64 },
		{ NK_SP_HERMITE_H, 0.5, 3, 0, -5.0 },
		{ NK_SP_HERMITE_HE, 0.5, 3, 0, -1.375 },
		{ NK_SP_LAGUERRE_L, 0.5, 2, 0, 0.125 },
		{ NK_SP_LEGENDRE_P, 0.5, 2, 0, -0.125 },
		{ NK_SP_SHIFTED_CHEBYSHEV_T, 0.75, 2, 0, -0.5 },
		{ NK_SP_CHEBYSHEV_T, 0.3, 9, 0, 0.3888276480000005 }, /* trig branch (n > 6) */
	};
	for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
		double got = sp_one(kv[i].op, kv[i].x, kv[i].y, kv[i].ia);
		CHECK(fabs(got - kv[i].want) <= 1e-12 * (1 + fabs(kv[i].want)), "special op %d (%g, %g): %.17g want %.17g", kv[i].op,
		      kv[i].x, kv[i].y, got, kv[i].want);
	}
	/* I0, I1 and the scaled forms against aten's (Cephes) values, both sides of the series/asymptotic
	 * switch at 30 and into overflow */
	static const double bx[7] = { 1.0, -2.5, 29.9, 30.1, 50.0, 400.0, 720.0 };
	static const double bw[4][7] = {
		{ 1.2660658777520082, 3.289839144050123, 708478330489.0146, 862432920031.7792, 2.9325537838493355e+20,
		  1.0418584503521463e+172, INFINITY },
		{ 0.46575960759364043, 0.27004644161220276, 0.07326921904600191, 0.07302329413106094, 0.056561626647454184,
		  0.019953356281939987, 0.014870284185509173 },
		{ 0.5651591039924851, -2.5167162452886984, 696528308361.0928, 847983630191.5414, 2.9030785901035566e+20,
		  1.0405553112944217e+172, INFINITY },
		{ 0.2079104153497085, -0.20658464953126654, 0.0720333749118688, 0.07179985435101434, 0.055993123892895395,
		  0.01992839895890354, 0.014859954008658149 },
	};
	for (int f = 0; f < 4; f++)
		for (int i = 0; i < 7; i++) {
			double got = sp_one(NK_SP_I0 + f, bx[i], 0, 0), want = bw[f][i];
			CHECK(isinf(want) ? isinf(got) : fabs(got - want) <= 1e-13 * fabs(want), "bessel %d (%g): %.17g want %.17g", f,
			      bx[i], got, want);
		}
	CHECK(isinf(sp_one(NK_SP_DIGAMMA, 0.0, 0, 0)) && isnan(sp_one(NK_SP_DIGAMMA, -2.0, 0, 0)), "digamma poles");
	CHECK(sp_one(NK_SP_HEAVISIDE, 0.0, 0.25, 0) == 0.25 && sp_one(NK_SP_HEAVISIDE, -3.0, 0.25, 0) == 0, "heaviside");
	CHECK(sp_one(NK_SP_NEXTAFTER, 1.0, 2.0, 0) == nextafter(1.0, 2.0), "nextafter");
	int64_t g[3] = { 0, -12, 18 };
	nk_special_args_t a = { .op = NK_SP_GCD };
	a.it.ndim = 1, a.it.nops = 3, a.it.shape[0] = 1, a.it.data[0] = (char *)&g[0], a.it.data[1] = (char *)&g[1],
	a.it.data[2] = (char *)&g[2];
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_I64, a.it.strides[k][0] = 8;
	CHECK(nk_special_run(&a) == 0 && g[0] == 6, "gcd(-12, 18) = %lld", (long long)g[0]);
	a.op = NK_SP_LCM;
	CHECK(nk_special_run(&a) == 0 && g[0] == 36, "lcm(-12, 18) = %lld", (long long)g[0]);
	/* bf16 nextafter steps one bf16 ulp */
	uint16_t h[3] = { 0, 0x3f80, 0x4000 }; /* 1.0 -> 2.0 */
	a.op = NK_SP_NEXTAFTER;
	a.it.data[0] = (char *)&h[0], a.it.data[1] = (char *)&h[1], a.it.data[2] = (char *)&h[2];
	for (int k = 0; k < 3; k++)
		a.it.dtype[k] = NK_BF16, a.it.strides[k][0] = 2;
	CHECK(nk_special_run(&a) == 0 && h[0] == 0x3f81, "nextafter bf16: %#x", h[0]);
}

int main(void)
{
	nkt_seed(11);
	RUN(test_select);
	RUN(test_unique);
	RUN(test_search);
	RUN(test_bincount_histc);
	RUN(test_dist);
	RUN(test_randperm_multinomial);
	RUN(test_special);
	return ctest_finish();
}
