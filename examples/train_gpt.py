#!/usr/bin/env python
"""Train a small character-level GPT on examples/data/input.txt.

The model is nanoGPT-shaped: token + position embeddings, N pre-LayerNorm blocks of causal
self-attention (F.scaled_dot_product_attention(is_causal=True)) and a GELU MLP, a final LayerNorm
and an lm head whose weight is tied to the token embedding.  AdamW, clip_grad_norm_(1.0) and a
cosine learning-rate schedule with linear warmup (LambdaLR).

The only device-specific thing in this file is the device string:

    python examples/train_gpt.py                       # trains on "neuron"
    python examples/train_gpt.py --device cpu          # the same on the CPU
    python examples/train_gpt.py --compare             # neuron, then cpu: loss table and times

Reproducibility across devices: the model is initialised on the CPU from --seed and then moved
with .to(device), and every batch is drawn on the CPU with its own CPU generator, so both devices
start from identical weights and see identical data.  Dropout defaults to 0 (its random numbers
would differ between devices).

Tests import build_and_train() from this file.
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "data", "input.txt")


# --------------------------------------------------------------------------------------- data
class CharData:
    """Character-level encoding of a text file; batches are drawn on the CPU."""

    def __init__(self, path=DEFAULT_DATA, text=None):
        if text is None:
            with open(path, "r", encoding="utf-8") as f:
                text = f.read()
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.data = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)

    def encode(self, s):
        return [self.stoi[c] for c in s if c in self.stoi]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)

    def get_batch(self, batch, block, generator):
        """(x, y) int64 CPU tensors of shape (batch, block); y is x shifted by one."""
        ix = torch.randint(len(self.data) - block - 1, (batch,), generator=generator)
        x = torch.stack([self.data[i : i + block] for i in ix.tolist()])
        y = torch.stack([self.data[i + 1 : i + 1 + block] for i in ix.tolist()])
        return x, y


# -------------------------------------------------------------------------------------- model
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by heads"
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, d_model, dropout=0.0):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, block, layers, d_model, heads, dropout=0.0):
        super().__init__()
        self.block_size = block
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying, as in GPT-2 / nanoGPT
        self.apply(self._init_weights)
        # scaled init of the residual projections (GPT-2)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, n_new, temperature=1.0, generator=None):
        """Sample n_new tokens; the sampling itself is done on the CPU with a CPU generator."""
        for _ in range(n_new):
            cond = idx[:, -self.block_size :]
            logits, _ = self(cond)
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator).to(idx.device)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def cosine_with_warmup(warmup, total, min_ratio=0.1):
    """LambdaLR multiplier: linear warmup, then cosine decay to min_ratio."""

    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def _sync(device):
    device = torch.device(device)
    if device.type != "cpu":
        mod = getattr(torch, device.type, None)
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize()


# ----------------------------------------------------------------------------------- training
def build_and_train(
    device="neuron",
    steps=100,
    batch=16,
    block=64,
    layers=2,
    d_model=128,
    heads=4,
    seed=1337,
    lr=3e-3,
    warmup=10,
    weight_decay=0.1,
    dropout=0.0,
    data=None,
    log_every=0,
    return_model=False,
    dtype=None,
):
    """Train from `seed` on `device`; returns (losses, seconds).

    losses: list of float, the training loss of every step (before that step's update).
    seconds: wall time of the training loop (synchronized at the end).
    With return_model=True returns (losses, seconds, model, data).
    dtype: optional parameter dtype; the model is still initialised in float32 on the CPU first.
    """
    if data is None:
        data = CharData()
    elif isinstance(data, str):
        data = CharData(text=data)
    device = torch.device(device)

    # identical initial weights on every device: build on the CPU, then move
    torch.manual_seed(seed)
    model = GPT(data.vocab_size, block, layers, d_model, heads, dropout)
    model = model.to(device) if dtype is None else model.to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_with_warmup(warmup, steps))

    # identical data on every device: drawn on the CPU with a CPU generator
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)

    losses = []
    _sync(device)
    t0 = time.perf_counter()
    for step in range(steps):
        x, y = data.get_batch(batch, block, gen)
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(
                f"[{device}] step {step:5d}  loss {losses[-1]:.4f}  "
                f"lr {sched.get_last_lr()[0]:.2e}  {time.perf_counter() - t0:6.1f}s",
                flush=True,
            )
    _sync(device)
    seconds = time.perf_counter() - t0
    if return_model:
        return losses, seconds, model, data
    return losses, seconds


def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="neuron")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--data", default=DEFAULT_DATA, help="a UTF-8 text file")
    p.add_argument("--compare", action="store_true",
                   help="train on --device and then on cpu from the same seed and data")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--sample", type=int, default=0, help="characters to sample after training")
    args = p.parse_args(argv)

    data = CharData(args.data)
    cfg = dict(steps=args.steps, batch=args.batch, block=args.block, layers=args.layers,
               d_model=args.d_model, heads=args.heads, seed=args.seed, lr=args.lr,
               warmup=args.warmup, dropout=args.dropout, data=data)
    n_params = sum(p.numel() for p in GPT(data.vocab_size, args.block, args.layers,
                                            args.d_model, args.heads).parameters())
    print(f"data: {len(data.data):,} characters, vocab {data.vocab_size}; "
          f"model: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, "
          f"block {args.block}, {n_params:,} parameters; batch {args.batch}, {args.steps} steps")

    if not args.compare:
        losses, secs, model, _ = build_and_train(args.device, log_every=args.log_every,
                                                 return_model=True, **cfg)
        print(f"[{args.device}] {args.steps} steps in {secs:.2f}s "
              f"({args.steps / secs:.2f} steps/s); loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        if args.sample > 0:
            _print_sample(model, data, args)
        return 0

    dev = str(torch.device(args.device))
    print(f"training on {dev} ...", flush=True)
    d_losses, d_secs, model, _ = build_and_train(dev, return_model=True, **cfg)
    print("training on cpu ...", flush=True)
    c_losses, c_secs = build_and_train("cpu", **cfg)

    every = max(1, args.log_every)
    w = max(len(dev), 8) + 3
    print()
    print(f"{'step':>6} | {dev + ' loss':>{w}} | {'cpu loss':>{w}} | {'rel diff':>10}")
    print(f"{'-' * 6}-+-{'-' * w}-+-{'-' * w}-+-{'-' * 10}")
    for i, (a, b) in enumerate(zip(d_losses, c_losses)):
        if i % every == 0 or i == len(d_losses) - 1:
            print(f"{i:>6} | {a:>{w}.6f} | {b:>{w}.6f} | {_rel(a, b):>10.2e}")
    worst = max(range(len(c_losses)), key=lambda i: _rel(d_losses[i], c_losses[i]))
    print(f"\nlargest relative difference: {_rel(d_losses[worst], c_losses[worst]):.3e} "
          f"(step {worst})")
    print(f"{dev:>10}: {d_secs:7.2f}s  {args.steps / d_secs:7.2f} steps/s")
    print(f"{'cpu':>10}: {c_secs:7.2f}s  {args.steps / c_secs:7.2f} steps/s")
    print(f"{dev} speed relative to cpu: {c_secs / d_secs:.2f}x (above 1: {dev} is faster)")
    if args.sample > 0:
        _print_sample(model, data, args)
    return 0


def _print_sample(model, data, args):
    model.eval()
    dev = next(model.parameters()).device
    g = torch.Generator(device="cpu")
    g.manual_seed(args.seed)
    start = torch.tensor([data.encode("\n")], dtype=torch.long, device=dev)
    out = model.generate(start, args.sample, generator=g)
    print(f"\n--- sample ({dev}) ---\n{data.decode(out[0].tolist())}\n---")


if __name__ == "__main__":
    raise SystemExit(main())
