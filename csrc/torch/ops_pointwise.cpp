// ops_pointwise.cpp - elementwise ops: arithmetic, comparisons, activations (and their backwards),
// special functions.  ATen's TensorIterator computes broadcasting, output allocation and
// memory-overlap checks; type promotion follows at::result_type; the C kernels (nk_pointwise_run,
// act.c, special.c) get the operands' descriptors and run on the current queue.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

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
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/all.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/exp2.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/isinf.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/logspace.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/nan_to_num_ops.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sign.h>
#include <ATen/ops/std.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/var.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

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

// ---- pointwise ops on existing nk_pointwise ops ----------------------------------------------------

static at::Tensor sgn_f(const at::Tensor &s) { NEURON_TRACK("aten::sgn"); return PW("sgn", NK_OP_SIGN, {s}, {}, Same); }
static at::Tensor &sgn_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::sgn.out"); PW("sgn.out", NK_OP_SIGN, {s}, o, Same); return o; }
static at::Tensor &sgn_i(at::Tensor &s) { NEURON_TRACK("aten::sgn_"); PW("sgn_", NK_OP_SIGN, {s}, s, Same); return s; }

// clamp_min / clamp_max through the native clamp (which applies aten's promotion rules)
static at::Tensor clamp_min_f(const at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_min"); return at::clamp(s, v, std::nullopt); }
static at::Tensor &clamp_min_o(const at::Tensor &s, const c10::Scalar &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_min.out"); return at::clamp_out(o, s, v, std::nullopt); }
static at::Tensor &clamp_min_i(at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_min_"); return at::clamp_(s, v, std::nullopt); }
static at::Tensor clamp_max_f(const at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_max"); return at::clamp(s, std::nullopt, v); }
static at::Tensor &clamp_max_o(const at::Tensor &s, const c10::Scalar &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_max.out"); return at::clamp_out(o, s, std::nullopt, v); }
static at::Tensor &clamp_max_i(at::Tensor &s, const c10::Scalar &v) { NEURON_TRACK("aten::clamp_max_"); return at::clamp_(s, std::nullopt, v); }
static at::Tensor clamp_min_t(const at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_min.Tensor"); return PW("clamp_min", NK_OP_CLAMP_TENSOR, {s, v}, {}, Same, 0, 0, 1); }
static at::Tensor &clamp_min_to(const at::Tensor &s, const at::Tensor &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_min.Tensor_out"); PW("clamp_min.out", NK_OP_CLAMP_TENSOR, {s, v}, o, Same, 0, 0, 1); return o; }
static at::Tensor &clamp_min_ti(at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_min_.Tensor"); PW("clamp_min_", NK_OP_CLAMP_TENSOR, {s, v}, s, Same, 0, 0, 1); return s; }
static at::Tensor clamp_max_t(const at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_max.Tensor"); return PW("clamp_max", NK_OP_CLAMP_TENSOR, {s, v}, {}, Same, 0, 0, 2); }
static at::Tensor &clamp_max_to(const at::Tensor &s, const at::Tensor &v, at::Tensor &o) { NEURON_TRACK("aten::clamp_max.Tensor_out"); PW("clamp_max.out", NK_OP_CLAMP_TENSOR, {s, v}, o, Same, 0, 0, 2); return o; }
static at::Tensor &clamp_max_ti(at::Tensor &s, const at::Tensor &v) { NEURON_TRACK("aten::clamp_max_.Tensor"); PW("clamp_max_", NK_OP_CLAMP_TENSOR, {s, v}, s, Same, 0, 0, 2); return s; }
static at::Tensor &clamp_to(const at::Tensor &s, const std::optional<at::Tensor> &lo, const std::optional<at::Tensor> &hi, at::Tensor &o)
{
	NEURON_TRACK("aten::clamp.Tensor_out");
	return into(o, at::clamp(s, lo, hi), OutRule::Cast);
}

// activations: the op's scalar parameters go to the kernel (nk.h documents each)
static at::Tensor &elu_o(const at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale, at::Tensor &o)
{
	NEURON_TRACK("aten::elu.out");
	if (input_scale.toDouble() != 1.0) // celu: the kernel has no input scale
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_out>::call(s, alpha, scale, input_scale, o);
	PW("elu.out", NK_OP_ELU, {s}, o, Float, alpha.toDouble(), scale.toDouble());
	return o;
}
static at::Tensor elu_f(const at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale)
{
	NEURON_TRACK("aten::elu");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu>::call(s, alpha, scale, input_scale);
	return PW("elu", NK_OP_ELU, {s}, {}, Float, alpha.toDouble(), scale.toDouble());
}
static at::Tensor &elu_i(at::Tensor &s, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale)
{
	NEURON_TRACK("aten::elu_");
	return elu_o(s, alpha, scale, input_scale, s);
}
static at::Tensor &elu_bw_o(const at::Tensor &g, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale,
			    bool is_result, const at::Tensor &x, at::Tensor &o)
{
	NEURON_TRACK("aten::elu_backward.grad_input");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward_grad_input>::call(g, alpha, scale, input_scale, is_result, x, o);
	PW("elu_backward", NK_OP_ELU_BACKWARD, {g, x}, o, Float, alpha.toDouble(), scale.toDouble(), is_result ? 1 : 0);
	return o;
}
static at::Tensor elu_bw(const at::Tensor &g, const c10::Scalar &alpha, const c10::Scalar &scale, const c10::Scalar &input_scale,
			 bool is_result, const at::Tensor &x)
{
	NEURON_TRACK("aten::elu_backward");
	if (input_scale.toDouble() != 1.0)
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::elu_backward>::call(g, alpha, scale, input_scale, is_result, x);
	return PW("elu_backward", NK_OP_ELU_BACKWARD, {g, x}, {}, Float, alpha.toDouble(), scale.toDouble(), is_result ? 1 : 0);
}
static at::Tensor softplus_f(const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th) { NEURON_TRACK("aten::softplus"); return PW("softplus", NK_OP_SOFTPLUS, {s}, {}, Float, beta.toDouble(), th.toDouble()); }
static at::Tensor &softplus_o(const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th, at::Tensor &o) { NEURON_TRACK("aten::softplus.out"); PW("softplus.out", NK_OP_SOFTPLUS, {s}, o, Float, beta.toDouble(), th.toDouble()); return o; }
static at::Tensor softplus_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th) { NEURON_TRACK("aten::softplus_backward"); return PW("softplus_backward", NK_OP_SOFTPLUS_BACKWARD, {g, s}, {}, Float, beta.toDouble(), th.toDouble()); }
static at::Tensor &softplus_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &beta, const c10::Scalar &th, at::Tensor &o) { NEURON_TRACK("aten::softplus_backward.grad_input"); PW("softplus_backward", NK_OP_SOFTPLUS_BACKWARD, {g, s}, o, Float, beta.toDouble(), th.toDouble()); return o; }
static at::Tensor hardtanh_f(const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh"); return PW("hardtanh", NK_OP_HARDTANH, {s}, {}, Same, lo.toDouble(), hi.toDouble()); }
static at::Tensor &hardtanh_o(const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi, at::Tensor &o) { NEURON_TRACK("aten::hardtanh.out"); PW("hardtanh.out", NK_OP_HARDTANH, {s}, o, Same, lo.toDouble(), hi.toDouble()); return o; }
static at::Tensor &hardtanh_i(at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh_"); PW("hardtanh_", NK_OP_HARDTANH, {s}, s, Same, lo.toDouble(), hi.toDouble()); return s; }
static at::Tensor hardtanh_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi) { NEURON_TRACK("aten::hardtanh_backward"); return PW("hardtanh_backward", NK_OP_HARDTANH_BACKWARD, {g, s}, {}, Same, lo.toDouble(), hi.toDouble()); }
static at::Tensor &hardtanh_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &lo, const c10::Scalar &hi, at::Tensor &o) { NEURON_TRACK("aten::hardtanh_backward.grad_input"); PW("hardtanh_backward", NK_OP_HARDTANH_BACKWARD, {g, s}, o, Same, lo.toDouble(), hi.toDouble()); return o; }
static at::Tensor leaky_relu_f(const at::Tensor &s, const c10::Scalar &a) { NEURON_TRACK("aten::leaky_relu"); return PW("leaky_relu", NK_OP_LEAKY_RELU, {s}, {}, Same, a.toDouble()); }
static at::Tensor &leaky_relu_o(const at::Tensor &s, const c10::Scalar &a, at::Tensor &o) { NEURON_TRACK("aten::leaky_relu.out"); PW("leaky_relu.out", NK_OP_LEAKY_RELU, {s}, o, Same, a.toDouble()); return o; }
static at::Tensor &leaky_relu_i(at::Tensor &s, const c10::Scalar &a) { NEURON_TRACK("aten::leaky_relu_"); PW("leaky_relu_", NK_OP_LEAKY_RELU, {s}, s, Same, a.toDouble()); return s; }
static at::Tensor leaky_relu_bw(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &a, bool is_result) { NEURON_TRACK("aten::leaky_relu_backward"); return PW("leaky_relu_backward", NK_OP_LEAKY_RELU_BACKWARD, {g, s}, {}, Same, a.toDouble()); }
static at::Tensor &leaky_relu_bw_o(const at::Tensor &g, const at::Tensor &s, const c10::Scalar &a, bool is_result, at::Tensor &o) { NEURON_TRACK("aten::leaky_relu_backward.grad_input"); PW("leaky_relu_backward", NK_OP_LEAKY_RELU_BACKWARD, {g, s}, o, Same, a.toDouble()); return o; }
static at::Tensor hardswish_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::hardswish_backward"); return PW("hardswish_backward", NK_OP_HARDSWISH_BACKWARD, {g, s}, {}, Float); }
static at::Tensor hardsigmoid_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::hardsigmoid_backward"); return PW("hardsigmoid_backward", NK_OP_HARDSIGMOID_BACKWARD, {g, s}, {}, Float); }
static at::Tensor &hardsigmoid_bw_o(const at::Tensor &g, const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::hardsigmoid_backward.grad_input"); PW("hardsigmoid_backward", NK_OP_HARDSIGMOID_BACKWARD, {g, s}, o, Float); return o; }
static at::Tensor mish_bw(const at::Tensor &g, const at::Tensor &s) { NEURON_TRACK("aten::mish_backward"); return PW("mish_backward", NK_OP_MISH_BACKWARD, {g, s}, {}, Float); }

// threshold(x, th, v) = x <= th ? v : x
static at::Tensor &threshold_o(const at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v, at::Tensor &o)
{
	NEURON_TRACK("aten::threshold.out");
	at::Tensor m = PW("threshold", NK_OP_LE, {s, wrap(th)}, {}, Bool);
	PW("threshold", NK_OP_WHERE, {m, cpu_scalar(v, s.scalar_type()), s}, o, Same, 0, 0, 0, 0, 1u);
	return o;
}
static at::Tensor threshold_f(const at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v) { NEURON_TRACK("aten::threshold"); at::Tensor o = at::empty_like(s); return threshold_o(s, th, v, o); }
static at::Tensor &threshold_i(at::Tensor &s, const c10::Scalar &th, const c10::Scalar &v) { NEURON_TRACK("aten::threshold_"); return threshold_o(s, th, v, s); }

static at::Tensor &isposinf_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::isposinf.out"); PW("isposinf", NK_OP_EQ, {s, wrap(std::numeric_limits<double>::infinity())}, o, Bool); return o; }
static at::Tensor &isneginf_o(const at::Tensor &s, at::Tensor &o) { NEURON_TRACK("aten::isneginf.out"); PW("isneginf", NK_OP_EQ, {s, wrap(-std::numeric_limits<double>::infinity())}, o, Bool); return o; }
static at::Tensor isposinf_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return isposinf_o(s, o); }
static at::Tensor isneginf_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return isneginf_o(s, o); }
static at::Tensor &signbit_o(const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::signbit.out");
	if (s.scalar_type() == at::kBool)
		return into(o, at::zeros_like(s, s.options().dtype(at::kBool)));
	if (!at::isFloatingType(s.scalar_type())) {
		PW("signbit", NK_OP_LT, {s, wrap(0)}, o, Bool);
		return o;
	}
	// copysign(1, x) < 0 is true exactly when x's sign bit is set (-0.0 and negative NaN included)
	at::Tensor c = PW("signbit", NK_OP_COPYSIGN, {cpu_scalar(1, s.scalar_type()), s}, {}, Same);
	PW("signbit", NK_OP_LT, {c, wrap(0)}, o, Bool);
	return o;
}
static at::Tensor signbit_f(const at::Tensor &s) { at::Tensor o = at::empty(s.sizes(), s.options().dtype(at::kBool)); return signbit_o(s, o); }

static at::Tensor &nan_to_num_o(const at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf, at::Tensor &o)
{
	NEURON_TRACK("aten::nan_to_num.out");
	if (!at::isFloatingType(s.scalar_type()))
		return into(o, s);
	double big = s.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
		   : s.scalar_type() == at::kFloat ? std::numeric_limits<float>::max()
		   : s.scalar_type() == at::kHalf ? 65504.0 : 3.3895313892515355e38;
	double pi = posinf.value_or(big), ni = neginf.value_or(-big);
	if (ni != -pi) // the kernel maps -inf to -posinf
		return at::native::call_fallback_fn<&cpu_fallback, at::_ops::nan_to_num_out>::call(s, nan, posinf, neginf, o);
	PW("nan_to_num", NK_OP_NAN_TO_NUM, {s}, o, Same, nan.value_or(0.0), pi);
	return o;
}
static at::Tensor nan_to_num_f(const at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf)
{
	at::Tensor o = at::empty_like(s);
	return nan_to_num_o(s, nan, posinf, neginf, o);
}
static at::Tensor &nan_to_num_i(at::Tensor &s, std::optional<double> nan, std::optional<double> posinf, std::optional<double> neginf)
{
	return nan_to_num_o(s, nan, posinf, neginf, s);
}
static at::Tensor rsub_t(const at::Tensor &s, const at::Tensor &other, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::rsub.Tensor");
	TORCH_CHECK(s.scalar_type() != at::kBool || other.scalar_type() != at::kBool,
		    "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` operator instead.");
	if (!alpha.isIntegral(false))
		at::native::alpha_check(at::result_type(s, other), alpha);
	double a; int64_t ia; alpha_params(alpha, a, ia);
	return PW("rsub", NK_OP_SUB, {other, s}, {}, Same, a, 0, ia);
}
static at::Tensor rsub_s(const at::Tensor &s, const c10::Scalar &other, const c10::Scalar &alpha) { return rsub_t(s, wrap(other), alpha); }

static at::Tensor floor_divide_f(const at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::floor_divide"); return PW("floor_divide", NK_OP_DIV_FLOOR, {s, o}, {}, Same); }
static at::Tensor &floor_divide_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out) { NEURON_TRACK("aten::floor_divide.out"); PW("floor_divide.out", NK_OP_DIV_FLOOR, {s, o}, out, Same); return out; }
static at::Tensor &floor_divide_i(at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::floor_divide_.Tensor"); PW("floor_divide_", NK_OP_DIV_FLOOR, {s, o}, s, Same); return s; }
static at::Tensor floor_divide_s(const at::Tensor &s, const c10::Scalar &o) { return floor_divide_f(s, wrap(o)); }
static at::Tensor &floor_divide_si(at::Tensor &s, const c10::Scalar &o) { return floor_divide_i(s, wrap(o)); }

// logit(x) = log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given (aten's order of operations)
static at::Tensor logit_f(const at::Tensor &x, std::optional<double> eps)
{
	NEURON_TRACK("aten::logit");
	at::Tensor z = x.is_floating_point() ? x : x.to(c10::typeMetaToScalarType(c10::get_default_dtype()));
	if (eps.has_value() && *eps >= 0)
		z = at::clamp(z, *eps, 1.0 - *eps);
	return (z / (1 - z)).log();
}
static at::Tensor &logit_o(const at::Tensor &x, std::optional<double> eps, at::Tensor &o) { NEURON_TRACK("aten::logit.out"); return into(o, logit_f(x, eps), OutRule::Cast); }
static at::Tensor &logit_i(at::Tensor &x, std::optional<double> eps) { NEURON_TRACK("aten::logit_"); return into_self(x, logit_f(x, eps)); }

// ---- logaddexp, logaddexp2, round(decimals): aten's formulas from native elementwise ops ----------

// logaddexp: a == b == +-inf gives a; else max(a, b) + log1p(exp(-|a - b|))
static at::Tensor logaddexp_f(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::logaddexp");
	at::Tensor m = at::maximum(a, b), d = (a - b).abs();
	at::Tensor r = m + at::log1p(at::exp(-d));
	return at::where(at::isinf(a).logical_and(a == b), a.to(r.scalar_type()), r);
}
static at::Tensor &logaddexp_o(const at::Tensor &a, const at::Tensor &b, at::Tensor &o) { NEURON_TRACK("aten::logaddexp.out"); return into(o, logaddexp_f(a, b), OutRule::Cast); }
static at::Tensor logaddexp2_f(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::logaddexp2");
	at::Tensor m = at::maximum(a, b), d = (a - b).abs();
	at::Tensor r = m + at::log1p(at::exp2(-d)) * (1.0 / std::log(2.0));
	return at::where(at::isinf(a).logical_and(a == b), a.to(r.scalar_type()), r);
}
static at::Tensor &logaddexp2_o(const at::Tensor &a, const at::Tensor &b, at::Tensor &o) { NEURON_TRACK("aten::logaddexp2.out"); return into(o, logaddexp2_f(a, b), OutRule::Cast); }

// round(x, decimals): decimals >= 0: nearbyint(x * 10^d) / 10^d, else nearbyint(x / 10^-d) * 10^-d,
// with 10^|d| in the dtype
static at::Tensor round_dec_f(const at::Tensor &x, int64_t decimals)
{
	NEURON_TRACK("aten::round.decimals");
	if (decimals == 0 || !at::isFloatingType(x.scalar_type()))
		return x.round();
	at::Tensor p = cpu_scalar(std::pow(10.0, (double)std::llabs(decimals)), x.scalar_type());
	if (decimals > 0)
		return PW("round", NK_OP_DIV, {PW("round", NK_OP_ROUND, {PW("round", NK_OP_MUL, {x, p}, {}, Same)}, {}, Same), p}, {}, Same);
	return PW("round", NK_OP_MUL, {PW("round", NK_OP_ROUND, {PW("round", NK_OP_DIV, {x, p}, {}, Same)}, {}, Same), p}, {}, Same);
}
static at::Tensor &round_dec_o(const at::Tensor &x, int64_t decimals, at::Tensor &o) { NEURON_TRACK("aten::round.decimals_out"); return into(o, round_dec_f(x, decimals)); }
static at::Tensor &round_dec_i(at::Tensor &x, int64_t decimals) { NEURON_TRACK("aten::round_.decimals"); return into_self(x, round_dec_f(x, decimals)); }

// (convolution: native in ops_conv.cpp)


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
	for (const auto &x : inputs)
		TORCH_CHECK(x.device() == first.device(), "Expected all tensors to be on the same device, but found at least two devices, ", first.device(),
			    " and ", x.device(), "! (when checking arguments for ", name, ")");
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

#define ACT1(fname, aname, OP)                                                                                                         \
	static at::Tensor fname(const at::Tensor &x, const c10::Scalar &l) { NEURON_TRACK("aten::" aname); return act("aten::" aname, OP, {x}, {}, l.toDouble()); } \
	static at::Tensor &fname##_o(const at::Tensor &x, const c10::Scalar &l, at::Tensor &o) { NEURON_TRACK("aten::" aname ".out"); act("aten::" aname, OP, {x}, o, l.toDouble()); return o; }
#define ACT_BWD(fname, aname, OP)                                                                                                          \
	static at::Tensor fname(const at::Tensor &g, const at::Tensor &x, const c10::Scalar &l) { NEURON_TRACK("aten::" aname); return act("aten::" aname, OP, {g, x}, {}, l.toDouble()); } \
	static at::Tensor &fname##_o(const at::Tensor &g, const at::Tensor &x, const c10::Scalar &l, at::Tensor &o) { NEURON_TRACK("aten::" aname ".grad_input"); act("aten::" aname, OP, {g, x}, o, l.toDouble()); return o; }
ACT1(hardshrink_f, "hardshrink", NK_ACT_HARDSHRINK)
ACT1(softshrink_f, "softshrink", NK_ACT_SOFTSHRINK)
ACT_BWD(hardshrink_bw, "hardshrink_backward", NK_ACT_HARDSHRINK_BWD)
ACT_BWD(softshrink_bw, "softshrink_backward", NK_ACT_SOFTSHRINK_BWD)

static void check_lambd(const char *op, const c10::Scalar &l)
{
	TORCH_CHECK(l.toDouble() >= 0, op, ": lambda must be greater or equal to 0, but found to be ", l.toDouble(), ".");
}
static at::Tensor softshrink_c(const at::Tensor &x, const c10::Scalar &l) { check_lambd("softshrink", l); return softshrink_f(x, l); }
static at::Tensor &softshrink_co(const at::Tensor &x, const c10::Scalar &l, at::Tensor &o) { check_lambd("softshrink", l); return softshrink_f_o(x, l, o); }

static at::Tensor logit_bw(const at::Tensor &g, const at::Tensor &x, std::optional<double> eps)
{
	NEURON_TRACK("aten::logit_backward");
	return act("aten::logit_backward", NK_ACT_LOGIT_BWD, {g, x}, {}, eps.value_or(-1.0), eps.has_value() && *eps >= 0 ? 1 : 0);
}
static at::Tensor &logit_bw_o(const at::Tensor &g, const at::Tensor &x, std::optional<double> eps, at::Tensor &o)
{
	NEURON_TRACK("aten::logit_backward.grad_input");
	act("aten::logit_backward", NK_ACT_LOGIT_BWD, {g, x}, o, eps.value_or(-1.0), eps.has_value() && *eps >= 0 ? 1 : 0);
	return o;
}

static int64_t glu_dim(const at::Tensor &x, int64_t dim)
{
	TORCH_CHECK(x.dim() > 0, "glu does not support scalars because halving size must be even");
	int64_t d = at::maybe_wrap_dim(dim, x.dim());
	TORCH_CHECK(x.size(d) % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", x.size(d));
	return d;
}
static at::Tensor glu_f(const at::Tensor &x, int64_t dim)
{
	NEURON_TRACK("aten::glu");
	int64_t d = glu_dim(x, dim), h = x.size(d) / 2;
	return act("aten::glu", NK_ACT_GLU, {x.narrow(d, 0, h), x.narrow(d, h, h)}, {});
}
static at::Tensor &glu_o(const at::Tensor &x, int64_t dim, at::Tensor &o)
{
	NEURON_TRACK("aten::glu.out");
	int64_t d = glu_dim(x, dim), h = x.size(d) / 2;
	act("aten::glu", NK_ACT_GLU, {x.narrow(d, 0, h), x.narrow(d, h, h)}, o);
	return o;
}
static at::Tensor &glu_bw_o(const at::Tensor &g, const at::Tensor &x, int64_t dim, at::Tensor &gi)
{
	NEURON_TRACK("aten::glu_backward.grad_input");
	int64_t d = glu_dim(x, dim), h = x.size(d) / 2;
	at::Tensor a = x.narrow(d, 0, h), b = x.narrow(d, h, h);
	TORCH_CHECK(g.sizes() == a.sizes(), "glu_backward: grad_output of size ", g.sizes(), " does not match half of the input ", x.sizes());
	resize_out(gi, x.sizes(), x.options());
	at::Tensor ga = gi.narrow(d, 0, h), gb = gi.narrow(d, h, h);
	act("aten::glu_backward", NK_ACT_GLU_BWD_A, {g, a, b}, ga);
	act("aten::glu_backward", NK_ACT_GLU_BWD_B, {g, a, b}, gb);
	return gi;
}
static at::Tensor glu_bw(const at::Tensor &g, const at::Tensor &x, int64_t dim)
{
	NEURON_TRACK("aten::glu_backward");
	at::Tensor gi = at::empty_like(x, at::MemoryFormat::Contiguous);
	return glu_bw_o(g, x, dim, gi);
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
	check_device(name, x, {&noise});
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
	NEURON_IMPL(m, "sgn", sgn_f);
	NEURON_IMPL(m, "sgn.out", sgn_o);
	NEURON_IMPL(m, "sgn_", sgn_i);
	NEURON_IMPL(m, "clamp_min", clamp_min_f);
	NEURON_IMPL(m, "clamp_min.out", clamp_min_o);
	NEURON_IMPL(m, "clamp_min_", clamp_min_i);
	NEURON_IMPL(m, "clamp_max", clamp_max_f);
	NEURON_IMPL(m, "clamp_max.out", clamp_max_o);
	NEURON_IMPL(m, "clamp_max_", clamp_max_i);
	NEURON_IMPL(m, "clamp_min.Tensor", clamp_min_t);
	NEURON_IMPL(m, "clamp_min.Tensor_out", clamp_min_to);
	NEURON_IMPL(m, "clamp_min_.Tensor", clamp_min_ti);
	NEURON_IMPL(m, "clamp_max.Tensor", clamp_max_t);
	NEURON_IMPL(m, "clamp_max.Tensor_out", clamp_max_to);
	NEURON_IMPL(m, "clamp_max_.Tensor", clamp_max_ti);
	NEURON_IMPL(m, "clamp.Tensor_out", clamp_to);
	NEURON_IMPL(m, "elu", elu_f);
	NEURON_IMPL(m, "elu.out", elu_o);
	NEURON_IMPL(m, "elu_", elu_i);
	NEURON_IMPL(m, "elu_backward", elu_bw);
	NEURON_IMPL(m, "elu_backward.grad_input", elu_bw_o);
	NEURON_IMPL(m, "softplus", softplus_f);
	NEURON_IMPL(m, "softplus.out", softplus_o);
	NEURON_IMPL(m, "softplus_backward", softplus_bw);
	NEURON_IMPL(m, "softplus_backward.grad_input", softplus_bw_o);
	NEURON_IMPL(m, "hardtanh", hardtanh_f);
	NEURON_IMPL(m, "hardtanh.out", hardtanh_o);
	NEURON_IMPL(m, "hardtanh_", hardtanh_i);
	NEURON_IMPL(m, "hardtanh_backward", hardtanh_bw);
	NEURON_IMPL(m, "hardtanh_backward.grad_input", hardtanh_bw_o);
	NEURON_IMPL(m, "leaky_relu", leaky_relu_f);
	NEURON_IMPL(m, "leaky_relu.out", leaky_relu_o);
	NEURON_IMPL(m, "leaky_relu_", leaky_relu_i);
	NEURON_IMPL(m, "leaky_relu_backward", leaky_relu_bw);
	NEURON_IMPL(m, "leaky_relu_backward.grad_input", leaky_relu_bw_o);
	NEURON_IMPL(m, "hardswish_backward", hardswish_bw);
	NEURON_IMPL(m, "hardsigmoid_backward", hardsigmoid_bw);
	NEURON_IMPL(m, "hardsigmoid_backward.grad_input", hardsigmoid_bw_o);
	NEURON_IMPL(m, "mish_backward", mish_bw);
	NEURON_IMPL(m, "threshold", threshold_f);
	NEURON_IMPL(m, "threshold.out", threshold_o);
	NEURON_IMPL(m, "threshold_", threshold_i);
	NEURON_IMPL(m, "isposinf", isposinf_f);
	NEURON_IMPL(m, "isposinf.out", isposinf_o);
	NEURON_IMPL(m, "isneginf", isneginf_f);
	NEURON_IMPL(m, "isneginf.out", isneginf_o);
	NEURON_IMPL(m, "signbit", signbit_f);
	NEURON_IMPL(m, "signbit.out", signbit_o);
	NEURON_IMPL(m, "nan_to_num", nan_to_num_f);
	NEURON_IMPL(m, "nan_to_num.out", nan_to_num_o);
	NEURON_IMPL(m, "nan_to_num_", nan_to_num_i);
	NEURON_IMPL(m, "rsub.Tensor", rsub_t);
	NEURON_IMPL(m, "rsub.Scalar", rsub_s);
	NEURON_IMPL(m, "floor_divide", floor_divide_f);
	NEURON_IMPL(m, "floor_divide.out", floor_divide_o);
	NEURON_IMPL(m, "floor_divide_.Tensor", floor_divide_i);
	NEURON_IMPL(m, "floor_divide.Scalar", floor_divide_s);
	NEURON_IMPL(m, "floor_divide_.Scalar", floor_divide_si);
	NEURON_IMPL(m, "logit", logit_f);
	NEURON_IMPL(m, "logaddexp", logaddexp_f);
	NEURON_IMPL(m, "logaddexp.out", logaddexp_o);
	NEURON_IMPL(m, "logaddexp2", logaddexp2_f);
	NEURON_IMPL(m, "logaddexp2.out", logaddexp2_o);
	NEURON_IMPL(m, "round.decimals", round_dec_f);
	NEURON_IMPL(m, "round.decimals_out", round_dec_o);
	NEURON_IMPL(m, "round_.decimals", round_dec_i);
	NEURON_IMPL(m, "logit.out", logit_o);
	NEURON_IMPL(m, "logit_", logit_i);
	NEURON_IMPL(m, "hardshrink", hardshrink_f);
	NEURON_IMPL(m, "hardshrink.out", hardshrink_f_o);
	NEURON_IMPL(m, "hardshrink_backward", hardshrink_bw);
	NEURON_IMPL(m, "hardshrink_backward.grad_input", hardshrink_bw_o);
	NEURON_IMPL(m, "softshrink", softshrink_c);
	NEURON_IMPL(m, "softshrink.out", softshrink_co);
	NEURON_IMPL(m, "softshrink_backward", softshrink_bw);
	NEURON_IMPL(m, "softshrink_backward.grad_input", softshrink_bw_o);
	NEURON_IMPL(m, "logit_backward", logit_bw);
	NEURON_IMPL(m, "logit_backward.grad_input", logit_bw_o);
	NEURON_IMPL(m, "glu", glu_f);
	NEURON_IMPL(m, "glu.out", glu_o);
	NEURON_IMPL(m, "glu_backward", glu_bw);
	NEURON_IMPL(m, "glu_backward.grad_input", glu_bw_o);
	NEURON_IMPL(m, "_prelu_kernel", prelu_f);
	NEURON_IMPL(m, "_prelu_kernel_backward", prelu_bw);
	NEURON_IMPL(m, "rrelu_with_noise", rrelu_f);
	NEURON_IMPL(m, "rrelu_with_noise.out", rrelu_o);
	NEURON_IMPL(m, "rrelu_with_noise_", rrelu_i);
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
}
