"""``python -m portability.sources KIND PATH``: read one source in this (child) process; one JSON line out."""
from __future__ import annotations

import importlib
import json
import sys

from portability.core.errors import BadModel
from portability.sources import SOURCES, first_line


def main(kind: str, path: str, shapes: list[str] | None = None) -> None:
    try:
        module = importlib.import_module(SOURCES[kind])
        info = module.load(path, shapes) if shapes is not None else module.load(path)
        print(json.dumps(dict(info.to_dict(), index_bounds=info.index_bounds, format=info.format,
                              framework=info.framework)))
    except BadModel as e:
        print(json.dumps({"error": str(e)}))
    except Exception as e:  # a framework's own refusal: one line, naming the file
        print(json.dumps({"error": f"{path}: cannot be read as a {kind} model ({type(e).__name__}: {first_line(e)})"}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[2] == "--shapes":  # KIND --shapes JSON PATH
        main(sys.argv[1], sys.argv[4], json.loads(sys.argv[3]))
    else:
        main(sys.argv[1], sys.argv[2])
