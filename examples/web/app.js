// @ts-check
/**
 * The demo page: streams shifted digits through the one adapt graph on onnxruntime-web
 * (AdaptClient: the graph decides, steps and guards; the page only feeds it), shows what
 * adaptation does, keeps the state in IndexedDB. URL parameters:
 * artifacts=<dir> (default "artifacts"), stream=<dir> (default "stream"), auto=1 (run the
 * whole stream at once), limit=<n>, persist=0 (neither read nor write IndexedDB), fresh=1
 * (ignore a stored state once), ep=auto|wasm|webgpu (default auto: WebGPU where the browser
 * offers an adapter), threads=<n> (WASM threads; default: up to 4 where the page is
 * cross-origin isolated, else 1). On WebGPU the parameter vectors stay in GPU buffers
 * between samples; α, λ and the drift are read back every tenth sample.
 * `window.realmRun` exposes the per-step log for the test driver.
 */

import { ALPHA_NAME, AdaptClient, LAMBDA_NAME, LR_NAME, MANIFEST_NAME, PARAMS_NAME } from "realm-tta-client";
import { digitsInput } from "./preprocess.js";

// onnxruntime-web's builds, copied into ort/ by build_site.py and imported by URL so that the
// page needs no bundler: the WebGPU build where WebGPU runs, else the plain WASM build, whose
// smaller WebAssembly module the browser compiles in less memory (docs/BENCHMARKS.md).
const ORT_MODULES = { webgpu: "ort/ort.webgpu.min.mjs", wasm: "ort/ort.wasm.min.mjs" };
const params = new URLSearchParams(location.search);
const ARTIFACTS = params.get("artifacts") ?? "artifacts";
const STREAM = params.get("stream") ?? "stream";
const AUTO = params.get("auto") === "1";
const PERSIST = params.get("persist") !== "0";
const FRESH = params.get("fresh") === "1";

const EP = params.get("ep") ?? "auto";
const EVERY = 10; // samples between redraws, saves and (state on the GPU) read-backs

/** @type {{ready: boolean, done: boolean, error: string | null, backend: any, signature: any, restored: any, log: any[], images: any[], summary: any}} */
const run = { ready: false, done: false, error: null, backend: null, signature: null, restored: null, log: [], images: [], summary: null };
/** @type {any} */ (globalThis).realmRun = run;

/**
 * @param {string[]} items NAME=VALUE strings
 * @returns {Record<string, number|boolean>}
 */
function readSettings(items) {
  /** @type {Record<string, number|boolean>} */
  const settings = {};
  for (const item of items) {
    const at = item.indexOf("=");
    const value = item.slice(at + 1);
    if (at < 1 || value === "") throw new Error(`set= takes NAME=VALUE (e.g. ${LR_NAME}=0.01), got ${JSON.stringify(item)}`);
    settings[item.slice(0, at)] = value === "true" ? true : value === "false" ? false : Number(value);
  }
  return settings;
}

/** @param {string} id */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @param {string} text @param {boolean} [error] */
function status(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("failed", error);
}

// ------------------------------------------------------------------ persistence (IndexedDB)

/** @returns {Promise<IDBDatabase>} */
function openDb() {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open("realm-tta", 1);
    req.onupgradeneeded = () => req.result.createObjectStore("states");
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** @param {string} key @param {any} [value] @returns {Promise<any>} */
async function store(key, value) {
  const db = await openDb();
  return new Promise((resolve, reject) => {
    const tx = db.transaction("states", value === undefined ? "readonly" : "readwrite");
    const req = value === undefined ? tx.objectStore("states").get(key) : tx.objectStore("states").put(value, key);
    // A put counts only once the transaction commits: a reload never sees half a state.
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
  });
}

// ------------------------------------------------------------------ plots

/**
 * @param {HTMLCanvasElement} canvas
 * @param {{values: number[], color: string}[]} series
 * @param {[number, number] | null} range fixed y range, or null to fit
 * @param {number[]} [marks] sample indices to mark with a vertical line (the resets)
 */
function plot(canvas, series, range, marks = []) {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const { width: W, height: H } = canvas;
  const pad = 34;
  ctx.clearRect(0, 0, W, H);
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  if (!all.length) return;
  let [lo, hi] = range ?? [Math.min(...all), Math.max(...all)];
  if (hi - lo < 1e-6) { lo -= 0.01; hi += 0.01; }
  const n = Math.max(...series.map((s) => s.values.length), 2);
  ctx.strokeStyle = "#ccd3df"; ctx.fillStyle = "#5a6578"; ctx.font = "11px system-ui";
  ctx.strokeRect(pad, 6, W - pad - 6, H - pad);
  const label = (/** @type {number} */ v) => String(Number(v.toPrecision(3)));
  ctx.fillText(label(hi), 2, 14); ctx.fillText(label(lo), 2, H - pad + 4);
  ctx.fillText("sample", W - 50, H - 8); ctx.fillText(String(n), W - 80, H - 20);
  ctx.strokeStyle = "#d33c3c"; ctx.lineWidth = 1;
  for (const i of marks) {
    const x = pad + ((W - pad - 6) * i) / (n - 1);
    ctx.beginPath(); ctx.moveTo(x, 6); ctx.lineTo(x, H - pad + 6); ctx.stroke();
  }
  for (const s of series) {
    ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
    s.values.forEach((v, i) => {
      const x = pad + ((W - pad - 6) * i) / (n - 1);
      const y = 6 + (H - pad) * (1 - (v - lo) / (hi - lo));
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

/**
 * Draw a normalised sample: grey for one channel, RGB for three.
 * @param {Float32Array} x (C, S, S) normalised input
 * @param {{mean: number | number[], std: number | number[], size: number}} prep
 */
function drawSample(x, prep) {
  const canvas = /** @type {HTMLCanvasElement} */ ($("sample"));
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const S = prep.size;
  const plane = S * S;
  const channels = x.length / plane;
  const mean = [prep.mean].flat();
  const std = [prep.std].flat();
  const img = ctx.createImageData(S, S);
  for (let k = 0; k < plane; k++) {
    for (let c = 0; c < 3; c++) {
      const ch = channels === 3 ? c : 0;
      const v = x[ch * plane + k] * std[ch % std.length] + mean[ch % mean.length];
      img.data[4 * k + c] = Math.max(0, Math.min(255, Math.round(v * 255)));
    }
    img.data[4 * k + 3] = 255;
  }
  const tmp = document.createElement("canvas");
  tmp.width = tmp.height = S;
  /** @type {CanvasRenderingContext2D} */ (tmp.getContext("2d")).putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, canvas.width, canvas.height);
}

// ------------------------------------------------------------------ main

/**
 * @typedef {object} Backend what this page runs on, chosen at start
 * @property {"webgpu" | "wasm"} ep the execution provider of the graphs
 * @property {number} threads WASM threads (ONNX Runtime's own CPU kernels; WebGPU's fallback)
 * @property {boolean} isolated the page is cross-origin isolated (WASM threads need it)
 * @property {string | null} adapter the WebGPU adapter, as the browser describes it
 * @property {string} why why this provider (for the page)
 * @property {string} ort onnxruntime-web's version
 */

/**
 * WebGPU where the browser offers an adapter (unless ep=wasm), WASM otherwise; WASM threads
 * where the page is cross-origin isolated (SharedArrayBuffer needs COOP/COEP).
 * @returns {Promise<Omit<Backend, "ort">>}
 */
async function chooseBackend() {
  if (!["auto", "wasm", "webgpu"].includes(EP)) throw new Error(`ep must be auto, wasm or webgpu, got ${JSON.stringify(EP)}`);
  const isolated = globalThis.crossOriginIsolated === true;
  const asked = params.get("threads");
  const threads = asked !== null ? Number(asked) : isolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  if (!Number.isInteger(threads) || threads < 1) throw new Error(`threads must be a positive integer, got ${JSON.stringify(asked)}`);
  if (threads > 1 && !isolated) {
    throw new Error(`threads=${threads} needs a cross-origin isolated page (COOP/COEP headers); this one is not`);
  }
  /** @type {any} */
  const gpu = /** @type {any} */ (navigator).gpu;
  let adapter = null;
  let why = "ep=wasm asked for";
  if (EP !== "wasm") {
    if (!gpu) why = "no WebGPU in this browser (navigator.gpu missing)";
    else {
      adapter = await gpu.requestAdapter().catch(() => null);
      why = adapter ? "the browser offers a WebGPU adapter" : "the browser offers no WebGPU adapter";
    }
    if (EP === "webgpu" && !adapter) throw new Error(`ep=webgpu asked for, but ${why}`);
  }
  const info = adapter?.info;
  const described = info ? [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "unnamed" : null;
  return { ep: adapter ? "webgpu" : "wasm", threads, isolated, adapter: described, why };
}

/** @param {Backend} b @returns {string} the execution provider line on the page */
function describeBackend(b) {
  const wasm = `WASM ×${b.threads}${b.isolated ? "" : " (page not cross-origin isolated)"}`;
  const ep = b.ep === "webgpu" ? `WebGPU: ${b.adapter} (${wasm} for the ops WebGPU lacks)` : `${wasm} (${b.why})`;
  return `${ep} · onnxruntime-web ${b.ort}`;
}

async function main() {
  status("loading onnxruntime-web…");
  const chosen = await chooseBackend();
  const module = ORT_MODULES[chosen.ep];
  /** @type {any} */
  const ort = await import(new URL(module, location.href).href).catch((err) => {
    throw new Error(`onnxruntime-web did not load from ${module} (build the site with build_site.py): ${err}`);
  });
  ort.env.wasm.numThreads = chosen.threads;
  ort.env.wasm.wasmPaths = new URL("ort/", location.href).href;
  /** @type {Backend} */
  const backend = { ...chosen, ort: ort.env.versions?.web ?? "?" };
  run.backend = backend;
  $("backend").textContent = describeBackend(backend);
  status(`checking ${ARTIFACTS}/${MANIFEST_NAME} and every file's checksum…`);
  /** @param {string} name */
  const read = async (name) => {
    const response = await fetch(`${ARTIFACTS}/${name}`);
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`${ARTIFACTS}/${name}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  };
  // The app's trusted signing keys (build_site.py --trusted-key): none, no signature required.
  const keysResponse = await fetch("trusted-keys.json");
  const trustedKeys = keysResponse.ok ? /** @type {string[]} */ (await keysResponse.json()) : null;
  const onGpu = backend.ep === "webgpu";
  const client = await AdaptClient.load(ort, read, ARTIFACTS, {
    trustedKeys,
    executionProviders: onGpu ? ["webgpu", "wasm"] : ["wasm"],
    stateOnGpu: onGpu,
    // set=NAME=VALUE (repeatable): a setting changed without re-exporting, as the Node app's --set
    settings: readSettings(params.getAll("set")),
  });
  run.signature = client.signature;
  $("signature").textContent = client.signature.note;
  const meta = await (await fetch(`${STREAM}/stream.json`)).json();
  const data = new Float32Array(await (await fetch(`${STREAM}/stream.f32`)).arrayBuffer());
  const size = meta.shape.reduce((/** @type {number} */ a, /** @type {number} */ b) => a * b, 1);
  const total = Math.min(meta.labels.length, Number(params.get("limit") ?? meta.labels.length));
  const key = `${client.artifactsId}:${meta.id}`;
  const severity = meta.severity === null ? "" : ` (severity ${meta.severity})`;
  $("stream-name").textContent = `${meta.corruption}${severity}, ${total} samples`;

  /**
   * What the page plots, kept with the state so that a reload draws the same.
   * @typedef {{pos: number, correct: number, acc: number[], alpha: number[], lambda: number[], ms: number[],
   *   rate: number[], entropy: number[], drift: number[], resets: number[]}} View
   * @returns {View}
   */
  const emptyView = () => ({ pos: 0, correct: 0, acc: [], alpha: [], lambda: [], ms: [], rate: [], entropy: [], drift: [], resets: [] });
  let view = emptyView();
  if (PERSIST && !FRESH) {
    const saved = await store(key);
    if (saved) {
      client.restoreState(saved.state);
      view = { ...emptyView(), ...saved.view }; // a view saved before the watch plots had none
      run.restored = { pos: view.pos, counters: { ...client.counters } };
    }
  }

  const resetCount = () => client.counters.resets_recovery + client.counters.resets_collapse;
  let lastResets = resetCount();
  const refresh = () => {
    $("sample-count").textContent = String(view.pos);
    $("accuracy").textContent = view.pos ? `${((100 * view.correct) / view.pos).toFixed(1)} %` : "–";
    $("update-count").textContent = String(client.counters.updates);
    const last = (/** @type {number[]} */ values) => (values.length ? values[values.length - 1].toFixed(4) : "–");
    $("alpha-value").textContent = last(view.alpha);
    $("lambda-value").textContent = last(view.lambda);
    const recent = view.ms.slice(-50).sort((a, b) => a - b);
    $("latency").textContent = recent.length ? recent[Math.floor(recent.length / 2)].toFixed(2) : "–";
    const w = client.watch;
    const c = client.counters;
    $("update-rate").textContent = w.updateRate === null ? "–" : w.updateRate.toFixed(3);
    $("entropy-ema").textContent = w.entropyEma === null ? "–" : `${w.entropyEma.toFixed(3)} nats`;
    $("drift").textContent = view.drift.length ? view.drift[view.drift.length - 1].toExponential(2) : "–";
    $("interventions").textContent = `${c.resets_recovery + c.resets_collapse} · ${c.drift_clips}`;
    plot(/** @type {HTMLCanvasElement} */ ($("plot-accuracy")), [{ values: view.acc, color: "#2a6fdb" }], [0, 100]);
    plot(/** @type {HTMLCanvasElement} */ ($("plot-alpha")), [{ values: view.alpha, color: "#e8772e" }], null);
    plot(/** @type {HTMLCanvasElement} */ ($("plot-lambda")), [{ values: view.lambda, color: "#2a6fdb" }], null);
    plot(
      /** @type {HTMLCanvasElement} */ ($("plot-watch")),
      [{ values: view.rate, color: "#2a6fdb" }, { values: view.entropy, color: "#e8772e" }],
      [0, 1],
      view.resets,
    );
    plot(/** @type {HTMLCanvasElement} */ ($("plot-drift")), [{ values: view.drift, color: "#4a9a4a" }], null, view.resets);
  };
  const save = async () => { if (PERSIST) await store(key, { state: await client.saveState(), view }); };
  /** α, λ and the drift where the parameters are on the GPU: downloaded, then plotted. */
  const readBack = async () => {
    const host = (await client.hostState())[PARAMS_NAME];
    for (const [name, values] of [[ALPHA_NAME, view.alpha], [LAMBDA_NAME, view.lambda]]) {
      const slot = client.layout.find((s) => s.name === name);
      if (slot) /** @type {number[]} */ (values).push(host[slot.offset]);
    }
    view.drift.push(await client.drift());
  };

  /** One sample of the stream: predict, adapt, record. */
  const step = async () => {
    const i = view.pos;
    const x = data.subarray(i * size, (i + 1) * size);
    const r = await client.adapt(new Float32Array(x));
    const label = meta.labels[i];
    view.pos += 1;
    view.correct += r.top1 === label ? 1 : 0;
    view.acc.push((100 * view.correct) / view.pos);
    if (r.alpha !== null) view.alpha.push(r.alpha);
    if (r.lambda !== null) view.lambda.push(r.lambda);
    view.ms.push(r.ms);
    const w = client.watch;
    const resets = resetCount();
    if (resets > lastResets) view.resets.push(i);
    lastResets = resets;
    view.rate.push(w.updateRate ?? 0);
    view.entropy.push(w.entropyEma === null ? 0 : w.entropyEma / Math.log(r.logits.length));
    if (!onGpu) view.drift.push(await client.drift());
    else if (view.pos % EVERY === 0) await readBack();
    run.log.push({ index: i, top1: r.top1, label, selected: r.selected, updated: r.updated, reason: r.reason, alpha: r.alpha, lambda: r.lambda, ms: r.ms, logits: Array.from(r.logits) });
    drawSample(x, meta.prep);
    $("sample-caption").textContent = `#${i}: predicted ${r.top1}, label ${label} · ${r.reason}`;
  };

  let running = false;
  const runStream = async () => {
    running = true;
    $("run").textContent = "Pause";
    while (running && view.pos < total) {
      await step();
      if (view.pos % EVERY === 0 || view.pos === total) { refresh(); await save(); await new Promise((r) => setTimeout(r, 0)); }
    }
    running = false;
    $("run").textContent = view.pos < total ? "Run stream" : "Stream done";
    refresh();
    await save();
  };

  const buttons = ["run", "step", "reset", "download", "restore", "image", "camera"];
  buttons.forEach((id) => /** @type {HTMLButtonElement} */ ($(id)).removeAttribute("disabled"));
  $("run").onclick = () => { if (running) running = false; else runStream().catch(fail); };
  $("step").onclick = () => { if (!running && view.pos < total) step().then(() => { refresh(); return save(); }).catch(fail); };
  $("reset").onclick = async () => {
    running = false;
    client.reset();
    lastResets = resetCount();
    view = emptyView();
    refresh();
    await save();
    status("reset to the exported model");
  };
  $("download").onclick = async () => {
    // The SDK's state file: RealmRuntime.restore, the SDK and the Node app read it as it is.
    const blob = new Blob([/** @type {Uint8Array<ArrayBuffer>} */ (await client.saveState())], { type: "application/octet-stream" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "realm-state.npz";
    a.click();
  };
  /** @type {HTMLInputElement} */ ($("restore")).onchange = async (ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    try {
      client.restoreState(new Uint8Array(await file.arrayBuffer()));
      lastResets = resetCount();
      refresh();
      await save();
      status(`restored ${file.name}: ${client.counters.samples} samples, ${client.counters.updates} updates`);
    } catch (err) { status(`could not restore ${file.name}: ${err}`, true); }
  };
  /** A picture from the file picker, or from the camera where the browser offers one. */
  const ownImage = async (/** @type {Event} */ ev) => {
    const file = /** @type {HTMLInputElement} */ (ev.target).files?.[0];
    if (!file) return;
    if (meta.prep.native === undefined) {
      throw new Error(`${file.name}: the page prepares pictures for the digits model only; this model takes (${meta.shape.join(", ")}) samples from a stream folder`);
    }
    const bitmap = await createImageBitmap(file);
    const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
    const ctx = /** @type {OffscreenCanvasRenderingContext2D} */ (canvas.getContext("2d"));
    ctx.drawImage(bitmap, 0, 0);
    const pixels = ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
    const { input } = digitsInput(pixels, bitmap.height, bitmap.width, meta.prep);
    const r = await client.adapt(input);
    drawSample(input, meta.prep);
    $("sample-caption").textContent = `${file.name}: predicted ${r.top1} · ${r.reason}`;
    run.images.push({ name: file.name, top1: r.top1, reason: r.reason, logits: Array.from(r.logits), input: Array.from(input) });
    refresh();
    await save();
  };
  for (const id of ["image", "camera"]) {
    /** @type {HTMLInputElement} */ ($(id)).onchange = (ev) => { ownImage(ev).catch(fail); };
  }

  refresh();
  /** @type {any} */ (globalThis).realmClient = client; // for the test driver and the console
  run.ready = true;
  const restoredNote = run.restored ? ` (restored: ${run.restored.pos} samples seen)` : "";
  status(`ready: ${client.manifest.model?.name ?? "model"}, ${client.manifest.config.method} (${client.manifest.config.preset_name}), ${client.source.length} adapted values${restoredNote}`);
  if (AUTO) {
    await runStream();
    run.summary = {
      counters: { ...client.counters },
      accuracy: view.pos ? (100 * view.correct) / view.pos : null,
      ema: client.ema ? Array.from(client.ema) : null,
      state: Array.from(await client.saveState()), // the SDK's state file, for RealmRuntime.restore
      backend,
    };
    status(`done: ${view.pos} samples, ${client.counters.updates} updates, running accuracy ${((100 * view.correct) / view.pos).toFixed(1)} %`);
  }
  run.done = true;
}

/** @param {unknown} err */
function fail(err) {
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  run.error = message;
  run.done = true;
  status(message, true);
  console.error(err);
}

main().catch(fail);
