"""F.scaled_dot_product_attention on neuron (the fused kernel of csrc/kernels/attention.c through
_scaled_dot_product_fused_attention_overrideable): forward and gradients against PyTorch's CPU over
dtypes, causal, bool/float masks with broadcasting, GQA, odd lengths, head dims that are not
multiples of the tile sizes, [B, T, H, D] layouts and zero-size; nothing falls back to the CPU."""

import pytest
import torch
import torch.nn.functional as F

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (3e-2, 3e-2),
       torch.float16: (4e-3, 4e-3)}


@pytest.fixture
def fused_only(neuron_ops):
    yield neuron_ops
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


def _rand(shape, dtype, seed, bthd=False):
    g = torch.Generator().manual_seed(seed)
    if bthd:  # same logical shape, [B, T, H, D] storage
        b, h, t, d = shape
        return torch.randn((b, t, h, d), generator=g).to(dtype).transpose(1, 2)
    return torch.randn(shape, generator=g).to(dtype)


def _check(B, Hq, Hkv, Tq, Tk, D, Dv, dtype, causal=False, mask=None, bthd=False, grad=True, ops=None):
    q = _rand((B, Hq, Tq, D), dtype, 1, bthd)
    k = _rand((B, Hkv, Tk, D), dtype, 2, bthd)
    v = _rand((B, Hkv, Tk, Dv), dtype, 3, bthd)
    go = _rand((B, Hq, Tq, Dv), dtype, 4)
    kw = dict(is_causal=causal, attn_mask=mask, enable_gqa=Hq != Hkv)
    # the CPU reference in f64 (then rounded): PyTorch's own low-precision CPU kernels differ more
    ref_in = [t.double().clone().requires_grad_(grad) for t in (q, k, v)]
    ref_mask = mask.double() if mask is not None and mask.dtype != torch.bool else mask
    ref = F.scaled_dot_product_attention(*ref_in, **dict(kw, attn_mask=ref_mask))
    dev_in = [t.to("neuron").requires_grad_(grad) for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*dev_in, **dict(kw, attn_mask=None if mask is None else mask.to("neuron")))
    atol, rtol = TOL[dtype]
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out.cpu().double(), ref.detach(), atol=atol, rtol=rtol)
    if ops is not None:
        assert FUSED in ops.get_executed_ops()
    if not grad:
        return
    ref.backward(go.double())
    out.backward(go.to("neuron"))
    for a, b in zip(dev_in, ref_in):
        torch.testing.assert_close(a.grad.cpu().double(), b.grad, atol=10 * atol, rtol=10 * rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_cpu(dtype, causal, fused_only):
    _check(2, 3, 3, 77, 77, 40, 40, dtype, causal=causal, ops=fused_only)


@pytest.mark.parametrize("shape", [
    (1, 2, 2, 300, 300, 64, 64),   # several query and key tiles
    (2, 2, 2, 129, 129, 72, 24),   # D, Dv not multiples of 14, 16 or 32
    (1, 1, 1, 5, 700, 17, 3),      # keys over one packed chunk
    (1, 1, 1, 1, 1, 8, 8),
    (3, 4, 4, 33, 65, 16, 16),     # Tq != Tk, 12 (batch, head) tasks: one-pass backward
])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_shapes(shape, causal, fused_only):
    _check(*shape, torch.float32, causal=causal, ops=fused_only)


@pytest.mark.parametrize("bthd", [False, True])
def test_sdpa_gqa_and_layout(bthd, fused_only):
    _check(2, 6, 2, 50, 50, 32, 32, torch.float32, causal=True, bthd=bthd, ops=fused_only)


def test_sdpa_masks(fused_only):
    g = torch.Generator().manual_seed(5)
    keep = torch.rand((2, 1, 45, 61), generator=g) > 0.3  # bool, broadcast over heads
    _check(2, 3, 3, 45, 61, 24, 24, torch.float32, mask=keep, ops=fused_only)
    pad = torch.ones((2, 1, 1, 61), dtype=torch.bool)  # padding mask, broadcast over heads and queries
    pad[0, ..., 50:] = False
    _check(2, 3, 3, 45, 61, 24, 24, torch.float32, mask=pad, ops=fused_only)
    bias = torch.randn((3, 45, 61), generator=g)  # float, broadcast over the batch
    _check(2, 3, 3, 45, 61, 24, 24, torch.float32, mask=bias, ops=fused_only)
    _check(2, 3, 3, 45, 61, 24, 24, torch.bfloat16, mask=bias.bfloat16(), ops=fused_only)


def test_sdpa_zero_size(fused_only):
    for shape in [(0, 2, 2, 5, 5, 8, 8), (1, 2, 2, 0, 5, 8, 8)]:
        _check(*shape, torch.float32)
    # no keys: PyTorch gives NaN (softmax of nothing), the fused kernel 0 (documented in nk.h)
    for b, h in [(1, 2), (2, 4)]:  # (2, 4): the one-pass backward's task count
        q = torch.randn(b, h, 3, 8, device="neuron", requires_grad=True)
        kv = torch.randn(b, h, 0, 8, device="neuron", requires_grad=True)
        out = F.scaled_dot_product_attention(q, kv, kv)
        assert out.shape == (b, h, 3, 8) and not out.cpu().isnan().any()
        out.sum().backward()
        assert (q.grad.cpu() == 0).all() and kv.grad.shape == kv.shape


def test_sdpa_dropout_is_deterministic_per_seed(fused_only):
    q, k, v = (torch.randn(2, 2, 40, 16, device="neuron") for _ in range(3))
    torch.manual_seed(7)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(7)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    torch.testing.assert_close(a, b)
    # E[dropout(P)] = P: on average over many seeds the output approaches the undropped one
    ref = F.scaled_dot_product_attention(q, k, v).cpu()
    mean = sum(F.scaled_dot_product_attention(q, k, v, dropout_p=0.3).cpu() for _ in range(200)) / 200
    assert (mean - ref).abs().mean() < 0.05


def test_sdpa_strided_head_dim(fused_only):
    """q, k, v whose last dim is not contiguous (the packers' strided path) and bf16 in [B, T, H, D]."""
    g = torch.Generator().manual_seed(9)
    q, k, v, go = (torch.randn((2, 3, 24, 37), generator=g).transpose(2, 3) for _ in range(4))
    ref_in = [t.double().clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True)
    dev_in = [t.to("neuron").requires_grad_() for t in (q, k, v)]
    assert dev_in[0].stride(3) != 1
    out = F.scaled_dot_product_attention(*dev_in, is_causal=True)
    torch.testing.assert_close(out.cpu().double(), ref.detach(), atol=2e-5, rtol=2e-5)
    ref.backward(go.double())
    out.backward(go.to("neuron"))
    for a, b in zip(dev_in, ref_in):
        torch.testing.assert_close(a.grad.cpu().double(), b.grad, atol=2e-4, rtol=2e-4)
    _check(2, 4, 2, 70, 70, 48, 48, torch.bfloat16, causal=True, bthd=True, ops=fused_only)


@pytest.mark.parametrize("shape", [
    (4, 4, 2, 200, 131, 80, 80),    # GQA, Tq > Tk, D = 80, 8 kv tasks (one-pass backward, prefetching)
    (2, 4, 4, 97, 260, 128, 128),   # Tq < Tk, D = 128
    (1, 2, 2, 70, 1500, 32, 32),    # two kv tasks: several key groups and the dq pass
])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_multi_task_shapes(shape, causal, fused_only):
    """Several tasks per thread (the next task's inputs are prefetched) at odd sizes."""
    _check(*shape, torch.float32, causal=causal, ops=fused_only)


def test_sdpa_sharp_softmax(fused_only):
    """Large scores (scale 2): the softmax's exp over a wide range, forward and backward vs f64."""
    g = torch.Generator().manual_seed(11)
    q, k, v, go = (torch.randn((2, 3, 150, 64), generator=g) for _ in range(4))
    for causal in (False, True):
        ref_in = [t.double().clone().requires_grad_() for t in (q, k, v)]
        ref = F.scaled_dot_product_attention(*ref_in, is_causal=causal, scale=2.0)
        dev_in = [t.to("neuron").requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*dev_in, is_causal=causal, scale=2.0)
        torch.testing.assert_close(out.cpu().double(), ref.detach(), atol=5e-5, rtol=5e-5)
        ref.backward(go.double())
        out.backward(go.to("neuron"))
        for a, b in zip(dev_in, ref_in):
            torch.testing.assert_close(a.grad.cpu().double(), b.grad, atol=1e-3, rtol=1e-4)


def test_bf16_odd_key_block_hides_next_key(fused_only):
    """bf16 multiplies k-pairs of keys: a block of queries whose visible keys end at an odd count must
    not pair its last key with one they cannot see (0 * inf).  Causal with Tq < Tk: query 44 sees keys
    0..44, key 45 holds inf in V."""
    B, H, Tq, Tk, D = 1, 2, 45, 64, 32
    q, k, v = (_rand((B, H, t, D), torch.bfloat16, s) for t, s in ((Tq, 1), (Tk, 2), (Tk, 3)))
    v[:, :, 45] = float("inf")
    out = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), is_causal=True)
    v0 = v.double().clone()
    v0[:, :, 45] = 0  # no query sees key 45
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v0, is_causal=True)
    assert torch.isfinite(out.cpu()).all()
    torch.testing.assert_close(out.cpu().double(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_gpt_shape_grads(causal, fused_only):
    """The bf16 pair-panel path at a GPT-sized head (one-pass backward: B*H >= 8, 256 keys) against f64."""
    _check(2, 6, 6, 256, 256, 64, 64, torch.bfloat16, causal=causal, ops=fused_only)


def test_sdpa_with_a_mask_that_needs_a_gradient(fused_only):
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    m = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    md = m.detach().to("neuron").requires_grad_()
    out = torch.nn.functional.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), attn_mask=md)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(out.cpu(), ref)
    g = torch.randn_like(ref)
    out.backward(g.to("neuron"))
    ref.backward(g)
    torch.testing.assert_close(md.grad.cpu(), m.grad)
