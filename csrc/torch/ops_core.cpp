// ops_core.cpp - the tensor basics on neuron: allocation, views, resize, copies between devices and
// dtypes, .item(), fill, random ops, and the boxed CPU fallback for every op without a native kernel.
#include "neuron.h"
#include "complex.h"
#include "profiler.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <set>

namespace neuron {

// ---- the argument contract (out.h) -----------------------------------------------------------

void check_out(const at::Tensor &out, at::ScalarType result, c10::Device dev, OutRule rule)
{
	if (rule == OutRule::Exact) {
		TORCH_CHECK(out.scalar_type() == result, "Expected out tensor to have dtype ", c10::scalarTypeToTypeMeta(result),
			    ", but got ", out.dtype(), " instead");
	} else if (rule == OutRule::Same) {
		TORCH_CHECK(out.scalar_type() == result, "Found dtype ", out.scalar_type(), " but expected ", result);
	} else {
		TORCH_CHECK(at::canCast(result, out.scalar_type()), "result type ", result,
			    " can't be cast to the desired output type ", out.scalar_type());
	}
	TORCH_CHECK(out.device() == dev, "Expected out tensor to have device ", dev, ", but got ", out.device(), " instead");
}

void resize_out(const at::Tensor &out, at::IntArrayRef sizes, const at::TensorOptions &opts)
{
	check_out(out, c10::typeMetaToScalarType(opts.dtype()), opts.device(), OutRule::Exact);
	at::native::resize_output(out, sizes);
	at::assert_no_internal_overlap(out);
}

at::Tensor &into(at::Tensor &out, const at::Tensor &r, OutRule rule)
{
	if (out.is_same(r))
		return out;
	check_out(out, r.scalar_type(), r.device().type() == kDev ? r.device() : out.device(), rule);
	at::native::resize_output(out, r.sizes());
	at::assert_no_internal_overlap(out);
	out.copy_(r);
	return out;
}

void check_inplace_shape(const at::Tensor &self, at::IntArrayRef result)
{
	TORCH_CHECK(self.sizes().equals(result), "output with shape ", self.sizes(), " doesn't match the broadcast shape ",
		    result);
}

at::Tensor &into_self(at::Tensor &self, const at::Tensor &r)
{
	if (self.is_same(r))
		return self;
	check_inplace_shape(self, r.sizes());
	TORCH_CHECK(at::canCast(r.scalar_type(), self.scalar_type()), "result type ", r.scalar_type(),
		    " can't be cast to the desired output type ", self.scalar_type());
	self.copy_(r);
	return self;
}

// The argument's name from the op's schema (only on this error path).
static std::string arg_name(const char *op, int pos)
{
	std::string full = std::string("aten::") + op, name = full, overload;
	size_t dot = full.find('.');
	if (dot != std::string::npos)
		name = full.substr(0, dot), overload = full.substr(dot + 1);
	auto h = c10::Dispatcher::singleton().findSchema({name, overload});
	if (h && pos < (int)h->schema().arguments().size())
		return h->schema().arguments()[pos].name();
	return std::to_string(pos);
}

void DeviceCheck::raise(const char *op) const
{
	TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", *dev, " and ",
		    other, "! (when checking argument for argument ", arg_name(op, bad), " in method aten::", op, ")");
}

void OpScope::raise(const char *op) const
{
	raise_status(NRT_ERR_KERNEL, (std::string(op).rfind("aten::", 0) == 0 ? std::string(op) : std::string("aten::") + op).c_str());
}

// The same rule for the boxed fallback: every tensor argument on one device, read-only CPU
// zero-dim tensors aside; lists of optional tensors (index's indices) are not looked at.
static void check_fallback_devices(const c10::OperatorHandle &op, const torch::jit::Stack *stack)
{
	const auto &n = op.schema().operator_name();
	if (n.name.rfind("aten::_foreach_", 0) == 0 || n.name.rfind("aten::_fused_", 0) == 0 ||
	    n.name.rfind("aten::_amp_", 0) == 0)
		return; // lists with CPU-side arguments by design (foreach scalars, fused optimizers' lr)
	const auto &args = op.schema().arguments();
	size_t base = stack->size() - args.size();
	DeviceCheck dc;
	for (size_t i = 0; i < args.size(); i++, dc.pos++) {
		const c10::IValue &iv = (*stack)[base + i];
		bool written = args[i].alias_info() && args[i].alias_info()->isWrite();
		if (iv.isTensor())
			dc.see(iv.toTensor(), written);
		else if (iv.isTensorList())
			for (const at::Tensor &t : iv.toTensorList())
				dc.see(t, true);
		if (dc.bad >= 0) {
			TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
				    *dc.dev, " and ", dc.other, "! (when checking argument for argument ", args[i].name(),
				    " in method ", n.name, n.overload_name.empty() ? "" : ".", n.overload_name, ")");
		}
	}
}

// ---- allocation and views ------------------------------------------------------------------------

static c10::Device target_device(std::optional<c10::Device> d)
{
	c10::Device dev = d.value_or(c10::Device(kDev));
	TORCH_CHECK(dev.type() == kDev, "neuron: expected a neuron device, got ", dev);
	c10::DeviceIndex idx = dev.has_index() ? dev.index() : current_device();
	check_device_index(idx);
	return c10::Device(kDev, idx);
}

// complex32 (chalf) has no kernels on neuron: refuse to create such tensors, so an op producing one
// fails at once with this message.  complex64 and complex128 are native (ops_complex.cpp).
static void check_dtype_supported(at::ScalarType t)
{
	TORCH_CHECK_TYPE(t != at::kComplexHalf, "neuron: dtype ", t, " is not supported on neuron");
}

static at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
				      std::optional<at::Layout> layout, std::optional<at::Device> device,
				      std::optional<bool> pin_memory, std::optional<at::MemoryFormat> mf)
{
	NEURON_TRACK("aten::empty.memory_format");
	OpScope op; // its output has no producer until a kernel writes it
	TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "neuron: only strided tensors are supported, got layout ",
		    c10::layout_or_default(layout));
	TORCH_CHECK(!pin_memory.value_or(false), "neuron: only CPU tensors can be pinned");
	check_dtype_supported(c10::dtype_or_default(dtype));
	c10::Device dev = target_device(device);
	DeviceScope g(dev.index());
	at::Tensor t = at::detail::empty_generic(size, c10::GetAllocator(kDev), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
						 c10::dtype_or_default(dtype), mf);
	track_dtype(t.scalar_type(), (int64_t)t.nbytes());
	return t;
}

static at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride, std::optional<at::ScalarType> dtype,
				std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin_memory)
{
	NEURON_TRACK("aten::empty_strided");
	OpScope op;
	TORCH_CHECK(c10::layout_or_default(layout) == at::kStrided, "neuron: only strided tensors are supported");
	TORCH_CHECK(!pin_memory.value_or(false), "neuron: only CPU tensors can be pinned");
	check_dtype_supported(c10::dtype_or_default(dtype));
	c10::Device dev = target_device(device);
	DeviceScope g(dev.index());
	at::Tensor t = at::detail::empty_strided_generic(size, stride, c10::GetAllocator(kDev),
							 c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
	track_dtype(t.scalar_type(), (int64_t)t.storage().nbytes());
	return t;
}

static at::Tensor as_strided(const at::Tensor &self, at::IntArrayRef size, at::IntArrayRef stride,
			     std::optional<int64_t> off)
{
	NEURON_TRACK("aten::as_strided");
	return at::native::as_strided_tensorimpl(self, size, stride, off);
}

static at::Tensor view(const at::Tensor &self, at::IntArrayRef size)
{
	NEURON_TRACK("aten::view");
	return at::native::view(self, size);
}

static at::Tensor reshape_alias(const at::Tensor &self, at::IntArrayRef size, at::IntArrayRef stride)
{
	NEURON_TRACK("aten::_reshape_alias");
	return at::native::_reshape_alias(self, size, stride);
}

static at::Tensor unfold(const at::Tensor &self, int64_t d, int64_t size, int64_t step)
{
	NEURON_TRACK("aten::unfold");
	return at::native::unfold(self, d, size, step);
}

// Growing a storage copies the old bytes on the host: finish queued work on them first.
static const at::Tensor &resize_(const at::Tensor &self, at::IntArrayRef size, std::optional<at::MemoryFormat> mf)
{
	NEURON_TRACK("aten::resize_");
	const auto *st = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
	int64_t n = c10::multiply_integers(size);
	size_t need = (size_t)(n + self.storage_offset()) * self.itemsize();
	if (st && st->nbytes() > 0 && need > st->nbytes())
		sync_device(self.device().index(), "aten::resize_");
	c10::DeviceGuard g(self.device());
	return at::native::resize_(self, size, mf);
}

static at::Tensor &set_storage(at::Tensor &self, at::Storage src, int64_t off, at::IntArrayRef size, at::IntArrayRef stride)
{
	NEURON_TRACK("aten::set_.source_Storage_storage_offset");
	return at::native::set_storage_cpu_(self, src, off, size, stride);
}

static at::Tensor &set_source_storage(at::Tensor &self, at::Storage src)
{
	NEURON_TRACK("aten::set_.source_Storage");
	int64_t n = (int64_t)(src.nbytes() / self.itemsize());
	return at::native::set_storage_cpu_(self, src, 0, {n}, {});
}

static at::Tensor &set_source_tensor(at::Tensor &self, const at::Tensor &src)
{
	NEURON_TRACK("aten::set_.source_Tensor");
	return at::native::set_tensor_(self, src);
}

static at::Tensor &set_empty(at::Tensor &self)
{
	NEURON_TRACK("aten::set_");
	return at::native::set_cpu_(self);
}

// ---- copies --------------------------------------------------------------------------------------

/* The signed dtype of the width of uint16/32/64 (which have storage, fill and copies, but no arithmetic
 * kernels yet); any other dtype itself. */
static at::ScalarType as_signed_width(at::ScalarType t)
{
	return t == at::kUInt16 ? at::kShort : t == at::kUInt32 ? at::kInt : t == at::kUInt64 ? at::kLong : t;
}

// dst = src for any pair of devices among {cpu, neuron:i}, any dtypes and strides.  Device memory
// is host-addressable, so one strided cast kernel on the neuron side's queue moves the data; copies
// that touch pageable host memory synchronize before returning (like CUDA).
static at::Tensor copy_from(const at::Tensor &src, const at::Tensor &dst, bool non_blocking)
{
	NEURON_TRACK("aten::_copy_from");
	if (dst.numel() == 0)
		return dst;
	if (C10_UNLIKELY(src.scalar_type() == dst.scalar_type() && as_signed_width(src.scalar_type()) != src.scalar_type())) {
		/* uint16/32/64 have no cast kernels yet: a copy within the dtype moves bits */
		at::ScalarType s = as_signed_width(src.scalar_type());
		copy_from(src.view(s), dst.view(s), non_blocking);
		return dst;
	}
	OpScope op;
	op.write(dst, "aten::_copy_from");
	bool src_dev = src.device().type() == kDev, dst_dev = dst.device().type() == kDev;
	TORCH_CHECK(src_dev || src.device().is_cpu(), "neuron: copy from ", src.device(), " is not supported");
	TORCH_CHECK(dst_dev || dst.device().is_cpu(), "neuron: copy to ", dst.device(), " is not supported");
	c10::DeviceIndex idx = dst_dev ? dst.device().index() : src.device().index();
	if (src_dev && dst_dev && src.device() != dst.device())
		sync_device(src.device().index(), "aten::_copy_from (peer copy)");
	if (src_dev)
		check_readable(src, "aten::_copy_from"); // the output of a failed kernel is not data
	auto iter = at::TensorIteratorConfig()
			    .add_output(dst)
			    .add_const_input(src)
			    .resize_outputs(false)
			    .check_all_same_dtype(false)
			    .check_all_same_device(false)
			    .build();
	nrt_queue_t *q = current_queue(idx);
	size_t cost = (size_t)dst.numel() * (src.element_size() + dst.element_size());
	if (C10_UNLIKELY(copy_needs_complex(src, dst))) {
		copy_complex(iter, src, dst, q, cost); // complex operands, or conj/neg bits to apply
	} else {
		nk_iter_t it;
		iter_to_nk(iter, it, "aten::_copy_from");
		launch_cost(q, nk_copy_run, it, "aten::_copy_from", cost);
	}
	bool async_ok = non_blocking && dst.device().is_cpu() && nrt_host_is_pinned(dst.const_data_ptr());
	if (!(src_dev && dst_dev && src.device() == dst.device()) && !async_ok) {
		sync_queue(q, "aten::_copy_from");
		if (src_dev)
			check_readable(src, "aten::_copy_from"); // its producer has run by now
	}
	return dst;
}

static at::Tensor copy_from_and_resize(const at::Tensor &src, const at::Tensor &dst)
{
	NEURON_TRACK("aten::_copy_from_and_resize");
	dst.resize_(src.sizes());
	return copy_from(src, dst, false);
}

static at::Scalar local_scalar_dense(const at::Tensor &self)
{
	NEURON_TRACK("aten::_local_scalar_dense");
	TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
	sync_device(self.device().index(), "aten::_local_scalar_dense");
	check_readable(self, "aten::_local_scalar_dense");
	at::Scalar r;
	AT_DISPATCH_V2(self.scalar_type(), "_local_scalar_dense", AT_WRAP([&] {
		r = at::Scalar(*(const scalar_t *)self.const_data_ptr());
	}), AT_EXPAND(AT_ALL_TYPES), AT_EXPAND(AT_COMPLEX_TYPES), at::kBool, at::kHalf, at::kBFloat16);
	return r;
}

// ---- fill and random -----------------------------------------------------------------------------

at::Tensor &fill_scalar(at::Tensor &self, const at::Scalar &v)
{
	NEURON_TRACK("aten::fill_.Scalar");
	if (self.numel() == 0)
		return self;
	at::ScalarType st = self.scalar_type();
	if (C10_UNLIKELY(st == at::kUInt16 || st == at::kUInt32 || st == at::kUInt64)) {
		/* no arithmetic kernels for these yet (NotImplementedError elsewhere): a fill writes the value's
		 * bit pattern, through the signed dtype of the same width (torch.zeros/full of them work) */
		double d = v.isFloatingPoint() ? v.toDouble() : 0;
		uint64_t bits = v.isBoolean() ? (uint64_t)v.toBool()
			      : v.isUnsigned()  ? v.toUInt64()
			      : v.isIntegral(false) ? (uint64_t)v.toLong()
			      : d >= 0 ? (uint64_t)d : (uint64_t)(int64_t)d;
		at::Tensor as_signed = self.view(as_signed_width(st));
		fill_scalar(as_signed, at::Scalar((int64_t)bits));
		return self;
	}
	OpScope op;
	op.write(self, "aten::fill_");
	DeviceScope g(self.device().index());
	if (C10_UNLIKELY(self.is_complex())) {
		fill_complex(self, v);
		return self;
	}
	auto iter = at::TensorIteratorConfig().add_output(self).resize_outputs(false).check_all_same_dtype(false).build();
	nk_pointwise_args_t a{};
	iter_to_nk(iter, a.it, "aten::fill_");
	a.op = NK_OP_FILL;
	if (v.isBoolean())
		a.a = v.toBool(), a.ia = v.toBool();
	else if (v.isIntegral(false))
		a.ia = v.toLong(), a.a = (double)a.ia;
	else
		a.a = v.toDouble(), a.ia = (int64_t)a.a;
	launch_cost(current_queue(self.device().index()), nk_pointwise_run, a, "aten::fill_", (size_t)self.numel() * self.element_size());
	return self;
}

static at::Tensor &fill_tensor(at::Tensor &self, const at::Tensor &v)
{
	TORCH_CHECK(v.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", v.dim(), " dimensions.");
	return fill_scalar(self, v.item());
}

static at::Tensor &zero_(at::Tensor &self)
{
	return fill_scalar(self, 0);
}

static void record_stream(at::Tensor &self, c10::Stream s)
{
	NEURON_TRACK("aten::record_stream");
	TORCH_CHECK(s.device_type() == kDev, "record_stream: expected a neuron stream, got one for ", s.device());
	void *p = self.storage().mutable_data();
	if (p)
		NEURON_CHECK(nrt_record_queue(p, queue_of(s)), "aten::record_stream");
}

// Module.to("neuron") keeps tied parameters tied only if `param.data = moved` is allowed.
static bool compatible_shallow_copy_type(const at::Tensor &, const at::Tensor &)
{
	return true;
}

// ---- CPU fallback ----------------------------------------------------------------------------------

static std::string op_name(const c10::OperatorHandle &op)
{
	const auto &n = op.schema().operator_name();
	return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

// Ops without a native kernel: synchronize the device (the CPU kernel reads and writes memory that
// queued kernels may still use), copy to CPU, run the CPU kernel, copy results and mutated inputs
// back.  Tracked, warned once per op, and an error under NEURON_FALLBACK=error.
// A CPU tensor over the same bytes as device tensor t (device memory is host-addressable); it keeps
// the device storage alive.  Valid only while no queued kernel touches t (callers synchronize).
static at::Tensor host_alias(const at::Tensor &t)
{
	if (!t.defined() || t.device().type() != kDev)
		return t;
	if (t.numel() == 0 || !t.storage().data())
		return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
	c10::Storage st = t.storage();
	return at::from_blob(st.mutable_data(), t.sizes(), t.strides(), t.storage_offset(), [st](void *) {},
			     t.options().device(at::kCPU));
}

// Ops that neither mutate nor alias their arguments can run the CPU kernel directly on host aliases
// of the device inputs: no input copies.  Outputs are copied to the device.  Returns false (stack
// untouched) when the op does not qualify; the copying fallback handles those.
static bool zero_copy_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
	const auto &schema = op.schema();
	for (const auto &a : schema.arguments())
		if (a.alias_info() || a.type()->kind() == c10::TypeKind::DeviceObjType)
			return false;
	for (const auto &r : schema.returns())
		if (r.alias_info())
			return false;
	size_t nargs = schema.arguments().size(), base = stack->size() - nargs;
	std::optional<c10::Device> dev;
	for (size_t i = base; i < stack->size(); i++) {
		const c10::IValue &iv = (*stack)[i];
		if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device().type() == kDev)
			dev = iv.toTensor().device();
		else if (iv.isTensorList()) {
			for (const at::Tensor &t : iv.toTensorList())
				if (t.defined() && t.device().type() == kDev)
					dev = t.device();
		} else if (iv.isList() || iv.isDevice())
			return false; // lists of optional tensors, explicit devices: the copying path knows them
	}
	if (!dev)
		return false;
	for (size_t i = base; i < stack->size(); i++) {
		c10::IValue &iv = (*stack)[i];
		if (iv.isTensor()) {
			iv = host_alias(iv.toTensor());
		} else if (iv.isTensorList()) {
			c10::List<at::Tensor> l;
			for (const at::Tensor &t : iv.toTensorList())
				l.push_back(host_alias(t));
			iv = l;
		}
	}
	op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
	size_t nret = schema.returns().size(), rbase = stack->size() - nret;
	for (size_t i = rbase; i < stack->size(); i++) {
		c10::IValue &iv = (*stack)[i];
		if (iv.isTensor() && iv.toTensor().defined()) {
			iv = iv.toTensor().to(*dev);
		} else if (iv.isTensorList()) {
			c10::List<at::Tensor> l;
			for (const at::Tensor &t : iv.toTensorList())
				l.push_back(t.defined() ? t.to(*dev) : t);
			iv = l;
		}
	}
	return true;
}

// For out= and in-place ops (every return aliases a mutated argument), the read-only tensor arguments
// reach the CPU kernel as host aliases with their own strides instead of contiguous copies: some ops'
// results depend on the input layout (linalg_det factors A^T when A is contiguous, and its backward
// checks A.is_contiguous() to know which), so a layout change would give wrong gradients.
static void alias_readonly_inputs(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
	const auto &schema = op.schema();
	if (schema.returns().empty())
		return;
	for (const auto &r : schema.returns())
		if (!r.alias_info())
			return;
	const auto &args = schema.arguments();
	size_t base = stack->size() - args.size();
	for (size_t i = 0; i < args.size(); i++) {
		c10::IValue &iv = (*stack)[base + i];
		if (!args[i].alias_info() && iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device().type() == kDev)
			iv = host_alias(iv.toTensor());
	}
}

void cpu_fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
	std::string name = op_name(op);
	check_fallback_devices(op, stack);
	track_fallback(name);
	FallbackTrace fallback_trace_(name); // the profiler's device activity "<op> (CPU fallback)"
	const char *mode = getenv("NEURON_FALLBACK");
	TORCH_CHECK(!(mode && strcmp(mode, "error") == 0), "neuron: ", name,
		    " has no native neuron kernel and NEURON_FALLBACK=error forbids running it on the CPU");
	{
		static std::mutex mu;
		static std::set<std::string> warned;
		std::lock_guard<std::mutex> g(mu);
		if (warned.insert(name).second && !(mode && strcmp(mode, "silent") == 0))
			TORCH_WARN("neuron: ", name, " has no native neuron kernel; it runs on the CPU (fallback). "
				   "Set NEURON_FALLBACK=error to make this an error.");
	}
	for (int d = 0; d < nrt_device_count(); d++)
		sync_device((c10::DeviceIndex)d, name.c_str());
	static const bool copy_only = getenv("NEURON_FALLBACK_COPY") && strcmp(getenv("NEURON_FALLBACK_COPY"), "1") == 0;
	if (!copy_only && zero_copy_fallback(op, stack))
		return;
	if (!copy_only)
		alias_readonly_inputs(op, stack);
	at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(_, PrivateUse1, m)
{
	m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	m.impl("empty.memory_format", empty_memory_format);
	m.impl("empty_strided", empty_strided);
	m.impl("as_strided", as_strided);
	m.impl("view", view);
	m.impl("_reshape_alias", reshape_alias);
	m.impl("unfold", unfold);
	m.impl("resize_", resize_);
	m.impl("set_.source_Storage_storage_offset", set_storage);
	m.impl("set_.source_Storage", set_source_storage);
	m.impl("set_.source_Tensor", set_source_tensor);
	m.impl("set_", set_empty);
	m.impl("_copy_from", copy_from);
	m.impl("_copy_from_and_resize", copy_from_and_resize);
	m.impl("_local_scalar_dense", local_scalar_dense);
	m.impl("fill_.Scalar", fill_scalar);
	m.impl("fill_.Tensor", fill_tensor);
	m.impl("zero_", zero_);
	m.impl("record_stream", record_stream);
	m.impl("_has_compatible_shallow_copy_type", compatible_shallow_copy_type);
}
