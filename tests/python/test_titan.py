"""TorchTitan 0.3.0 on neuron, as its users run it (tests/models/titan.py): `torchrun -m torchtitan.train
--module llama3 --config llama3_debugmodel` with FSDP2 over 2 ranks on the neuron device and c10d backend,
made small by command-line overrides, from a seed checkpoint (TorchTitan's own route to equal initial
weights).  Its losses and gradient norms must match the same trainer computing on the CPU, with the
config's selective activation checkpointing and with full activation checkpointing, and its memory monitor
must read our memory statistics.  About 80 s on a loaded 2-core machine (a seed run and three trainings).
"""
import os
import shutil

import pytest

from tests.models import titan

pytestmark = pytest.mark.skipif(not os.path.isdir(titan.SITE), reason="make titan-deps installs TorchTitan")

STEPS = 4


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("titan"))
    titan.build_assets(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _train(workdir, device, ac=None):
    seed = titan.seed_checkpoint(workdir)
    args = titan.titan_args(STEPS, 128, 2, seed=seed, dump=os.path.join(workdir, f"run-{device}-{ac}"), ac=ac)
    rc, steps, out = titan.run(device, workdir, args)
    assert rc == 0, out[-4000:]
    assert sorted(steps) == list(range(1, STEPS + 1)), out[-2000:]
    return steps, out


def test_titan_llama3_fsdp2_matches_cpu(workdir):
    cpu, _ = _train(workdir, "cpu")
    for ac in (None, "full"):
        neuron, out = _train(workdir, "neuron", ac)
        assert "NEURON capacity" in out  # TorchTitan's DeviceMemoryMonitor on torch.neuron
        for k in neuron:
            (ln, gn, mem), (lc, gc, _) = neuron[k], cpu[k]
            assert abs(ln - lc) <= 1e-4 * lc, (ac, k, ln, lc)
            assert abs(gn - gc) <= 1e-3 * gc, (ac, k, gn, gc)
            assert mem > 0, f"step {k}: TorchTitan read {mem} GiB of neuron memory"
        assert neuron[STEPS][0] < neuron[1][0]  # it learns (the assets follow docs/, so the amount varies)
