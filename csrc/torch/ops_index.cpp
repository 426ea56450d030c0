// ops_index.cpp - indexing: gather/scatter (and their reductions), index_select/add/copy/fill/reduce,
// take/put, masked_fill/scatter/select, nonzero and nonzero_static, advanced indexing (x[i, j],
// x[mask], index_put_) and repeat_interleave.  Arguments are checked like aten; the C kernels
// (index.c, small.c) get the operands' shapes and strides.
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/all.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp2.h>
#include <ATen/ops/from_blob.h>
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
#include <ATen/ops/resize_native.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/std.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/var.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

namespace neuron {

// ---- helpers ---------------------------------------------------------------------------------------

// (aten skips the check for an empty index)
static void check_index_dtype(const char *op, const at::Tensor &index)
{
	TORCH_CHECK_TYPE(index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
			 "(): Expected dtype int32/int64 for index");
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
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	check_gather_shapes("gather", self, d, index, nullptr);
	c10::DeviceGuard g(self.device());
	if (C10_UNLIKELY(self.is_complex() && self.dim() > 0)) { // the (re, im) pairs move as a real trailing dim
		auto sz = index.sizes().vec();
		sz.push_back(2);
		at::Tensor i2 = index.dim() == 0 ? index.reshape({1, 1}).expand({1, 2}) : index.unsqueeze(-1).expand(sz);
		at::Tensor r = complex_from_real(gather_f(real_view_raw(self), d, i2, sparse_grad));
		return index.dim() == 0 ? r.reshape({}) : r;
	}
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
// aten's out= overlap checks of the gathering ops, before anything runs: out may not overlap itself or
// an input ("unsupported operation: some elements of the input tensor and the written-to tensor refer
// to a single memory location"); an input in `exact_ok` may be out itself (gather's index).
static void check_out_overlap(const at::Tensor &out, std::initializer_list<const at::Tensor *> in,
			      const at::Tensor *exact_ok = nullptr)
{
	at::assert_no_internal_overlap(out);
	for (const at::Tensor *x : in)
		at::assert_no_overlap(out, *x);
	if (exact_ok)
		at::assert_no_partial_overlap(out, *exact_ok);
}

static at::Tensor &gather_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, bool sg, at::Tensor &out)
{
	NEURON_TRACK("aten::gather.out");
	// aten's gather meta checks the overlap after resizing out to the index's shape
	check_out(out, self.scalar_type(), self.device(), OutRule::Exact);
	at::native::resize_output(out, index.sizes());
	check_out_overlap(out, {&self}, &index);
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

// The mean of scatter_reduce / index_reduce, as aten: divide by the number of contributions where
// it is > 0 (floor division for integers).  count holds that number per element of out.
static void divide_by_count(at::Tensor &out, at::Tensor &count)
{
	count.masked_fill_(count.eq(0), 1);
	if (at::isFloatingType(out.scalar_type()))
		out.div_(count);
	else
		out.div_(count, "floor");
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
		divide_by_count(out, count);
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

// (each op checks the index's dtype in its own words)
static void check_index_1d(const char *op, const at::Tensor &index)
{
	TORCH_CHECK_INDEX(index.dim() <= 1, op, "(): Index is supposed to be a vector");
}
static void check_index_int(const char *op, const at::Tensor &index)
{
	TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
		    "(): Expected dtype int32/int64 for index but got: ", index.scalar_type());
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
	TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
		    "index_select(): Expected dtype int32 or int64 for index");
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	if (C10_UNLIKELY(self.is_complex())) { // the (re, im) pairs move as a real trailing dim
		at::Tensor s1 = self.dim() == 0 ? self.reshape({1}) : self;
		at::Tensor r = complex_from_real(index_select_f(real_view_raw(s1), d, index));
		return self.dim() == 0 ? r.reshape({}) : r;
	}
	c10::DeviceGuard g(self.device());
	at::Tensor x1 = as1d(self);
	auto shape = x1.sizes().vec();
	shape[d] = index.numel();
	at::Tensor out1 = at::empty(shape, self.options());
	nk_index_args_t a = index1d_args(NK_IDX_GATHER, x1, d, index, shape, "aten::index_select", false);
	a.err_style = NK_IXERR_RANGE_SELF;
	a.y = out1.data_ptr();
	for (int k = 0; k < a.ndim; k++)
		a.ys[k] = out1.stride(k);
	launch_index(a, self, "aten::index_select");
	return self.dim() == 0 ? out1.reshape({}) : out1; // aten: a 0-d self gives a 0-d result
}
static at::Tensor &index_select_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, at::Tensor &out)
{
	NEURON_TRACK("aten::index_select.out");
	check_out_overlap(out, {&self, &index});
	return into(out, index_select_f(self, dim, index));
}

// out = self (copied unless it is self), then out[..index[i]..] op= source[..i..] (or value).
// label: what a bad index's (asynchronous) error names (a literal: the queue keeps the pointer), default name
static at::Tensor &index_scatter(const char *name, int op, const at::Tensor &self, int64_t dim, const at::Tensor &index,
				 const at::Tensor &source, const c10::Scalar &value, bool wrap, at::Tensor &out,
				 const char *label = nullptr)
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
	if (C10_UNLIKELY(out.is_complex() && source.defined())) { // index_add/index_copy: on the (re, im) pairs
		TORCH_CHECK(source.scalar_type() == self.scalar_type(), name, "(): self (", self.scalar_type(), ") and source (",
			    source.scalar_type(), ") must have the same scalar type");
		at::Tensor o = real_view_raw(out.dim() == 0 ? out.view({1}) : out);
		index_scatter(name, op, o, d, index, real_view_raw(source.dim() == 0 ? source.view({1}) : source), value, wrap, o);
		return out;
	}
	at::Tensor x1 = as1d(out);
	std::vector<int64_t> shape = x1.sizes().vec();
	shape[d] = index.numel();
	at::Tensor s1;
	if (source.defined()) {
		TORCH_CHECK(source.scalar_type() == self.scalar_type(), name,
			    op == NK_IDX_SCATTER ? "(): self and source expected to have the same dtype, but got (self) " : "(): self (",
			    self.scalar_type(), op == NK_IDX_SCATTER ? " and (source) " : ") and source (", source.scalar_type(),
			    op == NK_IDX_SCATTER ? "" : ") must have the same scalar type");
		s1 = as1d(source);
		TORCH_CHECK(s1.dim() == x1.dim(), name, "(): Source/destination tensor must have same slice shapes");
		TORCH_CHECK(s1.size(d) == index.numel(), name, "(): Number of indices (", index.numel(), ") should be equal to source.size(dim) (", s1.size(d), ")");
		for (int64_t k = 0; k < x1.dim(); k++)
			TORCH_CHECK(k == d || s1.size(k) == x1.size(k), name, "(): Source/destination tensor must have same slice shapes");
	}
	nk_index_args_t a = index1d_args(op, x1, d, index, shape, name, wrap);
	// the CPU's words: index_add of a 0-/1-d self "index out of range in self" (IndexError), of more dims the
	// scatter's RuntimeError; index_copy and index_fill_ an IndexError with the bounds
	a.err_style = op != NK_IDX_SCATTER_ADD ? NK_IXERR_INDEX_BOUNDS : self.dim() <= 1 ? NK_IXERR_RANGE_SELF : NK_IXERR_BOUNDS;
	a.x = x1.data_ptr();
	if (s1.defined()) {
		a.y = const_cast<void *>(s1.const_data_ptr());
		for (int k = 0; k < a.ndim; k++)
			a.ys[k] = s1.stride(k);
	} else {
		a.value = value.toDouble();
		a.ivalue = value.isBoolean() ? value.toBool() : value.isIntegral(false) ? value.toLong() : (int64_t)a.value;
	}
	launch_index(a, self, label ? label : name);
	return out;
}

static at::Tensor &index_add_o(const at::Tensor &self, int64_t dim, const at::Tensor &index, const at::Tensor &source,
			       const c10::Scalar &alpha, at::Tensor &out)
{
	NEURON_TRACK("aten::index_add.out");
	bool one = alpha.isBoolean() ? alpha.toBool() : alpha.toComplexDouble() == c10::complex<double>(1.0, 0.0);
	at::assert_no_overlap(out, source);	// before the scaled copy hides it
	check_index_1d("index_add_", index);
	check_index_int("index_add_", index);
	TORCH_CHECK(source.scalar_type() == self.scalar_type(), "index_add_(): self (", self.scalar_type(), ") and source (",
		    source.scalar_type(), ") must have the same scalar type");
	at::Tensor src = one ? source : source * alpha;
	return index_scatter("index_add_", NK_IDX_SCATTER_ADD, self, dim, index, src, 0, false, out);
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
	TORCH_CHECK(index.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ", index.scalar_type());
	// the CPU's "index_copy_(): index 50 is out of bounds for dimension 0 with size 4"
	return index_scatter("index_copy_", NK_IDX_SCATTER, self, dim, index, source, 0, false, out, "index_copy_()");
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
	TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
	(void)cpu_scalar(v, self.scalar_type()); // the CPU's checked conversion: "value cannot be converted to type int16_t without overflow"
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
	check_index_1d("index_reduce_", index);
	check_index_int("index_reduce_", index);
	bool mean = reduce == "mean";
	int op = mean ? NK_IDX_SCATTER_ADD : scatter_reduce_op(reduce, "index_reduce");
	c10::DeviceGuard g(self.device());
	if (!out.is_same(self)) {
		resize_out(out, self.sizes(), self.options());
		out.copy_(self);
	}
	if (!include_self)
		index_scatter("index_reduce_", NK_IDX_SCATTER, out, dim, index, {}, reduce_identity(op, self.scalar_type()), false, out);
	index_scatter("index_reduce_", op, out, dim, index, source, 0, false, out);
	if (mean) {
		at::Tensor count = include_self ? at::ones_like(out) : at::zeros_like(out);
		index_scatter("index_reduce_", NK_IDX_SCATTER_ADD, count, dim, index, at::ones_like(source), 0, false, count);
		divide_by_count(out, count);
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
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.contiguous(), out = at::empty(index.sizes(), self.options());
	TORCH_CHECK_INDEX(x.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
	at::Tensor i1 = as1d(index), o1 = as1d(out);
	nk_index_args_t a{};
	a.op = NK_IDX_GATHER;
	a.dtype = nk_dtype(self.scalar_type(), "aten::take");
	a.idx_dtype = NK_I64;
	set_dims(a, i1.sizes());
	a.dim = -1, a.err_dim = 0, a.wrap = true, a.err_style = NK_IXERR_TAKE;
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
	check_out_overlap(out, {&self, &index});
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
	a.dim = -1, a.err_dim = 0, a.wrap = true, a.err_style = NK_IXERR_TAKE;
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
		// aten moves non-adjacent indexed dims to the front (transposeToFront) and reports a bad index
		// against that order: x[i, :, j] names j's dim as dimension 1
		a.dim[k] = (int)(adjacent ? pos[k] : k);
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
	if (C10_UNLIKELY(self.is_complex() && self.dim() > 0)) // the (re, im) pairs move as a real trailing dim
		return complex_from_real(index_f(real_view_raw(self), indices));
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
	check_out_overlap(out, {&self});
	for (size_t k = 0; k < indices.size(); k++) {
		std::optional<at::Tensor> i = indices[k];
		if (i && i->defined())
			at::assert_no_overlap(out, *i);
	}
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

// Compaction: the output size depends on the data, so the queue is drained and the selected
// elements are gathered on the calling thread (device memory is host-addressable).
static at::Tensor masked_select(const at::Tensor &self, const at::Tensor &mask)
{
	NEURON_TRACK("aten::masked_select");
	TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
	TORCH_CHECK(self.device() == mask.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
		    self.device(), " and ", mask.device(), "!");
	c10::DeviceGuard g(self.device());
	auto shape = at::infer_size(mask.sizes(), self.sizes()); // aten: expand_outplace(mask, self), in this order
	at::Tensor x = self.expand(shape).contiguous(), m = mask.expand(shape).contiguous();
	sync_device(self.device().index(), "aten::masked_select");
	const bool *mp = m.const_data_ptr<bool>();
	int64_t n = x.numel(), k = 0;
	for (int64_t i = 0; i < n; i++)
		k += mp[i];
	at::Tensor out = at::empty({k}, self.options());
	size_t es = x.itemsize();
	const char *src = (const char *)x.const_data_ptr();
	char *dst = (char *)out.data_ptr();
	for (int64_t i = 0, j = 0; i < n; i++)
		if (mp[i])
			std::memcpy(dst + es * j++, src + es * i, es);
	return out;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
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
	NEURON_IMPL(m, "repeat_interleave.Tensor", repeat_interleave_f);
	NEURON_IMPL(m, "nonzero_static", nonzero_static_f);
	NEURON_IMPL(m, "masked_select", masked_select);
}
