/* nk_softmax_impl.h - row primitives on f32 buffers shared by softmax.c and attention.c: the portable
 * versions live in softmax.c, the AVX-512 ones in softmax_avx512.c.  Internal to csrc/kernels. */
#ifndef NK_SOFTMAX_IMPL_H
#define NK_SOFTMAX_IMPL_H

#include <stdint.h>

typedef struct {
	/* max of x[0..n) (-inf for n = 0); NaN elements are skipped */
	float (*max)(const float *x, int64_t n);
	/* x[i] = exp(x[i] - sub) in place (exp(-inf) = 0, NaN stays NaN); returns the sum */
	float (*exp_sum)(float *x, int64_t n, float sub);
} nk_rowops_t;

float nk_row_max_ref(const float *x, int64_t n);
float nk_row_exp_sum_ref(float *x, int64_t n, float sub);
float nk_row_max_avx512(const float *x, int64_t n);
float nk_row_exp_sum_avx512(float *x, int64_t n, float sub);

extern const nk_rowops_t nk_rowops_ref;
extern const nk_rowops_t nk_rowops_avx512; /* only when nk_cpu_avx512() */
/* The best table for this CPU; the portable one when NEURON_KERNELS=ref. */
const nk_rowops_t *nk_rowops(void);

#endif /* NK_SOFTMAX_IMPL_H */
