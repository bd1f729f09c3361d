"""``RealmAdapter``: one online adaptation step per call (SPEC §3), the reference semantics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from realm_runtime import RealmConfig
from realm_runtime.contract import LR_ALPHA_LAMBDA_NAME, OnlineAdaptation, StateArrays, method_input
from realm_runtime.methods.realm import alpha_lambda_start

from ._batch_norm import contiguous_batch_norms
from ._fisher import fisher_information
from ._inputs import check_input, infer_sample_shape
from ._loss import entropy
from ._params import batch_norm_names, select_trainable
from ._update import FlatUpdate
from .methods import StepInputs, torch_form


@dataclass(frozen=True)
class AdaptResult:
    """What one :meth:`RealmAdapter.adapt` call returns (``RealmRuntime``'s, in torch)."""

    logits: Tensor  # (B, C) pre-update logits: this step's prediction
    probs: Tensor  # (B, C) softmax of the logits
    top1: Tensor  # (B,) predicted classes
    selected: Tensor  # (B,) bool: samples that passed the entropy and S_div filters
    updated: bool  # whether the parameters changed
    loss: float | None  # loss of the selected samples, when a step was computed
    reason: str  # why it did or did not update: one of contract.ADAPT_REASONS


@dataclass(frozen=True)
class _Selection:
    """EATA's entropy cut and S_div on one batch (the runtime's ``Selection``, in torch)."""

    keep: Tensor  # (B,) bool: passed EATA's entropy cut and S_div
    probs: Tensor  # (B, C) softmax of the pre-update logits, no gradient
    entropy: Tensor  # (B,) entropies, with their autograd graph (the loss is made of them)
    uncertain: int  # samples refused by EATA's entropy threshold
    similar: int  # samples refused by S_div


@dataclass(frozen=True)
class _Candidate:
    """A computed but not yet applied step (the runtime's ``Candidate``, in torch)."""

    loss: float  # the mean loss of the kept samples
    finite: bool  # the loss and every gradient are finite
    grads: tuple[Tensor, ...]  # of the adapted parameters, then α and λ where they learn
    kept: int | None = None  # samples the step's own cut kept (SAR, DeYO; None: all)


class RealmAdapter(OnlineAdaptation[Tensor, AdaptResult]):
    """Online, label-free adaptation of a classifier's normalisation layers (REALM/Tent/EATA).

    The model is configured in place (SPEC §1): eval mode, every parameter frozen but the
    affine weight and bias of its normalisation layers (minus ``config.frozen`` and, with the
    ImageNet preset, the last block). Each :meth:`adapt` call predicts with the logits
    computed *before* the update and then applies at most one SGD step.

    The twin of ``realm_runtime.RealmRuntime``: the public methods, their locking and the
    step's bookkeeping (decisions, counters, reasons, state file) are ``OnlineAdaptation``'s,
    the same code for both; this class brings the step's torch half (autograd and SGD).

    Example:
        >>> cfg = RealmConfig.preset("cifar", num_classes=10)
        >>> adapter = RealmAdapter(model, cfg)
        >>> result = adapter.adapt(x)  # x: (B, C, H, W) float tensor; result.logits pre-update

    Args:
        model: the classifier, ``(B, *input) -> (B, num_classes)`` logits.
        config: hyper-parameters; :meth:`RealmConfig.preset` gives the paper's.
        input_shape: per-sample input shape ``(C, H, W)`` to enforce; by default only the
            rank and channel count are checked (from the first convolution).
        clean_images: clean inputs of the app's own ``(N, C, ...)``, preprocessed as the
            model's: what a method with ``clean_state`` (EATA's Fisher information) computes
            its state from, once, here; the other methods ignore them.
        fisher: that state itself, as another adapter's :attr:`fisher` gave it (an export
            computes it once for every graph and check); instead of ``clean_images``.

    Raises:
        ValueError: the model has nothing to adapt, a frozen pattern is invalid, or the
            method needs clean images and none (or unusable ones) were given.

    A call is serialised by an internal lock, so one adapter may be shared between threads.
    """

    def __init__(
        self,
        model: nn.Module,
        config: RealmConfig,
        *,
        input_shape: tuple[int, ...] | None = None,
        clean_images: Any = None,
        fisher: Mapping[str, Tensor] | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self._names = select_trainable(
            model,
            config.frozen,
            freeze_last_block=config.freeze_last_block,
            adapt_stages=config.adapt_stages,
            adapts=config.rules.adapts,
        )
        named = dict(model.named_parameters())
        self._params: dict[str, nn.Parameter] = {n: named[n] for n in self._names}
        self._batch_norm = frozenset(batch_norm_names(model, self._names))  # lr_batch_norm's
        model.eval()  # dropout/drop-path off, BatchNorm on its frozen running statistics
        contiguous_batch_norms(model)  # torch's CPU BatchNorm backward errs on mixed layouts
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
        self._like: dict[str, Any] = {"dtype": self._dtype, "device": self._device}
        self._source = {n: p.detach().clone() for n, p in self._params.items()}
        self._update: tuple[RealmConfig, FlatUpdate, dict[str, Tensor]] | None = None
        self._fisher = self._clean_state(clean_images, fisher)
        super().__init__()

    # ------------------------------------------------------------------ public API
    # adapt, predict, state, reset, save, restore, trainable_names: OnlineAdaptation's.

    @property
    def learning_rates(self) -> dict[str, float]:
        """Each adapted tensor's SGD rate: ``lr_batch_norm``'s for BatchNorm, ``lr`` else."""
        return self.config.learning_rates(self._params, self._batch_norm)

    @property
    def device(self) -> torch.device:
        """The device of the adapted parameters: inputs must be on it."""
        return self._device

    def trainable_parameters(self) -> dict[str, Tensor]:
        """Copies of the adapted parameters, keyed as in ``model.named_parameters()``."""
        with self._lock:
            return {n: p.detach().clone() for n, p in self._params.items()}

    def momentum_buffers(self) -> dict[str, Tensor]:
        """Copies of the SGD momentum buffers of the adapted parameters (zeros before a step)."""
        with self._lock:
            return {n: v.clone() for n, v in self._momentum.items()}

    @property
    def fisher(self) -> dict[str, Tensor]:
        """λ_F times EATA's Fisher information per adapted tensor (empty: another method)."""
        return {n: f.clone() for n, f in self._fisher.items()}

    def _clean_state(
        self, clean_images: Any, fisher: Mapping[str, Tensor] | None
    ) -> dict[str, Tensor]:
        needs = self.config.rules.clean_state
        if needs is None:
            return {}
        if fisher is not None:
            missing = sorted(set(self._params) - set(fisher))
            if missing:
                raise ValueError(f"fisher lacks the adapted tensors {missing[:3]}")
            return {n: fisher[n].detach().to(**self._like).clone() for n in self._params}
        if clean_images is None:
            rules = self.config.rules
            raise ValueError(
                f"{rules.label} needs {needs}: pass RealmAdapter(model, config, "
                f"clean_images=x) with clean inputs of your own (N, C, ...), or use "
                f"method 'eta', {rules.label} without it"
            )
        return fisher_information(
            self.model, self._params, clean_images, self.config, sample_shape=self._sample_shape
        )

    # ------------------------------------------------------------------ OnlineAdaptation's hooks

    def _check_input(self, x: object) -> None:
        check_input(x, self._sample_shape, self._dtype)
        torch_form(self.config).check_input(x, self.config)  # type: ignore[arg-type]

    @torch.no_grad()
    def _infer(self, x: Tensor) -> Tensor:
        logits = self.model(x)
        self._check_logits(logits, x)
        return logits

    def _forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        form = torch_form(self.config)
        if form.predict is not None:  # a method that predicts its own way updates nothing
            with torch.no_grad():
                logits = form.predict(x, self.model, self.config, self._sample_index)
            self._check_logits(logits, x)
            return logits, logits
        with torch.enable_grad():
            logits = self.model(x)  # (B, C), graph kept for the backward
        self._check_logits(logits, x)
        return logits.detach(), logits

    def _finite(self, logits: Tensor) -> bool:
        return bool(logits.isfinite().all())

    def _select(self, logits: Tensor, forward: Tensor) -> _Selection:
        cfg = self.config
        batch = logits.shape[0]
        h = entropy(forward)  # (B,), with the graph of the forward
        probs = F.softmax(logits, dim=-1)  # (B, C), no gradient
        keep = torch.ones(batch, dtype=torch.bool, device=logits.device)
        uncertain = similar = 0
        if cfg.rules.entropy_cut:
            keep = h.detach() < cfg.e0
            uncertain = int((~keep).sum())
        if cfg.rules.diversity and self._ema is not None:
            cos = F.cosine_similarity(probs, self._ema.unsqueeze(0), dim=1)  # (B,)
            diverse = cos.abs() < cfg.diversity_margin
            similar = int((keep & ~diverse).sum())
            keep = keep & diverse
        return _Selection(keep, probs, h, uncertain, similar)

    def _compute(self, x: Tensor, forward: Tensor, sel: _Selection) -> _Candidate:
        cfg = self.config
        names, params = list(self._params), list(self._params.values())
        learned = (
            (self._alpha.clone().requires_grad_(True), self._lam.clone().requires_grad_(True))
            if cfg.rules.learns_alpha_lambda
            else ()
        )

        def logits_at(inputs: Tensor, theta: Sequence[Tensor]) -> Tensor:
            return functional_call(self.model, dict(zip(names, theta, strict=True)), (inputs,))

        weight = sel.keep.to(forward.dtype) / int(sel.keep.sum())
        knob = method_input(cfg)
        with torch.enable_grad():
            inputs = StepInputs(
                logits_at,
                x,
                params,
                forward,
                sel.entropy,
                weight,
                learned,
                cfg.e0,
                knob,
                cfg,
                sample=self._sample_index,
                origin=list(self._source.values()) if self._fisher else (),
                fisher=list(self._fisher.values()),
            )
            step = torch_form(cfg).step_loss(inputs)
            kept = None if step.kept is None else int(step.kept)
            if kept == 0:  # the step's own cut refused them all: nothing to differentiate
                return _Candidate(float(step.loss.detach()), True, (), kept=0)
            grads = torch.autograd.grad(step.loss, [*params, *learned])
        loss_value = float(step.loss.detach())
        checked = [*grads, *(() if step.checked is None else (step.checked,))]
        finite = np.isfinite(loss_value) and all(bool(g.isfinite().all()) for g in checked)
        return _Candidate(loss_value, finite, grads, kept=kept)

    def _accept(self, candidate: _Candidate, sel: _Selection) -> None:
        cfg = self.config
        self._apply_update(candidate.grads)
        mean_p = sel.probs[sel.keep].mean(dim=0)
        self._ema = (
            mean_p
            if self._ema is None
            else (cfg.ema_beta * self._ema + (1 - cfg.ema_beta) * mean_p)
        )

    def _result(
        self,
        logits: Tensor,
        sel: _Selection | None,
        updated: bool,
        loss: float | None,
        reason: str,
    ) -> AdaptResult:
        if sel is None:  # non-finite logits: NaN probabilities, nothing selected
            probs = F.softmax(logits, dim=-1)
            keep = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        else:
            keep = sel.keep
            # After the step (MEMO) the logits are new: their probabilities are too.
            after = self.config.rules.predicts_after_step and updated
            probs = F.softmax(logits, dim=-1) if after else sel.probs
        return AdaptResult(logits, probs, logits.argmax(dim=1), keep, updated, loss, reason)

    def _init_adaptation_state(self) -> None:
        cfg = self.config
        with torch.no_grad():
            for n, p in self._params.items():
                p.copy_(self._source[n])
        like = dict(dtype=self._dtype, device=self._device)
        self._momentum = {n: torch.zeros_like(p) for n, p in self._params.items()}
        start = alpha_lambda_start(cfg)
        self._alpha = torch.tensor(start[0], **like)
        self._lam = torch.tensor(start[1], **like)
        self._alpha_momentum = torch.zeros((), **like)
        self._lam_momentum = torch.zeros((), **like)
        self._ema: Tensor | None = None

    @torch.no_grad()
    def _drift_norms(self) -> tuple[float, float]:
        moved = sum(float(((p - self._source[n]) ** 2).sum()) for n, p in self._params.items())
        source = sum(float((s**2).sum()) for s in self._source.values())
        return moved**0.5, source**0.5

    @torch.no_grad()
    def _pull_toward_source(self, share: float) -> None:
        for n, p in self._params.items():
            p.copy_(self._source[n] + share * (p - self._source[n]))

    def _alpha_lambda(self) -> tuple[float, float, float, float]:
        return (
            float(self._alpha),
            float(self._lam),
            float(self._alpha_momentum),
            float(self._lam_momentum),
        )

    def _to_numpy(self, a: Tensor) -> np.ndarray:
        return a.detach().cpu().numpy().copy()  # never a view of a live tensor

    def _state_arrays(self) -> StateArrays:
        host = self._to_numpy
        return StateArrays(
            params={n: host(p) for n, p in self._params.items()},
            momentum={n: host(self._momentum[n]) for n in self._params},
            alpha=host(self._alpha),
            lam=host(self._lam),
            alpha_momentum=host(self._alpha_momentum),
            lam_momentum=host(self._lam_momentum),
            ema=None if self._ema is None else host(self._ema),
            counters=dict(self._counters),
        )

    def _assign_state(self, state: StateArrays) -> None:
        def device(a: np.ndarray) -> Tensor:
            return torch.from_numpy(a.copy()).to(dtype=self._dtype, device=self._device)

        with torch.no_grad():
            for n, p in self._params.items():
                p.copy_(device(state.params[n]))
                self._momentum[n] = device(state.momentum[n])
        self._alpha, self._lam = device(state.alpha), device(state.lam)
        self._alpha_momentum = device(state.alpha_momentum)
        self._lam_momentum = device(state.lam_momentum)
        self._ema = None if state.ema is None else device(state.ema)

    # ------------------------------------------------------------------ the maths, in torch

    def _check_logits(self, logits: Any, x: Tensor) -> None:
        want = (x.shape[0], self.config.num_classes)
        if not isinstance(logits, Tensor) or tuple(logits.shape) != want:
            got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(
                f"the model must return logits of shape {want} (batch, num_classes), got {got}"
            )

    @torch.no_grad()
    def _apply_update(self, grads: tuple[Tensor, ...]) -> None:
        # FlatUpdate: the traced step graph's update, the same code (θ's share fused, as
        # the eager reference rounds it). The runtime's numpy twin: _step.sgd_momentum,
        # project_alpha/project_lambda and relax_and_anchor.
        realm = self.config.rules.learns_alpha_lambda
        update, settings = self._flat_update()
        learned = (self._alpha, self._lam) if realm else ()
        learned_momentum = (self._alpha_momentum, self._lam_momentum) if realm else ()
        values, velocity = update.step(
            update.flatten([*self._params.values(), *learned]),
            update.flatten([*self._momentum.values(), *learned_momentum]),
            update.flatten(grads),
            **settings,
            fused_anchor=True,
        )
        new_values, new_velocity = update.unflatten(values), update.unflatten(velocity)
        for (n, p), value, v in zip(self._params.items(), new_values, new_velocity, strict=False):
            p.copy_(value)
            self._momentum[n] = v
        if realm:
            self._alpha, self._lam = new_values[-2], new_values[-1]
            self._alpha_momentum, self._lam_momentum = new_velocity[-2], new_velocity[-1]

    def _flat_update(self) -> tuple[FlatUpdate, dict[str, Tensor]]:
        """The update of this model and configuration and its settings, built on first use."""
        cfg = self.config
        if self._update is None or self._update[0] is not cfg:
            realm = cfg.rules.learns_alpha_lambda

            def setting(value: float | None) -> Tensor:  # None (off) gives back nothing: 0
                return torch.tensor(0.0 if value is None else value, **self._like)

            learned = tuple(setting(v) for v in alpha_lambda_start(cfg)) if realm else ()
            own = cfg.settings.slots().get(LR_ALPHA_LAMBDA_NAME) if cfg.settings else None
            batch_norm = [n in self._batch_norm for n in self._params] + [False] * len(learned)
            update = FlatUpdate(
                [*self._source.values(), *learned], batch_norm, learns_alpha_lambda=realm
            )
            settings = {
                "lr": setting(cfg.lr),
                "lr_alpha_lambda": setting(own),
                "lr_batch_norm": setting(cfg.lr_batch_norm),  # None: 0, which steps at lr
                "momentum": setting(cfg.momentum),
                "anchor": setting(cfg.guard.anchor),
                "relax": setting(cfg.guard.relax),
            }
            self._update = (cfg, update, settings)
        _, update, settings = self._update
        return update, settings
