"""The fuzzer's fixed slice (tests/robustness/fuzz.py; `make fuzz` runs it for a time budget).

250 cases of run seed 1 (every family, variant and layout of fuzz_ops.py), in two worker subprocesses,
each on neuron and on the CPU: no crash, hang, wrong value or exception-type mismatch beyond the known
findings (tests/robustness/findings.py FUZZ_FINDINGS).  About 30 s on the loaded 2-core machine.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.robustness import fuzz, fuzz_worker  # noqa: E402
from tests.robustness.fuzz_ops import generate  # noqa: E402

SLICE = [fuzz.case_seed(1, i) for i in range(250)]


def test_fixed_slice_has_no_open_finding():
    res = fuzz.run_seeds(SLICE)
    assert sorted(res) == sorted(SLICE)
    open_, _ = fuzz.findings(res)
    assert not open_, "\n".join(fuzz.describe(r) + "\n" + generate(r["seed"]).snippet() for r in open_)


def test_generator_is_deterministic_and_covers_the_table():
    a = [generate(s) for s in SLICE]
    assert [c.expr for c in a] == [generate(s).expr for s in SLICE]
    assert {c.family for c in a} == {"pointwise", "reduction", "indexing", "shape", "matmul"}
    assert {c.variant for c in a} == {"functional", "out", "inplace"}
    assert {t.layout for c in a for t in c.inputs} >= {"contig", "t", "step", "offset", "expand"}
    assert any(0 in t.shape for c in a for t in c.inputs) and any(t.shape == () for c in a for t in c.inputs)


def test_judge_flags_wrong_values_and_missing_errors():
    import torch
    c = generate(SLICE[0])
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert fuzz_worker.judge(torch, c, a, None, a.clone(), None)[0] == "matched"
    assert fuzz_worker.judge(torch, c, a, None, torch.tensor([1.0, float("nan"), 3.1]), None)[0] == "wrong"
    assert fuzz_worker.judge(torch, c, a, None, torch.tensor([1.0, 2.0, 3.0]), None)[0] == "wrong"
    err = {"type": "IndexError", "mro": ["IndexError", "LookupError", "Exception"], "msg": "index 5 is out of bounds"}
    rt = {"type": "RuntimeError", "mro": ["RuntimeError", "Exception"], "msg": "index 5 is out of bounds"}
    assert fuzz_worker.judge(torch, c, None, err, a, None)[0] == "wrong"
    assert fuzz_worker.judge(torch, c, None, err, None, rt)[0] == "type"
    assert fuzz_worker.judge(torch, c, None, err, None, err)[0] == "matched"


def test_a_crashing_case_is_pinned_on_its_seed(monkeypatch):
    monkeypatch.setenv("FUZZ_SELFTEST_ABORT", str(SLICE[2]))
    res = fuzz.run_seeds(SLICE[:4])
    assert res[SLICE[2]]["verdict"] == "crash" and "signal 6" in res[SLICE[2]]["reason"]
    assert all(res[s]["verdict"] != "crash" for s in SLICE[:4] if s != SLICE[2])
