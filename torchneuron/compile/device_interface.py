"""Dynamo's device interface for `neuron` (torch._dynamo.device_interface.DeviceInterface).

Dynamo and AOTAutograd use it to query and switch the current device, streams and properties of the
device that a traced graph's tensors live on; each method maps onto torch.neuron, the device module.
"""
import torch
from torch._dynamo.device_interface import DeviceInterface


def _mod():
    return torch.neuron


class NeuronInterface(DeviceInterface):
    class device:
        def __new__(cls, device):
            return _mod().device(device)

    class Event(torch.Event):
        def __new__(cls, *args, **kwargs):
            return _mod().Event(*args, **kwargs)

    class Stream(torch.Stream):
        def __new__(cls, *args, **kwargs):
            return _mod().Stream(*args, **kwargs)

    class Worker:
        @staticmethod
        def set_device(device):
            _mod().set_device(device)

        @staticmethod
        def current_device():
            return _mod().current_device()

        @staticmethod
        def get_device_properties(device=None):
            return _mod().get_device_properties(device)

    @staticmethod
    def current_device():
        return _mod().current_device()

    @staticmethod
    def set_device(device):
        _mod().set_device(device)

    @staticmethod
    def exchange_device(device):
        prev = _mod().current_device()
        if device != prev:
            _mod().set_device(device)
        return prev

    @staticmethod
    def maybe_exchange_device(device):
        if device < 0:
            return -1
        return NeuronInterface.exchange_device(device)

    @staticmethod
    def device_count():
        return _mod().device_count()

    @staticmethod
    def is_available():
        return _mod().is_available()

    @staticmethod
    def stream(stream):
        return _mod().stream(stream)

    @staticmethod
    def current_stream():
        return _mod().current_stream()

    @staticmethod
    def set_stream(stream):
        _mod().set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id, device_index, device_type):
        torch.accelerator.set_stream(
            torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx):
        # Streams are queues of the runtime; the id of the current one stands for its handle.
        return torch.accelerator.current_stream(device_idx).stream_id

    @staticmethod
    def synchronize(device=None):
        _mod().synchronize(device)

    @staticmethod
    def get_compute_capability(device=None):
        return _mod().get_device_capability(device)

    @staticmethod
    def is_bf16_supported(including_emulation=False):
        return _mod().is_bf16_supported(including_emulation)

    @staticmethod
    def memory_allocated(device=None):
        return _mod().memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None):
        return False


def register():
    from torch._dynamo.device_interface import register_interface_for_device

    register_interface_for_device("neuron", NeuronInterface)
    for i in range(max(1, _mod().device_count())):
        register_interface_for_device(f"neuron:{i}", NeuronInterface)
