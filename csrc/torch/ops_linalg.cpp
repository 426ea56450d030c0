// ops_linalg.cpp - small linear algebra on the kernels of small.c: trace (its backward is
// composite), linalg_cross (cross is composite over it), renorm, cdist and pdist (forward and backward).
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace neuron {

// ---- trace ------------------------------------------------------------------------------------------

static at::Tensor trace_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::trace");
	TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with size: ", self.sizes());
	at::ScalarType st = self.scalar_type();
	TORCH_CHECK(st != at::kBool && !at::isComplexType(st), "trace: unsupported dtype ", st, " on neuron");
	at::ScalarType ot = at::isIntegralType(st, false) ? at::kLong : st;
	c10::DeviceGuard g(self.device());
	at::Tensor out = at::empty({}, self.options().dtype(ot));
	nk_trace_args_t a{};
	a.dtype = nk_dtype(st, "aten::trace"), a.out_dtype = nk_dtype(ot, "aten::trace");
	a.n = std::min(self.size(0), self.size(1));
	a.stride = self.stride(0) + self.stride(1);
	a.in = self.const_data_ptr(), a.out = out.mutable_data_ptr();
	launch(current_queue(self.device().index()), nk_trace_run, a, "aten::trace");
	return out;
}

// ---- linalg_cross -----------------------------------------------------------------------------------
static at::Tensor &linalg_cross_o(const at::Tensor &self, const at::Tensor &other, int64_t dim, at::Tensor &out)
{
	NEURON_TRACK("aten::linalg_cross.out");
	TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
	TORCH_CHECK(self.scalar_type() == other.scalar_type(), "linalg.cross: expected self and other to have the same dtype, but got ",
		    self.scalar_type(), " and ", other.scalar_type());
	TORCH_CHECK(self.dim() > 0, "linalg.cross: inputs must have at least one dimension");
	auto shape = at::infer_size(self.sizes(), other.sizes());
	int64_t d = at::maybe_wrap_dim(dim, (int64_t)shape.size());
	TORCH_CHECK(self.size(d) == 3 && other.size(d) == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
		    self.size(d), " and ", other.size(d));
	at::ScalarType st = self.scalar_type();
	TORCH_CHECK(st != at::kBool && !at::isComplexType(st), "linalg.cross: unsupported dtype ", st, " on neuron");
	resize_out(out, shape, self.options());
	if (out.numel() == 0)
		return out;
	c10::DeviceGuard g(self.device());
	at::Tensor a = self.expand(shape).contiguous(), b = other.expand(shape).contiguous();
	bool direct = out.is_contiguous() && !out.is_same(self) && !out.is_same(other);
	at::Tensor t = direct ? out : at::empty(shape, out.options());
	nk_cross_args_t k{};
	k.dtype = nk_dtype(st, "aten::linalg_cross");
	k.O = 1, k.I = 1;
	for (int64_t i = 0; i < d; i++)
		k.O *= shape[i];
	for (int64_t i = d + 1; i < (int64_t)shape.size(); i++)
		k.I *= shape[i];
	k.a = a.const_data_ptr(), k.b = b.const_data_ptr(), k.out = t.mutable_data_ptr();
	launch(current_queue(self.device().index()), nk_cross_run, k, "aten::linalg_cross");
	if (!direct)
		out.copy_(t);
	return out;
}
static at::Tensor linalg_cross_f(const at::Tensor &self, const at::Tensor &other, int64_t dim)
{
	NEURON_TRACK("aten::linalg_cross");
	at::Tensor out = at::empty({0}, self.options());
	return linalg_cross_o(self, other, dim, out);
}

// ---- renorm ---------------------------------------------------------------------------------------------
static at::Tensor &renorm_o(const at::Tensor &self, const at::Scalar &p, int64_t dim, const at::Scalar &maxnorm, at::Tensor &out)
{
	NEURON_TRACK("aten::renorm.out");
	TORCH_CHECK(!p.isComplex(), "renorm: p must be real-valued");
	TORCH_CHECK(p.toDouble() > 0.0, "renorm: non-positive-norm not supported");
	TORCH_CHECK(!maxnorm.isComplex(), "renorm: maxnorm must be real-valued");
	TORCH_CHECK(maxnorm.toDouble() >= 0.0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm.toDouble());
	TORCH_CHECK(self.dim() > 1, "renorm: input needs at least 2 dimensions, got ", self.dim(), " dimensions");
	at::ScalarType st = self.scalar_type();
	TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kBFloat16 || st == at::kHalf,
		    "renorm: expected a floating point input on neuron, got ", st);
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	resize_out(out, self.sizes(), self.options());
	if (self.numel() == 0)
		return out;
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.contiguous();
	bool direct = out.is_contiguous() && !out.is_same(self);
	at::Tensor t = direct ? out : at::empty(self.sizes(), out.options());
	nk_renorm_args_t a{};
	a.dtype = nk_dtype(st, "aten::renorm");
	a.O = 1, a.R = self.size(d), a.I = 1;
	for (int64_t i = 0; i < d; i++)
		a.O *= self.size(i);
	for (int64_t i = d + 1; i < self.dim(); i++)
		a.I *= self.size(i);
	a.p = p.toDouble(), a.maxnorm = maxnorm.toDouble();
	a.in = x.const_data_ptr(), a.out = t.mutable_data_ptr();
	launch(current_queue(self.device().index()), nk_renorm_run, a, "aten::renorm");
	if (!direct)
		out.copy_(t);
	return out;
}
static at::Tensor renorm_f(const at::Tensor &self, const at::Scalar &p, int64_t dim, const at::Scalar &maxnorm)
{
	NEURON_TRACK("aten::renorm");
	at::Tensor out = at::empty({0}, self.options());
	return renorm_o(self, p, dim, maxnorm, out);
}
static at::Tensor &renorm_i(at::Tensor &self, const at::Scalar &p, int64_t dim, const at::Scalar &maxnorm)
{
	NEURON_TRACK("aten::renorm_");
	return renorm_o(self, p, dim, maxnorm, self);
}

// ---- cdist (_cdist_forward / _cdist_backward); batch dims broadcast, inputs made contiguous --------------
static void cdist_shapes(const char *name, const at::Tensor &x1, const at::Tensor &x2, double p, std::vector<int64_t> &batch,
			 int64_t &B)
{
	TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
	TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
	TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
		    " X2: ", x2.size(-1));
	TORCH_CHECK(x1.scalar_type() == x2.scalar_type(), name, ": X1 and X2 must have the same dtype, got ", x1.scalar_type(),
		    " and ", x2.scalar_type());
	TORCH_CHECK(x1.scalar_type() == at::kFloat || x1.scalar_type() == at::kDouble,
		    "cdist only supports floating-point dtypes, X1 got: ", x1.scalar_type());
	TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
	TORCH_CHECK(x1.device() == x2.device(), "X1 and X2 must be on the same device, got ", x1.device(), " and ", x2.device());
	batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
	B = 1;
	for (int64_t s : batch)
		B *= s;
}
static at::Tensor cdist_fwd_f(const at::Tensor &x1, const at::Tensor &x2, double p, std::optional<int64_t> mode)
{
	NEURON_TRACK("aten::_cdist_forward");
	std::vector<int64_t> batch;
	int64_t B;
	cdist_shapes("_cdist_forward", x1, x2, p, batch, B);
	int64_t P = x1.size(-2), R = x2.size(-2), M = x1.size(-1);
	c10::DeviceGuard g(x1.device());
	std::vector<int64_t> s1 = batch, s2 = batch, so = batch;
	s1.insert(s1.end(), {P, M}), s2.insert(s2.end(), {R, M}), so.insert(so.end(), {P, R});
	at::Tensor out = at::empty(so, x1.options());
	if (out.numel() == 0)
		return out;
	if (M == 0)
		return out.zero_();
	at::Tensor a = x1.expand(s1).contiguous(), b = x2.expand(s2).contiguous();
	nk_cdist_args_t k{};
	k.dtype = nk_dtype(x1.scalar_type(), "aten::_cdist_forward");
	k.B = B, k.P = P, k.R = R, k.M = M, k.p = p;
	k.x1 = a.const_data_ptr(), k.x2 = b.const_data_ptr(), k.out = out.mutable_data_ptr();
	launch(current_queue(x1.device().index()), nk_cdist_run, k, "aten::_cdist_forward");
	return out;
}
static at::Tensor cdist_bwd_f(const at::Tensor &grad, const at::Tensor &x1, const at::Tensor &x2, double p, const at::Tensor &dist)
{
	NEURON_TRACK("aten::_cdist_backward");
	std::vector<int64_t> batch;
	int64_t B;
	cdist_shapes("_cdist_backward", x1, x2, p, batch, B);
	int64_t P = x1.size(-2), R = x2.size(-2), M = x1.size(-1);
	c10::DeviceGuard g(x1.device());
	std::vector<int64_t> s1 = batch, s2 = batch, so = batch;
	s1.insert(s1.end(), {P, M}), s2.insert(s2.end(), {R, M}), so.insert(so.end(), {P, R});
	TORCH_CHECK(grad.sizes() == at::IntArrayRef(so) && dist.sizes() == at::IntArrayRef(so), "_cdist_backward: expected grad and cdist of shape ",
		    at::IntArrayRef(so), ", got ", grad.sizes(), " and ", dist.sizes());
	at::Tensor out = at::zeros(s1, x1.options());
	if (out.numel() == 0 || R == 0)
		return out;
	at::Tensor a = x1.expand(s1).contiguous(), b = x2.expand(s2).contiguous();
	at::Tensor gc = grad.to(x1.scalar_type()).contiguous(), dc = dist.to(x1.scalar_type()).contiguous();
	nk_cdist_bwd_args_t k{};
	k.dtype = nk_dtype(x1.scalar_type(), "aten::_cdist_backward");
	k.B = B, k.P = P, k.R = R, k.M = M, k.p = p;
	k.grad = gc.const_data_ptr(), k.x1 = a.const_data_ptr(), k.x2 = b.const_data_ptr(), k.dist = dc.const_data_ptr();
	k.out = out.mutable_data_ptr();
	launch(current_queue(x1.device().index()), nk_cdist_bwd_run, k, "aten::_cdist_backward");
	return out;
}

// ---- pdist (_pdist_forward / _pdist_backward) ---------------------------------------------------------------
static void pdist_check(const char *name, const at::Tensor &self, double p)
{
	TORCH_CHECK(self.dim() == 2, name, ": expected a 2-D input, got ", self.dim(), "D");
	TORCH_CHECK(self.is_contiguous(), name, " requires contiguous input");
	TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
		    "pdist only supports floating-point dtypes, got: ", self.scalar_type());
	TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
}
static at::Tensor pdist_fwd_f(const at::Tensor &self, double p)
{
	NEURON_TRACK("aten::_pdist_forward");
	pdist_check("_pdist_forward", self, p);
	int64_t N = self.size(0), M = self.size(1);
	c10::DeviceGuard g(self.device());
	at::Tensor out = at::empty({N > 1 ? N * (N - 1) / 2 : 0}, self.options());
	if (out.numel() == 0)
		return out;
	if (M == 0)
		return out.zero_();
	nk_pdist_args_t k{};
	k.dtype = nk_dtype(self.scalar_type(), "aten::_pdist_forward");
	k.N = N, k.M = M, k.p = p, k.x = self.const_data_ptr(), k.out = out.mutable_data_ptr();
	launch(current_queue(self.device().index()), nk_pdist_run, k, "aten::_pdist_forward");
	return out;
}
static at::Tensor pdist_bwd_f(const at::Tensor &grad, const at::Tensor &self, double p, const at::Tensor &pdist)
{
	NEURON_TRACK("aten::_pdist_backward");
	pdist_check("_pdist_backward", self, p);
	TORCH_CHECK(pdist.is_contiguous(), "_pdist_backward requires pdist to be contiguous");
	int64_t N = self.size(0), M = self.size(1);
	c10::DeviceGuard g(self.device());
	at::Tensor out = at::zeros(self.sizes(), self.options());
	if (p == 0 || N <= 1 || M == 0)
		return out;
	TORCH_CHECK(grad.numel() == N * (N - 1) / 2 && pdist.numel() == N * (N - 1) / 2, "_pdist_backward: expected grad and pdist of ",
		    N * (N - 1) / 2, " elements, got ", grad.numel(), " and ", pdist.numel());
	at::Tensor gc = grad.to(self.scalar_type()).contiguous(), dc = pdist.to(self.scalar_type()).contiguous();
	nk_pdist_bwd_args_t k{};
	k.dtype = nk_dtype(self.scalar_type(), "aten::_pdist_backward");
	k.N = N, k.M = M, k.p = p, k.grad = gc.const_data_ptr(), k.x = self.const_data_ptr(), k.dist = dc.const_data_ptr();
	k.out = out.mutable_data_ptr();
	launch(current_queue(self.device().index()), nk_pdist_bwd_run, k, "aten::_pdist_backward");
	return out;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "trace", trace_f);
	NEURON_IMPL(m, "linalg_cross", linalg_cross_f);
	NEURON_IMPL(m, "linalg_cross.out", linalg_cross_o);
	NEURON_IMPL(m, "renorm", renorm_f);
	NEURON_IMPL(m, "renorm.out", renorm_o);
	NEURON_IMPL(m, "renorm_", renorm_i);
	NEURON_IMPL(m, "_cdist_forward", cdist_fwd_f);
	NEURON_IMPL(m, "_cdist_backward", cdist_bwd_f);
	NEURON_IMPL(m, "_pdist_forward", pdist_fwd_f);
	NEURON_IMPL(m, "_pdist_backward", pdist_bwd_f);
}
