"""aten::_flash_attention_forward/_backward on neuron (csrc/kernels/attention_varlen.c, ops_nn.cpp): the
varlen form torch.nn.attention.varlen.varlen_attn calls (TorchTitan's varlen attention backend), and the
dense [batch, seq, heads, dim] form.  Reference: each packed sequence alone through a float64 softmax
attention on the CPU, written out here; gradients from autograd of that reference."""
import math

import pytest
import torch
from torch.nn.attention.varlen import AuxRequest, varlen_attn

DEV = "neuron"


def ref_attention(q, k, v, cu_q, cu_k, causal, scale=None):
    """Packed q [Tq, Hq, D], k/v [Tk, Hkv, *] -> out [Tq, Hq, Dv], lse [Hq, Tq], float64 on the CPU."""
    q, k, v = (t.detach().cpu().double() for t in (q, k, v))
    Hq, Hkv = q.shape[1], k.shape[1]
    out = torch.zeros(q.shape[0], Hq, v.shape[-1], dtype=torch.float64)
    lse = torch.full((Hq, q.shape[0]), -math.inf, dtype=torch.float64)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    for i in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        if q1 == q0:
            continue
        qs = q[q0:q1].transpose(0, 1)
        ks = k[k0:k1].transpose(0, 1).repeat_interleave(Hq // Hkv, 0)
        vs = v[k0:k1].transpose(0, 1).repeat_interleave(Hq // Hkv, 0)
        sc = qs @ ks.transpose(1, 2) * s
        if causal:
            sc = sc.masked_fill(torch.ones(q1 - q0, k1 - k0, dtype=torch.bool).triu(1), -math.inf)
        ls = torch.logsumexp(sc, -1)
        out[q0:q1] = (torch.softmax(sc, -1) @ vs).transpose(0, 1)
        lse[:, q0:q1] = ls
    return out, lse


def packed(lens, H, Hkv, D, dtype, pad=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = sum(lens) + pad
    q = torch.randn(T, H, D, generator=g, dtype=torch.float32).to(dtype)
    k = torch.randn(T, Hkv, D, generator=g, dtype=torch.float32).to(dtype)
    v = torch.randn(T, Hkv, D, generator=g, dtype=torch.float32).to(dtype)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    return q, k, v, cu


TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("window", [(-1, 0), (-1, -1)])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_varlen_forward_backward_match_reference(dtype, window, heads):
    H, Hkv = heads
    lens = [5, 17, 0, 1, 33]
    q, k, v, cu = packed(lens, H, Hkv, 16, dtype, pad=3)
    qn, kn, vn = (t.to(DEV).requires_grad_() for t in (q, k, v))
    out, lse = varlen_attn(qn, kn, vn, cu.to(DEV), cu.to(DEV), max(lens), max(lens), window_size=window,
                           enable_gqa=H != Hkv, return_aux=AuxRequest(lse=True))
    causal = window == (-1, 0)
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    ro, rl = ref_attention(q, k, v, cu, cu, causal)
    tol = TOL[dtype]
    assert out.dtype == dtype and out.shape == (q.shape[0], H, 16)
    torch.testing.assert_close(out.cpu().double(), ro, atol=tol, rtol=tol)
    # the log-sum-exp comes back as [heads, tokens] (flash's layout); the 3 padding tokens have none
    assert lse.shape == (H, q.shape[0]) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.cpu().double()[:, : sum(lens)], rl[:, : sum(lens)], atol=tol, rtol=tol)
    # gradients: autograd through the float64 reference, written with the same loop
    gout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    out.backward(gout.to(DEV))

    def ref_fn(qq, kk, vv):
        res = []
        for i in range(len(lens)):
            q0, q1 = int(cu[i]), int(cu[i + 1])
            if q1 == q0:
                continue
            qs = qq[q0:q1].transpose(0, 1)
            ks = kk[q0:q1].transpose(0, 1).repeat_interleave(H // Hkv, 0)
            vs = vv[q0:q1].transpose(0, 1).repeat_interleave(H // Hkv, 0)
            sc = qs @ ks.transpose(1, 2) / math.sqrt(16)
            if causal:
                sc = sc.masked_fill(torch.ones(q1 - q0, q1 - q0, dtype=torch.bool).triu(1), -math.inf)
            res.append(((torch.softmax(sc, -1) @ vs).transpose(0, 1) * gout.double()[q0:q1]).sum())
        return sum(res)

    ref_fn(qr, kr, vr).backward()
    for got, want in ((qn.grad, qr.grad), (kn.grad, kr.grad), (vn.grad, vr.grad)):
        torch.testing.assert_close(got.cpu().double(), want, atol=4 * tol, rtol=4 * tol)
    # tokens past the last sequence: no output, no gradient
    assert out[-3:].abs().sum().item() == 0 and qn.grad[-3:].abs().sum().item() == 0


def test_varlen_int64_offsets_and_a_scale():
    q, k, v, cu = packed([7, 9], 2, 2, 8, torch.float32)
    out = varlen_attn(q.to(DEV), k.to(DEV), v.to(DEV), cu.long().to(DEV), cu.long().to(DEV), 9, 9, scale=0.3)
    ro, _ = ref_attention(q, k, v, cu, cu, causal=False, scale=0.3)
    torch.testing.assert_close(out.cpu().double(), ro, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_dense_flash_forward_backward(causal):
    B, T, H, D = 2, 19, 3, 8
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, T, H, D, generator=g) for _ in range(3))
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q.to(DEV), k.to(DEV), v.to(DEV), None, None, T, T, 0.0, causal, False)
    ref = torch.nn.functional.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)), is_causal=causal)
    torch.testing.assert_close(out.cpu().double(), ref.transpose(1, 2), atol=2e-5, rtol=2e-5)
    assert lse.shape == (B, H, T)
    dout = torch.randn(B, T, H, D, generator=g)
    none = torch.empty(0, device=DEV)  # no offsets: the dense form
    dq, dk, dv = torch.ops.aten._flash_attention_backward(dout.to(DEV), q.to(DEV), k.to(DEV), v.to(DEV), out, lse, none, none, T, T, 0.0,
                                                          causal, none, none)
    qr, kr, vr = (t.double().requires_grad_() for t in (q, k, v))
    r = torch.nn.functional.scaled_dot_product_attention(qr.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), is_causal=causal)
    (r.transpose(1, 2) * dout.double()).sum().backward()
    for got, want in ((dq, qr.grad), (dk, kr.grad), (dv, vr.grad)):
        torch.testing.assert_close(got.cpu().double(), want, atol=1e-4, rtol=1e-4)


def test_varlen_under_torch_compile_matches_eager():
    q, k, v, cu = packed([6, 10, 4], 4, 2, 16, torch.bfloat16)
    cun = cu.to(DEV)

    def f(q, k, v):
        return varlen_attn(q, k, v, cun, cun, 10, 10, window_size=(-1, 0), enable_gqa=True).float().square().sum()

    grads = []
    for fn in (f, torch.compile(f, backend="neuron", fullgraph=True)):
        xs = [t.to(DEV).requires_grad_() for t in (q, k, v)]
        loss = fn(*xs)
        loss.backward()
        grads.append([loss.detach().cpu()] + [x.grad.cpu() for x in xs])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_bad_input_is_refused_and_the_device_stays_usable():
    q, k, v, cu = packed([4, 4], 2, 2, 8, torch.float32)
    qn, kn, vn, cun = q.to(DEV), k.to(DEV), v.to(DEV), cu.to(DEV)
    with pytest.raises(NotImplementedError, match=r"window_size \(3, 0\)"):
        varlen_attn(qn, kn, vn, cun, cun, 4, 4, window_size=(3, 0))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        varlen_attn(qn, kn, vn, cu, cu, 4, 4)
    bad = torch.tensor([0, 6, 3], dtype=torch.int32, device=DEV)
    with pytest.raises(RuntimeError, match="sequence 1 spans queries"):
        varlen_attn(qn, kn, vn, bad, bad, 6, 6).cpu()
    with pytest.raises(RuntimeError, match="more than max_q"):
        varlen_attn(qn, kn, vn, cun, cun, 2, 2).cpu()
    out = varlen_attn(qn, kn, vn, cun, cun, 4, 4)
    torch.testing.assert_close(out.cpu().double(), ref_attention(q, k, v, cu, cu, False)[0], atol=2e-5, rtol=2e-5)
