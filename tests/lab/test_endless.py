"""The endless setting: the CCC-style stream, the severity calibration, the command."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from realm_lab.bench import _endless as endless
from realm_lab.bench import calibrate
from realm_lab.cli import main
from realm_lab.data import CCCSettings, build_ccc_stream, domain_walk
from realm_tools.data import DigitsShift, load_digits


@pytest.fixture(scope="module")
def digits_shift():
    return DigitsShift(load_digits())


def test_the_walk_visits_every_corruption_and_never_repeats_one_at_once():
    rng = np.random.default_rng(0)
    walk = domain_walk(["a", "b", "c"], 300, rng)
    assert len(walk) == 300 and set(walk) == {"a", "b", "c"}
    assert all(x != y for x, y in itertools.pairwise(walk))
    with pytest.raises(ValueError, match="at least 2 corruptions"):
        domain_walk(["a"], 3, rng)


def test_the_stream_moves_from_each_domain_to_the_next(digits_shift):
    severities = {"fog": 3, "pixelate": 5, "gaussian_blur": 4}
    settings = CCCSettings(length=4000, transition=1000, pool_seeds=1)
    stream = build_ccc_stream(digits_shift, severities, seed=3, settings=settings)
    again = build_ccc_stream(digits_shift, severities, seed=3, settings=settings)
    assert len(stream) == 4000 and stream.setting == "ccc"
    assert np.array_equal(stream.index, again.index)  # one seed, one stream
    part = stream.index[:, 0]
    names = list(severities)
    for leg, (start, name) in enumerate(stream.segments):
        here, there = (names.index(n) for n in name.split("→"))
        assert start == leg * 1000 and here != there
        early, late = part[start : start + 100], part[start + 900 : start + 1000]
        # Early in a transition most samples are the old domain's, late most the new one's.
        assert (early == here).mean() > 0.8 and (late == there).mean() > 0.8
        assert set(part[start : start + 1000]) <= {here, there}
    for i in (0, 1500, 3999):  # each label is its sample's own
        k, row = stream.index[i]
        x, y = digits_shift.stream(names[k], severities[names[k]], seed=3 * 1000 + k * 10)
        assert stream.labels[i] == y[row] and np.array_equal(stream.sample(i), x[row : row + 1])
    with pytest.raises(ValueError, match="unknown corruptions \\['snow'\\]"):
        build_ccc_stream(digits_shift, {"snow": 3, "fog": 2}, seed=0)


def test_calibration_picks_each_corruptions_severity_nearest_the_target(digits_shift):
    def predict(x: np.ndarray) -> np.ndarray:  # a model that sees only the mean brightness
        brightness = x.reshape(len(x), -1).mean(1)
        return np.stack([-brightness, brightness], axis=1)

    corruptions = ["fog", "contrast", "pixelate"]
    cal = calibrate(predict, digits_shift, corruptions, target=50.0, limit=60)
    assert set(cal.accuracy) == set(corruptions) and all(len(v) == 5 for v in cal.accuracy.values())
    for name, severity in cal.chosen.items():
        nearest = min(abs(a - 50.0) for a in cal.accuracy[name].values())
        assert abs(cal.accuracy[name][severity] - 50.0) == nearest <= 10
    assert sorted([*cal.chosen, *cal.left_out]) == sorted(corruptions)
    median = calibrate(predict, digits_shift, corruptions, limit=60)
    assert median.target == float(np.median([median.accuracy[c][5] for c in corruptions]))


@pytest.mark.slow
def test_a_kept_row_is_taken_back_only_for_the_configuration_it_ran(tmp_path, capsys, monkeypatch):
    argv = [
        "bench", "quality", "--settings", "ccc", "--length", "300", "--transition", "100",
        "--window", "100", "--seeds", "4", "--out", str(tmp_path), "--methods", "eta",
    ]  # fmt: skip
    assert main(argv) == 0
    assert "(kept)" not in capsys.readouterr().out
    first = json.loads((tmp_path / "ccc.json").read_text())["rows"][0]
    # ETA's defaults changed since (here its rate): the kept row is not ETA's any more.
    configs = endless._configs
    monkeypatch.setattr(
        endless,
        "_configs",
        lambda *a: {k: dataclasses.replace(c, lr=c.lr / 2) for k, c in configs(*a).items()},
    )
    assert main(argv) == 0
    assert "eta: " in (out := capsys.readouterr().out) and "(kept)" not in out
    halved = json.loads((tmp_path / "ccc.json").read_text())["rows"][0]
    assert not halved["kept"] and halved["windows"] != first["windows"]
    monkeypatch.undo()
    # EATA runs here too, exported with its Fisher information on the clean images.
    assert main([*argv[:-1], "eata"]) == 0
    row = json.loads((tmp_path / "ccc.json").read_text())["rows"][0]
    assert row["method"] == "eata" and not row["kept"] and row["updates"] > 0


def test_the_command_runs_every_row_through_the_runtime_and_writes_the_plot(tmp_path, capsys):
    argv = [
        "bench", "quality", "--settings", "ccc", "--length", "600", "--transition", "150",
        "--window", "200", "--jobs", "2", "--seeds", "4", "--out", str(tmp_path),
    ]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((tmp_path / "ccc.json").read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert list(rows) == ["none", "realm-guarded", "eta", "rdumb"]
    assert all(r["samples"] == 600 and len(r["windows"]) == 3 for r in rows.values())
    assert rows["none"]["updates"] == 0 and rows["rdumb"]["resets"] == 0  # 600 < 1000
    assert rows["realm-guarded"]["updates"] > 0 and rows["eta"]["updates"] > 0
    assert len(data["calibration"]["chosen"]) >= 2 and data["meta"]["seed"] == 4
    table = (tmp_path / "ccc.md").read_text()
    assert "| realm-guarded |" in table and "worst window − no-adapt" in table
    assert (tmp_path / "ccc.png").stat().st_size > 10_000
    assert not list((tmp_path / "rows" / ".partial").iterdir())  # finished: no checkpoint left
    # Finished rows are kept: the same command takes them back; another stream runs anew.
    capsys.readouterr()
    assert main([*argv, "--methods", "none", "eta"]) == 0
    out = capsys.readouterr().out
    assert "none: " in out and out.count(" (kept)\n") == 2
    again = {r["method"]: r for r in json.loads((tmp_path / "ccc.json").read_text())["rows"]}
    assert again["eta"]["windows"] == rows["eta"]["windows"]
    assert again["eta"]["kept"] and not rows["eta"]["kept"]
    marked = (tmp_path / "ccc.md").read_text()  # the table says which rows it took back
    assert "(kept)" not in table and marked.count(" (kept) |") == 2 and "rows/" in marked
    # --set changes REALM's row alone: the no-adapt row is taken back, REALM's runs anew.
    assert main([*argv, "--methods", "none", "realm-guarded", "--set", "lr=0.001"]) == 0
    out = capsys.readouterr().out
    assert "none: " in out and out.count(" (kept)\n") == 1 and "realm-guarded: " in out
    variant = json.loads((tmp_path / "ccc.json").read_text())
    assert variant["meta"]["overrides"] == {"lr": "0.001"}
    assert variant["meta"]["title"].endswith("(seed 4); REALM lr=0.001")
    # the plot drawn again from the kept runs is the plot the bench drew
    (tmp_path / "again").mkdir()
    assert main(["replot", "--runs", str(tmp_path), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "ccc.png").read_bytes() == (tmp_path / "ccc.png").read_bytes()
    assert variant["rows"][1]["windows"] != rows["realm-guarded"]["windows"]
    assert main([*argv, "--set", "nope=1"]) == 2
    assert "do not fit RealmConfig" in capsys.readouterr().err
    changed = [a if a != "200" else "300" for a in argv]  # --window
    assert main([*changed, "--methods", "none"]) == 0
    assert "(kept)" not in capsys.readouterr().out
    assert main([*argv[:4], "continual", *argv[4:]]) == 2
    assert "--settings ccc runs alone" in capsys.readouterr().err
    # Every row runs through RealmRuntime here: the row that names the runtime is no row of it.
    assert main([*argv, "--methods", "realm-runtime"]) == 2
    assert "unknown methods ['realm-runtime'] with --settings ccc" in capsys.readouterr().err


def _worker(artifacts, mode, out, *extra):
    argv = [
        sys.executable, "-m", "realm_lab.workers.endless", str(artifacts), mode, str(out),
        "--severities", json.dumps({"fog": 3, "pixelate": 5, "gaussian_blur": 4}),
        "--seed", "5", "--length", "900", "--transition", "150", "--window", "150",
        "--reset-every", "100", *extra,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("mode", ["rdumb", "none"])
def test_a_stopped_row_goes_on_from_its_checkpoint_to_the_same_figures(
    digits_artifacts, tmp_path, mode
):
    artifacts = digits_artifacts[0]
    whole = _worker(artifacts, mode, tmp_path / "whole.json")
    assert whole.returncode == 0, whole.stderr
    folder = tmp_path / "partial"
    first = _worker(artifacts, mode, tmp_path / "x.json", "--checkpoint", folder,
                    "--stop-after", "300")  # fmt: skip
    assert first.returncode == 3 and not (tmp_path / "x.json").exists(), first.stderr
    assert json.loads((folder / "latest.json").read_text())["done"] == 300
    assert [p.name for p in folder.glob("state-*.npz")] == ["state-300.npz"]
    rest = _worker(artifacts, mode, tmp_path / "rest.json", "--checkpoint", folder)
    assert rest.returncode == 0, rest.stderr
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("whole.json", "rest.json"))
    for key in ("windows", "accuracy", "updates", "resets", "drift_clips", "drift"):
        assert a[key] == b[key], key
    if mode == "rdumb":
        assert a["resets"] == 8 and a["updates"] > 0
    other = _worker(artifacts, mode, tmp_path / "y.json", "--checkpoint", folder,
                    "--seed", "6")  # fmt: skip
    assert other.returncode != 0 and "holds the checkpoint of another run" in other.stderr
