"""The generation zoo: ``study --zoo generation``.

Tiny causal language models — GPT-2 (learned positions, LayerNorm), Llama (rotary positions, RMSNorm,
grouped-query attention: 4 query heads share 2 key/value heads) and Qwen2 (Llama's blocks with biased
query/key/value projections, tied embeddings) — built from their Hugging Face ``transformers`` configurations
with seeded random weights (the hub offline; ``portability setup transformers``), and exported as Hugging Face
Optimum exports a decoder with its cache: torch.onnx (Optimum's exporter is not installed here) with Optimum's
names, ``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values.N.key/value`` in, ``logits`` and
``present.N.key/value`` out, the dimensions ``batch_size``, ``sequence_length``, ``past_sequence_length`` and
``total_sequence_length``; one file that prefills from an empty past, as Optimum's ``model.onnx`` does.

The weights are drawn wider than ``transformers``' default (``initializer_range`` 0.3, not 0.02): at the
default a tiny random model's logits are almost flat and it repeats one token, a comparison that tells little.
Each model's greedy tokens are computed in PyTorch at build time (its own loop, ``transformers``' cache) and the
study says whether the ONNX reference agrees with them. Every model is then checked with ``--generate N``
on the study's targets. Encoder-decoders (T5, Whisper) are not in the zoo: ``--generate`` does not run them yet.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from portability.core.errors import UsageError
from portability.core.status import Status

#: name -> (config class, its tiny settings, model class). Widths 48, head size 12, a vocabulary of 128: no
#: dimension equals the length a check synthesizes for a dynamic axis (32)
CORPUS: dict[str, tuple] = {
    "gpt2": ("GPT2Config", dict(vocab_size=128, n_embd=48, n_layer=2, n_head=4, n_positions=256,
                                initializer_range=0.3), "GPT2LMHeadModel"),
    "llama": ("LlamaConfig", dict(vocab_size=128, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                  rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.3),
              "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", dict(vocab_size=128, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                  rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.3),
              "Qwen2ForCausalLM"),
}
#: asked for, not built: why
NOT_BUILT = {"t5": "an encoder-decoder: checked with `check decoder_model.onnx --encoder encoder_model.onnx --generate N` "
                   "(tests/test_encoder_decoder.py), not yet in this zoo",
             "whisper": "an encoder-decoder of audio features: its encoder's input_features are not generated from yet"}
#: the prompt every model is checked with (``core.generate.default_prompt(128)``, written out)
PROMPT = (109, 81, 65, 35)
#: the tokens PyTorch generates at build time (enough for any --generate the study runs)
TORCH_TOKENS = 64
DEFAULT_STEPS = 16
#: the study's targets: those a decoder generates on here, and onnx2tf's LiteRT for its named failure (a graph
#: converted at fixed shapes cannot grow its cache); quick: the server's ONNX Runtime variants (no browser)
DEFAULT_TARGETS = {
    "quick": "server/ort-cpu,server/ort-cpu-noopt,server/ort-int8,server/ort-q4,server/ort-fp16",
    "full": "server/ort-cpu,server/ort-cpu-noopt,server/ort-cpu-1thread,server/ort-int8,server/ort-fp16,server/ort-q4,"
            "server/openvino,web/ort-wasm,web/ort-wasm-int8,web/ort-wasm-fp16,web/ort-wasm-q4,web/ort-webgpu,"
            "mobile/ort-mobile,mobile/arm64-ort,mobile/tflite-fp32",
}

BUILD = r'''
import json, sys, torch, transformers
spec = json.loads(sys.argv[1]); out = sys.argv[2]
torch.manual_seed(0)
cfg = getattr(transformers, spec["config"])(**spec["settings"])
model = getattr(transformers, spec["model"])(cfg).eval()
layers, heads = cfg.num_hidden_layers, cfg.num_attention_heads
kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads

class Decoder(torch.nn.Module):  # Optimum's decoder with its cache: ids, mask, positions and the past in
    def __init__(self, m):
        super().__init__(); self.m = m
    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = transformers.DynamicCache([(past[i], past[i + 1]) for i in range(0, len(past), 2)], config=cfg)
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   past_key_values=cache, use_cache=True)
        return (o.logits, *[t for layer in o.past_key_values.layers for t in (layer.keys, layer.values)])

kinds = ("key", "value")
ins = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{i}.{k}" for i in range(layers) for k in kinds]
outs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in kinds]
axes = {"input_ids": {0: "batch_size", 1: "sequence_length"}, "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size", 1: "sequence_length"}, "logits": {0: "batch_size", 1: "sequence_length"},
        **{n: {0: "batch_size", 2: "past_sequence_length"} for n in ins[3:]},
        **{n: {0: "batch_size", 2: "total_sequence_length"} for n in outs[1:]}}
past_len, seq = 5, 3  # traced with a past and a prompt of lengths no other dimension has
ex = (torch.randint(0, cfg.vocab_size, (1, seq)), torch.ones(1, past_len + seq, dtype=torch.int64),
      torch.arange(past_len, past_len + seq)[None], *[torch.rand(1, kv_heads, past_len, head_dim) for _ in range(2 * layers)])
with torch.no_grad():
    torch.onnx.export(Decoder(model).eval(), ex, out + ".onnx", input_names=ins, output_names=outs, opset_version=17,
                      dynamo=False, dynamic_axes=axes)
    ids, cache, tokens = torch.tensor([spec["prompt"]]), transformers.DynamicCache(config=cfg), []
    for _ in range(spec["torch_tokens"]):  # greedy, transformers' own cache: what the ONNX reference should equal
        o = model(input_ids=ids, past_key_values=cache, use_cache=True)
        cache, tok = o.past_key_values, int(o.logits[0, -1].argmax())
        tokens.append(tok); ids = torch.tensor([[tok]])
json.dump({"prompt": spec["prompt"], "torch_tokens": tokens, "model_type": cfg.model_type, "layers": layers,
           "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "vocab": cfg.vocab_size}, open(out + ".json", "w"))
'''


def names(given: list[str] | None) -> list[str]:
    unknown = sorted(set(given or ()) - set(CORPUS) - set(NOT_BUILT))
    if unknown:
        raise UsageError(f"unknown generation model(s) {', '.join(unknown)} (the zoo has: {', '.join(CORPUS)}; "
                         f"not yet: {', '.join(NOT_BUILT)})")
    return list(given or CORPUS)


def build(name: str, root: Path, log: Callable[[str], None] = lambda s: None) -> Path:
    """The folder holding ``name.onnx`` and ``name.json`` (its configuration's facts and PyTorch's tokens)."""
    from portability.study.transformers import built

    cfg, settings, model = CORPUS[name]
    spec = {"config": cfg, "settings": settings, "model": model, "prompt": list(PROMPT), "torch_tokens": TORCH_TOKENS}
    return built(name, spec, BUILD, root, log)


def architecture(path: Path) -> dict:
    """What the exported graph holds, read from it: rotary positions (``Sin`` and ``Cos`` of the positions),
    RMSNorm (a mean of squares and a square root, no ``LayerNormalization``),
    grouped-query attention (fewer key/value heads in the past than the configuration's query heads), and the
    cache's interface."""
    import json

    import onnx

    m = onnx.load(str(path), load_external_data=False)
    ops = {n.op_type for n in m.graph.node}
    facts = json.loads(Path(path).with_suffix(".json").read_text())
    past = [i for i in m.graph.input if i.name.startswith("past_key_values.")]
    dims = [d.dim_value or d.dim_param for d in past[0].type.tensor_type.shape.dim] if past else []
    return {"rope": {"Sin", "Cos"} <= ops, "rmsnorm": "LayerNormalization" not in ops and {"Pow", "ReduceMean", "Sqrt"} <= ops,
            "gqa": bool(dims) and dims[1] == facts["kv_heads"] < facts["heads"],
            "inputs": [i.name for i in m.graph.input], "outputs": [o.name for o in m.graph.output], "past_dims": dims,
            "heads": facts["heads"], "kv_heads": facts["kv_heads"], "layers": facts["layers"]}


def run_zoo(models: list[str], targets: str, session, cache_root: Path | None, seed: int, steps: int, progress) -> dict:
    """Every model of ``models`` checked with ``--generate steps`` on ``targets``. Returns the study's JSON:
    ``{"zoo": "generation", "rows": [{"model", "file", "architecture", "torch_tokens", "report", ...}], ...}``."""
    import json

    from portability import api
    from portability.core.dirs import default_root
    from portability.engine.pipeline import check as run_check
    from portability.sources import load_source_isolated
    from portability.study.transformers import VERSION

    root = Path(cache_root) if cache_root else default_root()
    rows, t0 = [], time.perf_counter()
    for name in models:
        row = {"model": name, "file": None, "report": None, "seconds": None}
        if name in NOT_BUILT:
            rows.append(dict(row, why=NOT_BUILT[name]))
            continue
        t1 = time.perf_counter()
        try:
            folder = build(name, root / "zoo-generation", progress.stage)
        except UsageError as e:
            rows.append(dict(row, why=str(e)))
            continue
        path = folder / f"{name}.onnx"
        facts = json.loads((folder / f"{name}.json").read_text())
        row.update(file=str(path), architecture=architecture(path), torch_tokens=facts["torch_tokens"][:steps])
        progress.stage(f"{name}.onnx: checking with --generate {steps}")
        opts = api.options(targets, seed=seed, cache_dir=cache_root, generate=steps,
                           prompt_ids=",".join(map(str, facts["prompt"])))
        try:
            info = load_source_isolated(path, sandbox=opts.sandbox, shapes=opts.shapes)
            row["report"] = run_check(path, opts, progress.check_progress(), model=info, session=session).to_dict()
        except UsageError as e:
            row["why"] = str(e)
        row["seconds"] = round(time.perf_counter() - t1, 1)
        rows.append(row)
    return {"zoo": "generation", "transformers": VERSION, "models": models, "targets": targets, "steps": steps,
            "prompt": list(PROMPT), "rows": rows, "seconds": {"total": time.perf_counter() - t0}}


def cells(t: dict) -> dict:
    """One target's row of a model's table: tokens matched / N, first divergence, teacher-forced max |Δ|,
    first-token ms, tokens/s, status (the error or breach that made it, shortened)."""
    g = (t.get("metrics") or {}).get("generation") or {}
    tf = g.get("teacher_forced") or {}
    n = len(g.get("reference_tokens") or [])
    from portability.metrics.latency import mark

    # measured, but an emulator's or a software GPU adapter's speed, no device's
    skipped = (t.get("metrics") or {}).get("latency_skipped")
    untimed = " " + mark(skipped) if skipped else ""
    return {"tokens": f"{g['matched']}/{n}" + (" tie" if g.get("tie") else "") if g else "–",
            "first_divergence": "–" if g.get("first_divergence") is None else str(g["first_divergence"]),
            "tf_max_abs": "–" if not tf else f"{tf['max_abs']:.2g}",
            "ttft_ms": "–" if g.get("ttft_ms") is None else f"{g['ttft_ms']:.2f}" + untimed,
            "tokens_per_s": "–" if g.get("tokens_per_s") is None else f"{g['tokens_per_s']:.0f}" + untimed,
            "status": t["status"]}


def table(result: dict) -> str:
    """The zoo's Markdown: tokens matched and tokens/s per target and model, then each model's table
    (matched, first divergence, teacher-forced drift, first-token ms, tokens/s, status), then each failure."""
    rows = [r for r in result["rows"] if r["report"]]
    targets = list(dict.fromkeys(t["id"] for r in rows for t in r["report"]["targets"]))
    out = ["| target | " + " | ".join(f"{r['model']}: tokens, tokens/s" for r in rows) + " |", "|---|" + "---|" * len(rows)]
    by = {(r["model"], t["id"]): cells(t) for r in rows for t in r["report"]["targets"]}
    for tid in targets:
        cs = [by.get((r["model"], tid)) for r in rows]
        out.append(f"| `{tid}` | " + " | ".join("–" if c is None else f"{c['tokens']}, {c['tokens_per_s']}"
                                                  + ("" if c["status"] == Status.PASS else f" ({c['status']})") for c in cs) + " |")
    for r in rows:
        arch = r.get("architecture") or {}
        ref = next(t for t in r["report"]["targets"] if t["id"] == r["report"]["reference"])
        ref_tokens = ((ref.get("metrics") or {}).get("generation") or {}).get("tokens") or []
        torch_tokens = r.get("torch_tokens") or []
        same = bool(torch_tokens) and ref_tokens[:len(torch_tokens)] == torch_tokens  # PyTorch's first 64 at most
        out += ["", f"**{r['model']}** ({arch.get('layers')} layers, {arch.get('heads')} query heads, "
                f"{arch.get('kv_heads')} key/value heads; rotary positions: {_yes(arch.get('rope'))}, RMSNorm: "
                f"{_yes(arch.get('rmsnorm'))}, grouped-query attention: {_yes(arch.get('gqa'))}; checked in {r['seconds']} s). "
                f"The reference's tokens {'equal' if same else 'differ from'} PyTorch's: {' '.join(map(str, ref_tokens))}"
                + ("" if same else f" (PyTorch: {' '.join(map(str, torch_tokens))})") + ".", "",
                "| target | tokens matched | first divergence | teacher-forced max abs | first token ms | tokens/s | status |",
                "|---|---|---|---|---|---|---|"]
        for t in r["report"]["targets"]:
            c = cells(t)
            out.append(f"| `{t['id']}` | {c['tokens']} | {c['first_divergence']} | {c['tf_max_abs']} | {c['ttft_ms']} | "
                       f"{c['tokens_per_s']} | {c['status']} |")
    out += ["", *failures(result["rows"])]
    return "\n".join(out)


def failures(rows: list[dict]) -> list[str]:
    """Each model not checked and each target that did not pass, with its error or first breach."""
    out = [f"- **{r['model']}**: not checked: {r.get('why')}" for r in rows if not r["report"]]
    for r in rows:
        for t in (r["report"] or {}).get("targets", []):
            if t["status"] in (Status.PASS, Status.SKIPPED):
                continue
            said = [b if isinstance(b, str) else b.get("message", "") for b in t.get("breaches") or []]
            why = t.get("error") or "; ".join(sorted(said, key=lambda b: "generation" not in b))  # its generation first
            out.append(f"- **{r['model']}** `{t['id']}`: {t['status']}: {why[:300]}")
    return out


def _yes(v) -> str:
    return "–" if v is None else "yes" if v else "no"
