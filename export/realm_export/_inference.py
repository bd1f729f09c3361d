"""``inference_model.onnx``: the model's own forward, checked against torch before it is written.

The TorchScript exporter writes the model with its norm layers as they are (ONNX Runtime
folds a BatchNorm into the convolution before it, as it would for any plain export), with a
symbolic batch axis where the export has one. Its logits are compared with the PyTorch
reference on the export's validation inputs (and a batch of two where the axis is
symbolic), to the tolerance every graph's logits are held to. Where it disagrees, or the
exporter failed, the portable forward graph bound to the source parameters stands in (the
manifest's ``inference`` section says which graph it is, and why).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import onnx
import torch

from realm_runtime.contract import INPUT_NAME

from ._plan import Plan, Traced
from ._validate import logits_floor, logits_tolerance, quiet_session, validation_batch

log = logging.getLogger("realm_export")

TORCHSCRIPT = "torchscript"  # the model's own forward, as the TorchScript exporter writes it
# Where the exporter has no form of a norm as the model calls it: the training graph's base.
TORCHSCRIPT_FRIENDLY = "torchscript, export-friendly norms"
PORTABLE_FORWARD = "portable forward"  # forward_model.onnx with realm.params bound to θ0


def checked_inference(plan: Plan, traced: Traced) -> tuple[onnx.ModelProto | None, dict[str, Any]]:
    """The TorchScript inference model if it agrees with torch, and the manifest's section.

    Returns:
        The model (None where there is none, or it disagrees) and ``{"graph": ..., figures}``;
        without validation, the model unchecked and its section without figures.
    """
    if traced.inference is None:
        return None, {"graph": PORTABLE_FORWARD, "reason": "the TorchScript export failed"}
    graph = TORCHSCRIPT_FRIENDLY if traced.inference is traced.forward else TORCHSCRIPT
    if not plan.options.validate:
        return traced.inference, {"graph": graph}
    plan.notify("validating the inference graph against the PyTorch reference")
    try:
        figures = _compare(plan, traced)
    except Exception as exc:  # ONNX Runtime refused to load or run it: the portable one stands in
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        reason = f"ONNX Runtime could not run the TorchScript inference graph: {first}"
        log.warning("%s; the portable forward graph stands in", reason)
        return None, {"graph": PORTABLE_FORWARD, "reason": reason}
    log.info(
        "validation of the inference graph: logits max abs %.3g (tolerance %.0e)",
        figures["logits_max_abs_diff"],
        figures["logits_tolerance"],
    )
    if figures["passed"]:
        return traced.inference, {"graph": graph, "validation": figures}
    reason = (
        f"the {graph} inference graph disagrees with the PyTorch reference: logits max abs "
        f"{figures['logits_max_abs_diff']:.3g} (tolerance {figures['logits_tolerance']:.0e})"
    )
    log.warning("%s; the portable forward graph stands in", reason)
    return None, {"graph": PORTABLE_FORWARD, "reason": reason, "validation": figures}


def _compare(plan: Plan, traced: Traced) -> dict[str, Any]:
    """The inference graph's logits against torch's over the validation inputs."""
    assert traced.inference is not None
    inputs = plan.portable_inputs()
    if plan.options.dynamic_batch:  # the symbolic axis, at a batch the trace never saw
        inputs += validation_batch(
            (2, *plan.shape[1:]), 1, seed=plan.options.seed + 2, extra_batch=False
        )
    session = quiet_session(traced.inference.SerializeToString())  # its weights inside it
    worst, tolerance, exact_error = 0.0, 0.0, 0.0
    for x in inputs:
        (logits,) = session.run(None, {INPUT_NAME: x})
        with torch.no_grad():
            expected = traced.source(torch.from_numpy(x)).numpy()
        deviation = float(np.abs(logits - expected).max())
        worst = max(worst, deviation)
        tolerance = max(tolerance, logits_tolerance(plan.options.atol, expected))
        if deviation > tolerance:  # an ill-conditioned net: no float32 run lands nearer
            exact_error = max(exact_error, _float32_error(traced, x, expected))
    tolerance = max(tolerance, logits_floor(plan.options.atol, exact_error))
    return {
        "inputs": len(inputs),
        "batch_sizes": sorted({int(x.shape[0]) for x in inputs}),
        "logits_max_abs_diff": worst,
        "logits_tolerance": tolerance,
        "logits_reference_error": exact_error,
        "passed": worst <= tolerance,
    }


def _float32_error(traced: Traced, x: np.ndarray, expected: np.ndarray) -> float:
    """Torch's own float32 error on ``x``'s logits: its distance from the float64 forward."""
    with torch.no_grad():
        exact = copy.deepcopy(traced.source).double()(torch.from_numpy(x).double()).numpy()
    return float(np.abs(expected.astype(np.float64) - exact).max())
