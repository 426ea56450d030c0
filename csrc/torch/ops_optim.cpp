// ops_optim.cpp - the fused optimizer ops torch.optim calls with fused=True: _fused_adamw_,
// _fused_adam_ (nk_adam_run), _fused_sgd_ (nk_sgd_run) and _fused_adagrad_ (nk_adagrad_run), one
// launch per parameter tensor, on tensors of any strides.
#include "neuron.h"
#include "out.h"
#include "ops_util.h"

extern "C" {
#include "nk_optim.h"
}

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <vector>

namespace neuron {

// One element order for the tensors of one fused update: the reference's own strides when it is
// non-overlapping and dense (its n elements then fill [data_ptr, data_ptr + n) in some order), else
// contiguous.  operand(t) is t itself when t is dense with those strides, else a copy of t laid out so;
// write_back copies such a copy into t (queued after the kernel, on the same queue).
struct DenseLayout {
	at::Tensor ref;
	bool keep;
	explicit DenseLayout(const at::Tensor &r) : ref(r), keep(r.is_non_overlapping_and_dense()) {}
	bool fits(const at::Tensor &t) const
	{
		return keep ? t.strides() == ref.strides() : t.is_contiguous();
	}
	at::Tensor operand(const at::Tensor &t) const
	{
		if (fits(t))
			return t;
		at::Tensor c = keep ? at::empty_strided(ref.sizes(), ref.strides(), t.options()) : at::empty(ref.sizes(), t.options());
		c.copy_(t);
		return c;
	}
	static void write_back(const at::Tensor &t, const at::Tensor &w)
	{
		if (!w.is_same(t))
			const_cast<at::Tensor &>(t).copy_(w);
	}
};

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
		TORCH_CHECK(p.device().type() == kDev, name, ": parameters must be neuron tensors, got ", p.device());
		for (const at::Tensor *t : all)
			TORCH_CHECK(t->device() == p.device() && t->scalar_type() == p.scalar_type() && t->sizes() == p.sizes(),
				    name, ": grad and state tensors must match their parameter (device ", p.device(), ", dtype ",
				    p.scalar_type(), ", sizes ", p.sizes(), ")");
		if (amsgrad)
			TORCH_CHECK(max_exp_avg_sqs[i].device() == p.device() && max_exp_avg_sqs[i].scalar_type() == p.scalar_type() &&
					    max_exp_avg_sqs[i].sizes() == p.sizes(),
				    name, ": max_exp_avg_sqs must match the parameter");
		if (p.numel() == 0)
			continue;
		// The kernel updates n elements in place, in the same order for all five tensors: each runs on
		// its own storage when it is dense with the layout of the one that sets it (the parameter when
		// dense, else a contiguous copy of it), otherwise on a copy that the states are written back from.
		DenseLayout lay(p);
		at::Tensor pw = lay.operand(p), mw = lay.operand(exp_avgs[i]), vw = lay.operand(exp_avg_sqs[i]);
		at::Tensor xw = amsgrad ? lay.operand(max_exp_avg_sqs[i]) : at::Tensor();
		at::Tensor gw = lay.operand(grads[i]);
		nk_adam_args_t a{};
		a.dtype = nk_dtype(p.scalar_type(), name);
		a.n = p.numel();
		a.lr = lr, a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.weight_decay = weight_decay;
		a.step = step[i];
		a.adamw = adamw, a.amsgrad = amsgrad, a.maximize = maximize;
		a.grad_scale = scale;
		a.param = pw.data_ptr();
		a.exp_avg = mw.data_ptr();
		a.exp_avg_sq = vw.data_ptr();
		a.max_exp_avg_sq = amsgrad ? xw.data_ptr() : nullptr;
		a.grad = gw.const_data_ptr();
		launch(current_queue(p.device().index()), nk_adam_run, a, name);
		lay.write_back(params[i], pw);
		lay.write_back(exp_avgs[i], mw);
		lay.write_back(exp_avg_sqs[i], vw);
		if (amsgrad)
			lay.write_back(max_exp_avg_sqs[i], xw);
		// the CPU's fused step leaves the unscaled grad behind (its float value rounded to the grad's dtype)
		if (scale != 1.0)
			grads[i].div_(scale);
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

// Checks shared by the SGD / Adagrad steps: neuron parameters; grads and states of the parameter's
// device, dtype and sizes.
static void check_like(const char *name, const at::Tensor &p, std::initializer_list<const at::Tensor *> ts)
{
	TORCH_CHECK(p.device().type() == kDev, name, ": parameters must be neuron tensors, got ", p.device());
	for (const at::Tensor *t : ts)
		TORCH_CHECK(t->device() == p.device() && t->scalar_type() == p.scalar_type() && t->sizes() == p.sizes(), name,
			    ": grad and state tensors must match their parameter (device ", p.device(), ", dtype ", p.scalar_type(),
			    ", sizes ", p.sizes(), ")");
}

// found_inf set: the step is skipped (GradScaler); else the grad scale (1: none).  One read-back each.
static bool amp_skip(const std::optional<at::Tensor> &grad_scale, const std::optional<at::Tensor> &found_inf, double &scale)
{
	if (found_inf.has_value() && found_inf->defined() && found_inf->item<double>() != 0)
		return true;
	scale = grad_scale.has_value() && grad_scale->defined() ? grad_scale->item<double>() : 1.0;
	return false;
}

static void fused_sgd(const char *name, at::TensorList params, at::TensorList grads, at::TensorList bufs, double weight_decay,
		      double momentum, double lr, double dampening, bool nesterov, bool maximize, bool first_step,
		      const std::optional<at::Tensor> &grad_scale, const std::optional<at::Tensor> &found_inf)
{
	size_t n = params.size();
	bool mom = momentum != 0.0;
	TORCH_CHECK(grads.size() == n && (mom ? bufs.size() == n : bufs.empty()), name,
		    ": expected as many grads (and, with momentum, momentum buffers) as parameters");
	double scale = 1.0;
	if (n == 0 || amp_skip(grad_scale, found_inf, scale))
		return;
	for (size_t i = 0; i < n; i++) {
		const at::Tensor &p = params[i];
		if (mom)
			check_like(name, p, {&grads[i], &bufs[i]});
		else
			check_like(name, p, {&grads[i]});
		if (p.numel() == 0)
			continue;
		DenseLayout lay(p);
		at::Tensor pw = lay.operand(p), gw = lay.operand(grads[i]), bw = mom ? lay.operand(bufs[i]) : at::Tensor();
		nk_sgd_args_t a{};
		a.dtype = nk_dtype(p.scalar_type(), name);
		a.n = p.numel();
		a.lr = lr, a.weight_decay = weight_decay, a.momentum = momentum, a.dampening = dampening, a.grad_scale = scale;
		a.nesterov = nesterov, a.maximize = maximize, a.first_step = first_step;
		a.param = pw.data_ptr(), a.grad = gw.data_ptr(), a.momentum_buf = mom ? bw.data_ptr() : nullptr;
		launch(current_queue(p.device().index()), nk_sgd_run, a, name);
		lay.write_back(p, pw);
		if (scale != 1.0)
			lay.write_back(grads[i], gw);
		if (mom)
			lay.write_back(bufs[i], bw);
	}
}

static void fused_adagrad(const char *name, at::TensorList params, at::TensorList grads, at::TensorList sums, at::TensorList steps,
			  double lr, double lr_decay, double weight_decay, double eps, bool maximize,
			  const std::optional<at::Tensor> &grad_scale, const std::optional<at::Tensor> &found_inf)
{
	size_t n = params.size();
	TORCH_CHECK(grads.size() == n && sums.size() == n && steps.size() == n, name, ": tensor lists must have the same length");
	double scale = 1.0;
	if (n == 0 || amp_skip(grad_scale, found_inf, scale))
		return;
	std::vector<double> step(n);
	for (size_t i = 0; i < n; i++)
		step[i] = steps[i].item<double>();
	for (size_t i = 0; i < n; i++) {
		const at::Tensor &p = params[i];
		check_like(name, p, {&grads[i], &sums[i]});
		if (p.numel() == 0)
			continue;
		DenseLayout lay(p);
		at::Tensor pw = lay.operand(p), gw = lay.operand(grads[i]), sw = lay.operand(sums[i]);
		nk_adagrad_args_t a{};
		a.dtype = nk_dtype(p.scalar_type(), name);
		a.n = p.numel();
		a.lr = lr, a.lr_decay = lr_decay, a.weight_decay = weight_decay, a.eps = eps, a.grad_scale = scale;
		a.step = step[i], a.maximize = maximize;
		a.param = pw.data_ptr(), a.grad = gw.data_ptr(), a.state_sum = sw.data_ptr();
		launch(current_queue(p.device().index()), nk_adagrad_run, a, name);
		lay.write_back(p, pw);
		lay.write_back(sums[i], sw);
		if (scale != 1.0)
			lay.write_back(grads[i], gw);
	}
}

static void fused_sgd_(at::TensorList p, at::TensorList g, at::TensorList b, double wd, double mom, double lr, double damp, bool nesterov,
		       bool maximize, bool first, const std::optional<at::Tensor> &gs, const std::optional<at::Tensor> &fi)
{
	NEURON_TRACK("aten::_fused_sgd_");
	fused_sgd("aten::_fused_sgd_", p, g, b, wd, mom, lr, damp, nesterov, maximize, first, gs, fi);
}
static void fused_sgd__tlr(at::TensorList p, at::TensorList g, at::TensorList b, double wd, double mom, const at::Tensor &lr, double damp,
			   bool nesterov, bool maximize, bool first, const std::optional<at::Tensor> &gs, const std::optional<at::Tensor> &fi)
{
	NEURON_TRACK("aten::_fused_sgd_.tensor_lr");
	fused_sgd("aten::_fused_sgd_", p, g, b, wd, mom, lr.item<double>(), damp, nesterov, maximize, first, gs, fi);
}
static void fused_adagrad_(at::TensorList p, at::TensorList g, at::TensorList s, at::TensorList steps, double lr, double lr_decay, double wd,
			   double eps, bool maximize, const std::optional<at::Tensor> &gs, const std::optional<at::Tensor> &fi)
{
	NEURON_TRACK("aten::_fused_adagrad_");
	fused_adagrad("aten::_fused_adagrad_", p, g, s, steps, lr, lr_decay, wd, eps, maximize, gs, fi);
}
static void fused_adagrad__tlr(at::TensorList p, at::TensorList g, at::TensorList s, at::TensorList steps, const at::Tensor &lr,
			       double lr_decay, double wd, double eps, bool maximize, const std::optional<at::Tensor> &gs,
			       const std::optional<at::Tensor> &fi)
{
	NEURON_TRACK("aten::_fused_adagrad_.tensor_lr");
	fused_adagrad("aten::_fused_adagrad_", p, g, s, steps, lr.item<double>(), lr_decay, wd, eps, maximize, gs, fi);
}

// ---- AMP grad scaler -------------------------------------------------------------------------------

static void check_amp_scalar(const char *op, const at::Tensor &t, const char *what, at::ScalarType dt)
{
	TORCH_CHECK(t.device().type() == kDev, op, ": ", what, " must be a neuron tensor, got ", t.device());
	TORCH_CHECK(t.numel() == 1, op, ": ", what, " must be a 1-element tensor, got ", t.sizes());
	TORCH_CHECK(t.scalar_type() == dt, op, ": ", what, " must be a ", dt, " tensor, got ", t.scalar_type());
}

static void amp_unscale(at::TensorList self, at::Tensor &found_inf, const at::Tensor &inv_scale)
{
	NEURON_TRACK("aten::_amp_foreach_non_finite_check_and_unscale_");
	const char *op = "_amp_foreach_non_finite_check_and_unscale_";
	check_amp_scalar(op, found_inf, "found_inf", at::kFloat);
	check_amp_scalar(op, inv_scale, "inv_scale", at::kFloat);
	TORCH_CHECK(found_inf.is_contiguous() && inv_scale.is_contiguous(), op, ": found_inf and inv_scale must be contiguous");
	for (const at::Tensor &t : self) {
		TORCH_CHECK(t.device() == found_inf.device(), op, ": all tensors must be on ", found_inf.device(), ", got one on ", t.device());
		check_float(op, t, "gradient");
	}
	c10::DeviceGuard g(found_inf.device());
	for (const at::Tensor &t : self) {
		if (t.numel() == 0)
			continue;
		bool direct = t.is_contiguous();
		at::Tensor tc = direct ? t : t.contiguous();
		nk_amp_unscale_args_t a{};
		a.dtype = nk_dtype(t.scalar_type(), op);
		a.n = tc.numel(), a.x = tc.data_ptr();
		a.inv_scale = inv_scale.const_data_ptr<float>(), a.found_inf = found_inf.data_ptr<float>();
		launch(queue_for(found_inf), nk_amp_unscale_run, a, op);
		if (!direct)
			const_cast<at::Tensor &>(t).copy_(tc);
	}
}

static at::Tensor &amp_update(at::Tensor &scale, at::Tensor &tracker, const at::Tensor &found_inf, double growth, double backoff, int64_t interval)
{
	NEURON_TRACK("aten::_amp_update_scale_");
	const char *op = "_amp_update_scale_";
	check_amp_scalar(op, scale, "current_scale", at::kFloat);
	check_amp_scalar(op, tracker, "growth_tracker", at::kInt);
	check_amp_scalar(op, found_inf, "found_inf", at::kFloat);
	TORCH_CHECK(scale.device() == tracker.device() && scale.device() == found_inf.device(), op, ": tensors must be on one device");
	TORCH_CHECK(scale.is_contiguous() && tracker.is_contiguous(), op, ": current_scale and growth_tracker must be contiguous");
	c10::DeviceGuard g(scale.device());
	nk_amp_update_args_t a{};
	a.scale = scale.data_ptr<float>(), a.growth_tracker = tracker.data_ptr<int32_t>(), a.found_inf = found_inf.const_data_ptr<float>();
	a.growth = growth, a.backoff = backoff, a.interval = interval;
	launch(queue_for(scale), nk_amp_update_run, a, op);
	return scale;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("_fused_adamw_", neuron::fused_adamw_);
	m.impl("_fused_adamw_.tensor_lr", neuron::fused_adamw__tlr);
	m.impl("_fused_adam_", neuron::fused_adam_);
	m.impl("_fused_adam_.tensor_lr", neuron::fused_adam__tlr);
	m.impl("_fused_sgd_", neuron::fused_sgd_);
	m.impl("_fused_sgd_.tensor_lr", neuron::fused_sgd__tlr);
	m.impl("_fused_adagrad_", neuron::fused_adagrad_);
	m.impl("_fused_adagrad_.tensor_lr", neuron::fused_adagrad__tlr);
	NEURON_IMPL(m, "_amp_foreach_non_finite_check_and_unscale_", amp_unscale);
	NEURON_IMPL(m, "_amp_update_scale_", amp_update);
}
