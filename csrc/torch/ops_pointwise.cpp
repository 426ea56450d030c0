// ops_pointwise.cpp - elementwise and reduction ops.  ATen's TensorIterator computes broadcasting,
// output allocation and memory-overlap checks; type promotion follows at::result_type; the C kernels
// (nk_pointwise_run, nk_reduce_run) get the operands' descriptors and run on the current queue.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/arange.h>
#include <torch/library.h>

#include <cstring>

namespace neuron {

// ---- the pointwise engine ------------------------------------------------------------------------

enum class Kind { Same, Bool, Float };

// Launch record: the kernel arguments plus room for CPU-scalar operands, which the trampoline points
// at inside the queue's copy of the record.
struct PwLaunch {
	nk_pointwise_args_t a;
	uint64_t scal[NK_MAX_OPS];
};

static int pw_tramp(void *p)
{
	auto *x = (PwLaunch *)p;
	for (int i = 0; i < x->a.it.nops; i++)
		if (!x->a.it.data[i])
			x->a.it.data[i] = (char *)&x->scal[i];
	return nk_pointwise_run(&x->a);
}

static void store_scalar(uint64_t *slot, at::ScalarType t, const c10::Scalar &s)
{
	*slot = 0;
	AT_DISPATCH_V2(t, "store_scalar", AT_WRAP([&] {
		scalar_t v = s.to<scalar_t>();
		std::memcpy(slot, &v, sizeof v);
	}), AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16);
}

// aten's CPU mul/div kernels on bf16/f16 take a scalar second operand at opmath (float) precision
// instead of rounding it to the dtype: x * 0.1 multiplies by 0.1f.  Such scalars are passed as f32.
static bool opmath_scalar_op(int op)
{
	return op == NK_OP_MUL || op == NK_OP_DIV || op == NK_OP_DIV_TRUNC || op == NK_OP_DIV_FLOOR;
}

static bool is_cpu_scalar(const at::Tensor &t)
{
	return t.dim() == 0 && t.device().is_cpu();
}

// The value of a 0-d CPU tensor, read directly (Tensor::item() is a dispatcher round trip).
static c10::Scalar cpu_scalar_value(const at::Tensor &t)
{
	c10::Scalar v;
	AT_DISPATCH_V2(t.scalar_type(), "cpu_scalar_value", AT_WRAP([&] {
		v = c10::Scalar(*t.const_data_ptr<scalar_t>());
	}), AT_EXPAND(AT_ALL_TYPES), at::kBool, at::kHalf, at::kBFloat16);
	return v;
}

// True when t is laid out exactly as a contiguous tensor of its shape (strides included, so size-1
// dimensions cannot make a channels-last tensor pass).
static bool plain_contiguous(const at::Tensor &t)
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

static size_t elem_size(at::ScalarType t)
{
	return c10::elementSize(t);
}

// Fills the operand k of a launch record for a CPU scalar, in dtype t.
static void set_scalar_operand(PwLaunch &L, int k, at::ScalarType t, const c10::Scalar &v, const char *name)
{
	store_scalar(&L.scal[k], t, v);
	L.a.it.data[k] = nullptr;
	L.a.it.dtype[k] = (int8_t)nk_dtype(t, name);
}

// The common case without TensorIterator: every tensor operand is a plain contiguous neuron tensor of
// one shape on the device (CPU scalars allowed), and `res` is undefined or a plain contiguous tensor of
// that shape and dtype odt that each input either is exactly or does not overlap.  Then the result is
// contiguous, no broadcasting or casting is needed and the whole op is one 1-d loop.  Returns false
// (nothing done) when the case is not that simple; TensorIterator handles it then.
static bool pointwise_fast(const char *name, int op, c10::SmallVector<at::Tensor, 4> &in, at::Tensor &res,
			   at::ScalarType common, at::ScalarType odt, c10::Device dev, unsigned nocast, double a,
			   double b, int64_t ia, int64_t ib)
{
	const at::Tensor *shape_src = nullptr;
	for (const auto &x : in) {
		if (is_cpu_scalar(x))
			continue;
		if (x.device() != dev || !plain_contiguous(x))
			return false;
		if (!shape_src)
			shape_src = &x;
		else if (x.sizes() != shape_src->sizes())
			return false;
	}
	if (!shape_src || (int)in.size() + 1 > NK_MAX_OPS)
		return false;
	if (res.defined()) {
		if (res.device() != dev || res.scalar_type() != odt || res.sizes() != shape_src->sizes() ||
		    !plain_contiguous(res))
			return false;
		for (const auto &x : in) {
			if (is_cpu_scalar(x) || (x.data_ptr() == res.data_ptr() && x.sizes() == res.sizes()))
				continue;
			if (at::get_overlap_status(res, x) != at::MemOverlapStatus::No)
				return false;
		}
	} else {
		res = at::empty(shape_src->sizes(), shape_src->options().dtype(odt));
	}
	int64_t n = res.numel();
	if (n == 0)
		return true;
	PwLaunch L{};
	nk_iter_t &it = L.a.it;
	it.ndim = 1;
	it.nops = 1 + (int)in.size();
	it.shape[0] = n;
	it.data[0] = (char *)res.data_ptr();
	it.dtype[0] = (int8_t)nk_dtype(odt, name);
	it.strides[0][0] = (int64_t)elem_size(odt);
	size_t cost = (size_t)n * elem_size(odt);
	for (int k = 1; k < it.nops; k++) {
		const at::Tensor &x = in[k - 1];
		bool keep = nocast >> (k - 1) & 1;
		if (is_cpu_scalar(x)) {
			at::ScalarType t = keep ? x.scalar_type() : common;
			if (k == 2 && at::isReducedFloatingType(common) && opmath_scalar_op(op))
				t = at::kFloat;
			set_scalar_operand(L, k, t, cpu_scalar_value(x), name);
			continue;
		}
		it.data[k] = (char *)x.const_data_ptr();
		it.dtype[k] = (int8_t)nk_dtype(x.scalar_type(), name);
		it.strides[k][0] = (int64_t)x.element_size();
		cost += (size_t)n * x.element_size();
	}
	L.a.op = op;
	L.a.a = a, L.a.b = b, L.a.ia = ia, L.a.ib = ib;
	launch_cost(current_queue(dev.index()), pw_tramp, L, name, cost);
	return true;
}

// out = op(inputs...) with PyTorch's promotion.  `out` may be undefined (allocated here).  Inputs
// listed in nocast (bit mask) keep their dtype (where's condition).  Returns the result.
static at::Tensor pointwise(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out,
			    Kind kind, double a = 0, double b = 0, int64_t ia = 0, int64_t ib = 0, unsigned nocast = 0)
{
	c10::SmallVector<at::Tensor, 4> in;
	std::optional<c10::Device> dev;
	at::native::ResultTypeState st{};
	unsigned i = 0;
	for (const auto &x : inputs) {
		TORCH_CHECK(x.defined(), name, ": undefined input");
		if (!(nocast >> i & 1))
			st = at::native::update_result_type_state(x, st);
		if (!dev && !is_cpu_scalar(x))
			dev = x.device();
		in.push_back(x);
		i++;
	}
	if (!dev)
		dev = out.defined() ? out.device() : in[0].device();
	at::ScalarType common = at::native::result_type(st);
	if (kind == Kind::Float && at::isIntegralType(common, true))
		common = c10::typeMetaToScalarType(c10::get_default_dtype());
	at::ScalarType odt = kind == Kind::Bool ? at::kBool : common;
	for (i = 0; i < in.size(); i++) {
		if (!(nocast >> i & 1) && !is_cpu_scalar(in[i]) && in[i].scalar_type() != common &&
		    in[i].device().type() == kDev)
			in[i] = in[i].to(common);
	}
	at::Tensor res = out;
	// an out of another dtype gets the result through a temporary: into() / into_self() (out.h) check
	// the cast, the device and the shape (an in-place self is never resized)
	bool via_temp = out.defined() && out.scalar_type() != odt;
	bool inplace = false;
	OutRule rule = inputs.size() == 1 && kind == Kind::Same ? OutRule::Same : OutRule::Cast;
	if (via_temp) {
		check_out(out, odt, *dev, rule);
		for (const auto &x : inputs)
			inplace |= x.is_same(out);
		res = at::Tensor();
	}
	DeviceScope g(dev->index());
	if (pointwise_fast(name, op, in, res, common, odt, *dev, nocast, a, b, ia, ib)) {
		if (via_temp)
			return inplace ? into_self(out, res) : into(out, res, rule);
		return res;
	}
	at::TensorIteratorConfig cfg;
	cfg.add_output(res).allow_cpu_scalars(true).check_all_same_dtype(false).declare_static_dtype_and_device(odt, *dev);
	for (auto &x : in)
		cfg.add_const_input(x);
	auto iter = cfg.build();
	if (iter.numel() > 0) {
		PwLaunch L{};
		nk_iter_t &it = L.a.it;
		size_t cost = 0;
		TORCH_CHECK(iter.ndim() <= NK_MAX_DIMS, name, ": too many dimensions for neuron");
		it.ndim = (int)iter.ndim();
		it.nops = iter.ntensors();
		for (int d = 0; d < it.ndim; d++)
			it.shape[d] = iter.shape()[d];
		for (int k = 0; k < it.nops; k++) {
			if (k >= iter.noutputs() && iter.is_cpu_scalar(k)) {
				at::ScalarType t = (nocast >> (k - iter.noutputs()) & 1) ? iter.dtype(k) : common;
				if (k == iter.noutputs() + 1 && at::isReducedFloatingType(common) && opmath_scalar_op(op))
					t = at::kFloat;
				set_scalar_operand(L, k, t, cpu_scalar_value(at::Tensor(iter.tensor(k))), name);
				continue;
			}
			cost += (size_t)iter.numel() * iter.element_size(k);
			it.data[k] = (char *)iter.data_ptr(k);
			it.dtype[k] = (int8_t)nk_dtype(iter.dtype(k), name);
			for (int d = 0; d < it.ndim; d++)
				it.strides[k][d] = iter.strides(k)[d];
		}
		L.a.op = op;
		L.a.a = a, L.a.b = b, L.a.ia = ia, L.a.ib = ib;
		launch_cost(current_queue(dev->index()), pw_tramp, L, name, cost);
	}
	res = iter.output(0);
	if (via_temp)
		return inplace ? into_self(out, res) : into(out, res, rule);
	return res;
}

at::Tensor pointwise_op(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out, PwKind kind,
			double a, double b, int64_t ia, int64_t ib, unsigned nocast)
{
	Kind k = kind == PwKind::Bool ? Kind::Bool : kind == PwKind::Float ? Kind::Float : Kind::Same;
	return pointwise(name, op, inputs, std::move(out), k, a, b, ia, ib, nocast);
}

static at::Tensor wrap(const c10::Scalar &s)
{
	return at::native::wrapped_scalar_tensor(s);
}

// aten's alpha_check on the inputs' common dtype: no bool alpha unless the result is bool, no floating
// alpha for integral results (add, sub and rsub with alpha).
static void check_alpha(const at::Tensor &s, const at::Tensor &o, const c10::Scalar &alpha)
{
	if (alpha.isIntegral(false))	// passes for every dtype: skip the promotion on the hot path
		return;
	at::native::alpha_check(at::result_type(s, o), alpha);
}

static void alpha_params(const c10::Scalar &alpha, double &a, int64_t &ia)
{
	if (alpha.isIntegral(true))
		ia = alpha.toLong(), a = (double)ia;
	else
		a = alpha.toDouble(), ia = (int64_t)a;
}

// ---- unary families --------------------------------------------------------------------------------

#define UNARY(fn, opname, NKOP, KIND, A, IA)                                                             \
	static at::Tensor fn##_f(const at::Tensor &s)                                                    \
	{                                                                                                \
		NEURON_TRACK("aten::" opname);                                                           \
		return pointwise("aten::" opname, NKOP, {s}, {}, KIND, A, 0, IA);                        \
	}                                                                                                \
	static at::Tensor &fn##_i(at::Tensor &s)                                                         \
	{                                                                                                \
		NEURON_TRACK("aten::" opname "_");                                                       \
		pointwise("aten::" opname "_", NKOP, {s}, s, KIND, A, 0, IA);                            \
		return s;                                                                                \
	}                                                                                                \
	static at::Tensor &fn##_o(const at::Tensor &s, at::Tensor &o)                                    \
	{                                                                                                \
		NEURON_TRACK("aten::" opname ".out");                                                    \
		pointwise("aten::" opname ".out", NKOP, {s}, o, KIND, A, 0, IA);                         \
		return o;                                                                                \
	}

#define UNARY_LIST(X)                                          \
	X(neg, "neg", NK_OP_NEG, Kind::Same, 0, 0)             \
	X(abs, "abs", NK_OP_ABS, Kind::Same, 0, 0)             \
	X(sign, "sign", NK_OP_SIGN, Kind::Same, 0, 0)          \
	X(reciprocal, "reciprocal", NK_OP_RECIPROCAL, Kind::Float, 0, 0) \
	X(exp, "exp", NK_OP_EXP, Kind::Float, 0, 0)            \
	X(exp2, "exp2", NK_OP_EXP2, Kind::Float, 0, 0)         \
	X(expm1, "expm1", NK_OP_EXPM1, Kind::Float, 0, 0)      \
	X(log, "log", NK_OP_LOG, Kind::Float, 0, 0)            \
	X(log2, "log2", NK_OP_LOG2, Kind::Float, 0, 0)         \
	X(log10, "log10", NK_OP_LOG10, Kind::Float, 0, 0)      \
	X(log1p, "log1p", NK_OP_LOG1P, Kind::Float, 0, 0)      \
	X(sqrt, "sqrt", NK_OP_SQRT, Kind::Float, 0, 0)         \
	X(rsqrt, "rsqrt", NK_OP_RSQRT, Kind::Float, 0, 0)      \
	X(sin, "sin", NK_OP_SIN, Kind::Float, 0, 0)            \
	X(cos, "cos", NK_OP_COS, Kind::Float, 0, 0)            \
	X(tan, "tan", NK_OP_TAN, Kind::Float, 0, 0)            \
	X(asin, "asin", NK_OP_ASIN, Kind::Float, 0, 0)         \
	X(acos, "acos", NK_OP_ACOS, Kind::Float, 0, 0)         \
	X(atan, "atan", NK_OP_ATAN, Kind::Float, 0, 0)         \
	X(sinh, "sinh", NK_OP_SINH, Kind::Float, 0, 0)         \
	X(cosh, "cosh", NK_OP_COSH, Kind::Float, 0, 0)         \
	X(tanh, "tanh", NK_OP_TANH, Kind::Float, 0, 0)         \
	X(asinh, "asinh", NK_OP_ASINH, Kind::Float, 0, 0)      \
	X(acosh, "acosh", NK_OP_ACOSH, Kind::Float, 0, 0)      \
	X(atanh, "atanh", NK_OP_ATANH, Kind::Float, 0, 0)      \
	X(erf, "erf", NK_OP_ERF, Kind::Float, 0, 0)            \
	X(erfc, "erfc", NK_OP_ERFC, Kind::Float, 0, 0)         \
	X(erfinv, "erfinv", NK_OP_ERFINV, Kind::Float, 0, 0)   \
	X(floor, "floor", NK_OP_FLOOR, Kind::Same, 0, 0)       \
	X(ceil, "ceil", NK_OP_CEIL, Kind::Same, 0, 0)          \
	X(trunc, "trunc", NK_OP_TRUNC, Kind::Same, 0, 0)       \
	X(frac, "frac", NK_OP_FRAC, Kind::Same, 0, 0)          \
	X(sigmoid, "sigmoid", NK_OP_SIGMOID, Kind::Float, 0, 0) \
	X(silu, "silu", NK_OP_SILU, Kind::Float, 0, 0)         \
	X(mish, "mish", NK_OP_MISH, Kind::Float, 0, 0)         \
	X(hardsigmoid, "hardsigmoid", NK_OP_HARDSIGMOID, Kind::Float, 0, 0) \
	X(hardswish, "hardswish", NK_OP_HARDSWISH, Kind::Float, 0, 0) \
	X(bitwise_not, "bitwise_not", NK_OP_BITWISE_NOT, Kind::Same, 0, 0) \
	X(logical_not, "logical_not", NK_OP_LOGICAL_NOT, Kind::Bool, 0, 0)

UNARY_LIST(UNARY)

// round, relu, isnan/isfinite and friends have no out= / in-place pattern in common with the above
static at::Tensor round_f(const at::Tensor &s) { NEURON_TRACK("aten::round"); return pointwise("aten::round", NK_OP_ROUND, {s}, {}, Kind::Same); }
static at::Tensor &round_i(at::Tensor &s) { NEURON_TRACK("aten::round_"); pointwise("aten::round_", NK_OP_ROUND, {s}, s, Kind::Same); return s; }
static at::Tensor &round_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::round.out"); pointwise("aten::round.out", NK_OP_ROUND, {s}, o, Kind::Same); return o; }
static at::Tensor relu_f(const at::Tensor &s) { NEURON_TRACK("aten::relu"); return pointwise("aten::relu", NK_OP_RELU, {s}, {}, Kind::Same); }
static at::Tensor &relu_i(at::Tensor &s) { NEURON_TRACK("aten::relu_"); pointwise("aten::relu_", NK_OP_RELU, {s}, s, Kind::Same); return s; }
static at::Tensor isnan_f(const at::Tensor &s) { NEURON_TRACK("aten::isnan"); return pointwise("aten::isnan", NK_OP_ISNAN, {s}, {}, Kind::Bool); }
static at::Tensor isinf_f(const at::Tensor &s) { NEURON_TRACK("aten::isinf"); return pointwise("aten::isinf", NK_OP_ISINF, {s}, {}, Kind::Bool); }
static at::Tensor isfinite_f(const at::Tensor &s) { NEURON_TRACK("aten::isfinite"); return pointwise("aten::isfinite", NK_OP_ISFINITE, {s}, {}, Kind::Bool); }

static int gelu_mode(c10::string_view approx)
{
	TORCH_CHECK(approx == "none" || approx == "tanh", "gelu: approximate must be 'none' or 'tanh', got ", approx);
	return approx == "tanh" ? 1 : 0;
}
static at::Tensor gelu_f(const at::Tensor &s, c10::string_view ap) { NEURON_TRACK("aten::gelu"); return pointwise("aten::gelu", NK_OP_GELU, {s}, {}, Kind::Float, 0, 0, gelu_mode(ap)); }
static at::Tensor &gelu_i(at::Tensor &s, c10::string_view ap) { NEURON_TRACK("aten::gelu_"); pointwise("aten::gelu_", NK_OP_GELU, {s}, s, Kind::Float, 0, 0, gelu_mode(ap)); return s; }
static at::Tensor &gelu_o(const at::Tensor &s, c10::string_view ap, at::Tensor &o) { NEURON_TRACK("aten::gelu.out"); pointwise("aten::gelu.out", NK_OP_GELU, {s}, o, Kind::Float, 0, 0, gelu_mode(ap)); return o; }
static at::Tensor gelu_bw(const at::Tensor &g, const at::Tensor &s, c10::string_view ap) { NEURON_TRACK("aten::gelu_backward"); return pointwise("aten::gelu_backward", NK_OP_GELU_BACKWARD, {g, s}, {}, Kind::Float, 0, 0, gelu_mode(ap)); }
static at::Tensor &gelu_bw_o(const at::Tensor &g, const at::Tensor &s, c10::string_view ap, at::Tensor &o) { NEURON_TRACK("aten::gelu_backward.grad_input"); pointwise("aten::gelu_backward", NK_OP_GELU_BACKWARD, {g, s}, o, Kind::Float, 0, 0, gelu_mode(ap)); return o; }
static at::Tensor silu_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::silu_backward"); return pointwise("aten::silu_backward", NK_OP_SILU_BACKWARD, {g, s}, {}, Kind::Float); }
static at::Tensor sigmoid_bw(const at::Tensor &g, const at::Tensor &y) { NEURON_TRACK("aten::sigmoid_backward"); return pointwise("aten::sigmoid_backward", NK_OP_SIGMOID_BACKWARD, {g, y}, {}, Kind::Float); }
static at::Tensor tanh_bw(const at::Tensor &g, const at::Tensor &y) { NEURON_TRACK("aten::tanh_backward"); return pointwise("aten::tanh_backward", NK_OP_TANH_BACKWARD, {g, y}, {}, Kind::Float); }
static at::Tensor threshold_bw(const at::Tensor &g, const at::Tensor &x, const c10::Scalar &t) { NEURON_TRACK("aten::threshold_backward"); return pointwise("aten::threshold_backward", NK_OP_THRESHOLD_BACKWARD, {g, x}, {}, Kind::Same, t.toDouble()); }

// ---- binary families -------------------------------------------------------------------------------

#define BINARY_ALPHA(fn, opname, NKOP)                                                                     \
	static at::Tensor fn##_t(const at::Tensor &s, const at::Tensor &o, const c10::Scalar &al)          \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname ".Tensor");                                                   \
		check_alpha(s, o, al);                                                                     \
		double a; int64_t ia; alpha_params(al, a, ia);                                             \
		return pointwise("aten::" opname, NKOP, {s, o}, {}, Kind::Same, a, 0, ia);                 \
	}                                                                                                  \
	static at::Tensor &fn##_ti(at::Tensor &s, const at::Tensor &o, const c10::Scalar &al)              \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname "_.Tensor");                                                  \
		check_alpha(s, o, al);                                                                     \
		double a; int64_t ia; alpha_params(al, a, ia);                                             \
		pointwise("aten::" opname "_", NKOP, {s, o}, s, Kind::Same, a, 0, ia);                     \
		return s;                                                                                  \
	}                                                                                                  \
	static at::Tensor &fn##_to(const at::Tensor &s, const at::Tensor &o, const c10::Scalar &al, at::Tensor &out) \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname ".out");                                                      \
		check_alpha(s, o, al);                                                                     \
		double a; int64_t ia; alpha_params(al, a, ia);                                             \
		pointwise("aten::" opname ".out", NKOP, {s, o}, out, Kind::Same, a, 0, ia);                \
		return out;                                                                                \
	}                                                                                                  \
	static at::Tensor fn##_s(const at::Tensor &s, const c10::Scalar &o, const c10::Scalar &al)         \
	{                                                                                                  \
		return fn##_t(s, wrap(o), al);                                                             \
	}                                                                                                  \
	static at::Tensor &fn##_si(at::Tensor &s, const c10::Scalar &o, const c10::Scalar &al)             \
	{                                                                                                  \
		return fn##_ti(s, wrap(o), al);                                                            \
	}
BINARY_ALPHA(add, "add", NK_OP_ADD)
BINARY_ALPHA(sub, "sub", NK_OP_SUB)

#define BINARY(fn, opname, NKOP, KIND)                                                                     \
	static at::Tensor fn##_t(const at::Tensor &s, const at::Tensor &o)                                 \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname ".Tensor");                                                   \
		return pointwise("aten::" opname, NKOP, {s, o}, {}, KIND);                                 \
	}                                                                                                  \
	static at::Tensor &fn##_ti(at::Tensor &s, const at::Tensor &o)                                     \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname "_.Tensor");                                                  \
		pointwise("aten::" opname "_", NKOP, {s, o}, s, KIND);                                     \
		return s;                                                                                  \
	}                                                                                                  \
	static at::Tensor &fn##_to(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)              \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname ".out");                                                      \
		pointwise("aten::" opname ".out", NKOP, {s, o}, out, KIND);                                \
		return out;                                                                                \
	}                                                                                                  \
	static at::Tensor fn##_s(const at::Tensor &s, const c10::Scalar &o) { return fn##_t(s, wrap(o)); } \
	static at::Tensor &fn##_si(at::Tensor &s, const c10::Scalar &o) { return fn##_ti(s, wrap(o)); }    \
	static at::Tensor &fn##_so(const at::Tensor &s, const c10::Scalar &o, at::Tensor &out) { return fn##_to(s, wrap(o), out); }

#define BINARY_LIST(X)                                               \
	X(mul, "mul", NK_OP_MUL, Kind::Same)                         \
	X(div_op, "div", NK_OP_DIV, Kind::Float)                        \
	X(remainder, "remainder", NK_OP_REMAINDER, Kind::Same)       \
	X(fmod, "fmod", NK_OP_FMOD, Kind::Same)                      \
	X(eq, "eq", NK_OP_EQ, Kind::Bool)                            \
	X(ne, "ne", NK_OP_NE, Kind::Bool)                            \
	X(lt, "lt", NK_OP_LT, Kind::Bool)                            \
	X(le, "le", NK_OP_LE, Kind::Bool)                            \
	X(gt, "gt", NK_OP_GT, Kind::Bool)                            \
	X(ge, "ge", NK_OP_GE, Kind::Bool)                            \
	X(bitwise_and, "bitwise_and", NK_OP_BITWISE_AND, Kind::Same) \
	X(bitwise_or, "bitwise_or", NK_OP_BITWISE_OR, Kind::Same)    \
	X(bitwise_xor, "bitwise_xor", NK_OP_BITWISE_XOR, Kind::Same)
BINARY_LIST(BINARY)

#define BINARY_T(fn, opname, NKOP, KIND)                                                                   \
	static at::Tensor fn##_t(const at::Tensor &s, const at::Tensor &o)                                 \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname);                                                             \
		return pointwise("aten::" opname, NKOP, {s, o}, {}, KIND);                                 \
	}                                                                                                  \
	static at::Tensor &fn##_to(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)              \
	{                                                                                                  \
		NEURON_TRACK("aten::" opname ".out");                                                      \
		pointwise("aten::" opname ".out", NKOP, {s, o}, out, KIND);                                \
		return out;                                                                                \
	}
#define BINARY_T_LIST(X)                                           \
	X(maximum, "maximum", NK_OP_MAXIMUM, Kind::Same)           \
	X(minimum, "minimum", NK_OP_MINIMUM, Kind::Same)           \
	X(fmax, "fmax", NK_OP_FMAX, Kind::Same)                    \
	X(fmin, "fmin", NK_OP_FMIN, Kind::Same)                    \
	X(atan2, "atan2", NK_OP_ATAN2, Kind::Float)                \
	X(hypot, "hypot", NK_OP_HYPOT, Kind::Float)                \
	X(logical_and, "logical_and", NK_OP_LOGICAL_AND, Kind::Bool) \
	X(logical_or, "logical_or", NK_OP_LOGICAL_OR, Kind::Bool)  \
	X(logical_xor, "logical_xor", NK_OP_LOGICAL_XOR, Kind::Bool)
BINARY_T_LIST(BINARY_T)

static int div_mode(std::optional<c10::string_view> m)
{
	if (!m.has_value())
		return NK_OP_DIV;
	if (*m == "trunc")
		return NK_OP_DIV_TRUNC;
	TORCH_CHECK(*m == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *m, "'");
	return NK_OP_DIV_FLOOR;
}
static at::Tensor div_tm(const at::Tensor &s, const at::Tensor &o, std::optional<c10::string_view> m)
{
	NEURON_TRACK("aten::div.Tensor_mode");
	int op = div_mode(m);
	return pointwise("aten::div", op, {s, o}, {}, op == NK_OP_DIV ? Kind::Float : Kind::Same);
}
static at::Tensor &div_tmi(at::Tensor &s, const at::Tensor &o, std::optional<c10::string_view> m)
{
	NEURON_TRACK("aten::div_.Tensor_mode");
	int op = div_mode(m);
	pointwise("aten::div_", op, {s, o}, s, op == NK_OP_DIV ? Kind::Float : Kind::Same);
	return s;
}
static at::Tensor &div_tmo(const at::Tensor &s, const at::Tensor &o, std::optional<c10::string_view> m, at::Tensor &out)
{
	NEURON_TRACK("aten::div.out_mode");
	int op = div_mode(m);
	pointwise("aten::div.out", op, {s, o}, out, op == NK_OP_DIV ? Kind::Float : Kind::Same);
	return out;
}
static at::Tensor div_sm(const at::Tensor &s, const c10::Scalar &o, std::optional<c10::string_view> m) { return div_tm(s, wrap(o), m); }
static at::Tensor &div_smi(at::Tensor &s, const c10::Scalar &o, std::optional<c10::string_view> m) { return div_tmi(s, wrap(o), m); }

static at::Tensor pow_tt(const at::Tensor &s, const at::Tensor &e) { NEURON_TRACK("aten::pow.Tensor_Tensor"); return pointwise("aten::pow", NK_OP_POW, {s, e}, {}, Kind::Same); }
static at::Tensor &pow_tto(const at::Tensor &s, const at::Tensor &e, at::Tensor &o) { NEURON_TRACK("aten::pow.Tensor_Tensor_out"); pointwise("aten::pow.out", NK_OP_POW, {s, e}, o, Kind::Same); return o; }
// NumPy's rule, as aten's pow.Tensor_Scalar meta checks it (a tensor exponent is not checked)
static void check_pow_scalar(const at::Tensor &s, const c10::Scalar &e)
{
	TORCH_CHECK(!(at::isIntegralType(s.scalar_type(), true) && e.isIntegral(true) && e.toLong() < 0),
		    "Integers to negative integer powers are not allowed.");
}
static at::Tensor pow_ts(const at::Tensor &s, const c10::Scalar &e) { NEURON_TRACK("aten::pow.Tensor_Scalar"); check_pow_scalar(s, e); return pointwise("aten::pow", NK_OP_POW, {s, wrap(e)}, {}, Kind::Same); }
static at::Tensor &pow_tso(const at::Tensor &s, const c10::Scalar &e, at::Tensor &o) { NEURON_TRACK("aten::pow.Tensor_Scalar_out"); check_pow_scalar(s, e); pointwise("aten::pow.out", NK_OP_POW, {s, wrap(e)}, o, Kind::Same); return o; }
static at::Tensor &pow_tsi(at::Tensor &s, const c10::Scalar &e) { NEURON_TRACK("aten::pow_.Scalar"); check_pow_scalar(s, e); pointwise("aten::pow_", NK_OP_POW, {s, wrap(e)}, s, Kind::Same); return s; }
static at::Tensor &pow_tti(at::Tensor &s, const at::Tensor &e) { NEURON_TRACK("aten::pow_.Tensor"); pointwise("aten::pow_", NK_OP_POW, {s, e}, s, Kind::Same); return s; }
static at::Tensor pow_st(const c10::Scalar &b, const at::Tensor &e) { NEURON_TRACK("aten::pow.Scalar"); return pointwise("aten::pow", NK_OP_POW, {wrap(b), e}, {}, Kind::Same); }

// ---- ternary ---------------------------------------------------------------------------------------

static at::Tensor where_self(const at::Tensor &c, const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::where.self");
	TORCH_CHECK(c.scalar_type() == at::kBool || c.scalar_type() == at::kByte, "where expected condition to be a boolean tensor, but got a tensor with dtype ", c.scalar_type());
	at::Tensor cb = c.scalar_type() == at::kBool ? c : c.to(at::kBool);
	return pointwise("aten::where", NK_OP_WHERE, {cb, s, o}, {}, Kind::Same, 0, 0, 0, 0, 1u);
}
static at::Tensor &where_out(const at::Tensor &c, const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::where.self_out");
	at::Tensor cb = c.scalar_type() == at::kBool ? c : c.to(at::kBool);
	pointwise("aten::where.out", NK_OP_WHERE, {cb, s, o}, out, Kind::Same, 0, 0, 0, 0, 1u);
	return out;
}

#define TERNARY_VALUE(fn, opname, NKOP)                                                                           \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &t1, const at::Tensor &t2, const c10::Scalar &v) \
	{                                                                                                         \
		NEURON_TRACK("aten::" opname);                                                                    \
		double a; int64_t ia; alpha_params(v, a, ia);                                                     \
		return pointwise("aten::" opname, NKOP, {s, t1, t2}, {}, Kind::Same, a, 0, ia);                   \
	}                                                                                                         \
	static at::Tensor &fn##_i(at::Tensor &s, const at::Tensor &t1, const at::Tensor &t2, const c10::Scalar &v) \
	{                                                                                                         \
		NEURON_TRACK("aten::" opname "_");                                                                \
		double a; int64_t ia; alpha_params(v, a, ia);                                                     \
		pointwise("aten::" opname "_", NKOP, {s, t1, t2}, s, Kind::Same, a, 0, ia);                       \
		return s;                                                                                         \
	}                                                                                                         \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &t1, const at::Tensor &t2, const c10::Scalar &v, at::Tensor &out) \
	{                                                                                                         \
		NEURON_TRACK("aten::" opname ".out");                                                             \
		double a; int64_t ia; alpha_params(v, a, ia);                                                     \
		pointwise("aten::" opname ".out", NKOP, {s, t1, t2}, out, Kind::Same, a, 0, ia);                  \
		return out;                                                                                       \
	}
TERNARY_VALUE(addcmul, "addcmul", NK_OP_ADDCMUL)
TERNARY_VALUE(addcdiv, "addcdiv", NK_OP_ADDCDIV)

static at::Tensor lerp_s(const at::Tensor &s, const at::Tensor &e, const c10::Scalar &w) { NEURON_TRACK("aten::lerp.Scalar"); return pointwise("aten::lerp", NK_OP_LERP_SCALAR, {s, e}, {}, Kind::Same, w.toDouble()); }
static at::Tensor &lerp_si(at::Tensor &s, const at::Tensor &e, const c10::Scalar &w) { NEURON_TRACK("aten::lerp_.Scalar"); pointwise("aten::lerp_", NK_OP_LERP_SCALAR, {s, e}, s, Kind::Same, w.toDouble()); return s; }
static at::Tensor &lerp_so(const at::Tensor &s, const at::Tensor &e, const c10::Scalar &w, at::Tensor &o) { NEURON_TRACK("aten::lerp.Scalar_out"); pointwise("aten::lerp.out", NK_OP_LERP_SCALAR, {s, e}, o, Kind::Same, w.toDouble()); return o; }
static at::Tensor lerp_t(const at::Tensor &s, const at::Tensor &e, const at::Tensor &w) { NEURON_TRACK("aten::lerp.Tensor"); return pointwise("aten::lerp", NK_OP_LERP, {s, e, w}, {}, Kind::Same); }
static at::Tensor &lerp_ti(at::Tensor &s, const at::Tensor &e, const at::Tensor &w) { NEURON_TRACK("aten::lerp_.Tensor"); pointwise("aten::lerp_", NK_OP_LERP, {s, e, w}, s, Kind::Same); return s; }

static void clamp_params(const std::optional<c10::Scalar> &lo, const std::optional<c10::Scalar> &hi, double &a, double &b, int64_t &ia)
{
	TORCH_CHECK(lo.has_value() || hi.has_value(), "torch.clamp: At least one of 'min' or 'max' must not be None");
	a = lo.has_value() ? lo->toDouble() : 0;
	b = hi.has_value() ? hi->toDouble() : 0;
	ia = (lo.has_value() ? 1 : 0) | (hi.has_value() ? 2 : 0);
}
// aten's clamp promotes an integral (or bool) self with its scalar bounds: clamp(int, min=1.5) is float.
static at::Tensor clamp_input(const at::Tensor &s, const std::optional<c10::Scalar> &lo, const std::optional<c10::Scalar> &hi)
{
	if (at::isFloatingType(s.scalar_type()))
		return s;
	at::native::ResultTypeState st{};
	st = at::native::update_result_type_state(s, st);
	if (lo.has_value())
		st = at::native::update_result_type_state(*lo, st);
	if (hi.has_value())
		st = at::native::update_result_type_state(*hi, st);
	at::ScalarType t = at::native::result_type(st);
	return t == s.scalar_type() ? s : s.to(t);
}
static at::Tensor clamp_f(const at::Tensor &s, const std::optional<c10::Scalar> &lo, const std::optional<c10::Scalar> &hi)
{
	NEURON_TRACK("aten::clamp");
	double a, b; int64_t ia; clamp_params(lo, hi, a, b, ia);
	return pointwise("aten::clamp", NK_OP_CLAMP_SCALAR, {clamp_input(s, lo, hi)}, {}, Kind::Same, a, b, ia);
}
static at::Tensor &clamp_i(at::Tensor &s, const std::optional<c10::Scalar> &lo, const std::optional<c10::Scalar> &hi)
{
	NEURON_TRACK("aten::clamp_");
	double a, b; int64_t ia; clamp_params(lo, hi, a, b, ia);
	at::ScalarType t = clamp_input(s, lo, hi).scalar_type();
	TORCH_CHECK(t == s.scalar_type(), "result type ", t, " can't be cast to the desired output type ", s.scalar_type());
	pointwise("aten::clamp_", NK_OP_CLAMP_SCALAR, {s}, s, Kind::Same, a, b, ia);
	return s;
}
static at::Tensor &clamp_o(const at::Tensor &s, const std::optional<c10::Scalar> &lo, const std::optional<c10::Scalar> &hi, at::Tensor &out)
{
	NEURON_TRACK("aten::clamp.out");
	double a, b; int64_t ia; clamp_params(lo, hi, a, b, ia);
	pointwise("aten::clamp.out", NK_OP_CLAMP_SCALAR, {clamp_input(s, lo, hi)}, out, Kind::Same, a, b, ia);
	return out;
}
static at::Tensor clamp_tf(const at::Tensor &s, const std::optional<at::Tensor> &lo, const std::optional<at::Tensor> &hi)
{
	NEURON_TRACK("aten::clamp.Tensor");
	bool hl = lo.has_value() && lo->defined(), hh = hi.has_value() && hi->defined();
	TORCH_CHECK(hl || hh, "torch.clamp: At least one of 'min' or 'max' must not be None");
	at::Tensor l = hl ? *lo : s, h = hh ? *hi : s;
	return pointwise("aten::clamp", NK_OP_CLAMP_TENSOR, {s, l, h}, {}, Kind::Same, 0, 0, (hl ? 1 : 0) | (hh ? 2 : 0));
}

// ---- reductions ------------------------------------------------------------------------------------

struct RedPlan {
	at::Tensor in;              // contiguous [O, R, I] view of the input
	int64_t O = 1, R = 1, I = 1;
	std::vector<int64_t> out_shape, out_shape_keep;
};

// Arrange the reduced dims of x as one [O, R, I] block of a contiguous tensor: free when x is
// contiguous and the reduced dims are adjacent, otherwise one copy with the kept dims moved first.
static RedPlan plan_reduce(const at::Tensor &x, at::OptionalIntArrayRef dims_opt)
{
	int64_t nd = x.dim();
	std::vector<bool> red(std::max<int64_t>(nd, 1), false);
	bool all = !dims_opt.has_value() || dims_opt->empty();
	if (!all)
		for (int64_t d : *dims_opt) {
			int64_t w = at::maybe_wrap_dim(d, nd);
			TORCH_CHECK(!red[w] || nd == 0, "dim ", w, " appears multiple times in the list of dims");
			red[w] = true;
		}
	else
		std::fill(red.begin(), red.end(), true);
	RedPlan p;
	for (int64_t d = 0; d < nd; d++) {
		p.out_shape_keep.push_back(red[d] ? 1 : x.size(d));
		if (!red[d])
			p.out_shape.push_back(x.size(d));
	}
	int64_t first = -1, last = -1;
	for (int64_t d = 0; d < nd; d++)
		if (red[d]) {
			if (first < 0)
				first = d;
			last = d;
		}
	bool adjacent = first >= 0;
	for (int64_t d = first; adjacent && d <= last; d++)
		adjacent = red[d];
	if (nd == 0) {
		p.in = x.contiguous();
		return p;
	}
	if (x.is_contiguous() && adjacent) {
		p.in = x;
		for (int64_t d = 0; d < first; d++)
			p.O *= x.size(d);
		for (int64_t d = first; d <= last; d++)
			p.R *= x.size(d);
		for (int64_t d = last + 1; d < nd; d++)
			p.I *= x.size(d);
		return p;
	}
	std::vector<int64_t> perm;
	for (int64_t d = 0; d < nd; d++)
		if (!red[d])
			perm.push_back(d), p.O *= x.size(d);
	for (int64_t d = 0; d < nd; d++)
		if (red[d])
			perm.push_back(d), p.R *= x.size(d);
	p.in = x.permute(perm).contiguous();
	return p;
}

static void launch_reduce(const char *name, const RedPlan &p, int op, const at::Tensor &out, const at::Tensor &out2, double a = 0)
{
	if (out.numel() == 0 && !(p.O * p.I == 0))
		return;
	nk_reduce_args_t r{};
	r.in = p.in.const_data_ptr();
	r.out = out.data_ptr();
	r.out2 = out2.defined() ? out2.data_ptr() : nullptr;
	r.dtype_in = nk_dtype(p.in.scalar_type(), name);
	r.dtype_out = nk_dtype(out.scalar_type(), name);
	r.O = p.O, r.R = p.R, r.I = p.I;
	r.op = op;
	r.a = a;
	if (p.O * p.I == 0)
		return;
	size_t cost = (size_t)(p.O * p.R * p.I) * p.in.element_size() + (size_t)out.numel() * out.element_size();
	launch_cost(current_queue(p.in.device().index()), nk_reduce_run, r, name, cost);
}

// Result into `out` (may be undefined): reduce with output dtype odt, casting input to cdt first.
static at::Tensor reduce(const char *name, const at::Tensor &self, at::OptionalIntArrayRef dims, bool keepdim, int op,
			 at::ScalarType cdt, at::ScalarType odt, at::Tensor out = {}, double a = 0)
{
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.scalar_type() == cdt ? self : self.to(cdt);
	RedPlan p = plan_reduce(x, dims);
	at::Tensor res = at::empty(p.out_shape_keep, x.options().dtype(odt));
	launch_reduce(name, p, op, res, {}, a);
	if (!keepdim)
		res = res.view(p.out_shape);
	if (out.defined())
		return into(out, res, OutRule::Cast);
	return res;
}

static at::ScalarType sum_dtype(const at::Tensor &s, std::optional<at::ScalarType> dt)
{
	if (dt.has_value())
		return *dt;
	return at::isIntegralType(s.scalar_type(), true) ? at::kLong : s.scalar_type();
}

static at::Tensor sum_dim(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::sum.dim_IntList");
	auto t = sum_dtype(s, dt);
	return reduce("aten::sum", s, dim, keep, NK_RED_SUM, at::isIntegralType(t, true) ? t : (dt ? *dt : s.scalar_type()), t);
}
static at::Tensor &sum_out(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt, at::Tensor &out)
{
	NEURON_TRACK("aten::sum.IntList_out");
	auto t = dt.value_or(out.scalar_type());
	reduce("aten::sum.out", s, dim, keep, NK_RED_SUM, t, t, out);
	return out;
}
static at::Tensor sum_all(const at::Tensor &s, std::optional<at::ScalarType> dt) { return sum_dim(s, {}, false, dt); }

static at::Tensor mean_dim(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::mean.dim");
	auto t = dt.value_or(s.scalar_type());
	TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t), "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ", t);
	return reduce("aten::mean", s, dim, keep, NK_RED_MEAN, t, t);
}
static at::Tensor &mean_out(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt, at::Tensor &out)
{
	NEURON_TRACK("aten::mean.out");
	// as aten's mean.out: the input's dtype must be floating, the out's is the one summed in
	auto in_t = dt.value_or(at::isIntegralType(s.scalar_type(), true) ? at::kLong : s.scalar_type());
	TORCH_CHECK(at::isFloatingType(in_t) || at::isComplexType(in_t), "mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ", in_t);
	if (!dt)
		check_out(out, in_t, s.device(), OutRule::Cast);
	auto t = dt.value_or(out.scalar_type());
	reduce("aten::mean.out", s, dim, keep, NK_RED_MEAN, t, t, out);
	return out;
}
static at::Tensor mean_all(const at::Tensor &s, std::optional<at::ScalarType> dt) { return mean_dim(s, {}, false, dt); }

static at::Tensor prod_dim(const at::Tensor &s, int64_t dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::prod.dim_int");
	auto t = sum_dtype(s, dt);
	return reduce("aten::prod", s, at::IntArrayRef{dim}, keep, NK_RED_PROD, t, t);
}
static at::Tensor prod_all(const at::Tensor &s, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::prod");
	auto t = sum_dtype(s, dt);
	return reduce("aten::prod", s, {}, false, NK_RED_PROD, t, t);
}

static void check_nonempty(const char *name, const at::Tensor &s, at::OptionalIntArrayRef dims)
{
	if (s.numel() != 0)
		return;
	TORCH_CHECK(dims.has_value() && !dims->empty(), name, "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
	for (int64_t d : *dims)
		TORCH_CHECK(s.dim() == 0 || s.size(at::maybe_wrap_dim(d, s.dim())) != 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
}

static at::Tensor amax_f(const at::Tensor &s, at::IntArrayRef dim, bool keep)
{
	NEURON_TRACK("aten::amax");
	check_nonempty("amax", s, dim);
	return reduce("aten::amax", s, dim, keep, NK_RED_AMAX, s.scalar_type(), s.scalar_type());
}
static at::Tensor amin_f(const at::Tensor &s, at::IntArrayRef dim, bool keep)
{
	NEURON_TRACK("aten::amin");
	check_nonempty("amin", s, dim);
	return reduce("aten::amin", s, dim, keep, NK_RED_AMIN, s.scalar_type(), s.scalar_type());
}
static at::Tensor max_all(const at::Tensor &s)
{
	NEURON_TRACK("aten::max");
	TORCH_CHECK(s.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0.");
	return reduce("aten::max", s, {}, false, NK_RED_AMAX, s.scalar_type(), s.scalar_type());
}
static at::Tensor min_all(const at::Tensor &s)
{
	NEURON_TRACK("aten::min");
	TORCH_CHECK(s.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0.");
	return reduce("aten::min", s, {}, false, NK_RED_AMIN, s.scalar_type(), s.scalar_type());
}

static std::tuple<at::Tensor, at::Tensor> minmax_dim(const char *name, int op, const at::Tensor &s, int64_t dim, bool keep)
{
	c10::DeviceGuard g(s.device());
	check_nonempty(name, s, at::IntArrayRef{dim});
	RedPlan p = plan_reduce(s, at::IntArrayRef{dim});
	at::Tensor v = at::empty(p.out_shape_keep, s.options());
	at::Tensor i = at::empty(p.out_shape_keep, s.options().dtype(at::kLong));
	launch_reduce(name, p, op, v, i);
	if (!keep)
		return {v.view(p.out_shape), i.view(p.out_shape)};
	return {v, i};
}
static std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor &s, int64_t dim, bool keep) { NEURON_TRACK("aten::max.dim"); return minmax_dim("aten::max.dim", NK_RED_MAX, s, dim, keep); }
static std::tuple<at::Tensor, at::Tensor> min_dim(const at::Tensor &s, int64_t dim, bool keep) { NEURON_TRACK("aten::min.dim"); return minmax_dim("aten::min.dim", NK_RED_MIN, s, dim, keep); }

static at::Tensor argext(const char *name, int op, const at::Tensor &s, std::optional<int64_t> dim, bool keep)
{
	c10::DeviceGuard g(s.device());
	if (!dim.has_value()) {
		TORCH_CHECK(s.numel() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
		at::Tensor flat = s.reshape({-1});
		RedPlan p = plan_reduce(flat, at::IntArrayRef{0});
		at::Tensor r = at::empty({}, s.options().dtype(at::kLong));
		launch_reduce(name, p, op, r, {});
		return keep ? r.view(std::vector<int64_t>(s.dim(), 1)) : r;
	}
	check_nonempty(name, s, at::IntArrayRef{*dim});
	RedPlan p = plan_reduce(s, at::IntArrayRef{*dim});
	at::Tensor r = at::empty(p.out_shape_keep, s.options().dtype(at::kLong));
	launch_reduce(name, p, op, r, {});
	return keep ? r : r.view(p.out_shape);
}
static at::Tensor argmax_f(const at::Tensor &s, std::optional<int64_t> dim, bool keep) { NEURON_TRACK("aten::argmax"); return argext("argmax", NK_RED_ARGMAX, s, dim, keep); }
static at::Tensor argmin_f(const at::Tensor &s, std::optional<int64_t> dim, bool keep) { NEURON_TRACK("aten::argmin"); return argext("argmin", NK_RED_ARGMIN, s, dim, keep); }

static at::Tensor any_all(const char *name, int op, const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep)
{
	at::ScalarType odt = s.scalar_type() == at::kByte ? at::kByte : at::kBool;
	return reduce(name, s, dim, keep, op, s.scalar_type(), odt);
}
static at::Tensor any_f(const at::Tensor &s) { NEURON_TRACK("aten::any"); return any_all("aten::any", NK_RED_ANY, s, {}, false); }
static at::Tensor all_f(const at::Tensor &s) { NEURON_TRACK("aten::all"); return any_all("aten::all", NK_RED_ALL, s, {}, false); }
static at::Tensor any_dims(const at::Tensor &s, at::OptionalIntArrayRef d, bool k) { NEURON_TRACK("aten::any.dims"); return any_all("aten::any", NK_RED_ANY, s, d, k); }
static at::Tensor all_dims(const at::Tensor &s, at::OptionalIntArrayRef d, bool k) { NEURON_TRACK("aten::all.dims"); return any_all("aten::all", NK_RED_ALL, s, d, k); }
static at::Tensor any_dim(const at::Tensor &s, int64_t d, bool k) { NEURON_TRACK("aten::any.dim"); return any_all("aten::any", NK_RED_ANY, s, at::IntArrayRef{d}, k); }
static at::Tensor all_dim(const at::Tensor &s, int64_t d, bool k) { NEURON_TRACK("aten::all.dim"); return any_all("aten::all", NK_RED_ALL, s, at::IntArrayRef{d}, k); }

static at::Tensor vector_norm(const at::Tensor &s, const c10::Scalar &ord, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::linalg_vector_norm");
	TORCH_CHECK(at::isFloatingType(s.scalar_type()), "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", s.scalar_type());
	double p = ord.toDouble();
	if (p < 0 || std::isinf(p))
		check_nonempty("linalg.vector_norm", s, dim);
	auto t = dt.value_or(s.scalar_type());
	return reduce("aten::linalg_vector_norm", s, dim, keep, NK_RED_NORM, t, t, {}, p);
}
static at::Tensor &vector_norm_out(const at::Tensor &s, const c10::Scalar &ord, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt, at::Tensor &out)
{
	return into(out, vector_norm(s, ord, dim, keep, dt));
}

static at::Tensor var_std(const char *name, int op, const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep)
{
	TORCH_CHECK(at::isFloatingType(s.scalar_type()), name, ": expected a floating point tensor, got ", s.scalar_type());
	double c = corr.has_value() ? corr->toDouble() : 1.0;
	return reduce(name, s, dim, keep, op, s.scalar_type(), s.scalar_type(), {}, c);
}
static at::Tensor var_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep) { NEURON_TRACK("aten::var.correction"); return var_std("aten::var", NK_RED_VAR, s, dim, corr, keep); }
static at::Tensor std_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep) { NEURON_TRACK("aten::std.correction"); return var_std("aten::std", NK_RED_STD, s, dim, corr, keep); }

static at::Tensor logsumexp_f(const at::Tensor &s, at::IntArrayRef dim, bool keep)
{
	NEURON_TRACK("aten::logsumexp");
	auto t = at::isIntegralType(s.scalar_type(), true) ? c10::typeMetaToScalarType(c10::get_default_dtype()) : s.scalar_type();
	return reduce("aten::logsumexp", s, dim, keep, NK_RED_LOGSUMEXP, t, t);
}

// ---- arange: a factory; computed on the host and copied (small, rarely hot) -----------------------

static at::Tensor &arange_out(const c10::Scalar &start, const c10::Scalar &end, const c10::Scalar &step, at::Tensor &out)
{
	NEURON_TRACK("aten::arange.start_out");
	at::Tensor host = at::arange(start, end, step, out.options().device(at::kCPU));
	return into(out, host);
}

void iter_to_nk(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name)
{
	TORCH_CHECK(iter.ndim() <= NK_MAX_DIMS, name, ": too many dimensions for neuron");
	it.ndim = (int)iter.ndim();
	it.nops = iter.ntensors();
	for (int d = 0; d < it.ndim; d++)
		it.shape[d] = iter.shape()[d];
	for (int k = 0; k < it.nops; k++) {
		it.data[k] = (char *)iter.data_ptr(k);
		it.dtype[k] = (int8_t)nk_dtype(iter.dtype(k), name);
		for (int d = 0; d < it.ndim; d++)
			it.strides[k][d] = iter.strides(k)[d];
	}
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
#define REG_UNARY(fn, opname, ...) \
	NEURON_IMPL(m, opname, fn##_f);    \
	NEURON_IMPL(m, opname "_", fn##_i); \
	NEURON_IMPL(m, opname ".out", fn##_o);
	UNARY_LIST(REG_UNARY)
	NEURON_IMPL(m, "round", round_f);
	NEURON_IMPL(m, "round_", round_i);
	NEURON_IMPL(m, "round.out", round_o);
	NEURON_IMPL(m, "relu", relu_f);
	NEURON_IMPL(m, "relu_", relu_i);
	NEURON_IMPL(m, "isnan", isnan_f);
	NEURON_IMPL(m, "isinf", isinf_f);
	NEURON_IMPL(m, "isfinite", isfinite_f);
	NEURON_IMPL(m, "gelu", gelu_f);
	NEURON_IMPL(m, "gelu_", gelu_i);
	NEURON_IMPL(m, "gelu.out", gelu_o);
	NEURON_IMPL(m, "gelu_backward", gelu_bw);
	NEURON_IMPL(m, "gelu_backward.grad_input", gelu_bw_o);
	NEURON_IMPL(m, "silu_backward", silu_bw);
	NEURON_IMPL(m, "sigmoid_backward", sigmoid_bw);
	NEURON_IMPL(m, "tanh_backward", tanh_bw);
	NEURON_IMPL(m, "threshold_backward", threshold_bw);
#define REG_BINARY_ALPHA(fn, opname)          \
	NEURON_IMPL(m, opname ".Tensor", fn##_t);     \
	NEURON_IMPL(m, opname "_.Tensor", fn##_ti);   \
	NEURON_IMPL(m, opname ".out", fn##_to);       \
	NEURON_IMPL(m, opname ".Scalar", fn##_s);     \
	NEURON_IMPL(m, opname "_.Scalar", fn##_si);
	REG_BINARY_ALPHA(add, "add")
	REG_BINARY_ALPHA(sub, "sub")
#define REG_BINARY(fn, opname, ...)               \
	NEURON_IMPL(m, opname ".Tensor", fn##_t);         \
	NEURON_IMPL(m, opname "_.Tensor", fn##_ti);       \
	NEURON_IMPL(m, opname ".Scalar", fn##_s);         \
	NEURON_IMPL(m, opname "_.Scalar", fn##_si);
	REG_BINARY(mul, "mul")
	REG_BINARY(div_op, "div")
	REG_BINARY(remainder, "remainder")
	REG_BINARY(fmod, "fmod")
	REG_BINARY(eq, "eq")
	REG_BINARY(ne, "ne")
	REG_BINARY(lt, "lt")
	REG_BINARY(le, "le")
	REG_BINARY(gt, "gt")
	REG_BINARY(ge, "ge")
	REG_BINARY(bitwise_and, "bitwise_and")
	REG_BINARY(bitwise_or, "bitwise_or")
	REG_BINARY(bitwise_xor, "bitwise_xor")
	NEURON_IMPL(m, "mul.out", mul_to);
	NEURON_IMPL(m, "div.out", div_op_to);
	NEURON_IMPL(m, "remainder.Tensor_out", remainder_to);
	NEURON_IMPL(m, "fmod.Tensor_out", fmod_to);
	NEURON_IMPL(m, "eq.Tensor_out", eq_to);
	NEURON_IMPL(m, "ne.Tensor_out", ne_to);
	NEURON_IMPL(m, "lt.Tensor_out", lt_to);
	NEURON_IMPL(m, "le.Tensor_out", le_to);
	NEURON_IMPL(m, "gt.Tensor_out", gt_to);
	NEURON_IMPL(m, "ge.Tensor_out", ge_to);
	NEURON_IMPL(m, "eq.Scalar_out", eq_so);
	NEURON_IMPL(m, "ne.Scalar_out", ne_so);
	NEURON_IMPL(m, "lt.Scalar_out", lt_so);
	NEURON_IMPL(m, "le.Scalar_out", le_so);
	NEURON_IMPL(m, "gt.Scalar_out", gt_so);
	NEURON_IMPL(m, "ge.Scalar_out", ge_so);
#define REG_BINARY_T(fn, opname, ...)   \
	NEURON_IMPL(m, opname, fn##_t);         \
	NEURON_IMPL(m, opname ".out", fn##_to);
	BINARY_T_LIST(REG_BINARY_T)
	NEURON_IMPL(m, "div.Tensor_mode", div_tm);
	NEURON_IMPL(m, "div_.Tensor_mode", div_tmi);
	NEURON_IMPL(m, "div.out_mode", div_tmo);
	NEURON_IMPL(m, "div.Scalar_mode", div_sm);
	NEURON_IMPL(m, "div_.Scalar_mode", div_smi);
	NEURON_IMPL(m, "pow.Tensor_Tensor", pow_tt);
	NEURON_IMPL(m, "pow.Tensor_Tensor_out", pow_tto);
	NEURON_IMPL(m, "pow.Tensor_Scalar", pow_ts);
	NEURON_IMPL(m, "pow.Tensor_Scalar_out", pow_tso);
	NEURON_IMPL(m, "pow_.Scalar", pow_tsi);
	NEURON_IMPL(m, "pow_.Tensor", pow_tti);
	NEURON_IMPL(m, "pow.Scalar", pow_st);
	NEURON_IMPL(m, "where.self", where_self);
	NEURON_IMPL(m, "where.self_out", where_out);
	NEURON_IMPL(m, "addcmul", addcmul_f);
	NEURON_IMPL(m, "addcmul_", addcmul_i);
	NEURON_IMPL(m, "addcmul.out", addcmul_o);
	NEURON_IMPL(m, "addcdiv", addcdiv_f);
	NEURON_IMPL(m, "addcdiv_", addcdiv_i);
	NEURON_IMPL(m, "addcdiv.out", addcdiv_o);
	NEURON_IMPL(m, "lerp.Scalar", lerp_s);
	NEURON_IMPL(m, "lerp_.Scalar", lerp_si);
	NEURON_IMPL(m, "lerp.Scalar_out", lerp_so);
	NEURON_IMPL(m, "lerp.Tensor", lerp_t);
	NEURON_IMPL(m, "lerp_.Tensor", lerp_ti);
	NEURON_IMPL(m, "clamp", clamp_f);
	NEURON_IMPL(m, "clamp_", clamp_i);
	NEURON_IMPL(m, "clamp.out", clamp_o);
	NEURON_IMPL(m, "clamp.Tensor", clamp_tf);

	NEURON_IMPL(m, "sum.dim_IntList", sum_dim);
	NEURON_IMPL(m, "sum.IntList_out", sum_out);
	NEURON_IMPL(m, "sum", sum_all);
	NEURON_IMPL(m, "mean.dim", mean_dim);
	NEURON_IMPL(m, "mean.out", mean_out);
	NEURON_IMPL(m, "mean", mean_all);
	NEURON_IMPL(m, "prod.dim_int", prod_dim);
	NEURON_IMPL(m, "prod", prod_all);
	NEURON_IMPL(m, "amax", amax_f);
	NEURON_IMPL(m, "amin", amin_f);
	NEURON_IMPL(m, "max", max_all);
	NEURON_IMPL(m, "min", min_all);
	NEURON_IMPL(m, "max.dim", max_dim);
	NEURON_IMPL(m, "min.dim", min_dim);
	NEURON_IMPL(m, "argmax", argmax_f);
	NEURON_IMPL(m, "argmin", argmin_f);
	NEURON_IMPL(m, "any", any_f);
	NEURON_IMPL(m, "all", all_f);
	NEURON_IMPL(m, "any.dims", any_dims);
	NEURON_IMPL(m, "all.dims", all_dims);
	NEURON_IMPL(m, "any.dim", any_dim);
	NEURON_IMPL(m, "all.dim", all_dim);
	NEURON_IMPL(m, "linalg_vector_norm", vector_norm);
	NEURON_IMPL(m, "linalg_vector_norm.out", vector_norm_out);
	NEURON_IMPL(m, "var.correction", var_c);
	NEURON_IMPL(m, "std.correction", std_c);
	NEURON_IMPL(m, "logsumexp", logsumexp_f);
	NEURON_IMPL(m, "arange.start_out", arange_out);
}
