"""How close the reference's next decision is to its thresholds: where float32 may flip it.

Two float32 executions of the same step (the reference and an exported graph) agree to a few
ULP; a decision whose entropy or cosine lies that close to its threshold may fall either way.
The export's validation and the parity suite both ask this before calling a difference wrong.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from realm_runtime.contract import entropy

from ._adapter import RealmAdapter
from .methods import torch_form


def _softmax64(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def prediction_cosines(logits: np.ndarray, ema: np.ndarray) -> np.ndarray:
    """``(B,)`` cosine of each row's softmax with ``ema``, in float64."""
    p = _softmax64(logits)
    m = np.asarray(ema, np.float64)
    return (p @ m) / np.maximum(np.linalg.norm(p, axis=1) * np.linalg.norm(m), 1e-12)


def decision_margin(adapter: RealmAdapter, x: np.ndarray) -> tuple[float, np.ndarray | None]:
    """Smallest distance of the decisions ``adapter.adapt(x)`` would take from their thresholds.

    Args:
        adapter: the reference, before the step (not changed).
        x: the step's input batch.

    Returns:
        The margin (inf: no threshold applies), and the cosines to the EMA where S_div
        applies (else None).
    """
    cfg = adapter.config
    x_ref = torch.from_numpy(x).to(adapter.device)
    logits = adapter.predict(x_ref).detach().cpu().numpy().astype(np.float64)
    margin = math.inf
    if cfg.rules.entropy_cut:
        h = entropy(logits)  # in float64, as the logits are here
        margin = min(margin, float(np.abs(h - cfg.e0).min()))

    def predict(inputs: torch.Tensor) -> np.ndarray:
        return adapter.predict(inputs).detach().cpu().numpy()

    first = adapter.state.samples  # the index the step will draw for its first sample
    margin = min(margin, torch_form(cfg).cut_margin(x_ref, logits, predict, cfg, first))
    ema = adapter.state.ema
    cos = None
    if cfg.rules.diversity and ema is not None:
        cos = prediction_cosines(logits, ema)
        margin = min(margin, float(np.abs(np.abs(cos) - cfg.diversity_margin).min()))
    return margin, cos
