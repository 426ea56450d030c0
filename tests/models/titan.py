"""TorchTitan 0.3.0's llama3 debug model trained with FSDP2 on neuron under torchrun, against the same run on the CPU.

    python -m tests.models.titan [--steps N] [--compile] [--ac full|selective|none] [--workdir DIR]

TorchTitan is used as its users run it: `torchrun ... -m torchtitan.train --module llama3 --config
llama3_debugmodel` plus command-line overrides; none of its files is changed. It picks the `neuron` device
by itself (torch._utils._get_available_device_type finds torch.neuron) and takes its c10d backend from
`Backend.default_device_backend_map["neuron"]`, which our backend registration fills with "neuron".
`torch.distributed.set_timeout`, which TorchTitan calls after the first step and torch 2.13 lacks, comes
from torchneuron.distributed.

Its assets come from us, since the wheel has none and the machines have no hub: a byte-level BPE tokenizer
with the model's 2048-entry vocabulary, trained on the project's own docs, and a `c4_test`-shaped JSON-lines
dataset of their paragraphs, both under WORKDIR/tests/assets (the relative paths the config names).

The CPU reference runs the same TorchTitan trainer, same seed, same data, on 2 ranks, computing on the CPU.
TorchTitan has no CPU device path (its probe falls back to "cuda"), and Gloo cannot reduce FSDP2's
PREMUL_SUM; tests/models/titan_cpu.py says how that run is set up.

Both runs set TORCHDYNAMO_DISABLE=1 unless --compile: TorchTitan always wraps flex_attention in
torch.compile with Inductor (models/common/attention.py, FlexAttention._compiled_flex_attn), and Inductor
lowers flex only with Triton templates off the CPU ("No module named 'triton'" on neuron) and fails on the
CPU for this shape; with dynamo off that wrapper runs flex's eager path on both devices.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(ROOT, ".venv", "titan-site")
VOCAB = 2048
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
STEP_RE = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)\s+grad_norm:\s*([0-9.]+)\s+memory:\s*(-?[0-9.]+)GiB")


def _paragraphs():
    """The project's prose, split into paragraphs of at least 80 characters (deterministic order)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]:
        with open(path, encoding="utf-8") as f:
            for block in re.split(r"\n\s*\n", f.read()):
                block = " ".join(block.split())
                if len(block) >= 80:
                    out.append(block)
    return out


def build_assets(workdir):
    """WORKDIR/tests/assets/tokenizer/{tokenizer.json,tokenizer_config.json} and
    WORKDIR/tests/assets/c4_test/train.json; returns the number of paragraphs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = _paragraphs()
    tok_dir = os.path.join(workdir, "tests", "assets", "tokenizer")
    data_dir = os.path.join(workdir, "tests", "assets", "c4_test")
    os.makedirs(tok_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False}, f)
    with open(os.path.join(data_dir, "train.json"), "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return len(texts)


def titan_args(steps, seq_len, batch, compile_=False, seed=None, dump=None, ac=None, config="llama3_debugmodel"):
    """The TorchTitan command line after `-m torchtitan.train`: the stock config, made small.  seed: the seed
    checkpoint to start from (None: no checkpointing at all; False: the caller sets checkpointing up).  config:
    one of TorchTitan's llama3 configs, e.g. llama3_debugmodel_varlen_attn (varlen attention instead of flex:
    the one a compiled run can use, since TorchTitan compiles flex only with Inductor)."""
    a = ["--module", "llama3", "--config", config,
         "--training.steps", str(steps), "--training.seq-len", str(seq_len),
         "--training.local-batch-size", str(batch),
         "--lr-scheduler.warmup-steps", "2",
         "--validator.no-enable", "--metrics.no-enable-tensorboard",
         "--dataloader.num-workers", "0", "--debug.seed", "1234", "--debug.deterministic",
         "--parallelism.spmd-backend", "partial_dtensor",
         "--comm.init-timeout-seconds", "120", "--comm.train-timeout-seconds", "120"]
    if seed:
        a += ["--checkpoint.enable", "--checkpoint.initial-load-path", seed, "--checkpoint.interval", "1000000",
              "--checkpoint.last-save-model-only", "--dump-folder", dump]
    elif seed is None:
        a += ["--checkpoint.no-enable"]
    if compile_:
        a += ["--compile.enable", "--compile.backend", "neuron"]
    if ac:
        a += [f"activation-checkpoint:{ac}"]  # a tyro subcommand: last
    return a


def seed_checkpoint(workdir, timeout=600):
    """TorchTitan's own route to the same initial weights across runs: a seed checkpoint made on one CPU
    rank (--checkpoint.create-seed-checkpoint); every run then starts from it (--checkpoint.initial-load-path).
    Without it each run initializes on its device, and neuron's random generator is not the CPU's."""
    folder = os.path.join(workdir, "seed")
    step0 = os.path.join(folder, "checkpoint", "step-0")
    if not os.path.isdir(step0):
        args = titan_args(1, 128, 2, seed=False) + ["--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                                                    "--parallelism.data-parallel-shard-degree", "1",
                                                    "--dump-folder", folder]
        rc, _, out = run("cpu", workdir, args, nproc=1, timeout=timeout)
        if rc != 0 or not os.path.isdir(step0):
            raise RuntimeError(f"the seed checkpoint failed (rc={rc}):\n{out[-4000:]}")
    return step0


def run(device, workdir, args, nproc=2, timeout=900, compile_=False):
    """One torchrun launch in WORKDIR; returns (rc, {step: (loss, grad_norm, peak active GiB)} of rank 0,
    output)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SITE, ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("NEURON_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MASTER_ADDR"] = "127.0.0.1"
    if not compile_:
        env["TORCHDYNAMO_DISABLE"] = "1"  # TorchTitan compiles FlexAttention with Inductor: see the module text
    module = ["-m", "torchtitan.train"] if device == "neuron" else ["-m", "tests.models.titan_cpu"]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", "127.0.0.1:0", "--local-ranks-filter", "0", "--role", "rank", "--tee", "3",
           *module, *args]
    try:
        p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    steps = {int(s): (float(l), float(g), float(m)) for s, l, g, m in STEP_RE.findall(out)}
    return rc, steps, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--ac", choices=["selective", "full", "none"], help="activation checkpointing (default: the config's, selective)")
    ap.add_argument("--device", default="both", choices=["neuron", "cpu", "both"])
    ap.add_argument("--workdir")
    a = ap.parse_args()
    workdir = a.workdir or tempfile.mkdtemp(prefix="titan-")
    n = build_assets(workdir)
    print(f"assets: {n} paragraphs, tokenizer of {VOCAB} in {workdir}/tests/assets", flush=True)
    res = {}
    seed = seed_checkpoint(workdir)
    for dev in (["neuron", "cpu"] if a.device == "both" else [a.device]):
        args = titan_args(a.steps, a.seq_len, a.batch, a.compile, seed=seed,
                          dump=os.path.join(workdir, f"run-{dev}{'-compile' if a.compile else ''}"), ac=a.ac)
        rc, steps, out = run(dev, workdir, args, compile_=a.compile)
        res[dev] = steps
        print(f"{dev}: rc={rc}", flush=True)
        for k in sorted(steps):
            print(f"  step {k}: loss {steps[k][0]:.5f} grad_norm {steps[k][1]:.4f} memory {steps[k][2]:.2f} GiB")
        if rc != 0:
            print(out[-6000:])
    if len(res) == 2 and res["neuron"] and res["cpu"]:
        common = sorted(set(res["neuron"]) & set(res["cpu"]))
        worst = max(abs(res["neuron"][k][0] - res["cpu"][k][0]) / res["cpu"][k][0] for k in common)
        print(f"loss, neuron vs CPU: worst relative difference {worst:.2e} over {len(common)} steps")
    if not a.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
