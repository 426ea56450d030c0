"""Native convolution (csrc/torch/ops_conv.cpp, kernels csrc/kernels/conv.c): conv1d/2d/3d and their
transposes, forward and every gradient, against PyTorch's CPU for many geometries (stride, padding incl.
'same', dilation, groups, output_padding, unbatched, non-contiguous and channels_last inputs, bf16);
im2col/col2im (nn.functional.unfold/fold); a small CNN trained a few steps on both devices; bad input is a
clean RuntimeError.  Every case asserts that nothing fell back to the CPU."""

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    """The CPU reference with one OpenMP thread: on a shared machine its spinning threads otherwise
    make small CPU convolutions take ~1 s (the neuron pool is separate)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

TOL = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10), torch.bfloat16: (2e-2, 2e-2),
       torch.float16: (2e-3, 2e-3)}


def _close(a, b, dtype, scale=1.0, rel_max=None):
    rtol, atol = TOL[dtype]
    if rel_max is not None:  # long sums: the error is relative to the largest result, not to each element
        atol = max(atol, rel_max * b.abs().max().item())
    torch.testing.assert_close(a.cpu(), b, rtol=rtol * scale, atol=atol * scale)


def _check(fn, inputs, dtype, ops, grad=True, native=True, scale=1.0, rel_max=None):
    """fn(*inputs) on CPU and on neuron; forward and the gradients of every float input agree; no
    fallback."""
    cpu = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in inputs]
    dev = [t.detach().to("neuron").requires_grad_(grad and t.is_floating_point()) for t in inputs]
    ops.clear_op_tracking()
    y = fn(*cpu)
    yd = fn(*dev)
    # bf16/f16: the CPU rounds differently inside its kernels; the tolerance scales with the sum length
    _close(yd, y, dtype, scale * (4 if dtype in (torch.bfloat16, torch.float16) else 1), rel_max)
    if grad:
        g = torch.randn_like(y)
        y.backward(g)
        yd.backward(g.to("neuron"))
        for a, b in zip(dev, cpu):
            if b.grad is not None:
                _close(a.grad, b.grad, dtype, scale * (8 if dtype in (torch.bfloat16, torch.float16) else 4), rel_max)
    torch.neuron.synchronize()
    assert not ops.get_fallback_ops(), ops.get_fallback_ops()
    if native:  # (aten handles empty inputs without calling a convolution kernel)
        assert any("convolution" in o or "im2col" in o or "col2im" in o for o in ops.get_executed_ops())


CONV_CASES = [
    # (nsp, N, Cin, Cout, size, kernel, kwargs)
    (1, 2, 3, 4, (17,), (3,), dict()),
    (1, 3, 4, 6, (20,), (4,), dict(stride=3, padding=2, dilation=2, groups=2)),
    (1, 1, 2, 2, (9,), (3,), dict(padding="same", dilation=3)),
    (1, 2, 4, 4, (8,), (5,), dict(padding="valid", groups=4)),
    (2, 2, 3, 5, (9, 11), (3, 3), dict(padding=1)),
    (2, 2, 4, 6, (10, 7), (3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    (2, 1, 6, 3, (7, 7), (1, 1), dict(groups=3)),
    (2, 3, 2, 4, (8, 9), (4, 3), dict(padding="same")),
    (2, 2, 3, 3, (5, 5), (5, 5), dict()),
    (3, 2, 2, 4, (5, 6, 7), (3, 3, 3), dict(padding=1)),
    (3, 1, 4, 4, (6, 5, 7), (2, 3, 2), dict(stride=(1, 2, 2), dilation=(2, 1, 1), groups=2, padding=(1, 0, 1))),
    # [h-cnn] the benchmark CNN's layer shapes (batch 3) and wider odd ones: conv_avx512.c's implicit GEMM
    # (forward, stride-1 backward data) and tiled backward weight, several 14-row panels, partial tiles
    (2, 3, 3, 32, (32, 32), (3, 3), dict(padding=1)),
    (2, 3, 32, 64, (16, 16), (3, 3), dict(padding=1)),
    (2, 3, 64, 128, (8, 8), (3, 3), dict(padding=1)),
    (2, 2, 5, 30, (13, 37), (3, 5), dict(padding=(1, 2), dilation=(1, 1))),
    (2, 2, 6, 33, (11, 29), (3, 3), dict(padding=2, dilation=2, groups=3)),
    (2, 2, 4, 17, (15, 23), (3, 3), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_conv_matches_cpu(case, dtype, neuron_ops):
    nsp, N, Cin, Cout, size, k, kw = CONV_CASES[case]
    torch.manual_seed(case)
    groups = kw.get("groups", 1)
    x = torch.randn(N, Cin, *size, dtype=dtype)
    w = torch.randn(Cout, Cin // groups, *k, dtype=dtype)
    b = torch.randn(Cout, dtype=dtype)
    conv = (F.conv1d, F.conv2d, F.conv3d)[nsp - 1]
    # bf16 with long sums (Cin 32/64 x 3x3): how the CPU rounds inside its kernel depends on the CPU (oneDNN's
    # AVX2 path on a Zen 3 differs from its avx512_bf16 one by a bf16 ulp of the largest results), so the error
    # is measured against the largest result
    rel = 4e-3 if dtype == torch.bfloat16 else None
    _check(lambda x, w, b: conv(x, w, b, **kw), [x, w, b], dtype, neuron_ops, rel_max=rel)
    _check(lambda x, w: conv(x, w, None, **kw), [x, w], dtype, neuron_ops, rel_max=rel)


TRANSPOSED_CASES = [
    (1, 2, 4, 3, (9,), (3,), dict(stride=2, padding=1, output_padding=1)),
    (1, 1, 4, 6, (7,), (2,), dict(stride=3, groups=2, dilation=2, output_padding=2)),
    (2, 2, 3, 5, (5, 6), (3, 3), dict(stride=2, padding=1, output_padding=(1, 0))),
    (2, 1, 4, 4, (6, 4), (2, 3), dict(stride=(1, 2), dilation=(2, 1), groups=4, padding=(0, 1))),
    (3, 2, 2, 3, (3, 4, 3), (2, 3, 2), dict(stride=2, output_padding=(1, 0, 1))),
]


@pytest.mark.parametrize("case", range(len(TRANSPOSED_CASES)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_conv_transpose_matches_cpu(case, dtype, neuron_ops):
    nsp, N, Cin, Cout, size, k, kw = TRANSPOSED_CASES[case]
    torch.manual_seed(100 + case)
    groups = kw.get("groups", 1)
    x = torch.randn(N, Cin, *size, dtype=dtype)
    w = torch.randn(Cin, Cout // groups, *k, dtype=dtype)
    b = torch.randn(Cout, dtype=dtype)
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nsp - 1]
    _check(lambda x, w, b: conv(x, w, b, **kw), [x, w, b], dtype, neuron_ops)


def test_unbatched_and_f16(neuron_ops):
    torch.manual_seed(6)
    x, w, b = torch.randn(3, 10, 9), torch.randn(4, 3, 3, 3), torch.randn(4)
    _check(lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, b], torch.float32, neuron_ops)
    x1, w1 = torch.randn(3, 12), torch.randn(5, 3, 4)
    _check(lambda x, w: F.conv1d(x, w, stride=2), [x1, w1], torch.float32, neuron_ops)
    _check(lambda x, w: F.conv_transpose1d(x, w, stride=2), [torch.randn(5, 6), w1], torch.float32, neuron_ops)
    xh, wh = torch.randn(2, 3, 8, 8, dtype=torch.float16), torch.randn(4, 3, 3, 3, dtype=torch.float16)
    _check(lambda x, w: F.conv2d(x, w, padding=1), [xh, wh], torch.float16, neuron_ops, grad=False)


def test_int64_forward(neuron_ops):
    torch.manual_seed(7)
    x = torch.randint(-5, 6, (2, 4, 7, 6))
    w = torch.randint(-3, 4, (6, 2, 3, 2))
    b = torch.randint(-3, 4, (6,))
    y = F.conv2d(x, w, b, padding=1, groups=2)
    yd = F.conv2d(x.to("neuron"), w.to("neuron"), b.to("neuron"), padding=1, groups=2)
    assert torch.equal(yd.cpu(), y)
    wt = torch.randint(-3, 4, (4, 3, 3, 2))
    yt = F.conv_transpose2d(x, wt, stride=2)
    ytd = F.conv_transpose2d(x.to("neuron"), wt.to("neuron"), stride=2)
    assert torch.equal(ytd.cpu(), yt)
    assert not neuron_ops.get_fallback_ops()


def test_non_contiguous_and_channels_last(neuron_ops):
    torch.manual_seed(5)
    base = torch.randn(2, 8, 12, 10)
    x_nc = base[:, ::2, :, 1:]                                # strided view
    x_cl = torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last)
    w = torch.randn(6, 4, 3, 3)
    w_nc = torch.randn(3, 3, 4, 6).permute(3, 2, 0, 1)       # non-contiguous weight
    _check(lambda x, w: F.conv2d(x, w, padding=1, stride=2), [x_nc, w], torch.float32, neuron_ops)
    _check(lambda x, w: F.conv2d(x, w, padding=1), [x_cl, w_nc], torch.float32, neuron_ops)
    # channels_last in, channels_last out, as on the CPU
    yd = F.conv2d(x_cl.to("neuron"), w.to("neuron"), padding=1)
    assert yd.is_contiguous(memory_format=torch.channels_last)
    x3 = torch.randn(1, 4, 5, 6, 7).to(memory_format=torch.channels_last_3d)
    _check(lambda x, w: F.conv3d(x, w, padding=1), [x3, torch.randn(2, 4, 3, 3, 3)], torch.float32, neuron_ops)


def test_zero_batch_and_large_batch_chunks(neuron_ops):
    torch.manual_seed(4)
    x0 = torch.randn(0, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3)
    _check(lambda x, w: F.conv2d(x, w, padding=1), [x0, w], torch.float32, neuron_ops, native=False)
    # a sample whose column matrix exceeds the kernel's workspace cap (chunks of fewer samples)
    # (64*9 + 8) * 90*90 f32 = 19 MB per sample: chunks of one sample
    x = torch.randn(3, 64, 90, 90)
    w = torch.randn(8, 64, 3, 3) / 24
    _check(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32, neuron_ops, rel_max=1e-5)
    # one sample of (8*9 + 8) * 600*600 f32 = 115 MB: tiles of output rows within the sample
    x = torch.randn(1, 8, 600, 600)
    w = torch.randn(8, 8, 3, 3) / 8
    _check(lambda x, w: F.conv2d(x, w, padding=1), [x, w], torch.float32, neuron_ops, rel_max=1e-5)
    _check(lambda x, w: F.conv_transpose2d(x, w, stride=2), [x[:, :, :300, :300], w], torch.float32, neuron_ops, rel_max=1e-5)


def test_unfold_fold(neuron_ops):
    torch.manual_seed(9)
    x = torch.randn(2, 3, 9, 8)
    for kw in (dict(kernel_size=3), dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3))):
        _check(lambda x: F.unfold(x, **kw), [x], torch.float32, neuron_ops)
        _check(lambda x: F.unfold(x, **kw), [x[0]], torch.float64, neuron_ops)
        cols = F.unfold(x, **kw)
        _check(lambda c: F.fold(c, (9, 8), **kw), [torch.randn_like(cols)], torch.float32, neuron_ops)
        _check(lambda c: F.fold(c, (9, 8), **kw), [torch.randn_like(cols).to(torch.bfloat16)], torch.bfloat16, neuron_ops)
    xb = torch.rand(1, 2, 5, 5) > 0.5
    assert torch.equal(F.unfold(xb.to("neuron"), 2).cpu(), F.unfold(xb, 2))


@pytest.mark.parametrize("transposed", [False, True])
def test_double_backward(transposed, neuron_ops):
    torch.manual_seed(3)
    x0 = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    w0 = torch.randn(4, 3, 3, 3, dtype=torch.float64) if transposed else torch.randn(6, 2, 3, 3, dtype=torch.float64)

    def run(dev):
        x, w = x0.to(dev).requires_grad_(), w0.to(dev).requires_grad_()
        if transposed:
            y = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)
        else:
            y = F.conv2d(x, w, padding=1, stride=2, groups=2)
        gx, gw = torch.autograd.grad(y.square().sum(), (x, w), create_graph=True)
        return torch.autograd.grad(gx.sum() + gw.square().sum(), (x, w))

    for a, b in zip(run("neuron"), run("cpu")):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-9, atol=1e-9)
    assert not neuron_ops.get_fallback_ops()


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.fc = torch.nn.Linear(4 * 12 * 12, 5)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.relu(self.up(x))
        return self.fc(x.flatten(1))


def test_small_cnn_training_matches_cpu(neuron_ops):
    torch.manual_seed(0)
    ref = _CNN()
    dev = _CNN()
    dev.load_state_dict(ref.state_dict())
    dev.to("neuron")
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.05, momentum=0.9)
    x, t = torch.randn(6, 3, 12, 12), torch.randint(0, 5, (6,))
    xd, td = x.to("neuron"), t.to("neuron")
    for _ in range(3):
        for model, opt, xx, tt in ((ref, opt_r, x, t), (dev, opt_d, xd, td)):
            opt.zero_grad()
            loss = F.cross_entropy(model(xx), tt)
            loss.backward()
            opt.step()
            if model is ref:
                lr_ = loss.item()
            else:
                ld = loss.item()
        assert abs(lr_ - ld) < 1e-4 * max(1, abs(lr_)), (lr_, ld)
    for (n, p), q in zip(ref.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5, msg=n)
    assert "aten::convolution_backward_overrideable" in neuron_ops.get_executed_ops()
    assert not any("conv" in o for o in neuron_ops.get_fallback_ops())


BAD = {
    "channels": (lambda d: F.conv2d(torch.randn(1, 3, 5, 5, device=d), torch.randn(4, 2, 3, 3, device=d)),
                 "expected input.* to have 2 channels"),
    "groups": (lambda d: F.conv2d(torch.randn(1, 4, 5, 5, device=d), torch.randn(3, 2, 3, 3, device=d), groups=2),
               "divisible by 2"),
    "weight dims": (lambda d: F.conv2d(torch.randn(1, 3, 5, 5, device=d), torch.randn(4, 3, 3, device=d)),
                    "weight|expected stride"),
    "kernel too large": (lambda d: F.conv2d(torch.randn(1, 3, 2, 2, device=d), torch.randn(4, 3, 3, 3, device=d)),
                         "(?i)kernel size"),
    "stride 0": (lambda d: F.conv1d(torch.randn(1, 3, 8, device=d), torch.randn(4, 3, 3, device=d), stride=0),
                 "stride"),
    "dtype mismatch": (lambda d: F.conv1d(torch.randn(1, 3, 8, device=d), torch.randn(4, 3, 3, device=d, dtype=torch.float64)),
                       "(?i)type"),
    "transposed channels": (lambda d: F.conv_transpose2d(torch.randn(1, 3, 5, 5, device=d), torch.randn(4, 2, 3, 3, device=d)),
                            "channels"),
    "bias size": (lambda d: F.conv1d(torch.randn(1, 3, 8, device=d), torch.randn(4, 3, 3, device=d), torch.randn(3, device=d)),
                  "bias"),
    "unfold blocks": (lambda d: F.unfold(torch.randn(1, 2, 2, 2, device=d), 3), "sliding blocks"),
    "fold size": (lambda d: F.fold(torch.randn(1, 8, 5, device=d), (4, 4), 2), "sliding blocks|divisible"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_a_runtime_error(name):
    fn, pattern = BAD[name]
    with pytest.raises(RuntimeError, match=pattern):
        fn("neuron")
    with pytest.raises(RuntimeError):   # the CPU refuses it too
        fn("cpu")
    torch.neuron.synchronize()          # and the device is fine afterwards
    y = F.conv1d(torch.ones(1, 1, 4, device="neuron"), torch.ones(1, 1, 2, device="neuron"))
    assert y.cpu().tolist() == [[[2.0, 2.0, 2.0]]]
