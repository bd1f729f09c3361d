"""``realm fit``'s measurements: forked workers agree with one process, and a journal resumes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from torch import nn

from realm_tools.fit import (
    NO_ADAPT_CANDIDATE,
    Bench,
    Job,
    Journal,
    Round,
    StreamImages,
    candidates,
    clean_accuracy,
    normalise,
    run_jobs,
    run_rounds,
)
from realm_tools.models import model_from_spec

MEAN, STD = (0.5,), (0.5,)


@pytest.fixture(scope="module")
def bench(digits, digits_model):
    x, y = digits.stream("gaussian_noise", 5, seed=0)
    clean_x, clean_y = digits.stream("clean", 1, seed=0)
    as_uint8 = np.rint(np.clip(x[:120] * STD[0] + MEAN[0], 0, 1) * 255).astype(np.uint8)
    streams = {
        "a": StreamImages(as_uint8[:60], y[:60].astype(np.int64)),
        "b": StreamImages(as_uint8[60:], y[60:120].astype(np.int64)),
    }
    return Bench(
        model=digits_model,
        streams=streams,
        mean=MEAN,
        std=STD,
        clean=np.ascontiguousarray(clean_x[:200], dtype=np.float32),
        clean_labels=clean_y[:200].astype(np.int64),
    )


@pytest.fixture(scope="module")
def configs():
    found = candidates("cifar", 10, bound=0.02, batch_norm=False, adapt_stages=None, tiers=1)
    return (NO_ADAPT_CANDIDATE, found[0], found[1])  # not adapting, REALM, Tent


def _jobs(configs):
    return [
        Job(("a",), 40, configs),
        Job(("b",), 40, configs),
        Job(("a", "b"), 30, configs[1:], long=True),
    ]


def test_forked_workers_measure_what_one_process_does(bench, configs, tmp_path):
    one = Journal(tmp_path / "one.jsonl", "x")
    two = Journal(tmp_path / "two.jsonl", "x")
    list(run_jobs(bench, _jobs(configs), one, workers=1))
    list(run_jobs(bench, _jobs(configs), two, workers=2))
    assert len(one.results) == 8
    _same_figures(one, two)
    realm_long = one.results[f"long|30|{configs[1].key}"]
    assert len(realm_long["per_stream"]) == 2 and realm_long["samples"] == 60
    assert realm_long["updates"] > 0
    source = clean_accuracy(bench)
    assert 0 < source <= 100
    assert one.results[f"a|40|{NO_ADAPT_CANDIDATE.key}"]["updates"] == 0


def test_the_journal_resumes_and_refuses_another_fit(bench, configs, tmp_path):
    path = tmp_path / "journal.jsonl"
    first = Journal(path, "fit-1")
    list(run_jobs(bench, _jobs(configs)[:1], first, workers=1))
    with path.open("a") as f:
        f.write('{"key": "cut sho')  # an interruption mid-line
    again = Journal(path, "fit-1")
    assert again.resumed == 3 and again.results == first.results
    assert list(run_jobs(bench, _jobs(configs)[:1], again, workers=1)) == []  # nothing left
    other = Journal(path, "fit-2")
    assert other.resumed == 0 and other.results == {}
    assert json.loads(path.read_text().splitlines()[0]) == {"fit": "fit-2"}


def test_normalise_is_the_models_own_input():
    x = np.array([[[[0, 255]]]], np.uint8)
    out = normalise(x, (0.5,), (0.25,))
    assert out.dtype == np.float32 and np.allclose(out, [[[[-2.0, 2.0]]]])


def test_each_round_keeps_the_best_on_longer_streams(bench, tmp_path):
    pool = candidates("cifar", 10, bound=0.02, batch_norm=False, adapt_stages=None, tiers=1)
    plan = [Round(len(pool), 20), Round(2, 50)]
    journal = Journal(tmp_path / "j.jsonl", "x")
    searched = run_rounds(bench, ["a", "b"], pool, plan, journal, workers=2)
    first, last = searched.rounds
    assert searched.plan == plan and searched.per_sample > 0  # no deadline: run as planned
    assert len(first) == len(pool) + 1 and len(last) == 3  # not adapting runs beside each
    assert [s.mean for s in first] == sorted((s.mean for s in first), reverse=True)
    kept = [s.candidate for s in first if s.candidate.config is not None][:2]
    assert {s.candidate.key for s in last} == {c.key for c in kept} | {"no-adapt"}
    assert all(s.length == 50 and len(s.per_stream) == 2 for s in last)
    for s in last:
        assert s.mean == pytest.approx(sum(s.per_stream) / 2)


def _same_figures(one: Journal, other: Journal) -> None:
    assert one.results.keys() == other.results.keys() and one.results
    for key, figures in one.results.items():
        assert figures["accuracy"] == other.results[key]["accuracy"], key
        assert figures["updates"] == other.results[key]["updates"], key


def test_spawned_workers_measure_what_one_process_does(bench, configs, tmp_path):
    # Where a forked child could not run a backward, the workers start fresh instead.
    one = Journal(tmp_path / "one.jsonl", "x")
    two = Journal(tmp_path / "two.jsonl", "x")
    list(run_jobs(bench, _jobs(configs), one, workers=1))
    said: list[str] = []
    list(run_jobs(bench, _jobs(configs), two, workers=2, notify=said.append, spawn=True))
    assert said == []
    _same_figures(one, two)


def test_a_model_loaded_from_a_file_reaches_spawned_workers(bench, tmp_path):
    source = tmp_path / "user_net.py"
    source.write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn

            class UserNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(1, 8, 3, stride=2)
                    self.norm = nn.GroupNorm(2, 8)
                    self.head = nn.Linear(8, 10)

                def forward(self, x):
                    return self.head(self.norm(self.conv(x)).relu().mean((2, 3)))

            def build():
                torch.manual_seed(0)
                return UserNet()
            """
        )
    )
    model, _ = model_from_spec(f"{source}:build", 10, cache_dir=tmp_path)
    users = dataclasses.replace(bench, model=model.eval())
    found = candidates("cifar", 10, bound=0.02, batch_norm=False, adapt_stages=None, tiers=1)
    jobs = [Job(("a",), 30, (found[0],)), Job(("b",), 30, (found[0],))]
    one = Journal(tmp_path / "one.jsonl", "x")
    two = Journal(tmp_path / "two.jsonl", "x")
    list(run_jobs(users, jobs, one, workers=1))
    said: list[str] = []
    list(run_jobs(users, jobs, two, workers=2, notify=said.append, spawn=True))
    assert said == []
    _same_figures(one, two)


def test_a_model_that_cannot_be_sent_is_measured_here_saying_why(bench, configs, tmp_path):
    class Local(nn.Module):  # a class pickle cannot name, as one defined in a notebook
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    local = dataclasses.replace(bench, model=Local(bench.model))
    one = Journal(tmp_path / "one.jsonl", "x")
    two = Journal(tmp_path / "two.jsonl", "x")
    list(run_jobs(local, _jobs(configs), one, workers=1))
    said: list[str] = []
    list(run_jobs(local, _jobs(configs), two, workers=2, notify=said.append, spawn=True))
    assert len(said) == 1 and "in this one process" in said[0] and "pickle" in said[0]
    _same_figures(one, two)
    with pytest.warns(RuntimeWarning, match="in this one process"):
        list(
            run_jobs(
                local, _jobs(configs), Journal(tmp_path / "w.jsonl", "x"), workers=2, spawn=True
            )
        )


def test_a_forked_child_cannot_run_a_backward_after_torch_export_and_a_backward():
    script = textwrap.dedent(
        """
        import torch
        from realm_tools.fit import fork_runs_autograd

        before = fork_runs_autograd()
        torch.export.export(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))
        x = torch.ones(1, requires_grad=True)
        (x * 2).sum().backward()  # starts autograd's device threads: export registered one
        print(before, fork_runs_autograd())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == ["True", "False"], done.stderr[-2000:]


def test_the_defaults_join_the_final_round_whatever_the_halving_kept(bench, tmp_path):
    pool = candidates("cifar", 10, bound=0.02, batch_norm=False, adapt_stages=None, tiers=1)
    plan = [Round(3, 16), Round(1, 24)]
    carried = pool[3]  # stands in for the defaults
    rounds = run_rounds(
        bench, ["a", "b"], pool[:3], plan, Journal(tmp_path / "j.jsonl", "x"), workers=1,
        carried=(carried,),
    ).rounds  # fmt: skip
    first, last = rounds
    assert carried.key not in {s.candidate.key for s in first}
    assert carried.key in {s.candidate.key for s in last} and len(last) == 3
    again = run_rounds(
        bench, ["a", "b"], pool[:3], plan, Journal(tmp_path / "k.jsonl", "x"), workers=1,
        carried=pool[:3],
    ).rounds  # fmt: skip
    keys = [s.candidate.key for s in again[-1]]
    assert len(keys) == len(set(keys))  # one already kept is not run twice


def test_a_search_behind_its_plan_shortens_its_later_rounds_and_still_weighs_the_defaults(
    bench, tmp_path
):
    pool = candidates("cifar", 10, bound=0.02, batch_norm=False, adapt_stages=None, tiers=1)
    plan = [Round(4, 16), Round(2, 48)]
    told: list[str] = []
    searched = run_rounds(
        bench, ["a", "b"], pool[:4], plan, Journal(tmp_path / "j.jsonl", "x"), workers=1,
        carried=(pool[4],), notify=told.append, deadline=time.perf_counter(),
    )  # fmt: skip
    first, last = searched.rounds
    assert searched.plan == [Round(4, 16), Round(2, 16)]  # no time left: the first's length
    assert [s.length for s in last] == [16] * 4 and pool[4].key in {s.candidate.key for s in last}
    kept = {s.candidate.key for s in first if s.candidate.config is not None}
    assert {s.candidate.key for s in last} - {pool[4].key, NO_ADAPT_CANDIDATE.key} <= kept
    assert len(told) == 1 and "shortened to 16 samples a stream" in told[0]
