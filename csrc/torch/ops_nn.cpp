// ops_nn.cpp - the neural-network ops of the training path: cat, embedding, softmax/log_softmax,
// scaled_dot_product_attention, dropout backward.  Shapes and dtypes are checked here; the C
// kernels get contiguous buffers or explicit strides.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "nk_attention_varlen.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

#include <algorithm>

namespace neuron {

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
	int64_t num = -1;
	for (const at::Tensor &t : ts) {
		num++;
		if (t.dim() == 1 && t.numel() == 0)
			continue;
		TORCH_CHECK(t.dim() == ref->dim(), "torch.cat(): Tensors must have same number of dimensions: got ", ref->dim(), " and ", t.dim());
		for (int64_t k = 0; k < ref->dim(); k++)
			TORCH_CHECK(k == d || t.size(k) == ref->size(k), "Sizes of tensors must match except in dimension ", d, ". Expected size ", ref->size(k), " but got size ", t.size(k), " for tensor number ", num, " in the list.");
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
	TORCH_CHECK(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt, "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got torch.", idx.scalar_type(), "Tensor instead (while checking arguments for embedding)");
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
	// aten's dtype dispatch error (NotImplementedError), naming the CPU kernel as the CPU does
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(xin.scalar_type()), "\"", log ? "log_" : "", "softmax_",
				    x.dim() == 0 || d == x.dim() - 1 ? "lastdim_" : "", "kernel_impl\" not implemented for '",
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

// ---- scaled_dot_product_attention: the "overrideable" fused path -----------------------------------

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

// ---- flash attention: the contract of aten::_flash_attention_forward/_backward ------------------------
// torch.nn.attention.varlen.varlen_attn (TorchTitan's varlen backend) calls these with packed sequences
// (cum_seq_q/cum_seq_k); without offsets q is [B, Tq, Hq, D].  Causality is is_causal or the window
// (-1, 0); other windows, dropout, alibi, paged KV and seqused_k are refused.

static bool flash_causal(const char *op, bool is_causal, std::optional<c10::SymInt> wl, std::optional<c10::SymInt> wr)
{
	int64_t l = wl.has_value() ? wl->guard_int(__FILE__, __LINE__) : -1, r = wr.has_value() ? wr->guard_int(__FILE__, __LINE__) : -1;
	bool full = l < 0 && r < 0, causal_window = l < 0 && r == 0;
	if (!full && !causal_window)
		throw c10::NotImplementedError({__func__, __FILE__, __LINE__},
					       std::string(op) + ": window_size (" + std::to_string(l) + ", " + std::to_string(r) +
						       ") is not supported on neuron; (-1, -1) and (-1, 0) are");
	return is_causal || causal_window;
}

static void flash_check(const char *op, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, bool varlen)
{
	int64_t dim = varlen ? 3 : 4;
	TORCH_CHECK(q.dim() == dim && k.dim() == dim && v.dim() == dim, op, ": expected ", dim, "-D query, key and value ",
		    varlen ? "([tokens, heads, dim] with cum_seq_q/cum_seq_k)" : "([batch, seq, heads, dim])", ", got ", q.sizes(), ", ",
		    k.sizes(), " and ", v.sizes());
	TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), op,
		    ": query, key and value must have one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), " and ", v.scalar_type());
	int64_t h = dim - 2;
	TORCH_CHECK(q.size(dim - 1) == k.size(dim - 1) && k.size(h) == v.size(h) && k.size(h) > 0 && q.size(h) % k.size(h) == 0, op,
		    ": query ", q.sizes(), ", key ", k.sizes(), " and value ", v.sizes(),
		    " need equal head dims of query and key and a query head count divisible by the key/value head count");
}

/* q/k/v/out as [tokens, heads, dim] (varlen) or [batch, seq, heads, dim]: the kernels' (B, H, T, D) strides. */
static void bhtd_strides(int64_t *dst, const at::Tensor &t)
{
	if (t.dim() == 3)
		dst[0] = 0, dst[1] = t.stride(1), dst[2] = t.stride(0), dst[3] = t.stride(2);
	else
		dst[0] = t.stride(0), dst[1] = t.stride(2), dst[2] = t.stride(1), dst[3] = t.stride(3);
}

static void flash_args(nk_attention_args_t &a, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, bool causal,
		       std::optional<double> scale, const char *op)
{
	bool varlen = q.dim() == 3;
	a.dtype = nk_dtype(q.scalar_type(), op);
	a.B = varlen ? 1 : q.size(0);
	a.Hq = q.size(-2), a.Hkv = k.size(-2), a.D = q.size(-1), a.Dv = v.size(-1);
	a.Tq = q.size(-3), a.Tk = k.size(-3);
	a.scale = scale.has_value() ? *scale : 1.0 / std::sqrt((double)q.size(-1));
	a.causal = causal;
	a.q = q.const_data_ptr(), a.k = k.const_data_ptr(), a.v = v.const_data_ptr();
	bhtd_strides(a.sq, q), bhtd_strides(a.sk, k), bhtd_strides(a.sv, v);
}

static void varlen_args(nk_attention_varlen_args_t &a, const at::Tensor &cu_q, const at::Tensor &cu_k, int64_t max_q, int64_t max_k,
			const at::Tensor &q, const at::Tensor &k, const char *op)
{
	TORCH_CHECK(cu_q.dim() == 1 && cu_k.dim() == 1 && cu_q.numel() == cu_k.numel() && cu_q.numel() >= 1, op,
		    ": cum_seq_q and cum_seq_k must be 1-D with one entry more than there are sequences, got ", cu_q.sizes(), " and ",
		    cu_k.sizes());
	TORCH_CHECK(cu_q.scalar_type() == cu_k.scalar_type() && (cu_q.scalar_type() == at::kInt || cu_q.scalar_type() == at::kLong), op,
		    ": cum_seq_q and cum_seq_k must both be int32 or int64, got ", cu_q.scalar_type(), " and ", cu_k.scalar_type());
	TORCH_CHECK(cu_q.device() == q.device() && cu_k.device() == q.device(), op, ": cum_seq_q and cum_seq_k must be on ", q.device(),
		    ", got ", cu_q.device(), " and ", cu_k.device());
	TORCH_CHECK(max_q >= 0 && max_k >= 0, op, ": max_q and max_k must be non-negative, got ", max_q, " and ", max_k);
	a.cu_q = cu_q.const_data_ptr(), a.cu_k = cu_k.const_data_ptr();
	a.cu_dtype = cu_q.scalar_type() == at::kInt ? NK_I32 : NK_I64;
	a.nseq = cu_q.numel() - 1;
	a.total_q = q.size(0), a.total_k = k.size(0), a.max_q = max_q, a.max_k = max_k;
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
flash_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::optional<at::Tensor> &cum_q,
	  const std::optional<at::Tensor> &cum_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal, bool debug_mask,
	  std::optional<double> scale, std::optional<c10::SymInt> wl, std::optional<c10::SymInt> wr, const std::optional<at::Tensor> &seqused_k,
	  const std::optional<at::Tensor> &alibi, const std::optional<at::Tensor> &block_table, std::optional<int64_t> num_splits)
{
	const char *op = "aten::_flash_attention_forward";
	NEURON_TRACK(op);
	bool varlen = cum_q.has_value() && cum_q->defined();
	TORCH_CHECK(varlen == (cum_k.has_value() && cum_k->defined()), op, ": cum_seq_q and cum_seq_k must be given together");
	TORCH_CHECK(!debug_mask, op, ": return_debug_mask is not supported on neuron");
	if (dropout_p != 0 || (seqused_k.has_value() && seqused_k->defined()) || (alibi.has_value() && alibi->defined()) ||
	    (block_table.has_value() && block_table->defined()))
		throw c10::NotImplementedError({__func__, __FILE__, __LINE__},
					       std::string(op) + ": dropout, seqused_k, alibi_slopes and block_table are not supported on neuron");
	flash_check(op, q, k, v, varlen);
	bool causal = flash_causal(op, is_causal, wl, wr);
	c10::DeviceGuard g(q.device());
	std::vector<int64_t> oshape = q.sizes().vec();
	oshape.back() = v.size(-1);
	at::Tensor out = at::empty(oshape, q.options());
	at::Tensor lse = varlen ? at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat))
				: at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
	nrt_queue_t *queue = current_queue(q.device().index());
	if (varlen) {
		nk_attention_varlen_args_t a{};
		flash_args(a.f, q, k, v, causal, scale, op);
		varlen_args(a, *cum_q, *cum_k, max_q.guard_int(__FILE__, __LINE__), max_k.guard_int(__FILE__, __LINE__), q, k, op);
		at::Tensor tmp = at::empty({std::max<int64_t>(1, a.f.Hq * a.max_q)}, lse.options());
		a.f.out = out.data_ptr(), bhtd_strides(a.f.so, out);
		a.lse = lse.data_ptr<float>(), a.lse_tmp = tmp.data_ptr<float>();
		if (out.numel() || lse.numel())
			launch(queue, nk_attention_varlen_run, a, op);
	} else {
		TORCH_CHECK(!causal || q.size(1) == k.size(1), op, ": causal attention with ", q.size(1), " queries and ", k.size(1),
			    " keys: only equal lengths are supported on neuron");
		nk_attention_args_t a{};
		flash_args(a, q, k, v, causal, scale, op);
		a.out = out.data_ptr(), bhtd_strides(a.so, out);
		a.lse = lse.data_ptr();
		if (out.numel())
			launch(queue, nk_attention_run, a, op);
	}
	at::Tensor rng = at::zeros({2}, q.options().dtype(at::kLong));
	return {out, lse, rng, at::empty({0}, q.options().dtype(at::kLong)), at::empty({0}, q.options())};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor>
flash_bwd(const at::Tensor &dout, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &out, const at::Tensor &lse,
	  const at::Tensor &cum_q, const at::Tensor &cum_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p, bool is_causal,
	  const at::Tensor &, const at::Tensor &, std::optional<double> scale, std::optional<c10::SymInt> wl, std::optional<c10::SymInt> wr)
{
	const char *op = "aten::_flash_attention_backward";
	NEURON_TRACK(op);
	/* dense when the offsets are undefined (as aten's SDPA passes them) or empty (as Python can) */
	bool varlen = cum_q.defined() && cum_q.numel() > 0;
	if (dropout_p != 0)
		throw c10::NotImplementedError({__func__, __FILE__, __LINE__}, std::string(op) + ": dropout is not supported on neuron");
	flash_check(op, q, k, v, varlen);
	TORCH_CHECK(dout.sizes() == out.sizes() && out.scalar_type() == q.scalar_type() && dout.scalar_type() == q.scalar_type(), op,
		    ": grad_out ", dout.sizes(), " ", dout.scalar_type(), " must match out ", out.sizes(), " ", out.scalar_type());
	TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous(), op, ": logsumexp must be a contiguous float32 tensor");
	bool causal = flash_causal(op, is_causal, wl, wr);
	c10::DeviceGuard g(q.device());
	at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
	nrt_queue_t *queue = current_queue(q.device().index());
	if (varlen) {
		TORCH_CHECK(lse.dim() == 2 && lse.size(0) == q.size(1) && lse.size(1) == q.size(0), op, ": logsumexp must be [heads, tokens] = [",
			    q.size(1), ", ", q.size(0), "], got ", lse.sizes());
		nk_attention_varlen_bwd_args_t a{};
		flash_args(a.v.f, q, k, v, causal, scale, op);
		varlen_args(a.v, cum_q, cum_k, max_q.guard_int(__FILE__, __LINE__), max_k.guard_int(__FILE__, __LINE__), q, k, op);
		at::Tensor tmp = at::empty({std::max<int64_t>(1, a.v.f.Hq * a.v.max_q)}, lse.options());
		a.v.f.out = const_cast<void *>(out.const_data_ptr()), bhtd_strides(a.v.f.so, out);
		a.v.lse = const_cast<float *>(lse.const_data_ptr<float>()), a.v.lse_tmp = tmp.data_ptr<float>();
		a.dout = dout.const_data_ptr(), bhtd_strides(a.sdo, dout);
		a.dq = dq.data_ptr(), bhtd_strides(a.sdq, dq);
		a.dk = dk.data_ptr(), bhtd_strides(a.sdk, dk);
		a.dv = dv.data_ptr(), bhtd_strides(a.sdv, dv);
		if (dq.numel() || dk.numel())
			launch(queue, nk_attention_varlen_bwd_run, a, op);
	} else {
		TORCH_CHECK(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) && lse.size(2) == q.size(1), op,
			    ": logsumexp must be [batch, heads, seq], got ", lse.sizes());
		nk_attention_bwd_args_t a{};
		flash_args(a.f, q, k, v, causal, scale, op);
		a.f.out = const_cast<void *>(out.const_data_ptr()), bhtd_strides(a.f.so, out);
		a.f.lse = const_cast<void *>(lse.const_data_ptr());
		a.dout = dout.const_data_ptr(), bhtd_strides(a.sdo, dout);
		a.dq = dq.data_ptr(), bhtd_strides(a.sdq, dq);
		a.dk = dk.data_ptr(), bhtd_strides(a.sdk, dk);
		a.dv = dv.data_ptr(), bhtd_strides(a.sdv, dv);
		if (dq.numel() || dk.numel())
			launch(queue, nk_attention_bwd_run, a, op);
	}
	return {dq, dk, dv};
}

// ---- dropout backward ------------------------------------------------------------------------------

static at::Tensor dropout_bwd(const at::Tensor &grad, const at::Tensor &mask, double scale)
{
	NEURON_TRACK("aten::native_dropout_backward");
	return grad * mask.to(grad.scalar_type()) * scale;
}

} // namespace neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &neuron::sdp_choice);
}

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "cat", cat);
	NEURON_IMPL(m, "cat.out", cat_out);
	NEURON_IMPL(m, "embedding", embedding);
	NEURON_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
	NEURON_IMPL(m, "_softmax", softmax);
	NEURON_IMPL(m, "_log_softmax", log_softmax);
	NEURON_IMPL(m, "_softmax_backward_data", softmax_bwd);
	NEURON_IMPL(m, "_log_softmax_backward_data", log_softmax_bwd);
	NEURON_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_fwd);
	NEURON_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", sdpa_bwd);
	NEURON_IMPL(m, "native_dropout_backward", dropout_bwd);
	NEURON_IMPL(m, "_flash_attention_forward", flash_fwd);
	NEURON_IMPL(m, "_flash_attention_backward", flash_bwd);
}
