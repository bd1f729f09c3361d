"""The source models trained on Fashion-MNIST: shipped as documented, exported and validated."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import needs_fashion_mnist

from realm_export import ExportOptions, export_realm_artifacts
from realm_lab.cli import main
from realm_runtime import RealmConfig
from realm_runtime.contract import MANIFEST_NAME
from realm_tools.models import RECIPES, WEIGHTS_DIR, fashion_model, weights_file

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_each_shipped_model_is_documented_with_its_digest(name):
    file = WEIGHTS_DIR / weights_file(name, RECIPES[name].epochs, 0)
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    text = DOCS.read_text(encoding="utf-8")
    assert digest in text, f"{file.name}'s sha256 {digest} is not in docs/models.md"
    assert f"realm-lab train --model {name}" in text


def test_missing_weights_name_the_command_that_makes_them(tmp_path, monkeypatch):
    monkeypatch.setattr("realm_tools.models._fashion.SHIPPED", tmp_path)
    with pytest.raises(FileNotFoundError, match="realm-lab train --model vit_ln"):
        fashion_model("vit_ln", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown Fashion-MNIST model 'resnet99'"):
        fashion_model("resnet99")


def test_train_refuses_an_unknown_model_or_epoch_count(capsys):
    assert main(["train", "--model", "resnet99"]) == 2
    assert "known: ['mobilenetv3_bn', 'resnet26_gn', 'vit_ln']" in capsys.readouterr().err
    assert main(["train", "--model", "vit_ln", "--epochs", "0"]) == 2
    assert "--epochs must be ≥ 1" in capsys.readouterr().err


def _stream_inputs(n: int) -> np.ndarray:
    from realm_tools.data import load_fmnistc

    return load_fmnistc().stream("gaussian_noise", 5, seed=0, limit=n)[0]


@pytest.mark.parametrize(
    "name",
    [
        "resnet26_gn",
        pytest.param("mobilenetv3_bn", marks=pytest.mark.slow),
        pytest.param("vit_ln", marks=pytest.mark.slow),
    ],
)
def test_trained_models_export_and_validate_at_the_default_tolerances(name, tmp_path):
    needs_fashion_mnist()
    model = fashion_model(name)
    x = _stream_inputs(64)
    with torch.no_grad():
        logits = model(torch.from_numpy(x))
    # trained, not saturated: the shifted inputs are told apart, with confidence
    assert len(set(logits.argmax(1).tolist())) >= 5
    assert float(logits.softmax(1).max(1).values.mean()) > 0.5
    config = RealmConfig.preset("cifar", num_classes=10)
    info = export_realm_artifacts(
        model, tmp_path / name, ExportOptions(config=config, input_shape=(1, 1, 32, 32))
    )
    print(f"{name}: {info.seconds:.1f} s\n{info.portable_validation.table()}")
    assert info.portable_error is None and info.portable_validation.passed
    assert info.validation is None  # the legacy artifacts, not asked for
    manifest = (tmp_path / name / MANIFEST_NAME).read_text(encoding="utf-8")
    assert re.search(r'"mean": \[\s*0\.2186\s*\]', manifest)  # the preprocessing goes along


def test_the_quality_bench_runs_fmnist_c_with_your_own_weights(tmp_path, capsys):
    needs_fashion_mnist()
    weights = WEIGHTS_DIR / weights_file("vit_ln", RECIPES["vit_ln"].epochs, 0)
    common = ["bench", "quality", "--dataset", "fmnist-c", "--settings", "episodic"]
    common += ["--corruptions", "fog", "--seeds", "0", "--limit", "30", "--no-progress"]
    common += ["--cache-dir", str(tmp_path / "cache")]
    argv = [*common, "--model", "vit_ln", "--weights", str(weights), "--out", str(tmp_path / "q")]
    assert main([*argv, "--methods", "none", "realm"]) == 0
    out = capsys.readouterr().out
    assert "30 samples per stream" in out
    row = next(line for line in out.splitlines() if line.startswith("| fog |"))
    assert len(row.split("|")) == 5  # corruption, no-adapt, REALM
    assert (tmp_path / "q" / "examples.png").is_file()
    # the weights of another architecture are refused, naming the mismatch
    wrong = [*common, "--model", "resnet26_gn", "--weights", str(weights), "--out", str(tmp_path)]
    assert main(wrong) == 2
    assert "does not fit the model (ResNet26GN)" in capsys.readouterr().err
