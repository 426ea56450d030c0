/* nk_linalg.h - kernel family: small linear algebra (trace, cross, renorm: linalg.c)
 * and pairwise distances (cdist, pdist: distance.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_LINALG_H
#define NK_LINALG_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- trace, cross, renorm (linalg.c) ------------------------------------------------------------ */
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

/* ---- distances (distance.c) ---------------------------------------------------------------------- */
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
#endif /* NK_LINALG_H */
