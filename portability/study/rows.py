"""One row of the study: what it records of a trained model, and each target of its check reports as the
tables read them."""
from __future__ import annotations

from portability.core.status import Status


def targets_for(source_format: str, spec: str) -> list[str]:
    from portability.engine import plan

    return [t.id for t in plan.for_check(source_format, spec)[0]]


def split_emulated(source_format: str, spec: str) -> tuple[str, str]:
    """(every target but the emulated ones, the emulated ones) as target specs (ids), reference first."""
    from portability.core.target import load_class
    from portability.engine import plan

    targets = plan.for_check(source_format, spec)[0]
    emu = [t.id for t in targets[1:] if getattr(load_class(t.runtime), "emulated", False)]
    rest = [t.id for t in targets if t.id not in emu]
    return ",".join(rest), ",".join(emu)


def baseline_on(trained, n: int) -> float | None:
    """The in-framework accuracy on the first ``n`` eval samples (from the trainer's logits)."""
    import numpy as np

    logits, data = trained.dir / "eval_logits.npy", trained.eval_data
    if not logits.is_file():
        return None
    with np.load(data, allow_pickle=False) as z:
        y = z["y"][:n]
    return float((np.load(logits, allow_pickle=False)[:n].argmax(-1) == y).mean())


def failed_row_targets(source_format: str, spec: str, status: Status, why: str) -> list[dict]:
    """The rows' targets for a model that never reached check: each with the status that stopped it."""
    return [{"id": tid, "platform": tid.split("/")[0], "status": status, "error": why} for tid in targets_for(source_format, spec)]


def summarize_check(report: dict, accuracy_on_first) -> list[dict]:
    """Each target of a check report as the tables read it, with the samples it was compared on: all of the
    report's, or the first ones a slow target had time for (``details.samples``: batches cut to its budget).
    Its accuracy change is against ``accuracy_on_first(n)``, the framework's own on those same samples."""
    inputs = report.get("inputs") or {}
    n, batches = inputs.get("samples"), inputs.get("batches")
    per_batch = n // batches if n and batches else 1
    out = []
    for t in report["targets"]:
        cut = ((t.get("details") or {}).get("samples") or {}).get("batches")
        k = min(n, cut * per_batch) if cut and n else n
        out.append(dict(summarize_target(t, accuracy_on_first(k)), samples=k))
    return out


def summarize_target(t: dict, baseline: float | None) -> dict:
    """One target of a check report, as the study's tables read it."""
    from portability.metrics import drift

    m = t.get("metrics") or {}
    lat = m.get("latency_ms") if isinstance(m.get("latency_ms"), dict) else {}
    art = t.get("artifact") or {}
    acc = m.get("accuracy")
    convs = (t.get("details") or {}).get("conversions") or []
    return {
        "id": t["id"], "platform": t.get("platform"), "status": t["status"], "gating": t.get("gating"),
        "error": t.get("error"), "op": t.get("op"), "device": t.get("device"),
        "accuracy": acc, "accuracy_vs_framework": (acc - baseline) if isinstance(acc, (int, float)) and baseline is not None else None,
        "top1_agreement": drift.agreement(m), "max_abs": drift.worst(m, "numbers")[0],
        "format": art.get("format"), "size_bytes": art.get("size_bytes"), "gzip_bytes": art.get("gzip_bytes"),
        "sha256": art.get("sha256"),
        "p50_ms": lat.get("p50"), "p50_vs_reference": m.get("p50_vs_reference"), "emulated": bool(lat.get("emulated")),
        "chain": [c.get("converter") for c in convs if c.get("converter")],
        "steps": list(((t.get("details") or {}).get("plan") or {}).get("steps") or []),
        "robustness": m.get("robustness"),
    }


def against_source(trained, source) -> dict:
    """A same-weights model against the PyTorch model whose weights it holds, before any export: their
    logits on the same eval samples (each computed by its own framework)."""
    import numpy as np

    a, b = (np.load(t.dir / "eval_logits.npy", allow_pickle=False) for t in (trained, source))
    same = a.shape == b.shape and a.size > 0
    return {"from": str(source.dir), "accuracy": trained.meta.get("accuracy_eval"),
            "accuracy_source": source.meta.get("accuracy_eval"),
            "max_abs_vs_source": float(np.abs(a - b).max()) if same else None,
            "top1_agreement_vs_source": float((a.argmax(-1) == b.argmax(-1)).mean()) if same else None}


def record_training(row: dict, trained) -> None:
    meta = trained.meta
    row.update(
        framework_version=meta.get("version"), params=meta.get("params"), input=meta.get("input"),
        training={"status": "ok", "cached": trained.cached, "seconds": meta.get("train_seconds"),
                  "epochs": len(meta.get("history") or []), "train_samples": meta.get("train_samples"),
                  "history": meta.get("history"), "dir": str(trained.dir),
                  **({"weights_from": meta["weights_from"]} if meta.get("weights_from") else {})},
        baseline={"accuracy": meta.get("accuracy_eval"), "accuracy_test": meta.get("accuracy_test"),
                  "eval_samples": meta.get("eval_samples"), "test_samples": meta.get("test_samples")},
        export={k: v for k, v in (meta.get("export") or {}).items() if k != "traceback"})
