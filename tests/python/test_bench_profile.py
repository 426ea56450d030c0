"""bench.profile on one tiny workload: the child runs the bench's own case by name, perf (or nothing)
records the steady-state loop, and the summary has the structure docs/profiles.md is built from."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench import profile as bp  # noqa: E402

NAME = "add, 1 element [enqueue]"


def _report(tmp_path, ratio=0.5):
    rep = {"format": 1, "meta": {"mode": "full", "date": "test"}, "machine": {}, "limits": [], "compiled": [],
           "groups": [{"key": "latency", "title": "1. Per-op latency", "results": [
               {"name": NAME, "group": "latency", "median_s": {"neuron": 2e-6, "cpu": 1e-6}, "ratio_median": ratio},
               {"name": "mm 16x16 [enqueue]", "group": "latency", "median_s": {"neuron": 1e-6, "cpu": 2e-6},
                "ratio_median": 2.0}]}]}
    (tmp_path / "benchmarks.json").write_text(json.dumps(rep))
    return str(tmp_path / "benchmarks.md")


def test_find_case_and_report_selection(tmp_path):
    from bench.cli import find_case
    group, case = find_case(NAME)
    assert group == "latency" and case.name == NAME
    with pytest.raises(KeyError):
        find_case("no such workload", group="latency")
    rows, meta = bp.load_report(_report(tmp_path))
    assert [r["name"] for r in rows] == [NAME, "mm 16x16 [enqueue]"] and not meta["quick"]
    # names containing commas survive --only splitting
    known = {"AdamW step, 16 x 1M params (default impl)", "add [256K]"}
    assert bp._split_names("add [256K],AdamW step, 16 x 1M params (default impl)", known) == \
        ["add [256K]", "AdamW step, 16 x 1M params (default impl)"]


def test_classifier():
    c = bp.Classifier()
    assert c("_C.cpython-311-x86_64-linux-gnu.so", "nk_add_f32") == "nk kernels"
    assert c("_C.cpython-311-x86_64-linux-gnu.so", "nrt_queue_push") == "nrt runtime: queue/alloc/launch"
    assert c("[kernel.kallsyms]", "clear_page_erms") == "kernel: page faults/mmap"
    assert c("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault") == "Python interpreter"
    assert c("libc.so.6", "__memmove_avx512_unaligned_erms") == "libc memcpy/memset"
    assert c("libtorch_cpu.so", "c10::Dispatcher::callBoxed") == "PyTorch dispatcher/ATen glue"
    assert c("libgomp.so.1", "gomp_barrier_wait_end") == "OpenMP runtime"


def test_profile_one_tiny_workload(tmp_path):
    tool = bp.pick_tool("perf") if shutil.which("perf") else None
    if tool is None:
        pytest.skip("perf is not installed or cannot record here (perf_event_paranoid / seccomp)")
    out, raw = tmp_path / "profiles.md", tmp_path / "profiles.json"
    r = subprocess.run([sys.executable, "-m", "bench.profile", "--report", _report(tmp_path), "--seconds", "0.1",
                        "--tool", "perf", "--out", str(out), "--json", str(raw)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(raw.read_text())
    assert data["tool"] == "perf"
    (res,) = data["results"]                        # only the slower workload was picked
    assert res["workload"]["name"] == NAME
    for dev in ("neuron", "cpu"):
        run = res["runs"][dev]
        assert "error" not in run, run
        assert run["steps"] >= 1 and run["s_per_step"] > 0
        prof = run["profile"]
        assert prof and "error" not in prof, prof
        assert prof["samples"] > 0 and 1 <= len(prof["symbols"]) <= 12
        assert abs(sum(c["share"] for c in prof["categories"]) - 1.0) < 0.02
        assert all({"share", "dso", "sym", "cat"} <= set(s) for s in prof["symbols"])
        assert 0 < prof["main_share"] <= 1 and prof["threads"] >= 1
        assert 0 < sum(c["share"] for c in prof["main_categories"]) <= 1.02
    tr = res["runs"]["neuron"]["trace"]
    assert tr["launches_per_step"] >= 1 and any("add" in k["name"] for k in tr["kernels"])
    md = out.read_text()
    assert f"## {NAME}" in md and "Where the time goes" in md and bp.HUMAN in md
    assert "mm 16x16" not in md.split("\n## ", 1)[1]   # the faster workload is not profiled
