"""Build (and optionally serve) the REALM web demo: a static folder any web server can host.

    python examples/web/build_site.py --out build/web --serve

Writes the page, the JavaScript client it imports (``clients/js``, as ``realm-tta-client/``,
where the page's import map looks), onnxruntime-web's WebGPU and plain WASM builds (from
``examples/web/node_modules``: run ``npm ci`` in examples/web first, or ``make web``), an
artifact directory (the built-in digits model exported with ``realm export`` unless
``--artifacts`` names one) and a shifted digits stream. Serve it over
http://127.0.0.1 or https (WebCrypto and WebGPU need a secure context) with the COOP/COEP
headers that ``--serve`` sends: without cross-origin isolation the WASM provider runs on one
thread.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from realm_runtime.contract import MANIFEST_NAME

HERE = Path(__file__).resolve().parent
PAGE_FILES = ("index.html", "style.css", "app.js", "preprocess.js")
CLIENT = HERE.parents[1] / "clients" / "js"  # the library's modules: every *.js there
CLIENT_DIR = "realm-tta-client"  # where the page's import map looks for it
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
    out: Path, *, corruption: str, severity: int, seed: int, limit: int | None
) -> dict[str, object]:
    """The shifted digits stream as float32 samples + JSON labels and preprocessing."""
    from realm_tools.data import IMAGE_SIZE, load_digits

    data = load_digits()
    x, y = data.stream(corruption, severity, seed=seed)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    out.mkdir(parents=True, exist_ok=True)
    np.ascontiguousarray(x, dtype="<f4").tofile(out / "stream.f32")
    meta = {
        "id": f"{corruption}-s{severity}-seed{seed}-n{len(y)}",
        "corruption": corruption,
        "severity": severity,
        "seed": seed,
        "shape": list(x.shape[1:]),
        "labels": [int(v) for v in y],
        "prep": {"mean": data.mean, "std": data.std, "native": 8, "size": IMAGE_SIZE},
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


def export_demo(out: Path, *, preset: str, method: str, cache_dir: str) -> None:
    """Export the built-in digits model (trained once, cached) as the demo's artifacts."""
    from realm_sdk import RealmConfig
    from realm_tools.data import NUM_CLASSES, load_digits
    from realm_tools.demo import export_digits_artifacts
    from realm_tools.models import train_digits_model

    data = load_digits()
    model = train_digits_model(data, cache_dir=cache_dir)
    config = RealmConfig.preset(preset, num_classes=NUM_CLASSES, method=method)  # type: ignore[arg-type]
    export_digits_artifacts(model, data, out, config)


def build(
    out: Path,
    *,
    artifacts: Path | None = None,
    stream: Path | None = None,
    corruption: str = "gaussian_noise",
    severity: int = 5,
    seed: int = 0,
    limit: int | None = None,
    preset: str = "cifar",
    method: str = "realm",
    cache_dir: str = ".cache",
    trusted_keys: list[Path] | None = None,
) -> Path:
    """Write the whole site into ``out`` (replacing what the build wrote there before).

    ``artifacts`` and ``stream`` (a folder in the Node app's format) replace the built-in
    digits model and its shifted stream. ``trusted_keys`` (``realm keygen``'s ``.pub`` files)
    go into ``trusted-keys.json``: the page then loads only artifacts one of them signed.
    """
    dist = ort_dist()
    out.mkdir(parents=True, exist_ok=True)
    for name in PAGE_FILES:
        shutil.copy2(HERE / name, out / name)
    shutil.rmtree(out / CLIENT_DIR, ignore_errors=True)  # no module of an older client left
    (out / CLIENT_DIR).mkdir()
    for module in CLIENT.glob("*.js"):
        shutil.copy2(module, out / CLIENT_DIR / module.name)
    keys_file = out / "trusted-keys.json"
    keys_file.unlink(missing_ok=True)
    if trusted_keys:
        keys_file.write_text(json.dumps([Path(k).read_text().strip() for k in trusted_keys]))
    shutil.rmtree(out / "ort", ignore_errors=True)  # no file of another onnxruntime-web left
    (out / "ort").mkdir()
    for name in ORT_FILES:
        shutil.copy2(dist / name, out / "ort" / name)
    target = out / "artifacts"
    if artifacts is not None:
        if not (artifacts / MANIFEST_NAME).is_file():
            raise FileNotFoundError(f"{artifacts}: no {MANIFEST_NAME} (not an artifact directory)")
        if artifacts.resolve() != target.resolve():  # the site's own artifacts: keep them
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(artifacts, target)
    else:
        export_demo(target, preset=preset, method=method, cache_dir=cache_dir)
    if stream is not None:
        manifest = json.loads((target / MANIFEST_NAME).read_text())
        write_stream_from_folder(out / "stream", stream, manifest, limit=limit)
    else:
        write_stream(
            out / "stream", corruption=corruption, severity=severity, seed=seed, limit=limit
        )
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
    parser.add_argument("--preset", choices=("cifar", "imagenet"), default="cifar")
    parser.add_argument("--method", choices=("realm", "tent", "eata", "sar"), default="realm")
    parser.add_argument("--cache-dir", default=".cache")
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
            preset=args.preset,
            method=args.method,
            cache_dir=args.cache_dir,
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
