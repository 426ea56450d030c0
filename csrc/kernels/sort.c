/* sort.c - stable sort along R of a contiguous [O, R, I] tensor into values (same dtype) and int64
 * indices, as aten's CPU sort with stable=True: ascending puts NaN last, descending puts NaN first;
 * equal keys keep their input order.  out may be the input itself (sorted in place).
 * Each line is loaded into (key, index) pairs (float keys as double, integer keys as int64: both
 * exact), merge-sorted (bottom-up, stable) with 2*R pairs of scratch: on the stack up to SORT_STACK
 * elements per line, else from the caller's workspace (nk_sort_workspace bytes), and written back.
 * Threading: lines over the pool.  nk_sort_ref: insertion sort in place, line by line (O(R^2)).
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

#define SORT_GRAIN 16384
#define SORT_STACK 1024 /* pairs per line sorted in stack memory; longer lines use the workspace */

typedef struct {
	double f;
	int64_t i64;
	int64_t idx;
} sort_pair_t;

/* a goes strictly before b? */
static inline bool sort_before(const sort_pair_t *a, const sort_pair_t *b, bool is_int, bool desc)
{
	if (is_int)
		return desc ? a->i64 > b->i64 : a->i64 < b->i64;
	bool an = isnan(a->f), bn = isnan(b->f);
	if (desc)
		return (an && !bn) || (a->f > b->f);
	return (!an && bn) || (a->f < b->f);
}

static void sort_merge(sort_pair_t *v, sort_pair_t *tmp, int64_t n, bool is_int, bool desc)
{
	for (int64_t w = 1; w < n; w *= 2) {
		for (int64_t lo = 0; lo < n; lo += 2 * w) {
			int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int64_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				tmp[k++] = sort_before(&v[j], &v[i], is_int, desc) ? v[j++] : v[i++];
			while (i < mid)
				tmp[k++] = v[i++];
			while (j < hi)
				tmp[k++] = v[j++];
		}
		memcpy(v, tmp, (size_t)n * sizeof *v);
	}
}

static void sort_load(const nk_sort_args_t *a, int64_t line, sort_pair_t *v, const char **in, char **out,
		      int64_t **idx)
{
	size_t es = nk_dtype_size(a->dtype);
	int64_t o = line / a->I, i = line % a->I, base = o * a->R * a->I + i;
	*in = (const char *)a->in + base * (int64_t)es;
	*out = (char *)a->out + base * (int64_t)es;
	*idx = (int64_t *)a->idx + base;
	bool is_int = !nk_is_float(a->dtype);
	for (int64_t r = 0; r < a->R; r++) {
		const char *p = *in + r * a->I * (int64_t)es;
		v[r].idx = r;
		if (is_int)
			v[r].i64 = nk_load_i64(p, a->dtype);
		else
			v[r].f = nk_load_f64(p, a->dtype);
	}
}

typedef struct {
	const nk_sort_args_t *a;
	bool is_int;
} sort_ctx_t;

static void sort_lines(void *ctx, int64_t l0, int64_t l1)
{
	const sort_ctx_t *c = ctx;
	const nk_sort_args_t *a = c->a;
	size_t es = nk_dtype_size(a->dtype);
	sort_pair_t stack_v[SORT_STACK], stack_t[SORT_STACK];
	for (int64_t l = l0; l < l1; l++) {
		sort_pair_t *v = stack_v, *t = stack_t;
		if (a->R > SORT_STACK) { /* the workspace holds 2*R pairs per line */
			v = (sort_pair_t *)a->work + 2 * a->R * l;
			t = v + a->R;
		}
		const char *in;
		char *out;
		int64_t *idx;
		sort_load(a, l, v, &in, &out, &idx);
		sort_merge(v, t, a->R, c->is_int, a->descending);
		int64_t st = a->I * (int64_t)es;
		/* values: gather from the input (out may alias in: go through the sorted keys' bytes) */
		if (in == out) {
			for (int64_t r = 0; r < a->R; r++) {
				if (c->is_int)
					nk_store_i64(out + r * st, a->dtype, v[r].i64);
				else
					nk_store_f64(out + r * st, a->dtype, v[r].f);
			}
		} else {
			for (int64_t r = 0; r < a->R; r++)
				memcpy(out + r * st, in + v[r].idx * st, es);
		}
		for (int64_t r = 0; r < a->R; r++)
			idx[r * a->I] = v[r].idx;
	}
}

static int sort_check(const nk_sort_args_t *a)
{
	if (!nk_dtype_valid(a->dtype) || a->O < 0 || a->R < 0 || a->I < 0 || !a->idx) {
		nrt_kernel_fail("nk_sort: bad arguments (dtype %d)", a->dtype);
		return -1;
	}
	return 0;
}

size_t nk_sort_workspace(int64_t R, int64_t lines)
{
	return R > SORT_STACK ? (size_t)(2 * R) * sizeof(sort_pair_t) * (size_t)lines : 0;
}

int nk_sort_run(void *args)
{
	const nk_sort_args_t *a = args;
	if (nk_using_reference())
		return nk_sort_ref(args);
	if (sort_check(a))
		return -1;
	if (a->R > SORT_STACK && !a->work) {
		nrt_kernel_fail("nk_sort: lines of %lld elements need a workspace", (long long)a->R);
		return -1;
	}
	sort_ctx_t c = { a, !nk_is_float(a->dtype) };
	int64_t lines = a->O * a->I;
	if (!lines)
		return 0;
	int64_t grain = a->R ? SORT_GRAIN / a->R : SORT_GRAIN;
	nrt_parallel_for(lines, grain > 0 ? grain : 1, sort_lines, &c);
	return 0;
}

/* ---- reference: insertion sort (stable) in place in out/idx, line by line ------------------------ */
static sort_pair_t sort_key_at(const char *p, int dt, int64_t idx)
{
	sort_pair_t k = { 0, 0, idx };
	if (nk_is_float(dt))
		k.f = nk_load_f64(p, dt);
	else
		k.i64 = nk_load_i64(p, dt);
	return k;
}

int nk_sort_ref(void *args)
{
	const nk_sort_args_t *a = args;
	if (sort_check(a))
		return -1;
	bool is_int = !nk_is_float(a->dtype);
	size_t es = nk_dtype_size(a->dtype);
	char e[8];
	for (int64_t l = 0; l < a->O * a->I; l++) {
		int64_t o = l / a->I, i = l % a->I, base = o * a->R * a->I + i, st = a->I * (int64_t)es;
		const char *in = (const char *)a->in + base * (int64_t)es;
		char *out = (char *)a->out + base * (int64_t)es;
		int64_t *idx = (int64_t *)a->idx + base;
		for (int64_t r = 0; r < a->R; r++) {
			if (out != in)
				memcpy(out + r * st, in + r * st, es);
			idx[r * a->I] = r;
		}
		for (int64_t r = 1; r < a->R; r++) {
			sort_pair_t p = sort_key_at(out + r * st, a->dtype, idx[r * a->I]);
			int64_t j = r;
			memcpy(e, out + r * st, es);
			while (j > 0) {
				sort_pair_t q = sort_key_at(out + (j - 1) * st, a->dtype, idx[(j - 1) * a->I]);
				if (!sort_before(&p, &q, is_int, a->descending))
					break;
				memcpy(out + j * st, out + (j - 1) * st, es);
				idx[j * a->I] = idx[(j - 1) * a->I];
				j--;
			}
			memcpy(out + j * st, e, es);
			idx[j * a->I] = p.idx;
		}
	}
	return 0;
}
