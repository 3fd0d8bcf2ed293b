"""``fedmc run``: the output contract, and bad input giving exit 2 with nothing written."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest


def test_run_writes_the_contract(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    out = tmp_path / "out"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 8,
                          "--active", 3, "--rounds", 6, "--eval-every", 2, "--rank", 3,
                          "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["algorithm"] == "fedmc-admm"
    assert config["params"]["rank"] == 3
    assert config["data"]["clients"] == 8 and "numpy" in config["versions"]
    with open(out / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["round"]) for r in rows] == [0, 2, 4, 6]
    for col in ("objective", "train_rmse", "test_rmse", "test_mae", "density_u", "density_v",
                "bytes_up", "bytes_down", "seconds", "test_rmse_z"):
        assert col in rows[0], col
    assert float(rows[-1]["bytes_up"]) > float(rows[0]["bytes_up"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test_rmse"] == pytest.approx(float(rows[-1]["test_rmse"]))
    assert summary["peak_memory_mb"] > 0 and summary["total_seconds"] > 0


def test_algorithm_parameters_reach_the_model(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    out = tmp_path / "o"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 4,
                          "--rounds", 2, "--reg-u", "l1", "--lam", "0.5", "--steps", "per-row",
                          "--biases", "-P", "dual_init=zeros", "--out", out, "-q")
    assert code == 0, err
    params = json.loads((out / "config.json").read_text())["params"]
    assert params["reg_u"] == "l1" and params["lam"] == 0.5 and params["biases"] is True
    assert params["steps"] == "per-row" and params["dual_init"] == "zeros"


BAD_FILES = {
    "malformed.csv": ("user,item,rating\n1,2,3\n1,3\n", ":3"),
    "nan.csv": ("user,item,rating\n1,2,3\n2,3,nan\n", ":3"),
    "huge.csv": ("user,item,rating\n1,2,3\n2,3,1e308\n", ":3: rating 1e308 is too large"),
    "text.csv": ("user,item,rating\n1,2,3\n2,3,good\n", ":3"),
    "dupe.csv": ("user,item,rating\n1,2,3\n2,3,4\n1,2,5\n", "duplicate"),
    "empty.csv": ("", "empty"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_exit_2_and_write_nothing(monkeypatch, capsys, tmp_path, name, invoke):
    text, needle = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", path, "--clients", 1,
                          "--active", 1, "--out", out, "-q")
    assert code == 2
    line = err.strip()
    assert "\n" not in line and needle in line.lower(), line
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rank", "500", "--clients", "5"], "rank"),
        (["--clients", "1000"], "clients"),
        (["--active", "50", "--clients", "10"], "active"),
        (["--clients", "5", "--eval-every", "0"], "eval"),
        (["--algorithm", "nope"], "unknown algorithm"),
        (["--reg-u", "l7"], "--reg-u"),
        (["--beta", "-1"], "beta"),
        (["-P", "nonsense=1"], "nonsense"),
        (["--normalize", "cube"], "normalize"),
        (["--bogus"], "no such option"),  # usage errors: the parser's own exceptions
        (["--rank", "abc"], "'--rank'"),
        (["--seed", "-1"], "seed"),
        (["--partition", "user"], "--clients 5 conflicts with --partition user"),
        # a newcomer's careless input: refused in the flags typed, with what is accepted
        (["--dp-epsilon", "inf", "--dp-clip", "1"], "--dp-epsilon: input should be a finite"),
        (["-P", "ranks=3"], "-p takes rank,"),
        # an algorithm's own parameter named as typed, not as the run's option of that name
        (["--algorithm", "felb", "--binarize", "3", "-P", "dp_clip=none2"],
         "--param dp_clip=...: input should be"),
        (["--duplicates", "lst"], "--duplicates: input should be 'error', 'last' or 'mean'"),
        (["--dp-clip", "1"], "--dp-clip needs --dp-epsilon or --dp-noise"),
        (["--dp-noise", "1"], "user-level dp needs --dp-clip"),
        (["--sampling", "uniform", "--dp-noise", "1", "--dp-clip", "1", "--dp-unit", "client",
          "--rating-scale", "1,5", "--active", "2"],
         "--sampling bernoulli"),
        # accepted and wrong before: an untrained model published, a model of 0.1% of the data
        (["--rounds", "0"], "--rounds 0 trains nothing: fedmc-admm learns in rounds"),
        (["--rounds", "0", "--early-stopping"], "--rounds 0 trains nothing"),
        (["--rounds", "0", "--algorithm", "fedals"], "--rounds 0 trains nothing: fedals"),
        (["--validation-fraction", "0.999"],
         "--validation-fraction: 0.999 would keep back more than half"),
        (["--early-stopping", "--validation-fraction", "0.6"], "give at most 0.5"),
    ],
)
def test_bad_settings_exit_2(monkeypatch, capsys, tmp_path, ratings_csv, args, needle, invoke):
    out = tmp_path / "out"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--rounds", 1,
                          "--clients", 5, *args, "--out", out, "-q")
    assert code == 2, err
    assert needle in err.lower() and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_missing_file_and_unknown_dataset(monkeypatch, capsys, tmp_path, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", tmp_path / "nope.csv", "-q")
    assert code == 2 and "nope.csv" in err
    code, _, err = invoke(monkeypatch, capsys, "run", "--dataset", "ml-7z", "--data-dir",
                          tmp_path, "-q")
    assert code == 2 and "ml-7z" in err


def test_entry_point_installed():
    res = subprocess.run([sys.executable, "-m", "fedmc", "run", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "--algorithm" in res.stdout


def test_boolean_algorithms_run_from_the_command_line(monkeypatch, capsys, tmp_path,
                                                      ratings_csv, invoke):
    out = tmp_path / "felb"
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb-mu", "--dataset",
                          "synthetic-boolean", "--noise", "0.1", "--clients", 4, "--rank", 4,
                          "--rounds", 3, "--out", out, "-q")
    assert code == 0, err
    with open(out / "history.csv") as fh:
        header = fh.readline().strip().split(",")
    for col in ("loss", "rmsd", "f1", "f1_signal", "integrality_gap", "bytes_up", "seconds"):
        assert col in header
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb", "--ratings",
                          ratings_csv, "--binarize", "3.5", "--clients", 4, "--rank", 3,
                          "--rounds", 2, "--out", tmp_path / "f2", "-q")
    assert code == 0, err
    binary = tmp_path / "m.txt"
    binary.write_text("\n".join(" ".join("1" if (i + j) % 3 else "0" for j in range(12))
                                for i in range(40)) + "\n")
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb", "--binary", binary,
                          "--clients", 4, "--rank", 2, "--rounds", 2, "--out", tmp_path / "f3",
                          "-q")
    assert code == 0, err
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "felb", "--ratings",
                          ratings_csv, "--clients", 4, "--out", tmp_path / "f4", "-q")
    assert code == 2 and "binarize" in err


def test_new_rank_runs_on_generic_kernels_then_on_compiled_ones(monkeypatch, capsys, tmp_path,
                                                                 ratings_csv, invoke):
    """A rank whose specialized kernels are not compiled runs on the generic ones (no
    foreground compilation) and says so; the very first run has its generic kernels compiled
    by a child while the data load, and waits for it; once compiled, the same run uses the
    specialized ones and agrees to rounding; compile time is reported apart from training
    time."""
    from fedmc.run import precompile

    class Child:
        def wait(self, timeout: float | None = None) -> None:
            warmed.append("waited")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDMC_KERNELS", "auto")
    monkeypatch.setattr(precompile, "compile_in_background",
                        lambda a, p, one_user: calls.append((a, p)))
    monkeypatch.setattr(precompile, "compile_generic_alongside",
                        lambda a, p, one_user: warmed.append((a, p))
                        or precompile.Warming(a, p, one_user, [Child()], None))
    calls: list = []
    warmed: list = []
    args = ["run", "--ratings", ratings_csv, "--clients", 4, "--rounds", 3, "--rank", 3, "-q"]
    code, _, err = invoke(monkeypatch, capsys, *args, "--out", tmp_path / "a")
    assert code == 0, err
    first = json.loads((tmp_path / "a" / "config.json").read_text())
    assert first["kernels"] == "generic"
    assert calls == [("fedmc-admm", first["params"])]
    assert warmed == [("fedmc-admm", first["params"]), "waited"]
    code, _, err = invoke(monkeypatch, capsys, *args[:-2], 4, "-q", "--out", tmp_path / "g")
    assert code == 0, err  # a new rank on the generic kernels: compiled now, no child
    assert len(warmed) == 2 and len(calls) == 2
    calls.pop()
    precompile.compile_now(*calls[0])
    code, _, err = invoke(monkeypatch, capsys, *args, "--out", tmp_path / "b")
    assert code == 0, err
    assert json.loads((tmp_path / "b" / "config.json").read_text())["kernels"] == "specialized"
    assert len(calls) == 1
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert b["test_rmse"] == pytest.approx(a["test_rmse"], rel=1e-9)
    assert a["compile_seconds"] >= 0 and a["train_seconds"] >= 0


def test_als_runs_centrally_without_clients_and_records_its_defaults(monkeypatch, capsys,
                                                                      tmp_path, ratings_csv,
                                                                      invoke):
    out = tmp_path / "als"  # 40 users: the cross-silo default of 100 clients would not fit
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "als", "--ratings",
                          ratings_csv, "-P", "sweeps=3", "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["partition"] == "user"
    assert {"clients", "partition"} <= set(config["run"]["defaulted"])
    assert json.loads((out / "summary.json").read_text())["round"] == 3


def test_clients_given_under_a_one_user_per_client_protocol_are_the_clients(
        monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    """RFRec's protocol (one client per user) does not replace ``--clients 5``."""
    out = tmp_path / "rfrec"
    code, _, err = invoke(monkeypatch, capsys, "run", "--algorithm", "rfrec", "--ratings",
                          ratings_csv, "--clients", 5, "--rounds", 1, "--out", out, "-q")
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert (config["data"]["clients"], config["data"]["partition"]) == (5, "random")
    assert "clients" not in config["run"]["defaulted"]
    with open(out / "history.csv") as fh:
        assert int(list(csv.DictReader(fh))[-1]["clients"]) == 5


def test_columns_with_spaces_two_fields_and_hostile_headers(monkeypatch, capsys, tmp_path,
                                                            ratings_csv, invoke):
    out = tmp_path / "out"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--columns",
                          "userId, movieId, rating", "--clients", 4, "--rounds", 1, "--out",
                          out, "-q")
    assert code == 0, err
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--columns",
                          "user,item", "-q")
    assert code == 2 and "three comma-separated" in err and "Field required" not in err
    hostile = tmp_path / "hostile.csv"
    hostile.write_text("us\x1b[2Jer,item\x07,rating\n1,2,3\n")
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", hostile, "-q")
    assert code == 2 and "\\x1b" in err
    assert all(c.isprintable() for c in err.rstrip("\n")), repr(err)


def test_bare_command_prints_help_and_version_is_known(monkeypatch, capsys, invoke):
    code, out, _ = invoke(monkeypatch, capsys)
    assert code == 0 and "Usage" in out and "run" in out
    code, out, _ = invoke(monkeypatch, capsys, "--version")
    assert code == 0 and out.startswith("fedmc ")
    code, out, _ = invoke(monkeypatch, capsys, "run", "--help")
    assert code == 0 and "rfrec" in out and "ml-100k" in out and "<bool>" not in out


def test_undefined_metrics_are_json_null(monkeypatch, capsys, tmp_path, ratings_csv, invoke):
    out = tmp_path / "out"
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--clients", 4,
                          "--rounds", 1, "--test-fraction", 0, "--out", out, "-q")
    assert code == 0, err

    def reject(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=reject)
    assert summary["test_rmse"] is None


def test_hints_name_real_flags_and_plot_refuses_a_folder(monkeypatch, capsys, tmp_path, invoke):
    code, _, err = invoke(monkeypatch, capsys, "data", "info", "ml-1m", "--data-dir", tmp_path)
    assert code == 2 and "--download" in err
    _, help_text, _ = invoke(monkeypatch, capsys, "data", "info", "--help")
    assert "--download" in help_text
    code, _, err = invoke(monkeypatch, capsys, "data", "download", "ml-latest-small",
                          "--data-dir", tmp_path, "--quiet")
    assert code == 2 and "fedmc data download ml-latest-small --no-verify" in err
    _, help_text, _ = invoke(monkeypatch, capsys, "data", "download", "--help")
    assert "--no-verify" in help_text
    code, _, err = invoke(monkeypatch, capsys, "plot", tmp_path, "--out", tmp_path)
    assert code == 2 and "is a folder" in err and "Traceback" not in err


def test_presets_cite_papers_not_paths_outside_the_repository():
    from importlib.resources import files

    for preset in files("fedmc.experiments.presets").iterdir():
        if preset.name.endswith(".toml"):
            assert "../" not in preset.read_text(), preset.name


def test_config_json_names_the_clients_that_ran(monkeypatch, capsys, tmp_path, ratings_csv,
                                                 invoke):
    """With one user per client, config.json counts the one-user clients (not the unused
    --clients default)."""
    code, _, err = invoke(monkeypatch, capsys, "run", "--ratings", ratings_csv, "--partition",
                          "user", "--rounds", 1, "--out", tmp_path / "o", "-q")
    assert code == 0, err
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert config["data"]["clients"] == config["data"]["users"] > 1


def test_a_warm_up_child_that_hangs_is_stopped(monkeypatch):
    """A run waits for the child compiling its generic kernels at most WARM_UP_LIMIT seconds
    in all, then stops it and goes on."""
    import subprocess
    import sys

    from fedmc.run import precompile

    monkeypatch.setattr(precompile, "WARM_UP_LIMIT", 0.2)
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(2)]
    precompile.finish_warming(precompile.Warming("fedmc-admm", {}, False, children, None))
    assert all(c.returncode is not None and c.returncode != 0 for c in children)
