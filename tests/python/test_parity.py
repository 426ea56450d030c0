"""`torchneuron parity` (torchneuron/parity.py): the demo GPT and a fixture MLP agree with the CPU step by step;
with one layer that computes differently on neuron (the fixture's --perturb) the verdict is DIVERGE, the exit
status 3, and the report names that layer.  About 60 s on a loaded 2-core machine (six short runs)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "python", "fixtures", "parity_train.py")


def _parity(tmp_path, *args):
    out = tmp_path / "parity.json"
    p = subprocess.run([sys.executable, "-m", "torchneuron.cli", "parity", "--json", str(out), *args],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    return p, json.loads(out.read_text())


def test_parity_fixture_agrees_then_names_the_perturbed_layer(tmp_path):
    p, rep = _parity(tmp_path, FIXTURE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert rep["verdict"] == "agree" and len(rep["steps"]) == 8
    assert rep["worst_loss_rel_diff"] < 1e-5
    assert "AGREE" in p.stdout
    png = tmp_path / "curves.png"
    p, rep = _parity(tmp_path, "--plot", str(png), FIXTURE, "--perturb")
    assert p.returncode == 3, p.stdout + p.stderr
    import matplotlib.image

    img = matplotlib.image.imread(str(png))  # both curves, loss and gradient norm, as a PNG matplotlib reads
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 600, img.shape
    assert rep["verdict"] == "diverge"
    assert rep["module"]["name"] == "Sequential.3 (Perturbed)", rep["module"]
    assert rep["module"]["step"] == 1
    assert "first module whose output differs: Sequential.3 (Perturbed)" in p.stdout


def test_parity_demo_gpt_agrees(tmp_path):
    p, rep = _parity(tmp_path, os.path.join(ROOT, "examples", "train_gpt.py"), "--steps", "6", "--batch", "4",
                     "--layers", "1", "--d-model", "64", "--log-every", "100")
    assert p.returncode == 0, p.stdout + p.stderr
    assert rep["verdict"] == "agree" and len(rep["steps"]) == 6, rep
