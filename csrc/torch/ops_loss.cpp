// ops_loss.cpp - losses: nll_loss (1-d and 2-d), mse, smooth_l1, huber, binary_cross_entropy,
// log_sigmoid, multi_margin and multilabel_margin (loss.c, loss2.c), forward and backward.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "nk_ctc_loss.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/all.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp2.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/logspace.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/nan_to_num_ops.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/std.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/var.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

// ---- losses composed of native elementwise and reduction kernels ------------------------------------

static at::Tensor reduce_loss(const at::Tensor &l, int64_t reduction)
{
	if (reduction == NK_REDUCTION_MEAN)
		return l.mean();
	if (reduction == NK_REDUCTION_SUM)
		return l.sum();
	return l;
}
static double loss_norm(const at::Tensor &x, int64_t reduction)
{
	return reduction == NK_REDUCTION_MEAN ? 1.0 / (double)x.numel() : 1.0;
}

// smooth_l1: z = |x - y|; z < beta ? 0.5 z^2 / beta : z - 0.5 beta (beta = 0: l1)
static at::Tensor smooth_l1_f(const at::Tensor &x, const at::Tensor &y, int64_t reduction, double beta)
{
	NEURON_TRACK("aten::smooth_l1_loss");
	TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
	at::Tensor z = (x - y).abs();
	if (beta == 0)
		return reduce_loss(z, reduction);
	at::Tensor quad = z * z * 0.5 / beta, lin = z - 0.5 * beta;
	return reduce_loss(at::where(z < beta, quad, lin), reduction);
}
static at::Tensor &smooth_l1_o(const at::Tensor &x, const at::Tensor &y, int64_t reduction, double beta, at::Tensor &o)
{
	NEURON_TRACK("aten::smooth_l1_loss.out");
	return into(o, smooth_l1_f(x, y, reduction, beta));
}
static at::Tensor smooth_l1_bw(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, int64_t reduction, double beta)
{
	NEURON_TRACK("aten::smooth_l1_loss_backward");
	double norm = loss_norm(x, reduction);
	at::Tensor d = x - y;
	if (beta == 0)
		return d.sign() * g * norm;
	// x < -beta: -norm*g; x > beta: norm*g; else norm*x*g/beta (aten's order of operations)
	at::Tensor inner = d * norm * g / beta;
	at::Tensor r = at::where(d < -beta, -norm * g, at::where(d > beta, norm * g, inner));
	return r.expand(x.sizes()).contiguous();
}
static at::Tensor &smooth_l1_bw_o(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, int64_t reduction, double beta, at::Tensor &o)
{
	NEURON_TRACK("aten::smooth_l1_loss_backward.grad_input");
	return into(o, smooth_l1_bw(g, x, y, reduction, beta));
}
// huber: z = |x - y|; z < delta ? 0.5 z^2 : delta (z - 0.5 delta)
static at::Tensor huber_f(const at::Tensor &x, const at::Tensor &y, int64_t reduction, double delta)
{
	NEURON_TRACK("aten::huber_loss");
	TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
	at::Tensor z = (x - y).abs();
	at::Tensor quad = z * z * 0.5, lin = (z - 0.5 * delta) * delta;
	return reduce_loss(at::where(z < delta, quad, lin), reduction);
}
static at::Tensor &huber_o(const at::Tensor &x, const at::Tensor &y, int64_t reduction, double delta, at::Tensor &o)
{
	NEURON_TRACK("aten::huber_loss.out");
	return into(o, huber_f(x, y, reduction, delta));
}
static at::Tensor huber_bw(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, int64_t reduction, double delta)
{
	NEURON_TRACK("aten::huber_loss_backward");
	double norm = loss_norm(x, reduction);
	at::Tensor d = x - y;
	at::Tensor r = at::where(d <= -delta, -norm * g * delta, at::where(d >= delta, norm * g * delta, d * norm * g));
	return r.expand(x.sizes()).contiguous();
}
static at::Tensor &huber_bw_o(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, int64_t reduction, double delta, at::Tensor &o)
{
	NEURON_TRACK("aten::huber_loss_backward.out");
	return into(o, huber_bw(g, x, y, reduction, delta));
}
// binary_cross_entropy: (y - 1) * max(log1p(-x), -100) - y * max(log(x), -100), times weight
static at::Tensor bce_f(const at::Tensor &x, const at::Tensor &y, const std::optional<at::Tensor> &w, int64_t reduction)
{
	NEURON_TRACK("aten::binary_cross_entropy");
	TORCH_CHECK(x.sizes() == y.sizes(), "Using a target size (", y.sizes(), ") that is different to the input size (", x.sizes(), ") is deprecated. Please ensure they have the same size.");
	if (x.numel()) {
		bool ok = PW("binary_cross_entropy", NK_OP_LOGICAL_AND, {x >= 0, x <= 1}, {}, Bool).all().item<bool>();
		TORCH_CHECK(ok, "all elements of input should be between 0 and 1");
	}
	at::Tensor l = (y - 1) * at::clamp_min(at::log1p(-x), -100) - y * at::clamp_min(x.log(), -100);
	if (w.has_value() && w->defined())
		l = l * *w;
	return reduce_loss(l, reduction);
}
static at::Tensor &bce_o(const at::Tensor &x, const at::Tensor &y, const std::optional<at::Tensor> &w, int64_t reduction, at::Tensor &o)
{
	NEURON_TRACK("aten::binary_cross_entropy.out");
	return into(o, bce_f(x, y, w, reduction));
}
static at::Tensor bce_bw(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, const std::optional<at::Tensor> &w, int64_t reduction)
{
	NEURON_TRACK("aten::binary_cross_entropy_backward");
	// grad * (x - y) / max((1 - x) * x, 1e-12) * weight, / numel for mean
	at::Tensor r = g * (x - y) / at::clamp_min((1 - x) * x, 1e-12);
	if (w.has_value() && w->defined())
		r = r * *w;
	if (reduction == NK_REDUCTION_MEAN)
		r = r / (double)x.numel();
	return r.expand(x.sizes()).contiguous();
}
static at::Tensor &bce_bw_o(const at::Tensor &g, const at::Tensor &x, const at::Tensor &y, const std::optional<at::Tensor> &w, int64_t reduction, at::Tensor &o)
{
	NEURON_TRACK("aten::binary_cross_entropy_backward.grad_input");
	return into(o, bce_bw(g, x, y, w, reduction));
}
// log_sigmoid: min(x, 0) - log1p(exp(-|x|)); buffer unused (empty, as aten's CUDA path)
static std::tuple<at::Tensor, at::Tensor> log_sigmoid_fwd(const at::Tensor &x)
{
	NEURON_TRACK("aten::log_sigmoid_forward");
	at::Tensor out = at::clamp_max(x, 0) - at::log1p(at::exp(-x.abs()));
	return {out, at::empty({0}, x.options())};
}
static std::tuple<at::Tensor &, at::Tensor &> log_sigmoid_fwd_o(const at::Tensor &x, at::Tensor &out, at::Tensor &buf)
{
	NEURON_TRACK("aten::log_sigmoid_forward.output");
	auto r = log_sigmoid_fwd(x);
	into(out, std::get<0>(r));
	return {out, buf};
}
static at::Tensor log_sigmoid_bw(const at::Tensor &g, const at::Tensor &x, const at::Tensor &buffer)
{
	NEURON_TRACK("aten::log_sigmoid_backward");
	// x < 0: g * (1 - z/(1+z)); else g * (z/(1+z)), z = exp(-|x|)
	at::Tensor z = at::exp(-x.abs()), q = z / (z + 1);
	return g * at::where(x < 0, 1 - q, q);
}
static at::Tensor &log_sigmoid_bw_o(const at::Tensor &g, const at::Tensor &x, const at::Tensor &buffer, at::Tensor &o)
{
	NEURON_TRACK("aten::log_sigmoid_backward.grad_input");
	return into(o, log_sigmoid_bw(g, x, buffer));
}

// ---- nll_loss2d: nll_loss on [N*H*W, C] (the input's class dim moved last) ---------------------------

static at::Tensor nll2d_rows(const at::Tensor &self)
{
	return self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)});
}
// aten's check_inputs_nll_loss2d, in its order and with its messages
static void check_nll2d(const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &w)
{
	TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ", target.dim());
	TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ", self.dim());
	TORCH_CHECK(!w.has_value() || !w->defined() || w->numel() == self.size(1), "weight tensor should be defined either for all or no classes");
	TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
		    "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
}
static std::tuple<at::Tensor, at::Tensor> nll2d_fwd(const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &w,
						     int64_t reduction, int64_t ignore_index)
{
	NEURON_TRACK("aten::nll_loss2d_forward");
	check_nll2d(self, target, w);
	at::Tensor x = nll2d_rows(self);
	auto r = at::nll_loss_forward(x, target.reshape({-1}), w, reduction, ignore_index);
	at::Tensor out = std::get<0>(r);
	if (reduction == NK_REDUCTION_NONE)
		out = out.view(target.sizes());
	return {out, std::get<1>(r)};
}
static std::tuple<at::Tensor &, at::Tensor &> nll2d_fwd_o(const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &w,
							  int64_t reduction, int64_t ignore_index, at::Tensor &out, at::Tensor &tw)
{
	NEURON_TRACK("aten::nll_loss2d_forward.output");
	auto r = nll2d_fwd(self, target, w, reduction, ignore_index);
	into(out, std::get<0>(r));
	into(tw, std::get<1>(r));
	return {out, tw};
}
static at::Tensor nll2d_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &w,
			    int64_t reduction, int64_t ignore_index, const at::Tensor &total_weight)
{
	NEURON_TRACK("aten::nll_loss2d_backward");
	check_nll2d(self, target, w);
	at::Tensor x = nll2d_rows(self);
	at::Tensor g = reduction == NK_REDUCTION_NONE ? grad.reshape({-1}) : grad;
	at::Tensor gi = at::nll_loss_backward(g, x, target.reshape({-1}), w, reduction, ignore_index, total_weight);
	return gi.view({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2}).contiguous();
}
static at::Tensor &nll2d_bwd_o(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &w,
			       int64_t reduction, int64_t ignore_index, const at::Tensor &total_weight, at::Tensor &gi)
{
	NEURON_TRACK("aten::nll_loss2d_backward.grad_input");
	return into(gi, nll2d_bwd(grad, self, target, w, reduction, ignore_index, total_weight));
}

// ---- nll_loss --------------------------------------------------------------------------------------

// aten's nll_loss_forward meta, then its CPU kernel's dtype checks (target Long or Byte; a weight of
// the input's dtype), with their messages
static void check_nll(const at::Tensor &self, const at::Tensor &target, const at::Tensor &weight)
{
	TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
	TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
	bool no_batch_dim = self.dim() == 1 && target.dim() == 0;
	TORCH_CHECK(no_batch_dim || (self.size(0) == target.size(0)), "size mismatch (got input: ", self.sizes(), ", target: ", target.sizes(), ")");
	int64_t C = self.size(-1);
	TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == C), "weight tensor should be defined either for all ", C,
		    " classes or no classes but got weight tensor of shape: ", weight.sizes());
	TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
		    "expected target dtype to be Long or Byte, but got ", target.scalar_type());
	TORCH_CHECK(!weight.defined() || weight.scalar_type() == self.scalar_type(), "expected scalar type ", self.scalar_type(),
		    " but found ", weight.scalar_type());
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()) && !at::isFloat8Type(self.scalar_type()),
				    "\"nll_loss\" not implemented for '", c10::toString(self.scalar_type()), "'");
}

static std::tuple<at::Tensor, at::Tensor> nll_fwd(const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &weight_opt, int64_t reduction, int64_t ignore_index)
{
	NEURON_TRACK("aten::nll_loss_forward");
	at::Tensor weight = weight_opt.has_value() ? *weight_opt : at::Tensor();
	check_nll(self, target, weight);
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.dim() == 1 ? self.unsqueeze(0) : self;
	x = x.contiguous();
	at::Tensor t = target.to(at::kLong).contiguous(), wc = weight.defined() ? weight.contiguous() : weight;
	int64_t N = x.size(0), C = x.size(1);
	at::Tensor out = reduction == NK_REDUCTION_NONE && self.dim() == 2 ? at::empty({N}, self.options()) : at::empty({}, self.options());
	at::Tensor tw = at::empty({}, self.options());
	nk_nll_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::nll_loss_forward");
	a.N = N, a.C = C, a.ignore_index = ignore_index, a.reduction = (int)reduction;
	a.logp = x.const_data_ptr(), a.target = t.const_data_ptr(), a.weight = wc.defined() ? wc.const_data_ptr() : nullptr;
	a.out = out.data_ptr(), a.total_weight = tw.data_ptr();
	launch(current_queue(self.device().index()), nk_nll_run, a, "aten::nll_loss_forward");
	return {out, tw};
}

static at::Tensor nll_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &weight_opt, int64_t reduction, int64_t ignore_index, const at::Tensor &total_weight)
{
	NEURON_TRACK("aten::nll_loss_backward");
	at::Tensor weight = weight_opt.has_value() ? *weight_opt : at::Tensor();
	check_nll(self, target, weight);
	c10::DeviceGuard g(self.device());
	int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(-1);
	at::Tensor gi = at::empty(self.sizes(), self.options());
	at::Tensor gc = grad.contiguous().to(self.scalar_type()), t = target.to(at::kLong).contiguous();
	at::Tensor wc = weight.defined() ? weight.contiguous() : weight;
	nk_nll_bwd_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::nll_loss_backward");
	a.N = N, a.C = C, a.ignore_index = ignore_index, a.reduction = (int)reduction;
	a.grad_out = gc.const_data_ptr(), a.target = t.const_data_ptr(), a.weight = wc.defined() ? wc.const_data_ptr() : nullptr;
	a.total_weight = total_weight.contiguous().const_data_ptr();
	a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(current_queue(self.device().index()), nk_nll_bwd_run, a, "aten::nll_loss_backward");
	return gi;
}

// ---- mse_loss: composed of native elementwise and reduction kernels ----------------------------------

static at::Tensor mse_loss_f(const at::Tensor &self, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::mse_loss");
	at::Tensor d = self - target;
	at::Tensor sq = d * d;
	if (reduction == NK_REDUCTION_MEAN)
		return sq.mean();
	if (reduction == NK_REDUCTION_SUM)
		return sq.sum();
	return sq;
}
static at::Tensor &mse_loss_out(const at::Tensor &self, const at::Tensor &target, int64_t reduction, at::Tensor &out)
{
	return into(out, mse_loss_f(self, target, reduction), OutRule::Cast);
}
static at::Tensor mse_loss_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::mse_loss_backward");
	double norm = reduction == NK_REDUCTION_MEAN ? 2.0 / (double)std::max<int64_t>(self.numel(), 1) : 2.0;
	return (self - target) * grad * norm;
}
static at::Tensor &mse_loss_bwd_out(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, int64_t reduction, at::Tensor &gi)
{
	return into(gi, mse_loss_bwd(grad, self, target, reduction), OutRule::Cast);
}

// ---- margin losses (loss2.c) -----------------------------------------------------------------------

static void margin_input(const char *op, const at::Tensor &x, const at::Tensor &target, int64_t &N, int64_t &C)
{
	check_float(op, x, "input");
	TORCH_CHECK(x.dim() <= 2 && (x.numel() > 0 || x.dim() == 2), op, ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", x.sizes());
	TORCH_CHECK(target.scalar_type() == at::kLong, op, ": expected target of dtype Long, got ", target.scalar_type());
	N = x.dim() < 2 ? 1 : x.size(0);
	C = x.dim() == 0 ? 1 : x.size(-1);
}

// aten's multi_margin_loss CPU checks in its order and with its messages: p, the shapes
// (multi_margin_loss_shape_check), then (for a non-empty input) the dtypes its kernel dispatches on:
// a floating input (f16/bf16 too, as on CUDA), a Long target and a weight of the input's dtype.
static void mm_check(const char *op, const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const at::Tensor &w,
		     int64_t &N, int64_t &C)
{
	TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "only p == 1 and p == 2 supported");
	int64_t nd = x.dim();
	TORCH_CHECK((nd == 2 && x.size(1) != 0) || (nd == 1 && x.size(0) != 0) || nd == 0,
		    "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", x.sizes());
	N = nd <= 1 ? 1 : x.size(0);
	C = nd == 0 ? 1 : x.size(-1);
	TORCH_CHECK(target.dim() <= 1 && target.numel() == N,
		    "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch size). "
		    "Expected target size [", N, "], but got ", target.sizes(), ". Input has shape ", x.sizes(), ".");
	TORCH_CHECK(!w.defined() || (w.dim() <= 1 && w.numel() == C), "inconsistent weight size, expected ", C, " but got ", w.sizes());
	if (x.numel() == 0)
		return;
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(x.scalar_type()) && !at::isFloat8Type(x.scalar_type()), "\"", op,
				    "\" not implemented for '", c10::toString(x.scalar_type()), "'");
	TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
	TORCH_CHECK(!w.defined() || w.scalar_type() == x.scalar_type(), "expected scalar type ", x.scalar_type(), " but found ", w.scalar_type());
}

static at::Tensor mm_loss(const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const c10::Scalar &margin, const std::optional<at::Tensor> &w_opt,
			  int64_t reduction)
{
	NEURON_TRACK("aten::multi_margin_loss");
	const char *op = "multi_margin_loss";
	int64_t N, C;
	at::Tensor w = opt(w_opt);
	mm_check(op, x, target, p, w, N, C);
	c10::DeviceGuard g(x.device());
	at::Tensor out = reduction == NK_REDUCTION_NONE && target.dim() > 0 ? at::empty({N}, x.options()) : at::empty({}, x.options());
	if (x.numel() == 0)
		return out;
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), wc = w.defined() ? w.contiguous() : w;
	nk_multi_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.p = p.toLong(), a.margin = margin.toDouble(), a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.w = cptr(wc), a.out = out.data_ptr();
	launch(queue_for(x), nk_multi_margin_run, a, op);
	return out;
}
static at::Tensor &mm_loss_o(const at::Tensor &x, const at::Tensor &t, const c10::Scalar &p, const c10::Scalar &m, const std::optional<at::Tensor> &w, int64_t r,
			     at::Tensor &out)
{
	copy_out(out, mm_loss(x, t, p, m, w, r));
	return out;
}
static at::Tensor mm_loss_bw(const at::Tensor &go, const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const c10::Scalar &margin,
			     const std::optional<at::Tensor> &w_opt, int64_t reduction)
{
	NEURON_TRACK("aten::multi_margin_loss_backward");
	const char *op = "multi_margin_loss_backward";
	int64_t N, C;
	at::Tensor w = opt(w_opt);
	mm_check(op, x, target, p, w, N, C);
	TORCH_CHECK(reduction != NK_REDUCTION_NONE || go.numel() == N || go.dim() == 0, op, ": grad_output of size ", go.sizes(), " for ", N, " rows");
	c10::DeviceGuard g(x.device());
	if (x.numel() == 0)
		return at::empty(x.sizes(), x.options());
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), wc = w.defined() ? w.contiguous() : w;
	at::Tensor gc = go.contiguous().to(x.scalar_type()), gi = at::empty(x.sizes(), x.options());
	nk_multi_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.p = p.toLong(), a.margin = margin.toDouble(), a.reduction = (int)reduction;
	if (reduction == NK_REDUCTION_NONE && go.dim() == 0)
		gc = gc.expand({N}).contiguous();
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.w = cptr(wc), a.grad_out = gc.const_data_ptr(), a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(queue_for(x), nk_multi_margin_bwd_run, a, op);
	return gi;
}
static at::Tensor &mm_loss_bw_o(const at::Tensor &go, const at::Tensor &x, const at::Tensor &t, const c10::Scalar &p, const c10::Scalar &m,
				const std::optional<at::Tensor> &w, int64_t r, at::Tensor &gi)
{
	copy_out(gi, mm_loss_bw(go, x, t, p, m, w, r));
	return gi;
}

static void ml_check(const char *op, const at::Tensor &x, const at::Tensor &target, int64_t &N, int64_t &C)
{
	margin_input(op, x, target, N, C);
	bool ok = x.dim() <= 1 ? (target.dim() <= 1 && target.numel() == C) : (target.dim() == 2 && target.size(0) == N && target.size(1) == C);
	TORCH_CHECK(ok, op, ": inconsistent target size: ", target.sizes(), " for input of size: ", x.sizes());
}
static std::tuple<at::Tensor, at::Tensor> ml_loss(const at::Tensor &x, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::multilabel_margin_loss_forward");
	const char *op = "multilabel_margin_loss_forward";
	int64_t N, C;
	ml_check(op, x, target, N, C);
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous(), tc = target.contiguous();
	at::Tensor out = reduction == NK_REDUCTION_NONE && target.dim() > 1 ? at::empty({N}, x.options()) : at::empty({}, x.options());
	at::Tensor ist = at::empty(target.sizes(), x.options());
	nk_multilabel_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.out = out.data_ptr(), a.is_target = ist.data_ptr();
	launch(queue_for(x), nk_multilabel_margin_run, a, op);
	return {out, ist};
}
static std::tuple<at::Tensor &, at::Tensor &> ml_loss_o(const at::Tensor &x, const at::Tensor &t, int64_t r, at::Tensor &out, at::Tensor &ist)
{
	auto res = ml_loss(x, t, r);
	copy_out(out, std::get<0>(res));
	copy_out(ist, std::get<1>(res));
	return {out, ist};
}
static at::Tensor ml_loss_bw(const at::Tensor &go, const at::Tensor &x, const at::Tensor &target, int64_t reduction, const at::Tensor &is_target)
{
	NEURON_TRACK("aten::multilabel_margin_loss_backward");
	const char *op = "multilabel_margin_loss_backward";
	int64_t N, C;
	ml_check(op, x, target, N, C);
	TORCH_CHECK(is_target.sizes() == target.sizes(), op, ": is_target of size ", is_target.sizes(), " does not match target ", target.sizes());
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), ic = is_target.contiguous().to(x.scalar_type());
	at::Tensor gc = go.contiguous().to(x.scalar_type()), gi = at::empty(x.sizes(), x.options());
	if (reduction == NK_REDUCTION_NONE && gc.numel() == 1 && N != 1)
		gc = gc.reshape({1}).expand({N}).contiguous();
	TORCH_CHECK(reduction != NK_REDUCTION_NONE || gc.numel() == N, op, ": grad_output of size ", go.sizes(), " for ", N, " rows");
	nk_multilabel_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.grad_out = gc.const_data_ptr();
	a.is_target = const_cast<void *>(ic.const_data_ptr()), a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(queue_for(x), nk_multilabel_margin_bwd_run, a, op);
	return gi;
}
static at::Tensor &ml_loss_bw_o(const at::Tensor &go, const at::Tensor &x, const at::Tensor &t, int64_t r, const at::Tensor &ist, at::Tensor &gi)
{
	copy_out(gi, ml_loss_bw(go, x, t, r, ist));
	return gi;
}

} // namespace neuron

using namespace neuron;

// ---- CTC loss (aten _ctc_loss / _ctc_loss_backward, both overloads; the reduction is ctc_loss's composite)

// The CPU kernel's argument checks and its per-batch target offsets; fills a (but its pointers) and
// returns the lens tensor (input lengths, target lengths, offsets) on log_probs' device.
static at::Tensor ctc_setup(const char *op, const at::Tensor &lp, const at::Tensor &tg, at::IntArrayRef il, at::IntArrayRef tl,
			    int64_t blank, nk_ctc_loss_args_t &a)
{
	const char *c = "ctc_loss_cpu";
	TORCH_CHECK(tg.scalar_type() == at::kLong || tg.scalar_type() == at::kInt, op, ": targets must be int or long, got ", tg.scalar_type());
	TORCH_CHECK(lp.dim() == 3, "Expected 3-dimensional tensor, but got ", lp.dim(), "-dimensional tensor for argument #1 'log_probs' (while checking arguments for ", c, ")");
	TORCH_CHECK(tg.dim() >= 1 && tg.dim() <= 2, "Expected 1 to 3 dimensions, but got ", tg.dim(), "-dimensional tensor for argument #2 'targets' (while checking arguments for ", c, ")");
	TORCH_CHECK(lp.scalar_type() == at::kFloat || lp.scalar_type() == at::kDouble, "\"ctc_loss_cpu\" not implemented for '", lp.scalar_type(), "'");
	int64_t N = lp.size(1), C = lp.size(2), T = lp.size(0), S = 0;
	TORCH_CHECK(0 <= blank && blank < C, "blank must be in label range");
	TORCH_CHECK((int64_t)il.size() == N, "input_lengths must be of size batch_size");
	TORCH_CHECK((int64_t)tl.size() == N, "target_lengths must be of size batch_size");
	std::vector<int64_t> lens(3 * N);
	int64_t pos = 0;
	for (int64_t b = 0; b < N; b++) {
		TORCH_CHECK(tl[b] >= 0, "Expected target_lengths to have value at least 0, but got value ", tl[b], " (while checking arguments for ", c, ")");
		lens[N + b] = tl[b];
		lens[2 * N + b] = tg.dim() == 1 ? pos : b * tg.size(1);
		pos += tl[b];
		S = std::max(S, tl[b]);
	}
	if (tg.dim() == 1) {
		TORCH_CHECK(tg.size(0) == pos, "Expected tensor to have size ", pos, " at dimension 0, but got size ", tg.size(0), " for argument #2 'targets' (while checking arguments for ", c, ")");
	} else {
		TORCH_CHECK(tg.size(0) == N, "Expected tensor to have size ", N, " at dimension 0, but got size ", tg.size(0), " for argument #2 'targets' (while checking arguments for ", c, ")");
		TORCH_CHECK(tg.size(1) >= S, "Expected tensor to have size at least ", S, " at dimension 1, but got size ", tg.size(1), " for argument #2 'targets' (while checking arguments for ", c, ")");
	}
	for (int64_t b = 0; b < N; b++) {
		TORCH_CHECK(il[b] >= 0, "Expected input_lengths to have value at least 0, but got value ", il[b], " (while checking arguments for ", c, ")");
		TORCH_CHECK(il[b] <= T, "Expected input_lengths to have value at most ", T, ", but got value ", il[b], " (while checking arguments for ", c, ")");
		lens[b] = il[b];
	}
	a.dtype = nk_dtype(lp.scalar_type(), op), a.tdtype = nk_dtype(tg.scalar_type(), op);
	a.T = T, a.N = N, a.C = C, a.S = S, a.blank = blank;
	for (int i = 0; i < 3; i++)
		a.lp_st[i] = lp.stride(i);
	at::Tensor host = at::empty({3 * N}, at::TensorOptions().dtype(at::kLong));
	if (N > 0)
		std::memcpy(host.data_ptr<int64_t>(), lens.data(), sizeof(int64_t) * 3 * N);
	return host.to(lp.device());
}

static std::tuple<at::Tensor, at::Tensor> ctc_loss_f(const at::Tensor &lp, const at::Tensor &tg, at::IntArrayRef il, at::IntArrayRef tl,
						     int64_t blank, bool zero_infinity)
{
	NEURON_TRACK("aten::_ctc_loss");
	const char *op = "_ctc_loss";
	c10::DeviceGuard guard(lp.device());
	nk_ctc_loss_args_t a{};
	at::Tensor tgc = tg.contiguous(), lens = ctc_setup(op, lp, tgc, il, tl, blank, a);
	at::Tensor nll = at::empty({a.N}, lp.options()), alpha = at::empty({a.N, a.T, 2 * a.S + 1}, lp.options());
	a.lp = lp.const_data_ptr(), a.targets = tgc.const_data_ptr(), a.lens = lens.const_data_ptr<int64_t>();
	a.nll = nll.data_ptr(), a.alpha = alpha.data_ptr();
	launch(queue_for(lp), nk_ctc_loss_run, a, op);
	return {nll, alpha};
}

static at::Tensor ctc_loss_bw(const at::Tensor &grad, const at::Tensor &lp, const at::Tensor &tg, at::IntArrayRef il, at::IntArrayRef tl,
			      const at::Tensor &nll, const at::Tensor &alpha, int64_t blank, bool zero_infinity)
{
	NEURON_TRACK("aten::_ctc_loss_backward");
	const char *op = "_ctc_loss_backward";
	c10::DeviceGuard guard(lp.device());
	nk_ctc_loss_bwd_args_t g{};
	at::Tensor tgc = tg.contiguous(), lens = ctc_setup(op, lp, tgc, il, tl, blank, g.f);
	TORCH_CHECK(grad.numel() == g.f.N && nll.numel() == g.f.N && alpha.dim() == 3 && alpha.size(0) == g.f.N && alpha.size(1) == g.f.T &&
			    alpha.size(2) == 2 * g.f.S + 1,
		    op, ": grad ", grad.sizes(), ", neg_log_likelihood ", nll.sizes(), " or log_alpha ", alpha.sizes(), " do not match log_probs ",
		    lp.sizes(), " and the target lengths");
	at::Tensor gc = grad.to(lp.scalar_type()), nc = nll.contiguous().to(lp.scalar_type()), ac = alpha.contiguous().to(lp.scalar_type());
	at::Tensor out = at::empty(lp.sizes(), lp.options()), beta = at::empty_like(ac);
	g.f.lp = lp.const_data_ptr(), g.f.targets = tgc.const_data_ptr(), g.f.lens = lens.const_data_ptr<int64_t>();
	g.f.nll = const_cast<void *>(nc.const_data_ptr()), g.f.alpha = const_cast<void *>(ac.const_data_ptr());
	g.gout = gc.const_data_ptr(), g.gout_st = gc.dim() ? gc.stride(0) : 1, g.zero_infinity = zero_infinity;
	g.grad = out.data_ptr(), g.beta = beta.data_ptr();
	launch(queue_for(lp), nk_ctc_loss_bwd_run, g, op);
	return out;
}

// the Tensor-lengths overloads read the lengths on the host, as aten's ctc_loss_tensor does
static std::vector<int64_t> ctc_lengths(const at::Tensor &t, const char *what)
{
	TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), what, " must be integral");
	at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
	return std::vector<int64_t>(c.const_data_ptr<int64_t>(), c.const_data_ptr<int64_t>() + c.numel());
}

static std::tuple<at::Tensor, at::Tensor> ctc_loss_ft(const at::Tensor &lp, const at::Tensor &tg, const at::Tensor &il, const at::Tensor &tl,
						      int64_t blank, bool zero_infinity)
{
	return ctc_loss_f(lp, tg, ctc_lengths(il, "input_lengths"), ctc_lengths(tl, "target_lengths"), blank, zero_infinity);
}

static at::Tensor ctc_loss_bwt(const at::Tensor &grad, const at::Tensor &lp, const at::Tensor &tg, const at::Tensor &il, const at::Tensor &tl,
			       const at::Tensor &nll, const at::Tensor &alpha, int64_t blank, bool zero_infinity)
{
	return ctc_loss_bw(grad, lp, tg, ctc_lengths(il, "input_lengths"), ctc_lengths(tl, "target_lengths"), nll, alpha, blank, zero_infinity);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "nll_loss2d_forward", nll2d_fwd);
	NEURON_IMPL(m, "nll_loss2d_forward.output", nll2d_fwd_o);
	NEURON_IMPL(m, "nll_loss2d_backward", nll2d_bwd);
	NEURON_IMPL(m, "nll_loss2d_backward.grad_input", nll2d_bwd_o);
	NEURON_IMPL(m, "smooth_l1_loss", smooth_l1_f);
	NEURON_IMPL(m, "smooth_l1_loss.out", smooth_l1_o);
	NEURON_IMPL(m, "smooth_l1_loss_backward", smooth_l1_bw);
	NEURON_IMPL(m, "smooth_l1_loss_backward.grad_input", smooth_l1_bw_o);
	NEURON_IMPL(m, "huber_loss", huber_f);
	NEURON_IMPL(m, "huber_loss.out", huber_o);
	NEURON_IMPL(m, "huber_loss_backward", huber_bw);
	NEURON_IMPL(m, "huber_loss_backward.out", huber_bw_o);
	NEURON_IMPL(m, "binary_cross_entropy", bce_f);
	NEURON_IMPL(m, "binary_cross_entropy.out", bce_o);
	NEURON_IMPL(m, "binary_cross_entropy_backward", bce_bw);
	NEURON_IMPL(m, "binary_cross_entropy_backward.grad_input", bce_bw_o);
	NEURON_IMPL(m, "log_sigmoid_forward", log_sigmoid_fwd);
	NEURON_IMPL(m, "log_sigmoid_forward.output", log_sigmoid_fwd_o);
	NEURON_IMPL(m, "log_sigmoid_backward", log_sigmoid_bw);
	NEURON_IMPL(m, "log_sigmoid_backward.grad_input", log_sigmoid_bw_o);
	NEURON_IMPL(m, "nll_loss_forward", nll_fwd);
	NEURON_IMPL(m, "nll_loss_backward", nll_bwd);
	NEURON_IMPL(m, "mse_loss", mse_loss_f);
	NEURON_IMPL(m, "mse_loss.out", mse_loss_out);
	NEURON_IMPL(m, "mse_loss_backward", mse_loss_bwd);
	NEURON_IMPL(m, "mse_loss_backward.grad_input", mse_loss_bwd_out);
	NEURON_IMPL(m, "multi_margin_loss", mm_loss);
	NEURON_IMPL(m, "multi_margin_loss.out", mm_loss_o);
	NEURON_IMPL(m, "multi_margin_loss_backward", mm_loss_bw);
	NEURON_IMPL(m, "multi_margin_loss_backward.grad_input", mm_loss_bw_o);
	NEURON_IMPL(m, "multilabel_margin_loss_forward", ml_loss);
	NEURON_IMPL(m, "multilabel_margin_loss_forward.output", ml_loss_o);
	NEURON_IMPL(m, "multilabel_margin_loss_backward", ml_loss_bw);
	NEURON_IMPL(m, "multilabel_margin_loss_backward.grad_input", ml_loss_bw_o);
	NEURON_IMPL(m, "_ctc_loss", ctc_loss_f);
	NEURON_IMPL(m, "_ctc_loss.Tensor", ctc_loss_ft);
	NEURON_IMPL(m, "_ctc_loss_backward", ctc_loss_bw);
	NEURON_IMPL(m, "_ctc_loss_backward.Tensor", ctc_loss_bwt);
}
