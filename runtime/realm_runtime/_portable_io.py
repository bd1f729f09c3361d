"""Names of the portable step graph's inputs and outputs (shared by export and runtime).

Torch-free, like the rest of the runtime package: a client in another language reads the
same names from the manifest's ``portable`` section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._config import RealmConfig

STEP_MODEL = "step_model.onnx"  # forward, loss, gradients and the SGD update in one graph
FORWARD_MODEL = "forward_model.onnx"  # input + norm parameters -> logits
SOURCE_PARAMS = "source_params.npy"  # (P,) float32: realm.params of the exported model
# The step and forward graphs' large float32 initializers (the model's weights), each stored
# once, as ONNX external data both graphs point to: a runtime can read them once and hand the
# same buffers to both sessions, and any ONNX loader given the file path still resolves them.
SHARED_WEIGHTS = "weights.bin"
# With `realm export --ort-format`, ONNX Runtime's converter writes step_model.ort and
# forward_model.ort beside the graphs (for mobile and minimal builds) and this operator list,
# which a reduced-size ONNX Runtime build is made with.
ORT_OPERATORS_CONFIG = "required_operators.config"

LAYOUT_VERSION = 1  # of the manifest's "portable" section

# The one adapt graph (SPEC §3 whole, for one sample): a client feeds the sample and the state
# the manifest's "adapt" section lists, and takes each state's next value for the next call.
ADAPT_MODEL = "adapt_model.onnx"
ADAPT_SECTION_VERSION = 1  # of the manifest's "adapt" section
ADAPT_UPDATED_NAME = "realm.updated"  # bool scalar output: the step was applied
ADAPT_SELECTED_NAME = "realm.selected"  # bool scalar output: the sample passed the filters
ADAPT_REASON_NAME = "realm.reason"  # int64 scalar output: an index into ADAPT_REASONS
ADAPT_LOSS_NAME = "realm.step_loss"  # float scalar output: the step's loss (0 if not selected)
ADAPT_REASONS = ("updated", "diversity", "entropy", "nonfinite")  # the twins' step reasons
EMA_NAME = "realm.ema"  # (C,) state: S_div's EMA of the updated predictions
MARGINAL_NAME = "realm.marginal"  # (C,) state: the watch's EMA of every prediction
WATCH_NAME = "realm.watch"  # (3,) state: the watch figures, in ADAPT_WATCH order
ADAPT_WATCH = ("update_rate", "entropy_ema", "loss_ema")
KNOWN_NAME = "realm.known"  # (4,) bool state: which optional values exist, ADAPT_KNOWN order
# "watch": the entropy EMA and the marginal (finite samples seen since the last reset).
ADAPT_KNOWN = ("ema", "update_rate", "watch", "loss_ema")
SEEN_NAME = "realm.seen"  # int64 state: finite samples since the last reset
COUNTERS_NAME = "realm.counters"  # (9,) int64 state: the counters, in COUNTERS order


def next_name(state: str) -> str:
    """The adapt graph's output that holds the next value of the state input ``state``."""
    return state + ".next"


LR_NAME = "realm.lr"  # learning rate of the norm parameters (scalar input)
LR_ALPHA_LAMBDA_NAME = "realm.lr_alpha_lambda"  # learning rate of α and λ (scalar input)
MOMENTUM_NAME = "realm.momentum"  # SGD momentum μ (scalar input)
ENTROPY_MARGIN_NAME = "realm.entropy_margin"  # EATA's e0 (scalar input; others ignore it)
FINITE_NAME = "realm.finite"  # bool output: the loss and every gradient are finite
SAM_RHO_NAME = "realm.sam_rho"  # SAR: SAM's radius ρ (scalar input)
KEPT_NAME = "realm.kept"  # SAR: samples that passed the cut again at θ + ε (scalar output)
ANCHOR_NAME = "realm.anchor"  # guardrails' share of θ − θ0 given back per update (0: off)
RELAX_NAME = "realm.relax"  # guardrails' share of α − α0, λ − λ0 given back (REALM; 0: off)
PARAMS_NAME = "realm.params"  # (P,) every trainable tensor, flattened, in manifest order
VELOCITY_NAME = "realm.velocity"  # (P,) their SGD momentum buffers, same layout
NEW_PARAMS_NAME = "realm.new_params"  # (P,) output: the updated, projected parameters
NEW_VELOCITY_NAME = "realm.new_velocity"  # (P,) output: the updated momentum buffers


# The adapt graph's settings besides the step's. All of them travel as one state vector,
# SETTINGS_NAME, in ADAPT_SETTINGS order, that the graph passes through unchanged: a client
# that loops over the state feeds the export's values, and changes one by writing its slot
# (every ONNX Runtime binding can feed a state input; the JavaScript ones cannot feed an
# input that has an initializer).
DIVERSITY_MARGIN_NAME = "realm.diversity_margin"  # S_div's d
EMA_BETA_NAME = "realm.ema_beta"  # β of the EMA of updated predictions
EMA_NEW_NAME = "realm.ema_new"  # 1 − β, rounded once on the host as the twins round it
MAX_DRIFT_NAME = "realm.max_drift"  # bound of ‖θ − θ0‖ / ‖θ0‖ (0: off)
COLLAPSE_LIMIT_NAME = "realm.collapse_limit"  # collapse·ln C (0: off)
RECOVERY_LOSS_NAME = "realm.recovery_loss"  # SAR's e_m
EPISODIC_NAME = "realm.episodic"  # 1: back to the source after every call, 0: not
SETTINGS_NAME = "realm.settings"  # (K,) float32 state: the settings, ADAPT_SETTINGS order
ADAPT_SETTINGS = (
    LR_NAME,
    LR_ALPHA_LAMBDA_NAME,
    MOMENTUM_NAME,
    ENTROPY_MARGIN_NAME,
    SAM_RHO_NAME,
    ANCHOR_NAME,
    RELAX_NAME,
    DIVERSITY_MARGIN_NAME,
    EMA_BETA_NAME,
    EMA_NEW_NAME,
    MAX_DRIFT_NAME,
    COLLAPSE_LIMIT_NAME,
    RECOVERY_LOSS_NAME,
    EPISODIC_NAME,
)


def step_settings(config: RealmConfig) -> dict[str, float]:
    """What the step graph's hyper-parameter inputs are fed from ``config``, by input name."""
    guard = config.guard
    return {
        LR_NAME: config.lr,
        LR_ALPHA_LAMBDA_NAME: config.lr_alpha_lambda,
        MOMENTUM_NAME: config.momentum,
        ENTROPY_MARGIN_NAME: config.e0,
        SAM_RHO_NAME: config.sam_rho,
        ANCHOR_NAME: guard.anchor or 0.0,
        RELAX_NAME: (guard.relax or 0.0) if config.learns_alpha_lambda else 0.0,
    }


def adapt_settings(config: RealmConfig) -> np.ndarray:
    """The adapt graph's settings vector (``realm.settings``) of ``config``, float32.

    In :data:`ADAPT_SETTINGS` order. Each value is rounded to float32 from its float64
    value, as the numpy twins round it; ``realm.episodic`` is 1 or 0.
    """
    guard = config.guard
    limit = guard.collapse * math.log(config.num_classes) if guard.collapse is not None else 0.0
    values = {
        **step_settings(config),
        DIVERSITY_MARGIN_NAME: config.diversity_margin,
        EMA_BETA_NAME: config.ema_beta,
        EMA_NEW_NAME: 1 - config.ema_beta,
        MAX_DRIFT_NAME: guard.max_drift or 0.0,
        COLLAPSE_LIMIT_NAME: limit,
        RECOVERY_LOSS_NAME: config.recovery_loss,
        EPISODIC_NAME: 1.0 if config.episodic else 0.0,
    }
    return np.array([values[name] for name in ADAPT_SETTINGS], np.float32)


@dataclass(frozen=True)
class TensorSlot:
    """Where one trainable tensor lies in the flat parameter vector ``realm.params``."""

    name: str  # the SDK's parameter name (or realm.alpha / realm.lambda)
    offset: int  # first element in the flat vector
    shape: list[int]  # the tensor's shape ([] for α and λ)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)
