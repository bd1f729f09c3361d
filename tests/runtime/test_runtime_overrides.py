"""Settings changed at run time (``RealmRuntime(overrides=...)``): what may be overridden and
what needs a re-export, the adapt graph fed the changed settings taking the SDK's steps, and
``auto`` staying on the adapt graph unless an order of graphs is asked for.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from helpers import compare_twins, export_digits

from realm_runtime import RealmRuntime
from realm_sdk import Guardrails, RealmAdapter


def test_runtime_side_settings_can_be_overridden(digits_artifacts, digits_stream):
    directory, _ = digits_artifacts
    with pytest.raises(ValueError, match="re-export"):
        RealmRuntime(directory, overrides={"method": "tent"})
    with pytest.raises(ValueError, match="diversity_margin"):
        RealmRuntime(directory, overrides={"diversity_margin": 2.0})
    with pytest.raises(ValueError, match=r"realm\.alpha0.*re-export"):  # a baked setting
        RealmRuntime(directory, overrides={"realm": {"alpha0": 0.3}})
    with pytest.raises(ValueError, match="sam_rho is a setting of SAR, not of REALM"):
        RealmRuntime(directory, overrides={"sam_rho": 0.1})
    frozen = RealmRuntime(directory, threads=1, overrides={"realm": {"lr_alpha_lambda": 0.0}})
    assert frozen.config.settings.lr_alpha_lambda == 0.0  # REALM's own, by its name
    rt = RealmRuntime(directory, threads=1, overrides={"diversity_margin": 1.0, "lr": 0.0})
    assert rt.backend == "onnx"  # the adapt graph is fed the changed settings
    source = rt.trainable_parameters()
    for i in range(10):
        assert rt.adapt(digits_stream[0][i : i + 1]).updated  # d = 1: S_div lets all through
    for n, v in rt.trainable_parameters().items():
        np.testing.assert_array_equal(v, source[n])  # lr = 0: θ unchanged
    assert rt.state.alpha != 0.15  # α, λ still learn at their own rate


OVERRIDDEN = {
    # hyper-parameters of the step and of the decision
    "step": ("realm", {"lr": 0.02, "momentum": 0.5, "diversity_margin": 0.7, "ema_beta": 0.8}),
    # REALM's guardrails: tighter, and the collapse guard switched on
    "guards": (
        "realm",
        {
            "guardrails": Guardrails(
                relax=0.3, anchor=0.02, max_drift=0.001, full_rate=0.8, collapse=0.9
            )
        },
    ),
    "episodic": ("realm", {"episodic": True, "diversity_margin": 0.9}),
    # a baseline exported without guardrails gets them, and a wider entropy cut
    "eta": ("eta", {"entropy_margin": 2.0, "guardrails": Guardrails(max_drift=0.002)}),
}


@pytest.mark.parametrize("case", list(OVERRIDDEN))
def test_overrides_run_in_the_adapt_graph_as_the_sdk_runs_them(
    case, digits_artifacts, digits_model, digits_stream, tmp_path
):
    """Settings changed at run time: the graph, fed them, takes the SDK's steps."""
    method, overrides = OVERRIDDEN[case]
    if method == "realm":  # the session's export
        directory, exported = digits_artifacts
    else:
        directory = tmp_path / "a"
        exported = export_digits(digits_model, directory, method=method)
    rt = RealmRuntime(directory, threads=1, overrides=overrides)
    assert rt.backend == "onnx"
    config = exported.with_overrides(**overrides)
    assert rt.config == config
    adapter = RealmAdapter(copy.deepcopy(digits_model), config)
    compare_twins(rt, adapter, digits_stream[0][:120], source=digits_model)
    st = rt.state
    assert st.updates > 0
    if case == "guards":  # the changed guardrails acted
        assert st.drift_clips > 0
    if case == "eta":
        assert st.drift_clips > 0 and st.skipped_entropy < 120 - st.updates


def test_auto_runs_the_adapt_graph_unless_asked_otherwise(digits_artifacts):
    """`auto` is the one adapt graph; a twin where an order of graphs is asked for."""
    directory, config = digits_artifacts
    assert RealmRuntime(directory, threads=1).backend == "onnx"
    changed = RealmRuntime(directory, threads=1, overrides={"lr": config.lr / 2})
    assert changed.backend == "onnx"
    ordered = RealmRuntime(directory, threads=1, schedule="train")
    assert (ordered.backend, ordered.schedule) == ("onnx-steps", "train")
    with pytest.raises(ValueError, match="leave schedule out"):
        RealmRuntime(directory, backend="onnx", schedule="train")
