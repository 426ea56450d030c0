/* nk_select.h - kernel family: selection along a dim (topk, kthvalue, median,
 * nanmedian, mode: select.c), unique (unique.c), sorted search (searchsorted, bucketize, isin: search.c)
 * and histograms (bincount, histc: histogram.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_SELECT_H
#define NK_SELECT_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- selection along R of a contiguous [O, R, I] (select.c) -------------------------------------- */
/* values into out [O, K, I] (same dtype), int64 indices into idx [O, K, I]; K = k for TOPK, else 1.
 *   TOPK       the k largest (largest) or smallest, in order; NaN counts as the largest; ties: lowest
 *              index first
 *   KTHVALUE   the k-th smallest (k 1-based), NaN largest; index as aten's CPU quickselect gives it
 *   MEDIAN     lower median; the first NaN if any
 *   NANMEDIAN  lower median of the non-NaN elements (all NaN: the first NaN)
 *   MODE       the smallest most frequent value and the largest index holding it
 * Lines longer than 512 elements need work: nk_select_workspace(R, O*I) bytes. */
typedef enum { NK_SEL_TOPK, NK_SEL_KTHVALUE, NK_SEL_MEDIAN, NK_SEL_NANMEDIAN, NK_SEL_MODE } nk_select_op_t;
typedef struct {
	int op, dtype;
	int64_t O, R, I;
	int64_t k;
	bool largest;
	const void *in;
	void *out;
	int64_t *idx;
	void *work;
} nk_select_args_t;
int nk_select_run(void *args);
int nk_select_ref(void *args);
size_t nk_select_workspace(int64_t R, int64_t lines);

/* ---- unique over the N rows of a contiguous [N, M] (M = 1: elements) (unique.c) ---------------- */
/* sort: rows in ascending lexicographic order (NaN last, stable), else their input order (consecutive
 * runs).  Equal consecutive rows form a group (NaN equals nothing).  Writes perm [N] (the order),
 * rep [N] (first n_unique: the input row of each group's first member), inverse [N] (group of each
 * row; may be NULL), counts [N] (first n_unique: rows per group; may be NULL) and *n_unique.
 * work: nk_unique_workspace(N, M) bytes.  Serial. */
typedef struct {
	int dtype;
	int64_t N, M;
	bool sort;
	const void *x;
	int64_t *perm, *rep, *inverse, *counts, *n_unique;
	void *work;
} nk_unique_args_t;
int nk_unique_run(void *args);
int nk_unique_ref(void *args);
size_t nk_unique_workspace(int64_t N, int64_t M);

/* ---- sorted search (search.c) ------------------------------------------------------------------- */
/* x [O, n] contiguous; boundaries bd [O, nb] (row stride bso = nb) or one row shared (bso = 0), sorted
 * ascending, or in the order of sorter (int64, same layout as bd).  LEFT/RIGHT: out (i64 or i32) =
 * aten's lower/upper bound (searchsorted side='left'/'right', bucketize right=False/True).  ISIN: out
 * (bool) = x is among the sorted bd (NaN never is) != invert.  A sorter index outside [0, nb) fails. */
typedef enum { NK_SEARCH_LEFT, NK_SEARCH_RIGHT, NK_SEARCH_ISIN } nk_search_op_t;
typedef struct {
	int op, dtype, out_dtype;
	bool invert;
	int64_t O, n, nb, bso;
	const void *x, *bd;
	const int64_t *sorter;
	void *out;
} nk_search_args_t;
int nk_search_run(void *args);
int nk_search_ref(void *args);

/* ---- bincount (histogram.c): out [nbins] = counts of the integer x [n] (i64), or sums of the weights w
 * [n] (f32 -> f32, f64 -> f64, out_dtype = w_dtype), accumulated serially in input order.  A value
 * outside [0, nbins) fails the kernel. */
typedef struct {
	int dtype, w_dtype, out_dtype;
	int64_t n, nbins;
	const void *x, *w;
	void *out;
} nk_bincount_args_t;
int nk_bincount_run(void *args);

/* ---- histc (histogram.c): out [nbins] (dtype) = histogram of x [n] over edges [nbins + 1] (the dtype's
 * linspace from min to max), in the dtype's arithmetic as aten's CPU kernel; NaN and values outside
 * [edges[0], edges[nbins]] are not counted. */
typedef struct {
	int dtype;
	int64_t n, nbins;
	const void *x, *edges;
	void *out;
} nk_histc_args_t;
int nk_histc_run(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_SELECT_H */
