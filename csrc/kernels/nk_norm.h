/* nk_norm.h - kernel family: the normalizations: layer norm (layernorm.c), batch
 * and group norm (batchnorm.c), rms norm (rmsnorm.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_NORM_H
#define NK_NORM_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layer norm over the last `cols` of a contiguous [rows, cols] ------------------------------ */
/* w, b may be NULL.  mean and rstd are [rows] in the input dtype. */
typedef struct {
	int dtype;
	int64_t rows, cols;
	double eps;
	const void *x, *w, *b;
	void *y, *mean, *rstd;
} nk_layernorm_args_t;
int nk_layernorm_run(void *args);
int nk_layernorm_ref(void *args);
/* dx, dw, db may each be NULL (not wanted); dw, db are written (not accumulated). */
typedef struct {
	int dtype;
	int64_t rows, cols;
	const void *dy, *x, *mean, *rstd, *w;
	void *dx, *dw, *db;
} nk_layernorm_bwd_args_t;
int nk_layernorm_bwd_run(void *args);
int nk_layernorm_bwd_ref(void *args);


/* ---- batch norm over a contiguous [N, C, S] (S = product of the spatial dims) -------------------- */
/* dtype: x, y (f32, f64, bf16, f16).  pdtype: w, b, running_mean/var and save_mean/invstd: dtype, or f32
 * for bf16/f16 x (aten's mixed mode).  Training: per-channel mean and biased variance over N*S (two passes,
 * f64 sums), save_mean/save_invstd = mean, 1/sqrt(var + eps) (may be NULL), running stats (may be NULL)
 * := (1 - momentum)*r + momentum*stat with the UNBIASED variance.  Eval: running stats normalize (both
 * required), save_* are not written.  y = x*alpha + beta with alpha = invstd*w, beta = b - mean*alpha
 * per channel (aten's CPU form).  w, b may be NULL (1, 0).  Threading: channels over the pool. */
typedef struct {
	int dtype, pdtype;
	int64_t N, C, S;
	bool training;
	double momentum, eps;
	const void *x, *w, *b;
	void *running_mean, *running_var;
	void *y, *save_mean, *save_invstd;
} nk_batchnorm_args_t;
int nk_batchnorm_run(void *args);
int nk_batchnorm_ref(void *args);
/* Backward.  training: mean/invstd are save_mean/save_invstd; otherwise they are running_mean and
 * running_var (invstd = 1/sqrt(var + eps)).  dx = (dy - [mean(dy) + xhat*mean(dy*xhat)]) * invstd * w
 * (bracket only in training), dw = sum(dy*xhat), db = sum(dy) (per channel, pdtype).  dx, dw, db may each
 * be NULL.  dy has dtype. */
typedef struct {
	int dtype, pdtype;
	int64_t N, C, S;
	bool training;
	double eps;
	const void *dy, *x, *w, *mean, *invstd;
	void *dx, *dw, *db;
} nk_batchnorm_bwd_args_t;
int nk_batchnorm_bwd_run(void *args);
int nk_batchnorm_bwd_ref(void *args);

/* ---- group norm over a contiguous [N, C, S] with G groups (C % G == 0) ---------------------------- */
/* mean/rstd [N, G] and w, b [C] in pdtype (dtype, or f32 for bf16/f16 x with f32 parameters) may be NULL.  Threading: (n, g) over the
 * pool.  Backward: dx per (n, g) as layer norm with g = dy*w[c]; dw, db per channel (pdtype). */
typedef struct {
	int dtype, pdtype;
	int64_t N, C, S, G;
	double eps;
	const void *x, *w, *b;
	void *y, *mean, *rstd;
} nk_groupnorm_args_t;
int nk_groupnorm_run(void *args);
int nk_groupnorm_ref(void *args);
typedef struct {
	int dtype, pdtype;
	int64_t N, C, S, G;
	const void *dy, *x, *mean, *rstd, *w;
	void *dx, *dw, *db;
} nk_groupnorm_bwd_args_t;
int nk_groupnorm_bwd_run(void *args);
int nk_groupnorm_bwd_ref(void *args);

/* ---- rms norm over the last `cols` of a contiguous [rows, cols] ------------------------------------ */
/* y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ([rows], f32 for bf16/f16/f32, f64 for f64), w [cols]
 * (dtype) may be NULL.  Backward: dx = rstd*(g - xhat*mean(g*xhat)), g = dy*w, xhat = x*rstd;
 * dw = sum over rows of dy*xhat.  dx, dw may be NULL. */
typedef struct {
	int dtype;
	int64_t rows, cols;
	double eps;
	const void *x, *w;
	void *y, *rstd;
} nk_rmsnorm_args_t;
int nk_rmsnorm_run(void *args);
int nk_rmsnorm_ref(void *args);
typedef struct {
	int dtype;
	int64_t rows, cols;
	const void *dy, *x, *rstd, *w;
	void *dx, *dw;
} nk_rmsnorm_bwd_args_t;
int nk_rmsnorm_bwd_run(void *args);
int nk_rmsnorm_bwd_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_NORM_H */
