"""The worst case inside the drift bound (``realm_tools.attack``): the ball, the search, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from realm_tools.attack import NormBall, SearchSettings, load_subject, worst_case
from realm_tools.cli import main


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
