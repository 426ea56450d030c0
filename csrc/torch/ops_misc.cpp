// ops_misc.cpp - selection (topk, kthvalue, median/nanmedian, mode, unique*, searchsorted, bucketize,
// isin, bincount, histc) on the kernels of select.c.  Inputs are made contiguous and viewed as
// [O, R, I] around the selected dim; ops whose output size depends on the data (unique, bincount)
// synchronize the device to read the size, as nonzero does.
#include "neuron.h"
#include "out.h"
#include "pointwise.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>

namespace neuron {

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

// ---- random: more distributions, randperm, multinomial (random_dist.c), normal with tensor params ----

std::pair<uint64_t, uint64_t> philox_args(const std::optional<at::Generator> &gen, c10::DeviceIndex idx, int64_t n);

// One dense run of n elements as an nk_iter_t output.
static void dense_iter(nk_iter_t &it, const at::Tensor &t, const char *name)
{
	it.ndim = 1, it.nops = 1;
	it.shape[0] = t.numel();
	it.data[0] = (char *)t.data_ptr();
	it.strides[0][0] = (int64_t)t.element_size();
	it.dtype[0] = (int8_t)nk_dtype(t.scalar_type(), name);
}

static at::Tensor &dist_(at::Tensor &self, int kind, double a, double b, const std::optional<at::Generator> &gen, const char *name)
{
	if (self.numel() == 0)
		return self;
	c10::DeviceGuard g(self.device());
	at::Tensor t = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
	nk_dist_args_t r{};
	dense_iter(r.it, t, name);
	r.kind = kind, r.a = a, r.b = b;
	auto so = philox_args(gen, self.device().index(), self.numel());
	r.seed = so.first, r.offset = so.second;
	launch(current_queue(self.device().index()), nk_dist_run, r, name);
	if (!t.is_same(self))
		self.copy_(t);
	return self;
}

static void check_float(const at::Tensor &self, const char *what)
{
	TORCH_CHECK(at::isFloatingType(self.scalar_type()), what, " expects a floating point tensor, got ", self.scalar_type());
}

static at::Tensor &exponential_(at::Tensor &self, double lambd, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::exponential_");
	TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
	check_float(self, "exponential_");
	return dist_(self, NK_DIST_EXPONENTIAL, lambd, 0, gen, "aten::exponential_");
}
static at::Tensor &cauchy_(at::Tensor &self, double median, double sigma, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::cauchy_");
	TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
	check_float(self, "cauchy_");
	return dist_(self, NK_DIST_CAUCHY, median, sigma, gen, "aten::cauchy_");
}
static at::Tensor &geometric_(at::Tensor &self, double p, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::geometric_");
	TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
	TORCH_CHECK(self.scalar_type() != at::kBool, "geometric_ is not implemented for Bool");
	return dist_(self, NK_DIST_GEOMETRIC, p, 0, gen, "aten::geometric_");
}
static at::Tensor &log_normal_(at::Tensor &self, double mean, double std, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::log_normal_");
	TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
	check_float(self, "log_normal_");
	return dist_(self, NK_DIST_LOG_NORMAL, mean, std, gen, "aten::log_normal_");
}

// normal with tensor parameters, as aten: draw N(0, 1) (or N(0, std)) into the output, then scale
// and shift with native elementwise ops.
static void check_std_tensor(const at::Tensor &std)
{
	TORCH_CHECK(!std.is_complex(), "normal expects standard deviation to be non-complex");
	TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(), "normal expects all elements of std >= 0.0");
}
static at::Tensor &normal_tf_o(const at::Tensor &mean, double std, std::optional<at::Generator> gen, at::Tensor &out)
{
	NEURON_TRACK("aten::normal.Tensor_float_out");
	TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
	at::native::resize_output(out, mean.sizes());
	out.normal_(0, std, gen);
	out.add_(mean);
	return out;
}
static at::Tensor normal_tf(const at::Tensor &mean, double std, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::normal.Tensor_float");
	at::Tensor out = at::empty(mean.sizes(), mean.options());
	return normal_tf_o(mean, std, gen, out);
}
static at::Tensor &normal_ft_o(double mean, const at::Tensor &std, std::optional<at::Generator> gen, at::Tensor &out)
{
	NEURON_TRACK("aten::normal.float_Tensor_out");
	check_std_tensor(std);
	at::native::resize_output(out, std.sizes());
	out.normal_(0, 1, gen);
	out.mul_(std).add_(mean);
	return out;
}
static at::Tensor normal_ft(double mean, const at::Tensor &std, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::normal.float_Tensor");
	at::Tensor out = at::empty(std.sizes(), std.options());
	return normal_ft_o(mean, std, gen, out);
}
static at::Tensor &normal_tt_o(const at::Tensor &mean, const at::Tensor &std, std::optional<at::Generator> gen, at::Tensor &out)
{
	NEURON_TRACK("aten::normal.Tensor_Tensor_out");
	check_std_tensor(std);
	at::native::resize_output(out, at::infer_size(mean.sizes(), std.sizes()));
	out.normal_(0, 1, gen);
	out.mul_(std).add_(mean);
	return out;
}
static at::Tensor normal_tt(const at::Tensor &mean, const at::Tensor &std, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::normal.Tensor_Tensor");
	at::Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()), mean.options());
	return normal_tt_o(mean, std, gen, out);
}

static at::Tensor &randperm_go(int64_t n, std::optional<at::Generator> gen, at::Tensor &out)
{
	NEURON_TRACK("aten::randperm.generator_out");
	TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
	TORCH_CHECK(out.scalar_type() != at::kBool, "randperm is not implemented for Bool");
	int64_t digits = at::isFloatingType(out.scalar_type()) ?
				 (out.scalar_type() == at::kDouble ? 53 : out.scalar_type() == at::kFloat ? 24 :
				  out.scalar_type() == at::kHalf ? 11 : 8) :
				 (int64_t)out.element_size() * 8 - (out.scalar_type() == at::kByte ? 0 : 1);
	TORCH_CHECK(digits >= 63 || n <= ((int64_t)1 << digits), "n is too large for result tensor type: '", out.toString(), "'");
	at::native::resize_output(out, {n});
	if (n == 0)
		return out;
	c10::DeviceGuard g(out.device());
	at::Tensor t = out.is_contiguous() ? out : at::empty({n}, out.options());
	at::Tensor work = at::empty({n}, out.options().dtype(at::kLong));
	nk_randperm_args_t a{};
	a.dtype = nk_dtype(out.scalar_type(), "aten::randperm");
	a.n = n, a.out = t.data_ptr(), a.work = work.mutable_data_ptr<int64_t>();
	auto so = philox_args(gen, out.device().index(), n);
	a.seed = so.first, a.offset = so.second;
	launch(current_queue(out.device().index()), nk_randperm_run, a, "aten::randperm");
	if (!t.is_same(out))
		out.copy_(t);
	return out;
}
static at::Tensor &randperm_o(int64_t n, at::Tensor &out)
{
	NEURON_TRACK("aten::randperm.out");
	return randperm_go(n, std::nullopt, out);
}

static at::Tensor &multinomial_o(const at::Tensor &self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen,
				 at::Tensor &result)
{
	NEURON_TRACK("aten::multinomial.out");
	TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
	TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
	TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
		    self.scalar_type());
	TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
	TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
	int64_t C = self.size(-1);
	TORCH_CHECK(replacement || n_sample <= C, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
	TORCH_CHECK(C <= (1 << 24), "number of categories cannot exceed 2^24");
	int64_t D = self.dim() == 1 ? 1 : self.size(0);
	if (self.dim() == 1)
		at::native::resize_output(result, {n_sample});
	else
		at::native::resize_output(result, {D, n_sample});
	if (result.numel() == 0)
		return result;
	TORCH_CHECK(C > 0, "multinomial: the probability rows are empty");
	c10::DeviceGuard g(self.device());
	at::Tensor p = self.contiguous();
	at::Tensor t = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
	at::Tensor work = at::empty({2 * D * C}, self.options().dtype(at::kDouble));
	nk_multinomial_args_t a{};
	a.dtype = nk_dtype(self.scalar_type(), "aten::multinomial");
	a.D = D, a.C = C, a.S = n_sample, a.replacement = replacement;
	a.p = p.const_data_ptr(), a.out = t.mutable_data_ptr<int64_t>(), a.work = work.data_ptr();
	auto so = philox_args(gen, self.device().index(), D * std::max(C, n_sample));
	a.seed = so.first, a.offset = so.second;
	launch(current_queue(self.device().index()), nk_multinomial_run, a, "aten::multinomial");
	if (!t.is_same(result))
		result.copy_(t);
	return result;
}
static at::Tensor multinomial_f(const at::Tensor &self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::multinomial");
	at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
	return multinomial_o(self, n_sample, replacement, gen, result);
}

// ---- special functions (special.c) and pointwise ops on existing nk_pointwise ops ----------------------

// out = op(inputs...) with TensorIterator's promotion (integer inputs to the default float dtype when
// to_float) on the special-function kernel.  CPU 0-d inputs are moved to the device first.
static at::Tensor special(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out, bool to_float,
			  int64_t ia = 0)
{
	std::optional<c10::Device> dev;
	for (const auto &x : inputs)
		if (!(x.dim() == 0 && x.device().is_cpu()) && !dev)
			dev = x.device();
	if (!dev)
		dev = out.defined() ? out.device() : inputs.begin()->device();
	c10::DeviceGuard g(*dev);
	at::TensorIteratorConfig cfg;
	cfg.add_output(out).promote_inputs_to_common_dtype(true).cast_common_dtype_to_outputs(true).enforce_safe_casting_to_output(true)
		.promote_integer_inputs_to_float(to_float);
	for (const auto &x : inputs)
		cfg.add_const_input(x.dim() == 0 && x.device().is_cpu() ? x.to(*dev) : x);
	auto iter = cfg.build();
	if (iter.numel() > 0) {
		nk_special_args_t a{};
		nk_iter_t &it = a.it;
		iter_to_nk(iter, it, name);
		a.op = op, a.ia = ia;
		launch(current_queue(dev->index()), nk_special_run, a, name);
	}
	iter.cast_outputs();
	return iter.output(0);
}

#define SP_UNARY(fn, opname, NKOP, FLOAT)                                                                          \
	static at::Tensor fn##_f(const at::Tensor &s)                                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		return special("aten::" opname, NKOP, {s}, {}, FLOAT);                                             \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		special("aten::" opname ".out", NKOP, {s}, o, FLOAT);                                              \
		return o;                                                                                          \
	}                                                                                                          \
	[[maybe_unused]] static at::Tensor &fn##_i(at::Tensor &s)                                                  \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_");                                                                 \
		special("aten::" opname "_", NKOP, {s}, s, FLOAT);                                                 \
		return s;                                                                                          \
	}
SP_UNARY(digamma, "digamma", NK_SP_DIGAMMA, true)
SP_UNARY(lgamma, "lgamma", NK_SP_LGAMMA, true)
SP_UNARY(sinc, "sinc", NK_SP_SINC, true)
SP_UNARY(entr, "special_entr", NK_SP_ENTR, true)
SP_UNARY(i0, "i0", NK_SP_I0, true)
SP_UNARY(i0e, "special_i0e", NK_SP_I0E, true)
SP_UNARY(i1, "special_i1", NK_SP_I1, true)
SP_UNARY(i1e, "special_i1e", NK_SP_I1E, true)

static at::Tensor angle_f(const at::Tensor &s)
{
	NEURON_TRACK("aten::angle");
	TORCH_CHECK(!s.is_complex(), "angle: complex tensors are not supported on neuron");
	return special("aten::angle", NK_SP_ANGLE, {s}, {}, true);
}
static at::Tensor &angle_o(const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::angle.out");
	TORCH_CHECK(!s.is_complex(), "angle: complex tensors are not supported on neuron");
	special("aten::angle.out", NK_SP_ANGLE, {s}, o, true);
	return o;
}

static at::Tensor polygamma_f(int64_t n, const at::Tensor &s)
{
	NEURON_TRACK("aten::polygamma");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	return special("aten::polygamma", NK_SP_POLYGAMMA, {s}, {}, true, n);
}
static at::Tensor &polygamma_o(int64_t n, const at::Tensor &s, at::Tensor &o)
{
	NEURON_TRACK("aten::polygamma.out");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	special("aten::polygamma.out", NK_SP_POLYGAMMA, {s}, o, true, n);
	return o;
}
static at::Tensor &polygamma_i(at::Tensor &s, int64_t n)
{
	NEURON_TRACK("aten::polygamma_");
	TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
	special("aten::polygamma_", NK_SP_POLYGAMMA, {s}, s, true, n);
	return s;
}

#define SP_BINARY(fn, opname, NKOP, FLOAT)                                                                         \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		return special("aten::" opname, NKOP, {s, o}, {}, FLOAT);                                          \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		special("aten::" opname ".out", NKOP, {s, o}, out, FLOAT);                                         \
		return out;                                                                                        \
	}
SP_BINARY(zeta, "special_zeta", NK_SP_ZETA, true)
SP_BINARY(xlog1py, "special_xlog1py", NK_SP_XLOG1PY, true)
SP_BINARY(cheb_t, "special_chebyshev_polynomial_t", NK_SP_CHEBYSHEV_T, true)
SP_BINARY(cheb_u, "special_chebyshev_polynomial_u", NK_SP_CHEBYSHEV_U, true)
SP_BINARY(cheb_v, "special_chebyshev_polynomial_v", NK_SP_CHEBYSHEV_V, true)
SP_BINARY(cheb_w, "special_chebyshev_polynomial_w", NK_SP_CHEBYSHEV_W, true)
SP_BINARY(scheb_t, "special_shifted_chebyshev_polynomial_t", NK_SP_SHIFTED_CHEBYSHEV_T, true)
SP_BINARY(scheb_u, "special_shifted_chebyshev_polynomial_u", NK_SP_SHIFTED_CHEBYSHEV_U, true)
SP_BINARY(scheb_v, "special_shifted_chebyshev_polynomial_v", NK_SP_SHIFTED_CHEBYSHEV_V, true)
SP_BINARY(scheb_w, "special_shifted_chebyshev_polynomial_w", NK_SP_SHIFTED_CHEBYSHEV_W, true)
SP_BINARY(herm_h, "special_hermite_polynomial_h", NK_SP_HERMITE_H, true)
SP_BINARY(herm_he, "special_hermite_polynomial_he", NK_SP_HERMITE_HE, true)
SP_BINARY(lag_l, "special_laguerre_polynomial_l", NK_SP_LAGUERRE_L, true)
SP_BINARY(leg_p, "special_legendre_polynomial_p", NK_SP_LEGENDRE_P, true)

// binary ops with an in-place form too; check(s, o) raises aten's dtype errors first
#define SP_BINARY_I(fn, opname, NKOP, FLOAT, CHECK)                                                                \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname);                                                                     \
		CHECK(s, o);                                                                                       \
		return special("aten::" opname, NKOP, {s, o}, {}, FLOAT);                                          \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		CHECK(s, o);                                                                                       \
		special("aten::" opname ".out", NKOP, {s, o}, out, FLOAT);                                         \
		return out;                                                                                        \
	}                                                                                                          \
	static at::Tensor &fn##_i(at::Tensor &s, const at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_");                                                                 \
		CHECK(s, o);                                                                                       \
		special("aten::" opname "_", NKOP, {s, o}, s, FLOAT);                                              \
		return s;                                                                                          \
	}
static void heaviside_check(const at::Tensor &s, const at::Tensor &v)
{
	TORCH_CHECK(!s.is_complex() && !v.is_complex(), "heaviside is not yet implemented for complex tensors.");
	TORCH_CHECK(s.scalar_type() == v.scalar_type(), "heaviside is not yet implemented for tensors with different dtypes.");
}
static void nextafter_check(const at::Tensor &s, const at::Tensor &o)
{
	TORCH_CHECK(at::isFloatingType(s.scalar_type()) && at::isFloatingType(o.scalar_type()), "\"nextafter_cpu\" not implemented for '",
		    at::isFloatingType(s.scalar_type()) ? o.scalar_type() : s.scalar_type(), "'");
}
static void int_check(const at::Tensor &s, const at::Tensor &o)
{
	for (const at::Tensor *t : {&s, &o})
		TORCH_CHECK(at::isIntegralType(t->scalar_type(), false), "\"gcd/lcm\" not implemented for '", t->scalar_type(), "'");
}
SP_BINARY_I(heaviside, "heaviside", NK_SP_HEAVISIDE, false, heaviside_check)
SP_BINARY_I(nextafter, "nextafter", NK_SP_NEXTAFTER, false, nextafter_check)
SP_BINARY_I(gcd, "gcd", NK_SP_GCD, false, int_check)
SP_BINARY_I(lcm, "lcm", NK_SP_LCM, false, int_check)

// shifts, copysign and xlogy: ops the pointwise engine already has
#define PW_BINARY_I(fn, opname, ovl, NKOP, KIND)                                                                   \
	static at::Tensor fn##_f(const at::Tensor &s, const at::Tensor &o)                                         \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ovl);                                                                 \
		return pointwise_op("aten::" opname, NKOP, {s, o}, {}, KIND);                                      \
	}                                                                                                          \
	static at::Tensor &fn##_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)                       \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname ".out");                                                              \
		pointwise_op("aten::" opname ".out", NKOP, {s, o}, out, KIND);                                     \
		return out;                                                                                        \
	}                                                                                                          \
	static at::Tensor &fn##_i(at::Tensor &s, const at::Tensor &o)                                              \
	{                                                                                                          \
		NEURON_TRACK("aten::" opname "_" ovl);                                                             \
		pointwise_op("aten::" opname "_", NKOP, {s, o}, s, KIND);                                          \
		return s;                                                                                          \
	}
static void shift_check(const at::Tensor &s, const at::Tensor &o, const char *op)
{
	for (const at::Tensor *t : {&s, &o})
		TORCH_CHECK(at::isIntegralType(t->scalar_type(), false), "\"", op, "_cpu\" not implemented for '", t->scalar_type(), "'");
}
static at::Tensor lshift_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_left_shift.Tensor");
	shift_check(s, o, "lshift");
	return pointwise_op("aten::bitwise_left_shift", NK_OP_LSHIFT, {s, o}, {}, PwKind::Same);
}
static at::Tensor &lshift_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::bitwise_left_shift.Tensor_out");
	shift_check(s, o, "lshift");
	pointwise_op("aten::bitwise_left_shift.Tensor_out", NK_OP_LSHIFT, {s, o}, out, PwKind::Same);
	return out;
}
static at::Tensor &lshift_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_left_shift_.Tensor");
	shift_check(s, o, "lshift");
	pointwise_op("aten::bitwise_left_shift_", NK_OP_LSHIFT, {s, o}, s, PwKind::Same);
	return s;
}
static at::Tensor rshift_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_right_shift.Tensor");
	shift_check(s, o, "rshift");
	return pointwise_op("aten::bitwise_right_shift", NK_OP_RSHIFT, {s, o}, {}, PwKind::Same);
}
static at::Tensor &rshift_o(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::bitwise_right_shift.Tensor_out");
	shift_check(s, o, "rshift");
	pointwise_op("aten::bitwise_right_shift.Tensor_out", NK_OP_RSHIFT, {s, o}, out, PwKind::Same);
	return out;
}
static at::Tensor &rshift_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::bitwise_right_shift_.Tensor");
	shift_check(s, o, "rshift");
	pointwise_op("aten::bitwise_right_shift_", NK_OP_RSHIFT, {s, o}, s, PwKind::Same);
	return s;
}
PW_BINARY_I(copysign, "copysign", ".Tensor", NK_OP_COPYSIGN, PwKind::Float)
static at::Tensor xlogy_f(const at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::xlogy.Tensor");
	return pointwise_op("aten::xlogy", NK_OP_XLOGY, {s, o}, {}, PwKind::Float);
}
static at::Tensor &xlogy_i(at::Tensor &s, const at::Tensor &o)
{
	NEURON_TRACK("aten::xlogy_.Tensor");
	pointwise_op("aten::xlogy_", NK_OP_XLOGY, {s, o}, s, PwKind::Float);
	return s;
}
static at::Tensor &xlogy_oo(const at::Tensor &s, const at::Tensor &o, at::Tensor &out)
{
	NEURON_TRACK("aten::xlogy.OutTensor");
	pointwise_op("aten::xlogy.OutTensor", NK_OP_XLOGY, {s, o}, out, PwKind::Float);
	return out;
}

// sgn's derivative asks for an "efficient zero tensor": a plain zero-filled tensor here
static at::Tensor efficientzerotensor_f(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
					std::optional<at::Device> device, std::optional<bool> pin_memory)
{
	NEURON_TRACK("aten::_efficientzerotensor");
	auto opts = at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory);
	return at::zeros(C10_AS_INTARRAYREF_SLOW(size), opts);
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
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
	NEURON_IMPL(m, "exponential_", exponential_);
	NEURON_IMPL(m, "cauchy_", cauchy_);
	NEURON_IMPL(m, "geometric_", geometric_);
	NEURON_IMPL(m, "log_normal_", log_normal_);
	NEURON_IMPL(m, "normal.Tensor_float", normal_tf);
	NEURON_IMPL(m, "normal.Tensor_float_out", normal_tf_o);
	NEURON_IMPL(m, "normal.float_Tensor", normal_ft);
	NEURON_IMPL(m, "normal.float_Tensor_out", normal_ft_o);
	NEURON_IMPL(m, "normal.Tensor_Tensor", normal_tt);
	NEURON_IMPL(m, "normal.Tensor_Tensor_out", normal_tt_o);
	NEURON_IMPL(m, "randperm.out", randperm_o);
	NEURON_IMPL(m, "randperm.generator_out", randperm_go);
	NEURON_IMPL(m, "multinomial", multinomial_f);
	NEURON_IMPL(m, "multinomial.out", multinomial_o);
	NEURON_IMPL(m, "digamma", digamma_f);
	NEURON_IMPL(m, "digamma.out", digamma_o);
	NEURON_IMPL(m, "digamma_", digamma_i);
	NEURON_IMPL(m, "lgamma", lgamma_f);
	NEURON_IMPL(m, "lgamma.out", lgamma_o);
	NEURON_IMPL(m, "lgamma_", lgamma_i);
	NEURON_IMPL(m, "sinc", sinc_f);
	NEURON_IMPL(m, "sinc.out", sinc_o);
	NEURON_IMPL(m, "sinc_", sinc_i);
	NEURON_IMPL(m, "special_entr", entr_f);
	NEURON_IMPL(m, "special_entr.out", entr_o);
	NEURON_IMPL(m, "i0", i0_f);
	NEURON_IMPL(m, "i0.out", i0_o);
	NEURON_IMPL(m, "i0_", i0_i);
	NEURON_IMPL(m, "special_i0e", i0e_f);
	NEURON_IMPL(m, "special_i0e.out", i0e_o);
	NEURON_IMPL(m, "special_i1", i1_f);
	NEURON_IMPL(m, "special_i1.out", i1_o);
	NEURON_IMPL(m, "special_i1e", i1e_f);
	NEURON_IMPL(m, "special_i1e.out", i1e_o);
	NEURON_IMPL(m, "angle", angle_f);
	NEURON_IMPL(m, "angle.out", angle_o);
	NEURON_IMPL(m, "polygamma", polygamma_f);
	NEURON_IMPL(m, "polygamma.out", polygamma_o);
	NEURON_IMPL(m, "polygamma_", polygamma_i);
#define REG2(fn, opname) NEURON_IMPL(m, opname, fn##_f); NEURON_IMPL(m, opname ".out", fn##_o);
	REG2(zeta, "special_zeta")
	REG2(xlog1py, "special_xlog1py")
	REG2(cheb_t, "special_chebyshev_polynomial_t")
	REG2(cheb_u, "special_chebyshev_polynomial_u")
	REG2(cheb_v, "special_chebyshev_polynomial_v")
	REG2(cheb_w, "special_chebyshev_polynomial_w")
	REG2(scheb_t, "special_shifted_chebyshev_polynomial_t")
	REG2(scheb_u, "special_shifted_chebyshev_polynomial_u")
	REG2(scheb_v, "special_shifted_chebyshev_polynomial_v")
	REG2(scheb_w, "special_shifted_chebyshev_polynomial_w")
	REG2(herm_h, "special_hermite_polynomial_h")
	REG2(herm_he, "special_hermite_polynomial_he")
	REG2(lag_l, "special_laguerre_polynomial_l")
	REG2(leg_p, "special_legendre_polynomial_p")
#undef REG2
	NEURON_IMPL(m, "heaviside", heaviside_f);
	NEURON_IMPL(m, "heaviside.out", heaviside_o);
	NEURON_IMPL(m, "heaviside_", heaviside_i);
	NEURON_IMPL(m, "nextafter", nextafter_f);
	NEURON_IMPL(m, "nextafter.out", nextafter_o);
	NEURON_IMPL(m, "nextafter_", nextafter_i);
	NEURON_IMPL(m, "gcd", gcd_f);
	NEURON_IMPL(m, "gcd.out", gcd_o);
	NEURON_IMPL(m, "gcd_", gcd_i);
	NEURON_IMPL(m, "lcm", lcm_f);
	NEURON_IMPL(m, "lcm.out", lcm_o);
	NEURON_IMPL(m, "lcm_", lcm_i);
	NEURON_IMPL(m, "bitwise_left_shift.Tensor", lshift_f);
	NEURON_IMPL(m, "bitwise_left_shift.Tensor_out", lshift_o);
	NEURON_IMPL(m, "bitwise_left_shift_.Tensor", lshift_i);
	NEURON_IMPL(m, "bitwise_right_shift.Tensor", rshift_f);
	NEURON_IMPL(m, "bitwise_right_shift.Tensor_out", rshift_o);
	NEURON_IMPL(m, "bitwise_right_shift_.Tensor", rshift_i);
	NEURON_IMPL(m, "copysign.Tensor", copysign_f);
	NEURON_IMPL(m, "copysign.out", copysign_o);
	NEURON_IMPL(m, "copysign_.Tensor", copysign_i);
	NEURON_IMPL(m, "xlogy.Tensor", xlogy_f);
	NEURON_IMPL(m, "xlogy.OutTensor", xlogy_oo);
	NEURON_IMPL(m, "xlogy_.Tensor", xlogy_i);
	NEURON_IMPL(m, "_efficientzerotensor", efficientzerotensor_f);
}
