"""Tests of fedmc.data.loaders: every format, every bad input, the duplicates policies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.data.loaders import (
    load_jester,
    load_movielens,
    load_netflix,
    load_ratings_file,
    netflix_files,
)
from fedmc.data.ratings import Ratings
from fedmc.errors import ConfigError, DataError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def triples(r) -> set[tuple[object, object, float]]:
    """The ratings as a set of (raw user, raw item, value)."""
    return {
        (r.user_ids[u].item(), r.item_ids[i].item(), float(v))
        for u, i, v in zip(r.users, r.items, r.values, strict=True)
    }


def assert_error(exc: pytest.ExceptionInfo, path: Path, line: int | None, text: str) -> None:
    err = exc.value
    assert err.path == path
    assert err.line == line
    assert text in str(err)
    if line is not None:
        assert f"{path}:{line}:" in str(err)


# --------------------------------------------------------------------------- formats


def test_ml100k_tab_layout(tmp_path):
    path = write(
        tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t1\n"
    )
    r = load_movielens(path)
    assert triples(r) == {(196, 242, 3.0), (186, 302, 3.0), (22, 377, 1.0)}
    assert r.values.dtype == np.float64
    assert r.users.dtype == np.int32
    assert r.name == "u.data"
    assert list(r.user_ids) == [22, 186, 196]  # dense indices follow sorted raw ids


def test_ml1m_double_colon_layout(tmp_path):
    path = write(
        tmp_path / "ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::0\n"
    )
    r = load_movielens(path)
    assert triples(r) == {(1, 1193, 5.0), (1, 661, 3.0), (2, 1193, 4.0)}
    assert r.shape == (2, 2)


def test_movielens_csv_with_header(tmp_path):
    path = write(
        tmp_path / "ratings.csv",
        "userId,movieId,rating,timestamp\n1,296,5.0,1147880044\n1,306,3.5,1147868817\n2,296,0.5,1\n",
    )
    r = load_movielens(path)
    assert triples(r) == {(1, 296, 5.0), (1, 306, 3.5), (2, 296, 0.5)}


def test_windows_line_endings_and_blank_lines(tmp_path):
    path = tmp_path / "ratings.dat"
    path.write_bytes(b"1::10::5::0\r\n\r\n2::10::4::0\r\n")
    assert triples(load_movielens(path)) == {(1, 10, 5.0), (2, 10, 4.0)}


def test_netflix_combined_data(tmp_path):
    path = write(
        tmp_path / "combined_data_1.txt",
        "1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n2:\n1488844,4,2005-01-01\n",
    )
    r = load_netflix(path)
    assert triples(r) == {(1488844, 1, 3.0), (822109, 1, 5.0), (1488844, 2, 4.0)}
    assert r.name == "netflix"


def test_netflix_folder_of_combined_files(tmp_path):
    write(tmp_path / "combined_data_2.txt", "3:\n7,2,2005-01-01\n")
    write(tmp_path / "combined_data_1.txt", "1:\n7,1,2005-01-01\n")
    assert [p.name for p in netflix_files(tmp_path)] == [
        "combined_data_1.txt",
        "combined_data_2.txt",
    ]
    assert triples(load_netflix(tmp_path)) == {(7, 1, 1.0), (7, 3, 2.0)}


def test_netflix_training_set_one_movie_per_file(tmp_path):
    write(tmp_path / "training_set" / "mv_0000001.txt", "1:\n30878,4,2005-12-26\n5,1,2004-01-01\n")
    write(tmp_path / "training_set" / "mv_0000002.txt", "2:\n30878,5,2005-12-26\n")
    r = load_netflix(tmp_path)
    assert triples(r) == {(30878, 1, 4.0), (5, 1, 1.0), (30878, 2, 5.0)}


def test_netflix_list_of_files(tmp_path):
    a = write(tmp_path / "a.txt", "1:\n7,1,2005-01-01\n")
    b = write(tmp_path / "b.txt", "2:\n7,2,2005-01-01\n")
    assert load_netflix([a, b]).n_ratings == 2


def test_netflix_empty_folder(tmp_path):
    with pytest.raises(DataError, match="combined_data"):
        load_netflix(tmp_path)


def test_jester(tmp_path):
    path = write(
        tmp_path / "jester_ratings.csv", "userId,jokeId,rating\n1,5,0.219\n1,7,-9.281\n2,5,10\n"
    )
    r = load_jester(path)
    assert triples(r) == {(1, 5, 0.219), (1, 7, -9.281), (2, 5, 10.0)}


def test_jester_out_of_range(tmp_path):
    path = write(tmp_path / "jester_ratings.csv", "userId,jokeId,rating\n1,5,0.2\n1,7,-10.5\n")
    with pytest.raises(DataError) as exc:
        load_jester(path)
    assert_error(exc, path, 3, "outside the rating scale [-10, 10]")


@pytest.mark.parametrize(
    "header",
    [
        "user,item,rating",
        "USER_ID,Item_Id,Ratings",
        "userID,movieId,score",
        "UserId,movie_id,value",
        "ts,userid,itemid,rating",
        "user_id:token\titem_id:token\trating:float",
    ],
)
def test_column_names_detected_case_insensitively(tmp_path, header):
    delimiter = "\t" if "\t" in header else ","
    names = header.split(delimiter)
    rows = []
    for user, item, value in ((1, 10, 4.5), (2, 10, 3.0)):
        fields = [user, item, value] if len(names) == 3 else [99, user, item, value]
        rows.append(delimiter.join(map(str, fields)))
    path = write(tmp_path / "r.txt", "\n".join([header, *rows]) + "\n")
    assert triples(load_ratings_file(path)) == {(1, 10, 4.5), (2, 10, 3.0)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,10,4\n2,11,5\n", {(1, 10, 4.0), (2, 11, 5.0)}),
        ("1\t10\t4\t99\n2\t11\t5\t99\n", {(1, 10, 4.0), (2, 11, 5.0)}),
        ("1;10;4\n2;11;5\n", {(1, 10, 4.0), (2, 11, 5.0)}),
        ("1::10::4\n2::11::5\n", {(1, 10, 4.0), (2, 11, 5.0)}),
        ("  1   10 4\n2\t 11    5  \n", {(1, 10, 4.0), (2, 11, 5.0)}),
    ],
    ids=["comma", "tab", "semicolon", "double-colon", "whitespace"],
)
def test_headerless_delimiters_sniffed(tmp_path, text, expected):
    path = write(tmp_path / "r.txt", text)
    assert triples(load_ratings_file(path)) == expected


def test_explicit_column_names(tmp_path):
    path = write(tmp_path / "r.csv", "when,who,what,stars\n0,a,x,1\n0,b,x,2\n")
    r = load_ratings_file(path, columns=("WHO", "what", "stars"))
    assert triples(r) == {("a", "x", 1.0), ("b", "x", 2.0)}


def test_explicit_column_positions_headerless(tmp_path):
    path = write(tmp_path / "r.csv", "4.5,1,10\n3,2,10\n")
    assert triples(load_ratings_file(path, columns=(1, 2, 0))) == {(1, 10, 4.5), (2, 10, 3.0)}


def test_string_ids_and_quotes(tmp_path):
    path = write(tmp_path / "r.csv", 'user,item,rating\n"alice","B0001",5\nbob,B0002,1.5\n')
    r = load_ratings_file(path)
    assert triples(r) == {("alice", "B0001", 5.0), ("bob", "B0002", 1.5)}


def test_parquet(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"UserId": [1, 2, 2], "movieId": [5, 5, 6], "rating": [1, 2, 3]}), path)
    r = load_ratings_file(path)
    assert triples(r) == {(1, 5, 1.0), (2, 5, 2.0), (2, 6, 3.0)}
    assert r.values.dtype == np.float64


def test_parquet_nan_rating_names_row(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"user": [1, 2], "item": [5, 5], "rating": [1.0, float("nan")]}), path)
    with pytest.raises(DataError, match="row 2: rating 'nan' is not a finite number"):
        load_ratings_file(path)


def test_parquet_missing_column(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"user": [1], "item": [5]}), path)
    with pytest.raises(DataError, match="no rating column"):
        load_ratings_file(path)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("name", "text", "line", "message"),
    [
        ("ratings.dat", "1::2::3::0\n1::3::4\n", 2, "expected 4 fields, found 3"),
        ("ratings.dat", "1::2::3::0\n\n1::3::x::0\n", 3, "rating 'x' is not a number"),
        ("ratings.dat", "1::2::3::0\n1::3::nan::0\n", 2, "rating 'nan' is not a finite number"),
        ("ratings.dat", "1::2::3::0\n1::3::inf::0\n", 2, "rating 'inf' is not a finite number"),
        ("ratings.dat", "1::2::3::0\nab::3::4::0\n", 2, "user id 'ab' is not an integer"),
        ("ratings.dat", "1::2::3::0\n1::::4::0\n", 2, "item id is empty"),
        ("ratings.dat", "1::2::3::0\n1:x:2::4::0\n", 2, "expected 4 fields, found 3"),
        ("u.data", "1\t2\t3\t0\n1\t3\t\t0\n", 2, "rating '' is not a number"),
        ("ratings.csv", "userId,movieId,rating,timestamp\n1,2,3,0\n1,2.5,3,0\n", 3, "item id"),
    ],
)
def test_movielens_bad_lines(tmp_path, name, text, line, message):
    path = write(tmp_path / name, text)
    with pytest.raises(DataError) as exc:
        load_movielens(path)
    assert_error(exc, path, line, message)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("user,item,rating\n1,2,3\n1,3\n", 3, "expected 3 fields, found 2"),
        ("user,item,rating\n1,2,3\n1,3,4,5\n", 3, "expected 3 fields, found 4"),
        ("user,item,rating\n1,2,3\n1,3,NaN\n", 3, "not a finite number"),
        ("user,item,rating\n1,2,-inf\n", 2, "not a finite number"),
        ("user,item,rating\n1,2,3\n1,3,good\n", 3, "rating 'good' is not a number"),
        ("user,item,rating\n1,2,3\n,3,4\n", 3, "user id is empty"),
        ("1,2,3\n4,5,6\n7,8,abc\n", 3, "rating 'abc' is not a number"),
        (
            "user,item,rating\n" + "".join(f"{k},1,2\n" for k in range(50_000)) + "9,9,?\n",
            50_002,
            "rating '?' is not a number",
        ),
    ],
    ids=["short", "long", "nan", "inf", "text", "empty-id", "headerless", "late-error"],
)
def test_generic_bad_lines(tmp_path, text, line, message):
    path = write(tmp_path / "r.csv", text)
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    assert_error(exc, path, line, message)


def test_missing_rating_column(tmp_path):
    path = write(tmp_path / "r.csv", "\nuser,item,timestamp\n1,2,3\n")
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    assert_error(exc, path, 2, "no rating column")


def test_unknown_explicit_column(tmp_path):
    path = write(tmp_path / "r.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(DataError) as exc:
        load_ratings_file(path, columns=("a", "b", "stars"))
    assert_error(exc, path, 1, "no rating column")


def test_too_few_columns(tmp_path):
    path = write(tmp_path / "r.csv", "1,2\n3,4\n")
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    assert_error(exc, path, 1, "at least 3 columns")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"], ids=["zero-bytes", "blank"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "r.csv"
    path.write_bytes(content)
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    assert_error(exc, path, None, "file is empty")


def test_header_only(tmp_path):
    path = write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n")
    with pytest.raises(DataError, match="header but no ratings"):
        load_movielens(path)


@pytest.mark.parametrize("loader", [load_ratings_file, load_movielens, load_jester, load_netflix])
def test_missing_file(tmp_path, loader):
    path = tmp_path / "nope.csv"
    with pytest.raises(DataError) as exc:
        loader(path)
    assert_error(exc, path, None, "file not found")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("5,3,2005-01-01\n", 1, "expected a movie line"),
        ("1:\n5,3,2005-01-01\nx1:\n", 3, "movie id 'x1' is not an integer"),
        ("1:\n5,3,2005-01-01\n6,4\n", 3, "expected 3 fields (user,rating,date), found 2"),
        ("1:\n5,3,2005-01-01\n6,four,2005-01-01\n", 3, "rating 'four' is not a number"),
        ("1:\n5,3,2005-01-01\n\n6,nan,2005-01-01\n", 4, "not a finite number"),
        ("1:\nu6,3,2005-01-01\n", 2, "user id 'u6' is not an integer"),
    ],
)
def test_netflix_bad_lines(tmp_path, text, line, message):
    path = write(tmp_path / "combined_data_1.txt", text)
    with pytest.raises(DataError) as exc:
        load_netflix(path)
    assert_error(exc, path, line, message)


def test_unknown_duplicates_policy(tmp_path):
    path = write(tmp_path / "r.csv", "1,2,3\n")
    with pytest.raises(ConfigError, match="duplicates must be one of"):
        load_ratings_file(path, duplicates="first")


# --------------------------------------------------------------------------- duplicates

DUPLICATED = "user,item,rating\n1,10,1\n2,10,2\n1,11,3\n\n2,10,4\n1,10,5\n2,10,3\n"


def test_duplicates_error_names_first_duplicate_and_lines(tmp_path):
    path = write(tmp_path / "r.csv", DUPLICATED)
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    # (2, 10) repeats first (line 6); its lines are 3, 6 and 8
    assert_error(exc, path, 6, "user 2, item 10 is rated more than once (line 3, line 6, line 8)")


def test_duplicates_last_keeps_last_in_file_order(tmp_path):
    path = write(tmp_path / "r.csv", DUPLICATED)
    r = load_ratings_file(path, duplicates="last")
    assert triples(r) == {(1, 11, 3.0), (2, 10, 3.0), (1, 10, 5.0)}
    assert r.n_ratings == 3


def test_duplicates_mean(tmp_path):
    path = write(tmp_path / "r.csv", DUPLICATED)
    r = load_ratings_file(path, duplicates="mean")
    assert triples(r) == {(1, 10, 3.0), (2, 10, 3.0), (1, 11, 3.0)}


def test_duplicates_with_string_ids(tmp_path):
    path = write(tmp_path / "r.csv", "user,item,rating\na,x,1\nb,x,2\na,x,4\n")
    with pytest.raises(DataError) as exc:
        load_ratings_file(path)
    assert_error(exc, path, 4, "user a, item x is rated more than once (line 2, line 4)")
    assert triples(load_ratings_file(path, duplicates="mean")) == {("a", "x", 2.5), ("b", "x", 2.0)}


def test_duplicates_across_netflix_files(tmp_path):
    a = write(tmp_path / "combined_data_1.txt", "1:\n7,1,2005-01-01\n8,2,2005-01-01\n")
    b = write(tmp_path / "combined_data_2.txt", "2:\n7,3,2005-01-01\n1:\n8,5,2005-01-01\n")
    with pytest.raises(DataError) as exc:
        load_netflix(tmp_path)
    assert_error(exc, b, 4, f"user 8, item 1 is rated more than once (line 3, {b}:4)")
    assert a.exists()
    assert triples(load_netflix(tmp_path, duplicates="last")) == {
        (7, 1, 1.0),
        (8, 1, 5.0),
        (7, 2, 3.0),
    }


def test_duplicates_in_parquet_name_rows(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"user": [1, 1], "item": [5, 5], "rating": [1.0, 2.0]}), path)
    with pytest.raises(DataError, match=r"rated more than once \(row 1, row 2\)"):
        load_ratings_file(path)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(-3, 3), st.integers(-20, 20).map(lambda v: v / 4)),
        min_size=1,
        max_size=40,
    )
)
def test_round_trip_and_policies_match_reference(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("prop") / "r.tsv"
    path.write_text("user\titem\trating\n" + "".join(f"{u}\t{i}\t{v}\n" for u, i, v in rows))
    last: dict[tuple[int, int], float] = {}
    groups: dict[tuple[int, int], list[float]] = {}
    for u, i, v in rows:
        last[(u, i)] = v
        groups.setdefault((u, i), []).append(v)
    got_last = load_ratings_file(path, duplicates="last")
    assert triples(got_last) == {(u, i, v) for (u, i), v in last.items()}
    got_mean = load_ratings_file(path, duplicates="mean")
    expected = {(u, i): float(np.mean(vs)) for (u, i), vs in groups.items()}
    assert {(u, i): v for u, i, v in triples(got_mean)} == pytest.approx(expected)
    if len(groups) == len(rows):
        assert triples(load_ratings_file(path)) == {(u, i, v) for u, i, v in rows}
    else:
        with pytest.raises(DataError, match="rated more than once"):
            load_ratings_file(path)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 9), st.integers(-(2**40), 2**40)),
            st.one_of(st.integers(100, 120), st.text("abc", min_size=1, max_size=3)),
            st.integers(1, 5),
        ),
        min_size=1,
        max_size=30,
        unique_by=lambda row: (row[0], row[1]),
    )
)
def test_same_result_as_ratings_from_raw(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("raw") / "r.csv"
    path.write_text("user,item,rating\n" + "".join(f"{u},{i},{v}\n" for u, i, v in rows))
    got = load_ratings_file(path)
    users, items, values = zip(*rows, strict=True)
    items = [str(i) for i in items] if any(isinstance(i, str) for i in items) else items
    expected = Ratings.from_raw(np.array(users), np.array(items), np.array(values, float))
    for field in ("users", "items", "values", "user_ids", "item_ids"):
        np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))
        assert getattr(got, field).dtype.kind == getattr(expected, field).dtype.kind
    assert got.shape == expected.shape


def test_numeric_user_ids_stay_numeric_next_to_string_items(tmp_path):
    path = write(tmp_path / "r.csv", "user,item,rating\n7,B01,5\n12,007,1\n12,7,2\n")
    r = load_ratings_file(path)
    assert r.user_ids.dtype.kind == "i" and list(r.user_ids) == [7, 12]
    assert list(r.item_ids) == ["007", "7", "B01"]  # "007" and "7" are different items
