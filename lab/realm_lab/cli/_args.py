"""What the bench commands read alike: ``--set FIELD=VALUE`` items, the source model's name."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from realm_runtime import Guardrails
from realm_runtime.methods import BY_NAME


def parse_overrides(items: list[str]) -> dict[str, object] | str:
    """``FIELD=VALUE`` items as configuration fields (numbers, true/false, none, text), or an error.

    ``guardrails.FIELD=VALUE`` changes one field of REALM's default :class:`Guardrails`
    (``none`` for off), e.g. ``guardrails.max_drift=0.01``; ``METHOD.SETTING=VALUE`` one
    setting of a method, e.g. ``sar.sam_rho=0.1`` (``sam_rho=0.1`` says the same).
    """
    out: dict[str, object] = {}
    for item in items:
        field, sep, text = item.partition("=")
        if not sep or not field:
            return f"--set expects FIELD=VALUE items, got {item!r}"
        value: object = text
        if text.lower() == "none":  # e.g. lr_batch_norm=none: BatchNorm at lr, as the baselines
            value = None
        elif text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    continue
        owner, dot, inner = field.partition(".")
        if not dot:
            out[field] = value
            continue
        if owner in BY_NAME:  # a method's own setting: reaches that method's rows only
            out.setdefault(owner, {})[inner] = value  # type: ignore[index]
            continue
        if owner != "guardrails":
            return (
                f"--set: only guardrails.<field> and <method>.<setting> are nested "
                f"(methods: {', '.join(BY_NAME)}), got {field!r}"
            )
        try:
            base = out.get("guardrails", Guardrails())
            off = None if text.lower() == "none" else value
            out["guardrails"] = dataclasses.replace(base, **{inner: off})  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            return f"--set {item!r}: {exc}"
    return out


def model_name(args: argparse.Namespace) -> str:
    """The source model a run adapts, as its report names it."""
    defaults = {"digits": "digits", "fmnist-c": "resnet26_gn", "imagenetc": "resnet50_gn"}
    return args.model or defaults.get(args.dataset, "")


# The repository the lab lives in: docs/ for tables and plots, lab/runs/ for what made them.
_REPO = Path(__file__).resolve().parents[3]
RUNS_HOME = _REPO / "lab" / "runs"
DOCS_HOME = _REPO / "docs"


def runs_folder(out: str | os.PathLike[str]) -> Path:
    """Where a bench keeps its runs (run logs, finished rows, JSON) beside ``--out``'s tables.

    Tables and plots written under the repository's ``docs/`` keep their runs in the same
    place under ``lab/runs/`` (docs holds prose, tables and plots; the runs live with the
    lab), so the same command resumes them; anywhere else, in ``out`` itself.
    """
    target = Path(out).resolve()
    if target == DOCS_HOME or DOCS_HOME in target.parents:
        return RUNS_HOME / target.relative_to(DOCS_HOME)
    return Path(out)
