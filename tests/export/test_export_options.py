"""``ExportOptions``: checked on construction; defaults that export a self-describing model."""

from __future__ import annotations

import dataclasses

import pytest

from realm_export import ExportOptions, export_realm_artifacts
from realm_sdk import RealmConfig
from realm_tools.models import DigitsGNNet

CFG10 = RealmConfig.preset("cifar", num_classes=10)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"config": {"num_classes": 10}}, r"config must be a RealmConfig .*got dict"),
        ({"input_shape": (32, 32.0)}, r"input_shape must be positive integers"),
        ({"input_shape": (1,)}, r"input_shape must be positive integers"),
        ({"input_shape": "1,3,32,32"}, r"input_shape must be positive integers"),
        ({"atol": 0.0}, r"atol must be a finite number > 0 \(default 0.0001\)"),
        ({"grad_rtol": float("nan")}, r"grad_rtol must be a finite number > 0"),
        ({"validation_inputs": 0}, r"validation_inputs must be an integer ≥ 1"),
        ({"seed": -1}, r"seed must be an integer ≥ 0"),
        ({"portable": "no"}, r"portable must be True or False, got 'no'"),
        ({"training": 1}, r"training must be True or False, got 1"),
        ({"training": None}, r"training must be True or False, got None"),
        ({"model_info": ["resnet"]}, r"model_info must be a dict or None, got list"),
        ({"portable": False, "ort_format": True}, r"ort_format=True .* needs portable=True"),
        ({"portable": False, "training": False}, r"nothing to export: portable=False and"),
        ({"portable": False}, r"nothing to export: portable=False and training=False"),
    ],
)
def test_bad_values_are_refused_with_what_to_pass(fields, message):
    with pytest.raises(ValueError, match=message) as caught:
        ExportOptions(**fields)
    assert str(caught.value).startswith("invalid ExportOptions: ")
    assert "\n" not in str(caught.value)


def test_every_problem_is_named_at_once():
    with pytest.raises(ValueError) as caught:
        ExportOptions(atol=-1.0, seed=-1)
    assert "atol" in str(caught.value) and "seed" in str(caught.value)


def test_options_are_frozen_and_vary_by_replace():
    options = ExportOptions(config=CFG10, input_shape=[1, 1, 32, 32])
    assert options.input_shape == (1, 1, 32, 32)  # a list (a command line's) becomes a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.atol = 1.0  # type: ignore[misc]
    mobile = dataclasses.replace(options, ort_format=True)
    assert mobile.ort_format and not options.ort_format and mobile.config is options.config
    with pytest.raises(ValueError, match="needs portable=True"):
        dataclasses.replace(mobile, portable=False)  # replace checks the new values too
    with pytest.raises(TypeError):
        ExportOptions(CFG10)  # type: ignore[misc]  # keywords only: no silent argument order


def test_default_options_read_the_shape_and_classes_off_the_model(tmp_path):
    """``ExportOptions()``: the input size the model declares, the SDK's defaults for its
    number of classes (read off its logits)."""
    model = DigitsGNNet()
    with pytest.raises(ValueError, match=r"declares no input size.*input_shape=\(1, C, H, W\)"):
        export_realm_artifacts(model, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    model.pretrained_cfg = {"input_size": (1, 32, 32)}
    info = export_realm_artifacts(model, tmp_path / "a", ExportOptions())
    manifest = info.manifest
    assert manifest.input.shape == ["batch", 1, 32, 32]
    assert manifest.num_classes == 10
    assert manifest.config == RealmConfig(num_classes=10).to_dict()
    assert info.portable_validation.passed
    assert "training_model" not in info.files  # the legacy artifacts only when asked for


def test_training_where_onnxruntime_training_is_missing_names_the_package(tmp_path, monkeypatch):
    """Asked for where it is not installed: one sentence, the package and its version, before
    anything is traced or written."""
    import importlib.util

    real = importlib.util.find_spec

    def without_training(name, *args):
        return None if name == "onnxruntime.training" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_training)
    options = ExportOptions(config=CFG10, input_shape=(1, 1, 32, 32), training=True)
    with pytest.raises(ImportError) as caught:
        export_realm_artifacts(DigitsGNNet(), tmp_path / "a", options)
    message = str(caught.value)
    assert "pip install 'onnxruntime-training==1.19.2'" in message and "\n" not in message
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("method", ["sar", "deyo"])
def test_training_for_a_method_they_cannot_hold_is_refused(method, tmp_path):
    from realm_export import UnsupportedModelError

    config = RealmConfig.preset("cifar", num_classes=10, method=method)
    options = ExportOptions(config=config, input_shape=(1, 1, 32, 32), training=True)
    refused = r"^training=True: .*export the portable graph$"
    with pytest.raises(UnsupportedModelError, match=refused):
        export_realm_artifacts(DigitsGNNet(), tmp_path / "a", options)
    assert not (tmp_path / "a").exists()
