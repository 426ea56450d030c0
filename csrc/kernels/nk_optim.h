/* nk_optim.h - fused SGD and Adagrad steps over n dense elements (optim.c; Adam is in nk.h), and the
 * AMP grad scaler (grad_scaler.c).
 *
 * The formulas and operation order of PyTorch's CPU fused kernels (aten/src/ATen/native/cpu/
 * FusedSGDKernel.cpp, FusedAdagradKernel.cpp, their vectorized bodies: fused multiply-adds where they
 * use vec::fmadd), computed in float for f32/bf16/f16 (bf16/f16 rounded back once per step) and in
 * double for f64.  param, grad and the state have one dtype and the same n elements in the same order.
 * grad_scale != 1: grad is divided by it and the quotient is stored back into grad, as the CPU does.
 */
#ifndef NK_OPTIM_H
#define NK_OPTIM_H

#include "nk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* g = grad / grad_scale; g = -g if maximize; g = fma(param, weight_decay, g) if weight_decay != 0;
 * with momentum_buf: buf = g on the first step, else buf = fma(1 - dampening, g, buf * momentum);
 * g = nesterov ? fma(buf, momentum, g) : buf;  then param = param + g * -lr. */
typedef struct {
	int dtype;
	int64_t n;
	double lr, weight_decay, momentum, dampening, grad_scale;
	bool nesterov, maximize, first_step;
	void *param, *grad, *momentum_buf; /* momentum_buf NULL: momentum == 0 */
} nk_sgd_args_t;
int nk_sgd_run(void *args);
int nk_sgd_ref(void *args);

/* g as for SGD (g = g + param * weight_decay); clr = lr / (1 + (step - 1) * lr_decay);
 * state_sum += g * g;  param = param - g / (sqrt(state_sum) + eps) * clr. */
typedef struct {
	int dtype;
	int64_t n;
	double lr, lr_decay, weight_decay, eps, grad_scale;
	double step; /* already incremented (1 on the first step) */
	bool maximize;
	void *param, *grad, *state_sum;
} nk_adagrad_args_t;
int nk_adagrad_run(void *args);
int nk_adagrad_ref(void *args);

/* ---- AMP grad scaler (grad_scaler.c) --------------------------------------------------------- */
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

#ifdef __cplusplus
}
#endif

#endif
