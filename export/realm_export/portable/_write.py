"""The portable pipeline's files: step/forward graphs, adapt graph, ORT format.

The product of an export (SPEC §8's ``onnx`` backend, any onnxruntime ≥ 1.19): the graphs of
:func:`._portable.build_portable_graphs` with their weights in one shared file, the one
adapt graph (:mod:`._adapt`) and, where asked, their ORT-format copies (:mod:`._ort_format`),
each validated against the PyTorch reference. A graph that fails is removed and the reason
kept in the manifest.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from realm_runtime import onnxruntime_module
from realm_runtime.contract import (
    ADAPT_MODEL,
    ADAPT_MODEL_KEY,
    ADAPT_STATE_KEY,
    BATCH_KEY,
    ERROR_KEY,
    FILE_KEY,
    FORWARD_MODEL,
    FORWARD_MODEL_KEY,
    INFERENCE_MODEL,
    LAYOUT_KEY,
    LAYOUT_VERSION,
    ORT_FORMAT_KEY,
    PARAMS_NAME,
    SHARED_WEIGHTS,
    SIZE_KEY,
    SOURCE_PARAMS,
    SOURCE_PARAMS_KEY,
    STATE_INITIAL_KEY,
    STEP_MODEL,
    STEP_MODEL_KEY,
    WEIGHTS_KEY,
)

from .._errors import UnsupportedModelError
from .._ort_format import CONVERTER, OPTIMIZATION_STYLE, TARGET_PLATFORM, write_ort_format
from .._plan import Built, Plan, Traced
from .._validate import ValidationError, ValidationReport
from .._weights import save_with_shared_weights, shared_table
from ._adapt import write_adapt
from ._checks import check_written
from ._step import PortableGraphs, build_portable_graphs
from ._validate_adapt import validate_adapt, validate_adapt_graphs
from ._validate_step import validate_portable

log = logging.getLogger(__name__)

# The portable graphs' files by role, as the manifest's portable section names them.
_PORTABLE_FILES = {
    STEP_MODEL_KEY: STEP_MODEL,
    FORWARD_MODEL_KEY: FORWARD_MODEL,
    SOURCE_PARAMS_KEY: SOURCE_PARAMS,
}


def write_portable(plan: Plan, traced: Traced, directory: Path) -> Built:
    """Build, write and validate the portable graphs; on failure, the reason instead.

    Returns:
        The manifest's ``portable`` section (or ``{"error": reason}``) with the portable
        graphs' report and the ORT-format graphs' report (None unless asked for and
        validated).

    Raises:
        OrtFormatError: ONNX Runtime's converter failed (only with ``ort_format``).
        ValidationError: the ORT-format graphs disagree with the reference.
    """
    started = time.perf_counter()
    try:
        graphs, weights, report = _built_and_checked(plan, traced, directory, lean=True)
        if report is not None and not report.passed:
            raise ValidationError(report.summary(), report)
    except UnsupportedModelError as exc:
        return Built(directory, {ERROR_KEY: str(exc)})
    except Exception as exc:  # the lean translation's graph refused or wrong: the public one
        log.info("the lean ONNX translation failed validation (%s); retrying with torch.onnx", exc)
        try:
            graphs, weights, report = _built_and_checked(plan, traced, directory, lean=False)
        except UnsupportedModelError as again:
            return Built(directory, {ERROR_KEY: str(again)})
    if report is not None and not report.passed:
        section = _discard_portable(directory, report)
        (directory / INFERENCE_MODEL).unlink(missing_ok=True)
        if traced.inference is not None:  # not the portable forward that just failed
            onnx.save(traced.inference, str(directory / INFERENCE_MODEL))  # weights.bin went
        return Built(directory, section, report)
    section = _portable_section(graphs, report, started) | {WEIGHTS_KEY: weights}
    adapt = _write_adapt(plan, traced, directory, graphs, report)
    if ERROR_KEY not in adapt:  # it reads the step graph's weights from the same file
        written = onnx.load(str(directory / ADAPT_MODEL), load_external_data=False)
        weights["graphs"][ADAPT_MODEL_KEY] = shared_table(written)
    ort_report = None
    if plan.options.ort_format:
        section[ORT_FORMAT_KEY], ort_report = _write_ort_format(
            plan, traced, directory, graphs, adapt
        )
    return Built(directory, section, report, ort_report, adapt=adapt)


def _built_and_checked(
    plan: Plan, traced: Traced, directory: Path, *, lean: bool
) -> tuple[PortableGraphs, dict[str, Any], ValidationReport | None]:
    """Build the portable graphs, write them with the inference model, and validate them.

    Returns:
        The graphs, the shared weights' table and the report (None where validation is off).

    Raises:
        UnsupportedModelError: the graphs could not be built.
    """
    plan.notify("building the portable step graph")
    graphs = build_portable_graphs(
        traced.source,
        plan.config,
        traced.trainable,
        traced.example[:1],
        lean=lean,
        fisher=traced.fisher,
    )
    # The inference model: the TorchScript forward, else the portable forward bound to θ0.
    inference = traced.inference if traced.inference is not None else _standalone(graphs)
    roles = {STEP_MODEL_KEY: graphs.step, FORWARD_MODEL_KEY: graphs.forward}
    names = dict(_PORTABLE_FILES)
    if plan.options.standalone_inference:
        onnx.save(inference, str(directory / INFERENCE_MODEL))
    else:  # its weights in weights.bin too: one copy of them on the device
        roles["inference_model"] = _copy(inference)
        names["inference_model"] = INFERENCE_MODEL
    weights = save_with_shared_weights(roles, directory, names)
    for role in (STEP_MODEL_KEY, FORWARD_MODEL_KEY):
        check_written(directory / names[role])
    np.save(directory / SOURCE_PARAMS, graphs.source, allow_pickle=False)
    what = "portable step graph"
    return graphs, weights, _check_graphs(plan, traced, directory, graphs, what, _PORTABLE_FILES)


def _write_adapt(
    plan: Plan,
    traced: Traced,
    directory: Path,
    graphs: PortableGraphs,
    step_report: ValidationReport | None,
) -> dict[str, Any]:
    """Write and validate the one adapt graph; its manifest section, or why it is not here.

    The step graph's report carries torch's own float32 error on the logits where it was
    measured: the adapt graph's logits are held to the same floor.
    """
    plan.notify("writing the adapt graph")
    section = write_adapt(graphs.step, plan.config, graphs.source, directory)
    if not plan.options.validate:
        return section
    plan.notify("validating the adapt graph against the PyTorch reference")
    try:
        spread = step_report.logits_spread if step_report is not None else 0.0
        reports = validate_adapt_graphs(
            directory,
            section,
            traced.source,
            plan.config,
            logits_spread=spread,
            fisher=traced.fisher,
            **_adapt_checks(plan),
        )
    except Exception as exc:  # ONNX Runtime refused to load or run it: say so, keep the rest
        _discard_adapt(directory, section)
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        return {ERROR_KEY: f"ONNX Runtime could not run the adapt graph: {first}"}
    for report, what in zip(reports, ("", " (entropy cut opened)"), strict=False):
        log.info("validation of the adapt graph%s: %s", what, report.summary())
    figures = [r.to_dict() for r in reports]
    if all(r.passed for r in reports):
        return section | {"validation": figures}
    _discard_adapt(directory, section)
    failed = next(r for r in reports if not r.passed)
    reason = f"the adapt graph disagrees with the PyTorch reference: {failed.summary()}"
    return {ERROR_KEY: reason, "validation": figures}


def _adapt_checks(plan: Plan) -> dict[str, Any]:
    """The adapt graph's validation inputs and tolerances, the same for every check of it."""
    return {
        "inputs": plan.portable_inputs(),
        "atol": plan.options.atol,
        "grad_rtol": plan.options.grad_rtol,
    }


def _discard_adapt(directory: Path, section: dict[str, Any]) -> None:
    """Remove the adapt graph and its initial state (not the source parameters, shared)."""
    for entry in section[ADAPT_STATE_KEY]:
        if entry[STATE_INITIAL_KEY] != SOURCE_PARAMS:
            (directory / entry[STATE_INITIAL_KEY]).unlink(missing_ok=True)
    (directory / section[FILE_KEY]).unlink(missing_ok=True)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _standalone(graphs: PortableGraphs) -> onnx.ModelProto:
    """The portable forward graph with ``realm.params`` bound to the source: ``input → logits``."""
    model = onnx.ModelProto()
    model.CopyFrom(graphs.forward)
    kept = [i for i in model.graph.input if i.name != PARAMS_NAME]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.append(onnx.numpy_helper.from_array(graphs.source, PARAMS_NAME))
    return model


def _discard_portable(directory: Path, report: ValidationReport) -> dict[str, Any]:
    """Remove the portable graphs that failed validation; the section that says why."""
    for name in (*_PORTABLE_FILES.values(), SHARED_WEIGHTS):
        (directory / name).unlink(missing_ok=True)
    reason = (
        f"the portable step graph disagrees with the PyTorch reference ({report.summary()}):\n"
        + report.table()
    )
    return {ERROR_KEY: reason, "validation": report.to_dict()}


def _portable_section(
    graphs: PortableGraphs, report: ValidationReport | None, started: float
) -> dict[str, Any]:
    """The manifest's ``portable`` section for graphs written (and validated) since ``started``."""
    opset = max(o.version for o in graphs.step.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "layout_version": LAYOUT_VERSION,
        **_PORTABLE_FILES,
        BATCH_KEY: 1,
        "opset": int(opset),
        "ir_version": int(graphs.step.ir_version),
        SIZE_KEY: int(graphs.source.shape[0]),
        LAYOUT_KEY: [dataclasses.asdict(slot) for slot in graphs.layout],
        "step_nodes": graphs.step_nodes,
        "forward_nodes": graphs.forward_nodes,
        "validation": report.to_dict() if report is not None else {},
        "seconds": round(time.perf_counter() - started, 2),
    }


def _write_ort_format(
    plan: Plan,
    traced: Traced,
    directory: Path,
    graphs: PortableGraphs,
    adapt: dict[str, Any],
) -> tuple[dict[str, Any], ValidationReport | None]:
    """Convert the portable graphs (and the adapt graph) to ORT format and validate them.

    Returns:
        The manifest's ``portable.ort_format`` section, and the report (None unless
        validated).

    Raises:
        OrtFormatError: ONNX Runtime's converter failed.
        ValidationError: the ORT-format graphs disagree with the reference.
    """
    plan.notify("writing the ORT-format graphs (ONNX Runtime's converter)")
    names = [STEP_MODEL, FORWARD_MODEL, *([adapt[FILE_KEY]] if FILE_KEY in adapt else [])]
    converted = write_ort_format(directory, names, [SHARED_WEIGHTS])
    files = {
        STEP_MODEL_KEY: converted[STEP_MODEL],
        FORWARD_MODEL_KEY: converted[FORWARD_MODEL],
        SOURCE_PARAMS_KEY: SOURCE_PARAMS,
    }
    report = _check_graphs(plan, traced, directory, graphs, "ORT-format graphs", files)
    if report is not None and not report.passed:
        raise ValidationError(
            "the ORT-format graphs disagree with the PyTorch reference:\n" + report.table(),
            report,
        )
    section = _ort_format_section(files, converted, report)
    if FILE_KEY in adapt:
        section[ADAPT_MODEL_KEY] = converted[adapt[FILE_KEY]]
        if plan.options.validate:  # the same trajectory from the ORT-format adapt graph
            # The written graph's trajectory only: the cut-opened twin was checked in .onnx.
            ort_adapt = adapt | {FILE_KEY: converted[adapt[FILE_KEY]]}
            figures = validate_adapt(
                directory,
                ort_adapt,
                traced.source,
                plan.config,
                fisher=traced.fisher,
                **_adapt_checks(plan),
            )
            log.info("validation of the ORT-format adapt graph: %s", figures.summary())
            section["adapt_validation"] = figures.to_dict()
            if not figures.passed:
                raise ValidationError(
                    f"the ORT-format adapt graph disagrees with the PyTorch reference: "
                    f"{figures.summary()}",
                    report,  # type: ignore[arg-type]
                )
    return section, report


def _check_graphs(
    plan: Plan,
    traced: Traced,
    directory: Path,
    graphs: PortableGraphs,
    what: str,
    files: dict[str, str],
) -> ValidationReport | None:
    """Validate one pair of step/forward graph files against the reference, and log it.

    Returns:
        The report, or None where validation is switched off.
    """
    if not plan.options.validate:
        return None
    plan.notify(f"validating the {what} against the PyTorch reference")
    report = validate_portable(
        directory,
        files,
        traced.source,
        plan.config,
        graphs.layout,
        plan.portable_inputs(),
        atol=plan.options.atol,
        grad_rtol=plan.options.grad_rtol,
    )
    log.info("validation of the %s:\n%s", what, report.table())
    return report


def _ort_format_section(
    files: dict[str, str], converted: dict[str, str], report: ValidationReport | None
) -> dict[str, Any]:
    """The manifest's ``portable.ort_format``: the files, how they were made, their figures."""
    onnxruntime = onnxruntime_module()
    return {
        STEP_MODEL_KEY: files[STEP_MODEL_KEY],
        FORWARD_MODEL_KEY: files[FORWARD_MODEL_KEY],
        "operators_config": converted["operators_config"],
        "converter": f"{CONVERTER} (onnxruntime {onnxruntime.__version__})",
        "optimization_style": OPTIMIZATION_STYLE,
        "target_platform": TARGET_PLATFORM,
        "validation": report.to_dict() if report is not None else {},
    }
