"""``realm-lab bench quality``: the shape and sanity of its outputs on a short stream."""

from __future__ import annotations

import json

import numpy as np

from realm_lab.bench import (
    bench_quality,
    plot_quality,
    quality_table,
    runs_to_json,
)
from realm_lab.rows import QUALITY_DEFAULT, ROWS
from realm_tools.models import train_digits_model


def test_quality_bench_outputs(digits_model, tmp_path):
    # The runtime's row (an export) is the quick CLI test's: here the torch methods only.
    methods = [m for m in QUALITY_DEFAULT if not ROWS[m].runtime]
    runs = bench_quality(
        corruptions=["gaussian_noise", "fog"],
        seeds=[0, 1],
        limit=40,
        source=digits_model,
        methods=methods,
    )
    assert len(runs) == 2 * 2 * len(methods)
    for r in runs:
        assert 0 <= r.accuracy <= 100 and 0 <= r.clean_after <= 100
        assert len(r.online_accuracy) == 40
        assert r.online_accuracy[-1] == r.accuracy  # online accuracy ends at the final one
    none = [r for r in runs if r.method == "none"]
    assert all(r.updates == 0 for r in none)
    table = quality_table(runs)
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    # Table 1's one layout: the header, a row per corruption, the average, the gain, clean after
    assert rows[0] == "| corruption | " + " | ".join(ROWS[m].label for m in methods) + " |"
    assert [r.split(" | ")[0] for r in rows[1:]] == [
        "| gaussian_noise", "| fog", "| average", "| gain over no-adapt", "| clean after"
    ]  # fmt: skip
    assert "±" in table and "**" in table  # two seeds; the best of each row in bold
    paths = plot_quality(runs, tmp_path)
    assert [p.name for p in paths] == ["online_accuracy.png", "alpha_lambda.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    data = json.loads(runs_to_json(runs, {"limit": 40}))
    assert len(data["runs"]) == len(runs) and data["settings"]["limit"] == 40


def test_quick_cli_writes_table_json_and_plots(tmp_path, digits_model, digits_cache_dir):
    # --quick's source model is the 6-epoch one of the digits_model fixture, under its own
    # cache name: the session has trained it already, so the smoke run costs seconds.
    from realm_lab.cli import QUICK_EPOCHS, QUICK_LIMIT, main
    from realm_lab.rows import QUALITY_DEFAULT

    out = tmp_path / "q"
    cached = [f"digits_gn_e{QUICK_EPOCHS}_s0.safetensors"]
    assert [p.name for p in digits_cache_dir.iterdir()] == cached
    argv = ["bench", "quality", "--quick", "--out", str(out), "--no-progress"]
    assert main([*argv, "--cache-dir", str(digits_cache_dir)]) == 0
    assert [p.name for p in digits_cache_dir.iterdir()] == cached  # loaded, not retrained
    assert (out / "quality.md").read_text().startswith("# Quality")
    data = json.loads((out / "quality.json").read_text())
    assert data["settings"]["source_epochs"] == QUICK_EPOCHS
    assert data["settings"]["limit"] == QUICK_LIMIT and data["settings"]["dataset"] == "digits"
    runs = data["runs"]
    assert len(runs) == 2 * len(QUALITY_DEFAULT)
    assert {(r["corruption"], r["method"]) for r in runs} == {
        (c, m) for c in ("gaussian_noise", "defocus_blur") for m in QUALITY_DEFAULT
    }
    for r in runs:
        assert 0 <= r["accuracy"] <= 100 and 0 <= r["clean_after"] <= 100
        assert len(r["online_accuracy"]) == QUICK_LIMIT
        assert 0 <= r["updates"] <= QUICK_LIMIT
    # The short-trained source model is a classifier: far above chance (1 in 10) on clean data.
    assert all(r["clean_after"] > 80 for r in runs if r["method"] == "none")
    realm = {r["corruption"]: r for r in runs if r["method"] == "realm"}
    for r in (r for r in runs if r["method"] == "realm-runtime"):
        twin = realm[r["corruption"]]
        assert abs(r["accuracy"] - twin["accuracy"]) <= 0.2  # the runtime is the reference
        assert r["updates"] == twin["updates"] and len(r["alpha"]) == QUICK_LIMIT
        np.testing.assert_allclose(r["alpha"], twin["alpha"], atol=1e-5)
    table = (out / "quality.md").read_text()
    assert "| REALM (runtime) |" in table and "clean after" in table
    assert (out / "online_accuracy.png").is_file() and (out / "alpha_lambda.png").is_file()


def test_the_source_model_is_the_same_whatever_the_thread_count(digits):
    # The docs' figures come from a cached model: a fresh machine must train the same one.
    import torch

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = train_digits_model(digits, epochs=1, seed=3)
        assert torch.get_num_threads() == 2  # the caller's setting is given back
        torch.set_num_threads(1)
        one = train_digits_model(digits, epochs=1, seed=3)
    finally:
        torch.set_num_threads(threads)
    for (name, a), b in zip(two.state_dict().items(), one.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_default_source_model_is_the_one_the_package_ships(digits, tmp_path):
    # Another CPU trains another model; the docs' figures name the shipped one by its digest.
    import re
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    from realm_tools.data import DigitsShift
    from realm_tools.models import weights_digest

    model = train_digits_model(digits, cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # loaded, not trained (training would cache it)
    docs = (Path(__file__).parents[2] / "docs" / "continual.md").read_text()
    named = re.findall(r"source model `sha256:([0-9a-f]{64})`", docs)
    assert named and set(named) == {weights_digest(model)}
    x, y = DigitsShift(digits).clean()
    with torch.no_grad():
        clean = float((model(torch.from_numpy(np.asarray(x[:]))).argmax(1).numpy() == y).mean())
    assert clean > 0.95  # a trained classifier, not an initialisation
    # shipped=False takes what the cache holds for the recipe (or trains), not the package's.
    other = {k: v + 0.01 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_file(other, str(tmp_path / "digits_gn_e30_s0.safetensors"))
    cached = train_digits_model(digits, cache_dir=tmp_path, shipped=False)
    assert all(torch.equal(a, other[k]) for k, a in cached.state_dict().items())
    assert weights_digest(train_digits_model(digits, cache_dir=tmp_path)) == weights_digest(model)
