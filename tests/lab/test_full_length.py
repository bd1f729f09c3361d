"""The full-length page: Table 1, Table 4 and the figures from kept runs, and the paper's row."""

from __future__ import annotations

import json

import numpy as np
import pytest

from realm_lab.bench import (
    full_length_page,
    marked,
    paper_rows,
    read_cells,
    readme_headline,
    replace_block,
)
from realm_lab.cli import main
from realm_tools.data import CIFAR_C_CORRUPTIONS

CORRUPTIONS = ("gaussian_noise", "snow")


def _run(accuracy: float, samples: int = 100, heldout: dict | None = None) -> dict:
    at = list(range(9, samples, 10))
    return {
        "accuracy": accuracy,
        "samples": samples,
        "updates": 50,
        "seconds": 36.0,
        "backend": "runtime",
        "trace_at": at,
        "trace": {"online": [accuracy] * len(at), "updates": list(np.linspace(1, 50, len(at)))},
        "heldout": heldout or {},
    }


def _log(path, runs: dict[str, dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"fingerprint": {"dataset": "fmnist-c"}})]
    lines += [json.dumps({"label": k, "config": None, "run": v}) for k, v in runs.items()]
    path.write_text("\n".join(lines) + "\n")


def test_the_page_averages_seeds_counts_what_is_missing_and_names_the_gap(tmp_path):
    runs = {}
    for seed, (realm, tent) in enumerate(((80.0, 70.0), (82.0, 74.0))):
        for c in CORRUPTIONS:
            held = {"1024": realm - 1, "8000": realm}
            runs[f"episodic/{c}/s{seed}/realm"] = _run(realm, heldout=held)
            runs[f"episodic/{c}/s{seed}/tent"] = _run(tent)
    runs["episodic/gaussian_noise/s0/sar"] = _run(60.0)  # SAR's row is not complete
    _log(tmp_path / "runs" / "m" / "runs.jsonl", runs)
    page = full_length_page(
        ["m"], tmp_path / "runs", tmp_path / "short", tmp_path / "out", CORRUPTIONS
    )
    realm = next(line for line in page.splitlines() if line.startswith("| REALM |"))
    assert "81.0 ± 1.0" in realm and "77.5" in realm and "100 × seeds 0,1, runtime" in realm
    sar = next(line for line in page.splitlines() if line.startswith("| SAR |"))
    assert sar.count("…") >= 2  # snow and the average: not made, not guessed
    assert "REALM beats Tent by 9.0 points on average" in page
    assert "| REALM | 80.0 ± 1.0 | 81.0 ± 1.0 |" in page  # Table 4, gaussian noise
    assert (tmp_path / "out" / "fig3-m.png").is_file() and (
        tmp_path / "out" / "fig4-m.png"
    ).is_file()
    assert "9 runs kept" in page  # 2 seeds × 2 corruptions × 2 rows, and SAR's one


def test_the_paper_row_s_average_is_the_mean_of_its_corruptions():
    """The CSV's averages, as the paper prints them, agree with its own 15 columns."""
    for row, values in paper_rows().items():
        columns = [v for k, v in values.items() if k != "average"]
        assert len(columns) == 15, row
        assert values["average"] == pytest.approx(np.mean(columns), abs=0.06), row


def test_the_command_says_when_there_are_no_runs(tmp_path, capsys):
    args = ["bench", "full-length", "--out", str(tmp_path / "o"), "--models", "m"]
    args += ["--doc", "", "--readme", ""]
    assert main(args) == 2
    assert "run make fmnist-full first" in capsys.readouterr().err
    _log(tmp_path / "o" / "m" / "runs.jsonl", {"episodic/snow/s0/none": _run(50.0)})
    assert main(args) == 0
    assert "no-adapt" in (tmp_path / "o" / "README.md").read_text()
    assert read_cells(tmp_path / "nothing.jsonl").runs == {}


def _complete(tmp_path, rows: dict[str, float], corruptions=CORRUPTIONS) -> None:
    runs = {
        f"episodic/{c}/s{seed}/{row}": _run(acc + seed, samples=10_000)
        for row, acc in rows.items()
        for c in corruptions
        for seed in (0, 1, 2)
    }
    _log(tmp_path / "o" / "m" / "runs.jsonl", runs)


def test_the_readme_headline_says_where_realm_loses_and_marks_short_rows(tmp_path):
    _complete(tmp_path, {"none": 70.0, "eata": 75.0, "realm": 74.0})
    _log(
        tmp_path / "o" / "m-views" / "runs.jsonl",
        {f"episodic/{c}/s0/memo": _run(72.0, samples=1000) for c in CORRUPTIONS},
    )
    text = readme_headline(["m", "later"], tmp_path / "o", CORRUPTIONS, views_models=["m"])
    # MEMO's one seed is by design; the rows compared have all three.
    assert "REALM gains 4.0 points over not adapting; EATA is ahead of it by 1.0." in text
    assert "- Not complete yet: later." in text
    row = next(line for line in text.splitlines() if line.startswith("| m |"))
    # Every row of Table 1 has a column, made or not; seed means (+1); MEMO ran short.
    assert row == "| m | 71.0 | … | 72.0† | … | … | … | 76.0 | … | … | 75.0 | … | 20 |"
    later = next(line for line in text.splitlines() if line.startswith("| later |"))
    # The AugMix rows are not planned on a model outside views_models: "–", not "not yet".
    assert later == "| later | … | – | – | – | … | … | … | … | … | … | … | 0 |"
    assert "– not on this model: 64 AugMix views a sample, run on m only" in text


def test_a_row_the_plan_leaves_out_says_so_and_one_still_missing_says_not_yet(tmp_path):
    _complete(tmp_path, {"none": 70.0, "realm": 74.0})
    runs = tmp_path / "o"
    for views_models, memo in (([], "not on this model"), (["m"], "not yet")):
        page = full_length_page(
            ["m"], runs, tmp_path / "s", tmp_path / "out", CORRUPTIONS, views_models
        )
        lines = {line.split(" | ")[0]: line for line in page.splitlines() if line.startswith("| ")}
        assert memo in lines["| MEMO"] and memo in lines["| SFT"] and memo in lines["| TTAug"]
        assert "not yet" in lines["| SAR"]  # not an AugMix row: planned on every model
    text = readme_headline(["m"], runs, CORRUPTIONS, views_models=[])
    assert "REALM gains 4.0 points over not adapting." in text  # three seeds each: no caveat


def test_the_headline_names_the_row_that_has_fewer_seeds(tmp_path):
    _complete(tmp_path, {"realm": 74.0, "eata": 70.0})
    runs = tmp_path / "o" / "m" / "runs.jsonl"
    extra = [
        json.dumps({"label": f"episodic/{c}/s0/none", "config": None, "run": _run(60.0, 10_000)})
        for c in CORRUPTIONS
    ]
    runs.write_text(runs.read_text() + "\n".join(extra) + "\n")
    text = readme_headline(["m"], tmp_path / "o", CORRUPTIONS)
    # on the seed both ran (REALM's seed 0: 74), not REALM's three against no-adapt's one
    assert "REALM gains 14.0 points over not adapting" in text
    assert "(so far compared with no-adapt on 1 of 3 seeds)" in text


def test_a_row_that_ran_shorter_is_set_against_realm_on_its_own_streams(tmp_path):
    _complete(tmp_path, {"none": 70.0, "realm": 80.0})  # 10,000 samples, seeds 0-2
    views = {f"episodic/{c}/s0/ttaug": _run(90.0, samples=1000) for c in CORRUPTIONS}
    views |= {f"episodic/{c}/s0/sft": _run(50.0, samples=500) for c in CORRUPTIONS}
    _log(tmp_path / "o" / "m-views" / "runs.jsonl", views)
    short = {  # the 1,000-sample table: REALM lower there than over 10,000
        f"episodic/{c}/s{seed}/realm": _run(65.0 + seed, samples=1000)
        for c in CORRUPTIONS
        for seed in (0, 1, 2)
    }
    _log(tmp_path / "s" / "m" / "runs.jsonl", short)
    page = full_length_page(["m"], tmp_path / "o", tmp_path / "s", tmp_path / "out", CORRUPTIONS)
    # TTAug's seed 0 against REALM's seed 0 of the same length: 65 - 90, not 81 - 90
    assert "REALM loses to TTAug by 25.0 points on average over the same 1,000-sample" in page
    assert "streams (seed 0)" in page
    assert "- SFT: no REALM runs on its streams (500 × seeds 0, runtime)" in page
    assert "REALM beats no-adapt by 10.0 points on average\n" in page  # the whole protocol
    text = readme_headline(["m"], tmp_path / "o", CORRUPTIONS, views_models=["m"])
    # TTAug's higher average is over other streams: not the full-length rows' rival
    assert "- **m**: REALM gains 10.0 points over not adapting." in text


def test_the_command_writes_its_blocks_into_the_pages_and_nothing_where_a_marker_is_missing(
    tmp_path, capsys
):
    _complete(tmp_path, {"none": 70.0, "realm": 74.0}, CIFAR_C_CORRUPTIONS)
    doc, readme = tmp_path / "doc.md", tmp_path / "README.md"
    doc.write_text("# Doc\n\n" + marked("full-length tables", "old") + "\nafter\n")
    readme.write_text("# Readme, no markers\n")
    args = ["bench", "full-length", "--out", str(tmp_path / "o"), "--models", "m"]
    args += ["--short", str(tmp_path / "s"), "--doc", str(doc), "--readme", str(readme)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "README.md needs one '<!-- full-length headline" in err and "add them" in err
    assert "old" in doc.read_text() and not (tmp_path / "o" / "README.md").exists()
    readme.write_text("# Readme\n" + marked("full-length headline", ""))
    assert main(args) == 0
    written = doc.read_text()
    assert "old" not in written and written.endswith("after\n")
    assert "| REALM |" in written and "**m** (90 runs kept)" in written
    assert "REALM gains 4.0 points over not adapting" in readme.read_text()
    again = replace_block(written, "full-length tables", "new")
    assert "new" in again and "| REALM |" not in again
