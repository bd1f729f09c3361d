"""Every model the tools build, in one registry, and the one way weights are loaded into them.

The benchmarks, the parity suite, the quality benchmark and ``realm export`` name models the
same way: a key of :data:`MODELS`, or ``timm:<name>`` for any timm architecture (random
initialisation: nothing is downloaded). Weights come from a local file through
:func:`load_weights` only, whichever command asked for them.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import load_digits
from ._digits import DigitsGNNet, train_digits_model
from ._fashion import fashion_model
from ._timm import timm_model

TIMM_PREFIX = "timm:"


def _sized_timm(name: str, num_classes: int, image_size: int | None) -> nn.Module:
    if image_size is not None:
        try:  # models with position embeddings are built for their input size
            return timm_model(name, num_classes, img_size=image_size)
        except TypeError:  # convolutional models take any size and no img_size argument
            pass
    return timm_model(name, num_classes)


# Trained once per process (and cached on disk under $REALM_CACHE_DIR, default .cache).
_TRAINED: dict[str, nn.Module] = {}


def _cache_dir() -> Path:
    return Path(os.environ.get("REALM_CACHE_DIR", ".cache"))


def _trained(key: str, **recipe: Any) -> nn.Module:
    """A copy of the digits model ``train_digits_model(**recipe)`` gives, made once per process."""
    if key not in _TRAINED:
        _TRAINED[key] = train_digits_model(load_digits(), cache_dir=_cache_dir(), **recipe)
    return copy.deepcopy(_TRAINED[key])


def _trained_digits_gn() -> nn.Module:
    # Trained briefly (6 epochs), so a stream has real structure for S_div to act on.
    return _trained("digits_gn", epochs=6)


def _trained_digits_resnet18() -> nn.Module:
    """A BatchNorm ResNet (timm's resnet18) trained on the digits: real running statistics.

    A random-init BatchNorm network in eval mode normalises with the default statistics
    (0, 1), so its activations grow with depth and its zero-initialised last norms put ReLU
    inputs at exact zeros, where float32 rounding picks the ReLU branch differently in ORT and
    torch (measured: one spatial position of layer4.1 in or out, a bias gradient exactly 2×
    on one side). A trained network is what anyone adapts, and has neither.
    """
    build = partial(timm_model, "resnet18", 10, in_chans=1)
    return _trained("resnet18_bn", epochs=4, name="digits_resnet18", build=build)


def _trained_digits_mixed() -> nn.Module:
    """The digits CNN with BatchNorm in its stem and first stage, GroupNorm after.

    Trained like ``digits_gn``, so its running statistics are real; its two families' affine
    parameters step at different rates (``RealmConfig.lr_batch_norm``).
    """
    build = partial(DigitsGNNet, batch_norm_stages=1)
    return _trained("digits_mixed", epochs=6, name="digits_mixed", build=build)


@dataclass(frozen=True)
class ModelSpec:
    """A named model: how to build it, one sample's shape and its number of classes."""

    build: Callable[[], nn.Module]  # a fresh model (random init unless the entry trains one)
    input_shape: tuple[int, ...]  # (C, H, W) of one sample
    classes: int  # size of the head
    timm_name: str = ""  # the timm architecture, rebuilt for another input size ("" if none)


def _timm_spec(name: str, shape: tuple[int, ...], classes: int, **kwargs: Any) -> ModelSpec:
    return ModelSpec(partial(timm_model, name, classes, **kwargs), shape, classes, name)


_IMAGENET = (3, 224, 224)

# Random initialisation unless said otherwise (nothing is downloaded).
MODELS: dict[str, ModelSpec] = {
    # the demo's GroupNorm CNN, untrained (speed does not depend on the weights)
    "digits": ModelSpec(DigitsGNNet, (1, 32, 32), 10),
    # the same CNN trained 6 epochs on the digits (parity: real structure in the stream)
    "digits_gn": ModelSpec(_trained_digits_gn, (1, 32, 32), 10),
    # BatchNorm stem and first stage, GroupNorm after, trained (parity: two rates in one step)
    "digits_mixed": ModelSpec(_trained_digits_mixed, (1, 32, 32), 10),
    # timm's resnet18 (BatchNorm) trained on the digits (parity: real running statistics)
    "resnet18_bn": ModelSpec(_trained_digits_resnet18, (1, 32, 32), 10),
    # trained on Fashion-MNIST, the weights the package ships (one per norm family)
    "fmnist_resnet26_gn": ModelSpec(partial(fashion_model, "resnet26_gn"), (1, 32, 32), 10),
    "fmnist_mobilenetv3_bn": ModelSpec(partial(fashion_model, "mobilenetv3_bn"), (1, 32, 32), 10),
    "fmnist_vit_ln": ModelSpec(partial(fashion_model, "vit_ln"), (1, 32, 32), 10),
    "convnext_atto": _timm_spec("convnext_atto", (3, 64, 64), 10),
    # a Swin small enough for the fast parity tier: 64 px, window 4, four thin stages
    "swin_small_cfg": _timm_spec(
        "swin_tiny_patch4_window7_224",
        (3, 64, 64),
        10,
        img_size=64,
        window_size=4,
        embed_dim=24,
        depths=(1, 1, 2, 1),
        num_heads=(1, 2, 2, 4),
    ),
    "resnet50_gn": _timm_spec("resnet50_gn", _IMAGENET, 1000),
    "vit_tiny": _timm_spec("vit_tiny_patch16_224", _IMAGENET, 1000),
    "vit_base": _timm_spec("vit_base_patch16_224", _IMAGENET, 1000),
    "convnext_tiny": _timm_spec("convnext_tiny", _IMAGENET, 1000),
    "swin_tiny": _timm_spec("swin_tiny_patch4_window7_224", _IMAGENET, 1000),
}


def known_model(name: str) -> bool:
    """Whether :func:`build_model` accepts ``name`` (a key of MODELS or ``timm:<name>``)."""
    return name in MODELS or (name.startswith(TIMM_PREFIX) and len(name) > len(TIMM_PREFIX))


def build_model(name: str, image_size: int | None = None) -> tuple[nn.Module, tuple[int, ...], int]:
    """A registered model (or ``timm:<name>``, 1000 classes, 224 px) in eval mode.

    Args:
        name: a key of :data:`MODELS`, or ``"timm:<model>"`` for any timm model.
        image_size: square input side instead of the model's (a smoke run on a small input;
            timm models that fix their input size, such as ViTs, are built for it).

    Returns:
        ``(model in eval mode, (C, H, W), classes)``.

    Raises:
        ValueError: an unknown name.
    """
    if name in MODELS:
        spec = MODELS[name]
    elif known_model(name):
        timm_name = name[len(TIMM_PREFIX) :]
        spec = _timm_spec(timm_name, _IMAGENET, 1000)
    else:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)} or timm:<name>")
    shape = spec.input_shape
    if image_size is not None:
        shape = (shape[0], image_size, image_size)
    if image_size is not None and spec.timm_name:
        model = _sized_timm(spec.timm_name, spec.classes, image_size)
    else:
        model = spec.build()
    return model.eval(), shape, spec.classes


def load_weights(model: nn.Module, path: str | os.PathLike[str]) -> nn.Module:
    """Load a local weights file into ``model``, strictly; returns the model in eval mode.

    Reads ``.safetensors``, or a ``torch.save`` file (``weights_only``: no code runs) holding
    a state dict, or a checkpoint holding it under ``"state_dict"`` or ``"model"``, with or
    without DataParallel's ``module.`` prefixes.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: the file is unreadable, holds no state dict, or its keys or shapes do not
            match the model (named, first few of each).
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"weights file {file} does not exist")
    state = _read_state_dict(file)
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{file} does not fit the model ({type(model).__name__}): {len(missing)} missing keys "
            f"{missing[:5]}, {len(unexpected)} unexpected keys {unexpected[:5]}, "
            f"{len(shapes)} shape mismatches {shapes[:3]}"
        )
    model.load_state_dict(state)
    return model.eval()


def _read_state_dict(file: Path) -> dict[str, torch.Tensor]:
    kind = "safetensors" if file.suffix == ".safetensors" else "torch state_dict"
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(file))
        else:
            state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle, zip, safetensors and weights-only errors alike
        raise ValueError(f"{file}: not a readable {kind} file ({exc})") from exc
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{file}: expected a state_dict (a dict of tensors)")
    if state and all(k.startswith("module.") for k in state):
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state


def source_model(
    name: str,
    *,
    num_classes: int,
    weights: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> nn.Module:
    """A timm architecture with the weights of a local file, in eval mode.

    The paper's source models are GroupNorm ResNets: ResNet-26-GN for CIFAR-10-C (not a timm
    architecture: a CIFAR checkpoint must match the timm ``name`` given, or go through
    ``bench_quality``'s ``source`` as any ``nn.Module``) and timm's ``resnet50_gn`` for
    ImageNet-C.

    Args:
        name: a ``timm.create_model`` name, e.g. ``"resnet50_gn"``.
        num_classes: classes of the head (10 for CIFAR-10-C, 1000 for ImageNet-C).
        weights: a file for :func:`load_weights`. None: random initialisation (seeded).
        seed: the initialisation seed (matters only without weights).

    Raises:
        FileNotFoundError: the weights file is missing.
        ValueError: an unknown timm name, an unreadable file, or keys or shapes that do not
            match the architecture.
    """
    torch.manual_seed(seed)
    model = timm_model(name, num_classes)
    return model.eval() if weights is None else load_weights(model, weights)


def model_from_spec(
    spec: str,
    num_classes: int,
    cache_dir: str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """The model a ``--model`` spec names (with ``--weights``), and its manifest description.

    ``digits`` is the demo's model, trained (and cached in ``cache_dir``); a key of
    :data:`MODELS` that model (``fmnist_resnet26_gn``: the shipped Fashion-MNIST weights);
    ``timm:<name>`` any timm architecture; ``path/to/file.py:factory`` a function returning
    an ``nn.Module``. ``weights``, a file for :func:`load_weights`, replaces its parameters
    and is named in the description.

    Raises:
        ValueError: an unknown spec, a missing file or factory, a factory that does not
            return an ``nn.Module``, or weights that do not fit.
        FileNotFoundError: the weights file is missing.
    """
    model, info = _spec_model(spec, num_classes, cache_dir)
    if weights is not None:
        load_weights(model, weights)
        info["weights"] = str(Path(weights).resolve())
    return model, info


def _spec_model(
    spec: str, num_classes: int, cache_dir: str | os.PathLike[str]
) -> tuple[nn.Module, dict[str, Any]]:
    if spec == "digits":
        if num_classes != 10:
            raise ValueError(f"the digits model has 10 classes, not {num_classes}")
        return train_digits_model(load_digits(), cache_dir=cache_dir), {"name": "digits"}
    if spec in MODELS:
        model, _, classes = build_model(spec)
        if classes != num_classes:
            raise ValueError(f"--model {spec} has {classes} classes, not {num_classes}")
        return model, {"name": spec}
    if spec.startswith(TIMM_PREFIX):
        return timm_model(spec[len(TIMM_PREFIX) :], num_classes), {"name": spec}
    return _factory_model(spec), {"name": spec}


def _factory_model(spec: str) -> nn.Module:
    path_text, sep, factory = spec.rpartition(":")
    if not sep or not path_text.endswith(".py"):
        raise ValueError(
            f"--model {spec!r}: expected timm:<name>, digits, a built-in model "
            f"({', '.join(sorted(MODELS))}) or path/to/file.py:factory"
        )
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"--model: file not found: {path}")
    module_spec = importlib.util.spec_from_file_location(f"realm_user_model_{path.stem}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # its classes pickle, for workers started fresh
    module_spec.loader.exec_module(module)
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise ValueError(f"--model: {path} has no callable {factory!r}")
    model = fn()
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"--model: {path}:{factory}() returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model
