// ops_pointwise.cpp - elementwise ops: arithmetic, comparisons, activations (and their backwards),
// special functions.  ATen's TensorIterator computes broadcasting, output allocation and
// memory-overlap checks; type promotion follows at::result_type; the C kernels (nk_pointwise_run,
// act.c, special.c) get the operands' descriptors and run on the current queue.
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "ops_table.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp2.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/nan_to_num_ops.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

// ---- the pointwise engine ------------------------------------------------------------------------

enum class Kind { Same, Bool, Float };

// Launch record: the kernel arguments plus room for CPU-scalar operands (16 bytes: a complex double),
// which the trampoline points at inside the queue's copy of the record.  cx: an operand is complex, the
// complex kernel (complex.c) runs the op.
struct PwLaunch {
	nk_pointwise_args_t a;
	uint64_t scal[NK_MAX_OPS][2];
	int cx;
};

static int pw_tramp(void *p)
{
	auto *x = (PwLaunch *)p;
	for (int i = 0; i < x->a.it.nops; i++)
		if (!x->a.it.data[i])
			x->a.it.data[i] = (char *)&x->scal[i][0];
	return x->cx ? nk_complex_pointwise_run(&x->a) : nk_pointwise_run(&x->a);
}

static void store_scalar(uint64_t *slot, at::ScalarType t, const c10::Scalar &s)
{
	slot[0] = slot[1] = 0;
	AT_DISPATCH_V2(t, "store_scalar", AT_WRAP([&] {
		scalar_t v = s.to<scalar_t>();
		std::memcpy(slot, &v, sizeof v);
	}), AT_EXPAND(AT_ALL_TYPES), AT_EXPAND(AT_COMPLEX_TYPES), at::kBool, at::kHalf, at::kBFloat16);
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
	}), AT_EXPAND(AT_ALL_TYPES), AT_EXPAND(AT_COMPLEX_TYPES), at::kBool, at::kHalf, at::kBFloat16);
	return v;
}

static size_t elem_size(at::ScalarType t)
{
	return c10::elementSize(t);
}

// Fills the operand k of a launch record for a CPU scalar, in dtype t.
static void set_scalar_operand(PwLaunch &L, int k, at::ScalarType t, const c10::Scalar &v, const char *name)
{
	store_scalar(L.scal[k], t, v);
	L.a.it.data[k] = nullptr;
	L.a.it.dtype[k] = (int8_t)nk_dtype_cx(t, name);
}

// The common case without TensorIterator: every tensor operand is a plain contiguous neuron tensor of
// one shape on the device (CPU scalars allowed), and `res` is undefined or a plain contiguous tensor of
// that shape and dtype odt that each input either is exactly or does not overlap.  Then the result is
// contiguous, no broadcasting or casting is needed and the whole op is one 1-d loop.  Returns false
// (nothing done) when the case is not that simple; TensorIterator handles it then.
static bool pointwise_fast(const char *name, int op, c10::SmallVector<at::Tensor, 4> &in, at::Tensor &res,
			   at::ScalarType common, at::ScalarType odt, c10::Device dev, unsigned nocast, double a,
			   double b, int64_t ia, int64_t ib, bool cx)
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
	it.dtype[0] = (int8_t)nk_dtype_cx(odt, name);
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
		it.dtype[k] = (int8_t)nk_dtype_cx(x.scalar_type(), name);
		it.strides[k][0] = (int64_t)x.element_size();
		cost += (size_t)n * x.element_size();
	}
	L.a.op = op;
	L.a.a = a, L.a.b = b, L.a.ia = ia, L.a.ib = ib;
	L.cx = cx;
	launch_cost(current_queue(dev.index()), pw_tramp, L, name, cost);
	return true;
}

// aten's refusals of a dtype, for the ops whose kernels lack it: checked before the launch (the kernel
// would fail asynchronously: "nk_pointwise: op 'neg' not supported for dtype bool"), in the CPU's words
// and types (its dtype dispatch raises NotImplementedError)
static void check_pw_dtype(int op, at::ScalarType common, const c10::SmallVector<at::Tensor, 4> &in)
{
	const char *cpu = nullptr; // the CPU kernel aten's dispatch names
	bool ok = true;
	switch (op) {
	case NK_OP_NEG:
		TORCH_CHECK(common != at::kBool, "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
			    "to invert a mask, use the `~` or `logical_not()` operator instead.");
		return;
	case NK_OP_SUB:
		if (in.size() == 2)
			at::native::sub_check(in[0], in[1]);
		return;
	case NK_OP_RELU:
		TORCH_CHECK(common != at::kBool, "Boolean inputs not supported for relu");
		return;
	case NK_OP_ABS: cpu = "abs_cpu", ok = common != at::kBool; break;
	case NK_OP_FRAC: cpu = "frac_cpu", ok = !at::isIntegralType(common, true); break;
	case NK_OP_BITWISE_AND: cpu = "bitwise_and_cpu", ok = !at::isFloatingType(common); break;
	case NK_OP_BITWISE_OR: cpu = "bitwise_or_cpu", ok = !at::isFloatingType(common); break;
	case NK_OP_BITWISE_XOR: cpu = "bitwise_xor_cpu", ok = !at::isFloatingType(common); break;
	case NK_OP_BITWISE_NOT: cpu = "bitwise_not_cpu", ok = !at::isFloatingType(common); break;
	default: return;
	}
	TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", cpu, "\" not implemented for '", c10::toString(common), "'");
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
	check_pw_dtype(op, common, in);
	if (kind == Kind::Float && at::isIntegralType(common, true))
		common = c10::typeMetaToScalarType(c10::get_default_dtype());
	at::ScalarType odt = kind == Kind::Bool ? at::kBool : common;
	bool cx = at::isComplexType(common);
	for (const auto &x : in)
		cx |= at::isComplexType(x.scalar_type());
	if (C10_UNLIKELY(cx))
		complex_op_params(name, op, in, odt, ia);
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
	if (pointwise_fast(name, op, in, res, common, odt, *dev, nocast, a, b, ia, ib, cx)) {
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
			it.dtype[k] = (int8_t)nk_dtype_cx(iter.dtype(k), name);
			for (int d = 0; d < it.ndim; d++)
				it.strides[k][d] = iter.strides(k)[d];
		}
		L.a.op = op;
		L.a.a = a, L.a.b = b, L.a.ia = ia, L.a.ib = ib;
		L.cx = cx;
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
	if (alpha.isComplex()) // its imaginary part: complex_alpha
		a = alpha.toComplexDouble().real(), ia = 0;
	else if (alpha.isIntegral(true))
		ia = alpha.toLong(), a = (double)ia;
	else
		a = alpha.toDouble(), ia = (int64_t)a;
}

template <int (*DT)(c10::ScalarType, const char *)>
static void iter_fill(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name)
{
	TORCH_CHECK(iter.ndim() <= NK_MAX_DIMS, name, ": too many dimensions for neuron");
	it.ndim = (int)iter.ndim();
	it.nops = iter.ntensors();
	for (int d = 0; d < it.ndim; d++)
		it.shape[d] = iter.shape()[d];
	for (int k = 0; k < it.nops; k++) {
		it.data[k] = (char *)iter.data_ptr(k);
		it.dtype[k] = (int8_t)DT(iter.dtype(k), name);
		for (int d = 0; d < it.ndim; d++)
			it.strides[k][d] = iter.strides(k)[d];
	}
}

void iter_to_nk(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name)
{
	iter_fill<nk_dtype>(iter, it, name);
}

void iter_to_nk_cx(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name)
{
	iter_fill<nk_dtype_cx>(iter, it, name);
}

// ---- the tables: one line per op ----------------------------------------------------------------
// Each entry names the op once; its out= body is one of the templates below and the registration
// block derives the forms (ops_util.h).  The name the body gets ("aten::neg.out") labels errors.

template <int OP, Kind K> static at::Tensor &pw1(const char *n, at::Tensor &o, const at::Tensor &s)
{
	return o = pointwise(n, OP, {s}, o, K);
}
template <int OP, Kind K> static at::Tensor &pw2(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t)
{
	return o = pointwise(n, OP, {s, t}, o, K);
}
// the Scalar overload of a binary body: the scalar as a wrapped 0-d tensor, as aten does
template <auto B> static at::Tensor &pw_scalar(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &v)
{
	return B(n, o, s, wrap(v));
}
template <int OP, Kind K> static at::Tensor &pw_alpha(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t,
						       const c10::Scalar &al)
{
	check_alpha(s, t, al);
	double a; int64_t ia; alpha_params(al, a, ia);
	return o = pointwise(n, OP, {s, t}, o, K, a, complex_imag(al), ia);
}
template <int OP> static at::Tensor &pw_alpha_scalar(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &v,
						     const c10::Scalar &al)
{
	return pw_alpha<OP, Kind::Same>(n, o, s, wrap(v), al);
}
// ternary with a value (addcmul, addcdiv: s + v * t1 op t2)
template <int OP> static at::Tensor &pw3_value(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t1,
					       const at::Tensor &t2, const c10::Scalar &v)
{
	double a; int64_t ia; alpha_params(v, a, ia);
	return o = pointwise(n, OP, {s, t1, t2}, o, Kind::Same, a, complex_imag(v), ia);
}
// one scalar parameter a (leaky_relu's slope), or two (hardtanh's bounds, softplus' beta/threshold)
template <int OP, Kind K> static at::Tensor &pw1_a(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &a)
{
	return o = pointwise(n, OP, {s}, o, K, a.toDouble());
}
template <int OP, Kind K> static at::Tensor &pw1_ab(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &a,
						    const c10::Scalar &b)
{
	return o = pointwise(n, OP, {s}, o, K, a.toDouble(), b.toDouble());
}
template <int OP, Kind K> static at::Tensor &pw2_ab(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &s,
						    const c10::Scalar &a, const c10::Scalar &b)
{
	return o = pointwise(n, OP, {g, s}, o, K, a.toDouble(), b.toDouble());
}

// (name, nk op, result kind): functional, in-place and out=
#define UNARY_LIST(X)                                               \
	X("neg", NK_OP_NEG, Same) X("abs", NK_OP_ABS, Same) X("sign", NK_OP_SIGN, Same) \
	X("sgn", NK_OP_SIGN, Same) X("round", NK_OP_ROUND, Same)                          \
	X("reciprocal", NK_OP_RECIPROCAL, Float) X("exp", NK_OP_EXP, Float)               \
	X("exp2", NK_OP_EXP2, Float) X("expm1", NK_OP_EXPM1, Float) X("log", NK_OP_LOG, Float) \
	X("log2", NK_OP_LOG2, Float) X("log10", NK_OP_LOG10, Float) X("log1p", NK_OP_LOG1P, Float) \
	X("sqrt", NK_OP_SQRT, Float) X("rsqrt", NK_OP_RSQRT, Float) X("sin", NK_OP_SIN, Float) \
	X("cos", NK_OP_COS, Float) X("tan", NK_OP_TAN, Float) X("asin", NK_OP_ASIN, Float)   \
	X("acos", NK_OP_ACOS, Float) X("atan", NK_OP_ATAN, Float) X("sinh", NK_OP_SINH, Float) \
	X("cosh", NK_OP_COSH, Float) X("tanh", NK_OP_TANH, Float) X("asinh", NK_OP_ASINH, Float) \
	X("acosh", NK_OP_ACOSH, Float) X("atanh", NK_OP_ATANH, Float) X("erf", NK_OP_ERF, Float) \
	X("erfc", NK_OP_ERFC, Float) X("erfinv", NK_OP_ERFINV, Float) X("floor", NK_OP_FLOOR, Same) \
	X("ceil", NK_OP_CEIL, Same) X("trunc", NK_OP_TRUNC, Same) X("frac", NK_OP_FRAC, Same) \
	X("sigmoid", NK_OP_SIGMOID, Float) X("silu", NK_OP_SILU, Float) X("mish", NK_OP_MISH, Float) \
	X("hardsigmoid", NK_OP_HARDSIGMOID, Float) X("hardswish", NK_OP_HARDSWISH, Float) \
	X("bitwise_not", NK_OP_BITWISE_NOT, Same) X("logical_not", NK_OP_LOGICAL_NOT, Bool)
// functional only
#define UNARY_F_LIST(X) X("isnan", NK_OP_ISNAN, Bool) X("isinf", NK_OP_ISINF, Bool) X("isfinite", NK_OP_ISFINITE, Bool)
#define BINARY_F_LIST(X)                                                                                     \
	X("silu_backward", NK_OP_SILU_BACKWARD, Float) X("sigmoid_backward", NK_OP_SIGMOID_BACKWARD, Float)   \
	X("tanh_backward", NK_OP_TANH_BACKWARD, Float) X("hardswish_backward", NK_OP_HARDSWISH_BACKWARD, Float) \
	X("mish_backward", NK_OP_MISH_BACKWARD, Float)
// "x.Tensor", "x_.Tensor", "x.out" (out_name), "x.Scalar", "x_.Scalar"
#define BINARY_LIST(X)                                                                                       \
	X("mul", "mul.out", NK_OP_MUL, Same) X("div", "div.out", NK_OP_DIV, Float)                             \
	X("remainder", "remainder.Tensor_out", NK_OP_REMAINDER, Same) X("fmod", "fmod.Tensor_out", NK_OP_FMOD, Same) \
	X("eq", "eq.Tensor_out", NK_OP_EQ, Bool) X("ne", "ne.Tensor_out", NK_OP_NE, Bool)                      \
	X("lt", "lt.Tensor_out", NK_OP_LT, Bool) X("le", "le.Tensor_out", NK_OP_LE, Bool)                      \
	X("gt", "gt.Tensor_out", NK_OP_GT, Bool) X("ge", "ge.Tensor_out", NK_OP_GE, Bool)                      \
	X("bitwise_and", "", NK_OP_BITWISE_AND, Same) X("bitwise_or", "", NK_OP_BITWISE_OR, Same)            \
	X("bitwise_xor", "", NK_OP_BITWISE_XOR, Same)
// functional and out=
#define BINARY_FO_LIST(X)                                                                                    \
	X("maximum", NK_OP_MAXIMUM, Same) X("minimum", NK_OP_MINIMUM, Same) X("fmax", NK_OP_FMAX, Same)       \
	X("fmin", NK_OP_FMIN, Same) X("atan2", NK_OP_ATAN2, Float) X("hypot", NK_OP_HYPOT, Float)            \
	X("logical_and", NK_OP_LOGICAL_AND, Bool) X("logical_or", NK_OP_LOGICAL_OR, Bool)                    \
	X("logical_xor", NK_OP_LOGICAL_XOR, Bool)

// ---- ops with their own checks or parameters: out= bodies --------------------------------------

static int gelu_mode(c10::string_view approx)
{
	TORCH_CHECK(approx == "none" || approx == "tanh", "gelu: approximate must be 'none' or 'tanh', got ", approx);
	return approx == "tanh" ? 1 : 0;
}
static at::Tensor &gelu_b(const char *n, at::Tensor &o, const at::Tensor &s, c10::string_view ap)
{
	return o = pointwise(n, NK_OP_GELU, {s}, o, Kind::Float, 0, 0, gelu_mode(ap));
}
static at::Tensor &gelu_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &s, c10::string_view ap)
{
	return o = pointwise(n, NK_OP_GELU_BACKWARD, {g, s}, o, Kind::Float, 0, 0, gelu_mode(ap));
}
static at::Tensor &relu_b(const char *n, at::Tensor &o, const at::Tensor &s)
{
	return o = pointwise(n, NK_OP_RELU, {s}, o, Kind::Same);
}
static at::Tensor &threshold_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &x, const c10::Scalar &t)
{
	return o = pointwise(n, NK_OP_THRESHOLD_BACKWARD, {g, x}, o, Kind::Same, t.toDouble());
}

static int div_mode(std::optional<c10::string_view> m)
{
	if (!m.has_value())
		return NK_OP_DIV;
	if (*m == "trunc")
		return NK_OP_DIV_TRUNC;
	TORCH_CHECK(*m == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *m, "'");
	return NK_OP_DIV_FLOOR;
}
static at::Tensor &div_mode_b(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &t, std::optional<c10::string_view> m)
{
	int op = div_mode(m);
	return o = pointwise(n, op, {s, t}, o, op == NK_OP_DIV ? Kind::Float : Kind::Same);
}
static at::Tensor &div_mode_scalar_b(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &v,
				     std::optional<c10::string_view> m)
{
	return div_mode_b(n, o, s, wrap(v), m);
}

// NumPy's rule, as aten's pow.Tensor_Scalar meta checks it (a tensor exponent is not checked)
static void check_pow_scalar(const at::Tensor &s, const c10::Scalar &e)
{
	TORCH_CHECK(!(at::isIntegralType(s.scalar_type(), true) && e.isIntegral(true) && e.toLong() < 0),
		    "Integers to negative integer powers are not allowed.");
}
// aten's pow_tensor_scalar_kernel computes exponents 0.5 and -0.5 as sqrt and rsqrt in float, double
// and bfloat16 (not in half, which calls std::pow): pow(-inf, 0.5) is nan and pow(-0., 0.5) -0. there,
// where C's pow gives inf and +0.
static at::Tensor &pow_ts_b(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &e)
{
	check_pow_scalar(s, e);
	if (e.isFloatingPoint() && (e.toDouble() == 0.5 || e.toDouble() == -0.5)) {
		at::ScalarType t = at::result_type(s, e);
		if (t == at::kFloat || t == at::kDouble || t == at::kBFloat16)
			return o = pointwise(n, e.toDouble() > 0 ? NK_OP_SQRT : NK_OP_RSQRT, {s}, o, Kind::Float);
	}
	return o = pointwise(n, NK_OP_POW, {s, wrap(e)}, o, Kind::Same);
}
static at::Tensor pow_st(const c10::Scalar &b, const at::Tensor &e)
{
	NEURON_TRACK("aten::pow.Scalar");
	return pointwise("aten::pow.Scalar", NK_OP_POW, {wrap(b), e}, {}, Kind::Same);
}

static at::Tensor &where_b(const char *n, at::Tensor &o, const at::Tensor &c, const at::Tensor &s, const at::Tensor &t)
{
	TORCH_CHECK(c.scalar_type() == at::kBool || c.scalar_type() == at::kByte,
		    "where expected condition to be a boolean tensor, but got a tensor with dtype ", c.scalar_type());
	at::Tensor cb = c.scalar_type() == at::kBool ? c : c.to(at::kBool);
	return o = pointwise(n, NK_OP_WHERE, {cb, s, t}, o, Kind::Same, 0, 0, 0, 0, 1u);
}
static at::Tensor &lerp_s_b(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &e, const c10::Scalar &w)
{
	// a complex weight for complex tensors (a real tensor's toDouble() refuses one, as the CPU's cast does)
	bool cw = w.isComplex() && s.is_complex();
	return o = pointwise(n, NK_OP_LERP_SCALAR, {s, e}, o, Kind::Same, cw ? w.toComplexDouble().real() : w.toDouble(),
			     cw ? complex_imag(w) : 0.0);
}
static at::Tensor &lerp_t_b(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &e, const at::Tensor &w)
{
	return o = pointwise(n, NK_OP_LERP, {s, e, w}, o, Kind::Same);
}

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
	at::native::ResultTypeState st{};
	st = at::native::update_result_type_state(s, st);
	if (lo.has_value())
		st = at::native::update_result_type_state(*lo, st);
	if (hi.has_value())
		st = at::native::update_result_type_state(*hi, st);
	at::ScalarType t = at::native::result_type(st);
	return t == s.scalar_type() ? s : s.to(t);
}
static at::Tensor &clamp_b(const char *n, at::Tensor &o, const at::Tensor &s, const std::optional<c10::Scalar> &lo,
			   const std::optional<c10::Scalar> &hi)
{
	double a, b; int64_t ia; clamp_params(lo, hi, a, b, ia);
	at::Tensor x = clamp_input(s, lo, hi);
	if (o.is_same(s)) // in place: self is never promoted
		TORCH_CHECK(x.scalar_type() == s.scalar_type(), "result type ", x.scalar_type(), " can't be cast to the desired output type ",
			    s.scalar_type());
	return o = pointwise(n, NK_OP_CLAMP_SCALAR, {o.is_same(s) ? s : x}, o, Kind::Same, a, b, ia);
}
static at::Tensor clamp_tf(const at::Tensor &s, const std::optional<at::Tensor> &lo, const std::optional<at::Tensor> &hi)
{
	NEURON_TRACK("aten::clamp.Tensor");
	bool hl = lo.has_value() && lo->defined(), hh = hi.has_value() && hi->defined();
	TORCH_CHECK(hl || hh, "torch.clamp: At least one of 'min' or 'max' must not be None");
	at::Tensor l = hl ? *lo : s, h = hh ? *hi : s;
	return pointwise("aten::clamp", NK_OP_CLAMP_TENSOR, {s, l, h}, {}, Kind::Same, 0, 0, (hl ? 1 : 0) | (hh ? 2 : 0));
}
static at::Tensor &clamp_to(const at::Tensor &s, const std::optional<at::Tensor> &lo, const std::optional<at::Tensor> &hi, at::Tensor &o)
{
	NEURON_TRACK("aten::clamp.Tensor_out");
	return into(o, at::clamp(s, lo, hi), OutRule::Cast);
}
// clamp_min / clamp_max with a scalar bound: the native clamp (which applies aten's promotion rules);
// with a tensor bound: the clamp kernel with one side (ia: 1 = min, 2 = max)
template <bool MIN> static at::Tensor &clamp_side_b(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &v)
{
	std::optional<c10::Scalar> lo = MIN ? std::optional<c10::Scalar>(v) : std::nullopt, hi = MIN ? std::nullopt : std::optional<c10::Scalar>(v);
	return clamp_b(n, o, s, lo, hi);
}
template <int IA> static at::Tensor &clamp_side_t_b(const char *n, at::Tensor &o, const at::Tensor &s, const at::Tensor &v)
{
	return o = pointwise(n, NK_OP_CLAMP_TENSOR, {s, v}, o, Kind::Same, 0, 0, IA);
}

// activations: the op's scalar parameters go to the kernel (nk.h documents each)
static at::Tensor &elu_b(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale,
			 const c10::Scalar &input_scale)
{
	if (input_scale.toDouble() != 1.0) { // celu: the kernel has no input scale
		if (!o.defined())
			return o = at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu>::call(s, alpha, scale, input_scale);
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_out>::call(s, alpha, scale, input_scale, o);
	}
	return o = pointwise(n, NK_OP_ELU, {s}, o, Kind::Float, alpha.toDouble(), scale.toDouble());
}
static at::Tensor &elu_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const c10::Scalar &alpha, const c10::Scalar &scale,
			    const c10::Scalar &input_scale, bool is_result, const at::Tensor &x)
{
	if (input_scale.toDouble() != 1.0) {
		if (!o.defined())
			return o = at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward>::call(g, alpha, scale, input_scale, is_result, x);
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward_grad_input>::call(g, alpha, scale, input_scale,
													  is_result, x, o);
	}
	return o = pointwise(n, NK_OP_ELU_BACKWARD, {g, x}, o, Kind::Float, alpha.toDouble(), scale.toDouble(), is_result ? 1 : 0);
}
static at::Tensor &leaky_relu_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &s, const c10::Scalar &a, bool)
{
	return o = pointwise(n, NK_OP_LEAKY_RELU_BACKWARD, {g, s}, o, Kind::Same, a.toDouble());
}

// threshold(x, th, v) = x <= th ? v : x
static at::Tensor &threshold_b(const char *n, at::Tensor &o, const at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v)
{
	at::Tensor m = pointwise(n, NK_OP_LE, {s, wrap(th)}, {}, Kind::Bool);
	return o = pointwise(n, NK_OP_WHERE, {m, cpu_scalar(v, s.scalar_type()), s}, o, Kind::Same, 0, 0, 0, 0, 1u);
}
template <bool POS> static at::Tensor &isinf_side_b(const char *n, at::Tensor &o, const at::Tensor &s)
{
	double inf = std::numeric_limits<double>::infinity();
	return o = pointwise(n, NK_OP_EQ, {s, wrap(POS ? inf : -inf)}, o, Kind::Bool);
}
static at::Tensor &signbit_b(const char *n, at::Tensor &o, const at::Tensor &s)
{
	if (s.scalar_type() == at::kBool) {
		at::Tensor z = at::zeros_like(s, s.options().dtype(at::kBool));
		return o.defined() ? into(o, z) : (o = z);
	}
	if (!at::isFloatingType(s.scalar_type()))
		return o = pointwise(n, NK_OP_LT, {s, wrap(0)}, o, Kind::Bool);
	// copysign(1, x) < 0 is true exactly when x's sign bit is set (-0.0 and negative NaN included)
	at::Tensor c = pointwise(n, NK_OP_COPYSIGN, {cpu_scalar(1, s.scalar_type()), s}, {}, Kind::Same);
	return o = pointwise(n, NK_OP_LT, {c, wrap(0)}, o, Kind::Bool);
}
static at::Tensor &nan_to_num_b(const char *n, at::Tensor &o, const at::Tensor &s, std::optional<double> nan, std::optional<double> posinf,
				std::optional<double> neginf)
{
	if (!at::isFloatingType(s.scalar_type()))
		return o.defined() ? into(o, s) : (o = s.clone());
	double big = s.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
		   : s.scalar_type() == at::kFloat ? std::numeric_limits<float>::max()
		   : s.scalar_type() == at::kHalf ? 65504.0 : 3.3895313892515355e38;
	double pi = posinf.value_or(big), ni = neginf.value_or(-big);
	if (ni != -pi) { // the kernel maps -inf to -posinf
		if (!o.defined())
			o = at::empty_like(s);
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::nan_to_num_out>::call(s, nan, posinf, neginf, o);
	}
	return o = pointwise(n, NK_OP_NAN_TO_NUM, {s}, o, Kind::Same, nan.value_or(0.0), pi);
}
static at::Tensor rsub_t(const at::Tensor &s, const at::Tensor &other, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::rsub.Tensor");
	TORCH_CHECK(s.scalar_type() != at::kBool || other.scalar_type() != at::kBool,
		    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
	if (!alpha.isIntegral(false))
		at::native::alpha_check(at::result_type(s, other), alpha);
	double a; int64_t ia; alpha_params(alpha, a, ia);
	return pointwise("aten::rsub", NK_OP_SUB, {other, s}, {}, Kind::Same, a, complex_imag(alpha), ia);
}
static at::Tensor rsub_s(const at::Tensor &s, const c10::Scalar &other, const c10::Scalar &alpha) { return rsub_t(s, wrap(other), alpha); }

// logit(x) = log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given (aten's order of operations)
static at::Tensor &logit_b(const char *n, at::Tensor &o, const at::Tensor &x, std::optional<double> eps)
{
	at::Tensor z = x.is_floating_point() ? x : x.to(c10::typeMetaToScalarType(c10::get_default_dtype()));
	if (eps.has_value() && *eps >= 0)
		z = at::clamp(z, *eps, 1.0 - *eps);
	at::Tensor r = (z / (1 - z)).log();
	return !o.defined() ? (o = r) : o.is_same(x) ? into_self(o, r) : into(o, r, OutRule::Cast);
}

// ---- logaddexp, logaddexp2, round(decimals): aten's formulas from native elementwise ops ----------

// A composite result r into the body's out (functional: r itself).
static at::Tensor &result(at::Tensor &o, const at::Tensor &self, const at::Tensor &r, OutRule rule)
{
	return !o.defined() ? (o = r) : o.is_same(self) ? into_self(o, r) : into(o, r, rule);
}
// logaddexp: a == b == +-inf gives a; else max(a, b) + log1p(exp(-|a - b|))
template <bool BASE2> static at::Tensor &logaddexp_b(const char *n, at::Tensor &o, const at::Tensor &a, const at::Tensor &b)
{
	at::Tensor m = at::maximum(a, b), d = (a - b).abs();
	at::Tensor r = BASE2 ? m + at::log1p(at::exp2(-d)) * (1.0 / std::log(2.0)) : m + at::log1p(at::exp(-d));
	return result(o, a, at::where(at::isinf(a).logical_and(a == b), a.to(r.scalar_type()), r), OutRule::Cast);
}
// round(x, decimals): decimals >= 0: nearbyint(x * 10^d) / 10^d, else nearbyint(x / 10^-d) * 10^-d,
// with 10^|d| in the dtype
static at::Tensor &round_dec_b(const char *n, at::Tensor &o, const at::Tensor &x, int64_t decimals)
{
	at::Tensor r;
	if (decimals == 0 || !at::isFloatingType(x.scalar_type())) {
		r = pointwise(n, NK_OP_ROUND, {x}, {}, Kind::Same);
	} else {
		at::Tensor p = cpu_scalar(std::pow(10.0, (double)std::llabs(decimals)), x.scalar_type());
		int up = decimals > 0 ? NK_OP_MUL : NK_OP_DIV, down = decimals > 0 ? NK_OP_DIV : NK_OP_MUL;
		r = pointwise(n, NK_OP_ROUND, {pointwise(n, up, {x, p}, {}, Kind::Same)}, {}, Kind::Same);
		r = pointwise(n, down, {r, p}, {}, Kind::Same);
	}
	return result(o, x, r, OutRule::Exact);
}

// ---- small activations (act.c) ---------------------------------------------------------------------

// out = op(inputs) on an nk_iter_t: every input is cast to the result dtype (the promoted float dtype);
// `out` may be undefined (allocated) or a view (written through its strides).
static at::Tensor act(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out, double a = 0, int64_t ia = 0)
{
	at::native::ResultTypeState st{};
	for (const auto &x : inputs)
		st = at::native::update_result_type_state(x, st);
	at::ScalarType dt = at::native::result_type(st);
	const at::Tensor &first = *inputs.begin();
	TORCH_CHECK(at::isFloatingType(dt) && !at::isFloat8Type(dt), name, ": expected floating point inputs (float32, float64, bfloat16, float16), got ", dt);
	c10::DeviceGuard g(first.device());
	at::Tensor res = out.defined() && out.scalar_type() == dt ? out : at::Tensor();
	at::TensorIteratorConfig cfg;
	cfg.add_output(res).check_all_same_dtype(false).declare_static_dtype_and_device(dt, first.device());
	std::vector<at::Tensor> cast;
	for (const auto &x : inputs)
		cast.push_back(x.scalar_type() == dt ? x : x.to(dt));
	for (auto &x : cast)
		cfg.add_const_input(x);
	auto iter = cfg.build();
	if (iter.numel() > 0) {
		nk_act_args_t A{};
		nk_iter_t &it = A.it;
		iter_to_nk(iter, it, name);
		A.op = op, A.a = a, A.ia = ia;
		launch(queue_for(first), nk_act_run, A, name);
	}
	res = iter.output(0);
	if (out.defined() && !out.is_same(res))
		return into(out, res, OutRule::Cast);
	return res;
}

static void check_lambd(const char *op, const c10::Scalar &l)
{
	TORCH_CHECK(l.toDouble() >= 0, op, ": lambda must be greater or equal to 0, but found to be ", l.toDouble(), ".");
}
// hardshrink / softshrink (LAMBD: softshrink checks its lambda) and their backwards
template <int OP, bool LAMBD> static at::Tensor &shrink_b(const char *n, at::Tensor &o, const at::Tensor &x, const c10::Scalar &l)
{
	if (LAMBD)
		check_lambd("softshrink", l);
	return o = act(n, OP, {x}, o, l.toDouble());
}
template <int OP> static at::Tensor &shrink_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &x, const c10::Scalar &l)
{
	return o = act(n, OP, {g, x}, o, l.toDouble());
}
static at::Tensor &logit_bw_b(const char *n, at::Tensor &o, const at::Tensor &g, const at::Tensor &x, std::optional<double> eps)
{
	return o = act(n, NK_ACT_LOGIT_BWD, {g, x}, o, eps.value_or(-1.0), eps.has_value() && *eps >= 0 ? 1 : 0);
}

static int64_t glu_dim(const at::Tensor &x, int64_t dim)
{
	TORCH_CHECK(x.dim() > 0, "glu does not support scalars because halving size must be even");
	int64_t d = at::maybe_wrap_dim(dim, x.dim());
	TORCH_CHECK(x.size(d) % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", x.size(d));
	return d;
}
static at::Tensor &glu_b(const char *n, at::Tensor &o, const at::Tensor &x, int64_t dim)
{
	int64_t d = glu_dim(x, dim), h = x.size(d) / 2;
	return o = act(n, NK_ACT_GLU, {x.narrow(d, 0, h), x.narrow(d, h, h)}, o);
}
static at::Tensor &glu_bw_b(const char *n, at::Tensor &gi, const at::Tensor &g, const at::Tensor &x, int64_t dim)
{
	int64_t d = glu_dim(x, dim), h = x.size(d) / 2;
	at::Tensor a = x.narrow(d, 0, h), b = x.narrow(d, h, h);
	TORCH_CHECK(g.sizes() == a.sizes(), "glu_backward: grad_output of size ", g.sizes(), " does not match half of the input ", x.sizes());
	if (!gi.defined())
		gi = at::empty_like(x, at::MemoryFormat::Contiguous);
	resize_out(gi, x.sizes(), x.options());
	at::Tensor ga = gi.narrow(d, 0, h), gb = gi.narrow(d, h, h);
	act("aten::glu_backward", NK_ACT_GLU_BWD_A, {g, a, b}, ga);
	act("aten::glu_backward", NK_ACT_GLU_BWD_B, {g, a, b}, gb);
	return gi;
}
static at::Tensor prelu_f(const at::Tensor &x, const at::Tensor &w)
{
	NEURON_TRACK("aten::_prelu_kernel");
	return act("aten::_prelu_kernel", NK_ACT_PRELU, {x, w}, {});
}
static std::tuple<at::Tensor, at::Tensor> prelu_bw(const at::Tensor &g, const at::Tensor &x, const at::Tensor &w)
{
	NEURON_TRACK("aten::_prelu_kernel_backward");
	at::Tensor gx = act("aten::_prelu_kernel_backward", NK_ACT_PRELU_BWD_X, {g, x, w}, {});
	at::Tensor gw = act("aten::_prelu_kernel_backward", NK_ACT_PRELU_BWD_W, {g, x}, {});
	return {gx, gw};
}

// rrelu: training draws the slope of each non-positive element from the device Philox generator (act.c);
// evaluation is leaky_relu with the mean slope, as aten.
static at::Tensor rrelu_into(const at::Tensor &x, at::Tensor &noise, const c10::Scalar &lower, const c10::Scalar &upper, bool training,
			     const std::optional<at::Generator> &gen, const char *name)
{
	double lo = lower.toDouble(), hi = upper.toDouble();
	TORCH_CHECK(hi >= lo, "Lower bound should be less than or equal to the upper bound");
	check_float(name, x, "input");
	if (!training)
		return at::leaky_relu(x, (lo + hi) / 2);
	TORCH_CHECK(noise.sizes() == x.sizes(), name, ": noise of size ", noise.sizes(), " must have the shape of the input ", x.sizes());
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous(), y = at::empty_like(xc);
	bool direct = noise.is_contiguous() && noise.scalar_type() == x.scalar_type();
	at::Tensor nz = direct ? noise : at::empty_like(xc);
	if (xc.numel()) {
		nk_rrelu_args_t a{};
		auto so = philox_args(gen, x.device().index(), xc.numel());
		a.dtype = nk_dtype(x.scalar_type(), name);
		a.n = xc.numel(), a.lower = lo, a.upper = hi, a.seed = so.first, a.offset = so.second;
		a.x = xc.const_data_ptr(), a.noise = nz.data_ptr(), a.y = y.data_ptr();
		launch(queue_for(x), nk_rrelu_run, a, name);
	}
	if (!direct)
		noise.copy_(nz);
	return y;
}
static at::Tensor rrelu_f(const at::Tensor &x, at::Tensor &noise, const c10::Scalar &lo, const c10::Scalar &hi, bool training, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::rrelu_with_noise");
	return rrelu_into(x, noise, lo, hi, training, gen, "rrelu_with_noise");
}
static at::Tensor &rrelu_o(const at::Tensor &x, at::Tensor &noise, const c10::Scalar &lo, const c10::Scalar &hi, bool training, std::optional<at::Generator> gen,
			   at::Tensor &out)
{
	NEURON_TRACK("aten::rrelu_with_noise.out");
	copy_out(out, rrelu_into(x, noise, lo, hi, training, gen, "rrelu_with_noise"));
	return out;
}
static at::Tensor &rrelu_i(at::Tensor &x, at::Tensor &noise, const c10::Scalar &lo, const c10::Scalar &hi, bool training, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::rrelu_with_noise_");
	return into_self(x, rrelu_into(x, noise, lo, hi, training, gen, "rrelu_with_noise_"));
}


} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
#define REG_UNARY(name, OP, K) NEURON_FOI(m, name, (pw1<OP, Kind::K>));
	UNARY_LIST(REG_UNARY)
#define REG_UNARY_F(name, OP, K) NEURON_F(m, name, (pw1<OP, Kind::K>));
	UNARY_F_LIST(REG_UNARY_F)
#define REG_BINARY_F(name, OP, K) NEURON_F(m, name, (pw2<OP, Kind::K>));
	BINARY_F_LIST(REG_BINARY_F)
#define REG_BINARY(name, out, OP, K)                                              \
	NEURON_F(m, name ".Tensor", (pw2<OP, Kind::K>));                          \
	NEURON_I(m, name "_.Tensor", (pw2<OP, Kind::K>));                         \
	NEURON_F(m, name ".Scalar", (pw_scalar<&pw2<OP, Kind::K>>));              \
	NEURON_I(m, name "_.Scalar", (pw_scalar<&pw2<OP, Kind::K>>));             \
	if (sizeof(out) > 1)                                                      \
		NEURON_O(m, out, (pw2<OP, Kind::K>));
	BINARY_LIST(REG_BINARY)
#define REG_COMPARE_SO(name, OP) NEURON_O(m, name ".Scalar_out", (pw_scalar<&pw2<OP, Kind::Bool>>));
	REG_COMPARE_SO("eq", NK_OP_EQ) REG_COMPARE_SO("ne", NK_OP_NE) REG_COMPARE_SO("lt", NK_OP_LT)
	REG_COMPARE_SO("le", NK_OP_LE) REG_COMPARE_SO("gt", NK_OP_GT) REG_COMPARE_SO("ge", NK_OP_GE)
#define REG_BINARY_FO(name, OP, K) NEURON_FO(m, name, (pw2<OP, Kind::K>));
	BINARY_FO_LIST(REG_BINARY_FO)
	NEURON_F(m, "floor_divide", (pw2<NK_OP_DIV_FLOOR, Kind::Same>));
	NEURON_O(m, "floor_divide.out", (pw2<NK_OP_DIV_FLOOR, Kind::Same>));
	NEURON_I(m, "floor_divide_.Tensor", (pw2<NK_OP_DIV_FLOOR, Kind::Same>));
	NEURON_F(m, "floor_divide.Scalar", (pw_scalar<&pw2<NK_OP_DIV_FLOOR, Kind::Same>>));
	NEURON_I(m, "floor_divide_.Scalar", (pw_scalar<&pw2<NK_OP_DIV_FLOOR, Kind::Same>>));
#define REG_ALPHA(name, OP)                                                       \
	NEURON_F(m, name ".Tensor", (pw_alpha<OP, Kind::Same>));                  \
	NEURON_I(m, name "_.Tensor", (pw_alpha<OP, Kind::Same>));                 \
	NEURON_O(m, name ".out", (pw_alpha<OP, Kind::Same>));                     \
	NEURON_F(m, name ".Scalar", pw_alpha_scalar<OP>);                         \
	NEURON_I(m, name "_.Scalar", pw_alpha_scalar<OP>);
	REG_ALPHA("add", NK_OP_ADD)
	REG_ALPHA("sub", NK_OP_SUB)
	NEURON_FOI(m, "addcmul", pw3_value<NK_OP_ADDCMUL>);
	NEURON_FOI(m, "addcdiv", pw3_value<NK_OP_ADDCDIV>);
	NEURON_F(m, "div.Tensor_mode", div_mode_b);
	NEURON_I(m, "div_.Tensor_mode", div_mode_b);
	NEURON_O(m, "div.out_mode", div_mode_b);
	NEURON_F(m, "div.Scalar_mode", div_mode_scalar_b);
	NEURON_I(m, "div_.Scalar_mode", div_mode_scalar_b);
	NEURON_F(m, "pow.Tensor_Tensor", (pw2<NK_OP_POW, Kind::Same>));
	NEURON_O(m, "pow.Tensor_Tensor_out", (pw2<NK_OP_POW, Kind::Same>));
	NEURON_I(m, "pow_.Tensor", (pw2<NK_OP_POW, Kind::Same>));
	NEURON_F(m, "pow.Tensor_Scalar", pow_ts_b);
	NEURON_O(m, "pow.Tensor_Scalar_out", pow_ts_b);
	NEURON_I(m, "pow_.Scalar", pow_ts_b);
	NEURON_IMPL(m, "pow.Scalar", pow_st);
	NEURON_F(m, "where.self", where_b);
	NEURON_O(m, "where.self_out", where_b);
	NEURON_F(m, "lerp.Scalar", lerp_s_b);
	NEURON_I(m, "lerp_.Scalar", lerp_s_b);
	NEURON_O(m, "lerp.Scalar_out", lerp_s_b);
	NEURON_F(m, "lerp.Tensor", lerp_t_b);
	NEURON_I(m, "lerp_.Tensor", lerp_t_b);
	NEURON_FOI(m, "clamp", clamp_b);
	NEURON_IMPL(m, "clamp.Tensor", clamp_tf);
	NEURON_IMPL(m, "clamp.Tensor_out", clamp_to);
	NEURON_FOI(m, "clamp_min", clamp_side_b<true>);
	NEURON_FOI(m, "clamp_max", clamp_side_b<false>);
	NEURON_F(m, "clamp_min.Tensor", clamp_side_t_b<1>);
	NEURON_O(m, "clamp_min.Tensor_out", clamp_side_t_b<1>);
	NEURON_I(m, "clamp_min_.Tensor", clamp_side_t_b<1>);
	NEURON_F(m, "clamp_max.Tensor", clamp_side_t_b<2>);
	NEURON_O(m, "clamp_max.Tensor_out", clamp_side_t_b<2>);
	NEURON_I(m, "clamp_max_.Tensor", clamp_side_t_b<2>);
	NEURON_F(m, "relu", relu_b);
	NEURON_I(m, "relu_", relu_b);
	NEURON_FOI(m, "gelu", gelu_b);
	NEURON_F(m, "gelu_backward", gelu_bw_b);
	NEURON_O(m, "gelu_backward.grad_input", gelu_bw_b);
	NEURON_F(m, "threshold_backward", threshold_bw_b);
	NEURON_FOI(m, "elu", elu_b);
	NEURON_F(m, "elu_backward", elu_bw_b);
	NEURON_O(m, "elu_backward.grad_input", elu_bw_b);
	NEURON_FO(m, "softplus", (pw1_ab<NK_OP_SOFTPLUS, Kind::Float>));
	NEURON_F(m, "softplus_backward", (pw2_ab<NK_OP_SOFTPLUS_BACKWARD, Kind::Float>));
	NEURON_O(m, "softplus_backward.grad_input", (pw2_ab<NK_OP_SOFTPLUS_BACKWARD, Kind::Float>));
	NEURON_FOI(m, "hardtanh", (pw1_ab<NK_OP_HARDTANH, Kind::Same>));
	NEURON_F(m, "hardtanh_backward", (pw2_ab<NK_OP_HARDTANH_BACKWARD, Kind::Same>));
	NEURON_O(m, "hardtanh_backward.grad_input", (pw2_ab<NK_OP_HARDTANH_BACKWARD, Kind::Same>));
	NEURON_FOI(m, "leaky_relu", (pw1_a<NK_OP_LEAKY_RELU, Kind::Same>));
	NEURON_F(m, "leaky_relu_backward", leaky_relu_bw_b);
	NEURON_O(m, "leaky_relu_backward.grad_input", leaky_relu_bw_b);
	NEURON_O(m, "hardsigmoid_backward.grad_input", (pw2<NK_OP_HARDSIGMOID_BACKWARD, Kind::Float>));
	NEURON_F(m, "hardsigmoid_backward", (pw2<NK_OP_HARDSIGMOID_BACKWARD, Kind::Float>));
	NEURON_FOI(m, "threshold", threshold_b);
	NEURON_FO(m, "isposinf", isinf_side_b<true>);
	NEURON_FO(m, "isneginf", isinf_side_b<false>);
	NEURON_FO(m, "signbit", signbit_b);
	NEURON_FOI(m, "nan_to_num", nan_to_num_b);
	NEURON_IMPL(m, "rsub.Tensor", rsub_t);
	NEURON_IMPL(m, "rsub.Scalar", rsub_s);
	NEURON_FOI(m, "logit", logit_b);
	NEURON_FO(m, "logaddexp", logaddexp_b<false>);
	NEURON_FO(m, "logaddexp2", logaddexp_b<true>);
	NEURON_F(m, "round.decimals", round_dec_b);
	NEURON_O(m, "round.decimals_out", round_dec_b);
	NEURON_I(m, "round_.decimals", round_dec_b);
	NEURON_FO(m, "hardshrink", (shrink_b<NK_ACT_HARDSHRINK, false>));
	NEURON_FO(m, "softshrink", (shrink_b<NK_ACT_SOFTSHRINK, true>));
	NEURON_F(m, "hardshrink_backward", shrink_bw_b<NK_ACT_HARDSHRINK_BWD>);
	NEURON_O(m, "hardshrink_backward.grad_input", shrink_bw_b<NK_ACT_HARDSHRINK_BWD>);
	NEURON_F(m, "softshrink_backward", shrink_bw_b<NK_ACT_SOFTSHRINK_BWD>);
	NEURON_O(m, "softshrink_backward.grad_input", shrink_bw_b<NK_ACT_SOFTSHRINK_BWD>);
	NEURON_F(m, "logit_backward", logit_bw_b);
	NEURON_O(m, "logit_backward.grad_input", logit_bw_b);
	NEURON_FO(m, "glu", glu_b);
	NEURON_F(m, "glu_backward", glu_bw_b);
	NEURON_O(m, "glu_backward.grad_input", glu_bw_b);
	NEURON_IMPL(m, "_prelu_kernel", prelu_f);
	NEURON_IMPL(m, "_prelu_kernel_backward", prelu_bw);
	NEURON_IMPL(m, "rrelu_with_noise", rrelu_f);
	NEURON_IMPL(m, "rrelu_with_noise.out", rrelu_o);
	NEURON_IMPL(m, "rrelu_with_noise_", rrelu_i);
}
