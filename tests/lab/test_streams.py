"""The long-running streams (continual, mixed, gradual, correlated, long, junk) and their bench."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from realm_lab.bench import (
    StreamRun,
    bench_streams,
    plot_streams,
    streams_from_json,
    streams_tables,
    streams_to_json,
)
from realm_tools.data import JUNK, NO_LABEL, SETTINGS, DigitsShift, StreamSettings, build_stream

SMALL = StreamSettings(passes=2, horizon=500, junk_length=50, limit=40)
DOMAINS = ("gaussian_noise", "defocus_blur", "contrast")


@pytest.fixture(scope="module")
def shift(digits):
    return DigitsShift(digits)


def test_continual_runs_the_domains_in_turn_for_every_pass(shift):
    s = build_stream(shift, "continual", seed=3, corruptions=DOMAINS, settings=SMALL)
    assert len(s) == 2 * 3 * 40
    assert [name for _, name in s.segments] == list(DOMAINS) * 2
    # Each pass shows the same samples in a new order.
    assert not np.array_equal(s.labels[:40], s.labels[120:160])
    assert sorted(s.index[:40, 1].tolist()) == sorted(s.index[120:160, 1].tolist())
    assert s.parts[s.index[120, 0]] is s.parts[s.index[0, 0]]  # the same samples again
    x = s.sample(5)
    assert x.shape == (1, 1, 32, 32) and x.dtype == np.float32


def test_mixed_shuffles_every_domain_together(shift):
    s = build_stream(shift, "mixed", seed=3, corruptions=DOMAINS, settings=SMALL)
    parts = s.index[:, 0]
    assert sorted(np.bincount(parts).tolist()) == [40, 40, 40]
    # Shuffled: the first 40 samples come from more than one domain.
    assert len(set(parts[:40].tolist())) > 1


def test_gradual_goes_up_to_five_and_down_again(shift):
    s = build_stream(shift, "gradual", seed=1, corruptions=DOMAINS[:1], settings=SMALL)
    names = [name for _, name in s.segments]
    assert names == [f"gaussian_noise@{k}" for k in (1, 2, 3, 4, 5, 4, 3, 2, 1)]
    # Each sample of the domain once, whatever its severity: as long as one continual pass.
    assert len(s) == 40 and sorted(s.index[:, 1].tolist()) == list(range(40))
    at_five = int(s.index[s.segments[4][0], 0])
    assert not np.array_equal(s.parts[at_five], s.parts[int(s.index[0, 0])])  # severity 5's pixels


def test_correlated_streams_show_few_classes_at_a_time(shift):
    settings = StreamSettings(limit=None)
    s = build_stream(shift, "correlated", seed=0, corruptions=DOMAINS[:1], settings=settings)
    iid = build_stream(shift, "continual", seed=0, corruptions=DOMAINS[:1], settings=settings)

    def classes_per_window(labels: np.ndarray) -> float:
        return float(np.mean([len(set(labels[i : i + 30])) for i in range(0, len(labels), 30)]))

    assert sorted(s.labels.tolist()) == sorted(iid.labels[: len(s)].tolist())
    assert classes_per_window(s.labels) < 0.5 * classes_per_window(iid.labels)


def test_long_streams_reach_their_horizon_in_whole_passes(shift):
    s = build_stream(shift, "long", seed=0, corruptions=DOMAINS, settings=SMALL)
    assert len(s) >= 500 and len(s) % 120 == 0


@pytest.mark.parametrize("setting", JUNK)
def test_junk_streams(shift, setting):
    s = build_stream(shift, setting, seed=2, corruptions=DOMAINS, settings=SMALL)
    assert len(s) == 50
    frames = np.concatenate([s.sample(i) for i in range(len(s))])
    if setting == "junk-dark":
        assert np.ptp(frames) == 0 and (s.labels == NO_LABEL).all()
    elif setting == "junk-image":
        assert (frames == frames[0]).all() and len(set(s.labels.tolist())) == 1
    elif setting == "junk-class":
        assert len(set(s.labels.tolist())) == 1 and len({f.tobytes() for f in frames}) > 1
    else:
        assert (s.labels == NO_LABEL).all() and frames.std() > 0.5


def test_unknown_settings_are_named(shift):
    with pytest.raises(ValueError, match="unknown stream setting 'weekly'"):
        build_stream(shift, "weekly", seed=0, corruptions=DOMAINS)
    assert "episodic" in SETTINGS


def test_the_bench_runs_every_row_and_tabulates(shift, digits_model, tmp_path):
    settings = StreamSettings(passes=2, junk_length=30, limit=15)
    runs = bench_streams(
        shift,
        digits_model,
        settings=["continual", "junk-dark"],
        seeds=[5],
        corruptions=DOMAINS[:2],
        methods=["none", "sar", "realm-guarded"],
        stream_settings=settings,
    )
    assert len(runs) == 2 * 3
    continual = {r.method: r for r in runs if r.setting == "continual"}
    assert continual["none"].updates == 0 and continual["realm-guarded"].updates > 0
    assert all(r.clean_after is not None for r in runs)
    assert len(continual["realm-guarded"].segments) == 4  # 2 domains × 2 passes
    table = streams_tables(runs)
    assert "REALM + guardrails" in table and "pass 2" in table
    dark = [r for r in runs if r.setting == "junk-dark"]
    assert all(r.accuracy is None for r in dark)
    # Saved and read back, the figures tabulate the same; the plots come from the traces.
    again = streams_from_json(streams_to_json(runs, {"seeds": [5]}))
    assert streams_tables(again) == table
    assert [r.segments for r in again] == [r.segments for r in runs]
    plots = plot_streams(again, tmp_path)
    assert sorted(p.name for p in plots) == ["stream_continual.png", "stream_junk-dark.png"]
    assert all(p.stat().st_size > 10_000 for p in plots)


def test_a_table_of_junk_streams_alone_has_no_empty_accuracy_table():
    runs = [
        StreamRun(
            "junk-dark",
            m,
            0,
            10,
            None,
            [],
            97.0,
            0,
            dict.fromkeys(("resets_recovery", "resets_collapse", "drift_clips"), 0),
        )
        for m in ("none", "realm")
    ]
    table = streams_tables(runs)
    assert "Online accuracy" not in table and table.startswith("### Clean accuracy")
    assert "| REALM | 97.0 |" in table


def test_worker_processes_give_the_figures_of_one_process(shift, digits_model):
    settings = StreamSettings(passes=2, limit=12)
    common = dict(
        settings=["episodic", "continual"],
        seeds=[4],
        corruptions=DOMAINS[:2],
        methods=["tent", "realm-guarded"],
        stream_settings=settings,
    )
    seen: dict[str, list[int]] = {}

    def on_run(label: str, total: int):
        seen[label] = [total]
        return lambda done: seen[label].append(done)

    one = bench_streams(shift, digits_model, **common)
    two = bench_streams(shift, digits_model, **common, jobs=2, on_run=on_run)
    assert [(r.setting, r.method, r.seed) for r in two] == [
        (r.setting, r.method, r.seed) for r in one
    ]
    for a, b in zip(one, two, strict=True):
        assert a.accuracy == b.accuracy and a.segments == b.segments
        assert a.updates == b.updates and a.clean_after == b.clean_after
    # Every run reported its progress to the end: 2 episodic parts + 1 continual, per method.
    assert len(seen) == 2 * 3
    assert all(done[-1] == done[0] for done in seen.values())
    with pytest.raises(ValueError, match="jobs must be"):
        bench_streams(shift, digits_model, **common, jobs=0)


def test_junk_on_data_without_a_clean_split_is_refused_before_any_run(digits, digits_model):
    class NoClean(DigitsShift):
        def clean(self):
            return None

    started: list[str] = []
    with pytest.raises(ValueError, match="junk-dark need clean images of digits"):
        bench_streams(
            NoClean(digits),
            digits_model,
            settings=["continual", "junk-dark"],
            seeds=[0],
            corruptions=DOMAINS[:1],
            methods=["realm"],
            stream_settings=SMALL,
            on_run=lambda label, total: started.append(label),
        )
    assert started == []


def test_the_table_says_where_realm_loses():
    def run(method: str, accuracy: float, clean: float) -> StreamRun:
        events = dict.fromkeys(("resets_recovery", "resets_collapse", "drift_clips"), 0)
        return StreamRun("mixed", method, 0, 10, accuracy, [], clean, 0, events)

    runs = [run("eta", 80.0, 96.0), run("sar", 70.0, 97.0), run("realm", 75.0, 97.0)]
    runs.append(run("realm-guarded", 81.0, 96.5))
    table = streams_tables(runs)
    assert "### Where REALM loses" in table
    assert "- mixed, online accuracy: REALM 75.0 < ETA 80.0" in table
    assert "- mixed, clean after: REALM + guardrails 96.5 < SAR 97.0" in table
    assert "REALM + guardrails 81.0" not in table  # it beats both: no line
    assert "REALM 97.0 <" not in table  # a tie is no loss


def test_a_stopped_bench_goes_on_from_its_run_log(shift, digits_model, tmp_path):
    from realm_lab.bench import RunLog, streams_fingerprint

    settings = StreamSettings(passes=1, junk_length=20, limit=10)
    common = dict(
        settings=["episodic", "junk-dark"],
        seeds=[6],
        corruptions=DOMAINS[:2],
        methods=["none", "realm-guarded"],
        stream_settings=settings,
    )
    mark = streams_fingerprint(
        shift, digits_model, corruptions=DOMAINS[:2], preset="cifar", stream_settings=settings
    )
    path = tmp_path / "runs.jsonl"
    whole = bench_streams(shift, digits_model, **common, log=RunLog(path, mark))
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 2 * 2 + 2  # fingerprint, 2 episodic parts and 1 junk run per method
    # Stopped while writing the last run: that line is cut off, the others are kept.
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    log = RunLog(path, mark)
    assert (len(log.done), log.dropped) == (5, 1)
    ran: list[str] = []

    def on_run(label: str, total: int):
        ran.append(label)
        return None

    again = bench_streams(shift, digits_model, **common, log=log, on_run=on_run)
    assert ran == ["junk-dark/s6/realm-guarded"]  # only the lost run ran again
    assert streams_tables(again) == streams_tables(whole)
    assert [(r.setting, r.method, r.clean_after, r.updates) for r in again] == [
        (r.setting, r.method, r.clean_after, r.updates) for r in whole
    ]
    assert len(RunLog(path, mark).done) == 6  # the run done again is kept too
    # Runs of another benchmark are never mixed in: here, other stream shapes.
    other = streams_fingerprint(
        shift,
        digits_model,
        corruptions=DOMAINS[:2],
        preset="cifar",
        stream_settings=StreamSettings(passes=1, junk_length=30, limit=10),
    )
    with pytest.raises(ValueError, match=r"holds runs of another benchmark \(its streams differ"):
        RunLog(path, other)


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running, not a zombie left for its new parent to reap."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_workers_end_when_the_bench_is_killed(tmp_path):
    import signal
    import subprocess
    import time

    argv = [sys.executable, "-m", "realm_lab", "bench", "quality", "--settings", "long"]
    argv += ["--seeds", "0", "--methods", "realm", "tent", "--jobs", "2", "--epochs", "1"]
    argv += ["--cache-dir", str(tmp_path), "--out", str(tmp_path / "o"), "--no-progress"]
    bench = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        workers: list[int] = []
        while len(workers) < 3 and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(1)
            # the pool's workers and its queue's manager (the resource tracker ends itself)
            workers = [p for p in _children(bench.pid) if "spawn_main" in _cmdline(p)]
        assert bench.poll() is None and len(workers) >= 3, "the pool never started"
        bench.send_signal(signal.SIGTERM)  # not handled: the parent dies at once
        bench.wait(30)
        # a worker still importing torch ends once it has: minutes on a loaded machine
        deadline = time.monotonic() + 180
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.5)
        alive = [p for p in workers if _alive(p)]
        assert not alive, f"workers {alive} outlived the killed bench"
    finally:
        bench.kill()


def test_the_episodic_table_has_a_row_per_corruption_and_the_gain_over_no_adapt():
    def run(method: str, seed: int, parts: dict[str, float]) -> StreamRun:
        events = dict.fromkeys(("resets_recovery", "resets_collapse", "drift_clips"), 0)
        mean = float(np.mean(list(parts.values())))
        return StreamRun("episodic", method, seed, 20, mean, list(parts.items()), None, 0, events)

    runs = [
        run("none", 0, {"fog": 50.0, "snow": 60.0}),
        run("none", 1, {"fog": 52.0, "snow": 62.0}),
        run("eta", 0, {"fog": 58.0, "snow": 61.0}),
        run("eta", 1, {"fog": 60.0, "snow": 63.0}),
        run("realm", 0, {"fog": 55.0, "snow": 66.0}),
        run("realm", 1, {"fog": 57.0, "snow": 68.0}),
    ]
    lines = streams_tables(runs).splitlines()
    assert "10 samples per stream, mean ± std over 2 seed(s)" in "\n".join(lines)
    assert "| fog | 51.0 ± 1.0 | **59.0 ± 1.0** | 56.0 ± 1.0 |" in lines
    assert "| snow | 61.0 ± 1.0 | 62.0 ± 1.0 | **67.0 ± 1.0** |" in lines
    assert "| average | 56.0 ± 1.0 | 60.5 ± 1.0 | **61.5 ± 1.0** |" in lines
    assert "| gain over no-adapt | +0.0 | +4.5 | +5.5 |" in lines


def test_overrides_reach_every_adapting_row_and_the_fingerprint(shift, digits_model):
    from realm_lab.bench import method_config, streams_fingerprint

    variant = {"lr": 0.005 / 16, "freeze_last_block": True}
    for method in ("tent", "eta", "sar", "realm", "realm-guarded"):
        config = method_config(method, "cifar", 10, variant)
        assert config.lr == variant["lr"] and config.freeze_last_block
    assert method_config("realm", "cifar", 10, variant).guardrails.max_drift is None
    assert method_config("realm-guarded", "cifar", 10, variant).guardrails.max_drift is not None
    plain = streams_fingerprint(
        shift, digits_model, corruptions=DOMAINS, preset="cifar", stream_settings=SMALL
    )
    varied = streams_fingerprint(
        shift,
        digits_model,
        corruptions=DOMAINS,
        preset="cifar",
        stream_settings=SMALL,
        overrides=variant,
    )
    assert plain == varied  # the rows' configurations live beside each run, not here


def test_a_run_log_runs_again_only_the_rows_whose_configuration_changed(
    shift, digits_model, tmp_path
):
    from realm_lab.bench import RunLog, streams_fingerprint

    settings = StreamSettings(passes=1, limit=8)
    common = dict(
        settings=["episodic"],
        seeds=[1],
        corruptions=DOMAINS[:2],
        methods=["none", "eta", "realm"],
        stream_settings=settings,
    )
    mark = streams_fingerprint(
        shift, digits_model, corruptions=DOMAINS[:2], preset="cifar", stream_settings=settings
    )
    path = tmp_path / "runs.jsonl"
    bench_streams(shift, digits_model, **common, log=RunLog(path, mark))
    ran: list[str] = []

    def on_run(label: str, total: int):
        ran.append(label)
        return None

    log = RunLog(path, mark)
    lr = {"lr": 0.001, "lr_alpha_lambda": 0.002}
    bench_streams(shift, digits_model, **common, log=log, on_run=on_run, overrides=lr)
    adapting = [f"episodic/{c}/s1/{m}" for m in ("eta", "realm") for c in DOMAINS[:2]]
    assert sorted(ran) == sorted(adapting)  # no-adapt's runs did not change: kept
    assert RunLog(path, mark).configs[adapting[-1]]["lr"] == 0.001  # the later run replaces
    with pytest.raises(ValueError, match="alpha_zero"):
        bench_streams(
            shift,
            digits_model,
            settings=["episodic"],
            seeds=[0],
            corruptions=DOMAINS[:1],
            methods=["realm"],
            stream_settings=SMALL,
            overrides={"alpha_zero": 1.0},
        )


def test_an_episodic_part_keeps_a_short_trace_in_the_run_log(shift, digits_model, tmp_path):
    """The log keeps each corruption's α/λ course at a coarse resolution, ending where the
    stream ends: no plot draws it, and the log of a whole table stays small."""
    import json

    from realm_lab.bench import RunLog, streams_fingerprint

    settings = StreamSettings(passes=1, limit=40)
    mark = streams_fingerprint(
        shift, digits_model, corruptions=DOMAINS[:2], preset="cifar", stream_settings=settings
    )
    path = tmp_path / "runs.jsonl"
    common = dict(settings=["episodic"], seeds=[0], corruptions=DOMAINS[:2], methods=["realm"])
    bench_streams(shift, digits_model, **common, stream_settings=settings, log=RunLog(path, mark))
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    runs = {line["label"].split("/")[1]: line["run"] for line in lines}
    coarse, fine = runs["defocus_blur"], runs["gaussian_noise"]  # the paper's Fig. 3 has it
    assert 10 <= len(coarse["trace_at"]) <= 20 and coarse["trace_at"][-1] == 39
    assert len(fine["trace_at"]) == 40  # every point of a short stream, for the figure
    for run in (coarse, fine):
        assert all(len(v) == len(run["trace_at"]) for v in run["trace"].values())


def test_a_run_log_keeps_runs_made_before_a_setting_existed_while_it_holds_its_default(tmp_path):
    from realm_lab.bench import RunLog

    log = RunLog(tmp_path / "runs.jsonl", {"data": "x"})
    log.add("a", {"accuracy": 1.0}, {"lr": 0.005})
    defaults = {"lr": 0.005, "patch_grid": 4}
    assert log.holds("a", {"lr": 0.005, "patch_grid": 4}, defaults)  # added since, at default
    assert not log.holds("a", {"lr": 0.005, "patch_grid": 2}, defaults)  # added, not default
    assert not log.holds("a", {"lr": 0.005, "patch_grid": 4})  # no defaults: exact only
    assert not log.holds("a", {"lr": 0.001, "patch_grid": 4}, defaults)  # a stored one moved
    assert not log.holds("a", {"patch_grid": 4}, defaults)  # a stored one is gone
    assert not log.holds("a", {"lr": 0.005, "other": 1}, defaults)  # no default known


def test_a_kept_run_at_another_batch_norm_rate_counts_only_where_the_model_has_none(
    shift, tmp_path
):
    """REALM's preset sets lr_batch_norm; a run kept before it named none is the same run on
    a model without BatchNorm (reused), and another one on a model with it (run again)."""
    import json

    import torch

    from realm_lab.bench import RunLog, streams_fingerprint
    from realm_tools.models import DigitsGNNet

    settings = StreamSettings(passes=1, limit=10)
    common = dict(settings=["episodic"], seeds=[0], corruptions=DOMAINS[:1], methods=["realm"])
    for stages, reused in ((0, True), (1, False)):
        torch.manual_seed(0)
        model = DigitsGNNet(batch_norm_stages=stages).eval()  # untrained: reuse is all judged
        mark = streams_fingerprint(
            shift, model, corruptions=DOMAINS[:1], preset="cifar", stream_settings=settings
        )
        path = tmp_path / f"stages{stages}.jsonl"
        bench_streams(shift, model, **common, stream_settings=settings, log=RunLog(path, mark))
        head, run = (json.loads(line) for line in path.read_text().splitlines())
        assert run["config"]["lr_batch_norm"] == 0.001  # the preset's, so the test bites
        del run["config"]["lr_batch_norm"]  # as runs kept before the preset set it
        path.write_text(f"{json.dumps(head)}\n{json.dumps(run)}\n")
        bench_streams(shift, model, **common, stream_settings=settings, log=RunLog(path, mark))
        assert len(path.read_text().splitlines()) == (2 if reused else 3)


def test_an_eata_row_estimates_its_fisher_on_the_clean_split(shift, digits_model):
    """EATA needs clean images: the digits' clean split gives them, and its row runs beside
    ETA's (with λ_F = 1 the two may well agree; here only that it ran and updated)."""
    runs = bench_streams(
        shift,
        digits_model,
        settings=["continual"],
        seeds=[5],
        corruptions=DOMAINS[:2],
        methods=["eta", "eata"],
        stream_settings=StreamSettings(passes=1, limit=20),
    )
    by = {r.method: r for r in runs}
    assert set(by) == {"eta", "eata"} and by["eata"].updates > 0
    assert "EATA" in streams_tables(runs) and "ETA" in streams_tables(runs)


def test_the_runtime_backend_runs_every_exported_row_and_the_sdk_the_rest(shift, digits_model):
    """``backend="runtime"``: each exported row is exported once and run by RealmRuntime;
    TTAug (no export) stays in the SDK. The parity suite checks the two twins step by step;
    here a float32 tie may flip at most one decision of the 60."""
    common = dict(
        settings=["episodic"],
        seeds=[0],
        corruptions=DOMAINS[:1],
        methods=["none", "tent", "realm", "ttaug"],
        stream_settings=StreamSettings(limit=60),
    )
    sdk = {r.method: r for r in bench_streams(shift, digits_model, **common)}
    rt = {r.method: r for r in bench_streams(shift, digits_model, **common, backend="runtime")}
    for method in ("tent", "realm"):
        assert abs(rt[method].accuracy - sdk[method].accuracy) <= 100 / 60 + 1e-9
        assert abs(rt[method].updates - sdk[method].updates) <= 1
    assert rt["ttaug"].accuracy == sdk["ttaug"].accuracy and rt["ttaug"].updates == 0
    with pytest.raises(ValueError, match="backend must be one of"):
        bench_streams(shift, digits_model, **common, backend="onnx")


def test_held_out_checkpoints_score_the_model_as_it_was_after_n_samples(shift, digits_model):
    """Table 4 from one run: after N samples the model (not updating) scores the tail."""
    import copy

    import torch

    from realm_lab.bench import HeldOut, method_config, run_stream
    from realm_sdk import RealmAdapter
    from realm_tools.data import Stream

    x, y = shift.stream("gaussian_noise", 5, seed=0, limit=60)
    rows = np.stack([np.zeros(len(y)), np.arange(len(y))], 1).astype(np.int64)
    stream = Stream("episodic", (x,), rows, y, ((0, "gaussian_noise"),))
    held = HeldOut(at=(10, 30), last=20)
    common = dict(preset="cifar", num_classes=10, clean=None, heldout=held)
    run = run_stream("tent", digits_model, stream, **common)
    adapter = RealmAdapter(copy.deepcopy(digits_model), method_config("tent", "cifar", 10))
    for i in range(10):
        adapter.adapt(torch.from_numpy(x[i : i + 1]))
    want = (adapter.predict(torch.from_numpy(x[40:])).argmax(1).numpy() == y[40:]).mean() * 100
    assert set(run.heldout) == {"10", "30"} and run.heldout["10"] == pytest.approx(want)
    frozen = run_stream("none", digits_model, stream, **common)
    assert frozen.heldout["10"] == frozen.heldout["30"]  # the source does not move
    assert run.trace["online"][-1] == pytest.approx(run.accuracy)
    assert run.trace["updates"][-1] == run.updates == 60
    short = run_stream("tent", digits_model, stream, **{**common, "heldout": HeldOut()})
    assert short.heldout == {}  # 60 samples hold no 8000th: nothing scored, nothing made up
