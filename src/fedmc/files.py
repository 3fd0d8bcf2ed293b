"""Writing files so that a reader never sees half of one: a temporary file in the same
folder, renamed over the target; and JSON that every parser reads (no NaN or Infinity)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_atomically(path: Path, write_to: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through a temporary file in its folder (``write_to`` fills it), renamed
    over ``path`` at the end; the mode is as by the umask. Nothing is left on failure."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            write_to(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path`` atomically (:func:`replace_atomically`)."""
    data = text.encode() if isinstance(text, str) else text
    replace_atomically(path, lambda fh: fh.write(data))


def plain(obj: Any) -> Any:
    """``obj`` with NumPy scalars and arrays as Python values, paths as text, and every
    non-finite float as None (JSON has no NaN or Infinity: an undefined metric is null)."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, np.generic):
        return plain(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def strict_json(obj: Any) -> str:
    """``obj`` as indented JSON that any parser accepts (:func:`plain`), with a newline."""
    return json.dumps(plain(obj), indent=2, allow_nan=False, default=str) + "\n"


__all__ = ["plain", "replace_atomically", "strict_json", "write_atomic"]
