"""Target lives in the foundations (``portability.core.target``); the registry modules import it from here, with
``quantized``, the one way they write a target on a quantized model."""
from portability.core.target import Target, load_class
from portability.metrics.thresholds import DYNINT8, FP16, INT8, Q4  # reduced precision's bounds

__all__ = ["Target", "load_class", "quantized"]

#: a quantization's bounds (the variant's ``quant``)
QUANT_THRESHOLDS = {"dynint8": DYNINT8, "qdq": INT8, "int8": INT8, "fp16": FP16, "q4": Q4}


def quantized(id_: str, runtime: str, quant: str, description: str, **fields) -> Target:
    """A target on the model quantized as ``quant``, judged by that quantization's bounds, and a cross-check: a
    quantized deployment is a choice, reported, failing the run only when named with ``--gate``. ``fields``: the
    target's others (its ``options``, copied: targets share no dict)."""
    fields = {k: dict(v) if isinstance(v, dict) else v for k, v in fields.items()}
    return Target(id=id_, runtime=runtime, variant={"quant": quant}, thresholds=QUANT_THRESHOLDS[quant], gating=False,
                  description=description, **fields)
