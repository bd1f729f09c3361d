"""``realm bench speed``: the shape and sanity of its figures (not timings)."""

from __future__ import annotations

import json

from realm_sdk._bench import bench_model, format_speed
from realm_sdk._cli import main


def test_speed_bench_figures_are_sane(tmp_path):
    row = bench_model("digits", threads=1, samples=4, warmup=1, work_dir=tmp_path)
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
    assert 10 < row.runtime_peak_rss_mb < row.torch_peak_rss_mb
    table = format_speed([row])
    assert table.count("\n") == 2 and "| digits | 1 |" in table


def test_speed_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert (
        main(
            [
                "bench",
                "speed",
                "--models",
                "digits",
                "--samples",
                "3",
                "--warmup",
                "1",
                "--threads",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())
    assert rows[0]["model"] == "digits" and rows[0]["step_ratio"] > 0
    assert main(["bench", "speed", "--models", "nope"]) == 2
    assert "unknown models" in capsys.readouterr().err
