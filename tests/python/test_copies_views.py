"""Copies between host and device, dtype casts, non-contiguous tensors and views, against the CPU.

Copies and casts must be bit-exact (rtol=atol=0); every result is compared with the same
operation done on the CPU.
"""

import itertools

import pytest
import torch

DTYPES = [
    torch.float32, torch.float64, torch.bfloat16, torch.float16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
]
FLOATS = {torch.float32, torch.float64, torch.bfloat16, torch.float16}


def exact(actual, expected):
    assert actual.device.type == "cpu"
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def sync(device):
    if device.type != "cpu":
        torch.accelerator.synchronize()


def sample(dtype, shape=(5, 7), seed=0, nonneg=False):
    """Values every dtype holds: fractional floats in (-100, 100), integers, zeros."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return (torch.rand(n, generator=g) > 0.5).reshape(shape)
    x = torch.rand(n, generator=g, dtype=torch.float64) * 200 - 100
    x[::4] = 0
    if nonneg or dtype == torch.uint8:
        x = x.abs()
    if dtype not in FLOATS:
        x = x.trunc()
    return x.reshape(shape).to(dtype)


# ---------------------------------------------------------------------------------- copies
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_h2d_d2h_roundtrip(device, dtype):
    x = sample(dtype)
    d = x.to(device)
    assert d.device == device and d.dtype == dtype and d.shape == x.shape
    exact(d.cpu(), x)
    exact(d.to("cpu"), x)
    # copy_ in both directions into preallocated tensors
    e = torch.empty(x.shape, dtype=dtype, device=device)
    e.copy_(x)
    back = torch.empty_like(x)
    back.copy_(e)
    exact(back, x)


def test_special_shapes(device):
    for x in (torch.empty(0, 3), torch.tensor(3.5), torch.arange(1 << 22, dtype=torch.float32)):
        d = x.to(device)
        assert d.shape == x.shape
        exact(d.cpu(), x)
    assert torch.tensor(3.5).to(device).item() == 3.5
    assert torch.tensor(-7, dtype=torch.int64).to(device).item() == -7
    assert torch.tensor(True).to(device).item() is True


def test_special_float_values(device):
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4e38, -1.5])
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        v = x.to(dt)
        exact(v.to(device).cpu(), v)
    # the sign of -0.0 survives
    assert torch.signbit(torch.tensor(-0.0).to(device).cpu()).item()


def test_d2d_copy(device):
    x = sample(torch.float32, (16, 9))
    a = x.to(device, copy=True)
    assert a.to(device) is a                      # same device: no copy
    b = a.clone()
    assert b.data_ptr() != a.data_ptr()
    c = torch.empty_like(a)
    c.copy_(a)
    a.add_(1)                                     # the copies are independent
    exact(b.cpu(), x)
    exact(c.cpu(), x)
    exact(a.cpu(), x + 1)
    d = torch.zeros(16, 9, dtype=torch.float64, device=device)
    d.copy_(a)                                    # d2d with a cast
    exact(d.cpu(), (x + 1).double())


def test_pinned_memory(device):
    p = torch.empty(1000, pin_memory=True)
    assert p.is_pinned()
    x = torch.randn(1000)
    assert not x.is_pinned()
    xp = x.pin_memory()
    assert xp.is_pinned()
    exact(xp, x)

    # H2D from pinned memory, non_blocking
    d = xp.to(device, non_blocking=True)
    # D2H into pinned memory, non_blocking, then synchronize
    p.copy_(d * 2, non_blocking=True)
    torch.neuron.synchronize()
    exact(p, x * 2)

    out = torch.empty(1000).pin_memory()
    out.copy_(d, non_blocking=True)
    torch.neuron.synchronize()
    exact(out, x)

    h = (d + 1).to("cpu", non_blocking=True)
    torch.neuron.synchronize()
    exact(h, x + 1)


def test_many_non_blocking_d2h_copies(device):
    src = [torch.full((4096,), float(i), device=device) for i in range(16)]
    dst = [torch.empty(4096, pin_memory=True) for _ in range(16)]
    for s, d in zip(src, dst):
        d.copy_(s, non_blocking=True)
    torch.neuron.synchronize()
    for i, d in enumerate(dst):
        exact(d, torch.full((4096,), float(i)))


# ------------------------------------------------------------------------------------ casts
@pytest.mark.parametrize("src,dst", list(itertools.product(DTYPES, DTYPES)),
                         ids=lambda d: str(d).replace("torch.", ""))
def test_cast(device, src, dst):
    x = sample(src, (3, 11), seed=1, nonneg=(dst == torch.uint8))
    expected = x.to(dst)
    d = x.to(device)
    exact(d.to(dst).cpu(), expected)
    # a cast of a non-contiguous source into a non-contiguous destination
    out = torch.zeros(11, 3, dtype=dst, device=device).t()
    out.copy_(d)
    exact(out.cpu(), expected)
    # a cast while copying from the host
    out2 = torch.empty(3, 11, dtype=dst, device=device)
    out2.copy_(x)
    exact(out2.cpu(), expected)


def test_float_special_value_casts(device):
    x = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, 65519.0,
                      70000.0, 3.3895e38, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9, -2.5,
                      # exact ties for bfloat16 (round half to even) and float16
                      1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11])
    for s, t in itertools.product(sorted(FLOATS, key=str), repeat=2):
        v = x.to(s)
        exact(v.to(device).to(t).cpu(), v.to(t))
    # float -> bool: nan, inf and -0.0
    exact(x.to(device).to(torch.bool).cpu(), x.to(torch.bool))


# ---------------------------------------------------------------------- non-contiguous data
def _noncontig_views(t):
    """(name, view) pairs of a 2-D tensor t of shape (8, 12)."""
    return [
        ("transposed", t.t()),
        ("stepped", t[::2, 1::3]),
        ("stepped-offset", t[1:7:3, ::5]),
        ("column", t[:, 5]),
        ("expanded", t[3:4, :].expand(6, 12)),
        ("expanded-0-stride-col", t[:, 2:3].expand(8, 4)),
        ("permuted-3d", t.reshape(2, 4, 12).permute(2, 0, 1)),
        ("offset", t[2:, 3:]),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool],
                         ids=str)
def test_noncontiguous_sources(device, dtype):
    x = sample(dtype, (8, 12), seed=3)
    d = x.to(device)
    for (name, cv), (_, dv) in zip(_noncontig_views(x), _noncontig_views(d)):
        assert dv.stride() == cv.stride(), name
        exact(dv.cpu(), cv)                               # D2H of a strided view
        exact(dv.contiguous().cpu(), cv.contiguous())     # D2D gather
        assert dv.contiguous().is_contiguous()
        exact(dv.clone().cpu(), cv.clone())
        exact(cv.to(device).cpu(), cv)                    # H2D of a strided CPU view
        dst = torch.empty(cv.shape, dtype=dtype, device=device)
        dst.copy_(dv)
        exact(dst.cpu(), cv)


def test_noncontiguous_destinations(device):
    src_cpu = sample(torch.float32, (6, 4), seed=4)
    src = src_cpu.to(device)

    def both(fn):
        base_c = torch.zeros(12, 8)
        base_d = torch.zeros(12, 8, device=device)
        fn(base_c, src_cpu)
        fn(base_d, src)
        exact(base_d.cpu(), base_c)
        base_d2 = torch.zeros(12, 8, device=device)
        fn(base_d2, src_cpu)             # host source into a strided device destination
        exact(base_d2.cpu(), base_c)

    both(lambda b, s: b[::2, ::2].copy_(s))                  # stepped destination
    both(lambda b, s: b[:4, :6].copy_(s.t()))               # transposed source, plain dest
    both(lambda b, s: b.t()[1:5, 2:8].copy_(s.t()))          # transposed destination
    both(lambda b, s: b[2:8, 3:7].copy_(s))                  # offset destination
    both(lambda b, s: b[::3, 1::2].copy_(s[0]))              # broadcast source row

    # device destination, strided host destination
    host = torch.zeros(8, 12)
    host.t()[:4, :6].copy_(src.t())
    ref = torch.zeros(8, 12)
    ref.t()[:4, :6].copy_(src_cpu.t())
    exact(host, ref)


def test_setitem(device):
    x = torch.zeros(6, 5)
    d = x.to(device)
    for t in (x, d):
        t[1] = 3.0
        t[:, 2] = torch.arange(6.0)
        t[::2, ::2] = -1.0
        t[4, 1:4] = torch.tensor([7.0, 8.0, 9.0])     # a CPU tensor into a device slice
        t[5] = t[0] + 0.5
    exact(d.cpu(), x)


# ------------------------------------------------------------------------------------ views
def _check_view(base_d, view_d, base_c, view_c, name):
    assert view_d.shape == view_c.shape, name
    assert view_d.stride() == view_c.stride(), name
    assert view_d.storage_offset() == view_c.storage_offset(), name
    assert view_d.untyped_storage().data_ptr() == base_d.untyped_storage().data_ptr(), \
        f"{name}: not a view of its base (a copy?)"
    assert view_d.device == base_d.device, name
    exact(view_d.cpu(), view_c)


VIEWS = [
    # (name, fn, writable)
    ("view", lambda t: t.view(6, 20), True),
    ("view-neg", lambda t: t.view(-1, 8), True),
    ("view_as", lambda t: t.view_as(torch.empty(4, 30)), True),
    ("reshape", lambda t: t.reshape(2, 2, 30), True),
    ("transpose", lambda t: t.transpose(0, 2), True),
    ("permute", lambda t: t.permute(2, 0, 1), True),
    ("select", lambda t: t.select(1, 2), True),
    ("index-int", lambda t: t[2], True),
    ("slice", lambda t: t[:, 1:4, ::3], True),
    ("narrow", lambda t: t.narrow(2, 1, 5), True),
    ("expand", lambda t: t[:, :1, :].expand(4, 5, 6), False),
    ("unsqueeze", lambda t: t.unsqueeze(1), True),
    ("squeeze", lambda t: t[:, :1].squeeze(1), True),
    ("squeeze-all", lambda t: t[:1, :, :1].squeeze(), True),
    ("flatten", lambda t: t.flatten(), True),
    ("flatten-partial", lambda t: t.flatten(1), True),
    ("unflatten", lambda t: t.unflatten(2, (2, 3)), True),
    ("diagonal", lambda t: t.diagonal(0, 1, 2), True),
    ("diagonal-offset", lambda t: t.diagonal(1, 0, 1), True),
    ("as_strided", lambda t: t.as_strided((3, 4), (7, 2), 5), True),
    ("unfold-overlapping", lambda t: t.unfold(2, 3, 1), False),
    ("unfold-disjoint", lambda t: t.unfold(2, 2, 2), True),
    ("split", lambda t: t.split(2, dim=2)[1], True),
    ("split-sizes", lambda t: t.split([1, 3, 2], dim=2)[2], True),
    ("chunk", lambda t: t.chunk(2, dim=0)[1], True),
    ("unbind", lambda t: t.unbind(1)[3], True),
    ("t", lambda t: t[0].t(), True),
    ("T-2d", lambda t: t[:, 1].T, True),
    ("mT", lambda t: t.mT, True),
    ("movedim", lambda t: t.movedim(0, -1), True),
    ("swapaxes", lambda t: t.swapaxes(0, 1), True),
    ("chain", lambda t: t[1:].transpose(0, 1)[::2].narrow(2, 1, 4).unsqueeze(0), True),
    ("view-dtype", lambda t: t.view(torch.int32), True),
    ("detach", lambda t: t.detach(), True),
    ("alias-index-ellipsis", lambda t: t[..., 1], True),
    ("none-index", lambda t: t[None, :, 2], True),
]


@pytest.mark.parametrize("name,fn,writable", VIEWS, ids=[v[0] for v in VIEWS])
def test_view(device, name, fn, writable):
    base_c = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(5))
    base_d = base_c.to(device)
    view_c, view_d = fn(base_c), fn(base_d)
    _check_view(base_d, view_d, base_c, view_c, name)
    if not writable:
        return
    # in-place on the view writes through to the base
    if view_c.dtype == torch.int32:
        view_c.add_(3)
        view_d.add_(3)
    else:
        view_c.mul_(2).add_(1)
        view_d.mul_(2).add_(1)
    exact(base_d.cpu(), base_c)
    exact(view_d.cpu(), view_c)
    # and in-place on the base shows through the view
    base_c.sub_(0.25)
    base_d.sub_(0.25)
    exact(view_d.cpu(), view_c)


def test_view_fill_and_zero_write_through(device):
    base_c = torch.arange(60.0).reshape(6, 10)
    base_d = base_c.to(device)
    for b in (base_c, base_d):
        b[1:4, ::3].fill_(-1)
        b.t()[2].zero_()
        b.diagonal().copy_(torch.arange(6.0) * 100)
        b[5].unfold(0, 2, 2)[:, 1].fill_(42)
    exact(base_d.cpu(), base_c)


def test_views_of_views_share_storage(device):
    x = torch.zeros(3, 4, device=device)
    v1 = x.view(12)
    v2 = v1[2:10].view(2, 4)
    v3 = v2.t()
    v3[1, 0] = 5.0
    assert x[0, 3].item() == 5.0
    assert v1[3].item() == 5.0
    assert v2._base is x
    assert v3._base is x
