"""nn.TransformerEncoder's nested-tensor fast path (eval, no grad, src_key_padding_mask,
enable_nested_tensor=True) on neuron against the CPU, which takes the same path: the padding positions
of the result are 0, the others match.  Also the nested tensors themselves: packing, unpacking, copies.
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
