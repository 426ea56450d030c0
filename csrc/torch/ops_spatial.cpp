// ops_spatial.cpp - pooling (max/avg/adaptive, unpool), interpolation (upsample_*) and reflection /
// replication padding, grid_sampler_2d, forward and backward, on the C kernels of nk_spatial.h;
// channel_shuffle as a strided copy.
// Inputs are checked here with ATen's own shape checks (Pool.h, UpSample.h, Padding.h) so errors read
// as on the CPU; the kernels get contiguous [NC, D, H, W] planes (channels_last and other strides are
// made contiguous here; an out= tensor that is not contiguous is filled through a temporary).
#include "neuron.h"
#include "out.h"

#include <ATen/native/AdaptivePooling.h>
#include <ATen/native/GridSamplerUtils.h>
#include <ATen/native/Padding.h>
#include <ATen/native/Pool.h>
#include <ATen/native/Resize.h>
#include <ATen/native/UpSample.h>
#include <ATen/ops/empty.h>
#include <c10/util/irange.h>
#include <cstring>
#include <optional>
#include <torch/library.h>

namespace neuron {
namespace {

using at::IntArrayRef;
using OptD = std::optional<double>;

// NC (product of the leading dims) and the nsp trailing spatial sizes right-aligned in sp[3].
void planes_of(const at::Tensor &t, int nsp, int64_t &NC, int64_t sp[3])
{
	NC = 1;
	for (int64_t i = 0; i < t.dim() - nsp; i++)
		NC *= t.size(i);
	for (int d = 0; d < 3; d++)
		sp[d] = d < 3 - nsp ? 1 : t.size(t.dim() - 3 + d);
}

// The shape of t with its nsp trailing sizes replaced by o (right-aligned o[3]).
std::vector<int64_t> with_spatial(const at::Tensor &t, int nsp, const int64_t o[3])
{
	std::vector<int64_t> s(t.sizes().begin(), t.sizes().end() - nsp);
	for (int d = 3 - nsp; d < 3; d++)
		s.push_back(o[d]);
	return s;
}

// A contiguous tensor to write out's values into: out itself, or a temporary copied back by finish().
struct Dst {
	at::Tensor &out;
	at::Tensor t;
	explicit Dst(at::Tensor &o) : out(o), t(o.is_contiguous() ? o : at::empty(o.sizes(), o.options())) {}
	void finish()
	{
		if (!t.is_same(out))
			out.copy_(t);
	}
};

bool is_float(at::ScalarType t)
{
	return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

void check_dtype(const char *op, const at::Tensor &t, bool ints, bool only_u8 = false)
{
	auto st = t.scalar_type();
	bool ok = is_float(st) || (ints && st != at::kBool && at::isIntegralType(st, false) && (!only_u8 || st == at::kByte));
	TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", op, "\" not implemented for '", c10::toString(st), "'");
}

void run(const at::Tensor &on, nrt_kernel_fn fn, const void *args, size_t size, const char *name)
{
	launch(current_queue(on.device().index()), fn, args, size, name);
}

// kernel_size / stride / padding / dilation of n entries from 1 or n given (stride: empty = kernel).
std::array<int64_t, 3> param(IntArrayRef v, int n, const char *op, const char *what, IntArrayRef dflt = {}, int64_t fill = 1)
{
	std::array<int64_t, 3> r{fill, fill, fill};
	if (v.empty() && !dflt.empty())
		v = dflt;
	// aten's wording: "dilation must be either", the others "must either be"
	bool dil = !strcmp(what, "dilation");
	TORCH_CHECK(v.size() == 1 || (int)v.size() == n, op, ": ", what, dil ? " must be either " : " must either be ",
		    std::string(strcmp(what, "stride") ? "" : "omitted, "), "a single int, or a tuple of ", n == 2 ? "two" : "three", " ints");
	for (int d = 0; d < n; d++)
		r[3 - n + d] = v.size() == 1 ? v[0] : v[d];
	return r;
}

// ==== pooling ====================================================================================

struct PoolCfg {
	int mode, nsp;
	std::array<int64_t, 3> k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, dil{1, 1, 1};
	bool ceil = false, cip = true;
	int64_t divisor = 0;
};

PoolCfg pool_cfg(const char *op, int mode, int nsp, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil, bool ceil)
{
	PoolCfg c;
	c.mode = mode, c.nsp = nsp, c.ceil = ceil;
	c.k = param(k, nsp, op, "kernel_size");
	c.s = param(s, nsp, op, "stride", k);
	c.p = param(p, nsp, op, "padding", {}, 0);
	if (mode == NK_POOL_MAX)
		c.dil = param(dil, nsp, op, "dilation");
	return c;
}

// Output spatial sizes and ATen's shape checks for input x.
std::array<int64_t, 3> pool_out_shape(const char *op, const at::Tensor &x, const PoolCfg &c)
{
	int nsp = c.nsp;
	// aten's pooling meta: this rank check, then pooling_output_shape (stride, padding) and the
	// pool2d/pool3d shape checks (kernel, dilation, empty planes, output size), messages unprefixed
	TORCH_CHECK(x.dim() == nsp + 1 || x.dim() == nsp + 2, "non-empty ", nsp + 1, "D or ", nsp + 2,
		    "D (batch mode) tensor expected for input");
	int64_t NC, in[3];
	planes_of(x, nsp, NC, in);
	std::array<int64_t, 3> o{1, 1, 1};
	for (int d = 3 - nsp; d < 3; d++)
		o[d] = at::native::pooling_output_shape<int64_t>(in[d], c.k[d], c.p[d], c.s[d], c.dil[d], c.ceil);
	int64_t nplane = x.size(x.dim() - nsp - 1);
	if (nsp == 2) {
		at::native::pool2d_shape_check(x, c.k[1], c.k[2], c.s[1], c.s[2], c.p[1], c.p[2], c.dil[1], c.dil[2], nplane, in[1], in[2],
					       o[1], o[2], at::MemoryFormat::Contiguous);
	} else {
		at::native::pool3d_shape_check(x, nplane, c.k[0], c.k[1], c.k[2], c.s[0], c.s[1], c.s[2], c.p[0], c.p[1], c.p[2], c.dil[0],
					       c.dil[1], c.dil[2], in[0], in[1], in[2], o[0], o[1], o[2], op, c.mode == NK_POOL_AVG);
	}
	return o;
}

void pool_forward(const char *name, const at::Tensor &self, const PoolCfg &c, const int64_t o[3], at::Tensor &out, at::Tensor *idx)
{
	c10::DeviceGuard g(self.device());
	resize_out(out, with_spatial(self, c.nsp, o), self.options());
	if (idx)
		resize_out(*idx, with_spatial(self, c.nsp, o), self.options().dtype(at::kLong));
	at::Tensor x = self.contiguous();
	Dst y(out);
	std::optional<Dst> ix;
	if (idx)
		ix.emplace(*idx);
	nk_pool_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), name), a.mode = c.mode;
	planes_of(x, c.nsp, a.NC, a.in);
	for (int d = 0; d < 3; d++)
		a.out[d] = o[d], a.k[d] = c.k[d], a.s[d] = c.s[d], a.p[d] = c.p[d], a.dil[d] = c.dil[d];
	a.count_include_pad = c.cip, a.divisor = c.divisor;
	a.acc_dtype = c.mode == NK_POOL_ADAPTIVE_AVG && c.nsp == 3;
	a.x = x.const_data_ptr(), a.y = y.t.data_ptr(), a.idx = idx ? ix->t.data_ptr<int64_t>() : nullptr;
	if (y.t.numel())
		run(self, nk_pool_run, &a, sizeof a, name);
	y.finish();
	if (idx)
		ix->finish();
}

// grad_input (input-shaped) from grad_output through the windows / indices.
void pool_backward(const char *name, const at::Tensor &grad, const at::Tensor &self, const PoolCfg &c, const int64_t o[3], const at::Tensor *idx,
		   at::Tensor &gi)
{
	TORCH_CHECK(grad.scalar_type() == self.scalar_type(), name, ": expected grad_output and input of the same dtype, got ", grad.scalar_type(),
		    " and ", self.scalar_type());
	check_dtype(name, self, false);
	auto oshape = with_spatial(self, c.nsp, o);
	TORCH_CHECK(grad.sizes() == IntArrayRef(oshape), name, ": grad_output has shape ", grad.sizes(), ", expected ", IntArrayRef(oshape));
	if (idx) {
		TORCH_CHECK(idx->scalar_type() == at::kLong, name, ": indices must be int64, got ", idx->scalar_type());
		TORCH_CHECK(idx->sizes() == grad.sizes(), name, ": indices have shape ", idx->sizes(), ", expected ", grad.sizes());
	}
	c10::DeviceGuard g(self.device());
	resize_out(gi, self.sizes(), self.options());
	at::Tensor gy = grad.contiguous(), ic = idx ? idx->contiguous() : at::Tensor();
	Dst gx(gi);
	nk_pool_bwd_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), name), a.mode = c.mode;
	planes_of(self, c.nsp, a.NC, a.in);
	for (int d = 0; d < 3; d++)
		a.out[d] = o[d], a.k[d] = c.k[d], a.s[d] = c.s[d], a.p[d] = c.p[d], a.dil[d] = c.dil[d];
	a.count_include_pad = c.cip, a.divisor = c.divisor;
	a.gy = gy.const_data_ptr(), a.idx = idx ? ic.const_data_ptr<int64_t>() : nullptr, a.gx = gx.t.data_ptr();
	if (gx.t.numel())
		run(self, nk_pool_bwd_run, &a, sizeof a, name);
	gx.finish();
}

// ---- max pooling --------------------------------------------------------------------------------

std::tuple<at::Tensor &, at::Tensor &> max_pool_out(const char *name, int nsp, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p,
						     IntArrayRef dil, bool ceil, at::Tensor &out, at::Tensor &idx)
{
	const char *op = nsp == 2 ? "max_pool2d" : "max_pool3d";
	PoolCfg c = pool_cfg(op, NK_POOL_MAX, nsp, k, s, p, dil, ceil);
	auto o = pool_out_shape(op, self, c);
	check_dtype(op, self, true);
	pool_forward(name, self, c, o.data(), out, &idx);
	return {out, idx};
}

std::tuple<at::Tensor &, at::Tensor &> max_pool2d_wi_out(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil,
							 bool ceil, at::Tensor &out, at::Tensor &idx)
{
	NEURON_TRACK("aten::max_pool2d_with_indices.out");
	return max_pool_out("aten::max_pool2d_with_indices.out", 2, self, k, s, p, dil, ceil, out, idx);
}
std::tuple<at::Tensor, at::Tensor> max_pool2d_wi(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil, bool ceil)
{
	NEURON_TRACK("aten::max_pool2d_with_indices");
	at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
	max_pool_out("aten::max_pool2d_with_indices", 2, self, k, s, p, dil, ceil, out, idx);
	return {out, idx};
}
std::tuple<at::Tensor &, at::Tensor &> max_pool3d_wi_out(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil,
							 bool ceil, at::Tensor &out, at::Tensor &idx)
{
	NEURON_TRACK("aten::max_pool3d_with_indices.out");
	return max_pool_out("aten::max_pool3d_with_indices.out", 3, self, k, s, p, dil, ceil, out, idx);
}
std::tuple<at::Tensor, at::Tensor> max_pool3d_wi(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil, bool ceil)
{
	NEURON_TRACK("aten::max_pool3d_with_indices");
	at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
	max_pool_out("aten::max_pool3d_with_indices", 3, self, k, s, p, dil, ceil, out, idx);
	return {out, idx};
}

at::Tensor &max_pool_bwd(const char *name, int nsp, const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p,
			 IntArrayRef dil, bool ceil, const at::Tensor &idx, at::Tensor &gi)
{
	const char *op = nsp == 2 ? "max_pool2d_with_indices_backward" : "max_pool3d_with_indices_backward";
	PoolCfg c = pool_cfg(op, NK_POOL_MAX, nsp, k, s, p, dil, ceil);
	auto o = pool_out_shape(op, self, c);
	pool_backward(name, grad, self, c, o.data(), &idx, gi);
	return gi;
}
at::Tensor &max_pool2d_bwd_out(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil,
			       bool ceil, const at::Tensor &idx, at::Tensor &gi)
{
	NEURON_TRACK("aten::max_pool2d_with_indices_backward.grad_input");
	return max_pool_bwd("aten::max_pool2d_with_indices_backward.grad_input", 2, grad, self, k, s, p, dil, ceil, idx, gi);
}
at::Tensor max_pool2d_bwd(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil, bool ceil,
			  const at::Tensor &idx)
{
	NEURON_TRACK("aten::max_pool2d_with_indices_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return max_pool_bwd("aten::max_pool2d_with_indices_backward", 2, grad, self, k, s, p, dil, ceil, idx, gi);
}
at::Tensor &max_pool3d_bwd_out(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil,
			       bool ceil, const at::Tensor &idx, at::Tensor &gi)
{
	NEURON_TRACK("aten::max_pool3d_with_indices_backward.grad_input");
	return max_pool_bwd("aten::max_pool3d_with_indices_backward.grad_input", 3, grad, self, k, s, p, dil, ceil, idx, gi);
}
at::Tensor max_pool3d_bwd(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, IntArrayRef dil, bool ceil,
			  const at::Tensor &idx)
{
	NEURON_TRACK("aten::max_pool3d_with_indices_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return max_pool_bwd("aten::max_pool3d_with_indices_backward", 3, grad, self, k, s, p, dil, ceil, idx, gi);
}

// ---- average pooling ----------------------------------------------------------------------------

PoolCfg avg_cfg(const char *op, int nsp, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> div)
{
	PoolCfg c = pool_cfg(op, NK_POOL_AVG, nsp, k, s, p, {}, ceil);
	c.cip = cip;
	TORCH_CHECK(!div.has_value() || *div != 0, op, ": divisor must be not zero");
	c.divisor = div.value_or(0);
	return c;
}

at::Tensor &avg_pool_out(const char *name, int nsp, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip,
			 std::optional<int64_t> div, at::Tensor &out)
{
	const char *op = nsp == 2 ? "avg_pool2d" : "avg_pool3d";
	auto st = self.scalar_type();
	TORCH_CHECK(is_float(st) || st == at::kLong, "\"", op, "\" not implemented for '", c10::toString(st), "'");
	PoolCfg c = avg_cfg(op, nsp, k, s, p, ceil, cip, div);
	auto o = pool_out_shape(op, self, c);
	pool_forward(name, self, c, o.data(), out, nullptr);
	return out;
}
at::Tensor &avg_pool2d_out(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> div,
			   at::Tensor &out)
{
	NEURON_TRACK("aten::avg_pool2d.out");
	return avg_pool_out("aten::avg_pool2d.out", 2, self, k, s, p, ceil, cip, div, out);
}
at::Tensor avg_pool2d(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> div)
{
	NEURON_TRACK("aten::avg_pool2d");
	at::Tensor out = at::empty({0}, self.options());
	return avg_pool_out("aten::avg_pool2d", 2, self, k, s, p, ceil, cip, div, out);
}
at::Tensor &avg_pool3d_out(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> div,
			   at::Tensor &out)
{
	NEURON_TRACK("aten::avg_pool3d.out");
	return avg_pool_out("aten::avg_pool3d.out", 3, self, k, s, p, ceil, cip, div, out);
}
at::Tensor avg_pool3d(const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip, std::optional<int64_t> div)
{
	NEURON_TRACK("aten::avg_pool3d");
	at::Tensor out = at::empty({0}, self.options());
	return avg_pool_out("aten::avg_pool3d", 3, self, k, s, p, ceil, cip, div, out);
}

at::Tensor &avg_pool_bwd(const char *name, int nsp, const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p,
			 bool ceil, bool cip, std::optional<int64_t> div, at::Tensor &gi)
{
	const char *op = nsp == 2 ? "avg_pool2d_backward" : "avg_pool3d_backward";
	PoolCfg c = avg_cfg(op, nsp, k, s, p, ceil, cip, div);
	auto o = pool_out_shape(op, self, c);
	pool_backward(name, grad, self, c, o.data(), nullptr, gi);
	return gi;
}
at::Tensor &avg_pool2d_bwd_out(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip,
			       std::optional<int64_t> div, at::Tensor &gi)
{
	NEURON_TRACK("aten::avg_pool2d_backward.grad_input");
	return avg_pool_bwd("aten::avg_pool2d_backward.grad_input", 2, grad, self, k, s, p, ceil, cip, div, gi);
}
at::Tensor avg_pool2d_bwd(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip,
			  std::optional<int64_t> div)
{
	NEURON_TRACK("aten::avg_pool2d_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return avg_pool_bwd("aten::avg_pool2d_backward", 2, grad, self, k, s, p, ceil, cip, div, gi);
}
at::Tensor &avg_pool3d_bwd_out(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip,
			       std::optional<int64_t> div, at::Tensor &gi)
{
	NEURON_TRACK("aten::avg_pool3d_backward.grad_input");
	return avg_pool_bwd("aten::avg_pool3d_backward.grad_input", 3, grad, self, k, s, p, ceil, cip, div, gi);
}
at::Tensor avg_pool3d_bwd(const at::Tensor &grad, const at::Tensor &self, IntArrayRef k, IntArrayRef s, IntArrayRef p, bool ceil, bool cip,
			  std::optional<int64_t> div)
{
	NEURON_TRACK("aten::avg_pool3d_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return avg_pool_bwd("aten::avg_pool3d_backward", 3, grad, self, k, s, p, ceil, cip, div, gi);
}

// ---- adaptive pooling ---------------------------------------------------------------------------

std::array<int64_t, 3> adaptive_shape(const char *op, const at::Tensor &x, int nsp, c10::SymIntArrayRef osz_sym)
{
	auto osz = C10_AS_INTARRAYREF_SLOW(osz_sym);
	TORCH_CHECK((int)osz.size() == nsp, op, ": output_size must be ", nsp, ", but got ", osz.size());
	TORCH_CHECK(x.dim() == nsp + 1 || x.dim() == nsp + 2, op, "(): Expected ", nsp + 1, "D or ", nsp + 2, "D tensor, but got ", x.sizes());
	for (int64_t i = 1; i < x.dim(); i++)
		TORCH_CHECK(x.size(i) > 0, op, "(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ", x.sizes(),
			    " with dimension ", i, " being empty");
	check_dtype(op, x, false);
	std::array<int64_t, 3> o{1, 1, 1};
	for (int d = 0; d < nsp; d++) {
		TORCH_CHECK(osz[d] >= 0, op, ": elements of output_size must be greater than or equal to 0 but received ", osz);
		o[3 - nsp + d] = osz[d];
	}
	return o;
}

at::Tensor adaptive_avg(const char *name, int nsp, const at::Tensor &self, c10::SymIntArrayRef osz)
{
	auto o = adaptive_shape(nsp == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d", self, nsp, osz);
	PoolCfg c;
	c.mode = NK_POOL_ADAPTIVE_AVG, c.nsp = nsp;
	at::Tensor out = at::empty({0}, self.options());
	pool_forward(name, self, c, o.data(), out, nullptr);
	return out;
}
at::Tensor adaptive_avg2d(const at::Tensor &self, c10::SymIntArrayRef osz)
{
	NEURON_TRACK("aten::_adaptive_avg_pool2d");
	return adaptive_avg("aten::_adaptive_avg_pool2d", 2, self, osz);
}
at::Tensor adaptive_avg3d(const at::Tensor &self, c10::SymIntArrayRef osz)
{
	NEURON_TRACK("aten::_adaptive_avg_pool3d");
	return adaptive_avg("aten::_adaptive_avg_pool3d", 3, self, osz);
}
at::Tensor adaptive_avg_bwd(const char *name, int nsp, const at::Tensor &grad, const at::Tensor &self)
{
	at::native::adaptive_pool_empty_output_check(grad, nsp == 2 ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool3d_backward");
	TORCH_CHECK(grad.dim() == self.dim(), name, ": grad_output and input must have the same rank, got ", grad.sizes(), " and ", self.sizes());
	PoolCfg c;
	c.mode = NK_POOL_ADAPTIVE_AVG, c.nsp = nsp;
	int64_t NC, o[3];
	planes_of(grad, nsp, NC, o);
	at::Tensor gi = at::empty({0}, self.options());
	pool_backward(name, grad, self, c, o, nullptr, gi);
	return gi;
}
at::Tensor adaptive_avg2d_bwd(const at::Tensor &grad, const at::Tensor &self)
{
	NEURON_TRACK("aten::_adaptive_avg_pool2d_backward");
	return adaptive_avg_bwd("aten::_adaptive_avg_pool2d_backward", 2, grad, self);
}
at::Tensor adaptive_avg3d_bwd(const at::Tensor &grad, const at::Tensor &self)
{
	NEURON_TRACK("aten::_adaptive_avg_pool3d_backward");
	return adaptive_avg_bwd("aten::_adaptive_avg_pool3d_backward", 3, grad, self);
}

std::tuple<at::Tensor &, at::Tensor &> adaptive_max_out(const char *name, int nsp, const at::Tensor &self, IntArrayRef osz, at::Tensor &out,
							at::Tensor &idx)
{
	auto o = adaptive_shape(nsp == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d", self, nsp, c10::fromIntArrayRefSlow(osz));
	PoolCfg c;
	c.mode = NK_POOL_ADAPTIVE_MAX, c.nsp = nsp;
	pool_forward(name, self, c, o.data(), out, &idx);
	return {out, idx};
}
std::tuple<at::Tensor &, at::Tensor &> adaptive_max2d_out(const at::Tensor &self, IntArrayRef osz, at::Tensor &out, at::Tensor &idx)
{
	NEURON_TRACK("aten::adaptive_max_pool2d.out");
	return adaptive_max_out("aten::adaptive_max_pool2d.out", 2, self, osz, out, idx);
}
std::tuple<at::Tensor, at::Tensor> adaptive_max2d(const at::Tensor &self, IntArrayRef osz)
{
	NEURON_TRACK("aten::adaptive_max_pool2d");
	at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
	adaptive_max_out("aten::adaptive_max_pool2d", 2, self, osz, out, idx);
	return {out, idx};
}
std::tuple<at::Tensor &, at::Tensor &> adaptive_max3d_out(const at::Tensor &self, IntArrayRef osz, at::Tensor &out, at::Tensor &idx)
{
	NEURON_TRACK("aten::adaptive_max_pool3d.out");
	return adaptive_max_out("aten::adaptive_max_pool3d.out", 3, self, osz, out, idx);
}
std::tuple<at::Tensor, at::Tensor> adaptive_max3d(const at::Tensor &self, IntArrayRef osz)
{
	NEURON_TRACK("aten::adaptive_max_pool3d");
	at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
	adaptive_max_out("aten::adaptive_max_pool3d", 3, self, osz, out, idx);
	return {out, idx};
}
at::Tensor &adaptive_max_bwd(const char *name, int nsp, const at::Tensor &grad, const at::Tensor &self, const at::Tensor &idx, at::Tensor &gi)
{
	at::native::adaptive_pool_empty_output_check(grad, nsp == 2 ? "adaptive_max_pool2d_backward" : "adaptive_max_pool3d_backward");
	TORCH_CHECK(grad.dim() == self.dim(), name, ": grad_output and input must have the same rank, got ", grad.sizes(), " and ", self.sizes());
	PoolCfg c;
	c.mode = NK_POOL_ADAPTIVE_MAX, c.nsp = nsp;
	int64_t NC, o[3];
	planes_of(grad, nsp, NC, o);
	pool_backward(name, grad, self, c, o, &idx, gi);
	return gi;
}
at::Tensor &adaptive_max2d_bwd_out(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &idx, at::Tensor &gi)
{
	NEURON_TRACK("aten::adaptive_max_pool2d_backward.grad_input");
	return adaptive_max_bwd("aten::adaptive_max_pool2d_backward.grad_input", 2, grad, self, idx, gi);
}
at::Tensor adaptive_max2d_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &idx)
{
	NEURON_TRACK("aten::adaptive_max_pool2d_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return adaptive_max_bwd("aten::adaptive_max_pool2d_backward", 2, grad, self, idx, gi);
}
at::Tensor &adaptive_max3d_bwd_out(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &idx, at::Tensor &gi)
{
	NEURON_TRACK("aten::adaptive_max_pool3d_backward.grad_input");
	return adaptive_max_bwd("aten::adaptive_max_pool3d_backward.grad_input", 3, grad, self, idx, gi);
}
at::Tensor adaptive_max3d_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &idx)
{
	NEURON_TRACK("aten::adaptive_max_pool3d_backward");
	at::Tensor gi = at::empty({0}, self.options());
	return adaptive_max_bwd("aten::adaptive_max_pool3d_backward", 3, grad, self, idx, gi);
}

// ---- max unpooling ------------------------------------------------------------------------------

at::Tensor &max_unpool_out(const char *name, int nsp, const at::Tensor &self, const at::Tensor &idx, c10::SymIntArrayRef osz_sym, at::Tensor &out)
{
	const char *op = nsp == 2 ? "max_unpool2d" : "max_unpool3d";
	auto osz = C10_AS_INTARRAYREF_SLOW(osz_sym);
	TORCH_CHECK(idx.scalar_type() == at::kLong, op, ": elements in indices should be type int64 but got: ", idx.scalar_type());
	TORCH_CHECK((int)osz.size() == nsp, op, ": There should be exactly ", nsp, " elements (", nsp == 2 ? "height, width" : "depth, height, width",
		    ") in output_size, but got ", osz.size(), " elements.");
	TORCH_CHECK(self.dim() == nsp + 1 || self.dim() == nsp + 2, op, ": Input to max_unpooling", nsp, "d should be a ", nsp + 1, "d or ",
		    nsp + 2, "d Tensor, but got a tensor with ", self.dim(), " dimensions.");
	TORCH_CHECK(self.sizes() == idx.sizes(), op, ": Shape of indices (", idx.sizes(), ") should match shape of input (", self.sizes(), ")");
	for (int64_t i = 1; i < self.dim(); i++)
		TORCH_CHECK(self.size(i) > 0, op, ": Expected input to have non-zero size for non-batch dimensions, but got ", self.sizes(),
			    " with dimension ", i, " being empty.");
	TORCH_CHECK(self.scalar_type() != at::kBool, "\"", op, "\" not implemented for 'Bool'");
	int64_t o[3] = {1, 1, 1};
	for (int d = 0; d < nsp; d++) {
		TORCH_CHECK(osz[d] > 0, op, ": output_size must be positive, got ", osz);
		o[3 - nsp + d] = osz[d];
	}
	c10::DeviceGuard g(self.device());
	resize_out(out, with_spatial(self, nsp, o), self.options());
	at::Tensor x = self.contiguous(), ic = idx.contiguous();
	Dst y(out);
	nk_unpool_args_t a{};
	int64_t in[3];
	a.dtype = nk_dtype(self.scalar_type(), name);
	planes_of(x, nsp, a.NC, in);
	a.in_plane = in[0] * in[1] * in[2], a.out_plane = o[0] * o[1] * o[2];
	a.x = x.const_data_ptr(), a.idx = ic.const_data_ptr<int64_t>(), a.y = y.t.data_ptr();
	if (y.t.numel())
		run(self, nk_unpool_run, &a, sizeof a, name);
	y.finish();
	return out;
}
at::Tensor max_unpool2d(const at::Tensor &self, const at::Tensor &idx, c10::SymIntArrayRef osz)
{
	NEURON_TRACK("aten::max_unpool2d");
	at::Tensor out = at::empty({0}, self.options());
	return max_unpool_out("aten::max_unpool2d", 2, self, idx, osz, out);
}
at::Tensor &max_unpool2d_out(const at::Tensor &self, const at::Tensor &idx, c10::SymIntArrayRef osz, at::Tensor &out)
{
	NEURON_TRACK("aten::max_unpool2d.out");
	return max_unpool_out("aten::max_unpool2d.out", 2, self, idx, osz, out);
}
void unpool3d_check(IntArrayRef s, IntArrayRef p)
{
	TORCH_CHECK(s.size() == 3, "max_unpool3d: There should be exactly three elements (depth, height, width) in stride, but got: ", s.size());
	TORCH_CHECK(p.size() == 3, "max_unpool3d: There should be exactly three elements (depth, height, width) in padding, but got: ", p.size());
	TORCH_CHECK(s[0] > 0 && s[1] > 0 && s[2] > 0, "max_unpool3d: strides should be greater than zero, but got stride: ", s);
}
at::Tensor max_unpool3d(const at::Tensor &self, const at::Tensor &idx, c10::SymIntArrayRef osz, IntArrayRef s, IntArrayRef p)
{
	NEURON_TRACK("aten::max_unpool3d");
	unpool3d_check(s, p);
	at::Tensor out = at::empty({0}, self.options());
	return max_unpool_out("aten::max_unpool3d", 3, self, idx, osz, out);
}
at::Tensor &max_unpool3d_out(const at::Tensor &self, const at::Tensor &idx, c10::SymIntArrayRef osz, IntArrayRef s, IntArrayRef p, at::Tensor &out)
{
	NEURON_TRACK("aten::max_unpool3d.out");
	unpool3d_check(s, p);
	return max_unpool_out("aten::max_unpool3d.out", 3, self, idx, osz, out);
}

// ==== interpolation ==============================================================================

// Output shape after ATen's checks; o[3] gets the right-aligned spatial output sizes.
std::vector<int64_t> upsample_check(const char *op, int nsp, IntArrayRef in_sizes, IntArrayRef osz)
{
	TORCH_CHECK((int)osz.size() == nsp, op, ": It is expected output_size equals to ", nsp, ", but got size ", osz.size());
	if (nsp == 1) {
		auto r = at::native::upsample_1d_common_check(in_sizes, osz);
		return {r.begin(), r.end()};
	}
	if (nsp == 2) {
		auto r = at::native::upsample_2d_common_check(in_sizes, osz);
		return {r.begin(), r.end()};
	}
	auto r = at::native::upsample_3d_common_check(in_sizes, osz);
	return {r.begin(), r.end()};
}

void fill_scales(double sc[3], int nsp, std::initializer_list<OptD> scales)
{
	int d = 3 - nsp;
	sc[0] = sc[1] = sc[2] = 0;
	for (const auto &s : scales)
		sc[d++] = s.has_value() ? *s : 0;
}

at::Tensor &upsample_out(const char *name, const char *op, int mode, int nsp, const at::Tensor &self, c10::SymIntArrayRef osz_sym, bool ac,
			 std::initializer_list<OptD> scales, at::Tensor &out)
{
	auto osz = C10_AS_INTARRAYREF_SLOW(osz_sym);
	bool nearest = mode == NK_INTERP_NEAREST || mode == NK_INTERP_NEAREST_EXACT;
	TORCH_CHECK(self.dim() == nsp + 2, op, ": expected a ", nsp + 2, "-D input (batch, channels, spatial), got ", self.sizes());
	auto shape = upsample_check(op, nsp, self.sizes(), osz);
	check_dtype(op, self, nearest || nsp == 2, true); // uint8: nearest, bilinear, bicubic (as the CPU)
	c10::DeviceGuard g(self.device());
	resize_out(out, shape, self.options());
	at::Tensor x = self.contiguous();
	Dst y(out);
	nk_interp_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), name), a.mode = mode, a.nsp = nsp, a.align_corners = ac;
	planes_of(x, nsp, a.NC, a.in);
	int64_t NC;
	planes_of(y.t, nsp, NC, a.out);
	fill_scales(a.scale, nsp, scales);
	a.x = x.const_data_ptr(), a.y = y.t.data_ptr();
	if (y.t.numel())
		run(self, nk_interp_run, &a, sizeof a, name);
	y.finish();
	return out;
}

at::Tensor &upsample_bwd_out(const char *name, const char *op, int mode, int nsp, const at::Tensor &grad, c10::SymIntArrayRef osz_sym,
			     c10::SymIntArrayRef isz_sym, bool ac, std::initializer_list<OptD> scales, at::Tensor &gi)
{
	auto osz = C10_AS_INTARRAYREF_SLOW(osz_sym), isz = C10_AS_INTARRAYREF_SLOW(isz_sym);
	TORCH_CHECK((int)isz.size() == nsp + 2, op, ": It is expected input_size equals to ", nsp + 2, ", but got size ", isz.size());
	auto shape = upsample_check(op, nsp, isz, osz);
	TORCH_CHECK(grad.dim() == nsp + 2, op, ": Expected grad_output to be a tensor of dimension ", nsp + 2, " but got: dimension ", grad.dim());
	for (int i = 0; i < nsp + 2; i++)
		TORCH_CHECK(grad.size(i) == shape[i], op, ": Expected grad_output to have the same shape as output; output.size(", i, ") = ", shape[i],
			    " but got grad_output.size(", i, ") = ", grad.size(i));
	check_dtype(op, grad, false);
	c10::DeviceGuard g(grad.device());
	resize_out(gi, isz, grad.options());
	at::Tensor gy = grad.contiguous();
	Dst gx(gi);
	nk_interp_bwd_args_t a{};
	a.dtype = nk_dtype(grad.scalar_type(), name), a.mode = mode, a.nsp = nsp, a.align_corners = ac;
	planes_of(gx.t, nsp, a.NC, a.in);
	int64_t NC;
	planes_of(gy, nsp, NC, a.out);
	fill_scales(a.scale, nsp, scales);
	a.gy = gy.const_data_ptr(), a.gx = gx.t.data_ptr();
	if (gx.t.numel())
		run(grad, nk_interp_bwd_run, &a, sizeof a, name);
	gx.finish();
	return gi;
}

#define NEURON_UPSAMPLE(fn, op, MODE, NSP, AC_PARAM, AC, ...)                                                                       \
	at::Tensor &fn##_out(const at::Tensor &self, c10::SymIntArrayRef osz AC_PARAM, __VA_ARGS__, at::Tensor &out)                   \
	{                                                                                                                             \
		NEURON_TRACK("aten::" op ".out");                                                                                     \
		return upsample_out("aten::" op ".out", op, MODE, NSP, self, osz, AC, SCALES, out);                                  \
	}                                                                                                                             \
	at::Tensor fn(const at::Tensor &self, c10::SymIntArrayRef osz AC_PARAM, __VA_ARGS__)                                           \
	{                                                                                                                             \
		NEURON_TRACK("aten::" op);                                                                                            \
		at::Tensor out = at::empty({0}, self.options());                                                                      \
		return upsample_out("aten::" op, op, MODE, NSP, self, osz, AC, SCALES, out);                                         \
	}                                                                                                                             \
	at::Tensor &fn##_bwd_out(const at::Tensor &grad, c10::SymIntArrayRef osz, c10::SymIntArrayRef isz AC_PARAM, __VA_ARGS__,      \
				 at::Tensor &gi)                                                                                      \
	{                                                                                                                             \
		NEURON_TRACK("aten::" op "_backward.grad_input");                                                                    \
		return upsample_bwd_out("aten::" op "_backward.grad_input", op "_backward", MODE, NSP, grad, osz, isz, AC, SCALES, gi); \
	}                                                                                                                             \
	at::Tensor fn##_bwd(const at::Tensor &grad, c10::SymIntArrayRef osz, c10::SymIntArrayRef isz AC_PARAM, __VA_ARGS__)          \
	{                                                                                                                             \
		NEURON_TRACK("aten::" op "_backward");                                                                               \
		at::Tensor gi = at::empty({0}, grad.options());                                                                       \
		return upsample_bwd_out("aten::" op "_backward", op "_backward", MODE, NSP, grad, osz, isz, AC, SCALES, gi);          \
	}

#define COMMA ,
#define SCALES {s0}
NEURON_UPSAMPLE(up_nearest1d, "upsample_nearest1d", NK_INTERP_NEAREST, 1, , false, OptD s0)
NEURON_UPSAMPLE(up_nearest_exact1d, "_upsample_nearest_exact1d", NK_INTERP_NEAREST_EXACT, 1, , false, OptD s0)
NEURON_UPSAMPLE(up_linear1d, "upsample_linear1d", NK_INTERP_LINEAR, 1, COMMA bool ac, ac, OptD s0)
#undef SCALES
#define SCALES {s0, s1}
NEURON_UPSAMPLE(up_nearest2d, "upsample_nearest2d", NK_INTERP_NEAREST, 2, , false, OptD s0, OptD s1)
NEURON_UPSAMPLE(up_nearest_exact2d, "_upsample_nearest_exact2d", NK_INTERP_NEAREST_EXACT, 2, , false, OptD s0, OptD s1)
NEURON_UPSAMPLE(up_bilinear2d, "upsample_bilinear2d", NK_INTERP_LINEAR, 2, COMMA bool ac, ac, OptD s0, OptD s1)
NEURON_UPSAMPLE(up_bicubic2d, "upsample_bicubic2d", NK_INTERP_CUBIC, 2, COMMA bool ac, ac, OptD s0, OptD s1)
#undef SCALES
#define SCALES {s0, s1, s2}
NEURON_UPSAMPLE(up_nearest3d, "upsample_nearest3d", NK_INTERP_NEAREST, 3, , false, OptD s0, OptD s1, OptD s2)
NEURON_UPSAMPLE(up_nearest_exact3d, "_upsample_nearest_exact3d", NK_INTERP_NEAREST_EXACT, 3, , false, OptD s0, OptD s1, OptD s2)
NEURON_UPSAMPLE(up_trilinear3d, "upsample_trilinear3d", NK_INTERP_LINEAR, 3, COMMA bool ac, ac, OptD s0, OptD s1, OptD s2)
#undef SCALES
#undef COMMA

// ==== padding ====================================================================================

// lo/hi pads per right-aligned spatial dim from ATen's (last dim first) padding list.
void pad_geometry(const char *op, int nsp, const at::Tensor &x, IntArrayRef pad, int mode, int64_t in[3], int64_t out[3], int64_t lo[3])
{
	int64_t NC;
	planes_of(x, nsp, NC, in);
	for (int d = 0; d < 3; d++) {
		out[d] = in[d], lo[d] = 0;
		if (d < 3 - nsp)
			continue;
		int j = 2 - d; // pad[2j], pad[2j+1] pad dimension -(j+1)
		int64_t l = pad[2 * j], r = pad[2 * j + 1];
		if (mode == NK_PAD_REFLECT)
			TORCH_CHECK(l < in[d] && r < in[d], op, ": Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
				    l, ", ", r, ") at dimension ", x.dim() - 1 - j, " of input ", x.sizes());
		out[d] = in[d] + l + r, lo[d] = l;
		TORCH_CHECK(out[d] >= 0, op, ": input (", (d == 2 ? "W" : d == 1 ? "H" : "D"), ": ", in[d], ") is too small. Calculated output ",
			    (d == 2 ? "W" : d == 1 ? "H" : "D"), ": ", out[d]);
	}
}

at::Tensor &pad_out(const char *name, const char *op, int mode, int nsp, const at::Tensor &self, c10::SymIntArrayRef pad_sym, at::Tensor &out)
{
	auto pad = C10_AS_INTARRAYREF_SLOW(pad_sym);
	if (nsp == 1)
		at::native::padding::check_valid_input<1>(self, pad);
	else if (nsp == 2)
		at::native::padding::check_valid_input<2>(self, pad);
	else
		at::native::padding::check_valid_input<3>(self, pad);
	TORCH_CHECK(self.scalar_type() != at::kBool, "\"", op, "\" not implemented for 'Bool'");
	nk_pad_args_t a{};
	pad_geometry(op, nsp, self, pad, mode, a.in, a.out, a.lo);
	c10::DeviceGuard g(self.device());
	resize_out(out, with_spatial(self, nsp, a.out), self.options());
	at::Tensor x = self.contiguous();
	Dst y(out);
	a.dtype = nk_dtype(self.scalar_type(), name), a.mode = mode;
	int64_t in[3];
	planes_of(x, nsp, a.NC, in);
	a.x = x.const_data_ptr(), a.y = y.t.data_ptr();
	if (y.t.numel())
		run(self, nk_pad_run, &a, sizeof a, name);
	y.finish();
	return out;
}

at::Tensor &pad_bwd_out(const char *name, const char *op, int mode, int nsp, const at::Tensor &grad, const at::Tensor &self, c10::SymIntArrayRef pad_sym,
			at::Tensor &gi)
{
	auto pad = C10_AS_INTARRAYREF_SLOW(pad_sym);
	TORCH_CHECK((int)pad.size() == 2 * nsp, op, ": padding size is expected to be ", 2 * nsp, ", but got: ", pad.size());
	TORCH_CHECK(self.dim() == nsp + 1 || self.dim() == nsp + 2, op, ": expected a ", nsp + 1, "-D or ", nsp + 2, "-D input, got ", self.sizes());
	check_dtype(op, grad, false);
	TORCH_CHECK(grad.scalar_type() == self.scalar_type(), op, ": grad_output and input dtypes differ: ", grad.scalar_type(), " and ", self.scalar_type());
	nk_pad_args_t a{};
	pad_geometry(op, nsp, self, pad, mode, a.in, a.out, a.lo);
	auto oshape = with_spatial(self, nsp, a.out);
	TORCH_CHECK(grad.sizes() == IntArrayRef(oshape), op, ": grad_output has shape ", grad.sizes(), ", expected ", IntArrayRef(oshape));
	c10::DeviceGuard g(self.device());
	resize_out(gi, self.sizes(), self.options());
	at::Tensor gy = grad.contiguous();
	Dst gx(gi);
	a.dtype = nk_dtype(self.scalar_type(), name), a.mode = mode;
	int64_t in[3];
	planes_of(gx.t, nsp, a.NC, in);
	a.x = gy.const_data_ptr(), a.y = gx.t.data_ptr();
	if (gx.t.numel())
		run(self, nk_pad_bwd_run, &a, sizeof a, name);
	gx.finish();
	return gi;
}

#define NEURON_PAD(fn, op, MODE, NSP)                                                                                           \
	at::Tensor &fn##_out(const at::Tensor &self, c10::SymIntArrayRef pad, at::Tensor &out)                                  \
	{                                                                                                                       \
		NEURON_TRACK("aten::" op ".out");                                                                               \
		return pad_out("aten::" op ".out", op, MODE, NSP, self, pad, out);                                             \
	}                                                                                                                       \
	at::Tensor fn(const at::Tensor &self, c10::SymIntArrayRef pad)                                                          \
	{                                                                                                                       \
		NEURON_TRACK("aten::" op);                                                                                      \
		at::Tensor out = at::empty({0}, self.options());                                                                \
		return pad_out("aten::" op, op, MODE, NSP, self, pad, out);                                                    \
	}                                                                                                                       \
	at::Tensor &fn##_bwd_out(const at::Tensor &grad, const at::Tensor &self, c10::SymIntArrayRef pad, at::Tensor &gi)       \
	{                                                                                                                       \
		NEURON_TRACK("aten::" op "_backward.grad_input");                                                              \
		return pad_bwd_out("aten::" op "_backward.grad_input", op "_backward", MODE, NSP, grad, self, pad, gi);        \
	}                                                                                                                       \
	at::Tensor fn##_bwd(const at::Tensor &grad, const at::Tensor &self, c10::SymIntArrayRef pad)                            \
	{                                                                                                                       \
		NEURON_TRACK("aten::" op "_backward");                                                                         \
		at::Tensor gi = at::empty({0}, self.options());                                                                 \
		return pad_bwd_out("aten::" op "_backward", op "_backward", MODE, NSP, grad, self, pad, gi);                   \
	}

NEURON_PAD(reflection_pad1d, "reflection_pad1d", NK_PAD_REFLECT, 1)
NEURON_PAD(reflection_pad2d, "reflection_pad2d", NK_PAD_REFLECT, 2)
NEURON_PAD(reflection_pad3d, "reflection_pad3d", NK_PAD_REFLECT, 3)
NEURON_PAD(replication_pad1d, "replication_pad1d", NK_PAD_REPLICATE, 1)
NEURON_PAD(replication_pad2d, "replication_pad2d", NK_PAD_REPLICATE, 2)
NEURON_PAD(replication_pad3d, "replication_pad3d", NK_PAD_REPLICATE, 3)

// ==== channel shuffle ==============================================================================

// [N, C, *] -> [N, g, C/g, *] transposed to [N, C/g, g, *]: a strided copy (the native copy kernel).
at::Tensor channel_shuffle(const at::Tensor &self, c10::SymInt groups_sym)
{
	NEURON_TRACK("aten::channel_shuffle");
	int64_t g = groups_sym.guard_int(__FILE__, __LINE__);
	TORCH_CHECK(self.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes ", self.sizes());
	TORCH_CHECK(g > 0, "Number of groups to divide channels in must be positive.", " Value of groups:", g);
	int64_t c = self.size(1);
	TORCH_CHECK(c % g == 0, "Number of channels must be divisible by groups. Got ", c, " channels and ", g, " groups.");
	c10::DeviceGuard guard(self.device());
	std::vector<int64_t> split{self.size(0), g, c / g};
	for (int64_t i = 2; i < self.dim(); i++)
		split.push_back(self.size(i));
	at::Tensor out = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
	if (self.numel() == 0)
		return out;
	// out viewed as [N, C/g, g, *] (in its own layout) receives self viewed as [N, g, C/g, *] transposed
	std::vector<int64_t> oshape{self.size(0), c / g, g};
	for (int64_t i = 2; i < self.dim(); i++)
		oshape.push_back(self.size(i));
	std::vector<int64_t> ostride{out.stride(0), g * out.stride(1), out.stride(1)};
	for (int64_t i = 2; i < self.dim(); i++)
		ostride.push_back(out.stride(i));
	out.as_strided(oshape, ostride).copy_(self.reshape(split).transpose(1, 2));
	return out;
}

// ==== grid sampling ================================================================================

void grid_check(const char *op, const at::Tensor &input, const at::Tensor &grid, int64_t mode, int64_t pad)
{
	at::native::check_grid_sampler_common(input, grid);
	at::native::check_grid_sampler_2d(input, grid);
	TORCH_CHECK(mode >= 0 && mode < NK_GRID_NMODES, op, ": bad interpolation_mode ", mode);
	TORCH_CHECK(pad >= 0 && pad < NK_GRID_NPADS, op, ": bad padding_mode ", pad);
	TORCH_CHECK(input.scalar_type() == grid.scalar_type(), op, ": expected input and grid to have the same dtype, got ", input.scalar_type(), " and ",
		    grid.scalar_type());
	check_dtype(op, input, false);
}

at::Tensor grid_sampler_2d(const at::Tensor &input, const at::Tensor &grid, int64_t mode, int64_t pad, bool ac)
{
	NEURON_TRACK("aten::grid_sampler_2d");
	grid_check("grid_sampler_2d", input, grid, mode, pad);
	c10::DeviceGuard g(input.device());
	at::Tensor x = input.contiguous(), gr = grid.contiguous();
	at::Tensor out = at::empty({input.size(0), input.size(1), grid.size(1), grid.size(2)}, input.options());
	nk_grid_sample_args_t a{};
	a.dtype = nk_dtype(input.scalar_type(), "aten::grid_sampler_2d"), a.mode = (int)mode, a.padding = (int)pad, a.align_corners = ac;
	a.N = input.size(0), a.C = input.size(1), a.IH = input.size(2), a.IW = input.size(3), a.OH = grid.size(1), a.OW = grid.size(2);
	a.x = x.const_data_ptr(), a.grid = gr.const_data_ptr(), a.y = out.data_ptr();
	if (out.numel())
		run(input, nk_grid_sample_run, &a, sizeof a, "aten::grid_sampler_2d");
	return out;
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_bwd(const at::Tensor &grad, const at::Tensor &input, const at::Tensor &grid, int64_t mode, int64_t pad,
						       bool ac, std::array<bool, 2> mask)
{
	NEURON_TRACK("aten::grid_sampler_2d_backward");
	grid_check("grid_sampler_2d_backward", input, grid, mode, pad);
	std::vector<int64_t> oshape{input.size(0), input.size(1), grid.size(1), grid.size(2)};
	TORCH_CHECK(grad.sizes() == at::IntArrayRef(oshape), "grid_sampler_2d_backward: grad_output has shape ", grad.sizes(), ", expected ", oshape);
	TORCH_CHECK(grad.scalar_type() == input.scalar_type(), "grid_sampler_2d_backward: grad_output dtype ", grad.scalar_type(), " differs from the input's ",
		    input.scalar_type());
	c10::DeviceGuard g(input.device());
	at::Tensor x = input.contiguous(), gr = grid.contiguous(), gy = grad.contiguous();
	at::Tensor gx = mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
	at::Tensor gg = mask[1] ? at::empty(grid.sizes(), grid.options()) : at::Tensor();
	nk_grid_sample_bwd_args_t a{};
	a.dtype = nk_dtype(input.scalar_type(), "aten::grid_sampler_2d_backward"), a.mode = (int)mode, a.padding = (int)pad, a.align_corners = ac;
	a.N = input.size(0), a.C = input.size(1), a.IH = input.size(2), a.IW = input.size(3), a.OH = grid.size(1), a.OW = grid.size(2);
	a.gy = gy.const_data_ptr(), a.x = x.const_data_ptr(), a.grid = gr.const_data_ptr();
	a.gx = mask[0] ? gx.data_ptr() : nullptr, a.ggrid = mask[1] ? gg.data_ptr() : nullptr;
	if ((mask[0] && gx.numel()) || (mask[1] && gg.numel()))
		run(input, nk_grid_sample_bwd_run, &a, sizeof a, "aten::grid_sampler_2d_backward");
	return {gx, gg};
}

} // namespace
} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "max_pool2d_with_indices", max_pool2d_wi);
	NEURON_IMPL(m, "max_pool2d_with_indices.out", max_pool2d_wi_out);
	NEURON_IMPL(m, "max_pool2d_with_indices_backward", max_pool2d_bwd);
	NEURON_IMPL(m, "max_pool2d_with_indices_backward.grad_input", max_pool2d_bwd_out);
	NEURON_IMPL(m, "max_pool3d_with_indices", max_pool3d_wi);
	NEURON_IMPL(m, "max_pool3d_with_indices.out", max_pool3d_wi_out);
	NEURON_IMPL(m, "max_pool3d_with_indices_backward", max_pool3d_bwd);
	NEURON_IMPL(m, "max_pool3d_with_indices_backward.grad_input", max_pool3d_bwd_out);
	NEURON_IMPL(m, "avg_pool2d", avg_pool2d);
	NEURON_IMPL(m, "avg_pool2d.out", avg_pool2d_out);
	NEURON_IMPL(m, "avg_pool2d_backward", avg_pool2d_bwd);
	NEURON_IMPL(m, "avg_pool2d_backward.grad_input", avg_pool2d_bwd_out);
	NEURON_IMPL(m, "avg_pool3d", avg_pool3d);
	NEURON_IMPL(m, "avg_pool3d.out", avg_pool3d_out);
	NEURON_IMPL(m, "avg_pool3d_backward", avg_pool3d_bwd);
	NEURON_IMPL(m, "avg_pool3d_backward.grad_input", avg_pool3d_bwd_out);
	NEURON_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg2d);
	NEURON_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg2d_bwd);
	NEURON_IMPL(m, "_adaptive_avg_pool3d", adaptive_avg3d);
	NEURON_IMPL(m, "_adaptive_avg_pool3d_backward", adaptive_avg3d_bwd);
	NEURON_IMPL(m, "adaptive_max_pool2d", adaptive_max2d);
	NEURON_IMPL(m, "adaptive_max_pool2d.out", adaptive_max2d_out);
	NEURON_IMPL(m, "adaptive_max_pool2d_backward", adaptive_max2d_bwd);
	NEURON_IMPL(m, "adaptive_max_pool2d_backward.grad_input", adaptive_max2d_bwd_out);
	NEURON_IMPL(m, "adaptive_max_pool3d", adaptive_max3d);
	NEURON_IMPL(m, "adaptive_max_pool3d.out", adaptive_max3d_out);
	NEURON_IMPL(m, "adaptive_max_pool3d_backward", adaptive_max3d_bwd);
	NEURON_IMPL(m, "adaptive_max_pool3d_backward.grad_input", adaptive_max3d_bwd_out);
	NEURON_IMPL(m, "max_unpool2d", max_unpool2d);
	NEURON_IMPL(m, "max_unpool2d.out", max_unpool2d_out);
	NEURON_IMPL(m, "max_unpool3d", max_unpool3d);
	NEURON_IMPL(m, "max_unpool3d.out", max_unpool3d_out);
	NEURON_IMPL(m, "channel_shuffle", channel_shuffle);
	NEURON_IMPL(m, "grid_sampler_2d", grid_sampler_2d);
	NEURON_IMPL(m, "grid_sampler_2d_backward", grid_sampler_2d_bwd);
	NEURON_IMPL(m, "native_channel_shuffle", channel_shuffle);
#define UP(fn, op)                                      \
	NEURON_IMPL(m, op, fn);                                 \
	NEURON_IMPL(m, op ".out", fn##_out);                    \
	NEURON_IMPL(m, op "_backward", fn##_bwd);               \
	NEURON_IMPL(m, op "_backward.grad_input", fn##_bwd_out);
	UP(up_nearest1d, "upsample_nearest1d")
	UP(up_nearest2d, "upsample_nearest2d")
	UP(up_nearest3d, "upsample_nearest3d")
	UP(up_nearest_exact1d, "_upsample_nearest_exact1d")
	UP(up_nearest_exact2d, "_upsample_nearest_exact2d")
	UP(up_nearest_exact3d, "_upsample_nearest_exact3d")
	UP(up_linear1d, "upsample_linear1d")
	UP(up_bilinear2d, "upsample_bilinear2d")
	UP(up_bicubic2d, "upsample_bicubic2d")
	UP(up_trilinear3d, "upsample_trilinear3d")
	UP(reflection_pad1d, "reflection_pad1d")
	UP(reflection_pad2d, "reflection_pad2d")
	UP(reflection_pad3d, "reflection_pad3d")
	UP(replication_pad1d, "replication_pad1d")
	UP(replication_pad2d, "replication_pad2d")
	UP(replication_pad3d, "replication_pad3d")
#undef UP
}
