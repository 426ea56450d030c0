/* select.c - selection kernels: topk / kthvalue / median / nanmedian / mode along R of a contiguous
 * [O, R, I] tensor.
 * Keys: each element is loaded exactly (float dtypes as double, integer dtypes as int64) into a
 * (key, index) pair; order is ascending with NaN last (descending: NaN first), equal keys (and NaNs)
 * by index: a total order, so ties resolve to the lowest index.  topk selects its k pairs in that order
 * with a quickselect (O(R)) and merge-sorts only those; median/nanmedian quickselect their position.
 * Where aten's CPU kernel has another deterministic rule, it is followed:
 *   kthvalue    aten's quick_select_template (median of three, Hoare partition), ported as is, so the
 *               index among equal values is the one aten returns;
 *   median      the first NaN if there is one, else position (R-1)/2 in the stable order (aten's
 *               nth_element compares (value, index) pairs, i.e. the same order);
 *   nanmedian   position (R - #NaN - 1)/2 in the stable order;
 *   mode        aten's algorithm: libstdc++'s std::sort of the (value, index) pairs by value (ported
 *               below: its order among equal values decides the index), then the last element of
 *               the first longest run; with NaN the result is whatever that order gives, as in aten.
 * Values are copied from the input bytes at the chosen index (NaN payloads and -0.0 preserved).
 * Threading: selection lines over the pool.
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define SEL_GRAIN 16384
#define SEL_STACK 512 /* pairs per line in stack memory; longer lines use the workspace */

typedef struct {
	double f;
	int64_t i; /* integer key */
	int64_t idx;
} sel_pair_t;

static inline bool sel_isnan(const sel_pair_t *a, bool is_int)
{
	return !is_int && isnan(a->f);
}

/* a strictly before b: ascending NaN last, or descending NaN first */
static inline bool sel_before(const sel_pair_t *a, const sel_pair_t *b, bool is_int, bool desc)
{
	if (is_int)
		return desc ? a->i > b->i : a->i < b->i;
	bool an = isnan(a->f), bn = isnan(b->f);
	if (desc)
		return (an && !bn) || a->f > b->f;
	return (!an && bn) || a->f < b->f;
}

static inline bool sel_equal(const sel_pair_t *a, const sel_pair_t *b, bool is_int)
{
	return is_int ? a->i == b->i : a->f == b->f; /* NaN is equal to nothing */
}

/* the total order: sel_before, equal keys (or two NaN) by index.  Sorting by it is the stable sort of
 * the input order, whatever order the pairs are in. */
static inline bool sel_total_before(const sel_pair_t *a, const sel_pair_t *b, bool is_int, bool desc)
{
	if (sel_before(a, b, is_int, desc))
		return true;
	return !sel_before(b, a, is_int, desc) && a->idx < b->idx;
}

/* Quickselect in the total order (aten's median-of-three / Hoare scheme): afterwards v[k] is the
 * k-th pair of the order, v[0, k) the ones before it.  O(n) expected. */
static void sel_select_total(sel_pair_t *v, int64_t n, int64_t k, bool is_int, bool desc)
{
	int64_t L = 0, R = n - 1;
#define GT(x, y) sel_total_before((y), (x), is_int, desc)
	while (R > L) {
		if (R == L + 1) {
			if (GT(&v[L], &v[R])) {
				sel_pair_t t = v[L];
				v[L] = v[R], v[R] = t;
			}
			return;
		}
		int64_t P = L + (R - L) / 2;
		sel_pair_t t = v[P];
		v[P] = v[L + 1], v[L + 1] = t;
		if (GT(&v[L + 1], &v[R]))
			t = v[L + 1], v[L + 1] = v[R], v[R] = t;
		if (GT(&v[L], &v[R]))
			t = v[L], v[L] = v[R], v[R] = t;
		if (GT(&v[L + 1], &v[L]))
			t = v[L + 1], v[L + 1] = v[L], v[L] = t;
		int64_t i = L + 1, j = R;
		sel_pair_t piv = v[L];
		for (;;) {
			do
				i++;
			while (GT(&piv, &v[i]));
			do
				j--;
			while (GT(&v[j], &piv));
			if (j < i)
				break;
			t = v[i], v[i] = v[j], v[j] = t;
		}
		v[L] = v[j], v[j] = piv;
		if (j <= k)
			L = i;
		if (j >= k)
			R = j - 1;
	}
#undef GT
}

/* bottom-up merge sort of v[0, n) in the total order, with n pairs of scratch */
static void sel_msort(sel_pair_t *v, sel_pair_t *tmp, int64_t n, bool is_int, bool desc)
{
	for (int64_t w = 1; w < n; w *= 2) {
		for (int64_t lo = 0; lo < n; lo += 2 * w) {
			int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int64_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = sel_total_before(&v[j], &v[i], is_int, desc) ? v[j++] : v[i++];
			while (i < mid)
				tmp[k++] = v[i++];
			while (j < hi)
				tmp[k++] = v[j++];
		}
		memcpy(v, tmp, (size_t)n * sizeof *v);
	}
}

static inline void sel_key(sel_pair_t *p, const char *src, int dt, bool is_int, int64_t idx)
{
	p->idx = idx;
	if (is_int)
		p->i = nk_load_i64(src, dt), p->f = 0;
	else
		p->f = nk_load_f64(src, dt), p->i = 0;
}

/* aten's gt_or_nan for kthvalue: NaN is the largest */
static inline bool sel_gt_or_nan(const sel_pair_t *x, const sel_pair_t *y, bool is_int)
{
	if (is_int)
		return x->i > y->i;
	return (isnan(x->f) && !isnan(y->f)) || x->f > y->f;
}

static inline void sel_swap(sel_pair_t *v, int64_t a, int64_t b)
{
	sel_pair_t t = v[a];
	v[a] = v[b];
	v[b] = t;
}

/* aten/src/ATen/native/SortingUtils.h quick_select_template: puts the k-th smallest at v[k]. */
static void sel_quick_select(sel_pair_t *v, int64_t n, int64_t k, bool is_int)
{
	int64_t L = 0, R = n - 1;
	do {
		if (R <= L)
			return;
		if (R == L + 1) {
			if (sel_gt_or_nan(&v[L], &v[R], is_int))
				sel_swap(v, L, R);
			return;
		}
		int64_t P = L + (R - L) / 2;
		sel_swap(v, P, L + 1);
		if (sel_gt_or_nan(&v[L + 1], &v[R], is_int))
			sel_swap(v, L + 1, R);
		if (sel_gt_or_nan(&v[L], &v[R], is_int))
			sel_swap(v, L, R);
		if (sel_gt_or_nan(&v[L + 1], &v[L], is_int))
			sel_swap(v, L + 1, L);
		int64_t i = L + 1, j = R;
		sel_pair_t piv = v[L];
		for (;;) {
			do
				i++;
			while (sel_gt_or_nan(&piv, &v[i], is_int));
			do
				j--;
			while (sel_gt_or_nan(&v[j], &piv, is_int));
			if (j < i)
				break;
			sel_swap(v, i, j);
		}
		sel_swap(v, L, j);
		if (j <= k)
			L = i;
		if (j >= k)
			R = j - 1;
	} while (R > L);
}

/* ---- libstdc++'s std::sort (introsort), for mode -------------------------------------------------- */
/* aten's CPU mode std::sorts (value, index) pairs comparing values with < and reports the last element
 * of the longest run; which index that is among equal values depends on the exact algorithm, so it is
 * reproduced here (GCC's bits/stl_algo.h / stl_heap.h: introsort to runs of 16, median of three,
 * unguarded partition, heapsort past 2*floor(log2 n) levels, final insertion sort).  NaN compares as
 * aten's comparator sees it (never less). */
static inline bool gs_less(const sel_pair_t *a, const sel_pair_t *b, bool is_int)
{
	return is_int ? a->i < b->i : a->f < b->f;
}

static void gs_push_heap(sel_pair_t *v, int64_t hole, int64_t top, sel_pair_t val, bool is_int)
{
	int64_t parent = (hole - 1) / 2;
	while (hole > top && gs_less(&v[parent], &val, is_int)) {
		v[hole] = v[parent];
		hole = parent;
		parent = (hole - 1) / 2;
	}
	v[hole] = val;
}

static void gs_adjust_heap(sel_pair_t *v, int64_t hole, int64_t len, sel_pair_t val, bool is_int)
{
	int64_t top = hole, child = hole;
	while (child < (len - 1) / 2) {
		child = 2 * (child + 1);
		if (gs_less(&v[child], &v[child - 1], is_int))
			child--;
		v[hole] = v[child];
		hole = child;
	}
	if ((len & 1) == 0 && child == (len - 2) / 2) {
		child = 2 * (child + 1);
		v[hole] = v[child - 1];
		hole = child - 1;
	}
	gs_push_heap(v, hole, top, val, is_int);
}

static void gs_heap_sort(sel_pair_t *v, int64_t n, bool is_int)
{
	if (n < 2)
		return;
	for (int64_t parent = (n - 2) / 2;; parent--) { /* make_heap */
		gs_adjust_heap(v, parent, n, v[parent], is_int);
		if (parent == 0)
			break;
	}
	for (int64_t last = n - 1; last > 0; last--) { /* sort_heap: pop_heap(first, last, last) */
		sel_pair_t val = v[last];
		v[last] = v[0];
		gs_adjust_heap(v, 0, last, val, is_int);
	}
}

static void gs_swap(sel_pair_t *a, sel_pair_t *b)
{
	sel_pair_t t = *a;
	*a = *b;
	*b = t;
}

static void gs_median_to_first(sel_pair_t *r, sel_pair_t *a, sel_pair_t *b, sel_pair_t *c, bool is_int)
{
	if (gs_less(a, b, is_int)) {
		if (gs_less(b, c, is_int))
			gs_swap(r, b);
		else if (gs_less(a, c, is_int))
			gs_swap(r, c);
		else
			gs_swap(r, a);
	} else if (gs_less(a, c, is_int)) {
		gs_swap(r, a);
	} else if (gs_less(b, c, is_int)) {
		gs_swap(r, c);
	} else {
		gs_swap(r, b);
	}
}

static void gs_introsort_loop(sel_pair_t *v, int64_t first, int64_t last, int depth, bool is_int)
{
	while (last - first > 16) {
		if (depth == 0) {
			gs_heap_sort(v + first, last - first, is_int);
			return;
		}
		--depth;
		int64_t mid = first + (last - first) / 2;
		gs_median_to_first(&v[first], &v[first + 1], &v[mid], &v[last - 1], is_int);
		int64_t lo = first + 1, hi = last; /* unguarded partition around v[first] */
		for (;;) {
			while (gs_less(&v[lo], &v[first], is_int))
				++lo;
			--hi;
			while (gs_less(&v[first], &v[hi], is_int))
				--hi;
			if (!(lo < hi))
				break;
			gs_swap(&v[lo], &v[hi]);
			++lo;
		}
		gs_introsort_loop(v, lo, last, depth, is_int);
		last = lo;
	}
}

static void gs_linear_insert(sel_pair_t *v, int64_t last, bool is_int)
{
	sel_pair_t val = v[last];
	int64_t next = last - 1;
	while (gs_less(&val, &v[next], is_int)) {
		v[last] = v[next];
		last = next;
		--next;
	}
	v[last] = val;
}

static void gs_insertion_sort(sel_pair_t *v, int64_t first, int64_t last, bool is_int)
{
	if (first == last)
		return;
	for (int64_t i = first + 1; i != last; ++i) {
		if (gs_less(&v[i], &v[first], is_int)) {
			sel_pair_t val = v[i];
			memmove(&v[first + 1], &v[first], (size_t)(i - first) * sizeof *v);
			v[first] = val;
		} else {
			gs_linear_insert(v, i, is_int);
		}
	}
}

static void gs_sort(sel_pair_t *v, int64_t n, bool is_int)
{
	if (n == 0)
		return;
	int lg = 0;
	while (((int64_t)1 << (lg + 1)) <= n)
		lg++;
	gs_introsort_loop(v, 0, n, 2 * lg, is_int);
	if (n > 16) {
		gs_insertion_sort(v, 0, 16, is_int);
		for (int64_t i = 16; i < n; i++)
			gs_linear_insert(v, i, is_int);
	} else {
		gs_insertion_sort(v, 0, n, is_int);
	}
}

/* aten's mode over the sorted pairs: the last element of the first longest run (runs split at !=) */
static int64_t gs_mode_pick(const sel_pair_t *v, int64_t R, bool is_int)
{
	int64_t best = 0, freq = 0, run = 0;
	for (int64_t r = 0; r < R; r++) {
		run++;
		if (r == R - 1 || !sel_equal(&v[r], &v[r + 1], is_int)) {
			if (run > freq)
				freq = run, best = v[r].idx;
			run = 0;
		}
	}
	return best;
}

/* ---- topk / kthvalue / median / mode --------------------------------------------------------------- */

static int64_t sel_out_count(const nk_select_args_t *a)
{
	return a->op == NK_SEL_TOPK ? a->k : 1;
}

/* The chosen (position in v) pairs for one line: writes n_out picks into pick[]. */
static int64_t sel_line(const nk_select_args_t *a, sel_pair_t *v, sel_pair_t *t, bool is_int, int64_t *pick)
{
	int64_t R = a->R;
	switch (a->op) {
	case NK_SEL_TOPK: /* select the first k of the total order, then sort just those */
		if (a->k < R)
			sel_select_total(v, R, a->k - 1, is_int, a->largest);
		sel_msort(v, t, a->k, is_int, a->largest);
		for (int64_t j = 0; j < a->k; j++)
			pick[j] = v[j].idx;
		return a->k;
	case NK_SEL_KTHVALUE:
		sel_quick_select(v, R, a->k - 1, is_int);
		pick[0] = v[a->k - 1].idx;
		return 1;
	case NK_SEL_MEDIAN:
		for (int64_t r = 0; r < R; r++) {
			if (sel_isnan(&v[r], is_int)) {
				pick[0] = v[r].idx;
				return 1;
			}
		}
		sel_select_total(v, R, (R - 1) / 2, is_int, false);
		pick[0] = v[(R - 1) / 2].idx;
		return 1;
	case NK_SEL_NANMEDIAN: {
		int64_t nn = 0;
		for (int64_t r = 0; r < R; r++)
			nn += sel_isnan(&v[r], is_int);
		sel_select_total(v, R, (R - nn - 1) / 2, is_int, false);
		pick[0] = v[(R - nn - 1) / 2].idx; /* all NaN: position 0 (C division truncates) */
		return 1;
	}
	default: /* NK_SEL_MODE */
		gs_sort(v, R, is_int);
		pick[0] = gs_mode_pick(v, R, is_int);
		return 1;
	}
}

typedef struct {
	const nk_select_args_t *a;
	bool is_int;
} sel_ctx_t;

static void sel_lines(void *ctx, int64_t l0, int64_t l1)
{
	const sel_ctx_t *c = ctx;
	const nk_select_args_t *a = c->a;
	size_t es = nk_dtype_size(a->dtype);
	int64_t K = sel_out_count(a);
	sel_pair_t stack_v[SEL_STACK], stack_t[SEL_STACK];
	for (int64_t l = l0; l < l1; l++) {
		sel_pair_t *v = stack_v, *t = stack_t;
		if (a->R > SEL_STACK) {
			v = (sel_pair_t *)a->work + 2 * a->R * l;
			t = v + a->R;
		}
		int64_t o = l / a->I, i = l % a->I;
		const char *in = (const char *)a->in + (o * a->R * a->I + i) * (int64_t)es;
		char *out = (char *)a->out + (o * K * a->I + i) * (int64_t)es;
		int64_t *idx = a->idx + o * K * a->I + i, st = a->I * (int64_t)es;
		for (int64_t r = 0; r < a->R; r++)
			sel_key(&v[r], in + r * st, a->dtype, c->is_int, r);
		/* the picks go to the index output directly (it has K slots of stride I) */
		int64_t pick_stack[SEL_STACK], *pick = K <= SEL_STACK ? pick_stack : NULL;
		if (!pick) { /* large k: the sorted pairs themselves hold the picks (topk only) */
			sel_msort(v, t, a->R, c->is_int, a->largest);
			for (int64_t j = 0; j < K; j++) {
				idx[j * a->I] = v[j].idx;
				memcpy(out + j * st, in + v[j].idx * st, es);
			}
			continue;
		}
		int64_t n = sel_line(a, v, t, c->is_int, pick);
		for (int64_t j = 0; j < n; j++) {
			idx[j * a->I] = pick[j];
			memcpy(out + j * st, in + pick[j] * st, es);
		}
	}
}

static int sel_check(const nk_select_args_t *a)
{
	if (!nk_dtype_valid(a->dtype) || a->O < 0 || a->R < 0 || a->I < 0 || !a->idx || a->op < 0 ||
	    a->op > NK_SEL_MODE) {
		nrt_kernel_fail("nk_select: bad arguments (op %d, dtype %d)", a->op, a->dtype);
		return -1;
	}
	bool need_r = a->O * a->I > 0;
	if (a->op == NK_SEL_TOPK && (a->k < 0 || a->k > a->R)) {
		nrt_kernel_fail("nk_select: topk k = %lld out of range for a dimension of size %lld", (long long)a->k,
				(long long)a->R);
		return -1;
	}
	if (a->op == NK_SEL_KTHVALUE && need_r && (a->k < 1 || a->k > a->R)) {
		nrt_kernel_fail("nk_select: kthvalue k = %lld out of range for a dimension of size %lld", (long long)a->k,
				(long long)a->R);
		return -1;
	}
	if (a->op != NK_SEL_TOPK && need_r && a->R == 0) {
		nrt_kernel_fail("nk_select: selection over an empty dimension");
		return -1;
	}
	if (a->R > SEL_STACK && !a->work && need_r) {
		nrt_kernel_fail("nk_select: lines of %lld elements need a workspace", (long long)a->R);
		return -1;
	}
	return 0;
}

size_t nk_select_workspace(int64_t R, int64_t lines)
{
	return R > SEL_STACK ? (size_t)(2 * R) * sizeof(sel_pair_t) * (size_t)lines : 0;
}

int nk_select_run(void *args)
{
	const nk_select_args_t *a = args;
	if (nk_using_reference())
		return nk_select_ref(args);
	if (sel_check(a))
		return -1;
	int64_t lines = a->O * a->I;
	if (!lines || sel_out_count(a) == 0)
		return 0;
	sel_ctx_t c = { a, !nk_is_float(a->dtype) };
	int64_t grain = a->R ? SEL_GRAIN / a->R : SEL_GRAIN;
	nrt_parallel_for(lines, grain > 0 ? grain : 1, sel_lines, &c);
	return 0;
}

/* ---- reference: the definitions, O(R^2) counting, no sort ---------------------------------------- */
/* rank of element r in the stable order (asc NaN last, or desc NaN first): elements strictly before
 * it, plus equal ones (same key, or both NaN) at lower index. */
static int64_t ref_rank(const sel_pair_t *v, int64_t R, int64_t r, bool is_int, bool desc)
{
	int64_t n = 0;
	for (int64_t j = 0; j < R; j++) {
		if (j == r)
			continue;
		bool same = sel_equal(&v[j], &v[r], is_int) || (sel_isnan(&v[j], is_int) && sel_isnan(&v[r], is_int));
		if (sel_before(&v[j], &v[r], is_int, desc) || (same && j < r))
			n++;
	}
	return n;
}

static int64_t ref_at_rank(const sel_pair_t *v, int64_t R, int64_t rank, bool is_int, bool desc)
{
	for (int64_t r = 0; r < R; r++)
		if (ref_rank(v, R, r, is_int, desc) == rank)
			return r;
	return 0;
}

int nk_select_ref(void *args)
{
	const nk_select_args_t *a = args;
	if (sel_check(a))
		return -1;
	bool is_int = !nk_is_float(a->dtype);
	size_t es = nk_dtype_size(a->dtype);
	int64_t K = sel_out_count(a), R = a->R;
	if (!K)
		return 0;
	for (int64_t l = 0; l < a->O * a->I; l++) {
		sel_pair_t *v = (sel_pair_t *)a->work + 2 * R * l, local[SEL_STACK * 2];
		if (R <= SEL_STACK)
			v = local;
		int64_t o = l / a->I, i = l % a->I, st = a->I * (int64_t)es;
		const char *in = (const char *)a->in + (o * R * a->I + i) * (int64_t)es;
		char *out = (char *)a->out + (o * K * a->I + i) * (int64_t)es;
		int64_t *idx = a->idx + o * K * a->I + i;
		for (int64_t r = 0; r < R; r++)
			sel_key(&v[r], in + r * st, a->dtype, is_int, r);
		int64_t nn = 0, first_nan = -1;
		for (int64_t r = 0; r < R; r++)
			if (sel_isnan(&v[r], is_int)) {
				nn++;
				if (first_nan < 0)
					first_nan = r;
			}
		for (int64_t j = 0; j < K; j++) {
			int64_t p;
			switch (a->op) {
			case NK_SEL_TOPK:
				p = ref_at_rank(v, R, j, is_int, a->largest);
				break;
			case NK_SEL_KTHVALUE: { /* the value is the (k-1)-th in order; the index aten's quickselect gives */
				sel_pair_t *w = v + R;
				if (R <= SEL_STACK)
					w = local + SEL_STACK;
				memcpy(w, v, (size_t)R * sizeof *v);
				sel_quick_select(w, R, a->k - 1, is_int);
				p = w[a->k - 1].idx;
				break;
			}
			case NK_SEL_MEDIAN:
				p = first_nan >= 0 ? first_nan : ref_at_rank(v, R, (R - 1) / 2, is_int, false);
				break;
			case NK_SEL_NANMEDIAN:
				p = ref_at_rank(v, R, (R - nn - 1) / 2, is_int, false);
				break;
			default: { /* mode: count every element's occurrences; the largest index (= aten's for
				    * lines of <= 16 without NaN, which libstdc++ insertion-sorts) */
				int64_t bestc = 0;
				p = 0;
				for (int64_t r = 0; r < R; r++) {
					int64_t c = 0, last = r;
					for (int64_t q = 0; q < R; q++)
						if (sel_equal(&v[q], &v[r], is_int)) {
							c++;
							last = q > last ? q : last;
						}
					if (sel_isnan(&v[r], is_int))
						c = 1, last = r;
					bool better = c > bestc || (c == bestc && sel_before(&v[r], &v[p], is_int, false));
					if (better)
						bestc = c, p = last;
				}
			}
			}
			idx[j * a->I] = p;
			memcpy(out + j * st, in + p * st, es);
		}
	}
	return 0;
}
