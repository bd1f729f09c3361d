"""The adapt graph's node builder and the small pieces every part of that graph writes with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import TensorProto, helper

from realm_runtime import RealmConfig
from realm_runtime.contract import (
    ADAPT_KNOWN,
    ADAPT_WATCH,
    KNOWN_NAME,
    WATCH_NAME,
)

from .._onnx_builder import GraphBuilder


class AdaptBuilder(GraphBuilder):
    """A builder whose constants and state reads are written once, however often asked for."""

    def __init__(self, const_prefix: str) -> None:
        super().__init__(const_prefix)
        self._written: dict[str, str] = {}
        self._count = 0  # names handed out by step()

    def const(self, name: str, value: object, dtype: DTypeLike = np.float32) -> str:
        """As :meth:`GraphBuilder.const`; the same name again returns the first constant."""
        if name not in self._written:
            self._written[name] = super().const(name, value, dtype)
        return self._written[name]

    def step(self, kind: str, inputs: Sequence[str], what: str, **attrs: object) -> str:
        """One node whose output gets a fresh name ``adapt.<what>.<k>``."""
        self._count += 1
        return self.op(kind, list(inputs), f"adapt.{what}.{self._count}", **attrs)

    def once(self, output: str, write: Callable[[], str]) -> str:
        """``write()``'s output, written the first time ``output`` is asked for."""
        if output not in self._written:
            self._written[output] = write()
        return self._written[output]

    def branch(self, write: Callable[[], dict[str, str]]) -> tuple[list[onnx.NodeProto], dict]:
        """The nodes ``write()`` adds, taken out for a subgraph, and what it returned.

        Constants stay in the outer graph (a subgraph reads them from the outer scope); a
        value first written inside is forgotten afterwards, so it is not read from outside.
        """
        mark, written = len(self.nodes), dict(self._written)
        out = write()
        nodes = self.nodes[mark:]
        del self.nodes[mark:]
        consts = {k: v for k, v in self._written.items() if v.startswith(self.const_prefix)}
        self._written = {**written, **consts}
        return nodes, out


class DriftNorm:
    """``‖θ − θ0‖ / ‖θ0‖`` over the norm tensors (α and λ are no part of the drift)."""

    def __init__(self, b: AdaptBuilder, config: RealmConfig, source: np.ndarray, src: str) -> None:
        mask = np.ones(source.shape[0], np.bool_)
        if config.rules.learns_alpha_lambda:
            mask[-2:] = False
        self.b, self.src = b, src
        self.mask = b.const("norm_mask", mask, np.bool_)
        self.maskf = b.const("norm_maskf", mask.astype(np.float32))
        self.norm0 = float(np.sqrt(np.square(source[mask].astype(np.float64)).sum()))

    def __call__(self, params: str) -> str:
        b, op = self.b, self.b.step
        moved = op("Mul", [op("Sub", [params, self.src], "moved"), self.maskf], "moved_norm")
        squares = op("Mul", [moved, moved], "sq")
        sq = op("ReduceSum", [squares, b.const("axis0", [0], np.int64)], "sumsq", keepdims=0)
        norm0 = b.const("norm0", max(self.norm0, 1e-30))
        return op("Div", [op("Sqrt", [sq], "norm"), norm0], "drift")


def renamed(info: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(info)
    out.name = name
    return out


def value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    kind = helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, kind, list(value.shape))


def ema_of(b: AdaptBuilder, old: str, new: str, known: str, beta: float) -> str:
    """``β·old + (1 − β)·new`` where ``known``, else ``new`` (a constant β, the watch's)."""
    op = b.step
    scaled_old = op("Mul", [old, b.const(f"beta_{beta}", beta)], "b_old")
    scaled_new = op("Mul", [new, b.const(f"one_minus_{beta}", 1 - beta)], "b_new")
    return op("Where", [known, op("Add", [scaled_old, scaled_new], "mix"), new], "ema")


def read_flag(b: AdaptBuilder, what: str) -> str:
    """The flag ``realm.known[what]`` as a bool scalar."""
    index = b.const(f"known_{what}", ADAPT_KNOWN.index(what), np.int64)
    out = f"adapt.known.{what}"
    return b.once(out, lambda: b.op("Gather", [KNOWN_NAME, index], out, axis=0))


def read_figure(b: AdaptBuilder, what: str) -> str:
    """The figure ``realm.watch[what]`` as a float scalar."""
    index = b.const(f"watch_{what}", ADAPT_WATCH.index(what), np.int64)
    out = f"adapt.watch.{what}"
    return b.once(out, lambda: b.op("Gather", [WATCH_NAME, index], out, axis=0))


def stack(b: AdaptBuilder, scalars: Sequence[str], output: str, to: int | None = None) -> str:
    """Scalars (of one type) as one 1-D tensor named ``output``, cast to ``to`` if given."""
    axis = b.const("axis0", [0], np.int64)
    parts = [b.step("Unsqueeze", [value, axis], "part") for value in scalars]
    if to is None:
        return b.op("Concat", parts, output, axis=0)
    return b.op("Cast", [b.step("Concat", parts, "stacked", axis=0)], output, to=to)


def bool_info(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.BOOL, [])
