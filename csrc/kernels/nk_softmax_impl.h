/* nk_softmax_impl.h - row primitives on f32 buffers shared by softmax.c and attention.c: the portable
 * versions live in softmax.c, the AVX-512 ones in softmax_avx512.c, the AVX2 ones in softmax_avx2.c.  Internal to csrc/kernels. */
#ifndef NK_SOFTMAX_IMPL_H
#define NK_SOFTMAX_IMPL_H

#include <stdint.h>

typedef struct {
	/* max of x[0..n) (-inf for n = 0); NaN elements are skipped */
	float (*max)(const float *x, int64_t n);
	/* x[i] = exp(x[i] - sub) in place (exp(-inf) = 0, NaN stays NaN); returns the sum */
	float (*exp_sum)(float *x, int64_t n, float sub);
	/* One whole f32 row, x -> y (x and y may alias): softmax or log_softmax.  tmp: n floats of scratch,
	 * used only when stream (y is then written with non-temporal stores, the caller fences); without
	 * stream any n works and tmp may be NULL. */
	void (*softmax_row)(const float *x, float *y, float *tmp, int64_t n, int log, int stream);
	/* One whole f32 row of the backward: dx = y*(dy - sum(dy*y)), log: dx = dy - exp(y)*sum(dy). */
	void (*softmax_bwd_row)(const float *dy, const float *y, float *dx, int64_t n, int log, int stream);
} nk_rowops_t;

float nk_row_max_ref(const float *x, int64_t n);
float nk_row_exp_sum_ref(float *x, int64_t n, float sub);
float nk_row_max_avx512(const float *x, int64_t n);
float nk_row_exp_sum_avx512(float *x, int64_t n, float sub);
void nk_softmax_row_ref(const float *x, float *y, float *tmp, int64_t n, int log, int stream);
void nk_softmax_bwd_row_ref(const float *dy, const float *y, float *dx, int64_t n, int log, int stream);

extern const nk_rowops_t nk_rowops_ref;
extern const nk_rowops_t nk_rowops_avx512; /* only where the dispatch context chose it */
extern const nk_rowops_t nk_rowops_avx2;   /* softmax_avx2.c: the avx2 level's */
float nk_row_max_avx2(const float *x, int64_t n);
float nk_row_exp_sum_avx2(float *x, int64_t n, float sub);
/* The dispatch context's table; the portable one when NEURON_KERNELS=ref. */
const nk_rowops_t *nk_rowops(void);

#endif /* NK_SOFTMAX_IMPL_H */
