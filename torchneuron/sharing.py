"""Neuron tensors and other processes (torch.multiprocessing, spawn children, DataLoader workers).

torch.multiprocessing's ForkingPickler shares CUDA tensors through CUDA IPC and CPU tensors through
shared memory; a neuron tensor has neither (its memory is this process's device arena), and torch's
reducer fails deep inside with "_share_fd_: only available on CPU".  The reducers registered here
refuse a neuron tensor or storage with an error that says what to do instead; every other tensor goes
to torch's own reducer unchanged.
"""

MESSAGE = ("a neuron tensor cannot be shared with another process (torch.multiprocessing shares CUDA "
           "tensors through CUDA IPC and CPU tensors through shared memory; neuron device memory belongs "
           "to one process): send tensor.cpu() instead (shared without a copy) and move it to the device "
           "in the other process with .to('neuron')")


def _guard(reduce):
    def reduce_neuron(obj):
        if obj.device.type == "neuron":
            raise RuntimeError(MESSAGE)
        return reduce(obj)
    reduce_neuron.__wrapped__ = reduce
    return reduce_neuron


def register():
    import torch
    import torch.multiprocessing.reductions as red
    from multiprocessing.reduction import ForkingPickler

    for cls in (torch.Tensor, torch.nn.Parameter, *torch._tensor_classes):
        ForkingPickler.register(cls, _guard(red.reduce_tensor))
    ForkingPickler.register(torch.UntypedStorage, _guard(red.reduce_storage))
    ForkingPickler.register(torch.storage.TypedStorage, _guard(red.reduce_typed_storage))
