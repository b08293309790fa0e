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


def main() -> None:
    spec = None
    if sys.argv[1:2] == [DESCRIBE]:
        spec, sys.argv[1:3] = sys.argv[2], []
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

    sys.argv = ["onnx2tf", *sys.argv[1:]]
    onnx2tf_main()
    if spec:
        _describe(spec)


if __name__ == "__main__":
    _serve() if sys.argv[1:] == [SERVE] else main()
