"""TTAug: test-time augmentation, the mean softmax over a sample's AugMix views; no update.

The baseline of MEMO's paper (Zhang et al., NeurIPS 2022, after Ashukha et al., ICLR 2020)
that the REALM paper's Table 1 reports: the same views MEMO steps on, averaged, and the model
never changes. Its prediction is the log of that mean (a softmax of it gives the mean back).
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._augmix import AugMixSettings
from ._method import Method

TTAUG = Method(
    name="ttaug",
    label="TTAug",
    paper="Zhang et al., NeurIPS 2022 (its TTA baseline)",
    diversity=False,
    entropy_cut=False,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=False,
    settings=AugMixSettings,
    guardrails=Guardrails.off(),  # nothing moves: nothing to guard
    legacy_training="TTAug's AugMix views are drawn on the host, in the SDK",
    cost=22.0,  # 64 forwards, about a third of a forward and backward each
    augments=True,
    updates=False,
    sdk_only="its AugMix views (PIL-style image operations drawn at random) have no ONNX form",
)
