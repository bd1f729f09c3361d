"""Issue 5: the parity suite — RealmRuntime (ONNX Runtime) vs. RealmAdapter (torch).

Fast tier: ``pytest -m parity`` (in ``make test``); slow tier: ``pytest -m "parity and slow"``.
The cases, streams and tolerances live in ``realm_sdk._parity`` (one place, with reasons).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from realm_sdk._parity import (
    CASES,
    MODEL_FACTORIES,
    ParityCase,
    format_reports,
    make_stream,
    run_case,
)

FAST = [c for c in CASES if not c.slow]
SLOW = [c for c in CASES if c.slow]


def _check(case: ParityCase, report) -> None:
    print(format_reports([report]))
    assert report.passed, format_reports([report])
    assert report.updates > 0, "nothing was compared"
    if case.method != "tent":  # both S_div branches ran
        assert report.skipped_diversity > 0
    if case.steps > 13:  # the stream's overflowing inputs reached the guard on both sides
        assert report.skipped_nonfinite > 0
    if "bounds" in case.name:
        assert report.alpha_at_bound
    if case.name == "digits-imagenet-bounds":
        assert report.lambda_at_bound


@pytest.mark.parity
@pytest.mark.parametrize("case", FAST, ids=[c.name for c in FAST])
def test_parity_fast(case, tmp_path):
    _check(case, run_case(case, work_dir=tmp_path))


@pytest.mark.parity
@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW, ids=[c.name for c in SLOW])
def test_parity_slow(case, tmp_path):
    _check(case, run_case(case, work_dir=tmp_path))


def _has_cuda() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.parity
@pytest.mark.cuda
@pytest.mark.skipif(
    not _has_cuda(), reason="needs the CUDA build of onnxruntime-training and an NVIDIA GPU"
)
@pytest.mark.parametrize("case", FAST[:3], ids=[c.name for c in FAST[:3]])
def test_parity_cuda(case, tmp_path):
    _check(case, run_case(case, device="cuda", threads=None, work_dir=tmp_path))


@pytest.mark.parity
@pytest.mark.parametrize("side", ["runtime", "sdk"])
def test_save_restore_continue_is_identical_on_each_side(side, tmp_path):
    from realm_export import export_realm_artifacts
    from realm_runtime import RealmRuntime
    from realm_sdk import RealmAdapter, RealmConfig

    case = next(c for c in CASES if c.name == "digits-imagenet-realm")
    factory, shape, classes = MODEL_FACTORIES[case.model]
    model = factory()
    config = RealmConfig.preset(case.preset, num_classes=classes, **case.overrides)
    export_realm_artifacts(model, tmp_path / "a", config=config, input_shape=(1, *shape))
    stream = make_stream(case, shape)

    def make():
        if side == "runtime":
            return RealmRuntime(tmp_path / "a", threads=1, schedule="train")
        return RealmAdapter(copy.deepcopy(model), config)

    def feed(obj, xs):
        for x in xs:
            obj.adapt(x if side == "runtime" else torch.from_numpy(x))

    straight = make()
    feed(straight, stream)
    first = make()
    feed(first, stream[:60])
    first.save(tmp_path / "s.npz")
    resumed = make()
    resumed.restore(tmp_path / "s.npz")
    feed(resumed, stream[60:])
    a, b = straight.trainable_parameters(), resumed.trainable_parameters()
    for n in a:
        np.testing.assert_array_equal(np.asarray(a[n]), np.asarray(b[n]))
    va, vb = straight.momentum_buffers(), resumed.momentum_buffers()
    for n in va:
        np.testing.assert_array_equal(np.asarray(va[n]), np.asarray(vb[n]))
    sa, sb = straight.state, resumed.state
    assert (sa.alpha, sa.lam, sa.updates, sa.samples) == (sb.alpha, sb.lam, sb.updates, sb.samples)
    np.testing.assert_array_equal(sa.ema, sb.ema)
    assert sa.updates > 0 and sa.alpha_momentum != 0


def test_parity_cli_writes_the_table(tmp_path, capsys):
    from realm_sdk._cli import main

    out = tmp_path / "parity"
    code = main(
        ["parity", "--cases", "digits-cifar-realm-batch4", "--out", str(out), "--no-progress"]
    )
    assert code == 0
    md = (tmp_path / "parity.md").read_text()
    assert "digits-cifar-realm-batch4" in md and "| yes |" in md
    assert '"passed": true' in (tmp_path / "parity.json").read_text()
    assert main(["parity", "--cases", "nope"]) == 2
