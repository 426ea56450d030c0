// ops_complex.cpp - complex numbers (complex64, complex128) on neuron: the complex kernels' dtype codes,
// the complex branch of the pointwise engine, copies and casts with the conj/neg bits, fill, the native
// views view_as_real/view_as_complex, complex/polar/conj_physical, and complex matrix products through
// real GEMMs.  Elementwise arithmetic reaches here through the pointwise engine (ops_pointwise.cpp), the
// reductions through ops_reduce.cpp; the kernels are csrc/kernels/complex.c.
//
// The conj bit is PyTorch's: conj() only sets it, the Conjugate fallback resolves it for the ops that
// cannot take it, and the ops it falls through to (copy_, the matrix products) read it here.
#include "neuron.h"
#include "complex.h"
#include "out.h"
#include "ops_util.h"
#include "pointwise.h"

extern "C" {
#include "nk_fft.h"
}

#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/complex.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/real.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>

namespace neuron {

int nk_dtype_cx(c10::ScalarType t, const char *op)
{
	if (t == c10::kComplexFloat)
		return NK_C64;
	if (t == c10::kComplexDouble)
		return NK_C128;
	return nk_dtype(t, op);
}

// ---- the pointwise engine's complex branch ----------------------------------------------------

void complex_op_params(const char *name, int op, c10::ArrayRef<at::Tensor> in, at::ScalarType &odt, int64_t &ia)
{
	at::ScalarType ct = at::kComplexFloat;
	for (const auto &x : in)
		if (at::isComplexType(x.scalar_type()))
			ct = x.scalar_type();
	if (at::isComplexType(odt))
		ct = odt;
	TORCH_CHECK(ct != at::kComplexHalf, name, ": dtype ComplexHalf is not supported on neuron");
	// the CPU's own refusals of complex operands
	TORCH_CHECK(!(op == NK_OP_SIGN && std::strncmp(name, "aten::sign", 10) == 0),
		    "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.");
	TORCH_CHECK(nk_complex_op_arity(op) == (int)in.size() + 1, name, ": dtype ", ct, " is not supported on neuron");
	if (op == NK_OP_ABS && at::isComplexType(odt))
		odt = c10::toRealValueType(odt);
	if (op == NK_OP_POW && std::strncmp(name, "aten::pow.Tensor_Scalar", 23) == 0)
		ia = 1;
}

// ---- copies and fill ------------------------------------------------------------------------------

bool copy_needs_complex(const at::Tensor &src, const at::Tensor &dst)
{
	return src.is_complex() || dst.is_complex() || src.is_neg() != dst.is_neg() || src.is_conj() != dst.is_conj();
}

void copy_complex(const at::TensorIteratorBase &iter, const at::Tensor &src, const at::Tensor &dst, nrt_queue_t *q, size_t cost)
{
	TORCH_CHECK(src.scalar_type() != at::kComplexHalf && dst.scalar_type() != at::kComplexHalf,
		    "aten::_copy_from: dtype ComplexHalf is not supported on neuron");
	if (src.is_complex() && !dst.is_complex() && dst.scalar_type() != at::kBool)
		TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
	nk_pointwise_args_t a{};
	iter_to_nk_cx(iter, a.it, "aten::_copy_from");
	a.op = NK_CX_COPY;
	a.ia = (src.is_conj() != dst.is_conj() ? 1 : 0) | (src.is_neg() != dst.is_neg() ? 2 : 0);
	launch_cost(q, nk_complex_pointwise_run, a, "aten::_copy_from", cost);
}

void fill_complex(at::Tensor &self, const c10::Scalar &v)
{
	TORCH_CHECK(self.scalar_type() != at::kComplexHalf, "aten::fill_: dtype ComplexHalf is not supported on neuron");
	auto iter = at::TensorIteratorConfig().add_output(self).resize_outputs(false).check_all_same_dtype(false).build();
	nk_pointwise_args_t a{};
	iter_to_nk_cx(iter, a.it, "aten::fill_");
	a.op = NK_OP_FILL;
	c10::complex<double> z = v.toComplexDouble();
	// a conjugated view stores the conjugate of what it shows
	a.a = z.real(), a.b = self.is_conj() ? -z.imag() : z.imag();
	launch_cost(current_queue(self.device().index()), nk_complex_pointwise_run, a, "aten::fill_",
		    (size_t)self.numel() * self.element_size());
}

at::Tensor real_view_raw(const at::Tensor &t)
{
	return at::view_as_real(t.is_conj() ? at::_conj(t) : t);
}

at::Tensor complex_from_real(const at::Tensor &r)
{
	return at::view_as_complex(r.stride(-1) == 1 ? r : r.contiguous());
}

// ---- complex(), polar(), conj_physical ------------------------------------------------------------

// out = f(x, y) for two real inputs of one floating dtype (complex, polar): aten's checks and messages
// (complex_check_dtype), a TensorIterator for broadcasting and the out's resize.
static at::Tensor &real_pair_to_complex(const char *name, int op, const at::Tensor &x, const at::Tensor &y, at::Tensor &out)
{
	auto xt = x.scalar_type(), yt = y.scalar_type();
	TORCH_CHECK((xt == at::kFloat || xt == at::kDouble || xt == at::kHalf) && (yt == at::kFloat || yt == at::kDouble || yt == at::kHalf),
		    "Expected both inputs to be Half, Float or Double tensors but got ", xt, " and ", yt);
	TORCH_CHECK(xt == yt, "Expected object of scalar type ", xt, " but got scalar type ", yt, " for second argument");
	TORCH_CHECK(out.scalar_type() == c10::toComplexType(xt), "Expected object of scalar type ", c10::toComplexType(xt),
		    " but got scalar type ", out.scalar_type(), " for argument 'out'");
	TORCH_CHECK(xt != at::kHalf, name, ": dtype ComplexHalf is not supported on neuron");
	check_same_device(name, {&x, &y, &out});
	DeviceScope g(out.device().index());
	auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(x).add_const_input(y).check_all_same_dtype(false).build();
	if (iter.numel() == 0)
		return out;
	nk_pointwise_args_t a{};
	iter_to_nk_cx(iter, a.it, name);
	a.op = op;
	launch_cost(current_queue(out.device().index()), nk_complex_pointwise_run, a, name, (size_t)iter.numel() * 16);
	return out;
}

static at::Tensor &complex_o(const at::Tensor &re, const at::Tensor &im, at::Tensor &out)
{
	NEURON_TRACK("aten::complex.out");
	return real_pair_to_complex("aten::complex.out", NK_CX_COMPLEX, re, im, out);
}

static at::Tensor &polar_o(const at::Tensor &abs, const at::Tensor &angle, at::Tensor &out)
{
	NEURON_TRACK("aten::polar.out");
	return real_pair_to_complex("aten::polar.out", NK_CX_POLAR, abs, angle, out);
}

// conj_physical(x) for a complex x: the conjugate values in memory, no conj bit (a real x is copied,
// as aten's conj_physical kernel does for every non-complex dtype).
static at::Tensor &conj_physical_o(const at::Tensor &self, at::Tensor &out)
{
	NEURON_TRACK("aten::conj_physical.out");
	check_same_device("aten::conj_physical.out", {&self, &out});
	DeviceScope g(self.device().index());
	auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).build(); // same dtype, as aten
	if (iter.numel() == 0)
		return out;
	nk_pointwise_args_t a{};
	iter_to_nk_cx(iter, a.it, "aten::conj_physical.out");
	// NK_CX_COPY with the conj flag also moves real dtypes exactly (conj is the identity on them)
	a.op = NK_CX_COPY;
	a.ia = self.is_complex() ? 1 : 0;
	if (!self.is_complex() && !at::isFloatingType(self.scalar_type())) {
		out.copy_(self); // integers: the exact cast kernel, not the double round trip
		return out;
	}
	launch_cost(current_queue(self.device().index()), nk_complex_pointwise_run, a, "aten::conj_physical.out",
		    (size_t)iter.numel() * 2 * self.element_size());
	return out;
}

static at::Tensor &conj_physical_i(at::Tensor &self)
{
	NEURON_TRACK("aten::conj_physical_");
	if (!self.is_complex())
		return self;
	return conj_physical_o(self, self);
}

at::Tensor &complex_angle(const char *name, at::Tensor &out, const at::Tensor &self)
{
	TORCH_CHECK(self.scalar_type() != at::kComplexHalf, name, ": dtype ComplexHalf is not supported on neuron");
	DeviceScope g(self.device().index());
	at::Tensor res = at::empty(self.sizes(), self.options().dtype(c10::toRealValueType(self.scalar_type())));
	auto iter = at::TensorIteratorConfig().add_output(res).add_const_input(self).resize_outputs(false).check_all_same_dtype(false).build();
	if (iter.numel() > 0) {
		nk_pointwise_args_t a{};
		iter_to_nk_cx(iter, a.it, name);
		a.op = NK_CX_ANGLE;
		launch_cost(current_queue(self.device().index()), nk_complex_pointwise_run, a, name, (size_t)iter.numel() * 24);
	}
	if (out.defined())
		return into(out, res, OutRule::Cast);
	return out = res;
}

static at::Tensor view_as_real_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::view_as_real");
	return at::native::view_as_real(self);
}

static at::Tensor view_as_complex_f(const at::Tensor &self)
{
	NEURON_TRACK("aten::view_as_complex");
	return at::native::view_as_complex(self);
}

// ---- matrix products ------------------------------------------------------------------------------

// out = beta*out + alpha*(A @ B): four real GEMMs on the real and imaginary planes (strided views of
// the storage, the conj bits folded into the signs), then one complex combine.
void complex_matmul(const char *name, const at::Tensor &A, const at::Tensor &B, at::Tensor &out, const c10::Scalar &beta,
		    const c10::Scalar &alpha, bool use_beta)
{
	TORCH_CHECK(A.scalar_type() == B.scalar_type() && A.scalar_type() == out.scalar_type(), name,
		    ": expected A, B and out of one dtype, got ", A.scalar_type(), ", ", B.scalar_type(), " and ", out.scalar_type());
	TORCH_CHECK(A.scalar_type() != at::kComplexHalf, name, ": dtype ComplexHalf is not supported on neuron");
	TORCH_CHECK(!out.is_conj(), name, ": a conjugated out= tensor is not supported on neuron");
	at::Tensor Ar = real_view_raw(A), Br = real_view_raw(B);
	at::Tensor ar = Ar.select(-1, 0), ai = Ar.select(-1, 1), br = Br.select(-1, 0), bi = Br.select(-1, 1);
	double sa = A.is_conj() ? -1.0 : 1.0, sb = B.is_conj() ? -1.0 : 1.0;
	auto mm = [&](const at::Tensor &x, const at::Tensor &y) { return A.dim() == 3 ? at::bmm(x, y) : at::mm(x, y); };
	at::Tensor rr = mm(ar, br), ii = mm(ai, bi), ri = mm(ar, bi), ir = mm(ai, br);
	at::Tensor re = sa * sb == 1.0 ? rr.sub_(ii) : rr.add_(ii);
	at::Tensor im = sb < 0 ? ri.neg_() : ri;
	im = sa < 0 ? im.sub_(ir) : im.add_(ir);
	at::Tensor r = at::empty(re.sizes(), re.options().dtype(A.scalar_type()));
	real_pair_to_complex(name, NK_CX_COMPLEX, re, im, r);
	c10::complex<double> al = alpha.toComplexDouble(), be = beta.toComplexDouble();
	if (al != c10::complex<double>(1.0, 0.0))
		r.mul_(wrap(alpha));
	if (use_beta && be != c10::complex<double>(0.0, 0.0))
		r.add_(out, beta);
	out.copy_(r);
}


// ---- FFT: aten's _fft_c2c / _fft_r2c / _fft_c2r on the DFT kernel (fft.c) ----------------------------
// torch.fft's functions (fft, ifft, rfft, irfft, hfft, fft2, fftn, ...) and stft/istft reduce to these
// three.  A multi-dim transform is 1-D transforms dim after dim; the normalization (0 none, 1 by
// 1/sqrt(n), 2 by 1/n, n the product of the transformed sizes) is applied by the last one.

static double fft_scale(int64_t norm, int64_t n)
{
	return norm == 0 ? 1.0 : norm == 1 ? 1.0 / std::sqrt((double)n) : 1.0 / (double)n;
}

// the 1-D DFT of complex x along dim d, into a new tensor of x's shape
static at::Tensor fft_dim(const char *name, const at::Tensor &x, int64_t d, bool forward, double scale)
{
	at::Tensor xm = x.movedim(d, -1);
	int64_t n = xm.size(-1);
	at::Tensor out = at::empty(xm.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
	if (out.numel() == 0)
		return out.movedim(-1, d);
	at::Tensor x2 = xm.reshape({-1, n});
	nk_fft_args_t a{};
	a.dtype = nk_dtype_cx(x.scalar_type(), name);
	a.n = n, a.batch = x2.size(0);
	a.in = x2.const_data_ptr(), a.is_n = x2.stride(1), a.is_b = x2.stride(0);
	a.out = out.data_ptr(), a.os_n = 1, a.os_b = n;
	a.forward = forward, a.scale = scale;
	launch_cost(current_queue(x.device().index()), nk_fft_run, a, name, (size_t)out.numel() * out.element_size() * 8);
	return out.movedim(-1, d);
}

static at::Tensor fft_c2c_dims(const char *name, const at::Tensor &x, at::IntArrayRef dims, int64_t norm, bool forward)
{
	TORCH_CHECK(x.is_complex() && x.scalar_type() != at::kComplexHalf, name, ": dtype ", x.scalar_type(), " is not supported on neuron");
	DeviceScope g(x.device().index());
	if (dims.empty())
		return x.clone();
	int64_t n = 1;
	for (int64_t d : dims)
		n *= x.size(at::maybe_wrap_dim(d, x.dim()));
	at::Tensor r = x;
	for (size_t i = 0; i < dims.size(); i++)
		r = fft_dim(name, r, at::maybe_wrap_dim(dims[i], x.dim()), forward, i + 1 == dims.size() ? fft_scale(norm, n) : 1.0);
	return r;
}

static at::Tensor fft_c2c(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, bool forward)
{
	NEURON_TRACK("aten::_fft_c2c");
	return fft_c2c_dims("aten::_fft_c2c", self, dim, norm, forward);
}
static at::Tensor &fft_c2c_out(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, bool forward, at::Tensor &out)
{
	NEURON_TRACK("aten::_fft_c2c.out");
	return into(out, fft_c2c_dims("aten::_fft_c2c.out", self, dim, norm, forward));
}

static at::Tensor fft_r2c_f(const char *name, const at::Tensor &self, at::IntArrayRef dim, int64_t norm, bool onesided)
{
	auto t = self.scalar_type();
	TORCH_CHECK(t == at::kFloat || t == at::kDouble, name, ": dtype ", t, " is not supported on neuron (float32 and float64 are)");
	TORCH_CHECK(!dim.empty(), name, ": expected at least one dim");
	at::Tensor r = fft_c2c_dims(name, self.to(c10::toComplexType(t)), dim, norm, true);
	if (!onesided)
		return r;
	int64_t last = at::maybe_wrap_dim(dim.back(), self.dim());
	return r.narrow(last, 0, self.size(last) / 2 + 1).contiguous();
}
static at::Tensor fft_r2c(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, bool onesided)
{
	NEURON_TRACK("aten::_fft_r2c");
	return fft_r2c_f("aten::_fft_r2c", self, dim, norm, onesided);
}
static at::Tensor &fft_r2c_out(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, bool onesided, at::Tensor &out)
{
	NEURON_TRACK("aten::_fft_r2c.out");
	return into(out, fft_r2c_f("aten::_fft_r2c.out", self, dim, norm, onesided));
}

// c2r: the other dims complex-to-complex, then the last one's Hermitian half completed
// (X[n-k] = conj X[k]) and transformed; the real part is the result (the imaginary parts of X[0] and,
// for even n, X[n/2] are ignored, as a c2r transform ignores them).
static at::Tensor fft_c2r_f(const char *name, const at::Tensor &self, at::IntArrayRef dim, int64_t norm, int64_t n)
{
	TORCH_CHECK(self.is_complex() && self.scalar_type() != at::kComplexHalf, name, ": dtype ", self.scalar_type(), " is not supported on neuron");
	TORCH_CHECK(!dim.empty(), name, ": expected at least one dim");
	TORCH_CHECK(n >= 1, name, ": Invalid number of data points (", n, ") specified");
	DeviceScope g(self.device().index());
	int64_t last = at::maybe_wrap_dim(dim.back(), self.dim());
	int64_t total = n;
	for (size_t i = 0; i + 1 < dim.size(); i++)
		total *= self.size(at::maybe_wrap_dim(dim[i], self.dim()));
	at::Tensor x = fft_c2c_dims(name, self, dim.slice(0, dim.size() - 1), 0, false);
	int64_t h = n / 2 + 1;
	TORCH_CHECK(x.size(last) >= h, name, ": expected the last dim to have at least ", h, " entries, got ", x.size(last));
	at::Tensor y = x.narrow(last, 0, h);
	at::Tensor full = n - h > 0 ? at::cat({y, y.narrow(last, 1, n - h).flip(last).conj()}, last) : y;
	at::Tensor r = fft_dim(name, full, last, false, fft_scale(norm, total));
	return at::real(r).contiguous();
}
static at::Tensor fft_c2r(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, int64_t n)
{
	NEURON_TRACK("aten::_fft_c2r");
	return fft_c2r_f("aten::_fft_c2r", self, dim, norm, n);
}
static at::Tensor &fft_c2r_out(const at::Tensor &self, at::IntArrayRef dim, int64_t norm, int64_t n, at::Tensor &out)
{
	NEURON_TRACK("aten::_fft_c2r.out");
	return into(out, fft_c2r_f("aten::_fft_c2r.out", self, dim, norm, n));
}
} // namespace neuron

using namespace neuron;

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m)
{
	NEURON_IMPL(m, "view_as_real", view_as_real_f);
	NEURON_IMPL(m, "view_as_complex", view_as_complex_f);
	NEURON_IMPL(m, "complex.out", complex_o);
	NEURON_IMPL(m, "polar.out", polar_o);
	NEURON_IMPL(m, "conj_physical.out", conj_physical_o);
	NEURON_IMPL(m, "conj_physical_", conj_physical_i);
	NEURON_IMPL(m, "_fft_c2c", fft_c2c);
	NEURON_IMPL(m, "_fft_c2c.out", fft_c2c_out);
	NEURON_IMPL(m, "_fft_r2c", fft_r2c);
	NEURON_IMPL(m, "_fft_r2c.out", fft_r2c_out);
	NEURON_IMPL(m, "_fft_c2r", fft_c2r);
	NEURON_IMPL(m, "_fft_c2r.out", fft_c2r_out);
}

// aten's copy_ hands neuron copies to _copy_from, which the Conjugate and Negative fallbacks would
// resolve first by cloning the source, a clone being a copy_ again: unbounded recursion.  _copy_from
// reads the conj and neg bits itself (copy_complex), so those keys fall through to it, as they do
// for copy_.  Only copies involving a device other than the CPU and CUDA reach _copy_from.
TORCH_LIBRARY_IMPL(aten, Conjugate, m)
{
	m.impl("_copy_from", torch::CppFunction::makeFallthrough());
	m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m)
{
	m.impl("_copy_from", torch::CppFunction::makeFallthrough());
	m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
