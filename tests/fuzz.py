"""Hostile inputs for every reader a check runs before any framework sees the model: a seeded mutation fuzzer.

    python tests/fuzz.py [--cases 100000] [--formats onnx,npz,...] [--seed 0]

Each format starts from a file the fixtures ship and mutates it, case by case, from a seeded generator
(case N of a format is always the same file): bytes flipped, overwritten with edge values, inserted,
deleted, duplicated or cut; for zip archives (Keras, torch.export, npz) a member's bytes or JSON rewritten;
for JSON (TF.js's model.json, the JSON inside archives) values replaced by edge values (huge or negative
numbers, deep nesting, paths that leave the folder, wrong types), keys removed. The property every case
must hold: the reader returns, or refuses with one line (``BadModel``/``BadInput``); never another exception,
never longer than ``LIMIT_S``, never a file written outside the case's own folder.

Readers (each after ``sources.detect``, the source kind from names and a few bytes): ONNX (``core.model.load_model``: onnx's parser and checker, external data confined to the
model's folder), Keras archives (``sources.keras.vet``: the archive and its config's allow-list), SavedModel
(``sources.saved_model.check_folder``: the protobuf and its ops' allow-list), TF.js (``sources.tfjs.load``),
torch.export archives (``sources.torch_export.vet``), ``--inputs``/``--dataset`` files
(``core.inputs.from_file``), TFLite (``sources.tflite.load``: LiteRT's own flatbuffer reader). The TFLite
cases run in child processes (a native crash there is contained by the isolated loader a check uses; it
is counted, not hidden).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
#: seconds one case may take
LIMIT_S = 10.0
_EDGE_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)
_EDGE_VALUES = (0, -1, 1, 2**31, -(2**31), 2**63 - 1, 2**64, 10**30, 1e308, -1e308, "", "../../../etc/passwd",
                "/etc/passwd", "..", "a" * 5000, None, True, [], {}, [[[[[[[[]]]]]]]], "NaN", -0.0)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        if not b:
            b += bytes([rng.randrange(256)])
        op, i = rng.randrange(7), rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice(_EDGE_BYTES)
        elif op == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif op == 3:
            del b[i:i + rng.randrange(1, 65)]
        elif op == 4:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randrange(1, 129)]
        elif op == 5:
            del b[rng.randrange(len(b) + 1):]
        else:  # a little-endian integer field set to an edge value
            b[i:i + 4] = rng.choice((0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000)).to_bytes(4, "little")
    return bytes(b)


def mutate_json(doc, rng: random.Random, depth: int = 0):
    """``doc`` with one value somewhere replaced, or a key removed."""
    if isinstance(doc, dict) and doc and depth < 12:
        key = rng.choice(list(doc))
        out = dict(doc)
        r = rng.random()
        if r < 0.15:
            del out[key]
        elif r < 0.45:
            out[key] = rng.choice(_EDGE_VALUES)
        else:
            out[key] = mutate_json(doc[key], rng, depth + 1)
        return out
    if isinstance(doc, list) and doc and depth < 12:
        out = list(doc)
        i = rng.randrange(len(out))
        r = rng.random()
        if r < 0.1:
            del out[i]
        elif r < 0.2:
            out += out[i:i + 1] * rng.randrange(1, 4)
        else:
            out[i] = rng.choice(_EDGE_VALUES) if rng.random() < 0.3 else mutate_json(out[i], rng, depth + 1)
        return out
    return rng.choice(_EDGE_VALUES)


def mutate_zip(data: bytes, rng: random.Random) -> bytes:
    """An archive with one member rewritten (its JSON mutated, or its bytes), renamed, added or left out;
    or the archive's own bytes mutated."""
    if rng.random() < 0.3:
        return mutate_bytes(data, rng)
    try:
        src = zipfile.ZipFile(io.BytesIO(data))
        members = [(i, src.read(i)) for i in src.infolist()]
    except Exception:  # noqa: BLE001 - a seed that is already damaged: mutate its bytes
        return mutate_bytes(data, rng)
    k = rng.randrange(len(members))
    info, body = members[k]
    r = rng.random()
    if r < 0.1:
        del members[k]
    elif r < 0.2:
        name = rng.choice(("../escape.json", "/abs/path.json", info.filename + "/../../x", "data.pkl", "a" * 300))
        members.append((zipfile.ZipInfo(name), body))
    else:
        try:
            body = json.dumps(mutate_json(json.loads(body), rng)).encode()
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = mutate_bytes(body, rng)
        members[k] = (info, body)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for i, b in members:
            z.writestr(i.filename, b)
    return out.getvalue()


@dataclass
class Format:
    #: the file (or folder) a case starts from (or what makes it), and where the mutated copy goes
    seed: Path | Callable[[], Path]
    #: (the seed's bytes of the file to mutate, rng) -> the mutated bytes
    mutate: Callable[[bytes, random.Random], bytes]
    #: (the case's model path) -> None; raises BadModel/BadInput to refuse
    read: Callable[[Path], object]
    #: the file inside a folder seed that is mutated (a folder seed is copied whole)
    member: str | None = None
    in_child: bool = False


def _json_or_bytes(data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.7:
        try:
            return json.dumps(mutate_json(json.loads(data), rng)).encode()
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
    return mutate_bytes(data, rng)


def _source(reader: str) -> Callable[[Path], object]:
    """``"module:function"`` of ``portability``, run after ``sources.detect`` as a check runs it."""
    module, _, name = reader.partition(":")

    def read(p: Path):
        from importlib import import_module

        from portability.sources import detect

        detect(p)
        return getattr(import_module(f"portability.{module}"), name)(p)

    return read


def _npz_seed() -> Path:
    """One batch of inputs for the MLP fixture, compressed (the reader inflates members too)."""
    import numpy as np

    folder = Path(tempfile.mkdtemp(prefix="portability-fuzz-seed-"))
    np.savez_compressed(folder / "inputs.npz", x=np.random.default_rng(0).random((2, 1, 1, 28, 28), dtype=np.float32))
    return folder / "inputs.npz"


def _read_npz(p: Path):
    from portability.core.inputs import from_file
    from portability.core.model import load_model

    global _MLP
    if _MLP is None:
        _MLP = load_model(FIXTURES / "mlp.onnx")
    return from_file(_MLP, p, {})


_MLP = None

FORMATS: dict[str, Format] = {
    "onnx": Format(FIXTURES / "lenet.onnx", mutate_bytes, _source("core.model:load_model")),
    "onnx-external": Format(FIXTURES / "external", mutate_bytes, _source("core.model:load_model"), member="mlp.onnx"),
    "keras": Format(FIXTURES / "keras_cnn.keras", mutate_zip, _source("sources.keras:vet")),
    "saved_model": Format(FIXTURES / "keras_cnn_savedmodel", mutate_bytes, _source("sources.saved_model:check_folder"), member="saved_model.pb"),
    "tfjs": Format(FIXTURES / "keras_cnn_tfjs", _json_or_bytes, _source("sources.tfjs:load"), member="model.json"),
    "pt2": Format(FIXTURES / "torch_cnn.pt2", mutate_zip, _source("sources.torch_export:vet")),
    "npz": Format(_npz_seed, mutate_zip, _read_npz),
    "tflite": Format(FIXTURES / "keras_cnn.tflite", mutate_bytes, _source("sources.tflite:load"), in_child=True),
}


@dataclass
class Outcome:
    read: int = 0
    refused: int = 0
    crashed: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return self.read + self.refused + self.crashed + len(self.failures)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _case(fmt: Format, name: str, n: int, seed: int, work: Path) -> tuple[Path, Path]:
    """The case's folder and the path the reader gets."""
    if callable(fmt.seed):
        fmt.seed = fmt.seed()
    rng = random.Random(f"{name}:{seed}:{n}")
    case = work / f"case{n}"
    if fmt.seed.is_dir():
        shutil.copytree(fmt.seed, case)
        target = case / fmt.member
        target.write_bytes(fmt.mutate(target.read_bytes(), rng))
        return case, case if fmt.member == "saved_model.pb" else target
    case.mkdir()
    target = case / fmt.seed.name
    target.write_bytes(fmt.mutate(fmt.seed.read_bytes(), rng))
    return case, target


def _judge(exc: BaseException | None) -> str | None:
    """None when the outcome is allowed, else why not."""
    from portability.core.errors import BadInput, BadModel

    if exc is None:
        return None
    if isinstance(exc, (BadModel, BadInput)):
        msg = str(exc)
        if not msg.strip() or "\n" in msg or len(msg) > 1000:
            return f"{type(exc).__name__} not one line: {msg[:200]!r}"
        return None
    if isinstance(exc, _Hang):
        return f"took over {LIMIT_S:g} s"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _warm(fmt: Format, work: Path) -> None:
    """The reader once on its unmutated seed, untimed: what it imports on first use (PyTorch: seconds on a busy
    machine) is imported before any case's time limit runs, never cut halfway by it (a module left half
    imported would fail every later case, and every later test of the process)."""
    warm = work / "warm"
    if fmt.seed.is_dir():
        shutil.copytree(fmt.seed, warm)
        target = warm if fmt.member == "saved_model.pb" else warm / fmt.member
    else:
        warm.mkdir()
        target = warm / fmt.seed.name
        shutil.copyfile(fmt.seed, target)
    try:
        fmt.read(target)
    except Exception:  # noqa: BLE001 - only its imports matter here
        pass
    shutil.rmtree(warm, ignore_errors=True)


def run_format(name: str, cases: int, seed: int = 0) -> Outcome:
    fmt = FORMATS[name]
    if callable(fmt.seed):
        fmt.seed = fmt.seed()
    out = Outcome()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"portability-fuzz-{name}-") as tmp:
        work = Path(tmp) / "cases"
        work.mkdir()
        outside = Path(tmp) / "cwd"  # the readers run from here: a relative write would land in it
        outside.mkdir()
        cwd = os.getcwd()
        os.chdir(outside)
        before = set(os.listdir(tmp))
        if fmt.in_child:
            _run_in_children(name, cases, seed, work, out)
        else:
            _warm(fmt, work)
            old = signal.signal(signal.SIGALRM, _alarm)
            try:
                for n in range(cases):
                    case, target = _case(fmt, name, n, seed, work)
                    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
                    exc = None
                    try:
                        fmt.read(target)
                    except BaseException as e:  # noqa: BLE001 - judged below
                        if isinstance(e, KeyboardInterrupt):
                            raise
                        exc = e
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    why = _judge(exc)
                    if why:
                        out.failures.append(f"{name} case {n}: {why}")
                    elif exc is None:
                        out.read += 1
                    else:
                        out.refused += 1
                    shutil.rmtree(case, ignore_errors=True)
            finally:
                signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
        written = (set(os.listdir(tmp)) - before) | set(os.listdir(outside))
        if written:
            out.failures.append(f"{name}: files written outside the cases' folders: {sorted(written)[:5]}")
    out.seconds = time.monotonic() - t0
    return out


def _run_in_children(name: str, cases: int, seed: int, work: Path, out: Outcome) -> None:
    """Cases in a child process that reports each outcome; a child that dies is a crash of that case,
    and the next child goes on after it."""
    n = 0
    while n < cases:
        cmd = [sys.executable, __file__, "--child", name, "--first", str(n), "--cases", str(cases - n),
               "--seed", str(seed), "--work", str(work)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=work)
        last = n - 1
        for line in p.stdout:
            k, verdict = line.rstrip("\n").split(" ", 1)
            last = int(k)
            if verdict == "read":
                out.read += 1
            elif verdict == "refused":
                out.refused += 1
            else:
                out.failures.append(f"{name} case {k}: {verdict}")
        p.wait()
        if p.returncode != 0 and last + 1 < cases:
            out.crashed += 1  # the case after the last reported one killed the reader
            last += 1
        n = last + 1


def _child(name: str, first: int, cases: int, seed: int, work: Path) -> None:
    fmt = FORMATS[name]
    signal.signal(signal.SIGALRM, _alarm)
    for n in range(first, first + cases):
        case, target = _case(fmt, name, n, seed, work)
        signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
        exc = None
        try:
            fmt.read(target)
        except BaseException as e:  # noqa: BLE001 - judged below
            exc = e
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        why = _judge(exc)
        print(f"{n} {why or ('read' if exc is None else 'refused')}", flush=True)
        shutil.rmtree(case, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per format")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.first, args.cases, args.seed, args.work)
        return 0
    failed = 0
    for name in args.formats.split(","):
        o = run_format(name, args.cases, args.seed)
        failed += len(o.failures)
        print(f"{name:14} {o.cases:>7} cases in {o.seconds:6.1f} s: {o.read} read, {o.refused} refused with one line, "
              f"{o.crashed} native crashes (contained by the isolated loader), {len(o.failures)} failures", flush=True)
        for f in o.failures[:10]:
            print(f"  {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
