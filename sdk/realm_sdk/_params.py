"""Which parameters adapt (SPEC §1): the affine weight and bias of normalisation layers."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable

from torch import nn

from ._stages import feature_info_modules, last_stages_frozen, model_stages, timm_groups

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

# Affine-only layers that stand where a normalisation stands, with their parameters' names:
# ResMLP replaces LayerNorm by Affine (Touvron et al. 2021, §3), x·α + β per channel.
_TIMM_AFFINE_LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("timm.models.mlp_mixer", "Affine", ("alpha", "beta")),
)


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


def _affine_layers() -> dict[type[nn.Module], tuple[str, ...]]:
    """Each norm class (and affine-only norm stand-in) with the names of its affine tensors."""
    layers = dict.fromkeys(norm_layer_types(), _AFFINE_NAMES)
    for module_path, name, params in _TIMM_AFFINE_LAYERS:
        try:
            cls = getattr(importlib.import_module(module_path), name, None)
        except ImportError:  # timm is optional for the SDK
            continue
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            layers[cls] = params
    return layers


def norm_affine_names(model: nn.Module) -> list[str]:
    """Names (as in ``model.named_parameters()``) of every norm layer's affine weight/bias.

    ResMLP's ``Affine`` layers, which stand where its LayerNorms would, count as norm layers:
    their ``alpha`` and ``beta`` adapt.
    """
    layers = _affine_layers()
    types = tuple(layers)
    names = []
    for module_name, module in model.named_modules():
        if not isinstance(module, types):
            continue
        affine = next(v for cls, v in layers.items() if isinstance(module, cls))
        for pname, param in module.named_parameters(recurse=False):
            if pname in affine and param is not None:
                names.append(f"{module_name}.{pname}" if module_name else pname)
    # named_parameters() de-duplicates shared tensors; keep only names it reports, in its order.
    reported = [n for n, _ in model.named_parameters()]
    wanted = set(names)
    return [n for n in reported if n in wanted]


def batch_norm_names(model: nn.Module, names: Iterable[str]) -> list[str]:
    """The ones of ``names`` that are affine parameters of a BatchNorm with running statistics.

    They step at ``RealmConfig.lr_batch_norm``: in eval mode those statistics are frozen, so
    nothing after the layer re-standardises a changed scale, as GroupNorm and LayerNorm do
    per sample. A BatchNorm without running statistics normalises each batch and is not one.

    Args:
        model: the classifier.
        names: parameter names (as in ``model.named_parameters()``), e.g. the trainable ones.

    Returns:
        Those of ``names`` that qualify, in their order.
    """
    found = set()
    for module_name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
            for pname, _ in module.named_parameters(recurse=False):
                found.add(f"{module_name}.{pname}" if module_name else pname)
    return [n for n in names if n in found]


def last_block_patterns(model: nn.Module) -> tuple[str, ...]:
    """Name patterns of the model's last block, frozen by the ImageNet preset.

    SAR (and REALM after it) leave the deepest block out of adaptation: its norm layers see
    the most class-specific features, and adapting them on single samples is what collapses
    first. SAR's rule per family: a ResNet's whole last stage (``layer4``); the last quarter
    of a ViT's blocks (9-11 of 12) and the final norm after them. Where the model comes from
    timm, timm's own stage grouping (``group_matcher``, what its layer-wise learning-rate
    decay uses) says where the stages are, and the same rule applies to it
    (:func:`_timm_last_block`); other modules are read by their attributes: ``layer4``,
    ``stages``/``layers`` (the last stage and the final norm), ``blocks`` (the last quarter).

    Args:
        model: the classifier.

    Returns:
        Regexes matched at the start of parameter names.

    Raises:
        ValueError: the model's layout is none of the above; pass ``frozen`` patterns instead.
    """
    from_timm = _timm_last_block(model)
    if from_timm is None:
        from_timm = _feature_info_last_block(model)
    if from_timm is not None:
        return from_timm
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
        f"cannot tell the last block of {type(model).__name__}: timm's stage metadata "
        "(group_matcher, feature_info) is missing and it has none of the attributes layer4, "
        "stages, layers or blocks. Set "
        "freeze_last_block=False and list the parameter-name patterns to freeze in "
        "RealmConfig.frozen instead."
    )


# timm groups a hierarchical model by stage (at most 7 groups below the head in timm 1.0)
# and an isotropic one block by block: from this many groups on, SAR's ViT rule applies.
_ISOTROPIC_GROUPS = 8


def _feature_info_last_block(model: nn.Module) -> tuple[str, ...] | None:
    """The last stage by timm's ``feature_info`` (models without ``group_matcher``: PiT).

    The last entry's module is the last stage (the last quarter of the entries where they all
    share one reduction: an isotropic stack); it freezes with every norm after it.
    """
    info = feature_info_modules(model)
    if info is None:
        return None
    modules = [i["module"] for i in info]
    isotropic = len({i.get("reduction") for i in info}) == 1 and len(info) >= _ISOTROPIC_GROUPS
    last = modules[-max(1, len(modules) // 4) :] if isotropic else modules[-1:]
    order = [n for n, _ in model.named_parameters()]
    inside = [n for n in order if any(n.startswith(f"{m}.") for m in last)]
    if not inside:
        return None
    after = order[order.index(inside[-1]) + 1 :]
    norms = set(norm_affine_names(model))
    return tuple(rf"{re.escape(n)}$" for n in [*inside, *after] if n in norms)


def _timm_last_block(model: nn.Module) -> tuple[str, ...] | None:
    """The last block by timm's coarse parameter groups; None where timm did not build it.

    The head's norms (:func:`._stages.timm_groups`) come after the last block and are frozen
    with it. Of the groups between the stem and the head that hold norm parameters, the last
    is frozen, or the last quarter where there are many (an isotropic stack, listed block by
    block).
    """
    read = timm_groups(model, norm_affine_names(model))
    if read is None:
        return None
    body = [g for g in read[0] if g]
    if not body:
        return None
    frozen_groups = body[-max(1, len(body) // 4) :] if len(body) >= _ISOTROPIC_GROUPS else body[-1:]
    frozen = [*(n for g in frozen_groups for n in g), *read[1]]
    return tuple(rf"{re.escape(n)}$" for n in frozen)


def stage_count(model: nn.Module) -> int:
    """How many stages with norm layers ``model`` has: the values ``adapt_stages`` takes.

    Raises:
        ValueError: the model's stages cannot be told (timm's metadata and the usual
            attributes are missing), in one sentence.
    """
    return len(model_stages(model, norm_affine_names(model)).body)


def first_conv_names(model: nn.Module) -> list[str]:
    """The parameters of the model's first convolution (registration order): SFT's θ.

    The layer the input meets first in the usual model (a ResNet's stem, a ViT's patch
    embedding), the one :func:`~realm_sdk._inputs.infer_sample_shape` reads the channels of.

    Raises:
        ValueError: the model has no convolution, in one sentence.
    """
    for module_name, module in model.named_modules():
        if isinstance(module, nn.modules.conv._ConvNd):
            prefix = f"{module_name}." if module_name else ""
            own = {f"{prefix}{n}" for n, _ in module.named_parameters(recurse=False)}
            return [n for n, _ in model.named_parameters() if n in own]
    raise ValueError(
        f"{type(model).__name__} has no convolution: SFT adapts only the first one, so there "
        "is nothing to adapt; choose a method that adapts the norm layers (tent, realm)"
    )


def _candidates(model: nn.Module, adapts: str) -> list[str]:
    """The parameters a method may adapt, by ``Method.adapts``, before any freezing."""
    if adapts == "all":
        return [n for n, _ in model.named_parameters()]
    if adapts == "first_conv":
        return first_conv_names(model)
    return norm_affine_names(model)


def select_trainable(
    model: nn.Module,
    frozen: Iterable[str] = (),
    *,
    freeze_last_block: bool = False,
    adapt_stages: int | None = None,
    adapts: str = "norm",
) -> list[str]:
    """The parameter names that adapt, in ``named_parameters()`` order.

    Args:
        model: the classifier.
        frozen: regexes matched (``re.match``) at the start of parameter names to exclude.
        freeze_last_block: also exclude :func:`last_block_patterns` of the model.
        adapt_stages: also exclude every norm but those of the last this many stages and
            after them (``realm_sdk._stages``); None: no such cut.
        adapts: what the method adapts (``Method.adapts``): the norm layers' affine
            parameters (SPEC §1), the first convolution, or every parameter.

    Returns:
        The selected names.

    Raises:
        ValueError: a pattern is not a valid regex, or nothing is left to adapt.
    """
    patterns = list(frozen)
    if freeze_last_block:
        patterns.extend(last_block_patterns(model))
    if adapt_stages is not None:
        patterns.extend(last_stages_frozen(model, norm_affine_names(model), adapt_stages))
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as exc:
            raise ValueError(f"frozen pattern {p!r} is not a valid regex: {exc}") from exc
    candidates = _candidates(model, adapts)
    selected = [n for n in candidates if not any(c.match(n) for c in compiled)]
    if not selected:
        if not candidates and adapts == "all":
            raise ValueError(f"{type(model).__name__} has no parameters: nothing to adapt")
        if not candidates:
            raise ValueError(
                f"{type(model).__name__} has no normalisation layer with affine parameters "
                "(BatchNorm, GroupNorm, LayerNorm, RMSNorm, ...): REALM adapts only those, so "
                "there is nothing to adapt."
            )
        causes = [f"the patterns {list(frozen)}"] if list(frozen) else []
        if freeze_last_block:
            causes.append("freeze_last_block=True")
        if adapt_stages is not None:
            causes.append(f"adapt_stages={adapt_stages}")
        what = "norm affine parameters" if adapts == "norm" else "adaptable parameters"
        raise ValueError(
            f"all {len(candidates)} {what} of {type(model).__name__} are frozen "
            f"by {' and '.join(causes)}: nothing is left to adapt; freeze less (a larger "
            "adapt_stages, or freeze_last_block=False)."
        )
    return selected


def has_batch_norm(model: nn.Module) -> bool:
    """Whether a norm affine parameter of ``model`` is a BatchNorm's with running statistics.

    Only on such a model does ``RealmConfig.lr_batch_norm`` step anything.

    Args:
        model: the classifier.

    Returns:
        True where ``batch_norm_names(model, norm_affine_names(model))`` is not empty.
    """
    return bool(batch_norm_names(model, norm_affine_names(model)))
