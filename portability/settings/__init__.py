"""A check's settings: each declared once (``options``: its flag, its configuration key, its keyword in the
Python API, its type and default) and read from ``[tool.portability]`` in ``pyproject.toml`` or
``portability.toml`` (``config``); resolved in one function into the typed options the check reads."""
