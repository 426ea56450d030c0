/* nk_norm.h - kernel family: batch/group/instance/rms norm, losses beyond nll/mse, and small activations with their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_NORM_H
#define NK_NORM_H

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- small activations and their backward on an nk_iter_t (same float dtype for every operand) --- */
/* out = f(in0[, in1[, in2]]); computed in f64 and rounded once to the dtype. */
typedef enum {
	NK_ACT_HARDSHRINK,      /* (x): |x| > a ? x : 0  (NaN passes) */
	NK_ACT_HARDSHRINK_BWD,  /* (g, x): |x| > a ? g : 0 */
	NK_ACT_SOFTSHRINK,      /* (x): x > a ? x - a : x < -a ? x + a : 0  (NaN passes) */
	NK_ACT_SOFTSHRINK_BWD,  /* (g, x): |x| > a ? g : 0 */
	NK_ACT_LOGIT_BWD,       /* (g, x): ia = 1: eps = a, x outside [a, 1-a] gives 0; ia = 0: x outside [0,1] NaN; else g/(x(1-x)) */
	NK_ACT_GLU,             /* (a, b): a * sigmoid(b) */
	NK_ACT_GLU_BWD_A,       /* (g, a, b): g * sigmoid(b) */
	NK_ACT_GLU_BWD_B,       /* (g, a, b): g * a * sigmoid(b) * (1 - sigmoid(b)) */
	NK_ACT_PRELU,           /* (x, w): x > 0 ? x : w*x */
	NK_ACT_PRELU_BWD_X,     /* (g, x, w): x > 0 ? g : w*g */
	NK_ACT_PRELU_BWD_W,     /* (g, x): x > 0 ? 0 : x*g */
	NK_ACT_COUNT
} nk_act_op_t;
typedef struct {
	nk_iter_t it;
	int op;
	double a;
	int64_t ia;
} nk_act_args_t;
int nk_act_run(void *args);
int nk_act_ref(void *args);

/* ---- rrelu with noise, training: contiguous x, noise, y of n elements ------------------------------ */
/* x <= 0: r = lower + (upper - lower)*u, u = 24 bits of word 0 of the Philox block (seed, counter
 * offset + i) (random.c's convention), noise = r, y = x*r; else noise = 1, y = x.  noise has dtype.  Consumes
 * nk_random_offset_increment(n) counter values. */
typedef struct {
	int dtype;
	int64_t n;
	double lower, upper;
	uint64_t seed, offset;
	const void *x;
	void *noise, *y;
} nk_rrelu_args_t;
int nk_rrelu_run(void *args);

/* ---- margin losses on a contiguous x [N, C] ------------------------------------------------------- */
/* multi_margin: loss_i = sum_{j != y_i} w[y_i] * max(0, margin - x[i,y_i] + x[i,j])^p / C, p in {1, 2};
 * target [N] i64 in [0, C) (checked: the kernel fails otherwise), w [C] may be NULL; out [N] (NONE) or a
 * scalar (MEAN/SUM, f64 sum).  Backward: grad_in [N, C], grad_out [N] (NONE) or a scalar. */
typedef struct {
	int dtype;
	int64_t N, C, p;
	double margin;
	int reduction;
	const void *x, *target, *w, *grad_out;
	void *out, *grad_in;   /* forward writes out, backward writes grad_in (grad_out read) */
} nk_multi_margin_args_t;
int nk_multi_margin_run(void *args);
int nk_multi_margin_bwd_run(void *args);
/* multilabel_margin: target [N, C] i64, the labels of row i are target[i, 0..] up to the first -1
 * (each in [0, C), checked).  is_target [N, C] (dtype) := 1 where j is a label.
 * loss_i = sum_{labels y} sum_{j not a label} max(0, 1 - (x[i,y] - x[i,j])) / C. */
typedef struct {
	int dtype;
	int64_t N, C;
	int reduction;
	const void *x, *target, *grad_out;
	void *out, *is_target, *grad_in;
} nk_multilabel_margin_args_t;
int nk_multilabel_margin_run(void *args);
int nk_multilabel_margin_bwd_run(void *args);

/* ---- AMP: grad scaler ------------------------------------------------------------------------------ */
/* x[0..n) *= inv_scale[0] (f32 scalar); found_inf[0] (f32) := 1 if any element of x is inf or NaN
 * (before scaling).  x: f32, f64, bf16, f16, contiguous. */
typedef struct {
	int dtype;
	int64_t n;
	void *x;
	const float *inv_scale;
	float *found_inf;
} nk_amp_unscale_args_t;
int nk_amp_unscale_run(void *args);
/* scale, growth_tracker (i32), found_inf: one element each (f32).  found_inf: scale *= backoff,
 * tracker = 0; else tracker + 1 == interval: scale *= growth (if finite), tracker = 0; else tracker++. */
typedef struct {
	float *scale;
	int32_t *growth_tracker;
	const float *found_inf;
	double growth, backoff;
	int64_t interval;
} nk_amp_update_args_t;
int nk_amp_update_run(void *args);

/* act_avx512.c (call only when nk_cpu_avx512()): o = op(x[, y]) on dense f32 buffers for gelu (ia: 0 erf,
 * 1 tanh), gelu_backward (x = grad, y = input), silu, silu_backward; false (nothing written) for other
 * ops.  stream: the 64-byte-aligned part of o with non-temporal stores (the caller fences).  Used by
 * nk_pointwise_f32_avx512. */
bool nk_act_f32_avx512(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream);

#ifdef __cplusplus
}
#endif
#endif /* NK_NORM_H */
