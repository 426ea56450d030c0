/* nk_loss.h - kernel family: losses (loss.c): nll_loss, multi_margin_loss,
 * multilabel_margin_loss.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_LOSS_H
#define NK_LOSS_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- nll_loss on logp [N, C] (contiguous), target [N] i64 ------------------------------------- */
enum { NK_REDUCTION_NONE = 0, NK_REDUCTION_MEAN = 1, NK_REDUCTION_SUM = 2 }; /* = at::Reduction */
/* out: [N] for NONE, else a scalar.  total_weight: scalar (sum of weights of non-ignored targets).
 * weight [C] may be NULL.  A target outside [0, C) other than ignore_index fails the kernel. */
typedef struct {
	int dtype;
	int64_t N, C, ignore_index;
	int reduction;
	const void *logp, *target, *weight;
	void *out, *total_weight;
} nk_nll_args_t;
int nk_nll_run(void *args);
/* grad_in [N, C] is fully written.  grad_out is [N] for NONE, else a scalar. */
typedef struct {
	int dtype;
	int64_t N, C, ignore_index;
	int reduction;
	const void *grad_out, *target, *weight, *total_weight;
	void *grad_in;
} nk_nll_bwd_args_t;
int nk_nll_bwd_run(void *args);


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

#ifdef __cplusplus
}
#endif
#endif /* NK_LOSS_H */
