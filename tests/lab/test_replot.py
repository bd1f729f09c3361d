"""``realm-lab replot``: docs/'s plots drawn again from the runs kept under lab/runs/."""

from __future__ import annotations

import json
import shutil

from realm_lab.cli import RUNS_HOME, main

PNG = b"\x89PNG\r\n\x1a\n"
KEPT = ("attack/fmnist/frames.json", "fit/resnet26_gn/fit.json")  # small ones of two kinds


def _copy(tmp_path, rel: str):
    target = tmp_path / "runs" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(RUNS_HOME / rel, target)
    return target


def test_each_kept_run_draws_its_plots_at_the_same_path_under_out(tmp_path, capsys):
    for rel in KEPT:
        _copy(tmp_path, rel)
        (tmp_path / "docs" / rel).parent.mkdir(parents=True)
    _copy(tmp_path, "fit/vit_ln/fit.json")  # kept with no folder of plots: none drawn
    argv = ["replot", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "docs")]
    assert main(argv) == 0
    assert "fit/vit_ln/fit.json: skipped, no folder" in capsys.readouterr().out
    drawn = sorted(p.relative_to(tmp_path / "docs").as_posix() for p in tmp_path.rglob("*.png"))
    assert drawn == ["attack/fmnist/frames.png", "fit/resnet26_gn/fit.png"]
    assert all((tmp_path / "docs" / p).read_bytes().startswith(PNG) for p in drawn)
    # a folder named draws that folder's plots alone
    for p in drawn:
        (tmp_path / "docs" / p).unlink()
    assert main([*argv, "fit"]) == 0
    assert [p.name for p in tmp_path.rglob("*.png")] == ["fit.png"]
    assert "fit/resnet26_gn/fit.json:" in capsys.readouterr().out


def test_runs_it_cannot_draw_are_refused_in_one_sentence(tmp_path, capsys):
    argv = ["replot", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "docs")]
    assert main(argv) == 2
    assert "no folder of kept runs at" in capsys.readouterr().err
    kept = _copy(tmp_path, KEPT[0])
    (tmp_path / "docs" / KEPT[0]).parent.mkdir(parents=True)
    assert main([*argv, "ccc"]) == 2
    assert "no kept runs with plots under" in capsys.readouterr().err
    data = json.loads(kept.read_text())
    data["rows"][0]["unknown"] = 1
    kept.write_text(json.dumps(data))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is not a run this lab can draw" in err and "rerun its bench" in err
    assert err.count("\n") == 1 and not list(tmp_path.rglob("*.png"))
    # an endless run kept before its runs carried the plot's title
    ccc = tmp_path / "runs" / "ccc" / "ccc.json"
    ccc.parent.mkdir(parents=True)
    (tmp_path / "docs" / "ccc").mkdir()
    ccc.write_text(json.dumps({"meta": {"window": 10}, "rows": []}))
    assert main([*argv, "ccc"]) == 2
    assert "kept before its runs carried the plot's title" in capsys.readouterr().err
