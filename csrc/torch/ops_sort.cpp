// ops_sort.cpp - scans (cumsum/cumprod/cummax/cummin/logcumsumexp), sort, selection (topk, kthvalue,
// median/nanmedian, mode), unique*, search (searchsorted, bucketize, isin) and histograms (bincount,
// histc) on the kernels of scan.c, sort.c and select.c.  Inputs are made contiguous and viewed as
// [O, R, I] around the selected dim; ops whose output size depends on the data (unique, bincount)
// synchronize the device to read the size, as nonzero does.
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
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace neuron {

// ---- scans -----------------------------------------------------------------------------------------

// Run a scan along dim of x (made contiguous) into new tensors of x's shape.
static std::tuple<at::Tensor, at::Tensor> scan(const char *name, int op, const at::Tensor &self, int64_t dim, at::ScalarType t)
{
	c10::DeviceGuard g(self.device());
	// aten has no bool kernel for these: a bool dtype (or out=) is refused as the CPU refuses it
	TORCH_CHECK_NOT_IMPLEMENTED(t != at::kBool || !(op == NK_SCAN_SUM || op == NK_SCAN_PROD), "\"",
				    op == NK_SCAN_SUM ? "cumsum" : "cumprod", "_out_cpu\" not implemented for 'Bool'");
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	at::Tensor x = (self.scalar_type() == t ? self : self.to(t)).contiguous();
	at::Tensor out = at::empty(self.sizes(), x.options());
	bool minmax = op == NK_SCAN_MAX || op == NK_SCAN_MIN;
	at::Tensor idx = minmax ? at::empty(self.sizes(), x.options().dtype(at::kLong)) : at::Tensor();
	if (C10_UNLIKELY(at::isComplexType(t))) { // cumsum over the (re, im) pairs as reals, cumprod the complex kernel
		TORCH_CHECK((op == NK_SCAN_SUM || op == NK_SCAN_PROD) && t != at::kComplexHalf, name, ": dtype ", t, " is not supported on neuron");
		int64_t O = 1, R = self.dim() ? self.size(d) : 1, I = 1;
		for (int64_t k = 0; k < d; k++)
			O *= self.size(k);
		for (int64_t k = d + 1; k < self.dim(); k++)
			I *= self.size(k);
		if (x.numel() == 0)
			return {out, idx};
		if (op == NK_SCAN_PROD) {
			nk_complex_prod_args_t c{x.const_data_ptr(), out.data_ptr(), nk_dtype_cx(t, name), O, R, I, true};
			launch(current_queue(self.device().index()), nk_complex_prod_run, c, name);
		} else {
			nk_scan_args_t a{};
			a.op = op, a.dtype = nk_dtype(c10::toRealValueType(t), name), a.O = O, a.R = R, a.I = 2 * I;
			a.in = x.const_data_ptr(), a.out = out.data_ptr();
			launch(current_queue(self.device().index()), nk_scan_run, a, name);
		}
		return {out, idx};
	}
	nk_scan_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(t, name);
	a.O = 1, a.R = self.dim() ? self.size(d) : 1, a.I = 1;
	for (int64_t k = 0; k < d; k++)
		a.O *= self.size(k);
	for (int64_t k = d + 1; k < self.dim(); k++)
		a.I *= self.size(k);
	a.in = x.const_data_ptr();
	a.out = out.data_ptr();
	a.idx = minmax ? idx.mutable_data_ptr<int64_t>() : nullptr;
	if (x.numel())
		launch(current_queue(self.device().index()), nk_scan_run, a, name);
	return {out, idx};
}

static at::ScalarType cum_dtype(const at::Tensor &self, std::optional<at::ScalarType> dt)
{
	if (dt.has_value())
		return *dt;
	return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}
static at::Tensor cumsum_f(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumsum"); return std::get<0>(scan("aten::cumsum", NK_SCAN_SUM, self, dim, cum_dtype(self, dt))); }
static at::Tensor &cumsum_o(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt, at::Tensor &out) { NEURON_TRACK("aten::cumsum.out"); return into(out, std::get<0>(scan("aten::cumsum", NK_SCAN_SUM, self, dim, dt.value_or(out.scalar_type())))); }
static at::Tensor &cumsum_i(at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumsum_"); self.copy_(std::get<0>(scan("aten::cumsum_", NK_SCAN_SUM, self, dim, dt.value_or(self.scalar_type())))); return self; }
static at::Tensor cumprod_f(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumprod"); return std::get<0>(scan("aten::cumprod", NK_SCAN_PROD, self, dim, cum_dtype(self, dt))); }
static at::Tensor &cumprod_o(const at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt, at::Tensor &out) { NEURON_TRACK("aten::cumprod.out"); return into(out, std::get<0>(scan("aten::cumprod", NK_SCAN_PROD, self, dim, dt.value_or(out.scalar_type())))); }
static at::Tensor &cumprod_i(at::Tensor &self, int64_t dim, std::optional<at::ScalarType> dt) { NEURON_TRACK("aten::cumprod_"); self.copy_(std::get<0>(scan("aten::cumprod_", NK_SCAN_PROD, self, dim, dt.value_or(self.scalar_type())))); return self; }

static void cum_minmax_helper(const char *name, int op, const at::Tensor &self, at::Tensor &values, at::Tensor &indices, int64_t dim)
{
	auto r = scan(name, op, self, dim, self.scalar_type());
	values.copy_(std::get<0>(r));
	indices.copy_(std::get<1>(r));
}
static void cummax_helper(const at::Tensor &self, at::Tensor &v, at::Tensor &i, int64_t dim) { NEURON_TRACK("aten::_cummax_helper"); cum_minmax_helper("aten::_cummax_helper", NK_SCAN_MAX, self, v, i, dim); }
static void cummin_helper(const at::Tensor &self, at::Tensor &v, at::Tensor &i, int64_t dim) { NEURON_TRACK("aten::_cummin_helper"); cum_minmax_helper("aten::_cummin_helper", NK_SCAN_MIN, self, v, i, dim); }
static at::Tensor logcumsumexp_f(const at::Tensor &self, int64_t dim)
{
	NEURON_TRACK("aten::_logcumsumexp");
	TORCH_CHECK(at::isFloatingType(self.scalar_type()), "logcumsumexp(): expected a floating point tensor, got ", self.scalar_type());
	return std::get<0>(scan("aten::_logcumsumexp", NK_SCAN_LOGSUMEXP, self, dim, self.scalar_type()));
}
static at::Tensor &logcumsumexp_o(const at::Tensor &self, int64_t dim, at::Tensor &out) { NEURON_TRACK("aten::_logcumsumexp.out"); return into(out, logcumsumexp_f(self, dim)); }

// ---- sort ----------------------------------------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor> sort_impl(const at::Tensor &self, int64_t dim, bool descending)
{
	c10::DeviceGuard g(self.device());
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	at::Tensor x = self.contiguous();
	at::Tensor v = at::empty(self.sizes(), self.options()), idx = at::empty(self.sizes(), self.options().dtype(at::kLong));
	nk_sort_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::sort");
	a.descending = descending;
	a.O = 1, a.R = self.dim() ? self.size(d) : 1, a.I = 1;
	for (int64_t k = 0; k < d; k++)
		a.O *= self.size(k);
	for (int64_t k = d + 1; k < self.dim(); k++)
		a.I *= self.size(k);
	a.in = x.const_data_ptr();
	a.out = v.data_ptr();
	a.idx = idx.mutable_data_ptr<int64_t>();
	size_t ws = nk_sort_workspace(a.R, a.O * a.I);
	at::Tensor work = ws ? at::empty({(int64_t)ws}, self.options().dtype(at::kByte)) : at::Tensor();
	a.work = ws ? work.data_ptr() : nullptr;
	if (x.numel())
		launch(current_queue(self.device().index()), nk_sort_run, a, "aten::sort");
	return {v, idx}; // work is freed after the launch: reuse on this queue is ordered after the kernel
}
static std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor &self, std::optional<bool> stable, int64_t dim, bool descending)
{
	NEURON_TRACK("aten::sort.stable");
	return sort_impl(self, dim, descending);
}
static std::tuple<at::Tensor &, at::Tensor &> sort_values_stable(const at::Tensor &self, std::optional<bool> stable, int64_t dim, bool descending,
								  at::Tensor &values, at::Tensor &indices)
{
	NEURON_TRACK("aten::sort.values_stable");
	auto r = sort_impl(self, dim, descending);
	into(values, std::get<0>(r));
	into(indices, std::get<1>(r));
	return {values, indices};
}

// ---- helpers ----------------------------------------------------------------------------------------

static void olri(const at::Tensor &x, int64_t d, int64_t &O, int64_t &R, int64_t &I)
{
	O = 1, R = x.dim() ? x.size(d) : 1, I = 1;
	for (int64_t k = 0; k < d; k++)
		O *= x.size(k);
	for (int64_t k = d + 1; k < x.dim(); k++)
		I *= x.size(k);
}

static at::Tensor byte_workspace(const at::Tensor &like, size_t bytes)
{
	return at::empty({(int64_t)std::max<size_t>(bytes, 1)}, like.options().dtype(at::kByte));
}

// aten's zero_numel_check_dims for one dim
static void check_nonzero_dim(const at::Tensor &self, int64_t d, const char *fn)
{
	if (self.dim() == 0)
		return;
	TORCH_CHECK_INDEX(self.size(d) != 0, fn, ": Expected reduction dim ", d, " to have non-zero size.");
}

// values [O, K, I] / indices of select op `op` along dim d (wrapped), K = k for topk else 1; the
// result keeps the dim (size K).
static std::tuple<at::Tensor, at::Tensor> select_dim(const char *name, int op, const at::Tensor &self, int64_t d, int64_t k,
						     bool largest)
{
	c10::DeviceGuard g(self.device());
	at::Tensor x = self.contiguous();
	nk_select_args_t a{};
	a.op = op;
	a.dtype = nk_dtype(self.scalar_type(), name);
	olri(x, d, a.O, a.R, a.I);
	a.k = k, a.largest = largest;
	int64_t K = op == NK_SEL_TOPK ? k : 1;
	std::vector<int64_t> shape = x.sizes().vec();
	if (x.dim())
		shape[d] = K;
	at::Tensor v = at::empty(shape, x.options()), idx = at::empty(shape, x.options().dtype(at::kLong));
	size_t ws = nk_select_workspace(a.R, a.O * a.I);
	at::Tensor work = ws ? byte_workspace(x, ws) : at::Tensor();
	a.in = x.const_data_ptr(), a.out = v.data_ptr(), a.idx = idx.mutable_data_ptr<int64_t>();
	a.work = ws ? work.data_ptr() : nullptr;
	if (a.O * a.I > 0 && K > 0)
		launch(current_queue(self.device().index()), nk_select_run, a, name);
	return {v, idx};
}

static std::tuple<at::Tensor, at::Tensor> squeeze_unless(std::tuple<at::Tensor, at::Tensor> r, const at::Tensor &self, int64_t d,
							 bool keepdim)
{
	if (keepdim || self.dim() == 0)
		return r;
	return {std::get<0>(r).squeeze(d), std::get<1>(r).squeeze(d)};
}

static std::tuple<at::Tensor &, at::Tensor &> into2(std::tuple<at::Tensor, at::Tensor> r, at::Tensor &values, at::Tensor &indices)
{
	into(values, std::get<0>(r));
	into(indices, std::get<1>(r));
	return {values, indices};
}

// ---- topk / kthvalue / median / nanmedian / mode ------------------------------------------------------

static std::tuple<at::Tensor, at::Tensor> topk_f(const at::Tensor &self, int64_t k, int64_t dim, bool largest, bool sorted)
{
	NEURON_TRACK("aten::topk");
	TORCH_CHECK(self.scalar_type() != at::kBool, "topk does not support bool dtypes on CPU"); // the CPU's words
	int64_t d = at::maybe_wrap_dim(dim, self.dim(), true);
	TORCH_CHECK(k >= 0 && k <= (self.dim() > 0 ? self.size(d) : 1), "selected index k out of range");
	return select_dim("aten::topk", NK_SEL_TOPK, self, d, k, largest);
}
static std::tuple<at::Tensor &, at::Tensor &> topk_o(const at::Tensor &self, int64_t k, int64_t dim, bool largest, bool sorted,
						     at::Tensor &values, at::Tensor &indices)
{
	NEURON_TRACK("aten::topk.values");
	return into2(topk_f(self, k, dim, largest, sorted), values, indices);
}

static std::tuple<at::Tensor, at::Tensor> kthvalue_f(const at::Tensor &self, int64_t k, int64_t dim, bool keepdim)
{
	int64_t d = at::maybe_wrap_dim(dim, self.dim(), true);
	check_nonzero_dim(self, d, "kthvalue()");
	int64_t n = self.dim() ? self.size(d) : 1;
	TORCH_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", d);
	return squeeze_unless(select_dim("aten::kthvalue", NK_SEL_KTHVALUE, self, d, k, false), self, d, keepdim);
}
static std::tuple<at::Tensor &, at::Tensor &> kthvalue_o(const at::Tensor &self, int64_t k, int64_t dim, bool keepdim, at::Tensor &values,
							 at::Tensor &indices)
{
	NEURON_TRACK("aten::kthvalue.values");
	return into2(kthvalue_f(self, k, dim, keepdim), values, indices);
}

static std::tuple<at::Tensor, at::Tensor> median_dim_impl(const char *name, int op, const at::Tensor &self, int64_t dim, bool keepdim)
{
	int64_t d = at::maybe_wrap_dim(dim, self.dim(), true);
	check_nonzero_dim(self, d, op == NK_SEL_MODE ? "mode()" : "median()");
	return squeeze_unless(select_dim(name, op, self, d, 1, false), self, d, keepdim);
}
static std::tuple<at::Tensor, at::Tensor> median_dim_f(const at::Tensor &self, int64_t dim, bool keepdim)
{
	NEURON_TRACK("aten::median.dim");
	return median_dim_impl("aten::median.dim", NK_SEL_MEDIAN, self, dim, keepdim);
}
static std::tuple<at::Tensor &, at::Tensor &> median_dim_o(const at::Tensor &self, int64_t dim, bool keepdim, at::Tensor &v, at::Tensor &i)
{
	NEURON_TRACK("aten::median.dim_values");
	return into2(median_dim_impl("aten::median.dim_values", NK_SEL_MEDIAN, self, dim, keepdim), v, i);
}
static std::tuple<at::Tensor, at::Tensor> nanmedian_dim_f(const at::Tensor &self, int64_t dim, bool keepdim)
{
	NEURON_TRACK("aten::nanmedian.dim");
	return median_dim_impl("aten::nanmedian.dim", NK_SEL_NANMEDIAN, self, dim, keepdim);
}
static std::tuple<at::Tensor &, at::Tensor &> nanmedian_dim_o(const at::Tensor &self, int64_t dim, bool keepdim, at::Tensor &v, at::Tensor &i)
{
	NEURON_TRACK("aten::nanmedian.dim_values");
	return into2(median_dim_impl("aten::nanmedian.dim_values", NK_SEL_NANMEDIAN, self, dim, keepdim), v, i);
}
static std::tuple<at::Tensor, at::Tensor> mode_f(const at::Tensor &self, int64_t dim, bool keepdim)
{
	NEURON_TRACK("aten::mode");
	return median_dim_impl("aten::mode", NK_SEL_MODE, self, dim, keepdim);
}
static std::tuple<at::Tensor &, at::Tensor &> mode_o(const at::Tensor &self, int64_t dim, bool keepdim, at::Tensor &v, at::Tensor &i)
{
	NEURON_TRACK("aten::mode.values");
	return into2(median_dim_impl("aten::mode.values", NK_SEL_MODE, self, dim, keepdim), v, i);
}

// median() / nanmedian() of all elements: a 0-d value (NaN, cast to the dtype, for an empty input)
static at::Tensor median_all(const char *name, int op, const at::Tensor &self)
{
	if (self.numel() == 0)
		return at::full({}, std::numeric_limits<float>::quiet_NaN(), at::TensorOptions().dtype(at::kFloat))
			.to(self.scalar_type())
			.to(self.device());
	at::Tensor flat = self.reshape({-1});
	return std::get<0>(select_dim(name, op, flat, 0, 1, false)).reshape({});
}
static at::Tensor median_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::median");
	return median_all("aten::median", NK_SEL_MEDIAN, self);
}
static at::Tensor nanmedian_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::nanmedian");
	return median_all("aten::nanmedian", NK_SEL_NANMEDIAN, self);
}
static at::Tensor &median_o(const at::Tensor &self, at::Tensor &out)
{
	NEURON_TRACK("aten::median.out");
	return into(out, median_f(self));
}
static at::Tensor &nanmedian_o(const at::Tensor &self, at::Tensor &out)
{
	NEURON_TRACK("aten::nanmedian.out");
	return into(out, nanmedian_f(self));
}

// ---- unique ------------------------------------------------------------------------------------------

struct UniqueResult {
	at::Tensor rep, inverse, counts; // rep/counts trimmed to the number of groups
	int64_t n;
};

// Groups of equal rows of x2 [N, M] (contiguous), sorted or consecutive.
static UniqueResult unique_rows(const char *name, const at::Tensor &x2, bool sort)
{
	c10::DeviceGuard g(x2.device());
	int64_t N = x2.size(0), M = x2.size(1);
	auto lopt = x2.options().dtype(at::kLong);
	at::Tensor buf = at::empty({4 * N + 1}, lopt); // perm, rep, inverse, counts, n
	at::Tensor work = byte_workspace(x2, nk_unique_workspace(N, M));
	nk_unique_args_t a{};
	a.dtype = nk_dtype(x2.scalar_type(), name);
	a.N = N, a.M = M, a.sort = sort;
	a.x = x2.const_data_ptr();
	int64_t *b = buf.mutable_data_ptr<int64_t>();
	a.perm = b, a.rep = b + N, a.inverse = b + 2 * N, a.counts = b + 3 * N, a.n_unique = b + 4 * N;
	a.work = work.data_ptr();
	launch(current_queue(x2.device().index()), nk_unique_run, a, name);
	int64_t n = buf[4 * N].item<int64_t>(); // synchronizes
	return {buf.narrow(0, N, n), buf.narrow(0, 2 * N, N), buf.narrow(0, 3 * N, n), n};
}

// Elementwise unique: (output, inverse (shaped like self, or empty), counts (or empty)).
static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_elems(const char *name, const at::Tensor &self, bool sort, bool ret_inv,
								   bool ret_cnt)
{
	at::Tensor flat = self.reshape({-1, 1}).contiguous();
	auto lopt = self.options().dtype(at::kLong);
	if (flat.size(0) == 0)
		return {at::empty({0}, self.options()), ret_inv ? at::empty(self.sizes(), lopt) : at::empty({0}, lopt), at::empty({0}, lopt)};
	UniqueResult r = unique_rows(name, flat, sort);
	at::Tensor out = at::index_select(flat.reshape({-1}), 0, r.rep);
	at::Tensor inv = ret_inv ? r.inverse.reshape(self.sizes()).clone() : at::empty({0}, lopt);
	at::Tensor cnt = ret_cnt ? r.counts.clone() : at::empty({0}, lopt);
	return {out, inv, cnt};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2_f(const at::Tensor &self, bool sorted, bool ret_inv, bool ret_cnt)
{
	NEURON_TRACK("aten::_unique2");
	return unique_elems("aten::_unique2", self, true, ret_inv, ret_cnt); // aten's CPU always sorts
}
static std::tuple<at::Tensor, at::Tensor> unique_f(const at::Tensor &self, bool sorted, bool ret_inv)
{
	NEURON_TRACK("aten::_unique");
	auto r = unique_elems("aten::_unique", self, true, ret_inv, false);
	return {std::get<0>(r), std::get<1>(r)};
}

// Unique slices along dim: (output, inverse [size(dim)], counts [groups]), both always computed.
static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_impl(const char *name, const at::Tensor &self, int64_t dim, bool sort)
{
	int64_t d = at::maybe_wrap_dim(dim, self.dim());
	auto lopt = self.options().dtype(at::kLong);
	if (self.numel() == 0) {
		int64_t zeros = 0;
		for (int64_t s : self.sizes())
			zeros += s == 0;
		TORCH_CHECK(zeros == 1, "Number of zero sized dimensions is more than one, so unique cannot be applied ");
		TORCH_CHECK(self.size(d) == 0, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
		return {at::empty(self.sizes(), self.options()), at::empty({0}, lopt), at::empty({0}, lopt)};
	}
	at::Tensor moved = self.movedim(d, 0).contiguous();
	at::Tensor x2 = moved.reshape({moved.size(0), -1});
	UniqueResult r = unique_rows(name, x2, sort);
	at::Tensor out = at::index_select(moved, 0, r.rep).movedim(0, d);
	return {out.contiguous(), r.inverse.clone(), r.counts.clone()};
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_f(const at::Tensor &self, int64_t dim, bool sorted, bool ret_inv,
								   bool ret_cnt)
{
	NEURON_TRACK("aten::unique_dim");
	return unique_dim_impl("aten::unique_dim", self, dim, true);
}
static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive_f(const at::Tensor &self, int64_t dim, bool ret_inv,
									       bool ret_cnt)
{
	NEURON_TRACK("aten::unique_dim_consecutive");
	return unique_dim_impl("aten::unique_dim_consecutive", self, dim, false);
}
static std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive_f(const at::Tensor &self, bool ret_inv, bool ret_cnt,
									   std::optional<int64_t> dim)
{
	NEURON_TRACK("aten::unique_consecutive");
	if (!dim.has_value() || (self.dim() == 1 && at::maybe_wrap_dim(*dim, 1) == 0))
		return unique_elems("aten::unique_consecutive", self, false, ret_inv, ret_cnt);
	return unique_dim_impl("aten::unique_consecutive", self, *dim, false);
}

// ---- searchsorted / bucketize / isin --------------------------------------------------------------------

static at::Tensor search_impl(const char *name, const at::Tensor &boundaries, const at::Tensor &input, bool out_int32, bool right,
			      const std::optional<at::Tensor> &sorter_opt)
{
	// aten's searchsorted_pre_check
	TORCH_CHECK(boundaries.device() == input.device(), name, ": boundaries and input value tensors should be on the same device, ",
		    "but got boundaries on ", boundaries.device(), " and input value tensor on ", input.device());
	at::Tensor sorter = sorter_opt.has_value() ? *sorter_opt : at::Tensor();
	if (sorter.defined()) {
		TORCH_CHECK(sorter.device() == boundaries.device(), name, ": sorter and boundaries should be on the same device");
		TORCH_CHECK(sorter.scalar_type() == at::kLong, name, ": sorter must be a tensor of long dtype but got dtype ",
			    sorter.scalar_type());
		TORCH_CHECK(sorter.sizes() == boundaries.sizes(), name, ": boundary and sorter must have the same size, but got boundary tensor ",
			    boundaries.sizes(), "and got sorter tensor ", sorter.sizes());
	}
	TORCH_CHECK(input.dim() > 0 || (input.dim() == 0 && input.numel() == 1 && boundaries.dim() == 1),
		    name, ": input value can be a scalar only when boundaries tensor dimension is 1, but we got boundaries tensor dim(",
		    boundaries.dim(), ") and input value's dim(", input.dim(), ") numel(", input.numel(), ")");
	TORCH_CHECK(boundaries.dim() != 0, name, ": boundaries tensor should have positive dimension, but got 0 dimension");
	TORCH_CHECK(boundaries.dim() == 1 || input.sizes().slice(0, input.dim() - 1) == boundaries.sizes().slice(0, boundaries.dim() - 1),
		    name, ": boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor ",
		    "must match, but we got boundaries tensor ", boundaries.sizes(), " and input value tensor ", input.sizes());
	at::ScalarType common = at::result_type(boundaries, input);
	TORCH_CHECK(!at::isComplexType(common) && common != at::kBool, name, ": unsupported dtype ", common);
	c10::DeviceGuard g(input.device());
	at::Tensor bd = boundaries.to(common).contiguous(), x = input.to(common).contiguous();
	at::Tensor out = at::empty(input.sizes(), input.options().dtype(out_int32 ? at::kInt : at::kLong));
	if (out_int32)
		TORCH_CHECK(boundaries.size(-1) < INT_MAX, name, ": the size of boundaries' last dimension should be less than ", INT_MAX,
			    ", but we got ", boundaries.size(-1));
	if (x.numel() == 0)
		return out;
	nk_search_args_t a{};
	a.op = right ? NK_SEARCH_RIGHT : NK_SEARCH_LEFT;
	a.dtype = nk_dtype(common, name);
	a.out_dtype = out_int32 ? NK_I32 : NK_I64;
	a.nb = bd.size(-1);
	a.n = x.dim() ? x.size(-1) : 1;
	a.O = x.numel() / a.n;
	a.bso = bd.dim() == 1 ? 0 : a.nb;
	if (bd.dim() == 1) { // one shared row: treat every element as its own row of length 1 of the output
		a.n = x.numel(), a.O = 1;
	}
	at::Tensor s = sorter.defined() ? sorter.contiguous() : at::Tensor();
	a.x = x.const_data_ptr(), a.bd = bd.const_data_ptr();
	a.sorter = s.defined() ? s.const_data_ptr<int64_t>() : nullptr;
	a.out = out.data_ptr();
	launch(current_queue(input.device().index()), nk_search_run, a, name);
	return out;
}

static bool side_right(const char *name, bool right, const std::optional<c10::string_view> &side)
{
	if (side.has_value()) {
		TORCH_CHECK(*side == "left" || *side == "right", name, ": side can only be 'left' or 'right' but got ", *side);
		TORCH_CHECK(!right || *side == "right", name, ": side and right can't be set to opposites, got side of ", *side,
			    " while right was True");
		return *side == "right";
	}
	return right;
}

static at::Tensor searchsorted_t(const at::Tensor &bd, const at::Tensor &self, bool out_int32, bool right,
				 std::optional<c10::string_view> side, const std::optional<at::Tensor> &sorter)
{
	NEURON_TRACK("aten::searchsorted.Tensor");
	return search_impl("torch.searchsorted()", bd, self, out_int32, side_right("torch.searchsorted()", right, side), sorter);
}
static at::Tensor &searchsorted_to(const at::Tensor &bd, const at::Tensor &self, bool out_int32, bool right,
				   std::optional<c10::string_view> side, const std::optional<at::Tensor> &sorter, at::Tensor &out)
{
	NEURON_TRACK("aten::searchsorted.Tensor_out");
	return into(out, searchsorted_t(bd, self, out_int32, right, side, sorter));
}
static at::Tensor scalar_on(const c10::Scalar &s, const at::Tensor &like)
{
	return at::scalar_tensor(s, at::TensorOptions().dtype(s.type())).to(like.device());
}
static at::Tensor searchsorted_s(const at::Tensor &bd, const c10::Scalar &self, bool out_int32, bool right,
				 std::optional<c10::string_view> side, const std::optional<at::Tensor> &sorter)
{
	NEURON_TRACK("aten::searchsorted.Scalar");
	return search_impl("torch.searchsorted()", bd, scalar_on(self, bd), out_int32, side_right("torch.searchsorted()", right, side), sorter);
}
static at::Tensor &searchsorted_so(const at::Tensor &bd, const c10::Scalar &self, bool out_int32, bool right,
				   std::optional<c10::string_view> side, const std::optional<at::Tensor> &sorter, at::Tensor &out)
{
	NEURON_TRACK("aten::searchsorted.Scalar_out");
	return into(out, searchsorted_s(bd, self, out_int32, right, side, sorter));
}
static at::Tensor bucketize_t(const at::Tensor &self, const at::Tensor &bd, bool out_int32, bool right)
{
	NEURON_TRACK("aten::bucketize.Tensor");
	TORCH_CHECK(bd.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", bd.dim(), ")");
	return search_impl("torch.bucketize()", bd, self, out_int32, right, std::nullopt);
}
static at::Tensor &bucketize_to(const at::Tensor &self, const at::Tensor &bd, bool out_int32, bool right, at::Tensor &out)
{
	NEURON_TRACK("aten::bucketize.Tensor_out");
	return into(out, bucketize_t(self, bd, out_int32, right));
}
static at::Tensor bucketize_s(const c10::Scalar &self, const at::Tensor &bd, bool out_int32, bool right)
{
	NEURON_TRACK("aten::bucketize.Scalar");
	TORCH_CHECK(bd.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", bd.dim(), ")");
	return search_impl("torch.bucketize()", bd, scalar_on(self, bd), out_int32, right, std::nullopt);
}

// isin: the test elements sorted (native sort), every element searched in them
static at::Tensor isin_impl(const at::Tensor &elements, const at::Tensor &test, bool invert)
{
	TORCH_CHECK(elements.device() == test.device(), "isin: expected elements and test_elements on the same device, got ",
		    elements.device(), " and ", test.device());
	at::ScalarType common = at::result_type(elements, test);
	TORCH_CHECK(!at::isComplexType(common), "isin: complex dtypes are not supported");
	c10::DeviceGuard g(elements.device());
	at::Tensor out = at::empty(elements.sizes(), elements.options().dtype(at::kBool));
	if (elements.numel() == 0)
		return out;
	at::Tensor x = elements.to(common).contiguous();
	at::Tensor t = std::get<0>(at::sort(test.to(common).reshape({-1}), /*stable=*/false, 0, false));
	nk_search_args_t a{};
	a.op = NK_SEARCH_ISIN;
	a.dtype = nk_dtype(common, "aten::isin");
	a.out_dtype = NK_BOOL;
	a.invert = invert;
	a.O = 1, a.n = x.numel(), a.nb = t.numel(), a.bso = 0;
	a.x = x.const_data_ptr(), a.bd = t.const_data_ptr(), a.out = out.data_ptr();
	launch(current_queue(elements.device().index()), nk_search_run, a, "aten::isin");
	return out;
}
static at::Tensor isin_tt(const at::Tensor &e, const at::Tensor &t, bool assume_unique, bool invert)
{
	NEURON_TRACK("aten::isin.Tensor_Tensor");
	return isin_impl(e, t, invert);
}
static at::Tensor &isin_tto(const at::Tensor &e, const at::Tensor &t, bool assume_unique, bool invert, at::Tensor &out)
{
	NEURON_TRACK("aten::isin.Tensor_Tensor_out");
	return into(out, isin_impl(e, t, invert));
}
static at::Tensor isin_ts(const at::Tensor &e, const c10::Scalar &t, bool assume_unique, bool invert)
{
	NEURON_TRACK("aten::isin.Tensor_Scalar");
	return isin_impl(e, scalar_on(t, e), invert);
}
static at::Tensor &isin_tso(const at::Tensor &e, const c10::Scalar &t, bool assume_unique, bool invert, at::Tensor &out)
{
	NEURON_TRACK("aten::isin.Tensor_Scalar_out");
	return into(out, isin_impl(e, scalar_on(t, e), invert));
}
static at::Tensor isin_st(const c10::Scalar &e, const at::Tensor &t, bool assume_unique, bool invert)
{
	NEURON_TRACK("aten::isin.Scalar_Tensor");
	return isin_impl(scalar_on(e, t), t, invert);
}
static at::Tensor &isin_sto(const c10::Scalar &e, const at::Tensor &t, bool assume_unique, bool invert, at::Tensor &out)
{
	NEURON_TRACK("aten::isin.Scalar_Tensor_out");
	return into(out, isin_impl(scalar_on(e, t), t, invert));
}

// ---- bincount / histc ---------------------------------------------------------------------------------

static at::Tensor bincount_f(const at::Tensor &self, const std::optional<at::Tensor> &weights_opt, int64_t minlength)
{
	NEURON_TRACK("aten::bincount");
	at::Tensor w = weights_opt.has_value() ? *weights_opt : at::Tensor();
	TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
	TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), false) &&
			    (self.numel() == 0 || self.scalar_type() != at::kBool),
		    "bincount only supports 1-d non-negative integral inputs.");
	if (self.dim() == 1 && self.numel() == 0) {
		auto dt = !w.defined() ? at::kLong : (w.scalar_type() == at::kFloat ? at::kFloat : at::kDouble);
		return at::zeros({minlength}, self.options().dtype(dt));
	}
	TORCH_CHECK(!w.defined() || (w.dim() == 1 && w.size(0) == self.size(0)), "weights should be 1-d and have the same length as input");
	c10::DeviceGuard g(self.device());
	auto mm = at::aminmax(self);
	int64_t lo = std::get<0>(mm).item<int64_t>(), hi = std::get<1>(mm).item<int64_t>();
	TORCH_CHECK(lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
	int64_t nbins = std::max(hi + 1, minlength);
	at::ScalarType odt = !w.defined() ? at::kLong : (w.scalar_type() == at::kFloat ? at::kFloat : at::kDouble);
	at::Tensor x = self.contiguous(), wc = w.defined() ? w.to(odt).contiguous() : at::Tensor();
	at::Tensor out = at::empty({nbins}, self.options().dtype(odt));
	nk_bincount_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::bincount");
	a.out_dtype = nk_dtype(odt, "aten::bincount");
	a.w_dtype = w.defined() ? a.out_dtype : 0;
	a.n = x.numel(), a.nbins = nbins;
	a.x = x.const_data_ptr(), a.w = w.defined() ? wc.const_data_ptr() : nullptr, a.out = out.data_ptr();
	launch(current_queue(self.device().index()), nk_bincount_run, a, "aten::bincount");
	return out;
}

static at::Tensor histc_f(const at::Tensor &self, int64_t bins, const c10::Scalar &min, const c10::Scalar &max)
{
	NEURON_TRACK("aten::histc");
	// integer inputs, as CUDA takes them (Transformers' MoE routing counts expert ids so): bounds
	// truncated to the dtype, counts in the dtype; binned in float64, exact for |values| < 2^53
	if (at::isIntegralType(self.scalar_type(), false))
		return histc_f(self.to(at::kDouble), bins, min.to<int64_t>(), max.to<int64_t>()).to(self.scalar_type());
	TORCH_CHECK(at::isFloatingType(self.scalar_type()), "torch.histogramdd: input tensor and bins tensors should",
		    " have the same dtype, but got input ", self.scalar_type(), " and bins ", self.scalar_type());
	TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for dimension 0");
	double left = min.to<double>(), right = max.to<double>();
	c10::DeviceGuard g(self.device());
	if (left == right && self.numel() > 0) {
		auto mm = at::aminmax(self);
		left = std::get<0>(mm).item<double>(), right = std::get<1>(mm).item<double>();
	}
	if (left == right)
		left -= 1, right += 1;
	TORCH_CHECK(!(std::isinf(left) || std::isinf(right) || std::isnan(left) || std::isnan(right)), "torch.histc: range of [", left,
		    ", ", right, "] is not finite");
	TORCH_CHECK(left < right, "torch.histc: max must be larger than min");
	// the edges exactly as aten computes them (linspace in the dtype, on the host)
	at::Tensor edges = at::linspace(left, right, bins + 1, at::TensorOptions().dtype(self.scalar_type())).to(self.device());
	at::Tensor x = self.contiguous(), out = at::empty({bins}, self.options());
	nk_histc_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::histc");
	a.n = x.numel(), a.nbins = bins;
	a.x = x.const_data_ptr(), a.edges = edges.const_data_ptr(), a.out = out.data_ptr();
	launch(current_queue(self.device().index()), nk_histc_run, a, "aten::histc");
	return out;
}
static at::Tensor &histc_o(const at::Tensor &self, int64_t bins, const c10::Scalar &min, const c10::Scalar &max, at::Tensor &out)
{
	NEURON_TRACK("aten::histc.out");
	return into(out, histc_f(self, bins, min, max));
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "cumsum", cumsum_f);
	NEURON_IMPL(m, "cumsum.out", cumsum_o);
	NEURON_IMPL(m, "cumsum_", cumsum_i);
	NEURON_IMPL(m, "cumprod", cumprod_f);
	NEURON_IMPL(m, "cumprod.out", cumprod_o);
	NEURON_IMPL(m, "cumprod_", cumprod_i);
	NEURON_IMPL(m, "_cummax_helper", cummax_helper);
	NEURON_IMPL(m, "_cummin_helper", cummin_helper);
	NEURON_IMPL(m, "_logcumsumexp", logcumsumexp_f);
	NEURON_IMPL(m, "_logcumsumexp.out", logcumsumexp_o);
	NEURON_IMPL(m, "sort.stable", sort_stable);
	NEURON_IMPL(m, "sort.values_stable", sort_values_stable);
	NEURON_IMPL(m, "topk", topk_f);
	NEURON_IMPL(m, "topk.values", topk_o);
	NEURON_IMPL(m, "kthvalue.values", kthvalue_o);
	NEURON_IMPL(m, "median", median_f);
	NEURON_IMPL(m, "median.out", median_o);
	NEURON_IMPL(m, "median.dim", median_dim_f);
	NEURON_IMPL(m, "median.dim_values", median_dim_o);
	NEURON_IMPL(m, "nanmedian", nanmedian_f);
	NEURON_IMPL(m, "nanmedian.out", nanmedian_o);
	NEURON_IMPL(m, "nanmedian.dim", nanmedian_dim_f);
	NEURON_IMPL(m, "nanmedian.dim_values", nanmedian_dim_o);
	NEURON_IMPL(m, "mode", mode_f);
	NEURON_IMPL(m, "mode.values", mode_o);
	NEURON_IMPL(m, "_unique", unique_f);
	NEURON_IMPL(m, "_unique2", unique2_f);
	NEURON_IMPL(m, "unique_dim", unique_dim_f);
	NEURON_IMPL(m, "unique_consecutive", unique_consecutive_f);
	NEURON_IMPL(m, "unique_dim_consecutive", unique_dim_consecutive_f);
	NEURON_IMPL(m, "searchsorted.Tensor", searchsorted_t);
	NEURON_IMPL(m, "searchsorted.Tensor_out", searchsorted_to);
	NEURON_IMPL(m, "searchsorted.Scalar", searchsorted_s);
	NEURON_IMPL(m, "searchsorted.Scalar_out", searchsorted_so);
	NEURON_IMPL(m, "bucketize.Tensor", bucketize_t);
	NEURON_IMPL(m, "bucketize.Tensor_out", bucketize_to);
	NEURON_IMPL(m, "bucketize.Scalar", bucketize_s);
	NEURON_IMPL(m, "isin.Tensor_Tensor", isin_tt);
	NEURON_IMPL(m, "isin.Tensor_Tensor_out", isin_tto);
	NEURON_IMPL(m, "isin.Tensor_Scalar", isin_ts);
	NEURON_IMPL(m, "isin.Tensor_Scalar_out", isin_tso);
	NEURON_IMPL(m, "isin.Scalar_Tensor", isin_st);
	NEURON_IMPL(m, "isin.Scalar_Tensor_out", isin_sto);
	NEURON_IMPL(m, "bincount", bincount_f);
	NEURON_IMPL(m, "histc", histc_f);
	NEURON_IMPL(m, "histc.out", histc_o);
}
