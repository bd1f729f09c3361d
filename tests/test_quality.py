"""``realm bench quality``: the shape and sanity of its outputs on a short stream."""

from __future__ import annotations

import json

import numpy as np
import pytest

from realm_sdk._quality import METHODS, bench_quality, plot_quality, quality_table, runs_to_json


def test_quality_bench_outputs(digits_model, tmp_path):
    runs = bench_quality(
        corruptions=["gaussian_noise", "fog"], seeds=[0, 1], limit=40, source=digits_model
    )
    assert len(runs) == 2 * 2 * len(METHODS)
    for r in runs:
        assert 0 <= r.accuracy <= 100 and 0 <= r.clean_after <= 100
        assert len(r.online_accuracy) == 40
        assert r.online_accuracy[-1] == r.accuracy  # online accuracy ends at the final one
    none = [r for r in runs if r.method == "none"]
    assert all(r.updates == 0 for r in none)
    realm = {(r.corruption, r.seed): r for r in runs if r.method == "realm"}
    for r in (r for r in runs if r.method == "realm-runtime"):
        twin = realm[(r.corruption, r.seed)]
        assert abs(r.accuracy - twin.accuracy) <= 0.2  # the runtime is the reference
        assert r.updates == twin.updates and len(r.alpha) == 40
        np.testing.assert_allclose(r.alpha, twin.alpha, atol=1e-5)
    table = quality_table(runs)
    assert table.count("\n") == 1 + len(METHODS)
    assert "| REALM (runtime) |" in table and "average" in table and "±" in table
    paths = plot_quality(runs, tmp_path)
    assert [p.name for p in paths] == ["online_accuracy.png", "alpha_lambda.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    data = json.loads(runs_to_json(runs, {"limit": 40}))
    assert len(data["runs"]) == len(runs) and data["settings"]["limit"] == 40


@pytest.mark.slow
def test_quick_cli_writes_table_json_and_plots(tmp_path):
    from realm_sdk._cli import main

    out = tmp_path / "q"
    assert (
        main(
            [
                "bench",
                "quality",
                "--quick",
                "--out",
                str(out),
                "--no-progress",
                "--cache-dir",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    assert (out / "quality.md").read_text().startswith("# Quality")
    assert len(json.loads((out / "quality.json").read_text())["runs"]) == 2 * len(METHODS)
    assert (out / "online_accuracy.png").is_file() and (out / "alpha_lambda.png").is_file()
