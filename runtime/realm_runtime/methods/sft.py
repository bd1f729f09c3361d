"""SFT: surgical fine-tuning of the first convolution, online, on MEMO's loss and views.

Lee et al., "Surgical Fine-Tuning Improves Adaptation to Distribution Shifts", ICLR 2023,
as the REALM paper runs it without labels (its App. B): Tent's settings, only the first
convolution adapts, on the marginal entropy of 64 AugMix views of each sample (MEMO's
loss), the learning rate unscaled; the model keeps its steps from sample to sample. As MEMO
does, a sample is predicted after its own step (SPEC §4 names the reading).
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._augmix import AugMixSettings
from ._method import Method

SFT = Method(
    name="sft",
    label="SFT",
    paper="Lee et al., ICLR 2023",
    diversity=False,
    entropy_cut=False,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=False,
    settings=AugMixSettings,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    legacy_training="SFT's AugMix views are drawn on the host, in the SDK",
    cost=60.0,  # 64 views forward and backward to the first layer; no weight gradient past it
    adapts="first_conv",
    augments=True,
    predicts_after_step=True,
    sdk_only="its AugMix views (PIL-style image operations drawn at random) have no ONNX form",
)
