"""Shared fixtures for the TorchNeuron Python tests.

`import torch` autoloads the backend (entry point group `torch.backends`), so the tests never
import torchneuron to make the device exist; they import it only for the op-tracking API.

Nothing here skips: a test that cannot run because the backend is missing fails.

TORCHNEURON_TEST_DEVICE (default "neuron") swaps the device the device-generic tests use; setting
it to "cpu" checks the tests themselves against PyTorch's CPU backend (the neuron-only tests, which
use torch.neuron or torchneuron, then fail as expected).
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

DEVICE_TYPE = os.environ.get("TORCHNEURON_TEST_DEVICE", "neuron")

# Environment variables of the backend that the tests set themselves; a value inherited from the
# shell running pytest would change what the tests see.
_BACKEND_ENV = (
    "NEURON_FALLBACK",
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_RT_MEMORY_LIMIT",
    "NEURON_LAUNCH_BLOCKING",
)


@pytest.fixture
def device():
    """The device under test: torch.device("neuron", 0) unless TORCHNEURON_TEST_DEVICE says."""
    return torch.device("cpu") if DEVICE_TYPE == "cpu" else torch.device(DEVICE_TYPE, 0)


@pytest.fixture
def neuron_ops():
    """The torchneuron module with its op tracking cleared (get_executed_ops/get_fallback_ops)."""
    import torchneuron

    torchneuron.clear_op_tracking()
    yield torchneuron
    torchneuron.clear_op_tracking()


@pytest.fixture
def no_fallback(neuron_ops):
    """Fails the test if any op of it ran on the CPU through the fallback."""
    yield
    assert not neuron_ops.get_fallback_ops(), neuron_ops.get_fallback_ops()


@pytest.fixture(autouse=True)
def _clean_backend_env(monkeypatch):
    """NEURON_FALLBACK is read at each fallback: keep a value from the calling shell out of the
    tests (a test that wants it sets it with monkeypatch.setenv)."""
    monkeypatch.delenv("NEURON_FALLBACK", raising=False)


@pytest.fixture(autouse=True)
def _surface_async_errors():
    """Synchronize after every test so an asynchronous device error is reported against the test
    that caused it (as a teardown error), not against whichever test synchronizes next."""
    yield
    if DEVICE_TYPE == "neuron" and hasattr(torch, "neuron"):
        torch.neuron.synchronize()


@pytest.fixture
def run_py():
    """run_python below, as a fixture."""
    return run_python


def run_python(code, env=None, timeout=120):
    """Run `code` in a fresh interpreter (sys.executable -c) with the backend's environment
    variables cleared and `env` added. Returns the CompletedProcess (text; stdout and stderr
    apart) with .report added: its exit code and output, for assertion messages.
    For anything read once per process: the NEURON_RT_* variables, once-per-op warnings."""
    full_env = {k: v for k, v in os.environ.items() if k not in _BACKEND_ENV}
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )
    proc.report = describe(proc)
    return proc


def describe(proc):
    """A failure message showing what a subprocess printed."""
    return f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.fixture(scope="module")
def compile_cache_dir(tmp_path_factory):
    """torch.compile tests: a program cache of the module's own, the default C compiler, no debug dumps."""
    d = tmp_path_factory.mktemp("neuron_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURON_CACHE_DIR", str(d))
        mp.delenv("NEURON_COMPILE_DEBUG", raising=False)
        mp.delenv("CC", raising=False)
        mp.delenv("NEURON_CC", raising=False)
        yield d


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
