"""Files users really have, and hostile ones: encodings, column specs, non-regular files,
overflowing values, control characters; and data folders that are only read."""

from __future__ import annotations

import codecs
import json
import os

import pytest

from tests.test_cli_run import invoke

ROWS = "1,10,5\n2,10,4\n3,11,3\n1,11,2\n2,12,5\n3,12,1\n"
SMALL = ("--clients", "3", "--rank", "1", "--rounds", "1", "-q")


def run(monkeypatch, capsys, tmp_path, path, *extra):
    return invoke(monkeypatch, capsys, "run", "--ratings", path, *SMALL, *extra,
                  "--out", tmp_path / "out")


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_excel_csv_utf8_and_utf16_files_are_read(monkeypatch, capsys, tmp_path, encoding):
    path = tmp_path / "r.csv"
    text = "user_id,item_id,rating\n" + ROWS
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = codecs.BOM_UTF16_BE + data
    path.write_bytes(data)
    code, _, err = run(monkeypatch, capsys, tmp_path, path)
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "config.json").read_text())["data"]["ratings"] == 6


def test_a_binary_file_is_named_as_such(monkeypatch, capsys, tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes("user,item,rating\n".encode("utf-16-le"))  # no byte-order mark
    code, _, err = run(monkeypatch, capsys, tmp_path, path)
    assert code == 2 and "NUL bytes" in err and "UTF-8" in err


def test_columns_with_blanks_and_with_two_names(monkeypatch, capsys, tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user_id,item_id,stars\n" + ROWS)
    code, _, err = run(monkeypatch, capsys, tmp_path, path, "--columns",
                       "user_id, item_id, stars")
    assert code == 0, err
    code, _, err = run(monkeypatch, capsys, tmp_path, path, "--columns", "user_id,item_id")
    assert code == 2 and "--columns takes three" in err and "Field required" not in err


def test_control_characters_are_shown_not_obeyed(monkeypatch, capsys, tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("us\x1b[31mer,item,rating\n" + ROWS)
    code, _, err = run(monkeypatch, capsys, tmp_path, path)
    assert code == 2 and "\x1b" not in err and "\\x1b[31m" in err


def test_pipes_and_devices_are_refused_at_once(monkeypatch, capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        code, _, err = run(monkeypatch, capsys, tmp_path, path)
        assert code == 2 and "not a regular file" in err


def test_overflowing_ratings_are_an_input_error(monkeypatch, capsys, tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,item,rating\n" + ROWS + "3,10,1e308\n")
    code, _, err = run(monkeypatch, capsys, tmp_path, path)
    assert code == 2 and "too large" in err and not (tmp_path / "out").exists()
