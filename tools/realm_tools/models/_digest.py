"""Which source model ran: a digest of its weights, written beside every run and table."""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def weights_digest(model: nn.Module) -> str:
    """SHA-256 of a model's state (names and bytes, in name order): which source model ran."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(str(flat.dtype).encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
