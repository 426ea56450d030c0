"""Training parity: the same GPT, seed and data on neuron and on the CPU give the same loss curve.

This is the project's "done means" test: a small character-level GPT (token + position embedding,
2 pre-LN blocks of causal self-attention and a GELU MLP, final LayerNorm, lm head tied to the token
embedding) trained 20 steps with AdamW, clip_grad_norm_ and a cosine LR schedule with warmup, with
no CPU fallback allowed (NEURON_FALLBACK=error).

For scale: the same run in float32 and float64 on the CPU differs by ~1e-7 relative at every step,
so 1e-4 leaves three orders of magnitude for differences in summation order.
"""

import math

import pytest
import torch

from train_gpt import GPT, CharData, build_and_train

CFG = dict(steps=20, batch=8, block=32, layers=2, d_model=64, heads=4, seed=1234)
RTOL = 1e-4


@pytest.fixture(scope="module")
def data():
    return CharData()


def test_to_device_keeps_tied_weights(device, data):
    # nn.Module.to() keeps a tied Parameter tied only if the backend reports a compatible shallow
    # copy type (aten::_has_compatible_shallow_copy_type); otherwise the embedding and the lm head
    # get two separate Parameters and training silently differs from the CPU.
    torch.manual_seed(0)
    model = GPT(data.vocab_size, 16, 1, 32, 2).to(device)
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.lm_head.weight.device == device
    assert len(list(model.parameters())) == len(list(GPT(data.vocab_size, 16, 1, 32, 2).parameters()))


def test_gpt_loss_parity_neuron_vs_cpu(monkeypatch, device, data, neuron_ops):
    monkeypatch.setenv("NEURON_FALLBACK", "error")

    dev_losses, dev_secs = build_and_train(device, data=data, **CFG)
    if device.type == "neuron":
        torch.neuron.synchronize()
    executed = set(neuron_ops.get_executed_ops())
    fallback = set(neuron_ops.get_fallback_ops())

    cpu_losses, cpu_secs = build_and_train("cpu", data=data, **CFG)

    assert len(dev_losses) == len(cpu_losses) == CFG["steps"]
    assert all(math.isfinite(x) for x in dev_losses), dev_losses
    rel = [abs(a - b) / abs(b) for a, b in zip(dev_losses, cpu_losses)]
    worst = max(range(len(rel)), key=rel.__getitem__)
    print(f"\nlargest relative loss difference {device} vs cpu: {rel[worst]:.3e} at step {worst} "
          f"({dev_losses[worst]:.7f} vs {cpu_losses[worst]:.7f}); "
          f"{device} {dev_secs:.2f}s, cpu {cpu_secs:.2f}s")
    table = "\n".join(f"{i:3d} {a:.7f} {b:.7f} {r:.2e}"
                      for i, (a, b, r) in enumerate(zip(dev_losses, cpu_losses, rel)))
    assert rel[worst] <= RTOL, f"losses differ beyond {RTOL} (step, {device}, cpu, rel):\n{table}"
    # the model learned something (guards against a parity of two broken runs)
    assert dev_losses[-1] < dev_losses[0] - 0.5, table

    assert fallback == set(), f"ops ran through the CPU fallback: {sorted(fallback)}"
    assert executed & {"aten::mm", "aten::addmm"}, (
        f"neither aten::mm nor aten::addmm ran on the device; executed: {sorted(executed)}")
