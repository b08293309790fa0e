"""Typed errors. Each maps to one target status or to one exit code; none needs a traceback to be understood."""
from __future__ import annotations

from portability.core.status import Status


class PortabilityError(Exception):
    """Base class. ``str(err)`` is a complete one-line message for the user."""


class UsageError(PortabilityError):
    """Bad command line, bad model file or bad input data: exit code 2."""


class BadModel(UsageError):
    """The model file is missing, not ONNX, corrupt, invalid, or unsafe to load."""


class BadInput(UsageError):
    """User-supplied inputs/dataset do not match the model's signature."""


class TargetError(PortabilityError):
    """Raised inside a worker; ``status`` is the target status it ends in.

    ``op`` and ``node`` name the failing operator type / node when the runtime or converter reveals them.
    """

    status = Status.RUN_ERROR

    def __init__(self, message: str, *, op: str | None = None, node: str | None = None):
        super().__init__(message)
        self.op = op
        self.node = node


class ConvertError(TargetError):
    status = Status.CONVERT_ERROR


class LoadError(TargetError):
    status = Status.LOAD_ERROR


class RunError(TargetError):
    status = Status.RUN_ERROR


class Unavailable(TargetError):
    """The runtime or converter is not installed/usable here: the target is ``skipped``.

    ``hint`` is the command (or step) that makes it available.
    """

    status = Status.SKIPPED

    def __init__(self, reason: str, hint: str | None = None):
        super().__init__(reason)
        self.hint = hint


class NotApplicable(Unavailable):
    """A conversion with nothing to do for this model (a 4-bit variant of a model with no MatMul): the target is
    ``skipped``. The same model and converter always say so: the artifact cache remembers it, and a later check
    skips the target before its worker starts."""
