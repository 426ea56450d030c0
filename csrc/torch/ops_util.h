// ops_util.h - helpers the op families of the glue share (one copy each): CPU scalars, the PW shorthand
// for the pointwise engine, optional-tensor pointers, the layout test of the fast paths and which ops
// take a reduced-float scalar at opmath precision.
#pragma once

#include "neuron.h"
#include "out.h"
#include "pointwise.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>

#include <initializer_list>
#include <optional>
#include <utility>

namespace neuron {

std::pair<uint64_t, uint64_t> philox_args(const std::optional<at::Generator> &gen, c10::DeviceIndex idx, int64_t n);

// A 0-d CPU tensor holding v in dtype t: the pointwise engine passes it to the kernel as a scalar.
inline at::Tensor cpu_scalar(const c10::Scalar &v, at::ScalarType t)
{
	return at::scalar_tensor(v, at::TensorOptions().dtype(t));
}

inline void check_same_device(const char *op, std::initializer_list<const at::Tensor *> ts)
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

inline at::Tensor wrap(const c10::Scalar &s)
{
	return at::native::wrapped_scalar_tensor(s);
}

// PW("name", nk_op, {inputs}, out, kind[, a, b, ia, ib, nocast]): the pointwise engine (pointwise.h)
inline constexpr PwKind Same = PwKind::Same, Bool = PwKind::Bool, Float = PwKind::Float;

#define PW(name, ...) pointwise_op("aten::" name, __VA_ARGS__)

inline at::Tensor opt(const std::optional<at::Tensor> &t)
{
	return t.has_value() && t->defined() ? *t : at::Tensor();
}

inline const void *cptr(const at::Tensor &t)
{
	return t.defined() ? t.const_data_ptr() : nullptr;
}

inline void *mptr(const at::Tensor &t)
{
	return t.defined() ? t.data_ptr() : nullptr;
}

inline nrt_queue_t *queue_for(const at::Tensor &t)
{
	return current_queue(t.device().index());
}

inline void check_float(const char *op, const at::Tensor &t, const char *what)
{
	TORCH_CHECK(at::isFloatingType(t.scalar_type()) && !at::isFloat8Type(t.scalar_type()), op, ": expected a floating point ", what,
		    " (float32, float64, bfloat16 or float16), got ", t.scalar_type());
}

inline void copy_out(at::Tensor &out, const at::Tensor &r)
{
	into(out, r);
}

// aten's CPU mul/div kernels on bf16/f16 take a scalar second operand at opmath (float) precision
// instead of rounding it to the dtype: x * 0.1 multiplies by 0.1f.  Such scalars are passed as f32.
inline bool opmath_scalar_op(int op)
{
	return op == NK_OP_MUL || op == NK_OP_DIV || op == NK_OP_DIV_TRUNC || op == NK_OP_DIV_FLOOR;
}

// True when t is laid out exactly as a contiguous tensor of its shape (strides included, so size-1
// dimensions cannot make a channels-last tensor pass).
inline bool plain_contiguous(const at::Tensor &t)
{
	if (!t.is_contiguous())
		return false;
	int64_t expect = 1;
	auto sz = t.sizes();
	auto st = t.strides();
	for (int64_t d = (int64_t)sz.size() - 1; d >= 0; d--) {
		if (st[d] != expect)
			return false;
		expect *= sz[d];
	}
	return true;
}

} // namespace neuron
