"""The portable step and forward graphs against the PyTorch reference, on plain ONNX Runtime."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import LOSS_NAME, SAMPLE_WEIGHT_NAME, step_settings
from realm_sdk import RealmConfig
from realm_sdk.methods import torch_form

from .._validate import (
    ValidationReport,
    judge,
    new_report,
    quiet_session,
    sample_weights,
    torch_reference,
)


def validate_portable(
    directory: Path,
    files: dict[str, str],
    model: nn.Module,
    config: RealmConfig,
    layout: Sequence[Any],
    inputs: Sequence[np.ndarray],
    *,
    atol: float,
    grad_rtol: float,
) -> ValidationReport:
    """Run the portable step and forward graphs on ``inputs`` (batch 1 each) against torch.

    The step graph runs with ``lr = 1``, ``μ = 0`` and zero momentum, so its
    ``realm.new_velocity`` output is the gradient itself; the forward graph's logits are
    held to the same tolerance as the step's. Run on a plain ``InferenceSession``.

    Args:
        directory: where the graphs are.
        files: ``{"step_model": …, "forward_model": …, "source_params": …}`` file names.
        model: the original torch model (not modified).
        config: the export's configuration.
        layout: the :class:`TensorSlot` list of ``realm.params``.
        inputs: float32 arrays of shape ``(1, *input)``.
        atol: tolerance on logits and loss.
        grad_rtol: relative tolerance on gradients (see :class:`ValidationReport`).

    A step with a cut of its own (SAR's at θ + ε, DeYO's PLPD) is compared with that cut
    open, so that every input exercises its gradient; the cut itself is the parity suite's.
    """
    from realm_runtime.contract import (
        ANCHOR_NAME,
        ENTROPY_MARGIN_NAME,
        FINITE_NAME,
        INPUT_NAME,
        LOGITS_NAME,
        LR_ALPHA_LAMBDA_NAME,
        LR_BATCH_NORM_NAME,
        LR_NAME,
        MOMENTUM_NAME,
        NEW_VELOCITY_NAME,
        PARAMS_NAME,
        PLPD_THRESHOLD_NAME,
        RELAX_NAME,
        SAM_RHO_NAME,
        SAMPLE_INDEX_NAME,
        VELOCITY_NAME,
    )

    step = quiet_session(directory / files["step_model"])
    forward = quiet_session(directory / files["forward_model"])
    source = np.load(directory / files["source_params"])
    step_inputs = {i.name for i in step.get_inputs()}
    out_names = [o.name for o in step.get_outputs()]
    config = torch_form(config).open_cut(config)
    report = new_report(config, len(inputs), atol=atol, grad_rtol=grad_rtol)
    for x in inputs:
        weights = sample_weights(1)  # an entropy weight is the graph's, as the reference's
        reference = torch_reference(model, config, torch.from_numpy(x), weights)
        logits_t, grads_t = reference[0], reference[2]
        hyper = step_settings(config)  # the method's own cut, as the runtime feeds it
        feeds = {
            INPUT_NAME: x,
            SAMPLE_WEIGHT_NAME: sample_weights(1),
            LR_NAME: np.array(1.0, np.float32),
            LR_ALPHA_LAMBDA_NAME: np.array(1.0, np.float32),
            LR_BATCH_NORM_NAME: np.array(1.0, np.float32),
            MOMENTUM_NAME: np.array(0.0, np.float32),
            ENTROPY_MARGIN_NAME: np.array(config.e0, np.float32),
            PARAMS_NAME: source,
            VELOCITY_NAME: np.zeros_like(source),
            SAM_RHO_NAME: np.array(hyper[SAM_RHO_NAME], np.float32),
            ANCHOR_NAME: np.array(0.0, np.float32),  # the gradient is read from the momentum
            RELAX_NAME: np.array(0.0, np.float32),
            PLPD_THRESHOLD_NAME: np.array(hyper[PLPD_THRESHOLD_NAME], np.float32),
            SAMPLE_INDEX_NAME: np.array(0, np.int64),  # the reference's draw: the first sample's
        }
        out = dict(
            zip(
                out_names,
                step.run(None, {k: v for k, v in feeds.items() if k in step_inputs}),
                strict=True,
            )
        )
        (logits_fwd,) = forward.run(None, {INPUT_NAME: x, PARAMS_NAME: source})
        grad = out[NEW_VELOCITY_NAME]
        grads = {
            slot.name: grad[slot.offset : slot.offset + slot.size].reshape(grads_t[slot.name].shape)
            for slot in layout
        }
        graph = (out[LOGITS_NAME], float(out[LOSS_NAME]), grads)
        judge(report, graph, model, config, x, weights, reference)
        # The forward graph's logits, held to the same tolerance.
        report.logits_max_abs = max(
            report.logits_max_abs, float(np.abs(logits_fwd - logits_t).max())
        )
        if not bool(out[FINITE_NAME]):
            report.loss_max_abs = float("inf")  # a finite step reported as non-finite
    return report
