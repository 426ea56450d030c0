// ops_optim.cpp - the fused optimizer ops torch.optim calls with fused=True: _fused_adamw_ and
// _fused_adam_, one nk_adam_run launch per parameter tensor.
#include "neuron.h"

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <vector>

namespace neuron {

// state_steps, grad_scale and found_inf live on the device; their values are read once (one
// synchronization) before any update is launched.
static void fused_adam(const char *name, bool adamw, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
		       at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr, double beta1,
		       double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
		       const std::optional<at::Tensor> &grad_scale, const std::optional<at::Tensor> &found_inf)
{
	size_t n = params.size();
	TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n &&
			    (!amsgrad || max_exp_avg_sqs.size() == n),
		    name, ": tensor lists must have the same length");
	if (n == 0)
		return;
	if (found_inf.has_value() && found_inf->defined() && found_inf->item<double>() != 0)
		return;
	double scale = grad_scale.has_value() && grad_scale->defined() ? grad_scale->item<double>() : 1.0;
	std::vector<int64_t> step(n);
	for (size_t i = 0; i < n; i++)
		step[i] = (int64_t)steps[i].item<double>();
	for (size_t i = 0; i < n; i++) {
		const at::Tensor &p = params[i];
		std::initializer_list<const at::Tensor *> all = {&grads[i], &exp_avgs[i], &exp_avg_sqs[i]};
		TORCH_CHECK(p.device().type() == kDev && p.is_contiguous(), name, ": parameters must be contiguous neuron tensors, got ",
			    p.device(), p.is_contiguous() ? "" : " (non-contiguous)");
		for (const at::Tensor *t : all)
			TORCH_CHECK(t->device() == p.device() && t->scalar_type() == p.scalar_type() && t->is_contiguous() &&
					    t->numel() == p.numel(),
				    name, ": grad and state tensors must match their parameter (device ", p.device(), ", dtype ",
				    p.scalar_type(), ", ", p.numel(), " elements, contiguous)");
		if (amsgrad)
			TORCH_CHECK(max_exp_avg_sqs[i].sizes() == p.sizes() && max_exp_avg_sqs[i].is_contiguous(), name,
				    ": max_exp_avg_sqs must match the parameter");
		if (p.numel() == 0)
			continue;
		nk_adam_args_t a{};
		a.dtype = nk_dtype(p.scalar_type(), name);
		a.n = p.numel();
		a.lr = lr, a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.weight_decay = weight_decay;
		a.step = step[i];
		a.adamw = adamw, a.amsgrad = amsgrad, a.maximize = maximize;
		a.grad_scale = scale;
		a.param = p.data_ptr();
		a.exp_avg = exp_avgs[i].data_ptr();
		a.exp_avg_sq = exp_avg_sqs[i].data_ptr();
		a.max_exp_avg_sq = amsgrad ? max_exp_avg_sqs[i].data_ptr() : nullptr;
		a.grad = grads[i].const_data_ptr();
		launch(current_queue(p.device().index()), nk_adam_run, a, name);
	}
}

#define FUSED_ADAM(fn, opname, ADAMW)                                                                                  \
	static void fn(at::TensorList p, at::TensorList g, at::TensorList m, at::TensorList v, at::TensorList vmax,    \
		       at::TensorList steps, double lr, double b1, double b2, double wd, double eps, bool amsgrad,       \
		       bool maximize, const std::optional<at::Tensor> &gs, const std::optional<at::Tensor> &fi)        \
	{                                                                                                              \
		NEURON_TRACK("aten::" opname);                                                                         \
		fused_adam("aten::" opname, ADAMW, p, g, m, v, vmax, steps, lr, b1, b2, wd, eps, amsgrad, maximize, gs, fi); \
	}                                                                                                              \
	static void fn##_tlr(at::TensorList p, at::TensorList g, at::TensorList m, at::TensorList v, at::TensorList vmax, \
			     at::TensorList steps, const at::Tensor &lr, double b1, double b2, double wd, double eps,   \
			     bool amsgrad, bool maximize, const std::optional<at::Tensor> &gs,                         \
			     const std::optional<at::Tensor> &fi)                                                      \
	{                                                                                                              \
		NEURON_TRACK("aten::" opname ".tensor_lr");                                                            \
		fused_adam("aten::" opname, ADAMW, p, g, m, v, vmax, steps, lr.item<double>(), b1, b2, wd, eps, amsgrad, \
			   maximize, gs, fi);                                                                          \
	}
FUSED_ADAM(fused_adamw_, "_fused_adamw_", true)
FUSED_ADAM(fused_adam_, "_fused_adam_", false)

} // namespace neuron

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("_fused_adamw_", neuron::fused_adamw_);
	m.impl("_fused_adamw_.tensor_lr", neuron::fused_adamw__tlr);
	m.impl("_fused_adam_", neuron::fused_adam_);
	m.impl("_fused_adam_.tensor_lr", neuron::fused_adam__tlr);
}
