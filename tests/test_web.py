"""The browser client (examples/web) against RealmRuntime, in headless Chromium.

Needs Node.js, the page's npm packages (``make web-deps``) and Debian's Chromium
(``make browser``); each test says which is missing when it skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from realm_runtime import RealmRuntime
from realm_runtime._manifest import ALPHA_NAME as ALPHA
from realm_runtime._manifest import LAMBDA_NAME as LAMBDA

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "examples" / "web"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
STREAM = 60  # samples per browser run

# WASM float32 kernels sum in another order than native MLAS: logits (magnitude ~10) differed
# by up to 1.6e-5 in measurement, so 1e-4. Parameters, α, λ and the EMA are the result of the
# same graph ops on nearly equal inputs: measured ≤ 4.3e-6 after 60 samples with momentum
# 0.9, so 1e-5. Momentum buffers are sums of raw gradients, and ∂ρ/∂α carries float32
# cancellation that amplifies the logits' differences: as in the parity suite, they are
# compared relative to the largest buffer entry, at 1e-4 (measured 5.9e-5, on α's buffer;
# 7.7e-7 absolute on the norm parameters' buffers). The decisions (prediction, S_div,
# update) must be identical on this stream.
LOGITS_ATOL = 1e-4
STATE_ATOL = 1e-5
MOMENTUM_RTOL = 1e-4

sys.path.insert(0, str(WEB))
import build_site  # noqa: E402  (the example's own module, not a package)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js not found: the browser client's tests need node and npm")
    return node


def _deps() -> None:
    missing = [
        p
        for p in ("onnxruntime-web/dist/ort.training.wasm.min.js", "playwright-core/package.json")
        if not (WEB / "node_modules" / p).is_file()
    ]
    if missing:
        pytest.skip(f"examples/web/node_modules lacks {missing}: run `make web-deps`")


def _browser() -> None:
    _node()
    _deps()
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no Chromium at {CHROMIUM}: `make browser` installs Debian's (needs root)")


def test_js_unit_tests():
    node = _node()
    done = subprocess.run(
        [node, "--test", "test/"], cwd=WEB, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# fail 0" in done.stdout


def test_js_typecheck():
    node = _node()
    tsc = WEB / "node_modules" / "typescript" / "bin" / "tsc"
    if not tsc.is_file():
        pytest.skip("typescript not installed in examples/web: run `make web-deps`")
    done = subprocess.run(
        [node, str(tsc), "-p", "jsconfig.json"], cwd=WEB, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_preprocessing_matches_python():
    """The page's bilinear upsampling is the Python task's, on a random image."""
    from realm_sdk._corruptions import resize_bilinear

    node = _node()
    img = np.random.default_rng(0).random((8, 8)).astype(np.float32)
    script = (
        "import { bilinear } from './preprocess.js';"
        f"const img = Float32Array.from({json.dumps(img.ravel().tolist())});"
        "console.log(JSON.stringify(Array.from(bilinear(img, 8, 8, 32, 32))));"
    )
    done = subprocess.run(
        [node, "--input-type=module", "-e", script], cwd=WEB, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    page = np.array(json.loads(done.stdout)).reshape(32, 32)
    np.testing.assert_allclose(page, resize_bilinear(img.astype(np.float64), (32, 32)), atol=1e-6)


def _runtime_flat(runtime: RealmRuntime, layout: dict) -> dict[str, tuple[np.ndarray, ...]]:
    """The runtime's (parameters, momentum) of each trainable tensor, flat, in layout order."""
    params, momentum, state = (
        runtime.trainable_parameters(),
        runtime.momentum_buffers(),
        runtime.state,
    )
    scalars = {
        ALPHA: (state.alpha, state.alpha_momentum),
        LAMBDA: (state.lam, state.lam_momentum),
    }
    return {
        name: (params[name].ravel(), momentum[name].ravel())
        if name in params
        else tuple(np.array([v]) for v in scalars[name])
        for name in layout["names"]
    }


def _drive(url: str, out: Path, *extra: str) -> dict:
    done = subprocess.run(
        [_node(), str(WEB / "drive.mjs"), "--url", url, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A static server over a folder the tests fill with sites: (base URL, root)."""
    root = tmp_path_factory.mktemp("web")
    httpd = build_site.server(root)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()


CASES = {
    "realm-cifar": {},
    "realm-momentum": {"momentum": 0.9},
    "eata": {"method": "eata"},
}


@pytest.fixture(scope="module")
def sites(digits_model, server) -> dict[str, Path]:
    from conftest import export_digits

    _browser()
    _, root = server
    built = {}
    for name, overrides in CASES.items():
        artifacts = root / f"{name}-artifacts"
        export_digits(digits_model, artifacts, **overrides)
        built[name] = build_site.build(root / name, artifacts=artifacts, limit=STREAM)
    return built


@pytest.mark.parametrize("case", list(CASES))
def test_browser_adapts_like_the_runtime(case, sites, server, tmp_path):
    """Step for step: predictions, S_div decisions, α, λ, EMA and final parameters."""
    base, _ = server
    site = sites[case]
    result = _drive(f"{base}/{case}/?auto=1&persist=0", tmp_path / "run.json")
    run = result["runs"][0]
    assert run["error"] is None, (run["error"], result["console"])
    log, summary = run["log"], run["summary"]
    assert len(log) == STREAM

    meta = json.loads((site / "stream" / "stream.json").read_text())
    x = np.fromfile(site / "stream" / "stream.f32", dtype="<f4").reshape(-1, *meta["shape"])
    runtime = RealmRuntime(site / "artifacts", schedule="infer-first", threads=1)
    for i, step in enumerate(log):
        result_i = runtime.adapt(np.ascontiguousarray(x[i : i + 1]))
        assert step["top1"] == int(result_i.top1[0]), f"sample {i}"
        assert step["selected"] == bool(result_i.selected[0]), f"sample {i}"
        assert step["updated"] == result_i.updated, f"sample {i}"
        assert step["reason"] == result_i.reason, f"sample {i}"
        np.testing.assert_allclose(step["logits"], result_i.logits[0], atol=LOGITS_ATOL)
        state = runtime.state
        if state.alpha is None:
            assert step["alpha"] is None and step["lambda"] is None
        else:
            assert abs(step["alpha"] - state.alpha) <= STATE_ATOL, f"α at sample {i}"
            assert abs(step["lambda"] - state.lam) <= STATE_ATOL, f"λ at sample {i}"
    state = runtime.state
    assert summary["counters"] == {k: getattr(state, k) for k in summary["counters"]}, (
        "counters differ"
    )
    assert state.updates > 0, "the stream must exercise updates"
    flat = np.array(summary["params"], dtype=np.float32)
    flat_m = np.array(summary["momentum"], dtype=np.float32)
    scale = max(float(np.abs(flat_m).max()), 1e-12)
    layout = json.loads((site / "artifacts" / "realm.json").read_text())["web"]["layout"]
    expected = _runtime_flat(runtime, layout)
    for name, start, size in zip(layout["names"], layout["offsets"], layout["sizes"], strict=True):
        want, want_m = expected[name]
        np.testing.assert_allclose(flat[start : start + size], want, atol=STATE_ATOL, err_msg=name)
        np.testing.assert_allclose(
            flat_m[start : start + size], want_m, atol=MOMENTUM_RTOL * scale, err_msg=name
        )
    np.testing.assert_allclose(summary["ema"], state.ema, atol=STATE_ATOL)


def test_browser_state_survives_a_reload(sites, server, tmp_path):
    base, _ = server
    result = _drive(f"{base}/realm-cifar/?auto=1&limit=25", tmp_path / "run.json", "--reload")
    first, second = result["runs"]
    assert first["error"] is None and second["error"] is None, result["console"]
    assert first["restored"] is None  # a fresh browser profile: nothing stored yet
    assert second["restored"] == {"pos": 25, "counters": first["summary"]["counters"]}
    assert first["summary"]["counters"]["updates"] > 0


def test_browser_reset_returns_to_the_exported_model(sites, server, tmp_path):
    base, _ = server
    result = _drive(
        f"{base}/realm-cifar/?auto=1&persist=0&limit=20", tmp_path / "r.json", "--reset"
    )
    assert result["runs"][0]["summary"]["counters"]["updates"] > 0  # something to undo
    after = result["afterReset"]
    assert after["counters"] == dict.fromkeys(after["counters"], 0)
    assert after["paramsAreSource"] and after["momentumIsZero"] and after["ema"] is None
    assert after["shown"] == "0"


def test_browser_refuses_tampered_artifacts(sites, server, tmp_path):
    base, root = server
    bad = root / "tampered-artifacts"
    shutil.copytree(sites["realm-cifar"] / "artifacts", bad)
    graph = bad / "web_decide.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    url = f"{base}/realm-cifar/?auto=1&persist=0&artifacts=../tampered-artifacts"
    run = _drive(url, tmp_path / "run.json")["runs"][0]
    assert run["error"] is not None
    assert "web_decide.onnx: SHA-256" in run["error"]
    assert "does not match the manifest's" in run["error"]
    assert run["log"] == []


def test_web_graphs_step_like_the_runtime_in_python(digits_model, tmp_path, digits_stream):
    """The two web graphs, run by the Python ORT binding, against RealmRuntime's numpy step.

    Browser-free: this checks the graphs themselves (S_div, EATA's weight, SGD with momentum,
    projection, EMA); the browser tests above check the JavaScript that drives them.
    """
    from conftest import export_digits

    from realm_runtime._ort import onnxruntime_module, training_api

    directory = tmp_path / "a"
    export_digits(digits_model, directory, momentum=0.9)
    web = json.loads((directory / "realm.json").read_text())["web"]
    api, ort = training_api(), onnxruntime_module()
    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = api.Module(
        str(directory / web["training_model"]), state, str(directory / "eval_model.onnx")
    )
    decide = ort.InferenceSession(str(directory / web["decide_model"]))
    runtime = RealmRuntime(directory, schedule="infer-first", threads=1)
    x = digits_stream[0][:40]
    momentum = np.zeros(web["layout"]["total"], np.float32)
    ema, has_ema = np.zeros(10, np.float32), False
    for i in range(len(x)):
        xi = np.ascontiguousarray(x[i : i + 1])
        expected = runtime.adapt(xi)
        module.eval()
        logits = module(xi, np.zeros(1, np.float32))[1]
        names = [o.name for o in decide.get_outputs()]
        feeds = {"logits": logits, "ema": ema, "has_ema": np.array(has_ema)}
        d = dict(zip(names, decide.run(None, feeds), strict=True))
        assert bool(d["keep"][0]) == bool(expected.selected[0]), f"sample {i}"
        if d["keep"][0]:
            module.train()
            module.lazy_reset_grad()
            _, _, params, momentum, ok = module(xi, d["weight"], momentum)
            assert ok
            buffer = ort.OrtValue.ortvalue_from_numpy(params)
            module._model.copy_buffer_to_parameters(buffer._ortvalue, True)
            ema, has_ema = d["next_ema"], True
    assert runtime.state.updates > 5
    got = module.get_contiguous_parameters(True).numpy()
    layout = web["layout"]
    expected = _runtime_flat(runtime, layout)
    for name, start, size in zip(layout["names"], layout["offsets"], layout["sizes"], strict=True):
        want, _ = expected[name]
        # Same binding, but the web graph is another graph for ORT's optimiser: α moved
        # 1.5e-6 apart in 40 samples with momentum 0.9 (∂ρ/∂α's float32 cancellation).
        np.testing.assert_allclose(got[start : start + size], want, atol=STATE_ATOL, err_msg=name)
    np.testing.assert_allclose(ema, runtime.state.ema, atol=STATE_ATOL)


def test_export_without_web_graphs(digits_model, tmp_path):
    from realm_export import export_realm_artifacts
    from realm_sdk import RealmConfig

    info = export_realm_artifacts(
        digits_model,
        tmp_path / "a",
        config=RealmConfig.preset("cifar", num_classes=10),
        input_shape=(1, 1, 32, 32),
        web=False,
        validate=False,
    )
    assert info.manifest.web == {}
    assert not (tmp_path / "a" / "web_training_model.onnx").exists()


def test_browser_adapts_on_a_users_picture(sites, server, tmp_path, digits):
    """A picture from the file picker: dark ink on white at 64 px, as a phone would give.

    The page reduces it to the digits' native 8×8 (area average), inverts it, upsamples and
    normalises like the Python task; its input and prediction must be what RealmRuntime
    gives for the same picture prepared in numpy.
    """
    from PIL import Image

    base, _ = server
    native = digits.test_x[0, 0]  # (8, 8) in [0, 1], bright ink
    paper = np.round((1.0 - native) * 255).astype(np.uint8)  # dark ink on white paper
    picture = tmp_path / "my_digit.png"
    Image.fromarray(np.kron(paper, np.ones((8, 8), np.uint8))).convert("RGB").save(picture)
    url = f"{base}/realm-cifar/?auto=1&persist=0&limit=0"
    run = _drive(url, tmp_path / "run.json", "--image", str(picture))["runs"][0]
    assert run["error"] is None, run["error"]
    (shown,) = run["images"]
    assert shown["name"] == "my_digit.png"

    seen = 1.0 - paper.astype(np.float64) / 255  # what the page sees, back to bright ink
    x = digits.prepare(seen[None, None])
    np.testing.assert_allclose(np.array(shown["input"]), x.ravel(), atol=1e-5)
    runtime = RealmRuntime(sites["realm-cifar"] / "artifacts", schedule="infer-first", threads=1)
    expected = runtime.adapt(x)
    assert shown["top1"] == int(expected.top1[0])
    assert shown["reason"] == expected.reason
    np.testing.assert_allclose(shown["logits"], expected.logits[0], atol=LOGITS_ATOL)
