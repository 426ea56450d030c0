"""Selection, search, unique, histogram, random-distribution and special-function ops
(csrc/torch/ops_misc.cpp on select.c / random_dist.c / special.c): parity with the CPU over dtypes
(integers, f64, bf16), non-contiguous inputs and zero-size, and no CPU fallback."""

import math

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8]
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _dev(t):
    return t.to("neuron")


def _make(shape, dtype, lo=-5, hi=6, nan=False, noncontig=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    if noncontig:  # same values, transposed storage
        return _make(tuple(reversed(shape)), dtype, lo, hi, nan, False, seed).t() if len(shape) == 2 else \
            _make(shape + (2,), dtype, lo, hi, nan, False, seed)[..., 0]
    x = torch.randint(lo, hi, shape, generator=g)
    if dtype.is_floating_point:
        x = x.to(dtype) * 0.5
        if nan and x.numel():
            x.view(-1)[:: 5] = float("nan")
    else:
        x = (x.abs() if dtype == torch.uint8 else x).to(dtype)
    return x


def _same(a, b):
    a = a.cpu()
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    if a.is_floating_point():
        assert torch.equal(torch.isnan(a), torch.isnan(b)), (a, b)
        a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
    assert torch.equal(a, b), (a, b)


@pytest.fixture
def no_fallback(neuron_ops):
    yield
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("noncontig", [False, True])
def test_selection_matches_cpu(dtype, noncontig, no_fallback):
    x = _make((6, 9), dtype, nan=True, noncontig=noncontig)
    xd = _dev(x)
    for dim in (0, 1, -1):
        for keep in (False, True):
            for name, fn in (("median", lambda t: t.median(dim, keep)), ("nanmedian", lambda t: t.nanmedian(dim, keep)),
                             ("kthvalue", lambda t: t.kthvalue(3, dim, keep)), ("mode", lambda t: t.mode(dim, keep))):
                got, want = fn(xd), fn(x)  # (mode with NaN too: libstdc++'s sort order is reproduced)
                _same(got.values, want.values)
                _same(got.indices, want.indices)
        v, i = xd.topk(3, dim)
        cv, ci = x.topk(3, dim)
        _same(v, cv)  # values; indices may differ among equal values: check what they select
        _same(x.gather(dim, i.cpu()), cv)
    _same(xd.median(), x.median())
    _same(xd.nanmedian(), x.nanmedian())


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_selection_zero_size_and_scalars(dtype, no_fallback):
    e = torch.empty(0, 4, dtype=dtype)
    _same(_dev(e).topk(0, 0).values, e.topk(0, 0).values)
    _same(_dev(e).median(1).values, e.median(1).values)
    s = torch.tensor(3, dtype=dtype)
    _same(_dev(s).kthvalue(1).values, s.kthvalue(1).values)
    _same(_dev(s).mode().indices, s.mode().indices)
    with pytest.raises(IndexError, match="non-zero size"):
        _dev(e).median(0)
    long = _make((2, 3000), dtype, nan=dtype.is_floating_point)  # lines that need a workspace
    for fn in (lambda t: t.kthvalue(1234, 1), lambda t: t.median(1), lambda t: t.nanmedian(1)):
        _same(fn(_dev(long)).values, fn(long).values)
        _same(fn(_dev(long)).indices, fn(long).indices)
    long = _make((2, 3000), dtype, nan=dtype.is_floating_point)  # mode: aten's std::sort order, NaN included
    _same(_dev(long).mode(1).values, long.mode(1).values)
    _same(_dev(long).mode(1).indices, long.mode(1).indices)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_unique_matches_cpu(dtype, no_fallback):
    # (aten std::sorts with <: where NaN lands among the values is not defined; a short line is
    # insertion-sorted, which puts each NaN last, as here)
    if dtype.is_floating_point:
        v = torch.tensor([3.0, float("nan"), 1.0, 1.0, float("nan"), 2.0], dtype=dtype)
        for got, want in zip(torch.unique(_dev(v), return_inverse=True, return_counts=True),
                             torch.unique(v, return_inverse=True, return_counts=True)):
            _same(got, want)
    x = _make((5, 8), dtype, -2, 3) if dtype != torch.bool else torch.rand(5, 8) > 0.5
    xd = _dev(x)
    for inv in (False, True):
        for cnt in (False, True):
            for got, want in zip(torch.unique(xd, return_inverse=inv, return_counts=cnt),
                                 torch.unique(x, return_inverse=inv, return_counts=cnt)):
                _same(got, want)
            for dim in (0, 1):  # (aten std::sorts slices lexicographically: NaN has no defined place)
                xs = x.nan_to_num(0.25) if dtype.is_floating_point else x.clone()
                xs[1] = xs[3]  # equal slices along dim 0
                for got, want in zip(torch.unique(_dev(xs), dim=dim, return_inverse=inv, return_counts=cnt),
                                     torch.unique(xs, dim=dim, return_inverse=inv, return_counts=cnt)):
                    _same(got, want)
            for dim in (None, 0, 1):
                for got, want in zip(torch.unique_consecutive(xd, return_inverse=inv, return_counts=cnt, dim=dim),
                                     torch.unique_consecutive(x, return_inverse=inv, return_counts=cnt, dim=dim)):
                    _same(got, want)
    e = torch.empty(0, dtype=dtype)
    for got, want in zip(torch.unique(_dev(e), return_inverse=True, return_counts=True),
                         torch.unique(e, return_inverse=True, return_counts=True)):
        _same(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32])
def test_search_and_counts_match_cpu(dtype, no_fallback):
    bd = torch.sort(_make((3, 7), dtype), dim=1).values
    x = _make((3, 10), dtype, -7, 8, seed=1)
    for right in (False, True):
        for out_int32 in (False, True):
            _same(torch.searchsorted(_dev(bd), _dev(x), right=right, out_int32=out_int32),
                  torch.searchsorted(bd, x, right=right, out_int32=out_int32))
            _same(torch.bucketize(_dev(x), _dev(bd[0]), right=right, out_int32=out_int32),
                  torch.bucketize(x, bd[0], right=right, out_int32=out_int32))
    perm = torch.stack([torch.randperm(7, generator=torch.Generator().manual_seed(i)) for i in range(3)])
    unsorted = bd.gather(1, perm)
    sorter = perm.argsort(1)
    _same(torch.searchsorted(_dev(unsorted), _dev(x), sorter=_dev(sorter), side="right"),
          torch.searchsorted(unsorted, x, sorter=sorter, side="right"))
    _same(torch.searchsorted(_dev(bd[0]), _dev(x.t()[1:].t())), torch.searchsorted(bd[0], x.t()[1:].t()))  # non-contiguous
    for invert in (False, True):
        _same(torch.isin(_dev(x), _dev(bd[1]), invert=invert), torch.isin(x, bd[1], invert=invert))
    if not dtype.is_floating_point:
        c = x.abs()
        w = torch.rand(c.numel())
        _same(torch.bincount(_dev(c.view(-1)), minlength=12), torch.bincount(c.view(-1), minlength=12))
        torch.testing.assert_close(torch.bincount(_dev(c.view(-1)), _dev(w)).cpu(), torch.bincount(c.view(-1), w))
        _same(torch.bincount(_dev(torch.empty(0, dtype=dtype)), minlength=3), torch.bincount(torch.empty(0, dtype=dtype), minlength=3))
    else:
        for lo, hi in ((0, 0), (-2, 2), (-1.3, 0.7)):
            _same(torch.histc(_dev(x), bins=5, min=lo, max=hi), torch.histc(x, bins=5, min=lo, max=hi))


def test_random_distributions_are_reproducible_and_sane(no_fallback):
    n = 200_000

    def draw(fn, seed=5):
        torch.manual_seed(seed)
        return fn().cpu().double()

    cases = {
        "exponential": (lambda: torch.empty(n, device="neuron").exponential_(2.0), 0.5, 0.25),
        "geometric": (lambda: torch.empty(n, device="neuron").geometric_(0.25), 4.0, 12.0),
        "log_normal": (lambda: torch.empty(n, device="neuron", dtype=torch.float64).log_normal_(0.0, 0.5),
                       math.exp(0.125), (math.exp(0.25) - 1) * math.exp(0.25)),
        "normal_tensor_tensor": (lambda: torch.normal(torch.full((n,), 3.0, device="neuron"), torch.full((n,), 2.0, device="neuron")),
                                 3.0, 4.0),
        "normal_tensor_float": (lambda: torch.normal(torch.full((n,), -1.0, device="neuron"), 0.5), -1.0, 0.25),
        "normal_float_tensor": (lambda: torch.normal(2.0, torch.full((n,), 3.0, device="neuron")), 2.0, 9.0),
    }
    for name, (fn, mean, var) in cases.items():
        a, b, c = draw(fn), draw(fn), draw(fn, seed=6)
        assert torch.equal(a, b), f"{name}: same seed, different values"
        assert not torch.equal(a, c), f"{name}: different seeds, same values"
        assert abs(a.mean().item() - mean) < 6 * math.sqrt(var / n), (name, a.mean().item(), mean)
        assert abs(a.var().item() - var) < 0.05 * var, (name, a.var().item(), var)
    c = draw(lambda: torch.empty(n, device="neuron").cauchy_(1.0, 2.0))
    assert abs((c < 1.0).double().mean().item() - 0.5) < 0.01
    assert abs(((c > -1.0) & (c < 3.0)).double().mean().item() - 0.5) < 0.01
    g = draw(lambda: torch.empty(1000, dtype=torch.int32, device="neuron").geometric_(0.5))
    assert g.min().item() >= 1
    # bf16 and non-contiguous outputs
    t = torch.empty(64, 32, device="neuron", dtype=torch.bfloat16).t()
    t.exponential_()
    assert (t.cpu() >= 0).all()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float64])
def test_randperm_is_a_reproducible_permutation(dtype, no_fallback):
    for n in (0, 1, 5, 1000):
        torch.manual_seed(3)
        p = torch.randperm(n, device="neuron", dtype=dtype).cpu()
        torch.manual_seed(3)
        q = torch.randperm(n, device="neuron", dtype=dtype).cpu()
        assert torch.equal(p, q)
        assert torch.equal(p.sort().values, torch.arange(n, dtype=dtype))
    assert not torch.equal(torch.randperm(1000, device="neuron").cpu(), torch.randperm(1000, device="neuron").cpu())


def test_multinomial(no_fallback):
    p = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]], device="neuron")
    torch.manual_seed(1)
    s = torch.multinomial(p, 20000, replacement=True).cpu()
    torch.manual_seed(1)
    assert torch.equal(s, torch.multinomial(p, 20000, replacement=True).cpu())
    freq = torch.stack([torch.bincount(r, minlength=5) for r in s]).double() / 20000
    torch.testing.assert_close(freq, (p / p.sum(1, keepdim=True)).cpu().double(), atol=0.02, rtol=0)
    for _ in range(20):
        w = torch.multinomial(p[0], 4).cpu()
        assert sorted(w.tolist()) == [0, 1, 2, 3]  # distinct, never the zero-weight category
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p[0], 6)


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


def test_sdpa_with_a_mask_that_needs_a_gradient(no_fallback):
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    m = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    md = _dev(m.detach()).requires_grad_()
    out = torch.nn.functional.scaled_dot_product_attention(_dev(q), _dev(k), _dev(v), attn_mask=md)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(out.cpu(), ref)
    g = torch.randn_like(ref)
    out.backward(_dev(g))
    ref.backward(g)
    torch.testing.assert_close(md.grad.cpu(), m.grad)
