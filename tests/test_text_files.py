"""Text files users really have: BOMs, UTF-16, binary files, devices and FIFOs."""

from __future__ import annotations

import os

import pytest

from fedmc.data.loaders import load_ratings_file
from fedmc.errors import DataError

TEXT = "user_id,item_id,rating\n1,2,3\n2,3,4.5\n"


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_marked_encodings_read_like_plain_utf8(tmp_path, encoding):
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    plain.write_text(TEXT, encoding="utf-8")
    data = TEXT.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    marked.write_bytes(data)
    a, b = load_ratings_file(plain), load_ratings_file(marked)
    assert a.values.tolist() == b.values.tolist() == [3.0, 4.5]


def test_utf16_without_a_mark_or_binary_is_named(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(TEXT.encode("utf-16-le"))
    with pytest.raises(DataError, match="NUL bytes.*UTF-16"):
        load_ratings_file(path)


def test_devices_and_fifos_are_refused_without_reading(tmp_path):
    with pytest.raises(DataError, match="not a regular file"):
        load_ratings_file("/dev/zero")
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        load_ratings_file(fifo)  # opening it would block until a writer came
