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
	/* x = ((x - shift)*scale + bias) [* w] [+ b] in place (w, b may be NULL) */
	void (*affine)(float *x, int64_t n, float shift, float scale, float bias, const float *w, const float *b);
	/* dy := dy*w (when dy and w), x := (x - mean)*rstd (unless mean == 0 and rstd == 1) */
	void (*g_xhat)(float *dy, float *x, const float *w, int64_t n, float mean, float rstd);
	/* g = rstd*(g - mg - xhat*mgx) */
	void (*dx_from)(float *g, const float *xhat, int64_t n, float rstd, float mg, float mgx);
	/* sw += dy*xhat, sb += dy (either may be NULL) */
	void (*partials)(float *sw, float *sb, const float *dy, const float *xhat, int64_t n);
} nk_lnops_t;

extern const nk_lnops_t nk_lnops_avx512; /* only when nk_cpu_avx512() */

#endif /* NK_LNOPS_IMPL_H */
