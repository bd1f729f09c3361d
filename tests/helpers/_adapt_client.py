"""The docs' manifest-only adapt client (docs/adapt.md, run as written) and what it is fed.

The client is the one python block under "A client in 25 lines"; the streams are the digits'
(shifted, or one clean class over and over for the collapse guard), and the cases the methods
and guardrails every client test runs on.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from realm_runtime import Guardrails
from realm_runtime.contract import PARAMS_NAME, VELOCITY_NAME

from ._processes import ROOT

ADAPT_DOC = ROOT / "docs" / "adapt.md"
ADAPT_STEPS = 130
OVERFLOW = 1e30  # an input this large overflows float32 in the first layers


def client_source() -> str:
    """The docs' client: the one python block under "A client in 25 lines"."""
    section = ADAPT_DOC.read_text().split("## A client in 25 lines", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def adapt_client(directory: Path):
    """The docs' ``AdaptClient`` on ``directory``, its code executed as written."""
    scope: dict = {}
    exec(compile(client_source(), str(ADAPT_DOC), "exec"), scope)  # the docs' code, as written
    return scope["AdaptClient"](directory)


def adapt_stream(digits, kind: str, *, overflow: bool = True) -> np.ndarray:
    """``ADAPT_STEPS`` digits of ``kind`` ("shifted" or "one-class"), the 12th overflowing."""
    if kind == "one-class":  # what the collapse guard is for: one clean class, over and over
        x, y = digits.stream("clean", 1, seed=0)
        x = np.concatenate([x[y == 3]] * 3)
    else:
        x = digits.stream("gaussian_noise", 5, seed=0)[0]
    x = np.ascontiguousarray(x[:ADAPT_STEPS], dtype=np.float32)
    if overflow:  # finite, but its logits overflow (in ONNX Runtime 1.19's kernels)
        x[11] = OVERFLOW
    return x


# case -> (export overrides, stream kind): every method and guardrail the client is run on.
ADAPT_CASES = {
    "realm": ({}, "shifted"),
    "realm-imagenet": ({"preset": "imagenet", "diversity_margin": 0.4, "lr": 2e-3}, "shifted"),
    "tent": ({"method": "tent"}, "shifted"),
    "eta": ({"method": "eta"}, "shifted"),
    "sar-recovering": ({"method": "sar", "recovery_loss": 0.8}, "shifted"),
    "deyo": ({"method": "deyo"}, "shifted"),
    "guardrails": (
        {
            "lr": 0.02,
            "guardrails": Guardrails(relax=0.05, anchor=0.01, max_drift=0.004, full_rate=0.9),
        },
        "shifted",
    ),
    "collapse": (
        {"guardrails": Guardrails(collapse=0.5)},
        "one-class",
    ),
    "episodic": ({"episodic": True}, "shifted"),
}


def adapt_arrays(params: list, velocity: list) -> dict[str, np.ndarray]:
    """A client's ``realm.params`` and ``realm.velocity``, as a state file holds them."""
    return {PARAMS_NAME: np.float32(params), VELOCITY_NAME: np.float32(velocity)}
