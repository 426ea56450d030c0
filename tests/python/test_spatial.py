"""Native spatial ops (csrc/torch/ops_spatial.cpp): pooling, interpolation and padding, forward and
backward, against PyTorch's CPU on shapes/modes the OpInfo samples do not all reach (channels_last
and sliced inputs, out= variants, unbatched inputs, NaN and tie handling of max pooling), clean
errors on bad input, and no CPU fallback."""

import pytest
import torch
import torch.nn.functional as F


def _dev(t):
    return t.to("neuron")


def _tol(dtype):
    return {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-2),
            torch.float16: (2e-3, 1e-3)}.get(dtype, (0, 0))


def _layouts(x):
    """The input as given, channels_last (4-d/5-d) and a strided slice of a larger tensor."""
    out = [x]
    if x.dim() == 4:
        out.append(x.contiguous(memory_format=torch.channels_last))
    if x.dim() == 5:
        out.append(x.contiguous(memory_format=torch.channels_last_3d))
    big = torch.zeros(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype)
    big[..., ::2] = x
    out.append(big[..., ::2])
    return out


def _parity(fn, x, grad=True):
    """fn on CPU and on neuron for each layout of x: outputs (all of a tuple) and the input gradient."""
    rtol, atol = _tol(x.dtype)
    for xl in _layouts(x):
        xc = xl.clone().requires_grad_(grad)
        xd = _dev(xl.detach()).requires_grad_(grad)
        yc, yd = fn(xc), fn(xd)
        ycs = yc if isinstance(yc, tuple) else (yc,)
        yds = yd if isinstance(yd, tuple) else (yd,)
        for a, b in zip(ycs, yds):
            torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol, equal_nan=True)
        if grad:
            g = torch.randn_like(ycs[0])
            (gc,) = torch.autograd.grad(ycs[0], xc, g)
            (gd,) = torch.autograd.grad(yds[0], xd, _dev(g))
            torch.testing.assert_close(gd.cpu(), gc, rtol=10 * rtol, atol=10 * atol)


POOL_CASES = {
    "max1d": lambda t: F.max_pool1d(t, 3, 2, 1, return_indices=True),
    "max2d": lambda t: F.max_pool2d(t, (3, 2), (2, 1), (1, 1), dilation=(1, 2), return_indices=True),
    "max2d ceil": lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True),
    "avg2d": lambda t: F.avg_pool2d(t, 3, 2, 1),
    "avg2d ceil no pad count": lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg2d divisor": lambda t: F.avg_pool2d(t, (2, 3), 1, (1, 1), divisor_override=4),
    "avg1d": lambda t: F.avg_pool1d(t, 4, 3, 2, ceil_mode=True),
    "adaptive avg2d": lambda t: F.adaptive_avg_pool2d(t, (4, 3)),
    "adaptive max2d": lambda t: F.adaptive_max_pool2d(t, (5, 4), return_indices=True),
    "adaptive avg1d": lambda t: F.adaptive_avg_pool1d(t, 5),
    "lp2d": lambda t: F.lp_pool2d(t.abs() + 0.1, 2, 3, 2),
}


@pytest.mark.parametrize("name", sorted(POOL_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_pool_2d_matches_cpu(name, dtype):
    x = torch.randn(2, 3, 9, 11).to(dtype)
    if "1d" in name:
        x = x.flatten(2)
    _parity(POOL_CASES[name], x)


POOL3D_CASES = {
    "max3d": lambda t: F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 1), return_indices=True),
    "avg3d": lambda t: F.avg_pool3d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg3d divisor": lambda t: F.avg_pool3d(t, 2, 2, 1, divisor_override=3),
    "adaptive avg3d": lambda t: F.adaptive_avg_pool3d(t, (3, 2, 4)),
    "adaptive max3d": lambda t: F.adaptive_max_pool3d(t, (3, 2, 4), return_indices=True),
}


@pytest.mark.parametrize("name", sorted(POOL3D_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pool_3d_matches_cpu(name, dtype):
    _parity(POOL3D_CASES[name], torch.randn(2, 2, 5, 6, 7).to(dtype))


def test_unbatched_and_empty_batch():
    for shape in [(3, 8, 9), (0, 3, 8, 9)]:
        x = torch.randn(*shape)
        for fn in (lambda t: F.max_pool2d(t, 2, return_indices=True), lambda t: F.avg_pool2d(t, 3, 1, 1),
                   lambda t: F.interpolate(t.unsqueeze(0) if t.dim() == 3 else t, scale_factor=2, mode="bilinear"),
                   lambda t: F.pad(t, (1, 2, 2, 1), mode="reflect")):
            _parity(fn, x, grad=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.int8])
def test_max_pool_ties_and_nan_indices_match_cpu(dtype):
    x = torch.randint(0, 3, (2, 3, 8, 8)).to(dtype)  # many ties: the first max wins
    if dtype.is_floating_point:
        x[0, 0, 1, 1] = float("nan")
        x[1, 2, 4:6, 4:6] = float("nan")  # several NaNs in one window: the CPU keeps the last
        x[1, 1] = float("-inf")  # all -inf windows: index of the first element
    for args in [(2, 2), (3, 2, 1), (3, 1, 1, 2)]:
        v, i = F.max_pool2d(x, *args, return_indices=True)
        vd, id_ = F.max_pool2d(_dev(x), *args, return_indices=True)
        assert torch.equal(id_.cpu(), i)
        torch.testing.assert_close(vd.cpu(), v, equal_nan=True, rtol=0, atol=0)


def test_max_unpool_roundtrip():
    x = torch.randn(2, 3, 8, 10, requires_grad=True)
    y, i = F.max_pool2d(x, 2, return_indices=True)
    xd = _dev(x.detach()).requires_grad_()
    yd, id_ = F.max_pool2d(xd, 2, return_indices=True)
    u, ud = F.max_unpool2d(y, i, 2), F.max_unpool2d(yd, id_, 2)
    torch.testing.assert_close(ud.cpu(), u)
    g = torch.randn_like(u)
    torch.testing.assert_close(torch.autograd.grad(ud, xd, _dev(g))[0].cpu(), torch.autograd.grad(u, x, g)[0])
    x3 = torch.randn(1, 2, 4, 6, 6)
    y3, i3 = F.max_pool3d(x3, 2, return_indices=True)
    torch.testing.assert_close(F.max_unpool3d(_dev(y3), _dev(i3), 2).cpu(), F.max_unpool3d(y3, i3, 2))


INTERP_CASES = [
    ("nearest", None, (2, 3, 7), dict(size=12)),
    ("nearest", None, (2, 3, 7, 9), dict(scale_factor=(1.7, 0.6))),
    ("nearest-exact", None, (2, 3, 7, 9), dict(size=(4, 20))),
    ("nearest", None, (1, 2, 3, 4, 5), dict(scale_factor=2)),
    ("nearest-exact", None, (1, 2, 3, 4, 5), dict(size=(5, 3, 8))),
    ("linear", False, (2, 3, 7), dict(size=15)),
    ("linear", True, (2, 3, 7), dict(scale_factor=0.55)),
    ("bilinear", False, (2, 3, 7, 9), dict(size=(13, 4))),
    ("bilinear", True, (2, 3, 7, 9), dict(scale_factor=(2.3, 1.5))),
    ("bilinear", False, (2, 3, 7, 9), dict(scale_factor=(2.3, 1.5), recompute_scale_factor=True)),
    ("bicubic", False, (2, 3, 7, 9), dict(size=(11, 5))),
    ("bicubic", True, (2, 3, 7, 9), dict(scale_factor=1.8)),
    ("trilinear", False, (1, 2, 3, 4, 5), dict(size=(6, 2, 9))),
    ("trilinear", True, (1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2.0, 0.7))),
    ("area", None, (2, 3, 10, 9), dict(size=(4, 6))),
    ("area", None, (1, 2, 6, 7, 8), dict(size=(3, 4, 5))),
]


@pytest.mark.parametrize("mode, ac, shape, kw", INTERP_CASES,
                         ids=[f"{c[0]}-{c[1]}-{len(c[2])}d-{i}" for i, c in enumerate(INTERP_CASES)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_interpolate_matches_cpu(mode, ac, shape, kw, dtype):
    x = torch.randn(*shape).to(dtype)
    _parity(lambda t: F.interpolate(t, mode=mode, align_corners=ac, **kw), x)


@pytest.mark.parametrize("channels", [1, 3, 4, 5])
def test_interpolate_uint8_is_bit_exact(channels):
    """uint8 nearest copies; uint8 bilinear/bicubic follow ATen's fixed-point (Pillow) path exactly,
    whichever CPU kernel (AVX for <= 4 channels, separable generic otherwise) produced the reference."""
    x = torch.randint(0, 256, (2, channels, 7, 9), dtype=torch.uint8)
    for mode, ac in (("nearest", None), ("nearest-exact", None), ("bilinear", False), ("bilinear", True),
                     ("bicubic", False), ("bicubic", True)):
        for kw in (dict(size=(13, 4)), dict(scale_factor=1.7), dict(size=(7, 20)), dict(size=(3, 9))):
            want = F.interpolate(x, mode=mode, align_corners=ac, **kw)
            assert torch.equal(F.interpolate(_dev(x), mode=mode, align_corners=ac, **kw).cpu(), want), (mode, ac, kw)


PAD_CASES = [
    ("reflect", (2, 3, 7), (3, 2)),
    ("reflect", (2, 3, 6, 7), (2, 3, 5, 1)),
    ("reflect", (1, 2, 4, 5, 6), (1, 2, 3, 0, 2, 1)),
    ("replicate", (2, 3, 7), (4, 9)),
    ("replicate", (2, 3, 6, 7), (2, -3, 5, 1)),
    ("replicate", (1, 2, 4, 5, 6), (-1, 2, 3, 0, 2, -2)),
    ("circular", (2, 3, 6, 7), (2, 3, 1, 4)),
    ("reflect", (3, 6, 7), (1, 2, 3, 4)),  # unbatched
]


@pytest.mark.parametrize("mode, shape, pad", PAD_CASES, ids=[f"{c[0]}-{len(c[1])}d-{i}" for i, c in enumerate(PAD_CASES)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_pad_matches_cpu(mode, shape, pad, dtype):
    _parity(lambda t: F.pad(t, pad, mode=mode), torch.randn(*shape).to(dtype))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8])
def test_pad_integer_dtypes(dtype):
    x = torch.randint(0, 100, (2, 3, 5, 6)).to(dtype)
    for mode in ("reflect", "replicate", "circular"):
        assert torch.equal(F.pad(_dev(x), (2, 1, 3, 2), mode=mode).cpu(), F.pad(x, (2, 1, 3, 2), mode=mode))


def test_out_variants_fill_strided_out():
    x = torch.randn(2, 3, 8, 8)
    out = torch.empty(2, 3, 8, 4, 4).select(2, 1)  # non-contiguous out
    outd = _dev(torch.empty(2, 3, 8, 4, 4)).select(2, 1)
    idx, idxd = torch.empty(0, dtype=torch.long), _dev(torch.empty(0, dtype=torch.long))
    torch.ops.aten.max_pool2d_with_indices.out(x, [2], [2], [0], [1], False, out=out, indices=idx)
    torch.ops.aten.max_pool2d_with_indices.out(_dev(x), [2], [2], [0], [1], False, out=outd, indices=idxd)
    torch.testing.assert_close(outd.cpu(), out)
    assert torch.equal(idxd.cpu(), idx)
    r, rd = torch.empty(0), _dev(torch.empty(0))
    torch.ops.aten.upsample_bilinear2d.out(x, [5, 11], False, None, None, out=r)
    torch.ops.aten.upsample_bilinear2d.out(_dev(x), [5, 11], False, None, None, out=rd)
    torch.testing.assert_close(rd.cpu(), r)


BAD_INPUT = {
    "max_pool2d pad > half kernel": (lambda t: F.max_pool2d(t, 2, 1, 2), "pad should be"),
    "max_pool2d kernel 0": (lambda t: F.max_pool2d(t, 0, 1), "kernel size should be greater than zero"),
    "max_pool2d output too small": (lambda t: F.max_pool2d(t, 9), "too small"),
    "avg_pool2d divisor 0": (lambda t: F.avg_pool2d(t, 2, divisor_override=0), "divisor"),
    "avg_pool3d on 3-d": (lambda t: F.avg_pool3d(t[0], 2), "4D or 5D"),
    "adaptive_max_pool2d bad size": (lambda t: F.adaptive_max_pool2d(t, (2, 3, 4)), "adaptive_max_pool2d"),
    "max_unpool2d bad index": (lambda t: F.max_unpool2d(t, torch.full_like(t, 1000, dtype=torch.long), 2), "invalid max index"),
    "max_unpool2d shape mismatch": (lambda t: F.max_unpool2d(t, torch.zeros(1, dtype=torch.long, device=t.device), 2), "(?i)shape of indices"),
    "reflect pad >= size": (lambda t: F.pad(t, (8, 1, 0, 0), mode="reflect"), "Padding size should be less than"),
    "replicate pad too negative": (lambda t: F.pad(t, (-5, -5, 0, 0), mode="replicate"), "negative dimension|too small"),
    "upsample output size mismatch": (lambda t: torch.ops.aten.upsample_nearest2d(t, [4]), "output_size"),
    "upsample bad input size": (lambda t: torch.ops.aten.upsample_bilinear2d_backward(t, [8, 8], [1, 2, 4], False), "input_size"),
    "upsample grad shape": (lambda t: torch.ops.aten.upsample_bilinear2d_backward(t, [3, 3], [2, 3, 7, 8], False), "grad_output"),
    "float interpolation of int": (lambda t: F.interpolate(t.long(), scale_factor=2, mode="bilinear"), "not implemented"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_is_a_clean_error(name):
    fn, msg = BAD_INPUT[name]
    x = torch.randn(2, 3, 7, 8)
    with pytest.raises(RuntimeError, match=msg) as cpu_err:
        fn(x)
    with pytest.raises(RuntimeError, match=msg) as dev_err:
        fn(_dev(x)).cpu()
        torch.neuron.synchronize()
    del cpu_err, dev_err
    torch.neuron.synchronize()  # the device is usable again
    assert torch.equal(F.max_pool2d(_dev(x), 2).cpu(), F.max_pool2d(x, 2))


def test_bad_indices_fail_on_the_device():
    """Indices the CPU does not check (max pooling backward) or checks (unpooling) fail the kernel:
    a clean error at the next synchronization, no write outside the tensor."""
    x = _dev(torch.randn(2, 3, 6, 8))
    g = _dev(torch.randn(2, 3, 3, 4))
    bad = _dev(torch.full((2, 3, 3, 4), 99, dtype=torch.long))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.ops.aten.max_pool2d_with_indices_backward(g, x, [2], [2], [0], [1], False, bad).cpu()
    torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="adaptive_max_pool2d_backward.*out of bounds"):
        torch.ops.aten.adaptive_max_pool2d_backward(g, x, bad * -1).cpu()
    torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="invalid max index"):
        F.max_unpool2d(g, bad, 2).cpu()
    torch.neuron.synchronize()


def test_spatial_ops_are_native(neuron_ops):
    x = _dev(torch.randn(2, 3, 8, 9)).requires_grad_()
    x3 = _dev(torch.randn(1, 2, 4, 5, 6)).requires_grad_()
    outs = [F.max_pool2d(x, 2), F.max_pool1d(x.flatten(2), 3), F.avg_pool2d(x, 3, 1, 1), F.adaptive_avg_pool2d(x, 3),
            F.adaptive_max_pool2d(x, 4), F.max_pool3d(x3, 2), F.avg_pool3d(x3, 2), F.adaptive_avg_pool3d(x3, 2),
            F.adaptive_max_pool3d(x3, 2)]
    for mode in ("nearest", "nearest-exact", "bilinear", "bicubic", "area"):
        outs.append(F.interpolate(x, scale_factor=1.5, mode=mode))
    for mode in ("nearest", "linear"):
        outs.append(F.interpolate(x.flatten(2), scale_factor=1.5, mode=mode))
    for mode in ("nearest", "trilinear"):
        outs.append(F.interpolate(x3, scale_factor=1.5, mode=mode))
    for mode in ("reflect", "replicate", "circular"):
        outs.append(F.pad(x, (1, 2, 2, 1), mode=mode))
        outs.append(F.pad(x.flatten(2), (1, 2), mode=mode))
        outs.append(F.pad(x3, (1, 1, 1, 1, 1, 1), mode=mode))
    y, i = F.max_pool2d(x, 2, return_indices=True)
    outs.append(F.max_unpool2d(y, i, 2, output_size=x.shape[-2:]))
    sum(o.sum() for o in outs).backward()
    torch.neuron.synchronize()
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


@pytest.mark.parametrize("shape, groups", [((2, 6, 4, 5), 3), ((3, 8, 5), 4), ((1, 4, 2, 3, 2), 2), ((0, 6, 2, 2), 2)])
def test_channel_shuffle_matches_cpu(shape, groups, neuron_ops):
    x = torch.randn(*shape)
    for xl in _layouts(x):
        assert torch.equal(F.channel_shuffle(_dev(xl), groups).cpu(), F.channel_shuffle(xl, groups))
    with pytest.raises(RuntimeError, match="divisible by groups"):
        F.channel_shuffle(_dev(x), 5)
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_grid_sample_2d_matches_cpu(mode, padding_mode, dtype, neuron_ops):
    """Forward and both gradients; grid points outside [-1, 1] exercise the padding modes; bf16
    follows ATen's vectorized kernel operation by operation."""
    torch.manual_seed(1)
    x = torch.randn(2, 3, 5, 7).to(dtype)
    grid = (torch.rand(2, 4, 6, 2) * 2.6 - 1.3).to(dtype)
    rtol, atol = _tol(dtype)
    for ac in (False, True):
        for xl in (x, x.contiguous(memory_format=torch.channels_last)):
            xc, gc = xl.clone().requires_grad_(), grid.clone().requires_grad_()
            xd, gd = _dev(xl).requires_grad_(), _dev(grid).requires_grad_()
            y = F.grid_sample(xc, gc, mode=mode, padding_mode=padding_mode, align_corners=ac)
            yd = F.grid_sample(xd, gd, mode=mode, padding_mode=padding_mode, align_corners=ac)
            torch.testing.assert_close(yd.cpu(), y, rtol=rtol, atol=atol)
            go = torch.randn_like(y)
            want = torch.autograd.grad(y, (xc, gc), go)
            got = torch.autograd.grad(yd, (xd, gd), _dev(go))
            for a, b in zip(got, want):
                torch.testing.assert_close(a.cpu(), b, rtol=10 * rtol, atol=10 * atol)
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


def test_grid_sample_bad_input():
    x, grid = torch.randn(2, 3, 5, 7), torch.rand(2, 4, 6, 2)
    for args, msg in [((x, grid[:1]), "same batch size"), ((x, grid[..., :1]), "grid"), ((x[0], grid), "batch size|4-D|4D")]:
        with pytest.raises(RuntimeError, match=msg):
            F.grid_sample(*args, align_corners=False)
        with pytest.raises(RuntimeError, match=msg):
            F.grid_sample(*(_dev(a) for a in args), align_corners=False)


# [h-cnn] rows wide enough for the AVX-512 max-pool kernel's 16-output blocks (pool_avx512.c): stride 1, 2
# (permuted loads) and 3 (gathers), padding, dilation, ceil_mode overhang, odd sizes, sliced input; values,
# indices (ties: first max; NaN: last NaN; all -inf windows) and the backward scatter equal the CPU's.
WIDE_MAX_CASES = [
    dict(kernel_size=2, stride=2),
    dict(kernel_size=2, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 3), padding=(0, 1)),
    dict(kernel_size=3, stride=2, padding=1, dilation=2),
    dict(kernel_size=(3, 4), stride=(2, 5), padding=(1, 2), dilation=(1, 2), ceil_mode=True),
]


@pytest.mark.parametrize("case", range(len(WIDE_MAX_CASES)))
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_wide_rows_match_cpu(case, ties):
    import torchneuron

    kw = WIDE_MAX_CASES[case]
    g = torch.Generator().manual_seed(case)
    if ties:
        x = torch.randint(0, 3, (2, 3, 13, 71), generator=g).float()
        x[0, 1, 2:6, 10:40] = float("-inf")
        x[1, 0, 3, 5:60:7] = float("nan")
        x[1, 2, 4:6, 30:34] = float("nan")
    else:
        x = torch.randn(2, 3, 13, 71, generator=g)
    for xl in (x, torch.cat([x, x], -1)[..., 1::2][..., :71], x.transpose(2, 3).contiguous().transpose(2, 3)):
        xc = xl.clone().requires_grad_(True)
        xd = _dev(xl.detach()).requires_grad_(True)
        v, i = F.max_pool2d(xc, return_indices=True, **kw)
        vd, id_ = F.max_pool2d(xd, return_indices=True, **kw)
        assert torch.equal(id_.cpu(), i), kw
        torch.testing.assert_close(vd.cpu(), v, equal_nan=True, rtol=0, atol=0)
        gy = torch.randn(v.shape, generator=g)
        (gc,) = torch.autograd.grad(v, xc, gy)
        (gd,) = torch.autograd.grad(vd, xd, _dev(gy))
        torch.testing.assert_close(gd.cpu(), gc, rtol=0, atol=0)
    assert not {o for o in torchneuron._C._fallback_ops() if "max_pool" in o}


@pytest.mark.parametrize("n", [1, 15, 16, 17, 64, 1000, 70001])
def test_relu_threshold_backward_dense_match_cpu(n):
    """relu / relu_ and threshold_backward on dense f32 (the AVX-512 pointwise loop): -0, NaN, ties."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    x[::7] = 0.0
    x[1::11] = -0.0
    x[2::13] = float("nan")
    gy = torch.randn(n, generator=g)
    xd, gyd = _dev(x), _dev(gy)
    assert torch.equal(torch.relu(xd).cpu().view(torch.int32), torch.relu(x).view(torch.int32))
    xi = xd.clone()
    xi.relu_()
    assert torch.equal(xi.cpu().view(torch.int32), torch.relu(x).view(torch.int32))
    for thr in (0.0, 0.5):
        want = torch.ops.aten.threshold_backward(gy, x, thr)
        got = torch.ops.aten.threshold_backward(gyd, xd, thr).cpu()
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
