"""``realm fit`` whole: bad input refused in one sentence with nothing written, and a fit that
measures, chooses, proves and exports artifacts the runtime loads."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import needs_fashion_mnist
from torch import nn

from realm_runtime import RealmRuntime
from realm_tools.cli import main
from realm_tools.fit import (
    FitBudgetError,
    FitInputError,
    FitOptions,
    app_images,
    fit_realm_artifacts,
)
from realm_tools.models import build_model

SHAPE = (1, 1, 32, 32)


def _options(n: int = 240, **changes) -> FitOptions:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (n, 32, 32), dtype=np.uint8), rng.integers(0, 10, n)
    data = app_images(x, y, input_shape=SHAPE, num_classes=10)
    base = dict(data=data, num_classes=10, input_shape=SHAPE, mean=(0.2,), std=(0.3,), minutes=5)
    return FitOptions(**{**base, **changes})


class NoNorms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.head = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean((2, 3)))


@pytest.fixture(scope="module")
def resnet():
    return build_model("fmnist_resnet26_gn")[0]


@pytest.mark.parametrize(
    "model,options,needle",
    [
        (NoNorms(), {}, "the model cannot adapt"),
        ("resnet", {"num_classes": 7}, "not (1, 7) logits: check --num-classes"),
        ("resnet", {"input_shape": (1, 1, 28, 28)}, "images are 32×32 pixels"),
    ],
)
def test_a_model_that_does_not_fit_is_refused_with_nothing_written(
    model, options, needle, resnet, tmp_path
):
    model = resnet if model == "resnet" else model
    out = tmp_path / "out"
    with pytest.raises(FitInputError) as caught:
        if "input_shape" in options:  # the images are checked against the shape first
            app_images(
                np.zeros((4, 32, 32), np.uint8),
                np.zeros(4, int),
                input_shape=options["input_shape"],
                num_classes=10,
            )
        fit_realm_artifacts(model, out, _options(**options))
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_budget_too_small_says_how_much_would_do(resnet, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FitBudgetError) as caught:
        fit_realm_artifacts(resnet, out, _options(minutes=0.01))
    message = str(caught.value)
    assert "cannot measure each method once" in message and "give at least --minutes" in message
    assert not list(tmp_path.iterdir())  # nothing written, not even the journal


def test_an_existing_directory_is_kept(resnet, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(FitInputError, match="exists and is not empty: pass --overwrite"):
        fit_realm_artifacts(resnet, tmp_path / "out", _options())
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"


def _fit_args(out, *, minutes: float) -> list[str]:
    """``realm fit`` on the shipped ResNet-26-GN with Fashion-MNIST's normalisation."""
    return [
        "fit", "--model", "fmnist_resnet26_gn", "--num-classes", "10", "--input-shape",
        "1,1,32,32", "--mean", "0.2186", "--std", "0.3315", "--minutes", str(minutes),
        "--out", str(out),
    ]  # fmt: skip


def _minutes_here(args: Callable[[float], list[str]], capsys, *, at_least: float) -> float:
    """A slow test's budget: ``at_least``, or half again the floor the fit states here and now.

    Where the machine is shared, the fit's floor grows with the load; asked at a budget too
    small, the fit refuses at once, writes nothing and names the minutes that would do.
    """
    assert main(args(0.01)) == 1
    said = capsys.readouterr().err
    floor = re.search(r"give at least --minutes ([0-9.]+)", said)
    assert floor is not None, said
    return max(at_least, 1.5 * float(floor.group(1)))


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--data", "{tmp}/missing.npz"], "no such file or folder"),
        (["--data", "{tmp}/few.npz"], "a fit needs at least 200"),
        (["--data", "{tmp}/few.npz", "--input-shape", "1,1,32"], "expected 1,C,H,W"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(extra, needle, tmp_path, capsys):
    np.savez(
        tmp_path / "few.npz", images=np.zeros((10, 32, 32), np.uint8), labels=np.zeros(10, int)
    )
    args = _fit_args(tmp_path / "o", minutes=1)
    args += [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_fit_chooses_proves_and_exports_what_the_runtime_loads(tmp_path, capsys):
    needs_fashion_mnist()
    from realm_tools.data import load_fashion_mnist

    x, y = load_fashion_mnist().split("val")
    np.savez(tmp_path / "val.npz", images=x[:300], labels=y[:300])
    out = tmp_path / "fitted"

    def args(minutes: float) -> list[str]:
        return [*_fit_args(out, minutes=minutes), "--data", str(tmp_path / "val.npz")]

    # Near the fit's own floor on the slowest CPU met, unshared (docs/fit.md).
    minutes = _minutes_here(args, capsys, at_least=5.0)
    assert main(args(minutes)) == 0
    report = json.loads((out / "fit.json").read_text())
    assert report["seconds"] <= minutes * 60 * 1.1  # the budget, kept to within a tenth
    assert report["data"]["images"] == 300 and report["data"]["held_out"] == 100
    assert len(report["proof"]["by_corruption"]) == 15
    assert (out / "fit.md").read_text().startswith("# realm fit")
    assert (out / "fit.png").read_bytes()[:4] == b"\x89PNG"
    runtime = RealmRuntime(out)
    assert runtime.manifest.fit["data"]["sha256"] == report["data"]["sha256"]
    chosen = report["choice"]
    if chosen["adapts"]:
        assert runtime.config.method == chosen["method"]
        assert runtime.config.lr == pytest.approx(chosen["lr"])
        assert runtime.config.guard.max_drift == report["drift"]["max_drift"]
    assert "choice:" in capsys.readouterr().out
    assert not (tmp_path / ".fitted.fit-work").exists()  # the journal goes once the fit is done


USER_MODEL = Path(__file__).resolve().parents[2] / "examples" / "fit_your_model" / "model.py"
COLOUR = (1, 3, 32, 32)


def _colour(n: int, tmp_path: Path, name: str, labelled: bool = True) -> Path:
    rng = np.random.default_rng(len(name))
    arrays = {"images": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)}
    if labelled:
        arrays["labels"] = rng.integers(0, 10, n)
    np.savez(tmp_path / name, **arrays)
    return tmp_path / name


def _user_args(tmp_path: Path, out: Path, minutes: float) -> list[str]:
    """``realm fit`` on a model of the user's own file, colour images, their normalisation."""
    return [
        "fit", "--model", f"{USER_MODEL}:build", "--num-classes", "10", "--input-shape",
        ",".join(map(str, COLOUR)), "--mean", "0.45", "0.45", "0.45", "--std", "0.25", "0.25",
        "0.25", "--data", str(_colour(300, tmp_path, "clean.npz")), "--minutes", str(minutes),
        "--out", str(out),
    ]  # fmt: skip


def test_a_memory_budget_no_stage_fits_is_refused_with_nothing_written(tmp_path, capsys):
    out = tmp_path / "fitted"
    code = main([*_user_args(tmp_path, out, minutes=5), "--memory-budget", "0.01"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("realm fit: --memory-budget") and err[-1].endswith("nothing written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.npz"]  # no out, no journal


@pytest.mark.slow
def test_a_users_colour_model_fits_with_field_images_inside_a_memory_budget(tmp_path, capsys):
    out = tmp_path / "fitted"
    field = _colour(60, tmp_path, "field.npz", labelled=False)

    def args(minutes: float) -> list[str]:
        return [*_user_args(tmp_path, out, minutes), "--field", str(field)]

    minutes = _minutes_here(args, capsys, at_least=3.0)
    assert main([*args(minutes), "--memory-budget", "4000"]) == 0
    report = json.loads((out / "fit.json").read_text())
    stages = report["budget"]["adapt_stages"]
    assert report["data"]["field"] == 60 and report["budget"]["memory_budget_mb"] == 4000
    assert report["long_stream"]["streams"][0].startswith("field/")  # first, then the shifts
    assert not any(s.startswith("field/") for s in report["search"]["stream_names"])
    assert all(f["adapt_stages"] == stages for f in report["finalists"])
    runtime = RealmRuntime(out)
    assert runtime.config.adapt_stages == stages
    assert runtime.manifest.memory["budget_mb"] == 4000  # the export measured what it chose
    assert runtime.manifest.fit["input"]["shape"] == list(COLOUR)
    assert runtime.predict(np.zeros(COLOUR, np.float32)).shape == (1, 10)
    assert report["seconds"] <= minutes * 60 * 1.1
