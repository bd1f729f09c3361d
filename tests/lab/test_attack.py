"""What an attacker can do (``realm_lab.attack``): the worst case in the bound, crafted frames."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
import torch

from realm_export.bound import climb_bounds
from realm_lab.attack import (
    SHAPES,
    FrameAttacker,
    FrameSettings,
    NormBall,
    SearchSettings,
    attack_stream,
    load_subject,
    worst_case,
)
from realm_lab.cli import build_parser, main
from realm_sdk import Guardrails, RealmAdapter, RealmConfig


@pytest.fixture(scope="module")
def digits():
    return load_subject("digits")


def test_the_ball_at_its_centre_is_the_model(digits):
    ball = NormBall(digits.model, digits.names)
    x = torch.from_numpy(digits.images[:64])
    with torch.no_grad():
        torch.testing.assert_close(ball.logits(ball.theta0, x), digits.model(x), rtol=0, atol=0)
    assert ball.theta0.numel() == sum(
        dict(digits.model.named_parameters())[n].numel() for n in digits.names
    )
    moved = ball.theta0.clone()
    moved[0] += 1.0  # the first adapted tensor's first entry
    with torch.no_grad():
        assert not torch.equal(ball.logits(moved, x), ball.logits(ball.theta0, x))


def test_the_search_stays_in_the_ball_and_finds_a_loss(digits):
    ball = NormBall(digits.model, digits.names)
    settings = SearchSettings(steps=12, restarts=2, eval_every=4)
    images, labels = digits.images[:300], digits.labels[:300]
    small = worst_case(ball, images, labels, 0.002, settings)
    large = worst_case(ball, images, labels, 0.1, settings)
    for point in (small, large):
        assert 0 <= point.drift <= point.bound * (1 + 1e-5)  # 0: nothing below the source
        assert point.worst_accuracy <= point.source_accuracy
        assert len(point.per_restart) == 2
    assert small.source_accuracy == large.source_accuracy > 90  # the shipped digits model
    # A ball 50× wider holds parameters far worse on the clean images.
    assert large.drop > 10 and large.drop > small.drop


def test_a_deadline_cuts_the_restarts_and_the_climb_after_their_first(digits):
    ball = NormBall(digits.model, digits.names)
    settings = SearchSettings(steps=8, restarts=3, eval_every=4)
    images, labels = digits.images[:200], digits.labels[:200]
    now = time.perf_counter()
    cut = worst_case(ball, images, labels, 0.05, settings, deadline=now)
    whole = worst_case(ball, images, labels, 0.05, settings, deadline=now + 3600)
    assert len(cut.per_restart) == 1 and len(whole.per_restart) == 3
    assert cut.per_restart[0] == whole.per_restart[0]  # the first restart runs alike
    ladder = climb_bounds(
        ball, images, labels, [0.001, 0.002, 0.004], allowed_drop=100.0, search=settings,
        seed=0, deadline=time.perf_counter(),
    )  # fmt: skip
    assert [t["bound"] for t in ladder.tried] == [0.001] and ladder.chosen == 0.001
    assert len(ladder.tried[0]["per_restart"]) == 1


def test_bad_settings_and_names_are_refused_in_one_sentence(digits):
    ball = NormBall(digits.model, digits.names)
    with pytest.raises(ValueError, match="bound must be > 0"):
        worst_case(ball, digits.images, digits.labels, 0.0)
    with pytest.raises(ValueError, match="step must be in"):
        SearchSettings(step=2.0)
    with pytest.raises(ValueError, match="unknown attack subject 'cifar'; known: digits"):
        load_subject("cifar")
    with pytest.raises(ValueError, match="no parameters"):
        NormBall(digits.model, ["not.a.parameter"])


def test_the_command_writes_the_table_the_numbers_and_the_plot(tmp_path, capsys):
    code = main(
        [
            "bench", "attack", "--models", "digits", "--bounds", "0.01", "0.05",
            "--steps", "3", "--restarts", "1", "--limit", "200", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "worst_case.json").read_text())
    points = data["curves"]["digits"]
    assert [p["bound"] for p in points] == [0.01, 0.05]
    assert data["meta"]["counts"] == {"digits": 200}
    assert all(p["worst_accuracy"] <= p["source_accuracy"] for p in points)
    table = (tmp_path / "worst_case.md").read_text()
    assert "| digits | 200 |" in table and "b = 0.05" in table
    assert (tmp_path / "worst_case.png").stat().st_size > 10_000
    assert "| digits | 200 |" in capsys.readouterr().out
    assert np.isfinite([p["seconds"] for p in points]).all()


def test_the_box_search_stays_in_the_box_and_a_larger_set_starts_where_the_smaller_ended(digits):
    ball = NormBall(digits.model, digits.names)
    settings = SearchSettings(steps=8, restarts=2, eval_every=4)
    images, labels = digits.images[:300], digits.labels[:300]
    small = worst_case(ball, images, labels, 0.02, settings, shape="box")
    assert small.shape == "box" and small.delta is not None
    assert bool((small.delta.abs() <= 0.02 * ball.scale * (1 + 1e-6)).all())
    # Every entry's unit is its tensor's root mean square: a box corner is b·‖θ0‖ away.
    assert float(ball.scale.norm()) == pytest.approx(ball.norm0, rel=1e-5)
    large = worst_case(ball, images, labels, 0.08, settings, shape="box", start=small.delta)
    assert large.worst_accuracy <= small.worst_accuracy  # it holds the smaller box's worst
    assert len(large.per_restart) == 3  # one more restart, from the smaller box's worst
    assert "delta" not in large.to_dict() and large.to_dict()["shape"] == "box"
    with pytest.raises(ValueError, match="unknown shape 'star'; known: l2, box"):
        worst_case(ball, images, labels, 0.02, settings, shape="star")


def test_the_command_offers_exactly_the_search_shapes():
    parser = build_parser()
    attack = parser.parse_args(["bench", "attack", "--shapes", *SHAPES])
    assert attack.shapes == list(SHAPES)
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "attack", "--shapes", "star"])


def test_a_crafted_frame_stays_in_the_pixel_range_and_hurts_more_than_the_natural_one(digits):
    config = RealmConfig.preset("cifar", num_classes=10, guardrails=Guardrails.off())
    adapter = RealmAdapter(copy.deepcopy(digits.model), config)
    attacker = FrameAttacker(
        adapter,
        digits.own_images,
        digits.own_labels,
        digits.low,
        digits.high,
        FrameSettings(iterations=6, batch=len(digits.own_labels)),
    )
    natural = digits.images[:1]
    before = adapter.trainable_parameters()
    frame = attacker.craft(natural)
    after_craft = adapter.trainable_parameters()
    assert all(torch.equal(before[n], after_craft[n]) for n in before)  # crafting reads only
    assert frame.shape == natural.shape and frame.dtype == np.float32
    assert digits.low <= float(frame.min()) and float(frame.max()) <= digits.high
    assert not np.array_equal(frame, natural)

    def own_loss_after(x: np.ndarray) -> float:
        trial = RealmAdapter(copy.deepcopy(digits.model), config)
        assert trial.adapt(torch.from_numpy(x)).updated
        with torch.no_grad():
            logits = trial.predict(torch.from_numpy(digits.own_images))
        return float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(digits.own_labels)))

    # The real step (not the look-ahead's copy of it) raises the attacker's loss more.
    assert own_loss_after(frame) > own_loss_after(natural)


def test_an_attack_stream_counts_its_frames_and_scores_the_benign_ones(digits):
    settings = FrameSettings(iterations=1, batch=16)
    share = 0.25
    row = attack_stream(digits, "eta", False, share, settings=settings, per_corruption=4)
    assert row.frames == 4 * 12 and row.crafted == round(share * row.frames)
    assert 0 <= row.crafted_updates <= min(row.crafted, row.updates)
    assert row.benign_online is not None and 0 <= row.benign_online <= 100
    assert row.drift > 0 and row.updates > 0
    whole = attack_stream(digits, "tent", True, 1.0, settings=settings, per_corruption=1)
    assert whole.crafted == whole.frames and whole.benign_online is None
    still = attack_stream(digits, "none", False, 1.0, settings=settings, per_corruption=4)
    assert still.crafted == 0 and still.clean_after == still.source_accuracy and still.updates == 0
    with pytest.raises(ValueError, match="share must be in"):
        attack_stream(digits, "eta", False, 0.0)
    with pytest.raises(ValueError, match="unknown method 'deyo'"):
        attack_stream(digits, "deyo", False, 0.5)


def test_the_frames_command_writes_its_table_and_refuses_an_unknown_method(tmp_path, capsys):
    code = main(
        [
            "bench", "attack", "--frames", "--models", "digits", "--methods", "realm",
            "--shares", "0.5", "--iterations", "1", "--per-corruption", "2", "--limit", "100",
            "--set", "guardrails.max_drift=0.01", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads((tmp_path / "frames.json").read_text())
    labels = [(r["method"], r["guarded"]) for r in data["rows"]]
    assert labels == [("none", False), ("realm", False), ("realm", True)]
    assert all(r["frames"] == 24 for r in data["rows"])
    assert data["meta"]["guardrails"]["max_drift"] == 0.01  # the guarded rows' bound
    guarded = next(r for r in data["rows"] if r["guarded"])
    assert guarded["drift"] <= 0.01 * (1 + 1e-5)
    table = (tmp_path / "frames.md").read_text()
    assert "| realm + guardrails |" in table and "50%: clean after" in table
    assert (tmp_path / "frames.png").stat().st_size > 10_000
    capsys.readouterr()
    assert main(["bench", "attack", "--frames", "--methods", "deyo"]) == 2
    assert "unknown methods ['deyo']" in capsys.readouterr().err
    assert main(["bench", "attack", "--frames", "--set", "lr=0.1"]) == 2
    assert "--set: only guardrails.FIELD=VALUE" in capsys.readouterr().err
