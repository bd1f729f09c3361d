"""The lab's rows come from the method registry: a new method file is a row of every bench."""

from __future__ import annotations

import pytest

from realm_lab.bench import ENDLESS_METHODS, QUALITY_METHODS, STREAM_METHODS, method_config
from realm_lab.rows import (
    ENDLESS_DEFAULT,
    FRAME_METHODS,
    QUALITY_DEFAULT,
    ROWS,
    STREAMS_DEFAULT,
    row_named,
)
from realm_runtime.methods import BY_NAME


def test_every_method_of_the_registry_is_a_row_of_its_name_and_label():
    for name, method in BY_NAME.items():
        assert ROWS[name].method == name and ROWS[name].label == method.label
        assert not ROWS[name].guarded and not ROWS[name].runtime


@pytest.mark.parametrize("known", [QUALITY_METHODS, STREAM_METHODS, ENDLESS_METHODS])
def test_every_bench_runs_every_method(known):
    assert set(BY_NAME) <= set(known)


@pytest.mark.parametrize(
    ("default", "known"),
    [
        (QUALITY_DEFAULT, QUALITY_METHODS),
        (STREAMS_DEFAULT, STREAM_METHODS),
        (ENDLESS_DEFAULT, ENDLESS_METHODS),
        (FRAME_METHODS, tuple(BY_NAME)),
    ],
)
def test_each_default_selection_is_rows_the_bench_knows(default, known):
    assert set(default) <= set(known)


def test_a_row_that_is_not_a_method_names_the_method_it_runs():
    for row in ROWS.values():
        assert row.method is None or row.method in BY_NAME, row
    assert sum(not r.adapts for r in ROWS.values()) == 1  # no-adapt, once


def test_a_guarded_row_keeps_its_methods_guardrails_and_the_others_run_without():
    guarded = next(r for r in ROWS.values() if r.guarded)
    on = method_config(guarded.key, "cifar", 10)
    off = method_config(guarded.method, "cifar", 10)
    assert on.method == off.method == guarded.method
    assert on.guardrails == BY_NAME[guarded.method].guardrails
    assert off.guardrails != on.guardrails


def test_an_unknown_row_is_named_with_those_that_exist():
    with pytest.raises(ValueError, match=r"unknown row 'tnet'; known: \['none', "):
        row_named("tnet")
    with pytest.raises(ValueError, match="does not adapt"):
        method_config(next(r.key for r in ROWS.values() if not r.adapts), "cifar", 10)
