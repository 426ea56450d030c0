/* nk_complex.h - kernel family: complex numbers (complex.c).  Same conventions as nk.h (argument struct,
 * int nk_<family>_run(void *args)); the glue includes this header directly.
 *
 * Complex dtypes are interleaved (re, im) pairs: NK_C64 two floats, NK_C128 two doubles.  Their codes lie
 * past NK_NDTYPES so that no real kernel's dtype table sees them; only these kernels accept them.
 *
 * nk_complex_pointwise_run: out (operand 0) = f(operands 1..), the strided iterator of nk.h (byte strides,
 * broadcasting by 0 strides, NK_MAX_OPS operands).  Any operand may be complex or real (a real operand
 * reads as x + 0i; a real output gets the real part, a bool output != 0).  Everything is computed in
 * double complex and rounded once into the output dtype.  The op codes are nk_op_t's (their complex
 * meaning, as PyTorch's CPU kernels define it) plus the NK_CX_* codes below; nk_complex_op_arity
 * says which.  Scalars: a + i*b is the complex parameter (add/sub alpha, addcmul/addcdiv value, fill
 * value, POW_SCALAR's exponent); ia: NK_CX_COPY's flags; NK_OP_POW bit0: the exponent is a scalar (aten's
 * pow.Tensor_Scalar special cases 0, 1, 0.5, -0.5, -1).
 *
 * nk_complex_prod_run: product over R of a contiguous [O, R, I] complex tensor into [O, I], or with
 * scan set the running products into a contiguous [O, R, I] (cumprod).
 */
#ifndef NK_COMPLEX_H
#define NK_COMPLEX_H

#include <stdbool.h>
#include <stdint.h>

#include "nk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NK_C64 32
#define NK_C128 33

static inline bool nk_is_complex(int dt)
{
	return dt == NK_C64 || dt == NK_C128;
}

typedef enum {
	NK_CX_COPY = 1000, /* out = in (any dtype pair); ia bit0: conjugate, bit1: negate */
	NK_CX_CONJ,        /* out = conj(in) */
	NK_CX_ANGLE,       /* out (real) = arg(in); a real input gives 0, pi (x < 0) or NaN */
	NK_CX_COMPLEX,     /* out = x + i*y (x, y real) */
	NK_CX_POLAR,       /* out = r*cos(t) + i*r*sin(t) (r, t real) */
	NK_CX_OP_END
} nk_cx_op_t;

int nk_complex_pointwise_run(void *args); /* args: nk_pointwise_args_t (ib unused) */
/* nops the op takes (outputs included), or 0 if the complex kernels do not implement it. */
int nk_complex_op_arity(int op);

typedef struct {
	const void *in;
	void *out;
	int dtype; /* NK_C64 or NK_C128, in and out */
	int64_t O, R, I;
	bool scan; /* out is [O, R, I]: out[o, r, i] = prod of in[o, 0..r, i] */
} nk_complex_prod_args_t;
int nk_complex_prod_run(void *args);

#ifdef __cplusplus
}
#endif

#endif
