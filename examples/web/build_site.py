"""Build (and optionally serve) the REALM web demo: a static folder any web server can host.

    python examples/web/build_site.py --out build/web --serve

Writes the page, the JavaScript client it imports (``clients/js``, as ``realm-tta-client/``,
where the page's import map looks), onnxruntime-web's WebGPU and plain WASM builds (from
``examples/web/node_modules``: run ``npm ci`` in examples/web first, or ``make web``), the
artifacts and a shifted stream. By default the model is ``realm demo``'s: the ResNet-26-GN the
package ships, on a Fashion-MNIST-C stream, or the digits model on shifted digits where
Fashion-MNIST is not installed (the page says so); it is exported once for every method of
the registry that exports (``realm_runtime.methods.EXPORTED``), which the page offers to
switch between, and the stream carries the exported model's own predictions without adapting
(no-adapt's line).
``--artifacts`` names artifacts of your own instead. Serve it over http://127.0.0.1 or https
(WebCrypto and WebGPU need a secure context) with the COOP/COEP headers that ``--serve``
sends: without cross-origin isolation the WASM provider runs on one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from realm_runtime import RealmRuntime
from realm_runtime.contract import MANIFEST_NAME, SIGNATURE_NAME
from realm_runtime.methods import BY_NAME, EXPORTED

if TYPE_CHECKING:
    from realm_tools.demo import DemoTask

HERE = Path(__file__).resolve().parent
PAGE_FILES = ("index.html", "style.css", "app.js", "axes.js", "draw.js", "preprocess.js")
CLIENT = HERE.parents[1] / "clients" / "js"  # the library's modules: every *.js there
CLIENT_DIR = "realm-tta-client"  # where the page's import map looks for it
METHODS = EXPORTED  # the page's method choices: the registry's that export, in its order
TASKS = ("auto", "fmnist", "digits")  # realm demo's: auto is Fashion-MNIST where installed
# onnxruntime-web's WebGPU build (WebGPU and WASM) and its plain WASM build (the page loads it
# where WebGPU does not run: its WebAssembly module is half the size).
ORT_FILES = (
    "ort.webgpu.min.mjs",
    "ort-wasm-simd-threaded.asyncify.mjs",
    "ort-wasm-simd-threaded.asyncify.wasm",
    "ort.wasm.min.mjs",
    "ort-wasm-simd-threaded.mjs",
    "ort-wasm-simd-threaded.wasm",
)


def ort_dist() -> Path:
    """onnxruntime-web's dist folder, or a clear error saying how to get it."""
    dist = HERE / "node_modules" / "onnxruntime-web" / "dist"
    missing = [f for f in ORT_FILES if not (dist / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{dist}: {missing} missing; install the page's packages with "
            "`npm ci --prefix examples/web` (or `make web`)"
        )
    return dist


def write_stream(
    out: Path,
    task: DemoTask,
    *,
    corruption: str,
    severity: int,
    seed: int,
    limit: int | None,
    note: str = "",
    title: str | None = None,
) -> dict[str, object]:
    """The task's shifted stream as float32 samples + JSON labels and preprocessing.

    ``note`` (why the digits run where Fashion-MNIST was wanted) and ``title`` (what model
    adapts; default the task's) are shown on the page.
    """
    from realm_tools.data import IMAGE_SIZE

    x, y = task.stream(corruption, severity, seed)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    out.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(x, dtype="<f4").tofile(out / "stream.f32")
    prep: dict[str, Any] = {
        "mean": task.preprocessing["mean"][0],
        "std": task.preprocessing["std"][0],
        "size": x.shape[-1],
    }
    if task.name == "digits":  # the page prepares a user's picture for the digits only
        prep.update(native=8, size=IMAGE_SIZE)
    meta = {
        "id": f"{task.name}-{corruption}-s{severity}-seed{seed}-n{len(y)}",
        "task": task.title if title is None else title,
        "note": note,
        "corruption": corruption,
        "severity": severity,
        "seed": seed,
        "shape": list(x.shape[1:]),
        "labels": [int(v) for v in y],
        "prep": prep,
    }
    (out / "stream.json").write_text(json.dumps(meta))
    return meta


def write_stream_from_folder(
    out: Path, folder: Path, manifest: dict[str, Any], *, limit: int | None
) -> dict[str, object]:
    """A stream folder in the Node app's format, written as the page reads it.

    The folder holds one float32 ``.npy`` a sample (read in name order) and, optionally,
    ``labels.json``; the preprocessing shown comes from the artifacts' manifest.
    """
    files = sorted(folder.glob("*.npy"))[:limit]
    if not files:
        raise FileNotFoundError(f"{folder}: no .npy samples")
    samples = [np.load(f, allow_pickle=False) for f in files]
    shapes = {s.shape for s in samples}
    if len(shapes) != 1 or any(s.dtype != np.float32 for s in samples):
        raise ValueError(f"{folder}: samples must be float32 of one shape, got {shapes}")
    labels_file = folder / "labels.json"
    labels = json.loads(labels_file.read_text()) if labels_file.is_file() else {}
    out.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(np.stack(samples), dtype="<f4").tofile(out / "stream.f32")
    prep = manifest.get("preprocessing", {})
    shape = samples[0].shape
    meta = {
        "id": f"{folder.name}-n{len(files)}",
        "corruption": folder.name,
        "severity": None,
        "shape": list(shape),
        "labels": [int(labels.get(f.name, -1)) for f in files],  # -1: unknown
        "prep": {"mean": prep.get("mean", [0.0]), "std": prep.get("std", [1.0]), "size": shape[-1]},
    }
    (out / "stream.json").write_text(json.dumps(meta))
    return meta


def load_task(kind: str, *, cache_dir: str, data_dir: str | None) -> tuple[DemoTask, str]:
    """``realm demo``'s task (``kind``: auto, fmnist, digits) and its fallback note."""
    from realm_tools.demo import demo_task

    return demo_task(kind, cache_dir, data_dir)


def export_task(task: DemoTask, out: Path, *, preset: str, method: str) -> None:
    """Export the task's source model for ``method``: the adapt graph the page runs."""
    from realm_export import ExportOptions, export_realm_artifacts
    from realm_runtime import RealmConfig
    from realm_tools.data import NUM_CLASSES

    config = RealmConfig.preset(preset, num_classes=NUM_CLASSES, method=method)  # type: ignore[arg-type]
    export_realm_artifacts(
        task.source,
        out,
        ExportOptions(
            config=config,
            input_shape=task.input_shape,
            training=False,  # the page runs the portable adapt graph only
            clean_images=task.clean_state() if config.rules.clean_state else None,
            overwrite=True,
            model_info=task.model_info,
            preprocessing=task.preprocessing,
        ),
    )


def source_predictions(artifacts: Path, stream: Path) -> list[int]:
    """The exported model's top-1 on every sample of the stream, without adapting."""
    meta = json.loads((stream / "stream.json").read_text())
    x = np.fromfile(stream / "stream.f32", dtype="<f4").reshape(-1, *meta["shape"])
    runtime = RealmRuntime(artifacts)
    return [
        int(np.argmax(runtime.predict(np.ascontiguousarray(x[i : i + 1])))) for i in range(len(x))
    ]


def artifacts_folder(method: str, first: bool) -> str:
    """Where a method's artifacts go in the site: the first in ``artifacts``, the page's default."""
    return "artifacts" if first else f"artifacts-{method}"


def build(
    out: Path,
    *,
    artifacts: Path | None = None,
    stream: Path | None = None,
    task: str = "auto",
    corruption: str = "gaussian_noise",
    severity: int = 5,
    seed: int = 0,
    limit: int | None = None,
    preset: str = "cifar",
    methods: Sequence[str] = METHODS,
    cache_dir: str = ".cache",
    data_dir: str | None = None,
    trusted_keys: list[Path] | None = None,
) -> Path:
    """Write the whole site into ``out`` (replacing what the build wrote there before).

    Without ``artifacts``, ``realm demo``'s ``task`` (Fashion-MNIST where installed, else the
    digits) is exported for each of ``methods``; ``artifacts`` (one method's) and ``stream``
    (a folder in the Node app's format) replace the model and its shifted stream. The stream
    holds the exported model's predictions without adapting. ``trusted_keys`` (``realm
    keygen``'s ``.pub`` files) go into ``site.json``: the page then loads only artifacts one
    of them signed.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be some of {METHODS}, got {list(methods)}")
    dist = ort_dist()
    out.mkdir(parents=True, exist_ok=True)
    for name in PAGE_FILES:
        shutil.copy2(HERE / name, out / name)
    shutil.rmtree(out / CLIENT_DIR, ignore_errors=True)  # no module of an older client left
    (out / CLIENT_DIR).mkdir()
    for module in CLIENT.glob("*.js"):
        shutil.copy2(module, out / CLIENT_DIR / module.name)
    shutil.rmtree(out / "ort", ignore_errors=True)  # no file of another onnxruntime-web left
    (out / "ort").mkdir()
    for name in ORT_FILES:
        shutil.copy2(dist / name, out / "ort" / name)
    for old in out.glob("artifacts-*"):  # no method of an older build offered
        shutil.rmtree(old)
    target = out / "artifacts"
    built: dict[str, str] = {}  # method -> its folder in the site
    demo: DemoTask | None = None
    note = ""
    if artifacts is not None:
        if not (artifacts / MANIFEST_NAME).is_file():
            raise FileNotFoundError(f"{artifacts}: no {MANIFEST_NAME} (not an artifact directory)")
        if artifacts.resolve() != target.resolve():  # the site's own artifacts: keep them
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(artifacts, target)
        manifest = json.loads((target / MANIFEST_NAME).read_text())
        built[manifest["config"]["method"]] = target.name
        if stream is None:  # the stream of the task the artifacts' model belongs to
            digits = (manifest.get("model") or {}).get("name") == "digits"
            demo, note = load_task(
                "digits" if digits else task, cache_dir=cache_dir, data_dir=data_dir
            )
    else:
        demo, note = load_task(task, cache_dir=cache_dir, data_dir=data_dir)
        for i, method in enumerate(methods):
            folder = artifacts_folder(method, first=i == 0)
            export_task(demo, out / folder, preset=preset, method=method)
            built[method] = folder
    if stream is not None:
        manifest = json.loads((target / MANIFEST_NAME).read_text())
        write_stream_from_folder(out / "stream", stream, manifest, limit=limit)
    else:
        assert demo is not None
        write_stream(
            out / "stream",
            demo,
            corruption=corruption,
            severity=severity,
            seed=seed,
            limit=limit,
            note=note,
            title=None if artifacts is None else "",  # the task's model only where it was exported
        )
    meta = json.loads((out / "stream" / "stream.json").read_text())
    meta["source_top1"] = source_predictions(target, out / "stream")
    (out / "stream" / "stream.json").write_text(json.dumps(meta))
    # None: unsigned artifacts load (a signature that is present must still verify)
    keys = [Path(k).read_text().strip() for k in trusted_keys] if trusted_keys else None
    site = {
        "trustedKeys": keys,
        "methods": [
            {
                "name": m.name,
                "paper": m.paper,
                "artifacts": built.get(m.name),
                # the page asks for realm.sig only where there is one: no 404 in its console
                "signed": m.name in built and (out / built[m.name] / SIGNATURE_NAME).is_file(),
            }
            for m in BY_NAME.values()
            if m.exports
        ],
    }
    (out / "site.json").write_text(json.dumps(site, indent=1))
    (out / "trusted-keys.json").unlink(missing_ok=True)  # an older build's: site.json has them
    return out


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
    }

    def end_headers(self) -> None:
        # Cross-origin isolation: SharedArrayBuffer, hence onnxruntime-web's WASM threads.
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def server(root: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A static file server for ``root`` on 127.0.0.1 (port 0: any free port)."""
    handler = functools.partial(_Handler, directory=str(root))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/web"))
    parser.add_argument("--artifacts", type=Path, default=None, help="use these artifacts")
    parser.add_argument(
        "--stream", type=Path, default=None, help="a folder of .npy samples (the Node app's)"
    )
    parser.add_argument("--corruption", default="gaussian_noise")
    parser.add_argument("--severity", type=int, default=5, choices=range(1, 6))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="samples in the stream")
    parser.add_argument(
        "--task", choices=TASKS, default="auto", help="realm demo's: Fashion-MNIST where installed"
    )
    parser.add_argument("--preset", choices=("cifar", "imagenet"), default="cifar")
    parser.add_argument(
        "--method",
        choices=METHODS,
        action="append",
        default=None,
        help="export for this method (repeatable; default: every method, the first REALM)",
    )
    parser.add_argument("--cache-dir", default=".cache")
    parser.add_argument("--data-dir", default=None, help="the Fashion-MNIST files' folder")
    parser.add_argument(
        "--trusted-key",
        type=Path,
        action="append",
        default=None,
        help="a .pub key (realm keygen): the page loads only artifacts it signed; repeatable",
    )
    parser.add_argument("--serve", action="store_true", help="serve on 127.0.0.1 afterwards")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    try:
        out = build(
            args.out,
            artifacts=args.artifacts,
            stream=args.stream,
            corruption=args.corruption,
            severity=args.severity,
            seed=args.seed,
            limit=args.limit,
            task=args.task,
            preset=args.preset,
            methods=args.method or METHODS,
            cache_dir=args.cache_dir,
            data_dir=args.data_dir,
            trusted_keys=args.trusted_key,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"site written to {out}")
    if args.serve:
        httpd = server(out, args.port)
        print(f"serving on http://127.0.0.1:{httpd.server_address[1]}/ (Ctrl-C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
