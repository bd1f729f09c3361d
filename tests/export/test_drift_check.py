"""``ExportOptions(drift_check=...)``: max_drift fitted to the worst case inside it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from realm_export import DriftBoundError, DriftCheck, ExportOptions, export_realm_artifacts
from realm_export.bound import SearchSettings
from realm_runtime import RealmConfig, RealmRuntime

QUICK = SearchSettings(steps=10, restarts=1, batch=64, eval_every=5)  # a test's budget


@pytest.fixture(scope="module")
def clean(digits):
    x, y = digits.stream("clean", 1, seed=0)
    return np.ascontiguousarray(x[:200], dtype=np.float32), y[:200].astype(np.int64)


def _options(config, check, **kw):
    return ExportOptions(
        config=config, input_shape=(1, 1, 32, 32), drift_check=check, training=False, **kw
    )


def test_the_export_writes_the_largest_bound_whose_worst_case_is_allowed(
    digits_model, clean, tmp_path
):
    config = RealmConfig.preset("cifar", num_classes=10)
    check = DriftCheck(images=clean[0], labels=clean[1], bounds=(0.001, 0.005, 0.02), search=QUICK)
    fit = {"rule": "the best mean online accuracy", "data": {"sha256": "ab" * 32}}
    info = export_realm_artifacts(digits_model, tmp_path / "a", _options(config, check, fit=fit))
    written = json.loads((tmp_path / "a" / "realm.json").read_text())
    section = written["drift_check"]
    assert written["fit"] == fit  # realm fit's record rides in the sealed manifest, as given
    tried = section["tried"]
    assert [t["bound"] for t in tried] == [0.001, 0.005, 0.02][: len(tried)]
    assert len({t["source_accuracy"] for t in tried}) == 1
    worst = [t["worst_accuracy"] for t in tried]
    assert worst == sorted(worst, reverse=True)  # a larger ball starts from the smaller's worst
    assert all(t["drop"] <= 2.0 for t in tried[:-1])  # the first bound past it ends the search
    assert len(tried) == 3 or tried[-1]["drop"] > 2.0
    allowed = [t["bound"] for t in tried if t["drop"] <= 2.0]
    assert section["max_drift"] == max(allowed) and section["images"] == 200
    rt = RealmRuntime(tmp_path / "a")
    assert rt.config.guard.max_drift == section["max_drift"] <= config.guard.max_drift
    assert info.manifest.drift_check == section
    assert rt.manifest.fit == fit


def test_a_bound_nothing_fits_is_refused_in_one_sentence(digits_model, clean, tmp_path):
    config = RealmConfig.preset("cifar", num_classes=10)
    check = DriftCheck(
        images=clean[0], labels=clean[1], bounds=(0.02,), allowed_drop=0.1, search=QUICK
    )
    with pytest.raises(DriftBoundError, match=r"even max_drift 0\.02 lets a θ inside it lose"):
        export_realm_artifacts(digits_model, tmp_path / "b", _options(config, check))
    assert not (tmp_path / "b").exists()  # refused before anything was written
    wrong = DriftCheck(images=clean[0][:, :, :16], labels=clean[1], search=QUICK)
    with pytest.raises(ValueError, match=r"DriftCheck.images are \(1, 16, 32\) per image"):
        export_realm_artifacts(digits_model, tmp_path / "c", _options(config, wrong))
    above = DriftCheck(images=clean[0], labels=clean[1], bounds=(0.5,), search=QUICK)
    with pytest.raises(ValueError, match=r"above the config.s max_drift 0\.02"):
        export_realm_artifacts(digits_model, tmp_path / "d", _options(config, above))
    with pytest.raises(ValueError, match="labels must be one per image: 3 labels for 200"):
        DriftCheck(images=clean[0], labels=clean[1][:3])
    with pytest.raises(ValueError, match="drift_check must be a DriftCheck"):
        ExportOptions(drift_check=(clean[0], clean[1]))  # type: ignore[arg-type]


def test_the_command_reads_the_images_and_labels_from_an_npz(tmp_path, capsys):
    from realm_tools.cli import main

    np.savez(tmp_path / "x.npz", images=np.zeros((2, 1, 32, 32), np.float32))
    argv = ["export", "--model", "digits", "--out", str(tmp_path / "o")]
    assert main([*argv, "--drift-check", str(tmp_path / "x.npz")]) == 2
    assert "no array ['labels'] (it needs 'images' and 'labels')" in capsys.readouterr().err
    assert main([*argv, "--drift-check", str(tmp_path / "nope.npz")]) == 2
    assert "not a readable .npz" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
