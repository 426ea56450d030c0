// ops_shape.cpp - shape ops and factories: tril/triu, flip, roll, tril_indices/triu_indices, and the
// factories computed on the host and copied (arange, linspace, logspace) or filled (eye).
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
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

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

// ---- tril / triu -----------------------------------------------------------------------------------

static at::Tensor &tri_into(const char *name, bool lower, const at::Tensor &self, int64_t k, at::Tensor &out)
{
	TORCH_CHECK(self.dim() >= 2, name, ": input tensor must have at least 2 dimensions");
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self))
		resize_out(out, self.sizes(), self.options());
	if (self.numel() == 0)
		return out;
	int64_t M = self.size(-2), N = self.size(-1);
	at::Tensor x = self.reshape({-1, M, N});
	bool direct = out.is_contiguous() || out.is_same(self);
	at::Tensor o = direct ? out : at::empty(self.sizes(), self.options());
	at::Tensor o3 = o.reshape({-1, M, N});
	if (o.is_same(self) && !(o3.data_ptr() == o.data_ptr() && o3.is_alias_of(o)))
		direct = false;
	nk_tri_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), name);
	a.lower = lower;
	a.k = k;
	a.B = x.size(0), a.M = M, a.N = N;
	a.in = x.const_data_ptr();
	a.out = o3.data_ptr();
	for (int i = 0; i < 3; i++)
		a.si[i] = x.stride(i), a.so[i] = o3.stride(i);
	launch(current_queue(self.device().index()), nk_tri_run, a, name);
	if (!o3.is_alias_of(out))
		out.copy_(o3.view(self.sizes()));
	return out;
}
static at::Tensor &tril_o(const at::Tensor &self, int64_t k, at::Tensor &out) { NEURON_TRACK("aten::tril.out"); return tri_into("aten::tril", true, self, k, out); }
static at::Tensor &triu_o(const at::Tensor &self, int64_t k, at::Tensor &out) { NEURON_TRACK("aten::triu.out"); return tri_into("aten::triu", false, self, k, out); }
static at::Tensor tril_f(const at::Tensor &self, int64_t k) { NEURON_TRACK("aten::tril"); at::Tensor out = at::empty(self.sizes(), self.options()); return tri_into("aten::tril", true, self, k, out); }
static at::Tensor triu_f(const at::Tensor &self, int64_t k) { NEURON_TRACK("aten::triu"); at::Tensor out = at::empty(self.sizes(), self.options()); return tri_into("aten::triu", false, self, k, out); }
static at::Tensor &tril_i(at::Tensor &self, int64_t k) { NEURON_TRACK("aten::tril_"); return tri_into("aten::tril_", true, self, k, self); }
static at::Tensor &triu_i(at::Tensor &self, int64_t k) { NEURON_TRACK("aten::triu_"); return tri_into("aten::triu_", false, self, k, self); }

// ---- flip and roll: copies (flip: the copy kernel reading with negative strides) --------------------

static at::Tensor flip_f(const at::Tensor &self, at::IntArrayRef dims)
{
	NEURON_TRACK("aten::flip");
	c10::DeviceGuard g(self.device());
	int64_t nd = self.dim();
	if (C10_UNLIKELY(self.is_complex())) { // the (re, im) pairs move as a real trailing dim
		std::vector<int64_t> wd;
		for (int64_t d : dims)
			wd.push_back(at::maybe_wrap_dim(d, nd));
		return complex_from_real(flip_f(real_view_raw(self), wd));
	}
	std::vector<bool> flip(std::max<int64_t>(nd, 1), false);
	for (int64_t d : dims) {
		int64_t w = at::maybe_wrap_dim(d, nd);
		TORCH_CHECK(!flip[w], "dim ", w, " appears multiple times in the list of dims");
		flip[w] = true;
	}
	at::Tensor out = at::empty(self.sizes(), self.options());
	if (self.numel() == 0)
		return out;
	TORCH_CHECK(nd <= NK_MAX_DIMS, "flip: at most ", NK_MAX_DIMS, " dims on neuron");
	int64_t es = (int64_t)self.itemsize();
	nk_iter_t it{};
	it.nops = 2;
	it.ndim = (int)nd;
	it.data[0] = (char *)out.data_ptr();
	const char *src = (const char *)self.const_data_ptr();
	for (int k = 0; k < nd; k++) { // innermost first
		int64_t d = nd - 1 - k;
		it.shape[k] = self.size(d);
		it.strides[0][k] = out.stride(d) * es;
		it.strides[1][k] = (flip[d] ? -self.stride(d) : self.stride(d)) * es;
		if (flip[d])
			src += (self.size(d) - 1) * self.stride(d) * es;
	}
	it.data[1] = (char *)src;
	it.dtype[0] = it.dtype[1] = (int8_t)nk_dtype(self.scalar_type(), "aten::flip");
	launch(current_queue(self.device().index()), nk_copy_run, it, "aten::flip");
	return out;
}
static at::Tensor &flip_o(const at::Tensor &self, at::IntArrayRef dims, at::Tensor &out)
{
	NEURON_TRACK("aten::flip.out");
	return into(out, flip_f(self, dims));
}

static at::Tensor roll_1(const at::Tensor &x, int64_t shift, int64_t d)
{
	int64_t n = x.size(d);
	at::Tensor out = at::empty(x.sizes(), x.options());
	if (x.numel() == 0)
		return out;
	int64_t s = ((shift % n) + n) % n;
	if (s == 0) {
		out.copy_(x);
		return out;
	}
	out.narrow(d, s, n - s).copy_(x.narrow(d, 0, n - s));
	out.narrow(d, 0, s).copy_(x.narrow(d, n - s, s));
	return out;
}
static at::Tensor roll_f(const at::Tensor &self, at::IntArrayRef shifts, at::IntArrayRef dims)
{
	NEURON_TRACK("aten::roll");
	c10::DeviceGuard g(self.device());
	if (dims.empty()) {
		TORCH_CHECK(shifts.size() == 1, "roll: shifts and dims must align. shifts: ", shifts.size(), ", dims: 0");
		return roll_1(self.reshape({-1}), shifts[0], 0).view(self.sizes());
	}
	TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
	at::Tensor cur = self;
	for (size_t i = 0; i < dims.size(); i++)
		cur = roll_1(cur, shifts[i], at::maybe_wrap_dim(dims[i], self.dim()));
	return cur;
}

// ---- factories: linspace/logspace computed on the host (exactly aten's values) and copied; eye -----

static at::Tensor &linspace_o(const c10::Scalar &start, const c10::Scalar &end, int64_t steps, at::Tensor &out)
{
	NEURON_TRACK("aten::linspace.out");
	at::Tensor host = at::linspace(start, end, steps, out.options().device(at::kCPU));
	return into(out, host);
}
static at::Tensor &logspace_o(const c10::Scalar &start, const c10::Scalar &end, int64_t steps, double base, at::Tensor &out)
{
	NEURON_TRACK("aten::logspace.out");
	at::Tensor host = at::logspace(start, end, steps, base, out.options().device(at::kCPU));
	return into(out, host);
}
static at::Tensor &eye_m_o(int64_t n, int64_t m, at::Tensor &out)
{
	NEURON_TRACK("aten::eye.m_out");
	TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
	TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
	out.resize_({n, m});
	out.zero_();
	if (n && m)
		out.diagonal().fill_(1);
	return out;
}
static at::Tensor &eye_o(int64_t n, at::Tensor &out) { return eye_m_o(n, n, out); }

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

// ---- arange: a factory; computed on the host and copied (small, rarely hot) -----------------------

static at::Tensor &arange_out(const c10::Scalar &start, const c10::Scalar &end, const c10::Scalar &step, at::Tensor &out)
{
	NEURON_TRACK("aten::arange.start_out");
	at::Tensor host = at::arange(start, end, step, out.options().device(at::kCPU));
	return into(out, host);
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "tril", tril_f);
	NEURON_IMPL(m, "tril.out", tril_o);
	NEURON_IMPL(m, "tril_", tril_i);
	NEURON_IMPL(m, "triu", triu_f);
	NEURON_IMPL(m, "triu.out", triu_o);
	NEURON_IMPL(m, "triu_", triu_i);
	NEURON_IMPL(m, "flip", flip_f);
	NEURON_IMPL(m, "flip.out", flip_o);
	NEURON_IMPL(m, "roll", roll_f);
	NEURON_IMPL(m, "linspace.out", linspace_o);
	NEURON_IMPL(m, "logspace.out", logspace_o);
	NEURON_IMPL(m, "eye.out", eye_o);
	NEURON_IMPL(m, "eye.m_out", eye_m_o);
	NEURON_IMPL(m, "tril_indices", tril_indices_f);
	NEURON_IMPL(m, "triu_indices", triu_indices_f);
	NEURON_IMPL(m, "arange.start_out", arange_out);
}
