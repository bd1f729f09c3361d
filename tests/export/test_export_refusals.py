"""Exports that are refused, and how: control flow the trace cannot keep, ops without a
gradient or an ONNX form, a model without norm layers and bad arguments each fail in a
sentence that names the cause, and a failed export writes nothing and leaves an existing
directory as it was.
"""

from __future__ import annotations

import pytest
import torch
from helpers import export_digits
from torch import nn

from realm_export import (
    ExportOptions,
    UnsupportedModelError,
    ValidationError,
    export_realm_artifacts,
)
from realm_sdk import RealmConfig
from realm_tools.models import DigitsGNNet


class _Branchy(nn.Module):
    """Data-dependent control flow: the trace keeps one branch only."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm, self.fc = nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Linear(8, 10)

    def forward(self, x):
        # On the input, not the GroupNorm's output, whose mean is 0 up to rounding: the
        # validation inputs' offsets (+0.5, −0.5) take both branches, on any CPU.
        bright = x.mean() > 0
        x = self.norm(self.conv(x))
        if bright:
            x = 3 * x
        return self.fc(x.mean((2, 3)))


class _WithOp(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.conv, self.norm, self.fc = nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.fn(self.norm(self.conv(x))).mean((2, 3)))


CFG10 = RealmConfig.preset("cifar", num_classes=10)


def test_control_flow_fails_validation_with_the_reason_and_writes_nothing(tmp_path):
    """The training artifacts' validation names the branch (test_zoo.py: the portable graph's
    refusal, the default export's)."""
    out = tmp_path / "a"
    options = ExportOptions(config=CFG10, input_shape=(1, 3, 16, 16), training=True)
    with pytest.raises(ValidationError, match="Python booleans") as err:
        export_realm_artifacts(_Branchy(), out, options)
    assert "logits" in str(err.value) and not err.value.report.passed
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_failed_export_leaves_an_existing_directory_untouched(digits_model, tmp_path):
    out = tmp_path / "a"
    export_digits(digits_model, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(FileExistsError):
        export_realm_artifacts(
            DigitsGNNet(), out, ExportOptions(config=CFG10, input_shape=(1, 1, 32, 32))
        )
    with pytest.raises(UnsupportedModelError, match="data-dependent control flow"):
        export_realm_artifacts(
            _Branchy(), out, ExportOptions(config=CFG10, input_shape=(1, 3, 16, 16), overwrite=True)
        )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


@pytest.mark.parametrize(
    ("fn", "message", "portable"),
    [
        (lambda x: x.cumsum(1), "op CumSum .* has no gradient", None),
        (lambda x: torch.atan(x), "op Atan .* has no gradient", None),
        (lambda x: torch.special.erfinv(torch.tanh(x) * 0.5), "aten::erfinv", "prims.erf_inv"),
    ],
    ids=["cumsum", "atan", "erfinv"],
)
def test_ops_without_gradient_or_onnx_form_are_named(fn, message, portable, tmp_path):
    """Asked for (training=True), the legacy artifacts' failure is the export's, named; by
    default they are not tried, and the portable graph is written where it can be, or the
    export refuses, naming the op the portable graph cannot write."""
    with pytest.raises(UnsupportedModelError, match=message):
        export_realm_artifacts(
            _WithOp(fn),
            tmp_path / "a",
            ExportOptions(config=CFG10, input_shape=(1, 3, 16, 16), training=True),
        )
    assert list(tmp_path.iterdir()) == []
    options = ExportOptions(config=CFG10, input_shape=(1, 3, 16, 16))
    if portable is not None:  # no graph at all: the op, in one sentence
        with pytest.raises(UnsupportedModelError, match=portable) as caught:
            export_realm_artifacts(_WithOp(fn), tmp_path / "b", options)
        assert str(caught.value).startswith("no artifact for this model: ")
        assert "\n" not in str(caught.value) and not (tmp_path / "b").exists()
        return
    info = export_realm_artifacts(_WithOp(fn), tmp_path / "b", options)
    assert info.training_error.startswith("not asked for")
    assert info.portable_validation.passed


def test_model_without_norm_layers_is_refused(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 14 * 14, 10))
    with pytest.raises(UnsupportedModelError, match="no normalisation layer"):
        export_realm_artifacts(
            model, tmp_path / "a", ExportOptions(config=CFG10, input_shape=(1, 3, 16, 16))
        )


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="input_shape"):
        export_realm_artifacts(
            DigitsGNNet(), tmp_path / "a", ExportOptions(config=CFG10, input_shape=(32, 32.0))
        )
    with pytest.raises(UnsupportedModelError, match=r"logits of shape \(1, 7\)"):
        export_realm_artifacts(
            DigitsGNNet(),
            tmp_path / "a",
            ExportOptions(
                config=RealmConfig.preset("cifar", num_classes=7), input_shape=(1, 1, 32, 32)
            ),
        )
