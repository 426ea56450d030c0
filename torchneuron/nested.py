"""The nested-tensor fast path of nn.TransformerEncoder on neuron.

In eval mode, without grad and with a src_key_padding_mask, nn.TransformerEncoder packs its input into a
strided nested tensor (`torch._nested_tensor_from_mask`), runs `torch._transformer_encoder_layer_fwd` on
it per layer and unpacks it with `to_padded_tensor(0.0)`: the padding positions of the result are 0, the
other positions see only their own sequence.  The device-generic nested kernels (packing, unpacking,
sizes, copies) are registered for NestedTensorPrivateUse1 in csrc/torch/ops_nested.cpp; the layer is
here: the padded batch through native dense ops (layer_norm, linear, scaled_dot_product_attention with a
key padding mask), in aten's order (aten/src/ATen/native/transformers/transformer.cpp), re-packed into a
nested tensor of the input's sizes.  Positions past a sequence's length are computed but dropped.
"""
import torch
import torch.nn.functional as F

_lib = None


def _encoder_layer_nested(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                          norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                          ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    if mask is not None:
        raise RuntimeError("NestedTensor with mask is not supported yet")
    sizes = torch.ops.aten._nested_tensor_size(src)            # [N, 2] on the CPU: (length, embed_dim)
    if sizes.numel() == 0 or int(sizes.prod(1).sum()) == 0:
        return src.clone()
    if sizes.size(1) != 2 or not bool((sizes[:, 1] == embed_dim).all()):
        raise RuntimeError(f"_transformer_encoder_layer_fwd: expected a nested tensor of [length, {embed_dim}] "
                           f"components, got sizes {sizes.tolist()}")
    lengths = sizes[:, 0]
    x0 = torch.ops.aten.to_padded_tensor(src, 0.0)            # [N, L, E]
    N, L, E = x0.shape
    keep = (torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)).to(x0.device)   # [N, L], True: a token
    H = num_heads
    D = E // H

    def norm(t, w, b):
        return F.layer_norm(t, (E,), w, b, eps)

    def attention(t):
        qkv = F.linear(t, qkv_weight, qkv_bias).view(N, L, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)                                   # [N, H, L, D]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep.view(N, 1, 1, L))
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
    return torch.ops.aten._nested_from_padded(x.contiguous(), sizes)


def register():
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_transformer_encoder_layer_fwd", _encoder_layer_nested, "NestedTensorPrivateUse1")
    _lib = lib
