// ops_foreach.cpp - native _foreach_* ops (the multi-tensor paths of torch.optim and clip_grad_norm_).
//
// aten's default for a backend without foreach kernels loops over the list and dispatches one op per
// tensor.  Here a whole list goes into a few launch records (kFeItems tensors each): the kernel walks
// the items and runs nk_pointwise_run on each, so an optimizer step costs a handful of launches per op
// instead of one per parameter.  Each item computes exactly what the single-tensor op computes on neuron
// (same nk op, same scalar dtype rules), so results match the per-tensor path bit for bit.  The fast
// path takes lists of plain contiguous floating tensors of one dtype on one neuron device; anything
// else (integers, mixed dtypes, strides, CPU tensors, partial overlap) goes to aten's per-tensor
// loop, which raises the same errors the single ops do.
#include "neuron.h"
#include "ops_util.h"
#include "nk_foreach.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_exp_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

namespace neuron {

// ---- launch record: nk_foreach_args_t (nk_foreach.h); records of one op are fused with the records
// queued behind it by the queue executor (nrt_fuse.h) when their lists line up

using FeLaunch = nk_foreach_args_t;
using FeItem = nk_foreach_item_t;
constexpr int kFeItems = NK_FOREACH_ITEMS;

static void fe_register_fusion()
{
	static const int rc = nrt_fuse_register(nk_foreach_run, &nk_foreach_fuse);
	(void)rc; // a full table only means these records run op by op
}

// ---- the driver -----------------------------------------------------------------------------------

enum class Sc { None, One, List, Tensor }; // the scalar operand after the tensor inputs

struct FeOp {
	const char *name;
	int op;
	std::vector<at::TensorList> in; // in[0] is self
	Sc sc = Sc::None;
	c10::Scalar s;                  // Sc::One
	at::ArrayRef<c10::Scalar> sl;   // Sc::List
	at::Tensor st;                  // Sc::Tensor: a 0-d neuron tensor of the list's dtype
	c10::Scalar a{0};               // parameter a/ia (alpha, value, weight), or per item:
	at::ArrayRef<c10::Scalar> al;   // per-item parameter (value lists)
	bool a_is_double = false;       // a from toDouble() (lerp weight) instead of the alpha rules
};



static uint64_t scalar_bits(at::ScalarType t, const c10::Scalar &s)
{
	uint64_t slot = 0;
	AT_DISPATCH_V2(t, "foreach_scalar", AT_WRAP([&] {
		scalar_t v = s.to<scalar_t>();
		std::memcpy(&slot, &v, sizeof v);
	}), AT_EXPAND(AT_FLOATING_TYPES), at::kHalf, at::kBFloat16);
	return slot;
}

static void param(const c10::Scalar &v, bool as_double, double &a, int64_t &ia)
{
	if (!as_double && v.isIntegral(true))
		ia = v.toLong(), a = (double)ia;
	else
		a = v.toDouble(), ia = (int64_t)a;
}

// Whether the fast path applies: every list as long as self, every tensor a plain contiguous floating
// tensor of self[0]'s dtype and device with its self's shape; inputs either are their self exactly or
// do not overlap it (in place); scalars real.
static bool fe_eligible(const FeOp &f, bool inplace)
{
	const auto &self = f.in[0];
	if (self.empty())
		return false;
	const at::Tensor &t0 = self[0];
	if (t0.device().type() != kDev || !at::isFloatingType(t0.scalar_type()))
		return false;
	at::ScalarType dt = t0.scalar_type();
	c10::Device dev = t0.device();
	for (const auto &l : f.in)
		if (l.size() != self.size())
			return false;
	if (f.sc == Sc::List && f.sl.size() != self.size())
		return false;
	if (!f.al.empty() && f.al.size() != self.size())
		return false;
	if (f.sc == Sc::One && f.s.isComplex())
		return false;
	if (f.sc == Sc::List)
		for (const auto &s : f.sl)
			if (s.isComplex())
				return false;
	if (f.sc == Sc::Tensor && (!f.st.defined() || f.st.dim() != 0 || f.st.device() != dev || f.st.scalar_type() != dt))
		return false;
	for (size_t i = 0; i < self.size(); i++) {
		const at::Tensor &s = self[i];
		if (!s.defined() || s.device() != dev || s.scalar_type() != dt || !plain_contiguous(s))
			return false;
		for (size_t k = 1; k < f.in.size(); k++) {
			const at::Tensor &x = f.in[k][i];
			if (!x.defined() || x.device() != dev || x.scalar_type() != dt || !plain_contiguous(x) ||
			    x.sizes() != s.sizes())
				return false;
			if (inplace && x.data_ptr() != s.data_ptr() && at::get_overlap_status(s, x) != at::MemOverlapStatus::No)
				return false;
		}
		if (inplace && f.sc == Sc::Tensor && at::get_overlap_status(s, f.st) != at::MemOverlapStatus::No)
			return false;
	}
	return true;
}

// Runs f over the lists: in place into self, or into fresh outputs (returned).  False: not eligible.
static bool fe_run(const FeOp &f, bool inplace, std::vector<at::Tensor> *outs)
{
	if (!fe_eligible(f, inplace))
		return false;
	const auto &self = f.in[0];
	at::ScalarType dt = self[0].scalar_type();
	c10::Device dev = self[0].device();
	DeviceScope g(dev.index());
	int nin = (int)f.in.size();
	FeLaunch L{};
	L.op = f.op;
	L.nops = 1 + nin + (f.sc == Sc::None ? 0 : 1);
	L.sk = f.sc == Sc::None || f.sc == Sc::Tensor ? -1 : 1 + nin;
	int8_t edt = (int8_t)nk_dtype(dt, f.name);
	for (int k = 0; k < L.nops; k++) {
		L.dtype[k] = edt;
		L.esize[k] = (int64_t)c10::elementSize(dt);
	}
	at::ScalarType sdt = dt;
	if (L.sk >= 0) {
		if (L.sk == 2 && at::isReducedFloatingType(dt) && opmath_scalar_op(f.op))
			sdt = at::kFloat; // as the single op: mul/div take a bf16/f16 tensor's scalar in f32
		L.dtype[L.sk] = (int8_t)nk_dtype(sdt, f.name);
		L.esize[L.sk] = 0;
	}
	if (f.sc == Sc::Tensor)
		L.esize[1 + nin] = 0;
	double a0 = 0;
	int64_t ia0 = 0;
	param(f.a, f.a_is_double, a0, ia0);
	uint64_t s0 = f.sc == Sc::One ? scalar_bits(sdt, f.s) : 0;
	nrt_queue_t *q = current_queue(dev.index());
	size_t cost = 0;
	if (outs)
		outs->reserve(self.size());
	fe_register_fusion();
	auto flush = [&] {
		if (L.count)
			launch_cost(q, nk_foreach_run, L, f.name, cost);
		L.count = 0;
		cost = 0;
	};
	for (size_t i = 0; i < self.size(); i++) {
		at::Tensor out = inplace ? self[i] : at::empty(self[i].sizes(), self[i].options());
		if (outs)
			outs->push_back(out);
		int64_t n = out.numel();
		if (n == 0)
			continue;
		FeItem &t = L.items[L.count];
		t = FeItem{};
		t.n = n;
		t.pos = (int64_t)i;
		t.data[0] = (char *)out.data_ptr();
		for (int k = 0; k < nin; k++)
			t.data[1 + k] = (char *)f.in[k][i].const_data_ptr();
		if (f.sc == Sc::Tensor)
			t.data[1 + nin] = (char *)f.st.const_data_ptr();
		t.scal = f.sc == Sc::List ? scalar_bits(sdt, f.sl[i]) : s0;
		t.a = a0, t.ia = ia0;
		if (!f.al.empty())
			param(f.al[i], f.a_is_double, t.a, t.ia);
		cost += (size_t)n * c10::elementSize(dt) * (size_t)(1 + nin);
		if (++L.count == kFeItems)
			flush();
	}
	flush();
	return true;
}

// ---- the ops --------------------------------------------------------------------------------------

#define FE_TRACK(n) NEURON_TRACK("aten::" n)

// binary: list op scalar / scalar list / list (alpha for add, sub) / 0-d tensor
#define FE_BINARY(X, NKOP, ALPHA)                                                                                    \
	static std::vector<at::Tensor> X##_scalar(at::TensorList self, const c10::Scalar &s)                          \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".Scalar");                                                                   \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X, NKOP, {self}, Sc::One, s};                                               \
		if (ALPHA) f.a = 1;                                                                                   \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_scalar_kernel_slow(self, s);                                  \
	}                                                                                                             \
	static void X##_scalar_(at::TensorList self, const c10::Scalar &s)                                            \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.Scalar");                                                                  \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self}, Sc::One, s};                                           \
		if (ALPHA) f.a = 1;                                                                                   \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_scalar_kernel_slow_(self, s);                                \
	}                                                                                                             \
	static std::vector<at::Tensor> X##_scalarlist(at::TensorList self, at::ArrayRef<c10::Scalar> sl)              \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".ScalarList");                                                               \
		at::native::check_foreach_api_restrictions(self, sl);                                                 \
		FeOp f{"aten::_foreach_" #X, NKOP, {self}, Sc::List};                                                 \
		f.sl = sl;                                                                                            \
		if (ALPHA) f.a = 1;                                                                                   \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_scalarlist_kernel_slow(self, sl);                            \
	}                                                                                                             \
	static void X##_scalarlist_(at::TensorList self, at::ArrayRef<c10::Scalar> sl)                                \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.ScalarList");                                                              \
		at::native::check_foreach_api_restrictions(self, sl);                                                 \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self}, Sc::List};                                             \
		f.sl = sl;                                                                                            \
		if (ALPHA) f.a = 1;                                                                                   \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_scalarlist_kernel_slow_(self, sl);                           \
	}

FE_BINARY(add, NK_OP_ADD, true)
FE_BINARY(sub, NK_OP_SUB, true)
FE_BINARY(mul, NK_OP_MUL, false)
FE_BINARY(div, NK_OP_DIV, false)

#define FE_LIST_ALPHA(X, NKOP)                                                                                       \
	static std::vector<at::Tensor> X##_list(at::TensorList self, at::TensorList o, const c10::Scalar &al)          \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".List");                                                                     \
		at::native::check_foreach_api_restrictions(self, o);                                                  \
		FeOp f{"aten::_foreach_" #X, NKOP, {self, o}};                                                        \
		f.a = al;                                                                                             \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_list_kernel_slow(self, o, al);                                \
	}                                                                                                             \
	static void X##_list_(at::TensorList self, at::TensorList o, const c10::Scalar &al)                           \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.List");                                                                    \
		at::native::check_foreach_api_restrictions(self, o);                                                  \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self, o}};                                                    \
		f.a = al;                                                                                             \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_list_kernel_slow_(self, o, al);                              \
	}
FE_LIST_ALPHA(add, NK_OP_ADD)
FE_LIST_ALPHA(sub, NK_OP_SUB)

#define FE_LIST(X, NKOP)                                                                                             \
	static std::vector<at::Tensor> X##_list(at::TensorList self, at::TensorList o)                                 \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".List");                                                                     \
		at::native::check_foreach_api_restrictions(self, o);                                                  \
		FeOp f{"aten::_foreach_" #X, NKOP, {self, o}};                                                        \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_list_kernel_slow(self, o);                                    \
	}                                                                                                             \
	static void X##_list_(at::TensorList self, at::TensorList o)                                                  \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.List");                                                                    \
		at::native::check_foreach_api_restrictions(self, o);                                                  \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self, o}};                                                    \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_list_kernel_slow_(self, o);                                  \
	}                                                                                                             \
	static std::vector<at::Tensor> X##_tensor(at::TensorList self, const at::Tensor &o)                            \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".Tensor");                                                                   \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X, NKOP, {self}, Sc::Tensor};                                               \
		f.st = o;                                                                                             \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_tensor_kernel_slow(self, o);                                  \
	}                                                                                                             \
	static void X##_tensor_(at::TensorList self, const at::Tensor &o)                                             \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.Tensor");                                                                  \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self}, Sc::Tensor};                                           \
		f.st = o;                                                                                             \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_tensor_kernel_slow_(self, o);                                \
	}
FE_LIST(mul, NK_OP_MUL)
FE_LIST(div, NK_OP_DIV)

#define FE_UNARY(X, NKOP)                                                                                            \
	static std::vector<at::Tensor> X##_u(at::TensorList self)                                                      \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X);                                                                             \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X, NKOP, {self}};                                                           \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_slow(self);                                                   \
	}                                                                                                             \
	static void X##_u_(at::TensorList self)                                                                       \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_");                                                                         \
		at::native::check_foreach_api_restrictions(self);                                                     \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self}};                                                       \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_slow_(self);                                                 \
	}
FE_UNARY(sqrt, NK_OP_SQRT)
FE_UNARY(neg, NK_OP_NEG)
FE_UNARY(abs, NK_OP_ABS)
FE_UNARY(exp, NK_OP_EXP)
FE_UNARY(reciprocal, NK_OP_RECIPROCAL)

// addcmul / addcdiv: self + value * t1 (* or /) t2, value one scalar or one per tensor
#define FE_ADDC(X, NKOP)                                                                                             \
	static std::vector<at::Tensor> X##_s(at::TensorList self, at::TensorList t1, at::TensorList t2, const c10::Scalar &v) \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".Scalar");                                                                   \
		at::native::check_foreach_api_restrictions(self, t1, t2);                                             \
		FeOp f{"aten::_foreach_" #X, NKOP, {self, t1, t2}};                                                   \
		f.a = v;                                                                                              \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_scalar_slow(self, t1, t2, v);                                 \
	}                                                                                                             \
	static void X##_s_(at::TensorList self, at::TensorList t1, at::TensorList t2, const c10::Scalar &v)           \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.Scalar");                                                                  \
		at::native::check_foreach_api_restrictions(self, t1, t2);                                             \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self, t1, t2}};                                               \
		f.a = v;                                                                                              \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_scalar_slow_(self, t1, t2, v);                               \
	}                                                                                                             \
	static std::vector<at::Tensor> X##_sl(at::TensorList self, at::TensorList t1, at::TensorList t2, at::ArrayRef<c10::Scalar> v) \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X ".ScalarList");                                                               \
		at::native::check_foreach_api_restrictions(self, t1, t2, v);                                          \
		FeOp f{"aten::_foreach_" #X, NKOP, {self, t1, t2}};                                                   \
		f.al = v;                                                                                             \
		std::vector<at::Tensor> r;                                                                            \
		if (fe_run(f, false, &r))                                                                             \
			return r;                                                                                     \
		return at::native::foreach_tensor_##X##_scalarlist_slow(self, t1, t2, v);                             \
	}                                                                                                             \
	static void X##_sl_(at::TensorList self, at::TensorList t1, at::TensorList t2, at::ArrayRef<c10::Scalar> v)   \
	{                                                                                                             \
		FE_TRACK("_foreach_" #X "_.ScalarList");                                                              \
		at::native::check_foreach_api_restrictions(self, t1, t2, v);                                          \
		FeOp f{"aten::_foreach_" #X "_", NKOP, {self, t1, t2}};                                               \
		f.al = v;                                                                                             \
		if (!fe_run(f, true, nullptr))                                                                        \
			at::native::foreach_tensor_##X##_scalarlist_slow_(self, t1, t2, v);                           \
	}
FE_ADDC(addcmul, NK_OP_ADDCMUL)
FE_ADDC(addcdiv, NK_OP_ADDCDIV)

static std::vector<at::Tensor> lerp_s(at::TensorList self, at::TensorList e, const c10::Scalar &w)
{
	FE_TRACK("_foreach_lerp.Scalar");
	at::native::check_foreach_api_restrictions(self, e);
	FeOp f{"aten::_foreach_lerp", NK_OP_LERP_SCALAR, {self, e}};
	f.a = w;
	f.a_is_double = true;
	std::vector<at::Tensor> r;
	if (fe_run(f, false, &r))
		return r;
	return at::native::foreach_tensor_lerp_list_kernel_slow(self, e, w);
}
static void lerp_s_(at::TensorList self, at::TensorList e, const c10::Scalar &w)
{
	FE_TRACK("_foreach_lerp_.Scalar");
	at::native::check_foreach_api_restrictions(self, e);
	FeOp f{"aten::_foreach_lerp_", NK_OP_LERP_SCALAR, {self, e}};
	f.a = w;
	f.a_is_double = true;
	if (!fe_run(f, true, nullptr))
		at::native::foreach_tensor_lerp_list_kernel_slow_(self, e, w);
}

// ---- norm: one launch per chunk of tensors, a reduction per tensor --------------------------------

struct FnItem {
	const void *in;
	void *out;
	int64_t n;
};
constexpr int kFnItems = (NRT_MAX_ARGS - 32) / (int)sizeof(FnItem);
struct FnLaunch {
	int32_t dtype_in, dtype_out, count, pad;
	double p;
	FnItem items[kFnItems];
};
static_assert(sizeof(FnLaunch) <= NRT_MAX_ARGS, "foreach norm launch record too large");

static int fn_kernel(void *p)
{
	auto *L = (FnLaunch *)p;
	for (int i = 0; i < L->count; i++) {
		nk_reduce_args_t r{};
		r.in = L->items[i].in;
		r.out = L->items[i].out;
		r.dtype_in = L->dtype_in;
		r.dtype_out = L->dtype_out;
		r.O = 1, r.R = L->items[i].n, r.I = 1;
		r.op = NK_RED_NORM;
		r.a = L->p;
		int rc = nk_reduce_run(&r);
		if (rc)
			return rc;
	}
	return 0;
}

static std::vector<at::Tensor> norm_f(at::TensorList self, const c10::Scalar &ord, std::optional<at::ScalarType> dtype)
{
	FE_TRACK("_foreach_norm.Scalar");
	at::native::check_foreach_api_restrictions(self);
	FeOp f{"aten::_foreach_norm", 0, {self}};
	double p = ord.isComplex() ? -1 : ord.toDouble();
	// the plain p-norms whose single-tensor path is the same NK_RED_NORM reduction, same dtype out
	bool simple = (p == 1 || p == 2 || std::isinf(p)) && (!dtype.has_value() || *dtype == self[0].scalar_type());
	if (!simple || !fe_eligible(f, false))
		return at::native::foreach_tensor_norm_slow(self, ord, dtype);
	for (const auto &t : self)
		if (t.numel() == 0 && std::isinf(p))
			return at::native::foreach_tensor_norm_slow(self, ord, dtype); // raises as linalg.vector_norm does
	c10::Device dev = self[0].device();
	DeviceScope g(dev.index());
	at::ScalarType dt = self[0].scalar_type();
	nrt_queue_t *q = current_queue(dev.index());
	std::vector<at::Tensor> outs;
	outs.reserve(self.size());
	FnLaunch L{};
	L.dtype_in = L.dtype_out = nk_dtype(dt, "aten::_foreach_norm");
	L.p = p;
	size_t cost = 0;
	for (const auto &t : self) {
		at::Tensor o = at::empty({}, t.options());
		outs.push_back(o);
		L.items[L.count] = FnItem{t.const_data_ptr(), o.data_ptr(), t.numel()};
		cost += (size_t)t.numel() * c10::elementSize(dt);
		if (++L.count == kFnItems) {
			launch_cost(q, fn_kernel, L, "aten::_foreach_norm", cost);
			L.count = 0;
			cost = 0;
		}
	}
	if (L.count)
		launch_cost(q, fn_kernel, L, "aten::_foreach_norm", cost);
	return outs;
}

} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
#define REG_FE_BINARY(X)                                   \
	m.impl("_foreach_" #X ".Scalar", X##_scalar);      \
	m.impl("_foreach_" #X "_.Scalar", X##_scalar_);    \
	m.impl("_foreach_" #X ".ScalarList", X##_scalarlist); \
	m.impl("_foreach_" #X "_.ScalarList", X##_scalarlist_); \
	m.impl("_foreach_" #X ".List", X##_list);          \
	m.impl("_foreach_" #X "_.List", X##_list_);
	REG_FE_BINARY(add)
	REG_FE_BINARY(sub)
	REG_FE_BINARY(mul)
	REG_FE_BINARY(div)
	m.impl("_foreach_mul.Tensor", mul_tensor);
	m.impl("_foreach_mul_.Tensor", mul_tensor_);
	m.impl("_foreach_div.Tensor", div_tensor);
	m.impl("_foreach_div_.Tensor", div_tensor_);
#define REG_FE_UNARY(X)                          \
	m.impl("_foreach_" #X, X##_u);           \
	m.impl("_foreach_" #X "_", X##_u_);
	REG_FE_UNARY(sqrt)
	REG_FE_UNARY(neg)
	REG_FE_UNARY(abs)
	REG_FE_UNARY(exp)
	REG_FE_UNARY(reciprocal)
#define REG_FE_ADDC(X)                                      \
	m.impl("_foreach_" #X ".Scalar", X##_s);            \
	m.impl("_foreach_" #X "_.Scalar", X##_s_);          \
	m.impl("_foreach_" #X ".ScalarList", X##_sl);       \
	m.impl("_foreach_" #X "_.ScalarList", X##_sl_);
	REG_FE_ADDC(addcmul)
	REG_FE_ADDC(addcdiv)
	m.impl("_foreach_lerp.Scalar", lerp_s);
	m.impl("_foreach_lerp_.Scalar", lerp_s_);
	m.impl("_foreach_norm.Scalar", norm_f);
}
