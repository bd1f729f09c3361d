"""Adapt graphs built two ways, run side by side on the same samples from the same state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from realm_runtime.contract import KNOWN_EMA, KNOWN_NAME


def adapt_graphs_side_by_side(
    directory: Path, models: dict[str, onnx.ModelProto], xs: np.ndarray
) -> list[list[dict[str, np.ndarray]]]:
    """Each sample's outputs of each of ``models``, every sample selected.

    The models are saved beside ``directory``'s artifacts (their external data resolves
    there) and start from its initial state, each then on its own state. The EMA is marked
    unknown before every sample, so S_div selects it and every step can update.

    Returns:
        Per sample, per model (in ``models``' order), the output name → value.
    """
    manifest = json.loads((directory / "realm.json").read_text())
    spec = manifest["adapt"]
    sessions = []
    for name, model in models.items():
        path = directory / f"adapt_{name}.onnx"
        onnx.save_model(model, str(path))
        sessions.append(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    state = {s["input"]: np.load(directory / s["initial"]) for s in spec["state"]}
    states = [dict(state) for _ in sessions]
    ema = spec["known"].index(KNOWN_EMA)
    steps = []
    for x in xs:
        outs = []
        for session, st in zip(sessions, states, strict=True):
            st[KNOWN_NAME] = st[KNOWN_NAME].copy()
            st[KNOWN_NAME][ema] = False
            names = [o.name for o in session.get_outputs()]
            out = dict(zip(names, session.run(None, {spec["input"]: x, **st}), strict=True))
            st.update({s["input"]: out[s["output"]] for s in spec["state"]})
            outs.append(out)
        steps.append(outs)
    return steps
