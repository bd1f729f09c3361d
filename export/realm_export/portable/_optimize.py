"""onnxscript's optimiser with the rewrite rules that match the portable graphs only."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _rules() -> Any:
    """The rewrite rules that match these graphs.

    The rest of onnxscript's default set never does, and trying each on every node is most
    of its optimiser's time.
    """
    from onnxscript.rewriter import RewriteRuleSet
    from onnxscript.rewriter.rules import common

    return RewriteRuleSet(
        [
            common.reshape_reshape_rule,
            common.max_min_rule,
            common.min_max_rule,
            common.max_max_rule,
            common.min_min_rule,
            common.fuse_pad_into_conv_rule,
            common.normalize_pad_format_conv_rule,
            common.remove_optional_bias_from_conv_rule,
            common.remove_optional_bias_from_conv_transpose_rule,
            common.remove_optional_bias_from_gemm_rule,
        ]
    )


def optimize(model: Any) -> None:
    """Fold constants, apply :func:`_rules`, remove dead code and common subexpressions.

    ``model`` is an ``onnx_ir.Model``, changed in place; the passes and their order are
    onnxscript's own optimiser's, with fewer rewrite rules.
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.optimizer import fold_constants
    from onnxscript.rewriter import RewritePass

    common.InlinePass()(model)
    for _ in range(2):  # onnxscript's optimiser's two rounds, stopping when nothing changes
        folded = fold_constants(model).modified
        rewritten = RewritePass(_rules())(model).modified
        common.RemoveUnusedNodesPass()(model)
        if not (folded or rewritten):
            break
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)
