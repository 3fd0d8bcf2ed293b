"""Every held-out user's top-N list written to a file (``fedmc recommend RUN --out FILE``),
``similar_items`` and a search folder standing for its best run (issue 39, item 7)."""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict

import numpy as np
import pytest

from fedmc import FedMCADMM, load_federated
from fedmc.model import FactorModel, load_model
from fedmc.run.data import DataSettings, federated_data
from fedmc.run.evaluation import held_out_split
from fedmc.run.top_lists import top_lists


@pytest.fixture
def run_dir(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    out = tmp_path / "run"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--partition",
                          "user", "--rounds", 3, "--rank", 2, "--biases", "--out", out, "-q")
    assert code == 0, err
    return out


def _split(ratings):
    return federated_data(DataSettings(ratings=ratings, partition="user", normalize="none"))[0]


def _read_lists(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    lists = defaultdict(list)
    for row in rows:
        lists[int(row["user"])].append((int(row["rank"]), int(row["item"]), float(row["score"])))
    return list(rows[0]) if rows else [], dict(lists)


def test_every_held_out_user_s_list_equals_one_user_at_a_time(monkeypatch, capsys, tmp_path,
                                                              run_dir, ratings_csv, invoke):
    path = tmp_path / "lists.csv"
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--out", path, "-n", 5)
    assert code == 0, err
    header, lists = _read_lists(path)
    assert header == ["user", "item", "rank", "score"] and list(lists) == sorted(lists)
    model, data = load_model(run_dir), _split(ratings_csv)
    expected = {}
    for t in range(data.n_users):  # the reference: the public model, one raw user at a time
        tr = slice(data.train.indptr[t], data.train.indptr[t + 1])
        if data.test.indptr[t + 1] == data.test.indptr[t]:
            continue
        me = model.fold_in(model.item_ids[data.train.indices[tr]], data.train.values[tr])
        expected[int(data.user_ids[t])] = model.recommend(me, n=5)
    assert sorted(lists) == sorted(expected) and len(expected) > 10
    for user, top in expected.items():
        got = lists[user]  # in the order of the file
        assert [r for r, _, _ in got] == list(range(1, len(top) + 1))
        assert [i for _, i, _ in got] == top.items.tolist(), user
        np.testing.assert_allclose([s for _, _, s in got], top.ratings, rtol=1e-9)


@pytest.mark.parametrize("implicit", [False, True])
def test_the_file_s_ndcg_is_fedmc_evaluate_s(monkeypatch, capsys, tmp_path, run_dir,
                                            ratings_csv, invoke, implicit):
    if implicit:  # interactions (every rating one): the popularity list
        run_dir = tmp_path / "clicks"
        code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "-a",
                              "item-bias", "--implicit", "--partition", "user", "--out",
                              run_dir, "-q")
        assert code == 0, err
    code, _, err = invoke(monkeypatch, capsys, "evaluate", run_dir, "--ranking-k", 10, "-q")
    assert code == 0, err
    reported = json.loads((run_dir / "evaluation.json").read_text())["ndcg@10"]
    path = tmp_path / "lists.csv"
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--out", path)
    assert code == 0, err
    _, lists = _read_lists(path)
    data = _split(ratings_csv)
    ndcgs = []
    for t in range(data.n_users):  # LensKit's NDCG: ranks 1 and 2 undiscounted
        relevant = set(data.item_ids[data.test.indices[data.test.indptr[t]:
                                                       data.test.indptr[t + 1]]].tolist())
        if not relevant:
            continue
        ranked = [item for _, item, _ in sorted(lists[int(data.user_ids[t])])]
        gain = [1 / max(1.0, np.log2(r)) for r in range(1, 11)]
        dcg = sum(g for g, item in zip(gain, ranked, strict=False) if item in relevant)
        ndcgs.append(dcg / sum(gain[:min(len(relevant), 10)]))
    assert 0 < reported == pytest.approx(np.mean(ndcgs), rel=1e-12)


def test_train_and_test_files_give_the_split_s_lists(monkeypatch, capsys, tmp_path, run_dir,
                                                    ratings_csv, invoke):
    data = _split(ratings_csv)
    for name, csr in (("train", data.train), ("test", data.test)):
        with open(tmp_path / f"{name}.csv", "w") as fh:
            fh.write("u;i;r\n")
            for t, j, v in zip(data.user_ids[csr.rows()], data.item_ids[csr.indices],
                               csr.values, strict=True):
                fh.write(f"{t};{j};{v:g}\n")
    for args in ((), ("--train", tmp_path / "train.csv", "--test", tmp_path / "test.csv",
                      "--columns", "u,i,r")):
        code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "-n", 4,
                              "--out", tmp_path / f"lists{len(args)}.csv", *args)
        assert code == 0, err
    split, files = (_read_lists(tmp_path / f"lists{k}.csv")[1] for k in (0, 6))
    assert {u: sorted(v) for u, v in split.items()} == {u: sorted(v) for u, v in files.items()}


def test_blocks_of_users_change_nothing(run_dir, ratings_csv):
    model = load_model(run_dir)
    config = json.loads((run_dir / "config.json").read_text())["data"]
    held = held_out_split(model, config)
    whole, blocks = top_lists(model, held, 7), top_lists(model, held, 7, block=3)
    for column in ("users", "items", "ranks"):
        np.testing.assert_array_equal(getattr(whole, column), getattr(blocks, column))
    np.testing.assert_allclose(whole.scores, blocks.scores, rtol=1e-12)  # BLAS's rounding
    everything = top_lists(model, held, 7, exclude_rated=False, block=5)
    row = {u: t for t, u in enumerate(held.user_ids.tolist())}
    col = {j: k for k, j in enumerate(model.item_ids.tolist())}

    def rated(lists):  # entries that are training items of their user
        tr = held.train
        return sum(col[j] in tr.indices[tr.indptr[row[u]]:tr.indptr[row[u] + 1]]
                   for u, j in zip(lists.users.tolist(), lists.items.tolist(), strict=True))

    assert rated(whole) == 0 < rated(everything) and len(everything) == len(whole)


def test_the_lists_refuse_before_any_work(monkeypatch, capsys, tmp_path, run_dir,
                                          ratings_csv, invoke):
    path = tmp_path / "lists.csv"
    path.write_text("mine\n")
    cases = (
        (("--out", path), "--overwrite"),
        (("--out", tmp_path / "no" / "x.csv"), "--out"),
        (("--out", tmp_path), "--out"),
        (("--out", tmp_path / "a.csv", "--test", ratings_csv), "--train and --test"),
        (("--out", tmp_path / "a.csv", "--format", "csv"), "--format"),
        (("--out", tmp_path / "a.csv", "-n", 0), "-n"),
        (("--train", ratings_csv, "--user", 3), "--train"),
        (("--out", tmp_path / "a.csv", "--user", 3), "one of them"),
        (("--similar", 3, "--include-rated"), "--include-rated"),
    )
    for args, words in cases:
        code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, *args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)
    assert path.read_text() == "mine\n" and not (tmp_path / "a.csv").exists()
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--out", path,
                          "--overwrite")
    assert code == 0 and path.read_text().startswith("user,item,rank,score\n"), err


def _brute_force_similar(V, rank, j, n):
    """Cosines of item ``j``'s factor with every other item's, one at a time, best first."""
    def cosine(a, b):
        na, nb = np.sqrt(a @ a), np.sqrt(b @ b)
        return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))
    scored = [(-cosine(V[j, :rank], V[k, :rank]), k) for k in range(len(V)) if k != j]
    return sorted(scored)[:n]


def test_similar_items_are_the_brute_force_cosines():
    data = load_federated("synthetic", clients=10)
    model = FactorModel.from_estimator(FedMCADMM(rank=3, biases=True, rounds=3).fit(data))
    assert model.layout.width == 5  # the bias columns are there, and left out
    for j in (0, 7, len(model.V) - 1):
        alike = model.similar_items(model.item_ids[j], n=6)
        expected = _brute_force_similar(model.V, 3, j, 6)
        assert alike.items.tolist() == [model.item_ids[k] for _, k in expected]
        np.testing.assert_allclose(alike.similarity, [-c for c, _ in expected], rtol=1e-9)
    assert len(model.similar_items(model.item_ids[0], n=10**6)) == len(model.V) - 1


def test_similar_items_from_the_command_line(monkeypatch, capsys, tmp_path, run_dir,
                                             ratings_csv, invoke):
    code, out, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--similar", 4, "-n", 3,
                            "--format", "json")
    assert code == 0, err
    listed = json.loads(out)
    alike = load_model(run_dir).similar_items(4, n=3)
    assert [r["item"] for r in listed] == alike.items.tolist() and len(listed) == 3
    np.testing.assert_allclose([r["similarity"] for r in listed], alike.similarity, atol=1e-4)
    code, _, err = invoke(monkeypatch, capsys, "recommend", run_dir, "--similar", 999)
    assert code == 2 and "999" in err and len(err.strip().splitlines()) == 1
    bias = tmp_path / "bias"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "-a",
                          "item-bias", "--out", bias, "-q")
    assert code == 0, err
    code, _, err = invoke(monkeypatch, capsys, "recommend", bias, "--similar", 4)
    assert code == 2 and "rank 0" in err and len(err.strip().splitlines()) == 1


def test_a_search_folder_stands_for_its_best_run(monkeypatch, capsys, tmp_path, run_dir,
                                                 invoke):
    search = tmp_path / "search"
    search.mkdir()
    (search / "best.json").write_text("{}\n")
    code, _, err = invoke(monkeypatch, capsys, "evaluate", search, "-q")
    assert code == 2 and str(search / "best") in err and len(err.strip().splitlines()) == 1
    shutil.copytree(run_dir, search / "best")
    code, _, err = invoke(monkeypatch, capsys, "evaluate", search, "-q")
    assert code == 0 and f"using its best run, {search / 'best'}" in err, err
    assert (search / "best" / "evaluation.json").exists()
    assert not (search / "evaluation.json").exists()
    code, out, err = invoke(monkeypatch, capsys, "recommend", search, "--similar", 4, "-n", 2,
                            "--format", "csv")
    assert code == 0 and "best run" in err and out.startswith("rank,item,similarity"), err
