"""Export validation: the ORT training artifacts against the PyTorch reference (realm_sdk)."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from realm_runtime.contract import (
    ALPHA_NAME,
    CHECKPOINT,
    EVAL_MODEL,
    LAMBDA_NAME,
    LOSS_NAME,
    SAMPLE_WEIGHT_NAME,
    TRAINING_MODEL,
)
from realm_sdk import RealmAdapter, RealmConfig, entropy, robust_loss

from ._rewrite import UnsupportedModelError


class ValidationError(RuntimeError):
    """The exported artifacts disagree with the PyTorch reference beyond the tolerance."""

    def __init__(self, message: str, report: ValidationReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class ValidationReport:
    """Per-output maximum differences between ORT and torch over the validation inputs.

    Gradients are compared relative to their scale: ``max|g_ort − g_torch| / scale`` with
    ``scale = max(max|g_torch| of that tensor, 1e-2 · max|g_torch| over all tensors)``. The
    floor is measured, not guessed: timm zero-initialises the last norm of each residual
    block, whose gradients are then ~1e-3 of the largest, and ORT's float32 reduction order
    leaves on them ~1e-6 of the global gradient scale (resnet50_gn, batch 2: ORT 1.6e-4 from a
    float64 reference relative to that tensor, torch float32 2e-6), an error far below
    anything an SGD step can see.

    REALM's ``∂ρ/∂α`` is the sum of ``−(2/α²)·(P − 1)`` and a second term of nearly the same
    size (``P = b^{α/2}``): where the entropy is small they cancel to ~1e-4 of either, and
    float32 resolves the sum only to the terms' scale, ``Σ w·ρ · 2/(α·|α − 2|)``, i.e.
    ``2·loss/(α·|α − 2|)`` (measured on a trained BatchNorm ResNet: torch float32 itself 2.4 %
    from float64 on one sample, and ORT 6.7e-3 from torch relative to the gradient). So α's
    scale is at least that (``alpha`` set: a REALM export). Likewise ``∂(λ·ρ)/∂λ = ρ + λ·∂ρ/∂λ``
    with C = λ (the ImageNet preset; ``lam`` set): for small H both terms are ±H/2, and λ's
    scale is at least ``loss/λ`` (measured: 3.3e-3 relative to the gradient without it).
    """

    atol: float  # tolerance on logits and loss (absolute)
    grad_rtol: float  # tolerance on gradients (relative, see above)
    inputs: int  # validation inputs
    logits_max_abs: float = 0.0
    loss_max_abs: float = 0.0
    grad_max_rel: dict[str, float] = field(default_factory=dict)  # per trainable tensor
    grad_max_abs: dict[str, float] = field(default_factory=dict)
    alpha: float | None = None  # REALM's α0: sets the float32 scale of ∂ρ/∂α (see above)
    lam: float | None = None  # REALM's λ0 where C = λ: sets the float32 scale of ∂(λρ)/∂λ

    def add(
        self,
        logits: np.ndarray,
        loss: float,
        grads: dict[str, np.ndarray],
        reference: tuple[np.ndarray, float, dict[str, np.ndarray]],
    ) -> None:
        """Fold one input's ORT logits, loss and gradients, against torch's, into the maxima.

        Args:
            logits: ORT's logits.
            loss: ORT's loss.
            grads: ORT's gradient of every trainable tensor, shaped like torch's.
            reference: torch's ``(logits, loss, {name: grad})``.
        """
        logits_t, loss_t, grads_t = reference
        self.logits_max_abs = max(self.logits_max_abs, float(np.abs(logits - logits_t).max()))
        self.loss_max_abs = max(self.loss_max_abs, abs(float(loss) - loss_t))
        global_scale = max(float(np.abs(g).max()) for g in grads_t.values())
        for name, g_t in grads_t.items():
            diff = float(np.abs(grads[name] - g_t).max())
            scale = max(float(np.abs(g_t).max()), 1e-2 * global_scale, 1e-30)
            if name == ALPHA_NAME and self.alpha is not None:
                scale = max(scale, 2 * abs(loss_t) / (self.alpha * abs(self.alpha - 2)))
            if name == LAMBDA_NAME and self.lam is not None:
                scale = max(scale, abs(loss_t) / self.lam)
            self.grad_max_abs[name] = max(self.grad_max_abs.get(name, 0.0), diff)
            self.grad_max_rel[name] = max(self.grad_max_rel.get(name, 0.0), diff / scale)

    @property
    def worst_grad(self) -> tuple[str, float]:
        """The trainable tensor with the largest relative gradient difference."""
        name = max(self.grad_max_rel, key=self.grad_max_rel.__getitem__)
        return name, self.grad_max_rel[name]

    @property
    def passed(self) -> bool:
        """Whether every figure is within its tolerance."""
        return (
            self.logits_max_abs <= self.atol
            and self.loss_max_abs <= self.atol
            and self.worst_grad[1] <= self.grad_rtol
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the manifest's ``validation`` field)."""
        name, worst = self.worst_grad
        return {
            "passed": self.passed,
            "inputs": self.inputs,
            "atol": self.atol,
            "grad_rtol": self.grad_rtol,
            "logits_max_abs_diff": self.logits_max_abs,
            "loss_max_abs_diff": self.loss_max_abs,
            "grad_max_rel_diff": worst,
            "grad_worst_tensor": name,
            "alpha_grad_max_abs_diff": self.grad_max_abs.get(ALPHA_NAME),
            "lambda_grad_max_abs_diff": self.grad_max_abs.get(LAMBDA_NAME),
            "grad_max_rel_diff_per_tensor": self.grad_max_rel,
        }

    def table(self) -> str:
        """A human-readable table of the figures (always printed: numbers, not a verdict)."""
        norms = {n: v for n, v in self.grad_max_rel.items() if n not in (ALPHA_NAME, LAMBDA_NAME)}
        name = max(norms, key=norms.__getitem__)
        rows = [
            ("logits", "max abs", self.logits_max_abs, self.atol),
            ("loss", "max abs", self.loss_max_abs, self.atol),
            (f"grad, worst norm tensor ({name})", "max rel", norms[name], self.grad_rtol),
        ]
        for special in (ALPHA_NAME, LAMBDA_NAME):
            if special in self.grad_max_rel:
                rows.append(
                    (f"grad {special}", "max rel", self.grad_max_rel[special], self.grad_rtol)
                )
        width = max(len(r[0]) for r in rows) + 2
        lines = [f"{'output':<{width}}{'metric':<9}{'difference':>12}{'tolerance':>11}  ok"]
        for label, metric, value, tol in rows:
            ok = "yes" if value <= tol else "NO"
            lines.append(f"{label:<{width}}{metric:<9}{value:>12.3e}{tol:>11.1e}  {ok}")
        lines.append(f"({self.inputs} random inputs; {len(self.grad_max_rel)} trainable tensors)")
        return "\n".join(lines)


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
            "artifacts (the portable step graph may still; see ExportInfo.portable_error)"
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


def _cancelling_terms(config: RealmConfig) -> dict[str, float | None]:
    """α0 and λ0 where ∂ρ/∂α and ∂(λρ)/∂λ are sums of cancelling terms (ValidationReport)."""
    realm = config.method == "realm"
    return {
        "alpha": config.alpha0 if realm else None,
        "lam": config.lambda0 if realm and config.loss_scale == "lambda" else None,
    }


def sample_weights(batch: int) -> np.ndarray:
    """Validation weights: every sample selected, loss = mean (SPEC §3)."""
    return np.full((batch,), 1.0 / batch, dtype=np.float32)


def torch_reference(
    model: nn.Module, config: RealmConfig, x: torch.Tensor, weights: np.ndarray
) -> tuple[np.ndarray, float, dict[str, np.ndarray], list[str]]:
    """Logits, loss and gradients of the graph's loss, computed by realm_sdk in torch.

    The loss is ``Σ_i w_i · L(H_i)`` at the configuration's initial α, λ — the quantity the
    training graph computes — with the SDK's own loss functions on the original model.

    Returns:
        ``(logits, loss, {name: grad}, trainable names)``.
    """
    ref = copy.deepcopy(model)
    adapter = RealmAdapter(ref, config)  # the SDK's parameter selection and configuration
    named = dict(ref.named_parameters())
    params = [named[n] for n in adapter.trainable_names]
    alpha = torch.tensor(config.alpha0, dtype=torch.float32, requires_grad=True)
    lam = torch.tensor(config.lambda0, dtype=torch.float32, requires_grad=True)
    with torch.enable_grad():
        logits = ref(x)
        h = entropy(logits)
        if config.method == "realm":
            per_sample = robust_loss(h, alpha, lam, scale_by_lambda=config.loss_scale == "lambda")
            wrt = [*params, alpha, lam]
            names = [*adapter.trainable_names, ALPHA_NAME, LAMBDA_NAME]
        else:
            # Tent and EATA: the graph's L is H; EATA's detached weight exp(−(H − e0)) is part
            # of the sample weight w that the runtime feeds (realm_export._graph.append_loss).
            per_sample = h
            wrt, names = params, list(adapter.trainable_names)
        loss = (per_sample * torch.from_numpy(weights)).sum()
        grads = torch.autograd.grad(loss, wrt)
    return (
        logits.detach().numpy(),
        float(loss.detach()),
        {n: g.numpy() for n, g in zip(names, grads, strict=True)},
        names,
    )


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
    report = ValidationReport(
        atol=atol, grad_rtol=grad_rtol, inputs=len(inputs), **_cancelling_terms(config)
    )
    for x in inputs:
        weights = sample_weights(x.shape[0])
        module.lazy_reset_grad()
        try:
            loss_ort, logits_ort = module(x, weights)[:2]
        except RuntimeError as exc:
            raise UnsupportedModelError(training_graph_error(str(exc))) from exc
        logits_t, loss_t, grads_t, names = torch_reference(
            model, config, torch.from_numpy(x), weights
        )
        grads = {n: np.asarray(state.parameters[n].grad).reshape(grads_t[n].shape) for n in names}
        report.add(logits_ort, float(loss_ort), grads, (logits_t, loss_t, grads_t))
    del module
    return report


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
    """
    from realm_runtime import onnxruntime_module
    from realm_runtime.contract import (
        ENTROPY_MARGIN_NAME,
        FINITE_NAME,
        LR_ALPHA_LAMBDA_NAME,
        LR_NAME,
        MOMENTUM_NAME,
        NEW_VELOCITY_NAME,
        PARAMS_NAME,
        VELOCITY_NAME,
    )

    from ._graph import INPUT_NAME, LOGITS_NAME

    ort = onnxruntime_module()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    step = ort.InferenceSession(str(directory / files["step_model"]), options)
    forward = ort.InferenceSession(str(directory / files["forward_model"]), options)
    source = np.load(directory / files["source_params"])
    step_inputs = {i.name for i in step.get_inputs()}
    out_names = [o.name for o in step.get_outputs()]
    report = ValidationReport(
        atol=atol, grad_rtol=grad_rtol, inputs=len(inputs), **_cancelling_terms(config)
    )
    for x in inputs:
        weights = sample_weights(1)
        if config.method == "eata":  # the graph applies EATA's weight itself
            with torch.no_grad():
                h = entropy(copy.deepcopy(model)(torch.from_numpy(x)))
            weights = weights * np.exp(-(h.numpy() - config.e0)).astype(np.float32)
        logits_t, loss_t, grads_t, _ = torch_reference(model, config, torch.from_numpy(x), weights)
        feeds = {
            INPUT_NAME: x,
            SAMPLE_WEIGHT_NAME: sample_weights(1),
            LR_NAME: np.array(1.0, np.float32),
            LR_ALPHA_LAMBDA_NAME: np.array(1.0, np.float32),
            MOMENTUM_NAME: np.array(0.0, np.float32),
            ENTROPY_MARGIN_NAME: np.array(config.e0, np.float32),
            PARAMS_NAME: source,
            VELOCITY_NAME: np.zeros_like(source),
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
        report.add(out[LOGITS_NAME], float(out[LOSS_NAME]), grads, (logits_t, loss_t, grads_t))
        # The forward graph's logits, held to the same tolerance.
        report.logits_max_abs = max(
            report.logits_max_abs, float(np.abs(logits_fwd - logits_t).max())
        )
        if not bool(out[FINITE_NAME]):
            report.loss_max_abs = float("inf")  # a finite step reported as non-finite
    return report
