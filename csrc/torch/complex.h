// complex.h - the complex-number pieces that other glue files call (ops_complex.cpp): the dtype codes
// of the complex kernels (nk_complex.h), copies and fills of complex tensors, and the complex branches of
// the reductions and matrix products.  Included only by the files that have such a branch.
#pragma once

#include <ATen/core/Tensor.h>

extern "C" {
#include "nk_complex.h"
}

namespace at { struct TensorIteratorBase; }

namespace neuron {

// nk_dtype with the complex codes (NK_C64, NK_C128); for the complex kernels only.
int nk_dtype_cx(c10::ScalarType t, const char *op);
// iter_to_nk (pointwise.h) with the complex codes.
void iter_to_nk_cx(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name);

// The imaginary part of a scalar parameter (alpha, value): the complex kernel takes a + i*b.
inline double complex_imag(const c10::Scalar &s)
{
	return s.isComplex() ? s.toComplexDouble().imag() : 0.0;
}
// The pointwise engine's complex branch (an operand or the common dtype is complex): refuses ops the
// complex kernel lacks (RuntimeError naming the op and dtype, or the CPU's message), sets the output
// dtype of ops whose complex result is real (abs) and flags pow.Tensor_Scalar's special exponents (ia).
void complex_op_params(const char *name, int op, c10::ArrayRef<at::Tensor> in, at::ScalarType &odt, int64_t &ia);

// _copy_from when an operand is complex or the conj/neg bits differ: the cast kernel of complex.c
// (conjugating or negating as the bits say) on queue q.  Warns as the CPU does on complex -> real.
bool copy_needs_complex(const at::Tensor &src, const at::Tensor &dst);
void copy_complex(const at::TensorIteratorBase &iter, const at::Tensor &src, const at::Tensor &dst, nrt_queue_t *q,
		  size_t cost);
// fill_ of a complex tensor with a (possibly complex) value.
void fill_complex(at::Tensor &self, const c10::Scalar &v);

// angle of a complex tensor (a real result), the complex branch of ops_special's angle; out may be undefined.
at::Tensor &complex_angle(const char *name, at::Tensor &out, const at::Tensor &self);

// The real view [..., 2] of a complex tensor's storage, ignoring its conj bit, and back (view_as_complex).
at::Tensor real_view_raw(const at::Tensor &t);
at::Tensor complex_from_real(const at::Tensor &r);

// C = beta*C + alpha*A@B for complex operands through real GEMMs (mm when A is 2-d, bmm when 3-d); A and
// B may carry the conj bit.  out is defined and has the result's shape.
void complex_matmul(const char *name, const at::Tensor &A, const at::Tensor &B, at::Tensor &out, const c10::Scalar &beta,
		    const c10::Scalar &alpha, bool use_beta);

} // namespace neuron
