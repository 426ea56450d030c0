"""Normalization, losses, small activations and the grad scaler on neuron vs PyTorch's CPU: forward and
backward, training/eval, running statistics, non-contiguous and channels_last input, bf16 (and the
mixed bf16 input / f32 parameter mode), bad input; every case asserts that nothing fell back."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-10),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def _close(a, b, dtype, scale=1.0):
    t = TOL[dtype]
    torch.testing.assert_close(a.cpu(), b, rtol=t["rtol"] * scale, atol=t["atol"] * scale, equal_nan=True)


def _leaves(*ts, dev):
    """CPU leaves and their neuron copies (None passes through)."""
    cpu = [None if t is None else t.detach().clone().requires_grad_(t.is_floating_point()) for t in ts]
    neu = [None if t is None else t.detach().to(dev).requires_grad_(t.is_floating_point()) for t in ts]
    return cpu, neu


def _no_fallback(neuron_ops):
    fb = neuron_ops.get_fallback_ops()
    assert not fb, sorted(fb)


def _grads_close(cpu, neu, dtype, scale=4.0):
    for c, n in zip(cpu, neu):
        if c is not None and c.requires_grad:
            assert (c.grad is None) == (n.grad is None)
            if c.grad is not None:
                _close(n.grad, c.grad, dtype, scale)


# ---- batch norm ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(device, neuron_ops, dtype, training, affine):
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 6, dtype=dtype) * 3 + 5
    w = torch.rand(3, dtype=dtype) + 0.5 if affine else None
    b = torch.randn(3, dtype=dtype) if affine else None
    (xc, wc, bc), (xn, wn, bn) = _leaves(x, w, b, dev=device)
    rm, rv = torch.randn(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5
    rmn, rvn = rm.to(device), rv.to(device)
    yc = F.batch_norm(xc, rm, rv, wc, bc, training=training, momentum=0.3, eps=1e-4)
    yn = F.batch_norm(xn, rmn, rvn, wn, bn, training=training, momentum=0.3, eps=1e-4)
    _close(yn, yc, dtype)
    _close(rmn, rm, dtype)
    _close(rvn, rv, dtype)  # the unbiased variance updates running_var, as on the CPU
    g = torch.randn_like(yc)
    yc.backward(g)
    yn.backward(g.to(device))
    _grads_close([xc, wc, bc], [xn, wn, bn], dtype)
    _no_fallback(neuron_ops)


def test_batch_norm_no_running_stats_and_modules(device, neuron_ops):
    torch.manual_seed(1)
    x = torch.randn(8, 4, 7)
    (xc,), (xn,) = _leaves(x, dev=device)
    yc, yn = F.batch_norm(xc, None, None, training=True), F.batch_norm(xn, None, None, training=True)
    _close(yn, yc, torch.float32)
    yc.sum().backward(), yn.sum().backward()
    _close(xn.grad, xc.grad, torch.float32, 10)
    # modules: a few training steps update the running stats identically, then eval
    mc = torch.nn.BatchNorm2d(4, momentum=None)  # cumulative moving average
    mn = torch.nn.BatchNorm2d(4, momentum=None).to(device)
    for i in range(3):
        xi = torch.randn(5, 4, 3, 3) + i
        _close(mn(xi.to(device)), mc(xi), torch.float32)
    _close(mn.running_mean, mc.running_mean, torch.float32)
    _close(mn.running_var, mc.running_var, torch.float32)
    assert int(mn.num_batches_tracked) == 3
    mc.eval(), mn.eval()
    xi = torch.randn(2, 4, 3, 3)
    _close(mn(xi.to(device)), mc(xi), torch.float32)
    _no_fallback(neuron_ops)


def test_batch_norm_channels_last_and_noncontiguous(device, neuron_ops):
    torch.manual_seed(2)
    x = torch.randn(3, 6, 5, 4).to(memory_format=torch.channels_last)
    (xc,), (xn,) = _leaves(x, dev=device)
    xn = xn.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    w, b = torch.rand(6) + 0.5, torch.randn(6)
    yc = F.batch_norm(xc, None, None, w, b, training=True)
    yn = F.batch_norm(xn, None, None, w.to(device), b.to(device), training=True)
    _close(yn, yc, torch.float32)
    g = torch.randn_like(yc)
    yc.backward(g), yn.backward(g.to(device))
    _close(xn.grad, xc.grad, torch.float32, 10)
    # a transposed (non-contiguous) input
    x2 = torch.randn(5, 7, 3).transpose(0, 2)  # (3, 7, 5)
    _close(F.batch_norm(x2.to(device), None, None, training=True), F.batch_norm(x2, None, None, training=True), torch.float32)
    _no_fallback(neuron_ops)


def test_batch_norm_mixed_bf16_input_f32_params(device, neuron_ops):
    torch.manual_seed(3)
    x = torch.randn(4, 3, 10).bfloat16()
    w, b, rm, rv = torch.rand(3) + 0.5, torch.randn(3), torch.zeros(3), torch.ones(3)
    rmn, rvn = rm.to(device), rv.to(device)
    oc = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    on = torch.ops.aten.native_batch_norm(x.to(device), w.to(device), b.to(device), rmn, rvn, True, 0.1, 1e-5)
    assert [t.dtype for t in on] == [t.dtype for t in oc] == [torch.bfloat16, torch.float32, torch.float32]
    _close(on[0], oc[0], torch.bfloat16)
    _close(on[1], oc[1], torch.float32)
    _close(on[2], oc[2], torch.float32)
    _close(rmn, rm, torch.float32)
    _close(rvn, rv, torch.float32)
    _no_fallback(neuron_ops)


def test_batch_norm_aten_variants(device, neuron_ops):
    torch.manual_seed(4)
    x, w, b = torch.randn(3, 4, 5), torch.rand(4) + 0.5, torch.randn(4)
    d = lambda t: t.to(device)  # noqa: E731
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    rmn, rvn = d(rm), d(rv)
    oc = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.2, 1e-5)
    on = torch.ops.aten._batch_norm_with_update(d(x), d(w), d(b), rmn, rvn, 0.2, 1e-5)
    for a, c in zip(on[:3], oc[:3]):
        _close(a, c, torch.float32)
    _close(rmn, rm, torch.float32), _close(rvn, rv, torch.float32)
    sm, si = oc[1], oc[2]
    oc = torch.ops.aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
    on = torch.ops.aten._native_batch_norm_legit.no_stats(d(x), d(w), d(b), True, 0.1, 1e-5)
    for a, c in zip(on, oc):
        _close(a, c, torch.float32)
    oc = torch.ops.aten._batch_norm_no_update(x, w, b, rm, rv, 0.1, 1e-5)
    on = torch.ops.aten._batch_norm_no_update(d(x), d(w), d(b), d(rm), d(rv), 0.1, 1e-5)
    _close(on[0], oc[0], torch.float32)
    g = torch.randn(3, 4, 5)
    for update in (True, False):
        bc = torch.ops.aten.batch_norm_backward(g, x, w, rm, rv, sm, si, update, 1e-5, [True, True, True], torch.empty(0))
        bn = torch.ops.aten.batch_norm_backward(d(g), d(x), d(w), d(rm), d(rv), d(sm), d(si), update, 1e-5, [True, True, True], torch.empty(0, device=device))
        for a, c in zip(bn, bc):
            _close(a, c, torch.float32, 10)
    with pytest.raises(RuntimeError, match="save_mean"):  # (the CPU kernel reads out of bounds here)
        torch.ops.aten.batch_norm_backward(d(g), d(x), d(w), d(rm), d(rv), d(oc[1]), d(oc[2]), True, 1e-5, [True, True, True],
                                           torch.empty(0, device=device))
    _no_fallback(neuron_ops)


def test_batch_norm_bad_input(device):
    x = torch.randn(2, 3, 4, device=device)
    with pytest.raises(RuntimeError, match="weight|3"):
        F.batch_norm(x, None, None, torch.ones(4, device=device), None, training=True)
    with pytest.raises(RuntimeError, match="running_mean"):
        F.batch_norm(x, torch.zeros(5, device=device), torch.ones(3, device=device), training=False)
    with pytest.raises(RuntimeError):
        torch.ops.aten.native_batch_norm(torch.ones(2, 3, dtype=torch.long, device=device), None, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="at least one element"):
        torch.ops.aten.native_batch_norm(torch.ones(0, 3, 4, device=device), None, None, None, None, True, 0.1, 1e-5)
    # F.batch_norm itself returns an empty result for empty input, as on the CPU
    assert F.batch_norm(torch.ones(0, 3, 4, device=device), None, None, training=True).shape == (0, 3, 4)


def test_instance_norm(device, neuron_ops):
    torch.manual_seed(5)
    x = torch.randn(3, 4, 6, 5)
    rm, rv = torch.zeros(4), torch.ones(4)
    rmn, rvn = rm.to(device), rv.to(device)
    (xc,), (xn,) = _leaves(x, dev=device)
    yc = F.instance_norm(xc, rm, rv, use_input_stats=True, momentum=0.2)
    yn = F.instance_norm(xn, rmn, rvn, use_input_stats=True, momentum=0.2)
    _close(yn, yc, torch.float32)
    _close(rmn, rm, torch.float32), _close(rvn, rv, torch.float32)
    g = torch.randn_like(yc)
    yc.backward(g), yn.backward(g.to(device))
    _close(xn.grad, xc.grad, torch.float32, 10)
    _no_fallback(neuron_ops)


# ---- group norm, rms norm --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_group_norm(device, neuron_ops, dtype):
    torch.manual_seed(6)
    x = torch.randn(3, 6, 4, 5, dtype=dtype) * 2 + 3
    w, b = torch.rand(6, dtype=dtype) + 0.5, torch.randn(6, dtype=dtype)
    (xc, wc, bc), (xn, wn, bn) = _leaves(x, w, b, dev=device)
    yc, yn = F.group_norm(xc, 3, wc, bc), F.group_norm(xn, 3, wn, bn)
    _close(yn, yc, dtype)
    g = torch.randn_like(yc)
    yc.backward(g), yn.backward(g.to(device))
    _grads_close([xc, wc, bc], [xn, wn, bn], dtype, 10)
    # no affine, non-contiguous input
    xt = torch.randn(5, 4, 2, dtype=dtype).transpose(0, 2)
    _close(F.group_norm(xt.to(device), 2), F.group_norm(xt, 2), dtype)
    _no_fallback(neuron_ops)


def test_group_norm_bad_input(device):
    x = torch.randn(2, 6, 4, device=device)
    with pytest.raises(RuntimeError, match="divisible"):
        F.group_norm(x, 4)
    with pytest.raises(RuntimeError, match="weight"):
        torch.ops.aten.native_group_norm(x, torch.ones(5, device=device), None, 2, 6, 4, 3, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rms_norm(device, neuron_ops, dtype):
    torch.manual_seed(7)
    x, w = torch.randn(4, 5, 16, dtype=dtype), torch.rand(16, dtype=dtype) + 0.5
    (xc, wc), (xn, wn) = _leaves(x, w, dev=device)
    yc, yn = F.rms_norm(xc, (16,), wc, 1e-6), F.rms_norm(xn, (16,), wn, 1e-6)
    _close(yn, yc, dtype)
    g = torch.randn_like(yc)
    yc.backward(g), yn.backward(g.to(device))
    _grads_close([xc, wc], [xn, wn], dtype, 10)
    # the fused aten op and its backward directly
    oc = torch.ops.aten._fused_rms_norm(x, [5, 16], None, None)
    on = torch.ops.aten._fused_rms_norm(x.to(device), [5, 16], None, None)
    _close(on[0], oc[0], dtype)
    _close(on[1], oc[1], on[1].dtype)
    dx, dw = torch.ops.aten._fused_rms_norm_backward(g.to(device), x.to(device), [16], torch.ops.aten._fused_rms_norm(x.to(device), [16], w.to(device), 1e-6)[1], w.to(device), [True, True])
    _close(dx, xc.grad, dtype, 10)
    _close(dw, wc.grad, dtype, 10)
    _no_fallback(neuron_ops)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(300, 130), (3, 2100), (2, 0), (0, 7)])
def test_rms_norm_shapes(device, neuron_ops, dtype, shape):
    """Rows over several dw chunks (64 rows), rows longer than a converted chunk (2048), zero-size, no
    weight; fwd+bwd through autograd, i.e. _fused_rms_norm and _fused_rms_norm_backward natively."""
    torch.manual_seed(3)
    C = shape[-1]
    x, w = torch.randn(*shape, dtype=dtype), torch.rand(C, dtype=dtype) + 0.5
    for weight in (True, False):
        (xc, wc), (xn, wn) = _leaves(x, w if weight else None, dev=device)
        yc, yn = F.rms_norm(xc, (C,), wc, 1e-5), F.rms_norm(xn, (C,), wn, 1e-5)
        _close(yn, yc, dtype)
        g = torch.randn_like(yc)
        yc.backward(g), yn.backward(g.to(device))
        _grads_close([xc, wc], [xn, wn], dtype, 10 if dtype == torch.float32 else 2)
    _no_fallback(neuron_ops)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape,dim", [((8, 5, 7), 0), ((6, 4, 130), 2), ((5, 3), 1), ((33,), 0), ((0, 4), 1)])
def test_weight_norm(device, neuron_ops, dtype, shape, dim):
    """nn.utils.parametrizations.weight_norm's fused op (_weight_norm_interface, dim 0 or last: what the
    HuBERT/wav2vec2/WavLM positional convolution calls) and its backward, natively; the norm is float32 for
    bf16/f16 as on the CPU."""
    torch.manual_seed(11)
    gshape = [1] * len(shape)
    gshape[dim] = shape[dim]
    v, g = torch.randn(*shape, dtype=dtype), torch.rand(*gshape, dtype=dtype) + 0.5
    (vc, gc), (vn, gn) = _leaves(v, g, dev=device)
    wc, nc = torch._weight_norm_interface(vc, gc, dim)
    wn, nn_ = torch._weight_norm_interface(vn, gn, dim)
    assert nn_.dtype == nc.dtype and nn_.shape == nc.shape
    _close(wn, wc, dtype)
    _close(nn_, nc, nc.dtype, 10)
    dw = torch.randn_like(wc)
    wc.backward(dw), wn.backward(dw.to(device))
    _grads_close([vc, gc], [vn, gn], dtype, 10)
    _no_fallback(neuron_ops)


def test_weight_norm_module_and_bad_dim(device, neuron_ops):
    """A weight-normed Conv1d (dim=2, the HuBERT form) trains like the CPU's; a middle dim is refused as
    the CPU refuses it."""
    torch.manual_seed(5)
    from torch.nn.utils.parametrizations import weight_norm
    conv = weight_norm(torch.nn.Conv1d(4, 6, 5, padding=2, groups=2), name="weight", dim=2)
    x = torch.randn(2, 4, 9)
    cn = __import__("copy").deepcopy(conv).to(device)
    yc, yn = conv(x), cn(x.to(device))
    _close(yn, yc, torch.float32)
    yc.square().sum().backward(), yn.square().sum().backward()
    for (name, pc), pn in zip(conv.named_parameters(), cn.parameters()):
        _close(pn.grad, pc.grad, torch.float32, 10)
    _no_fallback(neuron_ops)
    v = torch.randn(3, 4, 5, device=device)
    with pytest.raises(RuntimeError, match="first or last dim"):
        torch._weight_norm_interface(v, torch.ones(1, 4, 1, device=device), 1)


def _ctc_case(device, T, N, C, S, dtype, concat, reduction, zero_infinity=False, tdtype=torch.long, lens_on_cpu=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(T, N, C, dtype=dtype, generator=g).log_softmax(2)
    il = torch.randint(max(1, T // 2), T + 1, (N,), generator=g)
    tl = torch.randint(0, S + 1, (N,), generator=g)
    tg = torch.randint(1, C, (N, S), dtype=tdtype, generator=g)
    if concat:
        tg = torch.cat([tg[b, :tl[b]] for b in range(N)])
    res = []
    for dev in ("cpu", device):
        x = lp.to(dev).detach().requires_grad_()
        ld = "cpu" if lens_on_cpu else dev
        loss = F.ctc_loss(x, tg.to(dev), il.to(ld), tl.to(ld), reduction=reduction, zero_infinity=zero_infinity)
        loss.sum().backward()
        res.append((loss.detach().cpu(), x.grad.cpu()))
    _close(res[1][0], res[0][0], dtype)
    _close(res[1][1], res[0][1], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("concat", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss(device, neuron_ops, dtype, concat, reduction):
    """F.ctc_loss (aten _ctc_loss and _ctc_loss_backward: what wav2vec2's CTC head calls) natively: loss
    and gradient against the CPU for padded and concatenated targets, every reduction."""
    _ctc_case(device, 12, 3, 6, 4, dtype, concat, reduction)
    _no_fallback(neuron_ops)


def test_ctc_loss_edges_and_bad_input(device, neuron_ops):
    """Targets longer than their inputs allow (inf loss, NaN gradient; zero_infinity zeroes both), int32
    targets with CPU lengths, then the CPU's refusals and a label outside [0, C) reported at the sync."""
    _ctc_case(device, 5, 4, 3, 6, torch.float32, False, "none", zero_infinity=True)
    _ctc_case(device, 5, 4, 3, 6, torch.float32, False, "none")
    _ctc_case(device, 30, 2, 10, 8, torch.float32, True, "mean", tdtype=torch.int32, lens_on_cpu=True, seed=3)
    _no_fallback(neuron_ops)
    lp = torch.randn(6, 2, 4, device=device).log_softmax(2)
    tg = torch.tensor([[1, 2], [3, 1]], device=device)
    il, tl = torch.tensor([6, 6]), torch.tensor([2, 2])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, tg, il, tl, blank=4)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 6"):
        F.ctc_loss(lp, tg, torch.tensor([7, 6]), tl)
    with pytest.raises(RuntimeError, match="input_lengths must be of size batch_size"):
        F.ctc_loss(lp, tg, torch.tensor([6]), tl)
    with pytest.raises(RuntimeError, match="outside the label range"):
        F.ctc_loss(lp, torch.tensor([[1, 9], [3, 1]], device=device), il, tl).item()
    assert (lp.exp().sum(2) - 1).abs().max().item() < 1e-5  # the device is still usable


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("n", [1, 17, 1027, 70001])
def test_activation_f32_close_to_cpu(device, neuron_ops, op, n):
    """The dedicated AVX-512 gelu / silu loops (act_avx512.c) against PyTorch CPU: forward and backward,
    odd sizes (masked tails), a strided input, values far into both tails."""
    torch.manual_seed(5)
    x = torch.cat([torch.randn(n) * 4, torch.tensor([0.0, -0.0, 12.0, -12.0, 60.0, -60.0, 1e-20])])
    fn = {"gelu": lambda t: F.gelu(t), "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}[op]
    xc, xn = x.clone().requires_grad_(), x.to(device).requires_grad_()
    yc, yn = fn(xc), fn(xn)
    # 1 + erf(x/sqrt2) is rounded in f32 by both (ulp(1) * 0.5|x| apart at most a few times)
    torch.testing.assert_close(yn.cpu(), yc, rtol=2e-6, atol=5e-6)
    g = torch.randn_like(yc)
    yc.backward(g), yn.backward(g.to(device))
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=2e-6, atol=1e-5)
    # strided input (every other element of a wider tensor)
    xs = torch.randn(2 * n + 1)[::2]
    torch.testing.assert_close(fn(xs.to(device)).cpu(), fn(xs), rtol=2e-6, atol=5e-6)
    _no_fallback(neuron_ops)


def test_local_response_norm_forward(device):
    x = torch.randn(2, 6, 5, 5)
    _close(F.local_response_norm(x.to(device), 3), F.local_response_norm(x, 3), torch.float32)


# ---- losses ----------------------------------------------------------------------------------------

def _loss_case(device, neuron_ops, fn, inputs, targets, dtype=torch.float32, scale=4.0):
    cpu, neu = _leaves(*inputs, dev=device)
    tc = list(targets)
    tn = [t.to(device) if isinstance(t, torch.Tensor) else t for t in targets]
    lc, ln = fn(*cpu, *tc), fn(*neu, *tn)
    _close(ln, lc, dtype, scale)
    g = torch.randn_like(lc)
    lc.backward(g), ln.backward(g.to(device))
    _grads_close(cpu, neu, dtype, scale)
    _no_fallback(neuron_ops)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_elementwise_losses(device, neuron_ops, reduction):
    torch.manual_seed(8)
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    p, t = torch.rand(6, 5) * 0.9 + 0.05, torch.rand(6, 5)
    sign = torch.randint(0, 2, (6, 5)).float() * 2 - 1
    r = dict(reduction=reduction)
    _loss_case(device, neuron_ops, lambda a, b: F.kl_div(a.log_softmax(-1), b, **r), [x], [t.softmax(-1)])
    _loss_case(device, neuron_ops, lambda a, b: F.kl_div(a, b, log_target=True, **r), [x], [y])
    _loss_case(device, neuron_ops, lambda a, b: F.binary_cross_entropy(a, b, **r), [p], [t])
    _loss_case(device, neuron_ops, lambda a, b, w: F.binary_cross_entropy(a, b, weight=w, **r), [p], [t, torch.rand(5)])
    _loss_case(device, neuron_ops, lambda a, b, pw: F.binary_cross_entropy_with_logits(a, b, pos_weight=pw, **r), [x], [t, torch.rand(5) + 0.5])
    _loss_case(device, neuron_ops, lambda a, b: F.l1_loss(a, b, **r), [x], [y])
    _loss_case(device, neuron_ops, lambda a, b: F.smooth_l1_loss(a, b, beta=0.5, **r), [x], [y])
    _loss_case(device, neuron_ops, lambda a, b: F.huber_loss(a, b, delta=0.7, **r), [x], [y])
    _loss_case(device, neuron_ops, lambda a, b: F.soft_margin_loss(a, b, **r), [x], [sign])
    _loss_case(device, neuron_ops, lambda a, b: F.hinge_embedding_loss(a, b, margin=0.5, **r), [x], [sign])
    _loss_case(device, neuron_ops, lambda a, b: F.poisson_nll_loss(a, b, **r), [x], [t * 3])
    _loss_case(device, neuron_ops, lambda a, b, v: F.gaussian_nll_loss(a, b, v, **r), [x], [y, torch.rand(6, 5) + 0.1])
    _loss_case(device, neuron_ops, lambda a, b, s: F.margin_ranking_loss(a, b, s, margin=0.2, **r), [x[:, 0], y[:, 0]], [sign[:, 0]])
    _loss_case(device, neuron_ops, lambda a, b, c: F.triplet_margin_loss(a, b, c, **r), [x, y, torch.randn(6, 5)], [])
    _loss_case(device, neuron_ops, lambda a, b, s: F.cosine_embedding_loss(a, b, s, margin=0.1, **r), [x, y], [sign[:, 0]])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_class_losses(device, neuron_ops, reduction):
    torch.manual_seed(9)
    x, tgt = torch.randn(7, 5), torch.tensor([0, 4, 1, 1, 3, 2, 4])
    r = dict(reduction=reduction)
    _loss_case(device, neuron_ops, lambda a, t: F.cross_entropy(a, t, label_smoothing=0.2, ignore_index=1, **r), [x], [tgt])
    _loss_case(device, neuron_ops, lambda a, t, w: F.cross_entropy(a, t, weight=w, label_smoothing=0.1, **r), [x], [tgt, torch.rand(5)])
    for p in (1, 2):
        _loss_case(device, neuron_ops, lambda a, t, w: F.multi_margin_loss(a, t, p=p, margin=0.7, weight=w, **r), [x], [tgt, torch.rand(5)])
    _loss_case(device, neuron_ops, lambda a, t: F.multi_margin_loss(a[0], t[0], **r), [x], [tgt])
    ml = torch.tensor([[3, 0, -1, 1, 1], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, -1, 2, 2, 2], [0, 1, -1, 0, 0], [2, -1, 0, 0, 0], [4, 3, -1, 0, 0]])
    _loss_case(device, neuron_ops, lambda a, t: F.multilabel_margin_loss(a, t, **r), [x], [ml])
    _loss_case(device, neuron_ops, lambda a, t: F.multilabel_margin_loss(a[1], t[0], **r), [x], [ml])
    _loss_case(device, neuron_ops, lambda a, t: F.multilabel_soft_margin_loss(a, t, **r), [x], [(ml >= 0).float()])


def test_margin_loss_bad_target(device):
    x = torch.randn(3, 4, device=device)
    with pytest.raises(RuntimeError, match="out of range"):
        F.multi_margin_loss(x, torch.tensor([0, 4, 1], device=device))
        torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="out of range"):
        F.multilabel_margin_loss(x, torch.tensor([[0, 9, -1, 0]] * 3, device=device))
        torch.neuron.synchronize()
    with pytest.raises(RuntimeError, match="weight"):
        F.multi_margin_loss(x, torch.tensor([0, 1, 1], device=device), weight=torch.ones(3, device=device))


# ---- activations -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_activations(device, neuron_ops, dtype):
    torch.manual_seed(10)
    x = torch.randn(6, 8, dtype=dtype) * 2
    for fn in (lambda a: F.glu(a, -1), lambda a: F.glu(a, 0), lambda a: F.hardshrink(a, 0.7), lambda a: F.softshrink(a, 0.4),
               lambda a: torch.logit(torch.sigmoid(a)), lambda a: torch.logit(torch.sigmoid(a), eps=0.2),
               F.celu, F.selu, F.mish, F.tanhshrink, lambda a: F.rrelu(a, training=False),
               lambda a: F.glu(a.t(), 0)):
        _loss_case(device, neuron_ops, fn, [x], [], dtype)
    # prelu: one weight and per-channel weights on a (N, C, L) input
    x3 = torch.randn(4, 3, 5, dtype=dtype)
    _loss_case(device, neuron_ops, lambda a, w: F.prelu(a, w), [x3, torch.rand(1, dtype=dtype)], [], dtype)
    _loss_case(device, neuron_ops, lambda a, w: F.prelu(a, w), [x3, torch.rand(3, dtype=dtype)], [], dtype)
    # out variants
    o = torch.empty(6, 4, dtype=dtype, device=device)
    torch._C._nn.glu(x.to(device), -1, out=o)
    _close(o, F.glu(x, -1), dtype)


def test_glu_odd_dim_raises(device):
    with pytest.raises(RuntimeError, match="even"):
        F.glu(torch.randn(3, 5, device=device), -1)


def test_rrelu_training(device, neuron_ops):
    torch.manual_seed(11)
    x = torch.randn(2000, device=device, requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    xc, yc = x.detach().cpu(), y.detach().cpu()
    pos = xc > 0
    assert torch.equal(yc[pos], xc[pos])
    slope = yc[~pos] / xc[~pos]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and slope.std() > 0.03
    y.sum().backward()
    g = x.grad.cpu()
    assert torch.equal(g[pos], torch.ones(int(pos.sum())))
    torch.testing.assert_close(g[~pos], slope)
    # the device generator: same seed, same noise
    torch.manual_seed(5)
    a = F.rrelu(x.detach(), training=True)
    torch.manual_seed(5)
    b = F.rrelu(x.detach(), training=True)
    assert torch.equal(a.cpu(), b.cpu())
    _no_fallback(neuron_ops)


# ---- grad scaler -----------------------------------------------------------------------------------

def test_amp_kernels_vs_cpu(device, neuron_ops):
    grads = [torch.randn(5, 3), torch.randn(7).bfloat16(), torch.randn(4, 4).t(), torch.randn(3).double()]
    for bad in (False, True):
        gc = [g.clone() for g in grads]
        if bad:
            gc[2][1, 1] = float("inf")
        gn = [g.to(device) for g in gc]
        gn[2] = gc[2].to(device).t().contiguous().t()  # keep it non-contiguous on the device
        fc, fn = torch.zeros(1), torch.zeros(1, device=device)
        inv = torch.tensor([0.25])
        torch._amp_foreach_non_finite_check_and_unscale_(gc, fc, inv)
        torch._amp_foreach_non_finite_check_and_unscale_(gn, fn, inv.to(device))
        assert fn.item() == fc.item() == float(bad)
        for a, c in zip(gn, gc):
            torch.testing.assert_close(a.cpu(), c)
    for found in (0.0, 1.0, 0.0, 0.0, 0.0):
        sc, tc = torch.tensor([64.0]), torch.tensor([1], dtype=torch.int32)
        sn, tn = sc.to(device), tc.to(device)
        for _ in range(3):
            torch._amp_update_scale_(sc, tc, torch.tensor([found]), 2.0, 0.5, 2)
            torch._amp_update_scale_(sn, tn, torch.tensor([found], device=device), 2.0, 0.5, 2)
            assert sn.item() == sc.item() and tn.item() == tc.item()
    _no_fallback(neuron_ops)


def test_grad_scaler_end_to_end_vs_cpu(device, neuron_ops):
    """The same model, data and injected overflows on both devices: the scaler skips the same steps,
    grows and backs off its scale identically, and the weights stay close."""
    torch.manual_seed(12)
    mc = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    mn = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)
    mn.load_state_dict(mc.state_dict())
    oc, on = torch.optim.SGD(mc.parameters(), lr=0.05), torch.optim.SGD(mn.parameters(), lr=0.05)
    sc = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
    sn = torch.amp.GradScaler("neuron", init_scale=256.0, growth_interval=2)
    scales = []
    for step in range(8):
        x, y = torch.randn(10, 6), torch.randn(10, 2)
        for m, o, s, dev in ((mc, oc, sc, "cpu"), (mn, on, sn, device)):
            o.zero_grad()
            loss = F.mse_loss(m(x.to(dev)), y.to(dev))
            s.scale(loss).backward()
            if step in (3, 5):  # an overflow: the step is skipped and the scale backs off
                next(m.parameters()).grad[0, 0] = float("inf")
            s.step(o)
            s.update()
        scales.append((sn.get_scale(), sc.get_scale()))
        assert sn.get_scale() == sc.get_scale(), scales
    assert scales[3][0] < scales[2][0] and scales[1][0] > 256.0, scales
    for a, b in zip(mn.state_dict().values(), mc.state_dict().values()):
        torch.testing.assert_close(a.cpu().float(), b.float(), rtol=1e-4, atol=1e-5)
    _no_fallback(neuron_ops)
