"""The study's views, computed from its JSON alone (``StudyResult.to_dict()``): each view is a
:class:`View` (title, header, rows, notes) that renders to the terminal (rich) and to Markdown.

1. accuracy per framework, in its own framework (the baseline of each row);
2. accuracy after deployment per target, and its change against that baseline;
3. numeric drift (worst absolute difference against the reference);
4. model size per format and variant;
5. latency per target (p50), with its ratio to the reference (web/native for web targets);
6. conversion and run failures per converter and framework, with every distinct reason;
7. robustness per target (worst flip rate), when the study measured it.

The views over several seeds and the same-weights experiment are ``study.seed_tables``'; ``study.render``
puts them all in order and renders them.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from portability.core.status import COMPARED, Status

OK = COMPARED
#: the native runtime every latency is compared with (the same for every framework's row)
NATIVE = "server/ort-cpu"


@dataclass
class View:
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def _pct(v) -> str:
    return f"{100 * v:.1f}" if isinstance(v, (int, float)) else "–"


def _delta(v) -> str:
    return f"{100 * v:+.1f}" if isinstance(v, (int, float)) else ""


#: a failing status as a table cell says it
_SHORT = {Status.CONVERT_ERROR: "convert✗", Status.LOAD_ERROR: "load✗", Status.RUN_ERROR: "run✗", Status.CRASHED: "crash",
          Status.SKIPPED: "skip"}


def _short(status: str) -> str:
    return _SHORT.get(status, status)


def _groups(study: dict) -> dict[tuple[str, str], dict[str, dict]]:
    """{(arch, dataset): {framework: row}} in the study's order (with several seeds: the first seed's row)."""
    out: dict = {}
    for r in study["rows"]:
        out.setdefault((r["arch"], r["dataset"]), {}).setdefault(r["framework"], r)
    return out


def _frameworks(study: dict) -> list[str]:
    return list(dict.fromkeys(r["framework"] for r in study["rows"]))


def _target_ids(rows: dict[str, dict]) -> list[str]:
    ids: list[str] = []
    for r in rows.values():
        for t in r["targets"]:
            if t["id"] not in ids:
                ids.append(t["id"])
    return ids


def _cell(row: dict | None, tid: str) -> dict | None:
    if row is None:
        return None
    return next((t for t in row["targets"] if t["id"] == tid), None)


def framework_accuracy(study: dict) -> View:
    fws = _frameworks(study)
    rows = []
    for (arch, d), by in _groups(study).items():
        line = [arch, d]
        for fw in fws:
            r = by.get(fw)
            b = (r or {}).get("baseline") or {}
            tr = (r or {}).get("training") or {}
            if tr.get("status") != "ok":
                line.append(tr.get("status", "–"))
            else:
                line.append(f"{_pct(b.get('accuracy'))} ({_pct(b.get('accuracy_test'))})")
        rows.append(line)
    return View("Accuracy in its own framework, % (eval samples; whole test split in parentheses)",
                ["model", "dataset", *fws], rows)


def _per_target(study: dict, title: str, fmt) -> list[View]:
    fws = _frameworks(study)
    views = []
    for (arch, d), by in _groups(study).items():
        rows = []
        for tid in _target_ids(by):
            line = [tid]
            for fw in fws:
                t = _cell(by.get(fw), tid)
                line.append("–" if t is None else (fmt(t, by[fw]) if t["status"] in OK else _short(t["status"])))
            rows.append(line)
        views.append(View(f"{title}: {arch} on {d}", ["target", *fws], rows))
    return views


def deployed_accuracy(study: dict) -> list[View]:
    def fewer(t, row):
        return t.get("samples") and t["samples"] < ((row.get("baseline") or {}).get("eval_samples") or 0)

    def fmt(t, row):
        flag = "" if t["status"] == Status.PASS else " ⚠"
        if t.get("accuracy") is None:
            return f"top1 {_pct(t.get('top1_agreement'))}{flag}"
        n = f" n={t['samples']}" if fewer(t, row) else ""
        return f"{_pct(t['accuracy'])} ({_delta(t.get('accuracy_vs_framework'))}){n}{flag}"
    views = _per_target(study, "Accuracy after deployment, % (change against the framework's own)", fmt)
    for v in views:
        if any(" n=" in c for row in v.rows for c in row):
            v.notes.append("n=: evaluated on the first n samples only, and compared with the framework's own accuracy "
                           "on those samples — emulated targets (ARM64 under qemu) on a fixed number, a target whose "
                           "one inference is slow (a software GPU) on those its correctness budget had time for")
        if any("⚠" in c for row in v.rows for c in row):
            v.notes.append("⚠: the target ran but its outputs or accuracy are outside the check's thresholds (drift)")
    return views


def drift(study: dict) -> list[View]:
    def fmt(t, row):
        v = t.get("max_abs")
        return "–" if v is None else (f"{v:.1e}" if isinstance(v, (int, float)) else str(v))
    return _per_target(study, "Numeric drift: worst |target − reference| on any output", fmt)


def latency(study: dict) -> list[View]:
    def fmt(t, row):
        p50 = t.get("p50_ms")
        if not isinstance(p50, (int, float)):
            return "–"
        native = _cell(row, NATIVE) or {}
        base = native.get("p50_ms") if native.get("status") in OK else None
        r = f" ×{p50 / base:.1f}" if isinstance(base, (int, float)) and base > 0 and t["id"] != NATIVE else ""
        emu = " emu" if t.get("emulated") else (" sw" if t.get("device") == "software" else "")
        return f"{p50:.3g} ms{r}{emu}"
    views = _per_target(study, f"Latency, p50 per inference (× {NATIVE}'s p50: the native runtime; web/native for web targets)", fmt)
    for v in views:
        if any(c.endswith((" emu", " sw")) for row in v.rows for c in row):
            v.notes.append("emu: ARM64 under emulation; sw: a software GPU adapter — neither is a device's speed")
    return views


def _variant(tid: str) -> str:
    name = tid.split("/", 1)[1]
    for v in ("fp32", "fp16", "dynint8", "int8", "qdq", "xnnpack", "portable"):
        if name.endswith("-" + v):
            return v
    return ""


def sizes(study: dict) -> list[View]:
    """One line per distinct artifact (the same file run by several targets is shown once, under the
    name of its variant)."""
    fws = _frameworks(study)
    views = []
    for (arch, d), by in _groups(study).items():
        table: dict[str, dict[str, str]] = defaultdict(dict)
        for fw, r in by.items():
            seen: set = set()
            for t in sorted(r["targets"], key=lambda t: _variant(t["id"]) == ""):
                if not t.get("format") or not t.get("size_bytes") or (t.get("sha256") and t["sha256"] in seen):
                    continue
                seen.add(t.get("sha256"))
                label = " ".join(x for x in (t["format"], _variant(t["id"])) if x)
                gz = f" (gzip {t['gzip_bytes'] / 1024:.0f})" if t.get("gzip_bytes") else ""
                table[label].setdefault(fw, f"{t['size_bytes'] / 1024:.0f}{gz}")
        order = sorted(table, key=lambda k: (k.split()[0] not in ("torch", "keras"), k))
        rows = [[label, *[table[label].get(fw, "–") for fw in fws]] for label in order]
        views.append(View(f"Model size per format and variant, KB: {arch} on {d}", ["format", *fws], rows,
                          ["torch / keras: the source as the framework saved it (.pt2, .keras)"]))
    return views


def _where(t: dict) -> str:
    """Which converter or runtime a failure belongs to."""
    if t["status"] == Status.CONVERT_ERROR:
        chain = t.get("chain") or []
        err = t.get("error") or ""
        if "export failed" in err:
            return f"{err.split(' export failed')[0]} exporter"
        # the chain holds the conversions done: the one that failed is the route's first step not among them
        failed = next((s for s in t.get("steps") or [] if s not in chain), None)
        return failed or (chain[-1] if chain else "converter")
    return t["id"]


def _drifted(t: dict) -> str:
    """What a drift moved: the worst output difference, top-1 agreement and accuracy against the framework's."""
    parts = [f"max |Δ| {_sci(t.get('max_abs'))}"]
    if isinstance(t.get("top1_agreement"), (int, float)):
        parts.append(f"top-1 agreement {_pct(t['top1_agreement'])} %")
    if isinstance(t.get("accuracy_vs_framework"), (int, float)):
        parts.append(f"accuracy {_delta(t['accuracy_vs_framework'])} points")
    return ", ".join(parts)


def _localized(loc: dict) -> str:
    if loc.get("op_type"):
        node = f"node {loc['node']}" if loc.get("node") else "an unnamed node"
        return f"; first diverging op {loc['op_type']} ({node}" + (", its inputs clean" if loc.get("op_at_fault") else "") + ")"
    why = str(loc.get("why") or "")
    return f"; {why}" if why.startswith("localize") else (f"; localize: {why}" if why else "")


def failures(study: dict) -> View:
    fws = _frameworks(study)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    reasons: dict[tuple[str, str], set] = defaultdict(set)
    for r in study["rows"]:
        for t in r["targets"]:
            if t["status"] in (Status.PASS, Status.SKIPPED):
                continue
            w = _where(t)
            counts[w][r["framework"]] += 1
            why = str(t.get("error") or (_drifted(t) if t["status"] == Status.DRIFT else t["status"])).splitlines()[0][:160]
            if t.get("op") and str(t["op"]) not in why:
                why = f"{why} (op {t['op']})"
            why = f"{why}{_localized(t.get('localized') or {})}"
            reasons[(w, r["framework"])].add(f"{r['arch']}/{r['dataset']}: {t['status']}: {why}")
    rows = [[w, *[str(counts[w].get(fw, 0) or "") for fw in fws]] for w in sorted(counts)]
    notes = [f"{w} ({fw}) — {why}" for (w, fw), whys in sorted(reasons.items()) for why in sorted(whys)]
    skipped = sum(1 for r in study["rows"] for t in r["targets"] if t["status"] == Status.SKIPPED)
    if skipped:
        notes.append(f"{skipped} target runs skipped (a runtime or framework not available here: see the JSON)")
    return View("Failures per converter / runtime and framework (targets that did not pass; drift counts)",
                ["converter or target", *fws], rows, notes)


def robustness(study: dict) -> list[View]:
    if not any(isinstance(t.get("robustness"), dict) for r in study["rows"] for t in r["targets"]):
        return []

    def fmt(t, row):
        rb = t.get("robustness")
        if not isinstance(rb, dict) or not rb.get("available"):
            return "–"
        parts = [f"flip {_pct(rb.get('worst_flip_rate'))}"] if isinstance(rb.get("worst_flip_rate"), (int, float)) else []
        for attack, rows in sorted(((rb.get("adversarial") or {}).get("attacks") or {}).items()):
            if rows:
                top = max(rows, key=lambda a: a["epsilon"])
                parts.append(f"{attack} {_pct(top['success_rate'])}")
        return " · ".join(parts) or "–"
    views = _per_target(study, "Robustness: worst flip rate against the reference under random perturbations, "
                               "and attack success at the largest ε, %", fmt)
    for v in views:
        v.notes.append("flip: top-1 differs from the reference's on the same perturbed input; fgsm/pgd: crafted on "
                       "the source model, success = the prediction differs from the true label")
    return views


def robustness_moves(study: dict) -> list[View]:
    """Robustness per framework × platform: how it moved on deployment, over every model, seed and target."""
    from portability.study.stats import robustness_moves as section

    cells = (study.get("robustness_moves") or section(study))["cells"]
    if not cells:
        return []

    def spread(x: dict) -> str:
        if not x.get("n"):
            return "–"
        return f"{100 * x['mean']:+.1f} [{100 * x['min']:+.1f}, {100 * x['max']:+.1f}]"

    rows = [[c["framework"], c["platform"], str(c["measured"]),
             "–" if not c["flip_rate"]["n"] else f"{_pct(c['flip_rate']['mean'])} (max {_pct(c['flip_rate']['max'])})",
             spread(c["fgsm_success_delta"]), spread(c["pgd_success_delta"])] for c in cells]
    return [View("Robustness after deployment, per framework and platform (every model, seed and target), %",
                 ["framework", "platform", "targets", "worst flip rate: mean (max)", "FGSM success − reference's",
                  "PGD success − reference's"], rows,
                 ["flip: top-1 differs from the reference's on the same randomly perturbed input; FGSM/PGD: crafted on the "
                  "source model, success at the largest ε minus the reference's (mean [min, max]); positive: easier to fool"])]


def _sci(v) -> str:
    return f"{v:.1e}" if isinstance(v, (int, float)) else "–"


def findings(study: dict) -> View:
    """The seed paper's findings, each with the study's verdict and the numbers it read."""
    from portability.study.findings import findings as compute

    rows = [[f["finding"], f["verdict"], "; ".join(f["numbers"][:6]) + (" …" if len(f["numbers"]) > 6 else "")]
            for f in (study.get("findings") or compute(study))]
    return View("The seed paper's findings, as this study finds them", ["finding (Guo et al., ASE 2019)", "verdict", "numbers"],
                rows, [f"{f['finding']}: {f['rule']}" for f in (study.get("findings") or compute(study))])
