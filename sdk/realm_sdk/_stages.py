"""A model's stages, for adapting only the last K (``RealmConfig.adapt_stages``).

Adapting only the norm layers of the last K stages stops the backward there: what the
earlier stages computed need not be kept for it (surgical fine-tuning's and MECTA's lever
on memory). The stages are read as the last-block rule reads them (:mod:`._params`):
timm's coarse parameter groups, else timm's ``feature_info``, else the module's
attributes (``layer1``…``layer4``, ``stages``/``layers``, ``blocks``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Stages:
    """The norm affine parameter names of a model, by where they sit."""

    before: tuple[str, ...]  # the stem's: before the first stage
    body: tuple[tuple[str, ...], ...]  # each stage's, in order (stages without norms left out)
    after: tuple[str, ...]  # after the last stage: a final norm, the head's


def model_stages(model: nn.Module, norms: list[str]) -> Stages:
    """Where each of ``norms`` (the model's norm affine names, in order) sits.

    Raises:
        ValueError: none of the three sources tells the model's stages.
    """
    groups = _timm_body(model, norms) or _feature_info_groups(model, norms)
    if groups is None:
        groups = _attribute_groups(model, norms)
    if groups is None:
        raise ValueError(
            f"cannot tell the stages of {type(model).__name__}: timm's stage metadata "
            "(group_matcher, feature_info) is missing and it has none of the attributes "
            "layer1…layer4, stages, layers or blocks; leave adapt_stages at None and list "
            "the parameter-name patterns to freeze in RealmConfig.frozen instead"
        )
    body = [g for g in groups if g]
    if not body:
        raise ValueError(f"{type(model).__name__}'s stages hold no norm layer")
    inside = {n for g in body for n in g}
    first = norms.index(body[0][0])
    last = norms.index(body[-1][-1])
    before = tuple(n for n in norms[:first] if n not in inside)
    after = tuple(n for n in norms[last + 1 :] if n not in inside)
    return Stages(before, tuple(tuple(g) for g in body), after)


def last_stages_frozen(model: nn.Module, norms: list[str], count: int) -> tuple[str, ...]:
    """Patterns freezing every norm but those of the last ``count`` stages and after them.

    Raises:
        ValueError: the model's stages cannot be told, or it has fewer than ``count``.
    """
    stages = model_stages(model, norms)
    if count > len(stages.body):
        raise ValueError(
            f"adapt_stages={count}, but {type(model).__name__} has {len(stages.body)} stages "
            f"with norm layers: choose 1 to {len(stages.body)}, or None to adapt them all"
        )
    keep = {n for g in stages.body[-count:] for n in g} | set(stages.after)
    return tuple(rf"{re.escape(n)}$" for n in norms if n not in keep)


def timm_groups(model: nn.Module, norms: list[str]) -> tuple[list[list[str]], list[str]] | None:
    """The norm names of timm's coarse parameter groups, and of its head; None where absent.

    The first list holds each group's norm names between the stem (group 0) and the head, in
    order; the second the head groups' norm names. The groups holding the classifier are the
    head (distilled models answer a tuple of heads): their norms (a final norm, a
    classification head's own) come after the stages.
    """
    matcher = getattr(model, "group_matcher", None)
    classifier = getattr(model, "get_classifier", None)
    if not callable(matcher) or not callable(classifier):
        return None
    try:
        from timm.models import group_parameters

        groups = group_parameters(model, matcher(coarse=True))
        head_module = classifier()
    except (ImportError, AttributeError, NotImplementedError, TypeError):
        return None
    heads = head_module if isinstance(head_module, tuple | list) else (head_module,)
    head_ids = {id(p) for h in heads if isinstance(h, nn.Module) for p in h.parameters()}
    by_name = dict(model.named_parameters())
    order = sorted(groups)
    head = {g for g in order if any(id(by_name[n]) in head_ids for n in groups[g] if n in by_name)}
    members = {g: set(groups[g]) for g in order}
    body = [[n for n in norms if n in members[g]] for g in order[1:] if g not in head]
    return body, [n for n in norms if any(n in members[g] for g in head)]


def feature_info_modules(model: nn.Module) -> list[dict] | None:
    """Timm's ``feature_info`` entries, each naming its module; None where it has none."""
    info = getattr(model, "feature_info", None)
    if not isinstance(info, list) or not info or not all(isinstance(i, dict) for i in info):
        return None
    if not all(isinstance(i.get("module"), str) and i["module"] for i in info):
        return None
    return info


def _timm_body(model: nn.Module, norms: list[str]) -> list[list[str]] | None:
    read = timm_groups(model, norms)
    return None if read is None else read[0]


def _feature_info_groups(model: nn.Module, norms: list[str]) -> list[list[str]] | None:
    """The norm names inside each module timm's ``feature_info`` names."""
    info = feature_info_modules(model)
    if info is None:
        return None
    return [[n for n in norms if n.startswith(f"{i['module']}.")] for i in info]


def _attribute_groups(model: nn.Module, norms: list[str]) -> list[list[str]] | None:
    """The norm names under ``layer1``…, ``stages.i``/``layers.i`` or ``blocks.i``."""
    children = dict(model.named_children())
    prefixes: list[str] = []
    if "layer1" in children:
        prefixes = [f"layer{i}." for i in range(1, 10) if f"layer{i}" in children]
    for attr in ("stages", "layers", "blocks"):
        seq = children.get(attr)
        if not prefixes and isinstance(seq, nn.Sequential | nn.ModuleList) and len(seq):
            prefixes = [f"{attr}.{i}." for i in range(len(seq))]
    if not prefixes:
        return None
    return [[n for n in norms if n.startswith(p)] for p in prefixes]
