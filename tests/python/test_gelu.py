"""GELU and its backward on f32 (the table-driven AVX-512 loops of csrc/kernels/act_avx512.c) against
PyTorch CPU and against the exact functions in float64: both approximate modes, odd sizes (masked
tails), contiguous and strided inputs, values far into both tails, specials.

Errors are measured in units of ulp(result) + 2^-24 * |x| * |dy|: the second term is the f32 rounding
PyTorch's own formulas carry (they sum 1 + erf or 1 + tanh in f32, which for x < 0 cancels).
"""

import math

import pytest
import torch
import torch.nn.functional as F


def _units(got, ref, x, g=None):
    """|got - ref| in units of ulp(ref) + 2^-24 |x| |g| (float64)."""
    ref32 = ref.float()
    ulp = (torch.nextafter(ref32.abs(), torch.tensor(math.inf)) - ref32.abs()).double().clamp_min(1.4e-45)
    scale = x.double().abs() * (g.double().abs() if g is not None else 1.0)
    return (got.double() - ref.double()).abs() / (ulp + 2.0 ** -24 * scale)


def _exact(x, approximate, g=None):
    """gelu (g None) or g * gelu'(x) in float64."""
    x = x.double()
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        t = torch.tanh(beta * (x + kappa * x ** 3))
        if g is None:
            return 0.5 * x * (1 + t)
        return g.double() * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * beta * (1 + 3 * kappa * x * x))
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2.0))
    if g is None:
        return x * cdf
    return g.double() * (cdf + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


def _inputs(n):
    torch.manual_seed(n)
    x = torch.cat([torch.linspace(-10, 10, n), torch.randn(n) * 3,
                   torch.tensor([0.0, -0.0, 1e-30, -1e-30, 7.62, -7.62, 7.63, -7.63, 60.0, -60.0, 1e30, -1e30])])
    return x, torch.randn_like(x)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("n", [1, 15, 17, 1027, 40001])
def test_gelu_f32_vs_cpu_and_exact(device, neuron_ops, approximate, n):
    x, g = _inputs(n)
    y = F.gelu(x.to(device), approximate=approximate).cpu()
    dx = torch.ops.aten.gelu_backward(g.to(device), x.to(device), approximate=approximate).cpu()
    assert y.dtype == dx.dtype == torch.float32
    yc = F.gelu(x, approximate=approximate)
    dxc = torch.ops.aten.gelu_backward(g, x, approximate=approximate)
    # NaN exactly where PyTorch's CPU has NaN (the tanh backward's x^2 overflow at +-1e30)
    assert torch.equal(torch.isnan(dx), torch.isnan(dxc))
    ok = ~torch.isnan(dxc)
    # against PyTorch CPU: its own results are a few units off the exact function (oneDNN's gelu_erf
    # for contiguous f32 input measured up to ~8 units), so a loose bound
    assert _units(y, yc, x).max() <= 16
    assert _units(dx[ok], dxc[ok], x[ok], g[ok]).max() <= 16
    # against the exact function: the kernels measured < 1 unit
    fin = ok & (x.abs() < 1e20)
    assert _units(y[fin], _exact(x[fin], approximate), x[fin]).max() <= 2
    assert _units(dx[fin], _exact(x[fin], approximate, g[fin]), x[fin], g[fin]).max() <= 2
    # strided (every other element) input and grad
    xs, gs = torch.stack([x, x], 1)[:, 0], torch.stack([g, g], 1)[:, 1]
    assert torch.equal(F.gelu(xs.to(device), approximate=approximate).cpu(), y)
    dxs = torch.ops.aten.gelu_backward(gs.to(device), xs.to(device), approximate=approximate).cpu()
    assert torch.equal(torch.isnan(dxs), torch.isnan(dx)) and torch.equal(dxs[ok], dx[ok])
    fb = neuron_ops.get_fallback_ops()
    assert not fb, sorted(fb)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_f32_specials(device, approximate):
    x = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0, 100.0, -100.0])
    y = F.gelu(x.to(device), approximate=approximate).cpu()
    assert math.isnan(y[0]) and y[1] == math.inf and math.isnan(y[2])  # -inf * 0, as PyTorch's formula
    assert y[3] == 0 and y[4] == 0 and torch.signbit(y[4]) and y[5] == 100 and y[6] == 0 and torch.signbit(y[6])
    dx = torch.ops.aten.gelu_backward(torch.ones_like(x).to(device), x.to(device), approximate=approximate).cpu()
    dxc = torch.ops.aten.gelu_backward(torch.ones_like(x), x, approximate=approximate)
    assert torch.equal(torch.isnan(dx), torch.isnan(dxc))  # NaN at NaN and both infinities
    assert torch.equal(dx[3:], dxc[3:])  # 0.5, 0.5, 1, 0


def test_gelu_f32_autograd(device, neuron_ops):
    """F.gelu's autograd on an odd-sized 2-d tensor reaches the native gelu_backward."""
    torch.manual_seed(3)
    xc = (torch.randn(37, 129) * 3).requires_grad_()
    xn = xc.detach().to(device).requires_grad_()
    for approximate in ("none", "tanh"):
        xc.grad = xn.grad = None
        F.gelu(xc, approximate=approximate).sum().backward()
        F.gelu(xn, approximate=approximate).sum().backward()
        assert _units(xn.grad.cpu(), xc.grad, xc.detach()).max() <= 16
    assert "aten::gelu_backward" in neuron_ops.get_executed_ops()
    assert not neuron_ops.get_fallback_ops()
