"""Reading a user's text file: a regular file only, its encoding recognised.

Files users really have: Excel's "CSV UTF-8" starts with a byte-order mark, "Unicode text"
is UTF-16; both are decoded (to UTF-8 bytes without the mark). A device (``/dev/zero``), a
FIFO or a socket is refused before it is opened, so nothing reads without end or blocks.
"""

from __future__ import annotations

import codecs
import stat
from pathlib import Path

from fedmc.errors import DataError

#: Byte-order marks and their encodings, longest first (UTF-32's LE mark starts as UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


def read_text_bytes(path: Path) -> bytes:
    """The file's text as UTF-8 bytes (a byte-order mark removed, UTF-16/32 decoded).

    Raises
    ------
    DataError
        A missing, unreadable, blank, binary or non-regular file (device, FIFO, socket).
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError("file not found", path) from None
    except OSError as exc:
        raise DataError(f"cannot read file: {exc.strerror or exc}", path) from None
    if stat.S_ISDIR(mode):
        raise DataError("is a folder, not a file", path)
    if not stat.S_ISREG(mode):
        raise DataError("is not a regular file (a device, pipe or socket); give a file", path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read file: {exc.strerror or exc}", path) from exc
    data = _as_utf8(data, path)
    if not data or data.isspace():
        raise DataError("file is empty", path)
    return data


def _as_utf8(data: bytes, path: Path) -> bytes:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            if encoding == "utf-8-sig":
                return data[len(bom):]
            try:
                return data.decode(encoding).encode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"starts with a {encoding.upper()} byte-order mark but is not "
                                f"valid {encoding.upper()} (byte {exc.start})", path) from None
    if b"\0" in data[:4096]:
        raise DataError("holds NUL bytes: a binary file, or UTF-16 without a byte-order mark "
                        "(save it as UTF-8 text)", path)
    return data
