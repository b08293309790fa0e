#!/usr/bin/env python3
"""Write docs/conformance.md from a full conformance audit's JSON.

    portability audit --onnx-conformance --targets all --json conformance.json   # about an hour on 2 cores
    python bench/conformance_doc.py conformance.json --minutes 52 [--out docs/conformance.md]

The page: how it was made (versions, cases, time), per target the op types and cases that pass, the
ops x targets table, the cells where a target agrees with the reference runtime but not with the spec,
and the cases the reference runtime itself cannot run.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from portability.audit.unit import ModelResult
    from portability.report.scorecard import build, conformance_markdown

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("audit_json", type=Path)
    ap.add_argument("--minutes", type=float, required=True, help="the audit's wall time")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance.md")
    args = ap.parse_args()
    doc = json.loads(args.audit_json.read_text())
    models = doc["models"]
    conf = build([ModelResult.from_dict(m) for m in models])["conformance"]  # recomputed: the page follows this version's table
    versions = sorted({t.get("runtime") for m in models for t in m.get("targets") or [] if t.get("runtime")})
    ref_fail = [(m["name"], m["op"], next((t.get("error") or t["status"] for t in m["targets"] if t["id"] == m.get("reference")), m.get("error")))
                for m in models if m["status"] == "error" or any(t["id"] == m.get("reference") and t["status"] != "pass" for t in m.get("targets") or [])]
    spec = [(m["name"], t["id"], t["spec"]["max_abs"]) for m in models for t in m.get("targets") or []
            if t["status"] == "pass" and t.get("spec") and not t["spec"]["agrees"]]
    lines = [
        "# ONNX conformance across server, web and mobile",
        "",
        "Every op type of ONNX's own node test cases, checked on every target: does each web and mobile "
        "runtime compute it correctly, after each converter? Made with",
        "",
        "    portability audit --onnx-conformance --targets all --json conformance.json",
        "    python bench/conformance_doc.py conformance.json --minutes M",
        "",
        f"- **Corpus**: one case per op type (the first that is not a function expansion), "
        f"{conf['cases']} cases over {len(conf['ops'])} op types, regenerated from the installed onnx package's "
        "`collect_testcases()`; cases whose values are not numeric tensors (sequences, optionals, strings, "
        "bfloat16/float8) are left out (`left_out.json` in the corpus folder); cases stamped with a newer IR version "
        "or opset than the reference reads are converted down to what it reads (`versions.json`).",
        "- **Two references**: each target is compared with the reference runtime (`server/ort-cpu`) as in any "
        "check, and with the case's expected outputs (the spec's), within the case's own tolerance or the "
        "target's drift thresholds. `spec-drift`: agrees with ONNX Runtime, not with the spec.",
        f"- **Time**: {args.minutes:.0f} minutes on this 2-core machine (no GPU: WebGL/WebGPU on SwiftShader, "
        "ARM64 under qemu), one audit, resumable.",
        "- **Software**: " + "; ".join(v for v in versions if v) + ".",
        "",
        *_findings(models, conf),
        "A cell is `passed/cases`; a failing cell names the commonest failure. `skipped` cells are targets "
        "that cannot run here (no CUDA GPU) or cases whose reference did not run.",
        "",
        conformance_markdown(conf).rstrip(),
        "",
    ]
    if spec:
        lines += ["## Agrees with ONNX Runtime, not with the spec", "",
                  "| case | target | max abs vs spec |", "|---|---|--:|"]
        lines += [f"| `{n}` | `{t}` | {a:.3g} |" for n, t, a in spec]
        lines.append("")
    if ref_fail:
        lines += ["## Cases the reference runtime cannot run", "",
                  "Every other target of these cases is skipped (nothing to compare with).", "",
                  "| case | op | why |", "|---|---|---|"]
        lines += [f"| `{n}` | `{o}` | {str(w).replace('|', '/')[:160]} |" for n, o, w in ref_fail]
        lines.append("")
    lines += _converted_table(models)
    statuses = Counter(t["status"] for m in models for t in m.get("targets") or [])
    lines += ["## All target results by status", "", "| status | target results |", "|---|--:|"]
    lines += [f"| {s} | {n} |" for s, n in statuses.most_common()]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({len(conf['ops'])} op types, {len(spec)} spec-drift cells, {len(ref_fail)} cases the reference cannot run)")


def _findings(models: list[dict], conf: dict) -> list[str]:
    """What stands out, counted from the results."""
    t = conf["targets"]
    by_status = lambda tid, st: sum(1 for m in models for x in m.get("targets") or [] if x["id"] == tid and x["status"] == st)  # noqa: E731
    ir = sum(1 for m in models for x in m.get("targets") or [] if x["id"] == m.get("reference") and x["status"] != "pass"
             and ("IR version" in (x.get("error") or "") or "opset versions" in (x.get("error") or "")))
    ref = t.get("server/ort-cpu-noopt", {})
    out = ["## What stands out", ""]
    if ref:
        arm = t.get("mobile/arm64-ort", {})
        out.append(f"- **ONNX Runtime's builds agree with each other and with the spec** on {ref['ops_passing']} of the "
                   f"{ref['ops']} op types the reference ran (CPU without graph optimizations, wasm, the ORT format); "
                   f"its ARM64 build under emulation on {arm.get('ops_passing')}.")
    if "server/tf" in t and "mobile/tflite-fp32" in t:
        out.append(f"- **The TensorFlow route loses ops at conversion** (onnx2tf, then TensorFlow's converters): "
                   f"`server/tf` passes {t['server/tf']['ops_passing']}/{t['server/tf']['ops']} op types "
                   f"({by_status('server/tf', 'convert-error')} convert-errors), TFLite fp32 "
                   f"{t['mobile/tflite-fp32']['ops_passing']}, TF.js (cpu) {t.get('web/tfjs-cpu', {}).get('ops_passing')}, "
                   f"LiteRT.js {t.get('web/litert-js', {}).get('ops_passing')}; a failed conversion fails every target "
                   "behind it at once.")
    if "web/ort-webgpu" in t:
        out.append(f"- **WebGPU places many ops on the CPU**: `web/ort-webgpu` is `fallback` on "
                   f"{by_status('web/ort-webgpu', 'fallback')} op types (onnxruntime-web runs them on its CPU kernels, "
                   f"which the report calls a fallback); `web/ort-webgl` fails to load {by_status('web/ort-webgl', 'load-error')}.")
    out += _versions(models)
    if ir and not any(m.get("versions") for m in models):  # an audit made before cases were converted down
        out.append(f"- **{ir} cases the reference cannot even load** are stamped with the installed onnx's newest IR "
                   "version or opset, newer than the installed ONNX Runtime reads: every other target of them is "
                   "skipped. (A case of an older opset of the same op would run; the corpus takes the one onnx generates.)")
    out.append("")
    return out


def _versions(models: list[dict]) -> list[str]:
    """The cases converted down to the versions the reference reads, and those that still cannot be."""
    down = [m for m in models if (m.get("versions") or {}).get("to")]
    still = [m for m in models if (m.get("versions") or {}).get("refused")]
    if not down and not still:
        return []
    instead = sum(1 for m in down if m["versions"].get("instead_of"))
    return [f"- **{len(down)} cases converted down** to the IR version and opset the installed ONNX Runtime reads "
            "(onnx stamps each case with its own newest, which the reference refuses): the default-domain opset "
            "with onnx's version converter, the IR version lowered where nothing in the case needs a newer one"
            + (f"; for {instead} op types the first case cannot be and another case of the op stands in" if instead else "")
            + f". **{len(still)} still cannot be** (" + ", ".join(f"`{m['op']}`" for m in still)
            + "; why in the table of cases converted down) and the reference refuses them: every other target of "
            "them is skipped."]


def _converted_table(models: list[dict]) -> list[str]:
    """Per case converted down: from and to which versions (and the case it stands in for)."""
    rows = [m for m in models if m.get("versions")]
    if not rows:
        return []
    v = lambda d: f"IR {d['ir_version']}, opset {d['opset']}"  # noqa: E731
    lines = ["## Cases converted down to the versions the reference reads", "",
             "| case | op | from | to | note |", "|---|---|---|---|---|"]
    for m in rows:
        r = m["versions"]
        note = (f"in place of `{r['instead_of']}`: {r['why']}" if r.get("instead_of") else r.get("refused") or "")
        lines.append(f"| `{m['name']}` | `{m['op']}` | {v(r['from'])} | {v(r['to']) if r.get('to') else 'not converted'} "
                     f"| {note.replace('|', '/')[:200]} |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
