// out.h - the argument contract every native op shares, in one place: all tensors on one device (the
// registration wrapper NEURON_IMPL, which every op goes through), out= tensors (dtype by PyTorch's
// rules, device, internal overlap, resize with ATen's warning) and in-place results (they must have
// self's shape: self is never resized or broadcast, as TensorIterator refuses).  The boxed CPU
// fallback (ops_core.cpp) applies the same device rule to the ops without a native kernel.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/IListRef.h>
#include <c10/core/CompileTimeFunctionPointer.h>

#include <cstddef>
#include <optional>
#include <utility>

#include "nrt.h"
#include "ops_device_check.h"

namespace neuron {

// How an out= tensor's dtype must relate to the result's, as the CPU kernel of the op has it:
// Exact for structured kernels (ATen's resize_out: "Expected out tensor to have dtype float, but got
// double instead"), Same for TensorIterator's same-dtype unary ops (abs, neg, floor, clamp with scalar
// bounds...: "Found dtype Double but expected Float"), Cast for the other TensorIterator ops and
// reductions (at::canCast: "result type Float can't be cast to the desired output type Long").
enum class OutRule { Exact, Same, Cast };

// Checks out for a result of `opts` (dtype and device) and resizes it to sizes (at::native::
// resize_output: warns when a non-empty out has another shape); then refuses an out whose elements
// overlap (at::assert_no_internal_overlap).  For ops that write the result into out directly:
// Exact only.
void resize_out(const at::Tensor &out, at::IntArrayRef sizes, const at::TensorOptions &opts);
// The dtype and device checks of resize_out, without resizing; rule Cast allows a castable dtype.
void check_out(const at::Tensor &out, at::ScalarType result, c10::Device dev, OutRule rule);
// A functional result r into out: the checks above, resize, copy (nothing when out is r).  A result
// on the CPU (factories computed on the host) skips the device check.
at::Tensor &into(at::Tensor &out, const at::Tensor &r, OutRule rule = OutRule::Exact);
// r (computed by an in-place op) into self: r must have self's shape (self is never resized: "output
// with shape [5, 1] doesn't match the broadcast shape [5, 5]") and a dtype castable to self's.
at::Tensor &into_self(at::Tensor &self, const at::Tensor &r);
// The shape check of into_self alone, for kernels that write self directly.
void check_inplace_shape(const at::Tensor &self, at::IntArrayRef result);

// ---- one device per op -------------------------------------------------------------------------

// The op's bracket in the runtime (nrt_op_begin/end): its kernels, its outputs and what it writes in
// place are one op, so a failed or skipped kernel poisons exactly those; reading a tensor whose kernel
// failed, once the error has been reported, raises the error (issue 16, 13).
struct OpScope {
	bool poison_seen = nrt_op_begin(); // some kernel failed in this process: check what is read
	bool refused = false;
	OpScope() = default;
	OpScope(const OpScope &) = delete;
	~OpScope() { nrt_op_end(); }
	void see(const at::Tensor &t, bool written)
	{
		if (t.device().type() != c10::DeviceType::PrivateUse1 || !t.has_storage())
			return;
		void *p = const_cast<void *>(t.unsafeGetTensorImpl()->unsafe_storage().data());
		if (written)
			nrt_op_write(p);
		if (C10_UNLIKELY(poison_seen) && !refused && nrt_op_read(p))
			refused = true;
	}
	[[noreturn]] void raise(const char *op) const; // the error of the poisoned input
	// For ops registered without NEURON_IMPL: t is written by the op.
	void write(const at::Tensor &t, const char *op)
	{
		see(t, true);
		if (C10_UNLIKELY(refused))
			raise(op);
	}
};

// Whether op (an aten overload name, "aten::" optional) is one of native_functions.yaml's
// `device_check: NoCheck` overloads (ops_device_check.h): a constexpr binary search.
constexpr int name_cmp(const char *a, const char *b)
{
	for (; *a && *a == *b; a++, b++)
		;
	return (unsigned char)*a - (unsigned char)*b;
}
constexpr bool device_nocheck(const char *op)
{
	const char *pre = "aten::", *p = op;
	for (; *pre && *pre == *p; pre++, p++)
		;
	if (!*pre)
		op = p;
	int lo = 0, hi = (int)(sizeof device_check::kNoCheck / sizeof *device_check::kNoCheck) - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2, c = name_cmp(device_check::kNoCheck[mid], op);
		if (c == 0)
			return true;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return false;
}

// Two rules, as ATen's generated CUDA wrappers have them.  An ExactSame op (the default) wants every
// tensor argument, zero-dim CPU tensors included, on one device (c10::impl::check_and_update_common_device).
// A NoCheck op (TensorIterator's and a few that check inside) lets read-only zero-dim CPU tensors through
// as scalars.  Lists of optional tensors (index's indices, which may stay on the CPU) are not looked at.
struct DeviceCheck {
	OpScope *scope = nullptr;
	bool strict = false; // ExactSame
	std::optional<c10::Device> dev;
	int bad = -1; // the argument position of the first tensor on another device
	c10::Device other{c10::DeviceType::CPU};
	int pos = 0;
	void see(const at::Tensor &t, bool written)
	{
		if (!t.defined() || bad >= 0)
			return;
		if (!strict && !written && t.dim() == 0 && t.device().is_cpu())
			return;
		if (!dev)
			dev = t.device();
		else if (C10_UNLIKELY(t.device() != *dev))
			bad = pos, other = t.device();
		if (scope)
			scope->see(t, written);
	}
	void add(at::Tensor &t) { see(t, true), pos++; }
	void add(const at::Tensor &t) { see(t, false), pos++; }
	void add(const std::optional<at::Tensor> &t)
	{
		if (t)
			see(*t, false);
		pos++;
	}
	void add(at::TensorList l)
	{
		for (const auto &t : l)
			see(t, true);
		pos++;
	}
	void add(const at::ITensorListRef &l)
	{
		for (const auto &t : l)
			see(t, false);
		pos++;
	}
	template <typename T> void add(const T &) { pos++; }
	// "Expected all tensors to be on the same device, but found at least two devices, neuron:0 and
	// cpu! (when checking argument for argument out in method aten::mm.out)", as ATen's generated
	// wrappers (c10::impl::check_and_update_common_device) say it.
	[[noreturn]] void raise(const char *op) const;
};

template <std::size_t N> struct OpName {
	char s[N];
	constexpr OpName(const char (&a)[N])
	{
		for (std::size_t i = 0; i < N; i++)
			s[i] = a[i];
	}
};

template <OpName Name, auto F, typename Sig = decltype(F)> struct Checked;
template <OpName Name, auto F, typename R, typename... A> struct Checked<Name, F, R (*)(A...)> {
	static R call(A... a)
	{
		OpScope scope;
		DeviceCheck dc;
		dc.scope = &scope;
		static constexpr bool strict = !device_nocheck(Name.s);
		dc.strict = strict;
		(dc.add(a), ...);
		if (C10_UNLIKELY(dc.bad >= 0))
			dc.raise(Name.s);
		if (C10_UNLIKELY(scope.refused))
			scope.raise(Name.s);
		return F(std::forward<A>(a)...);
	}
};

// m.impl(name, fn) with the device check in front: every native registration goes through this.
#define NEURON_IMPL(m, name, fn)                                                                       \
	(m).impl(name, ::c10::CompileTimeFunctionPointer<                                               \
			       std::remove_pointer_t<decltype(&::neuron::Checked<::neuron::OpName{name}, &fn>::call)>, \
			       &::neuron::Checked<::neuron::OpName{name}, &fn>::call>())

} // namespace neuron
