/* nk_lnops_impl.h - the f32 row primitives of layernorm.c (forward and backward), as a table: the portable
 * versions live in layernorm.c, the AVX-512 ones in layernorm_avx512.c (same formulas, 16-lane f32 partial
 * sums folded in f64, masked tails).  Internal to csrc/kernels. */
#ifndef NK_LNOPS_IMPL_H
#define NK_LNOPS_IMPL_H

#include <stdint.h>

typedef struct {
	/* sum of x[0..n), f32 lanes folded in f64 */
	double (*sum)(const float *x, int64_t n);
	/* sum of (x - m)^2 */
	double (*sqdev)(const float *x, int64_t n, float m);
	/* sum of x*y */
	double (*dot)(const float *x, const float *y, int64_t n);
	/* y = ((x - shift)*scale + bias) [* w] [+ b] (w, b may be NULL; y may be x; stream: non-temporal
	 * stores, the caller fences) */
	void (*affine)(float *y, const float *x, int64_t n, float shift, float scale, float bias, const float *w,
		       const float *b, int stream);
	/* dy := dy*w (when dy and w), x := (x - mean)*rstd (unless mean == 0 and rstd == 1) */
	void (*g_xhat)(float *dy, float *x, const float *w, int64_t n, float mean, float rstd);
	/* g = rstd*(g - mg - xhat*mgx) */
	void (*dx_from)(float *g, const float *xhat, int64_t n, float rstd, float mg, float mgx);
	/* sw += dy*xhat, sb += dy (either may be NULL) */
	void (*partials)(float *sw, float *sb, const float *dy, const float *xhat, int64_t n);
	/* Fused layer-norm backward, first pass over a row: with xhat = (x - mean)*rstd and g = dy*w (w may
	 * be NULL): *sg += sum g, *sgx += sum g*xhat (f32 lanes folded in f64); sw += dy*xhat, sb += dy
	 * (either may be NULL). */
	void (*ln_bwd_sums)(const float *dy, const float *x, const float *w, int64_t n, float mean, float rstd,
			    double *sg, double *sgx, float *sw, float *sb);
	/* Second pass: dx = rstd*(g - mg - xhat*mgx) from dy, x (stream: non-temporal stores, the caller
	 * fences). */
	void (*ln_bwd_dx)(float *dx, const float *dy, const float *x, const float *w, int64_t n, float mean, float rstd,
			  float mg, float mgx, int stream);
	/* Both passes of the layer-norm backward for nr whole f32 rows of n (row r at dy + r*n, x + r*n,
	 * dx + r*n; mean[r], rstd[r]): ln_bwd_sums then ln_bwd_dx for each row, the rows' terms added into
	 * sw, sb in row order (so the same values as row by row).  dx may be NULL (then only sw, sb; w is
	 * then unused), w, sw, sb may be NULL. */
	void (*bwd_rows)(float *dx, const float *dy, const float *x, const float *w, int64_t nr, int64_t n,
			 const float *mean, const float *rstd, float *sw, float *sb, int stream);
	/* Layer-norm forward of nr whole f32 rows of n (row r at x + r*n, y + r*n): the row's mean and
	 * rstd = 1/sqrt(var + eps) (biased var, f64 from f32 lanes) into mean[r], rstd[r] (either may be
	 * NULL) and y = (x - mean)*rstd [* w] [+ b] (w, b may be NULL; stream as above). */
	void (*fwd_rows)(float *y, const float *x, const float *w, const float *b, int64_t nr, int64_t n, double eps,
			 float *mean, float *rstd, int stream);
	/* y = x*s [* w] (rms norm forward; stream as above) */
	void (*scale_w)(float *y, const float *x, int64_t n, float s, const float *w, int stream);
	/* sum of dy*w*x (w may be NULL) */
	double (*dot3)(const float *dy, const float *w, const float *x, int64_t n);
	/* rms norm backward: dx = rstd*(dy*w - x*c) (dx may be NULL), sw += dy*(x*rstd) (sw may be NULL) */
	void (*rms_dx)(float *dx, const float *dy, const float *x, const float *w, int64_t n, float rstd, float c,
		       float *sw, int stream);
} nk_lnops_t;

extern const nk_lnops_t nk_lnops_ref;
extern const nk_lnops_t nk_lnops_avx512; /* only where the dispatch context chose it */
/* The dispatch context's table (the portable one when NEURON_KERNELS=ref or without AVX-512); used by
 * layernorm.c and by rms norm in rmsnorm.c. */
const nk_lnops_t *nk_lnops(void);

#endif /* NK_LNOPS_IMPL_H */
