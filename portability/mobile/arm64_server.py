"""Runs INSIDE the emulated ARM64 Python (numpy + ai_edge_litert / onnxruntime only; no portability).

A request/reply loop over stdin/stdout. Frame: 8-byte little-endian length + JSON header, then for each
array in ``header["arrays"]`` an 8-byte length + ``.npy`` bytes. Commands:

- ``load``  {kind: tflite|ort, path, threads, kernels, inputs: [index|name], outputs: [index|name]}
- ``infer`` arrays in ``inputs`` order -> arrays in ``outputs`` order
- ``time``  arrays, warmup, runs -> {ms: [...]} (timed here, inside the emulated process)
- ``quit``
Replies: {ok: true, ...} or {ok: false, error, type}.
"""
import io
import json
import struct
import sys
import time

import numpy as np

_KERNELS = {"xnnpack": "AUTO", "builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "reference": "BUILTIN_REF"}


def read_msg(f):
    head = f.read(8)
    if len(head) < 8:
        return None, []
    header = json.loads(f.read(struct.unpack("<Q", head)[0]))
    arrays = []
    for _ in range(header.get("arrays", 0)):
        n = struct.unpack("<Q", f.read(8))[0]
        arrays.append(np.load(io.BytesIO(f.read(n)), allow_pickle=False))
    return header, arrays


def write_msg(f, header, arrays=()):
    header = dict(header, arrays=len(arrays))
    h = json.dumps(header).encode()
    f.write(struct.pack("<Q", len(h)) + h)
    for a in arrays:
        b = io.BytesIO()
        np.save(b, np.ascontiguousarray(a), allow_pickle=False)
        f.write(struct.pack("<Q", b.tell()) + b.getvalue())
    f.flush()


class Tflite:
    def __init__(self, req):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        from importlib.metadata import version

        self.it = Interpreter(model_path=req["path"], num_threads=req["threads"],
                              experimental_op_resolver_type=getattr(OpResolverType, _KERNELS[req.get("kernels", "xnnpack")]))
        self.it.allocate_tensors()
        self.ins, self.outs = req["inputs"], req["outputs"]
        self.shapes = {i: list(self.it.get_tensor(i).shape) for i in self.ins}
        self.version = "ai-edge-litert " + version("ai-edge-litert")

    def run(self, arrays):
        it, resized = self.it, False
        for i, x in zip(self.ins, arrays):
            if self.shapes[i] != list(x.shape):
                it.resize_tensor_input(i, list(x.shape))
                self.shapes[i], resized = list(x.shape), True
        if resized:
            it.allocate_tensors()
        for i, x in zip(self.ins, arrays):
            it.set_tensor(i, x)
        it.invoke()
        return [it.get_tensor(i) for i in self.outs]


class Ort:
    def __init__(self, req):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = req["threads"]
        so.log_severity_level = 3
        if req["path"].endswith(".ort"):
            so.add_session_config_entry("session.load_model_format", "ORT")
        self.sess = ort.InferenceSession(req["path"], sess_options=so, providers=["CPUExecutionProvider"])
        self.ins = req["inputs"] or [i.name for i in self.sess.get_inputs()]
        self.outs = req["outputs"] or [o.name for o in self.sess.get_outputs()]
        self.version = "onnxruntime " + ort.__version__

    def run(self, arrays):
        return self.sess.run(self.outs, dict(zip(self.ins, arrays)))


def main():
    import platform

    fin, fout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    model = None
    while True:
        req, arrays = read_msg(fin)
        if req is None or req["cmd"] == "quit":
            return
        try:
            if req["cmd"] == "load":
                model = (Tflite if req["kind"] == "tflite" else Ort)(req)
                write_msg(fout, {"ok": True, "version": model.version, "machine": platform.machine(),
                                 "inputs": model.ins, "outputs": model.outs})
            elif req["cmd"] == "infer":
                write_msg(fout, {"ok": True}, model.run(arrays))
            elif req["cmd"] == "time":
                for _ in range(req["warmup"]):
                    model.run(arrays)
                ms = []
                for _ in range(req["runs"]):
                    t0 = time.perf_counter()
                    model.run(arrays)
                    ms.append((time.perf_counter() - t0) * 1e3)
                write_msg(fout, {"ok": True, "ms": ms})
            else:
                write_msg(fout, {"ok": False, "error": "unknown command " + str(req["cmd"]), "type": "ValueError"})
        except Exception as e:  # reported to the host, which maps it to a typed error
            write_msg(fout, {"ok": False, "error": str(e), "type": type(e).__name__})


if __name__ == "__main__":
    main()
