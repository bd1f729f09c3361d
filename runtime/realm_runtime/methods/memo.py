"""MEMO: one step on the marginal entropy of a sample's AugMix views, then back to the source.

Zhang, Levine and Finn, "MEMO: Test Time Robustness via Adaptation and Augmentation",
NeurIPS 2022, Eq. (1)–(2). Every parameter of the model adapts; the loss is the entropy of
the mean softmax over the sample's views; the sample is predicted after its own step, and
the model goes back to the source before the next (episodic), as the authors' code runs it.
The REALM paper's App. B: Tent's settings, 64 views, the learning rate unscaled (SPEC §4).
"""

from __future__ import annotations

from .._guardrails import Guardrails
from ._augmix import AugMixSettings
from ._method import Method

MEMO = Method(
    name="memo",
    label="MEMO",
    paper="Zhang et al., NeurIPS 2022",
    diversity=False,
    entropy_cut=False,
    entropy_weight=False,
    learns_alpha_lambda=False,
    recovery=False,
    settings=AugMixSettings,
    guardrails=Guardrails.off(),  # a baseline runs as its paper does
    legacy_training="MEMO's AugMix views are drawn on the host, in the SDK",
    cost=66.0,  # a forward and backward of 64 views, a forward before and one after
    adapts="all",
    augments=True,
    predicts_after_step=True,
    episodic=True,
    sdk_only="its AugMix views (PIL-style image operations drawn at random) have no ONNX form",
)
