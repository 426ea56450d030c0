// ops_norm.cpp - batch norm (all of aten's entry points), group norm, fused rms norm, the small
// activations that had no kernel (glu, hardshrink, softshrink, prelu, rrelu, logit backward), the margin
// losses (kl_div's xlogy is registered in ops_misc.cpp), and the grad scaler's two kernels.  Shapes and dtypes are checked here; the C
// kernels (norm.c, act.c, loss2.c) get contiguous buffers or an nk_iter_t.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace neuron {

std::pair<uint64_t, uint64_t> philox_args(const std::optional<at::Generator> &gen, c10::DeviceIndex idx, int64_t n);

static at::Tensor opt(const std::optional<at::Tensor> &t)
{
	return t.has_value() && t->defined() ? *t : at::Tensor();
}

static const void *cptr(const at::Tensor &t)
{
	return t.defined() ? t.const_data_ptr() : nullptr;
}

static void *mptr(const at::Tensor &t)
{
	return t.defined() ? t.data_ptr() : nullptr;
}

static nrt_queue_t *queue_for(const at::Tensor &t)
{
	return current_queue(t.device().index());
}

static void check_float(const char *op, const at::Tensor &t, const char *what)
{
	TORCH_CHECK(at::isFloatingType(t.scalar_type()) && !at::isFloat8Type(t.scalar_type()), op, ": expected a floating point ", what,
		    " (float32, float64, bfloat16 or float16), got ", t.scalar_type());
}

static void check_device(const char *op, const at::Tensor &ref, std::initializer_list<const at::Tensor *> ts)
{
	for (auto *t : ts)
		TORCH_CHECK(!t->defined() || t->device() == ref.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
			    ref.device(), " and ", t->device(), "! (when checking arguments for ", op, ")");
}

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
	check_device(op, x, {&w, &b, &rm, &rv});
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
	check_device(op, x, {&dy, &w, &mean, &var});
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

static void copy_out(at::Tensor &out, const at::Tensor &r)
{
	into(out, r);
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
	check_device(op, x, {&w, &b});
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
	check_device(op, x, {&dy, &mean, &rstd, &w});
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

// ---- fused rms norm --------------------------------------------------------------------------------

static void rms_shape(const char *op, const at::Tensor &x, at::IntArrayRef ns, const at::Tensor &w, int64_t &rows, int64_t &cols)
{
	int64_t k = (int64_t)ns.size();
	TORCH_CHECK(k >= 1 && x.dim() >= k && x.sizes().slice(x.dim() - k).equals(ns), op, ": Given normalized_shape=", ns,
		    ", expected input with shape [*, ", ns, "], but got input of size", x.sizes());
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
	check_device(op, x, {&w});
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
	check_device(op, x, {&dy, &rstd, &w});
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


// ---- margin losses (loss2.c) -----------------------------------------------------------------------

static void margin_input(const char *op, const at::Tensor &x, const at::Tensor &target, int64_t &N, int64_t &C)
{
	check_float(op, x, "input");
	TORCH_CHECK(x.dim() <= 2 && (x.numel() > 0 || x.dim() == 2), op, ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", x.sizes());
	TORCH_CHECK(target.scalar_type() == at::kLong, op, ": expected target of dtype Long, got ", target.scalar_type());
	N = x.dim() < 2 ? 1 : x.size(0);
	C = x.dim() == 0 ? 1 : x.size(-1);
	check_device(op, x, {&target});
}

// aten's multi_margin_loss CPU checks in its order and with its messages: p, the shapes
// (multi_margin_loss_shape_check), then (for a non-empty input) the dtypes its kernel dispatches on:
// a floating input (f16/bf16 too, as on CUDA), a Long target and a weight of the input's dtype.
static void mm_check(const char *op, const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const at::Tensor &w,
		     int64_t &N, int64_t &C)
{
	TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "only p == 1 and p == 2 supported");
	int64_t nd = x.dim();
	TORCH_CHECK((nd == 2 && x.size(1) != 0) || (nd == 1 && x.size(0) != 0) || nd == 0,
		    "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", x.sizes());
	N = nd <= 1 ? 1 : x.size(0);
	C = nd == 0 ? 1 : x.size(-1);
	TORCH_CHECK(target.dim() <= 1 && target.numel() == N,
		    "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch size). "
		    "Expected target size [", N, "], but got ", target.sizes(), ". Input has shape ", x.sizes(), ".");
	TORCH_CHECK(!w.defined() || (w.dim() <= 1 && w.numel() == C), "inconsistent weight size, expected ", C, " but got ", w.sizes());
	check_device(op, x, {&target, &w});
	if (x.numel() == 0)
		return;
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(x.scalar_type()) && !at::isFloat8Type(x.scalar_type()), "\"", op,
				    "\" not implemented for '", c10::toString(x.scalar_type()), "'");
	TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
	TORCH_CHECK(!w.defined() || w.scalar_type() == x.scalar_type(), "expected scalar type ", x.scalar_type(), " but found ", w.scalar_type());
}

static at::Tensor mm_loss(const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const c10::Scalar &margin, const std::optional<at::Tensor> &w_opt,
			  int64_t reduction)
{
	NEURON_TRACK("aten::multi_margin_loss");
	const char *op = "multi_margin_loss";
	int64_t N, C;
	at::Tensor w = opt(w_opt);
	mm_check(op, x, target, p, w, N, C);
	c10::DeviceGuard g(x.device());
	at::Tensor out = reduction == NK_REDUCTION_NONE && target.dim() > 0 ? at::empty({N}, x.options()) : at::empty({}, x.options());
	if (x.numel() == 0)
		return out;
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), wc = w.defined() ? w.contiguous() : w;
	nk_multi_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.p = p.toLong(), a.margin = margin.toDouble(), a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.w = cptr(wc), a.out = out.data_ptr();
	launch(queue_for(x), nk_multi_margin_run, a, op);
	return out;
}
static at::Tensor &mm_loss_o(const at::Tensor &x, const at::Tensor &t, const c10::Scalar &p, const c10::Scalar &m, const std::optional<at::Tensor> &w, int64_t r,
			     at::Tensor &out)
{
	copy_out(out, mm_loss(x, t, p, m, w, r));
	return out;
}
static at::Tensor mm_loss_bw(const at::Tensor &go, const at::Tensor &x, const at::Tensor &target, const c10::Scalar &p, const c10::Scalar &margin,
			     const std::optional<at::Tensor> &w_opt, int64_t reduction)
{
	NEURON_TRACK("aten::multi_margin_loss_backward");
	const char *op = "multi_margin_loss_backward";
	int64_t N, C;
	at::Tensor w = opt(w_opt);
	mm_check(op, x, target, p, w, N, C);
	TORCH_CHECK(reduction != NK_REDUCTION_NONE || go.numel() == N || go.dim() == 0, op, ": grad_output of size ", go.sizes(), " for ", N, " rows");
	check_device(op, x, {&go});
	c10::DeviceGuard g(x.device());
	if (x.numel() == 0)
		return at::empty(x.sizes(), x.options());
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), wc = w.defined() ? w.contiguous() : w;
	at::Tensor gc = go.contiguous().to(x.scalar_type()), gi = at::empty(x.sizes(), x.options());
	nk_multi_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.p = p.toLong(), a.margin = margin.toDouble(), a.reduction = (int)reduction;
	if (reduction == NK_REDUCTION_NONE && go.dim() == 0)
		gc = gc.expand({N}).contiguous();
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.w = cptr(wc), a.grad_out = gc.const_data_ptr(), a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(queue_for(x), nk_multi_margin_bwd_run, a, op);
	return gi;
}
static at::Tensor &mm_loss_bw_o(const at::Tensor &go, const at::Tensor &x, const at::Tensor &t, const c10::Scalar &p, const c10::Scalar &m,
				const std::optional<at::Tensor> &w, int64_t r, at::Tensor &gi)
{
	copy_out(gi, mm_loss_bw(go, x, t, p, m, w, r));
	return gi;
}

static void ml_check(const char *op, const at::Tensor &x, const at::Tensor &target, int64_t &N, int64_t &C)
{
	margin_input(op, x, target, N, C);
	bool ok = x.dim() <= 1 ? (target.dim() <= 1 && target.numel() == C) : (target.dim() == 2 && target.size(0) == N && target.size(1) == C);
	TORCH_CHECK(ok, op, ": inconsistent target size: ", target.sizes(), " for input of size: ", x.sizes());
}
static std::tuple<at::Tensor, at::Tensor> ml_loss(const at::Tensor &x, const at::Tensor &target, int64_t reduction)
{
	NEURON_TRACK("aten::multilabel_margin_loss_forward");
	const char *op = "multilabel_margin_loss_forward";
	int64_t N, C;
	ml_check(op, x, target, N, C);
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous(), tc = target.contiguous();
	at::Tensor out = reduction == NK_REDUCTION_NONE && target.dim() > 1 ? at::empty({N}, x.options()) : at::empty({}, x.options());
	at::Tensor ist = at::empty(target.sizes(), x.options());
	nk_multilabel_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.out = out.data_ptr(), a.is_target = ist.data_ptr();
	launch(queue_for(x), nk_multilabel_margin_run, a, op);
	return {out, ist};
}
static std::tuple<at::Tensor &, at::Tensor &> ml_loss_o(const at::Tensor &x, const at::Tensor &t, int64_t r, at::Tensor &out, at::Tensor &ist)
{
	auto res = ml_loss(x, t, r);
	copy_out(out, std::get<0>(res));
	copy_out(ist, std::get<1>(res));
	return {out, ist};
}
static at::Tensor ml_loss_bw(const at::Tensor &go, const at::Tensor &x, const at::Tensor &target, int64_t reduction, const at::Tensor &is_target)
{
	NEURON_TRACK("aten::multilabel_margin_loss_backward");
	const char *op = "multilabel_margin_loss_backward";
	int64_t N, C;
	ml_check(op, x, target, N, C);
	TORCH_CHECK(is_target.sizes() == target.sizes(), op, ": is_target of size ", is_target.sizes(), " does not match target ", target.sizes());
	check_device(op, x, {&go, &is_target});
	c10::DeviceGuard g(x.device());
	at::Tensor xc = x.contiguous(), tc = target.contiguous(), ic = is_target.contiguous().to(x.scalar_type());
	at::Tensor gc = go.contiguous().to(x.scalar_type()), gi = at::empty(x.sizes(), x.options());
	if (reduction == NK_REDUCTION_NONE && gc.numel() == 1 && N != 1)
		gc = gc.reshape({1}).expand({N}).contiguous();
	TORCH_CHECK(reduction != NK_REDUCTION_NONE || gc.numel() == N, op, ": grad_output of size ", go.sizes(), " for ", N, " rows");
	nk_multilabel_margin_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), op);
	a.N = N, a.C = C, a.reduction = (int)reduction;
	a.x = xc.const_data_ptr(), a.target = tc.const_data_ptr(), a.grad_out = gc.const_data_ptr();
	a.is_target = const_cast<void *>(ic.const_data_ptr()), a.grad_in = gi.data_ptr();
	if (gi.numel())
		launch(queue_for(x), nk_multilabel_margin_bwd_run, a, op);
	return gi;
}
static at::Tensor &ml_loss_bw_o(const at::Tensor &go, const at::Tensor &x, const at::Tensor &t, int64_t r, const at::Tensor &ist, at::Tensor &gi)
{
	copy_out(gi, ml_loss_bw(go, x, t, r, ist));
	return gi;
}

// ---- AMP grad scaler -------------------------------------------------------------------------------

static void check_amp_scalar(const char *op, const at::Tensor &t, const char *what, at::ScalarType dt)
{
	TORCH_CHECK(t.device().type() == kDev, op, ": ", what, " must be a neuron tensor, got ", t.device());
	TORCH_CHECK(t.numel() == 1, op, ": ", what, " must be a 1-element tensor, got ", t.sizes());
	TORCH_CHECK(t.scalar_type() == dt, op, ": ", what, " must be a ", dt, " tensor, got ", t.scalar_type());
}

static void amp_unscale(at::TensorList self, at::Tensor &found_inf, const at::Tensor &inv_scale)
{
	NEURON_TRACK("aten::_amp_foreach_non_finite_check_and_unscale_");
	const char *op = "_amp_foreach_non_finite_check_and_unscale_";
	check_amp_scalar(op, found_inf, "found_inf", at::kFloat);
	check_amp_scalar(op, inv_scale, "inv_scale", at::kFloat);
	TORCH_CHECK(found_inf.is_contiguous() && inv_scale.is_contiguous(), op, ": found_inf and inv_scale must be contiguous");
	for (const at::Tensor &t : self) {
		TORCH_CHECK(t.device() == found_inf.device(), op, ": all tensors must be on ", found_inf.device(), ", got one on ", t.device());
		check_float(op, t, "gradient");
	}
	c10::DeviceGuard g(found_inf.device());
	for (const at::Tensor &t : self) {
		if (t.numel() == 0)
			continue;
		bool direct = t.is_contiguous();
		at::Tensor tc = direct ? t : t.contiguous();
		nk_amp_unscale_args_t a{};
		a.dtype = nk_dtype(t.scalar_type(), op);
		a.n = tc.numel(), a.x = tc.data_ptr();
		a.inv_scale = inv_scale.const_data_ptr<float>(), a.found_inf = found_inf.data_ptr<float>();
		launch(queue_for(found_inf), nk_amp_unscale_run, a, op);
		if (!direct)
			const_cast<at::Tensor &>(t).copy_(tc);
	}
}

static at::Tensor &amp_update(at::Tensor &scale, at::Tensor &tracker, const at::Tensor &found_inf, double growth, double backoff, int64_t interval)
{
	NEURON_TRACK("aten::_amp_update_scale_");
	const char *op = "_amp_update_scale_";
	check_amp_scalar(op, scale, "current_scale", at::kFloat);
	check_amp_scalar(op, tracker, "growth_tracker", at::kInt);
	check_amp_scalar(op, found_inf, "found_inf", at::kFloat);
	TORCH_CHECK(scale.device() == tracker.device() && scale.device() == found_inf.device(), op, ": tensors must be on one device");
	TORCH_CHECK(scale.is_contiguous() && tracker.is_contiguous(), op, ": current_scale and growth_tracker must be contiguous");
	c10::DeviceGuard g(scale.device());
	nk_amp_update_args_t a{};
	a.scale = scale.data_ptr<float>(), a.growth_tracker = tracker.data_ptr<int32_t>(), a.found_inf = found_inf.const_data_ptr<float>();
	a.growth = growth, a.backoff = backoff, a.interval = interval;
	launch(queue_for(scale), nk_amp_update_run, a, op);
	return scale;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
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
	NEURON_IMPL(m, "multi_margin_loss", mm_loss);
	NEURON_IMPL(m, "multi_margin_loss.out", mm_loss_o);
	NEURON_IMPL(m, "multi_margin_loss_backward", mm_loss_bw);
	NEURON_IMPL(m, "multi_margin_loss_backward.grad_input", mm_loss_bw_o);
	NEURON_IMPL(m, "multilabel_margin_loss_forward", ml_loss);
	NEURON_IMPL(m, "multilabel_margin_loss_forward.output", ml_loss_o);
	NEURON_IMPL(m, "multilabel_margin_loss_backward", ml_loss_bw);
	NEURON_IMPL(m, "multilabel_margin_loss_backward.grad_input", ml_loss_bw_o);
	NEURON_IMPL(m, "_amp_foreach_non_finite_check_and_unscale_", amp_unscale);
	NEURON_IMPL(m, "_amp_update_scale_", amp_update);
}
