// ops_special.cpp - special functions on the kernels of special.c (digamma, lgamma, polygamma, zeta,
// the Bessel functions i0/i0e/i1/i1e, the orthogonal polynomials, entr, sinc, angle, xlogy/xlog1py) and
// the integer and bit binary ops that share their wrappers (gcd, lcm, shifts, heaviside, nextafter,
// copysign).
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>

namespace neuron {

// ---- special functions (special.c) and pointwise ops on existing nk_pointwise ops ----------------------

// out = op(inputs...) with TensorIterator's promotion (integer inputs to the default float dtype when
// to_float) on the special-function kernel.  CPU 0-d inputs are moved to the device first.
static at::Tensor special(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out, bool to_float,
			  int64_t ia = 0)
{
	std::optional<c10::Device> dev;
	for (const auto &x : inputs)
		if (!(x.dim() == 0 && x.device().is_cpu()) && !dev)
			dev = x.device();
	if (!dev)
		dev = out.defined() ? out.device() : inputs.begin()->device();
	c10::DeviceGuard g(*dev);
	at::TensorIteratorConfig cfg;
	cfg.add_output(out).promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true).enforce_safe_casting_to_output(true)
		.promote_integer_inputs_to_float(to_float);
	for (const auto &x : inputs)
		cfg.add_const_input(x.dim() == 0 && x.device().is_cpu() ? x.to(*dev) : x);
	auto iter = cfg.build();
	if (iter.numel() > 0) {
		nk_special_args_t a{};
		nk_iter_t &it = a.it;
		iter_to_nk(iter, it, name);
		a.op = op, a.ia = ia;
		launch(current_queue(dev->index()), nk_special_run, a, name);
	}
	iter.cast_outputs();
	return iter.output(0);
}

#define SP_UNARY(fn, opname, NKOP, FLOAT)                                                                          \
	static at::Tensor fn##_f(const at::Tensor &s)                                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		return special("aten::" opname, NKOP, {s}, {}, FLOAT);                                             \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		special("aten::" opname ".out", NKOP, {s}, o, FLOAT);                                              \
		return o;                                                                                          \
	}                                                                                                          \
	[[maybe_unused]] static at::Tensor &fn##_i(at::Tensor &s)                                                  \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_");                                                                 \
		special("aten::" opname "_", NKOP, {s}, s, FLOAT);                                                 \
		return s;                                                                                          \
	}
SP_UNARY(digamma, "digamma", NK_SP_DIGAMMA, true)
SP_UNARY(lgamma, "lgamma", NK_SP_LGAMMA, true)
SP_UNARY(sinc, "sinc", NK_SP_SINC, true)
SP_UNARY(entr, "special_entr", NK_SP_ENTR, true)
SP_UNARY(i0, "i0", NK_SP_I0, true)
SP_UNARY(i0e, "special_i0e", NK_SP_I0E, true)
SP_UNARY(i1, "special_i1", NK_SP_I1, true)
SP_UNARY(i1e, "special_i1e", NK_SP_I1E, true)

static at::Tensor angle_f(const at::Tensor &s)
{
	NEURON_TRACK("aten::angle");
	TORCH_CHECK(!s.is_complex(), "angle: complex tensors are not supported on neuron");
	return special("aten::angle", NK_SP_ANGLE, {s}, {}, true);
}
static at::Tensor &angle_o(const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::angle.out");
	TORCH_CHECK(!s.is_complex(), "angle: complex tensors are not supported on neuron");
	special("aten::angle.out", NK_SP_ANGLE, {s}, o, true);
	return o;
}

static at::Tensor polygamma_f(int64_t n, const at::Tensor &s)
{
	NEURON_TRACK("aten::polygamma");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	return special("aten::polygamma", NK_SP_POLYGAMMA, {s}, {}, true, n);
}
static at::Tensor &polygamma_o(int64_t n, const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::polygamma.out");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	special("aten::polygamma.out", NK_SP_POLYGAMMA, {s}, o, true, n);
	return o;
}
static at::Tensor &polygamma_i(at::Tensor &s, int64_t n)
{
	NEURON_TRACK("aten::polygamma_");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	special("aten::polygamma_", NK_SP_POLYGAMMA, {s}, s, true, n);
	return s;
}

#define SP_BINARY(fn, opname, NKOP, FLOAT)                                                                         \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		return special("aten::" opname, NKOP, {s, o}, {}, FLOAT);                                          \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		special("aten::" opname ".out", NKOP, {s, o}, out, FLOAT);                                         \
		return out;                                                                                        \
	}
SP_BINARY(zeta, "special_zeta", NK_SP_ZETA, true)
SP_BINARY(xlog1py, "special_xlog1py", NK_SP_XLOG1PY, true)
SP_BINARY(cheb_t, "special_chebyshev_polynomial_t", NK_SP_CHEBYSHEV_T, true)
SP_BINARY(cheb_u, "special_chebyshev_polynomial_u", NK_SP_CHEBYSHEV_U, true)
SP_BINARY(cheb_v, "special_chebyshev_polynomial_v", NK_SP_CHEBYSHEV_V, true)
SP_BINARY(cheb_w, "special_chebyshev_polynomial_w", NK_SP_CHEBYSHEV_W, true)
SP_BINARY(scheb_t, "special_shifted_chebyshev_polynomial_t", NK_SP_SHIFTED_CHEBYSHEV_T, true)
SP_BINARY(scheb_u, "special_shifted_chebyshev_polynomial_u", NK_SP_SHIFTED_CHEBYSHEV_U, true)
SP_BINARY(scheb_v, "special_shifted_chebyshev_polynomial_v", NK_SP_SHIFTED_CHEBYSHEV_V, true)
SP_BINARY(scheb_w, "special_shifted_chebyshev_polynomial_w", NK_SP_SHIFTED_CHEBYSHEV_W, true)
SP_BINARY(herm_h, "special_hermite_polynomial_h", NK_SP_HERMITE_H, true)
SP_BINARY(herm_he, "special_hermite_polynomial_he", NK_SP_HERMITE_HE, true)
SP_BINARY(lag_l, "special_laguerre_polynomial_l", NK_SP_LAGUERRE_L, true)
SP_BINARY(leg_p, "special_legendre_polynomial_p", NK_SP_LEGENDRE_P, true)

// binary ops with an in-place form too; check(s, o) raises aten's dtype errors first
#define SP_BINARY_I(fn, opname, NKOP, FLOAT, CHECK)                                                                \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		CHECK(s, o);                                                                                       \
		return special("aten::" opname, NKOP, {s, o}, {}, FLOAT);                                          \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		CHECK(s, o);                                                                                       \
		special("aten::" opname ".out", NKOP, {s, o}, out, FLOAT);                                         \
		return out;                                                                                        \
	}                                                                                                          \
	static at::Tensor &fn##_i(at::Tensor &s, const at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_");                                                                 \
		CHECK(s, o);                                                                                       \
		special("aten::" opname "_", NKOP, {s, o}, s, FLOAT);                                              \
		return s;                                                                                          \
	}
static void heaviside_check(const at::Tensor &s, const at::Tensor &v)
{
	TORCH_CHECK(!s.is_complex() && !v.is_complex(), "heaviside is not yet implemented for complex tensors.");
	TORCH_CHECK(s.scalar_type() == v.scalar_type(), "heaviside is not yet implemented for tensors with different dtypes.");
}
static void nextafter_check(const at::Tensor &s, const at::Tensor &o)
{
	TORCH_CHECK(at::isFloatingType(s.scalar_type()) && at::isFloatingType(o.scalar_type()), "\"nextafter_cpu\" not implemented for '",
		    at::isFloatingType(s.scalar_type()) ? o.scalar_type() : s.scalar_type(), "'");
}
static void int_check(const at::Tensor &s, const at::Tensor &o)
{
	for (const at::Tensor *t : {&s, &o})
		TORCH_CHECK(at::isIntegralType(t->scalar_type(), false), "\"gcd/lcm\" not implemented for '", t->scalar_type(), "'");
}
SP_BINARY_I(heaviside, "heaviside", NK_SP_HEAVISIDE, false, heaviside_check)
SP_BINARY_I(nextafter, "nextafter", NK_SP_NEXTAFTER, false, nextafter_check)
SP_BINARY_I(gcd, "gcd", NK_SP_GCD, false, int_check)
SP_BINARY_I(lcm, "lcm", NK_SP_LCM, false, int_check)

// shifts, copysign and xlogy: ops the pointwise engine already has
#define PW_BINARY_I(fn, opname, ovl, NKOP, KIND)                                                                   \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ovl);                                                                 \
		return pointwise_op("aten::" opname, NKOP, {s, o}, {}, KIND);                                      \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		pointwise_op("aten::" opname ".out", NKOP, {s, o}, out, KIND);                                     \
		return out;                                                                                        \
	}                                                                                                          \
	static at::Tensor &fn##_i(at::Tensor &s, const at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_" ovl);                                                             \
		pointwise_op("aten::" opname "_", NKOP, {s, o}, s, KIND);                                          \
		return s;                                                                                          \
	}
static void shift_check(const at::Tensor &s, const at::Tensor &o, const char *op)
{
	for (const at::Tensor *t : {&s, &o})
		TORCH_CHECK(at::isIntegralType(t->scalar_type(), false), "\"", op, "_cpu\" not implemented for '", t->scalar_type(), "'");
}
static at::Tensor lshift_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_left_shift.Tensor");
	shift_check(s, o, "lshift");
	return pointwise_op("aten::bitwise_left_shift", NK_OP_LSHIFT, {s, o}, {}, PwKind::Same);
}
static at::Tensor &lshift_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::bitwise_left_shift.Tensor_out");
	shift_check(s, o, "lshift");
	pointwise_op("aten::bitwise_left_shift.Tensor_out", NK_OP_LSHIFT, {s, o}, out, PwKind::Same);
	return out;
}
static at::Tensor &lshift_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_left_shift_.Tensor");
	shift_check(s, o, "lshift");
	pointwise_op("aten::bitwise_left_shift_", NK_OP_LSHIFT, {s, o}, s, PwKind::Same);
	return s;
}
static at::Tensor rshift_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_right_shift.Tensor");
	shift_check(s, o, "rshift");
	return pointwise_op("aten::bitwise_right_shift", NK_OP_RSHIFT, {s, o}, {}, PwKind::Same);
}
static at::Tensor &rshift_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::bitwise_right_shift.Tensor_out");
	shift_check(s, o, "rshift");
	pointwise_op("aten::bitwise_right_shift.Tensor_out", NK_OP_RSHIFT, {s, o}, out, PwKind::Same);
	return out;
}
static at::Tensor &rshift_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_right_shift_.Tensor");
	shift_check(s, o, "rshift");
	pointwise_op("aten::bitwise_right_shift_", NK_OP_RSHIFT, {s, o}, s, PwKind::Same);
	return s;
}
PW_BINARY_I(copysign, "copysign", ".Tensor", NK_OP_COPYSIGN, PwKind::Float)
static at::Tensor xlogy_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::xlogy.Tensor");
	return pointwise_op("aten::xlogy", NK_OP_XLOGY, {s, o}, {}, PwKind::Float);
}
static at::Tensor &xlogy_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::xlogy_.Tensor");
	pointwise_op("aten::xlogy_", NK_OP_XLOGY, {s, o}, s, PwKind::Float);
	return s;
}
static at::Tensor &xlogy_oo(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::xlogy.OutTensor");
	pointwise_op("aten::xlogy.OutTensor", NK_OP_XLOGY, {s, o}, out, PwKind::Float);
	return out;
}

// sgn's derivative asks for an "efficient zero tensor": a plain zero-filled tensor here
static at::Tensor efficientzerotensor_f(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
					std::optional<at::Device> device, std::optional<bool> pin_memory)
{
	NEURON_TRACK("aten::_efficientzerotensor");
	auto opts = at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory);
	return at::zeros(C10_AS_INTARRAYREF_SLOW(size), opts);
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "digamma", digamma_f);
	NEURON_IMPL(m, "digamma.out", digamma_o);
	NEURON_IMPL(m, "digamma_", digamma_i);
	NEURON_IMPL(m, "lgamma", lgamma_f);
	NEURON_IMPL(m, "lgamma.out", lgamma_o);
	NEURON_IMPL(m, "lgamma_", lgamma_i);
	NEURON_IMPL(m, "sinc", sinc_f);
	NEURON_IMPL(m, "sinc.out", sinc_o);
	NEURON_IMPL(m, "sinc_", sinc_i);
	NEURON_IMPL(m, "special_entr", entr_f);
	NEURON_IMPL(m, "special_entr.out", entr_o);
	NEURON_IMPL(m, "i0", i0_f);
	NEURON_IMPL(m, "i0.out", i0_o);
	NEURON_IMPL(m, "i0_", i0_i);
	NEURON_IMPL(m, "special_i0e", i0e_f);
	NEURON_IMPL(m, "special_i0e.out", i0e_o);
	NEURON_IMPL(m, "special_i1", i1_f);
	NEURON_IMPL(m, "special_i1.out", i1_o);
	NEURON_IMPL(m, "special_i1e", i1e_f);
	NEURON_IMPL(m, "special_i1e.out", i1e_o);
	NEURON_IMPL(m, "angle", angle_f);
	NEURON_IMPL(m, "angle.out", angle_o);
	NEURON_IMPL(m, "polygamma", polygamma_f);
	NEURON_IMPL(m, "polygamma.out", polygamma_o);
	NEURON_IMPL(m, "polygamma_", polygamma_i);
#define REG2(fn, opname) NEURON_IMPL(m, opname, fn##_f); NEURON_IMPL(m, opname ".out", fn##_o);
	REG2(zeta, "special_zeta")
	REG2(xlog1py, "special_xlog1py")
	REG2(cheb_t, "special_chebyshev_polynomial_t")
	REG2(cheb_u, "special_chebyshev_polynomial_u")
	REG2(cheb_v, "special_chebyshev_polynomial_v")
	REG2(cheb_w, "special_chebyshev_polynomial_w")
	REG2(scheb_t, "special_shifted_chebyshev_polynomial_t")
	REG2(scheb_u, "special_shifted_chebyshev_polynomial_u")
	REG2(scheb_v, "special_shifted_chebyshev_polynomial_v")
	REG2(scheb_w, "special_shifted_chebyshev_polynomial_w")
	REG2(herm_h, "special_hermite_polynomial_h")
	REG2(herm_he, "special_hermite_polynomial_he")
	REG2(lag_l, "special_laguerre_polynomial_l")
	REG2(leg_p, "special_legendre_polynomial_p")
#undef REG2
	NEURON_IMPL(m, "heaviside", heaviside_f);
	NEURON_IMPL(m, "heaviside.out", heaviside_o);
	NEURON_IMPL(m, "heaviside_", heaviside_i);
	NEURON_IMPL(m, "nextafter", nextafter_f);
	NEURON_IMPL(m, "nextafter.out", nextafter_o);
	NEURON_IMPL(m, "nextafter_", nextafter_i);
	NEURON_IMPL(m, "gcd", gcd_f);
	NEURON_IMPL(m, "gcd.out", gcd_o);
	NEURON_IMPL(m, "gcd_", gcd_i);
	NEURON_IMPL(m, "lcm", lcm_f);
	NEURON_IMPL(m, "lcm.out", lcm_o);
	NEURON_IMPL(m, "lcm_", lcm_i);
	NEURON_IMPL(m, "bitwise_left_shift.Tensor", lshift_f);
	NEURON_IMPL(m, "bitwise_left_shift.Tensor_out", lshift_o);
	NEURON_IMPL(m, "bitwise_left_shift_.Tensor", lshift_i);
	NEURON_IMPL(m, "bitwise_right_shift.Tensor", rshift_f);
	NEURON_IMPL(m, "bitwise_right_shift.Tensor_out", rshift_o);
	NEURON_IMPL(m, "bitwise_right_shift_.Tensor", rshift_i);
	NEURON_IMPL(m, "copysign.Tensor", copysign_f);
	NEURON_IMPL(m, "copysign.out", copysign_o);
	NEURON_IMPL(m, "copysign_.Tensor", copysign_i);
	NEURON_IMPL(m, "xlogy.Tensor", xlogy_f);
	NEURON_IMPL(m, "xlogy.OutTensor", xlogy_oo);
	NEURON_IMPL(m, "xlogy_.Tensor", xlogy_i);
	NEURON_IMPL(m, "_efficientzerotensor", efficientzerotensor_f);
}
