"""onnx2tf's command line with its onnxsim passes served by one process (``python -m`` this module, with
onnx2tf's arguments).

onnx2tf simplifies a model by running the ``onnxsim`` command three times in a row (a fourth for a model with
``Einsum`` or ``OneHot``), each a new process that imports onnxsim — and, through it, PyTorch: about 2 s each,
two thirds of a small model's conversion. Here those commands go to one helper process that imports onnxsim
once — without PyTorch, which none of its passes uses — while onnx2tf imports TensorFlow, and runs onnxsim's own
command-line entry with the same arguments: the same passes, the same files (byte for byte), a failure still
onnx2tf's warning as before, a helper that dies replaced for the next pass. Everything else is onnx2tf's ``main``
as ``python -m onnx2tf`` runs it.

Asked (``DESCRIBE``), it then describes the files onnx2tf wrote — each float ``.tflite`` file's layout and the
SavedModel's, the latter probed by TensorFlow — which the converter would otherwise do in a process that imports
TensorFlow (seconds) once more. Where that fails, the converter does it itself, as before.

Asked (``LAYERS``), it also records which Keras layers onnx2tf made for each ONNX node (``_LayerRecord``): the
names TensorFlow gives the SavedModel's ops, and the TFLite converter its tensors, are those layers' (``tf.nn.
convolution_1``), never the ONNX node's, so this record is how a ``.tflite`` file's ops are traced back to the ONNX
nodes they compute (``tflite_debug``). Where recording fails, onnx2tf converts as before and no record is written.
"""
from __future__ import annotations

import json
import subprocess
import sys

#: this module, as python -m runs it
MODULE = "portability.converters.onnx2tf_run"
#: the helper's flag (this module, run by itself with it, serves onnxsim commands on its stdin)
SERVE = "--serve-onnxsim"
#: ``DESCRIBE spec.json`` before onnx2tf's arguments: once onnx2tf has written its files, describe them
#: (``tflite_layout.describe_float_files``) in this process, where TensorFlow is imported already, into the spec
DESCRIBE = "--describe"
#: ``LAYERS record.json`` before onnx2tf's arguments: record the Keras layers each ONNX node's conversion makes
LAYERS = "--layers"


def _serve() -> None:
    """Read one onnxsim command line (a JSON list) per line; run onnxsim's entry point on it; answer its exit
    code and printed output as one JSON line on the original stdout (anything else printed goes to stderr)."""
    import contextlib
    import ctypes
    import io
    import os

    try:  # die with the onnx2tf run that started it (a run killed at its timeout leaves no helper)
        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    # onnxsim's package imports PyTorch where it finds it (for its quantizers and exporters, never for the
    # simplification passes): 2-3 s of the helper's start, which the first pass waits for
    sys.modules.setdefault("torch", None)
    from onnxsim import main

    for line in sys.stdin:
        out, rc = io.StringIO(), 0
        sys.argv = json.loads(line)
        try:
            with contextlib.redirect_stdout(out):
                main()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # noqa: BLE001 — the command's failure, answered as its exit code
            out.write(f"{type(e).__name__}: {e}\n")
            rc = 1
        answers.write(json.dumps({"rc": rc, "out": out.getvalue()}) + "\n")
        answers.flush()


class _Onnxsim:
    """The helper process, started at once so that its import overlaps onnx2tf's."""

    def __init__(self) -> None:
        self.proc = self._start()

    @staticmethod
    def _start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", MODULE, SERVE],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def run(self, cmd: list[str]) -> bytes:
        """``check_output(cmd)`` for an onnxsim command: its output, or CalledProcessError as the command's."""
        if self.proc.poll() is not None:
            self.proc = self._start()
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:  # the helper died on this model (a native crash), as the command would have
            raise subprocess.CalledProcessError(self.proc.wait(), cmd)
        answer = json.loads(line)
        if answer["rc"]:
            raise subprocess.CalledProcessError(answer["rc"], cmd, output=answer["out"].encode())
        return answer["out"].encode()


def _describe(spec_path: str) -> None:
    """Describe onnx2tf's files as the spec asks; the answer (or None, where anything failed: the converter
    then describes them itself) is written into the spec as ``described``."""
    from pathlib import Path

    from portability.converters.tflite_layout import describe_float_files

    spec = json.loads(Path(spec_path).read_text())
    try:
        described = json.dumps(describe_float_files({q: Path(f) for q, f in spec["files"].items()}, Path(spec["folder"]),
                                                    spec["signature"], Path(spec["onnx"])))
    except Exception:  # noqa: BLE001 — the converter's own description says what is wrong
        return
    Path(spec_path).write_text(json.dumps({**spec, "described": json.loads(described)}))


class _LayerRecord:
    """The Keras layers made while each ONNX node is converted (onnx2tf imports an op's module and calls its
    ``make_node``, once per node, in the graph's order): every layer made inside that call is the node's —
    decompositions, the transposes onnx2tf adds around it and real Keras layers alike."""

    def __init__(self) -> None:
        self.current: list[str] = []
        self.layers: dict[str, str] = {}
        self.nodes: list[list[str]] = []

    def install(self) -> None:
        import importlib

        import onnx2tf.onnx2tf as converter
        import tf_keras

        record, layer_init = self, tf_keras.layers.Layer.__init__

        def init(layer, *args, **kwargs):
            layer_init(layer, *args, **kwargs)
            # the models onnx2tf builds to probe shapes (and their inputs) are no ops of the converted graph
            if record.current and not isinstance(layer, (tf_keras.Model, tf_keras.layers.InputLayer)):
                record.layers.setdefault(layer.name, record.current[0])

        def recording(make_node):
            def make(*args, **kwargs):
                node = kwargs.get("graph_node")
                if node is not None and not record.current:
                    record.nodes.append([node.name, node.op])
                record.current.append(node.name if node is not None else "")
                try:
                    return make_node(*args, **kwargs)
                finally:
                    record.current.pop()
            make.recording = True
            return make

        def import_module(name, package=None):
            module = importlib.import_module(name, package)
            if name.startswith("onnx2tf.ops.") and not getattr(module.make_node, "recording", False):
                module.make_node = recording(module.make_node)
            return module

        class Importlib:  # importlib as onnx2tf's module sees it, its op modules' make_node recording
            def __getattr__(self, name):
                return getattr(importlib, name)

        Importlib.import_module = staticmethod(import_module)
        tf_keras.layers.Layer.__init__ = init
        converter.importlib = Importlib()

    def write(self, path: str, onnx_path: str | None) -> None:
        """The record, its node names those of the model onnx2tf converted (``onnx_path``, simplified in place):
        onnx2tf renames nodes before converting them (``:`` to ``__``; a leading ``/`` to ``wa/``)."""
        import re
        from pathlib import Path

        original: dict[str, str] = {}
        try:
            import onnx

            for n in onnx.load(onnx_path, load_external_data=False).graph.node:
                original.setdefault(re.sub("^/", "wa/", n.name.replace(":", "__")), n.name)
        except Exception:  # noqa: BLE001 — the names as onnx2tf gave them
            pass
        nodes = {original.get(n, n): op for n, op in self.nodes if n}  # once each (a retried conversion repeats them)
        Path(path).write_text(json.dumps({
            "nodes": [[n, op] for n, op in nodes.items()],
            "layers": {layer: original.get(n, n) for layer, n in self.layers.items() if n}}))


def _own_args() -> tuple[str | None, str | None]:
    """This module's own flags (``DESCRIBE``, ``LAYERS``, each with a file), taken off ``sys.argv``."""
    found: dict[str, str] = {}
    while sys.argv[1:2] and sys.argv[1] in (DESCRIBE, LAYERS):
        found[sys.argv[1]], sys.argv[1:3] = sys.argv[2], []
    return found.get(DESCRIBE), found.get(LAYERS)


def main() -> None:
    spec, layers = _own_args()
    helper = None if {"-nuo", "--not_use_onnxsim"} & set(sys.argv) else _Onnxsim()  # no passes asked: none started
    plain = subprocess.check_output

    def check_output(cmd, *args, **kwargs):
        nonlocal helper
        if isinstance(cmd, list) and cmd and cmd[0] == "onnxsim":
            helper = helper or _Onnxsim()
            return helper.run(cmd)
        return plain(cmd, *args, **kwargs)

    subprocess.check_output = check_output
    from onnx2tf.onnx2tf import main as onnx2tf_main

    record = _LayerRecord() if layers else None
    try:
        if record:
            record.install()
    except Exception:  # noqa: BLE001 — onnx2tf's internals are not what it was written for: no record
        record = None
    sys.argv = ["onnx2tf", *sys.argv[1:]]
    onnx2tf_main()
    if record:
        args = sys.argv[1:]
        try:
            record.write(layers, args[args.index("-i") + 1] if "-i" in args[:-1] else None)
        except (OSError, TypeError, ValueError):  # the conversion stands without it
            pass
    if spec:
        _describe(spec)


if __name__ == "__main__":
    _serve() if sys.argv[1:] == [SERVE] else main()
