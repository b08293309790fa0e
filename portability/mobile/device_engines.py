"""The engines that run a model on a device: the one device-side code of each mobile runtime.

Needs Python 3.9+ and numpy; each engine imports its own runtime when it is made. It runs where no
portability is installed: beside a mobile bundle's ``run.py`` (``bundle/mobile.py`` copies it there) and
beside ``arm64_server.py`` in the emulated ARM64 Python. A runtime class names its engine here
(``device_engine``); adding one is a class below and its entry in ``ENGINES``.

An engine: ``Engine(model, threads, inputs, outputs, kernels=None, fmt=None)``, ``model`` the file's bytes
or its path, ``fmt`` its format (``tflite``, ``ort``, ``onnx``), ``inputs`` / ``outputs`` the tensors in the
order ``run`` takes and gives them, named as the engine names them (``handle``: the field of a bundle
manifest's tensor entries that holds that name); ``run(arrays) -> arrays``; ``info`` (runtime and version,
threads...); ``version``.
"""
import time

_KERNELS = {"xnnpack": "AUTO", "builtin": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "reference": "BUILTIN_REF"}
_VERSIONS = {}


class Missing(Exception):
    """The engine's runtime is not installed here."""


def dist_version(dist):
    """A distribution's version, looked up once per process ("?" where it cannot be told)."""
    if dist not in _VERSIONS:
        try:
            from importlib.metadata import version

            _VERSIONS[dist] = version(dist)
        except Exception:  # noqa: BLE001 - a version is information only
            _VERSIONS[dist] = "?"
    return _VERSIONS[dist]


def timed_runs(run, arrays, warmup, runs):
    """Milliseconds of each of ``runs`` calls ``run(arrays)``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run(arrays)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(arrays)
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def _litert():
    """LiteRT's interpreter module and its distribution's name."""
    try:
        from ai_edge_litert import interpreter
        return interpreter, "ai-edge-litert"
    except ImportError:
        try:
            from tflite_runtime import interpreter
            return interpreter, "tflite-runtime"
        except ImportError:
            raise Missing("LiteRT is not installed (pip install ai-edge-litert)") from None


class Litert:
    """LiteRT (TFLite) on a ``.tflite`` file: tensors by interpreter index; ``kernels`` xnnpack|builtin|reference."""

    handle = "index"

    def __init__(self, model, threads, inputs, outputs, kernels=None, fmt=None):
        lite, dist = _litert()
        kernels = kernels or "xnnpack"
        self.model = model  # bytes: the interpreter reads its model from this buffer, kept alive with it
        source = {"model_content": model} if isinstance(model, bytes) else {"model_path": str(model)}
        self.it = lite.Interpreter(num_threads=threads, experimental_op_resolver_type=getattr(
            lite.OpResolverType, _KERNELS[kernels]), **source)
        self.it.allocate_tensors()
        self.ins, self.outs = list(inputs), list(outputs)
        self.shapes = {i: list(self.it.get_tensor(i).shape) for i in self.ins}
        self.version = f"{dist} {dist_version(dist)}"
        self.info = {"runtime": self.version, "threads": threads, "kernels": kernels}

    @staticmethod
    def preload():
        """What a fork server imports and looks up once, before it forks."""
        _, dist = _litert()
        dist_version(dist)

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


#: a one-Relu ONNX model (66 bytes, onnx.helper: opset 13, float [1] -> [1]): one session on it before a
#: server forks does ONNX Runtime's first-session set-up (environment, kernel registries) once for all children
_WARM_ONNX = "CAgSADo2CgwKAXgSAXkiBFJlbHUSBHdhcm1aDwoBeBIKCggIARIECgIIAWIPCgF5EgoKCAgBEgQKAggBQgQKABAN"


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise Missing("ONNX Runtime is not installed (pip install onnxruntime)") from None
    return onnxruntime


class Ort:
    """ONNX Runtime on the CPU EP, on a ``.ort`` (ORT Mobile's format) or ``.onnx`` model: tensors by name
    (none given: the session's own, in order)."""

    handle = "name"

    def __init__(self, model, threads, inputs, outputs, kernels=None, fmt=None):
        ort = _onnxruntime()
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        if fmt == "ort":
            so.add_session_config_entry("session.load_model_format", "ORT")
        self.sess = ort.InferenceSession(model if isinstance(model, bytes) else str(model), sess_options=so,
                                         providers=["CPUExecutionProvider"])
        self.ins = list(inputs) or [i.name for i in self.sess.get_inputs()]
        self.outs = list(outputs) or [o.name for o in self.sess.get_outputs()]
        self.version = "onnxruntime " + ort.__version__
        self.info = {"runtime": self.version, "threads": threads}

    @staticmethod
    def preload():
        """ONNX Runtime's first session made once (no thread pool: nothing but this thread at a fork)."""
        import base64
        import traceback

        ort = _onnxruntime()
        try:
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            so.log_severity_level = 3
            ort.InferenceSession(base64.b64decode(_WARM_ONNX), sess_options=so, providers=["CPUExecutionProvider"])
        except Exception:  # only a head start: each child sets up what it needs anyway
            traceback.print_exc()

    def run(self, arrays):
        return self.sess.run(self.outs, dict(zip(self.ins, arrays)))


#: every device engine, by the name a runtime class gives it (``device_engine``)
ENGINES = {"litert": Litert, "ort": Ort}
