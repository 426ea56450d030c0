"""nn.TransformerEncoder's nested-tensor fast path (eval, no grad, src_key_padding_mask,
enable_nested_tensor=True) on neuron against the CPU, which takes the same path: the padding positions
of the result are 0, the others match.  Also the nested tensors themselves (packing, unpacking, copies)
and TransformerEncoderLayer's dense fast path with each kind of mask.  All natively (no CPU fallback).
"""

import pytest
import torch
import torch.nn as nn

MASK = [[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]]


def _encoder(norm_first, activation, final_norm):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16) if final_norm else None,
                                enable_nested_tensor=True)
    return enc.eval()


@pytest.mark.parametrize("norm_first,activation,final_norm", [
    (False, "relu", False), (False, "gelu", True), (True, "relu", True),
])
def test_encoder_padding_mask_matches_cpu(norm_first, activation, final_norm, neuron_ops):
    enc = _encoder(norm_first, activation, final_norm)
    assert enc.use_nested_tensor == (not norm_first)   # torch declines the nested path for norm_first
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.tensor(MASK, dtype=torch.bool)
    with torch.no_grad():
        want = enc(x, src_key_padding_mask=mask)
        dev = enc.to("neuron")
        neuron_ops.clear_op_tracking()
        got = dev(x.to("neuron"), src_key_padding_mask=mask.to("neuron")).cpu()
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    if not norm_first and not final_norm:
        assert bool((got[mask] == 0).all())   # the nested path's padding, as on the CPU
    if not norm_first:   # the nested path ran on the device (the layer itself is Python: torchneuron/nested.py)
        assert {"aten::_nested_tensor_from_mask", "aten::to_padded_tensor", "aten::_nested_from_padded"} <= \
            neuron_ops.get_executed_ops()
    assert not {"aten::_transformer_encoder_layer_fwd", "aten::_nested_tensor_from_mask",
                "aten::to_padded_tensor", "aten::_nested_from_padded"} & neuron_ops.get_fallback_ops()


def test_nested_tensor_roundtrip():
    t = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    want = torch._nested_tensor_from_mask(t, mask)
    got = torch._nested_tensor_from_mask(t.to("neuron"), mask.to("neuron"))
    assert got.is_nested and got.device.type == "neuron"
    assert torch.equal(torch.ops.aten._nested_tensor_size(got), torch.ops.aten._nested_tensor_size(want))
    assert torch.equal(got.to_padded_tensor(-1.0).cpu(), want.to_padded_tensor(-1.0))
    back = got.cpu()
    assert back.is_nested and all(torch.equal(a, b) for a, b in zip(back.unbind(), want.unbind()))
    assert all(torch.equal(a.cpu(), b) for a, b in zip(got.unbind(), want.unbind()))
    assert torch._nested_tensor_from_mask_left_aligned(t.to("neuron"), mask.to("neuron"))
    with pytest.raises(RuntimeError, match="left-aligned"):
        torch._nested_tensor_from_mask(t.to("neuron"), torch.tensor([[0, 1, 1, 0, 0]] * 3, dtype=torch.bool, device="neuron"))


def _masks(n, L, H):
    pad = torch.tensor(MASK, dtype=torch.bool)[:n, :L]
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    full_pad = pad.clone()
    full_pad[0] = True                                     # every key of a sequence masked: NaN, as on the CPU
    per_head = torch.rand(n * H, L, L, generator=torch.Generator().manual_seed(3)) > 0.7
    return {
        "none": {},
        "key_padding": {"src_key_padding_mask": pad},
        "key_padding_float": {"src_key_padding_mask": torch.zeros(n, L).masked_fill(pad, float("-inf"))},
        "causal": {"src_mask": causal},
        "causal_and_padding": {"src_mask": causal, "src_key_padding_mask": pad},
        "all_keys_masked": {"src_key_padding_mask": full_pad},
        "per_head_3d": {"src_mask": per_head},
    }


@pytest.mark.parametrize("case", sorted(_masks(4, 6, 4)))
@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_fast_path_dense_matches_cpu(case, norm_first, neuron_ops):
    """A TransformerEncoderLayer on its own takes the fast path with a dense input: the same op, natively."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(1))
    kw = _masks(4, 6, 4)[case]
    with torch.no_grad():
        want = layer(x, **kw)
        layer.to("neuron")
        neuron_ops.clear_op_tracking()
        got = layer(x.to("neuron"), **{k: v.to("neuron") for k, v in kw.items()}).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert "aten::_transformer_encoder_layer_fwd" not in neuron_ops.get_fallback_ops()
