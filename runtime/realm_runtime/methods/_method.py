"""What every layer reads about an adaptation method: its decision, loss, extras, defaults."""

from __future__ import annotations

from dataclasses import dataclass

from .._guardrails import Guardrails
from ._settings import MethodSettings

# What θ is, by Method.adapts: the normalisation layers' affine parameters (SPEC §1), the
# model's first convolution (surgical fine-tuning), or every parameter (MEMO).
ADAPTS = ("norm", "first_conv", "all")


@dataclass(frozen=True)
class Method:
    """One online test-time adaptation method, as the SDK, the graphs and the runtime read it.

    The per-sample step of every method is SPEC §3's: predict with the pre-update logits,
    decide which samples update (the entropy cut, S_div), take one SGD step of the loss of
    the kept samples on the normalisation affine parameters θ, then commit. A method says
    which parts of that step it uses; the forms a layer needs (torch ops in
    ``realm_sdk.methods``, ONNX nodes in ``realm_export.methods``) are files of the same name.
    """

    name: str  # the value of RealmConfig.method
    label: str  # as tables, plots and pages print it
    paper: str  # where its step is written down, for the docs and the error messages
    diversity: bool  # S_div: refuse a sample whose prediction is close to the EMA of the past
    entropy_cut: bool  # refuse samples with H ≥ e0 (the reliable-sample cut)
    entropy_weight: bool  # weigh the loss by exp(−(H − e0)), a constant of the step
    learns_alpha_lambda: bool  # the loss's shape α and scale λ are learned beside θ
    recovery: bool  # reset to the source when its settings' recover() says so
    guardrails: Guardrails  # the bounds and resets in force when the configuration says None
    # Its own settings, declared in its file (MethodSettings itself: none besides the shared).
    settings: type[MethodSettings] = MethodSettings
    # What its step computes besides the loss at θ, as a clause (None: nothing more).
    second_forward: str | None = None
    # Its step refuses samples of its own and counts those it keeps (realm.kept); a step that
    # keeps none is skipped.
    step_cut: bool = False
    # The step graph's input of its own scalar (contract name; None: it has none).
    step_input: str | None = None
    # What its set-up computes from clean images of the app's own, as a clause (None:
    # nothing; EATA's Fisher information): the SDK and the export then need those images.
    clean_state: str | None = None
    # Its step draws from the sample's index in the stream (realm.sample_index: DeYO's order).
    draws: bool = False
    entropy_share: float = 0.4  # e0 = this·ln C unless RealmConfig.entropy_margin says
    # Why onnxruntime-training's artifacts cannot hold the step, as a clause (None: they can).
    legacy_training: str | None = None
    # The cifar preset steps BatchNorm's θ at a rate of its own (chosen on validation,
    # SPEC §4); False: its paper's one rate for every θ.
    batch_norm_rate: bool = False
    # What an update costs against one forward and one backward (Tent's), for scheduling runs.
    cost: float = 1.0
    adapts: str = "norm"  # which parameters θ are: one of ADAPTS
    # Its step (or its prediction) reads AugMix views of each sample (AugMixSettings).
    augments: bool = False
    updates: bool = True  # False: it predicts and never changes the model (TTAug)
    # Its prediction is the clean sample's after the step (MEMO's order), not the one before.
    predicts_after_step: bool = False
    episodic: bool = False  # its presets reset the model after every sample (MEMO)
    # Why no exported graph holds it, as a clause (None: every form does): the SDK runs it.
    sdk_only: str | None = None

    def __post_init__(self) -> None:
        if self.adapts not in ADAPTS:
            raise ValueError(f"{self.name}: adapts must be one of {ADAPTS}, got {self.adapts!r}")

    @property
    def exports(self) -> bool:
        """Whether the export, the runtime and the clients run it (else the SDK alone)."""
        return self.sdk_only is None
