// ops_reduce.cpp - reductions: sum/mean/prod, amax/amin/max/min, argmax/argmin, any/all, vector norms,
// var/std (and their pairs with mean), logsumexp, nansum, count_nonzero, equal (nk_reduce_run).
#include "neuron.h"
#include "complex.h"
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

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

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

// Complex sum and mean: the real kernel over the interleaved (re, im) pairs, as [O, R, 2I] real;
// prod: the complex kernel.  Other reductions of complex tensors are refused, naming the op.
static void launch_reduce_complex(const char *name, const RedPlan &p, int op, const at::Tensor &out)
{
	at::ScalarType t = p.in.scalar_type();
	TORCH_CHECK(at::isComplexType(t) && t == out.scalar_type() && t != at::kComplexHalf, name, ": dtype ", t, " to ",
		    out.scalar_type(), " is not supported on neuron");
	TORCH_CHECK(op == NK_RED_SUM || op == NK_RED_MEAN || op == NK_RED_PROD, name, ": dtype ", t, " is not supported on neuron");
	if (p.O * p.I == 0)
		return;
	size_t cost = (size_t)(p.O * p.R * p.I) * p.in.element_size() + (size_t)out.numel() * out.element_size();
	nrt_queue_t *q = current_queue(p.in.device().index());
	if (op == NK_RED_PROD) {
		nk_complex_prod_args_t r{p.in.const_data_ptr(), out.data_ptr(), nk_dtype_cx(t, name), p.O, p.R, p.I};
		launch_cost(q, nk_complex_prod_run, r, name, cost);
		return;
	}
	nk_reduce_args_t r{};
	r.in = p.in.const_data_ptr();
	r.out = out.data_ptr();
	r.dtype_in = r.dtype_out = nk_dtype(c10::toRealValueType(t), name);
	r.O = p.O, r.R = p.R, r.I = 2 * p.I;
	r.op = op;
	launch_cost(q, nk_reduce_run, r, name, cost);
}

static void launch_reduce(const char *name, const RedPlan &p, int op, const at::Tensor &out, const at::Tensor &out2, double a = 0)
{
	if (out.numel() == 0 && !(p.O * p.I == 0))
		return;
	if (C10_UNLIKELY(p.in.is_complex() || out.is_complex())) {
		launch_reduce_complex(name, p, op, out);
		return;
	}
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
		TORCH_CHECK_INDEX(s.dim() == 0 || s.size(at::maybe_wrap_dim(d, s.dim())) != 0, name, "(): Expected reduction dim ", d, " to have non-zero size.");
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
	TORCH_CHECK(s.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
	return reduce("aten::max", s, {}, false, NK_RED_AMAX, s.scalar_type(), s.scalar_type());
}
static at::Tensor min_all(const at::Tensor &s)
{
	NEURON_TRACK("aten::min");
	TORCH_CHECK(s.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
	return reduce("aten::min", s, {}, false, NK_RED_AMIN, s.scalar_type(), s.scalar_type());
}

static std::tuple<at::Tensor, at::Tensor> minmax_dim(const char *name, int op, const at::Tensor &s, int64_t dim, bool keep)
{
	c10::DeviceGuard g(s.device());
	check_nonempty(op == NK_RED_MAX ? "max" : "min", s, at::IntArrayRef{dim}); // the CPU's "max(): ..."
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
	TORCH_CHECK(s.scalar_type() != at::kBool, name, "(): does not support bool input"); // the CPU's check
	c10::DeviceGuard g(s.device());
	if (!dim.has_value()) {
		TORCH_CHECK_INDEX(s.numel() > 0, name, "(): Expected reduction dim to be specified for input.numel() == 0.");
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
	if (C10_UNLIKELY(s.is_complex())) // the norm of the moduli, in the real dtype
		return vector_norm(at::abs(s), ord, dim, keep, dt ? std::optional<at::ScalarType>(c10::toRealValueType(*dt)) : std::nullopt);
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
	TORCH_CHECK(at::isFloatingType(s.scalar_type()), "std and var only support floating point and complex dtypes");
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

// ---- reductions composed of native ones ----------------------------------------------------------

static at::Tensor &amax_o(const at::Tensor &s, at::IntArrayRef dim, bool keep, at::Tensor &o) { NEURON_TRACK("aten::amax.out"); return into(o, at::amax(s, dim, keep)); }
static at::Tensor &amin_o(const at::Tensor &s, at::IntArrayRef dim, bool keep, at::Tensor &o) { NEURON_TRACK("aten::amin.out"); return into(o, at::amin(s, dim, keep)); }
static std::tuple<at::Tensor, at::Tensor> aminmax_f(const at::Tensor &s, std::optional<int64_t> dim, bool keep)
{
	NEURON_TRACK("aten::aminmax");
	TORCH_CHECK(s.numel() > 0 || dim.has_value(), "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity.");
	if (!dim.has_value()) {
		at::Tensor lo = at::amin(s.reshape({-1}), {0}, false), hi = at::amax(s.reshape({-1}), {0}, false);
		if (keep && s.dim() > 0) {
			std::vector<int64_t> ones(s.dim(), 1);
			return {lo.view(ones), hi.view(ones)};
		}
		return {lo, hi};
	}
	return {at::amin(s, {*dim}, keep), at::amax(s, {*dim}, keep)};
}
static std::tuple<at::Tensor &, at::Tensor &> aminmax_o(const at::Tensor &s, std::optional<int64_t> dim, bool keep, at::Tensor &mn, at::Tensor &mx)
{
	NEURON_TRACK("aten::aminmax.out");
	auto r = aminmax_f(s, dim, keep);
	into(mn, std::get<0>(r));
	into(mx, std::get<1>(r));
	return {mn, mx};
}
static std::tuple<at::Tensor, at::Tensor> var_mean_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep)
{
	NEURON_TRACK("aten::var_mean.correction");
	return {at::var(s, dim, corr, keep), at::mean(s, dim, keep)};
}
static std::tuple<at::Tensor, at::Tensor> std_mean_c(const at::Tensor &s, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar> &corr, bool keep)
{
	NEURON_TRACK("aten::std_mean.correction");
	return {at::std(s, dim, corr, keep), at::mean(s, dim, keep)};
}
static at::Tensor nansum_f(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt)
{
	NEURON_TRACK("aten::nansum");
	if (!at::isFloatingType(s.scalar_type()))
		return at::sum(s, dim, keep, dt);
	at::Tensor nan = PW("nansum", NK_OP_ISNAN, {s}, {}, Bool);
	at::Tensor z = PW("nansum", NK_OP_WHERE, {nan, cpu_scalar(0, s.scalar_type()), s}, {}, Same, 0, 0, 0, 0, 1u);
	return at::sum(z, dim, keep, dt);
}
static at::Tensor &nansum_o(const at::Tensor &s, at::OptionalIntArrayRef dim, bool keep, std::optional<at::ScalarType> dt, at::Tensor &o)
{
	NEURON_TRACK("aten::nansum.out");
	if (c10::isIntegralType(s.scalar_type(), true)) // as aten: integers have no NaN, so it is sum.out (whose
		return at::sum_out(o, s, dim, keep, dt); // dtype comes from the result, a bool out included)
	return into(o, nansum_f(s, dim, keep, dt), OutRule::Cast);
}
static at::Tensor count_nonzero_d(const at::Tensor &s, at::IntArrayRef dims)
{
	NEURON_TRACK("aten::count_nonzero.dim_IntList");
	at::Tensor nz = PW("count_nonzero", NK_OP_NE, {s, wrap(0)}, {}, Bool);
	return at::sum(nz, dims, false, at::kLong);
}
static at::Tensor &norm_o(const at::Tensor &s, const std::optional<c10::Scalar> &p, at::IntArrayRef dim, bool keep, at::Tensor &o)
{
	NEURON_TRACK("aten::norm.out");
	return into(o, at::linalg_vector_norm(s, p.value_or(2), dim, keep, std::nullopt));
}
static bool equal_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::equal");
	TORCH_CHECK(s.scalar_type() == o.scalar_type(), "Expected object of scalar type ", s.scalar_type(), " but got scalar type ",
		    o.scalar_type(), " for argument 'other'");
	if (s.sizes() != o.sizes())
		return false;
	if (s.numel() == 0)
		return true;
	return PW("equal", NK_OP_EQ, {s, o}, {}, Bool).all().item<bool>();
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "amax.out", amax_o);
	NEURON_IMPL(m, "amin.out", amin_o);
	NEURON_IMPL(m, "aminmax", aminmax_f);
	NEURON_IMPL(m, "aminmax.out", aminmax_o);
	NEURON_IMPL(m, "var_mean.correction", var_mean_c);
	NEURON_IMPL(m, "std_mean.correction", std_mean_c);
	NEURON_IMPL(m, "nansum", nansum_f);
	NEURON_IMPL(m, "nansum.out", nansum_o);
	NEURON_IMPL(m, "count_nonzero.dim_IntList", count_nonzero_d);
	NEURON_IMPL(m, "norm.out", norm_o);
	NEURON_IMPL(m, "equal", equal_f);
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
}
