"""Live models from Python (``portability.check(module, example_inputs=...)``): a ``torch.nn.Module`` is
exported with ``torch.export`` and saved as a ``.pt2`` program, a ``keras.Model`` saved as a ``.keras``
file — then checked like those files. Recognised by class, without importing either framework."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from portability.core.errors import UsageError


def kind(obj: Any) -> str | None:
    """``"torch"`` / ``"keras"`` for a live model object, None for anything else (a path)."""
    mods = [c.__module__ for c in type(obj).__mro__]
    if any(m.startswith("torch.nn") for m in mods):
        return "torch"
    if any(m.startswith(("keras", "tf_keras")) for m in mods):
        return "keras"
    return None


def materialize(obj: Any, example_inputs: Any, folder: Path, dynamic_shapes: Any = None) -> Path:
    """Write the live model ``obj`` into ``folder`` in its framework's own format; the file's path.
    ``dynamic_shapes``: a torch module's dims left dynamic (``torch.export.export``'s argument)."""
    k = kind(obj)
    if k == "torch":
        import torch

        if example_inputs is None:
            raise UsageError("a torch.nn.Module needs example_inputs (a tensor or a tuple of tensors) to be exported")
        args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        args = tuple(torch.as_tensor(a) for a in args)
        try:
            program = torch.export.export(obj.eval(), args, dynamic_shapes=dynamic_shapes)
        except Exception as e:
            raise UsageError(f"torch.export.export failed on the module: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}") from None
        path = folder / "model.pt2"
        torch.export.save(program, str(path))
        return path
    if k == "keras":
        path = folder / "model.keras"
        obj.save(str(path))
        return path
    raise UsageError(f"cannot check a {type(obj).__name__}: give a model file or folder, a torch.nn.Module or a keras.Model")
