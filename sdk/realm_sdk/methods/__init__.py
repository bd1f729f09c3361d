"""The torch form of each method (one file per method, as in ``realm_runtime.methods``).

Each file defines ``FORM``, a :class:`TorchForm`: the loss of the method's step, and where
its step needs more (SAR's second gradient at a perturbed point, DeYO's shuffled forward),
the torch code of that too. The file is found by the method's name.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from realm_runtime import RealmConfig
from realm_runtime.methods import method_named

from . import deyo, eata, eta, memo, realm, sar, sft, tent, ttaug
from ._form import LogitsAt, PerSampleLoss, Predict, StepInputs, StepLoss, TorchForm
from .eata import fisher_penalty
from .eta import eata_loss
from .memo import marginal_entropy
from .realm import robust_loss


@cache
def _form_named(name: str) -> TorchForm:
    method_named(name)  # an unknown name: the runtime's one sentence
    try:
        return import_module(f"{__name__}.{name}").FORM
    except (ImportError, AttributeError):
        raise NotImplementedError(
            f"method {name!r} has no torch form: add realm_sdk/methods/{name}.py defining FORM"
        ) from None


def torch_form(config: RealmConfig) -> TorchForm:
    """The torch form of ``config.method``."""
    return _form_named(config.method)


__all__ = [
    "LogitsAt",
    "PerSampleLoss",
    "Predict",
    "StepInputs",
    "StepLoss",
    "TorchForm",
    "deyo",
    "eata",
    "eata_loss",
    "eta",
    "fisher_penalty",
    "marginal_entropy",
    "memo",
    "realm",
    "robust_loss",
    "sar",
    "sft",
    "tent",
    "torch_form",
    "ttaug",
]
