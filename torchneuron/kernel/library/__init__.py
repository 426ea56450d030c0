"""Ready kernels built on torchneuron.kernel, meant to be read and copied: each is a C file next to this
one and a few lines here (the op, its fake and its autograd).  Importing the module compiles them once
(cached in NEURON_CACHE_DIR) and registers the ops in the namespace `nkl`.

    rms_norm(x, w, eps)                          fused RMSNorm, forward and backward (rmsnorm.c)
    rope(x, cos, sin)                            rotary embedding, rotate-half form (rope.c)
    moe_gemm(x, w, offs)                         grouped GEMM of a mixture-of-experts layer (moe_gemm.c)
    softcap_attention(q, k, v, softcap, causal)  attention with a soft-capped score (softcap_attention.c)

All take contiguous float32 tensors on neuron.  Every op but moe_gemm's forward (its output is not shaped
like an input) runs through the glue launch (out_like).
"""
import math
import os

import torch
from torch import Tensor

from .. import op

__all__ = ["rms_norm", "rope", "moe_gemm", "softcap_attention"]

_DIR = os.path.dirname(os.path.abspath(__file__))


def _c(name):
    return os.path.join(_DIR, name)


def _new(shape, like):
    """What the glue allocates for out_like: contiguous, like's dtype and device."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


# ---- RMSNorm ----------------------------------------------------------------------------------------

@op("nkl::rms_norm_fwd", file=_c("rmsnorm.c"), entry="rms_norm_fwd", grid="rows(x)", out_like=("x", "x[:-1]"))
def _rms_norm_fwd(x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return _new(x.shape, x), _new(x.shape[:-1], x)


@op("nkl::rms_norm_bwd_dx", file=_c("rmsnorm.c"), entry="rms_norm_bwd_dx", grid="rows(x)", out_like="x")
def _rms_norm_bwd_dx(dy: Tensor, x: Tensor, w: Tensor, rstd: Tensor) -> Tensor:
    return _new(x.shape, x)


@op("nkl::rms_norm_bwd_dw", file=_c("rmsnorm.c"), entry="rms_norm_bwd_dw", grid="numel(w)", out_like="w")
def _rms_norm_bwd_dw(dy: Tensor, x: Tensor, rstd: Tensor, w: Tensor) -> Tensor:
    return _new(w.shape, w)


def _rms_setup(ctx, inputs, output):
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])


def _rms_backward(ctx, dy, _drstd):
    x, w, rstd = ctx.saved_tensors
    return _rms_norm_bwd_dx(dy, x, w, rstd), _rms_norm_bwd_dw(dy, x, rstd, w), None


_rms_norm_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


def rms_norm(x, w, eps=1e-6):
    """x * rsqrt(mean(x^2, -1) + eps) * w over the last dim."""
    return _rms_norm_fwd(x, w, eps)[0]


# ---- rotary embedding -------------------------------------------------------------------------------

@op("nkl::rope", file=_c("rope.c"), grid="rows(x)", out_like="x")
def _rope(x: Tensor, cos: Tensor, sin: Tensor, inverse: bool = False) -> Tensor:
    return _new(x.shape, x)


def _rope_setup(ctx, inputs, output):
    _, cos, sin, inverse = inputs
    ctx.save_for_backward(cos, sin)
    ctx.inverse = inverse


def _rope_backward(ctx, dy):
    cos, sin = ctx.saved_tensors
    return _rope(dy, cos, sin, not ctx.inverse), None, None, None  # the transpose of a rotation: its inverse


_rope.register_autograd(_rope_backward, setup_context=_rope_setup)


def rope(x, cos, sin):
    """Rotary embedding of x [B, T, H, D] with cos, sin [T, D/2] (rotate-half form)."""
    return _rope(x, cos, sin)


# ---- grouped GEMM (mixture of experts) ------------------------------------------------------------

@op("nkl::moe_gemm", file=_c("moe_gemm.c"), grid="rows(x)")
def _moe_gemm(x: Tensor, w: Tensor, offs: Tensor) -> Tensor:
    return _new((x.shape[0], w.shape[2]), x)


@op("nkl::moe_gemm_dw", file=_c("moe_gemm.c"), entry="moe_gemm_dw", grid="rows(w)", out_like="w")
def _moe_gemm_dw(x: Tensor, dy: Tensor, offs: Tensor, w: Tensor) -> Tensor:
    return _new(w.shape, w)


def _moe_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _moe_backward(ctx, dy):
    x, w, offs = ctx.saved_tensors
    dx = _moe_gemm(dy, w.transpose(1, 2), offs)  # the same kernel on w^T (made contiguous)
    dw = _moe_gemm_dw(x, dy, offs, w)            # dw[g] = x_g^T dy_g, one row of dw per work item
    return dx, dw, None


_moe_gemm.register_autograd(_moe_backward, setup_context=_moe_setup)


def moe_gemm(x, w, offs):
    """out[r] = x[r] @ w[g] for the rows r of expert g: offs (int32) holds each expert's end row."""
    return _moe_gemm(x, w, offs)


# ---- attention with a score modification ------------------------------------------------------------

@op("nkl::softcap_attention_fwd", file=_c("softcap_attention.c"), entry="softcap_attention_fwd", grid="rows(q)",
    out_like=("q", "q[:-1]"))
def _attn_fwd(q: Tensor, k: Tensor, v: Tensor, scale: float, cap: float, causal: bool) -> tuple[Tensor, Tensor]:
    return _new(q.shape, q), _new(q.shape[:-1], q)


@op("nkl::softcap_attention_bwd", file=_c("softcap_attention.c"), entry="softcap_attention_bwd",
    grid="rows(lse)", out_like=("q", "k", "v"))
def _attn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, scale: float,
              cap: float, causal: bool) -> tuple[Tensor, Tensor, Tensor]:
    return _new(q.shape, q), _new(k.shape, k), _new(v.shape, v)


def _attn_setup(ctx, inputs, output):
    q, k, v, ctx.scale, ctx.cap, ctx.causal = inputs
    ctx.save_for_backward(q, k, v, *output)


def _attn_backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _attn_bwd(dout, q, k, v, out, lse, ctx.scale, ctx.cap, ctx.causal)
    return dq, dk, dv, None, None, None


_attn_fwd.register_autograd(_attn_backward, setup_context=_attn_setup)


def softcap_attention(q, k, v, softcap=50.0, causal=False, scale=None):
    """softmax(softcap * tanh(scale * q k^T / softcap) [causal]) v for q, k, v [B, H, T, D]."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _attn_fwd(q, k, v, float(scale), float(softcap), bool(causal))[0]
