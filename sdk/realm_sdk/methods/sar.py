"""SAR's step in torch: the entropy's gradient at θ + ρ·g/‖g‖ (SAM), the cut applied there.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023, Eq. (2)–(4);
Foret et al., ICLR 2021.
"""

from __future__ import annotations

import torch

from .._loss import entropy
from ._form import StepInputs, StepLoss, TorchForm

SAM_GUARD = 1e-12  # SAM's guard against a zero gradient: ε = ρ·g/(‖g‖ + guard)
OPEN_CUT = 1e9  # an entropy margin no sample reaches: the cut passes every sample


def sharp_loss(s: StepInputs) -> StepLoss:
    """The entropy at θ + ε of the samples that pass the cut ``H < e0`` at θ and there too.

    ``ε = ρ·g/(‖g‖ + guard)``, ``g`` the gradient of the weighted entropy at θ and ``ρ`` the
    step's knob. ε is a constant of the step: ∂L(θ + ε)/∂θ is the gradient taken at θ + ε.
    The first gradient is returned to be checked finite, as SAM's first step must be.
    """
    first = torch.autograd.grad((s.entropy * s.weight).sum(), list(s.theta), retain_graph=True)
    norm = (
        torch.linalg.vector_norm(first[0])
        if len(first) == 1  # the step graph's one flat vector: one norm node
        else torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in first]))
    )
    moved = [
        p + (s.knob * g / (norm + SAM_GUARD)).detach() for p, g in zip(s.theta, first, strict=True)
    ]
    h2 = entropy(s.logits_at(s.x, moved))
    kept = (s.weight > 0) & (h2 < s.e0)
    count = kept.to(h2.dtype).sum()
    w2 = kept.to(h2.dtype) / torch.clamp(count, min=1.0)
    checked = (first[0] * 0).sum()  # g·0: NaN exactly where g is not finite
    for g in first[1:]:
        checked = checked + (g * 0).sum()
    return StepLoss((h2 * w2).sum(), count, checked)


FORM = TorchForm(sharp_loss, open_cut=lambda config: config.with_overrides(entropy_margin=OPEN_CUT))
