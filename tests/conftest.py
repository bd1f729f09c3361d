"""Shared fixtures: small models and the digits task, built once per session; helpers that
test both twins (``RealmAdapter`` and ``RealmRuntime``) alike."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from realm_runtime import COUNTERS

# The runtime's executions of the step that the shared tests run on: the adapt graph and the
# legacy twin (the "onnx-steps" twin is the reference of the graph's tests, and runs the
# step-for-step agreement with the SDK in test_runtime.py).
BACKENDS = ("onnx", "ort-training")


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Bit-for-bit comparisons between two runs need the same reduction order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def needs_fashion_mnist(model: str = "fmnist_") -> None:
    """Skip, naming the fix, where a Fashion-MNIST model or stream is asked for and the data
    set is not installed (``make test`` installs Debian's package where it can)."""
    if not model.startswith("fmnist_"):
        return
    from realm_tools.data import find_fashion_mnist

    try:
        find_fashion_mnist()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def digits():
    from realm_tools.data import load_digits

    return load_digits()


def _run_folder(tmp_path_factory) -> Path:
    """This run's temporary folder, shared by pytest-xdist's workers (each has a child)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (one worker builds, the others wait and reuse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_EXPORTS: list[Path] = []  # the run's export cache folder, set once per session


@pytest.fixture(scope="session", autouse=True)
def _export_cache(tmp_path_factory):
    _EXPORTS[:] = [_run_folder(tmp_path_factory) / "digits-exports"]


@pytest.fixture(scope="session")
def digits_cache_dir(tmp_path_factory):
    """The cache folder of :func:`digits_model` (``realm bench quality --quick`` reuses it),
    shared by the run's workers."""
    folder = _run_folder(tmp_path_factory) / "weights"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def digits_model(digits, digits_cache_dir):
    """A briefly trained source model (6 epochs: good enough for behaviour, fast to make)."""
    from realm_tools.models import train_digits_model

    with _locked(digits_cache_dir.with_suffix(".lock")):  # trained once, by the first worker
        return train_digits_model(digits, epochs=6, cache_dir=digits_cache_dir)


@pytest.fixture(scope="session")
def digits_stream(digits):
    """A shifted stream (gaussian noise, severity 5) of the held-out digits."""
    return digits.stream("gaussian_noise", 5, seed=0)


def export_digits(
    model, directory, *, ort_format=False, signing_key=None, training=False, **config_overrides
):
    """Export the digits model with the CIFAR preset (and overrides) into ``directory``,
    through the demo's own export (``realm_tools.export_digits_artifacts``); ``training``
    asks for the legacy training artifacts too (the ``ort-training`` backend's).

    Unsigned exports are made once per run for each model state and configuration and
    copied from there (tests export the same few configurations many times); a test that
    tests exporting calls ``export_realm_artifacts`` itself.
    """
    from realm_sdk import RealmConfig
    from realm_tools.bench import weights_digest
    from realm_tools.demo import export_digits_artifacts

    preset = config_overrides.pop("preset", "cifar")
    config = RealmConfig.preset(preset, num_classes=10, **config_overrides)

    def export(target):
        export_digits_artifacts(
            model,
            None,
            target,
            config,
            ort_format=ort_format,
            signing_key=signing_key,
            training=training,
        )

    if signing_key is not None or not _EXPORTS:
        export(directory)
        return config
    made = f"{weights_digest(model)} {config!r} {ort_format} {training}"
    key = hashlib.sha256(made.encode()).hexdigest()
    cached = _EXPORTS[0] / key[:16]
    with _locked(cached.with_suffix(".lock")):
        if not cached.is_dir():
            building = cached.with_suffix(".part")
            shutil.rmtree(building, ignore_errors=True)
            export(building)
            building.rename(cached)
    shutil.copytree(cached, directory, dirs_exist_ok=True)
    return config


@pytest.fixture(scope="session")
def digits_artifacts(digits_model, tmp_path_factory):
    """The digits model exported with the CIFAR preset, the training artifacts too (the shared
    tests run on both :data:`BACKENDS`): (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits"
    return directory, export_digits(digits_model, directory, training=True)


@pytest.fixture(scope="session")
def digits_ort_artifacts(digits_model, tmp_path_factory):
    """The same, with the ORT-format graphs (``--ort-format``): (directory, config)."""
    directory = tmp_path_factory.mktemp("artifacts") / "digits-ort"
    return directory, export_digits(digits_model, directory, ort_format=True)


def assert_same_state(a, b, tol: Mapping[str, float]) -> None:
    """Two RealmRuntimes hold the same adaptation state, within ``tol`` (parity's keys).

    Parameters, α and EMA absolutely; λ relative to its scale (it grows under C = 1);
    momentum buffers relative to each buffer's largest entry (sums of raw gradients); the
    counters exactly.
    """
    for name, value in a.trainable_parameters().items():
        np.testing.assert_allclose(
            b.trainable_parameters()[name], value, rtol=0, atol=tol["params"], err_msg=name
        )
    for name, value in a.momentum_buffers().items():
        scale = max(float(np.abs(value).max()), 1e-12)
        got = np.abs(b.momentum_buffers()[name] - value).max() / scale
        assert got <= tol["momentum"], (name, got)
    sa, sb = a.state, b.state
    assert [getattr(sa, k) for k in COUNTERS] == [getattr(sb, k) for k in COUNTERS]
    if sa.alpha is None:  # Tent, EATA: no α, λ
        assert sb.alpha is None and sb.lam is None
    else:
        assert sa.alpha == pytest.approx(sb.alpha, abs=tol["alpha"])
        assert sa.lam == pytest.approx(sb.lam, abs=tol["lam"] * max(1.0, abs(sa.lam)))
    if sa.ema is None:  # no S_div EMA yet, or a reset just cleared it
        assert sb.ema is None
    else:
        np.testing.assert_allclose(sa.ema, sb.ema, rtol=0, atol=tol["ema"])


NODE_APP = Path(__file__).resolve().parents[1] / "examples" / "node"


def node_app_missing() -> str | None:
    """Why the Node app (examples/node) cannot run here, or None when it can."""
    if shutil.which("node") is None:
        return "Node.js not found: the Node app's tests need node"
    if not (NODE_APP / "node_modules" / "onnxruntime-node").is_dir():
        return "examples/node/node_modules lacks onnxruntime-node: run `make web-deps`"
    return None


def run_node_app(
    artifacts: Path, stream: Path, *extra: str, timeout: int = 300
) -> subprocess.CompletedProcess:
    """The Node app on ``artifacts`` and a stream folder, with more flags; skips without it."""
    missing = node_app_missing()
    if missing is not None:
        pytest.skip(missing)
    return subprocess.run(
        ["node", "edge-app.mjs", "--artifacts", str(artifacts), "--stream", str(stream), *extra],
        cwd=NODE_APP,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class NearTie(UserWarning):
    """A step whose outcome turned on a float32 rounding, told apart (SPEC §5).

    Either the sides' states differed by rounding and the side that parted lands within
    tolerance when it takes the step again from the other's state, or from the very same
    state their kernels put one activation input on either side of a kink, and the SDK's
    step with that gate flipped is the other side's (``realm_tools.parity.kink_split``).
    Tests warn with it (naming the step, and the gate or the distances) and go on.
    """


# Steps of a stream that may be ties before a comparison fails: a kink within rounding is rare.
def allowed_ties(steps: int) -> int:
    return max(1, steps // 50)


def kink_tie(where: str, source: nn.Module, config, before: Path, x: np.ndarray, *sides) -> str:
    """Sides that took one step from the same state and still part: the gate that explains it.

    Warns a :class:`NearTie` naming it; fails where no gate beside a kink explains the step.
    """
    from realm_tools.parity import kink_split

    named = kink_split(source, config, before, x, *sides)
    assert named is not None, (
        f"{where}: the sides part from the same state, and no gate beside a kink explains it"
    )
    warnings.warn(f"{where}: a tie on a kink, decided by the kernels: {named}", NearTie, 2)
    return named


def follow(other: Callable, twin, xs: np.ndarray, *, source: nn.Module, where: str) -> int:
    """Another implementation's run over ``xs`` against ``twin`` (a RealmRuntime) stepping here.

    ``other(first, last, state)`` runs the other side over ``xs[first:last]`` from a state
    file (None: the export's own state) and returns a row per step: ``(reason, updated,
    logits, arrays)``, ``arrays`` holding its state file's ``realm.params`` and
    ``realm.velocity`` after the step. Every step's decision and logits must agree. Where the
    parameters part beyond tolerance, the other side takes that step again from the twin's
    state before it: landing within tolerance there is a near-tie of the inputs' rounding,
    else a gate beside a kink must explain it (:func:`kink_tie`). Either way the other side
    goes on from the twin's state after the step.

    Returns:
        How many steps were ties (at most :func:`allowed_ties`).
    """
    from realm_tools.parity import TOLERANCES, state_arrays, within_tolerance

    rows, ties = dict(enumerate(other(0, len(xs), None))), []
    with tempfile.TemporaryDirectory() as scratch:
        before, after = Path(scratch) / "before.npz", Path(scratch) / "after.npz"
        for i, x in enumerate(xs):
            reason, updated, logits, arrays = rows[i]
            twin.save(before)
            ours = twin.adapt(np.ascontiguousarray(x[None]))
            assert (reason, updated) == (ours.reason, ours.updated), f"{where}: step {i}"
            if np.isfinite(ours.logits).all():
                np.testing.assert_allclose(
                    logits, ours.logits[0], rtol=0, atol=TOLERANCES["logits"], err_msg=f"step {i}"
                )
            mine = state_arrays(twin)  # once: a runtime copies its tensors
            _same_alpha_lambda(arrays, twin.state, mine, f"{where}: step {i}")
            if within_tolerance(arrays, mine):
                continue
            (again,) = other(i, i + 1, before)
            if within_tolerance(again[3], mine):
                message = f"{where}: step {i}: a near-tie, within tolerance from the twin's state"
                warnings.warn(message, NearTie, 2)
                ties.append(message)
            else:
                step = f"{where}: step {i}"
                ties.append(kink_tie(step, source, twin.config, before, x[None], again[3], twin))
            twin.save(after)  # both went on correctly: the other side goes on from here
            if i + 1 < len(xs):
                rows.update(enumerate(other(i + 1, len(xs), after), start=i + 1))
    assert len(ties) <= allowed_ties(len(xs)), ties
    return len(ties)


def edit_manifest(directory: Path, edit: Callable[[dict], None]) -> None:
    """Change realm.json's content and re-seal it, as someone who can write the directory could.

    An edit that is not re-sealed is refused by the seal alone; this gets past it, to test
    the checks behind it (and to show what only a signature stops).
    """
    from realm_runtime.contract import DIGEST_KEY, seal

    path = directory / "realm.json"
    data = json.loads(path.read_text())
    edit(data)
    data[DIGEST_KEY] = "0" * 64
    path.write_bytes(seal(json.dumps(data, indent=2).encode()))


def last_line_in_a_fresh_interpreter(script: str, *argv: str, timeout: int) -> str:
    """Run ``script`` in a new interpreter (``sys.argv[1:]`` = ``argv``); its last output line."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def signing_keys(tmp_path_factory):
    """Two Ed25519 key pairs, ``(vendor, stranger)``, each ``(private .key, public .pub)``."""
    from realm_runtime import generate_keypair

    folder = tmp_path_factory.mktemp("keys")
    return generate_keypair(folder / "vendor"), generate_keypair(folder / "stranger")


@pytest.fixture(scope="session")
def signed_artifacts(digits_model, signing_keys, tmp_path_factory):
    """The digits model exported and signed with the vendor's key (``realm.sig``)."""
    directory = tmp_path_factory.mktemp("signed") / "artifacts"
    export_digits(digits_model, directory, signing_key=signing_keys[0][0])
    return directory


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    """Flip bits of one byte of a file in place."""
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def manifest_offset(raw: bytes, kind: str) -> int:
    """One byte position of a class in realm.json's bytes."""
    from realm_runtime.contract import DIGEST_KEY

    text = raw.decode()
    return {
        "header": lambda: text.index('"format"') + 2,  # inside the first key
        "json value": lambda: text.index('"lr": ') + len('"lr": ') + 2,  # a learning-rate digit
        "file digest": lambda: text.index('"step_model.onnx": "') + len('"step_model.onnx": "') + 5,
        "own digest": lambda: text.index(f'"{DIGEST_KEY}": "') + len(f'"{DIGEST_KEY}": "') + 10,
        "white space": lambda: text.index("\n  "),
    }[kind]()


# ------------------------------------------------------------------ a tiny model for the SDK

D64 = torch.float64
DIM, CLASSES = 6, 4


class Tiny(nn.Module):
    """x (B, 6) → LayerNorm(6) with affine γ, β → fixed linear map W (4 × 6) → logits."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.norm = nn.LayerNorm(DIM, dtype=D64)
        self.fc = nn.Linear(DIM, CLASSES, bias=False, dtype=D64)
        with torch.no_grad():
            self.norm.weight.copy_(1 + 0.1 * torch.randn(DIM, generator=g, dtype=D64))
            self.norm.bias.copy_(0.1 * torch.randn(DIM, generator=g, dtype=D64))
            self.fc.weight.copy_(torch.randn(CLASSES, DIM, generator=g, dtype=D64))

    def forward(self, x):
        return self.fc(self.norm(x))


def tiny_config(**kw):
    """A REALM configuration for :class:`Tiny` (no momentum, C = 1, no guardrails), overridable."""
    from realm_sdk import Guardrails, RealmConfig

    base = dict(
        num_classes=CLASSES,
        method="realm",
        lr=0.05,
        lr_alpha_lambda=0.1,
        momentum=0.0,
        alpha0=0.15,
        lambda0=0.1,
        loss_scale="one",
        diversity_margin=0.4,
        guardrails=Guardrails.off(),
    )
    base.update(kw)
    return RealmConfig(**base)


def tiny_sample(seed: int) -> torch.Tensor:
    """One (1, 6) float64 input of :class:`Tiny`."""
    return torch.randn(1, DIM, generator=torch.Generator().manual_seed(seed), dtype=D64)


# ------------------------------------------------------------------ either twin


def snapshot(twin, *, counters: bool = True) -> tuple:
    """Everything adapt/restore may change in a RealmAdapter or a RealmRuntime, as bytes.

    Equal snapshots are bit-identical states: parameters, momentum buffers, α, λ and their
    momentum, the EMA, and (unless ``counters=False``) the counters.
    """

    def raw(arrays: dict) -> dict[str, bytes]:
        return {
            k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v).tobytes()
            for k, v in arrays.items()
        }

    s = twin.state
    return (
        raw(twin.trainable_parameters()),
        raw(twin.momentum_buffers()),
        (s.alpha, s.lam, s.alpha_momentum, s.lam_momentum),
        None if s.ema is None else s.ema.tobytes(),
        tuple(getattr(s, k) for k in COUNTERS) if counters else None,
    )


# Agreement bounds of the twins over a whole stream (float32, CPU): logits are O(10), so 1e-4
# absolute is ~1e-5 relative; parameters, α, λ and the EMA are O(1) and agree to a few float32
# ulps. Momentum buffers are accumulated gradients of any scale: as in the parity suite, their
# difference is taken relative to the run's largest buffer entry, within its tolerance.
LOGITS_ATOL = 1e-4
STATE_ATOL = 1e-5
MOMENTUM_RTOL = 1e-4


def _same_alpha_lambda(arrays: Mapping[str, np.ndarray], state, mine: Mapping, where: str) -> None:
    """REALM's α and λ, which close a state file's ``realm.params``, as the twin's ``state``
    (``mine``: the twin's trainable tensors, flat)."""
    from realm_runtime.contract import PARAMS_NAME
    from realm_tools.parity import TOLERANCES

    tail = np.asarray(arrays[PARAMS_NAME])[mine[PARAMS_NAME].size :]
    if state.alpha is None:
        assert tail.size == 0, where
        return
    alpha, lam = (float(v) for v in tail)
    assert alpha == pytest.approx(state.alpha, abs=TOLERANCES["alpha"]), where
    assert lam == pytest.approx(state.lam, abs=TOLERANCES["lam"] * max(1.0, abs(state.lam))), where


def compare_twins(rt, adapter, xs, *, source: nn.Module, batch: int = 1) -> dict[str, float]:
    """Feed the same stream to both, compare after every step; returns the max differences
    (momentum: relative to the largest buffer entry).

    A step that parts them is judged by the parity suite's rule (``step_tie``: a rounding of
    the inputs, or a gate beside a kink that the kernels set apart, named), warned as a
    :class:`NearTie`, and the runtime goes on from the SDK's state; at most
    :func:`allowed_ties` such steps. ``source`` is the model the adapter adapts, as exported.
    """
    from realm_tools.parity import step_tie

    worst = dict.fromkeys(("logits", "params", "momentum", "alpha", "lam", "ema"), 0.0)
    scale = 0.0  # the largest momentum buffer entry of the run (the SDK's)
    ties = []
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before.npz"
        for start in range(0, len(xs) - batch + 1, batch):
            x = np.ascontiguousarray(xs[start : start + batch])
            adapter.save(before)
            r = rt.adapt(x)
            s = adapter.adapt(torch.from_numpy(x))
            assert r.selected.tolist() == s.selected.tolist(), f"S_div differs at sample {start}"
            assert r.updated == s.updated and r.reason == s.reason
            kinks: list[str] = []
            if step_tie(rt, adapter, s, x, before, kinks, source):
                named = kinks[0] if kinks else "within tolerance from the SDK's state"
                message = f"sample {start}: a tie of the step: {named}"
                warnings.warn(message, NearTie, 2)
                ties.append(message)
            logits = float(np.abs(r.logits - s.logits.numpy()).max())
            worst["logits"] = max(worst["logits"], logits)
            pa, pb = rt.trainable_parameters(), adapter.trainable_parameters()
            assert list(pa) == list(pb)
            worst["params"] = max(
                worst["params"], max(float(np.abs(pa[n] - pb[n].numpy()).max()) for n in pa)
            )
            va, vb = rt.momentum_buffers(), adapter.momentum_buffers()
            worst["momentum"] = max(
                worst["momentum"], max(float(np.abs(va[n] - vb[n].numpy()).max()) for n in va)
            )
            scale = max(scale, max(float(np.abs(vb[n].numpy()).max()) for n in vb))
            sa, sb = rt.state, adapter.state
            if sa.alpha is not None:
                worst["alpha"] = max(worst["alpha"], abs(sa.alpha - sb.alpha))
                worst["lam"] = max(worst["lam"], abs(sa.lam - sb.lam))
            assert (sa.ema is None) == (sb.ema is None)
            if sa.ema is not None:
                worst["ema"] = max(worst["ema"], float(np.abs(sa.ema - sb.ema).max()))
            for counter in COUNTERS:
                assert getattr(sa, counter) == getattr(sb, counter), counter
    worst["momentum"] /= max(scale, 1e-12)
    assert len(ties) <= allowed_ties(len(xs) // batch), ties
    assert worst["logits"] <= LOGITS_ATOL, worst
    assert worst["momentum"] <= MOMENTUM_RTOL, worst
    assert max(v for k, v in worst.items() if k not in ("logits", "momentum")) <= STATE_ATOL, worst
    return worst


@pytest.fixture(params=BACKENDS)
def runtime(request, digits_artifacts, digits_stream):
    """A RealmRuntime on each backend, five samples into the digits stream."""
    from realm_runtime import RealmRuntime

    rt = RealmRuntime(digits_artifacts[0], threads=1, backend=request.param)
    for i in range(5):
        rt.adapt(digits_stream[0][i : i + 1])
    return rt


# ------------------------------------------------------------------ property-based fuzzing

FAST = 150  # examples per target in `make test`
FULL = 1000  # examples per target in the slow tier


def tiers(prop: Callable, **strategies: st.SearchStrategy) -> tuple[Callable, Callable]:
    """The same property as a fast test and a slow-tier one with more examples."""
    common = {
        "deadline": None,
        "derandomize": True,  # the same examples on every run: a failure reproduces
        "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        "database": None,
    }
    fast = settings(max_examples=FAST, **common)(given(**strategies)(prop))
    full = pytest.mark.slow(settings(max_examples=FULL, **common)(given(**strategies)(prop)))
    return fast, full


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def adapted(digits_artifacts, digits_stream, tmp_path_factory):
    """A runtime some samples into the stream, and the state file it saved."""
    from realm_runtime import RealmRuntime

    rt = RealmRuntime(digits_artifacts[0], backend="onnx-steps", threads=1)
    for x in digits_stream[0][:12]:
        rt.adapt(np.ascontiguousarray(x[None]))
    path = tmp_path_factory.mktemp("state") / "good.npz"
    rt.save(path)
    return rt, path


# ---- the torch-free runtime venv (newest onnxruntime), made once per checkout

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_VENV = ROOT / ".venv-runtime"


def _run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


def run_in_runtime_venv(python: Path, script: str, *args: object, cwd: Path) -> dict:
    """Run ``script`` under the runtime venv's Python; its last stdout line, as JSON."""
    out = _run(
        [str(python), "-c", script, *map(str, args)],
        cwd=cwd,
        # This checkout's realm_runtime ahead of the copy installed when the venv was made
        # (it is rebuilt only when pyproject.toml changes).
        env={**os.environ, "PYTHONPATH": str(ROOT / "runtime")},
    )
    return json.loads(out.strip().splitlines()[-1])


def _newest_python() -> str:
    """The newest CPython ≥ 3.12 that runs here (pyenv shims of absent versions do not)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (13, 12)]
    candidates += sorted(
        (str(p) for p in Path.home().glob(".pyenv/versions/3.1[23]*/bin/python3.1[23]")),
        reverse=True,
    )
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import venv"], capture_output=True)
        if probe.returncode == 0:
            return exe
    return sys.executable  # 3.11: still the newest onnxruntime, not the newest Python


@pytest.fixture(scope="session")
def runtime_python() -> Path:
    """``.venv-runtime/bin/python`` with ``.[runtime]`` installed (made when missing/stale)."""
    stamp = RUNTIME_VENV / ".realm-tta-runtime"
    # A plain (non-editable) install: rebuilt when pyproject.toml or the runtime's code
    # changes, or the venv would go on testing the runtime as it was when first installed.
    sources = [
        ROOT / "pyproject.toml",
        *sorted((ROOT / "runtime").rglob("*.py")),
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    py = RUNTIME_VENV / "bin" / "python"
    if not (py.exists() and stamp.exists() and stamp.read_text() == digest):
        shutil.rmtree(RUNTIME_VENV, ignore_errors=True)
        _run([_newest_python(), "-m", "venv", str(RUNTIME_VENV)])
        uv = Path(sys.executable).with_name("uv")  # the dev venv's (Makefile), far faster
        if uv.exists():
            pip = [str(uv), "pip", "install", "--quiet", "--python", str(py)]
            refresh = ["--reinstall-package", "realm-tta"]  # never uv's cached build
        else:
            pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            refresh = []
        _run([*pip, "--upgrade", "onnxruntime"])  # the newest, whatever the extra allows
        _run([*pip, *refresh, f"{ROOT}[runtime]"])
        stamp.write_text(digest)
    return py


def has_cuda() -> bool:
    """Whether this onnxruntime has the CUDA provider (onnxruntime-gpu): the CUDA tests' gate."""
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


# The files that take longest start first: under xdist's loadfile scheduling a long file
# dispatched last keeps one worker busy while the other idles.
_LONG_FILES = ("test_web.py", "test_node.py", "test_adapt_graph.py")


def pytest_collection_modifyitems(config, items):
    """Move the long files' tests to the front (a stable sort: the rest keep their order)."""
    rank = {name: i for i, name in enumerate(_LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(_LONG_FILES)))
