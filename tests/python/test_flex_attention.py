"""torch.nn.attention.flex_attention on neuron (eager): the device-generic path of the FlexAttention op, with
a block mask and a score_mod, forward and backward, against a float64 CPU reference written out by hand
(torch 2.13's CPU flex has no eager backward).  Before torchneuron's adapter (torchneuron/ecosystem.py),
flex_attention raised "FlexAttention is only supported on CUDA, CPU, HPU, or MPS devices" for neuron tensors.
"""
import warnings

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _reference(q, k, v, bias_scale, causal):
    """softmax(q k^T / sqrt(E) + bias_scale * (i - j), masked) v in float64 on the CPU, with autograd."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    L, S = q.shape[-2], k.shape[-2]
    i = torch.arange(L, dtype=torch.float64)[:, None]
    j = torch.arange(S, dtype=torch.float64)[None, :]
    if k.shape[1] != q.shape[1]:  # GQA: each kv head serves q.shape[1] // k.shape[1] query heads
        rep = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    else:
        kk, vv = k, v
    s = q @ kk.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias_scale * (i - j)
    if causal:
        s = s.masked_fill(i < j, float("-inf"))
    o = torch.softmax(s, -1) @ vv
    return o, (q, k, v)


@pytest.mark.parametrize("B,Hq,Hkv,L,E,causal", [(2, 4, 4, 64, 16, True), (1, 4, 2, 48, 8, True), (2, 2, 2, 32, 16, False)])
def test_flex_attention_forward_backward(B, Hq, Hkv, L, E, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    g = torch.Generator().manual_seed(B * 100 + L)
    q = torch.randn(B, Hq, L, E, generator=g)
    k = torch.randn(B, Hkv, L, E, generator=g)
    v = torch.randn(B, Hkv, L, E, generator=g)
    dout = torch.randn(B, Hq, L, E, generator=g)
    bias = 0.05

    def score_mod(score, b, h, qi, ki):
        return score + bias * (qi - ki)

    bm = None
    if causal:
        bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, B=None, H=None, Q_LEN=L, KV_LEN=L, device="neuron")
    qn, kn, vn = (t.to("neuron").requires_grad_() for t in (q, k, v))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = flex_attention(qn, kn, vn, block_mask=bm, score_mod=score_mod, enable_gqa=Hq != Hkv)
    out.backward(dout.to("neuron"))
    ref, leaves = _reference(q, k, v, bias, causal)
    ref.backward(dout.double())
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu().double(), ref.detach(), rtol=1e-4, atol=1e-5)
    for got, want in zip((qn.grad, kn.grad, vn.grad), leaves):
        torch.testing.assert_close(got.cpu().double(), want.grad, rtol=1e-4, atol=1e-4)


def test_flex_attention_other_devices_unchanged():
    """The adapter lets neuron through and leaves PyTorch's own refusals as they are (CPU backward)."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 8, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, q, q)
