"""The adapt graph's state: its layout, the watch EMAs, the collapse guard, resets, counters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from realm_runtime import RealmConfig
from realm_runtime.contract import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    COLLAPSE_LIMIT_NAME,
    COUNTER_DRIFT_CLIPS,
    COUNTER_RESETS_COLLAPSE,
    COUNTER_RESETS_RECOVERY,
    COUNTER_SAMPLES,
    COUNTER_SKIPPED_DIVERSITY,
    COUNTER_SKIPPED_ENTROPY,
    COUNTER_SKIPPED_NONFINITE,
    COUNTER_UPDATED_SAMPLES,
    COUNTER_UPDATES,
    COUNTERS,
    COUNTERS_NAME,
    EMA_NAME,
    EPISODIC_NAME,
    FIGURE_ENTROPY_EMA,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_NAME,
    KNOWN_UPDATE_RATE,
    KNOWN_WATCH,
    MARGINAL_NAME,
    PARAMS_NAME,
    SEEN_NAME,
    SETTINGS_NAME,
    VELOCITY_NAME,
    WATCH_BETA,
    WATCH_NAME,
    WATCH_WINDOW,
    adapt_settings,
    fresh_watch_tensors,
    next_name,
)

from .._onnx_builder import GraphBuilder
from ._adapt_builder import (
    AdaptBuilder,
    DriftNorm,
    bool_info,
    ema_of,
    read_figure,
    read_flag,
    stack,
    value_info,
)


@dataclass(frozen=True)
class StateTensor:
    """One entry of the adapt graph's state: its input, its next value, its initial value."""

    name: str  # the graph input; the output is next_name(name)
    initial: np.ndarray  # the value a fresh (or reset) adapter starts from


def adapt_state(config: RealmConfig, source: np.ndarray) -> list[StateTensor]:
    """The state the adapt graph carries, in the manifest's order, with its initial values."""
    watch = fresh_watch_tensors(config.num_classes)  # the runtime's layout of the rest
    return [
        StateTensor(PARAMS_NAME, source.astype(np.float32)),
        StateTensor(VELOCITY_NAME, np.zeros_like(source, dtype=np.float32)),
        *(StateTensor(name, value) for name, value in watch.items()),
        StateTensor(SETTINGS_NAME, adapt_settings(config)),  # passed through unchanged
    ]


def state_next(
    b: AdaptBuilder,
    config: RealmConfig,
    state: list[StateTensor],
    initial: dict[str, str],
    decision: dict[str, str],
    step: dict[str, str],
    drift: DriftNorm,
) -> None:
    """Every state's next value, as the twins compute it (``OnlineAdaptation._step``).

    The twins reset in turn (SAR's recovery, the collapse guard, the episodic reset); each
    reset empties the watch (``seen`` 0), so a recovery rules out a collapse in the same call,
    and the graph applies the three as one reset, in one ``If`` that only a reset runs.
    """
    finite, u = decision["finite"], step["updated"]
    op = b.step
    false = b.const("false", False, np.bool_)
    zero = b.const("zero", 0.0)

    # 1. the watch sees the sample's finite logits
    known_w = read_flag(b, KNOWN_WATCH)
    old_entropy = read_figure(b, FIGURE_ENTROPY_EMA)
    seen_entropy = ema_of(b, old_entropy, decision["entropy"], known_w, WATCH_BETA)
    ent = op("Where", [finite, seen_entropy, old_entropy], "entropy_ema")
    probs = op(
        "Reshape",
        [decision["probs"], b.const("class_shape", [config.num_classes], np.int64)],
        "probs",
    )
    seen_probs = ema_of(b, MARGINAL_NAME, probs, known_w, WATCH_BETA)
    marginal = op("Where", [finite, seen_probs, MARGINAL_NAME], "marginal")
    seen = op("Add", [SEEN_NAME, op("Cast", [finite], "seen_inc", to=TensorProto.INT64)], "seen")
    known_w = op("Or", [known_w, finite], "known_watch")
    known_ema = op("Or", [decision["known_ema"], u], "known_ema")
    recover = step["recover"]

    # 2. the update rate, after the recovery (a reset's first figure is this call's)
    not_recovered = op("Not", [recover], "not_recovered")
    known_rate = op("And", [read_flag(b, KNOWN_UPDATE_RATE), not_recovered], "known_rate")
    uf = op("Cast", [u], "uf", to=TensorProto.FLOAT)
    rate = ema_of(b, read_figure(b, FIGURE_UPDATE_RATE), uf, known_rate, WATCH_BETA)

    # 3. the collapse guard, on the watch after this sample (COLLAPSE_LIMIT_NAME 0: off)
    collapse = false
    if drift.norm0 > 0:
        on = op("Greater", [COLLAPSE_LIMIT_NAME, zero], "collapse_on")
        logm = op("Log", [op("Max", [marginal, b.const("tiny_p", 1e-12)], "m_safe")], "log_m")
        summed = op(
            "ReduceSum",
            [op("Mul", [marginal, logm], "m_logm"), b.const("axis0", [0], np.int64)],
            "sum",
            keepdims=0,
        )
        narrow = op("Less", [op("Neg", [summed], "spread"), COLLAPSE_LIMIT_NAME], "narrow")
        window = op("GreaterOrEqual", [seen, b.const("window", WATCH_WINDOW, np.int64)], "win")
        watched = op("And", [finite, known_w], "watched")
        maybe = op("And", [op("And", [on, narrow], "c1"), op("And", [window, watched], "c2")], "c3")
        nodes, moved = b.branch(
            lambda: {"moved": op("Greater", [drift(step["params"]), zero], "moved")}
        )
        collapse = "adapt.collapse"
        b.nodes.append(
            helper.make_node(
                "If",
                [maybe],
                [collapse],
                name="adapt.collapse_if",
                then_branch=helper.make_graph(
                    nodes, "adapt_moved", [], [bool_info(moved["moved"])]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Identity", [false], ["adapt.collapse.no"])],
                    "adapt_not_narrow",
                    [],
                    [bool_info("adapt.collapse.no")],
                ),
            )
        )
        collapse = op("And", [collapse, not_recovered], "collapse")  # the twins: one or other

    # 4. one reset for all three
    reset = op("Or", [op("Or", [recover, collapse], "r1"), EPISODIC_NAME], "reset")
    current = {
        PARAMS_NAME: step["params"],
        VELOCITY_NAME: step["velocity"],
        EMA_NAME: step["ema"],
        MARGINAL_NAME: marginal,
        SEEN_NAME: seen,
    }
    shapes = {s.name: s.initial for s in state}
    e = GraphBuilder()
    then = helper.make_graph(
        [helper.make_node("Identity", [initial[n]], [f"adapt.reset.{n}"]) for n in current],
        "adapt_reset",
        [],
        [value_info(f"adapt.reset.{n}", shapes[n]) for n in current],
    )
    for n, v in current.items():
        e.op("Identity", [v], f"adapt.keep.{n}")
    otherwise = helper.make_graph(
        e.nodes, "adapt_keep", [], [value_info(f"adapt.keep.{n}", shapes[n]) for n in current]
    )
    b.nodes.append(
        helper.make_node(
            "If",
            [reset],
            [next_name(n) for n in current],
            name="adapt.reset",
            then_branch=then,
            else_branch=otherwise,
        )
    )
    kept = op("Not", [reset], "no_reset")
    figures = {FIGURE_ENTROPY_EMA: ent, FIGURE_LOSS_EMA: step["loss_ema"], FIGURE_UPDATE_RATE: rate}
    flags = {
        KNOWN_EMA: op("And", [known_ema, kept], "known_ema_kept"),
        KNOWN_WATCH: op("And", [known_w, kept], "known_watch_kept"),
        KNOWN_LOSS_EMA: op("And", [step["known_loss"], kept], "known_loss_kept"),
        KNOWN_UPDATE_RATE: op(
            "Not", [op("Or", [collapse, EPISODIC_NAME], "rate_reset")], "rate_known"
        ),
    }
    stack(b, [figures[w] for w in ADAPT_WATCH], next_name(WATCH_NAME))
    stack(b, [flags[k] for k in ADAPT_KNOWN], next_name(KNOWN_NAME))
    counters(b, decision, step, collapse)


def counters(
    b: AdaptBuilder, decision: dict[str, str], step: dict[str, str], collapse: str
) -> None:
    """``realm.counters`` plus this call's increments, in :data:`COUNTERS` order."""
    op = b.step
    finite, keep, passed = decision["finite"], decision["keep"], decision["passed_entropy"]
    no_finite = op("Not", [finite], "nonfinite_logits")
    not_keep = op("Not", [keep], "not_keep")
    similar = op("And", [op("And", [finite, passed], "f_p"), not_keep], "similar")
    uncertain = op("And", [finite, op("Not", [passed], "not_passed")], "uncertain")
    # selected, but none kept at θ + ε (SAR): refused by the cut; else a non-finite step
    none_kept = op("And", [keep, op("Not", [step["any_kept"]], "no_kept")], "none_kept")
    uncertain = op("Or", [uncertain, none_kept], "uncertain_again")
    bad = op(
        "And",
        [op("And", [keep, step["any_kept"]], "k"), op("Not", [step["finite"]], "nf")],
        "bad_step",
    )
    flag = {
        COUNTER_SAMPLES: b.const("true", True, np.bool_),
        COUNTER_UPDATES: step["updated"],
        COUNTER_UPDATED_SAMPLES: step["updated"],
        COUNTER_SKIPPED_DIVERSITY: similar,
        COUNTER_SKIPPED_ENTROPY: uncertain,
        COUNTER_SKIPPED_NONFINITE: op("Or", [no_finite, bad], "skipped_nonfinite"),
        COUNTER_RESETS_RECOVERY: step["recover"],
        COUNTER_RESETS_COLLAPSE: collapse,
        COUNTER_DRIFT_CLIPS: step["clip"],
    }
    increments = stack(b, [flag[c] for c in COUNTERS], "adapt.increments", TensorProto.INT64)
    b.op("Add", [COUNTERS_NAME, increments], next_name(COUNTERS_NAME))
