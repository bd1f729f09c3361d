"""realm_sdk: the PyTorch reference implementation of REALM test-time adaptation.

REALM (Seto et al., WACV 2024) minimises a robust loss ρ(H; α, λ) of the prediction entropy,
with learned shape α and scale λ, over the affine parameters of the normalisation layers,
one sample at a time. Tent, EATA and SAR run on the same machinery as baselines.

    >>> from realm_sdk import RealmAdapter, RealmConfig
    >>> adapter = RealmAdapter(model, RealmConfig.preset("cifar", num_classes=10))
    >>> result = adapter.adapt(x)  # pre-update logits/probs/top1, then one online step
    >>> result.logits, result.updated, result.reason

This package is the reference only. The configuration, state files and artifact contract
belong to ``realm_runtime`` (the layer below, re-exported here where an SDK user needs them);
the tools built on the reference (demo, benchmarks, parity, data sets, the ``realm`` command)
live in ``realm_tools``.
"""

from realm_runtime import (
    ALPHA_MAX,
    ALPHA_MIN,
    LAMBDA_MIN,
    AdaptationState,
    Guardrails,
    RealmConfig,
)

from ._adapter import AdaptResult, RealmAdapter
from ._fisher import fisher_information
from ._loss import entropy
from ._margin import decision_margin, prediction_cosines
from ._params import (
    batch_norm_names,
    has_batch_norm,
    last_block_patterns,
    norm_affine_names,
    norm_layer_types,
    select_trainable,
    stage_count,
)
from ._update import FlatUpdate
from .methods import eata_loss, robust_loss

__version__ = "0.1.0"

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    "LAMBDA_MIN",
    "AdaptResult",
    "AdaptationState",
    "FlatUpdate",
    "Guardrails",
    "RealmAdapter",
    "RealmConfig",
    "batch_norm_names",
    "decision_margin",
    "eata_loss",
    "entropy",
    "fisher_information",
    "has_batch_norm",
    "last_block_patterns",
    "norm_affine_names",
    "norm_layer_types",
    "prediction_cosines",
    "robust_loss",
    "select_trainable",
    "stage_count",
]
