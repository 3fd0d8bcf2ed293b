"""Readers of rating files: MovieLens, Netflix Prize, Jester and generic CSV/TSV/Parquet.

Every reader parses with pyarrow on the happy path. When the fast parse fails or finds a bad
value, a slow line-by-line scan names the first offending line, so bad input raises a
:class:`~fedmc.errors.DataError` (with file and 1-based line number) and never yields a partial
result.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import numpy as np

from fedmc._lazy import lazy_import
from fedmc.data.ratings import Ratings
from fedmc.data.text_files import read_text_bytes
from fedmc.errors import ConfigError, DataError

# pyarrow costs a few hundred ms to import; runs that load parsed arrays from the cache never
# touch it, so it is imported on first use.
#: The largest rating magnitude read: squares and sums of squares of ratings stay finite.
MAX_RATING = 1e150
if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
else:
    pa = lazy_import("pyarrow")
    pc = lazy_import("pyarrow.compute")
    pacsv = lazy_import("pyarrow.csv")

Duplicates = Literal["error", "last", "mean"]
DUPLICATE_POLICIES: tuple[str, ...] = ("error", "last", "mean")

USER_COLUMNS = ("user", "user_id", "userid", "users")
ITEM_COLUMNS = (
    "item",
    "item_id",
    "itemid",
    "movieid",
    "movie_id",
    "movie",
    "jokeid",
    "joke_id",
    "joke",
)
RATING_COLUMNS = ("rating", "ratings", "score", "value")
JESTER_RANGE = (-10.0, 10.0)

ColumnRef = str | int
_NO_SEPARATOR = "\x1f"  # a delimiter absent from text files: read whole lines as one field
_WHITESPACE = " "  # marker for "any run of blanks"; the bytes are normalized to single spaces


@dataclass(frozen=True)
class _Format:
    """Layout of a delimited text file of ratings."""

    delimiter: str
    n_fields: int
    skip_lines: int
    fields: tuple[int, int, int]
    int_ids: bool = True


@dataclass(frozen=True)
class _Location:
    """Where a parsed row came from."""

    path: Path
    line: int | None
    row: int

    def label(self, relative_to: Path) -> str:
        """Short text for messages: ``line 7``, ``row 7`` or ``other.txt:7``."""
        if self.line is None:
            return f"row {self.row}"
        if self.path == relative_to:
            return f"line {self.line}"
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class _Raw:
    """Parsed raw columns plus a way back from row indices to source lines."""

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray
    locate: Callable[[np.ndarray], list[_Location]]


# --------------------------------------------------------------------------- public readers


def load_ratings_file(
    path: str | Path,
    columns: tuple[ColumnRef, ColumnRef, ColumnRef] | None = None,
    duplicates: Duplicates = "error",
    *,
    value_range: tuple[float, float] | None = None,
    name: str | None = None,
    allow_empty: bool = False,
) -> Ratings:
    """Read any CSV, TSV, ``::``-separated, whitespace-separated or Parquet file of ratings.

    Parameters
    ----------
    path
        The file. ``.parquet``/``.pq`` files are read as Parquet, anything else as text with a
        sniffed delimiter (``::``, tab, comma, semicolon, else runs of blanks).
    columns
        ``(user, item, rating)`` column names (matched case-insensitively against the header)
        or 0-based positions. By default the header is searched for the usual names (``user``,
        ``user_id``, ``userId``; ``item``, ``item_id``, ``movieId``, ...; ``rating``, ``score``,
        ``value``); a file whose first line is numeric has no header and is read as
        user, item, rating in its first three columns.
    duplicates
        What to do with several ratings of one (user, item) pair: ``"error"`` (default),
        ``"last"`` (keep the last in file order) or ``"mean"`` (average them).
    value_range
        Inclusive ``(low, high)`` bounds every rating must lie in, if given.
    name
        Label of the result; the file name by default.
    allow_empty
        A text file with a header and no ratings gives no ratings instead of an error (a
        federation client whose user has rated nothing yet).

    Returns
    -------
    Ratings
        Dense indices follow the sorted raw ids; values are ``float64``.

    Raises
    ------
    DataError
        Missing or empty file, missing column, malformed line, non-numeric or non-finite
        rating, rating out of range, or duplicate pair under ``duplicates="error"``.
    """
    path = Path(path)
    check_duplicates(duplicates)
    if path.suffix.lower() in (".parquet", ".pq"):
        raw = _read_parquet(path, columns)
    else:
        data = read_text_bytes(path)
        fmt = _sniff(path, data, columns, int_ids=False)
        raw = _read_delimited(path, data, fmt, allow_empty)
    return _finish(raw, duplicates, name or path.name, path, value_range)


def ratings_from_columns(
    users: np.ndarray,
    items: np.ndarray,
    values: np.ndarray,
    duplicates: Duplicates = "error",
    name: str = "ratings",
) -> Ratings:
    """Ratings from three equally long columns in memory (raw user ids, raw item ids, values:
    a DataFrame's, :mod:`fedmc.data.frames`), read as a file's: the same duplicates policy and
    magnitude bound, rows named by their position (from 1) where a file names lines.

    Raises
    ------
    DataError
        A value that is not finite or too large, or a repeated pair under
        ``duplicates="error"``.
    """
    check_duplicates(duplicates)
    bad = np.flatnonzero(~(np.abs(values) <= MAX_RATING))
    if len(bad):
        raise DataError(f"row {bad[0] + 1}: rating {values[bad[0]]} is not a finite number of "
                        f"magnitude at most {MAX_RATING:g}")
    source = Path(name)

    def locate(rows: np.ndarray) -> list[_Location]:
        return [_Location(source, None, int(r) + 1) for r in rows]

    return _finish(_Raw(users, items, values, locate), duplicates, name, source)


def load_movielens(
    path: str | Path,
    duplicates: Duplicates = "error",
    name: str | None = None,
    *,
    value_range: tuple[float, float] | None = None,
) -> Ratings:
    """Read a MovieLens ratings file in its official layout.

    ``*.dat`` files (1M, 10M) are ``UserID::MovieID::Rating::Timestamp``; ``*.csv`` files
    (20M, 25M, 32M, latest-small) have the header ``userId,movieId,rating,timestamp``; any
    other name (``u.data``, ``u1.base``, ...) is the tab-separated 100K layout
    ``user item rating timestamp``.

    Parameters
    ----------
    path
        The ratings file.
    duplicates
        ``"error"``, ``"last"`` or ``"mean"``; see :func:`load_ratings_file`.
    name
        Label of the result; the file name by default.
    value_range
        Inclusive ``(low, high)`` bounds every rating must lie in (the set's documented
        scale), if given.
    """
    path = Path(path)
    check_duplicates(duplicates)
    data = read_text_bytes(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        fmt = _sniff(path, data, None, int_ids=True)
    else:
        fmt = _Format("::" if suffix == ".dat" else "\t", 4, 0, (0, 1, 2))
    return _finish(_read_delimited(path, data, fmt), duplicates, name or path.name, path,
                   value_range)


def load_jester(
    path: str | Path, duplicates: Duplicates = "error", name: str | None = None
) -> Ratings:
    """Read Jester ratings (``user,joke,rating`` with ratings in ``[-10, 10]``).

    A header such as ``userId,jokeId,rating`` is recognized; a headerless file is read as
    user, joke, rating. Ratings outside ``[-10, 10]`` are an error.
    """
    return load_ratings_file(
        path, duplicates=duplicates, value_range=JESTER_RANGE, name=name or Path(path).name
    )


def load_netflix(
    paths: str | Path | Sequence[str | Path],
    duplicates: Duplicates = "error",
    name: str = "netflix",
    *,
    value_range: tuple[float, float] | None = None,
) -> Ratings:
    """Read Netflix Prize ratings.

    Each file is a sequence of blocks: a line ``123:`` starts movie 123 and each following
    line is ``user,rating,date``. This covers both ``combined_data_*.txt`` (many movies per
    file) and ``training_set/mv_*.txt`` (one movie per file).

    Parameters
    ----------
    paths
        A file, a list of files, or a folder holding ``combined_data_*.txt`` or
        ``training_set/mv_*.txt``.
    duplicates
        ``"error"``, ``"last"`` or ``"mean"``; see :func:`load_ratings_file`.
    name
        Label of the result.
    value_range
        Inclusive ``(low, high)`` bounds every rating must lie in (1 to 5 stars), if given.
    """
    check_duplicates(duplicates)
    files = netflix_files(paths)
    parts = [_read_netflix_file(f) for f in files]
    starts = np.cumsum([0] + [len(p.values) for p in parts])

    def locate(rows: np.ndarray) -> list[_Location]:
        which = np.searchsorted(starts, rows, side="right") - 1
        return [
            parts[k].locate(np.array([r - starts[k]]))[0]
            for k, r in zip(which.tolist(), rows.tolist(), strict=True)
        ]

    raw = _Raw(
        users=np.concatenate([p.users for p in parts]),
        items=np.concatenate([p.items for p in parts]),
        values=np.concatenate([p.values for p in parts]),
        locate=locate,
    )
    return _finish(raw, duplicates, name, files[0], value_range)


def netflix_files(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """The Netflix Prize files named by ``paths`` (a file, a list, or a data folder).

    Raises
    ------
    DataError
        When a folder holds neither ``combined_data_*.txt`` nor ``training_set/mv_*.txt``.
    """
    if not isinstance(paths, str | Path):
        files = [Path(p) for p in paths]
        if not files:
            raise DataError("no Netflix Prize files given")
        return files
    path = Path(paths)
    if not path.is_dir():
        return [path]
    files = sorted(path.glob("combined_data_*.txt")) or sorted(path.glob("training_set/mv_*.txt"))
    if not files:
        raise DataError(
            "no combined_data_*.txt or training_set/mv_*.txt files in this folder", path
        )
    return files


# --------------------------------------------------------------------------- text input


def check_duplicates(duplicates: str) -> None:
    """Raise :class:`~fedmc.errors.ConfigError` unless ``duplicates`` is a known policy."""
    if duplicates not in DUPLICATE_POLICIES:
        raise ConfigError(
            f"duplicates must be one of {', '.join(DUPLICATE_POLICIES)}, got {duplicates!r}"
        )


def _first_line(data: bytes) -> tuple[int, str]:
    """The first non-blank line: its 1-based number and its text."""
    match = re.search(rb"\S", data)
    start = data.rfind(b"\n", 0, match.start() if match else 0) + 1
    end = data.find(b"\n", start)
    line = data[start : len(data) if end < 0 else end]
    return data.count(b"\n", 0, start) + 1, line.decode("utf-8", errors="replace").strip()


def _sniff_delimiter(line: str) -> str:
    for delimiter in ("::", "\t", ",", ";"):
        if delimiter in line:
            return delimiter
    return _WHITESPACE


def _split(line: str, delimiter: str) -> list[str]:
    """Fields of one line, stripped of blanks and of surrounding double quotes."""
    parts = line.split() if delimiter == _WHITESPACE else line.split(delimiter)
    return [p.strip().strip('"') for p in parts]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _normalize_name(name: str) -> str:
    """Lower case without a RecBole-style type suffix (``user_id:token`` -> ``user_id``)."""
    return name.strip().strip('"').split(":", 1)[0].strip().lower()


def _sniff(
    path: Path,
    data: bytes,
    columns: tuple[ColumnRef, ColumnRef, ColumnRef] | None,
    int_ids: bool,
) -> _Format:
    """Work out delimiter, header and column positions from the first line."""
    number, first = _first_line(data)
    delimiter = _sniff_delimiter(first)
    tokens = _split(first, delimiter)
    has_header = not all(_is_number(t) for t in tokens[:3]) or (
        columns is not None and isinstance(columns[0], str)
    )
    if has_header:
        fields = _pick_columns([_normalize_name(t) for t in tokens], columns, path, number)
        skip = number
    else:
        if len(tokens) < 3:
            raise DataError(
                f"expected at least 3 columns (user, item, rating), found {len(tokens)}",
                path,
                number,
            )
        fields = _positions(columns or (0, 1, 2), len(tokens), path, number)
        skip = 0
    return _Format(delimiter, len(tokens), skip, fields, int_ids)


def _positions(
    columns: Sequence[ColumnRef], n_fields: int, path: Path, line: int | None
) -> tuple[int, int, int]:
    if not all(isinstance(c, int) for c in columns):
        raise DataError(
            "the file has no header line, so columns must be given as positions", path, line
        )
    for c in columns:
        if not 0 <= int(c) < n_fields:
            raise DataError(
                f"column position {c} is out of range (the file has {n_fields} columns)", path, line
            )
    user, item, rating = (int(c) for c in columns)
    return user, item, rating


def _pick_columns(
    names: list[str],
    columns: tuple[ColumnRef, ColumnRef, ColumnRef] | None,
    path: Path,
    line: int | None,
) -> tuple[int, int, int]:
    """Positions of the user, item and rating columns among the header ``names``."""
    if columns is not None and all(isinstance(c, int) for c in columns):
        return _positions(columns, len(names), path, line)
    wanted = (
        [(str(c).lower(),) for c in columns]
        if columns is not None
        else [USER_COLUMNS, ITEM_COLUMNS, RATING_COLUMNS]
    )
    found: list[int] = []
    for role, candidates in zip(("user", "item", "rating"), wanted, strict=True):
        hits = [k for k, n in enumerate(names) if n in candidates]
        if not hits:
            raise DataError(
                f"no {role} column: expected one of {', '.join(candidates)} in the header "
                f"({', '.join(names)})",
                path,
                line,
            )
        found.append(hits[0])
    if len(set(found)) < 3:
        raise DataError("user, item and rating must be three different columns", path, line)
    user, item, rating = found
    return user, item, rating


def _arrow_text(data: bytes, delimiter: str) -> bytes:
    """The bytes pyarrow reads: blank runs become one space when blanks separate fields.

    Line numbers are kept, so problems found later still point at the right line.
    """
    if delimiter != _WHITESPACE:
        return data
    data = re.sub(rb"[ \t]+", b" ", data)
    return re.sub(rb" ?(\r?\n) ?", rb"\1", data).strip(b" ")


def _read_delimited(path: Path, data: bytes, fmt: _Format, allow_empty: bool = False) -> _Raw:
    """Parse ``data`` with pyarrow; on any problem, scan for the first bad line."""
    text = _arrow_text(data, fmt.delimiter)
    table, failure = None, ""
    for id_type in (pa.int64(),) if fmt.int_ids else (pa.int64(), pa.string()):
        try:
            table = _arrow_csv(text, fmt, id_type)
            break
        except pa.ArrowInvalid as exc:
            failure = str(exc)
    if table is None or not _table_ok(table):
        _raise_first_bad_line(path, text, fmt, failure)
    if table.num_rows == 0 and not allow_empty:
        raise DataError("the file holds a header but no ratings", path)
    users, items, values = (_to_numpy(_as_int_if_exact(col)) for col in table.columns)
    return _Raw(users, items, values, _line_locator(path, text, fmt.skip_lines))


def _as_int_if_exact(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A string id column as ``int64`` when every id is an integer written plainly.

    Ids such as ``007`` stay strings, so that ``007`` and ``7`` remain different ids.
    """
    if not pa.types.is_string(column.type):
        return column
    try:
        numbers = pc.cast(column, pa.int64())
    except pa.ArrowInvalid:
        return column
    return numbers if pc.all(pc.equal(pc.cast(numbers, pa.string()), column)).as_py() else column


def _arrow_csv(text: bytes, fmt: _Format, id_type: pa.DataType) -> pa.Table:
    """Read the user, item and rating columns of ``text`` with ``pyarrow.csv``.

    pyarrow needs a one-character delimiter, so ``a::b`` is read as ``a``, an empty column
    and ``b`` split at ``:``; the empty columns are typed ``null``, which makes any text in
    them (``a:x:b``) a parse error.
    """
    if fmt.delimiter == "::":
        delimiter, n_columns = ":", 2 * fmt.n_fields - 1
        positions = [2 * k for k in fmt.fields]
        empty = list(range(1, n_columns, 2))
    else:
        delimiter, n_columns = fmt.delimiter, fmt.n_fields
        positions, empty = list(fmt.fields), []
    names = [f"f{k}" for k in range(n_columns)]
    keep = [names[k] for k in positions]
    types = {names[k]: pa.null() for k in empty}
    types.update({keep[0]: id_type, keep[1]: id_type, keep[2]: pa.float64()})
    table = pacsv.read_csv(
        _arrow_owned(text),
        read_options=pacsv.ReadOptions(skip_rows=fmt.skip_lines, column_names=names),
        parse_options=pacsv.ParseOptions(delimiter=delimiter),
        convert_options=pacsv.ConvertOptions(
            include_columns=keep + [names[k] for k in empty],
            column_types=types,
            null_values=[""],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    return table.select(keep)


def _arrow_owned(data: bytes) -> pa.Buffer:
    """A copy of ``data`` in memory that Arrow owns.

    ``pa.py_buffer`` would lend Arrow's reader threads a Python object: a thread that drops
    the last reference after the main thread has raised and the interpreter is shutting down
    needs the GIL, is ended by the finalizing interpreter, and takes the process down with
    ``terminate called without an active exception`` (SIGABRT) after a clean exit 2.
    """
    buffer = pa.allocate_buffer(len(data))
    np.frombuffer(buffer, dtype=np.uint8)[:] = np.frombuffer(data, dtype=np.uint8)
    return buffer


def _table_ok(table: pa.Table) -> bool:
    """No missing ids, every rating finite (and not too large)."""
    for column in table.columns[:2]:
        if column.null_count or (
            pa.types.is_string(column.type) and pc.any(pc.equal(column, "")).as_py()
        ):
            return False
    values = table.column(2)
    if values.null_count:
        return False
    return bool((np.abs(values.to_numpy()) <= MAX_RATING).all())  # also NaN and infinities


def _to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False)).astype(str)
    return column.to_numpy()


def _raise_first_bad_line(path: Path, text: bytes, fmt: _Format, failure: str) -> NoReturn:
    """Scan line by line (slow path) and raise a :class:`DataError` for the first bad line."""
    for number, raw_line in enumerate(text.split(b"\n"), start=1):
        if number <= fmt.skip_lines:
            continue
        line = raw_line.decode("utf-8", errors="replace").rstrip("\r")
        if not line:
            continue
        tokens = [t.strip().strip('"') for t in line.split(fmt.delimiter)]
        problem = _check_tokens(tokens, fmt)
        if problem:
            raise DataError(problem, path, number)
    raise DataError(f"cannot parse the file: {failure or 'unknown problem'}", path)


def _check_tokens(tokens: list[str], fmt: _Format) -> str | None:
    """What is wrong with the fields of one data line, or ``None``."""
    if len(tokens) != fmt.n_fields:
        return f"expected {fmt.n_fields} fields, found {len(tokens)}"
    user, item, rating = fmt.fields
    for role, token in (("user", tokens[user]), ("item", tokens[item])):
        if not token:
            return f"{role} id is empty"
        if fmt.int_ids and not re.fullmatch(r"[+-]?\d+", token):
            return f"{role} id {token!r} is not an integer"
    return _check_rating(tokens[rating])


def _check_rating(token: str) -> str | None:
    try:
        value = float(token)
    except ValueError:
        return f"rating {token!r} is not a number"
    if not math.isfinite(value):
        return f"rating {token!r} is not a finite number"
    if abs(value) > MAX_RATING:
        return f"rating {token} is too large (|rating| > {MAX_RATING:g}: its square overflows)"
    return None


def _line_numbers(text: bytes, skip: int) -> np.ndarray:
    """1-based numbers of the non-blank lines after the first ``skip`` lines (vectorized)."""
    buf = np.frombuffer(text, dtype=np.uint8)
    breaks = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(buf)]))
    length = ends - starts
    has_cr = (length > 0) & (buf[np.maximum(ends - 1, 0)] == ord("\r"))
    numbers = np.arange(1, len(starts) + 1)
    return numbers[(length - has_cr > 0) & (numbers > skip)]


def _line_locator(path: Path, text: bytes, skip: int) -> Callable[[np.ndarray], list[_Location]]:
    def locate(rows: np.ndarray) -> list[_Location]:
        numbers = _line_numbers(text, skip)
        return [_Location(path, int(numbers[r]), int(r) + 1) for r in rows.tolist()]

    return locate


# --------------------------------------------------------------------------- Netflix


def _read_netflix_file(path: Path) -> _Raw:
    """Parse one Netflix Prize file with pyarrow compute kernels."""
    data = read_text_bytes(path)
    try:
        lines = pacsv.read_csv(
            _arrow_owned(data),
            read_options=pacsv.ReadOptions(column_names=["line"]),
            parse_options=pacsv.ParseOptions(delimiter=_NO_SEPARATOR, quote_char=False),
            convert_options=pacsv.ConvertOptions(
                column_types={"line": pa.string()}, strings_can_be_null=False
            ),
        ).column(0)
        is_movie = np.asarray(pc.ends_with(lines, ":"))
        if not is_movie[0]:
            raise ValueError("no movie line first")
        movies = pc.cast(
            pc.utf8_slice_codeunits(lines.filter(pa.array(is_movie)), 0, -1), pa.int64()
        ).to_numpy()
        rating_rows = np.flatnonzero(~is_movie)
        fields = pc.split_pattern(lines.take(pa.array(rating_rows)), ",")
        if len(rating_rows) and not pc.all(pc.equal(pc.list_value_length(fields), 3)).as_py():
            raise ValueError("wrong field count")
        flat = pc.list_flatten(fields)
        users = pc.cast(flat.take(pa.array(np.arange(0, len(flat), 3))), pa.int64()).to_numpy()
        values = pc.cast(flat.take(pa.array(np.arange(1, len(flat), 3))), pa.float64())
        values = values.to_numpy()
        if not np.isfinite(values).all():
            raise ValueError("non-finite rating")
    except (pa.ArrowInvalid, ValueError) as exc:
        _raise_first_bad_netflix_line(path, data, str(exc))
    items = movies[np.cumsum(is_movie)[rating_rows] - 1]

    def locate(rows: np.ndarray) -> list[_Location]:
        numbers = _line_numbers(data, 0)
        return [_Location(path, int(numbers[rating_rows[r]]), int(r) + 1) for r in rows.tolist()]

    return _Raw(users, items, values, locate)


def _raise_first_bad_netflix_line(path: Path, data: bytes, failure: str) -> NoReturn:
    seen_movie = False
    for number, raw_line in enumerate(data.split(b"\n"), start=1):
        line = raw_line.decode("utf-8", errors="replace").strip()
        if not line:
            continue
        if line.endswith(":"):
            if not re.fullmatch(r"\d+", line[:-1]):
                raise DataError(f"movie id {line[:-1]!r} is not an integer", path, number)
            seen_movie = True
            continue
        if not seen_movie:
            raise DataError(f"expected a movie line such as '1:', found {line!r}", path, number)
        tokens = [t.strip() for t in line.split(",")]
        problem: str | None
        if len(tokens) != 3:
            problem = f"expected 3 fields (user,rating,date), found {len(tokens)}"
        elif not re.fullmatch(r"\d+", tokens[0]):
            problem = f"user id {tokens[0]!r} is not an integer"
        else:
            problem = _check_rating(tokens[1])
        if problem:
            raise DataError(problem, path, number)
    raise DataError(f"cannot parse the file: {failure}", path)


# --------------------------------------------------------------------------- Parquet


def _read_parquet(
    path: Path,
    columns: tuple[ColumnRef, ColumnRef, ColumnRef] | None,
) -> _Raw:
    """Read three columns of a Parquet file; rows (not lines) locate problems."""
    import pyarrow.parquet as pq

    if not path.exists():
        raise DataError("file not found", path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"cannot read Parquet file: {exc}", path) from exc
    if table.num_rows == 0:
        raise DataError("file is empty", path)
    names = [_normalize_name(n) for n in table.column_names]
    fields = _pick_columns(names, columns, path, None)
    user, item, rating = (table.column(k) for k in fields)
    for role, column in (("user", user), ("item", item)):
        if column.null_count:
            row = int(np.flatnonzero(np.asarray(column.is_null()))[0]) + 1
            raise DataError(f"row {row}: {role} id is missing", path)
    try:
        values = pc.cast(rating, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"the rating column is not numeric: {exc}", path) from exc
    bad = ~(np.abs(values) <= MAX_RATING)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        problem = _check_rating(str(values[row])) or "rating is missing"
        raise DataError(f"row {row + 1}: {problem}", path)

    def locate(rows: np.ndarray) -> list[_Location]:
        return [_Location(path, None, int(r) + 1) for r in rows.tolist()]

    return _Raw(_to_numpy(user), _to_numpy(item), values, locate)


# --------------------------------------------------------------------------- duplicates


def _finish(raw: _Raw, duplicates: str, name: str, source: Path,
            value_range: tuple[float, float] | None = None) -> Ratings:
    """Check every rating against ``value_range`` (:func:`_check_range`), apply the duplicates
    policy and build the :class:`Ratings`.

    The result equals ``Ratings.from_raw`` of the kept rows (dense indices follow the sorted
    raw ids); integer ids in a compact range are encoded with a lookup table instead of a
    sort, which matters for tens of millions of ratings.
    """
    _check_range(raw, value_range)
    user_ids, users = _encode(raw.users)
    item_ids, items = _encode(raw.items)
    keep, values = _resolve_duplicates(raw, users, items, len(item_ids), duplicates)
    if keep is not None:
        users, items = users[keep], items[keep]
    return Ratings(
        users=users.astype(np.int32),
        items=items.astype(np.int32),
        values=values,
        n_users=len(user_ids),
        n_items=len(item_ids),
        user_ids=user_ids,
        item_ids=item_ids,
        name=name,
        meta={"source": str(source)},
    )


def _check_range(raw: _Raw, value_range: tuple[float, float] | None) -> None:
    """Every rating of ``raw`` lies in the inclusive ``value_range`` (None: any), else a
    :class:`DataError` naming the first one outside it by file and line (a Parquet file's:
    by row)."""
    if value_range is None:
        return
    low, high = value_range
    outside = np.flatnonzero((raw.values < low) | (raw.values > high))
    if not len(outside):
        return
    where = raw.locate(outside[:1])[0]
    row = f"row {where.row}: " if where.line is None else ""
    raise DataError(f"{row}rating {raw.values[outside[0]]:g} lies outside the rating scale "
                    f"[{low:g}, {high:g}]", where.path, where.line)


def _encode(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ids and each entry's position among them, as ``np.unique`` gives."""
    if raw.dtype.kind in "iu" and len(raw):
        low, high = int(raw.min()), int(raw.max())
        if high - low <= 4 * len(raw) + 1024:
            shifted = raw - low
            present = np.zeros(high - low + 1, dtype=bool)
            present[shifted] = True
            rank = np.cumsum(present, dtype=np.int64) - 1
            return (np.flatnonzero(present) + low).astype(raw.dtype), rank[shifted]
    ids, codes = np.unique(raw, return_inverse=True)
    return ids, codes.ravel()


def _resolve_duplicates(
    raw: _Raw, users: np.ndarray, items: np.ndarray, n_items: int, duplicates: str
) -> tuple[np.ndarray | None, np.ndarray]:
    """Rows to keep (``None``: all) and their values after the duplicates policy.

    ``users`` and ``items`` are the dense codes of ``raw``'s rows. Kept rows stay in file
    order; under ``"mean"`` a pair sits where it first occurs.
    """
    keys = users.astype(np.int64) * n_items + items
    sorted_keys = np.sort(keys)
    if not (sorted_keys[1:] == sorted_keys[:-1]).any():
        return None, raw.values
    order = np.argsort(keys, kind="stable")
    repeat = sorted_keys[1:] == sorted_keys[:-1]
    if duplicates == "error":
        first_repeat = int(order[1:][repeat].min())
        rows = np.flatnonzero(keys == keys[first_repeat])
        where = raw.locate(rows)
        raise DataError(
            f"user {raw.users[rows[0]]!s}, item {raw.items[rows[0]]!s} is rated more than once "
            f"({', '.join(loc.label(where[0].path) for loc in where)}); pass `duplicates='last'` "
            "or 'mean' to resolve",
            where[1].path,
            where[1].line,
        )
    starts_group = np.concatenate(([True], ~repeat))
    if duplicates == "last":
        keep = np.sort(order[np.concatenate((~repeat, [True]))])
        return keep, raw.values[keep]
    group = np.cumsum(starts_group) - 1
    means = np.bincount(group, weights=raw.values[order]) / np.bincount(group)
    first = order[starts_group]
    by_position = np.argsort(first)
    return first[by_position], means[by_position]
