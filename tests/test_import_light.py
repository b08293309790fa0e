"""`import portability` and `portability --help` must not import any heavy framework."""
import pkgutil
import subprocess
import sys
from pathlib import Path

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


def test_onnx_runtimes_tools_run_without_pytorch(tmp_path):
    """Fixing a model's input shapes, ORT Mobile's usability analysis and the ORT format converter use ONNX
    Runtime's tools, whose package imports PyTorch wherever it is installed: not for them (``ort_tools``). The
    converter's command, run that way, still writes the ``.ort`` file; a process with PyTorch imported keeps it."""
    from portability.converters.ort_tools import tool_command

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    code = (f"from pathlib import Path\nfrom portability.converters.shapes import fix_input_shapes\n"
            f"from portability.converters.ort_format import mobile_usability\n"
            f"print(fix_input_shapes(Path({str(fixtures / 'mlp_dynamic.onnx')!r}), Path({str(tmp_path / 'fixed.onnx')!r}), None))\n"
            f"assert mobile_usability(Path({str(tmp_path / 'fixed.onnx')!r}))['nnapi']['nodes'] > 0")
    mods = _loaded_after(code)
    assert "onnxruntime.tools.onnx_model_utils" in mods and "onnxruntime.tools.mobile_helpers.usability_checker" in mods
    assert "torch" not in mods
    p = subprocess.run(tool_command("convert_onnx_models_to_ort", str(fixtures / "lenet.onnx"), "--output_dir",
                                    str(tmp_path / "ort"), "--optimization_style", "Fixed", "--target_platform", "arm"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "ort" / "lenet.ort").stat().st_size > 1000
    kept = _loaded_after("import torch\nfrom portability.converters.ort_tools import ort_tool\nort_tool('onnx_model_utils')\n"
                         "import sys\nassert sys.modules['torch'] is not None and sys.modules['torch'].__name__ == 'torch'")
    assert "onnxruntime.tools.pytorch_export_helpers" in kept
