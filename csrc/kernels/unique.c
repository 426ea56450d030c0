/* unique.c - unique (sorted or consecutive) over the rows of a contiguous [N, M] tensor: a stable
 * lexicographic order (NaN last), then groups of equal consecutive rows.  Serial (the output depends on
 * every element).
 */
#include <math.h>
#include <string.h>

#include "nk.h"
#include "nk_impl.h"
#include "nrt.h"

/* ---- unique over rows --------------------------------------------------------------------------- */
/* keys: N*M loaded elements (double bits for floats, int64 for integers) */
typedef struct {
	const int64_t *ik;
	const double *fk;
	int64_t M;
	bool is_int;
} uq_rows_t;

/* -1, 0, 1: lexicographic, ascending, NaN last (NaN == NaN here: only the order matters) */
static int uq_cmp(const uq_rows_t *r, int64_t a, int64_t b)
{
	for (int64_t m = 0; m < r->M; m++) {
		if (r->is_int) {
			int64_t x = r->ik[a * r->M + m], y = r->ik[b * r->M + m];
			if (x != y)
				return x < y ? -1 : 1;
		} else {
			double x = r->fk[a * r->M + m], y = r->fk[b * r->M + m];
			bool xn = isnan(x), yn = isnan(y);
			if (xn || yn) {
				if (xn != yn)
					return xn ? 1 : -1;
				continue;
			}
			if (x != y)
				return x < y ? -1 : 1;
		}
	}
	return 0;
}

static bool uq_equal(const uq_rows_t *r, int64_t a, int64_t b)
{
	for (int64_t m = 0; m < r->M; m++) {
		if (r->is_int ? r->ik[a * r->M + m] != r->ik[b * r->M + m] : !(r->fk[a * r->M + m] == r->fk[b * r->M + m]))
			return false;
	}
	return true;
}

static int uq_check(const nk_unique_args_t *a)
{
	if (!nk_dtype_valid(a->dtype) || a->N < 0 || a->M < 0 || !a->perm || !a->rep || !a->n_unique ||
	    (a->N * a->M > 0 && !a->work)) {
		nrt_kernel_fail("nk_unique: bad arguments (dtype %d)", a->dtype);
		return -1;
	}
	return 0;
}

size_t nk_unique_workspace(int64_t N, int64_t M)
{
	return (size_t)(N * M + N) * 8;
}

/* Groups consecutive equal rows of the order perm: inverse, counts, rep, n_unique. */
static void uq_group(const nk_unique_args_t *a, const uq_rows_t *rows)
{
	int64_t g = -1;
	for (int64_t s = 0; s < a->N; s++) {
		int64_t r = a->perm[s];
		if (s == 0 || a->M == 0 || !uq_equal(rows, a->perm[s - 1], r)) {
			if (s > 0 && a->M == 0)
				; /* rows of no elements are all equal */
			else {
				g++;
				a->rep[g] = r;
				if (a->counts)
					a->counts[g] = 0;
			}
		}
		if (a->inverse)
			a->inverse[r] = g;
		if (a->counts)
			a->counts[g]++;
	}
	*a->n_unique = g + 1;
}

static void uq_load(const nk_unique_args_t *a, uq_rows_t *rows)
{
	rows->M = a->M;
	rows->is_int = !nk_is_float(a->dtype);
	int64_t *k = a->work;
	size_t es = nk_dtype_size(a->dtype);
	for (int64_t e = 0; e < a->N * a->M; e++) {
		const char *p = (const char *)a->x + e * (int64_t)es;
		if (rows->is_int)
			k[e] = nk_load_i64(p, a->dtype);
		else {
			double d = nk_load_f64(p, a->dtype);
			memcpy(&k[e], &d, 8);
		}
	}
	rows->ik = k;
	rows->fk = (const double *)(const void *)k;
}

int nk_unique_run(void *args)
{
	const nk_unique_args_t *a = args;
	if (nk_using_reference())
		return nk_unique_ref(args);
	if (uq_check(a))
		return -1;
	uq_rows_t rows;
	uq_load(a, &rows);
	int64_t *perm = a->perm, *tmp = (int64_t *)a->work + a->N * a->M;
	for (int64_t i = 0; i < a->N; i++)
		perm[i] = i;
	if (a->sort && a->M > 0) { /* bottom-up stable merge sort of the row order */
		for (int64_t w = 1; w < a->N; w *= 2) {
			for (int64_t lo = 0; lo < a->N; lo += 2 * w) {
				int64_t mid = lo + w < a->N ? lo + w : a->N, hi = lo + 2 * w < a->N ? lo + 2 * w : a->N;
				int64_t i = lo, j = mid, k = lo;
				while (i < mid && j < hi)
					tmp[k++] = uq_cmp(&rows, perm[j], perm[i]) < 0 ? perm[j++] : perm[i++];
				while (i < mid)
					tmp[k++] = perm[i++];
				while (j < hi)
					tmp[k++] = perm[j++];
			}
			memcpy(perm, tmp, (size_t)a->N * sizeof *perm);
		}
	}
	uq_group(a, &rows);
	return 0;
}

/* reference: insertion sort of the row order (stable), then the same grouping rule */
int nk_unique_ref(void *args)
{
	const nk_unique_args_t *a = args;
	if (uq_check(a))
		return -1;
	uq_rows_t rows;
	uq_load(a, &rows);
	for (int64_t i = 0; i < a->N; i++) {
		int64_t j = i;
		a->perm[i] = i;
		while (a->sort && a->M > 0 && j > 0 && uq_cmp(&rows, i, a->perm[j - 1]) < 0) {
			a->perm[j] = a->perm[j - 1];
			j--;
		}
		a->perm[j] = i;
	}
	uq_group(a, &rows);
	return 0;
}
