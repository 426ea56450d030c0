"""Small ops of csrc/torch/ops_small.cpp (small.c): tril_indices / triu_indices, trace (and its
composite backward), cross / linalg.cross: parity with the CPU over dtypes, non-contiguous inputs,
broadcasting, zero-size, and no CPU fallback."""

import pytest
import torch

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


@pytest.fixture
def no_fallback(neuron_ops):
    yield
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


def _make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -9, 10, shape, generator=g).to(dtype)


def _close(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype in (torch.bfloat16, torch.float16):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(got, want, atol=1e-12 if want.dtype == torch.float64 else 1e-5, rtol=1e-6)


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_tri_indices(fn, no_fallback):
    for row in (0, 1, 3, 7):
        for col in (0, 1, 4, 9):
            for off in (-10, -3, -1, 0, 1, 2, 10):
                for dtype in (torch.int64, torch.int32):
                    got = fn(row, col, off, dtype=dtype, device="neuron")
                    want = fn(row, col, off, dtype=dtype)
                    assert got.device.type == "neuron"
                    assert torch.equal(got.cpu(), want), (row, col, off, got, want)


def test_tri_indices_bad():
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        torch.tril_indices(-1, 3, device="neuron")
    with pytest.raises(RuntimeError, match="int32 and int64"):
        torch.triu_indices(3, 3, dtype=torch.float32, device="neuron")


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
