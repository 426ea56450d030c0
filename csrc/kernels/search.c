/* search.c - sorted search: searchsorted and bucketize (lower/upper bound, optional sorter) and isin
 * (membership in a sorted boundary row).  Threading: elements over the pool.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

/* ---- sorted search ----------------------------------------------------------------------------- */
static int search_check(const nk_search_args_t *a)
{
	bool ok = nk_dtype_valid(a->dtype) && a->O >= 0 && a->n >= 0 && a->nb >= 0 && a->op >= 0 &&
		  a->op <= NK_SEARCH_ISIN;
	ok = ok && (a->op == NK_SEARCH_ISIN ? a->out_dtype == NK_BOOL : (a->out_dtype == NK_I64 || a->out_dtype == NK_I32));
	if (!ok) {
		nrt_kernel_fail("nk_search: bad arguments (op %d, dtype %d, out dtype %d)", a->op, a->dtype, a->out_dtype);
		return -1;
	}
	return 0;
}

/* aten's cus_lower_bound / cus_upper_bound (Bucketization.cpp), in the input's order */
static int64_t search_one(const nk_search_args_t *a, const char *bd, const int64_t *sorter, double v, int64_t iv,
			  bool is_int, bool right, int64_t nb)
{
	size_t es = nk_dtype_size(a->dtype);
	int64_t lo = 0, hi = nb;
	while (lo < hi) {
		int64_t mid = lo + ((hi - lo) >> 1), at = sorter ? sorter[mid] : mid;
		const char *p = bd + at * (int64_t)es;
		bool go_right;
		if (is_int) {
			int64_t m = nk_load_i64(p, a->dtype);
			go_right = right ? !(m > iv) : !(m >= iv);
		} else {
			double m = nk_load_f64(p, a->dtype);
			go_right = right ? !(m > v) : !(m >= v);
		}
		if (go_right)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Typed fast paths of search_one (no sorter): the same comparisons without a load per probe. */
#define SEARCH_TYPED(name, T)                                                                \
	static int64_t name(const T *bd, int64_t nb, T v, bool right)                         \
	{                                                                                     \
		int64_t lo = 0, hi = nb;                                                      \
		while (lo < hi) {                                                             \
			int64_t mid = lo + ((hi - lo) >> 1);                                  \
			if (right ? !(bd[mid] > v) : !(bd[mid] >= v))                         \
				lo = mid + 1;                                                 \
			else                                                                  \
				hi = mid;                                                     \
		}                                                                             \
		return lo;                                                                    \
	}
SEARCH_TYPED(search_f32, float)
SEARCH_TYPED(search_f64, double)
SEARCH_TYPED(search_i64, int64_t)
SEARCH_TYPED(search_i32, int32_t)
#undef SEARCH_TYPED

/* out[e] for a bounds search of x[e] with no sorter, when the dtype has a typed path */
static bool search_fast(const nk_search_args_t *a, const char *bd, const char *x, char *out)
{
	bool right = a->op == NK_SEARCH_RIGHT;
	int64_t p;
	switch (a->dtype) {
	case NK_F32: p = search_f32((const float *)bd, a->nb, *(const float *)x, right); break;
	case NK_F64: p = search_f64((const double *)bd, a->nb, *(const double *)x, right); break;
	case NK_I64: p = search_i64((const int64_t *)bd, a->nb, *(const int64_t *)x, right); break;
	case NK_I32: p = search_i32((const int32_t *)bd, a->nb, *(const int32_t *)x, right); break;
	default: return false;
	}
	if (a->out_dtype == NK_I64)
		*(int64_t *)out = p;
	else
		*(int32_t *)out = (int32_t)p;
	return true;
}

static void search_rows(void *ctx, int64_t e0, int64_t e1)
{
	const nk_search_args_t *a = ctx;
	size_t es = nk_dtype_size(a->dtype), os = nk_dtype_size(a->out_dtype);
	bool is_int = !nk_is_float(a->dtype);
	for (int64_t e = e0; e < e1; e++) {
		int64_t o = a->n ? e / a->n : 0;
		const char *bd = (const char *)a->bd + o * a->bso * (int64_t)es;
		const int64_t *sorter = a->sorter ? a->sorter + o * a->bso : NULL;
		const char *x = (const char *)a->x + e * (int64_t)es;
		char *op = (char *)a->out + e * (int64_t)os;
		if (a->op != NK_SEARCH_ISIN && !sorter && search_fast(a, bd, x, op))
			continue;
		double v = is_int ? 0 : nk_load_f64(x, a->dtype);
		int64_t iv = is_int ? nk_load_i64(x, a->dtype) : 0;
		char *out = (char *)a->out + e * (int64_t)os;
		if (a->op == NK_SEARCH_ISIN) { /* (within the NaN-free prefix: NaN sorts last) */
			int64_t nb = a->nb;
			if (!is_int) {
				int64_t lo = 0, hi = a->nb;
				while (lo < hi) {
					int64_t mid = lo + ((hi - lo) >> 1);
					if (isnan(nk_load_f64(bd + mid * (int64_t)es, a->dtype)))
						hi = mid;
					else
						lo = mid + 1;
				}
				nb = lo;
			}
			int64_t p = search_one(a, bd, NULL, v, iv, is_int, false, nb);
			bool found = false;
			if (p < nb) {
				const char *q = bd + p * (int64_t)es;
				found = is_int ? nk_load_i64(q, a->dtype) == iv : nk_load_f64(q, a->dtype) == v;
			}
			*(bool *)out = found != a->invert;
			continue;
		}
		int64_t p = search_one(a, bd, sorter, v, iv, is_int, a->op == NK_SEARCH_RIGHT, a->nb);
		nk_store_i64(out, a->out_dtype, p);
	}
}

static int search_sorter_ok(const nk_search_args_t *a)
{
	if (!a->sorter)
		return 0;
	int64_t rows = a->bso ? a->O : 1;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t j = 0; j < a->nb; j++) {
			int64_t s = a->sorter[r * a->bso + j];
			if (s < 0 || s >= a->nb) {
				nrt_kernel_fail("searchsorted: sorter index %lld is out of range for a boundary of size %lld",
						(long long)s, (long long)a->nb);
				return -1;
			}
		}
	return 0;
}

int nk_search_run(void *args)
{
	const nk_search_args_t *a = args;
	if (search_check(a) || search_sorter_ok(a))
		return -1;
	int64_t n = a->O * a->n;
	if (n)
		nrt_parallel_for(n, 4096, search_rows, (void *)a);
	return 0;
}

/* reference: linear scans (count of boundaries before the value); equal to the binary search for
 * boundaries without NaN (aten's binary search on NaN boundaries depends on its probe order) */
int nk_search_ref(void *args)
{
	const nk_search_args_t *a = args;
	if (search_check(a) || search_sorter_ok(a))
		return -1;
	size_t es = nk_dtype_size(a->dtype), os = nk_dtype_size(a->out_dtype);
	for (int64_t e = 0; e < a->O * a->n; e++) {
		int64_t o = e / a->n;
		const char *bd = (const char *)a->bd + o * a->bso * (int64_t)es;
		const int64_t *sorter = a->sorter ? a->sorter + o * a->bso : NULL;
		double v = nk_load_f64((const char *)a->x + e * (int64_t)es, a->dtype);
		int64_t iv = nk_load_i64((const char *)a->x + e * (int64_t)es, a->dtype);
		bool is_int = !nk_is_float(a->dtype), found = false;
		int64_t cnt = 0;
		for (int64_t j = 0; j < a->nb; j++) {
			const char *p = bd + (sorter && a->op != NK_SEARCH_ISIN ? sorter[j] : j) * (int64_t)es;
			bool before;
			if (is_int) {
				int64_t m = nk_load_i64(p, a->dtype);
				before = a->op == NK_SEARCH_RIGHT ? m <= iv : m < iv;
				found |= m == iv;
			} else {
				double m = nk_load_f64(p, a->dtype);
				before = a->op == NK_SEARCH_RIGHT ? !(m > v) : !(m >= v);
				found |= m == v;
			}
			cnt += before;
		}
		char *out = (char *)a->out + e * (int64_t)os;
		if (a->op == NK_SEARCH_ISIN)
			*(bool *)out = found != a->invert;
		else
			nk_store_i64(out, a->out_dtype, cnt);
	}
	return 0;
}
