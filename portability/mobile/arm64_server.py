"""Runs INSIDE the emulated ARM64 Python (numpy + ai_edge_litert / onnxruntime only; no portability).

Two modes:

- ``arm64_server.py``: one request/reply loop over stdin/stdout (a target's own emulated process).
- ``arm64_server.py --listen PATH``: a fork server, shared by a check's ARM64 targets. It imports numpy,
  LiteRT and ONNX Runtime once, listens on the AF_UNIX socket ``PATH`` (bound under a temporary name and
  renamed to ``PATH`` once it listens: the path appearing means it is ready) and forks one child per
  connection, which serves the same loop over that connection and exits when it closes. A child that
  crashes costs its own connection only. The server exits when its stdin reaches EOF (the host that
  started it is gone).

The loop's frame: 8-byte little-endian length + JSON header, then for each array in ``header["arrays"]``
an 8-byte length + ``.npy`` bytes. Commands:

- ``load``  {engine: a name of ``device_engines.ENGINES``, format: tflite|ort|onnx, threads, kernels,
  inputs: [index|name], outputs: [index|name]} + one array: the model file's bytes (uint8). The model comes
  by content, never by path: the serving process reads no model folder. The engines are the ones a mobile
  bundle's runner uses on a device (``device_engines.py``, beside this script).
- ``infer`` arrays in ``inputs`` order -> arrays in ``outputs`` order
- ``time``  arrays, warmup, runs -> {ms: [...]} (timed here, inside the emulated process)
- ``quit``
Replies: {ok: true, ...} or {ok: false, error, type}. ``load`` replies also give the serving process's
``pid``; every ok reply gives ``rss_mb``, its peak resident memory so far.
"""
import io
import json
import os
import struct
import sys

import numpy as np

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


def rss_mb():
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def model_bytes(arrays) -> bytes:
    """The ``load`` request's model content, taken out of its one uint8 array (the bytes are the copy kept)."""
    if len(arrays) != 1 or arrays[0].dtype != np.uint8 or arrays[0].ndim != 1:
        raise ValueError("load: the model's bytes must come as one 1-D uint8 array")
    return arrays.pop().tobytes()


def engines():
    """The device engines (``device_engines.py``, beside this script; the package's module when imported)."""
    try:
        import device_engines
    except ImportError:
        from portability.mobile import device_engines
    return device_engines


def serve(fin, fout):
    """The request/reply loop, until ``quit`` or EOF."""
    import platform

    device = engines()
    model = None
    while True:
        try:
            req, arrays = read_msg(fin)
        except ConnectionError:
            return  # the host is gone
        if req is None or req["cmd"] == "quit":
            return
        try:
            if req["cmd"] == "load":
                model = None  # the previous model's memory goes before the next one's arrives
                engine = device.ENGINES[req["engine"]]
                model = engine(model_bytes(arrays), req["threads"], req["inputs"], req["outputs"], req.get("kernels"),
                               req.get("format"))
                write_msg(fout, {"ok": True, "version": model.version, "machine": platform.machine(), "pid": os.getpid(),
                                 "inputs": model.ins, "outputs": model.outs, "rss_mb": rss_mb()})
            elif req["cmd"] == "infer":
                outs = model.run(arrays)
                write_msg(fout, {"ok": True, "rss_mb": rss_mb()}, outs)
            elif req["cmd"] == "time":
                ms = device.timed_runs(model.run, arrays, req["warmup"], req["runs"])
                write_msg(fout, {"ok": True, "ms": ms, "rss_mb": rss_mb()})
            else:
                write_msg(fout, {"ok": False, "error": "unknown command " + str(req["cmd"]), "type": "ValueError"})
        except ConnectionError:
            return  # the host is gone
        except Exception as e:  # reported to the host, which maps it to a typed error
            write_msg(fout, {"ok": False, "error": str(e), "type": type(e).__name__})


def preload():
    """What every connection would import, look up and set up: done once, before the server forks."""
    import platform

    for engine in engines().ENGINES.values():
        engine.preload()
    platform.machine()


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(conn):
    """In the forked child: serve one connection, then exit (never return into the server's loop)."""
    import signal
    import traceback

    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)  # the server's stdin is its lifeline, not the child's
        os.close(fd)
        with conn, conn.makefile("rb") as fin, conn.makefile("wb") as fout:
            serve(fin, fout)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)


def listen(path):
    import select
    import signal
    import socket

    preload()
    signal.signal(signal.SIGCHLD, lambda *_: _reap())  # children are reaped as they exit
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path + ".tmp"
    srv.bind(tmp)
    srv.listen(16)
    os.rename(tmp, path)  # the path appears once connections are accepted
    try:
        while True:
            ready, _, _ = select.select([srv, 0], [], [])
            if 0 in ready and not os.read(0, 4096):
                return  # the host that started the server is gone
            if srv in ready:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                try:
                    pid = os.fork()
                except OSError as e:  # no process to spare: this connection is refused, the server goes on
                    print("arm64_server: fork failed:", e, file=sys.stderr)
                    pid = -1
                if pid == 0:
                    srv.close()
                    _child(conn)
                conn.close()
    finally:
        srv.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def main():
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    if len(sys.argv) > 2 and sys.argv[1] == "--listen":
        listen(sys.argv[2])
    else:
        serve(sys.stdin.buffer, sys.__stdout__.buffer)


if __name__ == "__main__":
    main()
