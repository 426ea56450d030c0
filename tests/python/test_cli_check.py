"""`torchneuron check` (source scan, fallback ops, --json, --strict) and `torchneuron info --json`."""
import json
import os
import subprocess
import sys
import time

EXE = os.path.join(os.path.dirname(sys.executable), "torchneuron")

SCRIPT = '''import torch
import helper
dev = "neuron"
x = torch.arange(6.0, device=dev)
print(torch.special.bessel_j0(x * 2).sum().item())
if False:
    y = x.cuda()
    torch.backends.cudnn.benchmark = True
'''
HELPER = '''import torch
def place(t):
    return t.to("cuda")
'''


def _run(args):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    e["NEURON_FALLBACK"] = "silent"
    return subprocess.run([EXE] + args, capture_output=True, text=True, env=e, timeout=120)


def test_check_finds_cuda_sites_and_fallback(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "helper.py").write_text(HELPER)
    out = tmp_path / "r.json"
    p = _run(["check", "--json", str(out), str(tmp_path / "s.py")])
    assert p.returncode == 0, p.stderr
    assert "fallback: aten::special_bessel_j0" in p.stdout
    rep = json.loads(out.read_text())
    sites = {(os.path.basename(f["file"]), f["line"], f["finding"]) for f in rep["cuda_findings"]}
    assert sites == {("s.py", 7, ".cuda()"), ("s.py", 8, "torch.backends.cudnn.benchmark"),
                     ("helper.py", 3, '.to("cuda")')}, sites
    assert rep["ops"]["fallback"] == ["aten::special_bessel_j0.out"]
    assert rep["fallback_calls"]["aten::special_bessel_j0"]["calls"] == 1  # once, not twice (outer record only)
    assert rep["peak_device_memory_bytes"] > 0
    p = _run(["check", "--strict", str(tmp_path / "s.py")])
    assert p.returncode == 2, (p.returncode, p.stdout)


DTYPE_SCRIPT = '''import torch
x = torch.ones(1000, dtype=torch.float64, device="neuron")   # 8000 bytes
i = torch.arange(10, device="neuron")                          # int64
y = (x * 2).sum()                                              # float64 results
f = torch.zeros(256, device="neuron")                          # float32
print(y.item(), i.sum().item(), f.sum().item())
'''


def test_check_reports_float64_and_int64_use(tmp_path):
    """The tensors created on neuron per dtype, and the 64-bit line, against what the fixture creates."""
    (tmp_path / "d.py").write_text(DTYPE_SCRIPT)
    out = tmp_path / "d.json"
    p = _run(["check", "--no-profile", "--json", str(out), str(tmp_path / "d.py")])
    assert p.returncode == 0, p.stderr
    assert "64-bit: float64 and int64 used" in p.stdout, p.stdout
    d = json.loads(out.read_text())["dtypes"]
    assert d["torch.float64"]["tensors"] >= 3 and d["torch.float64"]["bytes"] >= 8000, d  # x, x * 2, the sum
    assert d["torch.int64"]["tensors"] >= 2, d                                             # i and its sum
    assert d["torch.float32"]["tensors"] >= 2 and d["torch.float32"]["bytes"] >= 1024, d
    assert "torch.bfloat16" not in d, d
    (tmp_path / "e.py").write_text("import torch\nprint(torch.ones(3, device='neuron').sum().item())\n")
    p = _run(["check", "--no-profile", str(tmp_path / "e.py")])
    assert p.returncode == 0 and "64-bit" not in p.stdout, p.stdout


def test_check_prints_progress_while_the_script_runs(tmp_path):
    (tmp_path / "slow.py").write_text("import time, torch\nx = torch.ones(4, device='neuron')\ntime.sleep(1.5)\n"
                                      "print((x * 2).sum().item())\n")
    p = _run(["check", "--no-profile", "--progress-every", "0.3", str(tmp_path / "slow.py")])
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stderr.splitlines() if " s: " in l and "ATen ops" in l]
    assert len(lines) >= 2, p.stderr
    assert "through the fallback, peak" in lines[-1]


def test_info_json():
    p = _run(["info", "--json"])
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["devices"][0]["index"] == 0 and d["devices"][0]["arena_limit_bytes"] > 0
    assert d["kernels"]["level"] and d["threads"]["kernel_pool"] >= 1
    assert d["torch"].startswith("2.13") and "dir" in d["cache"]


WATCHED = """
import sys, time, torch
x = torch.randn(4096, 4096, device="neuron")  # 64 MiB
print("ready", flush=True)
t = time.time()
while time.time() - t < 30 and sys.stdin.readline().strip() != "stop":
    pass
"""


def test_info_watch_sees_a_process_and_drops_dead_pages(tmp_path):
    """`info --watch --json` lists a process holding 64 MiB on neuron with its pid and queue counters; a
    page whose process is gone is removed, and the watched process's page is gone after it exits."""
    stale = "/dev/shm/neuron-watch-999999999"
    with open(stale, "wb") as f:
        f.write(b"\0" * 4096)
    child = subprocess.Popen([sys.executable, "-c", WATCHED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.6)  # two refreshes of the page (250 ms)
        p = _run(["info", "--watch", "--json", "--count", "1"])
        assert p.returncode == 0, p.stderr
        pages = {pg["pid"]: pg for pg in json.loads(p.stdout.splitlines()[0])}
        assert child.pid in pages, pages
        d = pages[child.pid]["devices"][0]
        assert d["index"] == 0 and d["allocated"] >= 64 << 20 and d["reserved"] >= d["allocated"]
        assert d["pushed"] >= d["done"] >= 1 and d["limit"] > 0
        assert not os.path.exists(stale)
    finally:
        child.communicate("stop\n", timeout=60)
    assert not os.path.exists(f"/dev/shm/neuron-watch-{child.pid}")


def test_runtime_start_removes_dead_processes_pages():
    """A process that ends without exit handlers (os._exit, as multiprocessing children end) leaves its watch
    page; the next process that starts the runtime removes it."""
    code = "import os, torch; torch.zeros(1, device='neuron'); print(os.getpid(), flush=True); os._exit(0)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    page = f"/dev/shm/neuron-watch-{p.stdout.strip()}"
    assert os.path.exists(page), "os._exit skips the page's unlink: the leftover this test is about"
    subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1, device='neuron')"], check=True, timeout=120)
    assert not os.path.exists(page)
