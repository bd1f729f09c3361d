"""realm_sdk: the PyTorch reference implementation of REALM test-time adaptation.

REALM (Seto et al., WACV 2024) minimises a robust loss ρ(H; α, λ) of the prediction entropy,
with learned shape α and scale λ, over the affine parameters of the normalisation layers,
one sample at a time. Tent and EATA run on the same machinery as baselines.

    >>> from realm_sdk import RealmAdapter, RealmConfig
    >>> adapter = RealmAdapter(model, RealmConfig.preset("cifar", num_classes=10))
    >>> logits = adapter.adapt(x)  # pre-update logits, then one online step
"""

from realm_runtime._checkpoint import read_state, write_state
from realm_runtime._config import ALPHA_MAX, ALPHA_MIN, LAMBDA_MIN, RealmConfig

from ._adapter import AdaptationState, RealmAdapter, StepResult
from ._corruptions import CORRUPTIONS, corrupt
from ._digits import DigitsData, DigitsGNNet, load_digits, train_digits_model
from ._evaluate import OnlineResult, run_online
from ._loss import eata_loss, entropy, robust_loss
from ._params import last_block_patterns, norm_affine_names, norm_layer_types, select_trainable
from ._quality import QualityRun, bench_quality, quality_table, source_model
from ._realdata import (
    Cifar10C,
    ImageNetC,
    LazyImages,
    ShiftDataset,
    load_cifar10c,
    load_imagenetc,
)

__version__ = "0.1.0"

__all__ = [
    "ALPHA_MAX",
    "ALPHA_MIN",
    # corruptions and the built-in digits task
    "CORRUPTIONS",
    "LAMBDA_MIN",
    # adaptation
    "AdaptationState",
    # real shift data on disk (CIFAR-10-C, ImageNet-C) and the quality benchmark
    "Cifar10C",
    "DigitsData",
    "DigitsGNNet",
    "ImageNetC",
    "LazyImages",
    "OnlineResult",
    "QualityRun",
    "RealmAdapter",
    # configuration
    "RealmConfig",
    "ShiftDataset",
    "StepResult",
    "bench_quality",
    "corrupt",
    # losses (SPEC §2)
    "eata_loss",
    "entropy",
    # parameter selection (SPEC §1)
    "last_block_patterns",
    "load_cifar10c",
    "load_digits",
    "load_imagenetc",
    "norm_affine_names",
    "norm_layer_types",
    "quality_table",
    # adaptation-state files
    "read_state",
    "robust_loss",
    "run_online",
    "select_trainable",
    "source_model",
    "train_digits_model",
    "write_state",
]
