"""mm / addmm / bmm / linear against PyTorch CPU on the shapes of the GEMM drivers: the small-M driver (all
of A packed once, B per column chunk: M up to a few hundred), M not a multiple of the 14-row tile, K over
several 1024-k slices with an odd last slice (bf16 pairs; A read in place when K is even), transposed operands (nn.Linear weights), a bias,
and the shared-packing driver for a larger M."""
import pytest
import torch
import torch.nn.functional as F

import torchneuron  # noqa: F401
from torchneuron import _C

TOL = {torch.float32: (2e-4, 2e-4), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
SHAPES = [(128, 768, 768), (45, 300, 1031), (3, 129, 600), (130, 200, 1100), (300, 700, 520), (700, 96, 64)]


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


@pytest.fixture(autouse=True)
def _no_fallback():
    before = set(_C._fallback_ops())
    yield
    assert set(_C._fallback_ops()) == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_mm(m, n, k, dtype):
    a, b = _rand((m, k), dtype, 0), _rand((k, n), dtype, 1)
    got = torch.mm(a.to("neuron"), b.to("neuron")).cpu()
    want = torch.mm(a.float(), b.float()).to(dtype)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), atol=atol * k ** 0.5, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(128, 768, 768), (45, 300, 1031)])
def test_linear_and_addmm(m, n, k, dtype):
    x, w, bias = _rand((m, k), dtype, 0), _rand((n, k), dtype, 1), _rand((n,), dtype, 2)
    atol, rtol = TOL[dtype]
    got = F.linear(x.to("neuron"), w.to("neuron"), bias.to("neuron")).cpu()
    want = F.linear(x.float(), w.float(), bias.float()).to(dtype)
    torch.testing.assert_close(got.float(), want.float(), atol=atol * k ** 0.5, rtol=rtol)
    got = torch.addmm(bias.to("neuron"), x.to("neuron"), w.t().to("neuron"), beta=0.5, alpha=-2).cpu()
    want = torch.addmm(bias.float(), x.float(), w.t().float(), beta=0.5, alpha=-2).to(dtype)
    torch.testing.assert_close(got.float(), want.float(), atol=2 * atol * k ** 0.5, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_and_transposed_a(dtype):
    a, b = _rand((3, 45, 301), dtype, 0), _rand((3, 301, 200), dtype, 1)
    atol, rtol = TOL[dtype]
    got = torch.bmm(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(got.float(), torch.bmm(a.float(), b.float()).to(dtype).float(), atol=atol * 20, rtol=rtol)
    at = _rand((768, 128), dtype, 2)  # A stored transposed (column-major)
    bt = _rand((768, 768), dtype, 3)
    got = torch.mm(at.to("neuron").t(), bt.to("neuron")).cpu()
    torch.testing.assert_close(got.float(), torch.mm(at.float().t(), bt.float()).to(dtype).float(), atol=atol * 28, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bshape", ["row", "2d", "1xN", "Mx1", "scalar"])
@pytest.mark.parametrize("m,n,k", [(128, 768, 768), (1, 300, 70), (1000, 100, 300)])
def test_addmm_bias_layouts(m, n, k, dtype, bshape):
    """addmm's bias goes into the GEMM kernel (no separate copy): every broadcast of it."""
    shape = {"row": (n,), "2d": (m, n), "1xN": (1, n), "Mx1": (m, 1), "scalar": ()}[bshape]
    a, b, bias = _rand((m, k), dtype, 0), _rand((k, n), dtype, 1), _rand(shape, dtype, 2)
    got = torch.addmm(bias.to("neuron"), a.to("neuron"), b.to("neuron"), beta=0.75, alpha=0.5).cpu()
    want = torch.addmm(bias.double(), a.double(), b.double(), beta=0.75, alpha=0.5).to(dtype)
    atol, rtol = TOL.get(dtype, (1e-9, 1e-9))
    torch.testing.assert_close(got.double(), want.double(), atol=atol * k ** 0.5, rtol=rtol)


def test_addmm_out_and_inplace_with_bias():
    a, b, bias = _rand((45, 301), torch.float32, 0), _rand((301, 200), torch.float32, 1), _rand((200,), torch.float32, 2)
    want = torch.addmm(bias, a, b)
    an, bn = a.to("neuron"), b.to("neuron")
    out = torch.empty(45, 200, device="neuron")
    torch.addmm(bias.to("neuron"), an, bn, out=out)
    torch.testing.assert_close(out.cpu(), want, atol=1e-3, rtol=1e-4)
    c = bias.expand(45, 200).contiguous()
    cn = c.to("neuron")
    cn.addmm_(an, bn, beta=2.0)  # C is its own bias: read in place
    torch.testing.assert_close(cn.cpu(), torch.addmm(c, a, b, beta=2.0), atol=1e-3, rtol=1e-4)
    nan_bias = torch.full((200,), float("nan"))
    got = torch.addmm(nan_bias.to("neuron"), an, bn, beta=0).cpu()  # beta = 0 ignores the bias
    torch.testing.assert_close(got, torch.mm(a, b), atol=1e-3, rtol=1e-4)
    x = _rand((2, 7, 301), torch.bfloat16, 3)
    w, wb = _rand((200, 301), torch.bfloat16, 4), _rand((200,), torch.bfloat16, 5)
    got = F.linear(x.to("neuron"), w.to("neuron"), wb.to("neuron")).cpu()
    torch.testing.assert_close(got.float(), F.linear(x.float(), w.float(), wb.float()), atol=0.5, rtol=2e-2)


# The shared driver with all of packed A shared (bf16/f16 C, packed A up to 4 MiB, too big for the
# small-M driver or too few column panels for it): M past the 14-row tile (1030 = 73 * 14 + 8), K odd,
# K over two and three 1024-k slices, N under one 32-column panel.
SHARED_A_SHAPES = [(600, 96, 1100), (1030, 33, 515), (200, 40, 2100)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,n,k", SHARED_A_SHAPES)
def test_shared_a_driver(m, n, k, dtype):
    a, b, bias = _rand((m, k), dtype, 0), _rand((k, n), dtype, 1), _rand((n,), dtype, 2)
    atol, rtol = TOL[dtype]
    tol = dict(atol=2 * atol * k ** 0.5, rtol=rtol)
    got = torch.mm(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(got.float(), torch.mm(a.float(), b.float()).to(dtype).float(), **tol)
    # transposed operands (A column-major, B an nn.Linear weight) and a bias
    at, w = a.t().contiguous(), b.t().contiguous()
    got = torch.addmm(bias.to("neuron"), at.to("neuron").t(), w.to("neuron").t(), beta=0.5, alpha=-2).cpu()
    want = torch.addmm(bias.float(), a.float(), b.float(), beta=0.5, alpha=-2).to(dtype)
    torch.testing.assert_close(got.float(), want.float(), **tol)
    # C read in place (beta != 0, no bias) and a strided (sliced) A
    c = _rand((m, n), dtype, 3)
    cn = c.to("neuron")
    a2 = _rand((m, k + 5), dtype, 4)
    cn.addmm_(a2.to("neuron")[:, 2:k + 2], b.to("neuron"), beta=0.75)
    want = torch.addmm(c.float(), a2[:, 2:k + 2].float(), b.float(), beta=0.75).to(dtype)
    torch.testing.assert_close(cn.cpu().float(), want.float(), **tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(600, 96, 1100), (1030, 33, 515)])
def test_shared_a_driver_batched(m, n, k, dtype):
    """bmm over 3 entries through the shared driver: A (in place or packed and shared) per batch entry."""
    a, b = _rand((3, m, k), dtype, 0), _rand((3, k, n), dtype, 1)
    atol, rtol = TOL[dtype]
    got = torch.bmm(a.to("neuron"), b.to("neuron")).cpu()
    torch.testing.assert_close(got.float(), torch.bmm(a.float(), b.float()).to(dtype).float(),
                               atol=2 * atol * k ** 0.5, rtol=rtol)
