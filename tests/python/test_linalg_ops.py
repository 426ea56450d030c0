"""Small linear algebra of csrc/torch/ops_linalg.cpp (small.c): trace (and its composite backward),
cross / linalg.cross, renorm, cdist and pdist (forward and backward): parity with the CPU over dtypes,
non-contiguous inputs, broadcasting, zero-size, and no CPU fallback."""

import pytest
import torch

from close_parity import FLOATS, INTS, _close, _make  # noqa: F401


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape", [(5, 5), (3, 7), (8, 2), (0, 4), (1, 1)])
def test_trace(dtype, shape, no_fallback):
    x = _make(shape, dtype)
    _close(torch.trace(x.to("neuron")), torch.trace(x))
    xt = _make(shape[::-1], dtype).t()  # non-contiguous
    _close(torch.trace(xt.to("neuron").t().t()), torch.trace(xt))
    big = _make((shape[0] * 2, shape[1] * 3), dtype)[::2, ::3]
    _close(torch.trace(big.to("neuron")[::1]), torch.trace(big))
    xd = _make((shape[0] * 2, shape[1] * 3), dtype).to("neuron")[::2, ::3]
    _close(torch.trace(xd), torch.trace(xd.cpu()))


def test_trace_backward(no_fallback):
    x = torch.randn(4, 6, dtype=torch.float64)
    xd = x.to("neuron").requires_grad_()
    xc = x.clone().requires_grad_()
    (torch.trace(xd) * 3).backward()
    (torch.trace(xc) * 3).backward()
    _close(xd.grad, xc.grad)


def test_trace_bad():
    with pytest.raises(RuntimeError, match="expected a matrix"):
        torch.trace(torch.ones(3, device="neuron"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                                   torch.int8, torch.uint8])
def test_cross(dtype, no_fallback):
    cases = [((4, 3), (4, 3), -1), ((3, 5), (3, 1), 0), ((2, 3, 4), (1, 3, 1), 1), ((0, 3), (0, 3), 1),
             ((2, 5, 3), (5, 3), -1)]
    for sa, sb, dim in cases:
        a, b = _make(sa, dtype, 1), _make(sb, dtype, 2)
        if len(sa) != len(sb):
            with pytest.raises(RuntimeError, match="same number of dimensions"):
                torch.cross(a.to("neuron"), b.to("neuron"), dim=dim)
            continue
        want = torch.linalg.cross(a, b, dim=dim)
        _close(torch.linalg.cross(a.to("neuron"), b.to("neuron"), dim=dim), want)
        _close(torch.cross(a.to("neuron"), b.to("neuron"), dim=dim), torch.cross(a, b, dim=dim))
        # non-contiguous inputs and a non-contiguous out=
        at, bt = a.to("neuron").mT.contiguous().mT, b.to("neuron").mT.contiguous().mT
        _close(torch.linalg.cross(at, bt, dim=dim), want)
        out = torch.empty(want.shape[::-1], dtype=dtype, device="neuron").mT if want.dim() == 2 else \
            torch.empty(want.shape, dtype=dtype, device="neuron")
        r = torch.linalg.cross(a.to("neuron"), b.to("neuron"), dim=dim, out=out)
        assert r is out
        _close(out, want)


def test_cross_grad(no_fallback):
    a = torch.randn(4, 3, dtype=torch.float64)
    b = torch.randn(4, 3, dtype=torch.float64)
    ad, bd = a.to("neuron").requires_grad_(), b.to("neuron").requires_grad_()
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    torch.linalg.cross(ad, bd).sum().backward()
    torch.linalg.cross(ac, bc).sum().backward()
    _close(ad.grad, ac.grad)
    _close(bd.grad, bc.grad)


def test_cross_bad():
    a = torch.ones(4, 3, device="neuron")
    with pytest.raises(RuntimeError, match="must have length 3"):
        torch.linalg.cross(torch.ones(4, 2, device="neuron"), torch.ones(4, 2, device="neuron"))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.cross(a, a.double())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [1, 2, 3.5, float("inf"), 0.5])
def test_renorm(dtype, p, no_fallback):
    x = _make((4, 5, 3), dtype)
    for dim in (0, 1, -1):
        for maxnorm in (0.0, 1.5, 100.0):
            _close(torch.renorm(x.to("neuron"), p, dim, maxnorm), torch.renorm(x, p, dim, maxnorm))
    xt = x.transpose(0, 2)
    _close(torch.renorm(x.to("neuron").transpose(0, 2), p, 1, 1.0), torch.renorm(xt, p, 1, 1.0))
    y = x.to("neuron").transpose(0, 2)
    y.renorm_(p, 0, 1.0)
    _close(y, xt.clone().renorm_(p, 0, 1.0))
    _close(torch.renorm(torch.ones(0, 3, dtype=dtype, device="neuron"), p, 0, 1.0), torch.ones(0, 3, dtype=dtype))


def test_renorm_grad(neuron_ops):
    x = torch.randn(4, 5, dtype=torch.float64)
    xd, xc = x.to("neuron").requires_grad_(), x.clone().requires_grad_()
    torch.renorm(xd, 2, 0, 1.0).pow(2).sum().backward()
    torch.renorm(xc, 2, 0, 1.0).pow(2).sum().backward()
    _close(xd.grad, xc.grad)
    assert "aten::renorm" not in str(neuron_ops.get_fallback_ops())


def test_renorm_bad():
    with pytest.raises(RuntimeError, match="non-positive-norm"):
        torch.renorm(torch.ones(2, 2, device="neuron"), 0, 0, 1.0)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.renorm(torch.ones(2, device="neuron"), 2, 0, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, float("inf"), 0.5])
def test_cdist(dtype, p, no_fallback):
    for s1, s2 in (((5, 4), (3, 4)), ((2, 5, 4), (1, 6, 4)), ((0, 4), (3, 4)), ((3, 0), (2, 0)), ((2, 30, 3), (2, 27, 3))):
        x1, x2 = _make(s1, dtype, 1), _make(s2, dtype, 2)
        want = torch.cdist(x1, x2, p)
        got = torch.cdist(x1.to("neuron"), x2.to("neuron"), p)
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
        # non-contiguous inputs
        got = torch.cdist(x1.to("neuron").mT.contiguous().mT, x2.to("neuron").mT.contiguous().mT, p)
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_grad(p, no_fallback):
    x1 = torch.randn(2, 5, 4, dtype=torch.float64)
    x2 = torch.randn(1, 3, 4, dtype=torch.float64)
    a, b = x1.to("neuron").requires_grad_(), x2.to("neuron").requires_grad_()
    ac, bc = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    torch.cdist(a, b, p, compute_mode="donot_use_mm_for_euclid_dist").sum().backward()
    torch.cdist(ac, bc, p, compute_mode="donot_use_mm_for_euclid_dist").sum().backward()
    torch.testing.assert_close(a.grad.cpu(), ac.grad)
    torch.testing.assert_close(b.grad.cpu(), bc.grad)


def test_cdist_bad():
    with pytest.raises(RuntimeError, match="same number of columns"):
        torch.cdist(torch.ones(2, 3, device="neuron"), torch.ones(2, 4, device="neuron"))
    with pytest.raises(RuntimeError, match="non-negative p"):
        torch.cdist(torch.ones(2, 3, device="neuron"), torch.ones(2, 3, device="neuron"), -1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_pdist(dtype, p, no_fallback):
    for shape in ((6, 4), (1, 3), (0, 3), (4, 0), (9, 1)):
        x = _make(shape, dtype, 3)
        want = torch.nn.functional.pdist(x, p)
        got = torch.nn.functional.pdist(x.to("neuron"), p)
        torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)
    x = _make((5, 3), torch.float64, 4)
    xd, xc = x.to("neuron").requires_grad_(), x.clone().requires_grad_()
    w = torch.arange(10, dtype=torch.float64)
    (torch.nn.functional.pdist(xd, p) * w.to("neuron")).sum().backward()
    (torch.nn.functional.pdist(xc, p) * w).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)


def test_pdist_cdist_inf_grad_f32(no_fallback):
    # the inf-norm derivative picks the max |difference|: computed in f32 like the forward
    x = torch.randn(6, 4)
    xd, xc = x.to("neuron").requires_grad_(), x.clone().requires_grad_()
    torch.nn.functional.pdist(xd, float("inf")).sum().backward()
    torch.nn.functional.pdist(xc, float("inf")).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    xd.grad = None
    xc.grad = None
    torch.cdist(xd[:3], xd[3:], float("inf")).sum().backward()
    torch.cdist(xc[:3], xc[3:], float("inf")).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
