"""Complex numbers (complex64, complex128) on neuron vs PyTorch's CPU: factories and fills, copies and
casts across devices and dtypes (with the conj and neg bits), the view and shape ops, view_as_real /
view_as_complex as native views, the lazy conj bit, complex/polar/abs/angle/sgn, elementwise arithmetic
with broadcasting and type promotion, the complex math functions, reductions, matrix products, autograd
through them, and a tiny llama whose rotary embedding is written with complex numbers (as the llama
reference code and TorchTitan's llama3 write it), eager and under torch.compile.  Every test runs with
NEURON_FALLBACK=error: nothing may reach the CPU fallback."""
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

CX = [torch.complex64, torch.complex128]
TOL = {torch.complex64: dict(rtol=2e-5, atol=2e-5), torch.complex128: dict(rtol=1e-11, atol=1e-12),
       torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-11, atol=1e-12)}


@pytest.fixture(autouse=True)
def _native(no_fallback, monkeypatch):
    """Every test of this file runs without the CPU fallback (an attempt raises)."""
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    yield


def _rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


def _close(dev_t, cpu_t, scale=1.0, equal_nan=False):
    t = TOL.get(cpu_t.dtype, dict(rtol=0, atol=0))
    assert dev_t.dtype == cpu_t.dtype, (dev_t.dtype, cpu_t.dtype)
    torch.testing.assert_close(dev_t.detach().cpu(), cpu_t.detach(), rtol=t["rtol"] * scale, atol=t["atol"] * scale,
                               equal_nan=equal_nan)


# ---- storage, factories, copies -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", CX)
def test_factories_and_fills(device, dtype):
    assert torch.zeros(2, 3, dtype=dtype, device=device).cpu().equal(torch.zeros(2, 3, dtype=dtype))
    assert torch.ones(4, dtype=dtype, device=device).cpu().equal(torch.ones(4, dtype=dtype))
    v = complex(1.5, -2.25)
    assert torch.full((3, 2), v, device=device).dtype == torch.complex64
    assert torch.full((3, 2), v, dtype=dtype, device=device).cpu().equal(torch.full((3, 2), v, dtype=dtype))
    e = torch.empty(5, dtype=dtype, device=device)
    assert e.dtype == dtype and e.device.type == device.type
    s = torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=device)
    assert s.stride() == (1, 2)
    s.fill_(complex(0.5, 3))
    assert s.cpu().equal(torch.full((2, 3), complex(0.5, 3), dtype=dtype))
    s.zero_()
    assert s.cpu().equal(torch.zeros(2, 3, dtype=dtype))
    x = torch.zeros(4, 4, dtype=dtype, device=device)
    x[1:3, ::2].fill_(2j)  # a strided fill
    ref = torch.zeros(4, 4, dtype=dtype)
    ref[1:3, ::2].fill_(2j)
    assert x.cpu().equal(ref)
    assert torch.zeros_like(x).cpu().equal(torch.zeros(4, 4, dtype=dtype))
    assert torch.tensor([1 + 2j, 3 - 4j], device=device).cpu().equal(torch.tensor([1 + 2j, 3 - 4j]))
    assert torch.tensor(2 - 1j, device=device).item() == 2 - 1j
    torch.manual_seed(0)
    r = torch.randn(20000, dtype=dtype, device=device)             # each part N(0, 1/2), as aten
    assert r.dtype == dtype and abs(r.real.var().item() - 0.5) < 0.05 and abs(r.imag.var().item() - 0.5) < 0.05


@pytest.mark.parametrize("dtype", CX)
def test_copies_and_casts(device, dtype):
    c = _rand((6, 5), dtype)
    d = c.to(device)
    assert d.dtype == dtype and d.cpu().equal(c)                  # H2D, D2H
    nc = c.t()[::2]                                               # a non-contiguous source
    assert nc.to(device).cpu().equal(nc)
    assert d.t()[::2].cpu().equal(nc)
    assert d.clone().cpu().equal(c) and d.t().contiguous().cpu().equal(c.t().contiguous())   # D2D
    other = torch.complex128 if dtype == torch.complex64 else torch.complex64
    _close(d.to(other), c.to(other))                              # c64 <-> c128
    for rt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool):
        r = (torch.randn(7) * 10).to(rt)
        assert r.to(device).to(dtype).cpu().equal(r.to(dtype)), rt   # real -> complex: imaginary 0
    big = torch.tensor([2**62 + 1, -(2**53) - 1, 16777217], dtype=torch.int64)
    assert big.to(device).to(dtype).cpu().equal(big.to(dtype))   # one rounding, as the CPU
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = d.to(torch.float32)
    assert r.cpu().equal(c.to(torch.float32))                     # complex -> real drops the imaginary part
    assert d.to(torch.bool).cpu().equal(c.to(torch.bool))
    dst = torch.empty(6, 5, device=device)
    dst.copy_(d)                                                  # copy_ complex -> real
    assert dst.cpu().equal(c.real.float())
    dc = torch.empty(6, 5, dtype=dtype, device=device)
    dc.copy_(c)                                                   # copy_ from the CPU
    assert dc.cpu().equal(c)
    dc.copy_(c.real.float())                                      # copy_ real -> complex on the device
    assert dc.cpu().equal(c.real.float().to(dtype))


def test_complex_to_real_cast_warns_as_the_cpu(device):
    # The CPU warns once per process ("Casting complex values to real discards the imaginary part");
    # in a fresh process the neuron cast warns the same way.
    import subprocess
    import sys
    code = ("import torch, warnings\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    torch.tensor([1+2j], device='neuron').to(torch.float32)\n"
            "print([str(x.message) for x in w])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "discards the imaginary part" in out.stdout, out.stdout


@pytest.mark.parametrize("dtype", CX)
def test_view_and_shape_ops(device, dtype):
    c = _rand((4, 6, 8), dtype)
    d = c.to(device)
    idx = torch.tensor([3, 0, 2])
    cases = [
        lambda x: x.reshape(8, 24), lambda x: x.view(24, 8), lambda x: x[1:3, ::2, 1:],
        lambda x: x.flatten(1), lambda x: x.transpose(0, 2).contiguous(), lambda x: x.permute(2, 0, 1).reshape(-1),
        lambda x: x[:, :1].expand(4, 5, 8).contiguous(), lambda x: x.select(1, 2), lambda x: x.narrow(2, 3, 4),
        lambda x: x.unsqueeze(1).squeeze(1), lambda x: torch.cat([x, x[:, :2]], 1), lambda x: torch.stack([x, x], -1),
        lambda x: torch.cat([x.t() for x in x.unbind(0)], 0), lambda x: x.chunk(3, 1)[2],
        lambda x: x.index_select(1, idx.to(x.device)), lambda x: x[:, idx.to(x.device)], lambda x: x.flip(0, -1),
        lambda x: x[x.real > 0], lambda x: x.repeat(2, 1, 1), lambda x: x.unfold(2, 3, 2), lambda x: x.movedim(0, -1).clone(),
    ]
    for k, f in enumerate(cases):
        r = f(d)
        assert r.dtype == dtype and r.cpu().equal(f(c)), k


# ---- native views, conj, the complex constructors -----------------------------------------------------

@pytest.mark.parametrize("dtype", CX)
def test_view_as_real_and_complex_are_views(device, dtype):
    c = _rand((3, 4), dtype)
    d = c.to(device)
    r = torch.view_as_real(d)
    assert r.dtype == c.real.dtype and r.shape == (3, 4, 2) and r.data_ptr() == d.data_ptr()
    assert r.cpu().equal(torch.view_as_real(c))
    r[0, 0, 1] = 7.0                                              # writes through to the complex tensor
    assert d[0, 0].item().imag == 7.0
    back = torch.view_as_complex(r)
    assert back.data_ptr() == d.data_ptr() and back.cpu().equal(d.cpu())
    f = torch.randn(5, 6, 2, dtype=c.real.dtype)
    assert torch.view_as_complex(f.to(device)).cpu().equal(torch.view_as_complex(f))
    assert d.real.cpu().equal(c.real.clone().fill_(0) + torch.view_as_real(d.cpu())[..., 0])
    assert d.imag.data_ptr() == d.data_ptr() + d.element_size() // 2
    d.imag.mul_(2)                                                # imag is a view
    assert torch.view_as_real(d)[..., 1].cpu().equal(torch.view_as_real(d.cpu())[..., 1])
    with pytest.raises(RuntimeError, match="Tensor must have a last dimension of size 2"):
        torch.view_as_complex(torch.randn(4, 3, device=device))
    with pytest.raises(RuntimeError, match="view_as_real doesn't work on unresolved conjugated tensors"):
        torch.view_as_real(d.conj())


@pytest.mark.parametrize("dtype", CX)
def test_conj_bit(device, dtype):
    c = _rand((4, 3), dtype)
    d = c.to(device)
    j = d.conj()
    assert j.is_conj() and j.data_ptr() == d.data_ptr()          # lazy, as on the CPU
    assert j.cpu().equal(c.conj()) and j.cpu().resolve_conj().equal(c.conj_physical())
    assert j.resolve_conj().cpu().equal(c.conj().resolve_conj()) and not j.resolve_conj().is_conj()
    assert torch.conj_physical(d).cpu().equal(torch.conj_physical(c)) and not torch.conj_physical(d).is_conj()
    assert torch._conj_physical(d).cpu().equal(torch._conj_physical(c))
    e = d.clone()
    e.conj_physical_()
    assert e.cpu().equal(c.conj_physical())
    assert j.imag.is_neg() and j.imag.cpu().equal(c.conj().imag)     # the neg bit of conj().imag
    assert j.imag.clone().cpu().equal(-c.imag)
    assert (j * 2).cpu().equal(c.conj() * 2)
    assert j.t().contiguous().cpu().equal(c.conj().t().contiguous())
    assert j.conj().cpu().equal(c) and not j.conj().is_conj()
    k = torch.zeros(4, 3, dtype=dtype, device=device)
    k.conj().copy_(d)                                            # copy into a conjugated view
    assert k.cpu().equal(c.conj_physical())
    r = torch.randn(3, device=device)
    assert r.conj() is r or r.conj().data_ptr() == r.data_ptr()  # conj of a real tensor is itself


@pytest.mark.parametrize("rdtype", [torch.float32, torch.float64])
def test_complex_polar_abs_angle_sgn(device, rdtype):
    a, b = torch.randn(5, 4, dtype=rdtype), torch.randn(4, dtype=rdtype)
    _close(torch.complex(a.to(device), b.to(device)), torch.complex(a, b))
    _close(torch.polar(a.abs().to(device), b.to(device)), torch.polar(a.abs(), b))
    out = torch.empty(0, dtype=torch.complex(a, b).dtype, device=device)
    torch.complex(a.to(device), b.to(device), out=out)
    _close(out, torch.complex(a, b))
    c = torch.complex(a, a.flip(0))
    c[0, 0] = 0
    d = c.to(device)
    _close(d.abs(), c.abs())
    _close(torch.abs(d), c.abs())
    _close(d.angle(), c.angle())
    _close(d.sgn(), c.sgn())
    _close(d.real, c.real)
    _close(d.imag, c.imag)
    _close(d.abs().pow(2), c.abs().pow(2))
    with pytest.raises(RuntimeError, match="Expected both inputs to be Half, Float or Double tensors"):
        torch.complex(torch.ones(2, dtype=torch.int64, device=device), torch.ones(2, dtype=torch.int64, device=device))
    with pytest.raises(RuntimeError, match="Expected object of scalar type"):
        torch.complex(torch.ones(2, device=device), torch.ones(2, dtype=torch.float64, device=device))
    with pytest.raises(RuntimeError, match="torch.sgn instead"):
        torch.sign(d)


# ---- elementwise arithmetic and math -------------------------------------------------------------------

UNARY = ["neg", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
         "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "sigmoid", "square"]


@pytest.mark.parametrize("dtype", CX)
@pytest.mark.parametrize("op", UNARY)
def test_unary_math(device, dtype, op):
    c = _rand((33,), dtype) * 1.5
    c[0] = 0.25 - 0.5j
    f = getattr(torch, op)
    _close(f(c.to(device)), f(c), scale=4)
    _close(f(c.to(device)[::3]), f(c[::3]), scale=4)              # strided


@pytest.mark.parametrize("dtype", CX)
def test_predicates(device, dtype):
    c = torch.tensor([1 + 1j, complex("nan"), complex(float("inf"), 0), complex(0, float("-inf")), complex(1, float("nan"))],
                     dtype=dtype)
    d = c.to(device)
    for f in (torch.isnan, torch.isinf, torch.isfinite):
        assert f(d).cpu().equal(f(c)), f
    e = torch.tensor([1 + 1j, 2 + 0j, 3 - 1j], dtype=dtype)
    o = torch.tensor([1 + 1j, 2 + 1j, 3 - 1j], dtype=dtype)
    assert (e.to(device) == o.to(device)).cpu().equal(e == o)
    assert (e.to(device) != o.to(device)).cpu().equal(e != o)
    assert (e.to(device) == 2).cpu().equal(e == 2)
    assert torch.equal(e.to(device), e.to(device)) and not torch.equal(e.to(device), o.to(device))


@pytest.mark.parametrize("dtype", CX)
def test_binary_arithmetic_broadcasting_and_promotion(device, dtype):
    x, y = _rand((4, 1, 5), dtype, 1), _rand((3, 5), dtype, 2)
    dx, dy = x.to(device), y.to(device)
    for f in (torch.add, torch.sub, torch.mul, torch.div, torch.pow):
        _close(f(dx, dy), f(x, y), scale=8)
    _close(torch.add(dx, dy, alpha=2.5), torch.add(x, y, alpha=2.5))
    _close(torch.sub(dx, dy, alpha=1 - 2j), torch.sub(x, y, alpha=1 - 2j))
    for s in (2, -1.5, 2 - 3j):
        _close(dx + s, x + s)
        _close(dx * s, x * s)
        _close(dx / s, x / s)
        _close(s / dx, s / x, scale=4)
        _close(dx - s, x - s)
        _close(s - dx, s - x)
    for e in (2, 3, 0.5, -0.5, -1, 0, 1, 1.5, 1 + 1j):
        _close(dx ** e, x ** e, scale=8)
    _close(2 ** dx, 2 ** x, scale=8)
    r = torch.randn(3, 5)
    _close(dx * r.to(device), x * r)                             # complex64/128 * float32
    assert (dx * r.double().to(device)).dtype == (x * r.double()).dtype   # c64 * f64 -> c128
    _close(dx * r.double().to(device), x * r.double())
    _close(dx + torch.arange(5).to(device), x + torch.arange(5))   # integers promote to complex
    _close(r.to(device) * 1j, r * 1j)                              # real tensor * complex scalar -> c64
    _close(torch.where(r.to(device) > 0, dy, dx[0, 0]), torch.where(r > 0, y, x[0, 0]))
    _close(torch.addcmul(dy, dy, dy, value=0.5), torch.addcmul(y, y, y, value=0.5))
    _close(torch.addcdiv(dy, dy, dy + 3, value=2j), torch.addcdiv(y, y, y + 3, value=2j))
    _close(torch.lerp(dy, dy * 2, 0.25), torch.lerp(y, y * 2, 0.25))
    _close(torch.lerp(dy, dy * 2, 0.5 - 1j), torch.lerp(y, y * 2, 0.5 - 1j))
    src, ix = _rand((3, 5), dtype, 8), torch.tensor([2, 0, 2])
    _close(dy.index_add(0, ix.to(device), src.to(device), alpha=2), y.index_add(0, ix, src, alpha=2))
    _close(dy.index_copy(0, torch.tensor([1, 0, 2]).to(device), src.to(device)), y.index_copy(0, torch.tensor([1, 0, 2]), src))
    z = dy.clone()
    z.mul_(dx[0]).add_(1j).div_(2).neg_().sub_(dy, alpha=2)        # in-place forms
    _close(z, (((y * x[0]) + 1j) / 2).neg() - 2 * y)
    out = torch.empty(0, dtype=dtype, device=device)
    torch.mul(dx, dy, out=out)
    _close(out, x * y)


@pytest.mark.parametrize("dtype", CX)
def test_reductions(device, dtype):
    c = _rand((4, 6, 5), dtype)
    d = c.to(device)
    for kw in ({}, dict(dim=1), dict(dim=(0, 2)), dict(dim=-1, keepdim=True)):
        _close(d.sum(**kw), c.sum(**kw))
        _close(d.mean(**kw), c.mean(**kw))
    _close(d.t().sum(0) if d.dim() == 2 else d.transpose(0, 2).sum(1), c.transpose(0, 2).sum(1))
    p = (c * 0.3 + 1)
    _close(p.to(device).prod(), p.prod(), scale=10)
    _close(p.to(device).prod(1), p.prod(1), scale=10)
    _close(d.cumsum(1), c.cumsum(1))
    _close(p.to(device).cumprod(2), p.cumprod(2), scale=10)
    _close(d.conj().sum(0), c.conj().sum(0))
    assert torch.zeros(0, 3, dtype=dtype, device=device).sum(0).cpu().equal(torch.zeros(3, dtype=dtype))
    for ord in (2, 1, float("inf"), 3):
        _close(torch.linalg.vector_norm(d, ord, dim=1), torch.linalg.vector_norm(c, ord, dim=1))
    _close(d.norm(), c.norm())


@pytest.mark.parametrize("dtype", CX)
def test_matmul(device, dtype):
    a, b = _rand((5, 7), dtype, 1), _rand((7, 3), dtype, 2)
    da, db = a.to(device), b.to(device)
    _close(da @ db, a @ b, scale=4)
    _close(torch.mm(da.conj(), db), a.conj() @ b, scale=4)
    _close(torch.mm(da, db.t().conj().t()), a @ b.t().conj().t(), scale=4)
    _close(da.mH @ da, a.mH @ a, scale=4)
    ba, bb = _rand((2, 5, 7), dtype, 3), _rand((2, 7, 4), dtype, 4)
    _close(torch.bmm(ba.to(device), bb.to(device)), torch.bmm(ba, bb), scale=4)
    _close(torch.matmul(ba.to(device).conj(), bb.to(device)), torch.matmul(ba.conj(), bb), scale=4)
    c = _rand((5, 3), dtype, 5)
    _close(torch.addmm(c.to(device), da, db, beta=0.5, alpha=2), torch.addmm(c, a, b, beta=0.5, alpha=2), scale=4)
    _close(torch.addmm(c.to(device), da, db, beta=0.5j, alpha=2 - 1j), torch.addmm(c, a, b, beta=0.5j, alpha=2 - 1j), scale=4)
    bc = _rand((2, 5, 4), dtype, 7)
    _close(torch.baddbmm(bc.to(device), ba.to(device), bb.to(device), beta=1j, alpha=0.5), torch.baddbmm(bc, ba, bb, beta=1j, alpha=0.5), scale=4)
    e = bc.to(device)
    e.baddbmm_(ba.to(device), bb.to(device), alpha=1 + 1j)
    _close(e, bc.baddbmm(ba, bb, alpha=1 + 1j), scale=4)
    v = _rand((7,), dtype, 6)
    _close(da @ v.to(device), a @ v, scale=4)


# ---- autograd -----------------------------------------------------------------------------------------

def _grads(fn, inputs, device):
    cpu = [t.detach().clone().requires_grad_(True) for t in inputs]
    dev = [t.detach().to(device).requires_grad_(True) for t in inputs]
    fn(*cpu).backward()
    fn(*dev).backward()
    return [(d.grad, c.grad) for d, c in zip(dev, cpu)]


@pytest.mark.parametrize("dtype", CX)
def test_autograd(device, dtype):
    rt = torch.float32 if dtype == torch.complex64 else torch.float64
    x, w = torch.randn(4, 6, 2, dtype=rt), _rand((6,), dtype, 1)

    def f(x, w):
        z = torch.view_as_complex(x) * w
        z = z * z.conj() + z.exp() / (w + 3) - z.sgn() * z.abs()
        return torch.view_as_real(z.tanh() ** 2).sum() + z.angle().sum() + (z @ w.conj()).abs().sum()

    for g_dev, g_cpu in _grads(f, [x, w], device):
        _close(g_dev, g_cpu, scale=20)

    def g(a, b):
        return torch.polar(a.abs() + 1, b).mul(torch.complex(a, b).sigmoid()).real.sum()

    a, b = torch.randn(5, dtype=rt), torch.randn(5, dtype=rt)
    for g_dev, g_cpu in _grads(g, [a, b], device):
        _close(g_dev, g_cpu, scale=20)

    def h(z):
        return torch.view_as_real(z.prod(1) + z.cumsum(0).prod() + z[0].index_select(0, torch.tensor(1, device=z.device))).sum()

    for g_dev, g_cpu in _grads(h, [_rand((3, 4), dtype, 2) * 0.5 + 1], device):
        _close(g_dev, g_cpu, scale=20)


# ---- bad input ----------------------------------------------------------------------------------------

def test_unsupported_complex_ops_raise_and_the_device_stays_usable(device):
    d = torch.tensor([1 + 2j, 3 - 1j], device=device)
    with pytest.raises(RuntimeError, match=r"floor.*ComplexFloat"):
        torch.floor(d)
    with pytest.raises(RuntimeError, match=r"maximum.*ComplexFloat|not implemented for complex"):
        torch.maximum(d, d)
    with pytest.raises(RuntimeError, match=r"amax.*ComplexFloat|not supported on neuron"):
        d.amax()
    with pytest.raises(TypeError, match="ComplexHalf is not supported on neuron"):
        torch.zeros(2, dtype=torch.complex32, device=device)
    with pytest.raises(RuntimeError, match="value cannot be converted"):
        torch.zeros(2, device=device).fill_(1 + 1j)
    assert (d * 2).cpu().equal(torch.tensor([2 + 4j, 6 - 2j]))  # still usable


# ---- a tiny llama with complex rotary embeddings ---------------------------------------------------

def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.h, self.hd = n_heads, dim // n_heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x, freqs_cis):
        B, S, _ = x.shape
        q = self.wq(x).view(B, S, self.h, self.hd)
        k = self.wk(x).view(B, S, self.h, self.hd)
        v = self.wv(x).view(B, S, self.h, self.hd)
        q, k = apply_rotary_emb(q, k, freqs_cis)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(B, S, -1))


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.attn, self.n1, self.n2 = Attention(dim, n_heads), nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.w1, self.w2, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(2 * dim, dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)

    def forward(self, x, freqs_cis):
        h = x + self.attn(self.n1(x), freqs_cis)
        y = self.n2(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class TinyLlama(nn.Module):
    def __init__(self, vocab=64, dim=32, n_heads=4, n_layers=2, max_seq=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_heads) for _ in range(n_layers))
        self.norm, self.out = nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(dim // n_heads, max_seq * 2), persistent=False)

    def forward(self, tokens):
        S = tokens.shape[1]
        h = self.emb(tokens)
        freqs_cis = self.freqs_cis[0:S]
        for layer in self.layers:
            h = layer(h, freqs_cis)
        return self.out(self.norm(h))


def _llama_step(model, tokens, targets):
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    return loss


def _llama_pair(device):
    torch.manual_seed(0)
    cpu = TinyLlama()
    dev = TinyLlama()
    dev.load_state_dict(cpu.state_dict())
    dev.to(device)                                               # moves the complex freqs_cis buffer too
    assert dev.freqs_cis.dtype == torch.complex64 and dev.freqs_cis.device.type == device.type
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    return cpu, dev, tokens, targets


def _check_llama(cpu, dev, tokens, targets, device, run=None):
    lc = _llama_step(cpu, tokens, targets)
    ld = _llama_step(dev if run is None else run, tokens.to(device), targets.to(device))
    torch.testing.assert_close(ld.detach().cpu(), lc.detach(), rtol=1e-5, atol=1e-5)
    pd = dict(dev.named_parameters())
    for name, p in cpu.named_parameters():
        torch.testing.assert_close(pd[name].grad.cpu(), p.grad, rtol=1e-4, atol=2e-5, msg=name)


def test_tiny_llama_complex_rope_forward_backward(device):
    cpu, dev, tokens, targets = _llama_pair(device)
    # the freqs_cis computed on the device too (TorchTitan's init_weights does that)
    _close(precompute_freqs_cis(8, 32).to(device), precompute_freqs_cis(8, 32))
    f = precompute_freqs_cis(8, 32)
    dev_f = torch.polar(torch.ones(32, 4, device=device), torch.outer(torch.arange(32, device=device).float(),
                        (1.0 / (10000.0 ** (torch.arange(0, 8, 2, device=device)[:4].float() / 8)))))
    _close(dev_f, f)
    _check_llama(cpu, dev, tokens, targets, device)


def test_tiny_llama_complex_rope_compiled(device):
    cpu, dev, tokens, targets = _llama_pair(device)
    compiled = torch.compile(dev, backend="neuron")
    _check_llama(cpu, dev, tokens, targets, device, run=compiled)
