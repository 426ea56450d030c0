"""Tiny Hugging Face Transformers models with random weights, for the compile and ecosystem sweeps.

Each entry of ARCHS names one architecture: the family, transformers' own config class with tiny sizes
(1-2 layers, hidden 32, 2-4 heads, vocab 96, sequence 8, batch 2), the model class (a head with its own
loss, so a training step is `model(**inputs).loss.backward()`), and the inputs it takes.  Nothing comes
from the hub: every model is built from its config with seeded random weights.

    model, inputs = build("gpt2")          # CPU model in train mode, CPU inputs (labels included)

Every dropout-like probability of the config (hidden, attention, activation dropout, layerdrop,
drop-path, SpecAugment masking) is set to 0 so that two runs of one step are deterministic and comparable
across devices; the model is still in train mode (batch norm uses batch statistics).
"""
import dataclasses
import importlib

import torch

VOCAB = 96
SEQ = 8
BATCH = 2
HIDDEN = 32


@dataclasses.dataclass(frozen=True)
class Arch:
    family: str            # decoder, encoder, encoder-decoder, vision, audio, ssm
    config: str            # transformers config class name
    model: str             # transformers model class name
    kwargs: dict           # config sizes
    inputs: str            # key of INPUTS
    tied: bool = False     # the input embedding and the output projection share one weight


_DEC = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
_DEC_KV = dict(_DEC, num_key_value_heads=2, head_dim=8)
_BERT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
_SEQ2SEQ_BART = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
                     eos_token_id=2, decoder_start_token_id=2)
_VIT = dict(image_size=16, patch_size=4, num_channels=3, hidden_size=HIDDEN, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, num_labels=5)

ARCHS = {
    # ---- decoder-only language models (causal LM loss)
    "gpt2": Arch("decoder", "GPT2Config", "GPT2LMHeadModel",
                 dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=64,
                      bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "gpt_neo": Arch("decoder", "GPTNeoConfig", "GPTNeoForCausalLM",
                    dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=2, num_heads=4,
                         attention_types=[[["global", "local"], 1]], window_size=4,
                         max_position_embeddings=64, bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "gptj": Arch("decoder", "GPTJConfig", "GPTJForCausalLM",
                 dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                      bos_token_id=0, eos_token_id=0), "causal"),
    "gpt_neox": Arch("decoder", "GPTNeoXConfig", "GPTNeoXForCausalLM",
                     dict(_DEC, bos_token_id=0, eos_token_id=0), "causal"),
    "opt": Arch("decoder", "OPTConfig", "OPTForCausalLM",
                dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                     ffn_dim=64, word_embed_proj_dim=HIDDEN, max_position_embeddings=64, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2), "causal", tied=True),
    "llama": Arch("decoder", "LlamaConfig", "LlamaForCausalLM", _DEC_KV, "causal"),
    "mistral": Arch("decoder", "MistralConfig", "MistralForCausalLM", _DEC_KV, "causal"),
    "qwen2": Arch("decoder", "Qwen2Config", "Qwen2ForCausalLM", _DEC_KV, "causal"),
    "qwen3": Arch("decoder", "Qwen3Config", "Qwen3ForCausalLM", _DEC_KV, "causal"),
    "phi": Arch("decoder", "PhiConfig", "PhiForCausalLM", dict(_DEC, partial_rotary_factor=0.5), "causal"),
    "phi3": Arch("decoder", "Phi3Config", "Phi3ForCausalLM", dict(_DEC_KV, pad_token_id=0), "causal"),
    "gemma": Arch("decoder", "GemmaConfig", "GemmaForCausalLM", _DEC_KV, "causal", tied=True),
    "gemma2": Arch("decoder", "Gemma2Config", "Gemma2ForCausalLM", dict(_DEC_KV, sliding_window=4),
                   "causal", tied=True),
    "gemma3": Arch("decoder", "Gemma3TextConfig", "Gemma3ForCausalLM", dict(_DEC_KV, sliding_window=4),
                   "causal", tied=True),
    "falcon": Arch("decoder", "FalconConfig", "FalconForCausalLM",
                   dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                        bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "bloom": Arch("decoder", "BloomConfig", "BloomForCausalLM",
                  dict(vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=2, n_head=4, bos_token_id=0,
                       eos_token_id=0), "causal", tied=True),
    "mpt": Arch("decoder", "MptConfig", "MptForCausalLM",
                dict(vocab_size=VOCAB, d_model=HIDDEN, n_layers=2, n_heads=4, max_seq_len=64,
                     expansion_ratio=2), "causal", tied=True),
    "cohere": Arch("decoder", "CohereConfig", "CohereForCausalLM",
                   dict(_DEC_KV, pad_token_id=0, bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "starcoder2": Arch("decoder", "Starcoder2Config", "Starcoder2ForCausalLM",
                       dict(_DEC_KV, bos_token_id=0, eos_token_id=0), "causal", tied=True),
    "codegen": Arch("decoder", "CodeGenConfig", "CodeGenForCausalLM",
                    dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                         n_ctx=64, bos_token_id=0, eos_token_id=0), "causal"),
    "stablelm": Arch("decoder", "StableLmConfig", "StableLmForCausalLM", dict(_DEC_KV, bos_token_id=0,
                     eos_token_id=0), "causal"),
    "olmo": Arch("decoder", "OlmoConfig", "OlmoForCausalLM", dict(_DEC_KV, pad_token_id=1, bos_token_id=0,
                 eos_token_id=0), "causal"),
    "granite": Arch("decoder", "GraniteConfig", "GraniteForCausalLM", _DEC_KV, "causal"),
    # ---- encoder-only (masked LM loss unless said)
    "bert": Arch("encoder", "BertConfig", "BertForMaskedLM", _BERT, "masked", tied=True),
    "roberta": Arch("encoder", "RobertaConfig", "RobertaForMaskedLM", dict(_BERT, pad_token_id=1),
                    "masked", tied=True),
    "xlm_roberta": Arch("encoder", "XLMRobertaConfig", "XLMRobertaForMaskedLM", dict(_BERT, pad_token_id=1),
                        "masked", tied=True),
    "distilbert": Arch("encoder", "DistilBertConfig", "DistilBertForMaskedLM",
                       dict(vocab_size=VOCAB, dim=HIDDEN, n_layers=2, n_heads=4, hidden_dim=64,
                            max_position_embeddings=64), "masked", tied=True),
    "albert": Arch("encoder", "AlbertConfig", "AlbertForMaskedLM", dict(_BERT, embedding_size=16),
                   "masked", tied=True),
    "electra": Arch("encoder", "ElectraConfig", "ElectraForMaskedLM", dict(_BERT, embedding_size=16),
                    "masked", tied=True),
    "deberta_v2": Arch("encoder", "DebertaV2Config", "DebertaV2ForMaskedLM",
                       dict(_BERT, relative_attention=True, position_buckets=8, max_relative_positions=16,
                            pos_att_type=["p2c", "c2p"]), "masked", tied=True),
    "modernbert": Arch("encoder", "ModernBertConfig", "ModernBertForMaskedLM",
                       dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, local_attention=4,
                            pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0, sep_token_id=0),
                       "masked", tied=True),
    # ---- encoder-decoder (seq2seq LM loss; labels shifted into decoder inputs by the model)
    "t5": Arch("encoder-decoder", "T5Config", "T5ForConditionalGeneration",
               dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1,
                    num_heads=4, relative_attention_num_buckets=8, decoder_start_token_id=0),
               "seq2seq", tied=True),
    "bart": Arch("encoder-decoder", "BartConfig", "BartForConditionalGeneration", _SEQ2SEQ_BART, "seq2seq",
                 tied=True),
    "pegasus": Arch("encoder-decoder", "PegasusConfig", "PegasusForConditionalGeneration",
                    dict(_SEQ2SEQ_BART, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
                    "seq2seq", tied=True),
    "marian": Arch("encoder-decoder", "MarianConfig", "MarianMTModel",
                   dict(_SEQ2SEQ_BART, pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1,
                        eos_token_id=0), "seq2seq", tied=True),
    # ---- vision (image classification loss)
    "vit": Arch("vision", "ViTConfig", "ViTForImageClassification", _VIT, "image16"),
    "deit": Arch("vision", "DeiTConfig", "DeiTForImageClassification", _VIT, "image16"),
    "swin": Arch("vision", "SwinConfig", "SwinForImageClassification",
                 dict(image_size=16, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                      window_size=2, mlp_ratio=2.0, num_labels=5), "image16"),
    "convnext": Arch("vision", "ConvNextConfig", "ConvNextForImageClassification",
                     dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], patch_size=2, num_labels=5),
                     "image16"),
    "resnet": Arch("vision", "ResNetConfig", "ResNetForImageClassification",
                   dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                        layer_type="basic", num_labels=5), "image16"),
    "dinov2": Arch("vision", "Dinov2Config", "Dinov2ForImageClassification",
                   dict(_VIT, layerscale_value=0.5), "image16"),
    "segformer": Arch("vision", "SegformerConfig", "SegformerForImageClassification",
                      dict(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                           hidden_sizes=[16, 32], patch_sizes=[3, 3], strides=[2, 2], num_attention_heads=[1, 2],
                           mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5), "image16"),
    # ---- audio
    "whisper": Arch("audio", "WhisperConfig", "WhisperForConditionalGeneration",
                    dict(vocab_size=VOCAB, num_mel_bins=8, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                         decoder_ffn_dim=64, max_source_positions=8, max_target_positions=32,
                         pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0,
                         suppress_tokens=None, begin_suppress_tokens=None), "whisper", tied=True),
    "wav2vec2": Arch("audio", "Wav2Vec2Config", "Wav2Vec2ForCTC",
                     dict(vocab_size=VOCAB // 3, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                          num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, pad_token_id=0,
                          ctc_loss_reduction="mean"), "ctc"),
    "hubert": Arch("audio", "HubertConfig", "HubertForSequenceClassification",
                   dict(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
                        num_conv_pos_embedding_groups=2, num_labels=5, classifier_proj_size=16), "audio_cls"),
    # ---- state-space
    "mamba": Arch("ssm", "MambaConfig", "MambaForCausalLM",
                  dict(vocab_size=VOCAB, hidden_size=HIDDEN, state_size=4, num_hidden_layers=2, expand=2,
                       conv_kernel=4, time_step_rank=4, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                       use_mambapy=False), "causal", tied=True),
}


def _ids(g, n=VOCAB, shape=(BATCH, SEQ)):
    return torch.randint(3, n, shape, generator=g)   # ids 0-2 are the special tokens of some configs


def _in_causal(cfg, g):
    ids = _ids(g)
    return {"input_ids": ids, "labels": ids.clone()}


def _in_masked(cfg, g):
    ids = _ids(g)
    labels = torch.full_like(ids, -100)
    labels[:, ::3] = _ids(g)[:, ::3]                 # a third of the positions carry a target
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _in_seq2seq(cfg, g):
    return {"input_ids": _ids(g), "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
            "labels": _ids(g, shape=(BATCH, SEQ - 2))}


def _in_image16(cfg, g):
    return {"pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g),
            "labels": torch.randint(0, cfg.num_labels, (BATCH,), generator=g)}


def _in_whisper(cfg, g):
    # the encoder's two convolutions (stride 1, 2) turn 2 * max_source_positions frames into positions
    return {"input_features": torch.randn(BATCH, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g),
            "labels": _ids(g, shape=(BATCH, SEQ - 2))}


def _in_ctc(cfg, g):
    return {"input_values": torch.randn(BATCH, 200, generator=g),
            "labels": torch.randint(1, cfg.vocab_size, (BATCH, 4), generator=g)}


def _in_audio_cls(cfg, g):
    return {"input_values": torch.randn(BATCH, 200, generator=g),
            "labels": torch.randint(0, cfg.num_labels, (BATCH,), generator=g)}


INPUTS = {"causal": _in_causal, "masked": _in_masked, "seq2seq": _in_seq2seq, "image16": _in_image16,
          "whisper": _in_whisper, "ctc": _in_ctc, "audio_cls": _in_audio_cls}


def _no_randomness(cfg):
    """Dropout, layer drop, drop path and SpecAugment masks off (set to 0 in the config)."""
    for k, v in list(cfg.to_dict().items()):
        if isinstance(v, float) and not isinstance(v, bool) and (
                "drop" in k or k in ("mask_time_prob", "mask_feature_prob")):
            setattr(cfg, k, 0.0)


def make_config(name):
    arch = ARCHS[name]
    transformers = importlib.import_module("transformers")
    cfg = getattr(transformers, arch.config)(**arch.kwargs)
    _no_randomness(cfg)
    return cfg


def build(name, seed=0):
    """(model, inputs): the CPU model in train mode with seeded random weights, and its CPU inputs."""
    arch = ARCHS[name]
    transformers = importlib.import_module("transformers")
    cfg = make_config(name)
    torch.manual_seed(seed)
    model = getattr(transformers, arch.model)(cfg)
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p != 0:
            raise AssertionError(f"{name}: {type(m).__name__} with p={m.p} left in the model")
    g = torch.Generator().manual_seed(seed + 1)
    return model, INPUTS[arch.inputs](cfg, g)


def is_tied(model):
    """Whether the model's input embedding and output projection are one tensor."""
    try:
        out = model.get_output_embeddings()
        inp = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return False
    return out is not None and inp is not None and out.weight is inp.weight
