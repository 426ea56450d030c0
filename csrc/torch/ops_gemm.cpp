// ops_gemm.cpp - matrix products: mm, addmm, bmm, baddbmm, addmv, addbmm, addr, dot, vdot (nk_gemm_run).
// Shapes and dtypes are checked here; the kernel gets explicit strides.
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "nk_igemm.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
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
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

static at::Tensor vdot_f(const at::Tensor &s, const at::Tensor &o) { NEURON_TRACK("aten::vdot"); return at::dot(s.is_complex() ? s.conj() : s, o); }
// aten's addbmm: result = beta*self, then result.addmm_(b1[b], b2[b]) batch by batch (rounded to the
// dtype after each batch, as the CPU does)
static at::Tensor addbmm_f(const at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addbmm");
	TORCH_CHECK(b1.dim() == 3, "batch1 must be a 3D tensor");
	TORCH_CHECK(b2.dim() == 3, "batch2 must be a 3D tensor");
	TORCH_CHECK(b1.size(0) == b2.size(0), "batch1 and batch2 must have same number of batches, got ", b1.size(0), " and ", b2.size(0));
	TORCH_CHECK(b1.size(2) == b2.size(1), "Incompatible matrix sizes for bmm (", b1.size(1), "x", b1.size(2), " and ", b2.size(1), "x", b2.size(2), ")");
	int64_t n = b1.size(1), p = b2.size(2);
	at::Tensor result = at::empty({n, p}, b1.options());
	result.copy_(self.expand({n, p}));
	if (b1.size(0) == 0 || b1.size(2) == 0) {
		if (beta.toComplexDouble() == 0.0)
			result.zero_();
		else
			result.mul_(beta);
		return result;
	}
	c10::Scalar b = beta;
	for (int64_t i = 0; i < b1.size(0); i++) {
		result.addmm_(b1[i], b2[i], b, alpha);
		b = 1;
	}
	return result;
}
static at::Tensor &addbmm_o(const at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &o)
{
	NEURON_TRACK("aten::addbmm.out");
	return into(o, addbmm_f(self, b1, b2, beta, alpha));
}
static at::Tensor &addbmm_i(at::Tensor &self, const at::Tensor &b1, const at::Tensor &b2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addbmm_");
	// aten's addbmm_ broadcasts self to the result and resizes it (addbmm_impl_: result.resize_as_)
	at::Tensor r = addbmm_f(self, b1, b2, beta, alpha);
	if (!self.sizes().equals(r.sizes()))
		self.resize_(r.sizes());
	return into_self(self, r);
}

// aten's CPU addr: beta*self + (alpha*vec1)*vec2 with beta and alpha in the dtype and every product
// and sum rounded to it (beta == 0: self is ignored, NaN in it does not propagate)
static at::Tensor addr_f(const at::Tensor &self, const at::Tensor &v1, const at::Tensor &v2, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addr");
	TORCH_CHECK(v1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", v1.dim(), "-D");
	TORCH_CHECK(v2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", v2.dim(), "-D");
	at::native::ResultTypeState st{};
	for (const at::Tensor *x : {&self, &v1, &v2})
		st = at::native::update_result_type_state(*x, st);
	at::ScalarType t = at::native::result_type(st);
	for (const c10::Scalar *sc : {&beta, &alpha}) { // aten's check_addr_scalar
		const char *nm = sc == &beta ? "beta" : "alpha";
		TORCH_CHECK(!sc->isBoolean() || t == at::kBool, "Boolean ", nm, " only supported for Boolean results.");
		TORCH_CHECK(at::isFloatingType(t) || sc->isIntegral(true), "For integral input tensors, argument ", nm,
			    " must not be a floating point number.");
	}
	at::Tensor a = v1.to(t), b = v2.to(t);
	at::Tensor ab = (a * cpu_scalar(alpha, t)).unsqueeze(1) * b.unsqueeze(0);
	bool beta0 = beta.isBoolean() ? !beta.toBool() : beta.toComplexDouble() == 0.0;
	if (beta0)
		return ab;
	return self.to(t) * cpu_scalar(beta, t) + ab;
}
static at::Tensor &addr_o(const at::Tensor &self, const at::Tensor &v1, const at::Tensor &v2, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &o)
{
	NEURON_TRACK("aten::addr.out");
	if (o.is_same(self)) { // addr_ (addr.out into self): self is neither broadcast nor resized, as aten checks
		TORCH_CHECK(self.dim() == 2, "2D tensor expected, got ", self.dim(), "D tensor for input");
		TORCH_CHECK(v1.dim() != 1 || v2.dim() != 1 || (self.size(0) == v1.size(0) && self.size(1) == v2.size(0)),
			    "size mismatch, input: ", self.sizes(), ", v1: ", v1.sizes(), ", v2: ", v2.sizes());
		return into_self(o, addr_f(self, v1, v2, beta, alpha));
	}
	return into(o, addr_f(self, v1, v2, beta, alpha), OutRule::Cast);
}

static bool gemm_dtype(at::ScalarType t)
{
	return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf || at::isIntegralType(t, false) ||
	       t == at::kComplexFloat || t == at::kComplexDouble; // complex: real GEMMs on the planes (ops_complex.cpp)
}

// Tiny GEMMs run inline on an idle queue (launch_cost).  Cost: multiply-adds * element size / 16, or the
// bytes of A, B and C where those are more (a GEMV: M == 1 x 4096 x 4096 is 4 MiB of arithmetic by the
// first measure but streams 64 MiB of weights, milliseconds the host thread would otherwise wait for).
static size_t gemm_cost(const nk_gemm_args_t &g, size_t es)
{
	size_t b = (size_t)g.batch, m = (size_t)g.M, n = (size_t)g.N, k = (size_t)std::max<int64_t>(g.K, 1);
	size_t flops = b * m * n * k * es / 16, bytes = b * (m * k + k * n + m * n) * es;

	return std::max(flops, bytes);
}

// C[b] = alpha * A[b] @ B[b] + beta * C[b] on 3-d views (batch, rows, cols); strides as given.
static void gemm3(const char *name, const at::Tensor &A, const at::Tensor &B, const at::Tensor &C, double alpha, double beta)
{
	if (C10_UNLIKELY(C.is_complex())) {
		at::Tensor c = C;
		complex_matmul(name, A, B, c, beta, alpha, beta != 0);
		return;
	}
	nk_gemm_args_t g{};
	g.dtype = nk_dtype(C.scalar_type(), name);
	g.batch = C.size(0), g.M = C.size(1), g.N = C.size(2), g.K = A.size(2);
	g.alpha = alpha, g.beta = beta;
	g.A = A.const_data_ptr(), g.bs_a = A.stride(0), g.rs_a = A.stride(1), g.cs_a = A.stride(2);
	g.B = B.const_data_ptr(), g.bs_b = B.stride(0), g.rs_b = B.stride(1), g.cs_b = B.stride(2);
	g.C = C.data_ptr(), g.bs_c = C.stride(0), g.rs_c = C.stride(1), g.cs_c = C.stride(2);
	if (g.batch == 0 || g.M == 0 || g.N == 0)
		return;
	launch_cost(current_queue(C.device().index()), at::isIntegralType(C.scalar_type(), false) ? nk_igemm_run : nk_gemm_run, g,
		    name, gemm_cost(g, C.element_size()));
}

// gemm3 for 2-d operands without building the 3-d views (three dispatcher round trips per mm).
static void gemm2(const char *name, const at::Tensor &A, const at::Tensor &B, const at::Tensor &C, double alpha, double beta,
		  const at::Tensor *bias = nullptr)
{
	if (C10_UNLIKELY(C.is_complex())) { // never with a bias: mm_into copies a complex bias into C first
		at::Tensor c = C;
		complex_matmul(name, A, B, c, beta, alpha, beta != 0);
		return;
	}
	nk_gemm_args_t g{};
	if (bias) { // [gemm bias] C's old value read from the (expanded) bias inside the GEMM kernel
		g.bias = bias->const_data_ptr(), g.rs_bias = bias->stride(0), g.cs_bias = bias->stride(1), g.bs_bias = 0;
	}
	g.dtype = nk_dtype(C.scalar_type(), name);
	g.batch = 1, g.M = C.size(0), g.N = C.size(1), g.K = A.size(1);
	g.alpha = alpha, g.beta = beta;
	g.A = A.const_data_ptr(), g.bs_a = 0, g.rs_a = A.stride(0), g.cs_a = A.stride(1);
	g.B = B.const_data_ptr(), g.bs_b = 0, g.rs_b = B.stride(0), g.cs_b = B.stride(1);
	g.C = C.data_ptr(), g.bs_c = 0, g.rs_c = C.stride(0), g.cs_c = C.stride(1);
	if (g.M == 0 || g.N == 0)
		return;
	launch_cost(current_queue(C.device().index()), at::isIntegralType(C.scalar_type(), false) ? nk_igemm_run : nk_gemm_run, g,
		    name, gemm_cost(g, C.element_size()));
}

// aten's argument checks of the matrix products, in its order and words: mm's and addmm's meta
// functions, common_checks_baddbmm_bmm and the bmm kernels, addmv's (self is the bias, or null)
static void check_gemm_dtype(const char *op, const at::Tensor &a)
{
	TORCH_CHECK(gemm_dtype(a.scalar_type()), op, ": dtype ", a.scalar_type(), " is not supported on neuron (float32, float64, bfloat16, float16, complex64, complex128 and the integer dtypes are)");
}
static void check_mm(const char *op, const at::Tensor &a, const at::Tensor &b, int64_t dims, const at::Tensor *self = nullptr)
{
	if (dims == 3) {
		TORCH_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
		TORCH_CHECK(b.dim() == 3, "batch2 must be a 3D tensor");
		TORCH_CHECK(b.size(0) == a.size(0) && b.size(1) == a.size(2), "Expected size for first two dimensions of batch2 tensor to be: [",
			    a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
		if (self)
			TORCH_CHECK(self->dtype() == a.dtype(), "Input dtypes must be the same, got: input ", self->dtype(), ", batch1: ", a.dtype(),
				    ", batch2: ", b.dtype());
		TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected scalar type ", a.scalar_type(), " but found ", b.scalar_type());
		check_gemm_dtype(op, a);
		return;
	}
	if (self) { // addmm
		TORCH_CHECK(self->scalar_type() == b.scalar_type(), "self and mat2 must have the same dtype, but got ", self->scalar_type(), " and ",
			    b.scalar_type());
		TORCH_CHECK(a.scalar_type() == b.scalar_type(), "mat1 and mat2 must have the same dtype, but got ", a.scalar_type(), " and ",
			    b.scalar_type());
		TORCH_CHECK(a.dim() == 2, "mat1 must be a matrix, got ", a.dim(), "-D tensor");
		TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix, got ", b.dim(), "-D tensor");
	} else { // mm
		TORCH_CHECK(a.dim() == 2, "self must be a matrix");
		TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
		TORCH_CHECK(a.dtype() == b.dtype(), "expected m1 and m2 to have the same dtype, but got: ", a.dtype(), " != ", b.dtype());
	}
	check_gemm_dtype(op, a);
	TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x", a.size(1), " and ", b.size(0), "x",
		    b.size(1), ")");
}

// beta as a Scalar of out's kind: an integral out must not be multiplied by a double Scalar (mul_ would
// refuse the cast), as aten's integral addmm takes beta as an integer.
static c10::Scalar scalar_like(const at::Tensor &out, double v)
{
	if (c10::isIntegralType(out.scalar_type(), /*includeBool=*/true))
		return c10::Scalar((int64_t)v);
	return c10::Scalar(v);
}

// out = beta*bias + alpha*(a @ b) for 2-d a, b; bias broadcast to out (may be undefined).
static at::Tensor &mm_into(const char *name, const at::Tensor &a, const at::Tensor &b, at::Tensor &out, const at::Tensor &bias, double beta, double alpha)
{
	DeviceScope g(a.device().index());
	resize_out(out, {a.size(0), b.size(1)}, a.options());
	bool use_bias = bias.defined() && beta != 0;
	// [gemm bias] a floating bias of out's dtype that does not share out's memory goes to the GEMM kernel
	// itself (one launch, and the small-M driver copies it into each tile just before using it)
	if (use_bias && a.size(1) != 0 && at::isFloatingType(out.scalar_type()) && bias.scalar_type() == out.scalar_type() &&
	    bias.device() == out.device() && !bias.storage().is_alias_of(out.storage())) {
		at::Tensor e = bias.expand({a.size(0), b.size(1)});
		gemm2(name, a, b, out, alpha, beta, &e);
		return out;
	}
	if (use_bias)
		out.copy_(bias.expand({a.size(0), b.size(1)}));
	if (a.size(1) == 0) { // K == 0: out = beta*bias
		if (!use_bias)
			out.zero_();
		else if (beta != 1)
			out.mul_(scalar_like(out, beta));
		return out;
	}
	gemm2(name, a, b, out, alpha, use_bias ? beta : 0);
	return out;
}

// complex operands, beta and alpha possibly complex: out = beta*bias + alpha*(a @ b) (ops_complex.cpp)
static at::Tensor &complex_addmm(const char *name, const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b,
				 const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &out)
{
	c10::DeviceGuard g(a.device());
	bool batched = a.dim() == 3;
	TORCH_CHECK(!batched || a.size(0) == b.size(0), name, ": batch1 and batch2 must have same number of batches, got ", a.size(0), " and ", b.size(0));
	std::vector<int64_t> shape = batched ? std::vector<int64_t>{a.size(0), a.size(1), b.size(2)} : std::vector<int64_t>{a.size(0), b.size(1)};
	if (!out.is_same(bias)) {
		resize_out(out, shape, a.options());
		out.copy_(bias.expand(shape));
	}
	complex_matmul(name, a, b, out, beta, alpha, true);
	return out;
}

static at::Tensor mm(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::mm");
	check_mm("mm", a, b, 2);
	at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
	return mm_into("aten::mm", a, b, out, {}, 0, 1);
}
static at::Tensor &mm_out(const at::Tensor &a, const at::Tensor &b, at::Tensor &out)
{
	NEURON_TRACK("aten::mm.out");
	check_mm("mm", a, b, 2);
	return mm_into("aten::mm.out", a, b, out, {}, 0, 1);
}
static at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addmm");
	check_mm("addmm", a, b, 2, &bias);
	at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
	if (C10_UNLIKELY(a.is_complex()))
		return complex_addmm("aten::addmm", bias.to(a.scalar_type()), a, b, beta, alpha, out);
	return mm_into("aten::addmm", a, b, out, bias.to(a.scalar_type()), beta.toDouble(), alpha.toDouble());
}
static at::Tensor &addmm_out(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &out)
{
	NEURON_TRACK("aten::addmm.out");
	check_mm("addmm", a, b, 2, &bias);
	if (C10_UNLIKELY(a.is_complex()))
		return complex_addmm("aten::addmm.out", bias, a, b, beta, alpha, out);
	if (out.is_same(bias)) { // addmm_: C = beta*C + alpha*AB in place
		TORCH_CHECK(out.sizes() == at::IntArrayRef({a.size(0), b.size(1)}), "addmm_: self has the wrong shape");
		if (beta.toDouble() == 0)
			out.zero_();
		c10::DeviceGuard g(a.device());
		gemm3("aten::addmm_", a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0), alpha.toDouble(), beta.toDouble() == 0 ? 0 : beta.toDouble());
		return out;
	}
	return mm_into("aten::addmm.out", a, b, out, bias, beta.toDouble(), alpha.toDouble());
}
static at::Tensor &addmm_(at::Tensor &self, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	return addmm_out(self, a, b, beta, alpha, self);
}

static at::Tensor &bmm_into(const char *name, const at::Tensor &a, const at::Tensor &b, at::Tensor &out, const at::Tensor &bias, double beta, double alpha)
{
	c10::DeviceGuard g(a.device());
	TORCH_CHECK(a.size(0) == b.size(0), name, ": batch1 and batch2 must have same number of batches, got ", a.size(0), " and ", b.size(0));
	std::vector<int64_t> shape{a.size(0), a.size(1), b.size(2)};
	bool use_bias = bias.defined() && beta != 0;
	if (!out.is_same(bias)) {
		resize_out(out, shape, a.options());
		if (use_bias)
			out.copy_(bias.expand(shape));
	}
	if (a.size(2) == 0) {
		if (!use_bias)
			out.zero_();
		else if (beta != 1)
			out.mul_(scalar_like(out, beta));
		return out;
	}
	gemm3(name, a, b, out, alpha, use_bias ? beta : 0);
	return out;
}
static at::Tensor bmm(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::bmm");
	check_mm("bmm", a, b, 3);
	at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
	return bmm_into("aten::bmm", a, b, out, {}, 0, 1);
}
static at::Tensor &bmm_out(const at::Tensor &a, const at::Tensor &b, at::Tensor &out)
{
	NEURON_TRACK("aten::bmm.out");
	check_mm("bmm", a, b, 3);
	return bmm_into("aten::bmm.out", a, b, out, {}, 0, 1);
}
static at::Tensor baddbmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::baddbmm");
	check_mm("baddbmm", a, b, 3, &bias);
	at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
	if (C10_UNLIKELY(a.is_complex()))
		return complex_addmm("aten::baddbmm", bias.to(a.scalar_type()), a, b, beta, alpha, out);
	return bmm_into("aten::baddbmm", a, b, out, bias.to(a.scalar_type()), beta.toDouble(), alpha.toDouble());
}
static at::Tensor &baddbmm_(at::Tensor &self, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::baddbmm_");
	check_mm("baddbmm_", a, b, 3, &self);
	if (C10_UNLIKELY(a.is_complex()))
		return complex_addmm("aten::baddbmm_", self, a, b, beta, alpha, self);
	if (beta.toDouble() == 0)
		self.zero_();
	return bmm_into("aten::baddbmm_", a, b, self, self, beta.toDouble() == 0 ? 1 : beta.toDouble(), alpha.toDouble());
}
static at::Tensor dot(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::dot");
	TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
	TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(), "] and src [", b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(), " elements respectively");
	TORCH_CHECK(a.scalar_type() == b.scalar_type(), "dot : expected both vectors to have same dtype, but found ", a.scalar_type(), " and ",
		    b.scalar_type());
	check_mm("dot", a.unsqueeze(0), b.unsqueeze(1), 2);
	at::Tensor out = at::empty({1, 1}, a.options());
	mm_into("aten::dot", a.unsqueeze(0), b.unsqueeze(1), out, {}, 0, 1);
	return out.view(at::IntArrayRef{});
}
static at::Tensor addmv_f(const at::Tensor &bias, const at::Tensor &m, const at::Tensor &v, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addmv");
	TORCH_CHECK(m.dim() == 2 && v.dim() == 1 && bias.dim() <= 1, "vector + matrix @ vector expected, got ", bias.dim(), ", ", m.dim(), ", ",
		    v.dim());
	TORCH_CHECK(m.size(1) == v.size(0) && (m.size(0) == bias.numel() || bias.numel() == 1), "size mismatch, got input (", bias.numel(),
		    "), mat (", m.size(0), "x", m.size(1), "), vec (", v.size(0), ")");
	TORCH_CHECK(bias.dtype() == m.dtype() && m.dtype() == v.dtype(), "addmv input tensors must have the same dtype, but got ",
		    bias.scalar_type(), ", ", m.scalar_type(), ", and ", v.scalar_type());
	check_mm("addmv", m, v.unsqueeze(1), 2);
	at::Tensor out = at::empty({m.size(0), 1}, m.options());
	mm_into("aten::addmv", m, v.unsqueeze(1), out, bias.defined() ? bias.to(m.scalar_type()).reshape({-1, 1}) : bias, beta.toDouble(), alpha.toDouble());
	return out.view({m.size(0)});
}
static at::Tensor &addmv_out(const at::Tensor &bias, const at::Tensor &m, const at::Tensor &v, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &out)
{
	return into(out, addmv_f(bias, m, v, beta, alpha));
}

// torch._int_mm: int8 (or uint8) self x int8 mat2 -> int32, with aten's CPU checks in its order and words
// (int_mm_out_cpu: out is neither resized nor allowed to be strided); the AMX tiles where the CPU has them.
static const char *const int_mm_fn = "int_mm_out_cpu";
static void int_mm_check(const at::Tensor &a, const at::Tensor &b)
{
	const char *fn = int_mm_fn;
	TORCH_CHECK(a.dim() == 2, fn, ": Expected self to be of dimension 2 but got ", a.dim());
	TORCH_CHECK(b.dim() == 2, fn, ": Expected mat2 to be of dimension 2 but got ", b.dim());
	TORCH_CHECK(a.size(1) == b.size(0), fn, ": self.size(1) needs to match mat2.size(0) but got ", a.size(1), " and ", b.size(0));
	TORCH_CHECK(a.scalar_type() == at::kChar || a.scalar_type() == at::kByte, fn, ": Expected self dtype to be int8 or uint8 but got ",
		    a.dtype());
	TORCH_CHECK(b.scalar_type() == at::kChar, fn, ": Expected mat2 dtype to be of type int8 but got ", b.dtype());
}
static at::Tensor &int_mm_into(const at::Tensor &a, const at::Tensor &b, at::Tensor &out)
{
	const char *fn = int_mm_fn;
	TORCH_CHECK(out.scalar_type() == at::kInt, fn, ": Expected result dtype to be of type kInt but got ", out.dtype());
	TORCH_CHECK(out.size(0) == a.size(0), fn, ": Expected result.size(0) to be ", a.size(0), " but got ", out.size(0));
	TORCH_CHECK(out.size(1) == b.size(1), fn, ": Expected result.size(1) to be ", b.size(1), " but got ", out.size(1));
	TORCH_CHECK(out.dim() == 2, fn, ": Expected result to be of dimension 2 but got ", out.dim());
	TORCH_CHECK(out.is_contiguous(), fn, ": Expected result to be contiguous.");
	if (out.numel() == 0)
		return out;
	DeviceScope g(a.device().index());
	nk_gemm_args_t ga{};
	ga.dtype = a.scalar_type() == at::kByte ? NK_U8 : NK_I8;
	ga.batch = 1, ga.M = out.size(0), ga.N = out.size(1), ga.K = a.size(1);
	ga.alpha = 1, ga.beta = 0; // K == 0: the kernel writes zeros
	ga.A = a.const_data_ptr(), ga.rs_a = a.stride(0), ga.cs_a = a.stride(1);
	ga.B = b.const_data_ptr(), ga.rs_b = b.stride(0), ga.cs_b = b.stride(1);
	ga.C = out.data_ptr(), ga.rs_c = out.stride(0), ga.cs_c = out.stride(1);
	launch_cost(current_queue(out.device().index()), nk_int_mm_run, ga, "aten::_int_mm", gemm_cost(ga, 1));
	return out;
}
static at::Tensor int_mm(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::_int_mm");
	int_mm_check(a, b);
	at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kInt));
	return int_mm_into(a, b, out);
}
static at::Tensor &int_mm_out(const at::Tensor &a, const at::Tensor &b, at::Tensor &out)
{
	NEURON_TRACK("aten::_int_mm.out");
	int_mm_check(a, b);
	return int_mm_into(a, b, out);
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "vdot", vdot_f);
	NEURON_IMPL(m, "addbmm", addbmm_f);
	NEURON_IMPL(m, "addbmm.out", addbmm_o);
	NEURON_IMPL(m, "addbmm_", addbmm_i);
	NEURON_IMPL(m, "addr", addr_f);
	NEURON_IMPL(m, "addr.out", addr_o);
	NEURON_IMPL(m, "mm", mm);
	NEURON_IMPL(m, "mm.out", mm_out);
	NEURON_IMPL(m, "addmm", addmm);
	NEURON_IMPL(m, "addmm.out", addmm_out);
	NEURON_IMPL(m, "addmm_", addmm_);
	NEURON_IMPL(m, "bmm", bmm);
	NEURON_IMPL(m, "bmm.out", bmm_out);
	NEURON_IMPL(m, "baddbmm", baddbmm);
	NEURON_IMPL(m, "baddbmm_", baddbmm_);
	NEURON_IMPL(m, "dot", dot);
	NEURON_IMPL(m, "addmv", addmv_f);
	NEURON_IMPL(m, "addmv.out", addmv_out);
	NEURON_IMPL(m, "_int_mm", int_mm);
	NEURON_IMPL(m, "_int_mm.out", int_mm_out);
}
