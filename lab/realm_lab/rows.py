"""The rows of the lab's tables, in one registry: every method, and the rows that are not one.

A row is what a benchmark runs on a stream and a table prints on a line. Every method of
``realm_runtime.methods`` is a row of its own name, read from the method registry, so a new
method file gives every bench a new row. Four rows are not methods but ways of running one:
the source model alone (no-adapt), REALM with its guardrails, REALM through ``RealmRuntime``
(an export) and RDumb (ETA reset to the source at a fixed period). This file is the one
place those rows, and each bench's default selection of rows, are named.

    >>> from realm_lab.rows import RDUMB, row_named
    >>> row_named(RDUMB.key).reset_every
    1000
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from realm_runtime.methods import BY_NAME, ETA, REALM, SAR, TENT


@dataclass(frozen=True)
class Row:
    """One row of the lab's tables: a method, run in one way."""

    key: str  # its name in --methods, the run logs, the JSON and the tables' order
    label: str  # as the tables and plots print it
    method: str | None  # the registry's method it adapts with (None: the source model alone)
    guarded: bool = False  # the method's own guardrails in force (else Guardrails.off())
    runtime: bool = False  # adapted by RealmRuntime through an export, not by the torch SDK
    reset_every: int | None = None  # back to the source every so many samples (RDumb)
    cost: float = 1.0  # time of a run against one forward and backward a sample (scheduling)

    @property
    def adapts(self) -> bool:
        """Whether the row changes the model (every row but no-adapt)."""
        return self.method is not None

    @property
    def learns_alpha_lambda(self) -> bool:
        """Whether its method learns the loss's shape α and scale λ (REALM's rows)."""
        return self.method is not None and BY_NAME[self.method].learns_alpha_lambda


NO_ADAPT = Row("none", "no-adapt", None, cost=0.3)
REALM_GUARDED = Row("realm-guarded", "REALM + guardrails", REALM.name, guarded=True)
REALM_RUNTIME = Row("realm-runtime", "REALM (runtime)", REALM.name, runtime=True)
RDUMB = Row("rdumb", "RDumb", ETA.name, reset_every=1000)  # RDumb's own period

# Table order: the source, the methods in the registry's order, then the variants of one.
ROWS: dict[str, Row] = {
    r.key: r
    for r in (
        NO_ADAPT,
        *(Row(m.name, m.label, m.name, cost=m.cost) for m in BY_NAME.values() if m is not REALM),
        Row(REALM.name, REALM.label, REALM.name, cost=REALM.cost),
        REALM_GUARDED,
        REALM_RUNTIME,
        RDUMB,
    )
}

# What each bench runs when --methods is not given. The stored tables were made with these,
# so a rerun of a documented command redoes nothing: a new method runs where it is asked for.
QUALITY_DEFAULT = (NO_ADAPT.key, TENT.name, ETA.name, REALM.name, REALM_RUNTIME.key)
STREAMS_DEFAULT = (NO_ADAPT.key, TENT.name, ETA.name, SAR.name, REALM.name, REALM_GUARDED.key)
ENDLESS_DEFAULT = (NO_ADAPT.key, REALM_GUARDED.key, ETA.name, RDUMB.key)
# The models the full-length protocol runs the AugMix rows on (64 views a sample: tens of
# core-hours a model, so one model).
VIEWS_MODELS = ("resnet26_gn",)
# The methods whose filters the frame attacker models (DeYO's PLPD cut it does not), each run
# with and without its guardrails.
FRAME_METHODS = (TENT.name, ETA.name, SAR.name, REALM.name)


def row_named(key: str) -> Row:
    """The row called ``key``.

    Raises:
        ValueError: no row has that name; the message lists those that do.
    """
    try:
        return ROWS[key]
    except KeyError:
        raise ValueError(f"unknown row {key!r}; known: {list(ROWS)}") from None


def rows_where(keys: Sequence[str], known: Sequence[str], what: str) -> tuple[Row, ...]:
    """The rows of ``keys`` in table order, each checked against the ``known`` rows of a bench.

    Raises:
        ValueError: one sentence naming the rows the bench cannot run and those it can.
    """
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"unknown methods {unknown} for {what}; known: {list(known)}")
    return tuple(r for r in ROWS.values() if r.key in keys)


def in_table_order(keys: Sequence[str]) -> list[str]:
    """``keys`` sorted as the registry orders rows (unknown keys last, in their order)."""
    order = list(ROWS)
    return sorted(keys, key=lambda k: order.index(k) if k in order else len(order))
