"""Recurrent networks on neuron vs PyTorch's CPU: nn.LSTM / nn.GRU / nn.RNN (tanh, relu) multi-layer,
bidirectional, batch_first, proj_size, packed sequences (sorted and not), dropout between layers, the
LSTMCell / GRUCell / RNNCell cells, their backward (and double backward), bf16, the fused cell ops'
bad input, torch.compile, and a 20-step training run whose losses must equal the CPU's.  aten's
composite RNN code runs every LSTM/GRU step through the fused cell ops (ops_rnn.cpp, rnn.c); every case
asserts that nothing fell back to the CPU."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

TOL = {torch.float32: dict(rtol=2e-5, atol=2e-6), torch.float64: dict(rtol=1e-10, atol=1e-12),
       torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


@pytest.fixture(autouse=True)
def _native(no_fallback):
    """Every test of this file runs without the CPU fallback."""
    yield


def _close(a, b, dtype, scale=1.0):
    t = TOL[dtype]
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=t["rtol"] * scale, atol=t["atol"] * scale)


def _pair(make, dtype, dev, seed=0):
    torch.manual_seed(seed)
    cpu = make().to(dtype)
    return cpu, copy.deepcopy(cpu).to(dev)


def _leaf(t, dev=None):
    t = t.detach() if dev is None else t.detach().to(dev)
    return t.clone().requires_grad_(True)


def _flat(out):
    """The tensors of a module's output (output, h_n or (h_n, c_n)), padded if packed."""
    if isinstance(out, tuple):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, nn.utils.rnn.PackedSequence):
        return [out.data]
    return [out]


def _check_module(cpu, neu, xs_cpu, xs_neu, dtype, scale=1.0):
    """Forward both, backward a random weighting of every output, compare outputs and all gradients."""
    oc, on = _flat(cpu(*xs_cpu)), _flat(neu(*xs_neu))
    assert len(oc) == len(on)
    g = torch.Generator().manual_seed(1)
    ws = [torch.randn(o.shape, generator=g, dtype=dtype) for o in oc]
    sum((o * w).sum() for o, w in zip(oc, ws)).backward()
    sum((o * w.to(o.device)).sum() for o, w in zip(on, ws)).backward()
    for a, b in zip(on, oc):
        assert a.device.type != "cpu"
        _close(a, b, dtype, scale)
    for x_n, x_c in zip(_leaves(xs_neu), _leaves(xs_cpu)):
        _close(x_n.grad, x_c.grad, dtype, scale)
    for (name, p_c), p_n in zip(cpu.named_parameters(), neu.parameters()):
        assert p_n.grad is not None, name
        _close(p_n.grad, p_c.grad, dtype, scale * 4)


def _leaves(xs):
    out = []
    for x in xs:
        if isinstance(x, tuple):
            out += _leaves(x)
        elif isinstance(x, torch.Tensor) and x.requires_grad:
            out.append(x)
    return out


MODULES = {
    "lstm": lambda: nn.LSTM(4, 6),
    "lstm_2layer_bidir_batch_first": lambda: nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True),
    "lstm_proj": lambda: nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=True),
    "lstm_nobias": lambda: nn.LSTM(4, 6, bias=False),
    "gru": lambda: nn.GRU(4, 6),
    "gru_2layer_bidir": lambda: nn.GRU(4, 6, num_layers=2, bidirectional=True),
    "gru_nobias_batch_first": lambda: nn.GRU(4, 6, bias=False, batch_first=True),
    "rnn_tanh_2layer_bidir": lambda: nn.RNN(4, 6, num_layers=2, bidirectional=True),
    "rnn_relu": lambda: nn.RNN(4, 6, nonlinearity="relu"),
}


def _hidden(mod, B, dtype, seed=2):
    """Initial states of the module's shape (h0, or (h0, c0) for the LSTM)."""
    g = torch.Generator().manual_seed(seed)
    D = 2 if mod.bidirectional else 1
    hs = getattr(mod, "proj_size", 0) or mod.hidden_size
    h0 = torch.randn(mod.num_layers * D, B, hs, generator=g, dtype=dtype)
    if isinstance(mod, nn.LSTM):
        return (h0, torch.randn(mod.num_layers * D, B, mod.hidden_size, generator=g, dtype=dtype))
    return h0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("with_hx", [False, True])
def test_module_vs_cpu(device, name, dtype, with_hx):
    cpu, neu = _pair(MODULES[name], dtype, device)
    T, B = 5, 3
    x = torch.randn((B, T, 4) if cpu.batch_first else (T, B, 4), dtype=dtype)
    xc, xn = _leaf(x), _leaf(x, device)
    if with_hx:
        h = _hidden(cpu, B, dtype)
        hc = tuple(_leaf(t) for t in h) if isinstance(h, tuple) else _leaf(h)
        hn = tuple(_leaf(t, device) for t in h) if isinstance(h, tuple) else _leaf(h, device)
        _check_module(cpu, neu, (xc, hc), (xn, hn), dtype)
    else:
        _check_module(cpu, neu, (xc,), (xn,), dtype)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_module_bf16(device, kind):
    make = (lambda: nn.LSTM(8, 16, num_layers=2)) if kind == "lstm" else (lambda: nn.GRU(8, 16, num_layers=2))
    cpu, neu = _pair(make, torch.bfloat16, device)
    x = torch.randn(6, 2, 8, dtype=torch.bfloat16)
    _check_module(cpu, neu, (_leaf(x),), (_leaf(x, device),), torch.bfloat16)


def test_unbatched_input(device):
    for make in (lambda: nn.LSTM(4, 6, num_layers=2), lambda: nn.GRU(4, 6), lambda: nn.RNN(4, 6)):
        cpu, neu = _pair(make, torch.float32, device)
        x = torch.randn(5, 4)
        _check_module(cpu, neu, (_leaf(x),), (_leaf(x, device),), torch.float32)


@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_packed_sequence(device, kind, enforce_sorted):
    cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
    cpu, neu = _pair(lambda: cls(4, 5, num_layers=2, bidirectional=True), torch.float32, device)
    lengths = torch.tensor([6, 4, 4, 1]) if enforce_sorted else torch.tensor([3, 6, 1, 4])
    x = torch.randn(6, 4, 4)
    xc, xn = _leaf(x), _leaf(x, device)
    outs = []
    for mod, inp in ((cpu, xc), (neu, xn)):
        packed = pack_padded_sequence(inp, lengths, enforce_sorted=enforce_sorted)
        out, h = mod(packed)
        padded, lens = pad_packed_sequence(out, total_length=6)
        assert lens.tolist() == lengths.tolist()
        outs.append((padded, h))
    (pc, hc), (pn, hn) = outs
    _close(pn, pc, torch.float32)
    for a, b in zip(_flat(hn), _flat(hc)):
        _close(a, b, torch.float32)
    w = torch.randn(pc.shape)
    loss_c = (pc * w).sum() + sum(t.sum() for t in _flat(hc))
    loss_n = (pn * w.to(device)).sum() + sum(t.sum() for t in _flat(hn))
    loss_c.backward(), loss_n.backward()
    _close(xn.grad, xc.grad, torch.float32)
    for p_c, p_n in zip(cpu.parameters(), neu.parameters()):
        _close(p_n.grad, p_c.grad, torch.float32, 4)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_dropout_between_layers(device, kind):
    """dropout > 0: eval mode and p = 0 in train mode equal the CPU exactly as without dropout; in train
    mode the device's own random stream drops units (different from the CPU's, as for CUDA), the same
    for the same seed, and gradients flow."""
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    cpu, neu = _pair(lambda: cls(4, 8, num_layers=3, dropout=0.5), torch.float32, device)
    x = torch.randn(5, 2, 4)
    cpu.eval(), neu.eval()
    _close(neu(x.to(device))[0], cpu(x)[0], torch.float32)
    cpu0, neu0 = _pair(lambda: cls(4, 8, num_layers=3, dropout=0.0), torch.float32, device)
    cpu0.train(), neu0.train()
    _check_module(cpu0, neu0, (_leaf(x),), (_leaf(x, device),), torch.float32)
    neu.train()
    torch.manual_seed(5)
    a = neu(x.to(device))[0]
    torch.manual_seed(5)
    b = neu(x.to(device))[0]
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)
    c = neu(x.to(device))[0]
    assert not torch.equal(a.cpu(), c.cpu())
    assert not torch.allclose(a.cpu(), neu.eval()(x.to(device))[0].cpu())
    neu.train()
    neu.zero_grad()
    neu(x.to(device))[0].sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad.cpu()).all() for p in neu.parameters())


CELLS = {
    "lstm_cell": lambda: nn.LSTMCell(4, 6),
    "lstm_cell_nobias": lambda: nn.LSTMCell(4, 6, bias=False),
    "gru_cell": lambda: nn.GRUCell(4, 6),
    "gru_cell_nobias": lambda: nn.GRUCell(4, 6, bias=False),
    "rnn_cell_tanh": lambda: nn.RNNCell(4, 6),
    "rnn_cell_relu": lambda: nn.RNNCell(4, 6, nonlinearity="relu"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(CELLS))
@pytest.mark.parametrize("mode", ["no_hx", "hx", "unbatched"])
def test_cell_vs_cpu(device, name, dtype, mode):
    cpu, neu = _pair(CELLS[name], dtype, device)
    shape = (4,) if mode == "unbatched" else (3, 4)
    x = torch.randn(shape, dtype=dtype)
    if mode == "no_hx":
        _check_module(cpu, neu, (_leaf(x),), (_leaf(x, device),), dtype)
        return
    hshape = shape[:-1] + (6,)
    h = torch.randn(hshape, dtype=dtype)
    if name.startswith("lstm"):
        c = torch.randn(hshape, dtype=dtype)
        args_c, args_n = (_leaf(x), (_leaf(h), _leaf(c))), (_leaf(x, device), (_leaf(h, device), _leaf(c, device)))
    else:
        args_c, args_n = (_leaf(x), _leaf(h)), (_leaf(x, device), _leaf(h, device))
    _check_module(cpu, neu, args_c, args_n, dtype)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cell_double_backward(device, kind):
    """create_graph=True takes aten's differentiable cell backward: second derivatives equal the CPU's."""
    cell = (lambda: nn.LSTMCell(3, 4)) if kind == "lstm" else (lambda: nn.GRUCell(3, 4))
    cpu, neu = _pair(cell, torch.float64, device)
    x = torch.randn(2, 3, dtype=torch.float64)
    res = []
    for mod, xx in ((cpu, _leaf(x)), (neu, _leaf(x, device))):
        out = mod(xx)
        y = (out[0] * out[1]).sum() if kind == "lstm" else (out * out).sum()
        (gx,) = torch.autograd.grad(y, xx, create_graph=True)
        gx.pow(2).sum().backward()
        res.append((gx, xx.grad, mod.weight_ih.grad))
    for a, b in zip(res[1], res[0]):
        _close(a, b, torch.float64)


# ---- the fused cell ops ---------------------------------------------------------------------------

def test_fused_cell_ops_match_cpu_composite(device):
    """torch.ops.aten._thnn_fused_lstm_cell / _thnn_fused_gru_cell (no CPU kernel in aten) against the cell
    formulas computed on the CPU, with and without biases."""
    B, H = 3, 5
    ig, hg, cx = torch.randn(B, 4 * H, dtype=torch.float64), torch.randn(B, 4 * H, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    b1, b2 = torch.randn(4 * H, dtype=torch.float64), torch.randn(4 * H, dtype=torch.float64)
    for bias in (True, False):
        args = (b1, b2) if bias else ()
        hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig.to(device), hg.to(device), cx.to(device), *[b.to(device) for b in args])
        g = (ig + b1) + (hg + b2) if bias else ig + hg
        i, f, c, o = g.chunk(4, 1)
        i, f, c, o = i.sigmoid(), f.sigmoid(), c.tanh(), o.sigmoid()
        cy_ref = f * cx + i * c
        _close(cy, cy_ref, torch.float64)
        _close(hy, o * cy_ref.tanh(), torch.float64)
        _close(ws, torch.cat([i, f, c, o], 1), torch.float64)
    ig3, hg3, hx = ig[:, :3 * H], hg[:, :3 * H], cx
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(ig3.to(device), hg3.to(device), hx.to(device), b1[:3 * H].to(device), b2[:3 * H].to(device))
    (ir, iz, inn), (hr, hz, hn) = (ig3 + b1[:3 * H]).chunk(3, 1), (hg3 + b2[:3 * H]).chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (inn + hn * r).tanh()
    _close(hy, (hx - n) * z + n, torch.float64)
    _close(ws, torch.cat([r, z, n, hx, hn], 1), torch.float64)


def test_fused_cell_bad_input(device):
    """Wrong sizes and dtypes raise RuntimeError with aten's TensorUtils messages; the device stays usable."""
    ig = torch.randn(2, 8, device=device)
    with pytest.raises(RuntimeError, match=r"Expected 2-dimensional tensor, but got 1-dimensional tensor for argument #1 'input_gates'"):
        torch.ops.aten._thnn_fused_lstm_cell(ig[0], ig[0], ig[:, :2])
    with pytest.raises(RuntimeError, match=r"Expected tensor for argument #1 'input_gates' to have (the )?same size as tensor for argument #2 'hidden_gates'"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig[:, :4], ig[:, :2])
    with pytest.raises(RuntimeError, match=r"Expected tensor for argument #5 'prev_hidden' to have 4 elements"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, torch.randn(2, 3, device=device))
    with pytest.raises(RuntimeError, match=r"argument #3 'input_bias' to have 8 elements"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, ig[:, :2], torch.randn(7, device=device), torch.randn(7, device=device))
    with pytest.raises(RuntimeError, match=r"to have the same type as tensor for argument #\d '(input|hidden)_gates'"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig.double(), ig[:, :2])
    with pytest.raises(RuntimeError, match=r"\"_thnn_fused_gru_cell\" not implemented for 'Long'"):
        li = torch.zeros(2, 6, dtype=torch.long, device=device)
        torch.ops.aten._thnn_fused_gru_cell(li, li, li[:, :2])
    with pytest.raises(RuntimeError, match=r"Expected tensor of size \[2, 15\], but got tensor of size \[2, 10\] for argument #2 'workspace'"):
        torch.ops.aten._thnn_fused_gru_cell_backward(torch.randn(2, 3, device=device), torch.randn(2, 10, device=device), True)
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig.cpu(), ig[:, :2])
    m = nn.LSTM(3, 4).to(device)
    assert m(torch.randn(2, 1, 3, device=device))[0].shape == (2, 1, 4)


def test_empty_batch(device):
    for make in (lambda: nn.LSTM(3, 4), lambda: nn.GRU(3, 4)):
        cpu, neu = _pair(make, torch.float32, device)
        x = torch.randn(4, 0, 3)
        _check_module(cpu, neu, (_leaf(x),), (_leaf(x, device),), torch.float32)


# ---- torch.compile ----------------------------------------------------------------------------------

@pytest.mark.usefixtures("compile_cache_dir", "fresh_dynamo")
@pytest.mark.parametrize("allow_rnn", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_compiled_module_matches_eager(device, kind, allow_rnn):
    """Dynamo leaves RNN modules to eager by default (a graph break); with allow_rnn it traces aten.lstm /
    aten.gru, which AOTAutograd decomposes into GEMMs and pointwise ops for the graph compiler."""
    from torch._dynamo.utils import counters

    counters.clear()
    with torch._dynamo.config.patch(allow_rnn=allow_rnn):
        # the traced graph is unrolled over steps, layers and directions: kept small (compile time)
        _compiled_vs_eager(device, kind, dict(num_layers=1, bidirectional=True) if allow_rnn else dict(num_layers=2, bidirectional=True),
                           2 if allow_rnn else 5)
    assert (counters["stats"]["unique_graphs"] >= 1) == allow_rnn


def _compiled_vs_eager(device, kind, kw, T):
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    torch.manual_seed(0)
    eager = cls(4, 6, **kw).to(device)
    comp_mod = copy.deepcopy(eager)
    comp = torch.compile(comp_mod, backend="neuron")
    x = torch.randn(T, 3, 4)
    xe, xc = _leaf(x, device), _leaf(x, device)
    oe, oc = eager(xe), comp(xc)
    for a, b in zip(_flat(oc), _flat(oe)):
        _close(a, b.cpu(), torch.float32)
    sum(t.sum() for t in _flat(oe)).backward()
    sum(t.sum() for t in _flat(oc)).backward()
    _close(xc.grad, xe.grad.cpu(), torch.float32)
    for p_e, p_c in zip(eager.parameters(), comp_mod.parameters()):
        _close(p_c.grad, p_e.grad.cpu(), torch.float32, 4)


# ---- training ---------------------------------------------------------------------------------------

class _SeqModel(nn.Module):
    """Embedding -> 2-layer recurrent stack -> linear head on the last step: next-token classification."""

    def __init__(self, kind):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        rnn = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = rnn(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 11)

    def forward(self, tokens):
        out, _ = self.rnn(self.emb(tokens))
        return self.head(out[:, -1])


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_training_losses_equal_cpu(device, kind):
    """20 steps of Adam on the same seed and data: the neuron loss curve equals the CPU's (rtol 1e-6; measured
    1.2e-7).  The CPU runs aten's composite cell (oneDNN off): its oneDNN LSTM rebuilds a primitive per call,
    ~0.5 s a step on a busy 2-core machine; test_module_vs_cpu compares against the oneDNN path."""
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 11, (20, 8, 7), generator=g)
    targets = tokens[..., -1]
    with torch.backends.mkldnn.flags(enabled=False):
        cpu_curve = _train(kind, "cpu", tokens, targets)
    neu_curve = _train(kind, device, tokens, targets)
    assert cpu_curve[-1] < cpu_curve[0]
    torch.testing.assert_close(torch.tensor(neu_curve), torch.tensor(cpu_curve), rtol=1e-6, atol=1e-7)


def _train(kind, dev, tokens, targets):
    torch.manual_seed(0)
    model = _SeqModel(kind).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    curve = []
    for step in range(20):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens[step].to(dev)), targets[step].to(dev))
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve
