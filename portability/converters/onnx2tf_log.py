"""Reading onnx2tf's output: the lines that explain a failure, and the failure itself (what, the op, the node)."""
from __future__ import annotations

import re
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = re.compile(r"^(I0000|W0000|E0000|WARNING: All log messages|To enable the following|.*oneDNN custom op"
                    r"|.*cpu_feature_guard|.*tensorflow/core/util/port|\s*$)")


def meaningful_lines(log: str, limit: int = 12) -> list[str]:
    """onnx2tf's output minus colours, TF start-up noise and progress: the lines that explain a failure."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in log.splitlines()]
    lines = [ln for ln in lines if not _NOISE.match(ln)]
    picked = [ln for ln in lines if re.search(r"ERROR|Error|error:|Exception|not supported|Unsupported|onnx_op_type|onnx_op_name", ln)]
    tb = [ln for ln in lines if re.match(r"^\w*(Error|Exception)\b", ln)]
    out = list(dict.fromkeys(picked[-limit:] + tb[-2:]))
    return out[-limit:] or lines[-limit:]


#: onnx2tf's ERROR lines that give advice, not the error
_ADVICE = re.compile(r"The trace log is below|input_onnx_file_path:|Read this and deal with it|Alternatively, if the input OP"
                     r"|If the input OP of ONNX|Also, for models that include")
#: an exception's last line: ``module.Class: message`` (not indented: a traceback's frames are)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<cls>[A-Za-z_]\w*(?:Error|Exception)):\s*(?P<msg>.*)$")
#: MLIR locations in the TFLite converter's messages
_MLIR_LOC = re.compile(r"<frozen runpy>:\d+:\d+:\s*|<unknown>:\d+:\s*")


def failure(log: str, onnx_path: Path | None = None, limit: int = 400) -> tuple[str, str | None, str | None]:
    """(what went wrong, the op, the node) from a failed onnx2tf run's log: onnx2tf's own ERROR lines
    (its advice left out), the exception it ended with, and the ops the TFLite converter has no kernel
    for — never the INFO lines that only log the last op it started. The node is named only where the
    source graph has a node of that name (onnx2tf invents names for unnamed nodes, and says ``None``)."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in log.splitlines()]
    said: list[str] = []
    op = node = None
    for ln in lines:
        if not ln.lstrip().startswith("ERROR:"):
            continue
        e = ln.split("ERROR:", 1)[1].strip()
        m = re.match(r"(\w+) OP is not yet implemented", e)
        op = m.group(1) if m else op
        m = re.match(r"onnx_op_name:\s*(\S*)", e)
        if m:
            node = m.group(1) or node
            continue
        m = re.match(r"onnx_op_type:\s*(\w+)", e)
        if m:
            op = m.group(1)
            continue
        if e and not _ADVICE.search(e):
            said.append(e)
    exceptions = [m for ln in lines if (m := _EXCEPTION.match(ln)) and not ln.startswith((" ", "\t"))]
    if exceptions:
        msg = re.sub(r"\s+", " ", _MLIR_LOC.sub(" ", exceptions[-1].group("msg"))).strip()
        said.append(f"{exceptions[-1].group('cls')}: {msg}")
    custom = re.search(r"^Custom ops: (.+)$", "\n".join(lines), re.M)
    if custom:
        said.append(f"TFLite has no built-in kernel for {custom.group(1).strip()}")
        op = op or custom.group(1).split(",")[0].strip()
    if node and node.startswith("wa/"):  # onnx2tf's name for a node it rewrote as a workaround: the source's is after "wa"
        node = node[2:]
    if node and op is None:  # the op of the node named in the ERROR lines, from the INFO line that started it
        m = re.search(r"onnx_op_type:\s*(\w+)\s+onnx_op_name:\s*" + re.escape(node) + r"(?:\s|$)", "\n".join(lines), re.M)
        op = m.group(1) if m else None
    if node in ("None", "") or (node and onnx_path is not None and node not in _node_names(onnx_path)):
        node = None
    text = "; ".join(dict.fromkeys(x for x in said if x)) or " | ".join(meaningful_lines(log, 4))
    return (text[:limit] + "…" if len(text) > limit else text), op, node


def _node_names(onnx_path: Path) -> set[str]:
    import onnx

    try:
        return {n.name for n in onnx.load(str(onnx_path), load_external_data=False).graph.node if n.name}
    except Exception:  # noqa: BLE001 - an unreadable graph names no node
        return set()
