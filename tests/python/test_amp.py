"""torch.autocast("neuron") and torch.amp.GradScaler("neuron")."""
import torch
import torch.nn.functional as F


def test_autocast_lowers_matmul_and_keeps_fp32_ops():
    x = torch.randn(8, 16, device="neuron")
    w = torch.randn(4, 16, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = F.linear(x, w)
        s = torch.softmax(y, dim=-1)
        lse = torch.log_softmax(y.float(), dim=-1)
    assert y.dtype == torch.bfloat16
    assert s.dtype == torch.float32  # softmax is on the fp32 list
    assert lse.dtype == torch.float32
    ref = F.linear(x.cpu().bfloat16(), w.cpu().bfloat16()).float()
    torch.testing.assert_close(y.float().cpu(), ref, rtol=2e-2, atol=2e-2)


def test_autocast_default_dtype_is_float16():
    x = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron"):
        assert (x @ x).dtype == torch.float16


def test_grad_scaler_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("neuron", init_scale=1024.0)
    before = model.weight.detach().cpu().clone()
    x = torch.randn(16, 8, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before)
    assert scaler.get_scale() == 1024.0
