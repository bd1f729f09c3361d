"""The exporter's memory check: the updating peak measured into the manifest, and a budget
that chooses how many of the model's last stages adapt (``MemoryCheck``)."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from helpers import last_line_in_a_fresh_interpreter
from torch import nn

from realm_export import ExportOptions, MemoryBudgetError, MemoryCheck, export_realm_artifacts
from realm_runtime import RealmConfig, load_manifest
from realm_runtime.measure import measure_update_peak
from realm_tools.cli import main


class Staged(nn.Module):
    """A small CNN whose stages are read from its attributes (``layer1``…``layer3``)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = self._stage(8, 16)
        self.layer2 = self._stage(16, 16)
        self.layer3 = self._stage(16, 32)
        self.head = nn.Linear(32, 10)

    @staticmethod
    def _stage(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.GroupNorm(4, cout), nn.ReLU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.head(x.mean((2, 3)))


def _options(memory: MemoryCheck, **kw) -> ExportOptions:
    return ExportOptions(
        config=RealmConfig.preset("cifar", num_classes=10),
        input_shape=(1, 3, 32, 32),
        memory=memory,
        **kw,
    )


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"budget_mb": 0}, "budget_mb must be a number of MB > 0"),
        ({"budget_mb": float("nan")}, "budget_mb must be a number of MB > 0"),
        ({"budget_mb": "160"}, "budget_mb must be a number of MB > 0"),
        ({"threads": 0}, "threads must be an integer ≥ 1 or None"),
        ({"samples": 1}, "samples must be an integer ≥ 2"),
        ({"python": ""}, "python must be an interpreter's path or None"),
    ],
)
def test_bad_memory_checks_are_one_sentence(fields, words):
    with pytest.raises(ValueError, match=words):
        MemoryCheck(**fields)


def test_the_options_refuse_what_cannot_be_measured():
    with pytest.raises(ValueError, match="memory must be a MemoryCheck"):
        ExportOptions(memory=160)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="memory measures the portable adapt graph"):
        ExportOptions(memory=MemoryCheck(), portable=False, training=True)


def test_the_measured_peak_is_a_device_process_without_torch(digits_artifacts):
    directory, _ = digits_artifacts
    figure = measure_update_peak(directory, threads=1, samples=3)
    assert figure.samples == 3 and figure.updates == 3  # every sample ran the backward
    assert figure.threads == 1 and figure.onnxruntime and figure.cpu
    # The measuring process counts what an app without torch loads: less than torch alone.
    torch_alone = float(
        last_line_in_a_fresh_interpreter(
            "import torch\nfrom realm_runtime.measure import peak_rss_mb\nprint(peak_rss_mb())",
            timeout=120,
        )
    )
    assert 0 < figure.peak_mb < torch_alone


def test_a_budget_nothing_fits_writes_nothing(tmp_path):
    out = tmp_path / "artifacts"
    options = _options(MemoryCheck(budget_mb=1, threads=1, samples=2), validate=False)
    with pytest.raises(MemoryBudgetError) as caught:
        export_realm_artifacts(Staged().eval(), out, options)
    message = str(caught.value)
    assert "no setting fits a memory budget of 1 MB: adapting only the last stage peaks at" in (
        message
    )
    assert "raise the budget to at least" in message
    assert not out.exists()
    assert not any(tmp_path.iterdir())  # no trial or partial directory left either


def test_measure_only_writes_the_figure_and_the_cli_prints_it(tmp_path, capsys):
    out = tmp_path / "artifacts"
    code = main(
        [
            "export",
            "--model",
            "timm:resnet18",
            "--num-classes",
            "10",
            "--input-shape",
            "1,3,32,32",
            "--measure-memory",
            "--memory-threads",
            "1",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    memory = load_manifest(out).memory
    assert memory["threads"] == 1 and memory["updates"] == memory["samples"]
    assert "budget_mb" not in memory  # measured, not fitted
    assert f"updating peak: {memory['peak_mb']:.1f} MB" in printed
    # The figure is part of the sealed manifest, as written.
    assert json.loads((out / "realm.json").read_text())["memory"] == memory


@pytest.mark.slow
def test_the_budget_chooses_the_most_stages_that_fit(tmp_path):
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    check = MemoryCheck(threads=1, samples=3)
    shape = (1, 3, 96, 96)

    def measured(stages):
        config = RealmConfig.preset("imagenet", num_classes=10, adapt_stages=stages)
        out = tmp_path / f"measure-{stages}"
        options = ExportOptions(
            config=config, input_shape=shape, training=False, validate=False, memory=check
        )
        return export_realm_artifacts(model, out, options).manifest.memory["peak_mb"]

    # The preset freezes the last block, the whole last stage: 2 is the fewest that adapts.
    fewest, every = measured(2), measured(None)
    assert fewest < every  # the lever moves the peak at all
    budget = (fewest + every) / 2
    options = ExportOptions(
        config=RealmConfig.preset("imagenet", num_classes=10),
        input_shape=shape,
        training=False,
        memory=MemoryCheck(budget_mb=budget, threads=1, samples=3),
    )
    info = export_realm_artifacts(model, tmp_path / "fitted", options)
    memory = info.manifest.memory
    chosen = memory["adapt_stages"]
    assert chosen is not None and info.manifest.config["adapt_stages"] == chosen
    tried = {t["adapt_stages"]: t["peak_mb"] for t in memory["tried"]}
    assert tried[chosen] <= budget  # the chosen one fits ...
    larger = [k for k in tried if k is None or k > chosen]
    assert larger and all(tried[k] > budget for k in larger)  # ... and the next one does not
    assert 1 not in tried  # it would adapt nothing
    assert (chosen + 1 if chosen < 4 else None) in tried  # the bisection's witness was measured
    assert info.portable_validation is not None and info.portable_validation.passed
