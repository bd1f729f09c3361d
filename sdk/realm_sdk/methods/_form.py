"""The torch form of a method: what the SDK and the traced step graphs compute with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

from realm_runtime import RealmConfig

# L(H_i) of each sample: entropies (B,), the loss's learned scalars (REALM's α, λ; else
# none), e0 (a float, or a tensor where the graph takes it as an input), the configuration.
PerSampleLoss = Callable[[Tensor, Sequence[Tensor], "Tensor | float", RealmConfig], Tensor]
