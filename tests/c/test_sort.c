/* test_sort.c - the scan and sort kernels (scan.c, sort.c): each optimized entry point against its
 * reference and against naive loops written here, over dtypes, inner strides and edge cases (empty, NaN,
 * ties, in place). */
#include <stdio.h>
#include <string.h>

#include "ctest.h"
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

static bool same_elem(double a, double b)
{
	return a == b || (isnan(a) && isnan(b));
}

/* ---- scans --------------------------------------------------------------------------------------- */
static void check_scan(int dt, int op, int64_t O, int64_t R, int64_t I)
{
	int64_t n = O * R * I;
	size_t es = nk_dtype_size(dt);
	void *in = rand_elems(dt, n, -3, 4), *out = calloc((size_t)cnt(n), es), *out2 = calloc((size_t)cnt(n), es);
	int64_t *idx = calloc((size_t)cnt(n), 8), *idx2 = calloc((size_t)cnt(n), 8);
	if (nk_is_float(dt) && n > 3)
		nk_store_f64((char *)in + 2 * es, dt, NAN);
	nk_scan_args_t a = { .op = op, .dtype = dt, .O = O, .R = R, .I = I, .in = in, .out = out, .idx = idx };
	nk_scan_args_t b = a;
	b.out = out2, b.idx = idx2;
	CHECK(nk_scan_run(&a) == 0 && nk_scan_ref(&b) == 0, "scan run");
	bool ok = memcmp(out, out2, (size_t)n * es) == 0;
	if (op == NK_SCAN_MAX || op == NK_SCAN_MIN)
		ok &= memcmp(idx, idx2, (size_t)n * 8) == 0;
	for (int64_t o = 0; o < O && ok; o++)
		for (int64_t i = 0; i < I; i++) {
			double acc = op == NK_SCAN_PROD ? 1 : 0, best = 0;
			int64_t iacc = op == NK_SCAN_PROD ? 1 : 0;
			int64_t bi = 0;
			for (int64_t r = 0; r < R; r++) {
				int64_t k = (o * R + r) * I + i;
				double x = elem(in, dt, k), got = elem(out, dt, k), want;
				if ((op == NK_SCAN_SUM || op == NK_SCAN_PROD) && !nk_is_float(dt)) {
					int64_t v = nk_load_i64((char *)in + k * (int64_t)es, dt);
					iacc = op == NK_SCAN_SUM ? (int64_t)((uint64_t)iacc + (uint64_t)v) : (int64_t)((uint64_t)iacc * (uint64_t)v);
					char tmp[8] = { 0 };
					nk_store_i64(tmp, dt, iacc);
					want = elem(tmp, dt, 0);
				} else if (op == NK_SCAN_SUM || op == NK_SCAN_PROD) {
					acc = op == NK_SCAN_SUM ? acc + x : acc * x;
					if (dt == NK_BF16 || dt == NK_F16) /* aten's acc_type is float there */
						acc = (float)acc;
					if (dt == NK_BOOL)
						acc = acc != 0;
					char tmp[8];
					if (nk_is_float(dt))
						nk_store_f64(tmp, dt, acc);
					else
						nk_store_i64(tmp, dt, (int64_t)acc);
					want = elem(tmp, dt, 0);
				} else {
					bool take = r == 0 || isnan(x) || (!isnan(best) && (op == NK_SCAN_MAX ? x >= best : x <= best));
					if (take)
						best = x, bi = r;
					want = best;
					ok &= idx[k] == bi;
				}
				ok &= same_elem(got, want);
			}
		}
	CHECK(ok, "scan op %d %s [%lld, %lld, %lld]", op, dname(dt), (long long)O, (long long)R, (long long)I);
	free(in), free(out), free(out2), free(idx), free(idx2);
}

static void test_scans(void)
{
	static const int64_t shapes[][3] = { { 1, 1, 1 }, { 2, 7, 3 }, { 5, 40, 1 }, { 1, 0, 4 }, { 30, 33, 20 } };
	for (int s = 0; s < 5; s++)
		for (int d = 0; d < NDT; d++)
			for (int op = NK_SCAN_SUM; op <= NK_SCAN_MIN; op++)
				check_scan(all_dtypes[d], op, shapes[s][0], shapes[s][1], shapes[s][2]);
	/* logcumsumexp against the naive formula */
	double x[6] = { -INFINITY, 0.5, -2, 30, -INFINITY, 1 }, y[6], acc = -INFINITY;
	nk_scan_args_t a = { .op = NK_SCAN_LOGSUMEXP, .dtype = NK_F64, .O = 1, .R = 6, .I = 1, .in = x, .out = y };
	CHECK(nk_scan_run(&a) == 0, "logcumsumexp run");
	bool ok = true;
	for (int r = 0; r < 6; r++) {
		acc = acc == -INFINITY ? x[r] : x[r] == -INFINITY ? acc : log(exp(acc - 30) + exp(x[r] - 30)) + 30;
		ok &= fabs(y[r] - acc) <= 1e-12 * (1 + fabs(acc)) || (y[r] == acc);
	}
	CHECK(ok, "logcumsumexp");
}

/* ---- sort ------------------------------------------------------------------------------------------ */
static void check_sort(int dt, bool desc, int64_t O, int64_t R, int64_t I, bool in_place)
{
	int64_t n = O * R * I;
	size_t es = nk_dtype_size(dt);
	void *in = rand_elems(dt, n, -6, 7), *out = calloc((size_t)cnt(n), es), *out2 = calloc((size_t)cnt(n), es);
	void *in_copy = malloc((size_t)cnt(n) * es);
	int64_t *idx = calloc((size_t)cnt(n), 8), *idx2 = calloc((size_t)cnt(n), 8);
	if (nk_is_float(dt) && n > 5) {
		nk_store_f64((char *)in + 1 * es, dt, NAN);
		nk_store_f64((char *)in + 5 * es, dt, -INFINITY);
	}
	memcpy(in_copy, in, (size_t)n * es);
	size_t ws = nk_sort_workspace(R, O * I);
	void *work = ws ? malloc(ws) : NULL;
	nk_sort_args_t a = { .dtype = dt, .descending = desc, .O = O, .R = R, .I = I, .in = in,
			     .out = in_place ? in : out, .idx = idx, .work = work };
	nk_sort_args_t b = { .dtype = dt, .descending = desc, .O = O, .R = R, .I = I, .in = in_copy, .out = out2, .idx = idx2 };
	CHECK(nk_sort_run(&a) == 0 && nk_sort_ref(&b) == 0, "sort run");
	const void *res = in_place ? in : out;
	bool ok = memcmp(res, out2, (size_t)n * es) == 0 && memcmp(idx, idx2, (size_t)n * 8) == 0;
	/* sorted, stable, and a permutation through idx */
	for (int64_t o = 0; o < O && ok; o++)
		for (int64_t i = 0; i < I; i++)
			for (int64_t r = 0; r < R; r++) {
				int64_t k = (o * R + r) * I + i;
				ok &= same_elem(elem(res, dt, k), elem(in_copy, dt, (o * R + idx[k]) * I + i));
				if (r == 0)
					continue;
				double p = elem(res, dt, k - I), c = elem(res, dt, k);
				bool pn = isnan(p), cn = isnan(c);
				if (desc)
					ok &= pn || (!cn && p >= c);
				else
					ok &= cn || (!pn && p <= c);
				if (same_elem(p, c))
					ok &= idx[k - I] < idx[k];
			}
	CHECK(ok, "sort %s desc=%d [%lld, %lld, %lld] in_place=%d", dname(dt), desc, (long long)O, (long long)R,
	      (long long)I, in_place);
	free(in), free(out), free(out2), free(in_copy), free(idx), free(idx2), free(work);
}

static void test_sort(void)
{
	static const int64_t shapes[][3] = { { 1, 1, 1 }, { 3, 17, 2 }, { 2, 100, 1 }, { 1, 0, 3 }, { 2, 1500, 2 } };
	for (int s = 0; s < 5; s++)
		for (int d = 0; d < NDT; d++)
			for (int desc = 0; desc < 2; desc++)
				check_sort(all_dtypes[d], desc, shapes[s][0], shapes[s][1], shapes[s][2], s == 1);
}

int main(void)
{
	nkt_seed(7);
	RUN(test_scans);
	RUN(test_sort);
	return ctest_finish();
}
