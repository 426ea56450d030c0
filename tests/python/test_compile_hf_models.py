"""A compiled training step (torch.compile(backend="neuron")) of Hugging Face Transformers models against
eager neuron, and eager neuron against the CPU: the loss and every parameter gradient.

The models are tiny and have random weights (tests/python/hf_models.py: 1-2 layers, hidden 32, vocab
96, sequence 8, batch 2), one per architecture, of every family: decoder-only, encoder-only,
encoder-decoder, vision, audio and state-space, with tied input/output embeddings among them (gpt2,
gemma, bloom, t5, whisper, mamba, ...).  A case marked xfail(strict=True) is a known defect: it names the
defect and its smallest repro, and turns red once the defect is fixed so the mark is removed with it.
"""
import copy

import pytest
import torch

import torchneuron

import hf_models

pytestmark = pytest.mark.usefixtures("compile_cache_dir", "fresh_dynamo")

# Tolerances.  Compiled vs eager neuron: the same float32 arithmetic in another order (fused kernels,
# other GEMM blockings); a gradient entry may differ by RTOL relative plus ATOL times the largest entry of
# that gradient (sums of many terms cancel: an absolute part relative to the tensor's scale).
# Eager neuron vs CPU: the same, our kernels against ATen's.
RTOL, ATOL = 1e-4, 1e-5

# name -> reason (xfail, strict): a known defect of the compiled step, with its smallest repro.  None now.
# Before the issue-16 fixes (git 5b603ca, ab3b614) this sweep failed on 17 architectures: the gradient of a
# tied embedding weight (gemma, gemma2, gemma3, falcon, bloom, mpt, cohere, starcoder2, modernbert, t5,
# bart, pegasus, whisper: ((F.embedding(ids, W) @ W.t()) * w).sum()), a pointwise op fused into embedding
# (roberta, xlm_roberta, opt: F.embedding(ids, W) * 2), a reduction over a constant (wav2vec2's CTC input
# lengths: torch.ones_like(x).sum(-1)).
XFAIL_COMPILED = {}
# name -> reason: eager neuron differs from the CPU (or fails).  None known.
XFAIL_EAGER = {}


def _cases(xfails):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=xfails[n])) if n in xfails else n
            for n in hf_models.ARCHS]


def _step(model, inputs, device, run=None):
    """One training step's forward and backward through `run` (default: the model itself): the loss and
    {parameter name: gradient} on the CPU."""
    out = (model if run is None else run)(**{k: v.to(device) for k, v in inputs.items()})
    out.loss.backward()
    return out.loss.detach().cpu(), {n: None if p.grad is None else p.grad.cpu()
                                     for n, p in model.named_parameters()}


def _compare(got, ref, what):
    """Every mismatch of loss and gradients at once, so that a failure names all the tensors it hits."""
    (loss, grads), (rloss, rgrads) = got, ref
    bad = []
    if not torch.allclose(loss, rloss, rtol=RTOL, atol=ATOL * max(1.0, rloss.abs().item())):
        bad.append(f"loss {loss.item():.7g} vs {rloss.item():.7g}")
    assert grads.keys() == rgrads.keys()
    for n, r in rgrads.items():
        g = grads[n]
        if (g is None) != (r is None):
            bad.append(f"{n}: gradient {'missing' if g is None else 'present'}, reference "
                       f"{'has none' if r is None else 'has one'}")
        elif r is not None:
            scale = r.abs().max().item() if r.numel() else 0.0
            err = (g - r).abs() - RTOL * r.abs()
            if not torch.isfinite(g).all() or err.max().item() > ATOL * max(scale, 1e-3):
                bad.append(f"{n}: max |diff| {(g - r).abs().max().item():.3g}, max |ref| {scale:.3g}")
    assert not bad, f"{what}: {len(bad)} of {len(rgrads) + 1} differ:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("name", _cases(XFAIL_COMPILED))
def test_compiled_training_step_matches_eager(name):
    model, inputs = hf_models.build(name)
    assert hf_models.is_tied(model) == hf_models.ARCHS[name].tied
    eager = copy.deepcopy(model).to("neuron")
    comp = copy.deepcopy(model).to("neuron")
    assert hf_models.is_tied(comp) == hf_models.ARCHS[name].tied
    ref = _step(eager, inputs, "neuron")
    torchneuron.compile_stats(reset=True)
    got = _step(comp, inputs, "neuron", torch.compile(comp, backend="neuron"))
    graphs = torchneuron.compile_stats()["graphs"]
    assert any(g["compiled"] and g["calls"] for g in graphs), graphs     # the step did run compiled code
    _compare(got, ref, f"{name} compiled vs eager neuron")


@pytest.mark.parametrize("name", _cases(XFAIL_EAGER))
def test_eager_training_step_matches_cpu(name):
    model, inputs = hf_models.build(name)
    ref = _step(copy.deepcopy(model), inputs, "cpu")
    got = _step(model.to("neuron"), inputs, "neuron")
    _compare(got, ref, f"{name} eager neuron vs CPU")
