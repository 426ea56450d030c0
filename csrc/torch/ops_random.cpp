// ops_random.cpp - random ops: uniform_, normal_ (and with tensor parameters), bernoulli_, random_,
// exponential_, cauchy_, geometric_, log_normal_, randperm, multinomial and native_dropout
// (random.c, random_dist.c), on the device's Philox generator.
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "pointwise.h"
#include "ops_util.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <set>

namespace neuron {

// ---- random: more distributions, randperm, multinomial (random_dist.c), normal with tensor params ----

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

static at::Tensor &random_kernel(at::Tensor &self, int kind, double a, double b, int64_t ia, int64_t ib,
				 const std::optional<at::Generator> &gen, const char *name)
{
	if (self.numel() == 0)
		return self;
	DeviceScope g(self.device().index());
	auto iter = at::TensorIteratorConfig().add_output(self).resize_outputs(false).check_all_same_dtype(false).build();
	nk_random_args_t r{};
	iter_to_nk(iter, r.it, name);
	r.kind = kind;
	r.a = a, r.b = b, r.ia = ia, r.ib = ib;
	auto so = philox_args(gen, self.device().index(), self.numel());
	r.seed = so.first, r.offset = so.second;
	launch(current_queue(self.device().index()), nk_random_run, r, name);
	return self;
}

static at::Tensor &uniform_(at::Tensor &self, double from, double to, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::uniform_");
	TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
	return random_kernel(self, NK_RNG_UNIFORM, from, to, 0, 0, gen, "aten::uniform_");
}

static at::Tensor &normal_(at::Tensor &self, double mean, double std, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::normal_");
	TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
	if (C10_UNLIKELY(self.is_complex() && self.scalar_type() != at::kComplexHalf)) { // as aten: each part N(mean, std^2 / 2)
		at::Tensor r = real_view_raw(self);
		normal_(r, mean, std / std::sqrt(2.0), gen);
		return self;
	}
	// refused at the call, as the CPU does (the kernel would fail later, on the queue)
	TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"normal_kernel_cpu\" not implemented for '",
				    c10::toString(self.scalar_type()), "'");
	return random_kernel(self, NK_RNG_NORMAL, mean, std, 0, 0, gen, "aten::normal_");
}

static at::Tensor &bernoulli_float(at::Tensor &self, double p, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::bernoulli_.float");
	TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
	return random_kernel(self, NK_RNG_BERNOULLI, p, 0, 0, 0, gen, "aten::bernoulli_");
}

static at::Tensor &random_from_to(at::Tensor &self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::random_.from");
	int64_t hi;
	switch (self.scalar_type()) {
	case at::kBool: hi = 2; break;
	case at::kByte: hi = 256; break;
	case at::kChar: hi = 128; break;
	case at::kShort: hi = 32768; break;
	case at::kInt: hi = (int64_t)1 << 31; break;
	case at::kLong: hi = std::numeric_limits<int64_t>::max(); break;
	case at::kHalf: hi = (int64_t)1 << 11; break;
	case at::kBFloat16: hi = (int64_t)1 << 8; break;
	case at::kFloat: hi = (int64_t)1 << 24; break;
	default: hi = (int64_t)1 << 53; break;
	}
	if (to.has_value())
		hi = *to;
	TORCH_CHECK(from < hi, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", hi);
	return random_kernel(self, NK_RNG_RANDINT, 0, 0, from, hi, gen, "aten::random_");
}

static at::Tensor &random_to(at::Tensor &self, int64_t to, std::optional<at::Generator> gen)
{
	return random_from_to(self, 0, to, gen);
}

static at::Tensor &random_(at::Tensor &self, std::optional<at::Generator> gen)
{
	return random_from_to(self, 0, std::nullopt, gen);
}

static std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor &x, double p, std::optional<bool> train)
{
	NEURON_TRACK("aten::native_dropout");
	TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
	c10::DeviceGuard g(x.device());
	if (!train.value_or(true) || p == 0)
		return {x.clone(), at::empty_like(x, x.options().dtype(at::kBool)).fill_(true)};
	at::Tensor xc = x.contiguous();
	at::Tensor out = at::empty_like(xc), mask = at::empty_like(xc, xc.options().dtype(at::kBool));
	if (x.numel() == 0)
		return {out, mask};
	nk_dropout_args_t a{};
	a.dtype = nk_dtype(x.scalar_type(), "aten::native_dropout");
	a.n = x.numel();
	a.p = p;
	auto so = philox_args(std::nullopt, x.device().index(), a.n);
	a.seed = so.first, a.offset = so.second;
	a.x = xc.const_data_ptr(), a.out = out.data_ptr(), a.mask = mask.data_ptr();
	launch(current_queue(x.device().index()), nk_dropout_run, a, "aten::native_dropout");
	return {out, mask};
}

static at::Tensor &bernoulli_tensor(at::Tensor &self, const at::Tensor &p, std::optional<at::Generator> gen)
{
	NEURON_TRACK("aten::bernoulli_.Tensor");
	// aten's CPU kernel checks every probability (NaN fails too): one read-back, as binary_cross_entropy's
	if (p.numel()) {
		at::Tensor pd = p.to(self.device());
		bool ok = pd.ge(0).logical_and(pd.le(1)).all().item<bool>();
		TORCH_CHECK(ok, "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be improved?  "
				"If so, please report an enhancement request to PyTorch.)");
	}
	at::Tensor u = at::empty_like(self, self.options().dtype(p.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
	random_kernel(u, NK_RNG_UNIFORM, 0, 1, 0, 0, gen, "aten::bernoulli_");
	self.copy_(u.lt(p.to(self.device())));
	return self;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
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
	NEURON_IMPL(m, "uniform_", uniform_);
	NEURON_IMPL(m, "normal_", normal_);
	NEURON_IMPL(m, "bernoulli_.float", bernoulli_float);
	NEURON_IMPL(m, "random_.from", random_from_to);
	NEURON_IMPL(m, "random_.to", random_to);
	NEURON_IMPL(m, "random_", random_);
	NEURON_IMPL(m, "native_dropout", native_dropout);
	NEURON_IMPL(m, "bernoulli_.Tensor", bernoulli_tensor);
}
