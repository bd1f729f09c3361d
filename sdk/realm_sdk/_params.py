"""Which parameters adapt (SPEC §1): the affine weight and bias of normalisation layers."""

from __future__ import annotations

import re
from collections.abc import Iterable

from torch import nn

# torch's own normalisation families; timm's BatchNormAct2d, GroupNorm1, LayerNorm2d, the
# *Act and *Fp32 variants all subclass one of these (checked on timm 1.0.31).
_TORCH_NORMS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.RMSNorm,
)

# timm norm layers that do not subclass a torch norm (RMS and "simple" norms, EvoNorm and
# filter response norms). Looked up by name so that an older or newer timm without one of
# them still works (features detected, not versions).
_TIMM_NORM_NAMES: tuple[str, ...] = (
    "RmsNorm",
    "RmsNorm2d",
    "RmsNormFp32",
    "RmsNorm2dFp32",
    "SimpleNorm",
    "SimpleNorm2d",
    "SimpleNormFp32",
    "SimpleNorm2dFp32",
    "EvoNorm2dB0",
    "EvoNorm2dB1",
    "EvoNorm2dB2",
    "EvoNorm2dS0",
    "EvoNorm2dS1",
    "EvoNorm2dS2",
    "FilterResponseNormAct2d",
    "FilterResponseNormTlu2d",
)

# Only these direct parameters of a norm layer are its affine transform; EvoNorm's `v` and
# FRN's `tau` shape the normalisation itself and stay frozen.
_AFFINE_NAMES = ("weight", "bias")


def norm_layer_types() -> tuple[type[nn.Module], ...]:
    """The module classes whose affine parameters adapt (torch's and, if installed, timm's)."""
    types: list[type[nn.Module]] = list(_TORCH_NORMS)
    try:
        import timm.layers as timm_layers
    except ImportError:  # timm is optional for the SDK
        return tuple(types)
    for name in _TIMM_NORM_NAMES:
        cls = getattr(timm_layers, name, None)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            types.append(cls)
    return tuple(types)


def norm_affine_names(model: nn.Module) -> list[str]:
    """Names (as in ``model.named_parameters()``) of every norm layer's affine weight/bias."""
    types = norm_layer_types()
    names = []
    for module_name, module in model.named_modules():
        if not isinstance(module, types):
            continue
        for pname, param in module.named_parameters(recurse=False):
            if pname in _AFFINE_NAMES and param is not None:
                names.append(f"{module_name}.{pname}" if module_name else pname)
    # named_parameters() de-duplicates shared tensors; keep only names it reports, in its order.
    reported = [n for n, _ in model.named_parameters()]
    wanted = set(names)
    return [n for n in reported if n in wanted]


def last_block_patterns(model: nn.Module) -> tuple[str, ...]:
    """Name patterns of the model's last block, frozen by the ImageNet preset.

    SAR (and REALM after it) leave the deepest block out of adaptation: its norm layers see
    the most class-specific features, and adapting them on single samples is what collapses
    first. The rule per family:

    * ResNet-style (``layer4``): the whole ``layer4`` stage, as in SAR's code.
    * ViT-style (``blocks`` + ``norm``): the last quarter of the blocks (``blocks.9-11`` of a
      12-block ViT, SAR's choice) and the final ``norm``/``fc_norm``, which come after them.
    * Hierarchical (ConvNeXt ``stages``, Swin ``layers``): the last stage, and the final
      norm after it (ConvNeXt ``head.norm``, Swin ``norm``), for the same reason as ViT.

    Args:
        model: the classifier.

    Returns:
        Regexes matched at the start of parameter names.

    Raises:
        ValueError: the model's layout is none of the above; pass ``frozen`` patterns instead.
    """
    children = dict(model.named_children())
    if "layer4" in children:
        return (r"layer4\.",)
    for stage_attr in ("stages", "layers"):
        stages = children.get(stage_attr)
        if isinstance(stages, nn.Sequential | nn.ModuleList) and len(stages) > 0:
            last = len(stages) - 1
            return (rf"{stage_attr}\.{last}\.", r"norm\.", r"head\.norm\.")
    blocks = children.get("blocks")
    if isinstance(blocks, nn.Sequential | nn.ModuleList) and len(blocks) > 0:
        depth = len(blocks)
        first = depth - max(1, depth // 4)
        alternatives = "|".join(str(i) for i in range(first, depth))
        return (rf"blocks\.({alternatives})\.", r"norm\.", r"fc_norm\.")
    raise ValueError(
        f"cannot tell the last block of {type(model).__name__}: it has none of the attributes "
        "layer4, stages, layers or blocks. Set freeze_last_block=False and list the "
        "parameter-name patterns to freeze in RealmConfig.frozen instead."
    )


def select_trainable(
    model: nn.Module, frozen: Iterable[str] = (), *, freeze_last_block: bool = False
) -> list[str]:
    """The norm affine parameter names that adapt, in ``named_parameters()`` order.

    Args:
        model: the classifier.
        frozen: regexes matched (``re.match``) at the start of parameter names to exclude.
        freeze_last_block: also exclude :func:`last_block_patterns` of the model.

    Returns:
        The selected names.

    Raises:
        ValueError: a pattern is not a valid regex, or nothing is left to adapt.
    """
    patterns = list(frozen)
    if freeze_last_block:
        patterns.extend(last_block_patterns(model))
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as exc:
            raise ValueError(f"frozen pattern {p!r} is not a valid regex: {exc}") from exc
    candidates = norm_affine_names(model)
    selected = [n for n in candidates if not any(c.match(n) for c in compiled)]
    if not selected:
        if not candidates:
            raise ValueError(
                f"{type(model).__name__} has no normalisation layer with affine parameters "
                "(BatchNorm, GroupNorm, LayerNorm, RMSNorm, ...): REALM adapts only those, so "
                "there is nothing to adapt."
            )
        raise ValueError(
            f"all {len(candidates)} norm affine parameters of {type(model).__name__} are frozen "
            f"by the patterns {patterns}: nothing is left to adapt."
        )
    return selected
