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
    from portability.report.scorecard import conformance_markdown

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("audit_json", type=Path)
    ap.add_argument("--minutes", type=float, required=True, help="the audit's wall time")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance.md")
    args = ap.parse_args()
    doc = json.loads(args.audit_json.read_text())
    models, card = doc["models"], doc["scorecard"]
    conf = card["conformance"]
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
        "bfloat16/float8) are left out (`left_out.json` in the corpus folder).",
        "- **Two references**: each target is compared with the reference runtime (`server/ort-cpu`) as in any "
        "check, and with the case's expected outputs (the spec's), within the case's own tolerance or the "
        "target's drift thresholds. `spec-drift`: agrees with ONNX Runtime, not with the spec.",
        f"- **Time**: {args.minutes:.0f} minutes on this 2-core machine (no GPU: WebGL/WebGPU on SwiftShader, "
        "ARM64 under qemu), one audit, resumable.",
        "- **Software**: " + "; ".join(v for v in versions if v) + ".",
        "",
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
    statuses = Counter(t["status"] for m in models for t in m.get("targets") or [])
    lines += ["## All target results by status", "", "| status | target results |", "|---|--:|"]
    lines += [f"| {s} | {n} |" for s, n in statuses.most_common()]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({len(conf['ops'])} op types, {len(spec)} spec-drift cells, {len(ref_fail)} cases the reference cannot run)")


if __name__ == "__main__":
    main()
