/* nk_weight_norm.h - kernel family: weight normalization (aten _weight_norm_interface and its backward),
 * in weight_norm.c.  Same conventions as nk.h (argument struct, int nk_<op>_run(void *args), a _ref twin);
 * included by its users only, like nk_rnn.h.
 *
 * v is a contiguous [outer, D, inner] (D = v.size(dim)); per index d of D, over all its outer*inner
 * elements: norm[d] = ||v[:, d, :]||_2 and w = v * g[d] / norm[d].  g, w, v: dtype (f32, f64, bf16, f16);
 * norm: ndtype (f64 for f64, else f32, as aten).  Sums are taken in double in a fixed order (results do not
 * depend on the thread count).  Backward: gg[d] = sum(gw * v)[d] / norm[d],
 * gv = g[d] / norm[d] * (gw - v * gg[d] / norm[d]); gv, gg may each be NULL.  Threading: blocks of d. */
#ifndef NK_WEIGHT_NORM_H
#define NK_WEIGHT_NORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	int dtype, ndtype;
	int64_t outer, D, inner;
	const void *v, *g;
	void *w, *norm;
} nk_weight_norm_args_t;
int nk_weight_norm_run(void *args);
int nk_weight_norm_ref(void *args);

typedef struct {
	int dtype, ndtype;
	int64_t outer, D, inner;
	const void *gw, *v, *g, *norm;
	void *gv, *gg;
} nk_weight_norm_bwd_args_t;
int nk_weight_norm_bwd_run(void *args);
int nk_weight_norm_bwd_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif
