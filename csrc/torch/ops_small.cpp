// ops_small.cpp - small ops on the kernels of small.c: tril_indices / triu_indices (factories, int64 or
// int32 output), trace (its backward is composite), linalg_cross (cross is composite over it),
// repeat_interleave(repeats), nonzero_static, renorm.
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
	TORCH_CHECK(out.scalar_type() == st, "renorm: expected out to have dtype ", st, ", got ", out.scalar_type());
	TORCH_CHECK(out.device() == self.device(), "renorm: expected out on ", self.device(), ", got ", out.device());
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	at::native::resize_output(out, self.sizes());
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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("tril_indices", tril_indices_f);
	m.impl("triu_indices", triu_indices_f);
	m.impl("trace", trace_f);
	m.impl("linalg_cross", linalg_cross_f);
	m.impl("linalg_cross.out", linalg_cross_o);
	m.impl("repeat_interleave.Tensor", repeat_interleave_f);
	m.impl("nonzero_static", nonzero_static_f);
	m.impl("renorm", renorm_f);
	m.impl("renorm.out", renorm_o);
	m.impl("renorm_", renorm_i);
}

} // namespace neuron
