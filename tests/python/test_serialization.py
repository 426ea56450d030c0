"""torch.save / torch.load of neuron tensors and modules (weights_only=True, map_location)."""

import collections
import io

import pytest
import torch
import torch.nn as nn


def _tensors(device):
    g = torch.Generator().manual_seed(0)
    cpu = {
        "f32": torch.randn(4, 5, generator=g),
        "bf16": torch.randn(7, generator=g).to(torch.bfloat16),
        "f16": torch.randn(3, 2, generator=g).to(torch.float16),
        "f64": torch.randn(2, 2, generator=g).double(),
        "i64": torch.randint(-1000, 1000, (6,), generator=g),
        "u8": torch.randint(0, 255, (5,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(9, generator=g) > 0.5,
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "noncontig": torch.randn(6, 8, generator=g).t()[::2],
    }
    return cpu, {k: v.to(device) for k, v in cpu.items()}


def _check(loaded, cpu, device_type):
    assert set(loaded) == set(cpu)
    for k, v in cpu.items():
        t = loaded[k]
        assert t.device.type == device_type, (k, t.device)
        assert t.dtype == v.dtype and t.shape == v.shape, k
        torch.testing.assert_close(t.cpu(), v, rtol=0, atol=0, msg=k)


def test_roundtrip_stays_on_device(tmp_path, device):
    cpu, dev = _tensors(device)
    path = tmp_path / "t.pt"
    torch.save(dev, path)
    loaded = torch.load(path, weights_only=True)
    _check(loaded, cpu, device.type)
    assert loaded["f32"].device == device


def test_roundtrip_bytesio(device):
    cpu, dev = _tensors(device)
    buf = io.BytesIO()
    torch.save({"tensors": dev, "step": 7, "name": "ckpt"}, buf)
    buf.seek(0)
    obj = torch.load(buf, weights_only=True)
    assert obj["step"] == 7 and obj["name"] == "ckpt"
    _check(obj["tensors"], cpu, device.type)


def test_map_location_cpu(tmp_path, device):
    cpu, dev = _tensors(device)
    path = tmp_path / "t.pt"
    torch.save(dev, path)
    for loc in ("cpu", torch.device("cpu"), lambda storage, where: storage):
        _check(torch.load(path, weights_only=True, map_location=loc), cpu, "cpu")


def test_map_location_to_device(tmp_path, device):
    cpu, _ = _tensors("cpu")
    path = tmp_path / "cpu.pt"
    torch.save(cpu, path)
    for loc in (device.type, str(device), device):
        _check(torch.load(path, weights_only=True, map_location=loc), cpu, device.type)


def test_shared_storage_preserved(tmp_path, device):
    x = torch.arange(12.0, device=device)
    path = tmp_path / "views.pt"
    torch.save([x, x[2:8].view(2, 3), x.view(3, 4).t()], path)
    a, b, c = torch.load(path, weights_only=True)
    assert a.device.type == b.device.type == c.device.type == device.type
    assert b.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert c.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert b.storage_offset() == 2 and c.stride() == (1, 4)
    a.mul_(10)                      # still views after loading
    torch.testing.assert_close(b.cpu(), torch.arange(2.0, 8.0).view(2, 3) * 10)
    torch.testing.assert_close(c.cpu(), torch.arange(12.0).view(3, 4).t() * 10)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))


def test_state_dict_roundtrip(tmp_path, device):
    model = _model().to(device)
    x = torch.randn(5, 8)
    ref = model(x.to(device)).detach().cpu()
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)

    # back onto the device
    sd = torch.load(path, weights_only=True)
    assert all(v.device.type == device.type for v in sd.values())
    m2 = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4)).to(device)
    m2.load_state_dict(sd)
    torch.testing.assert_close(m2(x.to(device)).detach().cpu(), ref, rtol=0, atol=0)

    # onto the CPU
    m3 = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    m3.load_state_dict(torch.load(path, weights_only=True, map_location="cpu"))
    torch.testing.assert_close(m3(x).detach(), ref, rtol=1e-4, atol=1e-5)


def test_optimizer_state_roundtrip(tmp_path, device):
    model = _model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8, device=device)).square().mean().backward()
        opt.step()
    path = tmp_path / "opt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    ck = torch.load(path, weights_only=True)
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt2.load_state_dict(ck["opt"])
    for p in model.parameters():
        s1, s2 = opt.state[p], opt2.state[p]
        assert s2["exp_avg"].device == p.device
        torch.testing.assert_close(s2["exp_avg"].cpu(), s1["exp_avg"].cpu(), rtol=0, atol=0)
        torch.testing.assert_close(s2["exp_avg_sq"].cpu(), s1["exp_avg_sq"].cpu(), rtol=0, atol=0)


# ---- a checkpoint whose tensor lies past its storage: the CPU's error, not garbage --------------------

class _Forged:
    """Pickles as a tensor of `t`'s storage with the given offset, size and stride (a corrupt or hostile
    checkpoint); torch.save stores the storage itself as usual."""

    def __init__(self, t, offset, size, stride):
        self.t, self.offset, self.size, self.stride = t, offset, size, stride

    def __reduce_ex__(self, proto):
        st = torch.storage.TypedStorage(wrap_storage=self.t.untyped_storage(), dtype=self.t.dtype, _internal=True)
        return (torch._utils._rebuild_tensor_v2,
                (st, self.offset, self.size, self.stride, False, collections.OrderedDict()))


def _load_forged(device, offset, size, stride, map_location=None):
    buf = io.BytesIO()
    torch.save({"w": _Forged(torch.arange(8.0, device=device), offset, size, stride)}, buf)
    buf.seek(0)
    try:
        return None, torch.load(buf, weights_only=True, map_location=map_location)["w"].cpu()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return (type(e), str(e)), None


@pytest.mark.parametrize("offset,size,stride", [
    (0, (9,), (1,)),       # size past the storage
    (6, (4,), (1,)),       # offset + size past it
    (9, (1,), (1,)),       # offset past it
    (0, (3,), (4,)),       # a stride that reaches past it
    (0, (2, 3), (4, 2)),
])
def test_load_tensor_past_storage_raises_as_on_cpu(offset, size, stride):
    cpu_err, _ = _load_forged("cpu", offset, size, stride)
    assert cpu_err is not None and "not resizable" in cpu_err[1], cpu_err
    dev_err, got = _load_forged("neuron", offset, size, stride)
    assert dev_err == cpu_err, (dev_err, got)
    # a CPU checkpoint mapped onto the device is checked the same way
    mapped_err, got = _load_forged("cpu", offset, size, stride, map_location="neuron")
    assert mapped_err == cpu_err, (mapped_err, got)


@pytest.mark.parametrize("offset,size,stride", [(0, (8,), (1,)), (5, (3,), (1,)), (1, (2, 2), (3, 2)), (7, (1,), (1,))])
def test_load_tensor_inside_storage_matches_cpu(offset, size, stride):
    cpu_err, want = _load_forged("cpu", offset, size, stride)
    dev_err, got = _load_forged("neuron", offset, size, stride)
    assert cpu_err is None and dev_err is None, (cpu_err, dev_err)
    assert torch.equal(got, want)


def test_loaded_storage_keeps_working(tmp_path):
    """The restored storages are not resizable, as the CPU's: the tensors are ordinary otherwise."""
    path = tmp_path / "m.pt"
    torch.save({"w": torch.arange(6.0, device="neuron").view(2, 3)}, path)
    w = torch.load(path, weights_only=True)["w"]
    w.add_(1).mul_(2)
    assert w.cpu().tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
    with pytest.raises(RuntimeError, match="not resizable"):
        w.resize_(100)
    cpu = torch.load(path, weights_only=True, map_location="cpu")["w"]
    with pytest.raises(RuntimeError, match="not resizable"):
        cpu.resize_(100)
