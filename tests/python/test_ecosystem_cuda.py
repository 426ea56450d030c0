"""The CUDA compatibility mode (torchneuron/cuda.py): a script written for CUDA runs on neuron unchanged.

The fixture tests/python/fixtures/cuda_tutorial_train.py is a tutorial-style training script (CUDA
checks, cudnn flags, .cuda(), device="cuda", a pinned-memory DataLoader with a worker, GradScaler,
autocast, events, streams, memory statistics).  Each test runs it in its own interpreter: with
TORCHNEURON_CUDA=1 it must train on neuron with the losses of the same script on the CPU (mode off),
and its exit report must name exactly the lines marked `# CUDA`.  About 25 s in all.
"""
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "fixtures" / "cuda_tutorial_train.py"


def _run(run_py, env, *args):
    code = f"import runpy, sys; sys.argv = [{str(SCRIPT)!r}, *{list(args)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    r = run_py(code, env=env, timeout=240)
    assert r.returncode == 0, r.report
    return json.loads(r.stdout.strip().splitlines()[-1]), r


def _marked_lines():
    return {i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if line.rstrip().endswith("# CUDA")}


def _reported(stderr):
    """{line: what} of the fixture's sites in the exit report."""
    head, _, body = stderr.partition("torchneuron.cuda: rewrote ")
    out = {}
    for line in body.splitlines()[1:]:
        where, _, what = line.strip().partition("  ")
        file, _, num = where.rpartition(":")
        if file == str(SCRIPT):
            assert int(num) not in out, f"line {num} reported twice"
            out[int(num)] = what
    return out


@pytest.fixture(scope="module")
def cpu_run():
    """The script with the mode off (the default): it finds no CUDA and trains on the CPU."""
    from conftest import run_python
    res, r = _run(run_python, {})
    assert res["device"] == "cpu" and res["is_available"] is False
    assert "torchneuron.cuda" not in r.stderr, r.report  # off by default: nothing rewritten or reported
    return res


def test_cuda_script_runs_unchanged_on_neuron_and_matches_cpu(run_py, cpu_run):
    res, r = _run(run_py, {"TORCHNEURON_CUDA": "1"})
    assert res["device"] == "neuron" and res["is_available"] is True, r.report
    assert res["pinned"] and res["name"].startswith("NeuronCore") and res["peak_bytes"] > 0  # batches pinned
    assert res["elapsed_ms"] >= 0
    assert res["losses"] == pytest.approx(cpu_run["losses"], rel=1e-4, abs=1e-5)
    assert res["eval"] == pytest.approx(cpu_run["eval"], rel=1e-4)
    rep = _reported(r.stderr)
    assert set(rep) == _marked_lines(), f"reported {sorted(rep)}, marked {sorted(_marked_lines())}\n{r.stderr}"
    for what in ("torch.cuda.is_available", "Module.cuda()", "Tensor.cuda()", "GradScaler('cuda')",
                 "autocast('cuda')", "zeros(device='cuda')", "torch.cuda.Stream",
                 "torch.backends.cudnn.deterministic ="):
        assert what in rep.values(), (what, rep)


def test_cuda_script_with_amp(run_py, cpu_run):
    """autocast("cuda", bfloat16) and GradScaler("cuda") become neuron's: bfloat16 matmuls, so the
    losses follow the float32 CPU run to bfloat16's precision."""
    res, r = _run(run_py, {"TORCHNEURON_CUDA": "1"}, "--amp")
    assert res["device"] == "neuron", r.report
    assert res["losses"] == pytest.approx(cpu_run["losses"], rel=2e-2)
    assert res["losses"] != pytest.approx(cpu_run["losses"], rel=1e-6, abs=0)  # bfloat16 did run


def test_import_turns_the_mode_on_and_maps_the_spellings(run_py):
    r = run_py("""
import torch
assert not torch.cuda.is_available()
import torchneuron.cuda as tc
assert torch.cuda.is_available() and torch.cuda.device_count() == torch.neuron.device_count()
x = torch.ones(2, device="cuda:0")
assert x.device == torch.device("neuron", 0) and torch.device("cuda") == torch.device("neuron")
assert x.cuda().device.type == "neuron" and torch.randn(2).to(torch.device("cuda")).device.type == "neuron"
with torch.cuda.amp.autocast(dtype=torch.bfloat16):
    assert (x[None] @ x[:, None]).dtype == torch.bfloat16
assert torch.cuda.amp.GradScaler().is_enabled()
torch.cuda.set_device("cuda:0"); assert torch.cuda.current_device() == 0
torch.cuda.manual_seed_all(3); a = torch.rand(3, device="cuda"); torch.cuda.manual_seed(3)
assert torch.equal(a, torch.rand(3, device="cuda"))
free, total = torch.cuda.mem_get_info()
assert 0 < free <= total and torch.cuda.memory_allocated() > 0
assert torch.cuda.is_bf16_supported() and torch.cuda.get_device_capability() == torch.neuron.get_device_capability()
print(len(tc.sites()))
""")
    assert r.returncode == 0, r.report
    assert int(r.stdout.split()[-1]) >= 10
    assert "torchneuron.cuda: rewrote" in r.stderr


def test_pytorch_internals_still_see_no_cuda(run_py):
    """torch's own modules keep the real torch.cuda (else they take CUDA-only paths)."""
    r = run_py("import torch, torchneuron.cuda\n"
               "from torch.utils.data import _utils\n"
               "import torch.random\n"
               "with torch.random.fork_rng(device_type='cuda'):\n"   # calls torch.cuda.device_count inside torch
               "    pass\n"
               "print('ok', torch.cuda.is_available())\n")
    assert r.returncode == 0 and "ok True" in r.stdout, r.report
