"""Special functions and the integer binary ops of csrc/torch/ops_special.cpp (special.c): parity with the
CPU over dtypes (integers, f64, bf16), broadcasting and non-contiguous inputs, and no CPU fallback."""
import pytest
import torch

from exact_parity import DTYPES, FLOATS, _dev, _make, _same  # noqa: F401


UNARY_SPECIAL = {
    "digamma": torch.digamma, "lgamma": torch.lgamma, "sinc": torch.sinc, "entr": torch.special.entr,
    "polygamma1": lambda t: torch.polygamma(1, t), "polygamma3": lambda t: torch.polygamma(3, t),
    "angle": torch.angle, "mvlgamma": lambda t: torch.mvlgamma(t.abs() + 3, 2),
    "i0": lambda t: torch.i0(t * 4), "i0e": lambda t: torch.special.i0e(t * 8), "i1": lambda t: torch.special.i1(t * 4),
    "i1e": lambda t: torch.special.i1e(t * 8),
}
BINARY_SPECIAL = {
    "xlog1py": torch.special.xlog1py, "zeta": lambda x, y: torch.special.zeta(x.abs() + 1, y),
    "copysign": torch.copysign, "xlogy": torch.xlogy, "nextafter": torch.nextafter,
    "chebyshev_t": torch.special.chebyshev_polynomial_t, "chebyshev_u": torch.special.chebyshev_polynomial_u,
    "chebyshev_v": torch.special.chebyshev_polynomial_v, "chebyshev_w": torch.special.chebyshev_polynomial_w,
    "shifted_chebyshev_t": torch.special.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_w": torch.special.shifted_chebyshev_polynomial_w,
    "hermite_h": torch.special.hermite_polynomial_h, "hermite_he": torch.special.hermite_polynomial_he,
    "laguerre_l": torch.special.laguerre_polynomial_l, "legendre_p": torch.special.legendre_polynomial_p,
}
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("name", sorted(UNARY_SPECIAL) + sorted(BINARY_SPECIAL))
def test_special_matches_cpu(name, dtype, no_fallback):
    poly = name.endswith(("_t", "_u", "_v", "_w", "_h", "_he", "_l", "_p"))
    if dtype == torch.bfloat16 and (poly or name == "zeta"):
        pytest.skip("the CPU has no bf16 kernel for this op")
    if dtype == torch.int64 and name == "nextafter":
        pytest.skip("nextafter is floating point only")
    x = _make((7, 9), dtype, -9, 10, noncontig=True)
    if name in UNARY_SPECIAL:
        fn = UNARY_SPECIAL[name]
        got, want = fn(_dev(x)), fn(x)
    else:
        fn = BINARY_SPECIAL[name]
        y = _make((9,), dtype, 0 if poly else -9, 10, seed=2)  # broadcast
        if poly and dtype.is_floating_point:
            x = x / 8
        got, want = fn(_dev(x), _dev(y)), fn(x, y)
    rtol, atol = TOL.get(want.dtype, (0, 0))
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integer_pointwise_matches_cpu(dtype, no_fallback):
    x = _make((4, 6), dtype, -20, 21)
    y = _make((6,), dtype, 0, 9, seed=3)
    for fn in (torch.gcd, torch.lcm, torch.bitwise_left_shift, torch.bitwise_right_shift, torch.heaviside):
        _same(fn(_dev(x), _dev(y)), fn(x, y))
    xi = _dev(x).clone()
    xi.gcd_(_dev(y))
    _same(xi, torch.gcd(x, y))
    with pytest.raises(RuntimeError, match="different dtypes"):
        torch.heaviside(_dev(x), _dev(y.double()))
