/* nk_activation.h - kernel family: the small activations and their backward, rrelu
 * (activation.c), and the dedicated AVX-512 gelu/silu loops of the pointwise family
 * (pointwise_act_avx512.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_ACTIVATION_H
#define NK_ACTIVATION_H

#ifdef __cplusplus
extern "C" {
#endif

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


/* pointwise_act_avx512.c (call only when nk_cpu_avx512()): o = op(x[, y]) on dense f32 buffers for gelu (ia: 0 erf,
 * 1 tanh), gelu_backward (x = grad, y = input), silu, silu_backward; false (nothing written) for other
 * ops.  stream: the 64-byte-aligned part of o with non-temporal stores (the caller fences).  Used by
 * nk_pointwise_f32_avx512. */
bool nk_act_f32_avx512(int op, int64_t ia, float *o, const float *x, const float *y, int64_t n, bool stream);

#ifdef __cplusplus
}
#endif
#endif /* NK_ACTIVATION_H */
