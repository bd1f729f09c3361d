"""``realm-lab``: what its commands refuse before any run."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("guardrails.nope=1", "--set 'guardrails.nope=1': "),
        ("guardrails.max_drift=-1", "max_drift must be a finite number > 0 or None"),
        ("model.depth=3", "only guardrails.<field> and <method>.<setting> are nested"),
        ("sar.nope=3", "SAR has no setting ['nope']"),
        ("sam_rho=-1", "sam_rho must be a finite number > 0"),
        ("lr_batch_norm=0", "freeze BatchNorm layers with `frozen` instead"),
    ],
)
def test_a_guardrail_setting_that_cannot_be_is_refused_before_any_run(item, said, tmp_path, capsys):
    from realm_lab.cli import main

    argv = ["bench", "quality", "--settings", "continual", "--set", item, "--out", str(tmp_path)]
    assert main(argv) == 2
    assert said in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written


def test_none_sets_a_field_to_none(tmp_path, capsys):
    """``lr_batch_norm=none`` is None (BatchNorm at lr), so only the bad lr is named."""
    from realm_lab.cli import main

    argv = ["bench", "quality", "--settings", "continual", "--out", str(tmp_path), "--set"]
    assert main([*argv, "lr_batch_norm=none", "lr=-1"]) == 2
    said = capsys.readouterr().err
    assert "lr must be a finite number" in said and "lr_batch_norm" not in said
