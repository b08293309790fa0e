"""`import portability` and `portability --help` must not import any heavy framework."""
import pkgutil
import subprocess
import sys

import portability

HEAVY = ["torch", "tensorflow", "onnx2tf", "playwright", "tensorflowjs", "ai_edge_litert", "keras", "matplotlib"]


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    import json

    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _heavy(mods: set[str]) -> list[str]:
    return [h for h in HEAVY if h in mods]


def test_import_portability_is_light():
    assert _heavy(_loaded_after("import portability")) == []


def test_help_is_light_and_works():
    code = ("import sys\nsys.argv=['portability','--help']\nfrom portability.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n")
    assert _heavy(_loaded_after(code)) == []


def test_every_module_imports_without_heavy_frameworks():
    """Importing any module of the package (what availability checks and the CLI do) stays light."""
    names = [m.name for m in pkgutil.walk_packages(portability.__path__, "portability.")]
    assert "portability.engine.pipeline" in names
    code = "import importlib\n" + "\n".join(f"importlib.import_module({n!r})" for n in names)
    assert _heavy(_loaded_after(code)) == []


def test_check_help_lists_main_options():
    p = subprocess.run([sys.executable, "-m", "portability", "check", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for opt in ("--targets", "--json", "--dataset", "--inputs", "--shape", "--no-cache", "--gate", "--html",
                "--markdown", "--baseline", "--no-history"):
        assert opt in p.stdout
