"""softmax / log_softmax and layer_norm over rows on neuron vs PyTorch's CPU, forward and backward (the
aten ops autograd calls: _softmax_backward_data, _log_softmax_backward_data, native_layer_norm_backward):
widths around the kernels' 16/32/64-element steps and row groups, single rows, masked (-inf) entries,
a dim other than the last, non-contiguous input, weight or bias alone, every float dtype; every case
asserts that nothing fell back."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-10),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SHAPES = [(1, 1), (1, 16), (3, 17), (2, 31), (5, 64), (1, 65), (7, 100), (4, 1024), (9, 1536), (3, 2000),
          (256, 1024), (2, 5000), (2, 3, 33)]


def _close(a, b, dtype, scale=1.0):
    t = TOL[dtype]
    torch.testing.assert_close(a.cpu(), b, rtol=t["rtol"] * scale, atol=t["atol"] * scale, equal_nan=True)


def _no_fallback(neuron_ops):
    fb = neuron_ops.get_fallback_ops()
    assert not fb, sorted(fb)


def _pair(t, dev):
    return t.detach().clone().requires_grad_(), t.detach().to(dev).requires_grad_()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows(device, neuron_ops, dtype, shape, log):
    fn = F.log_softmax if log else F.softmax
    x = (torch.randn(shape) * 4).to(dtype)
    xc, xn = _pair(x, device)
    yc, yn = fn(xc, -1), fn(xn, -1)
    _close(yn, yc.detach(), dtype)
    dy = torch.randn(shape).to(dtype)
    yc.backward(dy)
    yn.backward(dy.to(device))
    _close(xn.grad, xc.grad, dtype, scale=4.0)
    _no_fallback(neuron_ops)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_masked_and_other_dims(device, neuron_ops, log):
    fn = torch.log_softmax if log else torch.softmax
    x = torch.randn(6, 70, 9)
    x[:, 3:40, :] = float("-inf")  # masked entries (exp gives 0)
    x[0, :, 0] = float("-inf")  # a fully masked row: NaN, as on the CPU
    for dim in (0, 1, 2, -1):
        xc, xn = _pair(x, device)
        yc, yn = fn(xc, dim), fn(xn, dim)
        _close(yn, yc.detach(), torch.float32)
        finite = torch.isfinite(yc.detach())
        dy = torch.randn(x.shape)
        yc.backward(torch.where(finite, dy, 0))
        yn.backward(torch.where(finite, dy, 0).to(device))
        _close(xn.grad, xc.grad, torch.float32, scale=4.0)
    xt = torch.randn(40, 33).t()  # non-contiguous rows
    _close(fn(xt.to(device), -1), fn(xt, -1), torch.float32)
    _no_fallback(neuron_ops)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm_rows(device, neuron_ops, dtype, shape, affine):
    C = shape[-1]
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    w = (torch.rand(C) + 0.5).to(dtype) if affine in ("both", "weight") else None
    b = torch.randn(C).to(dtype) if affine in ("both", "bias") else None
    xc, xn = _pair(x, device)
    wc, wn = _pair(w, device) if w is not None else (None, None)
    bc, bn = _pair(b, device) if b is not None else (None, None)
    yc, yn = F.layer_norm(xc, (C,), wc, bc, 1e-5), F.layer_norm(xn, (C,), wn, bn, 1e-5)
    _close(yn, yc.detach(), dtype, scale=4.0)
    dy = torch.randn(shape).to(dtype)
    yc.backward(dy)
    yn.backward(dy.to(device))
    scale = 4.0 * max(1.0, (x.numel() / C) ** 0.5) if dtype in (torch.bfloat16, torch.float16) else 16.0
    for c, n in ((xc, xn), (wc, wn), (bc, bn)):
        if c is not None:
            _close(n.grad, c.grad, dtype, scale=scale)
    _no_fallback(neuron_ops)


def test_layer_norm_aten_outputs(device, neuron_ops):
    """mean and rstd outputs, and the backward with only some of dx, dw, db wanted."""
    A = torch.ops.aten
    x, w, b, dy = torch.randn(37, 129), torch.rand(129) + 0.5, torch.randn(129), torch.randn(37, 129)
    yc, mc, rc = A.native_layer_norm(x, [129], w, b, 1e-5)
    yn, mn, rn = A.native_layer_norm(x.to(device), [129], w.to(device), b.to(device), 1e-5)
    for n, c in ((yn, yc), (mn, mc), (rn, rc)):
        _close(n, c, torch.float32, scale=4.0)
    for mask in ([True, True, True], [True, False, False], [False, True, True], [False, True, False]):
        gc = A.native_layer_norm_backward(dy, x, [129], mc, rc, w, b, mask)
        gn = A.native_layer_norm_backward(dy.to(device), x.to(device), [129], mn, rn, w.to(device), b.to(device), mask)
        for n, c in zip(gn, gc):
            assert (n is None) == (c is None)
            if c is not None:
                _close(n, c, torch.float32, scale=16.0)
    _no_fallback(neuron_ops)
