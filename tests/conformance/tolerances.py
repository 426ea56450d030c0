"""Per-dtype tolerances of the conformance sweep, written down once.

Forward results and gradients are compared with torch.testing.assert_close(actual, expected,
rtol, atol, equal_nan=True).  Integer and bool results must match exactly.  The float tolerances
allow for a different summation order and a different (correctly rounded to ~1 ulp) libm than
PyTorch's CPU kernels; bf16/f16 are computed in f32 and rounded once, like the CPU.  Gradients
get the GRAD_FACTOR times looser tolerance: they chain several kernels.
"""
import torch

#            dtype            rtol     atol
TOLERANCES = {
    torch.float64:  (1e-7,   1e-7),
    torch.float32:  (1e-4,   1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16:  (2e-3,   1e-3),
    torch.int64:    (0, 0),
    torch.int32:    (0, 0),
    torch.int16:    (0, 0),
    torch.int8:     (0, 0),
    torch.uint8:    (0, 0),
    torch.bool:     (0, 0),
}
GRAD_FACTOR = 10

# The dtypes the sweep covers, in report order (the dtypes op_db entries claim outside these are not
# swept, except complex64/complex128 for the entries of skips.COMPLEX_ENTRIES).
DTYPES = list(TOLERANCES)
# complex results are compared with the tolerance of their real dtype (tolerance() below)
COMPLEX_DTYPES = [torch.complex64, torch.complex128]
SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16", torch.float16: "f16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}


def tolerance(dtype, grad=False):
    """(rtol, atol) for comparing a result of `dtype` (complex: that of its real dtype)."""
    if dtype.is_complex:
        dtype = dtype.to_real()
    rtol, atol = TOLERANCES.get(dtype, (0, 0))
    if grad:
        rtol, atol = rtol * GRAD_FACTOR, atol * GRAD_FACTOR
    return rtol, atol
