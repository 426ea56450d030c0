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


def _train(workdir, device, ac=None, compile_=False, config="llama3_debugmodel"):
    seed = titan.seed_checkpoint(workdir)
    args = titan.titan_args(STEPS, 128, 2, compile_, seed=seed, dump=os.path.join(workdir, f"run-{device}-{ac}-{compile_}-{config}"),
                            ac=ac, config=config)
    rc, steps, out = titan.run(device, workdir, args, compile_=compile_)
    assert rc == 0, out[-4000:]
    assert sorted(steps) == list(range(1, STEPS + 1)), out[-2000:]
    return steps, out


@pytest.fixture(scope="module")
def cpu_steps(workdir):
    return _train(workdir, "cpu")[0]


def test_titan_llama3_fsdp2_matches_cpu(workdir, cpu_steps):
    cpu = cpu_steps
    for ac in (None, "full"):
        neuron, out = _train(workdir, "neuron", ac)
        assert "NEURON capacity" in out  # TorchTitan's DeviceMemoryMonitor on torch.neuron
        for k in neuron:
            (ln, gn, mem), (lc, gc, _) = neuron[k], cpu[k]
            assert abs(ln - lc) <= 1e-4 * lc, (ac, k, ln, lc)
            assert abs(gn - gc) <= 1e-3 * gc, (ac, k, gn, gc)
            assert mem > 0, f"step {k}: TorchTitan read {mem} GiB of neuron memory"
        assert neuron[STEPS][0] < neuron[1][0]  # it learns (the assets follow docs/, so the amount varies)


def test_titan_llama3_varlen_compiled(workdir, cpu_steps):
    """--compile.enable --compile.backend neuron with TorchTitan's varlen attention config (flex compiles only
    with Inductor): the compiled training matches the eager one, and both the CPU's (flex attention in float32;
    varlen casts q, k, v to bf16, so the band is wider).  The CPU has no varlen kernel (aten's flash attention
    is CUDA's), so the CPU reference is the stock flex config: the same block-causal attention."""
    config = "llama3_debugmodel_varlen_attn"
    eager, _ = _train(workdir, "neuron", config=config)
    compiled, out = _train(workdir, "neuron", compile_=True, config=config)
    assert "Compiling each TransformerBlock" in out or "compil" in out.lower()
    for k in eager:
        (le, ge, _), (lc, gc, _), (lr, gr, _) = eager[k], compiled[k], cpu_steps[k]
        assert abs(lc - le) <= 1e-4 * le, (k, lc, le)
        assert abs(gc - ge) <= 1e-3 * ge, (k, gc, ge)
        assert abs(le - lr) <= 2e-3 * lr, (k, le, lr)
    assert compiled[STEPS][0] < compiled[1][0]
