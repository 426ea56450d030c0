"""Hugging Face Transformers, Accelerate and PEFT on neuron with no code change, each against the CPU.

Transformers and Accelerate pick the `neuron` device when a module named `torch_neuronx` is importable
(our torch_neuronx/ package); torchneuron/ecosystem.py adapts the two paths that list no neuron device
yet (Accelerate's get_max_memory for device_map="auto", Transformers' pipeline(device=N)).  The model is
the tiny random-weight llama of hf_models.py (2 layers, hidden 32, vocab 96); nothing is downloaded:
checkpoints are saved to tmp_path and the tokenizer is built from a word list.  About 40 s in all.
"""
import copy
import importlib.util

import pytest
import torch

import hf_models

import accelerate  # noqa: F401  (make test installs them: tests/models/requirements.txt)
import peft
import transformers

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Accelerate keeps its device in process-wide singletons: each test (and each Trainer within one,
    see _train) starts from none, as a new script would."""
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _tokenizer():
    """A word-level fast tokenizer over hf_models.VOCAB ids: <pad> <s> </s> w0 w1 ..."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(hf_models.VOCAB - 3)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                                pad_token="<pad>")


class _Rows(torch.utils.data.Dataset):
    def __init__(self, n=8, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(3, hf_models.VOCAB, (n, hf_models.SEQ), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(model, tmp_path, steps=4, **args):
    """Trainer.train() for `steps` steps; (losses, the Trainer)."""
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)
    targs = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=steps, logging_steps=1,
        learning_rate=1e-2, seed=0, report_to=[], save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, **args)
    tr = transformers.Trainer(model=model, args=targs, train_dataset=_Rows())
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert len(losses) == steps
    return losses, tr


def _assert_params_close(model, ref):
    ref = dict(ref.named_parameters())
    bad = [n for n, p in model.named_parameters()
           if not torch.allclose(p.detach().cpu(), ref[n].detach(), rtol=RTOL, atol=ATOL * 10)]
    assert not bad, f"parameters differ from the CPU run: {bad}"


def test_torch_neuronx_is_found_and_maps_to_ours():
    import torch_neuronx
    from accelerate.utils import is_neuron_available
    from transformers.utils import is_torch_neuron_available

    assert importlib.util.find_spec("torch_neuronx") is not None
    assert is_torch_neuron_available() and is_neuron_available(check_device=True)
    assert torch_neuronx.neuron is torch.neuron
    assert torch_neuronx.device_count() == torch.neuron.device_count() >= 1
    for name in ("synchronize", "current_stream", "memory_allocated", "set_device", "Stream", "Event",
                 "get_device_properties", "empty_cache", "reset_peak_memory_stats"):
        assert getattr(torch_neuronx, name) is getattr(torch.neuron, name), name
    torch_neuronx.clear_op_tracking()
    (torch.ones(3, device="neuron") * 2).sum().item()
    assert "aten::mul.Tensor" in torch_neuronx.get_executed_ops()
    assert torch_neuronx.get_fallback_ops() == set()
    assert torch_neuronx.is_neuron_runtime_initialized()
    assert "graphs_compiled" in torch_neuronx.get_dynamo_metrics()


def test_torch_neuronx_refuses_import_when_the_device_is_disabled(run_py):
    """TORCHNEURON_DISABLE=1: no device, so `import torch_neuronx` fails and Transformers keeps to the CPU."""
    r = run_py("import torch, transformers\n"
               "from transformers.utils import is_torch_neuron_available\n"
               "print('avail', is_torch_neuron_available(), transformers.TrainingArguments('/tmp/x').device)\n"
               "import torch_neuronx\n", env={"TORCHNEURON_DISABLE": "1"}, timeout=180)
    assert "avail False cpu" in r.stdout, r.report
    assert r.returncode != 0 and "ImportError: torch_neuronx: the neuron device is not registered" in r.stderr, r.report


def test_trainer_trains_on_neuron_and_matches_cpu(tmp_path):
    """No device argument anywhere: TrainingArguments and Accelerate choose neuron (before torch_neuronx
    they chose the CPU and moved a neuron model back); losses and weights match use_cpu=True."""
    model, _ = hf_models.build("llama")
    ref = copy.deepcopy(model)
    on_neuron = copy.deepcopy(model).to("neuron")   # put there by the user: must stay there
    losses, tr = _train(model, tmp_path)
    assert tr.args.device == torch.device("neuron", 0)
    assert next(model.parameters()).device.type == "neuron"
    rlosses, rtr = _train(ref, tmp_path, use_cpu=True)
    assert rtr.args.device == torch.device("cpu")
    assert losses == pytest.approx(rlosses, rel=RTOL)
    _assert_params_close(model, ref)
    losses2, _ = _train(on_neuron, tmp_path)
    assert next(on_neuron.parameters()).device.type == "neuron"
    assert losses2 == pytest.approx(rlosses, rel=RTOL)


def test_trainer_torch_compile_uses_the_neuron_backend(tmp_path):
    import torchneuron
    model, _ = hf_models.build("llama")
    ref = copy.deepcopy(model)
    torchneuron.compile_stats(reset=True)
    losses, tr = _train(model, tmp_path, torch_compile=True)
    assert tr.args.torch_compile_backend == "neuron"
    assert torchneuron.compile_stats()["graphs_compiled"] >= 1
    torch._dynamo.reset()
    rlosses, _ = _train(ref, tmp_path, use_cpu=True)
    assert losses == pytest.approx(rlosses, rel=RTOL)


def test_accelerator_prepare_trains_on_neuron():
    from accelerate import Accelerator
    model, inputs = hf_models.build("llama")
    ref = copy.deepcopy(model)
    acc = Accelerator()
    assert acc.device.type == "neuron"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    assert next(model.parameters()).device.type == "neuron"
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(3):
        loss = model(**{k: v.to(acc.device) for k, v in inputs.items()}).loss
        acc.backward(loss)
        opt.step(), opt.zero_grad()
        rloss = ref(**inputs).loss
        rloss.backward()
        ropt.step(), ropt.zero_grad()
        assert loss.item() == pytest.approx(rloss.item(), rel=RTOL)
    _assert_params_close(model, ref)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A safetensors checkpoint of the eval-mode llama, and that CPU model."""
    model, _ = hf_models.build("llama")
    model.eval()
    d = tmp_path_factory.mktemp("llama")
    model.save_pretrained(d)
    assert (d / "model.safetensors").exists()
    return d, model


@pytest.mark.parametrize("device_map,max_memory", [("neuron", None), ("auto", None), ({"": 0}, None),
                                                   ("auto", "half")],
                         ids=["neuron", "auto", "index", "auto-split"])
def test_from_pretrained_device_map(checkpoint, device_map, max_memory):
    """device_map="auto" places by Accelerate's memory budget: all of a tiny model on neuron, or, with
    max_memory={0: half the weights' bytes, "cpu": ...}, the first layers on neuron and the rest on the
    CPU (its hooks move the activations), with the same logits either way."""
    d, ref = checkpoint
    if max_memory == "half":
        size = sum(p.numel() * p.element_size() for p in ref.parameters())
        max_memory = {0: size // 2, "cpu": 10**9}
    m = transformers.AutoModelForCausalLM.from_pretrained(d, device_map=device_map, max_memory=max_memory)
    if max_memory:  # CPU-offloaded weights sit on "meta" between the forwards that bring them in
        placed = set(m.hf_device_map.values())
        assert placed == {0, "cpu"}, m.hf_device_map
        assert {p.device.type for p in m.parameters()} == {"neuron", "meta"}
    else:
        assert {p.device.type for p in m.parameters()} == {"neuron"}
    ids = torch.randint(3, hf_models.VOCAB, (2, hf_models.SEQ), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = m(input_ids=ids.to(m.device)).logits.cpu()
        want = ref(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("device", ["neuron", 0, None], ids=["neuron", "index", "default"])
def test_text_generation_pipeline(checkpoint, device):
    """pipeline("text-generation", device=...) with a local tokenizer: on neuron for "neuron" and for an
    index (which meant the CPU before), greedy text equal to the CPU pipeline's."""
    d, _ = checkpoint
    tok = _tokenizer()
    kw = dict(max_new_tokens=6, do_sample=False, return_full_text=False)
    p = transformers.pipeline("text-generation", model=str(d), tokenizer=tok, device=device)
    assert p.device.type == "neuron" and p.model.device.type == "neuron"
    ref = transformers.pipeline("text-generation", model=str(d), tokenizer=tok, device="cpu")
    prompts = ["w1 w2 w3", "w40 w7"]
    assert p(prompts, **kw) == ref(prompts, **kw)
    # a model already on neuron, no device argument: stays on neuron (the default index was the CPU)
    m = transformers.AutoModelForCausalLM.from_pretrained(d).to("neuron")
    assert transformers.pipeline("text-generation", model=m, tokenizer=tok).model.device.type == "neuron"


def test_peft_lora_fine_tune_matches_cpu():
    base, inputs = hf_models.build("llama")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                          task_type="CAUSAL_LM")
    torch.manual_seed(5)
    model = peft.get_peft_model(copy.deepcopy(base), cfg)
    torch.manual_seed(5)
    ref = peft.get_peft_model(copy.deepcopy(base), cfg)
    # LoRA's B starts at zero: give it values so that the first step's gradients reach A
    with torch.no_grad():
        for (n, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
            if "lora_B" in n:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(n)))
                r.copy_(p)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    model.to("neuron")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ropt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=1e-2)
    losses, rlosses = [], []
    for _ in range(4):
        loss = model(**{k: v.to("neuron") for k, v in inputs.items()}).loss
        loss.backward()
        opt.step(), opt.zero_grad()
        rloss = ref(**inputs).loss
        rloss.backward()
        ropt.step(), ropt.zero_grad()
        losses.append(loss.item()), rlosses.append(rloss.item())
    assert losses == pytest.approx(rlosses, rel=RTOL)
    assert losses[-1] < losses[0]
    _assert_params_close(model, ref)
