/* nk_misc.h - kernel family: selection (topk/kthvalue/median/mode/unique/searchsorted/bucketize), special functions, extra random distributions.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_MISC_H
#define NK_MISC_H

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

/* ---- unique over the N rows of a contiguous [N, M] (M = 1: elements) (select.c) ---------------- */
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

/* ---- sorted search (select.c) ------------------------------------------------------------------- */
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

/* ---- bincount (select.c): out [nbins] = counts of the integer x [n] (i64), or sums of the weights w
 * [n] (f32 -> f32, f64 -> f64, out_dtype = w_dtype), accumulated serially in input order.  A value
 * outside [0, nbins) fails the kernel. */
typedef struct {
	int dtype, w_dtype, out_dtype;
	int64_t n, nbins;
	const void *x, *w;
	void *out;
} nk_bincount_args_t;
int nk_bincount_run(void *args);

/* ---- histc (select.c): out [nbins] (dtype) = histogram of x [n] over edges [nbins + 1] (the dtype's
 * linspace from min to max), in the dtype's arithmetic as aten's CPU kernel; NaN and values outside
 * [edges[0], edges[nbins]] are not counted. */
typedef struct {
	int dtype;
	int64_t n, nbins;
	const void *x, *edges;
	void *out;
} nk_histc_args_t;
int nk_histc_run(void *args);

/* ---- more random distributions (random_dist.c): Philox on (seed, offset + element) as random.c ---- */
typedef enum { NK_DIST_EXPONENTIAL, NK_DIST_CAUCHY, NK_DIST_GEOMETRIC, NK_DIST_LOG_NORMAL } nk_dist_kind_t;
/* exponential(lambda a), cauchy(median a, sigma b), geometric(p a; any non-bool dtype),
 * log_normal(mean a, std b).  One output operand, any strides; consumes numel counters. */
typedef struct {
	nk_iter_t it;
	int kind;
	double a, b;
	uint64_t seed, offset;
} nk_dist_args_t;
int nk_dist_run(void *args);
int nk_dist_ref(void *args);
/* a random permutation of [0, n) into out (dtype, contiguous); work: n int64.  Consumes n counters. */
typedef struct {
	int dtype;
	int64_t n;
	void *out;
	int64_t *work;
	uint64_t seed, offset;
} nk_randperm_args_t;
int nk_randperm_run(void *args);
/* S category indices per row of the weights p [D, C] (float dtype, contiguous) into out [D, S] int64,
 * with or without replacement; work: 2*D*C doubles.  Consumes D*max(C, S) counters. Invalid rows
 * (negative, inf, NaN, zero sum, too few nonzero without replacement) fail the kernel. */
typedef struct {
	int dtype;
	int64_t D, C, S;
	bool replacement;
	const void *p;
	int64_t *out;
	void *work;
	uint64_t seed, offset;
} nk_multinomial_args_t;
int nk_multinomial_run(void *args);

/* ---- special functions (special.c): out = f(x[, y]) elementwise over an nk_iter_t ------------- */
/* Operand 0 the output, 1 x, 2 y (binary ops).  Floating dtypes compute in double and round once to
 * the output dtype; the integer ops (GCD, LCM, and HEAVISIDE, SGN on integer dtypes) compute in int64.
 * Formulas follow PyTorch's CPU scalar code (aten/src/ATen/native/Math.h, Cephes); ia: POLYGAMMA n. */
typedef enum {
	/* unary */
	NK_SP_DIGAMMA, NK_SP_LGAMMA, NK_SP_POLYGAMMA, NK_SP_SINC, NK_SP_ENTR, NK_SP_SGN, NK_SP_ANGLE,
	NK_SP_I0, NK_SP_I0E, NK_SP_I1, NK_SP_I1E, /* modified Bessel I0, I1 and their exp(-|x|)-scaled forms */
	/* binary */
	NK_SP_XLOG1PY, NK_SP_ZETA, NK_SP_HEAVISIDE, NK_SP_NEXTAFTER, NK_SP_GCD, NK_SP_LCM,
	NK_SP_CHEBYSHEV_T, NK_SP_CHEBYSHEV_U, NK_SP_CHEBYSHEV_V, NK_SP_CHEBYSHEV_W,
	NK_SP_SHIFTED_CHEBYSHEV_T, NK_SP_SHIFTED_CHEBYSHEV_U, NK_SP_SHIFTED_CHEBYSHEV_V, NK_SP_SHIFTED_CHEBYSHEV_W,
	NK_SP_HERMITE_H, NK_SP_HERMITE_HE, NK_SP_LAGUERRE_L, NK_SP_LEGENDRE_P,
	NK_SP_COUNT
} nk_special_op_t;
typedef struct {
	nk_iter_t it;
	int op;
	int64_t ia;
} nk_special_args_t;
int nk_special_run(void *args);
int nk_special_ref(void *args);

/* ---- small ops (small.c): tril/triu_indices, trace, cross --------------------------------------- */
/* tril_indices (lower) / triu_indices: out is int64 [2, n], n = nk_tri_indices_count(...), row-major
 * order of the kept (r, c), as PyTorch. */
typedef struct {
	int64_t row, col, offset, n;
	bool lower;
	int64_t *out;
} nk_tri_indices_args_t;
int64_t nk_tri_indices_count(int64_t row, int64_t col, int64_t offset, bool lower);
int nk_tri_indices_run(void *args);
int nk_tri_indices_ref(void *args);

/* trace: *out = sum_{i<n} in[i * stride] (stride in elements); floats accumulate in double, integers
 * in int64 (wrapping); out_dtype is I64 for integer inputs, else dtype. */
typedef struct {
	int dtype, out_dtype;
	int64_t n, stride;
	const void *in;
	void *out;
} nk_trace_args_t;
int nk_trace_run(void *args);
int nk_trace_ref(void *args);

/* cross product over dim 1 of contiguous [O, 3, I] a, b, out of one dtype (not bool). */
typedef struct {
	int dtype;
	int64_t O, I;
	const void *a, *b;
	void *out;
} nk_cross_args_t;
int nk_cross_run(void *args);
int nk_cross_ref(void *args);

/* repeat_interleave(repeats): out[total] (dtype of repeats, I32 or I64) holds i repeats[i] times, i < n;
 * a negative repeat or a sum other than total fails the kernel. */
typedef struct {
	int dtype;
	int64_t n, total;
	const void *repeats;
	void *out;
} nk_repeat_interleave_args_t;
int nk_repeat_interleave_run(void *args);
int nk_repeat_interleave_ref(void *args);

/* nonzero_static: out [size, ndim] int64 holds the coordinates of the first size nonzero elements of nz,
 * the remaining rows fill. */
typedef struct {
	nk_nonzero_args_t nz;
	int64_t size, fill;
	int64_t *out;
} nk_nonzero_static_args_t;
int nk_nonzero_static_run(void *args);

/* renorm over contiguous [O, R, I] (float dtypes): each slice r (all O and I elements) whose p-norm
 * (p = 0, inf, -inf or any positive) exceeds maxnorm is scaled by maxnorm / (norm + 1e-7), as aten. */
typedef struct {
	int dtype;
	int64_t O, R, I;
	double p, maxnorm;
	const void *in;
	void *out;
} nk_renorm_args_t;
int nk_renorm_run(void *args);

/* cdist over contiguous x1 [B, P, M], x2 [B, R, M] (F32/F64, computed in double): out [B, P, R] the
 * p-norm distances (p = 0, inf or any positive); the backward writes grad_x1 [B, P, M] from grad and
 * dist [B, P, R] with aten's per-p derivative (0 where dist is 0). */
typedef struct {
	int dtype;
	int64_t B, P, R, M;
	double p;
	const void *x1, *x2;
	void *out;
} nk_cdist_args_t;
int nk_cdist_run(void *args);
typedef struct {
	int dtype;
	int64_t B, P, R, M;
	double p;
	const void *grad, *x1, *x2, *dist;
	void *out;
} nk_cdist_bwd_args_t;
int nk_cdist_bwd_run(void *args);

/* pdist over contiguous x [N, M] (F32/F64): out [N(N-1)/2] the distances of the pairs i < j in row-major
 * order; the backward writes grad_x [N, M] from grad and dist [N(N-1)/2]. */
typedef struct {
	int dtype;
	int64_t N, M;
	double p;
	const void *x;
	void *out;
} nk_pdist_args_t;
int nk_pdist_run(void *args);
typedef struct {
	int dtype;
	int64_t N, M;
	double p;
	const void *grad, *x, *dist;
	void *out;
} nk_pdist_bwd_args_t;
int nk_pdist_bwd_run(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_MISC_H */
