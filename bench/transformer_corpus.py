#!/usr/bin/env python3
"""The transformer corpus on every target: tiny BERT, ViT, GPT-2 (without and with its key/value cache as
inputs and outputs), wav2vec2, Whisper's encoder and T5 (an encoder-decoder), built offline from their
configurations (random weights, no download), exported to ONNX and to a torch.export ``.pt2``, each checked
with ``--targets all``; prints the models x targets table (the one ``docs/transformers.md`` holds).

    python bench/transformer_corpus.py build DIR --python PY    # PY: an interpreter with `transformers`
    python bench/transformer_corpus.py run DIR [--models bert,vit] [--formats onnx,pt2]
    python bench/transformer_corpus.py table DIR                # the Markdown table of the reports in DIR

`build` runs in an environment with Hugging Face ``transformers`` (not a dependency of the project: a venv
with ``--system-site-packages`` and ``pip install transformers`` keeps the pinned stack untouched); `run`
and `table` need only the project.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> (transformers config class, its tiny settings, model class, example inputs: name -> (shape, kind))
CORPUS = {
    "bert": ("BertConfig", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=64, hidden_act="gelu"),
             "BertModel", {"input_ids": ((1, 8), "ids"), "attention_mask": ((1, 8), "mask")}),
    "vit": ("ViTConfig", dict(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64, hidden_act="gelu"),
            "ViTModel", {"pixel_values": ((1, 3, 32, 32), "float")}),
    "gpt2": ("GPT2Config", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False),
             "GPT2Model", {"input_ids": ((1, 8), "ids")}),
    "wav2vec2": ("Wav2Vec2Config", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                        conv_dim=(16, 16, 16), conv_kernel=(10, 3, 3), conv_stride=(5, 2, 2),
                                        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                        do_stable_layer_norm=True, feat_extract_norm="layer"),
                 "Wav2Vec2Model", {"input_values": ((1, 1600), "float")}),
    # one decoding step: a token, the cache of the 8 before it in, the logits and the grown cache out
    "gpt2_kv": ("GPT2Config", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64),
                "GPT2LMHeadModel", {"input_ids": ((1, 1), "ids"), **{f"past_{kv}_{i}": ((1, 2, 8, 16), "past")
                                                                     for i in range(2) for kv in ("key", "value")}}),
    # the encoder alone, as speech-to-text deployments split it: 80 mel bins x 128 frames (a fixed length)
    "whisper_enc": ("WhisperConfig", dict(vocab_size=128, num_mel_bins=80, d_model=32, encoder_layers=2,
                                          encoder_attention_heads=2, decoder_layers=2, decoder_attention_heads=2,
                                          encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=64,
                                          max_target_positions=64, pad_token_id=1, bos_token_id=2,
                                          eos_token_id=3, decoder_start_token_id=2),
                    "WhisperModel.encoder", {"input_features": ((1, 80, 128), "float")}),
    "t5": ("T5Config", dict(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
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
axes = {n: ({0: "batch", 1: "decoder_sequence" if n.startswith("decoder_") else "sequence"} if kind in ("ids", "mask") else {0: "batch", 2: "past_sequence"} if kind == "past"
            else {0: "batch", 1: "samples"} if len(shape) == 2 else {0: "batch"}) for n, (shape, kind) in spec["inputs"].items()}
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
                          opset_version=18, dynamo=True,
                          dynamic_shapes=dims)
    try:
        torch.export.save(torch.export.export(m, tuple(ex)), out + ".pt2")
    except Exception as e:  # a model torch.export cannot capture (data-dependent control flow): no .pt2
        print(f"{out}: torch.export failed: {str(e).splitlines()[0][:200]}", file=sys.stderr)
print(out)
'''


def build(folder: Path, python: str, models: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in models:
        cfg, settings, model, inputs = CORPUS[name]
        spec = {"config": cfg, "settings": settings, "model": model, "inputs": inputs, "names": list(inputs)}
        subprocess.run([python, "-c", BUILD, json.dumps(spec), str(folder / name)], check=True)


def run(folder: Path, models: list[str], formats: list[str]) -> None:
    for name in models:
        for fmt in formats:
            model = folder / f"{name}.{fmt}"
            out = folder / f"{name}.{fmt}.json"
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "portability", "check", str(model), "--targets", "all",
                                "--json", str(out), "--no-history", "-q"], capture_output=True, text=True, cwd=ROOT)
            print(f"{model.name}: exit {p.returncode} in {time.perf_counter() - t0:.0f} s", flush=True)
            if p.returncode not in (0, 1):
                print(p.stderr[-2000:], file=sys.stderr)


def _cell(t: dict) -> str:
    status = t["status"]
    why = t.get("op") or ""
    if status == "pass":
        return "pass"
    if status == "skipped":
        return "skipped"
    return f"{status}" + (f" ({why})" if why else "")


def table(folder: Path) -> str:
    reports = {p.name[: -len(".json")]: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    cols = list(reports)
    targets = list(dict.fromkeys(t["id"] for r in reports.values() for t in r["targets"]))
    lines = ["| target | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for tid in targets:
        cells = []
        for c in cols:
            t = next((t for t in reports[c]["targets"] if t["id"] == tid), None)
            cells.append(_cell(t) if t else "–")
        lines.append(f"| `{tid}` | " + " | ".join(cells) + " |")
    failures = []
    for c, r in reports.items():
        for t in r["targets"]:
            if t["status"] not in ("pass", "skipped"):
                route = " → ".join(s.get("converter", "?") for s in t["details"].get("conversions", [])) or "–"
                failures.append(f"- **{c}** `{t['id']}`: {t['status']}"
                                + (f", op `{t['op']}`" if t.get("op") else "")
                                + f"; route: {route}; {(t.get('error') or '; '.join(b['message'] if isinstance(b, dict) else str(b) for b in t.get('breaches') or []))[:300]}")
    return "\n".join(lines + ["", *failures])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("build", "run", "table"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--python", default=sys.executable, help="an interpreter with transformers (build)")
    ap.add_argument("--models", default=",".join(CORPUS))
    ap.add_argument("--formats", default="onnx,pt2")
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    if a.step == "build":
        build(a.folder, a.python, models)
    elif a.step == "run":
        run(a.folder, models, [f for f in a.formats.split(",") if f])
    else:
        print(table(a.folder))


if __name__ == "__main__":
    main()
