"""Runs PyTorch's distributed test bases for the c10d backend ``neuron`` and classifies every test.

The bases (the torch 2.13 wheel's torch/testing/_internal): ``DistributedTest._DistTestBase``
(base_dist.py), ``FSDPTest`` of common_fsdp (base_fsdp.py), ``DTensorTestBase`` of common_dtensor
(base_dtensor.py).  Each test runs as upstream runs it: 2 rank processes started with spawn by the base's
MultiProcessTestCase, file:// rendezvous on a temporary file, MASTER_ADDR 127.0.0.1 (loopback only),
one kernel thread per rank (NEURON_NUM_THREADS=1), 2 visible neuron devices per rank.

Bounds: the base's own per-test limit (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT, here --test-timeout) after
which it terminates its ranks; on top of it this runner kills the worker's whole session when a test
overruns that limit by GRACE seconds, records the test as errored and restarts the worker on the rest.
After every worker: its session is killed (no rank process outlives it) and any shared-memory segment
of a process that no longer exists (/dev/shm/tn-ncl-PID-*, neuron-watch-PID) is removed and counted.

Outcomes: passed; skipped (the base's own decorators and skip exit codes; reasons grouped below);
failed (a rank's AssertionError); errored (any other exception, a timeout, a crash).
"""
import collections
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASES = {
    "dist": ("tests.distributed.base_dist", "DistributedTest._DistTestBase (distributed_test.py)"),
    "fsdp": ("tests.distributed.base_fsdp", "FSDPTest (common_fsdp.py)"),
    "dtensor": ("tests.distributed.base_dtensor", "DTensorTestBase (common_dtensor.py)"),
}
# The slice that `make test` runs (tests/python/test_distributed_upstream.py): passing tests covering
# all_reduce, all_gather (list, coalesced), broadcast, barrier and DDP (CPU tensors), FSDP2 (all-gather and
# reduce-scatter of neuron tensors) and DTensor (redistribute: all-gather, all-to-all, all-reduce,
# reduce-scatter; tensor parallelism).  Chosen for time: an upstream test costs 10-20 s on a loaded 2-core
# machine, most of it its two spawned ranks importing torch.
SLICE = [
    "tests.distributed.base_dist.TestNeuronDistBackend.test_all_reduce_sum",
    "tests.distributed.base_dist.TestNeuronDistBackend.test_all_gather",
    "tests.distributed.base_dist.TestNeuronDistBackend.test_all_gather_coalesced_simple",
    "tests.distributed.base_dist.TestNeuronDistBackend.test_broadcast",
    "tests.distributed.base_dist.TestNeuronDistBackend.test_barrier",
    "tests.distributed.base_dist.TestNeuronDistBackend.test_DistributedDataParallelCPU",
    "tests.distributed.base_fsdp.TestNeuronFSDP.test_fully_shard_train_parity_multi_group",
    "tests.distributed.base_dtensor.TestNeuronDTensor.test_redistribute",
    "tests.distributed.base_dtensor.TestNeuronDTensor.test_tp_mlp",
]
SLICE_MEASURED = "98-148 s wall on the 2-core Intel Xeon at load 7-9, about 7 CPU-s per test"
GRACE = 60  # seconds past the base's own per-test limit before the worker is killed

# Skip reasons (the base's own messages) -> group, first match wins.
SKIP_GROUPS = [
    (r"CUDA is not available|Need at least \d+ CUDA device|support CUDA|cuda|CUDA|GPU|gpu", "needs CUDA"),
    (r"Skipped due to small world size|requires (an exact )?world size of [3-9]", "needs more than 2 ranks"),
    (r"NCCL|Nccl|nccl", "needs NCCL (or is NCCL-specific)"),
    (r"requires backend neuron to be one of", "restricted to named backends (require_backend_is_available)"),
    (r"[Oo]nly (the )?[Gg]loo|gloo backend|^GLOO ", "gloo-only (gated by the backend's name)"),
    (r"Only MPI", "MPI-only (gated by the backend's name)"),
    (r"github\.com/pytorch/pytorch/(issues|pull)", "disabled upstream (an issue or PR link)"),
    (r"[Tt]orchvision", "needs torchvision"),
    (r"[Ww]indows|[Mm]ac|Sandcastle|fbcode", "platform-specific"),
]


# Why a test that fails still fails (by test name), shown beside it in the report.  Only for causes that are
# understood; each is outside the backend or named as a gap.
CAUSES = {
    "test_ddp_logging_data_cpu": "upstream limitation of plugin backends: DDP logs ProcessGroup::getBackendName(), "
                                 "which is the backend *type* string, \"custom\" for every plugin "
                                 "(c10d/ProcessGroup.hpp), while the test expects dist.get_backend() (\"neuron\")",
}


def skip_group(reason):
    for pat, group in SKIP_GROUPS:
        if re.search(pat, reason):
            return group
    return reason or "(no reason given)"


def base_env(test_timeout):
    env = dict(os.environ)
    env.update(BACKEND="neuron", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", NEURON_NUM_THREADS="1",
               OMP_NUM_THREADS="1", NEURON_RT_VISIBLE_CORES="0-1", GLOO_SOCKET_IFNAME="lo",
               TP_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1",
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(test_timeout))
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    env.pop("LOCAL_WORLD_SIZE", None)
    return env


def list_tests(module, env):
    out = subprocess.run([sys.executable, "-m", "tests.distributed.worker", "--list", module], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"listing {module} failed:\n{out.stderr[-3000:]}")
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shm_names():
    return {p.name for p in Path("/dev/shm").glob("*")}


def clean_shm(before):
    """Removes the segments created since `before` (a shm_names() snapshot) by processes that are gone;
    returns their names."""
    removed = []
    for p in Path("/dev/shm").glob("*"):
        if p.name in before:
            continue
        m = re.match(r"tn-ncl-(\d+)-|neuron-watch-(\d+)$", p.name)
        if m and not _pid_alive(int(m.group(1) or m.group(2))):
            try:
                p.unlink()
                removed.append(p.name)
            except OSError:
                pass
    return removed


def _kill_session(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session: it and its rank processes
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def run_tests(ids, test_timeout=180, log=None, progress=True):
    """Runs the test ids (in worker processes, restarted after a crash or hang); returns {id: result}
    and the shared-memory segments it had to remove."""
    env = base_env(test_timeout)
    results, pending, shm_left = {}, list(ids), []
    log = log or open(os.devnull, "w")
    while pending:
        before = shm_names()
        proc = subprocess.Popen([sys.executable, "-m", "tests.distributed.worker", *pending], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        current, started = None, time.time()
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        buf = ""
        dead, ended = False, 0
        while True:
            ready = sel.select(timeout=5.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1 << 16).decode(errors="replace")
                if not chunk:
                    dead = True
                else:
                    buf += chunk
                    *lines, buf = buf.split("\n")
                    for ln in lines:
                        if ln.startswith("@@START "):
                            current, started = json.loads(ln[8:])["id"], time.time()
                        elif ln.startswith("@@END "):
                            r = json.loads(ln[6:])
                            results[r["id"]] = r
                            pending.remove(r["id"])
                            current, ended = None, ended + 1
                            if progress:
                                print(f"[{len(results)}/{len(ids)}] {r['id'].rsplit('.', 1)[-1]}: {r['status']}"
                                      f"{' (' + (r['reason'] or r['error'])[:100] + ')' if r['reason'] or r['error'] else ''}"
                                      f" {r['seconds']} s", file=sys.stderr, flush=True)
            if dead or not pending:
                break
            if current is not None and time.time() - started > test_timeout + GRACE:
                _kill_session(proc)
                results[current] = {"id": current, "status": "errored", "reason": "",
                                    "error": f"hang: killed by the runner after {test_timeout + GRACE} s",
                                    "seconds": round(time.time() - started, 1)}
                pending.remove(current)
                current = None
                break
        sel.close()
        if not pending and current is None:  # done: let the worker exit by itself (its exit handlers run)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        _kill_session(proc)
        if dead and current is not None:  # the worker itself died mid-test
            results[current] = {"id": current, "status": "errored", "reason": "",
                                "error": f"worker died (exit code {proc.returncode})",
                                "seconds": round(time.time() - started, 1)}
            pending.remove(current)
        elif dead and pending and ended == 0:
            # died before its first test (e.g. importing the base): every remaining test errors so
            for tid in pending:
                results[tid] = {"id": tid, "status": "errored", "reason": "",
                                "error": f"worker exited (code {proc.returncode}) before the test", "seconds": 0}
            pending = []
        shm_left += clean_shm(before)
    return results, shm_left


# ---- the report -------------------------------------------------------------------------------------

def summarize(results):
    by_status = collections.Counter(r["status"] for r in results)
    skips = collections.Counter(skip_group(r["reason"]) for r in results if r["status"] == "skipped")
    return by_status, skips


SECTION = "## Upstream test bases"


def render(per_base, cpu, partial):
    """per_base: {name: (title, {"results", "load", "shm_left", "commit"})}"""
    L = [SECTION, ""]
    L.append("`make dist-upstream` (`python -m tests.distributed`, tests/distributed/) runs PyTorch's own "
             "distributed test bases from the torch 2.13 wheel for the backend `neuron`: each test as upstream "
             "runs it, 2 rank processes spawned by the base's `MultiProcessTestCase`, file:// rendezvous, "
             "loopback only, one kernel thread per rank, 2 visible devices per rank, every test bounded (the "
             "base's own limit, then the runner kills the worker and goes on). No test is skipped by the "
             "runner: every skip below is the base's own decorator or exit code.")
    L.append("")
    L.append("- `DistributedTest._DistTestBase` (distributed_test.py), instantiated as upstream's "
             "test_distributed_spawn.py does for gloo (`BACKEND=neuron WORLD_SIZE=2`, `neuron` added to "
             "`DistTestCases.backend_feature` \"ddp\", \"subgroup\" and \"plugin\", not \"gpu\"/\"cuda\": those "
             "tests use `.cuda(rank)`). Its tensors are CPU tensors, which the neuron backend serves itself.")
    L.append("- `FSDPTest` (common_fsdp.py) with `DEVICE_TYPE`/`DISTRIBUTED_BACKEND` set to neuron, and "
             "`DTensorTestBase` (common_dtensor.py), which finds neuron itself, with the backend string "
             "`cpu:gloo,neuron:neuron` (its `init_pg` refuses a plain `neuron`). The wheel ships these bases "
             "and their models and helpers but not the FSDP2 and DTensor test files, so their tests "
             "(tests/distributed/base_fsdp.py, base_dtensor.py) are ours, written in upstream's patterns with "
             "the bases' helpers (check_sharded_parity, patch_all_gather, _test_fsdp_parity, _test_op, "
             "CommDebugMode, Transformer.parallelize), on neuron tensors.")
    L.append("")
    if partial:
        L.append("**Partial run** (a subset of the tests or bases).\n")
    L.append("| base | tests | passed | skipped | failed | errored | time | load | tree |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, (title, e) in per_base.items():
        res = e["results"]
        st, _ = summarize(res)
        minutes = sum(r["seconds"] for r in res) / 60
        L.append(f"| {title} | {len(res)} | {st['passed']} | {st['skipped']} | {st['failed']} | {st['errored']} "
                 f"| {minutes:.1f} min | {e['load']} | {e['commit']} |")
    L.append("")
    L.append(f"Time: the sum of the tests' times, on {cpu} (2 cores); load: the 5-minute load average when the "
             "base finished, on a machine shared with other builds, so the times are upper bounds (most of a "
             "test's time is its 2 spawned ranks importing torch).")
    left = [n for _, e in per_base.values() for n in e["shm_left"]]
    ncl = [n for n in left if n.startswith("tn-ncl-")]
    L.append(f"Left in /dev/shm by rank processes that had exited (the runner removes them): {len(ncl)} "
             "collective segments (`tn-ncl-*`)" + (": " + ", ".join(ncl[:5]) if ncl else "") +
             f"; {len(left) - len(ncl)} runtime watch page(s) (`neuron-watch-PID`) of processes that ended without "
             "their exit handlers (multiprocessing ends a rank with os._exit; a worker killed by the runner), "
             "which the next runtime start sweeps anyway (csrc/runtime/watch.c).")
    gone = sorted({c for _, e in per_base.values() for c in re.findall(r"[0-9a-f]{7,}", e["commit"])
                   if not is_ancestor(c)})
    if gone:
        L.append(f"Tree {', '.join(gone)}: this branch before a rebase onto a newer main (the same Python and glue; "
                 "the C library of the main it was on).")
    L.append("")
    for name, (title, e) in per_base.items():
        st, skips = summarize(e["results"])
        if skips:
            L.append(f"Skips of {title}, by the base's reason:\n")
            L.append("| reason | tests |\n|---|---:|")
            for g, k in skips.most_common():
                L.append(f"| {g} | {k} |")
            L.append("")
    L.append("Found by these runs and fixed: `all_gather_coalesced` read c10d's outputs[rank][input] as one list per "
             "input (4 tests of _DistTestBase errored; csrc/torch/distributed.cpp), and DTensor had no sharding "
             "strategy for neuron's fused attention, which scaled_dot_product_attention takes on neuron "
             "(`test_tp_transformer` errored; torchneuron/distributed.py registers one).")
    L.append("")
    names = ", ".join(f"`{t.rsplit('.', 1)[-1]}`" for t in SLICE)
    L.append(f"`make test` runs a slice, tests/python/test_distributed_upstream.py: {names}, each of which must "
             f"pass, and no collective segment left ({SLICE_MEASURED}).")
    L.append("")
    bad = [(name, r) for name, (_, e) in per_base.items() for r in e["results"] if r["status"] in ("failed", "errored")]
    L.append("Failures and errors (test: first error line):\n")
    if not bad:
        L.append("None.")
    for name, r in sorted(bad, key=lambda x: x[1]["id"]):
        test = r["id"].rsplit(".", 1)[-1]
        err = r["error"].replace("|", "\\|").replace("`", "'")[:300]
        cause = f" Cause: {CAUSES[test]}." if test in CAUSES else ""
        L.append(f"- `{name}` `{test}` ({r['status']}): {err}{cause}")
    L.append("")
    return "\n".join(L)


def is_ancestor(commit):
    try:
        return subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT,
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return True


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def write_section(doc, text):
    """Replaces the section (SECTION up to the next '## ') in doc, or appends it."""
    p = Path(doc)
    old = p.read_text() if p.exists() else ""
    start = old.find(SECTION + "\n")
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + len(SECTION))
        new = old[:start] + text + ("\n" + old[nxt + 1:] if nxt >= 0 else "")
    p.write_text(new if new.endswith("\n") else new + "\n")


def cpu_name():
    info = {}
    try:
        for ln in open("/proc/cpuinfo"):
            k, _, v = ln.partition(":")
            info.setdefault(k.strip(), v.strip())
    except OSError:
        return "unknown CPU"
    flags = info.get("flags", "").split()
    isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "x86-64"
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}, {isa})")
