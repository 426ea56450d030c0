"""The slice of the model sweep (tests/models, `make models`) that runs in `make test`: ten architectures,
one of each kind, every mode native against the CPU (forward, training step's loss and gradients,
greedy generate() ids, compiled forward), each in its own process with a timeout, as the sweep runs them.

The mixture-of-experts models (mixtral, qwen2_moe, qwen3_moe, olmoe) join the slice once torch.histc on
integer inputs (their routing) runs on neuron, wav2vec2 and hubert once _weight_norm_interface and
ctc_loss do; docs/models.md has their status.  About 1 min 45 s of CPU (5.5 min wall on the shared
2-core box).
"""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.models.__main__ import run_one  # noqa: E402

SLICE = ["gpt2", "llama", "qwen3", "bert", "t5", "bart", "whisper", "vit", "clip", "data2vec_audio",
         "mixtral"]  # (mixtral: MoE routing calls torch.histc on an integer tensor)


@pytest.mark.parametrize("name", SLICE)
def test_model_matches_cpu_natively_in_every_mode(name, compile_cache_dir):
    res = run_one(name, timeout=600)
    assert "process_error" not in res and "build_error" not in res, res
    modes = res["modes"]
    generative = ("gpt2", "llama", "qwen3", "t5", "bart", "whisper", "mixtral")
    expected = {"forward", "train", "compiled"} | ({"generate"} if name in generative else set())
    assert set(modes) == expected
    bad = {m: {k: v for k, v in st.items() if k != "trace"} for m, st in modes.items() if st["status"] != "native"}
    assert not bad, f"{name}: " + "; ".join(f"{m}: {st}" for m, st in bad.items()) + "\n" + \
        "\n".join(st.get("trace", "") for st in modes.values())
