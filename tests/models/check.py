"""One model of the sweep, every mode, against the CPU from the same weights; prints one JSON line.

    python -m tests.models.check NAME [--modes forward,train,generate,compiled]

Modes (each on a fresh copy of the CPU model, its ops tracked apart):
  forward    eval-mode forward under no_grad: every floating tensor of the output (logits, loss, ...)
  train      a training step (train mode, dropout off): the loss and every parameter's gradient
  generate   greedy generate() token ids (generative models only): equal ids
  compiled   the forward of `forward` under torch.compile(backend="neuron")
A mode's status: native (matches, no op fell back to the CPU), fallback (matches, with the fallback
ops named), mismatch (the worst difference, relative to the reference's largest entry), or error
(the exception's first line).  NEURON_FALLBACK=error is the goal: `fallback` lists what stands in the way.
"""
import argparse
import copy
import json
import sys
import traceback

import torch

# As the compile sweep: rtol plus atol times the tensor's largest entry, that entry taken as at least 1e-2
# (a gradient whose entries are all tiny is a sum of cancelling terms of the loss's size: CLIP's
# logit_scale gradient of 1e-5 differs by 2e-8 between two float32 summation orders).
RTOL, ATOL, FLOOR = 1e-4, 1e-5, 1e-2
MODES = ("forward", "train", "generate", "compiled")


def _to(inputs, device):
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _tensors(out, prefix="out"):
    """{path: tensor} of every floating tensor in a model output (ModelOutput, tuple, dict)."""
    found = {}
    if isinstance(out, torch.Tensor):
        if out.is_floating_point():
            found[prefix] = out.detach().cpu()
    elif isinstance(out, dict):
        for k, v in out.items():
            found.update(_tensors(v, f"{prefix}.{k}"))
    elif isinstance(out, (list, tuple)):
        for i, v in enumerate(out):
            found.update(_tensors(v, f"{prefix}[{i}]"))
    return found


def _worst(got, ref):
    """(ok, worst): every tensor within tolerance, and the worst max|diff| / max|ref| with its name."""
    worst, ok = (0.0, ""), True
    if got.keys() != ref.keys():
        return False, (float("inf"), f"outputs differ: {sorted(set(got) ^ set(ref))}")
    for n, r in ref.items():
        g = got[n]
        if g is None or r is None:
            if (g is None) != (r is None):
                return False, (float("inf"), f"{n}: gradient {'missing' if g is None else 'unexpected'}")
            continue
        if g.shape != r.shape:
            return False, (float("inf"), f"{n}: shape {tuple(g.shape)} vs {tuple(r.shape)}")
        scale = max(r.abs().max().item() if r.numel() else 0.0, FLOOR)
        if not torch.isfinite(g).all() and torch.isfinite(r).all():
            return False, (float("inf"), f"{n}: non-finite")
        err = ((g - r).abs() - RTOL * r.abs()).max().item() if r.numel() else 0.0
        if err > ATOL * scale:
            ok = False
        rel = ((g - r).abs().max().item() / scale) if r.numel() else 0.0
        if rel > worst[0]:
            worst = (rel, n)
    return ok, worst


def _forward(model, inputs, device, compiled=False):
    m = copy.deepcopy(model).eval().to(device)
    run = torch.compile(m, backend="neuron") if compiled else m
    with torch.no_grad():
        return _tensors(run(**_to(inputs, device)))


def _train(model, inputs, device):
    m = copy.deepcopy(model).train().to(device)
    out = m(**_to(inputs, device))
    out.loss.backward()
    got = {"loss": out.loss.detach().cpu()}
    got.update({n: None if p.grad is None else p.grad.cpu() for n, p in m.named_parameters()})
    return got


def _generate_inputs(name, inputs):
    from . import archs
    kind = archs.ARCHS[name].inputs
    if kind == "causal":
        return {"input_ids": inputs["input_ids"][:, :4]}
    if kind == "seq2seq":
        return {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    return {"input_features": inputs["input_features"]}


def _generate(model, inputs, device):
    m = copy.deepcopy(model).eval().to(device)
    cfg = m.generation_config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else (cfg.eos_token_id or 0)
    with torch.no_grad():
        ids = m.generate(**_to(inputs, device), max_new_tokens=5, do_sample=False, pad_token_id=pad,
                         min_new_tokens=5)
    return ids.cpu()


def _first_line(e):
    """The exception's first line; for a failed torch.compile backend, the error it raised."""
    msg = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    if len(msg) > 1 and msg[0].endswith("raised:"):
        return f"{type(e).__name__}: {msg[0]} {msg[1].strip()}"[:300]
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def run_mode(name, mode, model, inputs):
    import torchneuron
    try:
        if mode == "generate":
            gin = _generate_inputs(name, inputs)
            want = _generate(model, gin, "cpu")
            torchneuron.clear_op_tracking()
            got = _generate(model, gin, "neuron")
            fb = sorted(torchneuron.get_fallback_ops())
            if got.shape != want.shape or not torch.equal(got, want):
                n = (got != want).sum().item() if got.shape == want.shape else "all"
                return {"status": "mismatch", "worst": f"{n} of {want.numel()} token ids differ", "fallback": fb}
            return {"status": "fallback" if fb else "native", "fallback": fb}
        if mode == "train":
            want = _train(model, inputs, "cpu")
            torchneuron.clear_op_tracking()
            got = _train(model, inputs, "neuron")
        else:
            want = _forward(model, inputs, "cpu")
            torchneuron.clear_op_tracking()
            got = _forward(model, inputs, "neuron", compiled=(mode == "compiled"))
        torch.neuron.synchronize()
        fb = sorted(torchneuron.get_fallback_ops())
        ok, (rel, where) = _worst(got, want)
        if not ok:
            return {"status": "mismatch", "worst": f"{rel:.3g} at {where}", "fallback": fb}
        return {"status": "fallback" if fb else "native", "fallback": fb, "worst": f"{rel:.2g}"}
    except Exception as e:
        try:
            torch.neuron.synchronize()
        except Exception:
            pass
        return {"status": "error", "error": _first_line(e), "trace": traceback.format_exc()[-1500:]}


def run(name, modes=MODES):
    """The result dict of one model: {"name", "family", "modes": {mode: status dict}} (or build_error)."""
    from . import archs
    res = {"name": name, "family": archs.family(name), "modes": {}}
    try:
        model, inputs = archs.build(name)
    except Exception as e:
        res["build_error"] = _first_line(e)
        return res
    for mode in modes:
        if mode == "generate" and not archs.is_generative(name):
            continue
        res["modes"][mode] = run_mode(name, mode, model, inputs)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args(argv)
    print(json.dumps(run(a.name, a.modes.split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
