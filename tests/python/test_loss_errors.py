"""Invalid inputs to the losses and to max pooling raise what PyTorch's CPU path raises: the same exception
type and message.  Each case runs on the CPU and on neuron.  Errors that a neuron kernel finds while it
runs (a target out of range: ASYNC) surface at the read-back as an asynchronous kernel error, as CUDA's do, with the CPU's exception
type (IndexError for an nll_loss target) and a message that contains the CPU's.  A dtype a kernel does not cover is
NotImplementedError on both, named by the op rather than by the CPU kernel.
"""

import re

import pytest
import torch
import torch.nn.functional as F


def _outcome(fn, device):
    torch.manual_seed(0)
    try:
        r = fn(device)
        for t in (r if isinstance(r, tuple) else (r,)):
            t.cpu()
        if device != "cpu":
            torch.neuron.synchronize()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)
    return None, None


def _t(v, d):
    return torch.tensor(v, device=d)


def _x(d, *shape, dtype=torch.float32):
    return torch.randn(*shape, device=d).to(dtype)


TGT = [0, 1, 4]
CASES = {
    # nll_loss (F.nll_loss and the aten op directly)
    "nll_weight_f16": lambda d: F.nll_loss(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(5, dtype=torch.float16, device=d)),
    "nll_weight_f64": lambda d: F.nll_loss(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(5, dtype=torch.float64, device=d)),
    "nll_weight_size": lambda d: F.nll_loss(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(4, device=d)),
    "nll_weight_2d": lambda d: torch.ops.aten.nll_loss_forward(_x(d, 3, 5), _t(TGT, d), torch.ones(5, 1, device=d), 1, -100),
    "nll_batch": lambda d: F.nll_loss(_x(d, 3, 5), _t([0, 1], d)),
    "nll_batch_aten": lambda d: torch.ops.aten.nll_loss_forward(_x(d, 3, 5), _t([0, 1], d), None, 1, -100),
    "nll_input_3d": lambda d: torch.ops.aten.nll_loss_forward(_x(d, 2, 3, 4), _t([0, 1], d), None, 1, -100),
    "nll_target_float": lambda d: F.nll_loss(_x(d, 3, 5), _t([0.0, 1.0, 4.0], d)),
    "nll_target_int": lambda d: F.nll_loss(_x(d, 3, 5), _t(TGT, d).int()),
    "nll_target_2d": lambda d: torch.ops.aten.nll_loss_forward(_x(d, 3, 5), _t([[0], [1], [4]], d), None, 1, -100),
    "nll_target_range": lambda d: F.nll_loss(_x(d, 3, 5), _t([0, 1, 5], d)),
    "nll_int_input": lambda d: F.nll_loss(torch.ones(3, 5, dtype=torch.long, device=d), _t(TGT, d)),
    "nll_backward_weight_f16": lambda d: torch.ops.aten.nll_loss_backward(
        _t(1.0, d), _x(d, 3, 5), _t(TGT, d), torch.ones(5, dtype=torch.half, device=d), 1, -100, _t(3.0, d)),
    # cross_entropy
    "ce_weight_f16": lambda d: F.cross_entropy(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(5, dtype=torch.float16, device=d)),
    "ce_weight_size": lambda d: F.cross_entropy(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(3, device=d)),
    "ce_batch": lambda d: F.cross_entropy(_x(d, 3, 5), _t([0, 1], d)),
    "ce_target_range": lambda d: F.cross_entropy(_x(d, 3, 5), _t([0, 1, 7], d)),
    "ce_target_negative": lambda d: F.cross_entropy(_x(d, 3, 5), _t([0, 1, -3], d)),
    "ce_target_int": lambda d: F.cross_entropy(_x(d, 3, 5), _t(TGT, d).int()),
    "ce_probs_shape": lambda d: F.cross_entropy(_x(d, 3, 5), _x(d, 3, 4)),
    "ce_label_smoothing": lambda d: F.cross_entropy(_x(d, 3, 5), _t(TGT, d), label_smoothing=1.5),
    "ce_2d_target_shape": lambda d: F.cross_entropy(_x(d, 2, 3, 4, 4), torch.zeros(2, 4, 5, dtype=torch.long, device=d)),
    "ce_2d_weight_f16": lambda d: F.cross_entropy(_x(d, 2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long, device=d),
                                                   weight=torch.ones(3, dtype=torch.half, device=d)),
    "ce_int_input": lambda d: F.cross_entropy(torch.ones(3, 5, dtype=torch.long, device=d), _t(TGT, d)),
    # multi_margin_loss
    "mm_target_float": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t([0.0, 1.0, 4.0], d)),
    "mm_p3": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t(TGT, d), p=3),
    "mm_p3_aten": lambda d: torch._C._nn.multi_margin_loss(_x(d, 3, 5), _t(TGT, d), 3, 1.0, None, 1),
    "mm_batch": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t([0, 1], d)),
    "mm_target_2d": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t([[0], [1], [4]], d)),
    "mm_target_range": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t([0, 1, 5], d)),
    "mm_target_negative": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t([0, 1, -1], d)),
    "mm_weight_size": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(4, device=d)),
    "mm_weight_f16": lambda d: F.multi_margin_loss(_x(d, 3, 5), _t(TGT, d), weight=torch.ones(5, dtype=torch.float16, device=d)),
    "mm_input_3d": lambda d: F.multi_margin_loss(_x(d, 3, 5, 2), _t(TGT, d)),
    "mm_input_empty": lambda d: F.multi_margin_loss(_x(d, 3, 0), _t(TGT, d)),
    "mm_input_int": lambda d: F.multi_margin_loss(torch.ones(3, 5, dtype=torch.long, device=d), _t(TGT, d)),
    "mm_backward_batch": lambda d: torch.ops.aten.multi_margin_loss_backward(
        _t(1.0, d), _x(d, 3, 5), _t([0, 1], d), 1, 1.0, None, 1),
    # max_pool2d (MaxPool2d and F.max_pool2d, with and without indices)
    "mp_kernel_0": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 0),
    "mp_stride_0": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, stride=0),
    "mp_dilation_0": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, dilation=0),
    "mp_padding_big": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, padding=2),
    "mp_padding_negative": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, padding=-1),
    "mp_output_small": lambda d: torch.nn.MaxPool2d(3)(_x(d, 1, 1, 2, 2)),
    "mp_input_2d": lambda d: F.max_pool2d(_x(d, 4, 4), 2),
    "mp_input_5d": lambda d: F.max_pool2d(_x(d, 1, 1, 1, 4, 4), 2),
    "mp_kernel_3": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), (2, 2, 2)),
    "mp_stride_3": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, (1, 1, 1)),
    "mp_dilation_3": lambda d: F.max_pool2d(_x(d, 1, 1, 4, 4), 2, 2, 0, (1, 1, 1)),
    "mp_empty_plane": lambda d: F.max_pool2d(_x(d, 1, 0, 4, 4), 2),
    "mp_bool_input": lambda d: F.max_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.bool, device=d), 2),
    "mp_empty_height": lambda d: F.max_pool2d(_x(d, 1, 1, 0, 4), 2, return_indices=True),
}


ASYNC = {"nll_target_range", "ce_target_range", "ce_target_negative", "mm_target_range", "mm_target_negative"}
# the CPU raises these as IndexError (TORCH_CHECK_INDEX): so does the asynchronous kernel error
ASYNC_INDEX = {"nll_target_range", "ce_target_range", "ce_target_negative"}


def _norm(msg):
    return re.sub(r'^"[^"]*" not implemented for', '"<kernel>" not implemented for', msg)


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_matches_cpu(case):
    fn = CASES[case]
    cpu_type, cpu_msg = _outcome(fn, "cpu")
    assert cpu_type is not None, "the case must be an error on the CPU"
    dev_type, dev_msg = _outcome(fn, "neuron")
    if case in ASYNC:
        want = IndexError if case in ASYNC_INDEX else RuntimeError
        assert cpu_type is want and dev_type is want and cpu_msg in dev_msg, (dev_type, dev_msg, cpu_type, cpu_msg)
    else:
        assert dev_type is cpu_type and _norm(dev_msg) == _norm(cpu_msg), (dev_type, dev_msg, cpu_type, cpu_msg)
    # the device keeps working
    assert (torch.arange(4.0, device="neuron") * 2).sum().item() == 12.0
