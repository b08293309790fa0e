#!/usr/bin/env python3
"""The quantization rescue's cost and outcome: ``portability quantize-report MODEL --target T --search`` per
model and quantized target — the checks it runs, its seconds, the layers it ranks and the float fallback it finds.

    python bench/bench_rescue.py [--out DIR] [--models lenet,outlier_lenet,mobilenet,picodet]
                                 [--targets server/ort-qdq,server/ort-int8,mobile/tflite-int8]
                                 [--timeout 360] [--json OUT.json] [--extra "--cosine 0.999"]

Models (built seeded into ``--out`` or a temporary folder; ``tests/quant_models.py``, ``tests/quant_zoo.py``):

- ``lenet``: the fixture ``fixtures/lenet.onnx`` with ``fixtures/digits.npz`` (nothing to rescue expected);
- ``outlier_lenet``: the same LeNet with one activation outlier channel (float unchanged, int8 collapses);
- ``mobilenet``: a MobileNetV3-style classifier (inverted residuals, depthwise convolutions, hard-swish,
  squeeze-and-excitation), trained briefly on the first 400 digits, with ``digits.npz`` (its accuracy is
  measured on the dataset's evaluated samples, most of which it was trained on: it judges the quantization,
  not the model);
- ``picodet``: a PicoDet-style detector (ESNet/ShuffleNet backbone, PAN-ish neck, GFL-style head: ``scores``
  and ``boxes``) with seeded random weights, 1x3x96x96: no dataset, no accuracy — ``--inputs`` of 8 seeded
  page-like images and ``--calibration`` of 32 others (so that the static variants are not calibrated on
  synthesized noise).

Each model x target is one ``python -m portability quantize-report ... --search --json`` process, stopped
after ``--timeout`` seconds (its progress lines then say how many layers it reached). Per run the table gives:
the status as it is, the output SNR, the candidate layers, the top-ranked layer (and its outlier channels),
the float nodes found, accuracy / size / p50 before and after the fallback, the report's checks and seconds,
and the process's wall time. The seconds depend on the machine and its load: say what else ran. ``--extra``
passes more options to every run (tighter bounds, to make a model that passes search anyway).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("lenet", "outlier_lenet", "mobilenet", "picodet")
TARGETS = ("server/ort-qdq", "server/ort-int8", "mobile/tflite-int8")


def build(name: str, out: Path) -> tuple[Path, list[str], dict]:
    """The model ``name`` in ``out``, the data arguments to check it with, and what building it said."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "tests"))
    digits = ["--dataset", str(ROOT / "fixtures" / "digits.npz")]
    if name == "lenet":
        return ROOT / "fixtures" / "lenet.onnx", digits, {}
    if name == "outlier_lenet":
        from quant_models import outlier_lenet

        return outlier_lenet(out / "outlier_lenet.onnx"), digits, {}
    if name == "mobilenet":
        from quant_zoo import mobilenet_like

        info = mobilenet_like(out / "mobilenet_like.onnx")
        return info.pop("path"), digits, info
    if name == "picodet":
        from quant_zoo import document_inputs, picodet_like

        info = picodet_like(out / "picodet_like.onnx")
        inputs, calib = out / "picodet_inputs.npz", out / "picodet_calibration.npz"
        np.savez(inputs, image=document_inputs(8, seed=10)[:, None])  # a stack of 8 batches of 1
        np.savez(calib, image=document_inputs(32, seed=20))
        return info.pop("path"), ["--inputs", str(inputs), "--calibration", str(calib)], info
    raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def run(model: Path, target: str, data: list[str], out: Path, timeout: float, extra: list[str] = ()) -> dict:
    """One quantize-report --search process: its JSON (or why none), exit code, wall time."""
    stem = f"{model.stem}__{target.replace('/', '_')}"
    doc_path, log_path = out / f"{stem}.json", out / f"{stem}.log"
    cmd = [sys.executable, "-m", "portability", "quantize-report", str(model), "--target", target, *data,
           *extra, "--search", "--json", str(doc_path)]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)  # the process group this call started, nothing else
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
            timed_out = True
    wall = time.perf_counter() - t0
    text = log_path.read_text(errors="replace")
    row: dict = {"rc": rc, "wall_s": round(wall, 1), "timed_out": timed_out, "log": str(log_path)}
    if doc_path.is_file() and not timed_out:
        row["doc"] = json.loads(doc_path.read_text())
    else:
        steps = [x.strip().rstrip("…").strip() for x in text.splitlines() if x.strip().endswith("…")]
        row["progress"] = steps[-1] if steps else None  # the report's last progress line: where it was stopped
        row["sensitivity_checks_done"] = sum("alone quantized" in x for x in steps)
        row["search_steps_done"] = sum(bool(re.match(r"(\d+ layers? in float|without )", x)) for x in steps)
        lines = [x.strip() for x in text.splitlines() if x.strip()]
        errors = [x for x in lines if re.search(r"error|Error|refus|cannot|failed", x)]
        row["error"] = (errors or lines or ["(no output)"])[-1][:300]
    return row


def _f(v, fmt: str = "{:.4g}") -> str:
    return "–" if v is None else fmt.format(v)


def _alone(layer: dict) -> str:
    """A layer's sensitivity: dB, 'exact' (alone quantized, the outputs unchanged) or its check's status."""
    if layer.get("sensitivity_db") is not None:
        return f"{layer['sensitivity_db']:.1f} dB"
    return "exact" if layer.get("sensitivity_status") == "pass" else str(layer.get("sensitivity_status"))


def _kb(v) -> str:
    return "–" if v is None else f"{v / 1024:.1f}"


def cells(model: str, target: str, row: dict) -> list[str]:
    doc = row.get("doc")
    if doc is None:
        why = (f"stopped after {row['wall_s']} s ({row['sensitivity_checks_done']} sensitivity checks, "
               f"{row['search_steps_done']} search steps; last: {row.get('progress') or 'nothing'})" if row["timed_out"]
               else f"exit {row['rc']}: {row.get('error')}")
        return [model, target, why] + [""] * 11
    layers = doc.get("layers") or []
    top = layers[0] if layers else None
    top_s = "–" if top is None else (f"{top['node']} ({top['op_type']}, alone {_alone(top)}"
                                      + (f", outlier ch {top['outlier_channels']}" if top.get("outlier_channels") else "") + ")")
    failed = [x for x in layers if x.get("sensitivity_status") not in (None, "pass", "drift")]
    if failed:  # the 'alone quantized' checks that did not run: no sensitivity for them
        top_s += f"; {len(failed)}/{len(layers)} alone-checks {', '.join(sorted({x['sensitivity_status'] for x in failed}))}"
    r = doc.get("rescue")
    if r is None:
        found = "not searched (passes)" if doc["status"] == "pass" else "not searched"
    elif r.get("float_nodes") is None:
        found = f"none: {r.get('why', '')}"
    else:
        names = r["float_nodes"]
        found = f"{len(names)}/{doc.get('candidates')}: {', '.join(names[:4])}" + (f", … (+{len(names) - 4})" if len(names) > 4 else "")
    b, a = (r or {}).get("before") or {}, (r or {}).get("after") or {}
    arrow = lambda k, f: f"{f(b.get(k))} → {f(a.get(k))}" if r and r.get("float_nodes") else "–"  # noqa: E731
    return [model, target, doc["status"], _f(doc.get("snr_db"), "{:.1f}"), str(doc.get("candidates")), top_s, found,
            arrow("accuracy", lambda v: _f(v, "{:.3f}")), arrow("size_bytes", _kb), arrow("p50_ms", lambda v: _f(v, "{:.3f}")),
            str(doc.get("checks")), _f(doc.get("seconds"), "{:.1f}"), f"{row['wall_s']:.1f}", str(row["rc"])]


HEADER = ["model", "target", "status as is", "output SNR dB", "layers", "top-ranked layer", "float_nodes found",
          "accuracy before → after", "size KB before → after", "p50 ms before → after", "checks", "seconds", "wall s", "exit"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="Folder for the models, reports and logs (default: a temporary one).")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--timeout", type=float, default=360.0, help="Seconds before a model x target is stopped.")
    ap.add_argument("--json", type=Path, help="Also write the rows (with each report) here.")
    ap.add_argument("--extra", default="", help="More options for every run, e.g. \"--cosine 0.999\".")
    args = ap.parse_args()
    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-rescue-")
        args.out = Path(tmp.name)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    rows, table = [], []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        model, data, info = build(name, args.out)
        print(f"{name}: {model.name}, {model.stat().st_size / 1024:.0f} KB, built in {time.perf_counter() - t0:.1f} s"
              + (f" {info}" if info else ""), flush=True)
        for target in args.targets.split(","):
            row = run(model, target, data, args.out, args.timeout, shlex.split(args.extra))
            rows.append({"model": name, "target": target, "build": info, **row})
            table.append(cells(name, target, row))
            print("  " + " | ".join(table[-1]), flush=True)
    print()
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for c in table:
        print("| " + " | ".join(x.replace("|", "/") for x in c) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
