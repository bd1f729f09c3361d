"""``realm bench speed``: the shape and sanity of its figures (not timings), and FLOP counting."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from realm_tools.bench import (
    bench_model,
    block_ratios,
    count_flops,
    format_speed,
    machine_peak,
    take_turns,
)
from realm_tools.cli import main
from realm_tools.models import build_model


@pytest.mark.parametrize("kind", ["conv", "linear"])
def test_flop_counter_counts_no_gradient_of_frozen_weights(kind):
    # The floor of an adapt step rests on this: frozen weights cost no weight gradient.
    counted = {}
    for weight_grad in (True, False):
        torch.manual_seed(0)
        layer = nn.Conv2d(8, 16, 3, padding=1) if kind == "conv" else nn.Linear(64, 32)
        layer.requires_grad_(weight_grad)
        x = torch.randn((1, 8, 16, 16) if kind == "conv" else (4, 64), requires_grad=True)
        out = []
        forward = count_flops(lambda layer=layer, x=x, out=out: out.append(layer(x)))
        counted[weight_grad] = (forward, count_flops(lambda out=out: out[0].sum().backward()))
    forward, backward_frozen = counted[False]
    assert backward_frozen == forward > 0  # the input gradient only
    assert counted[True][1] == 2 * forward  # input and weight gradients


def test_cpu_attention_is_counted():
    q = torch.randn(1, 3, 50, 16, requires_grad=True)
    out = []
    forward = count_flops(lambda: out.append(F.scaled_dot_product_attention(q, q, q)))
    assert forward == 2 * 2 * 3 * 50 * 50 * 16
    assert count_flops(lambda: out[0].sum().backward()) == 5 * 2 * 3 * 50 * 50 * 16


def test_machine_peak_is_sane():
    peak = machine_peak(1, n=256, repeats=2)
    assert peak.measured_gflops > 0 and peak.cores == 1
    # Both libraries timed (MKL's torch.mm can run far below MLAS on AMD CPUs), the fastest
    # counts.
    assert set(peak.by_library) == {"torch.mm", "onnxruntime MatMul"}
    assert peak.measured_gflops == max(peak.by_library.values())
    if peak.theoretical_gflops is not None:
        assert peak.theoretical_gflops == pytest.approx(peak.ghz * peak.flops_per_cycle)
    assert "GFLOP/s" in peak.describe()


def test_build_model_image_size_override():
    model, shape, classes = build_model("timm:convnext_atto", 64)
    assert shape == (3, 64, 64) and classes == 1000
    with torch.no_grad():
        assert model(torch.randn(1, *shape)).shape == (1, 1000)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("nope")


def test_speed_bench_figures_are_sane(tmp_path):
    peak = machine_peak(1, n=256, repeats=2)
    rows = bench_model(
        "digits", threads=1, samples=4, warmup=1, work_dir=tmp_path, methods=(), peak=peak
    )
    assert [r.backend for r in rows] == ["onnx", "ort-training"]
    assert rows[0].torch_step_ms == rows[1].torch_step_ms  # one torch measurement, both rows
    row = rows[0]
    for value in (
        row.torch_predict_ms,
        row.runtime_predict_ms,
        row.torch_adapt_ms,
        row.runtime_adapt_ms,
        row.torch_step_ms,
        row.runtime_step_ms,
    ):
        assert 0 < value < 10_000
    assert 0 <= row.update_rate <= 1
    assert row.torch_peak_rss_mb is not None
    assert 10 < row.runtime_peak_rss_mb < row.torch_peak_rss_mb
    assert 0 < row.predict_gflop < row.step_gflop <= 3 * row.predict_gflop
    assert row.methods == ()
    table = format_speed(rows)
    assert table.count("| digits | onnx |") == 2 and "| digits | onnx | 1 |" in table
    assert table.count("| digits | ort-training |") == 2  # speed and floor tables


def _finite_positive(value):
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_speed_cli_quick_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    # Two methods: REALM's row comes from the main export, Tent's from one of its own.
    argv = ["bench", "speed", "--quick", "--threads", "1", "--methods", "realm", "tent"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for backend in ("onnx", "ort-training"):  # speed, floor, and one row per method
        assert printed.count(f"| digits | {backend} |") == 4
    figures = json.loads(out.read_text())
    assert set(figures) == {"peaks", "speed", "methods"}
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (peak,) = figures["peaks"]
    assert peak["threads"] == 1 and _finite_positive(peak["measured_gflops"])

    row, other = figures["speed"]
    assert (row["backend"], other["backend"]) == ("onnx", "ort-training")
    assert row["torch_step_ms"] == other["torch_step_ms"]
    assert row["model"] == "digits" and row["threads"] == 1 and row["samples"] == 5
    assert row["torch_peak_rss_mb"] is None  # --quick skips the torch-only process
    assert row["runtime_peak_rss_mb"] > 10
    for side in ("torch", "runtime"):
        for kind in ("predict", "adapt", "adapt_p90", "step"):
            assert _finite_positive(row[f"{side}_{kind}_ms"]) and row[f"{side}_{kind}_ms"] < 1e4
        for call in ("predict", "step"):
            achieved = row[f"{side}_{call}_achieved"]
            # Not ≤ 1: the peak is a matmul probe timed in its own moment, and on a shared
            # machine it can run slower than the graph did (seen when torch.mm alone set it).
            assert 0 < achieved < 10
            floor = row[f"{call}_floor_ms"]
            assert achieved == pytest.approx(floor / row[f"{side}_{call}_ms"])
    assert 0 < row["predict_gflop"] < row["step_gflop"]
    assert row["step_floor_ms"] == pytest.approx(
        row["step_gflop"] / row["peak_measured_gflops"] * 1e3
    )
    for kind in ("predict", "adapt", "step"):
        assert row[f"{kind}_ratio"] == pytest.approx(
            row[f"runtime_{kind}_ms"] / row[f"torch_{kind}_ms"]
        )
    assert 0 <= row["update_rate"] <= 1
    # The export the rows ran, with both graphs' validation (within export's tolerances).
    assert _finite_positive(row["export_s"]) and row["export_s"] == other["export_s"]
    assert set(row["validation"]) == {"training", "portable"}
    for figures_of_graph in row["validation"].values():
        assert 0 <= figures_of_graph["logits_max_abs"] <= 1e-4
        assert 0 <= figures_of_graph["grad_max_rel"] <= 1e-3
    assert "| digits | " in printed.split("export s (validation included)")[1]
    assert len(row["step_ratio_blocks"]) == 5  # 5 timed samples: 5 non-empty blocks of 6
    assert min(row["step_ratio_blocks"]) <= row["step_ratio"] * 1.5

    methods = {m["method"]: m for m in figures["methods"] if m["backend"] == "onnx"}
    assert list(methods) == ["realm", "tent"]
    assert len(figures["methods"]) == 4
    for m in methods.values():
        assert m["model"] == "digits" and m["step_update_rate"] == 1  # forcing works
        assert m["step_gflop"] == pytest.approx(row["step_gflop"], rel=1e-3)
        for side in ("torch", "runtime"):
            assert _finite_positive(m[f"{side}_adapt_ms"]) and _finite_positive(
                m[f"{side}_step_ms"]
            )
        assert m["step_ratio"] == pytest.approx(m["runtime_step_ms"] / m["torch_step_ms"])
    realm = methods["realm"]
    assert realm["torch_step_ms"] == row["torch_step_ms"]  # one measurement, two tables
    assert methods["tent"]["update_rate"] == 1  # Tent has no filter


def test_sides_take_turns_on_the_same_samples():
    """Every side runs the warm-up, then every timed sample once, in blocks that alternate."""
    calls: list[tuple[str, tuple[int, ...]]] = []

    def side(name):
        def block(idx):
            calls.append((name, tuple(int(i) for i in idx)))
            return np.full(len(idx), 10.0 * len(name)) + np.asarray(idx)

        return block

    times = take_turns({"a": side("a"), "bb": side("bb")}, samples=8, warmup=2, rounds=3)
    assert calls[:2] == [("a", (0, 1)), ("bb", (0, 1))]  # warm-up first, untimed
    # Blocks of the timed samples 2..7, the order of the sides reversed every other block.
    assert calls[2:] == [
        ("a", (2, 3)), ("bb", (2, 3)),
        ("bb", (4, 5)), ("a", (4, 5)),
        ("a", (6, 7)), ("bb", (6, 7)),
    ]  # fmt: skip
    np.testing.assert_array_equal(times["a"], 10.0 + np.arange(2, 8))
    np.testing.assert_array_equal(times["bb"], 20.0 + np.arange(2, 8))


def test_speed_cli_rejects_unknown_names(capsys):
    assert main(["bench", "speed", "--models", "nope"]) == 2
    assert main(["bench", "speed", "--quick", "--methods", "cotta"]) == 2
    err = capsys.readouterr().err
    assert "unknown models ['nope']" in err and "methods ['cotta']" in err


def test_block_ratios_follow_take_turns_blocks():
    """One ratio per take_turns block: a slow block on both sides leaves the ratio alone."""
    torch_ms = np.array([10.0] * 5 + [20.0] * 5 + [10.0] * 20)
    runtime_ms = np.array([8.0] * 5 + [16.0] * 5 + [9.0] * 20)
    ratios = block_ratios(runtime_ms, torch_ms)
    assert len(ratios) == 6
    assert ratios[:2] == pytest.approx((0.8, 0.8)) and ratios[2:] == pytest.approx((0.9,) * 4)


def test_export_bench_prints_the_ratio_and_where_the_time_goes(tmp_path, capsys):
    code = main(["bench", "export", "--models", "digits", "--rounds", "1", "--out", str(tmp_path)])
    assert code == 0
    (row,) = json.loads((tmp_path / "export.json").read_text())
    assert row["bare"] > 0 and row["export"] > 0
    assert row["stages"] and sum(row["stages"].values()) == pytest.approx(row["export"], rel=0.05)
    assert "validating the adapt graph against the PyTorch reference" in row["stages"]
    printed = capsys.readouterr().out
    assert f"{row['export'] / row['bare']:.1f}×" in printed and "target ≤ 4×" in printed


def test_profile_bench_groups_a_step_by_what_it_computes(capsys):
    from realm_tools.bench import PROFILE_GROUPS

    code = main(
        [
            "bench", "profile", "--models", "timm:mobilenetv3_small_050",
            "--image-size", "32", "--runs", "3", "--threads", "1", "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    rows = {}
    for line in printed.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in PROFILE_GROUPS:
            rows[cells[0]] = cells
    # A BatchNorm MobileNetV3: depthwise gradients, hard-swish masks, the norms' backward.
    for group in ("input gradients, depthwise", "activation masks", "norm backward", "update"):
        assert int(rows[group][1]) > 0 and float(rows[group][3]) >= 0, group
    # Most of the step's nodes, and of the bytes they move, have a group: counted, not timed
    # (a loaded machine's timings would judge the scheduler).
    assert sum(float(r[3]) for r in rows.values()) > 0
    nodes = sum(int(r[1]) for r in rows.values())
    mbytes = sum(float(r[8]) for r in rows.values())
    unattributed = rows.get("unattributed", ["", "0", "", "", "", "", "", "", "0"])
    assert int(unattributed[1]) < 0.1 * nodes and float(unattributed[8]) < 0.25 * mbytes
    assert "forwards**" in printed
