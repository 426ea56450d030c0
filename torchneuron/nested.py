"""The fast path of nn.TransformerEncoder / TransformerEncoderLayer on neuron.

In eval mode, without grad and with a src_key_padding_mask, nn.TransformerEncoder packs its input into a
strided nested tensor (`torch._nested_tensor_from_mask`), runs `torch._transformer_encoder_layer_fwd` on
it per layer and unpacks it with `to_padded_tensor(0.0)`: the padding positions of the result are 0, the
other positions see only their own sequence.  The device-generic nested kernels (packing, unpacking,
sizes, copies) are registered for NestedTensorPrivateUse1 in csrc/torch/ops_nested.cpp; the layer is
here, for nested and for dense inputs (a TransformerEncoderLayer's own fast path, or a pre-norm
encoder's): native dense ops (layer_norm, linear, matmul, softmax) in aten's order
(aten/src/ATen/native/transformers/transformer.cpp, attention.cpp), a nested input as its padded batch
with a key padding mask, re-packed into a nested tensor of its sizes (positions past a sequence's
length are computed and dropped).  Masks follow aten's native multi-head attention: a float mask is
converted to bool (nonzero: masked); a query whose keys are all masked gives NaN, as on the CPU.
"""
import math

import torch
import torch.nn.functional as F

_lib = None


def _masked_softmax(scores, masked):
    """aten's _masked_softmax on the CPU: softmax over the last dim without the masked keys (a row with
    every key masked is NaN, as there).  masked: bool, broadcastable to scores, True = masked."""
    return torch.softmax(scores.masked_fill(masked, float("-inf")), -1)


def _layer(x0, keep_keys, mask, mask_type, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
           norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
           ffn_weight_2, ffn_bias_2):
    """One encoder layer on the dense batch x0 [N, L, E]; keep_keys [N, L] (bool, True: a token) or None;
    mask / mask_type as aten's _native_multi_head_attention takes them."""
    N, L, E = x0.shape
    H = num_heads
    D = E // H
    masked = None
    if keep_keys is not None:
        masked = ~keep_keys.view(N, 1, 1, L)
    if mask is not None:
        m = mask.to(torch.bool)
        if mask_type == 0 or (mask_type is None and m.dim() == 2 and m.shape == (L, L)):
            m = m.reshape(1, 1, L, L)     # [L, L] attention mask
        elif mask_type == 1:
            m = m.reshape(N, 1, 1, L)     # [N, L] key padding mask
        else:
            m = m.reshape(N, -1, L, L)    # [N, H, L, L] (or [N, 1, L, L]) merged mask
        masked = m if masked is None else masked | m

    def norm(t, w, b):
        return F.layer_norm(t, (E,), w, b, eps)

    def attention(t):
        qkv = F.linear(t, qkv_weight, qkv_bias).view(N, L, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)                                   # [N, H, L, D]
        scores = torch.matmul(q * (1.0 / math.sqrt(D)), k.transpose(-2, -1))
        p = torch.softmax(scores, -1) if masked is None else _masked_softmax(scores, masked)
        a = torch.matmul(p, v)
        return F.linear(a.transpose(1, 2).reshape(N, L, E), proj_weight, proj_bias)

    x = x0
    if norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    x = attention(x) + x0
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    res = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    h = F.linear(x, ffn_weight_1, ffn_bias_1)
    h = F.gelu(h) if use_gelu else F.relu(h)
    x = F.linear(h, ffn_weight_2, ffn_bias_2) + res
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


def _encoder_layer_nested(src, embed_dim, num_heads, *params, mask=None, mask_type=None):
    if mask is not None:
        raise RuntimeError("NestedTensor with mask is not supported yet")
    sizes = torch.ops.aten._nested_tensor_size(src)            # [N, 2] on the CPU: (length, embed_dim)
    if sizes.numel() == 0 or int(sizes.prod(1).sum()) == 0:
        return src.clone()
    if sizes.size(1) != 2 or not bool((sizes[:, 1] == embed_dim).all()):
        raise RuntimeError(f"_transformer_encoder_layer_fwd: expected a nested tensor of [length, {embed_dim}] "
                           f"components, got sizes {sizes.tolist()}")
    x0 = torch.ops.aten.to_padded_tensor(src, 0.0)            # [N, L, E]
    L = x0.size(1)
    keep = (torch.arange(L).unsqueeze(0) < sizes[:, :1]).to(x0.device)   # [N, L], True: a token
    x = _layer(x0, keep, None, None, num_heads, *params)
    return torch.ops.aten._nested_from_padded(x.contiguous(), sizes)


def _encoder_layer_dense(src, embed_dim, num_heads, *params, mask=None, mask_type=None):
    if src.dim() != 3 or src.size(2) != embed_dim:
        raise RuntimeError(f"_transformer_encoder_layer_fwd: expected src of shape [N, L, {embed_dim}], "
                           f"got {list(src.shape)}")
    if src.numel() == 0:
        return src.clone()
    return _layer(src, None, mask, mask_type, num_heads, *params)


def _encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first,
                   eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
                   ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    params = (qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
              norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2)
    impl = _encoder_layer_nested if src.is_nested else _encoder_layer_dense
    return impl(src, embed_dim, num_heads, *params, mask=mask, mask_type=mask_type)


def register():
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_transformer_encoder_layer_fwd", _encoder_layer, "NestedTensorPrivateUse1")
    lib.impl("_transformer_encoder_layer_fwd", _encoder_layer, "PrivateUse1")
    _lib = lib
