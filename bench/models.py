"""7. Models: BERT inference and a small CNN training step.

BERT: a BERT-base encoder written with plain modules (token + position + type embeddings, LayerNorm, per layer
one fused QKV Linear, F.scaled_dot_product_attention with a padding mask, output Linear, residual LayerNorm,
a GELU MLP of 4 x d, and the tanh pooler), so that every op goes through the dispatcher (nn.TransformerEncoder's
inference fast path would call aten._transformer_encoder_layer_fwd, a CPU/CUDA-only kernel).  Inference is
forward under torch.inference_mode() with random weights (the arithmetic is the same as for trained ones).

CNN: a CIFAR-sized network (3 x [conv3x3 - BatchNorm - ReLU] blocks with max pooling, then a Linear head),
batch 32 of 3 x 32 x 32 images; one step = forward, cross-entropy, backward, SGD with momentum.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .harness import Case


class BertLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ff=3072, max_pos=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads, ff) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, ids, attn):
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        x = self.ln(self.tok(ids) + self.pos(pos)[None] + self.typ(torch.zeros_like(ids)))
        # additive mask [B, 1, 1, T]: 0 where attended, -inf-like on padding
        mask = (1.0 - attn[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


def bert_config(quick):
    if quick:
        return dict(d=768, layers=2, heads=12, ff=3072, batch=4, seq=128)
    return dict(d=768, layers=12, heads=12, ff=3072, batch=8, seq=128)


def bert_flops(c):
    """2 x matmul parameters x tokens + attention 4 x T^2 x d per sequence and layer."""
    d, L, T, B = c["d"], c["layers"], c["seq"], c["batch"]
    per_layer = 4 * d * d + 2 * d * c["ff"]
    return 2.0 * L * per_layer * B * T + 4.0 * L * B * T * T * d + 2.0 * d * d * B


class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.features = nn.Sequential(block(3, 32), block(32, 64), block(64, 128))
        self.head = nn.Linear(128 * 4 * 4, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def cnn_flops(batch):
    """Forward conv + linear multiply-adds x 2, x 3 for forward + backward."""
    convs = [(3, 32, 32), (32, 64, 16), (64, 128, 8)]     # cin, cout, spatial size
    f = sum(2.0 * cin * cout * 9 * s * s for cin, cout, s in convs) + 2.0 * 2048 * 10
    return 3.0 * f * batch


def model_cases(quick):
    bc = bert_config(quick)

    def s_bert(d):
        torch.manual_seed(0)
        model = Bert(d=bc["d"], layers=bc["layers"], heads=bc["heads"], ff=bc["ff"]).eval().to(d)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, 30522, (bc["batch"], bc["seq"]), generator=g)
        attn = torch.ones(bc["batch"], bc["seq"], dtype=torch.long)
        attn[1::2, bc["seq"] * 3 // 4:] = 0          # every other sequence padded to 3/4 length
        ids, attn = ids.to(d), attn.to(d)

        def step():
            with torch.inference_mode():
                return model(ids, attn)[1]
        return step

    batch = 32

    def s_cnn(d):
        torch.manual_seed(0)
        model = SmallCNN().to(d).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(2)
        x = torch.randn(batch, 3, 32, 32, generator=g).to(d)
        y = torch.randint(0, 10, (batch,), generator=g).to(d)

        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return step

    return [
        Case(f"BERT-base inference, {bc['layers']} layers, B{bc['batch']} T{bc['seq']} fp32", s_bert,
             flops=bert_flops(bc), limit="fma", max_iters=1000,
             note="random weights, padding mask, torch.inference_mode(); flops: 2 x matmul params x tokens + "
                  "attention"),
        Case(f"small CNN train step, B{batch} 3x32x32", s_cnn, flops=cnn_flops(batch), limit="fma",
             max_iters=1000, note="3 x (conv3x3-BN-ReLU-maxpool) + Linear, cross-entropy, SGD momentum; "
                                  "flops: 3 x forward"),
    ]

