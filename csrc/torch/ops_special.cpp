// ops_special.cpp - special functions on the kernels of special.c (digamma, lgamma, polygamma, zeta,
// the Bessel functions i0/i0e/i1/i1e, the orthogonal polynomials, entr, sinc, angle, xlogy/xlog1py) and
// the integer and bit binary ops that share their wrappers (gcd, lcm, shifts, heaviside, nextafter,
// copysign).
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "ops_table.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
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

// The out= bodies of the registration dialect (ops_util.h); FLOAT: integer inputs give the default
// float dtype; CHECK raises aten's dtype errors first.
static at::Tensor &sp_out(at::Tensor &o, const at::Tensor &r)
{
	return o.defined() ? o : (o = r);
}
template <int OP> static at::Tensor &sp1(const char *n, at::Tensor &o, const at::Tensor &s)
{
	return sp_out(o, special(n, OP, {s}, o, true));
}
static void no_check(const at::Tensor &, const at::Tensor &) {}
template <int OP, bool FLOAT, auto CHK = no_check>
static at::Tensor &sp2(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t)
{
	CHK(s, t);
	return sp_out(o, special(n, OP, {s, t}, o, FLOAT));
}
static at::Tensor &angle_b(const char *n, at::Tensor &o, const at::Tensor &s)
{
	if (s.is_complex())
		return complex_angle(n, o, s);
	return sp1<NK_SP_ANGLE>(n, o, s);
}

// polygamma(n, x) takes its order first (its in-place form second): no table form
static at::Tensor &polygamma_into(const char *name, int64_t n, const at::Tensor &s, at::Tensor &o)
{
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	return sp_out(o, special(name, NK_SP_POLYGAMMA, {s}, o, true, n));
}
static at::Tensor polygamma_f(int64_t n, const at::Tensor &s)
{
	NEURON_TRACK("aten::polygamma");
	at::Tensor o;
	return polygamma_into("aten::polygamma", n, s, o);
}
static at::Tensor &polygamma_o(int64_t n, const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::polygamma.out");
	return polygamma_into("aten::polygamma.out", n, s, o);
}
static at::Tensor &polygamma_i(at::Tensor &s, int64_t n)
{
	NEURON_TRACK("aten::polygamma_");
	return polygamma_into("aten::polygamma_", n, s, s);
}

static void heaviside_check(const at::Tensor &s, const at::Tensor &v)
{
	TORCH_CHECK(!s.is_complex() && !v.is_complex(), "heaviside is not yet implemented for complex tensors.");
	TORCH_CHECK(s.scalar_type() == v.scalar_type(), "heaviside is not yet implemented for tensors with different dtypes.");
}
static void nextafter_check(const at::Tensor &s, const at::Tensor &o)
{
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(s.scalar_type()) && at::isFloatingType(o.scalar_type()), "\"nextafter_cpu\" not implemented for '",
		    at::isFloatingType(s.scalar_type()) ? o.scalar_type() : s.scalar_type(), "'");
}
// gcd, lcm and the shifts exist for integers only: the CPU's dtype dispatch raises NotImplementedError
// ("\"lcm_cpu\" not implemented for 'Float'")
template <const char *OPNAME> static void int_check(const at::Tensor &s, const at::Tensor &o)
{
	for (const at::Tensor *t : {&s, &o})
		TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(t->scalar_type(), false), "\"", OPNAME, "_cpu\" not implemented for '",
					    t->scalar_type(), "'");
}
static constexpr char lshift_name[] = "lshift", rshift_name[] = "rshift", gcd_name[] = "gcd", lcm_name[] = "lcm";
template <int OP, PwKind K, auto CHK = no_check>
static at::Tensor &pw2(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t)
{
	CHK(s, t);
	return o = pointwise_op(n, OP, {s, t}, o, K);
}

// (name, special.c op): functional and out=
#define SPECIAL_BINARY_LIST(X)                                                                                 \
	X("special_zeta", NK_SP_ZETA) X("special_xlog1py", NK_SP_XLOG1PY)                                      \
	X("special_chebyshev_polynomial_t", NK_SP_CHEBYSHEV_T) X("special_chebyshev_polynomial_u", NK_SP_CHEBYSHEV_U) \
	X("special_chebyshev_polynomial_v", NK_SP_CHEBYSHEV_V) X("special_chebyshev_polynomial_w", NK_SP_CHEBYSHEV_W) \
	X("special_shifted_chebyshev_polynomial_t", NK_SP_SHIFTED_CHEBYSHEV_T)                                 \
	X("special_shifted_chebyshev_polynomial_u", NK_SP_SHIFTED_CHEBYSHEV_U)                                 \
	X("special_shifted_chebyshev_polynomial_v", NK_SP_SHIFTED_CHEBYSHEV_V)                                 \
	X("special_shifted_chebyshev_polynomial_w", NK_SP_SHIFTED_CHEBYSHEV_W)                                 \
	X("special_hermite_polynomial_h", NK_SP_HERMITE_H) X("special_hermite_polynomial_he", NK_SP_HERMITE_HE) \
	X("special_laguerre_polynomial_l", NK_SP_LAGUERRE_L) X("special_legendre_polynomial_p", NK_SP_LEGENDRE_P)

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
	NEURON_FOI(m, "digamma", sp1<NK_SP_DIGAMMA>);
	NEURON_FOI(m, "lgamma", sp1<NK_SP_LGAMMA>);
	NEURON_FOI(m, "sinc", sp1<NK_SP_SINC>);
	NEURON_FOI(m, "i0", sp1<NK_SP_I0>);
	NEURON_FO(m, "special_entr", sp1<NK_SP_ENTR>);
	NEURON_FO(m, "special_i0e", sp1<NK_SP_I0E>);
	NEURON_FO(m, "special_i1", sp1<NK_SP_I1>);
	NEURON_FO(m, "special_i1e", sp1<NK_SP_I1E>);
	NEURON_FO(m, "angle", angle_b);
	NEURON_IMPL(m, "polygamma", polygamma_f);
	NEURON_IMPL(m, "polygamma.out", polygamma_o);
	NEURON_IMPL(m, "polygamma_", polygamma_i);
#define REG_SPECIAL_BINARY(name, OP) NEURON_FO(m, name, (sp2<OP, true>));
	SPECIAL_BINARY_LIST(REG_SPECIAL_BINARY)
	NEURON_FOI(m, "heaviside", (sp2<NK_SP_HEAVISIDE, false, heaviside_check>));
	NEURON_FOI(m, "nextafter", (sp2<NK_SP_NEXTAFTER, false, nextafter_check>));
	NEURON_FOI(m, "gcd", (sp2<NK_SP_GCD, false, int_check<gcd_name>>));
	NEURON_FOI(m, "lcm", (sp2<NK_SP_LCM, false, int_check<lcm_name>>));
	NEURON_F(m, "bitwise_left_shift.Tensor", (pw2<NK_OP_LSHIFT, PwKind::Same, int_check<lshift_name>>));
	NEURON_O(m, "bitwise_left_shift.Tensor_out", (pw2<NK_OP_LSHIFT, PwKind::Same, int_check<lshift_name>>));
	NEURON_I(m, "bitwise_left_shift_.Tensor", (pw2<NK_OP_LSHIFT, PwKind::Same, int_check<lshift_name>>));
	NEURON_F(m, "bitwise_right_shift.Tensor", (pw2<NK_OP_RSHIFT, PwKind::Same, int_check<rshift_name>>));
	NEURON_O(m, "bitwise_right_shift.Tensor_out", (pw2<NK_OP_RSHIFT, PwKind::Same, int_check<rshift_name>>));
	NEURON_I(m, "bitwise_right_shift_.Tensor", (pw2<NK_OP_RSHIFT, PwKind::Same, int_check<rshift_name>>));
	NEURON_F(m, "copysign.Tensor", (pw2<NK_OP_COPYSIGN, PwKind::Float>));
	NEURON_O(m, "copysign.out", (pw2<NK_OP_COPYSIGN, PwKind::Float>));
	NEURON_I(m, "copysign_.Tensor", (pw2<NK_OP_COPYSIGN, PwKind::Float>));
	NEURON_F(m, "xlogy.Tensor", (pw2<NK_OP_XLOGY, PwKind::Float>));
	NEURON_O(m, "xlogy.OutTensor", (pw2<NK_OP_XLOGY, PwKind::Float>));
	NEURON_I(m, "xlogy_.Tensor", (pw2<NK_OP_XLOGY, PwKind::Float>));
	NEURON_IMPL(m, "_efficientzerotensor", efficientzerotensor_f);
}
