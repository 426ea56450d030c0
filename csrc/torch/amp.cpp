// amp.cpp - torch.autocast("neuron"): the same op policy lists as CUDA's autocast (ATen's
// autocast_mode.h), registered for the AutocastPrivateUse1 key.  Ops not listed fall through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {
using namespace at::autocast;
using at::Tensor;
using at::ScalarType;
using at::IntArrayRef;
using at::Scalar;

#define NEURON_KERNEL_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define NEURON_KERNEL_DIFFERENT_REDISPATCH(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
	KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m)
{
	m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m)
{
	AT_FORALL_LOWER_PRECISION_FP(NEURON_KERNEL_LOW)
	AT_FORALL_FP32(NEURON_KERNEL_FP32)
	AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_KERNEL_FP32_SET_OPT_DTYPE)
	AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(NEURON_KERNEL_DIFFERENT_REDISPATCH)
	AT_FORALL_PROMOTE(NEURON_KERNEL_PROMOTE)
}
} // namespace
