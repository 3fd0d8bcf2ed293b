"""Cache of parsed rating arrays, so that a second load of a large data set is instant.

Each entry is one uncompressed ``.npz`` file named by a hash of the source files' contents,
the duplicates policy and the parser, so a file replaced by another of the same size and time
is parsed afresh, never served from an earlier parse. Entries are written
atomically (temporary file, then rename); an unreadable or inconsistent entry is ignored and
rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedmc.data.ratings import Ratings
from fedmc.errors import DataError

_FORMAT_VERSION = "2"
_ARRAYS = ("users", "items", "values", "user_ids", "item_ids")


def cache_key(sources: Sequence[Path], duplicates: str, parser: str) -> str:
    """Hash of everything a parse depends on.

    Parameters
    ----------
    sources
        The files parsed; their contents enter the key.
    duplicates
        The duplicates policy.
    parser
        Name of the parser, so that two readers of one file do not share an entry.
    """
    digest = hashlib.sha256(f"{_FORMAT_VERSION}|{parser}|{duplicates}".encode())
    for source in sources:
        with open(source, "rb") as fh:
            digest.update(b"|" + hashlib.file_digest(fh, "blake2b").digest())
    return digest.hexdigest()[:32]


def load_cached(cache_dir: Path, key: str, name: str) -> Ratings | None:
    """The cached :class:`Ratings` under ``key``, or ``None`` when absent or corrupt."""
    path = cache_dir / f"{key}.npz"
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in _ARRAYS}
            meta = {"source": str(archive["source"])}
        return Ratings(
            users=arrays["users"],
            items=arrays["items"],
            values=arrays["values"],
            n_users=len(arrays["user_ids"]),
            n_items=len(arrays["item_ids"]),
            user_ids=arrays["user_ids"],
            item_ids=arrays["item_ids"],
            name=name,
            meta=meta,
        )
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, DataError):
        return None


def save_cached(cache_dir: Path, key: str, ratings: Ratings) -> bool:
    """Store ``ratings`` under ``key`` atomically; ``False`` when the folder is not writable."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key}-", suffix=".tmp", dir=cache_dir)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                users=ratings.users,
                items=ratings.items,
                values=ratings.values,
                user_ids=ratings.ids("user"),
                item_ids=ratings.ids("item"),
                source=np.str_(ratings.meta.get("source", "")),
            )
        os.replace(tmp_name, cache_dir / f"{key}.npz")
    except OSError:
        Path(tmp_name).unlink(missing_ok=True)
        return False
    return True
