"""onnx2tf's run: its onnxsim passes served by one process give the files the onnxsim command writes, and the
files onnx2tf's process describes are described as the converter itself would describe them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.mobile
def test_onnxsim_passes_served_by_one_process_write_what_the_command_writes(tmp_path):
    from mobile_models import conv_model
    from portability.converters.onnx2tf_run import _Onnxsim

    model = conv_model(tmp_path / "conv.onnx", shape=(1, 3, 8, 8))
    served, command = tmp_path / "served.onnx", tmp_path / "command.onnx"
    served.write_bytes(model.read_bytes()), command.write_bytes(model.read_bytes())
    helper = _Onnxsim()
    for _ in range(3):  # onnx2tf's three passes, in place
        subprocess.check_output([sys.executable, "-m", "onnxsim", str(command), str(command)], stderr=subprocess.DEVNULL)
        helper.run(["onnxsim", str(served), str(served)])
    assert served.read_bytes() == command.read_bytes()
    # the same passes without PyTorch, which onnxsim's package imports where it finds it (the command did)
    assert "libtorch" not in Path(f"/proc/{helper.proc.pid}/maps").read_text()
    first = helper.proc.pid
    with pytest.raises(subprocess.CalledProcessError) as e:  # a failing pass fails as the command does
        helper.run(["onnxsim", str(tmp_path / "missing.onnx"), str(tmp_path / "out.onnx")])
    assert e.value.returncode != 0
    helper.proc.kill(), helper.proc.wait()  # a helper that died is replaced for the next pass
    helper.run(["onnxsim", str(served), str(served)])
    assert helper.proc.pid != first and served.read_bytes() == command.read_bytes()


@pytest.mark.mobile
def test_what_onnx2tfs_process_describes_is_the_converters_own_description(tmp_path):
    """A square-image Conv (its layout settled by probes on each file and on the SavedModel, TensorFlow's)."""
    from mobile_models import conv_model
    from portability.converters.onnx2tf import run_onnx2tf
    from portability.converters.tflite_layout import describe_float_files
    from portability.core.model import read_signature

    model = conv_model(tmp_path / "square.onnx", shape=(1, 3, 8, 8))
    sig = read_signature(model)
    log, described = run_onnx2tf(model, tmp_path / "out", describe=(sig, model))
    assert described is not None, log[-2000:]
    files = {"fp32": tmp_path / "out" / "model_float32.tflite", "fp16": tmp_path / "out" / "model_float16.tflite"}
    own = describe_float_files(files, tmp_path / "out", sig, model)
    assert list(described) == list(own)
    assert described[1]["resolved_by"] == "probe" and described[1]["probe"]["conclusive"]
