"""PyTorch's generic distributed suite, ``DistributedTest._DistTestBase`` (torch 2.13 wheel,
torch/testing/_internal/distributed/distributed_test.py), instantiated for the c10d backend ``neuron``
as upstream's test/distributed/test_distributed_spawn.py instantiates it for gloo and nccl: one test
case class over ``TestDistBackend`` (file:// init, TEMP_DIR, the Barrier) whose setUp spawns the ranks.

The suite reads BACKEND and WORLD_SIZE from the environment at import, and its gates
(``DistTestCases.backend_feature``) when its decorators run, so both are set here before the import.
``neuron`` is added to the "ddp", "subgroup" and "plugin" features (the backend has DDP, new_group
and is a registered plugin); not to "gpu"/"cuda": those tests move tensors with ``.cuda(rank)`` and
need CUDA devices.  The tensors of the remaining tests are CPU tensors, which the neuron backend
serves itself (init_process_group("neuron")).

Spawned ranks import this module again (spawn pickles the class by reference), so they see the same
setup.
"""
import os

os.environ.setdefault("BACKEND", "neuron")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("NEURON_NUM_THREADS", "1")

import torch  # noqa: E402  (autoload registers the neuron backend)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for _feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[_feature].add("neuron")

from torch.testing._internal.distributed import distributed_test  # noqa: E402


class TestNeuronDistBackend(distributed_test.TestDistBackend, distributed_test.DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
