"""EATA's Fisher regulariser in the exported graphs: estimated once, baked in, as the SDK."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import RealmConfig, RealmRuntime
from realm_sdk import RealmAdapter


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.GroupNorm(2, 8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )


def _flat(params) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in params.values()])


def test_an_export_without_clean_images_says_what_to_pass():
    config = RealmConfig.preset("cifar", num_classes=10, method="eata")
    with pytest.raises(ValueError, match=r"EATA needs the Fisher information.*clean_images=x"):
        ExportOptions(config=config, input_shape=(1, 3, 16, 16))


def test_the_graphs_step_with_the_fisher_term_as_the_sdk_does(tmp_path):
    """λ_F large enough that the regulariser pulls (ETA ends elsewhere): the adapt graph and
    the host-step backend stay within 1e-6 of the SDK over 30 updates."""
    config = RealmConfig.preset("cifar", num_classes=10, method="eata").with_overrides(
        fisher_alpha=300.0, entropy_margin=3.0, lr=0.05, diversity_margin=1.0
    )
    clean = np.random.default_rng(1).normal(size=(100, 3, 16, 16)).astype(np.float32)
    model = _net()
    options = ExportOptions(config=config, input_shape=(1, 3, 16, 16), clean_images=clean)
    export_realm_artifacts(model, tmp_path / "a", options)
    eta = RealmAdapter(copy.deepcopy(model), config.with_overrides(method="eta"))
    for backend in ("onnx", "onnx-steps"):
        rt = RealmRuntime(tmp_path / "a", backend=backend)
        sdk = RealmAdapter(copy.deepcopy(model), config, clean_images=clean)
        rng = np.random.default_rng(5)
        for _ in range(30):
            x = rng.normal(size=(1, 3, 16, 16)).astype(np.float32)
            mine, theirs = rt.adapt(x), sdk.adapt(torch.from_numpy(x))
            assert mine.reason == theirs.reason
            if backend == "onnx":
                eta.adapt(torch.from_numpy(x))
            gap = np.abs(_flat(rt.trainable_parameters()) - _flat(sdk.trainable_parameters()))
            assert gap.max() < 1e-6, backend
        assert rt.state.updates == 30
    apart = _flat(eta.trainable_parameters()) - _flat(sdk.trainable_parameters())
    assert np.abs(apart).max() > 1e-3  # the regulariser moved θ
