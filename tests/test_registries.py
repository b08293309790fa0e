"""The registries check themselves: every target resolves to a real runtime and real converters, its
options are ones the runtime reads, and formats line up along every chain (what the converter graph
plans on). The foundations import nothing above them."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from portability.core.target import load_class
from portability.targets import registry

PKG = Path(__file__).resolve().parent.parent / "portability"
TARGETS = registry()


SOURCE_FORMATS = ("onnx", "keras", "saved_model", "tflite", "tfjs", "torch", "mxnet")


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_target_resolves_and_its_formats_line_up(tid):
    """Along the chain planned from every source format that has a route, each step reads what the
    previous one wrote and the runtime reads the last; every target has a route from some source."""
    from portability.engine.plan import NoRoute, plan

    t = TARGETS[tid]
    runtime = load_class(t.runtime)
    runtime.facts(t.options)  # the facts check the options: a misspelled one raises
    routes = 0
    for source in SOURCE_FORMATS:
        try:
            chain = plan(source, t).steps
        except NoRoute:
            continue
        routes += 1
        fmt = source
        for path, _options in chain:
            conv = load_class(path)
            assert conv.input_format == fmt, f"{tid} from {source}: {conv.__name__} reads {conv.input_format}, the chain has {fmt}"
            fmt = conv.output_format
        reads = (runtime.input_format, *runtime.input_formats)
        assert fmt in reads, f"{tid} from {source}: {runtime.__name__} runs {reads}, the chain gives {fmt}"
    assert routes, f"{tid}: no source format reaches it"


def test_every_registered_converter_resolves():
    from portability.converters.registry import CONVERTERS

    for path in CONVERTERS:
        conv = load_class(path)
        assert conv.input_format and conv.output_format, path
        assert "From" in conv.__name__, f"{conv.__name__}: converters are named <Output>From<Input>"


def test_every_source_kind_resolves():
    import importlib

    from portability.sources import SOURCES, reference

    assert set(SOURCES) == set(SOURCE_FORMATS) and list(SOURCES)[-1] == "onnx"  # ONNX takes what no other claims
    for kind, module in SOURCES.items():
        m = importlib.import_module(module)
        assert m.FORMAT == kind and reference(kind) == m.REFERENCE and m.REFERENCE in TARGETS
        assert kind == "onnx" or callable(m.claims)
        assert not hasattr(m, "Gradients") or isinstance(m.GRADIENTS, str)


def test_unknown_runtime_option_is_refused():
    from portability.runtimes.ort import OrtCpu

    with pytest.raises(ValueError, match="unknown option.*graph_optimisation.*reads: graph_optimization, threads"):
        OrtCpu({"graph_optimisation": "disabled"})


def test_no_runtime_is_created_in_the_checks_own_process(monkeypatch, tmp_path):
    """What the check asks of a runtime (cost, service, contention group, network) comes from its class:
    a runtime is created only in a worker, where it loads and runs the model."""
    from portability import api
    from portability.runtimes.base import Runtime

    FIXTURES = PKG.parent / "fixtures"
    made = []
    real = Runtime.__init__

    def counted(self, *a, **kw):
        made.append(type(self).__name__)
        real(self, *a, **kw)

    monkeypatch.setattr(Runtime, "__init__", counted)
    with pytest.raises(ValueError, match="unknown option"):  # the check itself: the spy sees creations
        load_class("portability.runtimes.ort:OrtCpu")({"nope": 1})
    assert made == ["OrtCpu"]
    made.clear()
    report = api.check(FIXTURES / "lenet.onnx", targets="server/ort-cpu-noopt,web/ort-wasm,mobile/ort-mobile", runs=2,
                       warmup=0, samples=2)
    assert [t.status for t in report.targets] == ["pass"] * 4, [(t.id, t.status, t.error) for t in report.targets]
    assert made == []


def test_a_lookup_that_misses_lists_what_exists():
    with pytest.raises(AttributeError, match="has no 'OrtCPU'.*OrtCpu"):
        load_class("portability.runtimes.ort:OrtCPU")


FOUNDATIONS = "portability.core"
ABOVE = ("portability.engine", "portability.audit", "portability.explain", "portability.settings",
         "portability.study", "portability.targets", "portability.converters", "portability.report",
         "portability.runtimes", "portability.web", "portability.mobile", "portability.cli", "portability.workers",
         "portability.matrix")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("module", sorted(p.name for p in (PKG / "core").glob("*.py")))
def test_foundations_import_nothing_above_them(module):
    bad = sorted(m for m in _imports(PKG / "core" / module) if m.startswith(ABOVE))
    assert not bad, f"portability/core/{module} imports {bad}"


def test_no_module_over_the_size_limit():
    big = [(str(p.relative_to(PKG)), n) for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400]
    assert not big, big


def test_no_function_over_the_size_limit():
    long = [(str(p.relative_to(PKG)), f.name, n) for p in PKG.rglob("*.py") for f in ast.walk(ast.parse(p.read_text()))
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := f.end_lineno - f.lineno + 1) > 65]
    assert not long, long


REGISTRIES = ["targets/__init__.py", "targets/server.py", "targets/web.py", "targets/mobile.py", "converters/registry.py",
              "sources/__init__.py", "runtimes/__init__.py", "workers/services.py"]


def test_the_package_ships_no_test_doubles_and_its_registries_read_no_environment_at_import():
    """The misbehaving test targets live in tests/doubles.py and come in through the plugin hook, asked for
    when the registry is built, never through a switch read when a module is imported."""
    import os
    import subprocess
    import sys

    assert not [p for p in PKG.rglob("testing.py")], "test doubles in the installed package"
    assert not [i for i in registry() if i.startswith("test/")] or os.environ.get("PORTABILITY_PLUGINS")
    for rel in REGISTRIES:
        tree = ast.parse((PKG / rel).read_text())
        top = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        names = {getattr(x, "attr", None) or getattr(x, "id", None) for n in top for x in ast.walk(n)}
        assert not names & {"environ", "getenv"}, f"portability/{rel} reads the environment at import time"
    code = ("import portability.targets as t, portability.targets.web, portability.targets.mobile; "
            "print(len(t._registered)); print(sorted(i for i in t.registry() if i.startswith('test/')))")
    env = dict(os.environ, PORTABILITY_PLUGINS="doubles")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split("\n")
    assert out[0] == "0" and "test/abort" in out[1] and "test/web-crash" in out[1]
    bad = subprocess.run([sys.executable, "-m", "portability", "targets"], capture_output=True, text=True,
                         env=dict(os.environ, PORTABILITY_PLUGINS="no_such_plugin"))
    assert bad.returncode == 2 and "cannot import plugin 'no_such_plugin'" in bad.stderr and "Traceback" not in bad.stderr


def _package_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """Subpackages (and top-level modules) -> those they import, counting imports inside functions too."""
    def node(mod: str) -> str | None:
        parts = mod.split(".")
        if parts[0] != "portability" or len(parts) < 2:
            return None
        return parts[1] if (PKG / parts[1]).is_dir() else f"portability.{parts[1]}"

    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], list[str]] = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG)
        me = rel.parts[0] if len(rel.parts) > 1 else f"portability.{rel.stem}"
        for n in ast.walk(ast.parse(p.read_text())):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                ([n.module] if n.module != "portability" else [f"portability.{a.name}" for a in n.names])  \
                if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 else []
            for m in mods:
                t = node(m)
                if t and t not in (me, "portability.__init__"):
                    edges.setdefault(me, set()).add(t)
                    where.setdefault((me, t), []).append(f"{rel}:{n.lineno}")
    return edges, where


def test_the_package_has_no_import_loop_between_its_subpackages():
    """Each subpackage stands on those below it: core at the bottom, then metrics, sources, converters, the
    shared web and mobile machinery, runtimes, targets, the worker machinery, engine, report, and the
    commands at the top."""
    edges, where = _package_graph()

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return a == b or any(n not in seen and (seen.add(n) or reaches(n, b, seen)) for n in edges.get(a, ()))

    loops = sorted((a, b, where[(a, b)][0]) for a in edges for b in edges[a] if reaches(b, a, set()))
    assert not loops, f"import loops (package, package it imports, where): {loops}"


def _module_graph() -> dict[str, dict[str, int]]:
    """Every module of the package -> the modules of the package it imports (and the line), counting
    imports inside functions too: ``from portability.x import y`` names the module ``portability.x.y`` where
    there is one, else the package ``portability.x``."""
    def name(p: Path) -> str:
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        return ".".join(parts)

    known = {name(p) for p in PKG.rglob("*.py")}
    edges: dict[str, dict[str, int]] = {}
    for p in PKG.rglob("*.py"):
        me = name(p)
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                mods = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                mods = [f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in known else n.module for a in n.names]
            else:
                continue
            for m in mods:
                while m and m not in known:
                    m = m.rpartition(".")[0]
                if m and m.startswith("portability") and m != me and not me.startswith(m + "."):
                    edges.setdefault(me, {}).setdefault(m, n.lineno)
    return edges


def test_no_import_circle_between_modules():
    """No module reaches itself through the modules it imports, at any depth (a circle inside one package
    is as much a knot as one between packages)."""
    edges = _module_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    where = [[f"{a} -> {b} (line {edges[a][b]})" for a in c for b in edges.get(a, {}) if b in c] for c in circles]
    assert not circles, f"import circles: {where}"


def test_the_engine_reaches_the_worker_machinery_only_through_its_seam():
    """Orchestration (engine/) imports ``portability.workers`` and the names it exports, never one of its
    modules; the worker machinery imports nothing from the engine."""
    import portability.workers as seam

    inner = {f"portability.workers.{p.stem}" for p in (PKG / "workers").glob("*.py") if p.stem != "__init__"}
    for path in sorted((PKG / "engine").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "portability.workers":
                assert all(a.name in seam.__all__ for a in node.names), (path.name, [a.name for a in node.names])
        assert not (_imports(path) & inner), f"engine/{path.name} imports {sorted(_imports(path) & inner)}"
    for path in (PKG / "workers").glob("*.py"):
        assert not any(m.startswith("portability.engine") for m in _imports(path)), f"workers/{path.name}"
    for name in seam.__all__:
        assert getattr(seam, name) is not None
