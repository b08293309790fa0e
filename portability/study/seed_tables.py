"""The study's views over its seeds (``study.stats``' sections, computed from its JSON alone): accuracy in each
framework as mean ± standard deviation over the seeds, the framework differences the seeds decide, the
deployments that moved accuracy in some seed, and the same-weights experiment (every framework holding
PyTorch's trained weights)."""
from __future__ import annotations

from portability.study.tables import View, _delta, _frameworks, _pct, _sci, deployed_accuracy


def _pm(x: dict) -> str:
    if not x.get("n"):
        return "–"
    return f"{_pct(x['mean'])} ± {_pct(x['std'])} (n={x['n']})" if x["n"] > 1 else f"{_pct(x['mean'])} (n=1)"


def seeds(study: dict) -> list[View]:
    """Mean ± standard deviation over the seeds, and which framework differences exceed the seed spread."""
    from portability.study.stats import across_seeds

    a = study.get("across_seeds") or across_seeds(study)
    fws = _frameworks(study)
    by = {(c["arch"], c["dataset"], c["framework"]): c for c in a["cells"]}
    keys = list(dict.fromkeys((c["arch"], c["dataset"]) for c in a["cells"]))
    rows = [[arch, d, *[_pm(by[(arch, d, fw)]["accuracy"]) if (arch, d, fw) in by else "–" for fw in fws]] for arch, d in keys]
    out = [View("Across seeds: accuracy in its own framework, % (mean ± standard deviation over the seeds)",
                ["model", "dataset", *fws], rows)]
    diffs = [[x["arch"], x["dataset"], " − ".join(x["frameworks"]), f"{100 * x['difference']:+.1f}",
              f"[{100 * x['ci95'][0]:+.1f}, {100 * x['ci95'][1]:+.1f}]" if x.get("ci95") else "–",
              "–" if x["p"] is None else f"{x['p']:.3f}", x["verdict"]] for x in a["framework_differences"]]
    out.append(View("Across seeds: framework differences", ["model", "dataset", "frameworks", "Δ points", "95 % CI", "p",
                    "verdict"], diffs, [f"test: {a['test']}; 95 % CI: the difference's confidence interval (Welch), "
                                        "what the seeds rule out; undecided: fewer than two seeds on a side"]))
    return out + _moved_across_seeds(a["cells"], fws)


def _moved_across_seeds(cells: list[dict], fws: list[str], points: float = 0.005) -> list[View]:
    """Deployments whose accuracy moved by ``points`` or more in some seed: the change's mean ± std and worst."""
    by = {(c["arch"], c["dataset"], c["framework"]): c for c in cells}
    keys = list(dict.fromkeys((c["arch"], c["dataset"], tid) for c in cells for tid, x in c["targets"].items()
                              if any(abs(v) >= points for v in x["accuracy_vs_framework"]["values"])))

    def cell(arch, d, tid, fw):
        x = (by.get((arch, d, fw)) or {}).get("targets", {}).get(tid)
        if not x or not x["accuracy_vs_framework"]["n"]:
            return "–"
        ch = x["accuracy_vs_framework"]
        return f"{_pm_delta(ch)} (worst {_delta(min(ch['values']))}, n={ch['n']})"
    rows = [[arch, d, tid, *[cell(arch, d, tid, fw) for fw in fws]] for arch, d, tid in keys]
    return [View("Across seeds: deployments that moved accuracy, points (change against the framework's own: "
                 "mean ± std over the seeds)", ["model", "dataset", "target", *fws], rows,
                 [f"a target is listed when its accuracy moved by {100 * points:.1f} points or more in some seed; "
                  "n: the seeds where it ran"])] if rows else []


def _pm_delta(x: dict) -> str:
    if not x.get("n"):
        return "–"
    return f"{100 * x['mean']:+.1f}" + (f" ± {100 * x['std']:.1f}" if x["n"] > 1 else "")


def same_weights(study: dict) -> list[View]:
    """The same-weights experiment: each framework holding PyTorch's trained weights, against PyTorch, before
    any export (the frameworks' computation alone) and after deployment (each framework's export path)."""
    from portability.study.stats import SAME_WEIGHTS, own_rows
    from portability.study.stats import same_weights as section

    sw = study.get("same_weights") or section(study)
    if not sw["cells"]:
        return []
    rows = [[c["arch"], c["dataset"], c["framework"], _pm(c["accuracy_torch"]), _pm(c["accuracy"]),
             _pm_delta(c["difference"]),
             _sci(c["max_abs_vs_torch"]), _pm(c["top1_agreement_vs_torch"])] for c in sw["cells"]]
    first = View("Same weights: each framework with PyTorch's trained weights, before any export, % (mean ± std over the seeds)",
                 ["model", "dataset", "framework", "in PyTorch", "in the framework", "Δ", "worst |Δ logit|", "top-1 agreement"], rows,
                 [SAME_WEIGHTS + "; Δ: the framework's accuracy minus PyTorch's — any difference is the frameworks' "
                  "computation, not training"])
    derived = {**study, "rows": [r for r in own_rows(study) if r["framework"] == "torch"] +
               [dict(r, framework=f"{r['framework']} (torch weights)") for r in study["rows"] if r.get("weights") == "torch"]}
    deployed = deployed_accuracy(derived)
    for v in deployed:
        v.title = "Same weights: " + v.title[0].lower() + v.title[1:]
        v.notes.append("every column holds the same trained weights (PyTorch's): a difference here comes from the "
                       "framework's export and the converters after it")
    return [first, *deployed]
