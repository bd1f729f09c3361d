"""What the export writes into the adapt graph and checks there: a max-pooling forward that
pools without indices while its updating branch gets them, the graph validated on selected and
skipped samples for each method, and the adapt benchmark that times it at the rates it names.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import onnx
import pytest
import torch
from helpers import compare_twins, export_digits
from torch import nn

from realm_runtime import RealmRuntime
from realm_sdk import RealmAdapter, RealmConfig


class _PooledNet(nn.Module):
    """Conv → GroupNorm → ReLU → MaxPool → Conv → GroupNorm → ReLU → mean → Linear."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.GroupNorm(2, 8),
            nn.ReLU(),
        )
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def test_a_max_pooling_forward_pools_without_indices_and_updates_as_the_sdk(tmp_path):
    """The forward pools as a forward-only graph does; the updating branch gets the indices."""
    from realm_export import ExportOptions, export_realm_artifacts

    model = _PooledNet().eval()
    config = RealmConfig.preset("cifar", num_classes=5, diversity_margin=0.9)
    export_realm_artifacts(
        model,
        tmp_path / "a",
        ExportOptions(config=config, input_shape=(1, 3, 16, 16), training=False),
    )
    graph = onnx.load(str(tmp_path / "a" / "adapt_model.onnx"), load_external_data=False).graph
    pools = [n for n in graph.node if n.op_type == "MaxPool"]
    assert [len(n.output) for n in pools] == [1]
    (step,) = [n for n in graph.node if n.op_type == "If" and n.name == "adapt.step"]
    then = next(a.g for a in step.attribute if a.name == "then_branch")
    assert [len(n.output) for n in then.node if n.op_type == "MaxPool"] == [2]
    rt = RealmRuntime(tmp_path / "a", threads=1)
    assert rt.backend == "onnx"
    xs = np.random.default_rng(0).standard_normal((60, 3, 16, 16)).astype(np.float32)
    compare_twins(rt, RealmAdapter(copy.deepcopy(model), config), xs, source=model)
    assert 0 < rt.state.updates < 60


@pytest.mark.parametrize("method", ["realm", "eta"])
def test_the_export_validates_the_adapt_graph_on_selected_and_skipped_samples(
    method, digits_model, tmp_path
):
    directory = tmp_path / "a"
    export_digits(digits_model, directory, method=method)
    section = json.loads((directory / "realm.json").read_text())["adapt"]
    reports = section["validation"]
    assert all(r["passed"] and r["mismatch"] is None for r in reports)
    assert all(r["steps"] >= 6 and r["logits_max_abs"] <= r["logits_tol"] for r in reports)
    # EATA: the written graph, and its twin with the cut opened so that the update runs too.
    assert len(reports) == (2 if method == "eta" else 1)
    seen = set().union(*(r["reasons"] for r in reports))
    assert "updated" in seen and seen - {"updated"}, seen


def test_the_adapt_benchmark_runs_the_rates_it_names():
    from realm_tools.bench import bench_adapt, format_adapt_costs, machine_peak

    peak = machine_peak(1, n=256, repeats=1)
    row = bench_adapt(
        "digits", rates=(0.0, 0.5, 1.0), samples=4, rounds=1, threads=1, warmup=1, peak=peak
    )
    assert row.stream_rate == {0.0: 0.0, 0.5: 0.5, 1.0: 1.0}  # the forced decisions held
    assert row.forward_ms > 0 and row.skip_ms > 0 and row.update_ms > 0
    assert row.target_ms(0.0) == row.forward_ms and row.target_ms(1.0) == row.step_ms
    assert row.today_ms(1.0) == row.step_ms
    table = format_adapt_costs([row], rates=(0.0, 0.5, 1.0))
    # A row per rate, one of the paths and floor, one of the update in forwards.
    assert table.count("| digits |") == 5 and "share of the floor" in table
    assert row.plain_ms > 0 and row.torch_forward_ms > 0 and row.torch_update_ms > 0
    assert f"**{row.update_ms / row.plain_ms:.2f}**" in table
    assert f"{row.torch_update_ms / row.torch_forward_ms:.2f}" in table
