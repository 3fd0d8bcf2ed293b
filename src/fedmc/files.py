"""Files a reader never sees half of (a temporary file renamed over the target) and JSON that
every parser reads (no NaN or Infinity)."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, content: str | bytes | Callable[[IO[bytes]], Any],
                 private: bool = False) -> None:
    """Write ``path`` through a temporary file in its folder, renamed over it at the end.

    Parameters
    ----------
    path
        The file to (re)place.
    content
        Text (UTF-8), bytes, or a function that writes to a binary file object.
    private
        Readable by its owner only (mode 0600), else as the umask says.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if not private:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        with os.fdopen(fd, "wb") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content.encode() if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def strict_json(obj: Any) -> str:
    """``obj`` as standard JSON text: NaN and infinities become ``null`` (JSON has neither),
    NumPy scalars plain numbers, paths strings."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False) + "\n"


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    numpy = sys.modules.get("numpy")  # a NumPy scalar needs NumPy loaded: this module does not
    if numpy is not None and isinstance(obj, numpy.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj
