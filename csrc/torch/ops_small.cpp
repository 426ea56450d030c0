// ops_small.cpp - small ops on the kernels of small.c: tril_indices / triu_indices (factories, int64 or
// int32 output), trace (its backward is composite), linalg_cross (cross is composite over it),
// repeat_interleave(repeats), nonzero_static, renorm, cdist and pdist (forward and backward).
#include "neuron.h"
#include "out.h"

#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace neuron {

// ---- tril_indices / triu_indices --------------------------------------------------------------------
static at::Tensor tri_indices(const char *name, bool lower, int64_t row, int64_t col, int64_t offset,
			      std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout, std::optional<at::Device> device,
			      std::optional<bool> pin)
{
	TORCH_CHECK(row >= 0, "row must be non-negative, got", row);
	TORCH_CHECK(col >= 0, "col must be non-negative, got", col);
	at::ScalarType dt = dtype.value_or(at::kLong);
	TORCH_CHECK(dt == at::kLong || dt == at::kInt, name, ": only support int32 and int64 dtypes, got ", dt);
	TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, name, ": only strided layout is supported");
	at::Device dev = device.value_or(at::Device(kDev, current_device()));
	if (!dev.has_index())
		dev = at::Device(kDev, current_device());
	DeviceScope scope(dev.index());
	int64_t n = nk_tri_indices_count(row, col, offset, lower);
	at::Tensor out = at::empty({2, n}, at::TensorOptions().dtype(at::kLong).device(dev));
	if (n > 0) {
		nk_tri_indices_args_t a{};
		a.row = row, a.col = col, a.offset = offset, a.n = n, a.lower = lower;
		a.out = out.mutable_data_ptr<int64_t>();
		launch(current_queue(dev.index()), nk_tri_indices_run, a, name);
	}
	return dt == at::kLong ? out : out.to(dt);
}
static at::Tensor tril_indices_f(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
				 std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin)
{
	NEURON_TRACK("aten::tril_indices");
	return tri_indices("tril_indices", true, row, col, offset, dtype, layout, device, pin);
}
static at::Tensor triu_indices_f(int64_t row, int64_t col, int64_t offset, std::optional<at::ScalarType> dtype,
				 std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin)
{
	NEURON_TRACK("aten::triu_indices");
	return tri_indices("triu_indices", false, row, col, offset, dtype, layout, device, pin);
}

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

// ---- repeat_interleave(repeats) -------------------------------------------------------------------------
// Without output_size the total depends on the data: the queue is drained and the repeats summed on the
// calling thread (device memory is host-addressable), as nonzero does; with it the op stays asynchronous
// and the kernel checks the sum.
static at::Tensor repeat_interleave_f(const at::Tensor &repeats, std::optional<c10::SymInt> output_size)
{
	NEURON_TRACK("aten::repeat_interleave.Tensor");
	TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
	TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt, "repeats has to be Long or Int tensor");
	c10::DeviceGuard g(repeats.device());
	if (repeats.size(0) == 0)
		return at::empty({0}, repeats.options());
	at::Tensor r = repeats.contiguous();
	int64_t n = r.size(0), total;
	if (output_size.has_value()) {
		total = output_size->guard_int(__FILE__, __LINE__);
		TORCH_CHECK(total >= 0, "repeat_interleave: output_size must be non-negative, got ", total);
	} else {
		sync_device(repeats.device().index(), "aten::repeat_interleave");
		total = 0;
		for (int64_t i = 0; i < n; i++) {
			int64_t v = r.scalar_type() == at::kLong ? r.const_data_ptr<int64_t>()[i] : r.const_data_ptr<int32_t>()[i];
			TORCH_CHECK(v >= 0, "repeats can not be negative");
			total += v;
		}
	}
	at::Tensor out = at::empty({total}, repeats.options());
	nk_repeat_interleave_args_t a{};
	a.dtype = nk_dtype(r.scalar_type(), "aten::repeat_interleave");
	a.n = n, a.total = total, a.repeats = r.const_data_ptr(), a.out = out.mutable_data_ptr();
	launch(current_queue(repeats.device().index()), nk_repeat_interleave_run, a, "aten::repeat_interleave");
	return out;
}

// ---- nonzero_static (asynchronous: the output size is given) ---------------------------------------------
static at::Tensor nonzero_static_f(const at::Tensor &self, c10::SymInt size_s, int64_t fill_value)
{
	NEURON_TRACK("aten::nonzero_static");
	int64_t size = size_s.guard_int(__FILE__, __LINE__);
	TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
	TORCH_CHECK(self.dim() <= NK_MAX_DIMS, "nonzero_static: at most ", NK_MAX_DIMS, " dims on neuron");
	TORCH_CHECK(!at::isComplexType(self.scalar_type()), "nonzero_static: unsupported dtype ", self.scalar_type(), " on neuron");
	c10::DeviceGuard g(self.device());
	at::Tensor out = at::empty({size, self.dim()}, self.options().dtype(at::kLong));
	if (out.numel() == 0)
		return out;
	nk_nonzero_static_args_t a{};
	a.nz.dtype = nk_dtype(self.scalar_type(), "aten::nonzero_static");
	a.nz.ndim = (int)self.dim();
	for (int d = 0; d < a.nz.ndim; d++)
		a.nz.shape[d] = self.size(d), a.nz.strides[d] = self.stride(d);
	a.nz.x = self.const_data_ptr();
	a.size = size, a.fill = fill_value, a.out = out.mutable_data_ptr<int64_t>();
	launch(current_queue(self.device().index()), nk_nonzero_static_run, a, "aten::nonzero_static");
	return out;
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "tril_indices", tril_indices_f);
	NEURON_IMPL(m, "triu_indices", triu_indices_f);
	NEURON_IMPL(m, "trace", trace_f);
	NEURON_IMPL(m, "linalg_cross", linalg_cross_f);
	NEURON_IMPL(m, "linalg_cross.out", linalg_cross_o);
	NEURON_IMPL(m, "repeat_interleave.Tensor", repeat_interleave_f);
	NEURON_IMPL(m, "nonzero_static", nonzero_static_f);
	NEURON_IMPL(m, "renorm", renorm_f);
	NEURON_IMPL(m, "renorm.out", renorm_o);
	NEURON_IMPL(m, "renorm_", renorm_i);
	NEURON_IMPL(m, "_cdist_forward", cdist_fwd_f);
	NEURON_IMPL(m, "_cdist_backward", cdist_bwd_f);
	NEURON_IMPL(m, "_pdist_forward", pdist_fwd_f);
	NEURON_IMPL(m, "_pdist_backward", pdist_bwd_f);
}

} // namespace neuron
