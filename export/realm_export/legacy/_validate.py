"""The legacy training artifacts against the PyTorch reference, on onnxruntime-training."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import CHECKPOINT, EVAL_MODEL, TRAINING_MODEL
from realm_sdk import RealmConfig, entropy

from .._errors import UnsupportedModelError
from .._validate import ValidationReport, judge, new_report, sample_weights, torch_reference


def validate_artifacts(
    directory: Path,
    model: nn.Module,
    config: RealmConfig,
    inputs: Sequence[np.ndarray],
    *,
    atol: float,
    grad_rtol: float,
) -> ValidationReport:
    """Run the training graph on ``inputs`` and compare with :func:`torch_reference`.

    Args:
        directory: where ``training_model.onnx``, ``eval_model.onnx`` and ``checkpoint`` are.
        model: the original torch model (not modified).
        config: the export's configuration.
        inputs: float32 arrays of the input shape.
        atol: tolerance on logits and loss.
        grad_rtol: relative tolerance on gradients.

    Returns:
        The report (check :attr:`ValidationReport.passed`).
    """
    from realm_runtime import training_api

    api = training_api()
    state = api.CheckpointState.load_checkpoint(str(directory / CHECKPOINT))
    try:
        module = api.Module(
            str(directory / TRAINING_MODEL), state, str(directory / EVAL_MODEL), device="cpu"
        )
    except RuntimeError as exc:
        raise UnsupportedModelError(training_graph_error(str(exc))) from exc
    module.train()
    report = new_report(config, len(inputs), atol=atol, grad_rtol=grad_rtol)
    for x in inputs:
        weights = sample_weights(x.shape[0])
        reference = torch_reference(model, config, torch.from_numpy(x), weights)
        module.lazy_reset_grad()
        try:
            loss_ort, logits_ort = module(x, fed_weights(reference[0], config, weights))[:2]
        except RuntimeError as exc:
            raise UnsupportedModelError(training_graph_error(str(exc))) from exc
        grads_t, names = reference[2], reference[3]
        grads = {n: np.asarray(state.parameters[n].grad).reshape(grads_t[n].shape) for n in names}
        judge(
            report,
            (np.asarray(logits_ort), float(loss_ort), grads),
            model,
            config,
            x,
            weights,
            reference,
        )
    del module
    return report


def fed_weights(logits: np.ndarray, config: RealmConfig, weights: np.ndarray) -> np.ndarray:
    """The sample weights the runtime feeds the training graph: an entropy weight inside.

    The training graph's loss is ``Σ w_i H_i``; a method that weighs by ``exp(−(H − e0))``
    (EATA) has the runtime fold that constant into ``w``, as done here from the reference's
    own ``logits`` of the input.
    """
    if not config.rules.entropy_weight:
        return weights
    h = entropy(torch.from_numpy(logits)).numpy()
    return (weights * np.exp(-(h - np.float32(config.e0)))).astype(np.float32)


def training_graph_error(message: str, doing: str = "run the training graph") -> str:
    """One sentence from onnxruntime-training's error while it builds, loads or runs a graph.

    Args:
        message: ORT's exception text (long, with C++ source locations).
        doing: what was being done, for the fallback sentence.
    """
    missing = re.search(r"has not been registered: (\w+) for node (\S+)", message)
    if missing:
        op, node = missing.groups()
        return (
            f"the ONNX op {op} (node {node}) has no gradient in onnxruntime-training 1.19.2, and "
            "it lies between the adapted norm parameters and the loss: replace it in the model "
            "(or freeze the norm layers before it with RealmConfig.frozen)"
        )
    kernel = re.search(
        r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'", message
    )
    if kernel:
        op, node = kernel.groups()
        return (
            f"onnxruntime-training 1.19.2 has no kernel for {op} (node {node}), which the "
            "training graph of this model needs: its layer cannot adapt through the training "
            "artifacts (the portable step graph may still adapt it)"
        )
    node = re.search(r"running (\w+) node\. Name:'([^']*)'", message)
    status = re.search(r"Status Message: (?:\S+:\d+ \S+ )?(.*?)(?:\n|$)", message)
    if node:
        detail = status.group(1).strip()[:200] if status else ""
        return (
            f"onnxruntime-training 1.19.2 failed running the training graph at {node.group(1)} "
            f"node {node.group(2)}: {detail}"
        )
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return f"onnxruntime-training 1.19.2 could not {doing}: {first[-400:]}"
