"""docs/models.md and README's "Works with" table from the sweep's results (tests/models/__main__.py)."""
import datetime
import importlib.metadata
import platform
import re
import subprocess

MODES = ("forward", "train", "generate", "compiled")
EAGER = ("forward", "train", "generate")
BEGIN, END = "<!-- works-with:begin (make models) -->", "<!-- works-with:end -->"


def _status(res, mode):
    """The status dict of one mode; an error for every mode if the process or the build failed."""
    if "process_error" in res:
        return {"status": "error", "error": res["process_error"]}
    if "build_error" in res:
        return {"status": "error", "error": res["build_error"]}
    return res["modes"].get(mode)


def _cell(st):
    if st is None:
        return "-"
    s = st["status"]
    if s == "native":
        return "native"
    if s == "fallback":
        return "fallback: " + ", ".join(o.replace("aten::", "") for o in st["fallback"])
    if s == "mismatch":
        return f"mismatch ({st['worst']})"
    return "error"


def summary(res):
    return "  ".join(f"{m}={_cell(_status(res, m)).split(':')[0]}" for m in MODES if _status(res, m))


def passes(res, modes):
    """Every applicable mode of `modes` is native."""
    sts = [_status(res, m) for m in modes]
    return all(st is None or st["status"] == "native" for st in sts)


def _versions():
    v = {}
    for pkg in ("torch", "transformers", "accelerate", "peft"):
        try:
            v[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            v[pkg] = "not installed"
    try:
        v["torchneuron"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True).stdout.strip() or "?"
    except OSError:
        v["torchneuron"] = "?"
    return v


def _cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def totals(results):
    n = len(results)
    eager = sum(passes(r, EAGER) for r in results)
    comp = sum(passes(r, ("compiled",)) for r in results)
    return n, eager, comp


def _commits(results, v):
    """The commit each result was measured on (results record it; a sweep of some models keeps the others'
    results), most models first."""
    by = {}
    for r in results:
        c = r.get("torchneuron", v["torchneuron"])
        by.setdefault(c, []).append(r["name"])
    if len(by) == 1:
        return next(iter(by))
    parts = sorted(by.items(), key=lambda kv: -len(kv[1]))
    return ", ".join(f"{c} for {len(ns)} models" if len(ns) > 4 else f"{c} for {', '.join(sorted(ns))}" for c, ns in parts)


def write(results, md_path, readme_path):
    v = _versions()
    n, eager, comp = totals(results)
    today = datetime.date.today().isoformat()
    counts = {m: {} for m in MODES}
    for r in results:
        for m in MODES:
            st = _status(r, m)
            if st is not None:
                counts[m][st["status"]] = counts[m].get(st["status"], 0) + 1
    out = [
        "# Hugging Face models on neuron",
        "",
        f"Written by `make models` (tests/models) on {today}: torch {v['torch']}, transformers "
        f"{v['transformers']}, accelerate {v['accelerate']}, peft {v['peft']}, torchneuron {_commits(results, v)}; "
        f"CPU {_cpu()}.",
        "",
        "Each architecture is a tiny model built from its config with seeded random weights (1-2 layers, "
        "hidden 32; tests/models/archs.py, tests/python/hf_models.py), run in its own process against the CPU "
        "from the same weights: the eval forward's every floating output, a training step's loss and every "
        "parameter gradient, greedy `generate()` ids (generative models), and the forward under "
        "`torch.compile(backend=\"neuron\")`.  *native*: matches (rtol 1e-4 plus 1e-5 of the largest entry), "
        "no op fell back to the CPU; *fallback*: matches, with the ops that ran on the CPU; *mismatch*: the "
        "worst max|diff| relative to the reference's largest entry; *error*: the first line is below.",
        "",
        f"**Eager (forward, training step, generate all native): {eager} of {n} "
        f"({100 * eager / max(n, 1):.0f} %).  Compiled forward native: {comp} of {n} "
        f"({100 * comp / max(n, 1):.0f} %).**",
        "",
        "| mode | " + " | ".join(["native", "fallback", "mismatch", "error"]) + " |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in MODES:
        c = counts[m]
        out.append(f"| {m} | " + " | ".join(str(c.get(k, 0)) for k in ("native", "fallback", "mismatch", "error")) + " |")
    out += ["", "| model | family | forward | training step | generate | compiled forward |",
            "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(results, key=lambda r: (r.get("family", ""), r["name"])):
        out.append(f"| {r['name']} | {r.get('family', '')} | " +
                   " | ".join(_cell(_status(r, m)) for m in MODES) + " |")
    fails = [(r["name"], m, _status(r, m)) for r in results for m in MODES
             if _status(r, m) and _status(r, m)["status"] in ("error", "mismatch")]
    if fails:
        out += ["", "## Failures", ""]
        for name, m, st in sorted(fails):
            what = st.get("error") or f"mismatch, worst {st['worst']}"
            out.append(f"- **{name}**, {m}: `{what}`")
    md_path.write_text("\n".join(out) + "\n")
    _write_readme(readme_path, v, n, eager, comp, today)


def works_with_table(v, n, eager, comp, today):
    return "\n".join([
        BEGIN,
        "| library | version | what was tested | result |",
        "| --- | --- | --- | --- |",
        f"| Transformers | {v['transformers']} | {n} architectures (decoders incl. MoE, encoders, encoder-decoders, "
        f"vision, audio): forward, training step, `generate()`, compiled forward vs CPU ([docs/models.md]"
        f"(docs/models.md), {today}) | eager native {eager}/{n}, compiled {comp}/{n} |",
        f"| Transformers `Trainer`, `pipeline` | {v['transformers']} | Trainer picks neuron with no code change "
        "(also `torch_compile=True`), `from_pretrained(device_map=\"neuron\"/\"auto\")`, text-generation "
        "pipeline with `device=\"neuron\"`/`0` (tests/python/test_ecosystem_hf.py) | losses and outputs match CPU |",
        f"| Accelerate | {v['accelerate']} | `Accelerator().device`, `prepare()`, memory-based `device_map=\"auto\"` "
        "with CPU offload | matches CPU |",
        f"| PEFT | {v['peft']} | LoRA fine-tune of a tiny llama | losses match CPU |",
        "| TorchTitan | 0.3.0 | llama3 debug model, FSDP2 over 2 ranks under torchrun, selective and full activation "
        "checkpointing, from a seed checkpoint ([docs/torchtitan.md](docs/torchtitan.md), tests/python/test_titan.py) "
        "| losses match CPU (1.4e-5); `--compile.enable` not yet |",
        "| scripts written for CUDA | - | `TORCHNEURON_CUDA=1` / `import torchneuron.cuda` runs a tutorial CUDA "
        "training script unchanged, reports the rewritten lines (tests/python/test_ecosystem_cuda.py) | matches CPU |",
        END,
    ])


def _write_readme(path, v, n, eager, comp, today):
    text = path.read_text()
    table = works_with_table(v, n, eager, comp, today)
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: table, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n## Works with\n\n" + table + "\n"
    path.write_text(text)
