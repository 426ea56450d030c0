// ops_nn.cpp - matrix multiplication, concatenation and the neural-network ops of the training path:
// embedding, softmax/log_softmax, layer_norm, nll_loss, scaled_dot_product_attention, dropout backward.
// Shapes and dtypes are checked here; the C kernels get contiguous buffers or explicit strides.
#include "neuron.h"
#include "out.h"

#include <algorithm>

#include <ATen/core/grad_mode.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

namespace neuron {

static bool gemm_dtype(at::ScalarType t)
{
	return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf || at::isIntegralType(t, false);
}

static void check_same_device(const char *op, std::initializer_list<const at::Tensor *> ts)
{
	const at::Tensor *first = nullptr;
	for (auto *t : ts) {
		if (!t->defined())
			continue;
		if (!first) {
			first = t;
			continue;
		}
		TORCH_CHECK(t->device() == first->device(), "Expected all tensors to be on the same device, but found at least two devices, ",
			    first->device(), " and ", t->device(), "! (when checking arguments for ", op, ")");
	}
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

static void check_mm(const char *op, const at::Tensor &a, const at::Tensor &b, int64_t dims)
{
	check_same_device(op, {&a, &b});
	TORCH_CHECK(a.dim() == dims && b.dim() == dims, op, ": expected ", dims, "-D tensors, got ", a.dim(), "-D and ", b.dim(), "-D");
	TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", a.scalar_type(), " != ", b.scalar_type());
	TORCH_CHECK(gemm_dtype(a.scalar_type()), op, ": dtype ", a.scalar_type(), " is not supported on neuron (float32, float64, bfloat16, float16 and the integer dtypes are)");
	TORCH_CHECK(a.size(dims - 1) == b.size(dims - 2), op, ": mat1 and mat2 shapes cannot be multiplied (", a.size(dims - 2), "x",
		    a.size(dims - 1), " and ", b.size(dims - 2), "x", b.size(dims - 1), ")");
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
	check_mm("addmm", a, b, 2);
	check_same_device("addmm", {&bias, &a});
	at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
	return mm_into("aten::addmm", a, b, out, bias.to(a.scalar_type()), beta.toDouble(), alpha.toDouble());
}
static at::Tensor &addmm_out(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &out)
{
	NEURON_TRACK("aten::addmm.out");
	check_mm("addmm", a, b, 2);
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
	check_mm("baddbmm", a, b, 3);
	at::Tensor out = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
	return bmm_into("aten::baddbmm", a, b, out, bias.to(a.scalar_type()), beta.toDouble(), alpha.toDouble());
}
static at::Tensor &baddbmm_(at::Tensor &self, const at::Tensor &a, const at::Tensor &b, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::baddbmm_");
	check_mm("baddbmm_", a, b, 3);
	if (beta.toDouble() == 0)
		self.zero_();
	return bmm_into("aten::baddbmm_", a, b, self, self, beta.toDouble() == 0 ? 1 : beta.toDouble(), alpha.toDouble());
}
static at::Tensor dot(const at::Tensor &a, const at::Tensor &b)
{
	NEURON_TRACK("aten::dot");
	TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors");
	TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(), "] and src [", b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ", b.numel(), " elements respectively");
	check_mm("dot", a.unsqueeze(0), b.unsqueeze(1), 2);
	at::Tensor out = at::empty({1, 1}, a.options());
	mm_into("aten::dot", a.unsqueeze(0), b.unsqueeze(1), out, {}, 0, 1);
	return out.view(at::IntArrayRef{});
}
static at::Tensor addmv_f(const at::Tensor &bias, const at::Tensor &m, const at::Tensor &v, const c10::Scalar &beta, const c10::Scalar &alpha)
{
	NEURON_TRACK("aten::addmv");
	check_mm("addmv", m, v.unsqueeze(1), 2);
	at::Tensor out = at::empty({m.size(0), 1}, m.options());
	mm_into("aten::addmv", m, v.unsqueeze(1), out, bias.defined() ? bias.to(m.scalar_type()).reshape({-1, 1}) : bias, beta.toDouble(), alpha.toDouble());
	return out.view({m.size(0)});
}
static at::Tensor &addmv_out(const at::Tensor &bias, const at::Tensor &m, const at::Tensor &v, const c10::Scalar &beta, const c10::Scalar &alpha, at::Tensor &out)
{
	return into(out, addmv_f(bias, m, v, beta, alpha));
}

// ---- cat -------------------------------------------------------------------------------------------

static at::Tensor &cat_out(const at::ITensorListRef &tensors, int64_t dim, at::Tensor &out)
{
	NEURON_TRACK("aten::cat.out");
	auto ts = tensors.materialize();
	TORCH_CHECK(!ts.empty(), "torch.cat(): expected a non-empty list of Tensors");
	const at::Tensor *ref = nullptr;
	for (const at::Tensor &t : ts)
		if (!(t.dim() == 1 && t.numel() == 0)) { // legacy: 1-d empty tensors are skipped
			ref = &t;
			break;
		}
	TORCH_CHECK_TYPE(at::canCast(at::native::result_type(tensors), out.scalar_type()),
			 "torch.cat(): input types can't be cast to the desired output type ", out.scalar_type());
	if (!ref) {
		at::native::resize_output(out, {0});
		return out;
	}
	int64_t d = at::maybe_wrap_dim(dim, ref->dim());
	std::vector<int64_t> shape = ref->sizes().vec();
	int64_t total = 0;
	for (const at::Tensor &t : ts) {
		if (t.dim() == 1 && t.numel() == 0)
			continue;
		TORCH_CHECK(t.dim() == ref->dim(), "torch.cat(): Tensors must have same number of dimensions: got ", ref->dim(), " and ", t.dim());
		TORCH_CHECK(t.device() == out.device(), "Expected all tensors to be on the same device, but found at least two devices, ", out.device(), " and ", t.device(), "! (when checking argument for argument tensors in method wrapper_CUDA_cat)");
		for (int64_t k = 0; k < ref->dim(); k++)
			TORCH_CHECK(k == d || t.size(k) == ref->size(k), "Sizes of tensors must match except in dimension ", d, ". Expected size ", ref->size(k), " but got size ", t.size(k), " for tensor number in the list.");
		total += t.size(d);
	}
	shape[d] = total;
	at::native::resize_output(out, shape);
	at::assert_no_internal_overlap(out); // as aten's cat: no input may alias the output
	for (const at::Tensor &t : ts)
		at::assert_no_overlap(out, t);
	int64_t off = 0;
	for (const at::Tensor &t : ts) {
		if (t.dim() == 1 && t.numel() == 0)
			continue;
		if (t.size(d))
			out.narrow(d, off, t.size(d)).copy_(t);
		off += t.size(d);
	}
	return out;
}
static at::Tensor cat(const at::ITensorListRef &tensors, int64_t dim)
{
	NEURON_TRACK("aten::cat");
	auto ts = tensors.materialize();
	TORCH_CHECK(!ts.empty(), "torch.cat(): expected a non-empty list of Tensors");
	at::native::ResultTypeState st{};
	for (const at::Tensor &t : ts)
		st = at::native::update_result_type_state(t, st);
	at::Tensor out = at::empty({0}, ts[0].get().options().dtype(at::native::result_type(st)));
	return cat_out(tensors, dim, out);
}

// ---- embedding -------------------------------------------------------------------------------------

static at::Tensor embedding(const at::Tensor &w, const at::Tensor &idx, int64_t padding_idx, bool scale, bool sparse)
{
	NEURON_TRACK("aten::embedding");
	TORCH_CHECK(w.dim() == 2, "'weight' must be 2-D");
	TORCH_CHECK(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt, "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ", idx.scalar_type(), " instead (while checking arguments for embedding)");
	check_same_device("embedding", {&w, &idx});
	c10::DeviceGuard g(w.device());
	at::Tensor wc = w.contiguous(), ic = idx.contiguous();
	auto shape = idx.sizes().vec();
	shape.push_back(w.size(1));
	at::Tensor out = at::empty(shape, w.options());
	nk_embedding_args_t a{};
	a.dtype = nk_dtype(w.scalar_type(), "aten::embedding");
	a.idx_dtype = nk_dtype(idx.scalar_type(), "aten::embedding");
	a.n = idx.numel(), a.V = w.size(0), a.C = w.size(1);
	a.weight = wc.const_data_ptr(), a.idx = ic.const_data_ptr(), a.out = out.data_ptr();
	if (out.numel())
		launch(current_queue(w.device().index()), nk_embedding_run, a, "aten::embedding");
	return out;
}

static at::Tensor embedding_dense_backward(const at::Tensor &grad, const at::Tensor &idx, int64_t num_weights, int64_t padding_idx, bool scale_grad_by_freq)
{
	NEURON_TRACK("aten::embedding_dense_backward");
	TORCH_CHECK(!scale_grad_by_freq, "embedding backward with scale_grad_by_freq=True is not supported on neuron yet");
	c10::DeviceGuard g(grad.device());
	int64_t C = grad.size(-1);
	at::Tensor gc = grad.contiguous().view({-1, C}), ic = idx.contiguous();
	at::Tensor gw = at::empty({num_weights, C}, grad.options());
	nk_embedding_bwd_args_t a{};
	a.dtype = nk_dtype(grad.scalar_type(), "aten::embedding_dense_backward");
	a.idx_dtype = nk_dtype(idx.scalar_type(), "aten::embedding_dense_backward");
	a.n = idx.numel(), a.V = num_weights, a.C = C, a.padding_idx = padding_idx;
	a.grad_out = gc.const_data_ptr(), a.idx = ic.const_data_ptr(), a.grad_weight = gw.data_ptr();
	if (gw.numel())
		launch(current_queue(grad.device().index()), nk_embedding_bwd_run, a, "aten::embedding_dense_backward");
	return gw;
}

// ---- softmax ---------------------------------------------------------------------------------------

// Run fn over x with `dim` moved last and made contiguous; returns y in x's layout.
static at::Tensor softmax_impl(const char *name, const at::Tensor &x, int64_t dim, bool log, bool half_to_float)
{
	c10::DeviceGuard g(x.device());
	int64_t d = at::maybe_wrap_dim(dim, x.dim());
	at::Tensor xin = half_to_float ? x.to(at::kFloat) : x;
	// aten's dtype dispatch error (NotImplementedError), naming the op instead of its CPU kernel
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(xin.scalar_type()), "\"", log ? "log_softmax" : "softmax", "\" not implemented for '",
				    c10::toString(xin.scalar_type()), "'");
	// the usual case (last dim of a contiguous tensor) takes no transposed views: they cost dispatcher
	// calls per op
	bool last = x.dim() == 0 || d == x.dim() - 1;
	at::Tensor xt = x.dim() == 0 ? xin.reshape({1}) : last ? xin.contiguous() : xin.transpose(d, -1).contiguous();
	at::Tensor y = at::empty_like(xt);
	nk_softmax_args_t a{};
	a.dtype = nk_dtype(xt.scalar_type(), name);
	a.log = log;
	a.cols = xt.dim() ? xt.size(-1) : 1;
	a.rows = a.cols ? xt.numel() / a.cols : 0;
	a.x = xt.const_data_ptr(), a.y = y.data_ptr();
	if (y.numel())
		launch(current_queue(x.device().index()), nk_softmax_run, a, name);
	return x.dim() == 0 ? y.view(at::IntArrayRef{}) : last ? y : y.transpose(d, -1);
}
static at::Tensor softmax(const at::Tensor &x, int64_t dim, bool h2f) { NEURON_TRACK("aten::_softmax"); return softmax_impl("aten::_softmax", x, dim, false, h2f); }
static at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool h2f) { NEURON_TRACK("aten::_log_softmax"); return softmax_impl("aten::_log_softmax", x, dim, true, h2f); }

static at::Tensor softmax_bwd_impl(const char *name, const at::Tensor &dy, const at::Tensor &y, int64_t dim, bool log, at::ScalarType in_dtype)
{
	c10::DeviceGuard g(y.device());
	int64_t d = at::maybe_wrap_dim(dim, y.dim());
	bool last = y.dim() == 0 || d == y.dim() - 1;
	at::Tensor yt = y.dim() == 0 ? y.reshape({1}) : last ? y.contiguous() : y.transpose(d, -1).contiguous();
	at::Tensor dyt = dy.dim() == 0 ? dy.reshape({1}) : last ? dy.contiguous() : dy.transpose(d, -1).contiguous();
	if (dyt.scalar_type() != y.scalar_type())
		dyt = dyt.to(y.scalar_type());
	at::Tensor dx = at::empty_like(yt);
	nk_softmax_bwd_args_t a{};
	a.dtype = nk_dtype(yt.scalar_type(), name);
	a.log = log;
	a.cols = yt.size(-1);
	a.rows = a.cols ? yt.numel() / a.cols : 0;
	a.dy = dyt.const_data_ptr(), a.y = yt.const_data_ptr(), a.dx = dx.data_ptr();
	if (dx.numel())
		launch(current_queue(y.device().index()), nk_softmax_bwd_run, a, name);
	at::Tensor r = y.dim() == 0 ? dx.view(at::IntArrayRef{}) : last ? dx : dx.transpose(d, -1);
	return r.scalar_type() == in_dtype ? r : r.to(in_dtype);
}
static at::Tensor softmax_bwd(const at::Tensor &dy, const at::Tensor &y, int64_t dim, at::ScalarType t) { NEURON_TRACK("aten::_softmax_backward_data"); return softmax_bwd_impl("aten::_softmax_backward_data", dy, y, dim, false, t); }
static at::Tensor log_softmax_bwd(const at::Tensor &dy, const at::Tensor &y, int64_t dim, at::ScalarType t) { NEURON_TRACK("aten::_log_softmax_backward_data"); return softmax_bwd_impl("aten::_log_softmax_backward_data", dy, y, dim, true, t); }

// ---- layer norm ------------------------------------------------------------------------------------

// t contiguous in dtype; no dispatcher call when it already is (Tensor::to is one even as a no-op)
static at::Tensor contiguous_as(const at::Tensor &t, at::ScalarType dtype)
{
	at::Tensor c = t.contiguous();
	return c.scalar_type() == dtype ? c : c.to(dtype);
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(const at::Tensor &x, at::IntArrayRef ns, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b, double eps)
{
	NEURON_TRACK("aten::native_layer_norm");
	int64_t k = (int64_t)ns.size();
	TORCH_CHECK(k >= 1 && x.dim() >= k && x.sizes().slice(x.dim() - k).equals(ns), "Given normalized_shape=", ns,
		    ", expected input with shape [*, ", ns, "], but got input of size", x.sizes());
	bool hw = w.has_value() && w->defined(), hb = b.has_value() && b->defined();
	if (hw)
		TORCH_CHECK(w->sizes().equals(ns), "Expected weight to be of same shape as normalized_shape, but got weight of shape ", w->sizes(), " and normalized_shape = ", ns);
	if (hb)
		TORCH_CHECK(b->sizes().equals(ns), "Expected bias to be of same shape as normalized_shape, but got bias of shape ", b->sizes(), " and normalized_shape = ", ns);
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous();
	at::Tensor wc = hw ? contiguous_as(*w, x.scalar_type()) : at::Tensor(), bc = hb ? contiguous_as(*b, x.scalar_type()) : at::Tensor();
	int64_t N = c10::multiply_integers(ns), M = N ? xc.numel() / N : 0;
	auto stat_shape = x.sizes().vec();
	for (int64_t i = x.dim() - k; i < x.dim(); i++)
		stat_shape[i] = 1;
	at::Tensor y = at::empty_like(xc), mean = at::empty(stat_shape, x.options()), rstd = at::empty(stat_shape, x.options());
	nk_layernorm_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), "aten::native_layer_norm");
	a.rows = M, a.cols = N, a.eps = eps;
	a.x = xc.const_data_ptr(), a.w = hw ? wc.const_data_ptr() : nullptr, a.b = hb ? bc.const_data_ptr() : nullptr;
	a.y = y.data_ptr(), a.mean = mean.data_ptr(), a.rstd = rstd.data_ptr();
	if (M > 0)
		launch(current_queue(x.device().index()), nk_layernorm_run, a, "aten::native_layer_norm");
	return {y, mean, rstd};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd(const at::Tensor &dy, const at::Tensor &x, at::IntArrayRef ns, const at::Tensor &mean, const at::Tensor &rstd,
								     const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b, std::array<bool, 3> mask)
{
	NEURON_TRACK("aten::native_layer_norm_backward");
	c10::DeviceGuard g(x.device());
	bool hw = w.has_value() && w->defined(), hb = b.has_value() && b->defined();
	at::Tensor xc = x.contiguous(), dyc = contiguous_as(dy, x.scalar_type());
	at::Tensor wc = hw ? contiguous_as(*w, x.scalar_type()) : at::Tensor();
	int64_t N = c10::multiply_integers(ns), M = N ? xc.numel() / N : 0;
	at::Tensor dx, dw, db;
	if (mask[0])
		dx = at::empty_like(xc);
	if (mask[1] && hw)
		dw = at::empty(ns, x.options());
	if (mask[2] && hb)
		db = at::empty(ns, x.options());
	if (M == 0) {
		if (dw.defined())
			dw.zero_();
		if (db.defined())
			db.zero_();
	} else {
		nk_layernorm_bwd_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), "aten::native_layer_norm_backward");
		a.rows = M, a.cols = N;
		a.dy = dyc.const_data_ptr(), a.x = xc.const_data_ptr();
		a.mean = mean.contiguous().const_data_ptr(), a.rstd = rstd.contiguous().const_data_ptr();
		a.w = hw ? wc.const_data_ptr() : nullptr;
		a.dx = dx.defined() ? dx.data_ptr() : nullptr;
		a.dw = dw.defined() ? dw.data_ptr() : nullptr;
		a.db = db.defined() ? db.data_ptr() : nullptr;
		launch(current_queue(x.device().index()), nk_layernorm_bwd_run, a, "aten::native_layer_norm_backward");
	}
	if (dw.defined() && w->scalar_type() != dw.scalar_type())
		dw = dw.to(w->scalar_type());
	if (db.defined() && b->scalar_type() != db.scalar_type())
		db = db.to(b->scalar_type());
	return {dx, dw, db};
}

// ---- nll_loss --------------------------------------------------------------------------------------

// aten's nll_loss_forward meta, then its CPU kernel's dtype checks (target Long or Byte; a weight of
// the input's dtype), with their messages
static void check_nll(const at::Tensor &self, const at::Tensor &target, const at::Tensor &weight)
{
	TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
	TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
	bool no_batch_dim = self.dim() == 1 && target.dim() == 0;
	TORCH_CHECK(no_batch_dim || (self.size(0) == target.size(0)), "size mismatch (got input: ", self.sizes(), ", target: ", target.sizes(), ")");
	int64_t C = self.size(-1);
	TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == C), "weight tensor should be defined either for all ", C,
		    " classes or no classes but got weight tensor of shape: ", weight.sizes());
	check_same_device("nll_loss", {&self, &target, &weight});
	TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
		    "expected target dtype to be Long or Byte, but got ", target.scalar_type());
	TORCH_CHECK(!weight.defined() || weight.scalar_type() == self.scalar_type(), "expected scalar type ", self.scalar_type(),
		    " but found ", weight.scalar_type());
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()) && !at::isFloat8Type(self.scalar_type()),
				    "\"nll_loss\" not implemented for '", c10::toString(self.scalar_type()), "'");
}

static std::tuple<at::Tensor, at::Tensor> nll_fwd(const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &weight_opt, int64_t reduction, int64_t ignore_index)
{
	NEURON_TRACK("aten::nll_loss_forward");
	at::Tensor weight = weight_opt.has_value() ? *weight_opt : at::Tensor();
	check_nll(self, target, weight);
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.dim() == 1 ? self.unsqueeze(0) : self;
	x = x.contiguous();
	at::Tensor t = target.to(at::kLong).contiguous(), wc = weight.defined() ? weight.contiguous() : weight;
	int64_t N = x.size(0), C = x.size(1);
	at::Tensor out = reduction == NK_REDUCTION_NONE && self.dim() == 2 ? at::empty({N}, self.options()) : at::empty({}, self.options());
	at::Tensor tw = at::empty({}, self.options());
	nk_nll_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::nll_loss_forward");
	a.N = N, a.C = C, a.ignore_index = ignore_index, a.reduction = (int)reduction;
	a.logp = x.const_data_ptr(), a.target = t.const_data_ptr(), a.weight = wc.defined() ? wc.const_data_ptr() : nullptr;
	a.out = out.data_ptr(), a.total_weight = tw.data_ptr();
	launch(current_queue(self.device().index()), nk_nll_run, a, "aten::nll_loss_forward");
	return {out, tw};
}

static at::Tensor nll_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, const std::optional<at::Tensor> &weight_opt, int64_t reduction, int64_t ignore_index, const at::Tensor &total_weight)
{
	NEURON_TRACK("aten::nll_loss_backward");
	at::Tensor weight = weight_opt.has_value() ? *weight_opt : at::Tensor();
	check_nll(self, target, weight);
	c10::DeviceGuard g(self.device());
	int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(-1);
	at::Tensor gi = at::empty(self.sizes(), self.options());
	at::Tensor gc = grad.contiguous().to(self.scalar_type()), t = target.to(at::kLong).contiguous();
	at::Tensor wc = weight.defined() ? weight.contiguous() : weight;
	nk_nll_bwd_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::nll_loss_backward");
	a.N = N, a.C = C, a.ignore_index = ignore_index, a.reduction = (int)reduction;
	a.grad_out = gc.const_data_ptr(), a.target = t.const_data_ptr(), a.weight = wc.defined() ? wc.const_data_ptr() : nullptr;
	a.total_weight = total_weight.contiguous().const_data_ptr();
	a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(current_queue(self.device().index()), nk_nll_bwd_run, a, "aten::nll_loss_backward");
	return gi;
}

// ---- scaled_dot_product_attention: the "overrideable" fused path -----------------------------------

std::pair<uint64_t, uint64_t> philox_args(const std::optional<at::Generator> &gen, c10::DeviceIndex idx, int64_t n);

/* Sizes are compared as SymInts: under dynamic shapes (FakeTensors with symbolic sizes) a concrete
 * size() would specialize the sequence length and recompile the graph for every length. */
static int64_t sdp_choice(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::optional<at::Tensor> &mask, double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa)
{
	bool ok = q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type() &&
		  at::isFloatingType(q.scalar_type()) && q.device() == k.device() && q.device() == v.device();
	if (ok) {
		ok = q.sym_size(0) == k.sym_size(0) && q.sym_size(0) == v.sym_size(0) && k.sym_size(2) == v.sym_size(2) &&
		     q.sym_size(3) == k.sym_size(3) && k.sym_size(1) == v.sym_size(1) && k.sym_size(1) > 0 &&
		     (q.sym_size(1) == k.sym_size(1) || (enable_gqa && q.sym_size(1) % k.sym_size(1) == 0));
	}
	if (ok && mask.has_value() && mask->defined()) {
		const at::Tensor &m = *mask;
		// the fused kernel has no attn_mask gradient: a mask that needs one takes the math path
		// (composed of native matmul/softmax ops, which autograd differentiates)
		ok = !(m.requires_grad() && at::GradMode::is_enabled()) && m.dim() <= 4 && (m.scalar_type() == at::kBool || m.scalar_type() == q.scalar_type()) && m.device() == q.device();
		c10::SymInt full[4] = {q.sym_size(0), q.sym_size(1), q.sym_size(2), k.sym_size(2)};
		for (int64_t i = 0; ok && i < m.dim(); i++) {
			c10::SymInt s = m.sym_size(m.dim() - 1 - i);
			ok = s == full[3 - i] || s == 1;
		}
	}
	return (int64_t)(ok ? sdp::SDPBackend::overrideable : sdp::SDPBackend::math);
}

static void fill4(int64_t *dst, const at::Tensor &t)
{
	for (int i = 0; i < 4; i++)
		dst[i] = t.size(i) == 1 ? (t.dim() == 4 ? t.stride(i) : 0) : t.stride(i);
}

static at::Tensor mask4(const at::Tensor &m)
{
	at::Tensor r = m;
	while (r.dim() < 4)
		r = r.unsqueeze(0);
	return r;
}

static void attn_args(nk_attention_args_t &a, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &mask,
		      double dropout_p, bool causal, std::optional<double> scale)
{
	a.dtype = nk_dtype(q.scalar_type(), "aten::scaled_dot_product_attention");
	a.B = q.size(0), a.Hq = q.size(1), a.Hkv = k.size(1), a.Tq = q.size(2), a.Tk = k.size(2), a.D = q.size(3), a.Dv = v.size(3);
	a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt((double)q.size(3));
	a.dropout_p = dropout_p;
	a.causal = causal;
	a.q = q.const_data_ptr(), a.k = k.const_data_ptr(), a.v = v.const_data_ptr();
	for (int i = 0; i < 4; i++)
		a.sq[i] = q.stride(i), a.sk[i] = k.stride(i), a.sv[i] = v.stride(i);
	if (mask.defined()) {
		at::Tensor m4 = mask4(mask);
		a.mask = m4.const_data_ptr();
		a.mask_dtype = nk_dtype(m4.scalar_type(), "aten::scaled_dot_product_attention");
		for (int i = 0; i < 4; i++)
			a.smask[i] = m4.size(i) == 1 ? 0 : m4.stride(i);
	}
}

/* The output with the layout of the meta function (alloc_with_matching_layout in
 * torch/_meta_registrations.py): q's layout when the shapes agree, else q's dim order. Compiled
 * graphs are traced with these strides. */
static at::Tensor sdpa_out_like(const at::Tensor &q, int64_t dv)
{
	std::vector<int64_t> shape{q.size(0), q.size(1), q.size(2), dv};
	if (q.sizes().vec() == shape)
		return at::empty_like(q);
	int order[4] = {0, 1, 2, 3};
	std::stable_sort(order, order + 4, [&](int a, int b) { return q.stride(a) > q.stride(b); });
	std::vector<int64_t> strides(4);
	int64_t st = 1;
	for (int i = 3; i >= 0; i--) {
		strides[order[i]] = st;
		st *= shape[order[i]];
	}
	return at::empty_strided(shape, strides, q.options());
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::optional<at::Tensor> &bias, double dropout_p, bool causal, bool debug_mask, std::optional<double> scale)
{
	NEURON_TRACK("aten::_scaled_dot_product_fused_attention_overrideable");
	TORCH_CHECK(!debug_mask, "scaled_dot_product_attention: return_debug_mask is not supported on neuron");
	c10::DeviceGuard g(q.device());
	at::Tensor mask = bias.has_value() ? *bias : at::Tensor();
	at::Tensor out = sdpa_out_like(q, v.size(3));
	at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
	nk_attention_args_t a{};
	attn_args(a, q, k, v, mask, dropout_p, causal, scale);
	uint64_t seed = 0, off = 0;
	if (dropout_p > 0) {
		auto so = philox_args(std::nullopt, q.device().index(), a.B * a.Hq * a.Tq * a.Tk);
		seed = so.first, off = so.second;
	}
	a.seed = seed, a.offset = off;
	a.out = out.data_ptr(), a.lse = lse.data_ptr();
	for (int i = 0; i < 4; i++)
		a.so[i] = out.stride(i);
	if (out.numel())
		launch(current_queue(q.device().index()), nk_attention_run, a, "aten::scaled_dot_product_attention");
	auto cpu_long = at::TensorOptions().dtype(at::kLong);
	at::Tensor ts = at::scalar_tensor((int64_t)seed, cpu_long), to = at::scalar_tensor((int64_t)off, cpu_long);
	return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)), c10::SymInt(k.size(2)), ts, to, at::Tensor()};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>
sdpa_bwd(const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &bias, std::array<bool, 4> mask_req,
	 const at::Tensor &out, const at::Tensor &lse, const at::Tensor &, const at::Tensor &, int64_t, int64_t, double dropout_p, bool causal,
	 const at::Tensor &seed, const at::Tensor &offset, std::optional<double> scale)
{
	NEURON_TRACK("aten::_scaled_dot_product_fused_attention_overrideable_backward");
	TORCH_CHECK(!(mask_req[3] && bias.defined()), "scaled_dot_product_attention: the gradient of attn_mask is not supported on neuron");
	c10::DeviceGuard g(q.device());
	at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v); /* as the meta function */
	nk_attention_bwd_args_t a{};
	attn_args(a.f, q, k, v, bias, dropout_p, causal, scale);
	a.f.seed = dropout_p > 0 ? (uint64_t)seed.item<int64_t>() : 0;
	a.f.offset = dropout_p > 0 ? (uint64_t)offset.item<int64_t>() : 0;
	a.f.out = const_cast<void *>(out.const_data_ptr());
	a.f.lse = const_cast<void *>(lse.const_data_ptr());
	for (int i = 0; i < 4; i++)
		a.f.so[i] = out.stride(i);
	a.dout = dout.const_data_ptr();
	a.dq = dq.data_ptr(), a.dk = dk.data_ptr(), a.dv = dv.data_ptr();
	for (int i = 0; i < 4; i++)
		a.sdo[i] = dout.stride(i), a.sdq[i] = dq.stride(i), a.sdk[i] = dk.stride(i), a.sdv[i] = dv.stride(i);
	if (dq.numel() || dk.numel())
		launch(current_queue(q.device().index()), nk_attention_bwd_run, a, "aten::scaled_dot_product_attention_backward");
	return {dq, dk, dv, at::Tensor()};
}

// ---- dropout backward ------------------------------------------------------------------------------

static at::Tensor dropout_bwd(const at::Tensor &grad, const at::Tensor &mask, double scale)
{
	NEURON_TRACK("aten::native_dropout_backward");
	return grad * mask.to(grad.scalar_type()) * scale;
}

// ---- mse_loss: composed of native elementwise and reduction kernels ----------------------------------

static at::Tensor mse_loss_f(const at::Tensor &self, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::mse_loss");
	at::Tensor d = self - target;
	at::Tensor sq = d * d;
	if (reduction == NK_REDUCTION_MEAN)
		return sq.mean();
	if (reduction == NK_REDUCTION_SUM)
		return sq.sum();
	return sq;
}
static at::Tensor &mse_loss_out(const at::Tensor &self, const at::Tensor &target, int64_t reduction, at::Tensor &out)
{
	return into(out, mse_loss_f(self, target, reduction), OutRule::Cast);
}
static at::Tensor mse_loss_bwd(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::mse_loss_backward");
	double norm = reduction == NK_REDUCTION_MEAN ? 2.0 / (double)std::max<int64_t>(self.numel(), 1) : 2.0;
	return (self - target) * grad * norm;
}
static at::Tensor &mse_loss_bwd_out(const at::Tensor &grad, const at::Tensor &self, const at::Tensor &target, int64_t reduction, at::Tensor &gi)
{
	return into(gi, mse_loss_bwd(grad, self, target, reduction), OutRule::Cast);
}

} // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::sdp_choice);
}

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
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
	NEURON_IMPL(m, "cat", cat);
	NEURON_IMPL(m, "cat.out", cat_out);
	NEURON_IMPL(m, "embedding", embedding);
	NEURON_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
	NEURON_IMPL(m, "_softmax", softmax);
	NEURON_IMPL(m, "_log_softmax", log_softmax);
	NEURON_IMPL(m, "_softmax_backward_data", softmax_bwd);
	NEURON_IMPL(m, "_log_softmax_backward_data", log_softmax_bwd);
	NEURON_IMPL(m, "native_layer_norm", layer_norm);
	NEURON_IMPL(m, "native_layer_norm_backward", layer_norm_bwd);
	NEURON_IMPL(m, "nll_loss_forward", nll_fwd);
	NEURON_IMPL(m, "nll_loss_backward", nll_bwd);
	NEURON_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_fwd);
	NEURON_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", sdpa_bwd);
	NEURON_IMPL(m, "native_dropout_backward", dropout_bwd);
	NEURON_IMPL(m, "mse_loss", mse_loss_f);
	NEURON_IMPL(m, "mse_loss.out", mse_loss_out);
	NEURON_IMPL(m, "mse_loss_backward", mse_loss_bwd);
	NEURON_IMPL(m, "mse_loss_backward.grad_input", mse_loss_bwd_out);
}
