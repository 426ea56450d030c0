"""Import order, the torchneuron command."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    e.update(env or {})
    return subprocess.run(args, capture_output=True, text=True, env=e, timeout=120)


def test_import_package_before_torch():
    p = _run([sys.executable, "-c", "import torchneuron, torch; print(torch.ones(2, device='neuron').sum().item())"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "2.0"


def test_import_torch_alone_gives_device():
    p = _run([sys.executable, "-c", "import torch; print(torch.ones(3, device='neuron') * 2)"])
    assert p.returncode == 0, p.stderr
    assert "tensor([2., 2., 2.], device='neuron:0')" in p.stdout


def test_cli_info_and_check(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "torchneuron")
    p = _run([exe, "info"])
    assert p.returncode == 0, p.stderr
    assert "neuron:0" in p.stdout
    p = _run([exe, "info"], env={"NEURON_RT_VISIBLE_CORES": "banana"})
    assert p.returncode == 1 and "NEURON_RT_VISIBLE_CORES" in p.stdout
    script = tmp_path / "s.py"
    script.write_text("import torch\nx = torch.arange(6.0, device='neuron')\nprint(torch.special.bessel_j0(x * 2).sum().item())\n")
    p = _run([exe, "check", str(script)], env={"NEURON_FALLBACK": "silent"})
    assert p.returncode == 0, p.stderr
    assert "fallback: aten::special_bessel_j0" in p.stdout
