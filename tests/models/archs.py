"""The architectures of the model sweep: every one of tests/python/hf_models.py (the compile sweep's 46)
and the ones below, built the same way (tiny config, seeded random weights, dropout off, no download).

    from tests.models import archs
    model, inputs = archs.build("mixtral")     # CPU model in train mode, CPU inputs (labels included)

Inputs may hold non-tensor flags (CLIP's return_loss=True); move only the tensors.
"""
import importlib
import sys
from pathlib import Path

import torch

_PY_TESTS = str(Path(__file__).resolve().parents[1] / "python")
if _PY_TESTS not in sys.path:
    sys.path.insert(0, _PY_TESTS)

import hf_models  # noqa: E402
from hf_models import BATCH, HIDDEN, SEQ, VOCAB, Arch  # noqa: E402,F401

_DEC_KV = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=64, num_key_value_heads=2, head_dim=8)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_BERT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
_BART = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
_T5 = dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=4,
           relative_attention_num_buckets=8, decoder_start_token_id=0)
_VIT = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64)
_TXT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16)
_AUDIO = dict(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
              num_conv_pos_embedding_groups=2, num_labels=5, classifier_proj_size=16)

EXTRA = {
    # ---- decoders: mixture of experts (router top-k, per-expert token counts)
    "mixtral": Arch("decoder", "MixtralConfig", "MixtralForCausalLM",
                    dict(_DEC_KV, num_local_experts=4, num_experts_per_tok=2), "causal"),
    "qwen2_moe": Arch("decoder", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                      dict(_DEC_KV, **_MOE, shared_expert_intermediate_size=32, decoder_sparse_step=1), "causal"),
    "qwen3_moe": Arch("decoder", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(_DEC_KV, **_MOE, decoder_sparse_step=1), "causal"),
    "olmoe": Arch("decoder", "OlmoeConfig", "OlmoeForCausalLM",
                  dict(_DEC_KV, num_experts=4, num_experts_per_tok=2, pad_token_id=1, bos_token_id=0,
                       eos_token_id=0), "causal"),
    # ---- decoders
    "olmo2": Arch("decoder", "Olmo2Config", "Olmo2ForCausalLM",
                  dict(_DEC_KV, pad_token_id=1, bos_token_id=0, eos_token_id=0), "causal"),
    "gpt_bigcode": Arch("decoder", "GPTBigCodeConfig", "GPTBigCodeForCausalLM",
                        dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                             eos_token_id=0), "causal", tied=True),
    "biogpt": Arch("decoder", "BioGptConfig", "BioGptForCausalLM",
                   dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
                        eos_token_id=2), "causal", tied=True),
    "xglm": Arch("decoder", "XGLMConfig", "XGLMForCausalLM",
                 dict(vocab_size=VOCAB, d_model=HIDDEN, num_layers=2, attention_heads=4, ffn_dim=64,
                      max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2),
                 "causal", tied=True),
    "smollm3": Arch("decoder", "SmolLM3Config", "SmolLM3ForCausalLM",
                    dict(_DEC_KV, pad_token_id=0, bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "glm4": Arch("decoder", "Glm4Config", "Glm4ForCausalLM",
                 dict(_DEC_KV, pad_token_id=0, bos_token_id=0, eos_token_id=0), "causal"),
    # ---- encoders
    "camembert": Arch("encoder", "CamembertConfig", "CamembertForMaskedLM", dict(_BERT, pad_token_id=1),
                      "masked", tied=True),
    "mpnet": Arch("encoder", "MPNetConfig", "MPNetForMaskedLM",
                  dict(_BERT, pad_token_id=1), "masked", tied=True),
    "roformer": Arch("encoder", "RoFormerConfig", "RoFormerForMaskedLM", dict(_BERT, embedding_size=HIDDEN),
                     "masked", tied=True),
    "ernie": Arch("encoder", "ErnieConfig", "ErnieForMaskedLM", _BERT, "masked", tied=True),
    "deberta": Arch("encoder", "DebertaConfig", "DebertaForMaskedLM",
                    dict(_BERT, relative_attention=True, max_relative_positions=16, pos_att_type=["p2c", "c2p"]),
                    "masked", tied=True),
    # ---- encoder-decoders
    "mbart": Arch("encoder-decoder", "MBartConfig", "MBartForConditionalGeneration", _BART, "seq2seq", tied=True),
    "mt5": Arch("encoder-decoder", "MT5Config", "MT5ForConditionalGeneration", _T5, "seq2seq"),
    # ---- vision and vision-language (contrastive loss, return_loss=True)
    "clip": Arch("vision", "CLIPConfig", "CLIPModel",
                 dict(text_config=dict(_TXT, bos_token_id=0, eos_token_id=2), projection_dim=16,
                      vision_config=dict(_VIT)), "image_text"),
    "siglip": Arch("vision", "SiglipConfig", "SiglipModel",
                   dict(text_config=dict(_TXT, pad_token_id=0, bos_token_id=1, eos_token_id=2),
                        vision_config=dict(_VIT)), "image_text"),
    "beit": Arch("vision", "BeitConfig", "BeitForImageClassification", dict(_VIT, num_labels=5), "image16"),
    "convnextv2": Arch("vision", "ConvNextV2Config", "ConvNextV2ForImageClassification",
                       dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], patch_size=2,
                            num_labels=5), "image16"),
    "regnet": Arch("vision", "RegNetConfig", "RegNetForImageClassification",
                   dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8,
                        num_labels=5), "image16"),
    "swinv2": Arch("vision", "Swinv2Config", "Swinv2ForImageClassification",
                   dict(image_size=16, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=2,
                        mlp_ratio=2.0, num_labels=5), "image16"),
    # ---- audio
    "wavlm": Arch("audio", "WavLMConfig", "WavLMForSequenceClassification",
                  dict(_AUDIO, num_buckets=8, max_bucket_distance=16), "audio_cls"),
    "data2vec_audio": Arch("audio", "Data2VecAudioConfig", "Data2VecAudioForSequenceClassification",
                           dict(_AUDIO, conv_pos_kernel_size=4, num_conv_pos_embeddings=2), "audio_cls"),
}


def _in_image_text(cfg, g):
    return {"input_ids": torch.randint(3, VOCAB, (BATCH, SEQ), generator=g),
            "pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g), "return_loss": True}


INPUTS = {**hf_models.INPUTS, "image_text": _in_image_text}
ARCHS = {**hf_models.ARCHS, **EXTRA}
assert not set(hf_models.ARCHS) & set(EXTRA)


def build(name, seed=0):
    """(model, inputs) as hf_models.build: the CPU model in train mode with seeded random weights."""
    if name in hf_models.ARCHS:
        return hf_models.build(name, seed)
    arch = EXTRA[name]
    transformers = importlib.import_module("transformers")
    cfg = getattr(transformers, arch.config)(**arch.kwargs)
    hf_models._no_randomness(cfg)
    for sub in ("text_config", "vision_config"):
        if getattr(cfg, sub, None) is not None:
            hf_models._no_randomness(getattr(cfg, sub))
    torch.manual_seed(seed)
    model = getattr(transformers, arch.model)(cfg)
    model.train()
    g = torch.Generator().manual_seed(seed + 1)
    return model, INPUTS[arch.inputs](cfg, g)


def family(name):
    return ARCHS[name].family


def is_generative(name):
    """Models whose generate() the sweep checks: decoders, encoder-decoders, Whisper, Mamba."""
    a = ARCHS[name]
    return a.inputs in ("causal", "seq2seq", "whisper")


__all__ = ["ARCHS", "EXTRA", "build", "family", "is_generative"]
