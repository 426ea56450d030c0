// ops_table.h - the registration dialect of the glue: each op is written once, as its out= body, and
// the registration macros derive and register its functional, out= and in-place forms.
#pragma once

#include "neuron.h"
#include "out.h"

#include <ATen/core/Tensor.h>
#include <c10/core/CompileTimeFunctionPointer.h>

#include <string>
#include <type_traits>

namespace neuron {

// An op is written once, as its out= body
//     at::Tensor &body(const char *name, at::Tensor &out, const at::Tensor &self, A... args)
// which writes out and returns it, allocating it first when out is undefined (the pointwise engine
// does that: `return out = pointwise_op(...)`).  The registration macros derive every form from it, each
// registered, tracked (NEURON_TRACK) and device-checked (NEURON_IMPL) under its own name, which the
// body gets as `name` ("aten::sgn.out") for its messages:
//     NEURON_F  functional  f(self, args...)         out undefined: the body allocates, no copy
//     NEURON_O  out=        o(self, args..., out)
//     NEURON_I  in-place    i(self, args...)         out is self
// NEURON_FOI(m, "x", body) registers "x", "x.out" and "x_"; NEURON_FO the first two.
template <OpName Name> inline const char *aten_name()
{
	static const std::string s = std::string("aten::") + Name.s;
	return s.c_str();
}

template <OpName Name, auto Body, typename Sig = decltype(Body)> struct OutForms;
template <OpName Name, auto Body, typename... A>
struct OutForms<Name, Body, at::Tensor &(*)(const char *, at::Tensor &, const at::Tensor &, A...)> {
	static void track()
	{
		static OpSlot slot{aten_name<Name>()};
		slot.hit();
	}
	static at::Tensor f(const at::Tensor &self, A... a)
	{
		track();
		at::Tensor out;
		return Body(aten_name<Name>(), out, self, a...);
	}
	static at::Tensor &o(const at::Tensor &self, A... a, at::Tensor &out)
	{
		track();
		return Body(aten_name<Name>(), out, self, a...);
	}
	static at::Tensor &i(at::Tensor &self, A... a)
	{
		track();
		return Body(aten_name<Name>(), self, self, a...);
	}
};

#define NEURON_FORM(m, name, form, body)                                                                         \
	(m).impl(name, ::c10::CompileTimeFunctionPointer<                                                         \
			       std::remove_pointer_t<decltype(&::neuron::Checked<                                       \
				       ::neuron::OpName{name}, &::neuron::OutForms<::neuron::OpName{name}, &body>::form>::call)>, \
			       &::neuron::Checked<::neuron::OpName{name},                                               \
						  &::neuron::OutForms<::neuron::OpName{name}, &body>::form>::call>())
#define NEURON_F(m, name, body) NEURON_FORM(m, name, f, body)
#define NEURON_O(m, name, body) NEURON_FORM(m, name, o, body)
#define NEURON_I(m, name, body) NEURON_FORM(m, name, i, body)
#define NEURON_FO(m, name, body) (NEURON_F(m, name, body), NEURON_O(m, name ".out", body))
#define NEURON_FOI(m, name, body) (NEURON_FO(m, name, body), NEURON_I(m, name "_", body))

} // namespace neuron
