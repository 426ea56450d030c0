"""torch.load onto neuron: storages restored to the device keep the CPU storage's contract.

torch.load reads each storage into a CPU storage that is not resizable, moves it to the location recorded
in the checkpoint (or map_location) and rebuilds each tensor with `set_(storage, offset, size, stride)`.
On the CPU a size, stride or offset that reaches past the storage then raises "Trying to resize storage
that is not resizable"; a neuron storage made by `storage.to("neuron")` is resizable, so the same
checkpoint would silently grow it and return uninitialized memory.  The restore function registered here
(ahead of torch's generic privateuse1 one) moves the storage and marks the copy not resizable, so set_
validates the tensor against its storage exactly as on the CPU.
"""
import re

import torch

_registered = False


def _restore(obj, location):
    if not isinstance(location, str) or not (location == "neuron" or re.match(r"neuron(:|[0-9]+)", location)):
        return None
    from . import _C
    device = torch.serialization._validate_device(location, "neuron")
    moved = obj.to(device=device)
    _C._storage_set_resizable(moved, False)
    return moved


def register():
    global _registered
    if _registered:
        return
    # before torch's privateuse1 entry (priority 23); the tagger tags nothing, so saving is unchanged
    torch.serialization.register_package(19, lambda obj: None, _restore)
    _registered = True
