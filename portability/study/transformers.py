"""The transformer zoo: ``study --zoo transformers``.

Tiny BERT, ViT, GPT-2 (without and with its key/value cache as inputs and outputs), wav2vec2, Whisper's
encoder and T5 (an encoder-decoder), built from their Hugging Face ``transformers`` configurations with
seeded random weights (nothing is downloaded: the build runs with the hub offline), each exported to ONNX
(dynamic batch and sequence, as published exports are) and to a torch.export ``.pt2``; every file checked
on the study's targets, its drifting targets localized with ``--localize``.

``transformers`` is no dependency of the project: ``portability setup transformers`` installs it (with the
packages it needs that this environment lacks, no others) into a folder of its own, put first on the
build's ``PYTHONPATH`` only. The built files are cached by a digest of the corpus entry, the build program
and the package's version.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from portability.converters.tools import Tool
from portability.core.errors import UsageError
from portability.core.status import Status

VERSION = "5.23.0"
TOOL = Tool("transformers", "transformers", VERSION, "site/transformers")
#: transformers and what it imports that the pinned stack lacks (each without its own dependencies)
PACKAGES = (f"transformers=={VERSION}", "huggingface_hub==2.4.0", "tokenizers==0.23.3", "safetensors==0.8.0",
            "hf-xet==1.8.0", "httpx2==2.16.2", "httpcore2==2.16.2", "h11==0.16.0", "anyio==4.16.0", "truststore==0.10.5")
FORMATS = ("onnx", "pt2")


def status() -> tuple[bool, str]:
    return TOOL.status()


def provision(log: Callable[[str], None] = print) -> Path:
    """Install transformers into its folder; idempotent, about ten seconds."""
    return TOOL.provision(lambda d: [[sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                                      "--target", str(d / "site"), *PACKAGES]], log)


#: name -> (config class, its tiny settings, model class (``Class.part`` for one part of it), example inputs:
#: name -> (shape, kind)); kinds: ids (token ids), mask (ones), past (a cache tensor), float. Widths are 48 (heads
#: of 24): no dimension equals the sequence length a check synthesizes for a dynamic axis (32), which onnx2tf
#: cannot tell apart from it (a hidden size of 32 made every TFLite target of BERT's ONNX export drift)
CORPUS: dict[str, tuple] = {
    "bert": ("BertConfig", dict(vocab_size=128, hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=96, max_position_embeddings=64, hidden_act="gelu"),
             "BertModel", {"input_ids": ((1, 8), "ids"), "attention_mask": ((1, 8), "mask")}),
    "vit": ("ViTConfig", dict(image_size=32, patch_size=8, num_channels=3, hidden_size=48, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=96, hidden_act="gelu"),
            "ViTModel", {"pixel_values": ((1, 3, 32, 32), "float")}),
    "gpt2": ("GPT2Config", dict(vocab_size=128, n_embd=48, n_layer=2, n_head=2, n_positions=64, use_cache=False),
             "GPT2Model", {"input_ids": ((1, 8), "ids")}),
    "wav2vec2": ("Wav2Vec2Config", dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
                                        conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                                        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                        do_stable_layer_norm=True, feat_extract_norm="layer"),
                 "Wav2Vec2Model", {"input_values": ((1, 1600), "float")}),
    # one decoding step: a token, the cache of the 8 before it in, the logits and the grown cache out
    "gpt2_kv": ("GPT2Config", dict(vocab_size=128, n_embd=48, n_layer=2, n_head=2, n_positions=64),
                "GPT2LMHeadModel", {"input_ids": ((1, 1), "ids"), **{f"past_{kv}_{i}": ((1, 2, 8, 24), "past")
                                                                     for i in range(2) for kv in ("key", "value")}}),
    # the encoder alone, as speech-to-text deployments split it: 80 mel bins x 128 frames (a fixed length)
    "whisper_enc": ("WhisperConfig", dict(vocab_size=128, num_mel_bins=80, d_model=48, encoder_layers=2,
                                          encoder_attention_heads=2, decoder_layers=2, decoder_attention_heads=2,
                                          encoder_ffn_dim=96, decoder_ffn_dim=96, max_source_positions=64,
                                          max_target_positions=64, pad_token_id=1, bos_token_id=2,
                                          eos_token_id=3, decoder_start_token_id=2),
                    "WhisperModel.encoder", {"input_features": ((1, 80, 128), "float")}),
    "t5": ("T5Config", dict(vocab_size=128, d_model=48, d_kv=24, d_ff=96, num_layers=2, num_decoder_layers=2,
                            num_heads=2, decoder_start_token_id=0),
           "T5Model", {"input_ids": ((1, 8), "ids"), "attention_mask": ((1, 8), "mask"),
                       "decoder_input_ids": ((1, 4), "ids")}),
}

BUILD = r'''
import json, sys, torch, transformers
spec = json.loads(sys.argv[1]); out = sys.argv[2]
torch.manual_seed(0)
cfg = getattr(transformers, spec["config"])(**spec["settings"])
cls, _, part = spec["model"].partition(".")
model = getattr(transformers, cls)(cfg).eval()
model = getattr(model, part) if part else model  # "WhisperModel.encoder": one part of the model
kv = any(kind == "past" for _, kind in spec["inputs"].values())

class Plain(torch.nn.Module):  # the first output (last hidden state), positional inputs
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, *xs):
        return self.m(**dict(zip(spec["names"], xs)), return_dict=False)[0]

class Cached(torch.nn.Module):  # a decoding step: the token and the past cache in; logits and the new cache out
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, input_ids, *past):
        cache = transformers.DynamicCache([(past[i], past[i + 1]) for i in range(0, len(past), 2)], config=cfg)
        out = self.m(input_ids=input_ids, past_key_values=cache, use_cache=True)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])

ex = []
for name, (shape, kind) in spec["inputs"].items():
    if kind == "ids": ex.append(torch.randint(0, 128, shape))
    elif kind == "mask": ex.append(torch.ones(shape, dtype=torch.int64))
    else: ex.append(torch.rand(shape))
m = (Cached(model) if kv else Plain(model)).eval()  # inference: no Dropout, as a published export is
# dynamic batch, and sequence (token inputs), samples (audio) or past length (a cache), as published exports are;
# images and spectrograms: batch only
axes = {n: ({0: "batch", 1: "decoder_sequence" if n.startswith("decoder_") else "sequence"} if kind in ("ids", "mask") else
            {0: "batch", 2: "past_sequence"} if kind == "past" else {0: "batch", 1: "samples"} if len(shape) == 2 else
            {0: "batch"}) for n, (shape, kind) in spec["inputs"].items()}
outputs = (["logits"] + [f"present_{kv}_{i}" for i in range(len(spec["names"]) // 2) for kv in ("key", "value")]
           if kv else ["last_hidden_state"])
if kv:
    axes.update({n: {0: "batch", 1: "sequence"} if n == "logits" else {0: "batch", 2: "total_sequence"} for n in outputs})
with torch.no_grad():
    try:  # the TorchScript exporter, as published exports mostly are; else the dynamo one (opset 18)
        torch.onnx.export(m, tuple(ex), out + ".onnx", input_names=spec["names"], output_names=outputs,
                          opset_version=17, dynamo=False, dynamic_axes=axes)
    except Exception as e:
        print(f"{out}: TorchScript export failed ({str(e)[:120]}); dynamo export", file=sys.stderr)
        auto = [{d: torch.export.Dim.AUTO for d in axes[n]} for n in spec["names"]]
        dims = (auto[0], tuple(auto[1:])) if kv else (tuple(auto),)  # forward(input_ids, *past) / forward(*xs)
        torch.onnx.export(m, tuple(ex), out + ".onnx", input_names=spec["names"], output_names=outputs,
                          opset_version=18, dynamo=True, dynamic_shapes=dims)
    try:
        torch.export.save(torch.export.export(m, tuple(ex)), out + ".pt2")
    except Exception as e:  # a model torch.export cannot capture (data-dependent control flow): no .pt2
        print(f"{out}: torch.export failed: {str(e).splitlines()[0][:200]}", file=sys.stderr)
'''


def names(given: list[str] | None) -> list[str]:
    unknown = sorted(set(given or ()) - set(CORPUS))
    if unknown:
        raise UsageError(f"unknown transformer model(s) {', '.join(unknown)} (the zoo has: {', '.join(CORPUS)})")
    return list(given or CORPUS)


def build(name: str, root: Path, log: Callable[[str], None] = lambda s: None) -> Path:
    """The folder holding ``name``'s ``.onnx`` and ``.pt2`` (built unless cached under ``root``)."""
    cfg, settings, model, inputs = CORPUS[name]
    spec = {"config": cfg, "settings": settings, "model": model, "inputs": inputs, "names": list(inputs)}
    return built(name, spec, BUILD, root, log)


def built(name: str, spec: dict, program: str, root: Path, log: Callable[[str], None] = lambda s: None) -> Path:
    """The folder where ``program`` (run with ``transformers`` on its path, the hub offline, given ``spec`` as
    JSON and the files' stem) wrote ``name.onnx``, built unless cached under ``root`` (by a digest of the
    spec, the program and the package's version)."""
    digest = hashlib.sha256(json.dumps([spec, program, VERSION], sort_keys=True).encode()).hexdigest()[:16]
    folder = root / f"{name}-{digest}"
    if (folder / ".built").is_file():
        return folder
    ok, why = status()
    if not ok:
        raise UsageError(f"{why}: run `portability setup transformers`")
    folder.mkdir(parents=True, exist_ok=True)
    log(f"building {name} from its configuration (random weights, seed 0)")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join([str(TOOL.folder / "site")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    p = subprocess.run([sys.executable, "-c", program, json.dumps(spec), str(folder / name)], env=env,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if p.returncode != 0 or not (folder / f"{name}.onnx").is_file():
        lines = [ln for ln in p.stderr.splitlines() if ln.strip() and "Warning" not in ln]
        raise UsageError(f"building {name} failed: {(lines or [f'exit {p.returncode}'])[-1]}")
    (folder / ".built").write_text(p.stderr[-4000:])
    return folder


def run_zoo(models: list[str], targets: str, session, cache_root: Path | None, localize: bool, seed: int,
            progress) -> dict:
    """Every model file of ``models`` checked on ``targets``; each drifting target localized with ``localize``.
    Returns the study's JSON: ``{"zoo": "transformers", "rows": [{"model", "format", "report", ...}], ...}``."""
    from portability import api
    from portability.core.dirs import default_root
    from portability.engine.pipeline import check as run_check
    from portability.sources import load_source_isolated

    root = Path(cache_root) if cache_root else default_root()
    rows, t0 = [], time.perf_counter()
    for name in models:
        folder = build(name, root / "zoo-transformers", progress.stage)
        for fmt in FORMATS:
            path = folder / f"{name}.{fmt}"
            row = {"model": name, "format": fmt, "file": str(path), "report": None, "localized": {}}
            if not path.is_file():
                row["why"] = ((folder / ".built").read_text().strip().splitlines() or ["not built"])[-1]
                rows.append(row)
                continue
            progress.stage(f"{name}.{fmt}: checking")
            opts = api.options(targets, seed=seed, cache_dir=cache_root)
            try:
                info = load_source_isolated(path, sandbox=opts.sandbox, shapes=opts.shapes)
                row["report"] = run_check(path, opts, progress.check_progress(), model=info, session=session).to_dict()
            except UsageError as e:
                row["why"] = str(e)
            if localize and row["report"]:
                row["localized"] = _localized(path, row["report"], seed, cache_root, root / "zoo-transformers" / "localize", progress)
            rows.append(row)
    return {"zoo": "transformers", "transformers": VERSION, "models": models, "targets": targets, "rows": rows,
            "seconds": {"total": time.perf_counter() - t0}}


def _localized(path: Path, report: dict, seed: int, cache_root, out: Path, progress) -> dict:
    """Each drifting target's first diverging op (``localize`` on 16 samples)."""
    from portability import api
    from portability.explain import localize

    found = {}
    for t in report["targets"]:
        if t["status"] != Status.DRIFT or t["id"] == report["reference"]:
            continue
        progress.stage(f"{path.name}: localizing {t['id']}")
        opts = api.options(t["id"], samples=16, runs=0, seed=seed, cache_dir=cache_root)
        try:
            doc = localize.run(path, t["id"], opts, out / path.name / t["id"].replace("/", "_"))
        except UsageError as e:
            found[t["id"]] = {"why": str(e)}
            continue
        first = doc.get("first_divergence") or {}
        found[t["id"]] = {"node": first.get("node"), "op_type": first.get("op_type"), "method": doc.get("method"),
                          **({} if first else {"why": doc.get("why") or "nothing localized"})}
    return found


def table(rows: list[dict]) -> str:
    """The models x targets Markdown table, then each failure with its op and the route that made its artifact."""
    cols = [f"{r['model']}.{r['format']}" for r in rows]
    reports = {c: r["report"] for c, r in zip(cols, rows)}
    targets = list(dict.fromkeys(t["id"] for r in reports.values() if r for t in r["targets"]))
    lines = ["| target | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for tid in targets:
        cells = []
        for c in cols:
            t = next((t for t in (reports[c] or {}).get("targets", []) if t["id"] == tid), None)
            cells.append("–" if t is None else t["status"] + (f" ({t['op']})" if t.get("op") and t["status"] != Status.PASS else ""))
        lines.append(f"| `{tid}` | " + " | ".join(cells) + " |")
    failures = [f"- **{c}**: not checked: {r.get('why')}" for c, r in zip(cols, rows) if not r["report"]]
    for c, r in zip(cols, rows):
        for t in (r["report"] or {}).get("targets", []):
            if t["status"] in (Status.PASS, Status.SKIPPED):
                continue
            route = " → ".join(s.get("converter", "?") for s in t["details"].get("conversions", [])) or "–"
            why = t.get("error") or "; ".join(b if isinstance(b, str) else b.get("message", "") for b in t.get("breaches") or [])
            loc = r["localized"].get(t["id"]) or {}
            failures.append(f"- **{c}** `{t['id']}`: {t['status']}" + (f", op `{t['op']}`" if t.get("op") else "")
                            + f"; route: {route}; {why[:300]}"
                            + (f"; first diverging op: `{loc['op_type']}` node `{loc['node']}`" if loc.get("node") else ""))
    return "\n".join(lines + ["", *failures])
