"""Download, verify and unpack a zip archive into a data folder, atomically.

The archive is streamed into a temporary file inside the target folder while its digest is
computed, checked against the pinned checksum, extracted into a temporary folder next to the
target, and only then renamed into place. On any failure the temporary files are removed, so
nothing half-written is ever left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from fedmc.errors import DataError

_CHUNK = 1 << 20
_TIMEOUT_S = 60.0


def download_and_extract(
    url: str,
    checksum: str | None,
    dest_dir: Path,
    folder: str,
    required: Sequence[str] = (),
    progress: bool = False,
) -> Path:
    """Fetch the zip at ``url`` and place its top-level ``folder`` at ``dest_dir / folder``.

    Parameters
    ----------
    url
        Address of a zip archive.
    checksum
        ``"md5:<hex>"`` or ``"sha256:<hex>"`` the archive must match, or ``None`` to skip
        verification (the caller decides whether that is allowed).
    dest_dir
        Data folder; created when missing.
    folder
        The folder inside the archive to install (for example ``ml-10M100K``).
    required
        Glob patterns relative to ``folder``; unless empty, one must match a file before the
        folder is installed.
    progress
        Show a Rich progress bar on standard error.

    Returns
    -------
    Path
        ``dest_dir / folder``.

    Raises
    ------
    DataError
        Network failure, truncated transfer, checksum mismatch, bad archive, or an archive
        without ``folder`` or the ``required`` files. Nothing is left in ``dest_dir`` then.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / folder
    with _temporary_file(dest_dir) as archive:
        digest = _fetch(url, archive, checksum, progress)
        if checksum is not None:
            _verify(url, checksum, digest)
        with tempfile.TemporaryDirectory(prefix=".fedmc-extract-", dir=dest_dir) as tmp:
            unpacked = _extract(archive, Path(tmp), folder, url)
            if required and not any(any(unpacked.glob(p)) for p in required):
                raise DataError(f"archive from {url} holds no {folder}/{' or '.join(required)}")
            if not target.exists():
                os.rename(unpacked, target)
    return target


@contextlib.contextmanager
def _temporary_file(directory: Path) -> Iterator[Path]:
    fd, name = tempfile.mkstemp(prefix=".fedmc-download-", suffix=".part", dir=directory)
    os.close(fd)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _new_hash(checksum: str | None) -> hashlib._Hash:
    algorithm = "sha256" if checksum is None else checksum.split(":", 1)[0]
    if algorithm not in ("md5", "sha256"):
        raise DataError(f"unsupported checksum {checksum!r}: use md5:<hex> or sha256:<hex>")
    return hashlib.new(algorithm)


def _fetch(url: str, dest: Path, checksum: str | None, progress: bool) -> str:
    """Stream ``url`` into ``dest``; return the hex digest. Short transfers are errors."""
    digest = _new_hash(checksum)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, dest.open("wb") as out:
            length = response.headers.get("Content-Length")
            expected = int(length) if length and length.isdigit() else None
            received = 0
            with _progress_bar(progress, url, expected) as advance:
                while chunk := response.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    advance(len(chunk))
    except urllib.error.HTTPError as exc:
        raise DataError(f"download of {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise DataError(f"download of {url} failed: {exc}") from exc
    if expected is not None and received != expected:
        raise DataError(
            f"download of {url} was cut short: received {received:,} of {expected:,} bytes"
        )
    return digest.hexdigest()


@contextlib.contextmanager
def _progress_bar(show: bool, url: str, total: int | None) -> Iterator:
    """Yield a callback advancing a Rich progress bar by a number of bytes (no-op if hidden)."""
    if not show:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(url.rsplit("/", 1)[-1], total=total)
        yield lambda n: bar.advance(task, n)


def _verify(url: str, checksum: str, digest: str) -> None:
    algorithm, expected = checksum.split(":", 1)
    if digest != expected.lower():
        raise DataError(
            f"checksum mismatch for {url}: expected {algorithm} {expected}, got {digest}; "
            "the download is corrupt or the file changed upstream"
        )


def _extract(archive: Path, tmp: Path, folder: str, url: str) -> Path:
    """Unpack ``archive`` into ``tmp`` (refusing paths that escape it); return ``tmp/folder``."""
    root = tmp.resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if not (root / member).resolve().is_relative_to(root):
                    raise DataError(f"archive from {url} holds an unsafe path {member!r}")
            zf.extractall(root)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"archive from {url} cannot be unpacked: {exc}") from exc
    unpacked = root / folder
    if not unpacked.is_dir():
        raise DataError(f"archive from {url} has no top-level folder {folder!r}")
    return unpacked
