"""The contract between the packages: artifact names, graph I/O names, formats, state files.

Every name a writer of artifacts (``realm_export``) or of state files (``realm_sdk``) must
agree on with the runtime is defined once, in the runtime's leaf module ``_names``; this
module is their one public face, with the functions that read and write what they name, so
the packages above import from here and never from ``realm_runtime._…``. Torch-free, like
the rest of the package. Other languages read the same names from :func:`contract_json`
(``clients/js/contract.json``; ``contract.js`` is :func:`contract_module`), both written by
``python dev/write_contract.py``. The twins (``realm_sdk.RealmAdapter`` and
``RealmRuntime``) also share their step's bookkeeping (:class:`OnlineAdaptation`), their
input checks' rules and wording and the entropy's numpy form (:func:`entropy`) from here.

    >>> from realm_runtime.contract import STEP_MODEL, PARAMS_NAME, StateArrays, save_state
"""

from __future__ import annotations

import json
from typing import Any

from . import _names
from ._adaptation import (
    WATCH_BETA,
    WATCH_WINDOW,
    AdaptationState,
    OnlineAdaptation,
)
from ._checkpoint import StateArrays, load_state, read_state, save_state, write_state
from ._graph_state import fresh_watch_tensors
from ._inputs import check_input_shape, input_dtype_error, input_nonfinite_error, input_type_error
from ._manifest import InputSpec, Manifest, parse_manifest, seal, sha256_of
from ._names import (
    ADAPT_COUNTERS_KEY,
    ADAPT_INPUT_KEY,
    ADAPT_KEY,
    ADAPT_KNOWN,
    ADAPT_KNOWN_KEY,
    ADAPT_LOGITS_KEY,
    ADAPT_LOSS_KEY,
    ADAPT_LOSS_NAME,
    ADAPT_MODEL,
    ADAPT_MODEL_KEY,
    ADAPT_REASON_KEY,
    ADAPT_REASON_NAME,
    ADAPT_REASONS,
    ADAPT_REASONS_KEY,
    ADAPT_SECTION_VERSION,
    ADAPT_SELECTED_KEY,
    ADAPT_SELECTED_NAME,
    ADAPT_SETTINGS,
    ADAPT_SETTINGS_KEY,
    ADAPT_STATE_KEY,
    ADAPT_UPDATED_KEY,
    ADAPT_UPDATED_NAME,
    ADAPT_WATCH,
    ADAPT_WATCH_KEY,
    ALPHA_NAME,
    ANCHOR_NAME,
    ARTIFACT_FORMAT,
    ARTIFACT_VERSION,
    BATCH_KEY,
    BATCH_NORM_KEY,
    CHECKPOINT,
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
    DIGEST_KEY,
    DIVERSITY_MARGIN_NAME,
    DRIFT_CHECK_KEY,
    EMA_BETA_NAME,
    EMA_NAME,
    EMA_NEW_NAME,
    ENTROPY_MARGIN_NAME,
    EPISODIC_NAME,
    ERROR_KEY,
    EVAL_MODEL,
    FIGURE_ENTROPY_EMA,
    FIGURE_LOSS_EMA,
    FIGURE_UPDATE_RATE,
    FILE_KEY,
    FINITE_NAME,
    FIT_KEY,
    FORWARD_MODEL,
    FORWARD_MODEL_KEY,
    FULL_RATE_NAME,
    INFERENCE_MODEL,
    INPUT_NAME,
    INTERVENTIONS,
    KEPT_NAME,
    KNOWN_EMA,
    KNOWN_LOSS_EMA,
    KNOWN_NAME,
    KNOWN_UPDATE_RATE,
    KNOWN_WATCH,
    LAMBDA_NAME,
    LAYOUT_KEY,
    LAYOUT_VERSION,
    LOGITS_NAME,
    LOSS_NAME,
    LR_ALPHA_LAMBDA_NAME,
    LR_BATCH_NORM_NAME,
    LR_NAME,
    MANIFEST_NAME,
    MANIFEST_REQUIRED,
    MARGINAL_NAME,
    MAX_DRIFT_NAME,
    MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES,
    MEMORY_KEY,
    MOMENTUM_NAME,
    NEW_PARAMS_NAME,
    NEW_VELOCITY_NAME,
    NEXT_SUFFIX,
    ORT_FORMAT_KEY,
    ORT_OPERATORS_CONFIG,
    PARAMS_NAME,
    PLPD_THRESHOLD_NAME,
    PORTABLE_KEY,
    REASON_DIVERSITY,
    REASON_ENTROPY,
    REASON_NONFINITE,
    REASON_UPDATED,
    RECOVERY_LOSS_NAME,
    RELAX_NAME,
    SAM_RHO_NAME,
    SAMPLE_INDEX_NAME,
    SAMPLE_WEIGHT_NAME,
    SEEN_NAME,
    SETTINGS_NAME,
    SHARED_WEIGHTS,
    SIGNATURE_ALGORITHM,
    SIGNATURE_FORMAT,
    SIGNATURE_NAME,
    SIGNATURE_VERSION,
    SIZE_KEY,
    SOURCE_PARAMS,
    SOURCE_PARAMS_KEY,
    STATE_FORMAT,
    STATE_HEADER_MEMBER,
    STATE_INITIAL_KEY,
    STATE_INPUT_KEY,
    STATE_OUTPUT_KEY,
    STATE_VERSION,
    STEP_MODEL,
    STEP_MODEL_KEY,
    TRAINING_MODEL,
    VELOCITY_NAME,
    WATCH_NAME,
    WEIGHTS_KEY,
)
from ._portable_io import TensorSlot, adapt_settings, method_input, next_name, step_settings
from ._step import entropy


def contract_values() -> dict[str, Any]:
    """Every name of the contract by its Python name, in definition order (tuples as lists)."""
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in vars(_names).items()
        if key.isupper()
    }


def contract_json() -> str:
    """The contract's names as JSON text, for a client in any language.

    One object keyed by the Python names (``clients/js/contract.json``).
    """
    return json.dumps(contract_values(), indent=2, ensure_ascii=False) + "\n"


def contract_module() -> str:
    """The contract's names as an ES module (``clients/js/contract.js``).

    One ``export const`` per name, so that JavaScript imports each by name (and a type
    checker catches a misspelt one); lists are frozen. An ES module rather than a JSON
    import: Node 20 still warns that JSON modules are experimental.
    """
    lines = [
        "// @ts-check",
        "// The contract's names, defined in realm_runtime/_names.py (where each is described).",
        "// Generated with contract.json by `python dev/write_contract.py`: do not edit.",
        "",
    ]
    for key, value in contract_values().items():
        text = json.dumps(value, ensure_ascii=False)
        lines.append(
            f"export const {key} = Object.freeze({text});"
            if isinstance(value, list)
            else f"export const {key} = {text};"
        )
    return "\n".join(lines) + "\n"


__all__ = [
    "ADAPT_COUNTERS_KEY",
    "ADAPT_INPUT_KEY",
    "ADAPT_KEY",
    "ADAPT_KNOWN",
    "ADAPT_KNOWN_KEY",
    "ADAPT_LOGITS_KEY",
    "ADAPT_LOSS_KEY",
    "ADAPT_LOSS_NAME",
    "ADAPT_MODEL",
    "ADAPT_MODEL_KEY",
    "ADAPT_REASONS",
    "ADAPT_REASONS_KEY",
    "ADAPT_REASON_KEY",
    "ADAPT_REASON_NAME",
    "ADAPT_SECTION_VERSION",
    "ADAPT_SELECTED_KEY",
    "ADAPT_SELECTED_NAME",
    "ADAPT_SETTINGS",
    "ADAPT_SETTINGS_KEY",
    "ADAPT_STATE_KEY",
    "ADAPT_UPDATED_KEY",
    "ADAPT_UPDATED_NAME",
    "ADAPT_WATCH",
    "ADAPT_WATCH_KEY",
    "ALPHA_NAME",
    "ANCHOR_NAME",
    "ARTIFACT_FORMAT",
    "ARTIFACT_VERSION",
    "BATCH_KEY",
    "BATCH_NORM_KEY",
    "CHECKPOINT",
    "COLLAPSE_LIMIT_NAME",
    "COUNTERS",
    "COUNTERS_NAME",
    "COUNTER_DRIFT_CLIPS",
    "COUNTER_RESETS_COLLAPSE",
    "COUNTER_RESETS_RECOVERY",
    "COUNTER_SAMPLES",
    "COUNTER_SKIPPED_DIVERSITY",
    "COUNTER_SKIPPED_ENTROPY",
    "COUNTER_SKIPPED_NONFINITE",
    "COUNTER_UPDATED_SAMPLES",
    "COUNTER_UPDATES",
    "DIGEST_KEY",
    "DIVERSITY_MARGIN_NAME",
    "DRIFT_CHECK_KEY",
    "EMA_BETA_NAME",
    "EMA_NAME",
    "EMA_NEW_NAME",
    "ENTROPY_MARGIN_NAME",
    "EPISODIC_NAME",
    "ERROR_KEY",
    "EVAL_MODEL",
    "FIGURE_ENTROPY_EMA",
    "FIGURE_LOSS_EMA",
    "FIGURE_UPDATE_RATE",
    "FILE_KEY",
    "FINITE_NAME",
    "FIT_KEY",
    "FORWARD_MODEL",
    "FORWARD_MODEL_KEY",
    "FULL_RATE_NAME",
    "INFERENCE_MODEL",
    "INPUT_NAME",
    "INTERVENTIONS",
    "KEPT_NAME",
    "KNOWN_EMA",
    "KNOWN_LOSS_EMA",
    "KNOWN_NAME",
    "KNOWN_UPDATE_RATE",
    "KNOWN_WATCH",
    "LAMBDA_NAME",
    "LAYOUT_KEY",
    "LAYOUT_VERSION",
    "LOGITS_NAME",
    "LOSS_NAME",
    "LR_ALPHA_LAMBDA_NAME",
    "LR_BATCH_NORM_NAME",
    "LR_NAME",
    "MANIFEST_NAME",
    "MANIFEST_REQUIRED",
    "MARGINAL_NAME",
    "MAX_DRIFT_NAME",
    "MAX_MANIFEST_BYTES",
    "MAX_SIGNATURE_BYTES",
    "MEMORY_KEY",
    "MOMENTUM_NAME",
    "NEW_PARAMS_NAME",
    "NEW_VELOCITY_NAME",
    "NEXT_SUFFIX",
    "ORT_FORMAT_KEY",
    "ORT_OPERATORS_CONFIG",
    "PARAMS_NAME",
    "PLPD_THRESHOLD_NAME",
    "PORTABLE_KEY",
    "REASON_DIVERSITY",
    "REASON_ENTROPY",
    "REASON_NONFINITE",
    "REASON_UPDATED",
    "RECOVERY_LOSS_NAME",
    "RELAX_NAME",
    "SAMPLE_INDEX_NAME",
    "SAMPLE_WEIGHT_NAME",
    "SAM_RHO_NAME",
    "SEEN_NAME",
    "SETTINGS_NAME",
    "SHARED_WEIGHTS",
    "SIGNATURE_ALGORITHM",
    "SIGNATURE_FORMAT",
    "SIGNATURE_NAME",
    "SIGNATURE_VERSION",
    "SIZE_KEY",
    "SOURCE_PARAMS",
    "SOURCE_PARAMS_KEY",
    "STATE_FORMAT",
    "STATE_HEADER_MEMBER",
    "STATE_INITIAL_KEY",
    "STATE_INPUT_KEY",
    "STATE_OUTPUT_KEY",
    "STATE_VERSION",
    "STEP_MODEL",
    "STEP_MODEL_KEY",
    "TRAINING_MODEL",
    "VELOCITY_NAME",
    "WATCH_BETA",
    "WATCH_NAME",
    "WATCH_WINDOW",
    "WEIGHTS_KEY",
    "AdaptationState",
    "InputSpec",
    "Manifest",
    "OnlineAdaptation",
    "StateArrays",
    "TensorSlot",
    "adapt_settings",
    "check_input_shape",
    "contract_json",
    "contract_module",
    "contract_values",
    "entropy",
    "fresh_watch_tensors",
    "input_dtype_error",
    "input_nonfinite_error",
    "input_type_error",
    "load_state",
    "method_input",
    "next_name",
    "parse_manifest",
    "read_state",
    "save_state",
    "seal",
    "sha256_of",
    "step_settings",
    "write_state",
]
