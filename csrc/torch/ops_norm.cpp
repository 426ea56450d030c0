// ops_norm.cpp - normalizations: layer norm, batch norm (all of aten's entry points), group norm and
// fused rms norm, forward and backward (layernorm.c, norm.c).  Shapes and dtypes are checked here;
// the C kernels get contiguous buffers.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"
#include "nk_weight_norm.h"

#include <ATen/ExpandUtils.h>
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
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>

namespace neuron {

// The dtype of the per-channel parameters and statistics: aten's CPU "mixed type" rule - bf16/f16
// input with any f32 parameter keeps every parameter in f32; otherwise the input's dtype.
static at::ScalarType param_dtype(const at::Tensor &x, std::initializer_list<const at::Tensor *> ps)
{
	if (at::isReducedFloatingType(x.scalar_type()))
		for (auto *p : ps)
			if (p->defined() && p->scalar_type() == at::kFloat)
				return at::kFloat;
	return x.scalar_type();
}

static at::Tensor as_param(const at::Tensor &t, at::ScalarType pt)
{
	return t.defined() ? t.contiguous().to(pt) : t;
}

// [N, C, S] view sizes of an (N, C, *) input.
static int64_t spatial(const at::Tensor &x)
{
	int64_t s = 1;
	for (int64_t d = 2; d < x.dim(); d++)
		s *= x.size(d);
	return s;
}

static at::Tensor like_input(const at::Tensor &y, const at::Tensor &x)
{
	auto mf = x.suggest_memory_format();
	return mf == at::MemoryFormat::Contiguous ? y : y.contiguous(mf);
}

// ---- batch norm ------------------------------------------------------------------------------------

static void check_bn_param(const char *op, const at::Tensor &t, int64_t C, const char *what)
{
	TORCH_CHECK(!t.defined() || t.numel() == C, op, ": ", what, " should contain ", C, " elements not ", t.numel(),
		    " (input of size ", C, " channels)");
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_forward(const char *op, const at::Tensor &x, const at::Tensor &w, const at::Tensor &b,
								 const at::Tensor &rm, const at::Tensor &rv, bool training, double momentum, double eps)
{
	TORCH_CHECK(x.dim() >= 2, op, ": expected an input of at least 2 dimensions (N, C, *), got ", x.sizes());
	check_float(op, x, "input");
	int64_t C = x.size(1);
	check_bn_param(op, w, C, "weight");
	check_bn_param(op, b, C, "bias");
	check_bn_param(op, rm, C, "running_mean");
	check_bn_param(op, rv, C, "running_var");
	TORCH_CHECK(training || (rm.defined() && rv.defined()), op, ": running_mean and running_var must be defined in evaluation mode");
	// as aten's CPU kernel (F.batch_norm handles empty input before it gets here)
	TORCH_CHECK(x.numel() > 0, op, ": input tensor must have at least one element, but got input_sizes = ", x.sizes());
	c10::DeviceGuard g(x.device());
	at::ScalarType pt = param_dtype(x, {&w, &b, &rm, &rv});
	at::Tensor xc = x.contiguous(), wc = as_param(w, pt), bc = as_param(b, pt);
	bool update = training && rm.defined() && rv.defined();
	at::Tensor rmc = rm.defined() ? as_param(rm, pt) : rm, rvc = rv.defined() ? as_param(rv, pt) : rv;
	at::Tensor y = at::empty_like(xc);
	at::Tensor sm = at::empty({training ? C : 0}, x.options().dtype(pt)), si = at::empty({training ? C : 0}, x.options().dtype(pt));
	nk_batchnorm_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op), a.pdtype = nk_dtype(pt, op);
	a.N = x.size(0), a.C = C, a.S = spatial(x);
	a.training = training, a.momentum = momentum, a.eps = eps;
	a.x = xc.const_data_ptr(), a.w = cptr(wc), a.b = cptr(bc);
	a.running_mean = training ? (update ? mptr(rmc) : nullptr) : mptr(rmc);
	a.running_var = training ? (update ? mptr(rvc) : nullptr) : mptr(rvc);
	a.y = y.data_ptr(), a.save_mean = training ? sm.data_ptr() : nullptr, a.save_invstd = training ? si.data_ptr() : nullptr;
	launch(queue_for(x), nk_batchnorm_run, a, op);
	// running stats converted or copied for the kernel are written back (in place, as aten does)
	if (update && !rmc.is_same(rm))
		const_cast<at::Tensor &>(rm).copy_(rmc);
	if (update && !rvc.is_same(rv))
		const_cast<at::Tensor &>(rv).copy_(rvc);
	return {like_input(y, x), sm, si};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_backward(const char *op, const at::Tensor &dy, const at::Tensor &x, const at::Tensor &w,
								  const at::Tensor &rm, const at::Tensor &rv, const at::Tensor &sm, const at::Tensor &si,
								  bool train, double eps, std::array<bool, 3> mask)
{
	TORCH_CHECK(x.dim() >= 2, op, ": expected an input of at least 2 dimensions, got ", x.sizes());
	TORCH_CHECK(dy.sizes() == x.sizes(), op, ": grad_out of size ", dy.sizes(), " does not match input of size ", x.sizes());
	check_float(op, x, "input");
	int64_t C = x.size(1);
	check_bn_param(op, w, C, "weight");
	const at::Tensor &mean = train ? sm : rm, &var = train ? si : rv;
	TORCH_CHECK(mean.defined() && var.defined(), op, ": ", train ? "save_mean and save_invstd" : "running_mean and running_var",
		    " must be defined");
	check_bn_param(op, mean, C, train ? "save_mean" : "running_mean");
	check_bn_param(op, var, C, train ? "save_invstd" : "running_var");
	c10::DeviceGuard g(x.device());
	at::ScalarType pt = param_dtype(x, {&w, &mean, &var});
	at::Tensor xc = x.contiguous(), dyc = dy.contiguous().to(x.scalar_type());
	at::Tensor wc = as_param(w, pt), mc = as_param(mean, pt), vc = as_param(var, pt);
	at::Tensor dx, dw, db;
	if (mask[0])
		dx = at::empty_like(xc);
	if (mask[1])
		dw = at::empty({C}, x.options().dtype(pt));
	if (mask[2])
		db = at::empty({C}, x.options().dtype(pt));
	if (x.numel() == 0) {
		if (dw.defined())
			dw.zero_();
		if (db.defined())
			db.zero_();
	} else if (mask[0] || mask[1] || mask[2]) {
		nk_batchnorm_bwd_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), op), a.pdtype = nk_dtype(pt, op);
		a.N = x.size(0), a.C = C, a.S = spatial(x);
		a.training = train, a.eps = eps;
		a.dy = dyc.const_data_ptr(), a.x = xc.const_data_ptr(), a.w = cptr(wc), a.mean = mc.const_data_ptr(), a.invstd = vc.const_data_ptr();
		a.dx = mptr(dx), a.dw = mptr(dw), a.db = mptr(db);
		launch(queue_for(x), nk_batchnorm_bwd_run, a, op);
	}
	if (dx.defined())
		dx = like_input(dx, x);
	if (dw.defined() && w.defined() && w.scalar_type() != pt)
		dw = dw.to(w.scalar_type());
	return {dx, dw, db};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> native_bn(const at::Tensor &x, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b,
								const std::optional<at::Tensor> &rm, const std::optional<at::Tensor> &rv, bool training, double momentum, double eps)
{
	NEURON_TRACK("aten::native_batch_norm");
	return bn_forward("native_batch_norm", x, opt(w), opt(b), opt(rm), opt(rv), training, momentum, eps);
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &> native_bn_out(const at::Tensor &x, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b,
									  const std::optional<at::Tensor> &rm, const std::optional<at::Tensor> &rv, bool training,
									  double momentum, double eps, at::Tensor &out, at::Tensor &sm, at::Tensor &si)
{
	NEURON_TRACK("aten::native_batch_norm.out");
	auto r = bn_forward("native_batch_norm", x, opt(w), opt(b), opt(rm), opt(rv), training, momentum, eps);
	copy_out(out, std::get<0>(r));
	if (training) { // aten's CPU kernel leaves the saved statistics as given in eval mode
		copy_out(sm, std::get<1>(r));
		copy_out(si, std::get<2>(r));
	}
	return {out, sm, si};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit(const at::Tensor &x, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b,
							       at::Tensor &rm, at::Tensor &rv, bool training, double momentum, double eps)
{
	NEURON_TRACK("aten::_native_batch_norm_legit");
	return bn_forward("_native_batch_norm_legit", x, opt(w), opt(b), rm, rv, training, momentum, eps);
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &> bn_legit_out(const at::Tensor &x, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b,
									 at::Tensor &rm, at::Tensor &rv, bool training, double momentum, double eps, at::Tensor &out,
									 at::Tensor &sm, at::Tensor &si)
{
	NEURON_TRACK("aten::_native_batch_norm_legit.out");
	auto r = bn_forward("_native_batch_norm_legit", x, opt(w), opt(b), rm, rv, training, momentum, eps);
	copy_out(out, std::get<0>(r));
	if (training) { // aten's CPU kernel leaves the saved statistics as given in eval mode
		copy_out(sm, std::get<1>(r));
		copy_out(si, std::get<2>(r));
	}
	return {out, sm, si};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit_nostats(const at::Tensor &x, const std::optional<at::Tensor> &w, const std::optional<at::Tensor> &b,
								       bool training, double momentum, double eps)
{
	NEURON_TRACK("aten::_native_batch_norm_legit.no_stats");
	return bn_forward("_native_batch_norm_legit", x, opt(w), opt(b), at::Tensor(), at::Tensor(), training, momentum, eps);
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &> bn_legit_nostats_out(const at::Tensor &x, const std::optional<at::Tensor> &w,
										 const std::optional<at::Tensor> &b, bool training, double momentum, double eps,
										 at::Tensor &out, at::Tensor &sm, at::Tensor &si)
{
	NEURON_TRACK("aten::_native_batch_norm_legit.no_stats_out");
	auto r = bn_forward("_native_batch_norm_legit", x, opt(w), opt(b), at::Tensor(), at::Tensor(), training, momentum, eps);
	copy_out(out, std::get<0>(r));
	if (training) { // aten's CPU kernel leaves the saved statistics as given in eval mode
		copy_out(sm, std::get<1>(r));
		copy_out(si, std::get<2>(r));
	}
	return {out, sm, si};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_with_update(const at::Tensor &x, const std::optional<at::Tensor> &w,
										 const std::optional<at::Tensor> &b, at::Tensor &rm, at::Tensor &rv,
										 double momentum, double eps)
{
	NEURON_TRACK("aten::_batch_norm_with_update");
	auto r = bn_forward("_batch_norm_with_update", x, opt(w), opt(b), rm, rv, true, momentum, eps);
	at::Tensor reserve = at::empty({0}, x.options().dtype(at::kByte));
	return {std::get<0>(r), std::get<1>(r), std::get<2>(r), reserve};
}

static std::tuple<at::Tensor &, at::Tensor &, at::Tensor &, at::Tensor &> bn_with_update_out(const at::Tensor &x, const std::optional<at::Tensor> &w,
											     const std::optional<at::Tensor> &b, at::Tensor &rm, at::Tensor &rv,
											     double momentum, double eps, at::Tensor &out, at::Tensor &sm,
											     at::Tensor &si, at::Tensor &reserve)
{
	NEURON_TRACK("aten::_batch_norm_with_update.out");
	auto r = bn_forward("_batch_norm_with_update", x, opt(w), opt(b), rm, rv, true, momentum, eps);
	copy_out(out, std::get<0>(r));
	copy_out(sm, std::get<1>(r));
	copy_out(si, std::get<2>(r));
	at::native::resize_output(reserve, {0});
	return {out, sm, si, reserve};
}

// The evaluation-mode entry points (CompositeExplicitAutograd in aten, whose kernel calls the CPU
// batch norm directly): running stats normalize; without them, the batch's own statistics.
static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_no_update(const at::Tensor &x, const std::optional<at::Tensor> &w,
									       const std::optional<at::Tensor> &b, const std::optional<at::Tensor> &rm,
									       const std::optional<at::Tensor> &rv, double momentum, double eps)
{
	NEURON_TRACK("aten::_batch_norm_no_update");
	at::Tensor m = opt(rm), v = opt(rv);
	bool stats = m.defined() && v.defined();
	auto r = bn_forward("_batch_norm_no_update", x, opt(w), opt(b), stats ? m : at::Tensor(), stats ? v : at::Tensor(), !stats, momentum, eps);
	at::Tensor reserve = at::empty({0}, x.options().dtype(at::kByte));
	at::ScalarType pt = std::get<1>(r).scalar_type();
	return {std::get<0>(r), at::empty({0}, x.options().dtype(pt)), at::empty({0}, x.options().dtype(pt)), reserve};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_legit_no_training(const at::Tensor &x, const std::optional<at::Tensor> &w,
									   const std::optional<at::Tensor> &b, const at::Tensor &rm, const at::Tensor &rv,
									   double momentum, double eps)
{
	NEURON_TRACK("aten::_native_batch_norm_legit_no_training");
	return bn_forward("_native_batch_norm_legit_no_training", x, opt(w), opt(b), rm, rv, false, momentum, eps);
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> native_bn_bwd(const at::Tensor &dy, const at::Tensor &x, const std::optional<at::Tensor> &w,
								    const std::optional<at::Tensor> &rm, const std::optional<at::Tensor> &rv,
								    const std::optional<at::Tensor> &sm, const std::optional<at::Tensor> &si, bool train, double eps,
								    std::array<bool, 3> mask)
{
	NEURON_TRACK("aten::native_batch_norm_backward");
	return bn_backward("native_batch_norm_backward", dy, x, opt(w), opt(rm), opt(rv), opt(sm), opt(si), train, eps, mask);
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_bwd_new(const at::Tensor &dy, const at::Tensor &x, const at::Tensor &w,
								 const std::optional<at::Tensor> &rm, const std::optional<at::Tensor> &rv,
								 const std::optional<at::Tensor> &sm, const std::optional<at::Tensor> &sv, bool update, double eps,
								 std::array<bool, 3> mask, const at::Tensor &reserve)
{
	NEURON_TRACK("aten::batch_norm_backward");
	return bn_backward("batch_norm_backward", dy, x, w, opt(rm), opt(rv), opt(sm), opt(sv), update, eps, mask);
}

// ---- group norm ------------------------------------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm(const at::Tensor &x, const std::optional<at::Tensor> &w_opt,
								 const std::optional<at::Tensor> &b_opt, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
								 int64_t G, double eps)
{
	NEURON_TRACK("aten::native_group_norm");
	const char *op = "native_group_norm";
	at::Tensor w = opt(w_opt), b = opt(b_opt);
	int64_t N = N_.expect_int(), C = C_.expect_int(), S = HxW_.expect_int();
	check_float(op, x, "input");
	TORCH_CHECK(G > 0 && C % G == 0, op, ": Expected number of channels in input to be divisible by num_groups, but got input of shape ",
		    x.sizes(), " and num_groups=", G);
	TORCH_CHECK(x.numel() == N * C * S, op, ": Expected input with ", N * C * S, " elements (N=", N, ", C=", C, ", HxW=", S, "), got ", x.sizes());
	TORCH_CHECK(!w.defined() || w.numel() == C, op, ": Expected weight to be a vector of size equal to the number of channels in input, but got weight of shape ",
		    w.sizes(), " and input of shape ", x.sizes());
	TORCH_CHECK(!b.defined() || b.numel() == C, op, ": Expected bias to be a vector of size equal to the number of channels in input, but got bias of shape ",
		    b.sizes(), " and input of shape ", x.sizes());
	c10::DeviceGuard g(x.device());
	at::ScalarType pt = param_dtype(x, {&w, &b});
	at::Tensor xc = x.contiguous(), wc = as_param(w, pt), bc = as_param(b, pt);
	at::Tensor y = at::empty_like(xc), mean = at::empty({N, G}, x.options().dtype(pt)), rstd = at::empty({N, G}, x.options().dtype(pt));
	if (N * G > 0) {
		nk_groupnorm_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), op), a.pdtype = nk_dtype(pt, op);
		a.N = N, a.C = C, a.S = S, a.G = G, a.eps = eps;
		a.x = xc.const_data_ptr(), a.w = cptr(wc), a.b = cptr(bc);
		a.y = y.data_ptr(), a.mean = mean.data_ptr(), a.rstd = rstd.data_ptr();
		launch(queue_for(x), nk_groupnorm_run, a, op);
	}
	return {like_input(y, x), mean, rstd};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_bwd(const at::Tensor &dy, const at::Tensor &x, const at::Tensor &mean, const at::Tensor &rstd,
								     const std::optional<at::Tensor> &w_opt, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
								     int64_t G, std::array<bool, 3> mask)
{
	NEURON_TRACK("aten::native_group_norm_backward");
	const char *op = "native_group_norm_backward";
	at::Tensor w = opt(w_opt);
	int64_t N = N_.expect_int(), C = C_.expect_int(), S = HxW_.expect_int();
	check_float(op, x, "input");
	TORCH_CHECK(G > 0 && C % G == 0 && x.numel() == N * C * S && dy.numel() == x.numel(), op, ": inconsistent sizes: input ", x.sizes(),
		    ", grad ", dy.sizes(), ", N=", N, " C=", C, " HxW=", S, " groups=", G);
	TORCH_CHECK(mean.numel() == N * G && rstd.numel() == N * G, op, ": mean and rstd must have N*groups = ", N * G, " elements");
	TORCH_CHECK(!w.defined() || w.numel() == C, op, ": weight of shape ", w.sizes(), " does not match ", C, " channels");
	c10::DeviceGuard g(x.device());
	at::ScalarType pt = param_dtype(x, {&w, &mean});
	at::Tensor xc = x.contiguous(), dyc = dy.contiguous().to(x.scalar_type()), wc = as_param(w, pt);
	at::Tensor mc = as_param(mean, pt), rc = as_param(rstd, pt);
	at::Tensor dx, dw, db;
	if (mask[0])
		dx = at::empty_like(xc);
	if (mask[1])
		dw = at::empty({C}, x.options().dtype(pt));
	if (mask[2])
		db = at::empty({C}, x.options().dtype(pt));
	if (N == 0 || C == 0 || S == 0) {
		if (dx.defined())
			dx.zero_();
		if (dw.defined())
			dw.zero_();
		if (db.defined())
			db.zero_();
	} else if (mask[0] || mask[1] || mask[2]) {
		nk_groupnorm_bwd_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), op), a.pdtype = nk_dtype(pt, op);
		a.N = N, a.C = C, a.S = S, a.G = G;
		a.dy = dyc.const_data_ptr(), a.x = xc.const_data_ptr(), a.mean = mc.const_data_ptr(), a.rstd = rc.const_data_ptr(), a.w = cptr(wc);
		a.dx = mptr(dx), a.dw = mptr(dw), a.db = mptr(db);
		launch(queue_for(x), nk_groupnorm_bwd_run, a, op);
	}
	if (dx.defined())
		dx = like_input(dx, x);
	if (w.defined() && w.scalar_type() != pt) {
		if (dw.defined())
			dw = dw.to(w.scalar_type());
		if (db.defined())
			db = db.to(w.scalar_type());
	}
	return {dx, dw, db};
}

// "[*, 4, 5]" for normalized_shape (4, 5), as aten's layer_norm check words it
static std::string star_shape(at::IntArrayRef ns)
{
	std::string s = "[*";
	for (int64_t v : ns)
		s += ", " + std::to_string(v);
	return s + "]";
}

// ---- fused rms norm --------------------------------------------------------------------------------

static void rms_shape(const char *op, const at::Tensor &x, at::IntArrayRef ns, const at::Tensor &w, int64_t &rows, int64_t &cols)
{
	int64_t k = (int64_t)ns.size();
	TORCH_CHECK(k >= 1 && x.dim() >= k && x.sizes().slice(x.dim() - k).equals(ns), op, ": Given normalized_shape=", ns,
		    ", expected input with shape ", star_shape(ns), ", but got input of size", x.sizes());
	TORCH_CHECK(!w.defined() || w.sizes().equals(ns), op, ": Expected weight to be of same shape as normalized_shape, but got weight of shape ",
		    w.sizes(), " and normalized_shape = ", ns);
	check_float(op, x, "input");
	cols = c10::multiply_integers(ns);
	rows = c10::multiply_integers(x.sizes().slice(0, x.dim() - k)); // also when cols == 0 (rstd is then NaN, as aten)
}

static std::tuple<at::Tensor, at::Tensor> rms_norm_f(const at::Tensor &x, at::IntArrayRef ns, const std::optional<at::Tensor> &w_opt, std::optional<double> eps)
{
	NEURON_TRACK("aten::_fused_rms_norm");
	const char *op = "_fused_rms_norm";
	at::Tensor w = opt(w_opt);
	int64_t rows, cols;
	rms_shape(op, x, ns, w, rows, cols);
	c10::DeviceGuard g(x.device());
	at::ScalarType rt = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
	double e = eps.has_value() ? *eps : (rt == at::kDouble ? std::numeric_limits<double>::epsilon() : (double)std::numeric_limits<float>::epsilon());
	at::Tensor xc = x.contiguous(), wc = w.defined() ? w.contiguous().to(x.scalar_type()) : w;
	auto stat_shape = x.sizes().vec();
	for (int64_t i = x.dim() - (int64_t)ns.size(); i < x.dim(); i++)
		stat_shape[i] = 1;
	at::Tensor y = at::empty_like(xc), rstd = at::empty(stat_shape, x.options().dtype(rt));
	if (rows > 0) {
		nk_rmsnorm_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), op);
		a.rows = rows, a.cols = cols, a.eps = e;
		a.x = xc.const_data_ptr(), a.w = cptr(wc), a.y = y.data_ptr(), a.rstd = rstd.data_ptr();
		launch(queue_for(x), nk_rmsnorm_run, a, op);
	}
	return {y, rstd};
}

static std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor &dy, const at::Tensor &x, at::IntArrayRef ns, const at::Tensor &rstd,
						       const std::optional<at::Tensor> &w_opt, std::array<bool, 2> mask)
{
	NEURON_TRACK("aten::_fused_rms_norm_backward");
	const char *op = "_fused_rms_norm_backward";
	at::Tensor w = opt(w_opt);
	int64_t rows, cols;
	rms_shape(op, x, ns, w, rows, cols);
	TORCH_CHECK(dy.sizes() == x.sizes() && rstd.numel() == rows, op, ": grad ", dy.sizes(), " / rstd ", rstd.sizes(), " do not match input ", x.sizes());
	c10::DeviceGuard g(x.device());
	at::ScalarType rt = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
	at::Tensor xc = x.contiguous(), dyc = dy.contiguous().to(x.scalar_type()), rc = rstd.contiguous().to(rt);
	at::Tensor wc = w.defined() ? w.contiguous().to(x.scalar_type()) : w;
	at::Tensor dx, dw;
	if (mask[0])
		dx = at::empty_like(xc);
	if (mask[1] && w.defined())
		dw = at::empty(ns, x.options());
	if (rows == 0) {
		if (dw.defined())
			dw.zero_();
	} else if (dx.defined() || dw.defined()) {
		nk_rmsnorm_bwd_args_t a{};
		a.dtype = nk_dtype(x.scalar_type(), op);
		a.rows = rows, a.cols = cols;
		a.dy = dyc.const_data_ptr(), a.x = xc.const_data_ptr(), a.rstd = rc.const_data_ptr(), a.w = cptr(wc);
		a.dx = mptr(dx), a.dw = mptr(dw);
		launch(queue_for(x), nk_rmsnorm_bwd_run, a, op);
	}
	if (dw.defined() && dw.scalar_type() != w.scalar_type())
		dw = dw.to(w.scalar_type());
	return {dx, dw};
}

// ---- weight norm (aten _weight_norm_interface: the fused form nn.utils.weight_norm takes for dim 0 or last)

// v viewed as [outer, D, inner] around dim
static void wn_shape(const at::Tensor &v, int64_t dim, int64_t &outer, int64_t &D, int64_t &inner)
{
	outer = c10::multiply_integers(v.sizes().slice(0, dim));
	D = v.size(dim);
	inner = c10::multiply_integers(v.sizes().slice(dim + 1));
}

static void wn_check(const char *op, const at::Tensor &v, const at::Tensor &g, int64_t &dim)
{
	dim = at::maybe_wrap_dim(dim, v.dim());
	TORCH_CHECK(dim == 0 || dim == v.dim() - 1, op, ": fused kernels can only be applied for first or last dim");
	check_float(op, v, "v");
	TORCH_CHECK(g.numel() == v.size(dim), op, ": g of shape ", g.sizes(), " does not hold one value per index of v ", v.sizes(),
		    " along dim ", dim);
}

static std::tuple<at::Tensor, at::Tensor> weight_norm_f(const at::Tensor &v, const at::Tensor &g, int64_t dim)
{
	NEURON_TRACK("aten::_weight_norm_interface");
	const char *op = "_weight_norm_interface";
	wn_check(op, v, g, dim);
	c10::DeviceGuard guard(v.device());
	at::ScalarType nt = v.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
	at::Tensor vc = v.contiguous(), gc = g.contiguous().to(v.scalar_type());
	at::Tensor w = at::empty_like(vc), norm = at::empty(g.sizes(), g.options().dtype(nt));
	nk_weight_norm_args_t a{};
	a.dtype = nk_dtype(v.scalar_type(), op), a.ndtype = nk_dtype(nt, op);
	wn_shape(vc, dim, a.outer, a.D, a.inner);
	a.v = vc.const_data_ptr(), a.g = gc.const_data_ptr(), a.w = w.data_ptr(), a.norm = norm.data_ptr();
	launch(queue_for(v), nk_weight_norm_run, a, op); // also when v is empty: norm 0, as aten
	return {w, norm};
}

static std::tuple<at::Tensor, at::Tensor> weight_norm_bwd(const at::Tensor &gw, const at::Tensor &v, const at::Tensor &g,
							  const at::Tensor &norm, int64_t dim)
{
	NEURON_TRACK("aten::_weight_norm_interface_backward");
	const char *op = "_weight_norm_interface_backward";
	wn_check(op, v, g, dim);
	TORCH_CHECK(gw.sizes() == v.sizes() && norm.numel() == g.numel(), op, ": grad_w ", gw.sizes(), " / saved_norms ", norm.sizes(),
		    " do not match saved_v ", v.sizes(), " / saved_g ", g.sizes());
	c10::DeviceGuard guard(v.device());
	at::ScalarType nt = v.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
	at::Tensor vc = v.contiguous(), gc = g.contiguous().to(v.scalar_type()), gwc = gw.contiguous().to(v.scalar_type());
	at::Tensor nc = norm.contiguous().to(nt);
	at::Tensor gv = at::empty_like(vc), gg = at::empty(g.sizes(), vc.options());
	nk_weight_norm_bwd_args_t a{};
	a.dtype = nk_dtype(v.scalar_type(), op), a.ndtype = nk_dtype(nt, op);
	wn_shape(vc, dim, a.outer, a.D, a.inner);
	a.gw = gwc.const_data_ptr(), a.v = vc.const_data_ptr(), a.g = gc.const_data_ptr(), a.norm = nc.const_data_ptr();
	a.gv = gv.data_ptr(), a.gg = gg.data_ptr();
	launch(queue_for(v), nk_weight_norm_bwd_run, a, op); // v empty: grad_g = 0 / 0, NaN as aten
	return {gv, gg.scalar_type() == g.scalar_type() ? gg : gg.to(g.scalar_type())};
}

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
		    ", expected input with shape ", star_shape(ns), ", but got input of size", x.sizes());
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

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "native_layer_norm", layer_norm);
	NEURON_IMPL(m, "native_layer_norm_backward", layer_norm_bwd);
	NEURON_IMPL(m, "native_batch_norm", native_bn);
	NEURON_IMPL(m, "native_batch_norm.out", native_bn_out);
	NEURON_IMPL(m, "_native_batch_norm_legit", bn_legit);
	NEURON_IMPL(m, "_native_batch_norm_legit.out", bn_legit_out);
	NEURON_IMPL(m, "_native_batch_norm_legit.no_stats", bn_legit_nostats);
	NEURON_IMPL(m, "_native_batch_norm_legit.no_stats_out", bn_legit_nostats_out);
	NEURON_IMPL(m, "_batch_norm_with_update", bn_with_update);
	NEURON_IMPL(m, "_batch_norm_with_update.out", bn_with_update_out);
	NEURON_IMPL(m, "_batch_norm_no_update", bn_no_update);
	NEURON_IMPL(m, "_native_batch_norm_legit_no_training", bn_legit_no_training);
	NEURON_IMPL(m, "native_batch_norm_backward", native_bn_bwd);
	NEURON_IMPL(m, "batch_norm_backward", bn_bwd_new);
	NEURON_IMPL(m, "native_group_norm", group_norm);
	NEURON_IMPL(m, "native_group_norm_backward", group_norm_bwd);
	NEURON_IMPL(m, "_fused_rms_norm", rms_norm_f);
	NEURON_IMPL(m, "_fused_rms_norm_backward", rms_norm_bwd);
	NEURON_IMPL(m, "_weight_norm_interface", weight_norm_f);
	NEURON_IMPL(m, "_weight_norm_interface_backward", weight_norm_bwd);
}
