// ops_nested.cpp - strided nested tensors (NestedTensorImpl) on neuron: the device-generic ATen kernels
// that CPU, CUDA and HPU register for their NestedTensor keys, registered for NestedTensorPrivateUse1.
// They work on the nested tensor's dense neuron buffer with native ops, and let the fast path of
// nn.TransformerEncoder (eval, padding mask, enable_nested_tensor=True) run on neuron as it runs on the
// CPU: _nested_tensor_from_mask -> _transformer_encoder_layer_fwd per layer -> to_padded_tensor.
// _transformer_encoder_layer_fwd itself is implemented in torchneuron/nested.py (dense math on the
// padded batch with a key padding mask, re-packed into a nested tensor).
#include "neuron.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_nested_from_padded_native.h>
#include <ATen/ops/_nested_tensor_from_mask_left_aligned_native.h>
#include <ATen/ops/_nested_tensor_from_mask_native.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/is_same_size_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/to_padded_tensor_native.h>
#include <ATen/ops/unbind_native.h>
#include <ATen/ops/values_native.h>
#include <torch/library.h>

namespace neuron {

static at::Tensor nested_from_mask(const at::Tensor &t, const at::Tensor &mask, bool mask_check)
{
	NEURON_TRACK("aten::_nested_tensor_from_mask");
	return at::native::NestedTensor_nested_tensor_from_mask(t, mask, mask_check);
}

static bool nested_from_mask_left_aligned(const at::Tensor &t, const at::Tensor &mask)
{
	NEURON_TRACK("aten::_nested_tensor_from_mask_left_aligned");
	return at::native::NestedTensor_nested_tensor_from_mask_left_aligned(t, mask);
}

static at::Tensor nested_from_padded(const at::Tensor &padded, const at::Tensor &sizes, bool fuse_transform_0213)
{
	NEURON_TRACK("aten::_nested_from_padded");
	return at::native::nested_from_padded_generic(padded, sizes, fuse_transform_0213);
}

static at::Tensor to_padded(const at::Tensor &self, double padding, at::OptionalIntArrayRef output_size)
{
	NEURON_TRACK("aten::to_padded_tensor");
	return at::native::NestedTensor_to_padded_tensor_generic(self, padding, output_size);
}

static at::Tensor to_copy(const at::Tensor &self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
			  std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
			  std::optional<at::MemoryFormat> memory_format)
{
	NEURON_TRACK("aten::_to_copy");
	return at::native::_to_copy_nested(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

} // namespace neuron

// dense neuron inputs, nested results
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("_nested_tensor_from_mask", neuron::nested_from_mask);
	m.impl("_nested_tensor_from_mask_left_aligned", neuron::nested_from_mask_left_aligned);
	m.impl("_nested_from_padded", neuron::nested_from_padded);
}

// nested neuron tensors: metadata, copies and views of the buffer
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m)
{
	m.impl("_nested_tensor_size", at::native::_nested_tensor_size);
	m.impl("_nested_tensor_strides", at::native::_nested_tensor_strides);
	m.impl("_nested_tensor_storage_offsets", at::native::_nested_tensor_storage_offsets);
	m.impl("to_padded_tensor", neuron::to_padded);
	m.impl("_to_copy", neuron::to_copy);
	m.impl("copy_", at::native::copy_nested_);
	m.impl("empty_like", at::native::empty_like_nested);
	m.impl("clone", at::native::clone_nested);
	m.impl("alias", at::native::alias_nested);
	m.impl("is_same_size", at::native::nested_is_same_size);
	m.impl("unbind.int", at::native::NestedTensor_unbind);
	m.impl("select.int", at::native::select_nested);
	m.impl("values", at::native::values_nested);
}
