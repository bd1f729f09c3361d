"""EATA's Fisher information: the squared gradients of the adapted tensors on clean images.

Niu et al., ICML 2022, Eq. (9), as the authors' code computes it (SPEC §4): each batch's
mean cross-entropy against the model's own predictions, its gradient squared, summed over
the batches and divided by their number. The estimate is one pass at set-up; it never
changes while the model adapts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from realm_runtime import RealmConfig
from realm_runtime.methods import EataSettings

from ._inputs import check_input


def fisher_information(
    model: nn.Module,
    params: Mapping[str, Tensor],
    images: Any,
    config: RealmConfig,
    *,
    sample_shape: tuple[int | None, ...] | None = None,
) -> dict[str, Tensor]:
    """λ_F times the diagonal Fisher of ``params`` on the first ``fisher_size`` clean images.

    Args:
        model: the classifier, as the adapter runs it (eval mode: BatchNorm on its running
            statistics).
        params: the adapted tensors, by name, requiring gradients.
        images: clean inputs of the app's own, ``(N, C, ...)``, numpy or torch, float.
        config: an EATA configuration (``fisher_alpha``, ``fisher_size``, ``fisher_batch``).
        sample_shape: the per-sample shape the adapter checks inputs against.

    Returns:
        λ_F · F for each of ``params``, in its shape, detached.

    Raises:
        ValueError: the images are not a finite float batch of the model's input shape.
    """
    settings = EataSettings.of(config)
    first = next(iter(params.values()))
    x = _as_tensor(images, first)
    check_input(x, sample_shape, first.dtype)
    if x.ndim < 2 or x.shape[0] < 1:
        raise ValueError("clean_images must be a batch (N, C, ...) of at least one image")
    x = x[: settings.fisher_size]
    names, tensors = list(params), list(params.values())
    total = [torch.zeros_like(t) for t in tensors]
    batches = 0
    with torch.enable_grad():
        for start in range(0, x.shape[0], settings.fisher_batch):
            logits = model(x[start : start + settings.fisher_batch])
            loss = F.cross_entropy(logits, logits.detach().argmax(dim=1))
            grads = torch.autograd.grad(loss, tensors)
            total = [acc + g.detach() ** 2 for acc, g in zip(total, grads, strict=True)]
            batches += 1
    alpha = settings.fisher_alpha
    return {n: alpha * (acc / batches) for n, acc in zip(names, total, strict=True)}


def _as_tensor(images: Any, like: Tensor) -> Tensor:
    if isinstance(images, np.ndarray):
        if not np.issubdtype(images.dtype, np.floating):
            raise ValueError(
                f"clean_images must be floats, preprocessed as the model's inputs, got dtype "
                f"{images.dtype}"
            )
        images = torch.from_numpy(np.ascontiguousarray(images))
    if not isinstance(images, Tensor):
        raise ValueError(
            f"clean_images must be a numpy array or torch tensor (N, C, ...), got "
            f"{type(images).__name__}"
        )
    return images.to(device=like.device, dtype=like.dtype)
