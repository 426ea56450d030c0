// pointwise.h - the elementwise engine of ops_pointwise.cpp, for the other glue files: TensorIterator
// computes broadcasting, promotion and the output, nk_pointwise_run does the work on the current
// queue.  out = op(inputs...) (nk_op_t), `out` may be undefined (allocated).  Inputs whose bit is set
// in `nocast` keep their dtype (where's condition).  kind: Same = the promoted dtype, Bool = bool
// (predicates), Float = the promoted dtype, integral promoted to the default float dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include "nk.h"

#include <initializer_list>

namespace at { struct TensorIteratorBase; }

namespace neuron {

enum class PwKind { Same, Bool, Float };

at::Tensor pointwise_op(const char *name, int op, std::initializer_list<at::Tensor> inputs, at::Tensor out, PwKind kind,
			double a = 0, double b = 0, int64_t ia = 0, int64_t ib = 0, unsigned nocast = 0);

// The iterator's shape, strides, data pointers and dtypes as an nk_iter_t (every operand a tensor);
// errors name `name` (too many dimensions, a dtype the kernels lack).
void iter_to_nk(const at::TensorIteratorBase &iter, nk_iter_t &it, const char *name);

} // namespace neuron
