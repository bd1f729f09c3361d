"""``RealmAdapter``: one online adaptation step per call (SPEC §3), the reference semantics."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from realm_runtime._checkpoint import COUNTERS, StateArrays, load_state, save_state
from realm_runtime._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig

from ._inputs import check_batch, infer_sample_shape
from ._loss import eata_loss, entropy, robust_loss
from ._params import select_trainable


@dataclass(frozen=True)
class AdaptationState:
    """A snapshot of the adaptation state besides the model parameters.

    Counters count samples, except ``updates`` which counts optimizer steps (one per call
    that updated, whatever its batch size).
    """

    alpha: float | None  # shape α of ρ (REALM only)
    lam: float | None  # scale λ of ρ (REALM only)
    alpha_momentum: float | None  # SGD momentum buffer of α
    lam_momentum: float | None  # SGD momentum buffer of λ
    ema: np.ndarray | None  # (C,) EMA of the predictions of updated samples; None before any
    samples: int  # samples seen by adapt()
    updates: int  # optimizer steps applied
    updated_samples: int  # samples that contributed to an applied step
    skipped_diversity: int  # samples refused by S_div (too similar to the EMA)
    skipped_entropy: int  # samples refused by EATA's entropy threshold
    skipped_nonfinite: int  # samples whose step was refused: non-finite logits, loss or grad


@dataclass(frozen=True)
class StepResult:
    """What one :meth:`RealmAdapter.adapt_step` did."""

    logits: Tensor  # (B, C) pre-update logits: the prediction of this step
    selected: Tensor  # (B,) bool: samples that passed the entropy and S_div filters
    updated: bool  # whether the parameters changed
    loss: float | None  # the loss of the selected samples (None when none was selected)
    reason: str  # "updated", "diversity", "entropy", "nonfinite" (why not, if not updated)


class RealmAdapter:
    """Online, label-free adaptation of a classifier's normalisation layers (REALM/Tent/EATA).

    The model is configured in place (SPEC §1): eval mode, every parameter frozen but the
    affine weight and bias of its normalisation layers (minus ``config.frozen`` and, with the
    ImageNet preset, the last block). Each :meth:`adapt` call returns the logits computed
    *before* the update and then applies at most one SGD step.

    Example:
        >>> cfg = RealmConfig.preset("cifar", num_classes=10)
        >>> adapter = RealmAdapter(model, cfg)
        >>> logits = adapter.adapt(x)  # x: (B, C, H, W) float tensor

    Args:
        model: the classifier, ``(B, *input) -> (B, num_classes)`` logits.
        config: hyper-parameters; :meth:`RealmConfig.preset` gives the paper's.
        input_shape: per-sample input shape ``(C, H, W)`` to enforce; by default only the
            rank and channel count are checked (from the first convolution).

    Raises:
        ValueError: the model has nothing to adapt, or a frozen pattern is invalid.

    A call is serialised by an internal lock, so one adapter may be shared between threads.
    """

    def __init__(
        self,
        model: nn.Module,
        config: RealmConfig,
        *,
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self._names = select_trainable(
            model, config.frozen, freeze_last_block=config.freeze_last_block
        )
        named = dict(model.named_parameters())
        self._params: dict[str, nn.Parameter] = {n: named[n] for n in self._names}
        model.eval()  # dropout/drop-path off, BatchNorm on its frozen running statistics
        for p in model.parameters():
            p.requires_grad_(False)
        for p in self._params.values():
            p.requires_grad_(True)
        first = next(iter(self._params.values()))
        self._dtype = first.dtype
        self._device = first.device
        self._sample_shape = (
            tuple(input_shape) if input_shape is not None else infer_sample_shape(model)
        )
        self._source = {n: p.detach().clone() for n, p in self._params.items()}
        self._lock = threading.RLock()
        self._init_adaptation_state()
        self._counters = dict.fromkeys(COUNTERS, 0)

    # ------------------------------------------------------------------ public API

    @property
    def device(self) -> torch.device:
        """The device of the adapted parameters: inputs must be on it."""
        return self._device

    @property
    def trainable_names(self) -> list[str]:
        """Adapted parameter names, in ``model.named_parameters()`` order."""
        return list(self._names)

    def trainable_parameters(self) -> dict[str, Tensor]:
        """Copies of the adapted parameters, keyed as in ``model.named_parameters()``."""
        with self._lock:
            return {n: p.detach().clone() for n, p in self._params.items()}

    def momentum_buffers(self) -> dict[str, Tensor]:
        """Copies of the SGD momentum buffers of the adapted parameters (zeros before a step)."""
        with self._lock:
            return {n: v.clone() for n, v in self._momentum.items()}

    @property
    def state(self) -> AdaptationState:
        """α, λ, their momentum, the EMA and the counters, as a snapshot."""
        with self._lock:
            realm = self.config.learns_alpha_lambda
            return AdaptationState(
                alpha=float(self._alpha) if realm else None,
                lam=float(self._lam) if realm else None,
                alpha_momentum=float(self._alpha_v) if realm else None,
                lam_momentum=float(self._lam_v) if realm else None,
                ema=None if self._ema is None else self._ema.detach().cpu().numpy().copy(),
                **self._counters,
            )

    @torch.no_grad()
    def predict(self, x: Tensor) -> Tensor:
        """Logits of the current model, without any update.

        Args:
            x: ``(B, *input)`` float tensor.

        Returns:
            ``(B, num_classes)`` logits.
        """
        check_batch(x, self._sample_shape, self._dtype)
        with self._lock:
            logits = self.model(x)
        self._check_logits(logits, x)
        return logits

    def adapt(self, x: Tensor) -> Tensor:
        """Predict, then adapt on ``x`` (SPEC §3). Returns the pre-update logits.

        Args:
            x: ``(B, *input)`` float tensor, finite.

        Returns:
            ``(B, num_classes)`` logits computed before the update.

        Raises:
            ValueError: bad input (rank, channels, dtype, NaN/Inf); nothing changes.
        """
        return self.adapt_step(x).logits

    def adapt_step(self, x: Tensor) -> StepResult:
        """:meth:`adapt`, with what happened: the S_div decisions, the loss, the reason."""
        check_batch(x, self._sample_shape, self._dtype)
        with self._lock:
            result = self._step(x)
            if self.config.episodic:
                self._init_adaptation_state()
            return result

    def reset(self) -> None:
        """Back to the source parameters, α0, λ0, no EMA, zero momentum and zero counters."""
        with self._lock:
            self._init_adaptation_state()
            self._counters = dict.fromkeys(COUNTERS, 0)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole adaptation state to ``path`` (``.npz`` + JSON header), atomically.

        Parameters, momentum buffers, α, λ, the EMA and the counters are saved; the frozen
        rest of the model is not (it is the source model's).
        """

        def host(t: Tensor) -> np.ndarray:
            return t.detach().cpu().numpy().copy()  # no view of a live parameter

        with self._lock:
            state = StateArrays(
                params={n: host(p) for n, p in self._params.items()},
                momentum={n: host(self._momentum[n]) for n in self._params},
                alpha=host(self._alpha),
                lam=host(self._lam),
                alpha_momentum=host(self._alpha_v),
                lam_momentum=host(self._lam_v),
                ema=None if self._ema is None else host(self._ema),
                counters=dict(self._counters),
            )
        save_state(path, state, self.config)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Load a state written by :meth:`save` (or by ``RealmRuntime.save``).

        Everything is read and checked before anything is assigned: a mismatching file
        (other method, class count, parameter names or shapes, α or λ out of bounds) raises
        and changes nothing.

        Raises:
            FileNotFoundError: no such file.
            ValueError: unreadable file, or a state that does not fit this adapter.
        """
        shapes = {n: tuple(p.shape) for n, p in self._params.items()}
        state = load_state(path, self.config, shapes)

        def device(a: np.ndarray) -> Tensor:
            return torch.from_numpy(a.copy()).to(dtype=self._dtype, device=self._device)

        with self._lock, torch.no_grad():
            for n, p in self._params.items():
                p.copy_(device(state.params[n]))
                self._momentum[n] = device(state.momentum[n])
            self._alpha, self._lam = device(state.alpha), device(state.lam)
            self._alpha_v, self._lam_v = device(state.alpha_momentum), device(state.lam_momentum)
            self._ema = None if state.ema is None else device(state.ema)
            self._counters = dict(state.counters)

    # ------------------------------------------------------------------ internals

    def _init_adaptation_state(self) -> None:
        cfg = self.config
        with torch.no_grad():
            for n, p in self._params.items():
                p.copy_(self._source[n])
        like = dict(dtype=self._dtype, device=self._device)
        self._momentum = {n: torch.zeros_like(p) for n, p in self._params.items()}
        self._alpha = torch.tensor(cfg.alpha0, **like)
        self._lam = torch.tensor(cfg.lambda0, **like)
        self._alpha_v = torch.zeros((), **like)
        self._lam_v = torch.zeros((), **like)
        self._ema: Tensor | None = None

    def _check_logits(self, logits: Any, x: Tensor) -> None:
        want = (x.shape[0], self.config.num_classes)
        if not isinstance(logits, Tensor) or tuple(logits.shape) != want:
            got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(
                f"the model must return logits of shape {want} (batch, num_classes), got {got}"
            )

    def _per_sample_loss(self, h: Tensor, alpha: Tensor, lam: Tensor) -> Tensor:
        cfg = self.config
        if cfg.method == "realm":
            return robust_loss(h, alpha, lam, scale_by_lambda=cfg.loss_scale == "lambda")
        if cfg.method == "eata":
            return eata_loss(h, cfg.e0)
        return h  # tent

    def _step(self, x: Tensor) -> StepResult:
        cfg = self.config
        batch = x.shape[0]
        with torch.enable_grad():
            logits = self.model(x)  # (B, C), graph kept for the backward
        self._check_logits(logits, x)
        out = logits.detach()
        self._counters["samples"] += batch
        none = torch.zeros(batch, dtype=torch.bool, device=out.device)
        if not bool(out.isfinite().all()):
            self._counters["skipped_nonfinite"] += batch
            return StepResult(out, none, False, None, "nonfinite")

        h = entropy(logits)  # (B,)
        probs = F.softmax(out, dim=-1)  # (B, C), no gradient
        keep = torch.ones(batch, dtype=torch.bool, device=out.device)
        if cfg.method == "eata":
            keep = h.detach() < cfg.e0
            self._counters["skipped_entropy"] += int((~keep).sum())
        if cfg.uses_diversity and self._ema is not None:
            cos = F.cosine_similarity(probs, self._ema.unsqueeze(0), dim=1)  # (B,)
            diverse = cos.abs() < cfg.diversity_margin
            self._counters["skipped_diversity"] += int((keep & ~diverse).sum())
            keep = keep & diverse
        n_keep = int(keep.sum())
        if n_keep == 0:
            all_uncertain = cfg.method == "eata" and not bool((h.detach() < cfg.e0).any())
            return StepResult(out, keep, False, None, "entropy" if all_uncertain else "diversity")

        learn_al = cfg.learns_alpha_lambda
        alpha = self._alpha.clone().requires_grad_(learn_al)
        lam = self._lam.clone().requires_grad_(learn_al)
        with torch.enable_grad():
            loss = self._per_sample_loss(h[keep], alpha, lam).mean()
            wrt = list(self._params.values()) + ([alpha, lam] if learn_al else [])
            grads = torch.autograd.grad(loss, wrt)
        loss_value = float(loss.detach())
        finite = np.isfinite(loss_value) and all(bool(g.isfinite().all()) for g in grads)
        if not finite:
            self._counters["skipped_nonfinite"] += n_keep
            return StepResult(out, keep, False, loss_value, "nonfinite")

        self._apply_sgd(grads, learn_al)
        mean_p = probs[keep].mean(dim=0)
        self._ema = (
            mean_p
            if self._ema is None
            else (cfg.ema_beta * self._ema + (1 - cfg.ema_beta) * mean_p)
        )
        self._counters["updates"] += 1
        self._counters["updated_samples"] += n_keep
        return StepResult(out, keep, True, loss_value, "updated")

    @torch.no_grad()
    def _apply_sgd(self, grads: tuple[Tensor, ...], learn_al: bool) -> None:
        # PyTorch SGD, dampening 0, no Nesterov, no weight decay: v ← μ·v + g; w ← w − lr·v.
        # Zero-initialised buffers give v = g on the first step, as PyTorch's lazy buffers do.
        cfg = self.config
        mu = cfg.momentum
        for (n, p), g in zip(self._params.items(), grads, strict=False):
            v = self._momentum[n]
            v.mul_(mu).add_(g)
            p.sub_(cfg.lr * v)
        if learn_al:
            g_alpha, g_lam = grads[-2], grads[-1]
            self._alpha_v = mu * self._alpha_v + g_alpha
            self._lam_v = mu * self._lam_v + g_lam
            self._alpha = (self._alpha - cfg.lr_alpha_lambda * self._alpha_v).clamp(
                ALPHA_MIN, ALPHA_MAX
            )
            self._lam = (self._lam - cfg.lr_alpha_lambda * self._lam_v).clamp(min=LAMBDA_MIN)
