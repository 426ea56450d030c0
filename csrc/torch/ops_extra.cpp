// ops_extra.cpp - native coverage found missing by the conformance sweep (docs/conformance.md):
// indexing (gather/scatter/index_* /take/put/masked_*/nonzero), shape ops (tril/triu, flip, roll),
// scans (cumsum/cumprod/cummax/cummin/logcumsumexp), sort, factories (linspace/logspace/eye),
// pointwise ops and activations that reuse nk_pointwise ops, reductions composed of native ones, and
// losses (smooth_l1, huber, binary_cross_entropy, log_sigmoid) composed of native elementwise and
// reduction kernels.  Each wrapper checks arguments like aten, then launches the C kernel
// (index.c, scan.c, sort.c, shape.c) or composes registered native ops through the dispatcher.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/all.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/exp2.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/logspace.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/nan_to_num_ops.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/std.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/var.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

// ---- helpers ---------------------------------------------------------------------------------------

// A 0-d CPU tensor holding v in dtype t: the pointwise engine passes it to the kernel as a scalar.
static at::Tensor cpu_scalar(const c10::Scalar &v, at::ScalarType t)
{
	return at::scalar_tensor(v, at::TensorOptions().dtype(t));
}

// (aten skips the check for an empty index)
static void check_index_dtype(const char *op, const at::Tensor &index)
{
	TORCH_CHECK_TYPE(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
			 "(): Expected dtype int32/int64 for index");
}

static void check_same_device(const char *op, std::initializer_list<const at::Tensor *> ts)
{
	const at::Tensor *first = nullptr;
	for (auto *t : ts) {
		if (!t->defined() || (t->dim() == 0 && t->device().is_cpu() && first))
			continue;
		if (!first) {
			first = t;
			continue;
		}
		TORCH_CHECK(t->device() == first->device(), "Expected all tensors to be on the same device, but found at least two devices, ",
			    first->device(), " and ", t->device(), "! (when checking argument for ", op, ")");
	}
}

static void launch_index(const nk_index_args_t &a, const at::Tensor &any_dev, const char *name)
{
	int64_t n = 1;
	for (int d = 0; d < a.ndim; d++)
		n *= a.shape[d];
	if (n > 0)
		launch(current_queue(any_dev.device().index()), nk_index_run, a, name);
}

static void set_dims(nk_index_args_t &a, at::IntArrayRef shape)
{
	TORCH_CHECK(shape.size() <= NK_MAX_DIMS, "neuron: indexing supports at most ", NK_MAX_DIMS, " dims");
	a.ndim = (int)shape.size();
	for (int d = 0; d < a.ndim; d++)
		a.shape[d] = shape[d];
}

// ---- gather / scatter family -------------------------------------------------------------------------

// aten's gather_shape_check / scatter_shape_check: same number of dims, index no larger than self
// (except along dim) and than src.
static void check_gather_shapes(const char *op, const at::Tensor &self, int64_t dim, const at::Tensor &index,
				const at::Tensor *src)
{
	if (index.numel() == 0) // aten checks nothing more for an empty index
		return;
	int64_t nd = std::max<int64_t>(self.dim(), 1);
	TORCH_CHECK(std::max<int64_t>(index.dim(), 1) == nd, "Index tensor must have the same number of dimensions as ",
		    src ? "self tensor" : "input tensor");
	for (int64_t d = 0; d < nd; d++) {
		int64_t is = index.dim() ? index.size(d) : 1, ss = self.dim() ? self.size(d) : 1;
		if (d != dim)
			TORCH_CHECK(is <= ss, "Size does not match at dimension ", d, " expected index ", index.sizes(),
				    " to be no larger than self ", self.sizes(), " apart from dimension ", dim);
		if (src) {
			int64_t rs = src->dim() ? src->size(d) : 1;
			TORCH_CHECK(is <= rs, "Size does not match at dimension ", d, " expected index ", index.sizes(),
				    " to be no larger than src ", src->sizes());
		}
	}
}

static at::Tensor as1d(const at::Tensor &t)
{
	return t.dim() == 0 ? t.reshape({1}) : t;
}

// x[..k..] op= y (or value) over index's shape, along dim; x is written in place.
static void scatter_into(const char *name, int op, const at::Tensor &x, int64_t dim, const at::Tensor &index,
			 const at::Tensor &src, const c10::Scalar &value)
{
	if (index.numel() == 0)
		return;
	at::Tensor x1 = as1d(x), i1 = as1d(index), s1 = src.defined() ? as1d(src) : src;
	nk_index_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(x.scalar_type(), name);
	a.idx_dtype = nk_dtype(index.scalar_type(), name);
	set_dims(a, i1.sizes());
	a.dim = (int)dim;
	a.err_dim = (int)dim;
	a.bound = x1.size(dim);
	a.x = x1.data_ptr();
	for (int d = 0; d < a.ndim; d++)
		a.xs[d] = d == dim ? 0 : x1.stride(d);
	a.xk = x1.stride(dim);
	a.idx = i1.const_data_ptr();
	for (int d = 0; d < a.ndim; d++)
		a.is[d] = i1.stride(d);
	if (s1.defined()) {
		a.y = const_cast<void *>(s1.const_data_ptr());
		for (int d = 0; d < a.ndim; d++)
			a.ys[d] = s1.stride(d);
	} else {
		a.value = value.toDouble();
		a.ivalue = value.isBoolean() ? value.toBool() : value.isIntegral(false) ? value.toLong() : (int64_t)a.value;
	}
	launch_index(a, x, name);
}

static at::Tensor gather_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, bool sparse_grad)
{
	NEURON_TRACK("aten::gather");
	check_index_dtype("gather", index);
	check_same_device("gather", {&self, &index});
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	check_gather_shapes("gather", self, d, index, nullptr);
	c10::DeviceGuard g(self.device());
	at::Tensor out = at::empty(index.sizes(), self.options());
	if (index.numel() == 0)
		return out;
	at::Tensor x1 = as1d(self), i1 = as1d(index), o1 = as1d(out);
	nk_index_args_t a{};
	a.op = NK_IDX_GATHER;
	a.dtype = nk_dtype(self.scalar_type(), "aten::gather");
	a.idx_dtype = nk_dtype(index.scalar_type(), "aten::gather");
	set_dims(a, i1.sizes());
	a.dim = (int)d, a.err_dim = (int)d;
	a.bound = x1.size(d);
	a.x = const_cast<void *>(x1.const_data_ptr());
	for (int k = 0; k < a.ndim; k++)
		a.xs[k] = k == d ? 0 : x1.stride(k), a.ys[k] = o1.stride(k), a.is[k] = i1.stride(k);
	a.xk = x1.stride(d);
	a.y = o1.data_ptr();
	a.idx = i1.const_data_ptr();
	launch_index(a, self, "aten::gather");
	return out;
}
static at::Tensor &gather_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, bool sg, at::Tensor &out)
{
	NEURON_TRACK("aten::gather.out");
	return into(out, gather_f(self, dim, index, sg));
}

static int scatter_reduce_op(c10::string_view r, const char *op)
{
	if (r == "add" || r == "sum")
		return NK_IDX_SCATTER_ADD;
	if (r == "multiply" || r == "prod")
		return NK_IDX_SCATTER_MUL;
	if (r == "amax")
		return NK_IDX_SCATTER_AMAX;
	if (r == "amin")
		return NK_IDX_SCATTER_AMIN;
	TORCH_CHECK(false, op, " reduce argument must be either add or multiply, got ", r);
}

// The common part of every scatter: checks, then out (= self, or a copy of it) updated in place.
static at::Tensor &scatter_common(const char *name, const at::Tensor &self, int64_t dim, const at::Tensor &index,
				  const at::Tensor &src, const c10::Scalar &value, int op, at::Tensor &out)
{
	check_index_dtype("scatter", index);
	check_same_device(name, {&self, &index, &src});
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	check_gather_shapes("scatter", self, d, index, src.defined() ? &src : nullptr);
	// aten's scatter meta: the written tensor may not overlap itself, the index or the source
	at::assert_no_internal_overlap(out);
	at::assert_no_overlap(out, index);
	if (src.defined())
		at::assert_no_overlap(out, src);
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self)) {
		resize_out(out, self.sizes(), self.options());
		out.copy_(self);
	}
	at::Tensor s = src.defined() && src.scalar_type() != self.scalar_type() ? src.to(self.scalar_type()) : src;
	TORCH_CHECK(!src.defined() || src.scalar_type() == self.scalar_type(), name, "(): Expected self.dtype to be equal to src.dtype");
	scatter_into(name, op, out, d, index, s, value);
	return out;
}

static at::Tensor scatter_src(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src)
{
	NEURON_TRACK("aten::scatter.src");
	at::Tensor out = at::empty_like(self);
	return scatter_common("aten::scatter", self, dim, index, src, 0, NK_IDX_SCATTER, out);
}
static at::Tensor &scatter_src_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter.src_out");
	return scatter_common("aten::scatter", self, dim, index, src, 0, NK_IDX_SCATTER, out);
}
static at::Tensor &scatter_src_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src)
{
	NEURON_TRACK("aten::scatter_.src");
	return scatter_common("aten::scatter_", self, dim, index, src, 0, NK_IDX_SCATTER, self);
}
static at::Tensor scatter_value(const at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v)
{
	NEURON_TRACK("aten::scatter.value");
	at::Tensor out = at::empty_like(self);
	return scatter_common("aten::scatter", self, dim, index, {}, v, NK_IDX_SCATTER, out);
}
static at::Tensor &scatter_value_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter.value_out");
	return scatter_common("aten::scatter", self, dim, index, {}, v, NK_IDX_SCATTER, out);
}
static at::Tensor &scatter_value_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v)
{
	NEURON_TRACK("aten::scatter_.value");
	return scatter_common("aten::scatter_", self, dim, index, {}, v, NK_IDX_SCATTER, self);
}
static at::Tensor &scatter_reduce_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src, c10::string_view r, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter.reduce_out");
	return scatter_common("aten::scatter", self, dim, index, src, 0, scatter_reduce_op(r, "scatter"), out);
}
static at::Tensor scatter_reduce_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src, c10::string_view r)
{
	at::Tensor out = at::empty_like(self);
	return scatter_reduce_o(self, dim, index, src, r, out);
}
static at::Tensor &scatter_reduce_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src, c10::string_view r)
{
	return scatter_reduce_o(self, dim, index, src, r, self);
}
static at::Tensor &scatter_value_reduce_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v, c10::string_view r, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter.value_reduce_out");
	return scatter_common("aten::scatter", self, dim, index, {}, v, scatter_reduce_op(r, "scatter"), out);
}
static at::Tensor scatter_value_reduce_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v, c10::string_view r)
{
	at::Tensor out = at::empty_like(self);
	return scatter_value_reduce_o(self, dim, index, v, r, out);
}
static at::Tensor &scatter_value_reduce_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v, c10::string_view r)
{
	return scatter_value_reduce_o(self, dim, index, v, r, self);
}
static at::Tensor &scatter_add_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter_add.out");
	return scatter_common("aten::scatter_add", self, dim, index, src, 0, NK_IDX_SCATTER_ADD, out);
}
static at::Tensor scatter_add_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src)
{
	NEURON_TRACK("aten::scatter_add");
	at::Tensor out = at::empty_like(self);
	return scatter_common("aten::scatter_add", self, dim, index, src, 0, NK_IDX_SCATTER_ADD, out);
}
static at::Tensor &scatter_add_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src)
{
	NEURON_TRACK("aten::scatter_add_");
	return scatter_common("aten::scatter_add_", self, dim, index, src, 0, NK_IDX_SCATTER_ADD, self);
}

// The identity of a scatter_reduce reduction (written where include_self=False drops self).
static c10::Scalar reduce_identity(int op, at::ScalarType t)
{
	bool fl = at::isFloatingType(t);
	switch (op) {
	case NK_IDX_SCATTER_MUL: return 1;
	case NK_IDX_SCATTER_AMAX:
		if (fl)
			return -std::numeric_limits<double>::infinity();
		return t == at::kBool ? c10::Scalar(false) : c10::Scalar(t == at::kByte ? (int64_t)0 : t == at::kChar ? -128 : t == at::kShort ? -32768 : t == at::kInt ? (int64_t)INT32_MIN : INT64_MIN);
	case NK_IDX_SCATTER_AMIN:
		if (fl)
			return std::numeric_limits<double>::infinity();
		return t == at::kBool ? c10::Scalar(true) : c10::Scalar(t == at::kByte ? (int64_t)255 : t == at::kChar ? 127 : t == at::kShort ? 32767 : t == at::kInt ? (int64_t)INT32_MAX : INT64_MAX);
	default: return 0;
	}
}

static at::Tensor &scatter_reduce_two_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src,
					c10::string_view reduce, bool include_self, at::Tensor &out)
{
	NEURON_TRACK("aten::scatter_reduce.two_out");
	TORCH_CHECK(reduce == "sum" || reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
		    "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
	bool mean = reduce == "mean";
	int op = mean ? NK_IDX_SCATTER_ADD : scatter_reduce_op(reduce, "scatter_reduce");
	check_index_dtype("scatter_reduce", index);
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self)) {
		resize_out(out, self.sizes(), self.options());
		out.copy_(self);
	}
	if (index.numel() == 0)
		return out;
	if (!include_self)
		scatter_common("aten::scatter_reduce", out, d, index, {}, reduce_identity(op, self.scalar_type()), NK_IDX_SCATTER, out);
	scatter_common("aten::scatter_reduce", out, d, index, src, 0, op, out);
	if (mean) { // aten: count the contributions (self counts once if included), divide where > 0
		at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
		scatter_common("aten::scatter_reduce", count, d, index, at::ones_like(src), 0, NK_IDX_SCATTER_ADD, count);
		count.masked_fill_(count.eq(0), 1);
		if (at::isFloatingType(out.scalar_type()))
			out.div_(count);
		else
			out.div_(count, "floor");
	}
	return out;
}
static at::Tensor scatter_reduce_two(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src,
				     c10::string_view reduce, bool include_self)
{
	at::Tensor out = at::empty_like(self);
	return scatter_reduce_two_o(self, dim, index, src, reduce, include_self, out);
}
static at::Tensor &scatter_reduce_two_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &src,
					c10::string_view reduce, bool include_self)
{
	return scatter_reduce_two_o(self, dim, index, src, reduce, include_self, self);
}

// ---- index_select / index_add / index_copy / index_fill: a 1-d index along dim --------------------

static void check_index_1d(const char *op, const at::Tensor &index)
{
	TORCH_CHECK_INDEX(index.dim() <= 1, op, "(): Index is supposed to be a vector");
	TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
		    "(): Expected dtype int32/int64 for index");
}

// The nk_index arguments for "x along dim indexed by a 1-d index" over an iteration shape `shape`
// (x's shape with size(dim) = index.numel()).
static nk_index_args_t index1d_args(int op, const at::Tensor &x1, int64_t d, const at::Tensor &index, at::IntArrayRef shape,
				    const char *name, bool wrap)
{
	nk_index_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(x1.scalar_type(), name);
	a.idx_dtype = nk_dtype(index.scalar_type(), name);
	set_dims(a, shape);
	a.dim = (int)d, a.err_dim = (int)d;
	a.wrap = wrap;
	a.bound = x1.size(d);
	a.x = const_cast<void *>(x1.const_data_ptr());
	for (int k = 0; k < a.ndim; k++)
		a.xs[k] = k == d ? 0 : x1.stride(k), a.is[k] = k == d ? (index.dim() ? index.stride(0) : 0) : 0;
	a.xk = x1.stride(d);
	a.idx = index.const_data_ptr();
	return a;
}

static at::Tensor index_select_f(const at::Tensor &self, int64_t dim, const at::Tensor &index)
{
	NEURON_TRACK("aten::index_select");
	check_index_1d("index_select", index);
	check_same_device("index_select", {&self, &index});
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	c10::DeviceGuard g(self.device());
	at::Tensor x1 = as1d(self);
	auto shape = x1.sizes().vec();
	shape[d] = index.numel();
	at::Tensor out1 = at::empty(shape, self.options());
	nk_index_args_t a = index1d_args(NK_IDX_GATHER, x1, d, index, shape, "aten::index_select", false);
	a.y = out1.data_ptr();
	for (int k = 0; k < a.ndim; k++)
		a.ys[k] = out1.stride(k);
	launch_index(a, self, "aten::index_select");
	return self.dim() == 0 ? out1.reshape({}) : out1; // aten: a 0-d self gives a 0-d result
}
static at::Tensor &index_select_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, at::Tensor &out)
{
	NEURON_TRACK("aten::index_select.out");
	return into(out, index_select_f(self, dim, index));
}

// out = self (copied unless it is self), then out[..index[i]..] op= source[..i..] (or value).
static at::Tensor &index_scatter(const char *name, int op, const at::Tensor &self, int64_t dim, const at::Tensor &index,
				 const at::Tensor &source, const c10::Scalar &value, bool wrap, at::Tensor &out)
{
	check_index_1d(name, index);
	check_same_device(name, {&self, &index, &source});
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	// aten's index_add/index_copy meta (index_fill_ only warns on an expanded self)
	if (source.defined())
		at::assert_no_internal_overlap(out);
	at::assert_no_overlap(out, index);
	if (source.defined())
		at::assert_no_overlap(out, source);
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self)) {
		resize_out(out, self.sizes(), self.options());
		out.copy_(self);
	}
	at::Tensor x1 = as1d(out);
	std::vector<int64_t> shape = x1.sizes().vec();
	shape[d] = index.numel();
	at::Tensor s1;
	if (source.defined()) {
		TORCH_CHECK(source.scalar_type() == self.scalar_type(), name, "(): self (", self.scalar_type(), ") and source (",
			    source.scalar_type(), ") must have the same scalar type");
		s1 = as1d(source);
		TORCH_CHECK(s1.dim() == x1.dim(), name, "(): Source/destination tensor must have same slice shapes");
		TORCH_CHECK(s1.size(d) == index.numel(), name, "(): Number of indices (", index.numel(), ") should be equal to source.size(dim) (", s1.size(d), ")");
		for (int64_t k = 0; k < x1.dim(); k++)
			TORCH_CHECK(k == d || s1.size(k) == x1.size(k), name, "(): Source/destination tensor must have same slice shapes");
	}
	nk_index_args_t a = index1d_args(op, x1, d, index, shape, name, wrap);
	a.x = x1.data_ptr();
	if (s1.defined()) {
		a.y = const_cast<void *>(s1.const_data_ptr());
		for (int k = 0; k < a.ndim; k++)
			a.ys[k] = s1.stride(k);
	} else {
		a.value = value.toDouble();
		a.ivalue = value.isBoolean() ? value.toBool() : value.isIntegral(false) ? value.toLong() : (int64_t)a.value;
	}
	launch_index(a, self, name);
	return out;
}

static at::Tensor &index_add_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source,
			       const c10::Scalar &alpha, at::Tensor &out)
{
	NEURON_TRACK("aten::index_add.out");
	bool one = alpha.isBoolean() ? alpha.toBool() : alpha.toDouble() == 1.0;
	at::assert_no_overlap(out, source);	// before the scaled copy hides it
	at::Tensor src = one ? source : source * alpha;
	return index_scatter("index_add", NK_IDX_SCATTER_ADD, self, dim, index, src, 0, false, out);
}
static at::Tensor index_add_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source, const c10::Scalar &alpha)
{
	at::Tensor out = at::empty_like(self);
	return index_add_o(self, dim, index, source, alpha, out);
}
static at::Tensor &index_add_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source, const c10::Scalar &alpha)
{
	return index_add_o(self, dim, index, source, alpha, self);
}
static at::Tensor &index_copy_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source, at::Tensor &out)
{
	NEURON_TRACK("aten::index_copy.out");
	TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ", index.scalar_type());
	return index_scatter("index_copy", NK_IDX_SCATTER, self, dim, index, source, 0, false, out);
}
static at::Tensor index_copy_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source)
{
	at::Tensor out = at::empty_like(self);
	return index_copy_o(self, dim, index, source, out);
}
static at::Tensor &index_copy_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source)
{
	return index_copy_o(self, dim, index, source, self);
}
static at::Tensor &index_fill_s(at::Tensor &self, int64_t dim, const at::Tensor &index, const c10::Scalar &v)
{
	NEURON_TRACK("aten::index_fill_.int_Scalar");
	TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected a long tensor for index, but got ", index.scalar_type());
	return index_scatter("index_fill_", NK_IDX_SCATTER, self, dim, index, {}, v, true, self);
}
static at::Tensor &index_fill_t(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &v)
{
	TORCH_CHECK(v.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ", v.dim(), " dimension(s).");
	return index_fill_s(self, dim, index, v.item());
}

// index_reduce: index_add's shape rules with prod/mean/amax/amin (aten: include_self=False first fills
// the indexed slices with the reduction's identity; mean divides by the contribution counts)
static at::Tensor &index_reduce_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source,
				  c10::string_view reduce, bool include_self, at::Tensor &out)
{
	NEURON_TRACK("aten::index_reduce.out");
	TORCH_CHECK(reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
		    "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ", reduce, ".");
	bool mean = reduce == "mean";
	int op = mean ? NK_IDX_SCATTER_ADD : scatter_reduce_op(reduce, "index_reduce");
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self)) {
		resize_out(out, self.sizes(), self.options());
		out.copy_(self);
	}
	if (!include_self)
		index_scatter("index_reduce", NK_IDX_SCATTER, out, dim, index, {}, reduce_identity(op, self.scalar_type()), false, out);
	index_scatter("index_reduce", op, out, dim, index, source, 0, false, out);
	if (mean) {
		at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
		index_scatter("index_reduce", NK_IDX_SCATTER_ADD, count, dim, index, at::ones_like(source), 0, false, count);
		count.masked_fill_(count.eq(0), 1);
		if (at::isFloatingType(out.scalar_type()))
			out.div_(count);
		else
			out.div_(count, "floor");
	}
	return out;
}
static at::Tensor index_reduce_f(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source,
				 c10::string_view reduce, bool include_self)
{
	at::Tensor out = at::empty_like(self);
	return index_reduce_o(self, dim, index, source, reduce, include_self, out);
}
static at::Tensor &index_reduce_i(at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source,
				  c10::string_view reduce, bool include_self)
{
	return index_reduce_o(self, dim, index, source, reduce, include_self, self);
}

// take / put_: the flattened (contiguous) self indexed by any-shaped index; negative indices wrap.
static at::Tensor take_f(const at::Tensor &self, const at::Tensor &index)
{
	NEURON_TRACK("aten::take");
	TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ", index.scalar_type());
	check_same_device("take", {&self, &index});
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.contiguous(), out = at::empty(index.sizes(), self.options());
	TORCH_CHECK_INDEX(x.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
	at::Tensor i1 = as1d(index), o1 = as1d(out);
	nk_index_args_t a{};
	a.op = NK_IDX_GATHER;
	a.dtype = nk_dtype(self.scalar_type(), "aten::take");
	a.idx_dtype = NK_I64;
	set_dims(a, i1.sizes());
	a.dim = -1, a.err_dim = 0, a.wrap = true;
	a.bound = x.numel();
	a.x = const_cast<void *>(x.const_data_ptr());
	a.xk = 1;
	for (int k = 0; k < a.ndim; k++)
		a.ys[k] = o1.stride(k), a.is[k] = i1.stride(k);
	a.y = o1.data_ptr();
	a.idx = i1.const_data_ptr();
	launch_index(a, self, "aten::take");
	return out;
}
static at::Tensor &take_o(const at::Tensor &self, const at::Tensor &index, at::Tensor &out)
{
	NEURON_TRACK("aten::take.out");
	return into(out, take_f(self, index));
}
static at::Tensor &put_i(at::Tensor &self, const at::Tensor &index, const at::Tensor &source, bool accumulate)
{
	NEURON_TRACK("aten::put_");
	TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ", index.scalar_type());
	TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same dtype, but got self.dtype = ",
		    self.scalar_type(), " and source.dtype = ", source.scalar_type());
	TORCH_CHECK(index.numel() == source.numel(), "put_(): Expected source and index to have the same number of elements, but got source.numel() = ",
		    source.numel(), ", index.numel() = ", index.numel());
	check_same_device("put_", {&self, &index, &source});
	if (index.numel() == 0)
		return self;
	TORCH_CHECK_INDEX(self.numel() > 0, "put_(): Tried to put elements into an empty tensor");
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.is_contiguous() ? self : self.contiguous();
	at::Tensor i1 = index.reshape({-1}), s1 = source.reshape({-1});
	nk_index_args_t a{};
	a.op = accumulate ? NK_IDX_SCATTER_ADD : NK_IDX_SCATTER;
	a.dtype = nk_dtype(self.scalar_type(), "aten::put_");
	a.idx_dtype = NK_I64;
	set_dims(a, i1.sizes());
	a.dim = -1, a.err_dim = 0, a.wrap = true;
	a.bound = x.numel();
	a.x = x.data_ptr();
	a.xk = 1;
	a.y = const_cast<void *>(s1.const_data_ptr());
	a.ys[0] = s1.stride(0);
	a.idx = i1.const_data_ptr();
	a.is[0] = i1.stride(0);
	launch_index(a, self, "aten::put_");
	if (!x.is_same(self))
		self.copy_(x);
	return self;
}

// ---- masks and nonzero -----------------------------------------------------------------------------

static at::Tensor &masked_fill_s(at::Tensor &self, const at::Tensor &mask, const c10::Scalar &v)
{
	NEURON_TRACK("aten::masked_fill_.Scalar");
	TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ", mask.scalar_type());
	check_same_device("masked_fill_", {&self, &mask});
	at::Tensor m = mask.expand(self.sizes()); // errors like aten when mask cannot broadcast to self
	pointwise_op("aten::masked_fill_", NK_OP_WHERE, {m, cpu_scalar(v, self.scalar_type()), self}, self, PwKind::Same, 0, 0, 0, 0, 1u);
	return self;
}
static at::Tensor &masked_fill_t(at::Tensor &self, const at::Tensor &mask, const at::Tensor &v)
{
	NEURON_TRACK("aten::masked_fill_.Tensor");
	TORCH_CHECK(v.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ", v.dim(), " dimension(s).");
	return masked_fill_s(self, mask, v.item());
}

// Compaction: the output size depends on the data, so the queue is drained and the coordinates are
// written on the calling thread (device memory is host-addressable), like masked_select.
static at::Tensor nonzero_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::nonzero");
	TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(), "nonzero is not supported for tensors with more than INT_MAX elements");
	TORCH_CHECK(self.dim() <= NK_MAX_DIMS, "nonzero: at most ", NK_MAX_DIMS, " dims on neuron");
	c10::DeviceGuard g(self.device());
	nk_nonzero_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::nonzero");
	a.ndim = (int)self.dim();
	for (int d = 0; d < a.ndim; d++)
		a.shape[d] = self.size(d), a.strides[d] = self.stride(d);
	a.x = self.const_data_ptr();
	sync_device(self.device().index(), "aten::nonzero");
	int64_t n = self.numel() ? nk_nonzero_count(&a) : 0;
	at::Tensor out = at::empty({n, self.dim()}, self.options().dtype(at::kLong));
	if (n && self.dim())
		nk_nonzero_write(&a, out.mutable_data_ptr<int64_t>(), n);
	return out;
}
static at::Tensor &nonzero_o(const at::Tensor &self, at::Tensor &out)
{
	NEURON_TRACK("aten::nonzero.out");
	return into(out, nonzero_f(self));
}

static at::Tensor &masked_scatter_i(at::Tensor &self, const at::Tensor &mask, const at::Tensor &source)
{
	NEURON_TRACK("aten::masked_scatter_");
	TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ", mask.scalar_type());
	TORCH_CHECK(self.scalar_type() == source.scalar_type(), "masked_scatter_: expected self and source to have same dtypes but got", self.scalar_type(), " and ", source.scalar_type());
	check_same_device("masked_scatter_", {&self, &mask, &source});
	c10::DeviceGuard g(self.device());
	at::Tensor m = mask.expand(self.sizes()).reshape({-1});
	at::Tensor pos = nonzero_f(m).reshape({-1});
	int64_t k = pos.numel();
	TORCH_CHECK(k <= source.numel(), "masked_scatter: expected source to have at least ", k, " elements, got ", source.numel());
	if (k == 0)
		return self;
	return put_i(self, pos, source.reshape({-1}).narrow(0, 0, k), false);
}


// ---- advanced indexing: x[i, j], x[mask] and x[i, j] = v / += v ------------------------------------
// aten's semantics: bool (uint8) masks become the long indices of their nonzero elements; the index
// tensors broadcast to one shape B; with the indexed dims adjacent the result is
// x.shape[:first] + B + x.shape[last+1:], otherwise B + the remaining dims.  The element offsets of B
// come from nk_index_offsets_run (bounds checked there); the gather/scatter is nk_index_run with that
// single offset index.  More than NK_MAX_INDICES index tensors go to the CPU fallback.

struct AdvIndex {
	std::vector<at::Tensor> idx;   // per self dim: an int64/int32 index or undefined
	std::vector<int64_t> shape;    // the result shape
	at::Tensor off;                // int64 offsets over B (contiguous)
	std::vector<int64_t> xs, is;   // per result dim: self stride (0 on B dims), offset stride (0 off B)
	bool ok = true;                // false: needs the CPU fallback
};

static AdvIndex adv_index(const char *name, const at::Tensor &self, const c10::List<std::optional<at::Tensor>> &indices)
{
	AdvIndex r;
	if (self.dim() == 0) { // x[True] and friends: the CPU handles 0-d self
		r.ok = false;
		return r;
	}
	TORCH_CHECK_INDEX((int64_t)indices.size() <= self.dim(), "too many indices for tensor of dimension ", self.dim(),
			  " (got ", indices.size(), ")");
	for (size_t i = 0; i < indices.size(); i++) {
		std::optional<at::Tensor> o = indices[i];
		if (!o.has_value() || !o->defined()) {
			r.idx.emplace_back();
			continue;
		}
		// indices may live on the CPU (as for CUDA tensors): they move to self's device
		at::Tensor t = o->device() != self.device() && o->device().is_cpu() ? o->to(self.device()) : *o;
		if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
			int64_t d0 = (int64_t)r.idx.size();
			for (int64_t j = 0; j < t.dim(); j++)
				TORCH_CHECK_INDEX(d0 + j < self.dim() && t.size(j) == self.size(d0 + j), "The shape of the mask ", t.sizes(),
						  " at index ", j, " does not match the shape of the indexed tensor ", self.sizes(), " at index ", d0 + j);
			at::Tensor nz = nonzero_f(t.scalar_type() == at::kBool ? t : t.to(at::kBool));
			for (int64_t j = 0; j < t.dim(); j++)
				r.idx.push_back(nz.select(1, j));
			continue;
		}
		TORCH_CHECK_INDEX(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt,
				  "tensors used as indices must be long, int, byte or bool tensors");
		check_same_device(name, {&self, &t});
		r.idx.push_back(t);
	}
	while ((int64_t)r.idx.size() < self.dim())
		r.idx.emplace_back();
	std::vector<int64_t> pos;
	std::vector<at::Tensor> defined;
	for (int64_t d = 0; d < self.dim(); d++)
		if (r.idx[d].defined())
			pos.push_back(d), defined.push_back(r.idx[d]);
	if (pos.empty() || pos.size() > NK_MAX_INDICES || self.dim() > NK_MAX_DIMS) {
		r.ok = false;
		return r;
	}
	std::vector<int64_t> B = defined[0].sizes().vec();
	for (const at::Tensor &t : defined)
		B = at::infer_size(B, t.sizes());
	bool adjacent = pos.back() - pos.front() + 1 == (int64_t)pos.size();
	int64_t nb = (int64_t)B.size(), before = adjacent ? pos.front() : 0;
	std::vector<int64_t> rest; // non-indexed dims, in order
	for (int64_t d = 0; d < self.dim(); d++)
		if (!r.idx[d].defined())
			rest.push_back(d);
	if ((int64_t)rest.size() + nb > NK_MAX_DIMS) {
		r.ok = false;
		return r;
	}
	// offsets over B
	r.off = at::empty(B, self.options().dtype(at::kLong));
	nk_index_offsets_args_t a{};
	a.n = (int)defined.size();
	a.ndim = (int)nb;
	for (int64_t j = 0; j < nb; j++)
		a.shape[j] = B[j];
	for (int k = 0; k < a.n; k++) {
		at::Tensor e = defined[k].expand(B);
		a.idx[k] = e.const_data_ptr();
		a.idx_dtype[k] = nk_dtype(e.scalar_type(), name);
		for (int64_t j = 0; j < nb; j++)
			a.is[k][j] = e.stride(j);
		a.size[k] = self.size(pos[k]);
		a.stride[k] = self.stride(pos[k]);
		a.dim[k] = (int)pos[k];
	}
	a.out = r.off.mutable_data_ptr<int64_t>();
	if (r.off.numel())
		launch(current_queue(self.device().index()), nk_index_offsets_run, a, name);
	// result dims: [rest before] + B + [rest after] (adjacent) or B + rest
	auto push = [&](int64_t size, int64_t xs, int64_t is) {
		r.shape.push_back(size), r.xs.push_back(xs), r.is.push_back(is);
	};
	size_t ri = 0;
	if (adjacent)
		for (; ri < rest.size() && rest[ri] < before; ri++)
			push(self.size(rest[ri]), self.stride(rest[ri]), 0);
	for (int64_t j = 0; j < nb; j++)
		push(B[j], 0, r.off.stride(j));
	for (; ri < rest.size(); ri++)
		push(self.size(rest[ri]), self.stride(rest[ri]), 0);
	return r;
}

// The nk_index arguments of x at the advanced index (offsets as the index, xk = 1, no bound).
static nk_index_args_t adv_args(int op, const at::Tensor &x, const AdvIndex &r, const char *name)
{
	nk_index_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(x.scalar_type(), name);
	a.idx_dtype = NK_I64;
	set_dims(a, r.shape);
	a.dim = -1;
	a.bound = std::numeric_limits<int64_t>::max();
	a.x = const_cast<void *>(x.const_data_ptr());
	a.xk = 1;
	a.idx = r.off.const_data_ptr();
	for (int d = 0; d < a.ndim; d++)
		a.xs[d] = r.xs[d], a.is[d] = r.is[d];
	return a;
}

static at::Tensor index_f(const at::Tensor &self, const c10::List<std::optional<at::Tensor>> &indices)
{
	NEURON_TRACK("aten::index.Tensor");
	c10::DeviceGuard g(self.device());
	AdvIndex r = adv_index("aten::index", self, indices);
	if (!r.ok)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::index_Tensor>::call(self, indices);
	at::Tensor out = at::empty(r.shape, self.options());
	nk_index_args_t a = adv_args(NK_IDX_GATHER, self, r, "aten::index");
	a.y = out.data_ptr();
	for (int d = 0; d < a.ndim; d++)
		a.ys[d] = out.stride(d);
	launch_index(a, self, "aten::index");
	return out;
}
static at::Tensor &index_o(const at::Tensor &self, const c10::List<std::optional<at::Tensor>> &indices, at::Tensor &out)
{
	NEURON_TRACK("aten::index.Tensor_out");
	return into(out, index_f(self, indices));
}

static at::Tensor &index_put_impl(at::Tensor &self, const c10::List<std::optional<at::Tensor>> &indices, const at::Tensor &values,
				  bool accumulate, bool unsafe)
{
	NEURON_TRACK("aten::_index_put_impl_");
	TORCH_CHECK(self.scalar_type() == values.scalar_type(), "Index put requires the source and destination dtypes match, got ",
		    self.scalar_type(), " for the destination and ", values.scalar_type(), " for the source.");
	check_same_device("index_put_", {&self, &values});
	c10::DeviceGuard g(self.device());
	AdvIndex r = adv_index("aten::index_put_", self, indices);
	if (!r.ok)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::_index_put_impl_>::call(self, indices, values, accumulate, unsafe);
	at::Tensor v = values.expand(r.shape);
	nk_index_args_t a = adv_args(accumulate ? NK_IDX_SCATTER_ADD : NK_IDX_SCATTER, self, r, "aten::index_put_");
	a.x = self.data_ptr();
	a.y = const_cast<void *>(v.const_data_ptr());
	for (int d = 0; d < a.ndim; d++)
		a.ys[d] = v.stride(d);
	launch_index(a, self, "aten::index_put_");
	return self;
}

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

// ---- scans -----------------------------------------------------------------------------------------

// Run a scan along dim of x (made contiguous) into new tensors of x's shape.
static std::tuple<at::Tensor, at::Tensor> scan(const char *name, int op, const at::Tensor &self, int64_t dim, at::ScalarType t)
{
	c10::DeviceGuard g(self.device());
	// aten has no bool kernel for these: a bool dtype (or out=) is refused as the CPU refuses it
	TORCH_CHECK_NOT_IMPLEMENTED(t != at::kBool || !(op == NK_SCAN_SUM || op == NK_SCAN_PROD), "\"",
				    op == NK_SCAN_SUM ? "cumsum" : "cumprod", "_out_cpu\" not implemented for 'Bool'");
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	at::Tensor x = (self.scalar_type() == t ? self : self.to(t)).contiguous();
	at::Tensor out = at::empty(self.sizes(), x.options());
	bool minmax = op == NK_SCAN_MAX || op == NK_SCAN_MIN;
	at::Tensor idx = minmax ? at::empty(self.sizes(), x.options().dtype(at::kLong)) : at::Tensor();
	nk_scan_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(t, name);
	a.O = 1, a.R = self.dim() ? self.size(d) : 1, a.I = 1;
	for (int64_t k = 0; k < d; k++)
		a.O *= self.size(k);
	for (int64_t k = d + 1; k < self.dim(); k++)
		a.I *= self.size(k);
	a.in = x.const_data_ptr();
	a.out = out.data_ptr();
	a.idx = minmax ? idx.mutable_data_ptr<int64_t>() : nullptr;
	if (x.numel())
		launch(current_queue(self.device().index()), nk_scan_run, a, name);
	return {out, idx};
}

static at::ScalarType cum_dtype(const at::Tensor &self, std::optional<at::ScalarType> dt)
{
	if (dt.has_value())
		return *dt;
	return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}
static at::Tensor cumsum_f(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumsum"); return std::get<0>(scan("aten::cumsum", NK_SCAN_SUM, self, dim, cum_dtype(self, dt))); }
static at::Tensor &cumsum_o(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt, at::Tensor &out) { NEURON_TRACK("aten::cumsum.out"); return into(out, std::get<0>(scan("aten::cumsum", NK_SCAN_SUM, self, dim, dt.value_or(out.scalar_type())))); }
static at::Tensor &cumsum_i(at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumsum_"); self.copy_(std::get<0>(scan("aten::cumsum_", NK_SCAN_SUM, self, dim, dt.value_or(self.scalar_type())))); return self; }
static at::Tensor cumprod_f(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumprod"); return std::get<0>(scan("aten::cumprod", NK_SCAN_PROD, self, dim, cum_dtype(self, dt))); }
static at::Tensor &cumprod_o(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt, at::Tensor &out) { NEURON_TRACK("aten::cumprod.out"); return into(out, std::get<0>(scan("aten::cumprod", NK_SCAN_PROD, self, dim, dt.value_or(out.scalar_type())))); }
static at::Tensor &cumprod_i(at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumprod_"); self.copy_(std::get<0>(scan("aten::cumprod_", NK_SCAN_PROD, self, dim, dt.value_or(self.scalar_type())))); return self; }

static void cum_minmax_helper(const char *name, int op, const at::Tensor &self, at::Tensor &values, at::Tensor &indices, int64_t dim)
{
	auto r = scan(name, op, self, dim, self.scalar_type());
	values.copy_(std::get<0>(r));
	indices.copy_(std::get<1>(r));
}
static void cummax_helper(const at::Tensor &self, at::Tensor &v, at::Tensor &i, int64_t dim) { NEURON_TRACK("aten::_cummax_helper"); cum_minmax_helper("aten::_cummax_helper", NK_SCAN_MAX, self, v, i, dim); }
static void cummin_helper(const at::Tensor &self, at::Tensor &v, at::Tensor &i, int64_t dim) { NEURON_TRACK("aten::_cummin_helper"); cum_minmax_helper("aten::_cummin_helper", NK_SCAN_MIN, self, v, i, dim); }
static at::Tensor logcumsumexp_f(const at::Tensor &self, int64_t dim)
{
	NEURON_TRACK("aten::_logcumsumexp");
	TORCH_CHECK(at::isFloatingType(self.scalar_type()), "logcumsumexp(): expected a floating point tensor, got ", self.scalar_type());
	return std::get<0>(scan("aten::_logcumsumexp", NK_SCAN_LOGSUMEXP, self, dim, self.scalar_type()));
}
static at::Tensor &logcumsumexp_o(const at::Tensor &self, int64_t dim, at::Tensor &out) { NEURON_TRACK("aten::_logcumsumexp.out"); return into(out, logcumsumexp_f(self, dim)); }

// ---- sort ----------------------------------------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor> sort_impl(const at::Tensor &self, int64_t dim, bool descending)
{
	c10::DeviceGuard g(self.device());
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	at::Tensor x = self.contiguous();
	at::Tensor v = at::empty(self.sizes(), self.options()), idx = at::empty(self.sizes(), self.options().dtype(at::kLong));
	nk_sort_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::sort");
	a.descending = descending;
	a.O = 1, a.R = self.dim() ? self.size(d) : 1, a.I = 1;
	for (int64_t k = 0; k < d; k++)
		a.O *= self.size(k);
	for (int64_t k = d + 1; k < self.dim(); k++)
		a.I *= self.size(k);
	a.in = x.const_data_ptr();
	a.out = v.data_ptr();
	a.idx = idx.mutable_data_ptr<int64_t>();
	size_t ws = nk_sort_workspace(a.R, a.O * a.I);
	at::Tensor work = ws ? at::empty({(int64_t)ws}, self.options().dtype(at::kByte)) : at::Tensor();
	a.work = ws ? work.data_ptr() : nullptr;
	if (x.numel())
		launch(current_queue(self.device().index()), nk_sort_run, a, "aten::sort");
	return {v, idx}; // work is freed after the launch: reuse on this queue is ordered after the kernel
}
static std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor &self, std::optional<bool> stable, int64_t dim, bool descending)
{
	NEURON_TRACK("aten::sort.stable");
	return sort_impl(self, dim, descending);
}
static std::tuple<at::Tensor &, at::Tensor &> sort_values_stable(const at::Tensor &self, std::optional<bool> stable, int64_t dim, bool descending,
								  at::Tensor &values, at::Tensor &indices)
{
	NEURON_TRACK("aten::sort.values_stable");
	auto r = sort_impl(self, dim, descending);
	into(values, std::get<0>(r));
	into(indices, std::get<1>(r));
	return {values, indices};
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

// ---- pointwise ops on existing nk_pointwise ops ----------------------------------------------------

static at::Tensor wrap(const c10::Scalar &s)
{
	return at::native::wrapped_scalar_tensor(s);
}

// PW("name", nk_op, {inputs}, out, kind[, a, b, ia, ib, nocast]): the pointwise engine (pointwise.h)
static constexpr PwKind Same = PwKind::Same, Bool = PwKind::Bool, Float = PwKind::Float;
#define PW(name, ...) pointwise_op("aten::" name, __VA_ARGS__)

static at::Tensor sgn_f(const at::Tensor &s) { NEURON_TRACK("aten::sgn"); return PW("sgn", NK_OP_SIGN, {s}, {}, Same); }
static at::Tensor &sgn_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::sgn.out"); PW("sgn.out", NK_OP_SIGN, {s}, o, Same); return o; }
static at::Tensor &sgn_i(at::Tensor &s) { NEURON_TRACK("aten::sgn_"); PW("sgn_", NK_OP_SIGN, {s}, s, Same); return s; }

// clamp_min / clamp_max through the native clamp (which applies aten's promotion rules)
static at::Tensor clamp_min_f(const at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_min"); return at::clamp(s, v, std::nullopt); }
static at::Tensor &clamp_min_o(const at::Tensor &s, const c10::Scalar &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_min.out"); return at::clamp_out(o, s, v, std::nullopt); }
static at::Tensor &clamp_min_i(at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_min_"); return at::clamp_(s, v, std::nullopt); }
static at::Tensor clamp_max_f(const at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_max"); return at::clamp(s, std::nullopt, v); }
static at::Tensor &clamp_max_o(const at::Tensor &s, const c10::Scalar &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_max.out"); return at::clamp_out(o, s, std::nullopt, v); }
static at::Tensor &clamp_max_i(at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_max_"); return at::clamp_(s, std::nullopt, v); }
static at::Tensor clamp_min_t(const at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_min.Tensor"); return PW("clamp_min", NK_OP_CLAMP_TENSOR, {s, v}, {}, Same, 0, 0, 1); }
static at::Tensor &clamp_min_to(const at::Tensor &s, const at::Tensor &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_min.Tensor_out"); PW("clamp_min.out", NK_OP_CLAMP_TENSOR, {s, v}, o, Same, 0, 0, 1); return o; }
static at::Tensor &clamp_min_ti(at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_min_.Tensor"); PW("clamp_min_", NK_OP_CLAMP_TENSOR, {s, v}, s, Same, 0, 0, 1); return s; }
static at::Tensor clamp_max_t(const at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_max.Tensor"); return PW("clamp_max", NK_OP_CLAMP_TENSOR, {s, v}, {}, Same, 0, 0, 2); }
static at::Tensor &clamp_max_to(const at::Tensor &s, const at::Tensor &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_max.Tensor_out"); PW("clamp_max.out", NK_OP_CLAMP_TENSOR, {s, v}, o, Same, 0, 0, 2); return o; }
static at::Tensor &clamp_max_ti(at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_max_.Tensor"); PW("clamp_max_", NK_OP_CLAMP_TENSOR, {s, v}, s, Same, 0, 0, 2); return s; }
static at::Tensor &clamp_to(const at::Tensor &s, const std::optional<at::Tensor> &lo, const std::optional<at::Tensor> &hi, at::Tensor &o)
{
	NEURON_TRACK("aten::clamp.Tensor_out");
	return into(o, at::clamp(s, lo, hi), OutRule::Cast);
}

// activations: the op's scalar parameters go to the kernel (nk.h documents each)
static at::Tensor &elu_o(const at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale, at::Tensor &o)
{
	NEURON_TRACK("aten::elu.out");
	if (input_scale.toDouble() != 1.0) // celu: the kernel has no input scale
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_out>::call(s, alpha, scale, input_scale, o);
	PW("elu.out", NK_OP_ELU, {s}, o, Float, alpha.toDouble(), scale.toDouble());
	return o;
}
static at::Tensor elu_f(const at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale)
{
	NEURON_TRACK("aten::elu");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu>::call(s, alpha, scale, input_scale);
	return PW("elu", NK_OP_ELU, {s}, {}, Float, alpha.toDouble(), scale.toDouble());
}
static at::Tensor &elu_i(at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale)
{
	NEURON_TRACK("aten::elu_");
	return elu_o(s, alpha, scale, input_scale, s);
}
static at::Tensor &elu_bw_o(const at::Tensor &g, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale,
			    bool is_result, const at::Tensor &x, at::Tensor &o)
{
	NEURON_TRACK("aten::elu_backward.grad_input");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward_grad_input>::call(g, alpha, scale, input_scale, is_result, x, o);
	PW("elu_backward", NK_OP_ELU_BACKWARD, {g, x}, o, Float, alpha.toDouble(), scale.toDouble(), is_result ? 1 : 0);
	return o;
}
static at::Tensor elu_bw(const at::Tensor &g, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale,
			 bool is_result, const at::Tensor &x)
{
	NEURON_TRACK("aten::elu_backward");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward>::call(g, alpha, scale, input_scale, is_result, x);
	return PW("elu_backward", NK_OP_ELU_BACKWARD, {g, x}, {}, Float, alpha.toDouble(), scale.toDouble(), is_result ? 1 : 0);
}
static at::Tensor softplus_f(const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th) { NEURON_TRACK("aten::softplus"); return PW("softplus", NK_OP_SOFTPLUS, {s}, {}, Float, beta.toDouble(), th.toDouble()); }
static at::Tensor &softplus_o(const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th, at::Tensor &o) { NEURON_TRACK("aten::softplus.out"); PW("softplus.out", NK_OP_SOFTPLUS, {s}, o, Float, beta.toDouble(), th.toDouble()); return o; }
static at::Tensor softplus_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th) { NEURON_TRACK("aten::softplus_backward"); return PW("softplus_backward", NK_OP_SOFTPLUS_BACKWARD, {g, s}, {}, Float, beta.toDouble(), th.toDouble()); }
static at::Tensor &softplus_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th, at::Tensor &o) { NEURON_TRACK("aten::softplus_backward.grad_input"); PW("softplus_backward", NK_OP_SOFTPLUS_BACKWARD, {g, s}, o, Float, beta.toDouble(), th.toDouble()); return o; }
static at::Tensor hardtanh_f(const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh"); return PW("hardtanh", NK_OP_HARDTANH, {s}, {}, Same, lo.toDouble(), hi.toDouble()); }
static at::Tensor &hardtanh_o(const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi, at::Tensor &o) { NEURON_TRACK("aten::hardtanh.out"); PW("hardtanh.out", NK_OP_HARDTANH, {s}, o, Same, lo.toDouble(), hi.toDouble()); return o; }
static at::Tensor &hardtanh_i(at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh_"); PW("hardtanh_", NK_OP_HARDTANH, {s}, s, Same, lo.toDouble(), hi.toDouble()); return s; }
static at::Tensor hardtanh_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh_backward"); return PW("hardtanh_backward", NK_OP_HARDTANH_BACKWARD, {g, s}, {}, Same, lo.toDouble(), hi.toDouble()); }
static at::Tensor &hardtanh_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi, at::Tensor &o) { NEURON_TRACK("aten::hardtanh_backward.grad_input"); PW("hardtanh_backward", NK_OP_HARDTANH_BACKWARD, {g, s}, o, Same, lo.toDouble(), hi.toDouble()); return o; }
static at::Tensor leaky_relu_f(const at::Tensor &s, const c10::Scalar &a) { NEURON_TRACK("aten::leaky_relu"); return PW("leaky_relu", NK_OP_LEAKY_RELU, {s}, {}, Same, a.toDouble()); }
static at::Tensor &leaky_relu_o(const at::Tensor &s, const c10::Scalar &a, at::Tensor &o) { NEURON_TRACK("aten::leaky_relu.out"); PW("leaky_relu.out", NK_OP_LEAKY_RELU, {s}, o, Same, a.toDouble()); return o; }
static at::Tensor &leaky_relu_i(at::Tensor &s, const c10::Scalar &a) { NEURON_TRACK("aten::leaky_relu_"); PW("leaky_relu_", NK_OP_LEAKY_RELU, {s}, s, Same, a.toDouble()); return s; }
static at::Tensor leaky_relu_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &a, bool is_result) { NEURON_TRACK("aten::leaky_relu_backward"); return PW("leaky_relu_backward", NK_OP_LEAKY_RELU_BACKWARD, {g, s}, {}, Same, a.toDouble()); }
static at::Tensor &leaky_relu_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &a, bool is_result, at::Tensor &o) { NEURON_TRACK("aten::leaky_relu_backward.grad_input"); PW("leaky_relu_backward", NK_OP_LEAKY_RELU_BACKWARD, {g, s}, o, Same, a.toDouble()); return o; }
static at::Tensor hardswish_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::hardswish_backward"); return PW("hardswish_backward", NK_OP_HARDSWISH_BACKWARD, {g, s}, {}, Float); }
static at::Tensor hardsigmoid_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::hardsigmoid_backward"); return PW("hardsigmoid_backward", NK_OP_HARDSIGMOID_BACKWARD, {g, s}, {}, Float); }
static at::Tensor &hardsigmoid_bw_o(const at::Tensor &g, const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::hardsigmoid_backward.grad_input"); PW("hardsigmoid_backward", NK_OP_HARDSIGMOID_BACKWARD, {g, s}, o, Float); return o; }
static at::Tensor mish_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::mish_backward"); return PW("mish_backward", NK_OP_MISH_BACKWARD, {g, s}, {}, Float); }

// threshold(x, th, v) = x <= th ? v : x
static at::Tensor &threshold_o(const at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v, at::Tensor &o)
{
	NEURON_TRACK("aten::threshold.out");
	at::Tensor m = PW("threshold", NK_OP_LE, {s, wrap(th)}, {}, Bool);
	PW("threshold", NK_OP_WHERE, {m, cpu_scalar(v, s.scalar_type()), s}, o, Same, 0, 0, 0, 0, 1u);
	return o;
}
static at::Tensor threshold_f(const at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v) { NEURON_TRACK("aten::threshold"); at::Tensor o = at::empty_like(s); return threshold_o(s, th, v, o); }
static at::Tensor &threshold_i(at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v) { NEURON_TRACK("aten::threshold_"); return threshold_o(s, th, v, s); }

static at::Tensor &isposinf_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::isposinf.out"); PW("isposinf", NK_OP_EQ, {s, wrap(std::numeric_limits<double>::infinity())}, o, Bool); return o; }
static at::Tensor &isneginf_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::isneginf.out"); PW("isneginf", NK_OP_EQ, {s, wrap(-std::numeric_limits<double>::infinity())}, o, Bool); return o; }
static at::Tensor isposinf_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return isposinf_o(s, o); }
static at::Tensor isneginf_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return isneginf_o(s, o); }
static at::Tensor &signbit_o(const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::signbit.out");
	if (s.scalar_type() == at::kBool)
		return into(o, at::zeros_like(s, s.options().dtype(at::kBool)));
	if (!at::isFloatingType(s.scalar_type())) {
		PW("signbit", NK_OP_LT, {s, wrap(0)}, o, Bool);
		return o;
	}
	// copysign(1, x) < 0 is true exactly when x's sign bit is set (-0.0 and negative NaN included)
	at::Tensor c = PW("signbit", NK_OP_COPYSIGN, {cpu_scalar(1, s.scalar_type()), s}, {}, Same);
	PW("signbit", NK_OP_LT, {c, wrap(0)}, o, Bool);
	return o;
}
static at::Tensor signbit_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return signbit_o(s, o); }

static at::Tensor &nan_to_num_o(const at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf, at::Tensor &o)
{
	NEURON_TRACK("aten::nan_to_num.out");
	if (!at::isFloatingType(s.scalar_type()))
		return into(o, s);
	double big = s.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
		   : s.scalar_type() == at::kFloat ? std::numeric_limits<float>::max()
		   : s.scalar_type() == at::kHalf ? 65504.0 : 3.3895313892515355e38;
	double pi = posinf.value_or(big), ni = neginf.value_or(-big);
	if (ni != -pi) // the kernel maps -inf to -posinf
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::nan_to_num_out>::call(s, nan, posinf, neginf, o);
	PW("nan_to_num", NK_OP_NAN_TO_NUM, {s}, o, Same, nan.value_or(0.0), pi);
	return o;
}
static at::Tensor nan_to_num_f(const at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf)
{
	at::Tensor o = at::empty_like(s);
	return nan_to_num_o(s, nan, posinf, neginf, o);
}
static at::Tensor &nan_to_num_i(at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf)
{
	return nan_to_num_o(s, nan, posinf, neginf, s);
}

// rsub(self, other, alpha) = other - alpha*self
static void alpha_params(const c10::Scalar &alpha, double &a, int64_t &ia)
{
	if (alpha.isIntegral(true))
		ia = alpha.toLong(), a = (double)ia;
	else
		a = alpha.toDouble(), ia = (int64_t)a;
}
static at::Tensor rsub_t(const at::Tensor &s, const at::Tensor &other, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::rsub.Tensor");
	TORCH_CHECK(s.scalar_type() != at::kBool || other.scalar_type() != at::kBool,
		    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
	if (!alpha.isIntegral(false))
		at::native::alpha_check(at::result_type(s, other), alpha);
	double a; int64_t ia; alpha_params(alpha, a, ia);
	return PW("rsub", NK_OP_SUB, {other, s}, {}, Same, a, 0, ia);
}
static at::Tensor rsub_s(const at::Tensor &s, const c10::Scalar &other, const c10::Scalar &alpha) { return rsub_t(s, wrap(other), alpha); }

static at::Tensor floor_divide_f(const at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::floor_divide"); return PW("floor_divide", NK_OP_DIV_FLOOR, {s, o}, {}, Same); }
static at::Tensor &floor_divide_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out) { NEURON_TRACK("aten::floor_divide.out"); PW("floor_divide.out", NK_OP_DIV_FLOOR, {s, o}, out, Same); return out; }
static at::Tensor &floor_divide_i(at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::floor_divide_.Tensor"); PW("floor_divide_", NK_OP_DIV_FLOOR, {s, o}, s, Same); return s; }
static at::Tensor floor_divide_s(const at::Tensor &s, const c10::Scalar &o) { return floor_divide_f(s, wrap(o)); }
static at::Tensor &floor_divide_si(at::Tensor &s, const c10::Scalar &o) { return floor_divide_i(s, wrap(o)); }

// ---- reductions composed of native ones ----------------------------------------------------------

static at::Tensor &amax_o(const at::Tensor &s, at::IntArrayRef dim, bool keep, at::Tensor &o) { NEURON_TRACK("aten::amax.out"); return into(o, at::amax(s, dim, keep)); }
static at::Tensor &amin_o(const at::Tensor &s, at::IntArrayRef dim, bool keep, at::Tensor &o) { NEURON_TRACK("aten::amin.out"); return into(o, at::amin(s, dim, keep)); }
static std::tuple<at::Tensor, at::Tensor> aminmax_f(const at::Tensor &s, std::optional<int64_t> dim, bool keep)
{
	NEURON_TRACK("aten::aminmax");
	TORCH_CHECK(s.numel() > 0 || dim.has_value(), "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
	if (!dim.has_value()) {
		at::Tensor lo = at::amin(s.reshape({-1}), {0}, false), hi = at::amax(s.reshape({-1}), {0}, false);
		if (keep && s.dim() > 0) {
			std::vector<int64_t> ones(s.dim(), 1);
			return {lo.view(ones), hi.view(ones)};
		}
		return {lo, hi};
	}
	return {at::amin(s, {*dim}, keep), at::amax(s, {*dim}, keep)};
}
static std::tuple<at::Tensor &, at::Tensor &> aminmax_o(const at::Tensor &s, std::optional<int64_t> dim, bool keep, at::Tensor &mn, at::Tensor &mx)
{
	NEURON_TRACK("aten::aminmax.out");
	auto r = aminmax_f(s, dim, keep);
	into(mn, std::get<0>(r));
	into(mx, std::get<1>(r));
	return {mn, mx};
}
static std::tuple<at::Tensor, at::Tensor> var_mean_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep)
{
	NEURON_TRACK("aten::var_mean.correction");
	return {at::var(s, dim, corr, keep), at::mean(s, dim, keep)};
}
static std::tuple<at::Tensor, at::Tensor> std_mean_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep)
{
	NEURON_TRACK("aten::std_mean.correction");
	return {at::std(s, dim, corr, keep), at::mean(s, dim, keep)};
}
static at::Tensor nansum_f(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::nansum");
	if (!at::isFloatingType(s.scalar_type()))
		return at::sum(s, dim, keep, dt);
	at::Tensor nan = PW("nansum", NK_OP_ISNAN, {s}, {}, Bool);
	at::Tensor z = PW("nansum", NK_OP_WHERE, {nan, cpu_scalar(0, s.scalar_type()), s}, {}, Same, 0, 0, 0, 0, 1u);
	return at::sum(z, dim, keep, dt);
}
static at::Tensor &nansum_o(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt, at::Tensor &o)
{
	NEURON_TRACK("aten::nansum.out");
	if (c10::isIntegralType(s.scalar_type(), true)) // as aten: integers have no NaN, so it is sum.out (whose
		return at::sum_out(o, s, dim, keep, dt); // dtype comes from the result, a bool out included)
	return into(o, nansum_f(s, dim, keep, dt), OutRule::Cast);
}
static at::Tensor count_nonzero_d(const at::Tensor &s, at::IntArrayRef dims)
{
	NEURON_TRACK("aten::count_nonzero.dim_IntList");
	at::Tensor nz = PW("count_nonzero", NK_OP_NE, {s, wrap(0)}, {}, Bool);
	return at::sum(nz, dims, false, at::kLong);
}
static at::Tensor &norm_o(const at::Tensor &s, const std::optional<c10::Scalar> &p, at::IntArrayRef dim, bool keep, at::Tensor &o)
{
	NEURON_TRACK("aten::norm.out");
	return into(o, at::linalg_vector_norm(s, p.value_or(2), dim, keep, std::nullopt));
}
static at::Tensor vdot_f(const at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::vdot"); return at::dot(s, o); }
// aten's addbmm: result = beta*self, then result.addmm_(b1[b], b2[b]) batch by batch (rounded to the
// dtype after each batch, as the CPU does)
static at::Tensor addbmm_f(const at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addbmm");
	TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
	TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
	TORCH_CHECK(b1.size(0) == b2.size(0), "batch1 and batch2 must have same number of batches, got ", b1.size(0), " and ", b2.size(0));
	TORCH_CHECK(b1.size(2) == b2.size(1), "Incompatible matrix sizes for bmm (", b1.size(1), "x", b1.size(2), " and ", b2.size(1), "x", b2.size(2), ")");
	int64_t n = b1.size(1), p = b2.size(2);
	at::Tensor result = at::empty({n, p}, b1.options());
	result.copy_(self.expand({n, p}));
	if (b1.size(0) == 0 || b1.size(2) == 0) {
		if (beta.toComplexDouble() == 0.0)
			result.zero_();
		else
			result.mul_(beta);
		return result;
	}
	c10::Scalar b = beta;
	for (int64_t i = 0; i < b1.size(0); i++) {
		result.addmm_(b1[i], b2[i], b, alpha);
		b = 1;
	}
	return result;
}
static at::Tensor &addbmm_o(const at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &o)
{
	NEURON_TRACK("aten::addbmm.out");
	return into(o, addbmm_f(self, b1, b2, beta, alpha));
}
static at::Tensor &addbmm_i(at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addbmm_");
	// aten's addbmm_ broadcasts self to the result and resizes it (addbmm_impl_: result.resize_as_)
	at::Tensor r = addbmm_f(self, b1, b2, beta, alpha);
	if (!self.sizes().equals(r.sizes()))
		self.resize_(r.sizes());
	return into_self(self, r);
}
static bool equal_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::equal");
	check_same_device("equal", {&s, &o});
	TORCH_CHECK(s.scalar_type() == o.scalar_type(), "Expected object of scalar type ", s.scalar_type(), " but got scalar type ",
		    o.scalar_type(), " for argument 'other'");
	if (s.sizes() != o.sizes())
		return false;
	if (s.numel() == 0)
		return true;
	return PW("equal", NK_OP_EQ, {s, o}, {}, Bool).all().item<bool>();
}

// aten's CPU addr: beta*self + (alpha*vec1)*vec2 with beta and alpha in the dtype and every product
// and sum rounded to it (beta == 0: self is ignored, NaN in it does not propagate)
static at::Tensor addr_f(const at::Tensor &self, const at::Tensor &v1, const at::Tensor &v2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addr");
	TORCH_CHECK(v1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", v1.dim(), "-D");
	TORCH_CHECK(v2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", v2.dim(), "-D");
	at::native::ResultTypeState st{};
	for (const at::Tensor *x : {&self, &v1, &v2})
		st = at::native::update_result_type_state(*x, st);
	at::ScalarType t = at::native::result_type(st);
	for (const c10::Scalar *sc : {&beta, &alpha}) { // aten's check_addr_scalar
		const char *nm = sc == &beta ? "beta" : "alpha";
		TORCH_CHECK(!sc->isBoolean() || t == at::kBool, "Boolean ", nm, " only supported for Boolean results.");
		TORCH_CHECK(at::isFloatingType(t) || sc->isIntegral(true), "For integral input tensors, argument ", nm,
			    " must not be a floating point number.");
	}
	at::Tensor a = v1.to(t), b = v2.to(t);
	at::Tensor ab = (a * cpu_scalar(alpha, t)).unsqueeze(1) * b.unsqueeze(0);
	bool beta0 = beta.isBoolean() ? !beta.toBool() : beta.toComplexDouble() == 0.0;
	if (beta0)
		return ab;
	return self.to(t) * cpu_scalar(beta, t) + ab;
}
static at::Tensor &addr_o(const at::Tensor &self, const at::Tensor &v1, const at::Tensor &v2, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &o)
{
	NEURON_TRACK("aten::addr.out");
	if (o.is_same(self)) { // addr_ (addr.out into self): self is neither broadcast nor resized, as aten checks
		TORCH_CHECK(self.dim() == 2, "2D tensor expected, got ", self.dim(), "D tensor for input");
		TORCH_CHECK(v1.dim() != 1 || v2.dim() != 1 || (self.size(0) == v1.size(0) && self.size(1) == v2.size(0)),
			    "size mismatch, input: ", self.sizes(), ", v1: ", v1.sizes(), ", v2: ", v2.sizes());
		return into_self(o, addr_f(self, v1, v2, beta, alpha));
	}
	return into(o, addr_f(self, v1, v2, beta, alpha), OutRule::Cast);
}

// logit(x) = log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given (aten's order of operations)
static at::Tensor logit_f(const at::Tensor &x, std::optional<double> eps)
{
	NEURON_TRACK("aten::logit");
	at::Tensor z = x.is_floating_point() ? x : x.to(c10::typeMetaToScalarType(c10::get_default_dtype()));
	if (eps.has_value() && *eps >= 0)
		z = at::clamp(z, *eps, 1.0 - *eps);
	return (z / (1 - z)).log();
}
static at::Tensor &logit_o(const at::Tensor &x, std::optional<double> eps, at::Tensor &o) { NEURON_TRACK("aten::logit.out"); return into(o, logit_f(x, eps), OutRule::Cast); }
static at::Tensor &logit_i(at::Tensor &x, std::optional<double> eps) { NEURON_TRACK("aten::logit_"); return into_self(x, logit_f(x, eps)); }

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

// ---- logaddexp, logaddexp2, round(decimals): aten's formulas from native elementwise ops ----------

// logaddexp: a == b == +-inf gives a; else max(a, b) + log1p(exp(-|a - b|))
static at::Tensor logaddexp_f(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::logaddexp");
	at::Tensor m = at::maximum(a, b), d = (a - b).abs();
	at::Tensor r = m + at::log1p(at::exp(-d));
	return at::where(at::isinf(a).logical_and(a == b), a.to(r.scalar_type()), r);
}
static at::Tensor &logaddexp_o(const at::Tensor &a, const at::Tensor &b, at::Tensor &o) { NEURON_TRACK("aten::logaddexp.out"); return into(o, logaddexp_f(a, b), OutRule::Cast); }
static at::Tensor logaddexp2_f(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::logaddexp2");
	at::Tensor m = at::maximum(a, b), d = (a - b).abs();
	at::Tensor r = m + at::log1p(at::exp2(-d)) * (1.0 / std::log(2.0));
	return at::where(at::isinf(a).logical_and(a == b), a.to(r.scalar_type()), r);
}
static at::Tensor &logaddexp2_o(const at::Tensor &a, const at::Tensor &b, at::Tensor &o) { NEURON_TRACK("aten::logaddexp2.out"); return into(o, logaddexp2_f(a, b), OutRule::Cast); }

// round(x, decimals): decimals >= 0: nearbyint(x * 10^d) / 10^d, else nearbyint(x / 10^-d) * 10^-d,
// with 10^|d| in the dtype
static at::Tensor round_dec_f(const at::Tensor &x, int64_t decimals)
{
	NEURON_TRACK("aten::round.decimals");
	if (decimals == 0 || !at::isFloatingType(x.scalar_type()))
		return x.round();
	at::Tensor p = cpu_scalar(std::pow(10.0, (double)std::llabs(decimals)), x.scalar_type());
	if (decimals > 0)
		return PW("round", NK_OP_DIV, {PW("round", NK_OP_ROUND, {PW("round", NK_OP_MUL, {x, p}, {}, Same)}, {}, Same), p}, {}, Same);
	return PW("round", NK_OP_MUL, {PW("round", NK_OP_ROUND, {PW("round", NK_OP_DIV, {x, p}, {}, Same)}, {}, Same), p}, {}, Same);
}
static at::Tensor &round_dec_o(const at::Tensor &x, int64_t decimals, at::Tensor &o) { NEURON_TRACK("aten::round.decimals_out"); return into(o, round_dec_f(x, decimals)); }
static at::Tensor &round_dec_i(at::Tensor &x, int64_t decimals) { NEURON_TRACK("aten::round_.decimals"); return into_self(x, round_dec_f(x, decimals)); }

// (convolution: native in ops_conv.cpp)

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	// indexing
	NEURON_IMPL(m, "gather", gather_f);
	NEURON_IMPL(m, "gather.out", gather_o);
	NEURON_IMPL(m, "scatter.src", scatter_src);
	NEURON_IMPL(m, "scatter.src_out", scatter_src_o);
	NEURON_IMPL(m, "scatter_.src", scatter_src_i);
	NEURON_IMPL(m, "scatter.value", scatter_value);
	NEURON_IMPL(m, "scatter.value_out", scatter_value_o);
	NEURON_IMPL(m, "scatter_.value", scatter_value_i);
	NEURON_IMPL(m, "scatter.reduce", scatter_reduce_f);
	NEURON_IMPL(m, "scatter.reduce_out", scatter_reduce_o);
	NEURON_IMPL(m, "scatter_.reduce", scatter_reduce_i);
	NEURON_IMPL(m, "scatter.value_reduce", scatter_value_reduce_f);
	NEURON_IMPL(m, "scatter.value_reduce_out", scatter_value_reduce_o);
	NEURON_IMPL(m, "scatter_.value_reduce", scatter_value_reduce_i);
	NEURON_IMPL(m, "scatter_add", scatter_add_f);
	NEURON_IMPL(m, "scatter_add.out", scatter_add_o);
	NEURON_IMPL(m, "scatter_add_", scatter_add_i);
	NEURON_IMPL(m, "scatter_reduce.two", scatter_reduce_two);
	NEURON_IMPL(m, "scatter_reduce.two_out", scatter_reduce_two_o);
	NEURON_IMPL(m, "scatter_reduce_.two", scatter_reduce_two_i);
	NEURON_IMPL(m, "index_select", index_select_f);
	NEURON_IMPL(m, "index_select.out", index_select_o);
	NEURON_IMPL(m, "index_add", index_add_f);
	NEURON_IMPL(m, "index_add.out", index_add_o);
	NEURON_IMPL(m, "index_add_", index_add_i);
	NEURON_IMPL(m, "index_copy", index_copy_f);
	NEURON_IMPL(m, "index_copy.out", index_copy_o);
	NEURON_IMPL(m, "index_copy_", index_copy_i);
	NEURON_IMPL(m, "index_fill_.int_Scalar", index_fill_s);
	NEURON_IMPL(m, "index_fill_.int_Tensor", index_fill_t);
	NEURON_IMPL(m, "index_reduce", index_reduce_f);
	NEURON_IMPL(m, "index_reduce.out", index_reduce_o);
	NEURON_IMPL(m, "index_reduce_", index_reduce_i);
	NEURON_IMPL(m, "take", take_f);
	NEURON_IMPL(m, "take.out", take_o);
	NEURON_IMPL(m, "put_", put_i);
	NEURON_IMPL(m, "masked_fill_.Scalar", masked_fill_s);
	NEURON_IMPL(m, "masked_fill_.Tensor", masked_fill_t);
	NEURON_IMPL(m, "masked_scatter_", masked_scatter_i);
	NEURON_IMPL(m, "nonzero", nonzero_f);
	NEURON_IMPL(m, "index.Tensor", index_f);
	NEURON_IMPL(m, "index.Tensor_out", index_o);
	NEURON_IMPL(m, "_index_put_impl_", index_put_impl);
	NEURON_IMPL(m, "nonzero.out", nonzero_o);
	// shape
	NEURON_IMPL(m, "tril", tril_f);
	NEURON_IMPL(m, "tril.out", tril_o);
	NEURON_IMPL(m, "tril_", tril_i);
	NEURON_IMPL(m, "triu", triu_f);
	NEURON_IMPL(m, "triu.out", triu_o);
	NEURON_IMPL(m, "triu_", triu_i);
	NEURON_IMPL(m, "flip", flip_f);
	NEURON_IMPL(m, "flip.out", flip_o);
	NEURON_IMPL(m, "roll", roll_f);
	// scans and sort
	NEURON_IMPL(m, "cumsum", cumsum_f);
	NEURON_IMPL(m, "cumsum.out", cumsum_o);
	NEURON_IMPL(m, "cumsum_", cumsum_i);
	NEURON_IMPL(m, "cumprod", cumprod_f);
	NEURON_IMPL(m, "cumprod.out", cumprod_o);
	NEURON_IMPL(m, "cumprod_", cumprod_i);
	NEURON_IMPL(m, "_cummax_helper", cummax_helper);
	NEURON_IMPL(m, "_cummin_helper", cummin_helper);
	NEURON_IMPL(m, "_logcumsumexp", logcumsumexp_f);
	NEURON_IMPL(m, "_logcumsumexp.out", logcumsumexp_o);
	NEURON_IMPL(m, "sort.stable", sort_stable);
	NEURON_IMPL(m, "sort.values_stable", sort_values_stable);
	// factories
	NEURON_IMPL(m, "linspace.out", linspace_o);
	NEURON_IMPL(m, "logspace.out", logspace_o);
	NEURON_IMPL(m, "eye.out", eye_o);
	NEURON_IMPL(m, "eye.m_out", eye_m_o);
	// pointwise
	NEURON_IMPL(m, "sgn", sgn_f);
	NEURON_IMPL(m, "sgn.out", sgn_o);
	NEURON_IMPL(m, "sgn_", sgn_i);
	NEURON_IMPL(m, "clamp_min", clamp_min_f);
	NEURON_IMPL(m, "clamp_min.out", clamp_min_o);
	NEURON_IMPL(m, "clamp_min_", clamp_min_i);
	NEURON_IMPL(m, "clamp_max", clamp_max_f);
	NEURON_IMPL(m, "clamp_max.out", clamp_max_o);
	NEURON_IMPL(m, "clamp_max_", clamp_max_i);
	NEURON_IMPL(m, "clamp_min.Tensor", clamp_min_t);
	NEURON_IMPL(m, "clamp_min.Tensor_out", clamp_min_to);
	NEURON_IMPL(m, "clamp_min_.Tensor", clamp_min_ti);
	NEURON_IMPL(m, "clamp_max.Tensor", clamp_max_t);
	NEURON_IMPL(m, "clamp_max.Tensor_out", clamp_max_to);
	NEURON_IMPL(m, "clamp_max_.Tensor", clamp_max_ti);
	NEURON_IMPL(m, "clamp.Tensor_out", clamp_to);
	NEURON_IMPL(m, "elu", elu_f);
	NEURON_IMPL(m, "elu.out", elu_o);
	NEURON_IMPL(m, "elu_", elu_i);
	NEURON_IMPL(m, "elu_backward", elu_bw);
	NEURON_IMPL(m, "elu_backward.grad_input", elu_bw_o);
	NEURON_IMPL(m, "softplus", softplus_f);
	NEURON_IMPL(m, "softplus.out", softplus_o);
	NEURON_IMPL(m, "softplus_backward", softplus_bw);
	NEURON_IMPL(m, "softplus_backward.grad_input", softplus_bw_o);
	NEURON_IMPL(m, "hardtanh", hardtanh_f);
	NEURON_IMPL(m, "hardtanh.out", hardtanh_o);
	NEURON_IMPL(m, "hardtanh_", hardtanh_i);
	NEURON_IMPL(m, "hardtanh_backward", hardtanh_bw);
	NEURON_IMPL(m, "hardtanh_backward.grad_input", hardtanh_bw_o);
	NEURON_IMPL(m, "leaky_relu", leaky_relu_f);
	NEURON_IMPL(m, "leaky_relu.out", leaky_relu_o);
	NEURON_IMPL(m, "leaky_relu_", leaky_relu_i);
	NEURON_IMPL(m, "leaky_relu_backward", leaky_relu_bw);
	NEURON_IMPL(m, "leaky_relu_backward.grad_input", leaky_relu_bw_o);
	NEURON_IMPL(m, "hardswish_backward", hardswish_bw);
	NEURON_IMPL(m, "hardsigmoid_backward", hardsigmoid_bw);
	NEURON_IMPL(m, "hardsigmoid_backward.grad_input", hardsigmoid_bw_o);
	NEURON_IMPL(m, "mish_backward", mish_bw);
	NEURON_IMPL(m, "threshold", threshold_f);
	NEURON_IMPL(m, "threshold.out", threshold_o);
	NEURON_IMPL(m, "threshold_", threshold_i);
	NEURON_IMPL(m, "isposinf", isposinf_f);
	NEURON_IMPL(m, "isposinf.out", isposinf_o);
	NEURON_IMPL(m, "isneginf", isneginf_f);
	NEURON_IMPL(m, "isneginf.out", isneginf_o);
	NEURON_IMPL(m, "signbit", signbit_f);
	NEURON_IMPL(m, "signbit.out", signbit_o);
	NEURON_IMPL(m, "nan_to_num", nan_to_num_f);
	NEURON_IMPL(m, "nan_to_num.out", nan_to_num_o);
	NEURON_IMPL(m, "nan_to_num_", nan_to_num_i);
	NEURON_IMPL(m, "rsub.Tensor", rsub_t);
	NEURON_IMPL(m, "rsub.Scalar", rsub_s);
	NEURON_IMPL(m, "floor_divide", floor_divide_f);
	NEURON_IMPL(m, "floor_divide.out", floor_divide_o);
	NEURON_IMPL(m, "floor_divide_.Tensor", floor_divide_i);
	NEURON_IMPL(m, "floor_divide.Scalar", floor_divide_s);
	NEURON_IMPL(m, "floor_divide_.Scalar", floor_divide_si);
	// reductions
	NEURON_IMPL(m, "amax.out", amax_o);
	NEURON_IMPL(m, "amin.out", amin_o);
	NEURON_IMPL(m, "aminmax", aminmax_f);
	NEURON_IMPL(m, "aminmax.out", aminmax_o);
	NEURON_IMPL(m, "var_mean.correction", var_mean_c);
	NEURON_IMPL(m, "std_mean.correction", std_mean_c);
	NEURON_IMPL(m, "nansum", nansum_f);
	NEURON_IMPL(m, "nansum.out", nansum_o);
	NEURON_IMPL(m, "count_nonzero.dim_IntList", count_nonzero_d);
	NEURON_IMPL(m, "norm.out", norm_o);
	NEURON_IMPL(m, "vdot", vdot_f);
	NEURON_IMPL(m, "addbmm", addbmm_f);
	NEURON_IMPL(m, "addbmm.out", addbmm_o);
	NEURON_IMPL(m, "addbmm_", addbmm_i);
	NEURON_IMPL(m, "equal", equal_f);
	NEURON_IMPL(m, "addr", addr_f);
	NEURON_IMPL(m, "logit", logit_f);
	NEURON_IMPL(m, "nll_loss2d_forward", nll2d_fwd);
	NEURON_IMPL(m, "nll_loss2d_forward.output", nll2d_fwd_o);
	NEURON_IMPL(m, "nll_loss2d_backward", nll2d_bwd);
	NEURON_IMPL(m, "nll_loss2d_backward.grad_input", nll2d_bwd_o);
	NEURON_IMPL(m, "logaddexp", logaddexp_f);
	NEURON_IMPL(m, "logaddexp.out", logaddexp_o);
	NEURON_IMPL(m, "logaddexp2", logaddexp2_f);
	NEURON_IMPL(m, "logaddexp2.out", logaddexp2_o);
	NEURON_IMPL(m, "round.decimals", round_dec_f);
	NEURON_IMPL(m, "round.decimals_out", round_dec_o);
	NEURON_IMPL(m, "round_.decimals", round_dec_i);
	NEURON_IMPL(m, "logit.out", logit_o);
	NEURON_IMPL(m, "logit_", logit_i);
	NEURON_IMPL(m, "addr.out", addr_o);
	// losses
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
}
