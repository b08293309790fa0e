"""MXNet's side of an MXNet source: run by MXNet's own interpreter (``core/mxnet_env.py``'s venv), never
imported by the main environment. It reads a legacy checkpoint (``NAME-symbol.json`` + ``NAME-0000.params``:
a JSON graph and MXNet's own NDArray container, no pickle) and does one of:

- ``signature SYMBOL PARAMS SHAPES``: the inputs (the graph's arguments the parameters do not hold) and
  outputs with their dtypes and shapes, inferred from ``SHAPES`` (JSON ``{input: [dims]}``); one JSON line.
- ``export SYMBOL PARAMS SHAPES OUT OPSET``: MXNet's ONNX exporter (``mx.onnx.export_model``, dynamic batch)
  to ``OUT``, tidied as the study's exports are (IR version, weights not listed as inputs, the batch
  dimension named); one JSON line.
- ``serve SYMBOL PARAMS``: a server on stdin/stdout in the frames of ``mobile/arm64_server.py``: first
  its inputs' and outputs' names, then ``infer`` (arrays in the inputs' order) -> the outputs; ``time``
  -> per-run milliseconds measured here, around the forward pass and its copy out.

Errors are one JSON line ``{"error": ...}`` (exit 1) or a reply with ``ok: false``.
"""
from __future__ import annotations

import json
import os
import sys
import time

mx = np = None  # MXNet and its numpy: imported by main(), in MXNet's interpreter only


def _import() -> None:
    global mx, np
    # run as a script: its own folder (portability/sources, with an onnx.py) must not shadow the onnx package
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    import numpy

    if numpy.__dict__.get("bool") is not bool:  # MXNet 1.9 uses np.bool, gone from numpy >= 1.24
        numpy.bool = bool
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    import mxnet

    mx, np = mxnet, numpy

def _params(path: str) -> dict:
    loaded = mx.nd.load(path)
    if not isinstance(loaded, dict):
        raise ValueError(f"{os.path.basename(path)} holds unnamed arrays, not a checkpoint's parameters")
    return {k.split(":", 1)[-1]: v for k, v in loaded.items()}


def _inputs(sym, params: dict) -> list[str]:
    return [a for a in sym.list_arguments() if a not in params] + \
        [a for a in sym.list_auxiliary_states() if a not in params]


def signature(sym_path: str, params_path: str, shapes: dict) -> dict:
    sym = mx.sym.load(sym_path)
    params = _params(params_path)
    names = _inputs(sym, params)
    missing = [n for n in names if n not in shapes]
    if missing:
        return {"error": f"MXNet checkpoints hold no input shapes: give --shape {missing[0]}=1x... (the graph's inputs: "
                         f"{', '.join(names)})", "inputs": names}
    known = {k: tuple(v.shape) for k, v in params.items()}
    arg, out, aux = sym.infer_shape(**{n: tuple(shapes[n]) for n in names}, **known)
    arg_types, out_types, _ = sym.infer_type(**{n: np.float32 for n in names})
    types = dict(zip(sym.list_arguments(), arg_types or []))
    if arg is None or out is None:
        return {"error": "MXNet could not infer the output shapes from the given input shapes"}
    return {"inputs": [{"name": n, "dtype": np.dtype(types.get(n, np.float32)).name, "shape": list(shapes[n])} for n in names],
            "outputs": [{"name": n, "dtype": np.dtype(t).name, "shape": list(s)}
                        for n, s, t in zip(sym.list_outputs(), out, out_types)],
            "mxnet": mx.__version__, "params": len(params),
            "ops": sorted({n["op"] for n in json.loads(sym.tojson())["nodes"] if n["op"] != "null"})}


def export(sym_path: str, params_path: str, shapes: dict, out: str, opset: int) -> dict:
    import onnx
    import onnx.defs

    sym = mx.sym.load(sym_path)
    names = _inputs(sym, _params(params_path))
    in_shapes = [tuple(shapes[n]) for n in names]
    saved = onnx.defs.onnx_opset_version
    onnx.defs.onnx_opset_version = lambda: opset  # what mx2onnx picks its translations by and stamps
    try:
        mx.onnx.export_model(sym_path, params_path, in_shapes=in_shapes, in_types=[np.float32] * len(names),
                             onnx_file_path=out, dynamic=True, dynamic_input_shapes=[(None, *s[1:]) for s in in_shapes])
    finally:
        onnx.defs.onnx_opset_version = saved
    model = onnx.load(out)
    model.ir_version = onnx.helper.find_min_ir_version_for(list(model.opset_import))
    weights = {i.name for i in model.graph.initializer}
    keep = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for v in list(model.graph.input) + list(model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if dims and not dims[0].dim_param and not dims[0].dim_value:
            dims[0].dim_param = "batch"
    # the outputs named as the symbol names them (the exporter drops ``_output``): the check compares by name
    for v, name in zip(model.graph.output, sym.list_outputs()):
        if v.name != name:
            for node in model.graph.node:
                node.output[:] = [name if o == v.name else o for o in node.output]
                node.input[:] = [name if i == v.name else i for i in node.input]
            v.name = name
    onnx.save(model, out)
    return {"onnx": out, "opset": opset, "mxnet": mx.__version__,
            "inputs": [i.name for i in model.graph.input], "outputs": [o.name for o in model.graph.output]}


def serve(sym_path: str, params_path: str) -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mobile"))
    from arm64_server import read_msg, write_msg  # the frames (a plain module: numpy only)

    sym = mx.sym.load(sym_path)
    names = _inputs(sym, _params(params_path))
    net = mx.gluon.SymbolBlock.imports(sym_path, names, params_path, ctx=mx.cpu())
    r, w = sys.stdin.buffer, sys.stdout.buffer

    def forward(arrays):
        outs = net(*[mx.nd.array(a, dtype=a.dtype) for a in arrays])
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return [o.asnumpy() for o in outs]

    write_msg(w, {"ok": True, "mxnet": mx.__version__, "inputs": names, "outputs": sym.list_outputs()})
    while True:
        header, arrays = read_msg(r)
        if header is None:
            return 0
        try:
            if header["cmd"] == "infer":
                write_msg(w, {"ok": True}, forward(arrays))
            elif header["cmd"] == "time":
                for _ in range(int(header.get("warmup", 0))):
                    forward(arrays)
                ms = []
                for _ in range(int(header["runs"])):
                    t0 = time.perf_counter()
                    forward(arrays)
                    ms.append((time.perf_counter() - t0) * 1e3)
                write_msg(w, {"ok": True, "ms": ms})
            else:
                write_msg(w, {"ok": False, "type": "ValueError", "error": f"unknown command {header['cmd']!r}"})
        except Exception as e:  # noqa: BLE001 - the model's failure, answered
            write_msg(w, {"ok": False, "type": type(e).__name__, "error": " ".join(str(e).split())[:500]})


def main(argv: list[str]) -> int:
    cmd, sym_path, params_path, *rest = argv
    _import()
    try:
        if cmd == "serve":
            return serve(sym_path, params_path)
        shapes = json.loads(rest[0])
        answer = signature(sym_path, params_path, shapes) if cmd == "signature" else \
            export(sym_path, params_path, shapes, rest[1], int(rest[2]))
    except Exception as e:  # noqa: BLE001 - one line for the caller
        answer = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
    print(json.dumps(answer))
    return 1 if "error" in answer else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
