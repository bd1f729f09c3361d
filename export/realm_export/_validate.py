"""Export validation: exported graphs against the PyTorch reference (realm_sdk).

The primitives both pipelines check with (the reference step, its own spread, the report and
its tolerances, the validation inputs), and the portable graphs' check; the legacy training
artifacts' run lives in :mod:`.legacy`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from realm_runtime import RealmRuntime, onnxruntime_module
from realm_runtime.contract import ALPHA_NAME, LAMBDA_NAME, method_input
from realm_runtime.methods.realm import alpha_lambda_start, scales_by_lambda
from realm_sdk import RealmAdapter, RealmConfig, entropy
from realm_sdk.methods import StepInputs, torch_form

# Logits are held to atol + LOGITS_RTOL · max|logits|: float32 keeps ~7 digits, and a deep
# network's rounding leaves ~1e-6 of the logits' scale (random-init BatchNorm nets reach
# logits in the hundreds, where an absolute 1e-4 is below float32's resolution). Where a
# graph's logits lie beyond that, the tolerance is at least SPREAD_FACTOR times torch's own
# float32 error there (its distance from the same forward in float64): an ill-conditioned
# network leaves any float32 execution that far from exact.
LOGITS_RTOL = 1e-6
# The reference's own spread: torch's gradients at inputs moved by SPREAD_EPS (relative: the
# size of ONNX Runtime's rounding differences from torch in deep activations), SPREAD_DRAWS
# times. ReLU-family kinks make a gradient jump where an activation sits within rounding of
# its threshold; no float32 execution can do better there.
SPREAD_EPS = 1e-5
SPREAD_DRAWS = 3
# A gradient passes within max(grad_rtol, SPREAD_FACTOR · spread): the factor covers ORT's
# own roundings landing on other kinks than the draws did.
SPREAD_FACTOR = 3.0
SPREAD_MAX_SCALE = 100.0  # the most the spread grows to match the graph's forward deviation


def logits_tolerance(atol: float, reference: np.ndarray) -> float:
    """The logits' tolerance near torch's ``reference``: ``atol + LOGITS_RTOL · max|ref|``."""
    return atol + LOGITS_RTOL * float(np.abs(reference).max())


def logits_floor(atol: float, reference_error: float) -> float:
    """The least a logits tolerance may be: ``atol + SPREAD_FACTOR ·`` torch's own float32 error.

    Every graph's check holds its logits to this where the error was measured (0: not).
    """
    return atol + SPREAD_FACTOR * reference_error


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
    ``2·loss/(α·|α − 2|)`` (on a trained BatchNorm ResNet, torch float32 itself lands percents
    from float64 on one sample, and ORT further still from torch). So α's
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
    logits_tolerance: float = 0.0  # atol + LOGITS_RTOL · max|logits| (0: not yet set)
    logits_spread: float = 0.0  # torch's own float32 error on the logits, where measured
    grad_spread: dict[str, float] = field(default_factory=dict)  # the reference's own, per tensor

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
        self.logits_tolerance = max(self.logits_tolerance, logits_tolerance(self.atol, logits_t))
        self.loss_max_abs = max(self.loss_max_abs, abs(float(loss) - loss_t))
        for name, rel in self.relative(grads, grads_t, loss_t).items():
            diff = float(np.abs(grads[name] - grads_t[name]).max())
            self.grad_max_abs[name] = max(self.grad_max_abs.get(name, 0.0), diff)
            self.grad_max_rel[name] = max(self.grad_max_rel.get(name, 0.0), rel)

    def relative(
        self, grads: dict[str, np.ndarray], grads_t: dict[str, np.ndarray], loss_t: float
    ) -> dict[str, float]:
        """Each tensor's ``max|g − g_ref| / scale``, with the scale rule of the class doc."""
        global_scale = max(float(np.abs(g).max()) for g in grads_t.values())
        out = {}
        for name, g_t in grads_t.items():
            diff = float(np.abs(grads[name] - g_t).max())
            scale = max(float(np.abs(g_t).max()), 1e-2 * global_scale, 1e-30)
            if name == ALPHA_NAME and self.alpha is not None:
                scale = max(scale, 2 * abs(loss_t) / (self.alpha * abs(self.alpha - 2)))
            if name == LAMBDA_NAME and self.lam is not None:
                scale = max(scale, abs(loss_t) / self.lam)
            out[name] = diff / scale
        return out

    def add_spread(self, spread: dict[str, float]) -> None:
        """Fold the reference's own relative gradient change (see :func:`reference_spread`)."""
        for name, value in spread.items():
            self.grad_spread[name] = max(self.grad_spread.get(name, 0.0), value)

    def grad_tolerance(self, name: str) -> float:
        """``name``'s gradient tolerance: grad_rtol, or more where the reference itself moves."""
        return max(self.grad_rtol, SPREAD_FACTOR * self.grad_spread.get(name, 0.0))

    @property
    def logits_tol(self) -> float:
        """The logits' tolerance: ``atol + LOGITS_RTOL · max|logits|`` over the inputs.

        At least ``atol + SPREAD_FACTOR ·`` torch's own float32 error on the logits, where
        :func:`judge` measured it.
        """
        base = self.logits_tolerance or self.atol
        return max(base, logits_floor(self.atol, self.logits_spread))

    @property
    def worst_grad(self) -> tuple[str, float]:
        """The trainable tensor nearest its tolerance (or furthest past it), and its figure."""
        name = max(self.grad_max_rel, key=lambda n: self.grad_max_rel[n] / self.grad_tolerance(n))
        return name, self.grad_max_rel[name]

    @property
    def passed(self) -> bool:
        """Whether every figure is within its tolerance."""
        return (
            self.logits_max_abs <= self.logits_tol
            and self.loss_max_abs <= self.atol
            and all(v <= self.grad_tolerance(n) for n, v in self.grad_max_rel.items())
        )

    def summary(self) -> str:
        """The figures beyond their tolerance, in one line (the table has them all)."""
        name, worst = self.worst_grad
        figures = [
            ("logits", self.logits_max_abs, self.logits_tol, "max abs"),
            ("loss", self.loss_max_abs, self.atol, "max abs"),
            (f"{name}'s gradient", worst, self.grad_tolerance(name), "max rel"),
        ]
        failed = [f for f in figures if f[1] > f[2]] or figures
        return "; ".join(
            f"{what} {metric} {v:.3g} (tolerance {t:.0e})" for what, v, t, metric in failed
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
            "logits_tolerance": self.logits_tol,
            "logits_reference_error": self.logits_spread,
            "loss_max_abs_diff": self.loss_max_abs,
            "grad_max_rel_diff": worst,
            "grad_worst_tensor": name,
            "grad_tolerance": self.grad_tolerance(name),
            "grad_reference_spread": self.grad_spread.get(name, 0.0),
            "alpha_grad_max_abs_diff": self.grad_max_abs.get(ALPHA_NAME),
            "lambda_grad_max_abs_diff": self.grad_max_abs.get(LAMBDA_NAME),
            "grad_max_rel_diff_per_tensor": self.grad_max_rel,
        }

    def table(self) -> str:
        """A human-readable table of the figures (always printed: numbers, not a verdict).

        ``ref. spread`` is how far torch's own gradient moves when the input moves by a few
        float32 roundings (:func:`reference_spread`; measured only where a gradient lies
        beyond ``grad_rtol``, blank elsewhere), and for the logits torch's own float32 error
        (measured only where the logits lie beyond their first tolerance); the tolerance
        grows with it.
        """
        norms = {n: v for n, v in self.grad_max_rel.items() if n not in (ALPHA_NAME, LAMBDA_NAME)}
        name = max(norms, key=lambda n: norms[n] / self.grad_tolerance(n))
        rows: list[tuple[str, str, float, float, float | None]] = [
            ("logits", "max abs", self.logits_max_abs, self.logits_tol, self.logits_spread or None),
            ("loss", "max abs", self.loss_max_abs, self.atol, None),
        ]
        for label, key in (
            (f"grad, worst norm tensor ({name})", name),
            (f"grad {ALPHA_NAME}", ALPHA_NAME),
            (f"grad {LAMBDA_NAME}", LAMBDA_NAME),
        ):
            if key in self.grad_max_rel:
                tol = self.grad_tolerance(key)
                rows.append(
                    (label, "max rel", self.grad_max_rel[key], tol, self.grad_spread.get(key))
                )
        width = max(len(r[0]) for r in rows) + 2
        lines = [
            f"{'output':<{width}}{'metric':<9}{'difference':>12}{'tolerance':>11}"
            f"{'ref. spread':>13}  ok"
        ]
        for label, metric, value, tol, spread in rows:
            ok = "yes" if value <= tol else "NO"
            spread_text = f"{spread:>13.1e}" if spread is not None else f"{'':>13}"
            lines.append(
                f"{label:<{width}}{metric:<9}{value:>12.3e}{tol:>11.1e}{spread_text}  {ok}"
            )
        lines.append(f"({self.inputs} random inputs; {len(self.grad_max_rel)} trainable tensors)")
        return "\n".join(lines)


def reference_spread(
    model: nn.Module,
    config: RealmConfig,
    x: torch.Tensor,
    weights: np.ndarray,
    reference: tuple[np.ndarray, float, dict[str, np.ndarray], list[str]],
    report: ValidationReport,
    deviation: float = 0.0,
    exact: tuple[np.ndarray, float, dict[str, np.ndarray], list[str]] | None = None,
) -> dict[str, float]:
    """How far torch's own gradients move when ``x`` moves by a few float32 roundings.

    A ReLU-family activation within rounding of its threshold flips its gradient mask: the
    gradient is discontinuous there, and two float32 executions (torch's, ORT's) may land on
    either side. Measured on the reference itself, not assumed: ``SPREAD_DRAWS`` inputs
    ``x·(1 + SPREAD_EPS·n)``, each tensor's largest relative change (the report's scale rule).
    Where the graph's logits differ from torch's by more than the draws moved them
    (``deviation``), the spread is scaled by that ratio (at most ``SPREAD_MAX_SCALE``): more
    rounding, more kinks crossed. And it is at least the reference's own float32 error, its
    distance from the same step in float64: a saturated softmax (random-init networks whose
    logits reach the hundreds) leaves float32 gradients a few percent from exact.
    """
    logits_t, loss_t, grads_t, _ = reference
    generator = torch.Generator().manual_seed(0)
    spread: dict[str, float] = {}
    moved_logits = 0.0
    for _ in range(SPREAD_DRAWS):
        noise = torch.randn(x.shape, generator=generator)
        logits, _, moved, _ = torch_reference(model, config, x * (1 + SPREAD_EPS * noise), weights)
        moved_logits = max(moved_logits, float(np.abs(logits - logits_t).max()))
        for name, value in report.relative(moved, grads_t, loss_t).items():
            spread[name] = max(spread.get(name, 0.0), value)
    scale = min(SPREAD_MAX_SCALE, deviation / moved_logits) if moved_logits > 0 else 1.0
    spread = {name: value * max(1.0, scale) for name, value in spread.items()}
    # The reference's own float32 error: the same step in float64 (``exact``, where given).
    if exact is None:
        exact = float64_reference(model, config, x, weights)
    for name, value in report.relative(exact[2], grads_t, loss_t).items():
        spread[name] = max(spread.get(name, 0.0), value)
    return spread


def float64_reference(
    model: nn.Module, config: RealmConfig, x: torch.Tensor, weights: np.ndarray
) -> tuple[np.ndarray, float, dict[str, np.ndarray], list[str]]:
    """:func:`torch_reference` in float64, on a copy of ``model``: what float32 rounds away."""
    return torch_reference(copy.deepcopy(model).double(), config, x.double(), weights)


def new_report(
    config: RealmConfig, inputs: int, *, atol: float, grad_rtol: float
) -> ValidationReport:
    """An empty report for ``config``'s graph, over ``inputs`` validation inputs.

    It holds α0 and λ0 where ∂ρ/∂α and ∂(λρ)/∂λ are sums of cancelling terms (see
    :class:`ValidationReport`).
    """
    realm = config.rules.learns_alpha_lambda
    alpha0, lambda0 = alpha_lambda_start(config)
    return ValidationReport(
        atol=atol,
        grad_rtol=grad_rtol,
        inputs=inputs,
        alpha=alpha0 if realm else None,
        lam=lambda0 if scales_by_lambda(config) else None,
    )


def validation_batch(
    shape: tuple[int, ...], count: int, *, seed: int, extra_batch: bool
) -> list[np.ndarray]:
    """Random validation inputs that differ in scale and offset, not just in noise.

    Input k is ``s_k · N(0, 1) + m_k`` with (s, m) cycling through (1, 0), (0.5, 0.5),
    (2, −0.5): a model whose trace baked in one branch of data-dependent control flow then
    disagrees with torch on some input. With ``extra_batch``, one more input has batch size
    ``shape[0] + 1`` to check the symbolic batch axis.
    """
    rng = np.random.default_rng(seed)
    styles = ((1.0, 0.0), (0.5, 0.5), (2.0, -0.5))
    shapes = [shape] * count + ([(shape[0] + 1, *shape[1:])] if extra_batch else [])
    return [
        (styles[k % 3][0] * rng.standard_normal(s) + styles[k % 3][1]).astype(np.float32)
        for k, s in enumerate(shapes)
    ]


def quiet_session(model: Path | bytes) -> Any:
    """A plain ``InferenceSession`` on a file or a serialised model, its warnings off."""
    ort = onnxruntime_module()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in RealmRuntime.DEFAULT_SESSION_CONFIG.items():  # no spinning between runs
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options)


def sample_weights(batch: int) -> np.ndarray:
    """Validation weights: every sample selected, loss = mean (SPEC §3)."""
    return np.full((batch,), 1.0 / batch, dtype=np.float32)


def torch_reference(
    model: nn.Module, config: RealmConfig, x: torch.Tensor, weights: np.ndarray
) -> tuple[np.ndarray, float, dict[str, np.ndarray], list[str]]:
    """Logits, loss and gradients of the graph's loss, computed by realm_sdk in torch.

    The loss is ``Σ_i w_i · L(H_i)`` at the configuration's initial α, λ — the quantity the
    step graph computes — with the method's torch form (``realm_sdk.methods``) on the
    original model. An entropy weight (EATA's) is part of ``L`` here, as in the step graph.

    Returns:
        ``(logits, loss, {name: grad}, trainable names)``.
    """
    ref = copy.deepcopy(model)
    # At θ0 a clean-state regulariser (EATA's λ_F·Σ F(θ − θ0)²) and its gradient are 0
    # whatever F: zeros stand in for it exactly (the adapt graph's check moves θ, with F).
    zeros = {n: torch.zeros_like(p) for n, p in ref.named_parameters()}
    adapter = RealmAdapter(ref, config, fisher=zeros)  # the SDK's selection and configuration
    names = list(adapter.trainable_names)
    named = dict(ref.named_parameters())
    params = [named[n] for n in names]
    learned = (
        [torch.tensor(v, requires_grad=True) for v in alpha_lambda_start(config)]
        if config.rules.learns_alpha_lambda
        else []
    )

    def logits_at(inputs: torch.Tensor, theta: Sequence[torch.Tensor]) -> torch.Tensor:
        return functional_call(ref, dict(zip(names, theta, strict=True)), (inputs,))

    knob = method_input(config)
    with torch.enable_grad():
        logits = ref(x)
        w = torch.from_numpy(weights)
        held = config.rules.clean_state is not None
        inputs = StepInputs(
            logits_at,
            x,
            params,
            logits,
            entropy(logits),
            w,
            learned,
            config.e0,
            knob,
            config,
            origin=[p.detach().clone() for p in params] if held else (),
            fisher=[torch.zeros_like(p) for p in params] if held else (),
        )
        loss = torch_form(config).step_loss(inputs).loss
        grads = torch.autograd.grad(loss, [*params, *learned])
    if learned:
        names = [*names, ALPHA_NAME, LAMBDA_NAME]
    return (
        logits.detach().numpy(),
        float(loss.detach()),
        {n: g.numpy() for n, g in zip(names, grads, strict=True)},
        names,
    )


def judge(
    report: ValidationReport,
    graph: tuple[np.ndarray, float, dict[str, np.ndarray]],
    model: nn.Module,
    config: RealmConfig,
    x: np.ndarray,
    weights: np.ndarray,
    reference: tuple[np.ndarray, float, dict[str, np.ndarray], list[str]],
) -> None:
    """Fold one input's graph figures, and where needed the reference's own spread, into ``report``.

    The spread (:func:`reference_spread`, several more reference steps) can only widen a
    gradient's tolerance beyond ``grad_rtol``: it is measured only at an input where some
    gradient lies beyond ``grad_rtol``. Likewise torch's own float32 error on the logits (the
    step in float64) is measured only at an input where the logits lie beyond their tolerance.
    """
    logits, loss, grads = graph
    logits_t, loss_t, grads_t, _ = reference
    report.add(logits, loss, grads, (logits_t, loss_t, grads_t))
    deviation = float(np.abs(logits - logits_t).max())
    exact = None
    if deviation > report.logits_tol:
        exact = float64_reference(model, config, torch.from_numpy(x), weights)
        error = float(np.abs(logits_t.astype(np.float64) - exact[0]).max())
        report.logits_spread = max(report.logits_spread, error)
    if all(v <= report.grad_rtol for v in report.relative(grads, grads_t, loss_t).values()):
        return
    spread = reference_spread(
        model, config, torch.from_numpy(x), weights, reference, report, deviation, exact
    )
    report.add_spread(spread)


def branch_hint(branches: Sequence[str]) -> str:
    """Where the trace froze data-dependent control flow: the likely cause of a disagreement."""
    if not branches:
        return ""
    return (
        "\nThe trace turned tensors into Python booleans (data-dependent control "
        "flow, frozen into one branch) at: " + ", ".join(branches[:5])
    )
