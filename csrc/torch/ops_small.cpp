// ops_small.cpp - small ops on the kernels of small.c: tril_indices / triu_indices (factories, int64 or
// int32 output), trace (its backward is composite), linalg_cross (cross is composite over it).
#include "neuron.h"

#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
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
	TORCH_CHECK(self.device() == other.device() && out.device() == self.device(),
		    "linalg.cross: expected all tensors on the same device, got ", self.device(), ", ", other.device(), " and ",
		    out.device());
	TORCH_CHECK(out.scalar_type() == self.scalar_type(), "linalg.cross: expected out to have dtype ", self.scalar_type(), ", got ",
		    out.scalar_type());
	TORCH_CHECK(self.dim() > 0, "linalg.cross: inputs must have at least one dimension");
	auto shape = at::infer_size(self.sizes(), other.sizes());
	int64_t d = at::maybe_wrap_dim(dim, (int64_t)shape.size());
	TORCH_CHECK(self.size(d) == 3 && other.size(d) == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
		    self.size(d), " and ", other.size(d));
	at::ScalarType st = self.scalar_type();
	TORCH_CHECK(st != at::kBool && !at::isComplexType(st), "linalg.cross: unsupported dtype ", st, " on neuron");
	at::native::resize_output(out, shape);
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("tril_indices", tril_indices_f);
	m.impl("triu_indices", triu_indices_f);
	m.impl("trace", trace_f);
	m.impl("linalg_cross", linalg_cross_f);
	m.impl("linalg_cross.out", linalg_cross_o);
}

} // namespace neuron
